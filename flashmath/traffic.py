"""Memory traffic: the model of the loads and stores of every algorithm of the course, from the sizes alone.

The counts it predicts are those that :mod:`flashmath.counting` measures by running the algorithms on a counted
memory (:class:`flashmath.memory.CountedMemory`), where a load or store of one element counts once, per array and
per pass, and whatever an algorithm keeps on chip between accesses costs nothing. Bytes are elements times
``bytes_per_element``.

* Chapters 1-2: each softmax variant of :mod:`flashmath.counting` runs element by element on a vector ``x`` and
  writes ``y``. The counts reproduce the memory-access table of Milakov and Gimelshein (2018):

  ================  =====  ======  ====================
  variant           loads  stores  accesses per element
  ================  =====  ======  ====================
  naive softmax       2      1      3
  safe softmax        3      1      4
  online softmax      2      1      3
  ================  =====  ======  ====================

* Chapters 4-6: :func:`flashmath.counting.counted_attention` runs an attention algorithm with ``Q``, ``K``,
  ``V`` and the output ``A`` (and, where the algorithm has them, the scores ``X``, the probabilities ``Y`` and row
  states) in counted memory, and :func:`attention_traffic` predicts the same counts from the sizes alone. The
  algorithms:

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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size
from flashmath.memory import TrafficCount

__all__ = [
    "ALGORITHMS",
    "A100_SRAM_BYTES",
    "FIGURE2_PAPER_GB",
    "SramSweep",
    "TrafficCount",
    "algorithm1_block_sizes",
    "attention_traffic",
    "block_sizes_for_sram",
    "check_algorithm",
    "check_bytes_per_element",
    "gpt2_medium_traffic",
    "sram_sweep",
    "tile_traffic_table",
    "TRAFFIC_BLOCKS",
    "TRAFFIC_DIMS",
]

ALGORITHMS = ("standard", "two_loop", "one_loop", "fa1", "fa2")
"""The attention algorithms :func:`flashmath.counting.counted_attention` runs and :func:`attention_traffic` models,
in course order."""


def check_algorithm(algorithm: object) -> str:
    """``algorithm`` when it is one of :data:`ALGORITHMS`; ValueError otherwise."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}")
    return algorithm


def check_bytes_per_element(value: object, default: int) -> int:
    """The element size in bytes (``default`` for None): an integer >= 1."""
    if value is None:
        return default
    return size(value, "bytes_per_element", 1)


