"""Tiled attention: FlashAttention in both loop orders (chapters 6 and 7).

The queries are cut into tiles of ``B_r`` rows and the keys and values into tiles of ``B_c`` rows. A pair of
tiles gives a score tile ``X_ij = Q_i K_j^T`` of shape ``(B_r, B_c)``; each row of it updates that row's state
``(g, s)`` (running max and sum, chapter 2) and its output. Only one score tile exists at a time, so memory
grows with ``N + M``, not ``N M``. Two loop orders:

* ``order="fa2"`` (FlashAttention-2, Algorithm 1): query tiles outside. A query tile, its row states and an
  unnormalised accumulator ``acc = s A'`` stay on chip while every key/value tile streams past; the output is
  divided by ``s`` once, at the end, and the logsumexp ``g + log(s)`` is written beside it. This is the
  default and the fast one.
* ``order="fa1"`` (FlashAttention, Algorithm 1): key/value tiles outside. A key/value tile stays on chip while
  every query tile streams past; the output ``A``, ``g`` and ``s`` of the query tile are read from memory,
  updated (normalised at every step) and written back.

Both run the same update on a score tile; with one query tile of all ``N`` rows and key tiles of one key,
fa2 is :func:`flashmath.attention.one_loop_attention` (chapter 5) with its division deferred. The loops
read and write their arrays through a memory passed in (:mod:`flashmath.memory`): :func:`flash_attention`
passes a plain one that counts nothing, :func:`flashmath.counting.counted_attention` a counted one, and
:func:`flashmath.counting.flash_trace` a counted one to :func:`trace_steps`, reading the traffic between the tile
steps (the trace of the tile sweep). The tile steps themselves are public (:func:`fa2_tile_step`,
:func:`fa1_tile_step`); tiles, their keep masks and their scores come from :mod:`flashmath.tiling`. The loops
here are the ones that run: :func:`flash_attention` only checks its arguments (chapter 13's variants are attached
to the inputs by :func:`flashmath.variants.variant_inputs`, and read by the tiles) and hands fa2's query tiles to a
thread pool (:mod:`flashmath.flash_parallel`). On-chip blocks are named ``*_tile`` (``q_tile``); whole arrays in
memory are ``q``, ``k``...

Conventions (shapes, scale, masks, dtypes, errors) are those of :mod:`flashmath.inputs`, and a masked key
is absent: the output equals attention with that key removed whatever its ``k`` and ``v`` rows hold (NaN or
inf included), because masked scores are *selected* away (``np.where``), never multiplied by 0. A tile whose
pairs are all masked (for every leading (batch, head) element) is skipped: neither computed nor loaded. The
leading dimensions are processed together: a tile spans all of them.

Sources: T. Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness" (2022),
section 3.1 and Algorithm 1 (section 3.3: block-sparse attention skips zero blocks); T. Dao, "FlashAttention-2:
Faster Attention with Better Parallelism and Work Partitioning" (2023), section 3.1.1 and Algorithm 1 (its
"causal masking" paragraph: blocks above the diagonal are skipped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from flashmath._checks import float_dtype, thread_count
from flashmath.flash_parallel import run_query_tiles
from flashmath.inputs import AttentionInputs, compute_operands
from flashmath.memory import Memory, PlainMemory
from flashmath.rowstate import LN2, finish, initial_state, lazy_reference, logsumexp_of, max_or_zero, weighted_values
from flashmath.tiling import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, ORDERS, check_tiling, tile_keep, tile_scores_for, tiles
from flashmath.variants import variant_inputs

__all__ = [
    "DEFAULT_BLOCK_K",
    "DEFAULT_BLOCK_Q",
    "ORDERS",
    "ReferenceTrace",
    "RescaleTrace",
    "check_rescale_threshold",
    "fa1_loop",
    "fa1_tile_step",
    "fa2_loop",
    "fa2_query_tile",
    "fa2_tile_step",
    "fa2_write",
    "flash_attention",
    "reference_trace",
    "rescale_trace",
    "tile_arrays",
    "tile_result",
    "trace_steps",
]


# ----------------------------------------------------------------------------------------------------------------
# One tile step per order: the update of a query tile's row state by one score tile (the exercises' references
# and the kernel's line-for-line reading use these)
# ----------------------------------------------------------------------------------------------------------------


def fa2_tile_step(
    g_tile: np.ndarray,
    s_tile: np.ndarray,
    acc_tile: np.ndarray,
    x_tile: np.ndarray,
    v_tile: np.ndarray,
    keep_tile: np.ndarray | None,
    *,
    rescale_threshold: float = 0.0,
    rescales: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FlashAttention-2's tile step: the state ``(g, s, acc = s A')`` of ``B_r`` rows after one key tile.

    Args:
        g_tile, s_tile: ``(..., B_r)`` the running max and sum (``-inf`` and 0 for a row that has seen no key;
            ``sink`` and 1 with a learnable sink: :func:`flashmath.rowstate.initial_state`).
        acc_tile: ``(..., B_r, Dv)`` the unnormalised accumulator ``s A'``; **updated in place** (it is the
            loop's on-chip accumulator; pass a copy to keep yours).
        x_tile: ``(..., B_r, B_c)`` the score tile, masked pairs already ``-inf`` (:func:`tile_scores`);
            **overwritten** by the weights ``P``.
        v_tile: ``(..., B_c, Dv)``. keep_tile: the tile's keep mask (True = attend) or None (every pair).
        rescale_threshold: FlashAttention-4's lazy rescaling (:func:`flashmath.rowstate.lazy_reference`), in log2
            units: ``g`` is then the reference point the state is measured against, up to ``rescale_threshold
            ln 2`` below the row's max. 0 (default): the eager update, exactly as before.
        rescales: ``(done, kept)`` integer arrays ``(..., B_r)`` counting the rescales, updated in place, or
            None.

    Returns:
        ``(g_new, s_new, acc_new)``; nothing is divided (FlashAttention-2 divides once, in :func:`fa2_write`).

    Source: Dao (2023), Algorithm 1, lines 8-10.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        # g_new = max(g, rowmax(X_ij))
        g_new = np.maximum(g_tile, x_tile.max(axis=-1))  # (..., B_r)
        g_ref = max_or_zero(g_new)

        if rescale_threshold or rescales is not None:  # lazy rescaling (FlashAttention-4): keep a stale reference
            g_new, g_ref = lazy_reference(g_tile, g_new, rescale_threshold, rescales)
        # alpha = exp(g - g_new): the rescale of everything summed so far
        alpha = np.exp(g_tile - g_ref)  # (..., B_r)
        # P_ij = exp(X_ij - g_new), computed in place: the score tile becomes the weight tile
        p_tile = np.exp(np.subtract(x_tile, g_ref[..., None], out=x_tile), out=x_tile)
        # s_new = s * alpha + rowsum(P_ij)
        s_tile = s_tile * alpha + p_tile.sum(axis=-1)
        # acc_new = acc * alpha + P_ij V_j   (no division: FlashAttention-2 divides once, at the end)
        acc_tile *= alpha[..., None]
        acc_tile += weighted_values(p_tile, v_tile, keep_tile)
    return g_new, s_tile, acc_tile


def fa2_write(a: Any, lse: Any, r0: int, r1: int, g_tile: np.ndarray, s_tile: np.ndarray, acc_tile: np.ndarray) -> None:
    """The end of query tile ``i``: one division, then write ``A_i`` and the logsumexp ``lse_i`` to memory."""
    with np.errstate(invalid="ignore", divide="ignore"):
        # A_i = acc / s  (a row that saw no key has acc = 0: divide by 1 instead of 0)
        a[..., r0:r1, :] = acc_tile / np.where(s_tile == 0, 1, s_tile)[..., None]
        # lse_i = g + log(s);  a row that saw no key: -inf + log(0) = -inf
        lse[..., r0:r1] = logsumexp_of(g_tile, s_tile)


def fa1_tile_step(
    g_tile: np.ndarray,
    s_tile: np.ndarray,
    a_tile: np.ndarray,
    x_tile: np.ndarray,
    v_tile: np.ndarray,
    keep_tile: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FlashAttention's tile step (Algorithm 1): the state ``(g, s, A')`` of ``B_r`` rows after one key tile,
    the output normalised.

    Args:
        g_tile, s_tile: ``(..., B_r)``; a_tile: ``(..., B_r, Dv)`` the normalised output over the keys seen.
        x_tile: ``(..., B_r, B_c)`` the score tile, masked pairs ``-inf``; **overwritten** by the weights.
        v_tile: ``(..., B_c, Dv)``. keep_tile: the tile's keep mask or None.

    Returns:
        ``(g_new, s_new, a_new)`` as new arrays (the tile alone has state ``(rowmax X, rowsum P)``, merged with
        the old one by chapter 2's rule, its two rescale exponentials computed once per row).

    Source: Dao et al. (2022), Algorithm 1, lines 9-13.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        # the state of this tile alone: g~ = rowmax(X_ij), P~ = exp(X_ij - g~), s~ = rowsum(P~)
        g_loc = x_tile.max(axis=-1)  # (..., B_r)
        p_tile = np.exp(np.subtract(x_tile, max_or_zero(g_loc)[..., None], out=x_tile), out=x_tile)
        s_loc = p_tile.sum(axis=-1)
        # g_new = max(g, g~);  alpha = exp(g - g_new), beta = exp(g~ - g_new): two exponentials per row
        g_new = np.maximum(g_tile, g_loc)  # (..., B_r)
        g_ref = max_or_zero(g_new)
        alpha, beta = np.exp(g_tile - g_ref), np.exp(g_loc - g_ref)
        # s_new = s alpha + s~ beta   (chapter 2's merge)
        old = s_tile * alpha
        s_new = old + s_loc * beta
        # A_new = (s alpha A + beta P~ V_j) / s_new   (normalised at every step)
        a_new = old[..., None] * a_tile + beta[..., None] * weighted_values(p_tile, v_tile, keep_tile)
        a_new /= np.where(s_new == 0, 1, s_new)[..., None]
    return g_new, s_new, a_new


# ----------------------------------------------------------------------------------------------------------------
# The two loop orders. Each is a generator over tile steps, reading and writing its arrays in the memory it is
# given (flashmath.memory: a plain one costs nothing, a counted one tallies every load and store).
# ----------------------------------------------------------------------------------------------------------------


def fa2_loop(
    memory: Memory,
    inp: AttentionInputs,
    block_q: int,
    block_k: int,
    query_tiles: Collection[int] | None = None,
    *,
    rescale_threshold: float = 0.0,
    rescales: tuple[np.ndarray, np.ndarray] | None = None,
) -> Iterator[tuple]:
    """FlashAttention-2 order: query tiles outside (:func:`fa2_query_tile` for each). After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, acc_tile)``, the on-chip state of query tile ``i``.

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``lse`` written here
    (:func:`tile_arrays`). ``query_tiles``: the indices ``i`` of the query tiles to run (default all).
    ``rescale_threshold``, ``rescales``: as :func:`fa2_query_tile`."""
    for i, rows in enumerate(tiles(inp.N, block_q)):
        if query_tiles is None or i in query_tiles:
            yield from fa2_query_tile(
                memory, inp, i, rows, block_k, rescale_threshold=rescale_threshold, rescales=rescales
            )


def fa2_query_tile(
    memory: Memory,
    inp: AttentionInputs,
    i: int,
    rows: tuple[int, int],
    block_k: int,
    *,
    rescale_threshold: float = 0.0,
    rescales: tuple[np.ndarray, np.ndarray] | None = None,
) -> Iterator[tuple]:
    """Query tile ``i`` (rows ``r0:r1``) of :func:`fa2_loop`: its state stays on chip while every key tile streams
    past; then one division, and ``A_i``, ``lse_i`` are written. Yields as :func:`fa2_loop`.

    The state starts as :func:`flashmath.rowstate.initial_state`: ``(g, s, acc) = (-inf, 0, 0)``, or ``(sink, 1,
    0)`` with a learnable sink (``inp.sink``). ``rescale_threshold``: FlashAttention-4's lazy rescaling in log2
    units (:func:`fa2_tile_step`); ``rescales``: ``(done, kept)`` integer arrays ``(..., N)`` in which the tile's
    rows count their rescales (or None).

    A query tile reads only ``Q``, ``K``, ``V`` and writes only its own rows of ``A`` and ``lse`` (and of
    ``rescales``), so query tiles can run at the same time (:func:`flash_attention`'s ``workers``:
    :mod:`flashmath.flash_parallel`)."""
    q, k, v, a, lse = (memory[name] for name in ("Q", "K", "V", "A", "lse"))
    r0, r1 = rows
    batch, dtype = inp.batch_shape, q.dtype  # the compute dtype
    key_tiles = tiles(inp.M, block_k)
    q_tile = None  # Q_i is loaded when its first tile that is not skipped needs it
    # g = -inf, s = 0: no key seen yet (with a learnable sink: g = sink, s = 1, a score with no value)
    g_tile, s_tile = initial_state(batch + (r1 - r0,), dtype, inp.sink)
    lazy: dict = {}  # the tile step's lazy-rescaling arguments (none: the eager step, called as always)
    if rescale_threshold or rescales is not None:
        counts = None if rescales is None else (rescales[0][..., r0:r1], rescales[1][..., r0:r1])
        lazy = {"rescale_threshold": rescale_threshold, "rescales": counts}
    acc_tile = np.zeros(batch + (r1 - r0, inp.Dv), a.dtype)  # acc = s A' = 0, unnormalised; kept in A's dtype
    for j, (c0, c1) in enumerate(key_tiles):
        keep_tile = tile_keep(inp, r0, r1, c0, c1)  # False: no pair attends, the tile is skipped
        if keep_tile is not False:
            if q_tile is None:
                q_tile = q[..., r0:r1, :]  # load Q_i: (..., B_r, D)
            k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # load K_j, V_j: (..., B_c, D), (..., B_c, Dv)
            # X_ij = Q_i K_j^T, masked pairs -inf: (..., B_r, B_c)
            x_tile = tile_scores_for(inp, q_tile, k_tile, keep_tile, r0, r1, c0, c1)
            g_tile, s_tile, acc_tile = fa2_tile_step(g_tile, s_tile, acc_tile, x_tile, v_tile, keep_tile, **lazy)
            del x_tile  # the score tile is dropped before the next one is made
        if j == len(key_tiles) - 1:
            fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)
        yield i, j, keep_tile is False, (r0, r1), g_tile, s_tile, acc_tile
    if not key_tiles:  # M = 0: every row is empty
        fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)


def fa1_loop(memory: Memory, inp: AttentionInputs, block_q: int, block_k: int) -> Iterator[tuple]:
    """FlashAttention order (Algorithm 1): key tiles outside. After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, a_tile)``, the state of query tile ``i`` as written back.

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``g``, ``s`` written here. With a
    learnable sink (``inp.sink``) every row starts at ``(g, s, A) = (sink, 1, 0)``.

    It stays sequential (``flash_attention`` ignores ``workers`` for it): every key tile ``j`` reads and writes
    ``A_i``, ``g_i``, ``s_i`` of every query tile ``i``, so two key tiles in flight at once would both update
    the same rows (a write conflict), and the query tiles of one key tile, though independent, would need a
    barrier after every key tile (``T_c`` of them) before the next may read those rows back. (FlashAttention's own
    code, releases 0.2 to 1.0.9, needed none: each thread block kept this order for rows of its own, ``num_splits``.)"""
    q, k, v, a, g, s = (memory[name] for name in ("Q", "K", "V", "A", "g", "s"))
    # Algorithm 1, line 2: A = 0, s = 0, g = -inf in memory (with a learnable sink: s = 1, g = sink)
    g_0, s_0 = initial_state(inp.batch_shape + (inp.N,), g.dtype, inp.sink)
    a[...] = 0 if inp.sink is None else finish(np.zeros(a.shape, a.dtype), s_0)  # A = 0 / s (NaN: a NaN sink)
    g[...], s[...] = g_0, s_0
    query_tiles = tiles(inp.N, block_q)
    for j, (c0, c1) in enumerate(tiles(inp.M, block_k)):
        k_tile: Any = None  # K_j, V_j: loaded by the first query tile that is not skipped
        v_tile: Any = None
        for i, (r0, r1) in enumerate(query_tiles):
            keep_tile = tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is False:
                yield i, j, True, (r0, r1), None, None, None
                continue
            if k_tile is None:  # load K_j, V_j once, for all the query tiles of this column
                k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # (..., B_c, D), (..., B_c, Dv)
            # load Q_i, A_i, g_i, s_i: (..., B_r, D), (..., B_r, Dv), (..., B_r), (..., B_r)
            q_tile, a_tile, g_tile, s_tile = q[..., r0:r1, :], a[..., r0:r1, :], g[..., r0:r1], s[..., r0:r1]
            # X_ij = Q_i K_j^T, masked pairs -inf: (..., B_r, B_c)
            x_tile = tile_scores_for(inp, q_tile, k_tile, keep_tile, r0, r1, c0, c1)
            g_new, s_new, a_new = fa1_tile_step(g_tile, s_tile, a_tile, x_tile, v_tile, keep_tile)
            del x_tile
            # write A_i, g_i, s_i back to memory
            a[..., r0:r1, :] = a_new
            g[..., r0:r1] = g_new
            s[..., r0:r1] = s_new
            yield i, j, False, (r0, r1), g_new, s_new, a_new


LOOPS = {"fa1": fa1_loop, "fa2": fa2_loop}


def tile_arrays(inp: AttentionInputs, order: str, *, acc_dtype: DTypeLike | None = None) -> dict:
    """The arrays a tile loop of ``order`` reads and writes, to put in a memory: ``Q`` (scaled), ``K``, ``V`` in
    the compute dtype, ``A`` (in ``acc_dtype``, default the compute dtype), and ``lse`` (fa2) or ``g``, ``s``
    (fa1), uninitialised."""
    dtype, q_scaled, k, v, rows = compute_operands(inp)
    arrays = {"Q": q_scaled, "K": k, "V": v, "A": np.empty(rows + (inp.Dv,), dtype if acc_dtype is None else acc_dtype)}
    if order == "fa2":
        arrays["lse"] = np.empty(rows, dtype)
    else:
        arrays["g"] = np.empty(rows, dtype)
        arrays["s"] = np.empty(rows, dtype)
    return arrays


def tile_result(memory: Memory, inp: AttentionInputs, order: str, return_lse: bool) -> Any:
    """The output (and logsumexp) from memory after the loop, in the promoted input dtype."""
    a = memory.array("A").astype(inp.dtype, copy=False)
    if not return_lse:
        return a
    if order == "fa2":
        return a, memory.array("lse")
    # lse = g + log(s) from the row statistics Algorithm 1 leaves in memory
    return a, logsumexp_of(memory.array("g"), memory.array("s"))


def flash_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    order: str = "fa2",
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    return_lse: bool = False,
    acc_dtype: DTypeLike | None = None,
    workers: int | None = None,
    enable_gqa: bool = False,
    window: Any = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    score_mod: Callable[..., Any] | None = None,
    mask_mod: Callable[..., Any] | None = None,
    learnable_sink: ArrayLike | None = None,
    rescale_threshold: float = 0.0,
) -> Any:
    """Attention computed tile by tile, never holding more than one ``(..., block_q, block_k)`` score tile
    per worker.

    Args:
        q: queries ``(..., N, D)``.
        k: keys ``(..., M, D)``.
        v: values ``(..., M, Dv)``; the leading dimensions of ``q``, ``k``, ``v`` broadcast.
        block_q: query-tile size ``B_r`` (rows of ``Q`` per tile), default :data:`DEFAULT_BLOCK_Q`.
        block_k: key-tile size ``B_c`` (rows of ``K`` and ``V`` per tile), default :data:`DEFAULT_BLOCK_K`.
            Neither needs to divide ``N`` or ``M``: the last tile is shorter.
        order: ``"fa2"`` (query tiles outside, one division at the end; FlashAttention-2) or ``"fa1"`` (key
            tiles outside, output and row states read, normalised and written back at every step;
            FlashAttention, Algorithm 1).
        scale, causal, mask, return_lse: as :func:`flashmath.attention.attention` (conventions:
            :mod:`flashmath.inputs`).
        acc_dtype: a study knob (chapter 9), the dtype in which the output state is kept from one tile step to
            the next: fa2's on-chip accumulator ``acc = s A'`` (unnormalised), fa1's normalised ``A'`` in memory.
            Each step still computes in the compute dtype and its result is rounded to ``acc_dtype``; ``g`` and
            ``s`` stay in the compute dtype. Default None: the compute dtype (float32 for float16 and bfloat16
            inputs, else the input dtype), as real kernels do. With ``np.float16``, fa2's ``acc`` grows with
            ``s`` (up to ``M`` times the size of ``V``) and overflows past 65504, where fa1's ``A'`` stays finite.
        workers: threads that run fa2's query tiles at the same time (FlashAttention-2's parallelism over the
            sequence, section 3.2: a query tile reads ``Q``, ``K``, ``V`` and writes only its own rows of ``A``
            and ``lse``). Default None: the cores this process may use (``os.sched_getaffinity`` where it
            exists, else ``os.cpu_count()``); 1: one loop in this thread; at most one worker per query tile.
            numpy's BLAS is limited to one thread for the duration of the call (threadpoolctl; the limit is
            process-wide), so that workers and BLAS threads do not oversubscribe the cores, and for every
            value, 1 included, since OpenBLAS's multi-threaded products round differently from its one-thread
            ones. So the result is bitwise the same for every value: each row sees the same tiles in the same
            order, each product is computed alike. Calls may overlap, from any threads: BLAS stays on one thread
            until the last of them returns, then the process's setting is restored (a RuntimeWarning where another
            thread's threadpoolctl limit prevents it: :mod:`flashmath.flash_parallel`). ``order="fa1"`` ignores it and
            runs sequentially (:func:`fa1_loop` says why).
        enable_gqa, window, softcap, alibi_slopes, score_mod, mask_mod: the variants of chapter 13, conventions and
            sources in :mod:`flashmath.variants`. ``enable_gqa``: ``k``, ``v`` with ``H_kv`` heads, query head ``h``
            reads kv head ``h // G`` (PyTorch SDPA). ``window=(left, right)``: FlashAttention's ``window_size``,
            bottom-right aligned (None = unbounded); tiles outside it are skipped. ``softcap=c``: ``c tanh(x / c)``
            on the scaled score. ``alibi_slopes`` ``(H,)`` or ``(B, H)``: ``-slope |m - (n + M - N)|`` added to the
            scaled score. ``score_mod(score, b, h, q_idx, kv_idx)`` and ``mask_mod(b, h, q_idx, kv_idx)``:
            FlexAttention's, called once per tile on index arrays (broadcasting); empty tiles skipped.
        learnable_sink: attention sinks (chapter 13; flash-attention's ``learnable_sink``, PR #1819 and #2752;
            GPT-OSS's per-head ``sinks``): one logit per *query* head, ``(H,)`` (also ``(B, H)`` or a scalar,
            broadcast like ``alibi_slopes``; with ``enable_gqa`` the ``H`` of ``q``), any real dtype, used in the
            compute dtype. A sink is a score with no value: every row's state starts at ``(g, s, acc) = (sink, 1,
            0)`` instead of ``(-inf, 0, 0)``, in both orders, so the sink takes part in the running max and every
            rescale (a sink far above the scores, 100, overflows nothing). Equal to the explicit formula of
            :func:`flashmath.attention.attention` (the sink column concatenated, softmax, dropped before ``P V``).
            The logsumexp includes the sink term; a row with no key gives 0 and logsumexp = the sink; ``-inf`` is
            no sink (bitwise the result of None); a NaN sink gives NaN in every row of its head.
        rescale_threshold: FlashAttention-4's lazy (conditional) rescaling, ``order="fa2"`` only, in log2 units
            as FlashAttention-4's ``rescale_threshold`` (8.0 there for 16-bit inputs,
            ``flash_attn/cute/flash_fwd_sm100.py``). A row keeps its old reference point ``g`` unless the new row
            max exceeds it by more than ``rescale_threshold ln 2`` (natural units; 5.55 for 8): ``acc`` and ``s``
            are then rescaled less often, and share a stale reference at most that far below the true max, so each
            weight ``P = exp(x - g)`` is at most ``2^t`` (``t = rescale_threshold``), ``s`` at most ``(M + 1)
            2^t`` and ``|acc|`` at most ``(M + 1) 2^t max|V|``. The final division ``acc / s`` and the logsumexp
            ``g + log(s)`` are exact to rounding whatever reference was kept. Default 0: the eager update of
            FlashAttention-2, bitwise as before. The overflow bound: nothing overflows while ``t + log2(M + 1) +
            log2(max|V|)`` stays below 128 for float32 state (t = 8: any ``M max|V|`` below ``2^119``, about
            ``6e35``), below 16 for ``acc_dtype=np.float16`` (65504 is just under ``2^16``). (FlashAttention-4 states
            the same bound for ``P``, which it rounds to the input dtype: "the row max lag[s] by that many log2 units,
            so P can reach 2^(max_offset + rescale_threshold)", Note [Low Precision Scaling] in
            ``flash_attn/cute/flash_fwd_sm100.py``, which asserts the sum stays below log2 of the dtype's max.)
            :func:`rescale_trace` counts the rescales done per row, and those of the eager update.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (computed in float32 for float16 input), and if
        ``return_lse`` the logsumexp ``g + log(s)`` ``(..., N)`` in the compute dtype. A row with no key to
        attend to gives 0 and logsumexp ``-inf`` (the sink, with a learnable sink). Inputs are never modified.

    Raises:
        ValueError: an unknown ``order``, a block size or ``workers`` below 1, a ``rescale_threshold`` that is
        negative or not finite, or positive with ``order="fa1"``; a ``learnable_sink`` whose shape does not
        broadcast to the query heads (the message names the expected ``(H,)``). TypeError: a block size or
        ``workers`` that is not an integer (``workers`` may be None), an ``acc_dtype`` that is not a
        floating-point dtype, a ``learnable_sink`` or ``rescale_threshold`` that is not real numbers. Otherwise
        as :func:`flashmath.attention.attention` (same checks, same messages).

    Extra memory: one score tile ``(..., B_r, B_c)`` per worker, the scaled copy of ``Q``, the output, and
    ``O(B_r Dv)`` of row state per worker; never ``(..., N, M)``. A tile spans all the leading (batch, head)
    dimensions: with many of them, pass smaller blocks than the defaults (which are tuned for one head).

    Sources: Dao et al. (2022), Algorithm 1 (fa1); Dao (2023), Algorithm 1 (fa2); sinks: flash-attention PR #1819
    (``learnable_sink``, ``(nheads,)``) and GPT-OSS (``openai/gpt-oss``, ``gpt_oss/torch/model.py``, ``sdpa``); lazy
    rescaling: Zadouri et al., "FlashAttention-4" (2026), and ``flash_attn/cute/softmax.py``
    (``SoftmaxSm100.update_row_max``).
    """
    result, _ = _flash_attention(
        q,
        k,
        v,
        block_q=block_q,
        block_k=block_k,
        order=order,
        scale=scale,
        causal=causal,
        mask=mask,
        return_lse=return_lse,
        acc_dtype=acc_dtype,
        workers=workers,
        enable_gqa=enable_gqa,
        window=window,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        score_mod=score_mod,
        mask_mod=mask_mod,
        learnable_sink=learnable_sink,
        rescale_threshold=rescale_threshold,
        count_rescales=False,
    )
    return result


def check_rescale_threshold(value: Any, order: str = "fa2") -> float:
    """``rescale_threshold`` as a Python float: a finite real number ``>= 0`` (log2 units); positive only with
    ``order="fa2"``.

    Raises:
        TypeError: not a real number (a bool is not). ValueError: negative, not finite, or positive with
        ``order="fa1"`` (whose output is normalised at every step: it keeps no unnormalised accumulator to rescale
        lazily).
    """
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iuf":
        raise TypeError(
            f"rescale_threshold must be a real number >= 0 (log2 units; 0 = rescale eagerly), got {value!r}"
        )
    threshold = float(value)
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(
            f"rescale_threshold must be finite and >= 0 (log2 units; FlashAttention-4 uses 8.0 for 16-bit inputs), "
            f"got {threshold}"
        )
    if threshold > 0 and order != "fa2":
        raise ValueError(
            f"rescale_threshold = {threshold} needs order='fa2': lazy rescaling defers the rescale of fa2's "
            "unnormalised accumulator; fa1 normalises its output at every step"
        )
    return threshold


def _flash_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block_q: int | None,
    block_k: int | None,
    order: str,
    scale: float | None,
    causal: bool,
    mask: ArrayLike | None,
    return_lse: bool,
    acc_dtype: DTypeLike | None,
    workers: int | None,
    enable_gqa: bool,
    window: Any,
    softcap: float | None,
    alibi_slopes: ArrayLike | None,
    score_mod: Callable[..., Any] | None,
    mask_mod: Callable[..., Any] | None,
    learnable_sink: ArrayLike | None,
    rescale_threshold: float,
    count_rescales: bool,
) -> tuple[Any, tuple[np.ndarray, np.ndarray] | None]:
    """:func:`flash_attention`, and with ``count_rescales`` the ``(done, kept)`` rescale counts of every row
    ``(..., N)`` (``order="fa2"``)."""
    block_q, block_k = check_tiling(block_q, block_k, order)
    threshold = check_rescale_threshold(rescale_threshold, order)
    acc_dtype = None if acc_dtype is None else float_dtype(acc_dtype, "acc_dtype")
    workers = thread_count(workers, "workers")
    # the checked inputs, chapter 13's variant attached (grouped-query heads: (..., H_kv, G, N, D), nothing copied)
    heads, inp = variant_inputs(
        q,
        k,
        v,
        scale=scale,
        causal=causal,
        mask=mask,
        enable_gqa=enable_gqa,
        window=window,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        score_mod=score_mod,
        mask_mod=mask_mod,
        learnable_sink=learnable_sink,
    )
    memory = PlainMemory(tile_arrays(inp, order, acc_dtype=acc_dtype))  # nothing counted: it costs nothing
    rows = inp.batch_shape + (inp.N,)
    rescales = (np.zeros(rows, np.int64), np.zeros(rows, np.int64)) if count_rescales else None
    if order == "fa2":  # the query tiles on `workers` threads, BLAS on one thread
        query_tiles = tiles(inp.N, block_q)

        def run(i: int) -> None:
            for _ in fa2_query_tile(
                memory, inp, i, query_tiles[i], block_k, rescale_threshold=threshold, rescales=rescales
            ):
                pass

        run_query_tiles(run, len(query_tiles), workers, causal=inp.causal)
    else:
        for _ in fa1_loop(memory, inp, block_q, block_k):
            pass
    result = heads.restore(tile_result(memory, inp, order, return_lse))
    if rescales is not None:  # (..., H_kv, G, N) -> (..., H, N) as the logsumexp
        shape = heads.original_batch(inp.batch_shape) + (inp.N,)
        rescales = (rescales[0].reshape(shape), rescales[1].reshape(shape))
    return result, rescales


@dataclass(frozen=True)
class RescaleTrace:
    """How many times each row's accumulator is rescaled by :func:`flash_attention` (``order="fa2"``) with
    FlashAttention-4's lazy rescaling, against the eager update (:func:`rescale_trace`).

    Attributes:
        threshold: ``rescale_threshold``, log2 units.
        done: ``(..., N)`` int: the tile steps that moved the row's reference point (``acc`` and ``s`` rescaled).
        kept: ``(..., N)`` int: the tile steps whose max rose above the row's stale reference by at most the
            threshold, so that the reference was kept (FlashAttention-4's ``acc_scale = 1`` branch).
        eager: ``(..., N)`` int: the rescales of the eager update (``rescale_threshold=0``) on the same rows: the
            tile steps where the running max grows, after the row's first reference (its first key, or its sink).
        output, lse: the lazy result, as ``flash_attention(..., return_lse=True)``.

    A lazy rescale happens only where the eager update rescales too (between two lazy rescales the true max stays
    within ``threshold ln 2`` of the reference, so a tile that moves the reference raises the true max), hence
    ``done <= eager`` row by row.
    """

    threshold: float
    done: np.ndarray
    kept: np.ndarray
    eager: np.ndarray
    output: np.ndarray
    lse: np.ndarray

    @property
    def skipped(self) -> np.ndarray:
        """``eager - done``: the eager update's rescales that the lazy one skips, per row."""
        return self.eager - self.done

    @property
    def skipped_share(self) -> float:
        """The share of the eager update's rescales skipped, over all rows (0 when it does none)."""
        total = int(self.eager.sum())
        return float(self.skipped.sum() / total) if total else 0.0


def rescale_trace(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, rescale_threshold: float = 8.0, **kwargs: Any
) -> RescaleTrace:
    """:func:`flash_attention` with ``order="fa2"`` and lazy rescaling, counting per row the rescales done, and
    those the eager update does on the same inputs (chapter 7): :class:`RescaleTrace`. Runs the loop twice (lazy,
    then eager for the count).

    Args:
        q, k, v: as :func:`flash_attention`. rescale_threshold: log2 units (default 8.0, FlashAttention-4's for
            16-bit inputs); 0 gives ``done == eager``.
        kwargs: any other keyword argument of :func:`flash_attention` (``block_q``, ``block_k``, ``causal``,
            ``learnable_sink``, ``workers``...), except ``order`` (always ``"fa2"``) and ``return_lse`` (always).

    Raises:
        TypeError: ``order`` or ``return_lse`` given, or an unknown keyword. Otherwise as :func:`flash_attention`.
    """
    for name in ("order", "return_lse"):
        if name in kwargs:
            raise TypeError(f"rescale_trace runs order='fa2' and returns the logsumexp: {name} cannot be given")
    options = dict(
        block_q=None, block_k=None, scale=None, causal=False, mask=None, acc_dtype=None, workers=None,
        enable_gqa=False, window=None, softcap=None, alibi_slopes=None, score_mod=None, mask_mod=None,
        learnable_sink=None,
    )  # fmt: skip
    unknown = set(kwargs) - set(options)
    if unknown:
        raise TypeError(f"rescale_trace got unknown keyword arguments {sorted(unknown)}")
    options.update(kwargs)
    threshold = check_rescale_threshold(rescale_threshold)
    counts = {}
    for t in (threshold, 0.0):
        (a, lse), counts[t] = _flash_attention(
            q, k, v, order="fa2", return_lse=True, rescale_threshold=t, count_rescales=True,
            **options,  # type: ignore[arg-type]
        )  # fmt: skip
        if t == threshold:
            output = (a, lse)
    lazy, eager = counts[threshold], counts[0.0]
    assert lazy is not None and eager is not None
    return RescaleTrace(threshold, lazy[0], lazy[1], eager[0], *output)


@dataclass(frozen=True)
class ReferenceTrace:
    """Per key tile step, the reference point each row's state is measured against with FlashAttention-4's lazy
    rescaling, and the row's true running max (:func:`reference_trace`; chapter 7's slider draws it).

    Attributes:
        threshold: ``rescale_threshold``, log2 units.
        cols: ``(T_c, 2)`` the key range ``[c0, c1)`` of each key tile.
        reference: ``(..., N, T_c)`` the reference ``g`` kept after key tile ``j`` (natural units, as the scores;
            ``-inf`` while the row has seen no key).
        row_max: ``(..., N, T_c)`` the true running max after key tile ``j``: the eager update's ``g``.
        rescaled: ``(..., N, T_c)`` bool: key tile ``j`` moved the row's reference (``acc`` and ``s`` rescaled).

    ``row_max - reference`` is at most ``threshold ln 2`` after every step, so every weight ``exp(x - g)`` summed
    so far is at most ``2^lag`` (:meth:`lag`), the largest of them exactly ``2^lag``.
    """

    threshold: float
    cols: np.ndarray
    reference: np.ndarray
    row_max: np.ndarray
    rescaled: np.ndarray

    def lag(self) -> np.ndarray:
        """``(row_max - reference) log2(e)``: how far, in log2 units, the kept reference is below the true max
        (0 where the row has seen no key)."""
        with np.errstate(invalid="ignore"):
            lag = (self.row_max - self.reference) / LN2
        return np.where(np.isfinite(self.reference), lag, 0.0)


def reference_trace(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, rescale_threshold: float = 8.0, **kwargs: Any
) -> ReferenceTrace:
    """Run :func:`flash_attention`'s fa2 loop twice, lazily with ``rescale_threshold`` and eagerly, and record
    after every key tile step each row's kept reference, its true running max and whether it was rescaled
    (:class:`ReferenceTrace`). The loop is the package's own (:func:`fa2_loop`), run sequentially.

    Args:
        q, k, v: as :func:`flash_attention`. rescale_threshold: log2 units.
        kwargs: ``block_q``, ``block_k``, ``scale``, ``causal``, ``mask`` and the variants of chapter 13
            (``enable_gqa``, ``window``, ``softcap``, ``alibi_slopes``, ``score_mod``, ``mask_mod``,
            ``learnable_sink``), as :func:`flash_attention`.

    Raises:
        TypeError: an unknown keyword. Otherwise as :func:`flash_attention`.
    """
    options = dict(
        block_q=None, block_k=None, scale=None, causal=False, mask=None, enable_gqa=False, window=None,
        softcap=None, alibi_slopes=None, score_mod=None, mask_mod=None, learnable_sink=None,
    )  # fmt: skip
    unknown = set(kwargs) - set(options)
    if unknown:
        raise TypeError(f"reference_trace got unknown keyword arguments {sorted(unknown)}")
    options.update(kwargs)
    block_q, block_k = check_tiling(options.pop("block_q"), options.pop("block_k"), "fa2")
    threshold = check_rescale_threshold(rescale_threshold)
    heads, inp = variant_inputs(q, k, v, **options)  # type: ignore[arg-type]
    cols = tiles(inp.M, block_k)
    rows = inp.batch_shape + (inp.N,)
    recorded = {}
    for t in (threshold, 0.0):
        memory = PlainMemory(tile_arrays(inp, "fa2"))
        done = (np.zeros(rows, np.int64), np.zeros(rows, np.int64))
        g_steps = np.full(rows + (len(cols),), -np.inf)
        done_steps = np.zeros(rows + (len(cols),), np.int64)
        g_now, _ = initial_state(rows, np.dtype(np.float64), inp.sink)
        for _i, j, skipped, (r0, r1), g_tile, _s, _acc in fa2_loop(
            memory, inp, block_q, block_k, rescale_threshold=t, rescales=done
        ):
            if not skipped:
                g_now[..., r0:r1] = g_tile
            g_steps[..., r0:r1, j] = g_now[..., r0:r1]
            done_steps[..., r0:r1, j] = done[0][..., r0:r1]
        recorded[t] = (g_steps, np.diff(done_steps, axis=-1, prepend=0) > 0)
    shape = heads.original_batch(inp.batch_shape) + (inp.N, len(cols))
    (reference, rescaled), (row_max, _) = recorded[threshold], recorded[0.0]
    return ReferenceTrace(
        threshold,
        np.array(cols, dtype=np.int64).reshape(-1, 2),
        reference.reshape(shape),
        row_max.reshape(shape),
        rescaled.reshape(shape),
    )


def trace_steps(memory: Memory, inp: AttentionInputs, order: str, block_q: int, block_k: int) -> Iterator[tuple]:
    """Run the tile loop of ``order`` on the arrays in ``memory`` (:func:`tile_arrays`) and yield, after every
    tile step, ``(i, j, skipped, (r0, r1), (c0, c1), g, s, a)``: the step's tiles and every row's state so far
    (new arrays, the caller keeps them): ``g``, ``s`` ``(..., N)``, ``a`` ``(..., N, Dv)`` the output over the
    keys seen, normalised (``A'``; fa2's on-chip ``acc`` divided by ``s`` for the record only).

    The memory is the caller's: :func:`flashmath.counting.flash_trace` passes a counted one and reads its count
    between the steps (counting wraps the loop from outside). ``inp`` must have ``N, M >= 1`` and its causal
    mask not folded (``fold_causal=False``)."""
    dtype = memory.array("A").dtype
    rows_shape = inp.batch_shape + (inp.N,)
    g_now, s_now = initial_state(rows_shape, dtype, inp.sink)  # every row's state so far
    a_now = np.zeros(rows_shape + (inp.Dv,), dtype)
    cols = tiles(inp.M, block_k)
    for i, j, skipped, (r0, r1), g_tile, s_tile, a_tile in LOOPS[order](memory, inp, block_q, block_k):
        if not skipped:
            g_now[..., r0:r1], s_now[..., r0:r1] = g_tile, s_tile
            if order == "fa2":  # A' = acc / s, for the record only: fa2 itself divides once at the end
                a_tile = finish(a_tile, s_tile)
            a_now[..., r0:r1, :] = a_tile
        yield i, j, skipped, (r0, r1), cols[j], g_now.copy(), s_now.copy(), a_now.copy()
