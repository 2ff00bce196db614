"""Softmax, safe softmax and online softmax (chapters 1 and 2).

Notation follows the course's notation table (chapter 0): ``x`` is the softmax input, ``g_i`` the running max
("greatest") of the first ``i`` elements and ``s_i = sum_{j <= i} exp(x_j - g_i)`` the running sum. After the
last element, ``s_N`` is the softmax denominator.

The state of an empty prefix is ``(g, s) = (-inf, 0)``; it is the identity of :func:`merge`, and it is also the
state of a prefix whose elements are all ``-inf`` (masked). The state of a prefix holding ``+inf`` is
``(+inf, c)`` with ``c`` the number of ``+inf`` elements: each element at the max contributes ``exp(0) = 1`` to
``s``, also when the max is ``+inf`` (where ``exp(inf - inf)`` would be NaN), and every other element 0. So
``g + log(s)`` is the logsumexp of the prefix in every case (``-inf`` empty, ``+inf`` with a ``+inf``, NaN with a
NaN), and :func:`merge` stays associative and commutative. Every function here keeps these conventions:

* NaN anywhere in a row gives NaN for that row (never a silent 0).
* A row of only ``-inf`` gives zeros from :func:`safe_softmax` and :func:`online_softmax` (the convention later
  used for fully masked attention rows); the direct :func:`softmax` gives NaN (0 / 0), which is its lesson.
* A ``+inf`` entry makes its row NaN in the safe and online versions (``inf - inf`` is undefined); the direct
  version gives NaN at that entry (``inf / inf``) and 0 elsewhere.
* float16 input gives float16 output; the safe and online versions compute it in float32, so nothing
  overflows. bfloat16 and the other floating-point types of the ``ml_dtypes`` package are treated like float16
  (numpy gives them kind ``'V'``, not ``'f'``). float32 and float64 are computed in their own dtype. Integer and
  bool input is taken as float64.

Source: M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax", arXiv:1805.02867 (2018),
algorithms 1-3.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

# The floating-point checks live in flashmath._checks; these names stay importable from here, where the course
# introduced them.
from flashmath._checks import ML_DTYPES_FLOATS as ML_DTYPES_FLOATS
from flashmath._checks import NonFloatInputError, as_float_array, compute_dtype, integer
from flashmath._checks import float_dtype as float_dtype
from flashmath.rowstate import merge_rows

__all__ = [
    "NonFloatInputError",
    "softmax",
    "safe_softmax",
    "online_softmax",
    "online_normalizer",
    "online_softmax_trace",
    "OnlineSoftmaxTrace",
    "merge",
    "OverflowStudy",
    "overflow_study",
]


def _check_axis(arr: np.ndarray, axis: int) -> int:
    axis = integer(axis, "axis", "an integer (one axis to normalise over)")
    if arr.ndim == 0:
        raise ValueError("softmax needs at least a 1-D array; got a scalar (shape ())")
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(f"axis {axis} is out of range for an array of shape {arr.shape} ({arr.ndim} dimensions)")
    return axis % arr.ndim


def softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """Direct softmax ``exp(x) / sum(exp(x))``, computed in the input's own dtype.

    This is the textbook formula with no protection. It fails once the sum of the exponentials overflows, that is
    once ``logsumexp(x) = log(sum(exp(x)))`` exceeds ``log(finfo(dtype).max)`` (about 11.09 in float16, 88.72 in
    float32, 709.78 in float64), which can happen with every entry below that threshold. When one ``exp(x_i)`` is
    itself ``inf`` that entry becomes NaN (``inf / inf``) and the others 0; when every ``exp(x_i)`` fits but their
    sum does not, the whole row silently becomes 0 (for example 46 entries of 10.0 in float16). It fails at the other
    end too: when every ``exp(x_i)`` underflows to 0 (every entry below ``log(smallest_subnormal / 2)``, about -17.33
    in float16 and -745.13 in float64) the row is ``0 / 0``, all NaN (``[-1000, -1001]`` in float64), and when the
    largest term is subnormal (the max below ``log(smallest_normal)``, -9.70 in float16) the result can be a wrong
    distribution (``[-17, -18]`` in float16 gives ``[1, 0]``). Those failures are the lesson of chapter 1; use
    :func:`safe_softmax` for real work. Overflow warnings are silenced: the inf, NaN and
    zeros in the result are the message.

    Args:
        x: array ``(..., L)`` of float16/float32/float64 (integers are taken as float64).
        axis: the axis to normalise over (default the last).

    Returns:
        Probabilities, same shape and dtype as ``x``. A row of only ``-inf`` gives NaN (0 / 0).

    Raises:
        TypeError: ``x`` is not real numbers. ValueError: ``x`` is a scalar or ``axis`` is out of range.

    Passes over the row: two (1: sum of exp; 2: divide). Source: Milakov and Gimelshein (2018), algorithm 1.
    """
    x = as_float_array(x)
    axis = _check_axis(x, axis)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(x)  # pass 1: d = sum_j exp(x_j)
        return e / np.sum(e, axis=axis, keepdims=True)  # pass 2: y_i = exp(x_i) / d


def safe_softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """Safe softmax ``exp(x - max) / sum(exp(x - max))``: three logical passes (max, sum, divide).

    Subtracting the row max multiplies numerator and denominator by the same factor ``exp(-max)``, so the
    result is unchanged, and every exponent is ``<= 0``, so ``exp`` cannot overflow for finite input.

    Args:
        x: array ``(..., L)`` of float16/float32/float64 (integers are taken as float64).
        axis: the axis to normalise over (default the last).

    Returns:
        Probabilities, same shape as ``x`` and the same dtype (float16 in gives float16 out, computed in
        float32). A row of only ``-inf`` gives zeros; a row holding NaN or ``+inf`` gives NaN.

    Raises:
        TypeError: ``x`` is not real numbers. ValueError: ``x`` is a scalar or ``axis`` is out of range.

    Source: Milakov and Gimelshein (2018), algorithm 2.
    """
    x = as_float_array(x)
    axis = _check_axis(x, axis)
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    if xc.shape[axis] == 0:
        return np.empty_like(x)
    g = np.max(xc, axis=axis, keepdims=True)  # pass 1: g = max_j x_j
    g_safe = np.where(g == -np.inf, 0.0, g)  # a fully masked row: exp(-inf - 0) = 0, no -inf - (-inf)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # +inf - inf: NaN, on purpose
        e = np.exp(xc - g_safe)  # -1e308 - 1e308 = -inf gives exp = 0, as it should
        s = np.sum(e, axis=axis, keepdims=True)  # pass 2: s = sum_j exp(x_j - g)
        y = np.where(s == 0, 0.0, e / s)  # pass 3: y_i = exp(x_i - g) / s
    return y.astype(x.dtype, copy=False)


def merge(g1: ArrayLike, s1: ArrayLike, g2: ArrayLike, s2: ArrayLike) -> tuple[Any, Any]:
    """Combine the online-softmax states of two parts into the state of their concatenation.

    ``(g1, s1)`` summarises part 1 (its max and ``sum exp(x - g1)``), ``(g2, s2)`` part 2. Then

        g = max(g1, g2)
        s = s1 * exp(g1 - g) + s2 * exp(g2 - g)

    The operation is associative and commutative and ``(-inf, 0)`` is its identity, which is why parts can be
    processed in any grouping (tiles, split-KV). The one-pass recurrence of :func:`online_normalizer` is the
    special case where part 2 is a single element ``x_i`` with state ``(x_i, 1)``.

    Args:
        g1, s1, g2, s2: scalars or arrays that broadcast together (float; ``s >= 0``).

    Returns:
        ``(g, s)`` with the broadcast shape, in the promoted floating dtype (at least float32). Where ``g`` is
        ``-inf`` (both parts empty or fully masked) ``s`` is 0; where ``g`` is ``+inf``, ``s`` adds the sums of
        the parts whose max is ``+inf`` (the count of ``+inf`` elements, see the module docstring), so that
        ``g + log(s)`` is ``+inf``; NaN in any input propagates.

    Raises:
        ValueError: a negative ``s1`` or ``s2``. TypeError: non-real input.

    Source: Milakov and Gimelshein (2018), section 3.1 (the parallel form of the online normalizer).
    """
    g1, s1, g2, s2 = (
        as_float_array(a, name) for a, name in zip((g1, s1, g2, s2), ("g1", "s1", "g2", "s2"), strict=True)
    )
    dtype = compute_dtype(np.result_type(g1, s1, g2, s2))
    g1, s1, g2, s2 = (a.astype(dtype, copy=False) for a in (g1, s1, g2, s2))
    for s_k, name in ((s1, "s1"), (s2, "s2")):
        if np.any(s_k < 0):
            raise ValueError(f"{name} must be >= 0 (a sum of exponentials), got {s_k.min()}")
    g, s = merge_rows(g1, s1, g2, s2)
    with np.errstate(invalid="ignore"):
        # Where g = +inf, inf - inf is NaN: a part whose max is +inf keeps its sum (exp(0) = 1), the other adds 0.
        s = np.where(g == np.inf, np.where(g1 == g, s1, 0 * s1) + np.where(g2 == g, s2, 0 * s2), s)
    return g[()], s[()]


def _online_scan(x: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(g_i, s_i)`` after each element of the last axis of ``x`` (shape ``(..., L)``).

    The single home of the one-pass online-normalizer loop: each step merges the state so far with the
    one-element state ``(x_i, 1)``.
    """
    g = np.full(x.shape[:-1], -np.inf, dtype=x.dtype)  # g_0 = -inf: nothing seen yet
    s = np.zeros(x.shape[:-1], dtype=x.dtype)  # s_0 = 0
    one = np.ones((), dtype=x.dtype)
    for i in range(x.shape[-1]):
        # g_i = max(g_{i-1}, x_i);  s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
        g, s = merge(g, s, x[..., i], one)
        yield g, s


