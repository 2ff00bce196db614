"""Widget builders: ipywidgets controls wired to the live plots of :mod:`flashmath.viz`.

Every widget is :func:`live_widget`: one :class:`flashmath.viz.LivePlot`, built once, and an ``ipywidgets.Image``
that receives the plot's PNG bytes after each move. The image is replaced only when the new picture is ready, so
the page never shows a blank output between two steps (an ``Output`` that is cleared and redrawn can). Controls
are wired with ``ipywidgets.interactive``, which also shows a callback's traceback in its output area; a step
slider gets a Play button linked to it in the browser (``jslink``).

A builder checks its arguments and computes its trace before building anything, so a bad argument raises here,
with a message, instead of printing a traceback inside the widget at every move. The returned ``interactive`` has
``kwargs_widgets`` (the controls), ``result`` (the plot, once drawn) and ``image`` (the Image widget).

Default Play intervals: ``python -m flashmath.bench sliders`` measures every widget's update time; each default is
at least 1.5 times the median measured on a 2-core machine (so Play does not run ahead of the picture) and at most
250 ms (4 frames a second or more).

Works with ipywidgets 7.7 (what Colab ships) and 8.x.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from flashmath import viz
from flashmath._checks import integer, size
from flashmath.attention import loop_swap_trace, one_loop_trace, scores_of
from flashmath.backward import DQ_MODES
from flashmath.counting import flash_trace
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.inputs import prepare_attention_inputs
from flashmath.softmax import as_float_array, online_softmax_trace
from flashmath.splitkv import split_kv_trace
from flashmath.traffic import attention_traffic, tile_traffic_table
from flashmath.viz.axes import check_dims, check_labels, index
from flashmath.viz.softmax import OVERFLOW_DTYPES, dtype_name

__all__ = [
    "live_widget",
    "step_slider",
    "online_softmax_player",
    "overflow_explorer",
    "scale_explorer",
    "loop_swap_player",
    "one_loop_player",
    "tile_sweep_player",
    "split_kv_player",
    "precision_explorer",
    "kernel_memory_explorer",
    "course_map_explorer",
    "tile_traffic_explorer",
    "ops_explorer",
    "backward_sweep_player",
    "mask_explorer",
    "ring_player",
    "rescale_explorer",
]

PLAY_INTERVAL = 200  # milliseconds between Play frames (see the module docstring)


#: The choices that widgets show translated (``(label, value)`` options: the value stays the English name the
#: package takes): chapter 12's ways of accumulating dQ, chapter 13's mask kinds. Marked here for the catalog.
CHOICE_LABELS = (
    N_("separate"),
    N_("atomic"),
    N_("causal"),
    N_("window"),
    N_("sink tokens + window"),
    N_("document"),
    N_("prefix-LM"),
    N_("ALiBi"),
    N_("softcap"),
    N_("learnable sink"),
    N_("custom"),
)


def step_slider(
    n_steps: int,
    *,
    value: int = 0,
    description: str | None = None,
    low: int = 0,
    name: str = "n_steps",
    what: str = "the step shown first",
) -> widgets.IntSlider:
    """An integer slider over ``low..n_steps`` for :func:`live_widget`.

    Raises:
        ValueError: ``n_steps < max(low, 1)`` or ``value`` outside ``low..n_steps``. TypeError: not integers.
    """
    n_steps = size(n_steps, name, max(low, 1))
    value = integer(value, f"value ({what})")
    if not low <= value <= n_steps:
        raise ValueError(f"value ({what}) must be in {low}..{n_steps}, got {value}")
    if description is None:
        description = _("step")  # translated when the slider is made, not when the module is imported
    return widgets.IntSlider(value=value, min=low, max=n_steps, step=1, description=description, continuous_update=True)


def live_widget(plot, *, interval: int | None = None, **controls):
    """Wire ``controls`` to ``plot.update(**values)``; show ``plot.png()`` in an ``ipywidgets.Image``.

    Args:
        plot: a :class:`flashmath.viz.LivePlot`, already showing the controls' initial values.
        interval: milliseconds between frames of a Play button linked to the first control (an ``IntSlider`` by
            value, a ``SelectionSlider`` by index); None for no Play button.
        controls: ``name=widget``, one per keyword of ``plot.update``.

    Returns:
        ``ipywidgets.interactive``: ``[Play, first control]`` (or the controls), the Image, the output area that
        shows a callback's error. ``.image`` is the Image, ``.result`` the plot after a move.

    Raises:
        TypeError: ``plot`` not a LivePlot. ValueError / TypeError: ``interval`` not a positive integer.
    """
    if not isinstance(plot, viz.LivePlot):
        raise TypeError(f"plot must be a flashmath.viz.LivePlot, got {type(plot).__name__}")
    # Shown at the plot's CSS size (a flex box would stretch it to the page's width), rendered with PIXEL_RATIO
    # device pixels per CSS pixel: sharp on high-density screens; on others the browser scales it down.
    plot.set_pixel_ratio(viz.PIXEL_RATIO)
    image = widgets.Image(value=plot.png(), format="png")
    image.layout.width = f"{plot.css_size[0]}px"
    image.layout.max_width = "100%"
    image.layout.height = "auto"

    def callback(**values):
        if values != plot.state:  # ipywidgets 8 calls once on construction: nothing moved, nothing to draw
            image.value = plot.update(**values).png()  # the old picture stays until this one is ready
        return plot

    ui = widgets.interactive(callback, **controls)
    first, rest = ui.children[0], tuple(ui.children[1:-1])
    if interval is not None:
        interval = size(interval, "interval (milliseconds between Play frames)", 1)
        by_index = isinstance(first, widgets.SelectionSlider)
        frames = len(first.options) - 1 if by_index else first.max - first.min
        play = widgets.Play(
            value=first.index if by_index else first.value,
            min=0 if by_index else first.min,
            max=frames if by_index else first.max,
            step=1,
            interval=interval,
            description=_("Play"),
        )
        widgets.jslink((play, "value"), (first, "index" if by_index else "value"))
        first = widgets.HBox([play, first])
    ui.children = (first,) + rest + (image, ui.out)
    ui.image = image
    return ui


def online_softmax_player(x, *, labels=None, value: int = 0, interval: int = PLAY_INTERVAL):
    """Step through the online normalizer of a 1-D vector: ``x_i``, ``g_i``, the rescale factor, ``s_i``, ``s_N``.

    Args:
        x: 1-D array ``(N,)`` (any real row: random numbers, a real attention score row...).
        labels: optional tick labels (e.g. tokens), length ``N``.
        value: the step shown first (0 = nothing read yet).
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` (slider ``step i`` over ``0..N`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.online_softmax_trace` for a bad ``x``; ``labels`` of the
        wrong length; ``value`` or ``interval`` as :func:`step_slider` and :func:`live_widget`.
    """
    trace = online_softmax_trace(x)  # computed once; a move only redraws
    slider = step_slider(len(trace), value=value, description=_("step i"))
    plot = viz.OnlineSoftmaxPlot(trace, labels=labels, step=slider.value)
    return live_widget(plot, interval=interval, step=slider)


def overflow_explorer(x, *, scale: float = 1.0, dtype: str = "float16"):
    """Scale a vector and choose a dtype: where does the direct softmax overflow, and the safe one not?

    Args:
        x: 1-D array ``(L,)``.
        scale: initial scale, 1 to 1000 (a log slider).
        dtype: initial dtype, ``"float16"``, ``"float32"`` or ``"float64"`` (or the numpy dtype).

    Returns:
        :func:`live_widget` with controls ``scale`` and ``dtype``.

    Raises:
        ValueError: ``dtype`` not one of the three, ``scale`` outside 1..1000, ``x`` not a non-empty 1-D vector.
        TypeError: ``x`` not real numbers, ``scale`` not a number.
    """
    x = as_float_array(x).astype(np.float64)  # a private copy
    dtype = dtype_name(dtype)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a number between 1 and 1000, got {type(scale).__name__} {scale!r}")
    if not 1 <= scale <= 1000:
        raise ValueError(f"scale must be between 1 and 1000 (the slider's range), got {scale}")
    scale_slider = widgets.FloatLogSlider(
        value=scale, base=10, min=0, max=3, step=0.05, description=_("scale"), continuous_update=False
    )
    dtype_buttons = widgets.ToggleButtons(options=list(OVERFLOW_DTYPES), value=dtype, description="dtype")
    plot = viz.OverflowPlot(x, scale=scale_slider.value, dtype=dtype)
    return live_widget(plot, scale=scale_slider, dtype=dtype_buttons)


def scale_explorer(sweep, *, D: int | None = None, interval: int = PLAY_INTERVAL):
    """Slide over the head dimension ``D``: spread of the scores and sharpness of softmax, with and without scale.

    Args:
        sweep: from :func:`flashmath.scale_sweep` (computed once, by the caller, with its seeded rng).
        D: the head dimension shown first, one of ``sweep.dims`` (default: the middle one).
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` with a ``D`` selection slider (over ``sweep.dims``) and a linked Play button.

    Raises:
        ValueError: ``D`` not in ``sweep.dims``; ``interval < 1``. TypeError: ``D`` or ``interval`` not an integer,
        ``sweep`` not a :class:`flashmath.ScaleSweep`.
    """
    if not hasattr(sweep, "dims"):
        raise TypeError(f"sweep must come from flashmath.scale_sweep, got {type(sweep).__name__}")
    dims = [int(d) for d in sweep.dims]
    if D is None:
        D = dims[len(dims) // 2]
    D = integer(D, "D")
    if D not in dims:
        raise ValueError(f"D must be one of sweep.dims = {dims}, got {D}")
    slider = widgets.SelectionSlider(options=dims, value=D, description="D", continuous_update=True)
    plot = viz.ScalePlot(sweep, D=D)
    return live_widget(plot, interval=interval, D=slider)


def loop_swap_player(y, v, *, row: int = 0, labels=None, value: int = 0, interval: int = PLAY_INTERVAL):
    """Step through the keys of ``A = Y V`` in the order ``for n: for m: for d``: a row of partial sums grows.

    Args:
        y: ``(N, M)`` probabilities (small: the trace runs scalar loops, ``N * M * Dv`` steps).
        v: ``(M, Dv)`` values.
        row: the query row ``n`` to show (0-based), an integer in ``0..N-1``.
        labels: optional key labels (tokens), length ``M``.
        value: the number of keys added at first (0 = none).
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` (slider ``keys m`` over ``0..M`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.loop_swap_trace`; ``row`` not an integer or out of range;
        ``labels`` of the wrong length; ``value`` or ``interval`` as :func:`step_slider` and :func:`live_widget`.
    """
    try:
        y_shape = np.shape(y)
    except ValueError:  # ragged nested lists: loop_swap_trace says what is wrong
        y_shape = ()
    if len(y_shape) == 2:  # checked before the trace, which runs N * M * Dv scalar steps
        index(row, "row", y_shape[0], f" (y has N = {y_shape[0]} rows)")
        check_labels(labels, y_shape[1], "key")
        step_slider(y_shape[1], value=value)
    trace = loop_swap_trace(y, v)  # computed once; a move only redraws
    slider = step_slider(len(trace), value=value, description=_("keys m"))
    plot = viz.LoopSwapPlot(trace, row=row, labels=labels, step=slider.value)
    return live_widget(plot, interval=interval, step=slider)


def one_loop_player(q, k, v, *, row: int = 0, dims=None, labels=None, value: int = 0, interval: int = PLAY_INTERVAL):
    """Step through the merged loop of chapter 5 for one query row: ``x_m, g_m``, the correction, ``s_m``, ``A'_m``.

    Args:
        q: ``(N, D)``, k: ``(M, D)``, v: ``(M, Dv)`` (2-D; the default scale ``1 / sqrt(D)``).
        row: the query row ``n`` to follow (0-based), an integer in ``0..N-1``.
        dims: the output dimensions of ``A'_m`` to draw, 1 to 5 of ``0..Dv-1`` (default: the first ``min(3, Dv)``).
        labels: optional key labels (tokens), length ``M``.
        value: the number of keys seen at first (0 = none).
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` (slider ``keys m`` over ``0..M`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.one_loop_trace`; inputs that are not 2-D; ``row`` not an
        integer or out of range; ``dims`` not integers in ``0..Dv-1``; ``labels`` of the wrong length; ``value``
        or ``interval`` as :func:`step_slider` and :func:`live_widget`.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"q, k, v must be 2-D (N, D), (M, D), (M, Dv); got {q.shape}, {k.shape}, {v.shape}")
    row = index(row, "row", q.shape[0], f" (q has N = {q.shape[0]} rows)")
    dims = tuple(check_dims(dims, v.shape[1]))
    check_labels(labels, k.shape[0], "key")
    trace = one_loop_trace(q[row : row + 1], k, v)  # computed once, for the one row shown
    slider = step_slider(len(trace), value=value, description=_("keys m"))
    plot = viz.OneLoopPlot(trace, row=0, dims=dims, labels=labels, step=slider.value)
    return live_widget(plot, interval=interval, step=slider)


