"""Counted runs: the algorithms of the course on a counted memory, returning their output and their traffic.

Nothing is re-implemented for counting. Each algorithm reads and writes its arrays through a memory passed in
(:mod:`flashmath.memory`); the public functions pass a plain memory that counts nothing, and this module passes a
:class:`flashmath.memory.CountedMemory`, so the counts are of what ran. :mod:`flashmath.traffic` predicts the
same counts from the sizes alone.

* Chapters 1-2: :func:`naive_softmax_counted`, :func:`safe_softmax_counted`, :func:`online_softmax_counted` run
  each softmax variant element by element on a vector (the scalar loops of the memory-access table of Milakov and
  Gimelshein); :data:`SOFTMAX_VARIANTS` names them.
* Chapters 4-6: :func:`counted_attention` runs standard attention, the two loops, the one loop or a tile loop.
* Chapters 6-8: :func:`flash_trace` runs a tile loop step by step (:func:`flashmath.flash.trace_steps`) and
  records every row's state and the bytes moved so far after each step (the tile sweep).

Sources: M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax" (2018), table 1; T. Dao et
al., "FlashAttention" (2022), Algorithms 0 and 1; T. Dao, "FlashAttention-2" (2023), Algorithm 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array
from flashmath.attention import loop_arrays, one_loop_run, standard_arrays, standard_run, two_loop_run
from flashmath.flash import LOOPS, tile_arrays, tile_result, trace_steps
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.inputs import prepare_attention_inputs
from flashmath.memory import CountedMemory, TrafficCount
from flashmath.softmax import merge
from flashmath.tiling import check_tiling, tiles
from flashmath.traffic import check_algorithm, check_bytes_per_element

__all__ = [
    "SOFTMAX_VARIANTS",
    "FlashTrace",
    "counted_attention",
    "flash_trace",
    "naive_softmax_counted",
    "online_softmax_counted",
    "safe_softmax_counted",
]


# ----------------------------------------------------------------------------------------------------------------
# Chapters 1-2: softmax element by element
# ----------------------------------------------------------------------------------------------------------------


def _vector_memory(x: ArrayLike) -> CountedMemory:
    """Counted memory holding the input vector ``x`` (a float64 copy) and an output vector ``y``."""
    x = as_float_array(x)
    if x.ndim != 1:
        raise ValueError(f"the counted softmax takes a 1-D vector, got shape {x.shape}")
    x = x.astype(np.float64)  # counting is about accesses, the values are float64
    return CountedMemory({"x": x, "y": np.zeros_like(x)}, length=len(x))


def naive_softmax_counted(x: ArrayLike) -> tuple[np.ndarray, TrafficCount]:
    """Direct softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`. Overflows like
    :func:`flashmath.softmax.softmax` (returns inf/NaN, no warning).
    """
    mem = _vector_memory(x)
    xs, ys = mem["x"], mem["y"]
    with mem.named_pass(_("sum of exp")):
        d = 0.0
        for i in range(len(xs)):
            d += _exp(xs[i])  # d = sum_j exp(x_j)
    with mem.named_pass(_("divide")):
        for i in range(len(xs)):
            ys[i] = _div(_exp(xs[i]), d)  # y_i = exp(x_i) / d
    return mem.array("y").copy(), mem.count


def safe_softmax_counted(x: ArrayLike) -> tuple[np.ndarray, TrafficCount]:
    """Safe softmax on counted memory: 3 passes, 3 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = _vector_memory(x)
    xs, ys = mem["x"], mem["y"]
    with mem.named_pass(_("max")):
        g = -math.inf
        for i in range(len(xs)):
            g = _max(g, xs[i])  # g = max_j x_j
    with mem.named_pass(_("sum")):
        s = 0.0
        for i in range(len(xs)):
            s += _exp_shifted(xs[i], g)  # s = sum_j exp(x_j - g)
    with mem.named_pass(_("divide")):
        for i in range(len(xs)):
            e = _exp_shifted(xs[i], g)
            ys[i] = e / s if s != 0 else 0.0  # y_i = exp(x_i - g) / s; a fully masked row gives 0
    return mem.array("y").copy(), mem.count


def online_softmax_counted(x: ArrayLike) -> tuple[np.ndarray, TrafficCount]:
    """Online softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Pass 1 keeps ``(g, s)`` in registers and updates both from each loaded ``x_i``
    (:func:`flashmath.softmax.merge` with the one-element state ``(x_i, 1)``).

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = _vector_memory(x)
    xs, ys = mem["x"], mem["y"]
    with mem.named_pass(_("max and sum (online)")):
        g, s = -math.inf, 0.0
        for i in range(len(xs)):
            # g_i = max(g_{i-1}, x_i);  s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
            g, s = (float(value) for value in merge(g, s, xs[i], 1.0))
    with mem.named_pass(_("divide")):
        for i in range(len(xs)):
            e = _exp_shifted(xs[i], g)
            ys[i] = e / s if s != 0 else 0.0  # y_i = exp(x_i - g_N) / s_N; a fully masked row gives 0
    return mem.array("y").copy(), mem.count


SOFTMAX_VARIANTS = {
    N_("naive softmax"): naive_softmax_counted,
    N_("safe softmax"): safe_softmax_counted,
    N_("online softmax"): online_softmax_counted,
}
"""The counted variants by name (English, marked: a chapter shows ``fm.tr(name)``), in the order of Milakov and
Gimelshein's memory-access table."""


# Scalar helpers with numpy's IEEE semantics (inf, NaN) instead of Python's exceptions.
def _exp(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.exp(v))


def _exp_shifted(v: float, g: float) -> float:
    """``exp(v - g)``, with ``exp(-inf - (-inf))`` taken as 0 (a fully masked row)."""
    if g == -math.inf:
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.exp(v - g))


def _div(a: float, b: float) -> float:
    """IEEE division: inf / inf and 0 / 0 give NaN, as in the vectorised direct softmax."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.float64(a) / np.float64(b))


def _max(a: float, b: float) -> float:
    return float(np.maximum(a, b))  # NaN propagates, unlike Python's max


# ----------------------------------------------------------------------------------------------------------------
# Chapters 3-6: attention algorithms on counted memory
# ----------------------------------------------------------------------------------------------------------------


def counted_attention(
    algorithm: str,
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    bytes_per_element: int | None = None,
) -> tuple[np.ndarray, TrafficCount]:
    """Run an attention algorithm with its arrays in counted memory; return the output and the traffic.

    The algorithms are the package's own loops (nothing is re-implemented for counting): ``"two_loop"`` and
    ``"one_loop"`` run the loops of :mod:`flashmath.attention` with ``K`` and ``V`` in counted memory, ``"fa1"``
    and ``"fa2"`` the tile loop of :func:`flashmath.flash.flash_attention`, and ``"standard"`` FlashAttention's
    Algorithm 0 (:func:`flashmath.attention.standard_run`, ``X`` and ``Y`` stored in the compute dtype): three
    passes through memory, ``X = Q K^T``, ``Y = softmax(X)``, ``A = Y V``.
    The scale is folded into ``Q`` before counting starts; a boolean mask is not counted (a causal mask is
    computed from indices on chip).

    Args:
        algorithm: one of :data:`flashmath.traffic.ALGORITHMS`.
        q, k, v, scale, causal, mask: as :func:`flashmath.attention.attention`.
        block_q, block_k: tile sizes ``B_r``, ``B_c`` for ``"fa1"`` and ``"fa2"`` (default: those of
            :func:`flashmath.flash.flash_attention`); ignored by the other algorithms.
        bytes_per_element: element size for :attr:`TrafficCount.bytes`; default: the itemsize of ``q``, ``k``, ``v``.

    Returns:
        ``(A, count)``: the output ``(..., N, Dv)`` as the algorithm returns it and a :class:`TrafficCount`
        whose ``arrays`` use the names of :func:`flashmath.traffic.attention_traffic` (``Q``, ``K``, ``V``, ``A``,
        and ``X``, ``Y`` for standard attention, ``g``, ``s`` for fa1, ``lse`` for fa2).

    Raises:
        ValueError: an unknown ``algorithm``, bad block sizes; otherwise as :func:`flashmath.attention.attention`.
    """
    tiled = check_algorithm(algorithm) in ("fa1", "fa2")
    blocks = check_tiling(block_q, block_k, algorithm) if tiled else (1, 1)
    # the tile loops build the causal mask tile by tile; the loops of chapters 3-5 take it inside keep
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=not tiled)
    bpe = check_bytes_per_element(bytes_per_element, inp.dtype.itemsize)
    if tiled:
        hbm = CountedMemory(tile_arrays(inp, algorithm), bytes_per_element=bpe)
        for _ in LOOPS[algorithm](hbm, inp, *blocks):
            pass
        return tile_result(hbm, inp, algorithm, return_lse=False), hbm.count

    if algorithm == "standard":
        hbm = CountedMemory(standard_arrays(inp), bytes_per_element=bpe)  # X, Y, A stored in the compute dtype
        standard_run(hbm, inp)
        return hbm.array("A").astype(inp.dtype), hbm.count
    hbm = CountedMemory(loop_arrays(inp), bytes_per_element=bpe)
    (two_loop_run if algorithm == "two_loop" else one_loop_run)(hbm, inp)
    return hbm.array("A").astype(inp.dtype), hbm.count


# ----------------------------------------------------------------------------------------------------------------
# Chapters 6-8: the tile sweep, state and traffic after every tile step
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlashTrace:
    """The state and the traffic after every tile step of :func:`flashmath.flash_attention`, for the tile-sweep
    plots (:func:`flash_trace`).

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
        traffic: the :class:`flashmath.memory.TrafficCount` of the whole run (per array).
        output: ``(..., N, Dv)`` and lse: ``(..., N)``, the result of :func:`flashmath.flash_attention`.
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
    bytes_per_element: int | None = None,
) -> FlashTrace:
    """Run :func:`flashmath.flash_attention`'s tile loop on a counted memory and keep the state of every row and
    the bytes moved so far after every tile step (for the tile sweep).

    The loop is :func:`flashmath.flash.trace_steps` (the package's own, nothing re-implemented); this function
    only gives it a :class:`flashmath.memory.CountedMemory` and reads the count between the steps.

    Args:
        q, k, v, block_q, block_k, order, scale, causal, mask: as :func:`flashmath.flash_attention`.
        bytes_per_element: element size for the byte counts; default: the itemsize of the inputs.

    Returns:
        :class:`FlashTrace`. It stores ``T_r * T_c`` copies of the row states: meant for small inputs (a real
        head of a few dozen tokens), not for benchmarks.

    Raises:
        as :func:`flashmath.flash_attention`; also ValueError when ``N`` or ``M`` is 0 (no tile steps to trace)
        or ``bytes_per_element`` is below 1.
    """
    block_q, block_k = check_tiling(block_q, block_k, order)
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    if inp.N == 0 or inp.M == 0:
        raise ValueError(
            f"flash_trace needs at least one query and one key to have tile steps, got N = {inp.N}, M = {inp.M}"
        )
    hbm = CountedMemory(
        tile_arrays(inp, order), bytes_per_element=check_bytes_per_element(bytes_per_element, inp.dtype.itemsize)
    )
    names = ("tiles", "rows", "cols", "skipped", "g", "s", "a", "loaded", "stored", "arrays")
    record: dict[str, list] = {name: [] for name in names}
    for i, j, skipped, rows, cols, g, s, a in trace_steps(hbm, inp, order, block_q, block_k):
        count = hbm.count  # the traffic so far, read between two steps
        for name, value in zip(
            names,
            (
                (i, j),
                rows,
                cols,
                skipped,
                g,
                s,
                a,
                count.loads * count.bytes_per_element,
                count.stores * count.bytes_per_element,
                dict(count.arrays),
            ),
            strict=True,
        ):
            record[name].append(value)
    output, lse = tile_result(hbm, inp, order, return_lse=True)
    return FlashTrace(
        order=order,
        block_q=block_q,
        block_k=block_k,
        grid=(len(tiles(inp.N, block_q)), len(tiles(inp.M, block_k))),
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
