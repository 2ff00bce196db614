"""``python -m flashmath.bench sliders``: milliseconds per slider update of every widget in the course.

For each widget of the notebooks (built as the notebook builds it, on the same data), every control is moved
across its whole range and back, without a browser: each move runs the widget's callback and encodes the PNG
bytes that the browser would receive. Beside it, a baseline measured in the same run: for a sample of the same
states, a fresh figure built and exported as Jupyter's inline backend exports one (IPython's ``print_figure``,
tight-cropped PNG), which is what a move cost before figures were built once. Printed: median and max per
update (wall-clock time), the median CPU time per update (``time.process_time``: this process's CPU seconds), the
same two medians over the first visits only (moves to a state the widget had not shown yet: nothing kept from an
earlier visit, what a learner meets first), the speed-up (baseline median / live median), the default Play interval
and its ratio to the median.

Wall-clock time is what a learner waits for, and the main figure; on a shared machine other jobs stretch it, so
there the CPU-time column is the figure to trust (on an idle machine the two agree within a few milliseconds).

Targets on an idle 2-core machine: median <= 50 ms, over all moves and over first visits, and max <= 250 ms per
update; Play interval <= 250 ms and at least
1.5 times the median (so that Play does not run ahead of the picture). Rows outside a target are marked.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from flashmath.bench import plain_text

TARGET_MEDIAN_MS = 50.0
TARGET_MAX_MS = 250.0
PLAY_MAX_MS = 250
PLAY_MIN_RATIO = 1.5
PRECISION_BLOCKS = (1, 2, 4, 8, 16, 32, 46)  # the tile sizes of chapter 9's study (46 = the whole head)
RESCALE_T = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # chapter 7's thresholds (widgets.rescale_explorer's default)


@dataclass
class Case:
    """One widget of the course: where it is, how the notebook builds it, how to build a fresh figure."""

    notebook: str  # the notebook's stem, e.g. "02_online_softmax"
    builder: str  # the name of the function in flashmath.widgets
    build: Callable  # () -> the widget, as the notebook builds it
    fresh: Callable  # (**state) -> a new LivePlot in that state, for the baseline


def course_cases() -> list[Case]:
    """Every widget of notebooks 00-..., on the data its notebook uses (the real heads)."""
    import flashmath as fm
    from flashmath import viz, widgets
    from flashmath.data import load_heads
    from flashmath.opcount import op_count_table
    from flashmath.precision import precision_study
    from flashmath.ring import ring_trace
    from flashmath.traffic import tile_traffic_table
    from flashmath.variants import mask_example
    from flashmath.viz.backward import BackwardSweepPlot
    from flashmath.viz.kernel import KernelMemoryPlot
    from flashmath.viz.recap import CourseMapPlot
    from flashmath.viz.rescale import LazyRescalePlot
    from flashmath.viz.ring import RingPlot
    from flashmath.viz.traffic import OpsPerScorePlot, TileTrafficPlot

    heads = load_heads()
    ring_q = np.random.default_rng(14).standard_normal((32, 8))  # chapter 14's ring: N = 32, D = 8
    layer, head, n = heads.demo_rows[0]
    x = heads.score_row(layer, head, n)
    tokens = heads.tokens
    q, k, v = (a[layer, head].astype(np.float64) for a in (heads.q, heads.k, heads.v))
    y = fm.safe_softmax(q @ k.T / np.sqrt(q.shape[1]))
    sweep = fm.scale_sweep(
        [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], rng=np.random.default_rng(3), n_queries=200, n_keys=64
    )
    tile_traces, tile_scores, tile_standard = widgets.tile_sweep_traces(q, k, v, block_q=8, block_k=8, causal=True)
    window = fm.sliding_window_mask(len(q), len(k), 12)
    window_traces, window_scores, window_standard = widgets.tile_sweep_traces(
        q, k, v, block_q=8, block_k=8, mask=window
    )
    split_traces = {p: fm.split_kv_trace(q[n : n + 1], k, v, p) for p in range(1, 17)}
    softmax_trace = fm.online_softmax_trace(x)
    swap_trace = fm.loop_swap_trace(y, v)
    loop_trace = fm.one_loop_trace(q[n : n + 1], k, v)

    @functools.cache
    def traffic_table():  # chapter 6's traffic model over tile sizes and head dimensions
        return tile_traffic_table()

    @functools.cache
    def ops_table():  # chapter 7's operation counts, on the notebook's random 64 x 32 inputs
        ops_q, ops_k, ops_v = np.random.default_rng(7).standard_normal((3, 64, 32))
        return op_count_table(ops_q, ops_k, ops_v, blocks=(4, 8, 16, 32, 64))

    @functools.cache
    def rescale_traces():  # chapter 7's lazy rescaling of row n, key by key, at the slider's thresholds
        return {t: fm.reference_trace(q, k, v, rescale_threshold=t, block_q=len(q), block_k=1) for t in RESCALE_T}

    @functools.cache
    def study():  # chapter 9's study of every real head, computed once and only when its widget is measured
        return precision_study(heads.q, heads.k, heads.v, blocks=PRECISION_BLOCKS)

    def player(notebook):
        return Case(
            notebook,
            "online_softmax_player",
            lambda: widgets.online_softmax_player(x, labels=tokens),
            lambda step: viz.OnlineSoftmaxPlot(softmax_trace, labels=tokens, step=step),
        )

    return [
        player("00_welcome"),
        Case(
            "01_softmax",
            "overflow_explorer",
            lambda: widgets.overflow_explorer(x, scale=10.0, dtype="float16"),
            lambda scale, dtype: viz.OverflowPlot(x, scale=scale, dtype=dtype),
        ),
        player("02_online_softmax"),
        Case(
            "03_attention",
            "scale_explorer",
            lambda: widgets.scale_explorer(sweep, D=64),
            lambda D: viz.ScalePlot(sweep, D=D),
        ),
        Case(
            "04_loop_swap",
            "loop_swap_player",
            lambda: widgets.loop_swap_player(y, v, row=n, labels=tokens),
            lambda step: viz.LoopSwapPlot(swap_trace, row=n, labels=tokens, step=step),
        ),
        Case(
            "05_one_loop",
            "one_loop_player",
            lambda: widgets.one_loop_player(q, k, v, row=n, labels=tokens),
            lambda step: viz.OneLoopPlot(loop_trace, labels=tokens, step=step),
        ),
        Case(
            "06_tiling",
            "tile_sweep_player",
            lambda: widgets.tile_sweep_player(q, k, v, block_q=8, block_k=8, causal=True),
            lambda step, order: viz.TileSweepPlot(
                tile_traces, scores=tile_scores, standard_bytes=tile_standard, step=step, order=order
            ),
        ),
        Case(
            "06_tiling",
            "tile_traffic_explorer",
            lambda: widgets.tile_traffic_explorer(traffic_table()),
            lambda block, D: TileTrafficPlot(traffic_table(), block=block, D=D),
        ),
        Case(
            "07_flashattention2",
            "ops_explorer",
            lambda: widgets.ops_explorer(ops_table(), block=8),
            lambda block: OpsPerScorePlot(ops_table(), block=block),
        ),
        Case(
            "07_flashattention2",
            "rescale_explorer",
            lambda: widgets.rescale_explorer(q, k, v, row=n, threshold=2),
            lambda threshold: LazyRescalePlot(
                (q @ k.T / np.sqrt(q.shape[1]))[n], rescale_traces(), row=n, threshold=threshold
            ),
        ),
        Case(
            "08_masking",
            "tile_sweep_player",
            lambda: widgets.tile_sweep_player(q, k, v, block_q=8, block_k=8, mask=window),
            lambda step, order: viz.TileSweepPlot(
                window_traces, scores=window_scores, standard_bytes=window_standard, step=step, order=order
            ),
        ),
        Case(
            "09_floating_point",
            "precision_explorer",
            lambda: widgets.precision_explorer(study(), block=3),
            lambda block: viz.PrecisionPlot(study(), block=block),
        ),
        Case(
            "10_beyond",
            "split_kv_player",
            lambda: widgets.split_kv_player(q[n : n + 1], k, v, value=4),
            lambda splits: viz.SplitKVPlot(split_traces, x, splits=splits),
        ),
        Case(
            "11_triton",
            "kernel_memory_explorer",
            lambda: widgets.kernel_memory_explorer(64),
            lambda **state: KernelMemoryPlot(64, **state),
        ),
        Case(
            "12_backward",
            "backward_sweep_player",
            lambda: widgets.backward_sweep_player(64, 64, block_q=16, block_k=16, causal=True),
            lambda step, dq_mode: BackwardSweepPlot(
                64, 64, block_q=16, block_k=16, causal=True, step=step, dq_mode=dq_mode
            ),
        ),
        Case(
            "13_variants",
            "mask_explorer",
            lambda: widgets.mask_explorer(kind="document", param=3, block=8),
            lambda kind, param, block: viz.MaskExplorerPlot(mask_example, kind=kind, param=param, block=block),
        ),
        Case(
            "14_ring_attention",
            "ring_player",
            lambda: widgets.ring_player(ring_q, ring_q, ring_q, 4, causal=True, zigzag=True),
            lambda step: RingPlot(ring_trace(ring_q, ring_q, ring_q, 4, causal=True, zigzag=True), step=step),
        ),
        Case(
            "15_recap",
            "course_map_explorer",
            lambda: widgets.course_map_explorer(chapter=0),
            lambda chapter: CourseMapPlot(chapter=chapter),
        ),
    ]


def control_values(control) -> list:
    """Every value of a control, in order: a slider's range, a selection's options."""
    if hasattr(control, "options"):
        options = list(control.options)
        return [o[1] if isinstance(o, tuple) else o for o in options]
    if type(control).__name__ == "FloatLogSlider":
        exponents = np.arange(control.min, control.max + control.step / 2, control.step)
        return [float(control.base**e) for e in exponents]
    return list(range(control.min, control.max + 1, control.step))


def sweep_moves(values, start, max_moves: int | None = None) -> list:
    """The moves of one sweep: from ``start`` to the end of the range, back to its beginning, then to ``start``.

    With ``max_moves``, the sweep's first ``max_moves`` moves, then one move back to ``start`` where the cut left the
    control elsewhere: the next control's sweep starts from the widget's starting state, as after a whole sweep (a
    control left elsewhere can make the next one change nothing: chapter 13's ``param`` on a causal mask).
    """
    i = values.index(start) if start in values else 0
    moves = values[i + 1 :] + values[::-1][1:] + values[1 : i + 1]
    if max_moves is not None and len(moves) > max_moves:
        moves = moves[:max_moves]
        if moves and moves[-1] != start:
            moves.append(start)
    return moves


def inline_png(fig) -> bytes:
    """A figure exported as Jupyter's inline backend exports it: tight-cropped PNG at the figure's dpi."""
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight")


@dataclass
class Result:
    case: Case
    live_ms: list
    baseline_ms: list
    interval: int | None
    png_bytes: int
    cpu_ms: list = field(default_factory=list)  # CPU time (this process) per update, beside live_ms's wall time
    first: list = field(default_factory=list)  # per update: True where it showed a state not shown before

    @property
    def median(self) -> float:
        return statistics.median(self.live_ms)

    @property
    def slowest(self) -> float:
        return max(self.live_ms)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_ms) if self.cpu_ms else float("nan")

    @property
    def first_median(self) -> float:
        """Wall-clock median over the first visits (NaN if none)."""
        firsts = [ms for ms, first in zip(self.live_ms, self.first, strict=False) if first]
        return statistics.median(firsts) if firsts else float("nan")

    @property
    def first_cpu_median(self) -> float:
        """CPU-time median over the first visits (NaN if none)."""
        firsts = [ms for ms, first in zip(self.cpu_ms, self.first, strict=False) if first]
        return statistics.median(firsts) if firsts else float("nan")

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_ms)

    def problems(self) -> list[str]:
        out = []
        if self.median > TARGET_MEDIAN_MS:
            out.append(f"median > {TARGET_MEDIAN_MS:.0f} ms")
        if self.first_median > TARGET_MEDIAN_MS:  # False for NaN (no first visit)
            out.append(f"first-visit median > {TARGET_MEDIAN_MS:.0f} ms")
        if self.slowest > TARGET_MAX_MS:
            out.append(f"max > {TARGET_MAX_MS:.0f} ms")
        if self.interval is not None and self.interval > PLAY_MAX_MS:
            out.append(f"Play interval > {PLAY_MAX_MS} ms")
        if self.interval is not None and self.interval < PLAY_MIN_RATIO * self.median:
            out.append(f"Play interval < {PLAY_MIN_RATIO} x median")
        return out


def measure(case: Case, *, baseline_samples: int = 8, max_moves: int | None = None) -> Result:
    """Move every control of ``case``'s widget across its range; time a sample of states the old way too."""
    import ipywidgets

    sink = io.StringIO()  # outside a kernel, interactive's clear_output writes terminal codes to stdout
    with contextlib.redirect_stdout(sink):
        ui = case.build()
    live, cpu, states, first = [], [], [], []
    shown = {_state_key(getattr(ui.result, "state", {}))}  # the state shown on construction
    for control in ui.kwargs_widgets:
        values = control_values(control)
        moves = sweep_moves(values, control.value, max_moves)
        for value in moves:
            before = ui.image.value
            with contextlib.redirect_stdout(sink):
                t0, c0 = time.perf_counter(), time.process_time()
                control.value = value
                elapsed, cpu_elapsed = time.perf_counter() - t0, time.process_time() - c0
            if ui.image.value == before:
                # no new picture: the callback raised (interactive shows it in its output) or drew nothing new
                outputs = getattr(ui.out, "outputs", ())
                raise RuntimeError(
                    f"{case.notebook} {case.builder}: moving {control.description!r} to {value!r} "
                    f"did not change the picture; output: {outputs}"
                )
            live.append(1000 * elapsed)
            cpu.append(1000 * cpu_elapsed)
            states.append(dict(ui.result.state))
            key = _state_key(ui.result.state)
            first.append(key not in shown)
            shown.add(key)
    plays = [w for w in _walk(ui) if isinstance(w, ipywidgets.Play)]
    interval = plays[0].interval if plays else None

    picks = np.unique(np.linspace(0, len(states) - 1, min(baseline_samples, len(states))).round().astype(int))
    baseline = []
    for i in picks:
        t0 = time.perf_counter()
        plot = case.fresh(**states[i])
        inline_png(plot.fig)
        baseline.append(1000 * (time.perf_counter() - t0))
    return Result(case, live, baseline, interval, len(ui.image.value), cpu, first)


def _state_key(state: dict) -> tuple:
    """A widget's state (its plot's update keywords) as a hashable key."""
    return tuple(sorted((name, repr(value)) for name, value in state.items()))


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def report(results: list[Result], out=None) -> bool:
    """Print the table (to ``out``, default stdout); True when every widget is within its targets."""
    out = sys.stdout if out is None else out
    head = (
        f"{'notebook':<18} {'widget':<22} {'moves':>5} {'median':>7} {'max':>7} {'cpu med':>7} | "
        f"{'first':>5} {'median':>6} {'cpu med':>7} | {'baseline':>8} {'max':>7} | {'speed-up':>8} | "
        f"{'Play':>6} {'Play/med':>8}  verdict"
    )
    print(
        "Slider updates in ms (callback + PNG the browser receives): wall-clock median and max, CPU-time median "
        "(trust it on a busy machine); first: the moves to a state not shown before, their wall and CPU medians; "
        "baseline: a fresh figure + Jupyter's inline tight PNG, same run",
        file=out,
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    ok = True
    for r in results:
        problems = r.problems()
        ok &= not problems
        play = f"{r.interval:>4}ms" if r.interval is not None else "    -"
        ratio = f"{r.interval / r.median:8.1f}" if r.interval is not None else "       -"
        print(
            f"{r.case.notebook:<18} {r.case.builder:<22} {len(r.live_ms):5d} {r.median:7.1f} {r.slowest:7.1f} "
            f"{r.cpu_median:7.1f} | {sum(r.first):5d} {r.first_median:6.1f} {r.first_cpu_median:7.1f} | "
            f"{r.baseline_median:8.1f} {max(r.baseline_ms):7.1f} | "
            f"{r.baseline_median / r.median:7.1f}x | "
            f"{play:>6} {ratio}  {'ok' if not problems else '; '.join(problems)}",
            file=out,
        )
    medians = [r.median for r in results]
    cpu_medians = [r.cpu_median for r in results]
    firsts = [r.first_median for r in results if r.first_median == r.first_median] or [float("nan")]
    first_cpus = [r.first_cpu_median for r in results if r.first_cpu_median == r.first_cpu_median] or [float("nan")]
    print(
        f"targets: median <= {TARGET_MEDIAN_MS:.0f} ms (all moves and first visits), max <= {TARGET_MAX_MS:.0f} ms, "
        f"Play <= {PLAY_MAX_MS} ms and >= {PLAY_MIN_RATIO} x median. Slowest median {max(medians):.1f} ms (CPU "
        f"{max(cpu_medians):.1f} ms), slowest first-visit median {max(firsts):.1f} ms "
        f"(CPU {max(first_cpus):.1f} ms); "
        f"{'all within target' if ok else 'NOT all within target'}",
        file=out,
    )
    return ok


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flashmath.bench sliders",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", default="", help="only the widgets whose notebook stem contains this text")
    parser.add_argument("--baseline-samples", type=int, default=8, help="states timed the old way per widget")
    parser.add_argument(
        "--max-moves",
        type=_positive,
        default=None,
        help="only the first N moves of each control's sweep, then one move back to its start value",
    )
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")  # no window; the inline backend's export is what the baseline times
    cases = [case for case in course_cases() if args.only in case.notebook]
    if not cases:
        print(f"no widget's notebook matches {args.only!r}", file=sys.stderr)
        return 2
    # each widget takes seconds (chapter 9's study tens of seconds): say what is being measured as it goes
    print(f"Moving every control of {len(cases)} widgets across its range (the table follows) ...", flush=True)
    results = []
    for number, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        result = measure(case, baseline_samples=args.baseline_samples, max_moves=args.max_moves)
        results.append(result)
        print(
            f"  [{number}/{len(cases)}] {case.notebook} {case.builder}: {len(result.live_ms)} moves, median "
            f"{result.median:.1f} ms, CPU {result.cpu_median:.1f} ms ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    report(results)
    return 0
