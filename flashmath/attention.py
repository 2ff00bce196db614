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

Conventions (shapes, scale, masks, fully masked rows, absent keys, dtypes, errors) are stated once, in
:mod:`flashmath.inputs`; every function here keeps them.

Sources: A. Vaswani et al., "Attention Is All You Need" (2017), section 3.2.1 (scaled dot-product attention and
the ``1 / sqrt(D)`` scale); M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax" (2018)
(the running max and sum); T. Dao et al., "FlashAttention" (2022), section 3.1 (rescaling the output when the
max changes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from flashmath._checks import as_float_array, compute_dtype, float_dtype

# AttentionInputs and prepare_attention_inputs live in flashmath.inputs; they are imported here too because
# "flashmath.attention.prepare_attention_inputs" is where the course's text and older code find them.
from flashmath.inputs import AttentionInputs, compute_operands, prepare_attention_inputs, require_keys
from flashmath.memory import Memory, PlainMemory
from flashmath.rowstate import logsumexp_of, max_or_zero, merge_rows, sum_or_one, weighted_values
from flashmath.softmax import safe_softmax

__all__ = [
    "AttentionInputs",
    "prepare_attention_inputs",
    "attention",
    "scores_of",
    "standard_attention",
    "standard_arrays",
    "standard_run",
    "loop_arrays",
    "two_loop_run",
    "one_loop_run",
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
# The reference (chapter 3)
# ----------------------------------------------------------------------------------------------------------------


def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    return_lse: bool = False,
    learnable_sink: ArrayLike | None = None,
) -> Any:
    """Scaled dot-product attention ``A = softmax(mask(Q K^T * scale)) V``, computed directly in float64.

    This is the reference every other variant in the package is tested against: it materialises the scores
    ``X (..., N, M)`` and probabilities ``Y (..., N, M)`` and uses numpy's matrix products.

    Args:
        q: queries ``(..., N, D)``.
        k: keys ``(..., M, D)``.
        v: values ``(..., M, Dv)``. The leading dimensions of ``q``, ``k``, ``v`` broadcast.
        scale: factor applied to the scores; ``None`` means ``1 / sqrt(D)`` (Vaswani et al. 2017, 3.2.1).
        causal: the causal mask (its alignment: :mod:`flashmath.inputs`, the conventions' home); for the
            top-left alignment pass ``mask=causal_mask(N, M, align="top-left")`` from :mod:`flashmath.masks`.
        mask: boolean array broadcastable to ``(..., N, M)`` (see :mod:`flashmath.inputs`); combined with
            ``causal`` by "and".
        return_lse: also return the logsumexp of each row of the scaled, masked scores.
        learnable_sink: None, or the attention sink logits (chapter 13), one per query head: ``(H,)`` for leading
            dimensions ``(..., H)`` (or ``(B, H)``, or a scalar; :func:`flashmath.inputs.check_sink`). Computed by
            the explicit formula of GPT-OSS's reference (``openai/gpt-oss``, ``gpt_oss/torch/model.py``, ``sdpa``;
            HF transformers' ``eager_attention_forward`` in ``models/gpt_oss/modeling_gpt_oss.py``): the sink
            column concatenated to the scaled, masked scores, the softmax of each row of ``(..., N, M + 1)``, the
            sink column dropped before ``Y V``. The logsumexp then includes the sink term, and a row with no key
            gives 0 and logsumexp = the sink.

    Inputs may be float16, float32 or float64; integers and bools are refused with
    :class:`~flashmath.softmax.NonFloatInputError` (convert them first). Inputs are not modified.

    Returns:
        ``A`` as float64 ``(..., N, Dv)``, and if ``return_lse`` the float64 logsumexp ``(..., N)``
        (``log sum_m exp(x_m)``, natural log). A fully masked row gives ``A = 0`` and logsumexp ``-inf``.

    Raises:
        TypeError, ValueError: see :func:`prepare_attention_inputs` (and :func:`flashmath.inputs.check_sink`).
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, learnable_sink=learnable_sink)
    v = inp.v.astype(np.float64, copy=False)
    x = scores_of(inp)  # X = mask(Q K^T * scale), float64, (..., N, M)
    if inp.sink is not None:
        return _attention_with_sink(inp, inp.sink, x, v, return_lse)
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


def _attention_with_sink(inp: AttentionInputs, sink: np.ndarray, x: np.ndarray, v: np.ndarray, return_lse: bool) -> Any:
    """:func:`attention` with a learnable sink, by GPT-OSS's explicit formula (``gpt_oss/torch/model.py``,
    ``sdpa``): ``QK = cat([QK, S], -1)``, ``W = softmax(QK)``, ``W = W[..., :-1]``, ``attn = W V``."""
    rows = inp.batch_shape + (inp.N,)
    x = np.broadcast_to(x, rows + (inp.M,))
    column = np.broadcast_to(sink[..., None, None], rows + (1,))  # the sink column, the same for every row
    # the scores and the sink column: (..., N, M + 1)
    combined = np.concatenate([x, column], axis=-1)
    # Y = softmax over the keys and the sink, row by row; then the sink column is dropped (it has no value)
    y = safe_softmax(combined)[..., : inp.M]  # (..., N, M)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf in Y V is NaN, as in any matrix product
        # A = Y V over the keys only
        a = weighted_values(y, v, inp.keep)  # (..., N, Dv)
    empty = np.max(x, axis=-1, initial=-np.inf) == -np.inf  # a row with no key: A = 0, whatever v holds
    a = np.where(empty[..., None], 0.0, a)
    # every row sees its sink: a NaN or +inf sink makes the row's softmax, so its output, NaN (keys or not)
    a = np.where(~(column < np.inf), np.nan, a)
    a = np.broadcast_to(a, rows + (inp.Dv,)).copy()
    if not return_lse:
        return a
    g = np.max(combined, axis=-1)  # (..., N), the row max over the keys and the sink
    g_safe = np.where(g == -np.inf, 0.0, g)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # logsumexp over the keys and the sink: log(sum_m exp(x_m) + exp(sink))
        lse = logsumexp_of(g, np.sum(np.exp(combined - g_safe[..., None]), axis=-1))
    return a, lse


def standard_arrays(inp: AttentionInputs, stored_dtype: DTypeLike | None = None) -> dict:
    """The arrays of Algorithm 0 (:func:`standard_run`), to put in a memory: ``Q`` (scaled), ``K``, ``V`` in the
    compute dtype, and ``X``, ``Y`` ``(..., N, M)`` and ``A`` ``(..., N, Dv)`` in ``stored_dtype`` (default: the
    compute dtype)."""
    dtype, q_scaled, k, v, rows = compute_operands(inp)
    stored = dtype if stored_dtype is None else np.dtype(stored_dtype)
    scores = rows + (inp.M,)
    return {
        "Q": q_scaled,
        "K": k,
        "V": v,
        "X": np.empty(scores, stored),
        "Y": np.empty(scores, stored),
        "A": np.empty(rows + (inp.Dv,), stored),
    }


def standard_run(memory: Memory, inp: AttentionInputs) -> None:
    """FlashAttention's Algorithm 0 on the arrays in ``memory`` (:func:`standard_arrays`): three passes through
    memory, each written in the dtype of its array and computed in the compute dtype.

        X = Q K^T          matrix product accumulated in the compute dtype, stored
        Y = softmax(X)     safe softmax computed from the stored X, stored
        A = Y V            matrix product from the stored Y, stored; a masked key is absent
    """
    compute = memory["K"].dtype
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs, float16 overflow: on purpose
        with memory.named_pass("X = Q K^T"):
            x = np.matmul(memory["Q"][...], np.swapaxes(memory["K"][...], -1, -2))  # (..., N, M)
            if inp.keep is not None:
                x = np.where(inp.keep, x, -np.inf)  # masked scores are -inf
            memory["X"][...] = x
        with memory.named_pass("Y = softmax(X)"):
            # a fully masked row gives zeros
            memory["Y"][...] = safe_softmax(memory["X"][...].astype(compute, copy=False))  # (..., N, M)
        with memory.named_pass("A = Y V"):
            y = memory["Y"][...].astype(compute, copy=False)
            memory["A"][...] = weighted_values(y, memory["V"][...], inp.keep)  # (..., N, Dv)


def standard_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    stored_dtype: DTypeLike | None = None,
) -> np.ndarray:
    """Standard attention, FlashAttention's Algorithm 0: ``X``, ``Y`` and ``A`` each written to memory whole.

    The one standard attention of the package: the low-precision baseline of chapter 9
    (:func:`flashmath.precision.naive_attention`, with ``X``, ``Y``, ``A`` stored in the input dtype) and the
    ``"standard"`` algorithm counted by :func:`flashmath.counting.counted_attention` run :func:`standard_run`.

    Args:
        q, k, v, scale, causal, mask: as :func:`attention`.
        stored_dtype: the dtype ``X``, ``Y`` and ``A`` are stored in; default: the promoted input dtype (what a
            framework running in float16 or bfloat16 does). Each step computes in the compute dtype (float32 for
            float16 and bfloat16).

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype. Scores beyond the stored dtype's range become ``inf``
        and their rows NaN, as in a framework that stores them. A fully masked row gives 0.

    Raises:
        TypeError, ValueError: as :func:`attention`; TypeError for a ``stored_dtype`` that is not floating point.

    Source: Dao et al. (2022), Algorithm 0.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    stored = inp.dtype if stored_dtype is None else float_dtype(stored_dtype, "stored_dtype")
    memory = PlainMemory(standard_arrays(inp, stored))
    standard_run(memory, inp)
    return memory.array("A").astype(inp.dtype, copy=False)


