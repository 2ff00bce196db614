"""Attention: the float64 reference and the loop variants of chapters 3-5.

Notation follows the course's notation table (chapter 0): ``Q (N, D)``, ``K (M, D)``, ``V (M, Dv)``; the scores
``X = Q K^T / sqrt(D)`` (masked entries set to ``-inf``), the probabilities ``Y = softmax(X)`` row by row, and the
output ``A = Y V``. Inside a row ``n``: ``x_m`` is the score of key ``m``, ``g_m`` the running max and ``s_m`` the
running sum after the first ``m`` keys, and ``A'_m`` the output when only those keys are seen.

The functions, in the order the course builds them:

* :func:`attention` - the reference, the formula computed directly in float64 (chapter 3).
* :func:`two_loop_attention` - loop (1), online softmax over each row of ``X``, then loop (2), ``A`` accumulated
  one key at a time with the final ``g_M, s_M`` (chapter 4).
* :func:`matmul_ndm` and :func:`matmul_nmd` - ``A = Y V`` as explicit scalar loops in the original and in the
  swapped order; every element is summed in the same order, so the results are bitwise equal (chapter 4).
* :func:`one_loop_attention` - both loops merged, four steps per key: score, max, sum, attention (chapter 5).

Each variant has a ``*_trace`` function returning a frozen dataclass of per-step arrays for plots and widgets.

Conventions kept by every function here:

* Shapes ``q (..., N, D)``, ``k (..., M, D)``, ``v (..., M, Dv)``, output ``(..., N, Dv)``, logsumexp
  ``(..., N)``; the leading (batch, head) dimensions of ``q``, ``k`` and ``v`` broadcast together and set the
  output's. A ``mask`` broadcasts against the scores ``(..., N, M)`` but never widens the output: a mask whose
  leading dimensions go beyond the inputs' is refused (ValueError), except axes of size 1, which are dropped.
* ``scale=None`` means ``1 / sqrt(D)``. ``mask`` is boolean, True = attend, broadcastable to ``(..., N, M)``;
  ``causal=True`` is the bottom-right aligned mask of :func:`flashmath.masks.causal_mask` (query ``n`` sees
  keys ``m <= n + M - N``), and is combined with ``mask`` by logical and.
* A row with no key to attend to (fully masked, or ``M == 0``) outputs 0 and has logsumexp ``-inf`` (natural
  log of 0). A row with a ``+inf`` score has logsumexp ``+inf`` and a NaN output (``inf / inf``).
* A masked key is absent: the output equals attention with that key removed, whatever its ``k`` and ``v`` rows
  hold (NaN or inf included), in every function, tile size and loop order. Masked scores and their value terms
  are selected away (``np.where``), never multiplied by 0, since ``0 * NaN`` is NaN. NaN in a row of ``q`` or in
  an attended row of ``k`` or ``v`` makes the output rows that see it NaN; nothing is ever silently turned into 0
  except what is masked.
* dtypes: ``q``, ``k``, ``v`` must be floating point (integers are refused: convert them first). :func:`attention` computes
  in float64 and returns float64. The variants compute in ``compute_dtype`` of the promoted input dtype (float32
  for float16, else the dtype itself), return the output in the promoted input dtype (float16 in, float16 out,
  like FlashAttention) and the logsumexp in the compute dtype.
* Errors: :class:`flashmath.softmax.NonFloatInputError` (a ValueError and a TypeError) for ``q``, ``k``, ``v`` that
  are not floating point; ``TypeError`` for a non-boolean mask, a non-bool ``causal``, a non-numeric ``scale``; ``ValueError`` for wrong shapes (fewer than 2 dimensions, ``D`` of ``q`` and ``k``
  differing, ``k`` and ``v`` with different ``M``, leading dimensions or a mask that do not broadcast, ``D == 0``)
  and for a non-finite ``scale``. Any finite scale is taken: it is folded into ``Q`` in float64, so a scale beyond
  the compute dtype's range (``1e39`` with float32 inputs) still gives the right answer wherever the scores
  themselves fit. Empty ``N`` gives an empty output, empty ``M`` fully masked rows. Inputs are never modified,
  read-only and non-contiguous arrays included.

Sources: A. Vaswani et al., "Attention Is All You Need" (2017), section 3.2.1 (scaled dot-product attention and
the ``1 / sqrt(D)`` scale); M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax" (2018)
(the running max and sum); T. Dao et al., "FlashAttention" (2022), section 3.1 (rescaling the output when the
max changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from flashmath.masks import causal_mask
from flashmath.softmax import as_float_array, compute_dtype, merge, safe_softmax

__all__ = [
    "AttentionInputs",
    "weighted_values",
    "logsumexp_of",
    "prepare_attention_inputs",
    "attention",
    "two_loop_attention",
    "two_loop_trace",
    "TwoLoopTrace",
    "matmul_ndm",
    "matmul_nmd",
    "loop_swap_trace",
    "LoopSwapTrace",
    "one_loop_attention",
    "one_loop_trace",
    "OneLoopTrace",
]


# ----------------------------------------------------------------------------------------------------------------
# Input checks, shared by every attention function (also meant for the tiled versions in flashmath.flash)
# ----------------------------------------------------------------------------------------------------------------


class AttentionInputs(NamedTuple):
    """Checked attention inputs, as returned by :func:`prepare_attention_inputs`.

    Attributes:
        q, k, v: the inputs as float arrays ``(..., N, D)``, ``(..., M, D)``, ``(..., M, Dv)`` (not copied when
            they already were float arrays: never write to them).
        scale: the score scale as a Python float (``1 / sqrt(D)`` unless given).
        keep: boolean ``(..., N, M)`` (leading dimensions possibly of size 1), True = attend, the combination of
            ``mask`` and ``causal``; ``None`` when every key is attended.
        batch_shape: the broadcast leading dimensions of ``q``, ``k``, ``v`` and ``mask``.
        N, M, D, Dv: the sizes.
        dtype: the promoted dtype of ``q``, ``k``, ``v`` (the variants' output dtype).
        causal: whether the bottom-right causal mask applies. It is already part of ``keep`` unless
            :func:`prepare_attention_inputs` was called with ``fold_causal=False`` (the tiled loops of
            :mod:`flashmath.flash` build it tile by tile instead of as a whole ``(N, M)`` array).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    keep: np.ndarray | None
    batch_shape: tuple
    N: int
    M: int
    D: int
    Dv: int
    dtype: np.dtype
    causal: bool = False


def prepare_attention_inputs(q, k, v, *, scale=None, causal=False, mask=None, fold_causal=True) -> AttentionInputs:
    """Check and normalise the arguments of an attention function (see the module docstring for conventions).

    With ``fold_causal=False`` the causal mask is not built into ``keep`` (only recorded in ``causal``), so a
    tiled loop never materialises an ``(N, M)`` array.

    Raises:
        NonFloatInputError: ``q``/``k``/``v`` not floating-point (integers, bools, complex, strings); it is both
            a ValueError and a TypeError.
        TypeError: a non-boolean ``mask``, a ``causal`` that is not a bool, a ``scale`` that is not a real number.
        ValueError: ``q``/``k``/``v`` with fewer than 2 dimensions, ``D`` of ``q`` and ``k`` differing or 0,
            ``k`` and ``v`` with different numbers of keys, leading dimensions or ``mask`` that do not broadcast
            to ``(..., N, M)``, a non-finite ``scale``.
    """
    q, k, v = (as_float_array(a, name, allow_int=False) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    for arr, name, shape in ((q, "q", "(..., N, D)"), (k, "k", "(..., M, D)"), (v, "v", "(..., M, Dv)")):
        if arr.ndim < 2:
            raise ValueError(f"{name} must have shape {shape} with at least 2 dimensions, got shape {arr.shape}")
    N, D = q.shape[-2:]
    M, Dk = k.shape[-2:]
    Mv, Dv = v.shape[-2:]
    if Dk != D:
        raise ValueError(
            f"q and k must have the same head dimension D, got D = {D} for q {q.shape} and {Dk} for k {k.shape}"
        )
    if D == 0:
        raise ValueError(f"the head dimension D must be at least 1, got q of shape {q.shape}")
    if Mv != M:
        raise ValueError(
            f"k and v must have the same number of keys M, got {M} for k {k.shape} and {Mv} for v {v.shape}"
        )
    try:
        batch_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading (batch, head) dimensions of q {q.shape[:-2]}, k {k.shape[:-2]} and v {v.shape[:-2]} "
            "do not broadcast"
        ) from None

    if scale is None:
        scale = 1.0 / math.sqrt(D)
    else:
        if isinstance(scale, (bool, np.bool_)) or np.ndim(scale) != 0 or np.asarray(scale).dtype.kind not in "iuf":
            raise TypeError(f"scale must be a real number (or None for 1/sqrt(D)), got {scale!r}")
        scale = float(scale)
        if not math.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale}")

    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(
            f"causal must be True or False, got {causal!r}; for the top-left alignment pass "
            "mask=flashmath.masks.causal_mask(N, M, align='top-left')"
        )
    keep = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask must be a boolean array (True = attend), got dtype {mask.dtype}; "
                "for an additive mask of 0 and -inf use mask = (bias == 0)"
            )
        while mask.ndim > len(batch_shape) + 2 and mask.shape[0] == 1:
            mask = mask[0]  # leading axes of size 1 beyond the inputs' add nothing: dropped, the output keeps its shape
        target = batch_shape + (N, M)
        try:
            full = np.broadcast_shapes(mask.shape, target)
        except ValueError:
            full = None
        if full is None or full[-2:] != (N, M):
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to (..., N, M) = (..., {N}, {M})")
        if full[:-2] != batch_shape:
            # a mask broadcasts against the scores, but never adds (batch, head) dimensions to the output
            raise ValueError(
                f"mask of shape {mask.shape} would widen the output: q, k and v's leading dimensions broadcast to "
                f"{batch_shape}, with the mask's to {full[:-2]}, so the rows of each (batch, head) element of q, k, v "
                f"would be computed under every element's mask, giving an output of shape {full[:-2] + (N, Dv)} instead of {batch_shape + (N, Dv)}. "
                f"Give the mask at most the inputs' leading dimensions, (..., N, M) = {batch_shape + (N, M)} "
                "(any of them may be 1): e.g. for q, k, v of shape (B, N, D) and padding_mask(lengths, M), which "
                "is (B, 1, 1, M) for (B, H, N, M) scores, pass padding_mask(lengths, M)[:, 0] (B, 1, M), or give "
                "q, k, v a head axis (q[:, None])"
            )
        mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)  # at least 2-D: (..., N or 1, M or 1)
        keep = np.broadcast_to(mask, mask.shape[:-2] + (N, M))  # (..., N, M), a read-only view
    if causal and fold_causal:
        tri = causal_mask(N, M)  # (N, M), bottom-right aligned
        keep = tri if keep is None else keep & tri
    try:
        dtype = np.result_type(q, k, v)
    except TypeError:  # e.g. bfloat16 with float16: numpy has no common type
        raise TypeError(f"q, k and v have no common floating-point type: {q.dtype}, {k.dtype}, {v.dtype}; "
                        "convert them to one dtype first") from None
    return AttentionInputs(q, k, v, scale, keep, batch_shape, N, M, D, Dv, dtype, bool(causal))


