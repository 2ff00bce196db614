"""Chapters 3-5: why 1/sqrt(D), the loop swap, and the one loop of FlashAttention, key by key."""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from flashmath._checks import integer
from flashmath.i18n import gettext as _
from flashmath.viz.axes import check_dims, check_labels, finite_or_nan, index, limits, recolor, set_heights, top
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DIM_COLORS, DPI, HOLD, JUMP, LEGEND_ABOVE, SEEN, UNSEEN

__all__ = [
    "LoopSwapPlot",
    "OneLoopPlot",
    "ScalePlot",
    "plot_loop_swap_step",
    "plot_one_loop_step",
    "plot_partial_and_prefix",
    "plot_scale_step",
]

RAW = "#ff7f0e"  # unscaled scores
SCALED = SEEN  # scores divided by sqrt(D)
FINAL = "k"
HIST_FLOOR = 1e-5  # empty histogram bins sit below the log axis


class ScalePlot(LivePlot):
    """Scores of random unit-variance ``q, k`` for the head dimension ``D = sweep.dims[i]``, with and without scale.

    Four panels: the histogram of ``q . k`` and ``q . k / sqrt(D)`` for this ``D``; over all ``D`` (log axis) the
    standard deviation of the scores, the mean largest softmax probability of a row, and the mean entropy of a
    row's softmax (``log M`` = uniform), with a dotted line at the current ``D``. ``update(D=...)``, one of
    ``sweep.dims``.

    Args:
        sweep: from :func:`flashmath.scale_sweep`.
        D: the head dimension shown first (default: the first of ``sweep.dims``).
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: ``D`` not in ``sweep.dims``. TypeError: ``D`` not an integer, ``sweep`` not a ScaleSweep.
    """

    def __init__(self, sweep, *, D: int | None = None, figsize=(9.0, 5.6), dpi: int = DPI, pyplot: bool = False):
        if not hasattr(sweep, "dims"):
            raise TypeError(f"sweep must come from flashmath.scale_sweep, got {type(sweep).__name__}")
        self.sweep = sweep
        self.dims = [int(d) for d in sweep.dims]
        reach = float(np.abs(sweep.raw).max())
        reach_scaled = float(np.abs(sweep.scaled).max())
        self.edges_raw = np.linspace(-reach, reach, 81)
        self.edges_scaled = np.linspace(-reach_scaled, reach_scaled, 41)
        # every histogram once, outside the updates: a step only swaps the heights
        self.hist_raw = [np.histogram(r, bins=self.edges_raw, density=True)[0] for r in sweep.raw]
        self.hist_scaled = [np.histogram(r, bins=self.edges_scaled, density=True)[0] for r in sweep.scaled]
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, D=self.dims[0] if D is None else D)

    def _build(self) -> None:
        sweep = self.sweep
        dims = np.asarray(sweep.dims, dtype=np.float64)
        std_raw, std_scaled = sweep.std()
        axes = self.fig.subplots(2, 2)
        ax_h, ax_std = axes[0]
        ax_p, ax_e = axes[1]

        self.stairs_raw = ax_h.stairs(
            np.full(len(self.edges_raw) - 1, HIST_FLOOR),
            self.edges_raw,
            fill=True,
            baseline=HIST_FLOOR,
            color=RAW,
            alpha=0.75,
            label="$q \\cdot k$",
        )
        self.stairs_scaled = ax_h.stairs(
            np.full(len(self.edges_scaled) - 1, HIST_FLOOR),
            self.edges_scaled,
            fill=True,
            baseline=HIST_FLOOR,
            color=SCALED,
            alpha=0.6,
            label="$q \\cdot k / \\sqrt{D}$",
        )
        ax_h.set_xlim(self.edges_raw[0], self.edges_raw[-1])
        ax_h.set_yscale("log")
        ax_h.set_ylim(1e-4, 5.0)
        ax_h.set_xlabel(_("score"))
        ax_h.set_ylabel(_("density (log)"))
        self.hist_title = ax_h.set_title("", fontsize=10)
        ax_h.legend(loc="upper right", fontsize=8)

        self.markers: list = []

        def over_d(ax, raw, scaled, ylabel):
            ax.plot(dims, raw, "o-", color=RAW, ms=4, label=_("unscaled"))
            ax.plot(dims, scaled, "s-", color=SCALED, ms=4, label=_("scaled by $1/\\sqrt{D}$"))
            self.markers.append(ax.axvline(dims[0], color="k", ls=":", lw=1))
            ax.set_xscale("log", base=2)
            ax.set_xlim(dims[0] / 1.4, dims[-1] * 1.4)
            ax.set_xlabel(_("head dimension D"))
            ax.set_ylabel(ylabel)

        over_d(ax_std, std_raw, std_scaled, _("std of scores"))
        ax_std.plot(dims, np.sqrt(dims), color="k", lw=0.8, ls="--", label="$\\sqrt{D}$")
        ax_std.set_yscale("log", base=2)
        std_all = np.concatenate([std_raw, std_scaled, np.sqrt(dims)])
        ax_std.set_ylim(std_all.min() / 1.4, std_all.max() * 1.4)
        ax_std.legend(loc="upper left", fontsize=8)
        over_d(ax_p, sweep.max_prob_raw.mean(axis=1), sweep.max_prob_scaled.mean(axis=1), _("mean max probability"))
        ax_p.set_ylim(0, 1.05)
        ax_p.legend(loc="upper left", fontsize=8)
        log_m = float(np.log(sweep.n_keys))
        over_d(ax_e, sweep.entropy_raw.mean(axis=1), sweep.entropy_scaled.mean(axis=1), _("mean entropy (nats)"))
        ax_e.axhline(log_m, color="k", lw=0.8, ls="--", label=_("uniform, log M = {log_m:.2f}").format(log_m=log_m))
        ax_e.set_ylim(0, 1.12 * log_m)
        ax_e.legend(ncol=3, **LEGEND_ABOVE)  # above the axes: inside, any corner covers a curve for some D
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(self.stairs_raw, self.stairs_scaled, ax_h.get_legend(), self.hist_title, *self.markers, self.title)

    def _update(self, D) -> None:
        sweep = self.sweep
        D = integer(D, "D")
        if D not in self.dims:
            raise ValueError(f"D must be one of sweep.dims = {self.dims}, got {D}")
        i = self.dims.index(D)
        std_raw, std_scaled = sweep.std()
        self.stairs_raw.set_data(np.maximum(self.hist_raw[i], HIST_FLOOR))
        self.stairs_scaled.set_data(np.maximum(self.hist_scaled[i], HIST_FLOOR))
        self.hist_title.set_text(_("scores at D = {D}").format(D=D))
        for marker in self.markers:
            marker.set_xdata([D, D])
        self.title.set_text(
            _(
                "D = {D}: score std {raw:.2f} unscaled, {scaled:.2f} scaled; max probability "
                "{p_raw:.2f} vs {p_scaled:.2f}"
            ).format(
                D=D,
                raw=std_raw[i],
                scaled=std_scaled[i],
                p_raw=sweep.max_prob_raw[i].mean(),
                p_scaled=sweep.max_prob_scaled[i].mean(),
            )
        )


