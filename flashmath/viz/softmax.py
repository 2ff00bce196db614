"""Chapters 1-2: the overflow of the direct softmax, and the online normalizer step by step."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from flashmath._checks import DTYPES
from flashmath.i18n import gettext as _
from flashmath.softmax import OnlineSoftmaxTrace, overflow_study
from flashmath.viz.axes import check_labels, finite_or_nan, index, limits, nice_limits, recolor, set_heights, top
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, HOLD, JUMP, LEGEND_ABOVE, SEEN, UNSEEN

__all__ = ["OnlineSoftmaxPlot", "OverflowPlot", "plot_online_softmax_step", "plot_overflow"]

OVERFLOW_DTYPES = tuple(name for name, dtype in DTYPES.items() if dtype.kind == "f")
"""The dtypes of the overflow explorer: the numpy ones among the course's :data:`flashmath._checks.DTYPES`."""
ZERO = "#ff7f0e"  # the direct softmax's silent zeros


LEGEND_9PT = {**LEGEND_ABOVE, "fontsize": 9}  # chapter 1's overflow legends: 9 pt, 10 px at the stored 80 dpi


def minus(text: str) -> str:
    """``text`` with its hyphen-minus signs as the minus sign U+2212, as the printed outputs write them."""
    return text.replace("-", "\u2212")


