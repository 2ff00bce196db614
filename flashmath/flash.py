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
read and write their arrays through :class:`flashmath.traffic.CountedMemory`, so every run is counted:
:func:`flashmath.traffic.counted_attention` returns the counts and :func:`flash_trace` the state after
every tile step. On-chip blocks are named ``*_tile`` (``q_tile``); whole arrays in memory are ``q``, ``k``...

Conventions (shapes, scale, masks, dtypes, errors) are those of :mod:`flashmath.attention`, and a masked key
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

from dataclasses import dataclass

import numpy as np

from flashmath._checks import integer
from flashmath.attention import AttentionInputs, _setup, logsumexp_of, prepare_attention_inputs, weighted_values
from flashmath.softmax import _merge_states, float_dtype
from flashmath.traffic import CountedMemory, TrafficCount

__all__ = ["DEFAULT_BLOCK_Q", "DEFAULT_BLOCK_K", "ORDERS", "flash_attention", "flash_trace", "FlashTrace"]

DEFAULT_BLOCK_Q = 512
"""Default query-tile size ``B_r``.

Chosen by measurement: ``python -m flashmath.bench speed --sweep`` times every pair of ``block_q`` in 64..1024
and ``block_k`` in 256..4096 at ``N = M = 4096, D = 64`` (float32, 2 shared cores), in interleaved rounds. Over
five sweeps, 512 x 2048 was within 11% of the fastest pair every time (the fastest once), while smaller tiles
lose to numpy's per-call overhead and to less efficient small matrix products (64-row tiles: 1.3-2.5 x slower).
A 512 x 2048 float32 score tile is 4 MiB per (batch, head) element.
"""
DEFAULT_BLOCK_K = 2048
"""Default key-tile size ``B_c`` (see :data:`DEFAULT_BLOCK_Q`)."""
ORDERS = ("fa1", "fa2")


def _check_tiling(block_q, block_k, order) -> tuple[int, int]:
    """Checked block sizes (defaults filled in); ValueError for an unknown order or a block below 1."""
    if order not in ORDERS:
        raise ValueError(
            f"order must be 'fa1' (FlashAttention: key tiles outside) or 'fa2' (FlashAttention-2: query tiles "
            f"outside), got {order!r}"
        )
    sizes = []
    for value, name, default in ((block_q, "block_q", DEFAULT_BLOCK_Q), (block_k, "block_k", DEFAULT_BLOCK_K)):
        value = default if value is None else integer(value, name, "a positive integer (rows per tile)")
        if value < 1:
            raise ValueError(f"{name} must be a positive number of rows per tile, got {value}")
        sizes.append(value)
    return sizes[0], sizes[1]


