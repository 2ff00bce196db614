"""Chapter 7: FlashAttention-4's lazy rescaling on one row: the reference kept against the true running max.

The trace comes from :func:`flashmath.flash.reference_trace` (one per threshold); nothing here computes it.
"""

from __future__ import annotations

import math

import numpy as np

from flashmath.i18n import gettext as _
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, JUMP, SEEN, UNSEEN

__all__ = ["LazyRescalePlot", "plot_lazy_rescale"]

LOG2E = 1 / math.log(2.0)


def _pick_threshold(value, options) -> float:
    """``value`` if it is one of ``options`` (compared as floats), else a ValueError that lists them."""
    for option in options:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) == option:
            return option
    raise ValueError(f"threshold must be one of {list(options)}, got {value!r}")


def _stairs(values):
    """``(x, y)`` for ``ax.plot(..., drawstyle="steps-post")``: step ``j`` (from 1) spans ``j - 0.5`` to ``j + 0.5``."""
    values = np.asarray(values, dtype=np.float64)
    x = np.arange(len(values) + 1) + 0.5
    return x, np.append(values, values[-1:])


class LazyRescalePlot(LivePlot):
    """One row's state, key tile by key tile, in log2 units (scores times ``log2 e``, FlashAttention-4's units).

    Grey dots: the row's scores at the step of their key tile. Black steps: the true running max (the eager
    update's reference). Blue steps: the reference ``r`` kept with threshold ``t``; dashed: ``r + t``, the most the
    true max may run ahead before the next rescale. Red triangles: the steps that rescale ``acc`` and ``s``.

    Args:
        scores: ``(M,)`` the row's scores, natural units (``-inf`` for a masked key: not drawn).
        traces: ``{threshold: ReferenceTrace}`` of the same row's inputs (2-D ``q``, ``k``, ``v``, or any shape
            with ``row`` indexing the leading dimensions and the row), one per threshold, the same tiles.
        row: index of the row in each trace's ``reference`` (an int or a tuple).
        threshold: the threshold shown first (a key of ``traces``).

    Raises:
        ValueError: no traces, traces of other tiles, ``scores`` of another length, or ``threshold`` not a key.
    """

    def __init__(self, scores, traces, *, row, threshold, figsize=(8.0, 3.6), dpi=DPI, pyplot=False):
        if not traces:
            raise ValueError("traces must hold at least one ReferenceTrace (one per threshold)")
        self.thresholds = sorted(float(t) for t in traces)
        by_t = {float(t): trace for t, trace in traces.items()}
        first = by_t[self.thresholds[0]]
        self.cols = np.asarray(first.cols)
        for trace in by_t.values():
            if not np.array_equal(trace.cols, self.cols):
                raise ValueError("every trace must use the same key tiles (block_k)")
        row = row if isinstance(row, tuple) else (row,)
        self.scores = np.asarray(scores, dtype=np.float64) * LOG2E
        if self.scores.shape != (int(self.cols[-1, 1]),):
            raise ValueError(
                f"scores must have shape ({int(self.cols[-1, 1])},) (one per key), got {self.scores.shape}"
            )
        self.row_max = np.asarray(first.row_max[row], dtype=np.float64) * LOG2E
        self.reference = {t: np.asarray(by_t[t].reference[row], dtype=np.float64) * LOG2E for t in self.thresholds}
        self.rescaled = {t: np.asarray(by_t[t].rescaled[row], dtype=bool) for t in self.thresholds}
        self.lag = {t: float(np.max(by_t[t].lag()[row], initial=0.0)) for t in self.thresholds}
        self.eager = int(by_t[self.thresholds[0]].rescaled[row].sum()) if self.thresholds[0] == 0 else None
        _pick_threshold(threshold, self.thresholds)
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, threshold=threshold)

    def _build(self):
        ax = self.fig.subplots()
        steps = np.arange(1, len(self.cols) + 1)
        key_step = np.searchsorted(self.cols[:, 1], np.arange(len(self.scores)), side="right") + 1
        finite = np.isfinite(self.scores)
        ax.plot(key_step[finite], self.scores[finite], "o", ms=4, color=UNSEEN, label=_("scores x log2(e)"))
        ax.plot(*_stairs(self.row_max), drawstyle="steps-post", color="black", lw=1.5, label=_("true running max"))
        (self.ref_line,) = ax.plot([], [], drawstyle="steps-post", color=SEEN, lw=2.5, label=_("kept reference r"))
        (self.top_line,) = ax.plot([], [], drawstyle="steps-post", color=SEEN, lw=1.2, ls="--", label=_("r + t"))
        (self.marks,) = ax.plot([], [], "v", ms=9, color=JUMP, label=_("rescale of acc and s"))
        finite_refs = np.concatenate([r[np.isfinite(r)] for r in self.reference.values()])
        low = min(float(self.scores[finite].min()), float(finite_refs.min()))
        high = max(float(self.row_max[np.isfinite(self.row_max)].max()), float(finite_refs.max()))
        # room for every step of r + t, for each t up to 4 (a larger t's dashed line may leave the axes)
        top = max(
            [high]
            + [
                float(ref[np.isfinite(ref)].max()) + t
                for t, ref in self.reference.items()
                if t <= 4.0 and np.isfinite(ref).any()
            ]
        )
        ax.set_ylim(low - 0.3, top + 0.4)
        ax.set_xlim(0.5, len(steps) + 0.5)
        ax.set_xlabel(_("key tile step j (B_c = {block_k})").format(block_k=int(self.cols[0, 1] - self.cols[0, 0])))
        ax.set_ylabel(_("log2 units"))
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
        self.title = self.fig.suptitle("", fontsize=10, wrap=True)
        self.live(self.ref_line, self.top_line, self.marks, self.title)

    def _update(self, threshold):
        t = _pick_threshold(threshold, self.thresholds)
        steps = np.arange(1, len(self.cols) + 1)
        ref = self.reference[t]
        self.ref_line.set_data(*_stairs(ref))
        self.top_line.set_data(*_stairs(ref + t))
        self.top_line.set_visible(t > 0)
        hit = self.rescaled[t]
        self.marks.set_data(steps[hit], ref[hit])
        done = int(hit.sum())
        text = _("t = {t:g}: rescales {done}").format(t=t, done=done)
        if self.eager is not None:
            text += " " + _("(eager update: {eager})").format(eager=self.eager)
        text += "; " + _("the reference lags the true max by at most {lag:.2f} <= t").format(lag=self.lag[t])
        self.title.set_text(text)


def plot_lazy_rescale(scores, traces, *, row, threshold, figsize=(8.0, 3.6), dpi=DPI):
    """The static picture of :class:`LazyRescalePlot` at ``threshold``, through pyplot (shown by Jupyter's inline
    backend). Returns the plot."""
    return LazyRescalePlot(scores, traces, row=row, threshold=threshold, figsize=figsize, dpi=dpi, pyplot=True)
