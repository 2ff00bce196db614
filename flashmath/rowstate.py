"""The running-state algebra every loop of the course shares (chapters 2, 5-8, 10, 11).

A row's state after some keys is ``(g, s)``: the running max ``g`` and the running sum ``s = sum exp(x - g)``;
the empty state ``(-inf, 0)`` is the identity of the merge. With an output, the state is ``(A, L)``: the
normalised output over those keys and the logsumexp ``L = g + log(s)``. Everything here is plain numpy on arrays
already checked (the public, checked forms are :func:`flashmath.softmax.merge` and :func:`merge_states`):

* :func:`initial_state` - the state before any key: ``(-inf, 0)``, or ``(sink, 1)`` with a learnable sink;
* :func:`lazy_reference` - FlashAttention-4's lazy rescaling: keep a stale reference point while the max grows by
  less than a threshold;
* :func:`merge_rows` - the merge of two ``(g, s)`` states (chapter 2);
* :func:`merge_states` - the merge of two ``(A, L)`` states (chapter 10, split-KV);
* :func:`logsumexp_of` - ``L`` from ``(g, s)``;
* :func:`max_or_zero` and :func:`sum_or_one` - the one guard for a row that has seen no key yet: ``g = -inf`` is
  measured against 0 and ``s = 0`` divides as 1, so ``-inf - (-inf)`` and ``0 / 0`` never occur;
* :func:`weighted_values` - ``P V`` with masked keys absent (never ``0 * NaN``);
* :func:`finish` - the end of a row: ``A = acc / s``, 0 for a row that saw no key.

The conventions these keep (a row with no key outputs 0 with ``L = -inf``; NaN stays NaN; a ``+inf`` score
gives ``L = +inf``) are stated once, in :mod:`flashmath.inputs`.

Sources: M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax" (2018), section 3.1;
T. Dao, "FlashAttention-2" (2023), section 3.1 (the logsumexp saved per row); T. Dao, D. Haziza, F. Massa,
G. Sizov, "Flash-Decoding for long-context inference" (2023).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array

__all__ = [
    "LN2",
    "empty_state",
    "finish",
    "initial_state",
    "lazy_reference",
    "logsumexp_of",
    "max_or_zero",
    "merge_rows",
    "merge_states",
    "sum_or_one",
    "weighted_values",
]


def empty_state(rows: tuple, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The state ``(g, s) = (-inf, 0)`` of rows that have seen no key, each of shape ``rows``."""
    return np.full(rows, -np.inf, dtype=dtype), np.zeros(rows, dtype=dtype)