class LoopSwapPlot(LivePlot):
    """Row ``row`` of ``A = Y V`` in the swapped order ``for n: for m: for d``, after the first ``m`` keys.

    Top: the weights ``Y[n, :]`` over the keys ``m = 1..M`` (the ones already added in colour, key ``m`` circled).
    Bottom: the row of partial sums over ``d`` (bars), the term just added, ``Y[n, m-1] V[m-1, :]`` in code's
    0-based indices (a narrow red bar from the previous partial sum to the new one, as tall as the term), and the
    final row ``A[n, :]`` (black dashes, drawn over the red). ``update(step=m)``, ``0 <= m <= M``.

    Args:
        trace: from :func:`flashmath.loop_swap_trace`.
        row: the query row ``n`` (0-based).
        labels: optional key labels (tokens), length ``M``.
        step: the number of keys added at first.
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: ``m`` or ``row`` out of range, ``labels`` of the wrong length. TypeError: not integers.
    """

    def __init__(
        self,
        trace,
        *,
        row: int = 0,
        labels=None,
        step: int = 0,
        figsize=(9.0, 5.2),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        self.y = np.asarray(trace.y, dtype=np.float64)
        self.v = np.asarray(trace.v, dtype=np.float64)
        self.partial = np.asarray(trace.partial, dtype=np.float64)
        N, M = self.y.shape
        self.row = index(row, "row", N, f" (y has N = {N} rows)")
        self.labels = check_labels(labels, M, "key")
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step)

    def __len__(self) -> int:
        return self.y.shape[1]

    def _build(self) -> None:
        n = self.row
        M, Dv = self.y.shape[1], self.v.shape[1]
        keys = np.arange(1, M + 1)
        self.ax_y, self.ax_a = self.fig.subplots(2, 1, height_ratios=[1, 1.4])
        ax_y, ax_a = self.ax_y, self.ax_a
        self.y_bars = ax_y.bar(keys, self.y[n], color=UNSEEN, width=0.7)
        (self.current,) = ax_y.plot([], [], "o", ms=9, mfc="none", mec="k")
        ax_y.set_xlim(0.4, M + 0.6)
        ax_y.set_ylim(0, top(self.y[n]))
        ax_y.set_ylabel(f"Y[{n}, :]")
        if self.labels is not None:
            ax_y.set_xticks(keys, self.labels, rotation=90, fontsize=8)  # 9 pixels high at 80 dpi
        else:
            ax_y.set_xlabel(_("key m (1..M)"))

        dd = np.arange(Dv)
        self.a_bars = ax_a.bar(dd, np.zeros(Dv), color=SEEN, width=0.75)
        # key m's term, from A_{m-1} to A_m: as tall as the term, narrower than the bars, so that it shows inside a
        # bar where the term made it longer and outside where the term made it shorter
        self.added_bars = ax_a.bar(dd, np.zeros(Dv), color=JUMP, width=0.3)
        (self.final_ticks,) = ax_a.plot(dd, self.partial[n, -1], "_", color=FINAL, ms=12, mew=1.5)
        ax_a.axhline(0, color="k", lw=0.5)
        ax_a.set_ylim(*limits(np.concatenate([self.partial[n].ravel(), [0.0]])))
        ax_a.set_xlim(-0.6, Dv - 0.4)
        ax_a.set_xlabel(_("output dimension d (0-based)"))
        ax_a.set_ylabel(f"A[{n}, d]")
        ax_a.legend(
            handles=[
                Patch(color=SEEN, label=_("partial sums of the first m keys")),
                Patch(color=JUMP, label=_("just added: key m's term")),
                Line2D([], [], color=FINAL, ls="", marker="_", ms=12, mew=1.5, label=_("final A[{n}, :]").format(n=n)),
            ],
            ncol=3,
            **LEGEND_ABOVE,
        )
        self.title = self.fig.suptitle("", fontsize=11)
        # the final row's dashes after the red bars, so that a term ending at the final value does not hide its dash
        self.live(self.y_bars, self.current, self.a_bars, self.added_bars, self.final_ticks, self.title)

    def _update(self, step) -> None:
        n = self.row
        M, Dv = self.y.shape[1], self.v.shape[1]
        m = index(step, "m", M + 1, " (keys added so far)")
        keys = np.arange(1, M + 1)
        final = self.partial[n, -1]
        current = self.partial[n, m - 1] if m > 0 else np.zeros(Dv)
        recolor(self.y_bars, np.where(keys <= m, SEEN, UNSEEN))
        self.current.set_data(keys[m - 1 : m], self.y[n, m - 1 : m])
        set_heights(self.a_bars, finite_or_nan(current))
        added = self.y[n, m - 1] * self.v[m - 1] if m > 0 else np.zeros(Dv)
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, drawn as nothing
            previous = finite_or_nan(current - added)
        for bar, bottom, height in zip(self.added_bars, previous, finite_or_nan(added), strict=True):
            bar.set_y(bottom)
            bar.set_height(height)
        with np.errstate(invalid="ignore"):  # inf - inf: the distance is NaN, and the title says so
            dist = float(np.max(np.abs(current - final)))
        seen = (_("{m} key") if m == 1 else _("{m} keys")).format(m=m)
        self.title.set_text(
            _(r"loop order $n \to m \to d$, row [{n}]: after {keys} of {M}, max |partial - A| = {dist:.3g}").format(
                n=n, keys=seen, M=M, dist=dist
            )
        )


