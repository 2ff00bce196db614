"""Every figure and widget of the course, drawn in Chinese: no missing glyph, and Chinese where it speaks.

The Chinese edition selects its language after importing flashmath, so figures translate their titles, labels and
legends where they draw them. A text with ``$...$`` is drawn by mathtext: the math in mathtext's fonts, the text
around it in the text's first family alone (the Chinese subset, which holds Latin letters and digits too), with no
fallback to a second family. So Chinese may stand next to ``$...$`` math but never inside it, and the text outside
the math must be in the subset itself (else a dummy glyph and a logged "does not have a glyph"). Each figure here is
drawn with warnings (and that log) as errors, through every state its controls offer (the titles change with the
state). A widget's states are checked against the fonts' character maps, its last state by a real draw.
"""

import io
import logging
import re
import warnings
from contextlib import redirect_stdout

import numpy as np
import pytest

import flashmath as fm
from flashmath import i18n, viz, widgets
from flashmath.opcount import count_ops, op_count_table
from flashmath.traffic import sram_sweep
from flashmath.variants import mask_example
from flashmath.viz.backward import plot_loss_curves
from flashmath.viz.kernel import plot_kernel_timings
from flashmath.viz.recap import plot_one_idea

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py

CJK = re.compile("[\u4e00-\u9fff]")


@pytest.fixture
def chinese(caplog):
    i18n.set_language("zh_CN")
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="matplotlib.mathtext"):
        warnings.simplefilter("error")  # matplotlib's "Glyph ... missing from font(s)" is a UserWarning
        yield
        # mathtext logs (does not warn) "Font ... does not have a glyph for ..., substituting with a dummy symbol"
        dummies = [r.getMessage() for r in caplog.records if "does not have a glyph" in r.getMessage()]
        assert not dummies, dummies
    i18n.set_language("en")


MATH = re.compile(r"(?<!\\)\$(?:[^$\\]|\\.)*\$")


def outside_math(text):
    """The part of ``text`` that mathtext draws as plain text (everything outside its ``$...$``)."""
    return MATH.sub("", text) if text.count("$") - text.count(r"\$") >= 2 else text


def chinese_in_math(drawn):
    """The texts that put Chinese inside ``$...$``, where mathtext's fonts have none (tofu)."""
    return [t for t in drawn if any(CJK.search(m) for m in MATH.findall(t))]


def texts(fig):
    """Every non-empty string the figure draws (titles, labels, legend entries, tick labels, free texts)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


def uncovered(fig):
    """The characters of the figure's texts that no font of their fallback list has (matplotlib's own lookup,
    ``font_manager._find_fonts_by_props``): what a draw would warn about as "Glyph ... missing" and show as tofu.
    The math (``$...$``) is left out: it uses mathtext's own fonts, and Chinese never goes in it (checked below); the
    text around it is checked against the first family alone, the only one mathtext takes it from."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font
    from matplotlib.text import Text

    missing = set()
    for t in fig.findobj(Text):
        shown = outside_math(t.get_text()) if t.get_visible() else ""
        if not shown.strip():
            continue
        paths = tuple(font_manager.fontManager._find_fonts_by_props(t.get_fontproperties()))
        if shown != t.get_text():  # mathtext: the text outside the math comes from the first family alone
            paths = paths[:1]
        if paths not in _CHARMAPS:
            _CHARMAPS[paths] = set().union(*(FT2Font(str(p)).get_charmap() for p in paths))
        missing |= {ch for ch in shown if not ch.isspace() and ord(ch) not in _CHARMAPS[paths]}
    return missing


_CHARMAPS: dict = {}


def check_figure(fig, speaks=True):
    fig.savefig(io.BytesIO(), format="png")  # the draw: a missing glyph warns (an error here)
    drawn = texts(fig)
    assert not speaks or any(CJK.search(t) for t in drawn), f"no Chinese in the figure: {drawn}"
    mixed = chinese_in_math(drawn)
    assert not mixed, f"Chinese inside $...$ draws tofu: {mixed}"


def rng_qkv(N=6, M=9, D=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, D)), rng.standard_normal((M, D)), rng.standard_normal((M, D))


