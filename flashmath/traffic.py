"""Memory traffic: counted loads and stores of every algorithm of the course, and the model they obey.

One counting mechanism serves every chapter. A :class:`CountedMemory` holds named arrays in off-chip memory
(DRAM, or HBM on a GPU); indexing one of them reads it (a *load*), assigning into one writes it (a *store*), and
each access is tallied in elements, per array and per pass. Whatever an algorithm keeps in registers or on-chip
memory between accesses (a running max, a query tile, a row of partial sums) costs nothing. Bytes are elements
times ``bytes_per_element``.

* Chapters 1-2: each softmax variant runs element by element on a vector ``x`` and writes ``y``. The counts
  reproduce the memory-access table of Milakov and Gimelshein (2018):

  ================  =====  ======  ====================
  variant           loads  stores  accesses per element
  ================  =====  ======  ====================
  naive softmax       2      1      3
  safe softmax        3      1      4
  online softmax      2      1      3
  ================  =====  ======  ====================

* Chapters 4-6: :func:`counted_attention` runs an attention algorithm with ``Q``, ``K``, ``V`` and the output
  ``A`` (and, where the algorithm has them, the scores ``X``, the probabilities ``Y`` and row states) in counted
  memory, and :func:`attention_traffic` predicts the same counts from the sizes alone. The algorithms:

  ``"standard"``
      FlashAttention's Algorithm 0: ``X = Q K^T`` written to memory, read back for ``Y = softmax(X)``, which is
      written and read back for ``A = Y V``.
  ``"two_loop"``
      :func:`flashmath.attention.two_loop_attention` (chapter 4): loop (1) reads ``K``, loop (2) reads ``K`` again
      and ``V``; ``X`` and ``Y`` are never stored.
  ``"one_loop"``
      :func:`flashmath.attention.one_loop_attention` (chapter 5): ``K`` and ``V`` are read once.
  ``"fa1"``, ``"fa2"``
      :func:`flashmath.flash.flash_attention` in the order of FlashAttention (Algorithm 1) and FlashAttention-2.

  The loops of chapters 4-5 run over the keys for all ``N`` rows at once, so they keep ``Q`` and the rows'
  states on chip for the whole run: they are the tiled loops with one query tile of ``B_r = N`` rows and key
  tiles of ``B_c = 1`` key (``one_loop`` counts exactly as ``fa2`` with those blocks, less the logsumexp).

The model (per leading (batch, head) element; ``T_r = ceil(N / B_r)`` query tiles, ``T_c = ceil(M / B_c)`` key
tiles; loads / stores in elements):

=========  ===========================  ===========================  ==========================================
array      standard                     fa2 (query tiles outside)    fa1 (key tiles outside)
=========  ===========================  ===========================  ==========================================
Q          N D / 0                      N D / 0                      T_c N D / 0
K          M D / 0                      T_r M D / 0                  M D / 0
V          M Dv / 0                     T_r M Dv / 0                 M Dv / 0
X, Y       N M / N M each               (never stored)               (never stored)
A          0 / N Dv                     0 / N Dv                     T_c N Dv / (T_c + 1) N Dv
row state  (none)                       lse: 0 / N                   g, s: T_c N / (T_c + 1) N each
=========  ===========================  ===========================  ==========================================

(``+ 1``: Algorithm 1 first initialises ``A``, ``g`` and ``s`` in memory.) Asymptotically, standard attention
moves ``Theta(N D + N M)`` elements and both tiled orders ``Theta(N M D^2 / S)`` for an on-chip memory of
``S`` elements (FlashAttention, Theorem 2): see :func:`sram_sweep`. What the model leaves out (caches between
the chip and HBM, masks, dropout, the backward pass) is discussed in :func:`gpt2_medium_traffic`.

Sources: M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax" (2018), table 1; T. Dao et
al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness" (2022), Algorithms 0 and 1,
section 3.2 (Theorem 2) and Figure 2; T. Dao, "FlashAttention-2" (2023), Algorithm 1.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from flashmath._checks import integer
from flashmath.attention import _finish, _loop_1, _loop_2, _one_loop, _setup, prepare_attention_inputs
from flashmath.softmax import as_float_array, merge, safe_softmax

__all__ = [
    "CountedMemory",
    "CountedArray",
    "TrafficCount",
    "naive_softmax_counted",
    "safe_softmax_counted",
    "online_softmax_counted",
    "SOFTMAX_VARIANTS",
    "ALGORITHMS",
    "counted_attention",
    "attention_traffic",
    "algorithm1_block_sizes",
    "block_sizes_for_sram",
    "SramSweep",
    "sram_sweep",
    "gpt2_medium_traffic",
]

ALGORITHMS = ("standard", "two_loop", "one_loop", "fa1", "fa2")
"""The attention algorithms :func:`counted_attention` runs and :func:`attention_traffic` models, in course order."""


# ----------------------------------------------------------------------------------------------------------------
# Counting
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class TrafficCount:
    """Element loads and stores of one run (or of the model), per array and per pass.

    Attributes:
        arrays: ``{name: (loads, stores)}`` in elements, for every array in memory (untouched ones are ``(0, 0)``).
        passes: ``[(name, loads, stores), ...]`` for the passes named with :meth:`CountedMemory.pass_`, in order.
        length: the number of elements of the input vector, for :meth:`per_element` (softmax); 0 otherwise.
        bytes_per_element: the size of one element in memory, in bytes.
    """

    arrays: dict = field(default_factory=dict)
    passes: list = field(default_factory=list)
    length: int = 0
    bytes_per_element: int = 8

    @property
    def loads(self) -> int:
        """Element loads from memory, all arrays together."""
        return sum(loads for loads, _ in self.arrays.values())

    @property
    def stores(self) -> int:
        """Element stores to memory, all arrays together."""
        return sum(stores for _, stores in self.arrays.values())

    @property
    def bytes(self) -> int:
        """Bytes moved between memory and the chip: ``(loads + stores) * bytes_per_element``."""
        return (self.loads + self.stores) * self.bytes_per_element

    def bytes_of(self, name: str) -> tuple[int, int]:
        """``(bytes loaded, bytes stored)`` of one array (``(0, 0)`` for an array this run never had)."""
        loads, stores = self.arrays.get(name, (0, 0))
        return loads * self.bytes_per_element, stores * self.bytes_per_element

    def per_element(self) -> tuple[float, float, float]:
        """``(loads, stores, loads + stores)`` per element of the input vector (softmax counts)."""
        n = max(self.length, 1)
        return self.loads / n, self.stores / n, (self.loads + self.stores) / n


class CountedArray:
    """One array in counted memory: ``arr[index]`` is a load and ``arr[index] = value`` a store.

    Both count the elements that ``index`` selects (numpy basic indexing: integers, slices, ``...``, ``None``).
    A load returns what the index selects, a view where numpy gives one: treat it as read-only.
    """

    def __init__(self, memory: CountedMemory, name: str, data: np.ndarray):
        self._memory, self._name, self._data = memory, name, data

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, index):
        value = self._data[index]
        self._memory._tally(self._name, np.size(value), 0)
        return value

    def __setitem__(self, index, value) -> None:
        self._memory._tally(self._name, 0, np.size(self._data[index]))
        self._data[index] = value


class CountedMemory:
    """Named arrays in off-chip memory that count every element loaded and stored.

    Args:
        arrays: ``{name: array}``; the arrays are held as given (not copied), so pass arrays the caller may
            not see changed (inputs are only read; outputs are written in place).
        bytes_per_element: the element size used for :attr:`TrafficCount.bytes`; default: the largest
            itemsize among the arrays.
        length: stored in :attr:`TrafficCount.length` (the vector length of the softmax counts).

    ``memory["K"]`` is the :class:`CountedArray` of ``K``; :meth:`pass_` names the sweep in progress;
    :attr:`count` holds the tally; :meth:`array` returns an array's current contents without counting.
    """

    def __init__(self, arrays: dict, *, bytes_per_element: int | None = None, length: int = 0):
        self._data = {name: np.asarray(a) for name, a in arrays.items()}
        if bytes_per_element is None:
            bytes_per_element = max((a.itemsize for a in self._data.values()), default=8)
        self.count = TrafficCount(
            arrays={name: (0, 0) for name in self._data}, length=length, bytes_per_element=bytes_per_element
        )
        self._views = {name: CountedArray(self, name, a) for name, a in self._data.items()}
        self._current = None

    def __getitem__(self, name: str) -> CountedArray:
        return self._views[name]

    def _tally(self, name: str, loads: int, stores: int) -> None:
        old_loads, old_stores = self.count.arrays[name]
        self.count.arrays[name] = (old_loads + loads, old_stores + stores)
        if self._current is not None:
            self._current[1] += loads
            self._current[2] += stores

    @contextmanager
    def pass_(self, name: str):
        """Count the loads and stores made inside the ``with`` block as one pass called ``name``."""
        self._current = [name, 0, 0]
        try:
            yield self
        finally:
            self.count.passes.append(tuple(self._current))
            self._current = None

    def array(self, name: str) -> np.ndarray:
        """The array ``name`` as it is now (not counted, not copied: do not modify it)."""
        return self._data[name]


# ----------------------------------------------------------------------------------------------------------------
# Chapters 1-2: softmax element by element
# ----------------------------------------------------------------------------------------------------------------


def _vector_memory(x) -> CountedMemory:
    """Counted memory holding the input vector ``x`` (a float64 copy) and an output vector ``y``."""
    x = as_float_array(x)
    if x.ndim != 1:
        raise ValueError(f"the counted softmax takes a 1-D vector, got shape {x.shape}")
    x = x.astype(np.float64)  # counting is about accesses, the values are float64
    return CountedMemory({"x": x, "y": np.zeros_like(x)}, length=len(x))


def naive_softmax_counted(x):
    """Direct softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`. Overflows like
    :func:`flashmath.softmax.softmax` (returns inf/NaN, no warning).
    """
    mem = _vector_memory(x)
    x, y = mem["x"], mem["y"]
    with mem.pass_("sum of exp"):
        d = 0.0
        for i in range(len(x)):
            d += _exp(x[i])  # d = sum_j exp(x_j)
    with mem.pass_("divide"):
        for i in range(len(x)):
            y[i] = _div(_exp(x[i]), d)  # y_i = exp(x_i) / d
    return mem.array("y").copy(), mem.count


def safe_softmax_counted(x):
    """Safe softmax on counted memory: 3 passes, 3 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = _vector_memory(x)
    x, y = mem["x"], mem["y"]
    with mem.pass_("max"):
        g = -math.inf
        for i in range(len(x)):
            g = _max(g, x[i])  # g = max_j x_j
    with mem.pass_("sum"):
        s = 0.0
        for i in range(len(x)):
            s += _exp_shifted(x[i], g)  # s = sum_j exp(x_j - g)
    with mem.pass_("divide"):
        for i in range(len(x)):
            e = _exp_shifted(x[i], g)
            y[i] = e / s if s != 0 else 0.0  # y_i = exp(x_i - g) / s; a fully masked row gives 0
    return mem.array("y").copy(), mem.count


def online_softmax_counted(x):
    """Online softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Pass 1 keeps ``(g, s)`` in registers and updates both from each loaded ``x_i``
    (:func:`flashmath.softmax.merge` with the one-element state ``(x_i, 1)``).

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = _vector_memory(x)
    x, y = mem["x"], mem["y"]
    with mem.pass_("max and sum (online)"):
        g, s = -math.inf, 0.0
        for i in range(len(x)):
            # g_i = max(g_{i-1}, x_i);  s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
            g, s = (float(value) for value in merge(g, s, x[i], 1.0))
    with mem.pass_("divide"):
        for i in range(len(x)):
            e = _exp_shifted(x[i], g)
            y[i] = e / s if s != 0 else 0.0  # y_i = exp(x_i - g_N) / s_N; a fully masked row gives 0
    return mem.array("y").copy(), mem.count


SOFTMAX_VARIANTS = {
    "naive softmax": naive_softmax_counted,
    "safe softmax": safe_softmax_counted,
    "online softmax": online_softmax_counted,
}
"""The counted variants by name, in the order of Milakov and Gimelshein's memory-access table."""


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


def _check_algorithm(algorithm) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}")
    return algorithm


def _bytes_per_element(value, default: int) -> int:
    if value is None:
        return default
    value = integer(value, "bytes_per_element")
    if value < 1:
        raise ValueError(f"bytes_per_element must be >= 1, got {value}")
    return value


def counted_attention(
    algorithm, q, k, v, *, block_q=None, block_k=None, scale=None, causal=False, mask=None, bytes_per_element=None
):
    """Run an attention algorithm with its arrays in counted memory; return the output and the traffic.

    The algorithms are the package's own loops (nothing is re-implemented for counting): ``"two_loop"`` and
    ``"one_loop"`` run the loops of :mod:`flashmath.attention` with ``K`` and ``V`` in counted memory, ``"fa1"``
    and ``"fa2"`` the tile loop of :func:`flashmath.flash.flash_attention`. ``"standard"`` is Algorithm 0 of
    FlashAttention written out here: three passes through memory, ``X = Q K^T``, ``Y = softmax(X)``, ``A = Y V``.
    The scale is folded into ``Q`` before counting starts; a boolean mask is not counted (a causal mask is
    computed from indices on chip).

    Args:
        algorithm: one of :data:`ALGORITHMS`.
        q, k, v, scale, causal, mask: as :func:`flashmath.attention.attention`.
        block_q, block_k: tile sizes ``B_r``, ``B_c`` for ``"fa1"`` and ``"fa2"`` (default: those of
            :func:`flashmath.flash.flash_attention`); ignored by the other algorithms.
        bytes_per_element: element size for :attr:`TrafficCount.bytes`; default: the itemsize of ``q``, ``k``, ``v``.

    Returns:
        ``(A, count)``: the output ``(..., N, Dv)`` as the algorithm returns it and a :class:`TrafficCount`
        whose ``arrays`` use the names of :func:`attention_traffic` (``Q``, ``K``, ``V``, ``A``, and ``X``, ``Y``
        for standard attention, ``g``, ``s`` for fa1, ``lse`` for fa2).

    Raises:
        ValueError: an unknown ``algorithm``, bad block sizes; otherwise as :func:`flashmath.attention.attention`.
    """
    from flashmath import flash  # flash imports this module: imported here, not at the top

    tiled = _check_algorithm(algorithm) in ("fa1", "fa2")
    if tiled:
        block_q, block_k = flash._check_tiling(block_q, block_k, algorithm)
    # the tile loops build the causal mask tile by tile; the loops of chapters 3-5 take it inside keep
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=not tiled)
    bpe = _bytes_per_element(bytes_per_element, inp.dtype.itemsize)
    if tiled:
        hbm, steps = flash._tile_loop(inp, algorithm, block_q, block_k, bytes_per_element=bpe)
        for _ in steps:
            pass
        return flash._tile_result(hbm, inp, algorithm, return_lse=False), hbm.count

    dtype, q_scaled, k_c, v_c, rows = _setup(inp)
    if algorithm == "standard":
        return _standard_counted(inp, dtype, q_scaled, k_c, v_c, bpe)
    hbm = CountedMemory(
        {"Q": q_scaled, "K": k_c, "V": v_c, "A": np.zeros(rows + (inp.Dv,), dtype)}, bytes_per_element=bpe
    )
    q_on_chip = hbm["Q"][...]  # every row's query stays on chip for the whole run
    if algorithm == "two_loop":
        g = np.full(rows, -np.inf, dtype=dtype)
        s = np.zeros(rows, dtype=dtype)
        with hbm.pass_("loop (1)"):
            for _, g, s in _loop_1(q_on_chip, hbm["K"], inp.keep, rows, dtype):
                pass
        a = np.zeros(rows + (inp.Dv,), dtype=dtype)
        with hbm.pass_("loop (2)"):
            for _, a in _loop_2(q_on_chip, hbm["K"], hbm["V"], inp.keep, rows, dtype, g, s):
                pass
    else:
        g = np.full(rows, -np.inf, dtype=dtype)
        s = np.zeros(rows, dtype=dtype)
        a = np.zeros(rows + (inp.Dv,), dtype=dtype)
        with hbm.pass_("one loop"):
            for _, g, s, _, _, a in _one_loop(q_on_chip, hbm["K"], hbm["V"], inp.keep, rows, dtype):
                pass
    hbm["A"][...] = _finish(a, g, s, inp, return_lse=False)  # A written once
    return hbm.array("A").astype(inp.dtype), hbm.count


def _standard_counted(inp, dtype, q_scaled, k, v, bpe):
    """FlashAttention's Algorithm 0 with ``X`` and ``Y`` in counted memory."""
    shape_xy = inp.batch_shape + (inp.N, inp.M)
    hbm = CountedMemory(
        {
            "Q": q_scaled,
            "K": k,
            "V": v,
            "X": np.empty(shape_xy, dtype),
            "Y": np.empty(shape_xy, dtype),
            "A": np.empty(inp.batch_shape + (inp.N, inp.Dv), dtype),
        },
        bytes_per_element=bpe,
    )
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        with hbm.pass_("X = Q K^T"):
            x = np.matmul(hbm["Q"][...], np.swapaxes(hbm["K"][...], -1, -2))  # (..., N, M)
            if inp.keep is not None:
                x = np.where(inp.keep, x, -np.inf)
            hbm["X"][...] = x
        with hbm.pass_("Y = softmax(X)"):
            hbm["Y"][...] = safe_softmax(hbm["X"][...])  # (..., N, M); a fully masked row gives zeros
        with hbm.pass_("A = Y V"):
            hbm["A"][...] = np.matmul(hbm["Y"][...], hbm["V"][...])  # (..., N, Dv)
    return hbm.array("A").astype(inp.dtype), hbm.count


# ----------------------------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------------------------


def _size(value, name: str, minimum: int = 0) -> int:
    value = integer(value, name)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def attention_traffic(
    algorithm, N, M, D, *, Dv=None, block_q=None, block_k=None, batch=1, bytes_per_element=4
) -> TrafficCount:
    """The loads and stores of an attention algorithm, from the sizes alone (the table in the module docstring).

    Args:
        algorithm: one of :data:`ALGORITHMS`.
        N, M, D: queries, keys, head dimension. Dv: value dimension (default ``D``).
        block_q, block_k: ``B_r`` and ``B_c`` for ``"fa1"`` and ``"fa2"`` (required there, ignored otherwise).
        batch: the number of independent (batch, head) problems; every count is multiplied by it.
        bytes_per_element: the size of one element in memory (4 for float32, 2 for float16).

    Returns:
        A :class:`TrafficCount` with ``arrays`` (no ``passes``): equal to the ``arrays`` that
        :func:`counted_attention` counts for inputs of these sizes without a mask (and with every leading
        dimension of ``q``, ``k``, ``v`` of full size; a ``k`` broadcast over heads is stored, and counted, once).

    Raises:
        TypeError: a size that is not an integer. ValueError: a negative size, an unknown algorithm, a missing or
        non-positive block size.

    Source: Dao et al. (2022), Algorithm 0 (standard), Algorithm 1 (fa1), section 3.2; Dao (2023), Algorithm 1.
    """
    _check_algorithm(algorithm)
    N, M = _size(N, "N"), _size(M, "M")
    D = _size(D, "D", 1)
    Dv = D if Dv is None else _size(Dv, "Dv")
    batch = _size(batch, "batch")
    bpe = _bytes_per_element(bytes_per_element, 4)
    q, k, v, a = N * D, M * D, M * Dv, N * Dv  # elements of Q, K, V, A
    if algorithm == "standard":
        arrays = {"Q": (q, 0), "K": (k, 0), "V": (v, 0), "X": (N * M, N * M), "Y": (N * M, N * M), "A": (0, a)}
    elif algorithm == "two_loop":
        arrays = {"Q": (q, 0), "K": (2 * k, 0), "V": (v, 0), "A": (0, a)}
    elif algorithm == "one_loop":
        arrays = {"Q": (q, 0), "K": (k, 0), "V": (v, 0), "A": (0, a)}
    else:
        if block_q is None or block_k is None:
            raise ValueError(f"the {algorithm} model needs block_q (B_r) and block_k (B_c)")
        B_r, B_c = _size(block_q, "block_q", 1), _size(block_k, "block_k", 1)
        T_r, T_c = -(-N // B_r), -(-M // B_c)  # ceil(N / B_r) query tiles, ceil(M / B_c) key tiles
        if algorithm == "fa2":
            # each query tile reads every key and value tile (and Q_i only if there is a key); A, lse written once
            arrays = {"Q": (q if M else 0, 0), "K": (T_r * k, 0), "V": (T_r * v, 0), "A": (0, a), "lse": (0, N)}
        else:
            # each key tile reads every query tile and reads and writes its A, g, s; plus the initialisation
            arrays = {
                "Q": (T_c * q, 0),
                "K": (k, 0),
                "V": (v, 0),
                "A": (T_c * a, (T_c + 1) * a),
                "g": (T_c * N, (T_c + 1) * N),
                "s": (T_c * N, (T_c + 1) * N),
            }
    arrays = {name: (loads * batch, stores * batch) for name, (loads, stores) in arrays.items()}
    return TrafficCount(arrays=arrays, bytes_per_element=bpe)


def algorithm1_block_sizes(sram_bytes, D, *, bytes_per_element=4) -> tuple[int, int]:
    """FlashAttention's block sizes for an on-chip memory of ``sram_bytes``: ``(B_r, B_c)``.

    With ``S = sram_bytes // bytes_per_element`` elements of on-chip memory, Algorithm 1 (line 1) sets
    ``B_c = ceil(S / 4D)`` and ``B_r = min(ceil(S / 4D), D)``, so that the tiles of ``K``, ``V`` (``B_c x D``
    each), ``Q``, ``A`` (``B_r x D`` each) and the score tile (``B_r x B_c``) fit together.

    Raises:
        TypeError: a non-integer argument. ValueError: ``sram_bytes`` smaller than one element, ``D < 1``.

    Source: Dao et al. (2022), Algorithm 1, line 1.
    """
    sram_bytes, D = _size(sram_bytes, "sram_bytes", 1), _size(D, "D", 1)
    S = sram_bytes // _bytes_per_element(bytes_per_element, 4)
    if S < 1:
        raise ValueError(f"sram_bytes = {sram_bytes} holds no element of {bytes_per_element} bytes")
    B_c = -(-S // (4 * D))  # ceil(S / 4D)
    return min(B_c, D), B_c


def block_sizes_for_sram(sram_bytes, D, *, order="fa1", bytes_per_element=4) -> tuple[int, int]:
    """``(B_r, B_c)`` for an on-chip memory of ``sram_bytes``, for either loop order.

    ``order="fa1"`` is Algorithm 1's rule (:func:`algorithm1_block_sizes`): the key/value tile, which stays on
    chip while every query tile streams past it, gets the large size ``ceil(S / 4D)``. For ``order="fa2"`` the
    roles swap: the query tile stays on chip, so this course gives it the large size and the streamed key tile
    ``min(ceil(S / 4D), D)``. (The FlashAttention-2 paper tunes its block sizes per GPU instead of stating a
    rule; with Algorithm 1's rule unchanged, fa2's traffic would stop falling once ``B_r`` reaches ``D``.)
    """
    if order not in ("fa1", "fa2"):
        raise ValueError(f"order must be 'fa1' or 'fa2', got {order!r}")
    small, large = algorithm1_block_sizes(sram_bytes, D, bytes_per_element=bytes_per_element)
    return (small, large) if order == "fa1" else (large, small)


@dataclass(frozen=True)
class SramSweep:
    """Memory traffic of a tiled order against the size of on-chip memory (:func:`sram_sweep`).

    Attributes:
        sram_bytes: ``(K,)`` the on-chip memory sizes, in bytes.
        block_q, block_k: ``(K,)`` the block sizes ``B_r``, ``B_c`` chosen for each size.
        hbm_bytes: ``(K,)`` the modelled bytes moved between HBM and the chip (loads plus stores).
        theta_bytes: ``(K,)`` ``N M D^2 / S`` elements (``S`` = on-chip elements) in bytes: the order of
            growth of Theorem 2, to which ``hbm_bytes`` is proportional as long as the blocks are smaller than
            the sequence.
        standard_bytes: the modelled bytes of standard attention (independent of on-chip memory).
        order: ``"fa1"`` or ``"fa2"``.
    """

    sram_bytes: np.ndarray
    block_q: np.ndarray
    block_k: np.ndarray
    hbm_bytes: np.ndarray
    theta_bytes: np.ndarray
    standard_bytes: int
    order: str


def sram_sweep(N, D, sram_bytes, *, M=None, Dv=None, order="fa1", batch=1, bytes_per_element=4) -> SramSweep:
    """Modelled HBM traffic of a tiled order for each on-chip memory size, with the blocks it allows.

    For each size the blocks come from :func:`block_sizes_for_sram`, and the traffic from
    :func:`attention_traffic`. The traffic falls as ``Theta(N M D^2 / S)`` (FlashAttention, Theorem 2, with
    ``M = N``) until a block covers the whole sequence, where it levels off at one pass over every array.

    Args:
        N, D: queries and head dimension; M (default ``N``), Dv (default ``D``).
        sram_bytes: a sequence of on-chip memory sizes in bytes.
        order, batch, bytes_per_element: as :func:`attention_traffic`.

    Returns:
        :class:`SramSweep`.
    """
    M = N if M is None else M
    sizes = np.asarray(sram_bytes)
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"sram_bytes must be a non-empty 1-D sequence of sizes in bytes, got shape {sizes.shape}")
    blocks = [block_sizes_for_sram(int(b), D, order=order, bytes_per_element=bytes_per_element) for b in sizes]
    traffic = [
        attention_traffic(
            order, N, M, D, Dv=Dv, block_q=B_r, block_k=B_c, batch=batch, bytes_per_element=bytes_per_element
        ).bytes
        for B_r, B_c in blocks
    ]
    elements = sizes // bytes_per_element
    return SramSweep(
        sram_bytes=sizes.astype(np.int64),
        block_q=np.array([b[0] for b in blocks]),
        block_k=np.array([b[1] for b in blocks]),
        hbm_bytes=np.array(traffic, dtype=np.int64),
        theta_bytes=N * M * D**2 / elements * bytes_per_element * batch,
        standard_bytes=attention_traffic(
            "standard", N, M, D, Dv=Dv, batch=batch, bytes_per_element=bytes_per_element
        ).bytes,
        order=order,
    )


# FlashAttention (2022), Figure 2 (left): GPT-2 medium attention, forward plus backward, measured on an A100.
FIGURE2_PAPER_GB = {"standard": 40.3, "flash": 4.4}
A100_SRAM_BYTES = 192 * 1024  # on-chip SRAM per streaming multiprocessor (FlashAttention, section 2.1)


def gpt2_medium_traffic(*, sram_bytes=A100_SRAM_BYTES, bytes_per_element=2) -> dict:
    """The model's forward traffic for the configuration of FlashAttention's Figure 2, beside the paper's figures.

    GPT-2 medium attention: ``N = M = 1024``, ``D = 64``, 16 heads, batch 64 (1024 independent heads), float16
    (2 bytes), and the A100's 192 KB of SRAM per streaming multiprocessor for the block sizes.

    Returns:
        ``{"standard": GB, "fa1": GB, "fa2": GB, "blocks_fa1": (B_r, B_c), "blocks_fa2": (B_r, B_c),
        "paper_standard": 40.3, "paper_flash": 4.4}`` with GB = 1e9 bytes of HBM reads plus writes.

    What the paper's bars hold that the model does not, and why the numbers differ (the chapter 6 text,
    ``docs/figure2.md``, works the numbers out):

    * **The backward pass.** The paper's bars are forward plus backward; the model is the forward only
      (chapter 10 adds the backward). Standard attention's backward (the paper's Algorithm 3, appendix B.4)
      reads ``Y`` and writes and reads the gradients of ``Y`` and ``X``: six ``N x N`` passes against the
      forward's four. FlashAttention's backward (Algorithm 4) recomputes those tiles on chip from ``Q``, ``K``,
      ``V`` and the row statistics instead.
    * **Element-wise passes over the N x N matrix.** Masking applied to ``X`` and dropout applied to ``Y`` each
      read and write the whole matrix when they run as separate operations (paper, section 2.2), and dropout
      keeps its mask for the backward. Algorithm 0 has only the softmax pass. FlashAttention fuses masking and
      dropout into its kernel (section 3.1, "kernel fusion"), so they add nothing to its traffic.
    * **Measured, not counted.** The bars are measured on an A100. Its 40 MB L2 cache can serve repeated reads
      of a tile, which the model counts every time; the CUDA kernels choose their own block sizes rather than
      Algorithm 1's rule; the row statistics are float32, not float16.
    * A later revision of the paper redraws Figure 2 for a run with a key-padding mask and no dropout:
      35.3 GB (35.1 ms) for standard attention and 4.4 GB (11.7 ms) for FlashAttention.

    Source: Dao et al. (2022), Figure 2 (left), section 2.1 (A100 memory sizes), Algorithms 0-4.
    """
    N = M = 1024
    D, heads, batch = 64, 16, 64
    problems = heads * batch
    gb = 1e9
    out = {
        "standard": attention_traffic("standard", N, M, D, batch=problems, bytes_per_element=bytes_per_element).bytes
        / gb
    }
    for order in ("fa1", "fa2"):
        B_r, B_c = block_sizes_for_sram(sram_bytes, D, order=order, bytes_per_element=bytes_per_element)
        out[order] = (
            attention_traffic(
                order, N, M, D, block_q=B_r, block_k=B_c, batch=problems, bytes_per_element=bytes_per_element
            ).bytes
            / gb
        )
        out[f"blocks_{order}"] = (B_r, B_c)
    out["paper_standard"] = FIGURE2_PAPER_GB["standard"]
    out["paper_flash"] = FIGURE2_PAPER_GB["flash"]
    return out
