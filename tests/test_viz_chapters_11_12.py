"""The figures of chapters 11 and 15 (flashmath.viz.kernel, flashmath.viz.recap) and the kernel listing.

Each widget is built as the notebooks build it (``widgets.live_widget`` with the chapter's controls); every move of
every control must change the picture. None of this needs Triton.
"""

import io
from contextlib import redirect_stdout

import numpy as np
import pytest

from flashmath import widgets
from flashmath.hardware import tile_bytes
from flashmath.triton_kernel import RULES, kernel_source, line_for_line
from flashmath.viz import figure_signature
from flashmath.viz.kernel import BLOCK_SIZES, STAGES, WARPS, KernelMemoryPlot, plot_kernel_timings
from flashmath.viz.recap import CHAPTERS, CourseMapPlot

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


def move(ui, control, value):
    before = ui.image.value
    with redirect_stdout(io.StringIO()):
        control.value = value
    assert ui.image.value != before, f"moving {control.description} to {value} left the picture unchanged"


def control(ui, name):
    return next(w for w in ui.kwargs_widgets if w.description == name)


def test_kernel_memory_explorer_redraws_for_every_control():
    ui = widgets.kernel_memory_explorer(64)
    for name, values in (
        ("BLOCK_M", (128, 16)),
        ("BLOCK_N", (256, 32)),
        ("num_stages", (4, 1)),
        ("num_warps", (1, 16)),
    ):
        for value in values:
            move(ui, control(ui, name), value)
    assert [c.options for c in ui.kwargs_widgets] == [BLOCK_SIZES, BLOCK_SIZES, STAGES, WARPS]


def test_kernel_memory_explorer_checks_its_first_state_before_building():
    with pytest.raises(ValueError, match="num_warps must be one of"):
        widgets.kernel_memory_explorer(64, num_warps=3)


def test_kernel_memory_plot_draws_the_bytes_of_tile_bytes():
    plot = KernelMemoryPlot(64, block_q=128, block_k=64, num_stages=3, num_warps=2)
    need = tile_bytes(64, 128, 64, dtype="float16", stages=3)
    widths = [patch.get_width() * 1024 for patch in plot.segments]
    assert widths == [need.q_tile, need.kv_tiles, need.scores, need.accumulator, need.row_states]
    per_thread = need.registers / 4 / (32 * 2)
    assert plot.thread_bar.get_height() == per_thread
    assert plot.thread_text.get_text() == f"{per_thread:.0f}"
    assert "fits one block on A100, H100" in plot.totals[0].get_text()


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_kernel_memory_plot_keeps_its_texts_off_the_lines_the_bars_and_the_legend(language):
    """At the extreme settings (the longest totals, the longest bars), in both languages: no total crosses a limit
    line or a bar, and the legend lies outside both axes (zhrev-ai-11-20: the Chinese total ran over the A100
    line; at 256 x 256 the register bar covered the legend)."""
    from matplotlib.transforms import Bbox

    from flashmath import i18n

    i18n.set_language(language)
    try:
        plot = KernelMemoryPlot(64)
        ax_chip, ax_thread = plot.fig.axes
        legend = plot.fig.legends[0]
        for block_q, block_k, stages, warps in ((16, 16, 1, 16), (64, 64, 2, 4), (128, 128, 3, 1), (256, 256, 4, 1)):
            plot.update(block_q=block_q, block_k=block_k, num_stages=stages, num_warps=warps)
            plot.rgb()
            renderer = plot.fig.canvas.get_renderer()
            lines = [Bbox(ax_chip.transData.transform(seg)) for c in ax_chip.collections for seg in c.get_segments()]
            boxes = [*lines, *(patch.get_window_extent(renderer) for patch in plot.segments)]
            assert len(lines) == 3
            for total in plot.totals:
                box = total.get_window_extent(renderer)
                assert box.x0 > ax_chip.bbox.x0 and box.x1 < ax_chip.bbox.x1, total.get_text()
                assert not any(box.overlaps(other) for other in boxes), (total.get_text(), block_q, block_k)
            box = legend.get_window_extent(renderer)
            assert not box.overlaps(ax_chip.bbox) and not box.overlaps(ax_thread.bbox)
    finally:
        i18n.set_language("en")


@pytest.mark.parametrize(
    "state, match", [({"block_q": 48}, "block_q"), ({"num_warps": 3}, "num_warps"), ({"num_stages": 0}, "num_stages")]
)
def test_kernel_memory_plot_refuses_states_outside_the_controls(state, match):
    with pytest.raises(ValueError, match=match):
        KernelMemoryPlot(64, **state)


def test_course_map_explorer_redraws_for_every_chapter():
    ui = widgets.course_map_explorer(chapter=0)
    slider = control(ui, "chapter")
    assert (slider.min, slider.max) == (0, 15)
    for chapter in [*range(1, 16), 0]:
        move(ui, slider, chapter)
    with pytest.raises(ValueError, match="chapter"):
        widgets.course_map_explorer(chapter=16)


def test_course_map_says_the_one_idea_and_marks_its_chapters():
    plot = CourseMapPlot(chapter=15)
    assert "Intermediate results may change meaning" in plot.detail.get_text()
    # a plain partial sum (chapter 4's A_n, chapter 12's dQ_i) needs no rescale or division: it is not outlined
    assert [n for n, c in enumerate(CHAPTERS) if c.intermediate] == [2, 5, 6, 7, 10, 11, 13, 14]
    plot.update(chapter=3)
    assert plot.detail.get_text().startswith("No intermediate result changes meaning")
    pictures = {figure_signature(plot.update(chapter=c)) for c in (2, 5, 7)}
    assert len(pictures) == 3
    with pytest.raises(ValueError, match="chapter"):
        plot.update(chapter=16)


