"""Drawing functions: (trace or inputs, step) -> matplotlib Figure.

Nothing here computes attention or softmax beyond calling :mod:`flashmath`; each function builds one figure
with ``pyplot`` (so that Jupyter's inline backend shows it) and returns it. Axis limits are fixed over all
steps so that a slider or an animation does not make the axes jump.
"""

from __future__ import annotations

import numpy as np
import matplotlib.pyplot as plt
from matplotlib import animation

from flashmath.softmax import OnlineSoftmaxTrace, safe_softmax, softmax

__all__ = [
    "plot_online_softmax_step",
    "plot_overflow",
    "animate_online_softmax",
    "figure_signature",
]

SEEN = "#1f77b4"
UNSEEN = "#c7c7c7"
JUMP = "#d62728"
HOLD = "#7f7f7f"


def _limits(values: np.ndarray, pad: float = 0.08) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


def plot_online_softmax_step(trace: OnlineSoftmaxTrace, i: int, *, labels=None, figsize=(8.0, 6.0), fig=None):
    """Draw the online normalizer after step ``i`` (1-based; ``i = 0`` shows nothing seen yet).

    Three panels over the steps ``1..N``: the inputs ``x_j`` with the running max ``g_j``; the rescale factor
    ``exp(g_{j-1} - g_j)`` (red where the max jumped); the running sum ``s_j`` against the true denominator
    ``s_N``.

    Args:
        trace: from :func:`flashmath.online_softmax_trace`.
        i: the step to show, ``0 <= i <= len(trace)``.
        labels: optional tick labels for the elements (e.g. tokens), length ``L``.
        figsize: inches, for a new figure.
        fig: draw into this figure (cleared first) instead of a new one; animations use it.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: ``i`` out of range, or ``labels`` of the wrong length.
    """
    L = len(trace)
    if not 0 <= i <= L:
        raise ValueError(f"step i must be in 0..{L} (the vector has {L} elements), got {i}")
    if labels is not None and len(labels) != L:
        raise ValueError(f"labels must have one entry per element ({L}), got {len(labels)}")
    steps = np.arange(1, L + 1)
    seen = steps <= i
    x = np.asarray(trace.x, dtype=np.float64)
    g = np.asarray(trace.g, dtype=np.float64)
    s = np.asarray(trace.s, dtype=np.float64)
    r = np.asarray(trace.rescale, dtype=np.float64)

    if fig is None:
        fig = plt.figure(figsize=figsize, layout="constrained")
    else:
        fig.clear()
    ax_x, ax_r, ax_s = fig.subplots(3, 1, sharex=True, height_ratios=[2, 1, 1.5])
    x_plot = np.where(np.isfinite(x), x, np.nan)
    ax_x.bar(steps, x_plot, color=np.where(seen, SEEN, UNSEEN), width=0.7, label="$x_j$")
    if i > 0:
        ax_x.step(steps[:i], g[:i], where="mid", color=JUMP, lw=2, label="running max $g_j$")
        ax_x.plot([i], [x_plot[i - 1]], "o", ms=9, mfc="none", mec="k", label=f"current $x_{{{i}}}$")
    ax_x.set_ylim(*_limits(np.concatenate([x, g])))
    ax_x.axhline(0, color="k", lw=0.5)
    ax_x.set_ylabel("value")
    ax_x.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncol=3, frameon=False)

    jumped = r < 1
    ax_r.bar(steps[:i], r[:i], color=np.where(jumped[:i], JUMP, HOLD), width=0.7)
    ax_r.axhline(1, color="k", lw=0.5, ls=":")
    ax_r.set_ylim(0, 1.15)
    ax_r.set_ylabel(r"$e^{g_{j-1}-g_j}$")

    ax_s.axhline(trace.denominator, color="k", ls="--", lw=1, label=f"denominator $s_N$ = {trace.denominator:.4g}")
    if i > 0:
        ax_s.plot(steps[:i], s[:i], "o-", color=SEEN, ms=4, label="running sum $s_j$")
    ax_s.set_ylim(0, 1.1 * max(float(np.nanmax(s)) if np.isfinite(s).any() else 1.0, 1e-12))
    ax_s.set_ylabel("sum")
    ax_s.set_xlabel("step j")
    ax_s.legend(loc="lower right", fontsize=8)
    ax_s.set_xlim(0.4, L + 0.6)
    if labels is not None:
        ax_s.set_xticks(steps, [str(t) for t in labels], rotation=90, fontsize=7)

    if i == 0:
        title = "step 0: nothing read yet, $g_0 = -\\infty$, $s_0 = 0$"
    else:
        j = i - 1
        title = (f"step {i}: $x_{{{i}}}$ = {x[j]:.3f}, $g_{{{i}}}$ = {g[j]:.3f}, rescale = {r[j]:.3f}, "
                 f"$s_{{{i}}}$ = {s[j]:.4f}")
    fig.suptitle(title, fontsize=11)
    return fig


