"""Packed sequences and a paged KV cache (chapter 13): the tiled loop over other layouts of the same keys.

* :func:`flash_attention_varlen`: sequences of different lengths packed one after the other, described by their
  cumulative lengths ``cu_seqlens`` (FlashAttention's ``flash_attn_varlen_func``). It is :func:`flash_attention`
  on the packed arrays with a *document mask*: query and key attend only within the same sequence, so the tiles
  between two sequences are empty and skipped (:mod:`flashmath.variants`).
* :func:`paged_attention`: a KV cache stored in fixed-size pages in any physical order, read through a *block
  table* (vLLM's PagedAttention; ``flash_attn_with_kvcache(..., block_table=...)``). A page is a key tile: the loop
  gathers page ``block_table[b, j]`` as key tile ``j`` of sequence ``b``, and the pages can be split among
  independent partial states merged at the end (split-KV, chapter 10).

Conventions: :mod:`flashmath.inputs`; the variants' (window, softcap, ALiBi, grouped heads): :mod:`flashmath.variants`.

Sources: flash-attn (Dao-AILab/flash-attention), ``flash_attn_interface.py``: ``flash_attn_varlen_func`` (q
``(total_q, nheads, headdim)``, ``cu_seqlens_q`` ``(batch_size + 1,)`` int32) and ``flash_attn_with_kvcache``
(``k_cache`` ``(num_blocks, page_block_size, nheads_k, headdim)``, ``block_table`` ``(batch_size,
max_num_blocks_per_seq)`` int32, ``cache_seqlens`` ``(batch_size,)``); W. Kwon et al., "Efficient Memory Management
for Large Language Model Serving with PagedAttention" (SOSP 2023).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array, compute_dtype
from flashmath.flash import LOOPS, fa2_tile_step, tile_arrays, tile_result
from flashmath.inputs import check_causal, check_scale, check_sink, prepare_attention_inputs
from flashmath.memory import PlainMemory
from flashmath.rowstate import finish, initial_state, logsumexp_of, merge_states
from flashmath.tiling import check_tiling, variant_tile_scores
from flashmath.variants import GroupedHeads, group_heads, grouped_sink, make_variant, packed_documents

__all__ = ["flash_attention_varlen", "gather_pages", "paged_attention"]


def flash_attention_varlen(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    cu_seqlens_q: ArrayLike,
    cu_seqlens_k: ArrayLike | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    order: str = "fa2",
    scale: float | None = None,
    causal: bool = False,
    window: Any = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    learnable_sink: ArrayLike | None = None,
) -> Any:
    """Attention of packed variable-length sequences, each attending only to itself.

    Layout: ``q (..., total_q, D)``, ``k (..., total_k, D)``, ``v (..., total_k, Dv)``, the sequences one after the
    other along the token axis; sequence ``s`` holds queries ``cu_seqlens_q[s]:cu_seqlens_q[s + 1]`` and keys
    ``cu_seqlens_k[s]:cu_seqlens_k[s + 1]``. FlashAttention's ``(total, nheads, headdim)`` is this layout with the
    heads first: ``q_fa = q.swapaxes(0, 1)`` for ``q (H, total, D)``.

    Args:
        q, k, v: as above (leading dimensions broadcast, as :func:`flashmath.flash.flash_attention`).
        cu_seqlens_q, cu_seqlens_k: ``(S + 1,)`` integers, starting at 0, non-decreasing, ending at ``total_q`` and
            ``total_k`` (``cu_seqlens_k`` defaults to ``cu_seqlens_q``).
        causal, window, alibi_slopes: per sequence, with positions inside the sequence and FlashAttention's
            bottom-right alignment for each sequence (``len_k - len_q`` its own offset).
        block_q, block_k, order, scale, softcap, enable_gqa, return_lse: as :func:`flashmath.flash.flash_attention`.
        learnable_sink: one sink logit per query head, ``(H,)``, as :func:`flashmath.flash.flash_attention`'s: the
            same sink for every sequence (a head's), each row starting at ``(sink, 1, 0)`` (flash-attention's varlen
            forward takes the same ``(nheads,)``).

    Returns:
        ``A (..., total_q, Dv)`` (and the logsumexp ``(..., total_q)``): equal to attention on each sequence alone.

    Raises:
        TypeError: ``cu_seqlens`` not integers; otherwise as :func:`flashmath.flash.flash_attention`. ValueError:
        ``cu_seqlens`` not starting at 0, decreasing, not ending at the totals, or with different numbers of
        sequences. As :func:`flashmath.inputs.check_sink` for ``learnable_sink``.
    """
    block_q, block_k = check_tiling(block_q, block_k, order)
    causal = check_causal(causal)  # per document, in the variant: not through prepare_attention_inputs
    heads = group_heads(q, k, v, None, enable_gqa)
    inp = prepare_attention_inputs(heads.q, heads.k, heads.v, scale=scale, fold_causal=False)
    docs = packed_documents(cu_seqlens_q, cu_seqlens_k, inp.N, inp.M)
    # the document mask, and causal / window / ALiBi inside each document: the tiles between documents are skipped
    inp = inp._replace(
        variant=make_variant(
            inp.N,
            inp.M,
            inp.batch_shape,
            groups=heads,
            causal=causal,
            window=window,
            softcap=softcap,
            alibi_slopes=alibi_slopes,
            docs=docs,
        ),
        sink=grouped_sink(learnable_sink, heads, inp.batch_shape),
    )
    memory = PlainMemory(tile_arrays(inp, order))
    for _ in LOOPS[order](memory, inp, block_q, block_k):
        pass
    return heads.restore(tile_result(memory, inp, order, return_lse))


def gather_pages(pages: ArrayLike, block_table: ArrayLike, seqlens: ArrayLike, b: int) -> np.ndarray:
    """The contiguous cache of sequence ``b`` from its pages: ``(..., seqlens[b], D)``.

    ``pages (P, ..., page_size, D)``: physical page ``p`` holds tokens of one sequence; logical page ``j`` of
    sequence ``b`` is physical page ``block_table[b, j]`` and holds its tokens ``j page_size .. (j + 1) page_size -
    1``; token ``t`` is at ``pages[block_table[b, t // page_size], ..., t % page_size, :]``. This builds what
    :func:`paged_attention` never builds (it reads one page at a time): for checks and pictures.
    """
    pages_arr = np.asarray(pages)
    table, lengths = _check_table(block_table, seqlens, pages_arr.shape[0], pages_arr.shape[-2])
    n = int(lengths[b])
    t = np.arange(n)
    page = table[b, t // pages_arr.shape[-2]]  # (n,) physical page of each token
    gathered = pages_arr[page, ..., t % pages_arr.shape[-2], :]  # (n, ..., D)
    return np.moveaxis(gathered, 0, -2)


def _check_table(block_table: ArrayLike, seqlens: ArrayLike, n_pages: int, page_size: int) -> tuple:
    table, lengths = np.asarray(block_table), np.asarray(seqlens)
    for arr, name in ((table, "block_table"), (lengths, "seqlens")):
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if table.ndim != 2 or lengths.ndim != 1 or table.shape[0] != lengths.shape[0]:
        raise ValueError(f"block_table must be (B, max_pages) and seqlens (B,), got {table.shape} and {lengths.shape}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > table.shape[1] * page_size):
        raise ValueError(
            f"every seqlen must lie in [0, max_pages * page_size] = [0, {table.shape[1] * page_size}], "
            f"got {lengths.tolist()}"
        )
    for b, n in enumerate(lengths):
        used = table[b, : -(-int(n) // page_size)]
        if used.size and (used.min() < 0 or used.max() >= n_pages):
            raise ValueError(f"block_table[{b}] points outside the {n_pages} pages: {used.tolist()}")
    return table.astype(np.intp), lengths.astype(np.intp)


def paged_attention(
    q: ArrayLike,
    k_pages: ArrayLike,
    v_pages: ArrayLike,
    block_table: ArrayLike,
    seqlens: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    window: Any = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    enable_gqa: bool = False,
    num_splits: int = 1,
    return_lse: bool = False,
    learnable_sink: ArrayLike | None = None,
) -> Any:
    """Attention over a paged KV cache: each page is one key tile, gathered through the block table.

    Args:
        q: ``(B, H, N, D)``, the new queries of each sequence (``N = 1`` when decoding, more for a prefill chunk);
            they are the *last* ``N`` tokens of the sequence (bottom-right alignment, as FlashAttention).
        k_pages, v_pages: ``(P, H_kv, page_size, D)``, ``(P, H_kv, page_size, Dv)``: ``P`` physical pages in any
            order. FlashAttention's ``k_cache (num_blocks, page_block_size, nheads_k, headdim)`` is
            ``k_pages.swapaxes(1, 2)``.
        block_table: ``(B, max_pages)`` integers: logical page ``j`` of sequence ``b`` is physical page
            ``block_table[b, j]`` (entries past the sequence's last page are never read).
        seqlens: ``(B,)`` integers, the number of cached tokens of each sequence (FlashAttention's
            ``cache_seqlens``); the last page may be partly filled.
        scale, causal, window, softcap, alibi_slopes, enable_gqa: as :func:`flashmath.flash.flash_attention`, with
            ``M = seqlens[b]`` for sequence ``b`` (``H_kv = H`` unless ``enable_gqa``).
        num_splits: the pages of a sequence are cut into this many contiguous groups, each with its own state
            ``(A, lse)``, merged at the end (split-KV; :func:`flashmath.rowstate.merge_states`).
        learnable_sink: one sink logit per query head, ``(H,)`` (or ``(B, H)``), as
            :func:`flashmath.flash.flash_attention`'s. It belongs to the *first* group of pages only (whose state
            starts at ``(sink, 1, 0)``; the others at ``(-inf, 0, 0)``), so that the merge counts it once: why that
            is exact, :func:`flashmath.splitkv.split_kv_attention`. A sequence with no cached token gives 0 and
            logsumexp = the sink.

    Returns:
        ``A (B, H, N, Dv)`` in the promoted input dtype (and the logsumexp ``(B, H, N)``): equal to attention on the
        contiguous cache (:func:`gather_pages`).

    Raises:
        TypeError: non-float ``q``/pages, ``q`` and pages with no common dtype (bfloat16 with float16), non-integer
        table or lengths, ``enable_gqa`` or ``causal`` not a bool, a ``scale`` or ``alibi_slopes`` that are not real
        numbers. ValueError: wrong shapes, ``D = 0``, pages without a key/value head (``H_kv = 0``), a table entry
        outside the pages, a length beyond the table, ``num_splits < 1``, heads that do not match, ``alibi_slopes``
        of a shape other than ``(H,)`` or ``(B, H)`` (either size may be 1), a non-finite ``scale``; as
        :func:`flashmath.inputs.check_sink` for ``learnable_sink``.
    """
    qa = as_float_array(q, "q", allow_int=False)
    kp, vp = as_float_array(k_pages, "k_pages", allow_int=False), as_float_array(v_pages, "v_pages", allow_int=False)
    if qa.ndim != 4 or kp.ndim != 4 or vp.ndim != 4:
        raise ValueError(
            f"q must be (B, H, N, D) and the pages (P, H_kv, page_size, D), got q {qa.shape}, "
            f"k_pages {kp.shape}, v_pages {vp.shape}"
        )
    if kp.shape[:3] != vp.shape[:3] or kp.shape[-1] != qa.shape[-1]:
        raise ValueError(
            f"k_pages {kp.shape} and v_pages {vp.shape} must agree on (P, H_kv, page_size), and k_pages "
            f"on D with q {qa.shape}"
        )
    B, H, N, D = qa.shape
    H_kv, page_size, Dv = kp.shape[1], kp.shape[2], vp.shape[-1]
    if D == 0:
        raise ValueError(f"the head dimension D must be at least 1, got q of shape {qa.shape}")
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)) or num_splits < 1:
        raise ValueError(f"num_splits must be an integer >= 1, got {num_splits!r}")
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise TypeError(f"enable_gqa must be True or False, got {enable_gqa!r}")
    causal = check_causal(causal)
    scale = check_scale(scale, D)
    if H_kv == 0:
        raise ValueError(
            f"the pages must have at least one key/value head (H_kv >= 1) for the query heads H = {H}, "
            f"got k_pages {kp.shape} and v_pages {vp.shape}"
        )
    if H != H_kv and not enable_gqa:
        raise ValueError(f"q has {H} heads and the pages {H_kv}: pass enable_gqa=True for grouped-query heads")
    if H % H_kv:
        raise ValueError(f"enable_gqa: the query heads H = {H} must be a multiple of the pages' heads H_kv = {H_kv}")
    if page_size == 0:
        raise ValueError("pages must hold at least one token (page_size >= 1)")
    table, lengths = _check_table(block_table, seqlens, kp.shape[0], page_size)
    if lengths.shape[0] != B:
        raise ValueError(f"block_table and seqlens describe {lengths.shape[0]} sequences, q has B = {B}")
    G = H // H_kv
    heads = GroupedHeads(None, None, None, None, G)  # query head h reads kv head h // G
    slopes = _check_slopes(alibi_slopes, B, H)
    sinks = check_sink(learnable_sink, (B, H))  # (B, H) float64, or None
    try:
        out_dtype = np.result_type(qa, kp, vp)
    except TypeError:  # e.g. bfloat16 with float16: numpy has no common type
        raise TypeError(
            f"q, k_pages and v_pages have no common floating-point type: {qa.dtype}, {kp.dtype}, "
            f"{vp.dtype}; convert them to one dtype first"
        ) from None
    dtype = compute_dtype(out_dtype)
    q_scaled = (qa.astype(np.float64) * scale).astype(dtype).reshape(B, H_kv, G, N, D)  # scale folded into Q
    out = np.zeros((B, H_kv, G, N, Dv), dtype)
    lse = np.full((B, H_kv, G, N), -np.inf, dtype)
    batch = (H_kv, G)
    for b in range(B):
        M = int(lengths[b])
        slopes_b = slopes[min(b, slopes.shape[0] - 1)] if slopes is not None and slopes.ndim == 2 else slopes
        variant = make_variant(
            N, M, batch, groups=heads, causal=causal, window=window, softcap=softcap, alibi_slopes=slopes_b
        )
        variant = replace(variant, b=np.full_like(variant.b, b))  # score_mod's batch index: this sequence
        n_pages = -(-M // page_size)
        for p, split in enumerate(np.array_split(np.arange(n_pages), num_splits)):
            # the state (-inf, 0, 0); the first group of pages also holds the sink: (sink, 1, 0), counted once
            sink = sinks[b].reshape(batch) if sinks is not None and p == 0 else None
            g_tile, s_tile = initial_state(batch + (N,), dtype, sink)
            acc = np.zeros(batch + (N, Dv), dtype)
            for j in split:
                c0, c1 = int(j) * page_size, min((int(j) + 1) * page_size, M)  # a page is a key tile
                keep = variant.tile_keep(0, N, c0, c1)
                if keep is False:
                    continue  # a page outside the window (or in the causal future) is not even read
                page = table[b, j]  # logical page j -> physical page
                k_tile = kp[page, :, : c1 - c0, None].swapaxes(1, 2).astype(dtype)  # (H_kv, 1, c1 - c0, D)
                v_tile = vp[page, :, : c1 - c0, None].swapaxes(1, 2).astype(dtype)
                with np.errstate(invalid="ignore", over="ignore"):
                    change = partial(variant.scores, r0=0, r1=N, c0=c0, c1=c1)
                    x_tile = variant_tile_scores(q_scaled[b], k_tile, keep, batch, change)
                g_tile, s_tile, acc = fa2_tile_step(g_tile, s_tile, acc, x_tile, v_tile, keep)
            part_a, part_lse = finish(acc, s_tile), logsumexp_of(g_tile, s_tile)
            out[b], lse[b] = merge_states(out[b], lse[b], part_a, part_lse)  # split-KV: merge the partial states
    a = out.reshape(B, H, N, Dv).astype(out_dtype, copy=False)
    return (a, lse.reshape(B, H, N)) if return_lse else a


def _check_slopes(alibi_slopes: ArrayLike | None, B: int, H: int) -> np.ndarray | None:
    """paged_attention's ALiBi slopes: ``(H,)`` or ``(B, H)``, either size possibly 1 (broadcast), as an array;
    TypeError for non-real numbers, ValueError for another shape."""
    if alibi_slopes is None:
        return None
    slopes = np.asarray(alibi_slopes)
    if slopes.dtype.kind not in "iuf":
        raise TypeError(f"alibi_slopes must be real numbers, got dtype {slopes.dtype}")
    if (
        slopes.ndim > 2
        or (slopes.ndim >= 1 and slopes.shape[-1] not in (1, H))
        or (slopes.ndim == 2 and slopes.shape[0] not in (1, B))
    ):
        raise ValueError(
            f"alibi_slopes of shape {slopes.shape} must be (H,) or (B, H) (either size may be 1) for "
            f"q of (B, H) = ({B}, {H})"
        )
    return slopes
