"""Chapter 11: where the Triton kernel keeps each quantity, and (on a GPU) how fast it runs.

:class:`KernelMemoryPlot` draws the on-chip bytes of one program (one query tile) of the FlashAttention-2 kernel,
from :func:`flashmath.hardware.tile_bytes`, for a choice of ``BLOCK_M``, ``BLOCK_N``, ``num_stages`` and
``num_warps``: shared memory against what one thread block may use on an A100 and an H100, and the registers each
thread needs for its share of the score tile, the accumulator and the row states, against the 255 a thread may
have. :func:`plot_kernel_timings` draws timings measured on a GPU. Nothing here runs the kernel.
"""

from __future__ import annotations

from flashmath.hardware import GPUS, tile_bytes
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, JUMP, SEEN

__all__ = ["KernelMemoryPlot", "plot_kernel_timings", "BLOCK_SIZES", "WARPS", "STAGES"]

BLOCK_SIZES = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)
KiB = 1024
# translated where they are drawn (the language may be selected after this module is imported)
SHARED_PARTS = (N_("Q tile"), N_("K, V tiles"))
REGISTER_PARTS = (N_("scores $X$, $P$"), "acc = $sA'$", N_("$g$, $s$ (m_i, l_i)"))
PART_COLORS = ("#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#8c564b")


def _registers_per_thread(need, num_warps: int) -> float:
    """32-bit registers per thread for the tile's register part, shared by ``num_warps`` warps of 32 threads."""
    return need.registers / 4 / (32 * num_warps)