def plot_overflow(x, dtype="float32", scale: float = 1.0, *, figsize=(8.0, 5.0)):
    """Direct softmax versus safe softmax of ``scale * x`` in a given dtype.

    Top: ``exp(scale * x)`` as computed in ``dtype`` (red crosses where it overflowed to inf) against the
    overflow threshold ``log(finfo(dtype).max)``. Bottom: the probabilities of both versions; NaN entries of
    the direct version are marked.

    Args:
        x: 1-D array ``(L,)``.
        dtype: ``"float16"``, ``"float32"`` or ``"float64"`` (or a numpy dtype).
        scale: multiplies ``x`` before the softmax (a stand-in for larger logits).

    Returns:
        matplotlib Figure.
    """
    dt = np.dtype(dtype)
    xs = (np.asarray(x, dtype=np.float64) * scale).astype(dt)
    L = xs.size
    steps = np.arange(L)
    limit = float(np.log(np.finfo(dt).max))
    with np.errstate(over="ignore"):
        e = np.exp(xs)
    y_direct = softmax(xs)
    y_safe = safe_softmax(xs)
    overflowed = np.isinf(e)

    fig, (ax_e, ax_y) = plt.subplots(2, 1, sharex=True, figsize=figsize, layout="constrained")
    ax_e.bar(steps, np.where(overflowed, np.nan, xs.astype(np.float64)), color=SEEN, width=0.7,
             label=f"$x_i$ in {dt.name}")
    ax_e.plot(steps[overflowed], xs[overflowed].astype(np.float64), "x", color=JUMP, ms=9,
              label="exp($x_i$) = inf")
    ax_e.axhline(limit, color=JUMP, ls="--", lw=1, label=f"log(max {dt.name}) = {limit:.2f}")
    ax_e.set_ylabel("$x_i$")
    ax_e.set_ylim(*_limits(xs.astype(np.float64), pad=0.15))
    ax_e.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncol=3, frameon=False)

    width = 0.4
    ax_y.bar(steps - width / 2, np.nan_to_num(y_direct.astype(np.float64), nan=0.0), width, color=UNSEEN,
             label="direct softmax")
    ax_y.bar(steps + width / 2, y_safe.astype(np.float64), width, color=SEEN, label="safe softmax")
    nan_at = np.isnan(y_direct)
    ax_y.plot(steps[nan_at] - width / 2, np.zeros(nan_at.sum()), "v", color=JUMP, ms=7, label="direct gives NaN")
    ax_y.set_ylim(0, 1.05)
    ax_y.set_ylabel("probability")
    ax_y.set_xlabel("element i")
    ax_y.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncol=3, frameon=False)
    fig.suptitle(f"{dt.name}, scale {scale:g}: max x = {float(np.max(xs)):.4g}, "
                 f"{int(overflowed.sum())} of {L} exponentials overflow", fontsize=11)
    return fig


def animate_online_softmax(trace: OnlineSoftmaxTrace, *, interval: int = 600, labels=None,
                           figsize=(8.0, 6.0), dpi: int = 60):
    """A :class:`matplotlib.animation.FuncAnimation` of the online normalizer, one frame per step.

    Each frame redraws :func:`plot_online_softmax_step` into the same figure; ``.to_jshtml()`` gives a
    self-contained HTML player that works without a kernel (nbviewer, GitHub's static view).

    Args:
        trace: from :func:`flashmath.online_softmax_trace`.
        interval: milliseconds between frames.
        labels: optional tick labels, length ``L``.
        figsize: inches.
        dpi: dots per inch of the frames (each frame is stored as a PNG in the HTML: keep it small).

    Returns:
        ``(animation, figure)``; close the figure after rendering so that it is not also shown as a picture.
    """
    fig = plot_online_softmax_step(trace, 0, labels=labels, figsize=figsize)
    fig.set_dpi(dpi)

    def update(step):
        plot_online_softmax_step(trace, step, labels=labels, fig=fig)
        return fig.axes

    anim = animation.FuncAnimation(fig, update, frames=len(trace) + 1, interval=interval, blit=False)
    return anim, fig


def _rgba(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def figure_signature(fig) -> bytes:
    """The rendered pixels of a figure, for tests that check a figure changed."""
    return _rgba(fig).tobytes()
