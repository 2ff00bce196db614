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

from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from flashmath._checks import float_dtype, thread_count
from flashmath.flash_parallel import run_query_tiles
from flashmath.inputs import AttentionInputs, compute_operands
from flashmath.memory import Memory, PlainMemory
from flashmath.rowstate import finish, logsumexp_of, max_or_zero, weighted_values
from flashmath.tiling import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, ORDERS, check_tiling, tile_keep, tile_scores_for, tiles
from flashmath.variants import variant_inputs

__all__ = [
    "DEFAULT_BLOCK_K",
    "DEFAULT_BLOCK_Q",
    "ORDERS",
    "fa1_loop",
    "fa1_tile_step",
    "fa2_loop",
    "fa2_query_tile",
    "fa2_tile_step",
    "fa2_write",
    "flash_attention",
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FlashAttention-2's tile step: the state ``(g, s, acc = s A')`` of ``B_r`` rows after one key tile.

    Args:
        g_tile, s_tile: ``(..., B_r)`` the running max and sum (``-inf`` and 0 for a row that has seen no key).
        acc_tile: ``(..., B_r, Dv)`` the unnormalised accumulator ``s A'``; **updated in place** (it is the
            loop's on-chip accumulator; pass a copy to keep yours).
        x_tile: ``(..., B_r, B_c)`` the score tile, masked pairs already ``-inf`` (:func:`tile_scores`);
            **overwritten** by the weights ``P``.
        v_tile: ``(..., B_c, Dv)``. keep_tile: the tile's keep mask (True = attend) or None (every pair).

    Returns:
        ``(g_new, s_new, acc_new)``; nothing is divided (FlashAttention-2 divides once, in :func:`fa2_write`).

    Source: Dao (2023), Algorithm 1, lines 8-10.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        # g_new = max(g, rowmax(X_ij))
        g_new = np.maximum(g_tile, x_tile.max(axis=-1))  # (..., B_r)
        g_ref = max_or_zero(g_new)
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
    memory: Memory, inp: AttentionInputs, block_q: int, block_k: int, query_tiles: Collection[int] | None = None
) -> Iterator[tuple]:
    """FlashAttention-2 order: query tiles outside (:func:`fa2_query_tile` for each). After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, acc_tile)``, the on-chip state of query tile ``i``.

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``lse`` written here
    (:func:`tile_arrays`). ``query_tiles``: the indices ``i`` of the query tiles to run (default all)."""
    for i, rows in enumerate(tiles(inp.N, block_q)):
        if query_tiles is None or i in query_tiles:
            yield from fa2_query_tile(memory, inp, i, rows, block_k)


def fa2_query_tile(
    memory: Memory, inp: AttentionInputs, i: int, rows: tuple[int, int], block_k: int
) -> Iterator[tuple]:
    """Query tile ``i`` (rows ``r0:r1``) of :func:`fa2_loop`: its state stays on chip while every key tile streams
    past; then one division, and ``A_i``, ``lse_i`` are written. Yields as :func:`fa2_loop`.

    A query tile reads only ``Q``, ``K``, ``V`` and writes only its own rows of ``A`` and ``lse``, so query tiles
    can run at the same time (:func:`flash_attention`'s ``workers``: :mod:`flashmath.flash_parallel`)."""
    q, k, v, a, lse = (memory[name] for name in ("Q", "K", "V", "A", "lse"))
    r0, r1 = rows
    batch, dtype = inp.batch_shape, q.dtype  # the compute dtype
    key_tiles = tiles(inp.M, block_k)
    q_tile = None  # Q_i is loaded when its first tile that is not skipped needs it
    g_tile = np.full(batch + (r1 - r0,), -np.inf, dtype)  # g = -inf: no key seen yet
    s_tile = np.zeros(batch + (r1 - r0,), dtype)  # s = 0
    acc_tile = np.zeros(batch + (r1 - r0, inp.Dv), a.dtype)  # acc = s A' = 0, unnormalised; kept in A's dtype
    for j, (c0, c1) in enumerate(key_tiles):
        keep_tile = tile_keep(inp, r0, r1, c0, c1)  # False: no pair attends, the tile is skipped
        if keep_tile is not False:
            if q_tile is None:
                q_tile = q[..., r0:r1, :]  # load Q_i: (..., B_r, D)
            k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # load K_j, V_j: (..., B_c, D), (..., B_c, Dv)
            # X_ij = Q_i K_j^T, masked pairs -inf: (..., B_r, B_c)
            x_tile = tile_scores_for(inp, q_tile, k_tile, keep_tile, r0, r1, c0, c1)
            g_tile, s_tile, acc_tile = fa2_tile_step(g_tile, s_tile, acc_tile, x_tile, v_tile, keep_tile)
            del x_tile  # the score tile is dropped before the next one is made
        if j == len(key_tiles) - 1:
            fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)
        yield i, j, keep_tile is False, (r0, r1), g_tile, s_tile, acc_tile
    if not key_tiles:  # M = 0: every row is empty
        fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)