def _normalizer_last_axis(xc: np.ndarray) -> tuple[Any, Any]:
    g = np.full(xc.shape[:-1], -np.inf, dtype=xc.dtype)
    s = np.zeros(xc.shape[:-1], dtype=xc.dtype)
    for state in _online_scan(xc):
        g, s = state
    return g[()], s[()]


def online_normalizer(x: ArrayLike) -> tuple[Any, Any]:
    """One pass over a 1-D vector computing its max ``g_N`` and softmax denominator ``s_N`` together.

    Runs the recurrence ``g_i = max(g_{i-1}, x_i)``, ``s_i = s_{i-1} exp(g_{i-1} - g_i) + exp(x_i - g_i)``
    from ``(g_0, s_0) = (-inf, 0)``.

    Args:
        x: 1-D array ``(L,)`` of float16/float32/float64 (integers are taken as float64).

    Returns:
        ``(g, s)`` as numpy scalars of the compute dtype (float32 for float16 input, else the input's dtype).
        ``g == max(x)`` and ``s == sum(exp(x - g))``. An empty or all ``-inf`` vector gives ``(-inf, 0.0)``,
        the identity of :func:`merge`; a vector holding ``+inf`` (and no NaN) gives ``(+inf, c)``, ``c`` the
        number of ``+inf`` elements, so that ``g + log(s) = +inf`` is its logsumexp; NaN gives NaN.

    Raises:
        TypeError: ``x`` is not real numbers. ValueError: ``x`` is not 1-D.

    Source: Milakov and Gimelshein (2018), algorithm 3, lines 1-6.
    """
    x = as_float_array(x)
    if x.ndim != 1:
        raise ValueError(f"online_normalizer takes a 1-D vector, got shape {x.shape}; use online_softmax for arrays")
    return _normalizer_last_axis(x.astype(compute_dtype(x.dtype), copy=False))