def initial_state(rows: tuple, dtype: np.dtype, sink: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The state ``(g, s)`` of rows that have seen no key, each of shape ``rows`` (``(..., R)``).

    Without a sink, :func:`empty_state`: ``(-inf, 0)``. With a learnable sink ``sink`` (shape ``rows[:-1]``, one
    logit per leading (batch, head) element), the sink is a score already seen, one with no value: ``g = sink``,
    ``s = exp(sink - sink) = 1`` (and the output accumulator stays 0), measured against 0 where the sink is
    ``-inf`` (:func:`max_or_zero`). So a ``-inf`` sink gives exactly ``(-inf, 0)``, the state without a sink, and
    the result is bitwise the one without; a NaN sink gives ``(NaN, NaN)`` and a ``+inf`` sink ``(+inf, NaN)``,
    like a NaN or ``+inf`` score that every row of the head sees: every output row NaN (a row with no key too:
    ``0 / NaN``), the logsumexp NaN or ``+inf``. Source: GPT-OSS's reference (``openai/gpt-oss``,
    ``gpt_oss/torch/model.py``, ``sdpa``: the sink column concatenated to the scores, softmax, the column dropped
    before ``P V``)."""
    if sink is None:
        return empty_state(rows, dtype)
    g = np.broadcast_to(np.asarray(sink, dtype=dtype)[..., None], rows).copy()  # g = sink
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, on purpose
        s = np.exp(g - max_or_zero(g))  # s = exp(sink - sink) = 1; a -inf sink is no sink: exp(-inf - 0) = 0
    return g, s


LN2 = math.log(2.0)
"""``ln 2``: FlashAttention-4's threshold is in log2 units (its exponentials are ``exp2``), the loops' in natural
units."""


def lazy_reference(
    g_old: np.ndarray,
    g_max: np.ndarray,
    threshold: float,
    counts: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """FlashAttention-4's lazy (conditional) rescaling: the reference point ``g`` that a tile step measures its
    weights against, and the one it keeps.

    ``g_old`` ``(..., R)`` is the row's reference so far (``-inf`` before any key), ``g_max = max(g_old,
    rowmax(X_ij))`` the row's new max. The reference moves to ``g_max`` (``acc`` and ``s`` are rescaled by
    ``exp(g_old - g_max)``) only when the max has grown by more than ``threshold`` in log2 units, ``g_max - g_old
    > threshold ln 2``; otherwise the old, stale reference is kept (no rescale: ``alpha = 1``), so every weight
    ``exp(x - g)`` of the row is at most ``2^threshold``. A row without a reference yet (``g_old = -inf``) takes
    ``g_max``; ``+inf`` and NaN go through as in the eager update. Both ``s`` and ``acc`` are measured against the
    same reference, so ``acc / s`` and the logsumexp ``g + log(s)`` are exact whatever reference was kept:
    chapter 2's lesson that an intermediate may change meaning as long as the final one is right.

    ``threshold = 0`` is the eager update (the reference is the max). FlashAttention-4 uses 8.0 for 16-bit inputs
    and 0 otherwise (``flash_attn/cute/flash_fwd_sm100.py``; the test ``acc_scale_ >= -rescale_threshold`` of
    ``SoftmaxSm100.update_row_max`` in ``flash_attn/cute/softmax.py``, where ``acc_scale_ = (row_max_old -
    row_max_new) * scale_log2`` is in log2 units).

    ``counts``: ``(done, kept)`` integer arrays ``(..., R)`` updated in place: a row whose max grew above a
    reference it already had counts as *done* when the reference moved (a rescale) and *kept* when it stayed.

    Returns:
        ``(g_new, g_ref)``: the reference kept in the state, and the same with ``-inf`` measured against 0
        (:func:`max_or_zero`).

    Source: T. Zadouri et al., "FlashAttention-4: Algorithm and Kernel Pipelining Co-Design for Asymmetric Hardware
    Scaling" (2026; conditional softmax rescaling, listed in its abstract); flash-attention's ``flash_attn/cute``.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        had = g_old > -np.inf  # the row has a reference (a key or a sink seen)
        if threshold > 0:
            # keep the old reference while the max grew by at most the threshold (log2 units: exp(x - g) <= 2^t)
            stale = had & (g_max - g_old <= threshold * LN2)
            g_new = np.where(stale, g_old, g_max)
        else:
            g_new = g_max
        if counts is not None:
            grew = had & (g_max > g_old)  # the eager update would rescale this row
            moved = g_new != g_old
            done, kept = counts
            done += grew & moved
            kept += grew & ~moved
    return g_new, max_or_zero(g_new)


def max_or_zero(g: np.ndarray) -> np.ndarray:
    """The running max ``g`` to measure the scores against: ``g``, with 0 where it is ``-inf`` (a row that has seen
    no key yet), so that the weights of such a row come out as ``exp(-inf - 0) = 0`` instead of
    ``exp(-inf - (-inf)) = NaN``. ``+inf`` and NaN pass through."""
    return np.where(g == -np.inf, 0, g)


def sum_or_one(s: np.ndarray) -> np.ndarray:
    """The running sum ``s`` to divide by: ``s``, with 1 where it is 0 (a row that has seen no key), so that
    ``0 / 1 = 0``, not ``0 / 0``."""
    return np.where(s == 0, 1, s)