def tile_sweep_traces(q, k, v, *, block_q: int, block_k: int, causal=False, mask=None):
    """What :func:`tile_sweep_player` draws: ``(traces, scores, standard_bytes)`` for 2-D inputs.

    ``traces`` maps ``"fa1"`` and ``"fa2"`` to :func:`flashmath.flash_trace`; ``scores`` is ``(N, M)``, the scaled
    scores with ``-inf`` where masked; ``standard_bytes`` what standard attention moves for the same sizes.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"q, k, v must be 2-D (N, D), (M, D), (M, Dv); got {q.shape}, {k.shape}, {v.shape}")
    traces = {
        order: flash_trace(q, k, v, block_q=block_q, block_k=block_k, order=order, causal=causal, mask=mask)
        for order in ("fa1", "fa2")
    }
    inp = prepare_attention_inputs(q, k, v, causal=causal, mask=mask)
    scores = scores_of(inp)  # (N, M), for the background
    standard = attention_traffic(
        "standard", inp.N, inp.M, inp.D, Dv=inp.Dv, bytes_per_element=traces["fa2"].traffic.bytes_per_element
    ).bytes
    return traces, scores, standard


def tile_sweep_player(
    q,
    k,
    v,
    *,
    block_q: int = 8,
    block_k: int = 8,
    causal=False,
    mask=None,
    order: str = "fa2",
    value: int = 0,
    interval: int = PLAY_INTERVAL,
):
    """Step through the tiles of FlashAttention in either loop order: the grid, the row states, the bytes moved.

    Args:
        q: ``(N, D)``, k: ``(M, D)``, v: ``(M, Dv)`` (2-D: one head; small, since every step's state is kept).
        block_q, block_k: the tile sizes ``B_r``, ``B_c``.
        causal, mask: as :func:`flashmath.flash_attention` (fully masked tiles are skipped, and drawn grey).
        order: the loop order shown first, ``"fa1"`` or ``"fa2"`` (a toggle switches).
        value: the number of tile steps done at first.
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` with a ``tile step t`` slider (and Play) and an ``order`` toggle.

    Raises:
        ValueError / TypeError: as :func:`flashmath.flash_trace`; inputs that are not 2-D; an unknown ``order``;
        ``value`` or ``interval`` as :func:`step_slider` and :func:`live_widget`.
    """
    if order not in ("fa1", "fa2"):
        raise ValueError(f"order must be 'fa1' or 'fa2', got {order!r}")
    traces, scores, standard = tile_sweep_traces(q, k, v, block_q=block_q, block_k=block_k, causal=causal, mask=mask)
    slider = step_slider(len(traces[order]), value=value, description=_("tile step t"))
    toggle = widgets.ToggleButtons(options=["fa2", "fa1"], value=order, description=_("order"))
    plot = viz.TileSweepPlot(traces, scores=scores, standard_bytes=standard, step=slider.value, order=order)
    return live_widget(plot, interval=interval, step=slider, order=toggle)


def split_kv_player(q, k, v, *, max_splits: int = 16, value: int = 1, interval: int = PLAY_INTERVAL):
    """Split one query's keys into 1..``max_splits`` ranges: each range's output and logsumexp, and the merge tree.

    Args:
        q: ``(1, D)`` one query (decoding), k: ``(M, D)``, v: ``(M, Dv)``.
        max_splits: the largest number of ranges on the slider (``>= 1``).
        value: the number of ranges shown first.
        interval: milliseconds between Play frames.

    Returns:
        :func:`live_widget` with a ``splits`` slider over ``1..max_splits`` and a Play button.

    Raises:
        ValueError / TypeError: as :func:`flashmath.split_kv_trace`; ``q`` not one query; ``max_splits`` or
        ``value`` out of range or not integers.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or q.shape[0] != 1 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(
            f"q must be one query (1, D) and k, v 2-D (M, D), (M, Dv); got {q.shape}, {k.shape}, {v.shape}"
        )
    slider = step_slider(
        max_splits,
        value=value,
        description=_("splits"),
        low=1,
        name="max_splits",
        what="the number of ranges shown first",
    )
    traces = {p: split_kv_trace(q, k, v, p) for p in range(1, slider.max + 1)}
    inp = prepare_attention_inputs(q, k, v)
    scores = scores_of(inp)[0]  # (M,)
    plot = viz.SplitKVPlot(traces, scores, splits=value)
    return live_widget(plot, interval=interval, splits=slider)


def precision_explorer(study, *, block: int = 0):
    """Slide over the tile sizes of a precision study: the errors of every variant in every dtype (chapter 9).

    Args:
        study: from :func:`flashmath.precision.precision_study` (computed once, by the caller).
        block: the index into ``study.blocks`` of the tile size shown first.

    Returns:
        :func:`live_widget` with a ``tile size`` selection slider over ``study.blocks``.

    Raises:
        TypeError: ``study`` not a PrecisionStudy; ``block`` not an integer. ValueError: ``block`` out of range.
    """
    if not hasattr(study, "blocks"):
        raise TypeError(f"study must come from flashmath.precision.precision_study, got {type(study).__name__}")
    block = index(block, "block", len(study.blocks), f" (the study has {len(study.blocks)} tile sizes)")
    labels = [f"{b_r}" if b_r == b_c else f"{b_r}x{b_c}" for b_r, b_c in study.blocks]
    slider = widgets.SelectionSlider(
        options=list(zip(labels, range(len(labels)), strict=False)),
        value=block,
        description=_("tile size"),
        continuous_update=True,
    )
    plot = viz.PrecisionPlot(study, block=block)
    return live_widget(plot, block=slider)


def kernel_memory_explorer(
    D: int = 64, *, dtype="float16", block_q: int = 64, block_k: int = 64, num_stages: int = 2, num_warps: int = 4
):
    """Chapter 11: one program's on-chip bytes (:class:`flashmath.viz.kernel.KernelMemoryPlot`) with a slider for
    each of ``BLOCK_M``, ``BLOCK_N``, ``num_stages`` and ``num_warps``.

    Args:
        D: head dimension. dtype: the inputs' dtype in memory. block_q, block_k, num_stages, num_warps: the state
            shown first (from :data:`flashmath.viz.kernel.BLOCK_SIZES`, ``STAGES``, ``WARPS``).

    Raises:
        ValueError: a first state outside those lists.
    """
    from flashmath.viz.kernel import BLOCK_SIZES, STAGES, WARPS, KernelMemoryPlot

    plot = KernelMemoryPlot(
        D, dtype=dtype, block_q=block_q, block_k=block_k, num_stages=num_stages, num_warps=num_warps
    )  # checks the state before any control exists
    controls = {
        name: widgets.SelectionSlider(options=options, value=value, description=label)
        for name, label, options, value in (
            ("block_q", "BLOCK_M", BLOCK_SIZES, block_q),
            ("block_k", "BLOCK_N", BLOCK_SIZES, block_k),
            ("num_stages", "num_stages", STAGES, num_stages),
            ("num_warps", "num_warps", WARPS, num_warps),
        )
    }
    return live_widget(plot, **controls)


def course_map_explorer(*, chapter: int = 0):
    """Chapter 15: the course on one page (:class:`flashmath.viz.recap.CourseMapPlot`) with a slider over the
    chapters 0-15 (no Play button: each chapter's sentence is there to be read).

    Raises:
        ValueError: ``chapter`` outside 0-15. TypeError: not an integer.
    """
    from flashmath.viz.recap import CHAPTERS, CourseMapPlot

    plot = CourseMapPlot(chapter=chapter)
    return live_widget(plot, chapter=step_slider(len(CHAPTERS) - 1, value=chapter, description=_("chapter")))


def tile_traffic_explorer(table=None, *, block: int = 64, D: int = 64):
    """Chapter 6: slide the tile size and the head dimension; see fa2's traffic ``~ 2 N M D / B_r`` cross standard
    attention's ``~ 4 N M`` at ``B_r = D / 2`` (:class:`flashmath.viz.traffic.TileTrafficPlot`).

    Args:
        table: from :func:`flashmath.traffic.tile_traffic_table` (None: computed with its defaults). block, D: the
            state shown first.

    Returns:
        :func:`live_widget` with a ``B_r = B_c`` selection slider and a ``D`` selection slider.

    Raises:
        ValueError: ``block`` or ``D`` not in the table.
    """
    from flashmath.viz.traffic import TileTrafficPlot

    table = tile_traffic_table() if table is None else table  # the model's numbers: flashmath.traffic
    plot = TileTrafficPlot(table, block=block, D=D)  # checks the state before any control exists
    return live_widget(
        plot,
        block=widgets.SelectionSlider(options=list(table["blocks"]), value=block, description="B_r = B_c"),
        D=widgets.SelectionSlider(options=list(table["dims"]), value=D, description="D"),
    )


def ops_explorer(table, *, block: int = 8, interval: int = PLAY_INTERVAL):
    """Chapter 7: slide the tile size; see fa1's and fa2's operations per score besides the matrix products
    (:class:`flashmath.viz.traffic.OpsPerScorePlot`).

    Args:
        table: from :func:`flashmath.opcount.op_count_table`. block: the tile size shown first. interval: Play's
            milliseconds.

    Returns:
        :func:`live_widget` with a ``B_r = B_c`` selection slider and a Play button.

    Raises:
        ValueError: ``block`` not in the table.
    """
    from flashmath.viz.traffic import OpsPerScorePlot

    plot = OpsPerScorePlot(table, block=block)
    return live_widget(
        plot,
        interval=interval,
        block=widgets.SelectionSlider(options=list(table["blocks"]), value=block, description="B_r = B_c"),
    )


def backward_sweep_player(
    N: int,
    M: int,
    *,
    block_q: int = 16,
    block_k: int = 16,
    causal: bool = False,
    dq_mode: str = "separate",
    value: int = 0,
    interval: int = PLAY_INTERVAL,
):
    """Chapter 12: the backward kernels' tile sweep (:class:`flashmath.viz.backward.BackwardSweepPlot`) with Play
    and a step slider, and a choice between the two ways of accumulating ``dQ``.

    Raises:
        ValueError: as :func:`flashmath.triton_backward.backward_schedule`, or ``value`` outside the steps.
    """
    from flashmath.viz.backward import BackwardSweepPlot

    plot = BackwardSweepPlot(N, M, block_q=block_q, block_k=block_k, causal=causal, dq_mode=dq_mode, step=value)
    mode = widgets.ToggleButtons(options=[(_(m), m) for m in DQ_MODES], value=dq_mode, description="dQ")
    return live_widget(plot, interval=interval, step=step_slider(len(plot) - 1, value=value), dq_mode=mode)


def mask_explorer(*, kind: str = "causal", param: int = 8, block: int = 8, N: int = 64, mask_mod=None):
    """Choose a mask (causal, window, sink tokens + window, document, prefix-LM, ALiBi, softcap, learnable sink,
    custom) and its parameter: the scores it keeps, each tile classified empty / partial / full, and the work saved
    (chapter 13). A learnable sink is no mask: it keeps the causal tiles and changes each row's probabilities.

    Args:
        kind: one of :data:`flashmath.variants.MASK_KINDS`. param: the kind's parameter (1..N; see
            :func:`flashmath.variants.mask_example`). block: the square tile size, one of 4, 8, 16, 32 (at most N).
        N: the grid. mask_mod: for ``"custom"``, a function ``param -> mask_mod`` (FlexAttention's signature).

    Returns:
        :func:`live_widget` with a ``mask or variant`` dropdown (ALiBi, softcap and a learnable sink are no masks),
        a ``param`` slider and a ``tile size`` selection slider.

    Raises:
        ValueError / TypeError: as :func:`flashmath.variants.mask_example`; a block that is not offered.
    """
    from flashmath.variants import MASK_KINDS, mask_example

    N = integer(N, "N")
    blocks = [b for b in (4, 8, 16, 32) if b <= N]
    if block not in blocks:
        raise ValueError(f"block must be one of {blocks} for N = {N}, got {block!r}")
    mask_example(kind, param, block, N=N, mask_mod=mask_mod)  # checks the arguments before building anything
    cache: dict = {}

    def example(kind, param, block):
        key = (kind, param, block)
        if key not in cache:
            cache[key] = mask_example(kind, param, block, N=N, mask_mod=mask_mod)
        return cache[key]

    plot = viz.MaskExplorerPlot(example, kind=kind, param=param, block=block, N=N)
    kinds = widgets.Dropdown(
        options=[(_(k), k) for k in MASK_KINDS],
        value=kind,
        description=_("mask or variant"),
        style={"description_width": "initial"},
    )
    slider = widgets.IntSlider(value=param, min=1, max=N, step=1, description=_("param"), continuous_update=True)
    tile = widgets.SelectionSlider(options=blocks, value=block, description=_("tile size"), continuous_update=True)
    return live_widget(plot, kind=kinds, param=slider, block=tile)


def ring_player(
    q,
    k,
    v,
    num_devices: int,
    *,
    causal: bool = False,
    zigzag: bool = False,
    value: int = 0,
    interval: int = 250,
):
    """Chapter 14: a ring of ``num_devices`` simulated devices, step by step (:class:`flashmath.viz.ring.RingPlot`).

    Args:
        q ``(..., N, D)``, k ``(..., M, D)``, v ``(..., M, Dv)``, num_devices, causal, zigzag: as
            :func:`flashmath.ring.ring_trace` (computed once, here; at least 2 devices).
        value: the step shown first. interval: milliseconds between Play frames (a ring has few steps: each frame
            stays as long as the module's rule for defaults allows, 250 ms).

    Returns:
        :func:`live_widget` with a ``step`` slider over ``0 .. P - 1`` and a Play button.

    Raises:
        ValueError / TypeError: as :func:`flashmath.ring.ring_trace`; fewer than 2 devices; ``value`` out of range.
    """
    from flashmath.ring import ring_trace
    from flashmath.viz.ring import RingPlot

    P = size(num_devices, "num_devices", 2)
    slider = step_slider(P - 1, value=value, name="num_devices - 1", what="the step shown first")
    trace = ring_trace(q, k, v, P, causal=causal, zigzag=zigzag)
    return live_widget(RingPlot(trace, step=value), interval=interval, step=slider)


def rescale_explorer(q, k, v, *, row: int, thresholds=(0, 0.5, 1, 2, 4, 8), threshold: float = 2, block_k: int = 1):
    """Chapter 7: slide FlashAttention-4's rescale threshold ``t`` (log2 units); see one row's kept reference
    against its true running max, key tile by key tile, and where ``acc`` and ``s`` are rescaled
    (:class:`flashmath.viz.rescale.LazyRescalePlot`, traces from :func:`flashmath.flash.reference_trace`).

    Args:
        q, k, v: ``(N, D)``, ``(M, D)``, ``(M, Dv)``: one head. row: the query row shown (0-based).
        thresholds: the slider's positions (log2 units, each ``>= 0``). threshold: the one shown first.
        block_k: the key tile size ``B_c`` (1: a step per key).

    Returns:
        :func:`live_widget` with a threshold selection slider.

    Raises:
        ValueError: ``q`` not 2-D, ``row`` outside ``0..N-1``, ``threshold`` not in ``thresholds``, or as
        :func:`flashmath.flash.reference_trace`.
    """
    from flashmath.flash import reference_trace
    from flashmath.viz.rescale import LazyRescalePlot

    inp = prepare_attention_inputs(q, k, v, scale=None, causal=False, mask=None)
    if inp.q.ndim != 2:
        raise ValueError(f"q must be 2-D (one head, (N, D)), got shape {inp.q.shape}")
    row = index(row, "row", inp.N)
    scores = scores_of(inp)[row]  # the row's scores, for the grey dots
    options = [float(t) for t in thresholds]
    traces = {t: reference_trace(q, k, v, rescale_threshold=t, block_q=inp.N, block_k=block_k) for t in options}
    plot = LazyRescalePlot(scores, traces, row=row, threshold=threshold)  # checks the threshold
    labels = [(f"{t:g}", t) for t in options]
    return live_widget(
        plot,
        threshold=widgets.SelectionSlider(options=labels, value=float(threshold), description="t"),
    )
