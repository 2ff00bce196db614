"""The argument checks and axis helpers the plots share: an index in range, tick labels, output dimensions, axis
limits that ignore what is not drawn (NaN, inf) and change only past a threshold, bar heights and colours."""

from __future__ import annotations

import numpy as np

from flashmath._checks import integer
from flashmath.viz.style import DIM_COLORS

__all__ = [
    "index",
    "check_labels",
    "check_dims",
    "limits",
    "NICE_STEPS",
    "nice_up",
    "nice_limits",
    "top",
    "finite_or_nan",
    "recolor",
    "set_heights",
]


def index(value, name: str, stop: int, what: str = "") -> int:
    """``value`` as a Python int in ``0..stop-1``; TypeError for a non-integer (bools too), ValueError outside."""
    value = integer(value, name)
    if not 0 <= value < stop:
        raise ValueError(f"{name} must be in 0..{stop - 1}{what}, got {value}")
    return value


def check_labels(labels, n: int, what: str) -> list | None:
    """``labels`` as a list of ``n`` strings with ``$`` escaped (so that a token is drawn as written, never parsed
    as mathtext), or None."""
    if labels is None:
        return None
    if isinstance(labels, str) or not hasattr(labels, "__len__"):
        raise TypeError(f"labels must be a list of {n} labels (one per {what}), got {type(labels).__name__}")
    if len(labels) != n:
        raise ValueError(f"labels must have one entry per {what} ({n}), got {len(labels)}")
    return [str(t).replace("$", r"\$") for t in labels]


def check_dims(dims, Dv: int) -> list[int]:
    """The output dimensions to draw: ``dims`` checked against ``Dv``, or by default the first ``min(3, Dv)``."""
    if dims is None:
        return list(range(min(3, Dv)))
    try:
        dims = list(dims)
    except TypeError:
        raise TypeError(f"dims must be a list of output dimensions, e.g. (0, 1), got {dims!r}") from None
    if not 1 <= len(dims) <= len(DIM_COLORS):
        raise ValueError(f"dims must list 1 to {len(DIM_COLORS)} output dimensions in 0..{Dv - 1}, got {dims}")
    return [index(d, "each entry of dims", Dv, f" (V has Dv = {Dv} output dimensions)") for d in dims]


def limits(values, pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around the finite ``values`` (NaN and inf are ignored: they are not drawn either)."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


NICE_STEPS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # mantissas of :func:`nice_limits`: a limit at most 1.5 times the data


def nice_up(value: float) -> float:
    """The smallest number ``m * 10**k`` (``m`` in :data:`NICE_STEPS`) at or above ``value`` (> 0)."""
    exponent = np.floor(np.log10(value))
    for mantissa in (*NICE_STEPS, 10.0):
        nice = float(mantissa * 10.0**exponent)
        if nice >= value * (1 - 1e-12):
            return nice
    return float(10.0 ** (exponent + 1))  # pragma: no cover - 10.0 above always answers


def nice_limits(lo: float, hi: float) -> tuple[float, float]:
    """Axis limits ``lo, hi`` rounded outward to :func:`nice_up` numbers (a negative ``lo`` to minus one, a
    non-negative one to 0): limits that change only when the data pass a threshold, so that a slider moving the
    data a little does not redraw the axes, ticks and legends (the background of :meth:`LivePlot.rgb`)."""
    lo_nice = -nice_up(-lo) if lo < 0 else 0.0
    hi_nice = nice_up(hi) if hi > 0 else 0.0
    if hi_nice <= lo_nice:  # all values at or below 0 with hi == 0 (and lo == 0 too): a span above
        hi_nice = lo_nice + 1.0
    return lo_nice, hi_nice


def top(values, floor: float = 1e-12) -> float:
    """An upper axis limit for non-negative ``values`` drawn from 0: 1.1 times the largest finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return 1.1 * max(float(finite.max()) if finite.size else 1.0, floor)


def finite_or_nan(values) -> np.ndarray:
    """float64 copy of ``values`` with inf replaced by NaN (matplotlib leaves NaN undrawn)."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def recolor(patches, colors) -> None:
    """Set each bar's face colour (a step recolours the bars already seen)."""
    for patch, color in zip(patches, colors, strict=False):
        patch.set_facecolor(color)


def set_heights(patches, heights) -> None:
    """Set each bar's height; NaN draws nothing."""
    for patch, h in zip(patches, heights, strict=False):
        patch.set_height(h)