def test_course_map_titles_are_the_syllabus_titles():
    from test_notebooks import CHAPTERS as README_CHAPTERS  # README's chapter table: (number, title, ...)

    assert [c.title for c in CHAPTERS] == [row[1] for row in README_CHAPTERS]


def test_kernel_timings_figure():
    fig = plot_kernel_timings([1024, 2048], {"a": [1.0, 4.0], "b": [0.5, np.nan]})
    assert len(fig.axes[0].lines) == 2
    with pytest.raises(ValueError):
        plot_kernel_timings([1], {})


def test_line_for_line_pairs_every_rule_from_both_sources():
    rows = line_for_line()
    assert [rule for rule, _, _ in rows] == list(RULES)
    for rule, numpy_lines, triton_lines in rows:
        assert numpy_lines and triton_lines, rule
        assert all("tl." not in line for line in numpy_lines) and any("tl." in line for line in triton_lines)
    assert kernel_source().startswith("@triton.jit\ndef _fa2_forward(")


def test_the_core_listing_keeps_every_line_the_chapter_pairs_and_drops_the_variants():
    """Issue 35 (review rev-c): chapter 11 prints ``kernel_source(core=True)``, the kernel without chapter 13's and
    chapter 7's branches. It must still hold every kernel line that ``line_for_line`` sets beside the numpy loop,
    none of the variants' switches, and otherwise only the kernel's own lines, in order."""
    import re

    from flashmath.triton_kernel import VARIANT_FLAGS

    full, core = kernel_source().splitlines(), kernel_source(core=True).splitlines()
    assert len(core) < len(full) - 25
    for _rule, _numpy_lines, triton_lines in line_for_line():
        for line in triton_lines:
            assert any(line.strip() == c.split("  #")[0].strip() for c in core), line
    assert not [line for line in core if any(flag in line for flag in VARIANT_FLAGS)]
    assert not [line for line in core if re.search(r"\b(Sink|thr|cap|left|right)\b", line.split("  #")[0])]
    rest = iter(full)  # a subsequence of the full listing, but for the one signature line that replaces five
    assert all(any(line == f for f in rest) for line in core if not line.startswith("    G=1,"))
    assert "for c0 in range(lo, hi, BLOCK_N):" in "\n".join(core)


def test_one_idea_draws_the_four_running_values_and_marks_every_jump_of_the_max():
    import matplotlib.pyplot as plt

    from flashmath.viz.recap import plot_one_idea

    rng = np.random.default_rng(15)
    g = np.maximum.accumulate(rng.standard_normal(12))
    s, a, u = rng.random(12) + 1, rng.standard_normal(12), rng.standard_normal(12)
    jumps = np.concatenate([[False], g[1:] > g[:-1]])
    fig = plot_one_idea(g, s, a, u, jumps)
    assert len(fig.axes) == 4
    at = np.flatnonzero(jumps) + 1
    for ax, y in zip(fig.axes, (g, s, a, u), strict=True):
        (curve,) = [line for line in ax.lines if line.get_linestyle() == "-"]
        (dots,) = [line for line in ax.lines if line.get_linestyle() == "None"]
        np.testing.assert_array_equal(curve.get_ydata(), y)  # the value after every key m = 1..M
        np.testing.assert_array_equal(dots.get_xdata(), at)  # a red dot at each jump
        verticals = [line for line in ax.lines if line.get_linestyle() == ":"]
        assert sorted(line.get_xdata()[0] for line in verticals) == list(at)  # a dotted line at each jump
    dashed = [[line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"] for ax in fig.axes]
    assert dashed == [[], [s[-1]], [a[-1]], [u[-1] / s[-1]]]  # the final answers
    assert f"the {len(at)} keys where it jumps" in fig.axes[0].get_title(loc="left")
    with pytest.raises(ValueError, match="one length"):
        plot_one_idea(g, s, a, u[:-1], jumps)
    plt.close(fig)


def test_a_chinese_box_title_keeps_its_last_latin_word_on_its_line():
    """zhrev-h 15-8: 一个循环，多种 attention on one line (the box has room for about 32 units); a title whose end
    is Chinese characters still breaks at 22."""
    from flashmath.viz.recap import _wrap

    assert _wrap("一个循环，多种 attention") == "一个循环，多种 attention"
    assert _wrap("用 Triton kernel 实现反向传播") == "用 Triton kernel 实现\n反向传播"
    assert _wrap("一二三四五 attentionattention") == "一二三四五\nattentionattention"  # 29 units: too long
    assert _wrap("One loop, many attentions") == "One loop, many\nattentions"  # English: textwrap at 22


def test_a_chinese_box_title_that_wraps_breaks_after_its_colon():
    """zhrev-s 15-8: FlashAttention-2：最后只除一次 broke as 最后 / 只除一次; a title that fits stays on one line."""
    from flashmath.viz.recap import _wrap

    assert _wrap("FlashAttention-2：最后只除一次") == "FlashAttention-2：\n最后只除一次"
    assert _wrap("跨设备：环形注意力") == "跨设备：环形注意力"
    assert _wrap("去掉数据依赖：一个循环") == "去掉数据依赖：一个循环"