LABEL_SIZE = 9  # points: a token label about 10 pixels high at the course's 80 dots per inch
LABEL_GAP = 13  # pixels between two rotated token labels, so that they do not overlap
LEFT_COLUMN = 0.45  # the share of the figure's width the left column's axes take (width ratios 1.15 : 1, margins)


def labelled_keys(g, pixels_per_key: float) -> list[int]:
    """The keys ``m`` (1-based) that get a token label under the one-loop plot.

    Every key when the labels are at least :data:`LABEL_GAP` pixels apart; otherwise the first key and the keys
    where the running max ``g`` jumped, skipping any closer than that to the last one kept.
    """
    M = len(g)
    if pixels_per_key >= LABEL_GAP:
        return list(range(1, M + 1))
    gap = int(np.ceil(LABEL_GAP / pixels_per_key))  # keys between two labels
    with np.errstate(invalid="ignore"):  # NaN or inf - inf in a trace: no jump
        jumps = [1] + [m for m in range(2, M + 1) if g[m - 1] > g[m - 2]]
    keys: list[int] = []
    for m in jumps:
        if not keys or m - keys[-1] >= gap:
            keys.append(m)
    return keys


class OneLoopPlot(LivePlot):
    """The merged loop of chapter 5 on one query row, after the first ``m`` keys.

    Left, over the keys ``m = 1..M``: the scores ``x_m`` and the running max ``g_m``; the correction factor
    ``s_{m-1} e^{g_{m-1} - g_m} / s_m`` applied to the old output (red where the max jumped) and the weight
    ``e^{x_m - g_m} / s_m`` of the new value; the running sum ``s_m``. Right, over the keys seen ``m = 0..M``: a few
    output dimensions of ``A'_m`` against their final values ``A`` (dashed), and the distance ``||A'_m - A||``.
    Both columns share one x axis, so key ``m`` sits above ``A'_m``, the output after it. ``update(step=m)``.

    Args:
        trace: from :func:`flashmath.one_loop_trace` of 2-D inputs (no batch dimensions).
        row: the query row ``n`` (0-based) of the trace.
        dims: the output dimensions of ``A'`` to draw, 1 to 5 of ``0..Dv-1`` (default: the first ``min(3, Dv)``).
        labels: optional key labels (tokens), length ``M``: under every key when there is room, else (a long
            row in a small figure) under the first key and the keys where the max jumped, as ``m token``.
        step: the number of keys seen at first.
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: a trace with batch dimensions; ``m``, ``row`` or ``dims`` out of range; bad ``labels``.
        TypeError: ``m``, ``row`` or an entry of ``dims`` not an integer.
    """

    def __init__(
        self,
        trace,
        *,
        row: int = 0,
        dims=None,
        labels=None,
        step: int = 0,
        figsize=(10.0, 6.6),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        x_all = np.asarray(trace.x, dtype=np.float64)
        if x_all.ndim != 2:
            raise ValueError(f"OneLoopPlot needs a trace of 2-D inputs (M, N); got x of shape {x_all.shape}")
        M, N = x_all.shape
        self.row = index(row, "row", N, f" (the trace has N = {N} query rows)")
        self.a = np.asarray(trace.a, dtype=np.float64)[:, self.row]  # (M, Dv)
        self.dims = check_dims(dims, self.a.shape[1])
        self.labels = check_labels(labels, M, "key")
        self.x = x_all[:, self.row]
        self.g = np.asarray(trace.g, dtype=np.float64)[:, self.row]
        self.s = np.asarray(trace.s, dtype=np.float64)[:, self.row]
        self.corr = np.asarray(trace.correction, dtype=np.float64)[:, self.row]
        self.weight = np.asarray(trace.weight, dtype=np.float64)[:, self.row]
        self.target = np.asarray(trace.target, dtype=np.float64)[self.row]  # (Dv,)
        with np.errstate(invalid="ignore"):  # inf - inf in a trace of inf inputs: NaN, not drawn
            self.dist = np.linalg.norm(self.a - self.target, axis=1)  # (M,)
            self.dist_0 = float(np.linalg.norm(self.target))  # ||A'_0 - A|| = ||A||
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step)

    def __len__(self) -> int:
        return len(self.x)

    def _pixels_per_key(self) -> float:
        """About how many (CSS) pixels apart two keys are on the left column's x axis."""
        width = self.fig.get_size_inches()[0] * self.dpi * LEFT_COLUMN
        return width / (len(self.x) + 1.2)

    def _build(self) -> None:
        M = len(self.x)
        steps = np.arange(1, M + 1)
        axd = self.fig.subplot_mosaic([["x", "a"], ["c", "a"], ["s", "dist"]], width_ratios=[1.15, 1])
        ax_x, ax_c, ax_s, ax_a, ax_d = axd["x"], axd["c"], axd["s"], axd["a"], axd["dist"]
        for ax in (ax_x, ax_c, ax_s, ax_a, ax_d):
            ax.set_xlim(-0.6, M + 0.6)  # one x axis for both columns: key m (left) above A'_m (right)

        self.x_bars = ax_x.bar(steps, finite_or_nan(self.x), color=UNSEEN, width=0.7)
        (self.g_line,) = ax_x.step([], [], where="mid", color=JUMP, lw=2)
        ax_x.axhline(0, color="k", lw=0.5)
        ax_x.set_ylim(*limits(np.concatenate([self.x, self.g])))
        ax_x.set_ylabel(_("score"))
        ax_x.legend(
            handles=[
                Patch(color=SEEN, label=_("score $x_m$ (seen)")),
                Patch(color=UNSEEN, label=_("not seen yet")),
                Line2D([], [], color=JUMP, lw=2, label=_("running max $g_m$")),
            ],
            ncol=3,
            **LEGEND_ABOVE,
        )

        self.c_bars = ax_c.bar(steps, np.zeros(M), color=HOLD, width=0.7)
        (self.w_marks,) = ax_c.plot([], [], "o", color=SEEN, ms=6)
        ax_c.set_ylim(0, 1.15)
        ax_c.set_ylabel(_("factor"))
        ax_c.legend(
            handles=[
                Patch(color=HOLD, label=_("correction of $A'_{m-1}$, max held")),
                Patch(color=JUMP, label=_("max jumped")),
                Line2D([], [], color=SEEN, marker="o", ls="", ms=6, label=_("weight of $V_m$")),
            ],
            ncol=3,
            **LEGEND_ABOVE,
        )

        (self.s_line,) = ax_s.plot([], [], "o-", color=SEEN, ms=5)
        if np.isfinite(self.s[-1]):
            ax_s.axhline(self.s[-1], color="k", ls="--", lw=1)
        ax_s.set_ylim(0, top(self.s))
        ax_s.set_ylabel(_("running sum $s_m$"))
        ax_s.legend(
            handles=[Line2D([], [], color="k", ls="--", lw=1, label=f"$s_M$ = {self.s[-1]:.3g}")],
            loc="lower right",
            fontsize=8,
        )
        if self.labels is None:
            ax_s.set_xlabel(_("key m (1..M)"))
        else:
            keys = labelled_keys(self.g, self._pixels_per_key())
            if len(keys) == M:  # room for every token
                ax_s.set_xticks(steps, self.labels, rotation=90, fontsize=LABEL_SIZE)
            else:  # too many to read: the first key and the keys where the max jumped, as "m token"
                ax_s.set_xticks(keys, [f"{m} {self.labels[m - 1]}" for m in keys], rotation=90, fontsize=LABEL_SIZE)
                ax_s.set_xlabel(_("key m: the first token and the tokens where the max jumped"), fontsize=9)

        self.a_lines = []
        for color, d in zip(DIM_COLORS, self.dims, strict=False):
            if np.isfinite(self.target[d]):
                ax_a.axhline(self.target[d], color=color, ls="--", lw=1)
            self.a_lines.append(ax_a.plot([], [], "o-", color=color, ms=3, lw=1.2, label=f"$A'_m$[{d}]")[0])
        ax_a.set_ylim(*limits(np.concatenate([self.a[:, self.dims].ravel(), self.target[self.dims], [0.0]])))
        ax_a.set_ylabel(_("output (dashed: final A)"))
        ax_a.legend(ncol=len(self.dims), **LEGEND_ABOVE)

        (self.d_line,) = ax_d.plot([], [], "o-", color=SEEN, ms=3)
        ax_d.axhline(0, color="k", lw=0.5)
        d_top = top(np.append(self.dist, self.dist_0))
        ax_d.set_ylim(-0.05 * d_top / 1.1, d_top)
        ax_d.set_ylabel("$\\|A'_m - A\\|$")
        ax_d.set_xlabel(_("keys seen m (0 = none)"))
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(
            self.x_bars,
            self.g_line,
            self.c_bars,
            self.w_marks,
            self.s_line,
            ax_s.get_legend(),
            *self.a_lines,
            self.d_line,
            self.title,
        )

    def _update(self, step) -> None:
        M = len(self.x)
        m = index(step, "m", M + 1, " (keys seen so far)")
        steps = np.arange(1, M + 1)
        seen = steps <= m
        jumped = np.concatenate([[False], self.g[1:] > self.g[:-1]])
        recolor(self.x_bars, np.where(seen, SEEN, UNSEEN))
        self.g_line.set_data(steps[:m], self.g[:m])
        set_heights(self.c_bars, np.where(seen, self.corr, 0.0))
        recolor(self.c_bars, np.where(jumped, JUMP, HOLD))
        self.w_marks.set_data(steps[:m], self.weight[:m])
        self.s_line.set_data(steps[:m], self.s[:m])
        upto = np.arange(m + 1)
        for line, d in zip(self.a_lines, self.dims, strict=False):
            line.set_data(upto, np.concatenate([[0.0], self.a[:m, d]]))
        self.d_line.set_data(upto, np.concatenate([[self.dist_0], self.dist[:m]]))
        if m == 0:
            title = _("m = 0: nothing seen, $g_0 = -\\infty$, $s_0 = 0$, $A'_0 = 0$")
        else:
            j = m - 1
            title = _(
                "m = {m}: $x_m$ = {x:.3g}, $g_m$ = {g:.3g}, $s_m$ = {s:.3g}, correction = {corr:.3g}, "
                "$\\|A'_m - A\\|$ = {dist:.2e}"
            ).format(m=m, x=self.x[j], g=self.g[j], s=self.s[j], corr=self.corr[j], dist=self.dist[j])
        self.title.set_text(title)