def _tiles(size: int, block: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` cutting ``range(size)`` into blocks; the last one may be shorter."""
    return [(start, min(start + block, size)) for start in range(0, size, block)]


def _tile_keep(inp: AttentionInputs, r0: int, r1: int, c0: int, c1: int):
    """What tile ``(r0:r1, c0:c1)`` attends to: ``None`` = every pair, ``False`` = none (skip the tile), or a
    boolean array ``(..., B_r, B_c)``, True = attend."""
    keep = None
    if inp.causal:
        # query n sees key m <= n + M - N (bottom-right alignment, as flashmath.masks.causal_mask)
        offset = inp.M - inp.N
        if c0 > r1 - 1 + offset:
            return False  # even the last row of the tile sees none of its keys
        if c1 - 1 > r0 + offset:  # the diagonal crosses the tile
            keep = np.arange(c0, c1) <= np.arange(r0, r1)[:, None] + offset  # (B_r, B_c)
    if inp.keep is not None:
        tile = inp.keep[..., r0:r1, c0:c1]  # (..., B_r, B_c), a view
        keep = tile if keep is None else tile & keep
    if keep is not None:
        if not keep.any():
            return False
        if keep.all():
            return None
    return keep


def _scores(q_tile, k_tile, keep_tile, batch: tuple) -> np.ndarray:
    """``X_ij = Q_i K_j^T`` with masked pairs set to ``-inf`` by selection: a new array ``(*batch, B_r, B_c)``."""
    # X_ij = Q_i K_j^T  (the scale is already folded into Q)
    x_tile = np.matmul(q_tile, np.swapaxes(k_tile, -1, -2))  # (..., B_r, D) @ (..., D, B_c) -> (..., B_r, B_c)
    if keep_tile is not None:
        # a masked pair scores -inf whatever q and k hold: selected, so NaN in a masked k row cannot leak
        x_tile = np.where(keep_tile, x_tile, -np.inf)
    if x_tile.shape[:-2] != batch:  # v or the mask has more leading dimensions than q and k
        x_tile = np.broadcast_to(x_tile, batch + x_tile.shape[-2:]).copy()
    return x_tile


def _nonempty(g: np.ndarray) -> np.ndarray:
    """``g`` with ``-inf`` (a row that has seen no key yet) replaced by 0, where ``g`` is subtracted: the weights
    of such a row come out as ``exp(-inf - 0) = 0`` instead of ``exp(-inf - (-inf)) = NaN``."""
    return np.where(g == -np.inf, 0, g)


# ----------------------------------------------------------------------------------------------------------------
# The two loop orders. Each is a generator over tile steps, reading and writing the arrays in counted memory.
# ----------------------------------------------------------------------------------------------------------------


def _fa2_loop(hbm: CountedMemory, inp: AttentionInputs, block_q: int, block_k: int):
    """FlashAttention-2 order: query tiles outside. After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, acc_tile)``, the on-chip state of query tile ``i``."""
    q, k, v, a, lse = (hbm[name] for name in ("Q", "K", "V", "A", "lse"))
    batch, dtype = inp.batch_shape, q.dtype  # the compute dtype
    key_tiles = _tiles(inp.M, block_k)
    for i, (r0, r1) in enumerate(_tiles(inp.N, block_q)):
        q_tile = None  # Q_i is loaded when its first tile that is not skipped needs it
        g_tile = np.full(batch + (r1 - r0,), -np.inf, dtype)  # g = -inf: no key seen yet
        s_tile = np.zeros(batch + (r1 - r0,), dtype)  # s = 0
        acc_tile = np.zeros(batch + (r1 - r0, inp.Dv), a.dtype)  # acc = s A' = 0, unnormalised; kept in A's dtype
        for j, (c0, c1) in enumerate(key_tiles):
            keep_tile = _tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is not False:
                if q_tile is None:
                    q_tile = q[..., r0:r1, :]  # load Q_i: (..., B_r, D)
                k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # load K_j, V_j: (..., B_c, D), (..., B_c, Dv)
                with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
                    x_tile = _scores(q_tile, k_tile, keep_tile, batch)  # (..., B_r, B_c)
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
                g_tile = g_new
                del x_tile, p_tile  # the score tile is dropped before the next one is made
            if j == len(key_tiles) - 1:
                _fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)
            yield i, j, keep_tile is False, (r0, r1), g_tile, s_tile, acc_tile
        if not key_tiles:  # M = 0: every row is empty
            _fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile)


def _fa2_write(a, lse, r0, r1, g_tile, s_tile, acc_tile) -> None:
    """The end of query tile ``i``: one division, then write ``A_i`` and the logsumexp ``lse_i`` to memory."""
    with np.errstate(invalid="ignore", divide="ignore"):
        # A_i = acc / s  (a row that saw no key has acc = 0: divide by 1 instead of 0)
        a[..., r0:r1, :] = acc_tile / np.where(s_tile == 0, 1, s_tile)[..., None]
        # lse_i = g + log(s);  a row that saw no key: -inf + log(0) = -inf
        lse[..., r0:r1] = logsumexp_of(g_tile, s_tile)


def _fa1_loop(hbm: CountedMemory, inp: AttentionInputs, block_q: int, block_k: int):
    """FlashAttention order (Algorithm 1): key tiles outside. After each tile step yields
    ``(i, j, skipped, (r0, r1), g_tile, s_tile, a_tile)``, the state of query tile ``i`` as written back."""
    q, k, v, a, g, s = (hbm[name] for name in ("Q", "K", "V", "A", "g", "s"))
    # Algorithm 1, line 2: A = 0, s = 0, g = -inf in memory
    a[...] = 0
    s[...] = 0
    g[...] = -np.inf
    batch = inp.batch_shape
    query_tiles = _tiles(inp.N, block_q)
    for j, (c0, c1) in enumerate(_tiles(inp.M, block_k)):
        k_tile = v_tile = None
        for i, (r0, r1) in enumerate(query_tiles):
            keep_tile = _tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is False:
                yield i, j, True, (r0, r1), None, None, None
                continue
            if k_tile is None:  # load K_j, V_j once, for all the query tiles of this column
                k_tile, v_tile = k[..., c0:c1, :], v[..., c0:c1, :]  # (..., B_c, D), (..., B_c, Dv)
            # load Q_i, A_i, g_i, s_i: (..., B_r, D), (..., B_r, Dv), (..., B_r), (..., B_r)
            q_tile, a_tile, g_tile, s_tile = q[..., r0:r1, :], a[..., r0:r1, :], g[..., r0:r1], s[..., r0:r1]
            with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
                x_tile = _scores(q_tile, k_tile, keep_tile, batch)  # (..., B_r, B_c)
                # the state of this tile alone: g~ = rowmax(X_ij), P~ = exp(X_ij - g~), s~ = rowsum(P~)
                g_loc = x_tile.max(axis=-1)  # (..., B_r)
                p_tile = np.exp(np.subtract(x_tile, _nonempty(g_loc)[..., None], out=x_tile), out=x_tile)
                s_loc = p_tile.sum(axis=-1)
                # g_new = max(g, g~);  s_new = s exp(g - g_new) + s~ exp(g~ - g_new)   (chapter 2's merge)
                g_new, s_new = _merge_states(g_tile, s_tile, g_loc, s_loc)
                g_ref = _nonempty(g_new)
                old = s_tile * np.exp(g_tile - g_ref)  # (..., B_r)
                new = np.exp(g_loc - g_ref)
                # A_new = (s exp(g - g_new) A + exp(g~ - g_new) P~ V_j) / s_new   (normalised at every step)
                a_new = old[..., None] * a_tile + new[..., None] * weighted_values(p_tile, v_tile, keep_tile)
                a_new /= np.where(s_new == 0, 1, s_new)[..., None]
            del x_tile, p_tile
            # write A_i, g_i, s_i back to memory
            a[..., r0:r1, :] = a_new
            g[..., r0:r1] = g_new
            s[..., r0:r1] = s_new
            yield i, j, False, (r0, r1), g_new, s_new, a_new


def _tile_loop(inp: AttentionInputs, order: str, block_q: int, block_k: int, *, bytes_per_element=None,
               acc_dtype=None):
    """Counted memory for ``order`` and the generator of its tile steps (nothing runs until it is iterated).
    ``acc_dtype``: the dtype of ``A`` and of fa2's accumulator (default: the compute dtype)."""
    dtype, q_scaled, k, v, rows = _setup(inp)
    arrays = {"Q": q_scaled, "K": k, "V": v, "A": np.empty(rows + (inp.Dv,), dtype if acc_dtype is None else acc_dtype)}
    if order == "fa2":
        arrays["lse"] = np.empty(rows, dtype)
    else:
        arrays["g"] = np.empty(rows, dtype)
        arrays["s"] = np.empty(rows, dtype)
    if bytes_per_element is None:
        bytes_per_element = inp.dtype.itemsize
    hbm = CountedMemory(arrays, bytes_per_element=bytes_per_element)
    loop = _fa2_loop if order == "fa2" else _fa1_loop
    return hbm, loop(hbm, inp, block_q, block_k)


def _tile_result(hbm: CountedMemory, inp: AttentionInputs, order: str, return_lse: bool):
    """The output (and logsumexp) from memory after the loop, in the promoted input dtype."""
    a = hbm.array("A").astype(inp.dtype, copy=False)
    if not return_lse:
        return a
    if order == "fa2":
        return a, hbm.array("lse")
    # lse = g + log(s) from the row statistics Algorithm 1 leaves in memory
    return a, logsumexp_of(hbm.array("g"), hbm.array("s"))


def flash_attention(
    q, k, v, *, block_q=None, block_k=None, order="fa2", scale=None, causal=False, mask=None, return_lse=False,
    acc_dtype=None,
):
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
        scale, causal, mask, return_lse: as :func:`flashmath.attention.attention` (``causal`` is bottom-right
            aligned; ``mask`` is boolean, True = attend).
        acc_dtype: a study knob (chapter 9), the dtype in which the output state is kept from one tile step to
            the next: fa2's on-chip accumulator ``acc = s A'`` (unnormalised), fa1's normalised ``A'`` in memory.
            Each step still computes in the compute dtype and its result is rounded to ``acc_dtype``; ``g`` and
            ``s`` stay in the compute dtype. Default None: the compute dtype (float32 for float16 and bfloat16
            inputs, else the input dtype), as real kernels do. With ``np.float16``, fa2's ``acc`` grows with
            ``s`` (up to ``M`` times the size of ``V``) and overflows past 65504, where fa1's ``A'`` stays finite.

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
    block_q, block_k = _check_tiling(block_q, block_k, order)
    acc_dtype = None if acc_dtype is None else float_dtype(acc_dtype, "acc_dtype")
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    hbm, steps = _tile_loop(inp, order, block_q, block_k, acc_dtype=acc_dtype)
    for _ in steps:
        pass
    return _tile_result(hbm, inp, order, return_lse)


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
    q, k, v, *, block_q=None, block_k=None, order="fa2", scale=None, causal=False, mask=None, bytes_per_element=None
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
    block_q, block_k = _check_tiling(block_q, block_k, order)
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    if inp.N == 0 or inp.M == 0:
        raise ValueError(
            f"flash_trace needs at least one query and one key to have tile steps, got N = {inp.N}, M = {inp.M}"
        )
    hbm, steps = _tile_loop(inp, order, block_q, block_k, bytes_per_element=bytes_per_element)
    dtype = hbm.array("A").dtype
    rows_shape = inp.batch_shape + (inp.N,)
    g_now = np.full(rows_shape, -np.inf, dtype)  # every row's state so far
    s_now = np.zeros(rows_shape, dtype)
    a_now = np.zeros(rows_shape + (inp.Dv,), dtype)
    record = {name: [] for name in ("tiles", "rows", "cols", "skipped", "g", "s", "a", "loaded", "stored", "arrays")}
    cols = _tiles(inp.M, block_k)
    for i, j, skipped, (r0, r1), g_tile, s_tile, a_tile in steps:
        if not skipped:
            g_now[..., r0:r1], s_now[..., r0:r1] = g_tile, s_tile
            if order == "fa2":  # A' = acc / s, for the record only: fa2 itself divides once at the end
                with np.errstate(invalid="ignore", divide="ignore"):
                    a_tile = a_tile / np.where(s_tile == 0, 1, s_tile)[..., None]
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
    output, lse = _tile_result(hbm, inp, order, return_lse=True)
    return FlashTrace(
        order=order,
        block_q=block_q,
        block_k=block_k,
        grid=(len(_tiles(inp.N, block_q)), len(cols)),
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