def scores_of(inp: AttentionInputs) -> np.ndarray:
    """The scores ``X = Q K^T * scale`` in float64, ``(..., N, M)``, with ``-inf`` where masked: what
    :func:`attention` computes first, and what the figures draw behind the tiles."""
    q, k = (a.astype(np.float64, copy=False) for a in (inp.q, inp.k))
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        # X = Q K^T * scale
        x = np.matmul(q, np.swapaxes(k, -1, -2)) * inp.scale  # (..., N, D) @ (..., D, M) -> (..., N, M)
    if inp.keep is not None:
        # mask(X): excluded scores become -inf, so exp gives them weight 0
        x = np.where(inp.keep, x, -np.inf)  # (..., N, M)
    return x


# ----------------------------------------------------------------------------------------------------------------
# Helpers of the loop variants
# ----------------------------------------------------------------------------------------------------------------


def _value_term(weight: np.ndarray, v: Any, keep: np.ndarray | None, m: int) -> np.ndarray:
    """``weight_m V[m, :]`` for every row, ``(..., N, Dv)``, and exactly 0 where key ``m`` is masked for the row
    (whatever ``V[m, :]`` holds: a masked key is absent)."""
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in a matrix product
        term = weight[..., None] * v[..., None, m, :]  # (..., N, 1) * (..., 1, Dv) -> (..., N, Dv)
    return term if keep is None else np.where(keep[..., :, m, None], term, 0)