def plot_scale_step(sweep, i: int, *, figsize=(9.0, 5.6)):
    """A static picture of :class:`ScalePlot` at ``D = sweep.dims[i]`` (a pyplot figure, shown by Jupyter).

    Raises:
        ValueError: ``i`` out of range. TypeError: ``i`` not an integer.
    """
    i = index(i, "i", len(sweep), " (an index into sweep.dims)")
    return ScalePlot(sweep, D=int(sweep.dims[i]), figsize=figsize, pyplot=True).fig


def plot_loop_swap_step(trace, m: int, *, row: int = 0, labels=None, figsize=(9.0, 5.2), dpi: int = DPI):
    """A static picture of :class:`LoopSwapPlot` after ``m`` keys (a pyplot figure, shown by Jupyter), at ``dpi``."""
    return LoopSwapPlot(trace, row=row, labels=labels, step=m, figsize=figsize, dpi=dpi, pyplot=True).fig


def plot_one_loop_step(trace, m: int, *, row: int = 0, dims=None, labels=None, figsize=(10.0, 6.6)):
    """A static picture of :class:`OneLoopPlot` after ``m`` keys (a pyplot figure, shown by Jupyter)."""
    return OneLoopPlot(trace, row=row, dims=dims, labels=labels, step=m, figsize=figsize, pyplot=True).fig