def attention_traffic(
    algorithm: str,
    N: int,
    M: int,
    D: int,
    *,
    Dv: int | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    batch: int = 1,
    bytes_per_element: int = 4,
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
        :func:`flashmath.counting.counted_attention` counts for inputs of these sizes without a mask (and with
        every leading dimension of ``q``, ``k``, ``v`` of full size; a ``k`` broadcast over heads is stored, and
        counted, once).

    Raises:
        TypeError: a size that is not an integer. ValueError: a negative size, an unknown algorithm, a missing or
        non-positive block size.

    Source: Dao et al. (2022), Algorithm 0 (standard), Algorithm 1 (fa1), section 3.2; Dao (2023), Algorithm 1.
    """
    check_algorithm(algorithm)
    N, M = size(N, "N"), size(M, "M")
    D = size(D, "D", 1)
    Dv = D if Dv is None else size(Dv, "Dv")
    batch = size(batch, "batch")
    bpe = check_bytes_per_element(bytes_per_element, 4)
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
        B_r, B_c = size(block_q, "block_q", 1), size(block_k, "block_k", 1)
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


def algorithm1_block_sizes(sram_bytes: int, D: int, *, bytes_per_element: int = 4) -> tuple[int, int]:
    """FlashAttention's block sizes for an on-chip memory of ``sram_bytes``: ``(B_r, B_c)``.

    With ``S = sram_bytes // bytes_per_element`` elements of on-chip memory, Algorithm 1 (line 1) sets
    ``B_c = ceil(S / 4D)`` and ``B_r = min(ceil(S / 4D), D)``, so that each tile takes ``O(S)`` elements: the
    tiles of ``K`` and ``V`` (``B_c x D``) about ``S / 4`` each, those of ``Q`` and ``A`` (``B_r x D``) and the
    score tile (``B_r x B_c <= D x B_c``) at most about ``S / 4`` each. All of them together fit up to a constant
    factor, which is all Theorem 2's ``Theta`` needs (its proof, Appendix C, asks only that ``B_c D``, ``B_r D``
    and ``B_r B_c`` be ``O(S)``); they fit in ``S`` itself only from about ``S = 8 D^2`` on (line 1 gives no
    reason for its sizes).

    Raises:
        TypeError: a non-integer argument. ValueError: ``sram_bytes`` smaller than one element, ``D < 1``.

    Source: Dao et al. (2022), Algorithm 1, line 1.
    """
    sram_bytes, D = size(sram_bytes, "sram_bytes", 1), size(D, "D", 1)
    S = sram_bytes // check_bytes_per_element(bytes_per_element, 4)
    if S < 1:
        raise ValueError(f"sram_bytes = {sram_bytes} holds no element of {bytes_per_element} bytes")
    B_c = -(-S // (4 * D))  # ceil(S / 4D)
    return min(B_c, D), B_c


def block_sizes_for_sram(sram_bytes: int, D: int, *, order: str = "fa1", bytes_per_element: int = 4) -> tuple[int, int]:
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


def sram_sweep(
    N: int,
    D: int,
    sram_bytes: ArrayLike,
    *,
    M: int | None = None,
    Dv: int | None = None,
    order: str = "fa1",
    batch: int = 1,
    bytes_per_element: int = 4,
) -> SramSweep:
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


# FlashAttention (2022, arXiv version), Figure 2 (left): GPT-2 medium attention on an A100, forward plus backward.
FIGURE2_PAPER_GB = {"standard": 40.3, "flash": 4.4}
A100_SRAM_BYTES = 192 * 1024  # on-chip SRAM per streaming multiprocessor (FlashAttention, section 2.1)


def gpt2_medium_traffic(*, sram_bytes: int = A100_SRAM_BYTES, bytes_per_element: int = 2) -> dict:
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
    * **Probably measured, not counted.** The paper does not say how it obtained its bars; measured on an A100,
      its 40 MB L2 cache can serve repeated reads of a tile, which the model counts every time; the CUDA kernels
      choose their own block sizes rather than Algorithm 1's rule; the row statistics are float32, not float16.
    * Another version of the paper (not arXiv v2) redraws Figure 2 for a run with a key-padding mask and no dropout:
      35.3 GB (35.1 ms) for standard attention and 4.4 GB (11.7 ms) for FlashAttention.

    Source: Dao et al. (2022), Figure 2 (left), section 2.1 (A100 memory sizes), Algorithms 0-4.
    """
    N = M = 1024
    D, heads, batch = 64, 16, 64
    problems = heads * batch
    gb = 1e9
    out: dict = {
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


TRAFFIC_BLOCKS = (8, 16, 32, 64, 128, 256)
"""``B = B_r = B_c`` of chapter 6's traffic slider (:func:`tile_traffic_table`)."""
TRAFFIC_DIMS = (32, 64, 128, 256)
"""The head dimensions of that slider."""


def tile_traffic_table(
    N: int = 4096, *, dims: Sequence[int] = TRAFFIC_DIMS, blocks: Sequence[int] = TRAFFIC_BLOCKS
) -> dict:
    """Elements moved per score by fa2, fa1 and standard attention, for square tiles and several ``D`` (chapter 6;
    what :class:`flashmath.viz.traffic.TileTrafficPlot` draws).

    Args:
        N: queries = keys. dims: head dimensions. blocks: tile sizes ``B = B_r = B_c``.

    Returns:
        ``{"N", "dims", "blocks", "fa2", "fa1", "standard"}``: each algorithm an array ``(len(dims), len(blocks))``
        of :func:`attention_traffic`'s elements (``bytes_per_element=1``) divided by ``N * N``.

    Raises:
        TypeError, ValueError: as :func:`attention_traffic` (e.g. a non-positive size).
    """
    N = size(N, "N", 1)
    dims, blocks = tuple(size(d, "each of dims", 1) for d in dims), tuple(size(b, "each of blocks", 1) for b in blocks)
    table: dict = {"N": N, "dims": dims, "blocks": blocks}
    for algorithm in ("fa2", "fa1", "standard"):
        table[algorithm] = np.array(
            [
                [
                    attention_traffic(algorithm, N, N, d, block_q=b, block_k=b, bytes_per_element=1).bytes / (N * N)
                    for b in blocks
                ]
                for d in dims
            ]
        )
    return table
