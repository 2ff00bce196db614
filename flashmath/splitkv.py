"""Split-KV (Flash-Decoding): attention over disjoint key ranges computed independently, then merged (chapter 10).

With one query (``N = 1``, decoding with a KV cache) there is only one row to parallelise over, so the keys are
split instead: each of ``num_splits`` contiguous ranges ``[c0, c1)`` of the ``M`` keys gives the output of that
range alone, ``A_p``, and its logsumexp ``L_p = g_p + log(s_p)``. Two ranges merge exactly, with the chapter-2 rule
written for outputs instead of sums:

    L = log(exp(L_1) + exp(L_2))                          (the sums add, on a common reference point)
    A = exp(L_1 - L) A_1 + exp(L_2 - L) A_2                 (each part reweighted by its share of the sum)

The merge is associative and commutative with identity ``(A = anything, L = -inf)``: a range with no key to attend
to contributes nothing, whatever its output array holds (NaN included), so the ranges can be combined in any
tree. The logsumexp carries both the running max and the running sum of chapter 2 in one number, which is why
FlashAttention-2 stores it.

A learnable sink (chapter 13) belongs to exactly one part, the *first* (``[c0, c1) = [0, M / num_splits)``), whose
state starts at ``(g, s, A) = (sink, 1, 0)``; the others start empty. Why the merge stays exact: a sink is a score
with no value, i.e. one more key whose score is ``sink`` and whose value row is 0 (it adds ``exp(sink - g)`` to
the row's sum and ``exp(sink - g) 0 = 0`` to its numerator). Attention with a sink is therefore attention over the
keys plus that one extra key, and the merge above is exact for *any* partition of a row's keys into disjoint
parts: ``exp(L) = sum_p exp(L_p)`` (each part's sum on its own reference) and ``A exp(L) = sum_p A_p exp(L_p)``.
Putting the extra key in exactly one part is such a partition; putting it in none loses its ``exp(sink)`` from
the denominator, and putting it in two counts it twice (the denominator of ``softmax`` would hold ``2 exp(sink)``,
which is a sink of ``sink + ln 2``). The first part is our choice (any one part would do); it has a state even
when it holds no key (``num_splits > M``): ``(A, L) = (0, sink)``.

Conventions (shapes, scale, masks, fully masked rows) are those of :mod:`flashmath.inputs`; masks and the
bottom-right causal alignment are applied over all ``M`` keys before the split, so that a range sees exactly the
keys it would see in one piece.

Sources: T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding for long-context inference" (2023, PyTorch blog);
T. Dao, "FlashAttention-2" (2023), section 3.1 (the logsumexp saved per row); M. Milakov and N. Gimelshein (2018),
section 3.1 (merging normalizer states).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size
from flashmath.attention import attention
from flashmath.inputs import prepare_attention_inputs

# merge_states, the merge of two (A, lse) states, lives with the rest of the row-state algebra; it is imported
# here too, where chapter 10 introduces it.
from flashmath.rowstate import merge_states

__all__ = ["merge_states", "split_ranges", "split_kv_attention", "split_kv_trace", "SplitKVTrace"]


def split_ranges(M: int, num_splits: int) -> list[tuple[int, int]]:
    """``num_splits`` contiguous key ranges ``[c0, c1)`` covering ``0..M``, as equal as possible (sizes differ by
    at most 1; with ``num_splits > M`` some ranges are empty).

    Raises:
        TypeError: non-integers. ValueError: ``M < 0`` or ``num_splits < 1``.
    """
    M, num_splits = size(M, "M"), size(num_splits, "num_splits", 1)
    edges = [(p * M) // num_splits for p in range(num_splits + 1)]
    return list(zip(edges[:-1], edges[1:], strict=False))


@dataclass(frozen=True)
class SplitKVTrace:
    """Every part and every merge of :func:`split_kv_attention`, for the chapter-10 plots.

    Attributes:
        ranges: the key ranges ``[c0, c1)`` of the parts, in order.
        parts: ``[(a_p, lse_p), ...]``, each range's own output ``(..., N, Dv)`` and logsumexp ``(..., N)``.
        levels: the merge tree, leaves first: ``levels[0]`` is ``parts``; each next level merges neighbouring pairs
            of the one before (an odd one out is carried up unchanged); the last level holds one state, the result.
        output, lse: the merged result.
    """

    ranges: list
    parts: list
    levels: list
    output: np.ndarray
    lse: np.ndarray

    def __len__(self) -> int:
        return len(self.parts)


def split_kv_trace(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    num_splits: int,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    learnable_sink: ArrayLike | None = None,
) -> SplitKVTrace:
    """Compute attention over ``num_splits`` key ranges independently, then merge them pairwise in a tree.

    Args:
        q, k, v, scale, causal, mask: as :func:`flashmath.attention.attention`.
        num_splits: the number of contiguous key ranges (see :func:`split_ranges`; more splits than keys leaves
            empty ranges, which contribute nothing).
        learnable_sink: one sink logit per query head, ``(H,)``, as :func:`flashmath.attention.attention`'s; it
            belongs to the first part only (the module docstring proves the merge exact).

    Returns:
        :class:`SplitKVTrace`.

    Raises:
        as :func:`flashmath.attention.attention` and :func:`split_ranges`.
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, learnable_sink=learnable_sink)
    ranges = split_ranges(inp.M, num_splits)
    keep = inp.keep  # (..., N, M) over all keys: causal alignment and masks decided before the split
    parts = []
    for p, (c0, c1) in enumerate(ranges):
        part_mask = None if keep is None else keep[..., c0:c1]
        # each part is attention over its own keys only: A_p and L_p (the first part also holds the sink)
        sink = inp.sink if p == 0 else None
        parts.append(
            attention(
                inp.q,
                inp.k[..., c0:c1, :],
                inp.v[..., c0:c1, :],
                scale=inp.scale,
                mask=part_mask,
                return_lse=True,
                learnable_sink=sink,
            )
        )
    levels = [parts]
    while len(levels[-1]) > 1:
        below = levels[-1]
        above = [merge_states(*below[i], *below[i + 1]) for i in range(0, len(below) - 1, 2)]
        if len(below) % 2:
            above.append(below[-1])  # the odd one out waits for the next level
        levels.append(above)
    a, lse = levels[-1][0]
    shape = inp.batch_shape + (inp.N,)
    a = np.broadcast_to(a, shape + (inp.Dv,)).copy()
    lse = np.broadcast_to(lse, shape).copy()
    return SplitKVTrace(ranges, parts, levels, a, lse)


def split_kv_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    num_splits: int,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    return_lse: bool = False,
    learnable_sink: ArrayLike | None = None,
) -> Any:
    """Attention with the keys split into ``num_splits`` ranges, each computed alone and merged (Flash-Decoding).

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)``; scale, causal, mask: as
            :func:`flashmath.attention.attention`.
        num_splits: the number of contiguous key ranges, at least 1 (may exceed ``M``: empty ranges add nothing).
        return_lse: also return the logsumexp ``(..., N)`` (with a sink, it includes the sink term).
        learnable_sink: one sink logit per query head, ``(H,)``; in the first part only, which keeps the merge
            exact (module docstring).

    Returns:
        ``A (..., N, Dv)`` float64 (each range is computed by the float64 reference), and the logsumexp if asked.
        Equal to :func:`flashmath.attention.attention` up to rounding, for every ``num_splits``.

    Raises:
        as :func:`split_kv_trace`.
    """
    trace = split_kv_trace(q, k, v, num_splits, scale=scale, causal=causal, mask=mask, learnable_sink=learnable_sink)
    return (trace.output, trace.lse) if return_lse else trace.output
