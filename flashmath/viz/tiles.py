"""Chapters 6-8: the tile sweep of FlashAttention over the N x M score grid, in either loop order."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import NullLocator

from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.axes import finite_or_nan, index, limits
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, JUMP, LEGEND_ABOVE, SEEN, UNSEEN
from flashmath.viz.traffic import op_labels

__all__ = ["TileSweepPlot", "plot_tile_sweep_step", "plot_sram_sweep"]

# the names are translated where they are drawn (the language may be selected after this module is imported)
ORDER_NAMES = {"fa1": N_("FlashAttention (key tiles outside)"), "fa2": N_("FlashAttention-2 (query tiles outside)")}
ORDER_COLORS = {"fa1": "#9467bd", "fa2": SEEN}
FADED = 0.35  # the alpha of an order's whole-run curve (and of its swatch when the other order is shown)
A100_SHARED_KIB = 164  # an A100's largest shared memory per SM (NVIDIA Ampere tuning guide, section 1.4.2.3)
DONE, SKIPPED, TODO, CURRENT = 1, 2, 0, 3
# tile states: not yet (clear), done (blue veil), skipped (grey veil), current (red veil; outlined too)
TILE_CMAP = ListedColormap([(1, 1, 1, 0), (0.12, 0.47, 0.71, 0.35), (0.5, 0.5, 0.5, 0.55), (0.84, 0.15, 0.16, 0.45)])
ARRAYS = ("Q", "K", "V", "A", N_("row states"))


class TileSweepPlot(LivePlot):
    """The tiled loop after ``t`` tile steps, in the order ``fa1`` or ``fa2``, on one (query, key) grid.

    Left: the ``N x M`` scores (grey, masked pairs white) cut into ``B_r x B_c`` tiles: the tiles done (blue),
    skipped because fully masked (grey), the current one (red; a skipped one stays grey, outlined in red), and the
    band that stays on chip during the inner loop (the query tile's rows for fa2, the key tile's columns for fa1).
    Middle and right: every row's running max ``g_n`` and sum ``s_n`` after the step (the current tile's rows in
    red; grey ticks: the final values).
    Bottom: bytes moved between HBM and the chip so far, step by step for both orders (dashed: standard attention,
    which stores X and Y), and per array for the current order (outlines: the totals of the whole run).
    ``update(step=t, order=...)``, ``0 <= t <= T`` (0 = nothing done yet).

    Args:
        traces: ``{"fa1": trace, "fa2": trace}`` from :func:`flashmath.flash_trace` on the same 2-D inputs and
            blocks (one order alone works too).
        scores: optional ``(N, M)`` scores to draw under the tiles (``-inf`` where masked).
        standard_bytes: optional bytes moved by standard attention on the same inputs, drawn as a dashed line.
        step, order: the state shown first (``order`` default: the first of ``traces``).
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: traces of batched inputs or of different grids; ``step`` out of range; an unknown ``order``;
        ``scores`` of the wrong shape. TypeError: ``step`` not an integer.
    """

    def __init__(
        self,
        traces: dict,
        *,
        scores=None,
        standard_bytes=None,
        step: int = 0,
        order=None,
        figsize=(10.0, 6.6),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        if not traces or not set(traces) <= set(ORDER_NAMES):
            raise ValueError(f"traces must map 'fa1' and/or 'fa2' to flash traces, got keys {list(traces)}")
        first = next(iter(traces.values()))
        if np.ndim(first.g) != 2:
            raise ValueError(
                f"TileSweepPlot needs traces of 2-D inputs (N, D), (M, D); got g of shape "
                f"{np.shape(first.g)} (one row per step)"
            )
        for trace in traces.values():
            if (trace.grid, trace.block_q, trace.block_k, np.shape(trace.g)) != (
                first.grid,
                first.block_q,
                first.block_k,
                np.shape(first.g),
            ):
                raise ValueError("every trace must come from the same inputs and block sizes")
        self.traces = traces
        self.N = first.g.shape[1]
        self.M = int(first.cols[:, 1].max())
        self.scores = None if scores is None else np.asarray(scores, dtype=np.float64)
        if self.scores is not None and self.scores.shape != (self.N, self.M):
            raise ValueError(f"scores must have shape (N, M) = ({self.N}, {self.M}), got {self.scores.shape}")
        self.standard_bytes = standard_bytes
        order = next(iter(traces)) if order is None else order
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step, order=order)

    def __len__(self) -> int:
        return len(next(iter(self.traces.values())))

    def _by_array(self, trace, t: int) -> np.ndarray:
        """Bytes loaded plus stored per array of :data:`ARRAYS` after ``t`` steps (row states summed)."""
        out = np.zeros(len(ARRAYS))
        if t == 0:
            return out
        for name, moved in trace.bytes_by_array.items():
            out[ARRAYS.index(name) if name in ARRAYS else len(ARRAYS) - 1] += moved[t - 1].sum()
        return out

    def _build(self) -> None:
        N, M = self.N, self.M
        first = next(iter(self.traces.values()))
        T = len(first)
        axd = self.fig.subplot_mosaic(
            [["grid", "g", "s"], ["curve", "bytes", "bytes"]], width_ratios=[2.2, 1, 1], height_ratios=[2.3, 1]
        )
        ax, ax_g, ax_s, ax_c, ax_b = axd["grid"], axd["g"], axd["s"], axd["curve"], axd["bytes"]
        extent = (0.5, M + 0.5, N + 0.5, 0.5)  # keys m = 1..M across, queries n = 1..N down
        if self.scores is not None:
            ax.imshow(
                np.where(np.isfinite(self.scores), self.scores, np.nan),
                cmap="Greys",
                extent=extent,
                aspect="auto",
                interpolation="nearest",
                alpha=0.6,
            )
        row_edges = np.unique(np.concatenate(([0], first.rows[:, 1]))) + 0.5
        col_edges = np.unique(np.concatenate(([0], first.cols[:, 1]))) + 0.5
        self.tile_mesh = ax.pcolormesh(
            col_edges,
            row_edges,
            np.zeros(first.grid),
            cmap=TILE_CMAP,
            vmin=-0.5,
            vmax=3.5,
            edgecolors="k",
            linewidth=0.6,
        )
        self.band = Rectangle((0, 0), 0, 0, fill=False, ec="k", lw=2.2, ls="--")
        self.current = Rectangle((0, 0), 0, 0, fill=False, ec=JUMP, lw=2.5)
        ax.add_patch(self.band)
        ax.add_patch(self.current)
        ax.set_xlim(0.5, M + 0.5)
        ax.set_ylim(N + 0.5, 0.5)
        ax.set_xlabel(_("key $m$"))
        ax.set_ylabel(_("query $n$"))
        ax.legend(
            handles=[
                Patch(color=TILE_CMAP(DONE), label=_("done")),
                Patch(color=TILE_CMAP(SKIPPED), label=_("skipped (all masked)")),
                Patch(fc="none", ec=JUMP, lw=2, label=_("current tile")),
                Line2D([], [], color="k", ls="--", lw=2, label=_("on chip all along")),
            ],
            ncol=2,
            **LEGEND_ABOVE,
        )

        rows = np.arange(1, N + 1)
        self.state_points = {}
        for ax_v, name in ((ax_g, "g"), (ax_s, "s")):
            final = np.asarray(getattr(first, name)[-1], dtype=np.float64)
            ax_v.plot(finite_or_nan(final), rows, "|", color=UNSEEN, ms=8, mew=2)
            self.state_points[name] = (
                ax_v.plot([], [], "o", color=SEEN, ms=3)[0],
                ax_v.plot([], [], "o", color=JUMP, ms=4)[0],
            )
            ax_v.set_ylim(N + 0.5, 0.5)
            ax_v.set_yticklabels([])
            values = np.concatenate(
                [np.asarray(getattr(t, name), dtype=np.float64).ravel() for t in self.traces.values()]
            )
            ax_v.set_xlim(*limits(values))
        ax_g.set_xlabel(_("running max $g_n$"))
        ax_s.set_xlabel(_("running sum $s_n$"))
        ax_g.legend(
            handles=[
                Line2D([], [], ls="none", marker="o", color=JUMP, ms=4, label=_("rows of the current tile")),
                Line2D([], [], ls="none", marker="o", color=SEEN, ms=3, label=_("other rows, so far")),
                Line2D([], [], ls="none", marker="|", color=UNSEEN, ms=8, mew=2, label=_("final value of the row")),
            ],
            title=_("row states"),
            title_fontsize=8,
            alignment="left",
            **LEGEND_ABOVE,
        )

        steps = np.arange(0, T + 1)
        top_bytes = [self.standard_bytes or 0]
        self.curves = {}
        for order, trace in self.traces.items():
            total = np.concatenate([[0], trace.hbm_bytes]) / 1e3
            top_bytes.append(total[-1] * 1e3)
            ax_c.plot(steps, total, color=ORDER_COLORS[order], lw=1, alpha=FADED)  # the whole run, faint
            self.curves[order] = ax_c.plot([], [], "-", color=ORDER_COLORS[order], lw=2)[0]
        self.curve_dot = ax_c.plot([], [], "o", color="k", ms=5, clip_on=False)[0]  # the last step sits on the edge
        if self.standard_bytes:
            ax_c.axhline(self.standard_bytes / 1e3, color="k", ls="--", lw=1)
        ax_c.set_xlim(0, T)
        top = 1.08 * max(top_bytes)
        if self.standard_bytes:  # the dashed line below the legend's row, not behind it (review rev-d-08-4, ch8)
            top = max(top, self.standard_bytes / 0.7)
        ax_c.set_ylim(0, top / 1e3)
        ax_c.set_xlabel(_("tile steps $t$"))
        ax_c.set_ylabel(_("kB moved"))
        handles = [Line2D([], [], color=ORDER_COLORS[o], lw=2, label=o) for o in self.traces]
        if self.standard_bytes:
            handles.append(Line2D([], [], color="k", ls="--", lw=1, label=_("standard attention")))
        # one row in the empty top left corner, above the curves and off the rising fa2 curve (review rev11-b, ch6)
        legend = ax_c.legend(handles=handles, loc="upper left", ncol=len(handles), fontsize=8)
        # each order's swatch drawn as its curve is: the order shown bold, the other faint and thin (its whole run)
        self.order_swatches = dict(zip(self.traces, legend.get_lines(), strict=False))

        ypos = np.arange(len(ARRAYS))
        self.byte_bars = ax_b.barh(ypos, np.zeros(len(ARRAYS)), color=SEEN, height=0.6)
        self.byte_totals = ax_b.barh(ypos, np.zeros(len(ARRAYS)), fill=False, ec="k", lw=0.8, height=0.6)
        ax_b.set_yticks(ypos, [_(a) for a in ARRAYS], fontsize=8)
        ax_b.invert_yaxis()
        ax_b.set_xlim(0, 1.1 * max(self._by_array(t, len(t)).max() for t in self.traces.values()) / 1e3)
        ax_b.set_xlabel(_("kB moved so far, per array (outline: whole run)"))
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(
            self.tile_mesh,
            self.band,
            self.current,
            *[p for pair in self.state_points.values() for p in pair],
            *self.curves.values(),
            legend,
            self.curve_dot,
            self.byte_bars,
            self.byte_totals,
            self.title,
        )

    def _update(self, step, order) -> None:
        if order not in self.traces:
            raise ValueError(f"order must be one of {list(self.traces)}, got {order!r}")
        trace = self.traces[order]
        T = len(trace)
        t = index(step, "step t", T + 1, f" (the sweep has {T} tile steps)")
        status = np.zeros(trace.grid)
        for k in range(t):
            status[tuple(trace.tiles[k])] = SKIPPED if trace.skipped[k] else DONE
        if t and not trace.skipped[t - 1]:  # a skipped current tile stays grey, outlined in red like any current one
            status[tuple(trace.tiles[t - 1])] = CURRENT
        self.tile_mesh.set_array(status.ravel())

        if t:
            (r0, r1), (c0, c1) = trace.rows[t - 1], trace.cols[t - 1]
            self.current.set_bounds(c0 + 0.5, r0 + 0.5, c1 - c0, r1 - r0)
            if order == "fa2":  # the query tile, its accumulator and row states stay on chip
                self.band.set_bounds(0.5, r0 + 0.5, self.M, r1 - r0)
            else:  # the key and value tile stays on chip while the query tiles stream past
                self.band.set_bounds(c0 + 0.5, 0.5, c1 - c0, self.N)
        else:
            self.current.set_bounds(0, 0, 0, 0)
            self.band.set_bounds(0, 0, 0, 0)

        rows = np.arange(1, self.N + 1)
        in_tile = np.zeros(self.N, dtype=bool)
        if t:
            in_tile[trace.rows[t - 1, 0] : trace.rows[t - 1, 1]] = True
        for name, (points, current) in self.state_points.items():
            values = finite_or_nan(getattr(trace, name)[t - 1]) if t else np.full(self.N, np.nan)
            if name == "s" and t:
                values = np.where(values == 0, np.nan, values)  # s = 0: no key seen yet, nothing to draw
            points.set_data(values[~in_tile], rows[~in_tile])
            current.set_data(values[in_tile], rows[in_tile])

        for name, line in self.curves.items():
            total = np.concatenate([[0], self.traces[name].hbm_bytes]) / 1e3
            line.set_data(np.arange(t + 1), total[: t + 1]) if name == order else line.set_data([], [])
        for name, swatch in self.order_swatches.items():
            swatch.set_alpha(1.0 if name == order else FADED)
            swatch.set_linewidth(2 if name == order else 1)
        self.curve_dot.set_data([t], [(trace.hbm_bytes[t - 1] if t else 0) / 1e3])
        now, whole = self._by_array(trace, t), self._by_array(trace, T)
        for bar, outline, value, total in zip(self.byte_bars, self.byte_totals, now / 1e3, whole / 1e3, strict=False):
            bar.set_width(value)
            bar.set_facecolor(ORDER_COLORS[order])
            outline.set_width(total)

        where = (
            _("nothing done yet")
            if t == 0
            else (
                _("step $t$ = {t} of {T}: query tile $i$ = {i}, key tile $j$ = {j}").format(
                    t=t, T=T, i=trace.tiles[t - 1, 0] + 1, j=trace.tiles[t - 1, 1] + 1
                )
                + (_(" (skipped)") if trace.skipped[t - 1] else "")
            )
        )
        moved = (trace.hbm_bytes[t - 1] if t else 0) / 1e3
        self.title.set_text(
            _("{order}, $B_r$ = {block_q}, $B_c$ = {block_k}: {where}; {moved:.1f} kB moved").format(
                order=_(ORDER_NAMES[order]), block_q=trace.block_q, block_k=trace.block_k, where=where, moved=moved
            )
        )


def plot_tile_sweep_step(traces: dict, step: int, *, order=None, scores=None, standard_bytes=None, figsize=(10.0, 6.6)):
    """A static picture of :class:`TileSweepPlot` after ``step`` tile steps (a pyplot figure, shown by Jupyter)."""
    return TileSweepPlot(
        traces, scores=scores, standard_bytes=standard_bytes, step=step, order=order, figsize=figsize, pyplot=True
    ).fig


def plot_sram_sweep(sweeps, *, figsize=(7.5, 4.2)):
    """HBM traffic of the tiled orders against on-chip memory size (log-log), with Theorem 2's slope and the
    standard algorithm's traffic; a static pyplot figure. The x axis has a tick at every size swept, and a line
    marks an A100's 164 KiB of shared memory when the sizes span it.

    Args:
        sweeps: :class:`flashmath.SramSweep` objects (one per order) from :func:`flashmath.sram_sweep` over the same
            sizes and problem.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    sweeps = list(sweeps)
    if not sweeps:
        raise ValueError("sweeps must hold at least one SramSweep")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    kib = sweeps[0].sram_bytes / 1024
    for sweep in sweeps:
        blocks = _("Algorithm 1: large key tile") if sweep.order == "fa1" else _("large query tile")
        ax.loglog(
            kib,
            sweep.hbm_bytes / 1e6,
            "o-",
            color=ORDER_COLORS[sweep.order],
            ms=4,
            label=_("{order} ({blocks})").format(order=sweep.order, blocks=blocks),
        )
    theta = sweeps[0].theta_bytes
    anchor = sweeps[0].hbm_bytes[0] / theta[0]
    ax.loglog(kib, anchor * theta / 1e6, color="k", lw=0.8, ls=":", label=_(r"$\propto N^2 D^2 / S$ (Theorem 2)"))
    ax.axhline(sweeps[0].standard_bytes / 1e6, color="k", ls="--", lw=1, label=_("standard ($X$, $Y$ in HBM)"))
    ax.set_xticks(kib, [f"{k:g}" for k in kib], minor=False)  # a tick at every size swept
    ax.xaxis.set_minor_locator(NullLocator())
    if kib[0] <= A100_SHARED_KIB <= kib[-1]:
        ax.axvline(A100_SHARED_KIB, color="0.5", lw=1, ls="-.", label=_("an A100's 164 KiB of shared memory"))
    ax.set_xlabel(_("on-chip memory $S$ per SM (KiB)"))
    ax.set_ylabel(_("HBM reads + writes (MB)"))
    ax.legend(fontsize=8)
    return fig