def _score(q_scaled: np.ndarray, k: Any, keep: np.ndarray | None, m: int) -> np.ndarray:
    """The scores of key ``m`` for every row: ``x_m = Q[n, :] . K[m, :]``, ``-inf`` where masked. ``(..., N)``."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        # x_m = sum_d Q[n, d] * K[m, d]
        x_m = np.matmul(q_scaled, k[..., m, :, None])[..., 0]  # (..., N, D) @ (..., D, 1) -> (..., N)
    if keep is not None:
        x_m = np.where(keep[..., :, m], x_m, -np.inf)  # (..., N)
    return x_m


def _finish(a: np.ndarray, g: np.ndarray, s: np.ndarray, inp: AttentionInputs, return_lse: bool) -> Any:
    """Zero fully masked rows, cast to the output dtype, and add the logsumexp ``g + log(s)`` if asked."""
    a = np.where(s[..., None] == 0, 0, a).astype(inp.dtype, copy=False)  # (..., N, Dv)
    if not return_lse:
        return a
    return a, logsumexp_of(g, s)  # (..., N)


def _stack(states: list, dtype: np.dtype) -> np.ndarray:
    return np.stack(states).astype(dtype, copy=False)


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: loop (1) + loop (2)
# ----------------------------------------------------------------------------------------------------------------


def _loop_1(q_scaled: np.ndarray, k: Any, keep: np.ndarray | None, rows: tuple, dtype: np.dtype) -> Iterator[tuple]:
    """Loop (1): online softmax over each row of X. Yields ``(x_m, g_m, s_m)`` after each key ``m``."""
    g = np.full(rows, -np.inf, dtype=dtype)  # g_0 = -inf: no key seen yet
    s = np.zeros(rows, dtype=dtype)  # s_0 = 0
    one = dtype.type(1)
    for m in range(k.shape[-2]):
        x_m = _score(q_scaled, k, keep, m)  # (..., N)
        # g_m = max(g_{m-1}, x_m);  s_m = s_{m-1} * exp(g_{m-1} - g_m) + exp(x_m - g_m)
        g, s = merge_rows(g, s, x_m, one)
        yield x_m, g, s


def _loop_2(
    q_scaled: np.ndarray,
    k: Any,
    v: Any,
    keep: np.ndarray | None,
    rows: tuple,
    dtype: np.dtype,
    g_M: np.ndarray,
    s_M: np.ndarray,
) -> Iterator[tuple]:
    """Loop (2): ``A`` accumulates ``y_m * V[m, :]``, one key at a time. Yields ``(y_m, A_m)``."""
    g_safe, s_safe = max_or_zero(g_M), sum_or_one(s_M)  # a row that saw no key: weights exp(-inf) = 0, no 0 / 0
    a = np.zeros(rows + (v.shape[-1],), dtype=dtype)  # A_0 = 0: (..., N, Dv)
    for m in range(k.shape[-2]):
        x_m = _score(q_scaled, k, keep, m)  # recomputed: X is never stored, (..., N)
        with np.errstate(invalid="ignore"):  # +inf - +inf: NaN, on purpose
            # y_m = exp(x_m - g_M) / s_M
            y_m = np.exp(x_m - g_safe) / s_safe  # (..., N)
        # A_m = A_{m-1} + y_m * V[m, :]   (a vector of length Dv per row; nothing where key m is masked)
        a = a + _value_term(y_m, v, keep, m)  # (..., N, Dv)
        yield y_m, a


def two_loop_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    return_lse: bool = False,
) -> Any:
    """Attention in two passes over the keys: loop (1) finds ``g_M, s_M``, loop (2) accumulates ``A``.

    Loop (1) is online softmax on each row of ``X``: ``g_m = max(g_{m-1}, x_m)``,
    ``s_m = s_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m)``. Loop (2) must wait for the final ``g_M, s_M``; it then
    adds ``y_m V[m, :]`` with ``y_m = exp(x_m - g_M) / s_M`` (the matrix product ``Y V`` with its m and d loops
    swapped, see :func:`matmul_nmd`). Each ``y_m`` is used once and dropped, so neither ``X`` nor ``Y`` is stored
    whole; the price is that ``K`` is read twice (loop (2) recomputes ``x_m``) and ``V`` once. That count holds
    because the loops run over ``m`` in Python for all rows ``n`` at once (vectorised over them and the leading
    dimensions): every row's query and state stay on chip for the whole run, the query tile ``B_r = N`` of chapter 6.
    Run one row at a time, the same loops read ``K`` ``2 N`` times and ``V`` ``N`` times.

    Args, conventions, errors: as :func:`attention`.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (computed in float32 for float16 input), and if
        ``return_lse`` the logsumexp ``g_M + log(s_M)`` ``(..., N)`` in the compute dtype.

    Source: Milakov and Gimelshein (2018), algorithm 3, applied to the rows of ``X``.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    memory = PlainMemory(loop_arrays(inp))  # nothing counted (flashmath.counting passes a counted memory)
    g, s = two_loop_run(memory, inp)
    return _result(memory, g, s, inp, return_lse)


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