def fa1_loop(memory: Memory, inp: AttentionInputs, block_q: int, block_k: int) -> Iterator[tuple]:
    """FlashAttention order (Algorithm 1): key tiles outside. After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, a_tile)``, the state of query tile ``i`` as written back.

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``g``, ``s`` written here.

    It stays sequential (``flash_attention`` ignores ``workers`` for it): every key tile ``j`` reads and writes
    ``A_i``, ``g_i``, ``s_i`` of every query tile ``i``, so two key tiles in flight at once would both update
    the same rows (a write conflict), and the query tiles of one key tile, though independent, would need a
    barrier after every key tile (``T_c`` of them) before the next may read those rows back."""
    q, k, v, a, g, s = (memory[name] for name in ("Q", "K", "V", "A", "g", "s"))
    # Algorithm 1, line 2: A = 0, s = 0, g = -inf in memory
    a[...] = 0
    s[...] = 0
    g[...] = -np.inf
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

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (computed in float32 for float16 input), and if
        ``return_lse`` the logsumexp ``g + log(s)`` ``(..., N)`` in the compute dtype. A row with no key to
        attend to gives 0 and logsumexp ``-inf``. Inputs are never modified.

    Raises:
        ValueError: an unknown ``order``, a block size or ``workers`` below 1. TypeError: a block size or
        ``workers`` that is not an integer (``workers`` may be None), an ``acc_dtype`` that is not a
        floating-point dtype. Otherwise as :func:`flashmath.attention.attention`
        (same checks, same messages).

    Extra memory: one score tile ``(..., B_r, B_c)`` per worker, the scaled copy of ``Q``, the output, and
    ``O(B_r Dv)`` of row state per worker; never ``(..., N, M)``. A tile spans all the leading (batch, head)
    dimensions: with many of them, pass smaller blocks than the defaults (which are tuned for one head).

    Sources: Dao et al. (2022), Algorithm 1 (fa1); Dao (2023), Algorithm 1 (fa2).
    """
    block_q, block_k = check_tiling(block_q, block_k, order)
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
    )
    memory = PlainMemory(tile_arrays(inp, order, acc_dtype=acc_dtype))  # nothing counted: it costs nothing
    if order == "fa2":  # the query tiles on `workers` threads, BLAS on one thread
        query_tiles = tiles(inp.N, block_q)

        def run(i: int) -> None:
            for _ in fa2_query_tile(memory, inp, i, query_tiles[i], block_k):
                pass

        run_query_tiles(run, len(query_tiles), workers, causal=inp.causal)
    else:
        for _ in fa1_loop(memory, inp, block_q, block_k):
            pass
    return heads.restore(tile_result(memory, inp, order, return_lse))


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
    g_now = np.full(rows_shape, -np.inf, dtype)  # every row's state so far
    s_now = np.zeros(rows_shape, dtype)
    a_now = np.zeros(rows_shape + (inp.Dv,), dtype)
    cols = tiles(inp.M, block_k)
    for i, j, skipped, (r0, r1), g_tile, s_tile, a_tile in LOOPS[order](memory, inp, block_q, block_k):
        if not skipped:
            g_now[..., r0:r1], s_now[..., r0:r1] = g_tile, s_tile
            if order == "fa2":  # A' = acc / s, for the record only: fa2 itself divides once at the end
                a_tile = finish(a_tile, s_tile)
            a_now[..., r0:r1, :] = a_tile
        yield i, j, skipped, (r0, r1), cols[j], g_now.copy(), s_now.copy(), a_now.copy()