def widget_cases():
    q, k, v = rng_qkv()
    x = np.random.default_rng(1).standard_normal(7) * 4
    sweep = fm.scale_sweep([1, 4, 16], rng=np.random.default_rng(2), n_queries=4, n_keys=6)
    return {
        "online_softmax": lambda: widgets.online_softmax_player(x),
        "overflow": lambda: widgets.overflow_explorer(x * 30, scale=10.0, dtype="float16"),
        "scale": lambda: widgets.scale_explorer(sweep),
        "loop_swap": lambda: widgets.loop_swap_player(fm.safe_softmax(q @ k.T), v, row=1),
        "one_loop": lambda: widgets.one_loop_player(q, k, v, row=1),
        "tile_sweep": lambda: widgets.tile_sweep_player(q, k, v, block_q=2, block_k=3, causal=True),
        "split_kv": lambda: widgets.split_kv_player(q[:1], k, v, max_splits=4),
        "precision": lambda: widgets.precision_explorer(fm.precision_study(q, k, v, blocks=(1, 3))),
        "kernel_memory": lambda: widgets.kernel_memory_explorer(D=64),
        "course_map": lambda: widgets.course_map_explorer(chapter=0),
        "tile_traffic": lambda: widgets.tile_traffic_explorer(block=64, D=64),
        "ops": lambda: widgets.ops_explorer(op_count_table(q, k, v, blocks=(2, 4)), block=2),
        "backward": lambda: widgets.backward_sweep_player(32, 32, block_q=16, block_k=16, causal=True),
        "mask": lambda: widgets.mask_explorer(kind="causal", param=3, block=8, N=16),
    }