def finish(acc: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``A = acc / s`` for an unnormalised accumulator ``acc (..., R, Dv)`` and sums ``s (..., R)``; a row that saw
    no key (``s = 0``, ``acc = 0``) gives 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return acc / sum_or_one(s)[..., None]


def merge_rows(g1: Any, s1: Any, g2: Any, s2: Any) -> tuple[np.ndarray, np.ndarray]:
    """The merge of two ``(g, s)`` states on arrays already checked: ``g = max(g1, g2)``,
    ``s = s1 exp(g1 - g) + s2 exp(g2 - g)``. :func:`flashmath.softmax.merge` is the checked public form (chapter 2);
    the loops of every chapter call this one. Where ``g`` is ``+inf``, ``s`` is left NaN (``inf - inf``): the loops
    read such a row's logsumexp as ``+inf`` from ``g`` (:func:`logsumexp_of`), and
    :func:`flashmath.softmax.merge` applies the ``+inf`` convention of :mod:`flashmath.softmax`."""
    g = np.maximum(g1, g2)  # g = max(g1, g2); NaN propagates
    with np.errstate(invalid="ignore", over="ignore"):
        # s = s1 * exp(g1 - g) + s2 * exp(g2 - g)
        s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)
        # Where g = -inf, -inf - (-inf) is NaN: both parts are empty, so s = 0 (0 * NaN keeps a NaN s1 or s2).
        s = np.where(g == -np.inf, 0 * (s1 + s2), s)
    return g, s


def merge_states(a1: ArrayLike, lse1: ArrayLike, a2: ArrayLike, lse2: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The output and logsumexp of two disjoint key ranges merged into those of their union.

    Args:
        a1, a2: outputs of each range alone, ``(..., N, Dv)`` (normalised over that range's keys).
        lse1, lse2: their logsumexps ``(..., N)`` (natural log; ``-inf`` for a range with no key to attend to).

    Returns:
        ``(a, lse)``: ``lse = logaddexp(lse1, lse2)`` and ``a = exp(lse1 - lse) a1 + exp(lse2 - lse) a2``, in the
        promoted dtype (at least float32), shapes broadcast. A range with ``lse = -inf`` contributes nothing,
        whatever its output holds (NaN or inf included); both ``-inf`` gives ``a = 0``, ``lse = -inf``. NaN in an
        ``lse`` propagates to that row; an ``lse`` of ``+inf`` gives that row ``lse = +inf`` and a NaN output.

    Raises:
        TypeError: non-real input. ValueError: shapes that do not broadcast, or ``lse`` not matching ``a``
        without its last axis.

    Source: the Flash-Decoding reduction (Dao et al. 2023); Milakov and Gimelshein (2018), section 3.1.
    """
    a1, lse1, a2, lse2 = (
        as_float_array(x, name) for x, name in ((a1, "a1"), (lse1, "lse1"), (a2, "a2"), (lse2, "lse2"))
    )
    for a, lse, name in ((a1, lse1, "1"), (a2, lse2, "2")):
        try:
            ok = a.ndim >= 1 and np.broadcast_shapes(a.shape[:-1], lse.shape) == a.shape[:-1]
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"lse{name} must have the shape of a{name} without its last axis (..., N): got "
                f"a{name} {a.shape} and lse{name} {lse.shape}"
            )
    dtype = np.result_type(a1, a2, lse1, lse2, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        # L = log(exp(L_1) + exp(L_2)); logaddexp(-inf, -inf) = -inf
        lse = np.logaddexp(lse1, lse2).astype(dtype)  # (..., N)
        # w_p = exp(L_p - L): the share of part p in the merged sum; a part with L_p = -inf has share 0
        w1 = np.where(lse1 == -np.inf, 0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0, np.exp(lse2 - lse))
        # A = w_1 A_1 + w_2 A_2, where an absent part's output is never read (NaN * 0 would be NaN)
        a = np.where(lse1[..., None] == -np.inf, 0, w1[..., None] * a1) + np.where(
            lse2[..., None] == -np.inf, 0, w2[..., None] * a2
        )
    return a.astype(dtype, copy=False), lse


def logsumexp_of(g: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``L = g + log(s)`` from a row's running max and sum: ``-inf`` for a row with no key (``s = 0``), ``+inf``
    for a row with a ``+inf`` score (where ``s`` is NaN: ``inf - inf``), NaN where the row holds NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # L = g + log(s);  a fully masked row: -inf + log(0) = -inf
        return np.where(g == np.inf, np.inf, g + np.log(s))


def weighted_values(p: np.ndarray, v: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
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
