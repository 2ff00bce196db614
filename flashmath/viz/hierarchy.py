"""Chapter 1: the memory hierarchy of a GPU and its host, with sizes and bandwidths (FlashAttention's Figure 1)."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from flashmath.hardware import FIGURE_1, MemoryHierarchy
from flashmath.i18n import gettext as _

__all__ = ["plot_memory_hierarchy", "si_bytes"]

LEVEL_COLORS = {"SRAM": "#ff7f0e", "HBM": "#2ca02c", "DRAM": "#17becf"}  # fastest to slowest
SHARED_COLOR = "#a04f00"  # one SM's shared memory, drawn inside the SRAM bar
MARK_STYLES = ("--", ":", "-.")
PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def si_bytes(value: float, unit: str = "B") -> str:
    """``value`` bytes (or bytes per second, ``unit="B/s"``) in decimal units, three significant digits at most:
    ``si_bytes(2e7) == "20 MB"``, ``si_bytes(1.28e10, "B/s") == "12.8 GB/s"``."""
    for scale, prefix in PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _ticks(lo: float, hi: float, unit: str, step: int) -> tuple[list[float], FuncFormatter]:
    """Tick positions at every ``step``-th power of 10 from ``lo`` up to ``hi``, labelled in decimal units."""
    first, last = int(np.ceil(np.log10(lo))), int(np.floor(np.log10(hi)))
    return [10.0**e for e in range(first, last + 1, step)], FuncFormatter(lambda value, _pos: si_bytes(value, unit))


def plot_memory_hierarchy(hierarchy: MemoryHierarchy = FIGURE_1, *, marks=None, figsize=(8.0, 3.8)):
    """The levels of ``hierarchy`` as bars on two log scales: how much each holds, and how fast it is read.

    The fastest level is on top; each bar carries its value, the size of the slowest one marked as a lower bound
    where the source gives one ("> 1 TB"). Inside the SRAM bar, a darker part marks the shared memory of one SM
    (``hierarchy.gpu.shared_bytes``): all of the on-chip SRAM is spread over the SMs, and a program (a thread
    block) runs on one of them. A static pyplot figure.

    Args:
        hierarchy: a :class:`flashmath.hardware.MemoryHierarchy` (default: FlashAttention's Figure 1, an A100).
        marks: optional ``{label: bytes}``: arrays to compare with the sizes, drawn as vertical lines on the size
            panel and named in the legend below, after one SM's shared memory (at most three).

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: more than three marks, or a mark that is not a positive number of bytes.
    """
    import matplotlib.pyplot as plt

    marks = dict(marks or {})
    if len(marks) > len(MARK_STYLES):
        raise ValueError(f"at most {len(MARK_STYLES)} marks, got {len(marks)}")
    for label, value in marks.items():
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"mark {label!r} must be a positive number of bytes, got {value!r}")
    levels = hierarchy.levels
    rows = np.arange(len(levels))[::-1]  # the fastest level on top
    names = {
        # the SMs' SRAM and the level's size, as the source rounds it: 108 × 192 KiB = 21.2 MB, Figure 1's "20 MB"
        "SRAM": _("GPU SRAM, on chip\n{sms} SMs × {per_sm} KiB ≈ {total}").format(
            sms=hierarchy.sms,
            per_sm=hierarchy.sram_per_sm_bytes // 1024,
            total=si_bytes(next((level.size_bytes for level in levels if level.name == "SRAM"), 0.0)),
        ),
        "HBM": _("GPU HBM\n(the GPU's main memory)"),
        "DRAM": _("CPU DRAM\n(the host's main memory)"),
    }
    colors = [LEVEL_COLORS.get(level.name, "#7f7f7f") for level in levels]

    fig, (ax_size, ax_bw) = plt.subplots(1, 2, figsize=figsize, sharey=True, layout="constrained")
    panels = (
        (ax_size, [level.size_bytes for level in levels], "B", _("size (bytes, log scale)"), (1e3, 1e15)),
        (
            ax_bw,
            [level.bandwidth for level in levels],
            "B/s",
            _("bandwidth (bytes per second, log scale)"),
            (1e9, 1e15),
        ),
    )
    for ax, values, unit, xlabel, (lo, hi) in panels:
        ax.barh(rows, np.array(values) - lo, left=lo, color=colors, height=0.6)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ticks, formatter = _ticks(lo, hi, unit, step=3 if unit == "B" else 2)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(formatter)
        ax.tick_params(axis="x", labelsize=9)
        ax.set_xlabel(xlabel, fontsize=10)
        for row, level, value in zip(rows, levels, values, strict=True):
            text = si_bytes(value, unit)
            if unit == "B" and level.at_least:
                text = "> " + text
            ax.text(
                value * 1.3,
                row,
                text,
                va="center",
                ha="left",
                fontsize=10,
                zorder=5,  # above the marks' lines, on a white ground
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0),
            )
    ax_size.set_yticks(rows, [names.get(level.name, level.name) for level in levels], fontsize=10)
    ax_size.set_ylim(-0.6, len(levels) - 0.4)

    handles = []
    if "SRAM" in (level.name for level in levels):  # one SM's shared memory: what one program (thread block) has
        row = rows[[level.name for level in levels].index("SRAM")]
        shared = hierarchy.gpu.shared_bytes
        handles.append(
            ax_size.barh(
                row,
                shared - 1e3,
                left=1e3,
                color=SHARED_COLOR,
                height=0.6,
                label=_("one SM's shared memory: {kib} KiB").format(kib=shared // 1024),
            )
        )
    for (label, value), style in zip(marks.items(), MARK_STYLES, strict=False):
        handles.append(
            ax_size.axvline(
                value, color="k", ls=style, lw=1.2, label=_("{label}: {size}").format(label=label, size=si_bytes(value))
            )
        )
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=1, fontsize=9, frameon=False)
    # Figure 1's DRAM is a host's, not one the paper ties to its GPU (chapter 1)
    if "DRAM" in (level.name for level in levels):
        title = _("{gpu} and a host's DRAM: how much each memory holds, how fast it is read")
    else:
        title = _("{gpu}: how much each memory holds, how fast it is read")
    fig.suptitle(title.format(gpu=hierarchy.gpu.name), fontsize=11)
    return fig
