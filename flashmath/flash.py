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
:func:`flash_trace` a counted one too, to record the state and the traffic after every tile step. The tile
steps themselves are public (:func:`fa2_tile_step`, :func:`fa1_tile_step`); tiles and their keep masks come
from :mod:`flashmath.tiling`. On-chip blocks are named ``*_tile`` (``q_tile``); whole arrays in memory are ``q``,
``k``...

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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from flashmath._checks import float_dtype
from flashmath.inputs import AttentionInputs, compute_operands, prepare_attention_inputs
from flashmath.memory import CountedMemory, Memory, PlainMemory, TrafficCount
from flashmath.rowstate import finish, logsumexp_of, merge_rows, weighted_values

# Chapter 11 prints the lines under the rule comments of this loop beside the kernel's
# (flashmath.triton_kernel.line_for_line): the guard keeps the name those lines show.
from flashmath.rowstate import nonempty as _nonempty
from flashmath.tiling import (
    DEFAULT_BLOCK_K,
    DEFAULT_BLOCK_Q,
    ORDERS,
    check_tiling,
    tile_keep,
    tile_score_mod,
    tiles,
    variant_tile_scores,
)
from flashmath.variants import group_heads, make_variant

__all__ = [
    "DEFAULT_BLOCK_K",
    "DEFAULT_BLOCK_Q",
    "ORDERS",
    "FlashTrace",
    "fa1_loop",
    "fa1_tile_step",
    "fa2_loop",
    "fa2_tile_step",
    "fa2_write",
    "flash_attention",
    "flash_trace",
    "tile_arrays",
    "tile_result",
]


# ----------------------------------------------------------------------------------------------------------------
# One tile step per order: the update of a query tile's row state by one score tile (the exercises' references
# and the kernel's line-for-line reading use these)
# ----------------------------------------------------------------------------------------------------------------