def options(control):
    """The values a control offers: every option of a list (each may title the figure its own way); a slider's
    first, middle and last value (the steps between draw the same texts with other numbers)."""
    if hasattr(control, "options"):
        values = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return values if len(values) <= 12 else values[:: len(values) // 6] + values[-1:]
    if hasattr(control, "base"):  # a log slider: min and max are exponents
        return [control.base**e for e in (control.min, (control.min + control.max) / 2, control.max)]
    return sorted({control.min, (control.min + control.max) // 2, control.max})


CODE_NAMED = ("kernel_memory", "tile_traffic", "scale", "ops")


@pytest.mark.parametrize("name", list(widget_cases()))
def test_a_widget_draws_chinese_in_every_state(name, chinese):
    with redirect_stdout(io.StringIO()):  # interactive's clear_output outside a kernel
        ui = widget_cases()[name]()
        if ui.result is None:
            ui.update()
        plot = ui.result
        labels = [c.description for c in ui.kwargs_widgets]
        if name not in CODE_NAMED:  # their controls are named after code (BLOCK_M, num_warps, B_r = B_c, D)
            assert any(CJK.search(label) for label in labels), f"no Chinese control label: {labels}"
        # Every state's texts against the fonts' character maps (a full draw of each state with savefig took
        # three quarters of this file's time); the last state is drawn for real, with warnings as errors.
        for control in ui.kwargs_widgets:
            for value in options(control):
                control.value = value
                assert not uncovered(plot.fig), (control.description, value, uncovered(plot.fig))
                mixed = chinese_in_math(texts(plot.fig))
                assert not mixed, f"Chinese inside $...$ draws tofu: {mixed}"
        check_figure(plot.fig)


def static_cases():
    q, k, v = rng_qkv()
    x = np.random.default_rng(1).standard_normal(7) * 4
    trace = fm.online_softmax_trace(x)
    sweep = fm.scale_sweep([1, 4, 16], rng=np.random.default_rng(2), n_queries=4, n_keys=6)
    return {
        "online_softmax_step": lambda: viz.plot_online_softmax_step(trace, 3),
        "overflow": lambda: viz.plot_overflow(x * 30, dtype="float16", scale=10.0),
        "scale_step": lambda: viz.plot_scale_step(sweep, 1),
        "loop_swap_step": lambda: viz.plot_loop_swap_step(fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v), 4, row=1),
        "one_loop_step": lambda: viz.plot_one_loop_step(fm.one_loop_trace(q, k, v), 5),
        "sram_sweep": lambda: viz.plot_sram_sweep(
            [sram_sweep(256, 64, [16384, 65536], order=o) for o in ("fa1", "fa2")]
        ),
        "op_counts": lambda: viz.plot_op_counts({"fa2": count_ops("fa2", q, k, v, block_q=2, block_k=3)}),
        "masks": lambda: viz.plot_masks({"causal": np.tril(np.ones((4, 4), bool))}),
        "precision_study": lambda: viz.plot_precision_study(fm.precision_study(q, k, v, blocks=(1, 3))),
        "accumulator_growth": lambda: viz.plot_accumulator_growth(
            fm.flash_trace(q[:2], k, v, block_q=4, block_k=3, order="fa2"),
            fm.flash_trace(q[:2], k, v, block_q=4, block_k=3, order="fa1"),
        ),
        "mask_example": lambda: viz.plot_mask_example(mask_example, kind="window", param=5, block=4, N=16),
        "paged_cache": lambda: viz.plot_paged_cache(np.array([[0, 2], [1, 3]]), np.array([5, 3]), 4, 4),
        "gqa_heads": lambda: viz.plot_gqa_heads(8, 2),
        "warp_partition": lambda: viz.plot_warp_partition(4),
        "one_loop_step_long_row": lambda: viz.plot_one_loop_step(
            fm.one_loop_trace(q[:1], np.random.default_rng(4).standard_normal((46, 4)), np.ones((46, 2))),
            46,
            labels=[f"t{m}" for m in range(46)],
        ),
        "memory_hierarchy": lambda: viz.plot_memory_hierarchy(marks={"one row": 32768.0}),
        "kernel_timings": lambda: plot_kernel_timings([1024, 2048], {"a": [1.0, 4.0]}),
        "loss_curves": lambda: plot_loss_curves({"a": [3.0, 2.0, 1.5], "b": [3.0, 2.1, 1.4]}),
        "one_idea": lambda: plot_one_idea(
            np.array([0.0, 1.0, 1.0]),
            np.array([1.0, 1.4, 2.1]),
            np.array([0.5, 0.7, 0.6]),
            np.array([0.5, 0.98, 1.26]),
            np.array([True, True, False]),
        ),
    }


SILENT = ("masks",)  # its words are the caller's titles; its axes are named "key $m$" and "query $n$" in both editions


@pytest.mark.parametrize("name", list(static_cases()))
def test_a_static_figure_draws_chinese(name, chinese):
    check_figure(static_cases()[name](), speaks=name not in SILENT)


def test_english_figures_keep_their_english_text():
    """The same builder in English draws no Chinese (the marking changed nothing there)."""
    fig = viz.plot_gqa_heads(8, 2)
    assert texts(fig) and not any(CJK.search(t) for t in texts(fig))
    assert "grouped-query attention: H = 8 query heads" in " ".join(texts(fig))


def test_the_character_map_check_finds_a_glyph_that_no_font_has(chinese):
    """The per-state check must be able to fail: a character outside the subset (and outside DejaVu Sans) is found,
    and a real draw of it warns, as the last-state draw would."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("分块 $x_i$")
    assert not uncovered(fig)
    ax.set_xlabel("龘")  # U+9F98: in no catalog message, so not in the subset
    assert uncovered(fig) == {"龘"}
    with pytest.raises(UserWarning, match="missing from font"):
        fig.savefig(io.BytesIO(), format="png")


def test_math_beside_chinese_is_drawn_as_in_english(chinese, caplog):
    """Chinese next to ``$...$`` draws its glyphs from the subset (no dummy, no warning), and the math itself is the
    English edition's mathtext, pixel for pixel."""
    import matplotlib.pyplot as plt

    def pixels(text):
        fig = plt.figure(figsize=(2, 0.5), dpi=80)
        fig.text(0.05, 0.3, text)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba()).copy()

    mixed = pixels("块大小 $B_r = B_c$")
    math_zh = pixels("$B_r = B_c$")
    i18n.set_language("en")
    math_en = pixels("$B_r = B_c$")
    i18n.set_language("zh_CN")
    assert (mixed != 255).any() and np.array_equal(math_zh, math_en)
    assert not [r for r in caplog.records if "does not have a glyph" in r.getMessage()]


def test_the_split_kv_output_label_fits_its_axes(chinese):
    """Review zhrev-aq-10-1: the Chinese y label of the outputs' axes ("A_p：各段（点），合并后（虚线）") ran above and
    below its axes at the notebook's size; it is drawn on two lines now, each within the axes' height."""
    q, k, v = rng_qkv(N=1, M=46)
    plot = viz.SplitKVPlot({p: fm.split_kv_trace(q, k, v, p) for p in (3, 16)}, (q @ k.T)[0], dpi=100)
    for p in (3, 16):
        plot.update(splits=p)
        plot.rgb()
        renderer = plot.fig.canvas.get_renderer()
        label, axes = plot.ax_a.yaxis.label.get_window_extent(renderer), plot.ax_a.get_window_extent(renderer)
        assert "\n" in plot.ax_a.get_ylabel() and CJK.search(plot.ax_a.get_ylabel())
        assert axes.y0 <= label.y0 and label.y1 <= axes.y1, (p, label, axes)
