"""Chapter 1's memory-hierarchy picture: FlashAttention's Figure 1 numbers, and the figure that draws them."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from flashmath import viz
from flashmath.hardware import FIGURE_1, GPUS, MemoryHierarchy, MemoryLevel
from flashmath.viz.hierarchy import si_bytes

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


def texts(fig) -> list[str]:
    """Every text the figure draws: titles, axis labels, tick labels, annotations, legend entries."""
    fig.canvas.draw()
    return [t.get_text() for t in fig.findobj(plt.Text) if t.get_text() and t.get_visible()]


def test_figure_1_holds_the_papers_numbers_fastest_first():
    sram, hbm, dram = FIGURE_1.levels
    assert [level.name for level in FIGURE_1.levels] == ["SRAM", "HBM", "DRAM"]
    assert (sram.size_bytes, sram.bandwidth) == (20e6, 19e12)
    assert (hbm.size_bytes, hbm.bandwidth) == (40e9, 1.5e12)
    assert (dram.size_bytes, dram.bandwidth, dram.at_least) == (1e12, 12.8e9, True)
    bandwidths = [level.bandwidth for level in FIGURE_1.levels]
    sizes = [level.size_bytes for level in FIGURE_1.levels]
    assert bandwidths == sorted(bandwidths, reverse=True) and sizes == sorted(sizes)  # faster is smaller
    assert FIGURE_1.level("HBM") is hbm
    with pytest.raises(KeyError, match="no memory level 'L2'"):
        FIGURE_1.level("L2")


def test_the_sram_of_figure_1_is_108_sms_of_192_kb_of_which_shared_memory_is_the_carve_out():
    # section 2.1: 192 KB of on-chip SRAM in each of 108 SMs; the figure rounds the total to 20 MB
    assert FIGURE_1.gpu is GPUS["A100"] and FIGURE_1.sms == 108
    total = FIGURE_1.sms * FIGURE_1.sram_per_sm_bytes
    assert total == pytest.approx(FIGURE_1.level("SRAM").size_bytes, rel=0.1)
    assert GPUS["A100"].shared_bytes < FIGURE_1.sram_per_sm_bytes  # 164 KiB of the 192 KiB as shared memory


def test_sizes_are_written_in_decimal_units():
    assert si_bytes(20e6) == "20 MB" and si_bytes(40e9) == "40 GB" and si_bytes(1e12) == "1 TB"
    assert si_bytes(12.8e9, "B/s") == "12.8 GB/s" and si_bytes(19e12, "B/s") == "19 TB/s"
    assert si_bytes(32768) == "32.8 kB" and si_bytes(368) == "368 B" and si_bytes(1e15) == "1 PB"


def test_the_picture_draws_every_level_with_its_size_and_bandwidth():
    fig = viz.plot_memory_hierarchy()
    drawn = " ".join(texts(fig))
    # the SMs' SRAM tied to the size drawn: 108 x 192 KiB = 21.2 MB, which Figure 1 rounds to 20 MB
    for label in (
        "GPU SRAM, on chip",
        "108 SMs × 192 KiB ≈ 20 MB",
        "GPU HBM",
        "CPU DRAM",
        "NVIDIA A100 and a host's DRAM",
    ):
        assert label in drawn
    for value in ("20 MB", "40 GB", "> 1 TB", "19 TB/s", "1.5 TB/s", "12.8 GB/s"):
        assert value in drawn
    ax_size, ax_bw = fig.axes
    assert ax_size.get_xscale() == ax_bw.get_xscale() == "log"
    bars = [patch.get_width() + patch.get_x() for patch in ax_bw.patches]
    assert bars == pytest.approx([19e12, 1.5e12, 12.8e9])  # each bar ends at its value
    (legend,) = fig.legends  # no marks: the legend names one SM's shared memory alone
    assert [t.get_text() for t in legend.get_texts()] == ["one SM's shared memory: 164 KiB"]


def test_one_sms_shared_memory_is_drawn_inside_the_sram_bar():
    # what one program (a thread block on one SM) has, against the 20 MB spread over all 108 SMs
    fig = viz.plot_memory_hierarchy()
    ax_size = fig.axes[0]
    ends = sorted(patch.get_x() + patch.get_width() for patch in ax_size.patches)
    assert GPUS["A100"].shared_bytes == 164 * 1024
    assert ends[0] == pytest.approx(164 * 1024) and ends[1] == pytest.approx(20e6)
    assert 5 * 8192 * 4 < GPUS["A100"].shared_per_block_bytes < 6 * 8192 * 4  # a row of 8192 float32 fits 5 times


def test_marks_are_drawn_as_lines_and_named_in_a_legend():
    marks = {"one row": 8192 * 4, "all scores": 8192 * 8192 * 4}
    fig = viz.plot_memory_hierarchy(FIGURE_1, marks=marks)
    drawn = " ".join(texts(fig))
    assert "one row: 32.8 kB" in drawn and "all scores: 268 MB" in drawn
    lines = [line for line in fig.axes[0].lines if line.get_xdata()[0] in marks.values()]
    assert len(lines) == 2


def test_another_hierarchy_is_drawn_with_its_own_numbers():
    levels = (MemoryLevel("SRAM", 3e7, 3e13), MemoryLevel("HBM", 8e10, 3.35e12))
    other = MemoryHierarchy(gpu=GPUS["H100"], sms=132, sram_per_sm_bytes=256 * 1024, levels=levels, source="test")
    drawn = " ".join(texts(viz.plot_memory_hierarchy(other)))
    assert (
        "NVIDIA H100" in drawn
        and "132 SMs × 256 KiB ≈ 30 MB" in drawn
        and "3.35 TB/s" in drawn
        and "CPU DRAM" not in drawn
        and "host" not in drawn  # the title names no host when there is no DRAM level
    )


@pytest.mark.parametrize(
    "marks, message",
    [
        ({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, "at most 3 marks"),
        ({"a": -1.0}, "positive"),
        ({"a": np.nan}, "positive"),
    ],
)
def test_bad_marks_are_refused(marks, message):
    with pytest.raises(ValueError, match=message):
        viz.plot_memory_hierarchy(marks=marks)