def dtype_name(dtype) -> str:
    """``dtype`` (a name or a numpy dtype) as one of :data:`OVERFLOW_DTYPES`; ValueError for any other."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = dtype
    if name not in OVERFLOW_DTYPES:
        raise ValueError(f"dtype must be one of {list(OVERFLOW_DTYPES)}, got {dtype!r}")
    return name


def plain_number(value: float) -> str:
    """``value`` to 3 significant digits, without e-notation up to 1e5: 1000 gives "1000", 1234.5 "1230", 0.5 "0.5"."""
    rounded = float(f"{value:.3g}")
    return f"{rounded:.6g}" if abs(rounded) <= 1e5 else f"{rounded:.3g}"


class OnlineSoftmaxPlot(LivePlot):
    """The online normalizer after step ``i``: three panels over the steps ``i = 1..N``.

    The inputs ``x_i`` with the running max ``g_i``; the rescale factor ``exp(g_{i-1} - g_i)`` (grey where it is 1,
    red where the max jumped and it is below 1, with a key); the running sum ``s_i`` against the true denominator
    ``s_N``. ``update(step=i)``, ``0 <= i <= N``
    (0 = nothing read yet).

    Args:
        trace: from :func:`flashmath.online_softmax_trace`.
        labels: optional tick labels for the elements (e.g. tokens), length ``N``.
        step: the step shown first.
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: ``step`` out of range, ``labels`` of the wrong length. TypeError: ``step`` not an integer.
    """

    def __init__(
        self,
        trace: OnlineSoftmaxTrace,
        *,
        labels=None,
        step: int = 0,
        figsize=(8.0, 6.0),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        self.trace = trace
        self.labels = check_labels(labels, len(trace), "element")
        self.x = np.asarray(trace.x, dtype=np.float64)
        self.g = np.asarray(trace.g, dtype=np.float64)
        self.s = np.asarray(trace.s, dtype=np.float64)
        self.r = np.asarray(trace.rescale, dtype=np.float64)
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step)

    def __len__(self) -> int:
        return len(self.trace)

    def _build(self) -> None:
        N = len(self.trace)
        steps = np.arange(1, N + 1)
        self.ax_x, self.ax_r, self.ax_s = self.fig.subplots(3, 1, sharex=True, height_ratios=[2, 1.2, 1.5])
        ax_x, ax_r, ax_s = self.ax_x, self.ax_r, self.ax_s

        self.x_bars = ax_x.bar(steps, finite_or_nan(self.x), color=UNSEEN, width=0.7)
        (self.g_line,) = ax_x.step([], [], where="mid", color=JUMP, lw=2)
        (self.current,) = ax_x.plot([], [], "o", ms=9, mfc="none", mec="k")
        ax_x.set_ylim(*limits(np.concatenate([self.x, self.g])))
        ax_x.axhline(0, color="k", lw=0.5)
        ax_x.set_ylabel(_("score $x_i$"))
        ax_x.legend(
            handles=[
                Patch(color=SEEN, label=_("$x_i$ read")),
                Patch(color=UNSEEN, label=_("not read yet")),
                Line2D([], [], color=JUMP, lw=2, label=_("running max $g_i$")),
                Line2D([], [], ls="", marker="o", ms=7, mfc="none", mec="k", label=_("current $x_i$")),
            ],
            ncol=4,
            **LEGEND_ABOVE,
        )

        self.r_bars = ax_r.bar(steps, np.zeros(N), color=HOLD, width=0.7)
        ax_r.axhline(1, color="k", lw=0.5, ls=":")
        ax_r.set_ylim(0, 1.65)  # room above the bars for the key
        ax_r.set_yticks([0, 1])
        ax_r.set_ylabel(_("rescale\nfactor"), linespacing=1.3)  # the two rotated lines must not touch
        ax_r.legend(
            handles=[
                Patch(color=HOLD, label=_("factor 1: the max held")),
                Patch(color=JUMP, label=_("factor < 1: the max jumped")),
            ],
            loc="upper left",
            ncol=2,
            fontsize=8,
            frameon=False,
            borderaxespad=0.2,
        )

        d = self.trace.denominator
        if np.isfinite(d):
            ax_s.axhline(d, color="k", ls="--", lw=1)
        (self.s_line,) = ax_s.plot([], [], "o-", color=SEEN, ms=4)
        ax_s.set_ylim(0, top(np.append(self.s, d)))
        ax_s.set_ylabel(_("running sum"))
        ax_s.set_xlabel(_("step $i$ (reads $x_i$)"))
        ax_s.legend(
            handles=[
                Line2D([], [], color=SEEN, marker="o", ms=4, label=_("running sum $s_i$")),
                Line2D([], [], color="k", ls="--", lw=1, label=_("denominator $s_N$ = {d:.4g}").format(d=d)),
            ],
            loc="lower right",
            fontsize=8,
        )
        ax_s.set_xlim(0.4, N + 1.0)  # room for the current-step circle at step N
        if self.labels is not None:
            ax_s.set_xticks(steps, self.labels, rotation=90, fontsize=8)
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(self.x_bars, self.g_line, self.current, self.r_bars, self.s_line, ax_s.get_legend(), self.title)

    def _update(self, step) -> None:
        N = len(self.trace)
        i = index(step, "step i", N + 1, f" (the vector has {N} elements)")
        steps = np.arange(1, N + 1)
        seen = steps <= i
        recolor(self.x_bars, np.where(seen, SEEN, UNSEEN))
        self.g_line.set_data(steps[:i], self.g[:i])
        self.current.set_data(steps[i - 1 : i], finite_or_nan(self.x[i - 1 : i]))
        set_heights(self.r_bars, np.where(seen, self.r, 0.0))
        recolor(self.r_bars, np.where(self.r < 1, JUMP, HOLD))
        self.s_line.set_data(steps[:i], self.s[:i])
        if i == 0:
            title = _("step 0: nothing read yet, $g_0 = -\\infty$, $s_0 = 0$")
        else:
            x, g, r, s = self.x[i - 1], self.g[i - 1], self.r[i - 1], self.s[i - 1]
            title = _("step $i$ = {i}: $x_i$ = {x}, $g_i$ = {g}, rescale = {r:.3f}, $s_i$ = {s:.4f}").format(
                i=i, x=minus(f"{x:.3f}"), g=minus(f"{g:.3f}"), r=r, s=s
            )
        self.title.set_text(title)


LOGSUMEXP_X = r"$\operatorname{logsumexp}(x)$"  # mathtext, as the chapter writes it


class OverflowPlot(LivePlot):
    """The direct softmax against the safe softmax of ``scale * x`` computed in ``dtype``.

    Top: ``scale * x`` in ``dtype`` (red crosses where ``exp`` overflowed to inf), the logsumexp of the vector and
    the overflow threshold ``ln(finfo(dtype).max)``: the direct formula fails once the logsumexp passes the
    threshold, since the sum overflows before any single term. Bottom: the probabilities of both versions; where
    the direct one gives NaN (an inf over inf) or a silent 0 (a finite term over an infinite sum) it is marked.
    ``update(scale=..., dtype=...)``.

    Args:
        x: 1-D array ``(L,)``.
        scale: multiplies ``x`` (a stand-in for larger logits). dtype: ``"float16"``, ``"float32"`` or ``"float64"``.
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: ``x`` not a non-empty 1-D vector, ``dtype`` not one of the three.
    """

    def __init__(
        self, x, *, scale: float = 1.0, dtype="float32", figsize=(8.0, 5.0), dpi: int = DPI, pyplot: bool = False
    ):
        self.x = np.array(x, dtype=np.float64)  # a private copy
        if self.x.ndim != 1 or self.x.size == 0:
            raise ValueError(f"x must be a non-empty 1-D vector, got shape {self.x.shape}")
        self._studies: dict = {}  # (scale, dtype name) -> flashmath.softmax.OverflowStudy
        self._first_scale = scale  # with the slider's scales, where _reserve_label_room looks for the widest ticks
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, scale=scale, dtype=dtype)

    def _build(self) -> None:
        L = self.x.size
        steps = np.arange(1, L + 1)
        self.ax_e, self.ax_y = self.fig.subplots(2, 1, sharex=True)
        ax_e, ax_y = self.ax_e, self.ax_y
        self.x_bars = ax_e.bar(steps, np.zeros(L), color=SEEN, width=0.7)
        (self.inf_marks,) = ax_e.plot([], [], "x", color=JUMP, ms=9)
        self.limit_line = ax_e.axhline(0, color=JUMP, ls="--", lw=1)
        self.lse_line = ax_e.axhline(0, color="k", ls=":", lw=1.2)
        ax_e.set_ylabel("$x_i$")
        self._reserve_label_room(L)
        ax_e.legend(
            handles=[
                Patch(color=SEEN, label=_("$x_i$ in the dtype")),
                (Patch(color=JUMP), Line2D([], [], color=JUMP, ls="", marker="x", ms=8)),
                Line2D([], [], color="k", ls=":", lw=1.2, label=LOGSUMEXP_X),
                Line2D([], [], color=JUMP, ls="--", lw=1, label=_("ln(max of the dtype)")),
            ],
            labels=[_("$x_i$ in the dtype"), _("red bar: exp($x_i$) = inf"), LOGSUMEXP_X, _("ln(max of the dtype)")],
            handler_map={tuple: HandlerTuple(ndivide=None)},  # the red bar and the cross above it, side by side
            ncol=4,
            **LEGEND_9PT,
        )

        width = 0.4
        self.direct_bars = ax_y.bar(steps - width / 2, np.zeros(L), width, color=HOLD, edgecolor="k", lw=0.4)
        self.safe_bars = ax_y.bar(steps + width / 2, np.zeros(L), width, color=SEEN)
        (self.nan_marks,) = ax_y.plot([], [], "v", color=JUMP, ms=7)
        (self.zero_marks,) = ax_y.plot([], [], "o", color=ZERO, ms=5, mfc="none", mew=1.5)
        ax_y.set_ylim(-0.06, 1.05)
        ax_y.axhline(0, color="k", lw=0.5)
        ax_y.set_ylabel(_("probability"))
        ax_y.set_xlabel(_("element $i$"))
        ax_y.legend(
            handles=[
                Patch(color=HOLD, label=_("direct softmax (a grey bar; none where NaN or 0)")),
                Patch(color=SEEN, label=_("safe softmax")),
                Line2D([], [], color=JUMP, ls="", marker="v", ms=7, label=_("direct gives NaN (inf / inf)")),
                Line2D(
                    [],
                    [],
                    color=ZERO,
                    ls="",
                    marker="o",
                    ms=5,
                    mfc="none",
                    mew=1.5,
                    label=_("direct gives 0, safe not (finite / inf, underflow)"),
                ),
            ],
            ncol=2,
            **LEGEND_9PT,
        )
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(
            self.x_bars,
            self.inf_marks,
            self.limit_line,
            self.lse_line,
            self.direct_bars,
            self.safe_bars,
            self.nan_marks,
            self.zero_marks,
            self.title,
        )

    def _study(self, scale, dtype):
        key = (float(scale), dtype_name(dtype))
        if key not in self._studies:  # computed by flashmath.softmax once per state, then only drawn
            self._studies[key] = overflow_study(self.x, key[0], key[1])
        return key, self._studies[key]

    @staticmethod
    def _ylim(study) -> tuple[float, float]:
        """The upper panel's limits for a state: its values and both lines, rounded outward (see nice_limits)."""
        return nice_limits(*limits(np.concatenate([study.x, [study.limit, study.lse]]), pad=0.15))

    def _reserve_label_room(self, L: int) -> None:
        """Pin the upper panel's y label left of the widest tick labels of any state (every dtype, the slider's
        scales 1 to 1000 and this plot's own): the layout is computed once, for the first state, so a label placed
        next to that state's ticks would be pushed out of the figure by wider ones ("-1000" at 1000x)."""
        ax = self.ax_e
        canvas: Any = self.fig.canvas  # Agg: FigureCanvasAgg, or pyplot's inline backend (Agg too)
        renderer = canvas.get_renderer()
        size = ax.yaxis.get_major_ticks()[0].label1.get_fontsize()
        texts = set()
        for scale in {*np.logspace(0, 3, 61).tolist(), float(self._first_scale)}:
            for dtype in OVERFLOW_DTYPES:
                lo, hi = self._ylim(self._study(scale, dtype)[1])
                ax.set_ylim(lo, hi)
                ticks = [t for t in ax.yaxis.get_major_locator().tick_values(lo, hi) if lo <= t <= hi]
                texts.update(ax.yaxis.get_major_formatter().format_ticks(ticks))
        probe = self.fig.text(0, 0, "", fontsize=size)
        widest = 0.0
        for text in texts:
            probe.set_text(text)
            widest = max(widest, probe.get_window_extent(renderer).width * 72 / self.fig.dpi)  # points
        probe.remove()
        tick = ax.yaxis.get_major_ticks()[0]
        offset = tick.get_tick_padding() + tick.get_pad() + widest + ax.yaxis.labelpad  # points left of the axes
        ax.yaxis.set_label_coords(
            0, 0.5, transform=offset_copy(ax.transAxes, fig=self.fig, x=-offset, y=0, units="points")
        )

    def _update(self, scale, dtype) -> None:
        key, study = self._study(scale, dtype)
        dt, x64, lse, limit, overflowed = study.dtype, study.x, study.lse, study.limit, study.overflowed
        y_direct, y_safe = study.direct, study.safe
        steps = np.arange(1, x64.size + 1)

        set_heights(self.x_bars, finite_or_nan(x64))  # every bar, the overflowed ones too (in red, cross above)
        for bar, over in zip(self.x_bars, overflowed, strict=False):
            bar.set_color(JUMP if over else SEEN)
        top_pad = 0.06 * (np.nanmax(np.abs(finite_or_nan(x64))) if np.isfinite(finite_or_nan(x64)).any() else 1.0)
        self.inf_marks.set_data(steps[overflowed], finite_or_nan(x64[overflowed]) + top_pad)
        self.limit_line.set_ydata([limit, limit])
        self.lse_line.set_ydata([lse, lse])
        # both lines always show; nice limits change only every few moves of the scale slider (a new background)
        ylim = self._ylim(study)
        if ylim != self.ax_e.get_ylim():
            self.ax_e.set_ylim(*ylim)
            # new ticks; the limits are all that changes in the background: only the y axis is drawn again
            self.redraw_background(key=ylim, changed=[self.ax_e.yaxis])
        set_heights(self.direct_bars, np.nan_to_num(y_direct, nan=0.0))
        set_heights(self.safe_bars, y_safe)
        nan_at = np.isnan(y_direct)
        zero_at = (y_direct == 0) & (y_safe > 0)
        self.nan_marks.set_data(steps[nan_at] - 0.2, np.zeros(nan_at.sum()))
        self.zero_marks.set_data(steps[zero_at] - 0.2, np.zeros(zero_at.sum()))
        verdict = _(r"> $\ln(\max)$: the sum overflows") if lse > limit else _(r"≤ $\ln(\max)$: the sum fits")
        self.title.set_text(
            _(
                "{dtype}, scale {scale}: {logsumexp_x} = {lse:.4g} {verdict} ({ln_max} = {limit:.2f})\n"
                "{max_x} = {max_value:.4g}; {overflowed} of {size} exponentials overflow"
            ).format(
                dtype=dt.name,
                scale=plain_number(scale),
                logsumexp_x=LOGSUMEXP_X,
                lse=lse,
                verdict=verdict,
                ln_max=r"$\ln(\max)$",
                limit=limit,
                max_x=r"$\mathrm{max}_i\, x_i$",
                max_value=float(np.max(x64)),
                overflowed=int(overflowed.sum()),
                size=x64.size,
            )
        )


def plot_online_softmax_step(trace: OnlineSoftmaxTrace, i: int, *, labels=None, figsize=(8.0, 6.0)):
    """A static picture of :class:`OnlineSoftmaxPlot` at step ``i`` (a pyplot figure, shown by Jupyter).

    Returns:
        matplotlib Figure. Raises: as :class:`OnlineSoftmaxPlot`.
    """
    return OnlineSoftmaxPlot(trace, labels=labels, step=i, figsize=figsize, pyplot=True).fig


def plot_overflow(x, dtype="float32", scale: float = 1.0, *, figsize=(8.0, 5.0)):
    """A static picture of :class:`OverflowPlot` (a pyplot figure, shown by Jupyter).

    Returns:
        matplotlib Figure. Raises: as :class:`OverflowPlot`.
    """
    return OverflowPlot(x, scale=scale, dtype=dtype, figsize=figsize, pyplot=True).fig