def online_softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """Online softmax: two passes instead of three.

    Pass 1 runs the online normalizer (running max and running sum in one sweep, rows in parallel); pass 2
    divides: ``y_i = exp(x_i - g_N) / s_N``.

    Args:
        x: array ``(..., L)`` of float16/float32/float64 (integers are taken as float64).
        axis: the axis to normalise over (default the last).

    Returns:
        Probabilities with the shape and dtype of ``x`` (float16 in, float16 out, computed in float32). A row of
        only ``-inf`` gives zeros; NaN or ``+inf`` in a row gives NaN for the row.

    Raises:
        TypeError: ``x`` is not real numbers. ValueError: ``x`` is a scalar or ``axis`` is out of range.

    Source: Milakov and Gimelshein (2018), algorithm 3.
    """
    x = as_float_array(x)
    axis = _check_axis(x, axis)
    xc = np.moveaxis(x.astype(compute_dtype(x.dtype), copy=False), axis, -1)
    g, s = _normalizer_last_axis(xc)  # pass 1: (g_N, s_N) per row
    g, s = g[..., None], s[..., None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        y = np.exp(xc - g) / s  # pass 2: y_i = exp(x_i - g_N) / s_N
    y = np.where(s == 0, 0.0, y)  # fully masked row: 0, not 0 / 0
    y = np.where(g == np.inf, np.nan, y)  # a row holding +inf: its softmax is undefined (inf / inf), NaN
    return np.moveaxis(y, -1, axis).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class OnlineSoftmaxTrace:
    """Per-step states of the online normalizer over a 1-D vector (steps ``i = 1..L``; index ``i - 1``).

    Attributes (all 1-D arrays of length ``L``, compute dtype):
        x: the inputs ``x_i``.
        g: the running max ``g_i``.
        s: the running sum ``s_i = sum_{j <= i} exp(x_j - g_i)``.
        rescale: ``exp(g_{i-1} - g_i)``, the factor applied to ``s_{i-1}``: 1 while the max holds, below 1 when
            it jumps (0 at step 1, where the empty prefix has ``g_0 = -inf``; 1 while the prefix is all
            ``-inf``).
        denominator: ``s_N``, the true softmax denominator (a scalar), for comparison.
    """

    x: np.ndarray
    g: np.ndarray
    s: np.ndarray
    rescale: np.ndarray
    denominator: float

    def __len__(self) -> int:
        return len(self.x)

    @property
    def jumps(self) -> np.ndarray:
        """Boolean array: True at the steps ``i >= 2`` where the running max increased (``g_i > g_{i-1}``).

        Step 1 does not count: there the "previous max" is the empty prefix's ``g_0 = -inf``.
        """
        jumped = self.g[1:] > self.g[:-1]
        return np.concatenate([[False], jumped])


def online_softmax_trace(x: ArrayLike) -> OnlineSoftmaxTrace:
    """Run :func:`online_normalizer` on a 1-D vector and keep every intermediate state, for plots and widgets.

    Args:
        x: 1-D array ``(L,)``, ``L >= 1``, float16/float32/float64.

    Returns:
        :class:`OnlineSoftmaxTrace` whose last ``g`` and ``s`` equal ``online_normalizer(x)``.

    Raises:
        TypeError: ``x`` is not real numbers. ValueError: ``x`` is not 1-D or is empty.
    """
    x = as_float_array(x)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"online_softmax_trace takes a non-empty 1-D vector, got shape {x.shape}")
    xc = x.astype(compute_dtype(x.dtype))  # a copy: the trace must not alias the caller's array
    states = list(_online_scan(xc))
    g = np.array([gi for gi, _ in states], dtype=xc.dtype)
    s = np.array([si for _, si in states], dtype=xc.dtype)
    g_prev = np.concatenate([[-np.inf], g[:-1]]).astype(xc.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        # rescale_i = exp(g_{i-1} - g_i); defined as 1 where the max did not change (also -inf -> -inf)
        rescale = np.where(g_prev == g, xc.dtype.type(1), np.exp(g_prev - g))
    return OnlineSoftmaxTrace(x=xc, g=g, s=s, rescale=rescale, denominator=s[-1])


@dataclass(frozen=True)
class OverflowStudy:
    """The direct and the safe softmax of ``scale * x`` computed in a narrow dtype (chapter 1's overflow explorer).

    Attributes (1-D arrays of length ``L``, float64 unless noted):
        x: ``scale * x`` rounded to the dtype (``inf`` where the dtype itself overflowed).
        overflowed: bool, where ``exp`` of that value is ``inf`` in the dtype.
        direct, safe: the probabilities of :func:`softmax` and :func:`safe_softmax`, computed in the dtype.
        lse: the logsumexp of ``x`` (float64: the value the sum of exponentials would need).
        limit: ``ln`` of the dtype's largest number: the direct formula fails once ``lse`` passes it.
        dtype: the dtype. scale: the scale.
    """

    x: np.ndarray
    overflowed: np.ndarray
    direct: np.ndarray
    safe: np.ndarray
    lse: float
    limit: float
    dtype: np.dtype
    scale: float


def overflow_study(x: ArrayLike, scale: float, dtype: DTypeLike) -> OverflowStudy:
    """The direct softmax against the safe softmax of ``scale * x`` in ``dtype``: where and why the direct one
    overflows (chapter 1).

    Args:
        x: 1-D vector ``(L,)``. scale: multiplies ``x`` (a stand-in for larger logits). dtype: a numpy float dtype.

    Returns:
        :class:`OverflowStudy`.

    Raises:
        TypeError: ``x`` not real numbers, ``dtype`` not a floating-point dtype. ValueError: ``x`` not 1-D.
    """
    dt = float_dtype(dtype)
    x = as_float_array(x).astype(np.float64)
    if x.ndim != 1:
        raise ValueError(f"overflow_study takes a 1-D vector, got shape {x.shape}")
    with np.errstate(over="ignore"):  # large scales overflow the dtype itself: inf
        xs = (x * scale).astype(dt)
        e = np.exp(xs)
    x64 = xs.astype(np.float64)
    g, s = online_normalizer(x64)  # logsumexp = g + ln(s), in float64: the value the sum would need
    with np.errstate(divide="ignore"):  # s = 0 for an all -inf vector: logsumexp -inf
        lse = float(g + np.log(s))
    return OverflowStudy(
        x=x64,
        overflowed=np.isinf(e),
        direct=softmax(xs).astype(np.float64),
        safe=safe_softmax(xs).astype(np.float64),
        lse=lse,
        limit=float(np.log(np.finfo(dt).max)),
        dtype=dt,
        scale=float(scale),
    )
