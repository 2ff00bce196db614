"""Drawing functions: (trace or inputs, step) -> matplotlib Figure.

Nothing here computes attention or softmax beyond calling :mod:`flashmath`; each function builds one figure
with ``pyplot`` (so that Jupyter's inline backend shows it) and returns it. Axis limits are fixed over all
steps so that a slider or an animation does not make the axes jump.
"""

from __future__ import annotations

import numpy as np
import matplotlib.pyplot as plt
from matplotlib import animation
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from flashmath._checks import integer
from flashmath.softmax import OnlineSoftmaxTrace, safe_softmax, softmax

__all__ = [
    "plot_online_softmax_step",
    "plot_overflow",
    "animate_steps",
    "figure_signature",
    "plot_scale_step",
    "plot_loop_swap_step",
    "plot_one_loop_step",
]

SEEN = "#1f77b4"
UNSEEN = "#c7c7c7"
JUMP = "#d62728"
HOLD = "#7f7f7f"
DIM_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]  # the output dimensions of chapter 5


def _figure(fig, figsize):
    """A new pyplot figure, or ``fig`` cleared for redrawing (animations draw every frame into one figure)."""
    if fig is None:
        return plt.figure(figsize=figsize, layout="constrained")
    fig.clear()
    return fig


def _limits(values, pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around the finite ``values`` (NaN and inf are ignored: they are not drawn either)."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


def _top(values, floor: float = 1e-12) -> float:
    """An upper axis limit for non-negative ``values`` drawn from 0: 1.1 times the largest finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return 1.1 * max(float(finite.max()) if finite.size else 1.0, floor)


def _index(value, name: str, stop: int, what: str = "") -> int:
    """``value`` as a Python int in ``0..stop-1``; TypeError for a non-integer (bools too), ValueError outside."""
    index = integer(value, name)
    if not 0 <= index < stop:
        raise ValueError(f"{name} must be in 0..{stop - 1}{what}, got {index}")
    return index


def _check_labels(labels, n: int, what: str) -> list | None:
    """``labels`` as a list of ``n`` strings with ``$`` escaped (so that a token is drawn as written, never parsed
    as mathtext), or None."""
    if labels is None:
        return None
    if isinstance(labels, str) or not hasattr(labels, "__len__"):
        raise TypeError(f"labels must be a list of {n} labels (one per {what}), got {type(labels).__name__}")
    if len(labels) != n:
        raise ValueError(f"labels must have one entry per {what} ({n}), got {len(labels)}")
    return [str(t).replace("$", r"\$") for t in labels]


def _dims(dims, Dv: int) -> list[int]:
    """The output dimensions to draw: ``dims`` checked against ``Dv``, or by default the first ``min(3, Dv)``."""
    if dims is None:
        return list(range(min(3, Dv)))
    try:
        dims = list(dims)
    except TypeError:
        raise TypeError(f"dims must be a list of output dimensions, e.g. (0, 1), got {dims!r}") from None
    if not 1 <= len(dims) <= len(DIM_COLORS):
        raise ValueError(f"dims must list 1 to {len(DIM_COLORS)} output dimensions in 0..{Dv - 1}, got {dims}")
    return [_index(d, "each entry of dims", Dv, f" (V has Dv = {Dv} output dimensions)") for d in dims]


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
        ValueError: ``i`` out of range, or ``labels`` of the wrong length. TypeError: ``i`` not an integer.
    """
    L = len(trace)
    i = _index(i, "step i", L + 1, f" (the vector has {L} elements)")
    labels = _check_labels(labels, L, "element")
    steps = np.arange(1, L + 1)
    seen = steps <= i
    x = np.asarray(trace.x, dtype=np.float64)
    g = np.asarray(trace.g, dtype=np.float64)
    s = np.asarray(trace.s, dtype=np.float64)
    r = np.asarray(trace.rescale, dtype=np.float64)

    fig = _figure(fig, figsize)
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

    if np.isfinite(trace.denominator):
        ax_s.axhline(trace.denominator, color="k", ls="--", lw=1)
    ax_s.plot([], [], color="k", ls="--", lw=1, label=f"denominator $s_N$ = {trace.denominator:.4g}")
    if i > 0:
        ax_s.plot(steps[:i], s[:i], "o-", color=SEEN, ms=4, label="running sum $s_j$")
    ax_s.set_ylim(0, _top(np.append(s, trace.denominator)))
    ax_s.set_ylabel("sum")
    ax_s.set_xlabel("step j")
    ax_s.legend(loc="lower right", fontsize=8)
    ax_s.set_xlim(0.4, L + 0.6)
    if labels is not None:
        ax_s.set_xticks(steps, labels, rotation=90, fontsize=7)

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
    ax_e.set_ylim(*_limits(np.append(xs.astype(np.float64), limit), pad=0.15))  # the threshold always shows
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
    fig.suptitle(f"{dt.name}, scale {scale:.3g}: max x = {float(np.max(xs)):.4g}, "
                 f"{int(overflowed.sum())} of {L} exponentials overflow", fontsize=11)
    return fig


def animate_steps(plot_step, trace, *, steps=None, interval: int = 600, figsize=(8.0, 6.0), dpi: int = 80,
                  **kwargs):
    """A :class:`matplotlib.animation.FuncAnimation` that redraws ``plot_step(trace, step, fig=fig, **kwargs)``.

    Works with every step plot here (:func:`plot_online_softmax_step`, :func:`plot_loop_swap_step`,
    :func:`plot_one_loop_step`). ``.to_jshtml()`` gives a self-contained HTML player that works without a kernel
    (nbviewer, GitHub's static view); every frame is stored as a PNG in it, so keep ``dpi`` and the number of
    steps modest.

    Args:
        plot_step: a drawing function ``(trace, step, *, fig, figsize, **kwargs) -> Figure``.
        trace: the trace it draws.
        steps: the steps to show, in order (default ``0..len(trace)``).
        interval: milliseconds between frames.
        figsize: inches. dpi: dots per inch of the frames.
        kwargs: passed to ``plot_step`` (``labels``, ``row``...).

    Returns:
        ``(animation, figure)``; close the figure after rendering so that it is not also shown as a picture.
    """
    steps = list(range(len(trace) + 1)) if steps is None else list(steps)
    fig = plot_step(trace, steps[0], figsize=figsize, **kwargs)
    fig.set_dpi(dpi)

    def update(step):
        plot_step(trace, step, fig=fig, **kwargs)
        return fig.axes

    anim = animation.FuncAnimation(fig, update, frames=steps, interval=interval, blit=False)
    return anim, fig


def _rgba(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def figure_signature(fig) -> bytes:
    """The rendered pixels of a figure, for tests that check a figure changed."""
    return _rgba(fig).tobytes()


# ----------------------------------------------------------------------------------------------------------------
# Chapter 3: why 1/sqrt(D)
# ----------------------------------------------------------------------------------------------------------------

RAW = "#ff7f0e"  # unscaled scores
SCALED = SEEN  # scores divided by sqrt(D)


def plot_scale_step(sweep, i: int, *, figsize=(9.0, 5.6)):
    """The scores of random unit-variance ``q, k`` for the head dimension ``D = sweep.dims[i]``, with and without
    scale.

    Four panels: the histogram of the scores ``q . k`` and ``q . k / sqrt(D)`` for this ``D``; over all ``D``
    (log axis), their standard deviation, the mean largest softmax probability of a row, and the mean entropy
    of a row's softmax (``log M`` = uniform). A dotted line marks the current ``D``.

    Args:
        sweep: from :func:`flashmath.scale_sweep`.
        i: index into ``sweep.dims``, ``0 <= i < len(sweep)``.
        figsize: inches.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: ``i`` out of range. TypeError: ``i`` not an integer.
    """
    S = len(sweep)
    i = _index(i, "i", S, " (an index into sweep.dims)")
    dims = np.asarray(sweep.dims, dtype=np.float64)
    D = int(sweep.dims[i])
    std_raw, std_scaled = sweep.std()

    fig, axes = plt.subplots(2, 2, figsize=figsize, layout="constrained")
    ax_h, ax_std = axes[0]
    ax_p, ax_e = axes[1]

    reach = float(np.abs(sweep.raw).max())
    reach_scaled = float(np.abs(sweep.scaled).max())
    ax_h.hist(sweep.raw[i], bins=np.linspace(-reach, reach, 81), color=RAW, alpha=0.75, density=True,
              label="$q \\cdot k$")
    ax_h.hist(sweep.scaled[i], bins=np.linspace(-reach_scaled, reach_scaled, 41), color=SCALED, alpha=0.6,
              density=True, label="$q \\cdot k / \\sqrt{D}$")
    ax_h.set_xlim(-reach, reach)
    ax_h.set_yscale("log")
    ax_h.set_ylim(1e-4, 5.0)
    ax_h.set_xlabel("score")
    ax_h.set_ylabel("density (log)")
    ax_h.set_title(f"scores at D = {D}", fontsize=10)
    ax_h.legend(loc="upper right", fontsize=8)

    def over_d(ax, raw, scaled, ylabel, extra=None):
        ax.plot(dims, raw, "o-", color=RAW, ms=4, label="unscaled")
        ax.plot(dims, scaled, "s-", color=SCALED, ms=4, label="scaled by $1/\\sqrt{D}$")
        ax.axvline(D, color="k", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlim(dims[0] / 1.4, dims[-1] * 1.4)
        ax.set_xlabel("head dimension D")
        ax.set_ylabel(ylabel)
        if extra is not None:
            extra(ax)

    over_d(ax_std, std_raw, std_scaled, "std of scores",
           lambda ax: ax.plot(dims, np.sqrt(dims), color="k", lw=0.8, ls="--", label="$\\sqrt{D}$"))
    ax_std.set_yscale("log", base=2)
    std_all = np.concatenate([std_raw, std_scaled, np.sqrt(dims)])
    ax_std.set_ylim(std_all.min() / 1.4, std_all.max() * 1.4)
    ax_std.legend(loc="upper left", fontsize=8)
    over_d(ax_p, sweep.max_prob_raw.mean(axis=1), sweep.max_prob_scaled.mean(axis=1), "mean max probability")
    ax_p.set_ylim(0, 1.05)
    ax_p.legend(loc="upper left", fontsize=8)
    log_m = float(np.log(sweep.n_keys))
    over_d(ax_e, sweep.entropy_raw.mean(axis=1), sweep.entropy_scaled.mean(axis=1), "mean entropy (nats)",
           lambda ax: ax.axhline(log_m, color="k", lw=0.8, ls="--", label=f"uniform, log M = {log_m:.2f}"))
    ax_e.set_ylim(0, 1.12 * log_m)
    # above the axes: inside, any corner covers a curve for some D
    ax_e.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncol=3, frameon=False)

    fig.suptitle(f"D = {D}: score std {std_raw[i]:.2f} unscaled, {std_scaled[i]:.2f} scaled; "
                 f"max probability {sweep.max_prob_raw[i].mean():.2f} vs {sweep.max_prob_scaled[i].mean():.2f}",
                 fontsize=11)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: the loop swap
# ----------------------------------------------------------------------------------------------------------------

FINAL = "k"


def plot_loop_swap_step(trace, m: int, *, row: int = 0, labels=None, figsize=(9.0, 5.2), fig=None):
    """Row ``row`` of ``A = Y V`` in the swapped order ``for n: for m: for d``, after the first ``m`` keys.

    Top: the weights ``Y[n, :]`` over the keys (the ones already added in colour, the current one circled).
    Bottom: the row of partial sums ``sum_{m' < m} Y[n, m'] V[m', :]`` over ``d`` (bars), the step just added,
    ``Y[n, m-1] V[m-1, :]`` (red ticks), and the final row ``A[n, :]`` (black dashes).

    Args:
        trace: from :func:`flashmath.loop_swap_trace`.
        m: keys added so far, ``0 <= m <= M`` (0 = the row is still all zeros).
        row: the query row ``n`` to show.
        labels: optional key labels (tokens), length ``M``.
        figsize: inches, for a new figure.
        fig: draw into this figure (cleared first) instead of a new one; animations use it.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: ``m`` or ``row`` out of range, or ``labels`` of the wrong length. TypeError: ``m`` or ``row``
        not an integer.
    """
    y = np.asarray(trace.y, dtype=np.float64)
    v = np.asarray(trace.v, dtype=np.float64)
    partial = np.asarray(trace.partial, dtype=np.float64)
    N, M = y.shape
    Dv = v.shape[1]
    m = _index(m, "m", M + 1, " (keys added so far)")
    row = _index(row, "row", N, f" (y has N = {N} rows)")
    labels = _check_labels(labels, M, "key")
    keys = np.arange(M)
    final = partial[row, -1]
    current = partial[row, m - 1] if m > 0 else np.zeros(Dv)

    fig = _figure(fig, figsize)
    ax_y, ax_a = fig.subplots(2, 1, height_ratios=[1, 1.4])
    ax_y.bar(keys, y[row], color=np.where(keys < m, SEEN, UNSEEN), width=0.7)
    if m > 0:
        ax_y.plot([m - 1], [y[row, m - 1]], "o", ms=9, mfc="none", mec="k")
    ax_y.set_xlim(-0.6, M - 0.4)
    ax_y.set_ylim(0, _top(y[row]))
    ax_y.set_ylabel(f"Y[{row}, m]")
    if labels is not None:
        ax_y.set_xticks(keys, labels, rotation=90, fontsize=7)
    else:
        ax_y.set_xlabel("key m")

    dd = np.arange(Dv)
    ax_a.bar(dd, current, color=SEEN, width=0.75, label=f"partial sums after {m} keys")
    if m > 0:
        added = y[row, m - 1] * v[m - 1]
        ax_a.plot(dd, current, "_", color=JUMP, ms=9, mew=2, label=f"just added: Y[{row}, {m - 1}] V[{m - 1}, :]")
        ax_a.vlines(dd, current - added, current, color=JUMP, lw=2)
    ax_a.plot(dd, final, "_", color=FINAL, ms=12, mew=1.5, label=f"final A[{row}, :]")
    ax_a.axhline(0, color="k", lw=0.5)
    lo, hi = _limits(np.concatenate([partial[row].ravel(), [0.0]]))
    ax_a.set_ylim(lo, hi)
    ax_a.set_xlim(-0.6, Dv - 0.4)
    ax_a.set_xlabel("output dimension d")
    ax_a.set_ylabel(f"A[{row}, d]")
    ax_a.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncol=3, frameon=False)

    with np.errstate(invalid="ignore"):  # inf - inf: the distance is NaN, and the title says so
        dist = float(np.max(np.abs(current - final)))
    fig.suptitle(f"loop order n, m, d: after {m} of {M} keys, max |partial - A| = {dist:.3g}", fontsize=11)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Chapter 5: one loop
# ----------------------------------------------------------------------------------------------------------------


def plot_one_loop_step(trace, m: int, *, row: int = 0, dims=None, labels=None, figsize=(10.0, 6.6), fig=None):
    """The merged loop of chapter 5 on one query row, after the first ``m`` keys.

    Left, over the keys ``1..M``: the scores ``x_m`` and the running max ``g_m``; the correction factor
    ``s_{m-1} e^{g_{m-1} - g_m} / s_m`` applied to the old output (red where the max jumped) and the weight
    ``e^{x_m - g_m} / s_m`` of the new value; the running sum ``s_m``. Right, over the keys seen ``m = 0..M``: a
    few output dimensions of ``A'_m`` against their final values ``A`` (dashed), and the distance ``||A'_m - A||``
    (``||A||`` at ``m = 0``). Both columns share one x axis, so key ``m`` sits above ``A'_m``, the output after it.

    Args:
        trace: from :func:`flashmath.one_loop_trace` of 2-D inputs (no batch dimensions).
        m: keys seen so far, ``0 <= m <= M`` (0 = nothing seen: ``g_0 = -inf``, ``s_0 = 0``, ``A'_0 = 0``).
        row: the query row ``n``.
        dims: the output dimensions of ``A'`` to draw, 1 to 5 of ``0..Dv-1`` (default: the first ``min(3, Dv)``).
        labels: optional key labels (tokens), length ``M``.
        figsize: inches, for a new figure.
        fig: draw into this figure (cleared first) instead of a new one; animations use it.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: a trace with batch dimensions, ``m``, ``row`` or ``dims`` out of range, or bad ``labels``.
        TypeError: ``m``, ``row`` or an entry of ``dims`` not an integer.
    """
    x_all = np.asarray(trace.x, dtype=np.float64)
    if x_all.ndim != 2:
        raise ValueError(f"plot_one_loop_step needs a trace of 2-D inputs (M, N); got x of shape {x_all.shape}")
    M, N = x_all.shape
    m = _index(m, "m", M + 1, " (keys seen so far)")
    row = _index(row, "row", N, f" (the trace has N = {N} query rows)")
    a_all = np.asarray(trace.a, dtype=np.float64)[:, row]  # (M, Dv)
    Dv = a_all.shape[1]
    dims = _dims(dims, Dv)
    labels = _check_labels(labels, M, "key")
    x = x_all[:, row]
    g = np.asarray(trace.g, dtype=np.float64)[:, row]
    s = np.asarray(trace.s, dtype=np.float64)[:, row]
    corr = np.asarray(trace.correction, dtype=np.float64)[:, row]
    weight = np.asarray(trace.weight, dtype=np.float64)[:, row]
    target = np.asarray(trace.target, dtype=np.float64)[row]  # (Dv,)
    steps = np.arange(1, M + 1)
    seen = steps <= m
    jumped = np.concatenate([[False], g[1:] > g[:-1]])
    with np.errstate(invalid="ignore"):  # inf - inf in a trace of inf inputs: NaN, not drawn
        dist = np.linalg.norm(a_all - target, axis=1)  # (M,)
        dist_0 = float(np.linalg.norm(target))  # ||A'_0 - A|| = ||A||

    fig = _figure(fig, figsize)
    axd = fig.subplot_mosaic([["x", "a"], ["c", "a"], ["s", "dist"]], width_ratios=[1.15, 1])
    ax_x, ax_c, ax_s, ax_a, ax_d = axd["x"], axd["c"], axd["s"], axd["a"], axd["dist"]
    for ax in (ax_x, ax_c, ax_s, ax_a, ax_d):
        ax.set_xlim(-0.6, M + 0.6)  # one x axis for both columns: key m (left) above A'_m (right)
    legend = dict(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, frameon=False)

    x_plot = np.where(np.isfinite(x), x, np.nan)
    ax_x.bar(steps, x_plot, color=np.where(seen, SEEN, UNSEEN), width=0.7)
    if m > 0:
        ax_x.step(steps[:m], g[:m], where="mid", color=JUMP, lw=2)
    ax_x.axhline(0, color="k", lw=0.5)
    ax_x.set_ylim(*_limits(np.concatenate([x, g])))
    ax_x.set_ylabel("score")
    # explicit handles: the legend is the same at every step, whatever has been drawn so far
    ax_x.legend(handles=[Patch(color=SEEN, label="score $x_m$ (seen)"), Patch(color=UNSEEN, label="not seen yet"),
                         Line2D([], [], color=JUMP, lw=2, label="running max $g_m$")], ncol=3, **legend)

    ax_c.bar(steps[:m], corr[:m], color=np.where(jumped[:m], JUMP, HOLD), width=0.7)
    ax_c.plot(steps[:m], weight[:m], "o", color=SEEN, ms=3)
    ax_c.set_ylim(0, 1.15)
    ax_c.set_ylabel("factor")
    ax_c.legend(handles=[Patch(color=HOLD, label="correction of $A'_{m-1}$, max held"),
                         Patch(color=JUMP, label="max jumped"),
                         Line2D([], [], color=SEEN, marker="o", ls="", ms=3, label="weight of $V_m$")],
                ncol=3, **legend)

    ax_s.plot(steps[:m], s[:m], "o-", color=SEEN, ms=3)
    if np.isfinite(s[-1]):
        ax_s.axhline(s[-1], color="k", ls="--", lw=1)
    ax_s.set_ylim(0, _top(s))
    ax_s.set_ylabel("running sum $s_m$")
    ax_s.legend(handles=[Line2D([], [], color="k", ls="--", lw=1, label=f"$s_M$ = {s[-1]:.3g}")], loc="lower right",
                fontsize=8)
    if labels is not None:
        ax_s.set_xticks(steps, labels, rotation=90, fontsize=6)
    else:
        ax_s.set_xlabel("key m (1..M)")

    for color, d in zip(DIM_COLORS, dims):
        if np.isfinite(target[d]):
            ax_a.axhline(target[d], color=color, ls="--", lw=1)
        ax_a.plot(np.concatenate([[0], steps[:m]]), np.concatenate([[0.0], a_all[:m, d]]), "o-", color=color,
                  ms=3, lw=1.2, label=f"$A'_m$[{d}]")
    ax_a.set_ylim(*_limits(np.concatenate([a_all[:, dims].ravel(), target[dims], [0.0]])))
    ax_a.set_ylabel("output (dashed: final A)")
    ax_a.legend(ncol=len(dims), **legend)

    ax_d.plot(np.concatenate([[0], steps[:m]]), np.concatenate([[dist_0], dist[:m]]), "o-", color=SEEN, ms=3)
    ax_d.axhline(0, color="k", lw=0.5)
    top = _top(np.append(dist, dist_0))
    ax_d.set_ylim(-0.05 * top / 1.1, top)
    ax_d.set_ylabel("$\\|A'_m - A\\|$")
    ax_d.set_xlabel("keys seen m (0 = none)")

    if m == 0:
        title = "m = 0: nothing seen, $g_0 = -\\infty$, $s_0 = 0$, $A'_0 = 0$"
    else:
        j = m - 1
        title = (f"m = {m}: $x_m$ = {x[j]:.3g}, $g_m$ = {g[j]:.3g}, $s_m$ = {s[j]:.3g}, "
                 f"correction = {corr[j]:.3g}, $\\|A'_m - A\\|$ = {dist[j]:.2e}")
    fig.suptitle(title, fontsize=11)
    return fig