# ----------------------------------------------------------------------------------------------------------------
# The reference (chapter 3)
# ----------------------------------------------------------------------------------------------------------------


def attention(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Scaled dot-product attention ``A = softmax(mask(Q K^T * scale)) V``, computed directly in float64.

    This is the reference every other variant in the package is tested against: it materialises the scores
    ``X (..., N, M)`` and probabilities ``Y (..., N, M)`` and uses numpy's matrix products.

    Args:
        q: queries ``(..., N, D)``.
        k: keys ``(..., M, D)``.
        v: values ``(..., M, Dv)``. The leading dimensions of ``q``, ``k``, ``v`` broadcast.
        scale: factor applied to the scores; ``None`` means ``1 / sqrt(D)`` (Vaswani et al. 2017, 3.2.1).
        causal: if True, query ``n`` sees keys ``m <= n + M - N`` (bottom-right alignment, as FlashAttention 2.1+;
            with ``N = 1`` the query sees every key). For the top-left alignment pass
            ``mask=causal_mask(N, M, align="top-left")`` from :mod:`flashmath.masks`.
        mask: boolean array broadcastable to ``(..., N, M)``, True = attend; combined with ``causal`` by "and".
        return_lse: also return the logsumexp of each row of the scaled, masked scores.

    Inputs may be float16, float32 or float64; integers and bools are refused with
    :class:`~flashmath.softmax.NonFloatInputError` (convert them first). Inputs are not modified.

    Returns:
        ``A`` as float64 ``(..., N, Dv)``, and if ``return_lse`` the float64 logsumexp ``(..., N)``
        (``log sum_m exp(x_m)``, natural log). A fully masked row gives ``A = 0`` and logsumexp ``-inf``.

    Raises:
        TypeError, ValueError: see :func:`prepare_attention_inputs`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    q, k, v = (a.astype(np.float64, copy=False) for a in (inp.q, inp.k, inp.v))
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        # X = Q K^T * scale
        x = np.matmul(q, np.swapaxes(k, -1, -2)) * inp.scale  # (..., N, D) @ (..., D, M) -> (..., N, M)
    if inp.keep is not None:
        # mask(X): excluded scores become -inf, so exp gives them weight 0
        x = np.where(inp.keep, x, -np.inf)  # (..., N, M)
    # Y = softmax(X) row by row (safe softmax: a fully masked row gives zeros, not 0 / 0)
    y = safe_softmax(x)  # (..., N, M)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf in Y V is NaN, as in any matrix product
        # A = Y V, a masked key absent whatever its v row holds
        a = weighted_values(y, v, inp.keep)  # (..., N, M) @ (..., M, Dv) -> (..., N, Dv)
    g = np.max(x, axis=-1, initial=-np.inf)  # (..., N), the row max; -inf for a row with no key
    empty = g == -np.inf
    a = np.where(empty[..., None], 0.0, a)  # fully masked rows are 0 even where v holds NaN or inf
    a = np.broadcast_to(a, inp.batch_shape + (inp.N, inp.Dv)).copy()
    if not return_lse:
        return a
    g_safe = np.where(empty, 0.0, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        # logsumexp = g + log(sum_m exp(x_m - g)); -inf for a fully masked row, +inf for a row with a +inf score
        lse = logsumexp_of(g, np.sum(np.exp(x - g_safe[..., None]), axis=-1))  # (..., N)
    return a, np.broadcast_to(lse, inp.batch_shape + (inp.N,)).copy()


# ----------------------------------------------------------------------------------------------------------------
# Helpers of the loop variants
# ----------------------------------------------------------------------------------------------------------------


def weighted_values(p, v, keep) -> np.ndarray:
    """``P V`` with masked keys absent: ``(..., R, Dv)`` from weights ``p (..., R, C)`` and values ``v (..., C, Dv)``.

    A masked pair has weight exactly 0, and ``0 * x = 0`` for every finite ``x``, so the matrix product is right
    unless a value row is NaN or inf. Those rows are left out of the product and added back one key at a time,
    only for the rows that attend to them (there ``0 * inf`` stays NaN, as in any matrix product). ``keep``
    (broadcastable to ``p``, True = attend) may be None: every pair attends.
    """
    if keep is None:
        return np.matmul(p, v)
    finite = np.isfinite(v).all(axis=-1)  # (..., C): keys whose value row is finite
    if finite.all():
        return np.matmul(p, v)
    pv = np.matmul(p, np.where(finite[..., None], v, 0))  # (..., R, Dv)
    for c in np.flatnonzero(~finite.reshape(-1, finite.shape[-1]).all(axis=0)):
        attends = keep[..., :, c, None] & ~finite[..., None, c, None]  # (..., R, 1)
        pv = pv + np.where(attends, p[..., :, c, None] * v[..., None, c, :], 0)
    return pv


def logsumexp_of(g: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``L = g + log(s)`` from a row's running max and sum: ``-inf`` for a row with no key (``s = 0``), ``+inf``
    for a row with a ``+inf`` score (where ``s`` is NaN: ``inf - inf``), NaN where the row holds NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # L = g + log(s);  a fully masked row: -inf + log(0) = -inf
        return np.where(g == np.inf, np.inf, g + np.log(s))


def _value_term(weight, v, keep, m) -> np.ndarray:
    """``weight_m V[m, :]`` for every row, ``(..., N, Dv)``, and exactly 0 where key ``m`` is masked for the row
    (whatever ``V[m, :]`` holds: a masked key is absent)."""
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in a matrix product
        term = weight[..., None] * v[..., None, m, :]  # (..., N, 1) * (..., 1, Dv) -> (..., N, Dv)
    return term if keep is None else np.where(keep[..., :, m, None], term, 0)


def _setup(inp: AttentionInputs):
    """Cast to the compute dtype and fold the scale into Q (simplification 1 of chapter 3)."""
    dtype = compute_dtype(inp.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 (scale 0) is NaN, on purpose
        # Q * scale in float64, then the compute dtype: a scale such as 1e39 has no float32, but q * scale may
        q_scaled = (inp.q.astype(np.float64) * inp.scale).astype(dtype)  # (..., N, D), a new array
    k = inp.k.astype(dtype, copy=False)  # (..., M, D)
    v = inp.v.astype(dtype, copy=False)  # (..., M, Dv)
    rows = inp.batch_shape + (inp.N,)  # the shape of one per-row state (g, s, x_m, ...)
    return dtype, q_scaled, k, v, rows


def _score(q_scaled: np.ndarray, k: np.ndarray, keep: np.ndarray | None, m: int) -> np.ndarray:
    """The scores of key ``m`` for every row: ``x_m = Q[n, :] . K[m, :]``, ``-inf`` where masked. ``(..., N)``."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        # x_m = sum_d Q[n, d] * K[m, d]
        x_m = np.matmul(q_scaled, k[..., m, :, None])[..., 0]  # (..., N, D) @ (..., D, 1) -> (..., N)
    if keep is not None:
        x_m = np.where(keep[..., :, m], x_m, -np.inf)  # (..., N)
    return x_m


def _safe_state(g: np.ndarray, s: np.ndarray):
    """``g`` with ``-inf`` replaced by 0 and ``s`` with 0 replaced by 1: a row with no key seen yet.

    Used where ``g`` is subtracted and ``s`` divides, so that ``-inf - (-inf)`` and ``0 / 0`` never occur; the
    weights of such a row come out as ``exp(-inf) = 0``. NaN passes through unchanged.
    """
    return np.where(g == -np.inf, 0, g), np.where(s == 0, 1, s)


def _finish(a, g, s, inp: AttentionInputs, return_lse: bool):
    """Zero fully masked rows, cast to the output dtype, and add the logsumexp ``g + log(s)`` if asked."""
    a = np.where(s[..., None] == 0, 0, a).astype(inp.dtype, copy=False)  # (..., N, Dv)
    if not return_lse:
        return a
    return a, logsumexp_of(g, s)  # (..., N)


def _stack(states, dtype) -> np.ndarray:
    return np.stack(states).astype(dtype, copy=False)


def _require_keys(inp: AttentionInputs, name: str) -> None:
    if inp.M == 0:
        raise ValueError(f"{name} needs at least one key (M >= 1) to have steps to trace, got M = 0")


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: loop (1) + loop (2)
# ----------------------------------------------------------------------------------------------------------------


def _loop_1(q_scaled, k, keep, rows, dtype):
    """Loop (1): online softmax over each row of X. Yields ``(x_m, g_m, s_m)`` after each key ``m``."""
    g = np.full(rows, -np.inf, dtype=dtype)  # g_0 = -inf: no key seen yet
    s = np.zeros(rows, dtype=dtype)  # s_0 = 0
    one = dtype.type(1)
    for m in range(k.shape[-2]):
        x_m = _score(q_scaled, k, keep, m)  # (..., N)
        # g_m = max(g_{m-1}, x_m);  s_m = s_{m-1} * exp(g_{m-1} - g_m) + exp(x_m - g_m)
        g, s = merge(g, s, x_m, one)
        yield x_m, g, s


def _loop_2(q_scaled, k, v, keep, rows, dtype, g_M, s_M):
    """Loop (2): ``A`` accumulates ``y_m * V[m, :]``, one key at a time. Yields ``(y_m, A_m)``."""
    g_safe, s_safe = _safe_state(g_M, s_M)
    a = np.zeros(rows + (v.shape[-1],), dtype=dtype)  # A_0 = 0: (..., N, Dv)
    for m in range(k.shape[-2]):
        x_m = _score(q_scaled, k, keep, m)  # recomputed: X is never stored, (..., N)
        with np.errstate(invalid="ignore"):  # +inf - +inf: NaN, on purpose
            # y_m = exp(x_m - g_M) / s_M
            y_m = np.exp(x_m - g_safe) / s_safe  # (..., N)
        # A_m = A_{m-1} + y_m * V[m, :]   (a vector of length Dv per row; nothing where key m is masked)
        a = a + _value_term(y_m, v, keep, m)  # (..., N, Dv)
        yield y_m, a


def two_loop_attention(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Attention in two passes over the keys: loop (1) finds ``g_M, s_M``, loop (2) accumulates ``A``.

    Loop (1) is online softmax on each row of ``X``: ``g_m = max(g_{m-1}, x_m)``,
    ``s_m = s_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m)``. Loop (2) must wait for the final ``g_M, s_M``; it then
    adds ``y_m V[m, :]`` with ``y_m = exp(x_m - g_M) / s_M`` (the matrix product ``Y V`` with its m and d loops
    swapped, see :func:`matmul_nmd`). Each ``y_m`` is used once and dropped, so neither ``X`` nor ``Y`` is stored
    whole; the price is that ``K`` is read twice (loop (2) recomputes ``x_m``) and ``V`` once. The loops run over
    ``m`` in Python, vectorised over the leading dimensions and the rows ``n``.

    Args, conventions, errors: as :func:`attention`.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (computed in float32 for float16 input), and if
        ``return_lse`` the logsumexp ``g_M + log(s_M)`` ``(..., N)`` in the compute dtype.

    Source: Milakov and Gimelshein (2018), algorithm 3, applied to the rows of ``X``.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    dtype, q_scaled, k, v, rows = _setup(inp)
    g = np.full(rows, -np.inf, dtype=dtype)  # the state of M == 0: no key
    s = np.zeros(rows, dtype=dtype)
    for _, g, s in _loop_1(q_scaled, k, inp.keep, rows, dtype):
        pass
    a = np.zeros(rows + (inp.Dv,), dtype=dtype)
    for _, a in _loop_2(q_scaled, k, v, inp.keep, rows, dtype, g, s):
        pass
    return _finish(a, g, s, inp, return_lse)


@dataclass(frozen=True)
class TwoLoopTrace:
    """Per-key states of :func:`two_loop_attention`; entry ``[m - 1]`` is the state after the first ``m`` keys.

    Keys are counted from 1 in the math (``x_m``, ``g_m``, ``s_m`` after keys ``1..m``) and from 0 in code: the state
    after key ``m`` is ``trace.g[m - 1]``, after all keys ``trace.g[-1]``.

    Attributes (compute dtype; ``...`` are the broadcast leading dimensions):
        x: ``(M, ..., N)`` the scores ``x_m`` of key ``m`` for every row (scaled; ``-inf`` where masked).
        g: ``(M, ..., N)`` loop (1): the running max ``g_m``.
        s: ``(M, ..., N)`` loop (1): the running sum ``s_m``.
        y: ``(M, ..., N)`` loop (2): the probabilities ``y_m = exp(x_m - g_M) / s_M``.
        a: ``(M, ..., N, Dv)`` loop (2): the partial sums ``A_m = sum_{i <= m} y_i V_i`` (``V_i`` = ``v[i - 1]``).
        output: ``(..., N, Dv)`` the result of :func:`two_loop_attention` (``a[-1]``, fully masked rows 0).
        lse: ``(..., N)`` its logsumexp.
    """

    x: np.ndarray
    g: np.ndarray
    s: np.ndarray
    y: np.ndarray
    a: np.ndarray
    output: np.ndarray
    lse: np.ndarray

    def __len__(self) -> int:
        return len(self.x)


def two_loop_trace(q, k, v, *, scale=None, causal=False, mask=None) -> TwoLoopTrace:
    """Run :func:`two_loop_attention` and keep every per-key state of both loops (for the chapter 4 widget).

    Args, errors: as :func:`attention`; ``M >= 1`` is also required (ValueError).

    Returns:
        :class:`TwoLoopTrace`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    _require_keys(inp, "two_loop_trace")
    dtype, q_scaled, k, v, rows = _setup(inp)
    loop_1 = list(_loop_1(q_scaled, k, inp.keep, rows, dtype))
    g_M, s_M = loop_1[-1][1], loop_1[-1][2]
    loop_2 = list(_loop_2(q_scaled, k, v, inp.keep, rows, dtype, g_M, s_M))
    output, lse = _finish(loop_2[-1][1], g_M, s_M, inp, return_lse=True)
    return TwoLoopTrace(
        x=_stack([np.broadcast_to(x_m, rows) for x_m, _, _ in loop_1], dtype),
        g=_stack([g for _, g, _ in loop_1], dtype),
        s=_stack([s for _, _, s in loop_1], dtype),
        y=_stack([np.broadcast_to(y_m, rows) for y_m, _ in loop_2], dtype),
        a=_stack([a for _, a in loop_2], dtype),
        output=output,
        lse=lse,
    )


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: the loop swap, as explicit scalar loops
# ----------------------------------------------------------------------------------------------------------------


def _matmul_operands(y, v):
    y, v = as_float_array(y, "y"), as_float_array(v, "v")
    if y.ndim != 2 or v.ndim != 2:
        raise ValueError(f"y must be (N, M) and v (M, Dv), both 2-D; got shapes {y.shape} and {v.shape}")
    if y.shape[1] != v.shape[0]:
        raise ValueError(f"y (N, M) and v (M, Dv) must share M, got shapes {y.shape} and {v.shape}")
    out_dtype = np.result_type(y, v)
    dtype = compute_dtype(out_dtype)
    # plain Python lists of numpy scalars of the compute dtype: every + and * is one rounded scalar operation
    y_rows = [list(row) for row in y.astype(dtype, copy=False)]  # N lists of M scalars
    v_rows = [list(row) for row in v.astype(dtype, copy=False)]  # M lists of Dv scalars
    return y_rows, v_rows, y.shape[0], y.shape[1], v.shape[1], dtype, out_dtype


def matmul_ndm(y, v) -> np.ndarray:
    """``A = Y V`` with explicit loops in the original order ``for n: for d: for m`` (one element of A at a time).

    ``A[n, d] = sum_m Y[n, m] V[m, d]`` is summed in the order ``m = 0, 1, ..., M - 1`` by scalar operations
    (numpy scalars of the compute dtype, no fused multiply-add). :func:`matmul_nmd` keeps that order for every
    element, so the two results are bitwise equal.

    These are Python loops over scalars, ``N * M * Dv`` steps: keep the inputs small (a few thousand steps).

    Args:
        y: ``(N, M)``, e.g. the probabilities ``Y``.
        v: ``(M, Dv)``.

    Returns:
        ``(N, Dv)`` in the promoted input dtype (accumulated in float32 for float16 input).

    Raises:
        TypeError: non-real input. ValueError: not 2-D, or the inner dimensions differ.
    """
    y_rows, v_rows, N, M, Dv, dtype, out_dtype = _matmul_operands(y, v)
    out = np.zeros((N, Dv), dtype=dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in any matrix product
        for n in range(N):
            for d in range(Dv):
                total = dtype.type(0)
                for m in range(M):
                    # A[n, d] = sum_m Y[n, m] V[m, d], one term at a time in the order m = 0, 1, ...
                    total = total + y_rows[n][m] * v_rows[m][d]
                out[n, d] = total
    return out.astype(out_dtype, copy=False)


def _matmul_nmd(y, v, keep_partial: bool):
    y_rows, v_rows, N, M, Dv, dtype, out_dtype = _matmul_operands(y, v)
    out = np.zeros((N, Dv), dtype=dtype)
    partial = np.zeros((N, M, Dv), dtype=dtype) if keep_partial else None  # row n of A after keys 0..m
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in any matrix product
        for n in range(N):
            acc = [dtype.type(0)] * Dv  # the row of partial sums of A[n, :]
            for m in range(M):
                for d in range(Dv):
                    # acc[d] = acc[d] + Y[n, m] V[m, d]: every element still gets its terms in the order m = 0, 1, ...
                    acc[d] = acc[d] + y_rows[n][m] * v_rows[m][d]
                if keep_partial:
                    partial[n, m] = acc
            out[n] = acc
    return out.astype(out_dtype, copy=False), partial


def matmul_nmd(y, v) -> np.ndarray:
    """``A = Y V`` with the m and d loops swapped: ``for n: for m: for d`` (a row of partial sums per key).

    For each row ``n`` the whole row ``A[n, :]`` of partial sums is kept, and key ``m`` adds ``Y[n, m] V[m, :]``
    to it. Every element still receives its terms in the order ``m = 0, 1, ..., M - 1``, so the result is
    bitwise equal to :func:`matmul_ndm`; only the order of the work changed. This is loop (2) of chapter 4.

    Explicit scalar loops, ``N * M * Dv`` steps: keep the inputs small.

    Args, returns, errors: as :func:`matmul_ndm`.
    """
    return _matmul_nmd(y, v, keep_partial=False)[0]


@dataclass(frozen=True)
class LoopSwapTrace:
    """The rows of partial sums of :func:`matmul_nmd`, for the chapter 4 slider.

    Attributes (compute dtype):
        y: ``(N, M)`` and v: ``(M, Dv)``, the operands.
        partial: ``(N, M, Dv)``; ``partial[n, m - 1]`` is row ``n`` of ``A`` after the first ``m`` keys (code
            indices ``0..m-1``), ``sum_{m' < m} Y[n, m'] V[m', :]``.
        a: ``(N, Dv)`` the product (equal to ``partial[:, -1]``, bitwise equal to :func:`matmul_ndm`).
    """

    y: np.ndarray
    v: np.ndarray
    partial: np.ndarray
    a: np.ndarray

    def __len__(self) -> int:
        return self.y.shape[1]


def loop_swap_trace(y, v) -> LoopSwapTrace:
    """Run :func:`matmul_nmd` and keep the row of partial sums after every key. Small inputs only (scalar loops).

    Raises:
        as :func:`matmul_ndm`; also ValueError for ``M == 0`` (no steps).
    """
    y_arr, v_arr = as_float_array(y, "y"), as_float_array(v, "v")
    if y_arr.ndim == 2 and y_arr.shape[1] == 0:
        raise ValueError("loop_swap_trace needs at least one key (M >= 1), got y of shape " + str(y_arr.shape))
    dtype = compute_dtype(np.result_type(y_arr, v_arr))
    a, partial = _matmul_nmd(y_arr, v_arr, keep_partial=True)
    return LoopSwapTrace(y=y_arr.astype(dtype), v=v_arr.astype(dtype), partial=partial, a=partial[:, -1].copy())


# ----------------------------------------------------------------------------------------------------------------
# Chapter 5: one loop
# ----------------------------------------------------------------------------------------------------------------


def _one_loop(q_scaled, k, v, keep, rows, dtype):
    """The merged loop. Yields ``(x_m, g_m, s_m, correction_m, weight_m, A'_m)`` after each key ``m``."""
    g = np.full(rows, -np.inf, dtype=dtype)  # g_0 = -inf
    s = np.zeros(rows, dtype=dtype)  # s_0 = 0
    a = np.zeros(rows + (v.shape[-1],), dtype=dtype)  # A'_0 = 0: (..., N, Dv)
    one = dtype.type(1)
    for m in range(k.shape[-2]):
        g_prev, s_prev = g, s
        # 1. score:  x_m = Q[n, :] . K[m, :]
        x_m = _score(q_scaled, k, keep, m)  # (..., N)
        # 2. max:    g_m = max(g_{m-1}, x_m)
        # 3. sum:    s_m = s_{m-1} * exp(g_{m-1} - g_m) + exp(x_m - g_m)
        g, s = merge(g_prev, s_prev, x_m, one)
        g_safe, s_safe = _safe_state(g, s)  # no key seen yet: weights exp(-inf) = 0, no -inf - (-inf)
        with np.errstate(invalid="ignore"):  # +inf - +inf: NaN, on purpose
            # correction_m = s_{m-1} * exp(g_{m-1} - g_m) / s_m;  weight_m = exp(x_m - g_m) / s_m  (they sum to 1)
            correction = s_prev * np.exp(g_prev - g_safe) / s_safe  # (..., N)
            weight = np.exp(x_m - g_safe) / s_safe  # (..., N)
        with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in a matrix product
            # 4. attention:  A'_m = A'_{m-1} * s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m * V_m
            a = a * correction[..., None] + _value_term(weight, v, keep, m)  # (..., N, Dv)
        yield x_m, g, s, correction, weight, a


def one_loop_attention(q, k, v, *, scale=None, causal=False, mask=None, return_lse=False):
    """Attention in one pass over the keys: four steps per key (score, max, sum, attention).

    ``A'_m``, the attention output over the first ``m`` keys only, follows the recurrence

        A'_m = A'_{m-1} * s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m * V_m

    from ``A'_0 = 0``; only ``A'_M = A`` is the answer. Nothing waits for the final ``g_M, s_M``: this is the
    rescaling of FlashAttention section 3.1 with one key per block. ``K`` and ``V`` are each read once, and the
    per-row state is just ``(g, s, A')``. The loop runs over ``m`` in Python, vectorised over the leading
    dimensions and the rows ``n``.

    Args, conventions, errors: as :func:`attention`.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (computed in float32 for float16 input), and if
        ``return_lse`` the logsumexp ``g_M + log(s_M)`` ``(..., N)`` in the compute dtype.

    Sources: Dao et al. (2022), section 3.1; Milakov and Gimelshein (2018) for ``g_m`` and ``s_m``.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    dtype, q_scaled, k, v, rows = _setup(inp)
    g = np.full(rows, -np.inf, dtype=dtype)  # the state of M == 0: no key
    s = np.zeros(rows, dtype=dtype)
    a = np.zeros(rows + (inp.Dv,), dtype=dtype)
    for _, g, s, _, _, a in _one_loop(q_scaled, k, v, inp.keep, rows, dtype):
        pass
    return _finish(a, g, s, inp, return_lse)


@dataclass(frozen=True)
class OneLoopTrace:
    """Per-key states of :func:`one_loop_attention`; entry ``[m - 1]`` is the state after the first ``m`` keys.

    Keys are counted from 1 in the math (``A'_m`` over keys ``1..m``) and from 0 in code: ``A'_m`` is
    ``trace.a[m - 1]``, ``A'_M = trace.a[-1]``.

    Attributes (compute dtype unless noted; ``...`` are the broadcast leading dimensions):
        x: ``(M, ..., N)`` the scores ``x_m`` (scaled; ``-inf`` where masked).
        g: ``(M, ..., N)`` the running max ``g_m``.
        s: ``(M, ..., N)`` the running sum ``s_m``.
        correction: ``(M, ..., N)`` the factor ``s_{m-1} exp(g_{m-1} - g_m) / s_m`` applied to ``A'_{m-1}``.
        weight: ``(M, ..., N)`` the weight ``exp(x_m - g_m) / s_m`` of ``V_m``; ``correction + weight = 1``
            (both 0 while a row has seen no key).
        a: ``(M, ..., N, Dv)`` the outputs ``A'_m`` over the first ``m`` keys.
        target: ``(..., N, Dv)`` float64, :func:`attention` of the same inputs, which ``A'_M`` reaches.
    """

    x: np.ndarray
    g: np.ndarray
    s: np.ndarray
    correction: np.ndarray
    weight: np.ndarray
    a: np.ndarray
    target: np.ndarray

    def __len__(self) -> int:
        return len(self.x)


def one_loop_trace(q, k, v, *, scale=None, causal=False, mask=None) -> OneLoopTrace:
    """Run :func:`one_loop_attention` and keep every per-key state (for the chapter 5 widget).

    Args, errors: as :func:`attention`; ``M >= 1`` is also required (ValueError).

    Returns:
        :class:`OneLoopTrace`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    _require_keys(inp, "one_loop_trace")
    dtype, q_scaled, k_c, v_c, rows = _setup(inp)
    steps = list(_one_loop(q_scaled, k_c, v_c, inp.keep, rows, dtype))
    return OneLoopTrace(
        x=_stack([np.broadcast_to(step[0], rows) for step in steps], dtype),
        g=_stack([step[1] for step in steps], dtype),
        s=_stack([step[2] for step in steps], dtype),
        correction=_stack([step[3] for step in steps], dtype),
        weight=_stack([step[4] for step in steps], dtype),
        a=_stack([step[5] for step in steps], dtype),
        target=attention(q, k, v, scale=scale, causal=causal, mask=mask),
    )