def plot_partial_and_prefix(trace, v, d: int, *, row: int = 0, figsize=(9.0, 3.4)):
    """Chapter 4's partial sum ``A_m`` beside this chapter's prefix output ``A'_m``, one output dimension, key by key.

    ``A_m = sum_{i <= m} e^{x_i - g_M} / s_M V_i`` weighs every key with the whole row's max and sum;
    ``A'_m = c_m A_m``, with ``c_m = s_M e^{g_M - g_m} / s_m >= 1``, with those of keys ``1..m``. Left: both in
    dimension ``d``, with the final value ``A[row, d]`` dashed; right: ``c_m`` (log axis), which reaches 1 at
    ``m = M``. A static pyplot figure.

    Args:
        trace: :func:`flashmath.one_loop_trace` of the row (its ``x``, ``g``, ``s`` and ``a``).
        v: the value rows ``(M, Dv)`` the trace was run with.
        d: the output dimension shown. row: the row of the trace.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: ``d`` or ``row`` out of range, or ``v`` not of the trace's ``M`` rows.
    """
    import matplotlib.pyplot as plt

    v = np.asarray(v, dtype=np.float64)
    M = trace.x.shape[0]
    if v.ndim != 2 or v.shape[0] != M:
        raise ValueError(f"v must be (M, Dv) with the trace's M = {M} keys, got shape {v.shape}")
    row = index(row, "row", trace.x.shape[1])
    d = index(d, "d", v.shape[1])
    x, g, s = trace.x[:, row], trace.g[:, row], trace.s[:, row]
    partial = np.cumsum(np.exp(x - g[-1]) / s[-1] * v[:, d])  # A_m[d], chapter 4: against g_M and s_M
    prefix = trace.a[:, row, d]  # A'_m[d]: against g_m and s_m
    c = s[-1] * np.exp(g[-1] - g) / s  # c_m = A'_m / A_m
    m = np.arange(1, M + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=figsize, width_ratios=(3, 2), layout="constrained")
    left.plot(m, partial, "o-", ms=3, color=DIM_COLORS[0], label=_("$A_m$ (chapter 4: $g_M$, $s_M$)"))
    left.plot(m, prefix, "s-", ms=3, color=JUMP, label=_("$A'_m$ (this chapter: $g_m$, $s_m$)"))
    left.axhline(prefix[-1], color=FINAL, ls="--", lw=1, label=_("$A[n, d]$, the final value"))
    left.axhline(0, color="0.6", lw=0.6)
    left.set_xlabel(_("keys seen, m"))
    left.set_title(_("output dimension d = {d}").format(d=d), fontsize=10)
    left.legend(fontsize=9)
    right.semilogy(m, c, "o-", ms=3, color="0.3")
    right.axhline(1, color=FINAL, ls="--", lw=1)
    right.set_xlabel(_("keys seen, m"))
    right.set_title(_("$c_m = A'_m / A_m$ (1 at m = M)"), fontsize=10)
    return fig