def two_loop_trace(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
) -> TwoLoopTrace:
    """Run :func:`two_loop_attention` and keep every per-key state of both loops (for the chapter 4 widget).

    Args, errors: as :func:`attention`; ``M >= 1`` is also required (ValueError).

    Returns:
        :class:`TwoLoopTrace`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    require_keys(inp, "two_loop_trace")
    dtype, q_scaled, k, v, rows = compute_operands(inp)
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


def loop_arrays(inp: AttentionInputs) -> dict:
    """The arrays the loops of chapters 4-5 read and write, to put in a memory (:mod:`flashmath.memory`):
    ``Q`` (scaled), ``K``, ``V`` in the compute dtype and the output ``A``."""
    dtype, q_scaled, k, v, rows = compute_operands(inp)
    return {"Q": q_scaled, "K": k, "V": v, "A": np.zeros(rows + (inp.Dv,), dtype)}


def two_loop_run(memory: Memory, inp: AttentionInputs) -> tuple[np.ndarray, np.ndarray]:
    """Loops (1) and (2) of chapter 4 on the arrays in ``memory`` (:func:`loop_arrays`): every row's query stays
    on chip, loop (1) reads ``K``, loop (2) reads ``K`` again and ``V``, and ``A`` is written once.

    Returns ``(g_M, s_M)``, the final row state, ``(..., N)`` each; the output is ``memory.array("A")``."""
    dtype = memory["K"].dtype
    rows = inp.batch_shape + (inp.N,)
    q_on_chip = memory["Q"][...]  # every row's query stays on chip for the whole run
    g = np.full(rows, -np.inf, dtype=dtype)  # the state of M == 0: no key
    s = np.zeros(rows, dtype=dtype)
    with memory.named_pass("loop (1)"):
        _, g, s = _final(_loop_1(q_on_chip, memory["K"], inp.keep, rows, dtype), (None, g, s))
    a = np.zeros(rows + (inp.Dv,), dtype=dtype)
    with memory.named_pass("loop (2)"):
        _, a = _final(_loop_2(q_on_chip, memory["K"], memory["V"], inp.keep, rows, dtype, g, s), (None, a))
    memory["A"][...] = _finish(a, g, s, inp, return_lse=False)  # A written once
    return g, s


def one_loop_run(memory: Memory, inp: AttentionInputs) -> tuple[np.ndarray, np.ndarray]:
    """The one loop of chapter 5 on the arrays in ``memory`` (:func:`loop_arrays`): ``K`` and ``V`` read once,
    ``A`` written once. Returns ``(g_M, s_M)``; the output is ``memory.array("A")``."""
    dtype = memory["K"].dtype
    rows = inp.batch_shape + (inp.N,)
    q_on_chip = memory["Q"][...]  # every row's query stays on chip for the whole run
    g = np.full(rows, -np.inf, dtype=dtype)  # the state of M == 0: no key
    s = np.zeros(rows, dtype=dtype)
    a = np.zeros(rows + (inp.Dv,), dtype=dtype)
    with memory.named_pass("one loop"):
        steps = _one_loop(q_on_chip, memory["K"], memory["V"], inp.keep, rows, dtype)
        _, g, s, _, _, a = _final(steps, (None, g, s, None, None, a))
    memory["A"][...] = _finish(a, g, s, inp, return_lse=False)  # A written once
    return g, s


def _final(steps: Iterator[tuple], initial: tuple) -> tuple:
    """The last step of a loop's generator (the state after the last key), or ``initial`` when there was no step
    (``M == 0``)."""
    last = deque(steps, maxlen=1)
    return last[0] if last else initial


def _result(memory: Memory, g: np.ndarray, s: np.ndarray, inp: AttentionInputs, return_lse: bool) -> Any:
    a = memory.array("A").astype(inp.dtype)  # a new array: the caller owns it
    return (a, logsumexp_of(g, s)) if return_lse else a


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: the loop swap, as explicit scalar loops
# ----------------------------------------------------------------------------------------------------------------


def _matmul_operands(y: ArrayLike, v: ArrayLike) -> tuple[list, list, int, int, int, np.dtype, np.dtype]:
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


def matmul_ndm(y: ArrayLike, v: ArrayLike) -> np.ndarray:
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


def _matmul_nmd(y: ArrayLike, v: ArrayLike, keep_partial: bool) -> tuple[np.ndarray, np.ndarray]:
    y_rows, v_rows, N, M, Dv, dtype, out_dtype = _matmul_operands(y, v)
    out = np.zeros((N, Dv), dtype=dtype)
    partial = np.zeros((N, M, Dv) if keep_partial else (0, 0, Dv), dtype=dtype)  # row n of A after keys 0..m
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


def matmul_nmd(y: ArrayLike, v: ArrayLike) -> np.ndarray:
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


def loop_swap_trace(y: ArrayLike, v: ArrayLike) -> LoopSwapTrace:
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


def _one_loop(
    q_scaled: np.ndarray, k: Any, v: Any, keep: np.ndarray | None, rows: tuple, dtype: np.dtype
) -> Iterator[tuple]:
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
        g, s = merge_rows(g_prev, s_prev, x_m, one)
        g_safe, s_safe = max_or_zero(g), sum_or_one(s)  # no key seen yet: weights exp(-inf) = 0, no -inf - (-inf)
        with np.errstate(invalid="ignore"):  # +inf - +inf: NaN, on purpose
            # correction_m = s_{m-1} * exp(g_{m-1} - g_m) / s_m;  weight_m = exp(x_m - g_m) / s_m  (they sum to 1)
            correction = s_prev * np.exp(g_prev - g_safe) / s_safe  # (..., N)
            weight = np.exp(x_m - g_safe) / s_safe  # (..., N)
        with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf is NaN, as in a matrix product
            # 4. attention:  A'_m = A'_{m-1} * s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m * V_m
            a = a * correction[..., None] + _value_term(weight, v, keep, m)  # (..., N, Dv)
        yield x_m, g, s, correction, weight, a


def one_loop_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    return_lse: bool = False,
) -> Any:
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
    memory = PlainMemory(loop_arrays(inp))  # nothing counted (flashmath.counting passes a counted memory)
    g, s = one_loop_run(memory, inp)
    return _result(memory, g, s, inp, return_lse)


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


def one_loop_trace(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
) -> OneLoopTrace:
    """Run :func:`one_loop_attention` and keep every per-key state (for the chapter 5 widget).

    Args, errors: as :func:`attention`; ``M >= 1`` is also required (ValueError).

    Returns:
        :class:`OneLoopTrace`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    require_keys(inp, "one_loop_trace")
    dtype, q_scaled, k_c, v_c, rows = compute_operands(inp)
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