def plot_op_counts(
    counts: dict, *, names=("exp", "multiply", "divide", "add", "subtract", "maximum"), figsize=(7.5, 3.4)
):
    """Element operations per score of each loop, side by side (a static pyplot figure).

    Args:
        counts: ``{label: OpCount}`` from :func:`flashmath.count_ops`.
        names: the operations to show, in order.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    if not counts:
        raise ValueError("counts must hold at least one OpCount")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    width = 0.8 / len(counts)
    colors = [ORDER_COLORS.get(label.split()[0], UNSEEN) for label in counts]
    for k, (label, count) in enumerate(counts.items()):
        xs = np.arange(len(names)) + (k - (len(counts) - 1) / 2) * width
        bars = ax.bar(xs, [count.per_score(n) for n in names], width, color=colors[k], label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=10)
    ax.set_xticks(np.arange(len(names)), op_labels(names))
    ax.set_ylabel(_("operations per score"))
    ax.set_ylim(top=ax.get_ylim()[1] * 1.08)  # room for the tallest bar's label
    ax.legend(fontsize=10)
    return fig


def plot_masks(masks: dict, *, columns: int = 2, figsize=None):
    """Boolean masks drawn side by side (attend = dark), one panel each with its title, and a colour key above them
    (a static pyplot figure).

    Args:
        masks: ``{title: (N, M) boolean array}``.
        columns: panels per row.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    if not masks:
        raise ValueError("masks must hold at least one mask")
    rows = -(-len(masks) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=figsize or (3.2 * columns, 2.6 * rows), layout="constrained", squeeze=False
    )
    from matplotlib.patches import Patch

    cmap, norm = plt.get_cmap("Blues"), plt.Normalize(vmin=-0.3, vmax=1.2)
    for ax, (title, mask) in zip(axes.ravel(), masks.items(), strict=False):
        mask = np.asarray(mask, dtype=bool)
        N, M = mask.shape
        ax.imshow(mask, cmap=cmap, norm=norm, extent=(0.5, M + 0.5, N + 0.5, 0.5))
        ax.set_xticks(np.arange(1, M + 1))
        ax.set_yticks(np.arange(1, N + 1))
        ax.set_xticks(np.arange(0.5, M + 1), minor=True)
        ax.set_yticks(np.arange(0.5, N + 1), minor=True)
        ax.grid(which="minor", color="w", lw=1)
        ax.tick_params(which="minor", length=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(_("key $m$"), fontsize=8)
        ax.set_ylabel(_("query $n$"), fontsize=8)
    for ax in axes.ravel()[len(masks) :]:
        ax.set_visible(False)
    key = [Patch(color=cmap(norm(1)), label=_("attended")), Patch(color=cmap(norm(0)), label=_("masked"))]
    fig.legend(handles=key, loc="outside upper center", ncols=2, fontsize=8, frameon=False)
    return fig