class KernelMemoryPlot(LivePlot):
    """One program's on-chip working set: ``update(block_q=..., block_k=..., num_stages=..., num_warps=...)``.

    Left, two stacked bars: bytes in shared memory (``Q_i`` once, ``K_j`` and ``V_j`` once per pipeline stage)
    against the most one thread block may use on an A100 and an H100, and bytes in registers (score tile,
    accumulator, row states, all float32; the same whatever ``num_warps``) against one SM's register file. Right:
    32-bit registers per thread, the register part divided over ``num_warps x 32`` threads, against the limit of
    255 per thread (more are spilled to local memory, off chip). The counts are the tiles alone (a real kernel
    also needs registers for addresses and loop counters), so they are lower bounds.

    Args:
        D: head dimension (``Dv = D``). dtype: the inputs' dtype in memory (``"float16"``).
        block_q, block_k, num_stages, num_warps: the state shown first; block sizes from :data:`BLOCK_SIZES`,
            stages from :data:`STAGES`, warps from :data:`WARPS`.
        figsize, dpi, pyplot: see :class:`flashmath.viz.LivePlot`.

    Raises:
        ValueError: a state outside those lists.
    """

    def __init__(
        self,
        D: int = 64,
        *,
        dtype="float16",
        block_q: int = 64,
        block_k: int = 64,
        num_stages: int = 2,
        num_warps: int = 4,
        figsize=(10.0, 4.3),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        self.D, self.dtype = int(D), dtype
        # fixed axis limits: the largest of every state the controls can reach
        biggest = tile_bytes(self.D, max(BLOCK_SIZES), max(BLOCK_SIZES), dtype=dtype, stages=max(STAGES))
        self.shared_max = max(biggest.shared, max(g.shared_per_block_bytes for g in GPUS.values())) / KiB
        self.registers_max = biggest.registers / KiB
        self.per_thread_max = _registers_per_thread(biggest, min(WARPS))
        super().__init__(
            figsize=figsize,
            dpi=dpi,
            pyplot=pyplot,
            block_q=block_q,
            block_k=block_k,
            num_stages=num_stages,
            num_warps=num_warps,
        )

    def _build(self) -> None:
        ax_chip, ax_thread = self.fig.subplots(1, 2, width_ratios=(3.2, 1.0))
        self.segments = []  # one stacked bar per memory: [(patch, part index)]
        legend = []
        for row, (parts, colors) in enumerate(((SHARED_PARTS, PART_COLORS[:2]), (REGISTER_PARTS, PART_COLORS[2:]))):
            for part, color in zip(parts, colors, strict=False):
                (patch,) = ax_chip.barh([row], [0.0], left=0.0, height=0.55, color=color)
                patch.set_label(_(part))
                self.segments.append(patch)
                legend.append(patch)
        # each limit line spans only the row of the bar it limits, never the total written above the bar, so
        # that no total crosses a line, however long it is in any language; the lines are drawn over the bars
        # (live, after them), and the legend sits below the axes, where no bar can reach it
        limit_styles = {"A100": ":", "H100": "--"}
        for name, style in limit_styles.items():
            x = GPUS[name].shared_per_block_bytes / KiB
            label = _("{name}: shared memory per block, {x:.0f} KiB").format(name=name, x=x)
            legend.append(ax_chip.vlines(x, -0.32, 0.45, color="#7f7f7f", ls=style, lw=1.2, label=label))
        register_file = GPUS["H100"].register_bytes / KiB
        legend.insert(
            5,  # beside the register parts (the legend fills its columns downwards)
            ax_chip.vlines(
                register_file,
                0.68,
                1.6,
                color=JUMP,
                ls="--",
                lw=1.2,
                label=_("register file of one SM, {size:.0f} KiB").format(size=register_file),
            ),
        )
        ax_chip.set_yticks([0, 1], [_("shared\nmemory"), _("registers")], fontsize=9)
        ax_chip.set_ylim(1.6, -0.6)
        ax_chip.set_xlim(0, max(self.shared_max, self.registers_max) * 1.05)
        ax_chip.set_xlabel(_("KiB per program (one query tile)"), fontsize=9)
        ax_chip.tick_params(labelsize=8)
        self.fig.legend(handles=legend, fontsize=8, loc="outside lower left", ncols=4, frameon=False)
        # a few points right of the axis line, above the bar (and above the tops of the limit lines)
        self.totals = [
            ax_chip.annotate("", (0, row - 0.44), xytext=(3, 0), textcoords="offset points", fontsize=9, va="center")
            for row in (0, 1)
        ]
        (self.thread_bar,) = ax_thread.bar([0], [0.0], width=0.6, color=SEEN)
        ax_thread.axhline(255, color=JUMP, ls="--", lw=1)
        ax_thread.text(
            0.35, 255 * 1.1, _("255 per thread\n(the rest spill to\nlocal memory)"), color=JUMP, fontsize=8, va="bottom"
        )
        ax_thread.set_yscale("log")
        ax_thread.set_ylim(1, self.per_thread_max * 4)
        ax_thread.set_xlim(-0.4, 1.3)
        ax_thread.set_xticks([])
        ax_thread.set_ylabel(_("32-bit registers per thread\n(data only)"), fontsize=9, linespacing=1.4)
        ax_thread.tick_params(labelsize=8)
        self.thread_text = ax_thread.text(0, 1.3, "", ha="center", fontsize=8, color="white", fontweight="bold")
        self.title = self.fig.suptitle("", fontsize=10)
        limits = [artist for artist in legend if artist not in self.segments]
        self.live(*self.segments, *limits, *self.totals, self.thread_bar, self.thread_text, self.title)

    def _update(self, block_q: int, block_k: int, num_stages: int, num_warps: int) -> None:
        for value, name, allowed in (
            (block_q, "block_q", BLOCK_SIZES),
            (block_k, "block_k", BLOCK_SIZES),
            (num_stages, "num_stages", STAGES),
            (num_warps, "num_warps", WARPS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        need = tile_bytes(self.D, block_q, block_k, dtype=self.dtype, stages=num_stages)
        sizes = [need.q_tile, need.kv_tiles, need.scores, need.accumulator, need.row_states]
        lefts = [0, need.q_tile, 0, need.scores, need.scores + need.accumulator]
        for patch, size, left in zip(self.segments, sizes, lefts, strict=False):
            patch.set_x(left / KiB)
            patch.set_width(size / KiB)
        fits = [name for name, gpu in sorted(GPUS.items()) if need.shared <= gpu.shared_per_block_bytes]
        shared = need.shared / KiB
        self.totals[0].set_text(
            _("{size:.1f} KiB: fits one block on {gpus}").format(size=shared, gpus=_(", ").join(fits))
            if fits
            else _("{size:.1f} KiB: fits one block on none of them").format(size=shared)
        )
        self.totals[1].set_text(f"{need.registers / KiB:.1f} KiB")
        per_thread = _registers_per_thread(need, num_warps)
        self.thread_bar.set_height(per_thread)
        self.thread_bar.set_color(SEEN if per_thread <= 255 else JUMP)
        self.thread_text.set_text(f"{per_thread:.0f}")
        self.title.set_text(
            _(
                "one program: BLOCK_M = $B_r$ = {block_q}, BLOCK_N = $B_c$ = {block_k}, $D$ = {D} ({dtype}), "
                "num_stages = {num_stages}, num_warps = {num_warps} ({threads} threads)"
            ).format(
                block_q=block_q,
                block_k=block_k,
                D=self.D,
                dtype=self.dtype,
                num_stages=num_stages,
                num_warps=num_warps,
                threads=32 * num_warps,
            )
        )


def plot_kernel_timings(sizes, timings: dict, *, figsize=(6.5, 3.6)):
    """Milliseconds per call against ``N = M`` (log-log), one line per method (a static pyplot figure).

    Args:
        sizes: the sequence lengths ``N = M``.
        timings: ``{method: [ms per size]}``; NaN where a method did not run (out of memory).

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    if not timings:
        raise ValueError("timings must hold at least one method")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    for (name, ms), color in zip(timings.items(), (SEEN, JUMP, "#2ca02c", "#9467bd"), strict=False):
        ax.plot(sizes, ms, "o-", label=name, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_("$N = M$ (sequence length)"))
    ax.set_ylabel(_("ms per call"))
    ax.legend(fontsize=8)
    return fig