def fa2_tile_step(g_tile: np.ndarray, s_tile: np.ndarray, acc_tile: np.ndarray, x_tile: np.ndarray, v_tile: np.ndarray,
                  keep_tile: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        g_ref = _nonempty(g_new)
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


def fa2_write(a: Any, lse: Any, r0: int, r1: int, g_tile: np.ndarray, s_tile: np.ndarray,
              acc_tile: np.ndarray) -> None:
    """The end of query tile ``i``: one division, then write ``A_i`` and the logsumexp ``lse_i`` to memory."""
    with np.errstate(invalid="ignore", divide="ignore"):
        # A_i = acc / s  (a row that saw no key has acc = 0: divide by 1 instead of 0)
        a[..., r0:r1, :] = acc_tile / np.where(s_tile == 0, 1, s_tile)[..., None]
        # lse_i = g + log(s);  a row that saw no key: -inf + log(0) = -inf
        lse[..., r0:r1] = logsumexp_of(g_tile, s_tile)


def fa1_tile_step(g_tile: np.ndarray, s_tile: np.ndarray, a_tile: np.ndarray, x_tile: np.ndarray, v_tile: np.ndarray,
                  keep_tile: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FlashAttention's tile step (Algorithm 1): the state ``(g, s, A')`` of ``B_r`` rows after one key tile,
    the output normalised.

    Args:
        g_tile, s_tile: ``(..., B_r)``; a_tile: ``(..., B_r, Dv)`` the normalised output over the keys seen.
        x_tile: ``(..., B_r, B_c)`` the score tile, masked pairs ``-inf``; **overwritten** by the weights.
        v_tile: ``(..., B_c, Dv)``. keep_tile: the tile's keep mask or None.

    Returns:
        ``(g_new, s_new, a_new)`` as new arrays (the tile alone has state ``(rowmax X, rowsum P)``, merged with
        the old one by chapter 2's rule).

    Source: Dao et al. (2022), Algorithm 1, lines 9-13.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        # the state of this tile alone: g~ = rowmax(X_ij), P~ = exp(X_ij - g~), s~ = rowsum(P~)
        g_loc = x_tile.max(axis=-1)  # (..., B_r)
        p_tile = np.exp(np.subtract(x_tile, _nonempty(g_loc)[..., None], out=x_tile), out=x_tile)
        s_loc = p_tile.sum(axis=-1)
        # g_new = max(g, g~);  s_new = s exp(g - g_new) + s~ exp(g~ - g_new)   (chapter 2's merge)
        g_new, s_new = merge_rows(g_tile, s_tile, g_loc, s_loc)
        g_ref = _nonempty(g_new)
        old = s_tile * np.exp(g_tile - g_ref)  # (..., B_r)
        new = np.exp(g_loc - g_ref)
        # A_new = (s exp(g - g_new) A + exp(g~ - g_new) P~ V_j) / s_new   (normalised at every step)
        a_new = old[..., None] * a_tile + new[..., None] * weighted_values(p_tile, v_tile, keep_tile)
        a_new /= np.where(s_new == 0, 1, s_new)[..., None]
    return g_new, s_new, a_new


# ----------------------------------------------------------------------------------------------------------------
# The two loop orders. Each is a generator over tile steps, reading and writing its arrays in the memory it is
# given (flashmath.memory: a plain one costs nothing, a counted one tallies every load and store).
# ----------------------------------------------------------------------------------------------------------------


def fa2_loop(memory: Memory, inp: AttentionInputs, block_q: int, block_k: int) -> Iterator[tuple]:
    """FlashAttention-2 order: query tiles outside. After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, acc_tile)``, the on-chip state of query tile ``i``.

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``lse`` written here
    (:func:`tile_arrays`)."""
    q, k, v, a, lse = (memory[name] for name in ("Q", "K", "V", "A", "lse"))
    batch, dtype = inp.batch_shape, q.dtype  # the compute dtype
    key_tiles = tiles(inp.M, block_k)
    for i, (r0, r1) in enumerate(tiles(inp.N, block_q)):
        q_tile = None  # Q_i is loaded when its first tile that is not skipped needs it
        g_tile = np.full(batch + (r1 - r0,), -np.inf, dtype)  # g = -inf: no key seen yet
        s_tile = np.zeros(batch + (r1 - r0,), dtype)  # s = 0
        acc_tile = np.zeros(batch + (r1 - r0, inp.Dv), a.dtype)  # acc = s A' = 0, unnormalised; kept in A's dtype
        for j, (c0, c1) in enumerate(key_tiles):
            keep_tile = tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is not False:
                if q_tile is None:
                    q_tile = q[..., r0:r1, :]  # load Q_i: (..., B_r, D)
                k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # load K_j, V_j: (..., B_c, D), (..., B_c, Dv)
                with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
                    x_tile = variant_tile_scores(q_tile, k_tile, keep_tile, batch, tile_score_mod(inp, r0, r1, c0, c1))
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

    ``memory`` holds ``Q`` (scaled, compute dtype), ``K``, ``V``, and ``A``, ``g``, ``s`` written here."""
    q, k, v, a, g, s = (memory[name] for name in ("Q", "K", "V", "A", "g", "s"))
    # Algorithm 1, line 2: A = 0, s = 0, g = -inf in memory
    a[...] = 0
    s[...] = 0
    g[...] = -np.inf
    batch = inp.batch_shape
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
            with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
                x_tile = variant_tile_scores(q_tile, k_tile, keep_tile, batch, tile_score_mod(inp, r0, r1, c0, c1))
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
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, block_q: int | None = None, block_k: int | None = None,
    order: str = "fa2", scale: float | None = None, causal: bool = False, mask: ArrayLike | None = None,
    return_lse: bool = False, acc_dtype: DTypeLike | None = None, enable_gqa: bool = False,
    window: Any = None, softcap: float | None = None, alibi_slopes: ArrayLike | None = None,
    score_mod: Callable[..., Any] | None = None, mask_mod: Callable[..., Any] | None = None,
) -> Any:
    """Attention computed tile by tile, never holding more than one ``(..., block_q, block_k)`` score tile.

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
        ValueError: an unknown ``order``, a block size below 1. TypeError: a block size that is not an integer,
        an ``acc_dtype`` that is not a floating-point dtype. Otherwise as :func:`flashmath.attention.attention`
        (same checks, same messages).

    Extra memory: one score tile ``(..., B_r, B_c)``, the scaled copy of ``Q``, the output, and ``O(B_r Dv)``
    of row state; never ``(..., N, M)``. A tile spans all the leading (batch, head) dimensions: with many of
    them, pass smaller blocks than the defaults (which are tuned for one head).

    Sources: Dao et al. (2022), Algorithm 1 (fa1); Dao (2023), Algorithm 1 (fa2).
    """
    block_q, block_k = check_tiling(block_q, block_k, order)
    acc_dtype = None if acc_dtype is None else float_dtype(acc_dtype, "acc_dtype")
    heads = group_heads(q, k, v, mask, enable_gqa)  # grouped-query heads: (..., H_kv, G, N, D), nothing copied
    inp = prepare_attention_inputs(heads.q, heads.k, heads.v, scale=scale, causal=causal, mask=heads.mask,
                                   fold_causal=False)
    if heads.groups or any(x is not None for x in (window, softcap, alibi_slopes, score_mod, mask_mod)):
        inp = inp._replace(variant=make_variant(inp.N, inp.M, inp.batch_shape, groups=heads, window=window,
                                                softcap=softcap, alibi_slopes=alibi_slopes, score_mod=score_mod,
                                                mask_mod=mask_mod))
    memory = PlainMemory(tile_arrays(inp, order, acc_dtype=acc_dtype))  # nothing counted: it costs nothing
    for _ in LOOPS[order](memory, inp, block_q, block_k):
        pass
    return heads.restore(tile_result(memory, inp, order, return_lse))


@dataclass(frozen=True)
class FlashTrace:
    """The state after every tile step of :func:`flash_attention`, for the tile-sweep plots.

    Step ``t`` processed query tile ``tiles[t, 0]`` (rows ``rows[t, 0]:rows[t, 1]``) against key tile
    ``tiles[t, 1]`` (keys ``cols[t, 0]:cols[t, 1]``), in the loop order: key tile fastest for fa2, query tile
    fastest for fa1. Skipped tiles (every pair masked) are steps too, with ``skipped[t]`` True; nothing is
    loaded or computed for them.

    Attributes (compute dtype unless noted; ``...`` are the broadcast leading dimensions):
        order: ``"fa1"`` or ``"fa2"``. block_q, block_k: ``B_r``, ``B_c``.
        grid: ``(T_r, T_c)``, the number of query tiles and of key tiles.
        tiles: ``(T, 2)`` int, ``(i, j)`` = (query tile, key tile) of each step.
        rows: ``(T, 2)`` int, the query rows ``[r0, r1)`` of the step. cols: ``(T, 2)`` int, the keys ``[c0, c1)``.
        skipped: ``(T,)`` bool.
        g: ``(T, ..., N)`` every row's running max after the step (``-inf`` for a row that has seen no key).
        s: ``(T, ..., N)`` every row's running sum after the step.
        a: ``(T, ..., N, Dv)`` every row's output over the keys it has seen, normalised (``A'``; 0 before any
            key). fa1 holds exactly this in memory; fa2 holds ``acc = s A'`` on chip (:attr:`acc`) and divides
            once when the query tile is done.
        loaded_bytes, stored_bytes: ``(T,)`` int, bytes moved from and to memory so far (fa1's initialisation
            of ``A``, ``g``, ``s`` included in the first step).
        bytes_by_array: ``{name: (T, 2) int}``, the same per array (``Q``, ``K``, ``V``, ``A``, and ``lse`` or
            ``g``, ``s``): column 0 loaded, column 1 stored, so far.
        traffic: the :class:`flashmath.traffic.TrafficCount` of the whole run (per array).
        output: ``(..., N, Dv)`` and lse: ``(..., N)``, the result of :func:`flash_attention`.
    """

    order: str
    block_q: int
    block_k: int
    grid: tuple
    tiles: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    skipped: np.ndarray
    g: np.ndarray
    s: np.ndarray
    a: np.ndarray
    loaded_bytes: np.ndarray
    stored_bytes: np.ndarray
    bytes_by_array: dict
    traffic: TrafficCount
    output: np.ndarray
    lse: np.ndarray

    def __len__(self) -> int:
        return len(self.tiles)

    @property
    def acc(self) -> np.ndarray:
        """``(T, ..., N, Dv)`` the unnormalised accumulator ``s A'`` of every row (what fa2 keeps on chip)."""
        return self.s[..., None] * self.a

    @property
    def hbm_bytes(self) -> np.ndarray:
        """``(T,)`` bytes moved between memory and the chip so far, both directions."""
        return self.loaded_bytes + self.stored_bytes

    @property
    def n_skipped(self) -> int:
        """The number of tiles skipped because every pair in them is masked."""
        return int(self.skipped.sum())


def flash_trace(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, block_q: int | None = None, block_k: int | None = None,
    order: str = "fa2", scale: float | None = None, causal: bool = False, mask: ArrayLike | None = None,
    bytes_per_element: int | None = None,
) -> FlashTrace:
    """Run :func:`flash_attention` and keep the state of every row after every tile step (for the tile sweep).

    Args:
        q, k, v, block_q, block_k, order, scale, causal, mask: as :func:`flash_attention`.
        bytes_per_element: element size for the byte counts; default: the itemsize of the inputs.

    Returns:
        :class:`FlashTrace`. It stores ``T_r * T_c`` copies of the row states: meant for small inputs (a real
        head of a few dozen tokens), not for benchmarks.

    Raises:
        as :func:`flash_attention`; also ValueError when ``N`` or ``M`` is 0 (no tile steps to trace).
    """
    block_q, block_k = check_tiling(block_q, block_k, order)
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    if inp.N == 0 or inp.M == 0:
        raise ValueError(
            f"flash_trace needs at least one query and one key to have tile steps, got N = {inp.N}, M = {inp.M}"
        )
    # the trace records the traffic of every step: the loop runs on a counted memory
    if bytes_per_element is None:
        bytes_per_element = inp.dtype.itemsize
    hbm = CountedMemory(tile_arrays(inp, order), bytes_per_element=bytes_per_element)
    steps = LOOPS[order](hbm, inp, block_q, block_k)
    dtype = hbm.array("A").dtype
    rows_shape = inp.batch_shape + (inp.N,)
    g_now = np.full(rows_shape, -np.inf, dtype)  # every row's state so far
    s_now = np.zeros(rows_shape, dtype)
    a_now = np.zeros(rows_shape + (inp.Dv,), dtype)
    names = ("tiles", "rows", "cols", "skipped", "g", "s", "a", "loaded", "stored", "arrays")
    record: dict[str, list] = {name: [] for name in names}
    cols = tiles(inp.M, block_k)
    for i, j, skipped, (r0, r1), g_tile, s_tile, a_tile in steps:
        if not skipped:
            g_now[..., r0:r1], s_now[..., r0:r1] = g_tile, s_tile
            if order == "fa2":  # A' = acc / s, for the record only: fa2 itself divides once at the end
                a_tile = finish(a_tile, s_tile)
            a_now[..., r0:r1, :] = a_tile
        count = hbm.count
        for name, value in (
            ("tiles", (i, j)),
            ("rows", (r0, r1)),
            ("cols", cols[j]),
            ("skipped", skipped),
            ("g", g_now.copy()),
            ("s", s_now.copy()),
            ("a", a_now.copy()),
            ("loaded", count.loads * count.bytes_per_element),
            ("stored", count.stores * count.bytes_per_element),
            ("arrays", dict(count.arrays)),
        ):
            record[name].append(value)
    output, lse = tile_result(hbm, inp, order, return_lse=True)
    return FlashTrace(
        order=order,
        block_q=block_q,
        block_k=block_k,
        grid=(len(tiles(inp.N, block_q)), len(cols)),
        tiles=np.array(record["tiles"], dtype=np.intp),
        rows=np.array(record["rows"], dtype=np.intp),
        cols=np.array(record["cols"], dtype=np.intp),
        skipped=np.array(record["skipped"], dtype=bool),
        g=np.stack(record["g"]),
        s=np.stack(record["s"]),
        a=np.stack(record["a"]),
        loaded_bytes=np.array(record["loaded"], dtype=np.int64),
        stored_bytes=np.array(record["stored"], dtype=np.int64),
        bytes_by_array={
            name: np.array([step[name] for step in record["arrays"]], dtype=np.int64) * hbm.count.bytes_per_element
            for name in hbm.count.arrays
        },
        traffic=hbm.count,
        output=output,
        lse=lse,
    )
