"""Where the tiles and row states live, and what they cost on chip (chapter 10, the article's hardware questions);
the memory hierarchy of one GPU and its host, as FlashAttention's Figure 1 draws it (chapter 1).

A query tile's working set in FlashAttention-2's forward loop (one thread block per query tile):

* ``Q_i`` ``(B_r, D)``, and one key/value tile ``K_j``, ``V_j`` ``(B_c, D)``, ``(B_c, Dv)``: loaded from HBM into
  shared memory (Triton and CUTLASS stage them there; several stages when loads are pipelined);
* the score tile ``X_ij = Q_i K_j^T`` and its weights ``P_ij`` ``(B_r, B_c)``: produced by the matrix unit into
  registers (accumulated in float32), used at once, never written out;
* the accumulator ``s A'`` ``(B_r, Dv)`` in float32 and the row states ``g``, ``s`` ``(B_r,)``: in registers for the
  whole sweep over the keys, written to HBM once at the end. That holds on Ampere and Hopper (the GPUs of
  :data:`GPUS`); on Blackwell data-center GPUs (sm_100) the ``tcgen05`` matrix instructions accumulate in a
  separate on-chip tensor memory (TMEM, 128 lanes x 512 columns of 32-bit cells per SM, 256 KiB: Triton's Gluon
  tutorial on tcgen05), and FlashAttention-4 keeps its score tiles and output accumulators there
  (``tmem_s_offset``, ``tmem_o_offset`` in Dao-AILab/flash-attention ``flash_attn/cute/flash_fwd_sm100.py``).

Registers are the fastest storage but a kernel must know their number when it is compiled: an array lives in
registers only when its size is a compile-time constant and every index into it is known after unrolling. That
is why the head dimension ``D`` (and the block sizes) are template or ``tl.constexpr`` parameters in
FlashAttention's CUDA code and in Triton kernels, while ``N`` and ``M`` stay runtime values: with ``D`` known, the
accumulator ``(B_r, D)`` is spread over the threads' registers; with ``D`` unknown it would spill to local memory
(off chip, cached), and the loop over ``d`` could not be unrolled.

The figures of :data:`GPUS` are per streaming multiprocessor (SM): the register file and the largest shared
memory carve-out, from NVIDIA's CUDA C++ Programming Guide (appendix "Compute Capabilities", table of technical
specifications per compute capability) and the Ampere and Hopper tuning guides ("Unified Shared Memory/L1/Texture
Cache" sections).

:data:`FIGURE_1` holds the three levels of memory that FlashAttention's Figure 1 (left) draws, with the sizes and
bandwidths it gives: on-chip SRAM 19 TB/s (20 MB), HBM 1.5 TB/s (40 GB), CPU DRAM 12.8 GB/s (more than 1 TB). The
figure names no GPU; its GPU numbers are the A100's of section 2.1, its DRAM a host's. Its SRAM is the 192 KB of
each of the A100's 108 streaming multiprocessors (section 2.1 of the paper), of which up to
``GPUS["A100"].shared_bytes`` (164 KiB) can serve as shared memory (163 KiB for one thread block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from flashmath._checks import size

__all__ = [
    "FA2_FORWARD_TILES",
    "FIGURE_1",
    "GPU",
    "GPUS",
    "MemoryHierarchy",
    "MemoryLevel",
    "TileBytes",
    "largest_query_tile",
    "register_limit",
    "tile_bytes",
]

KiB = 1024


@dataclass(frozen=True)
class GPU:
    """One GPU's on-chip memory per SM, in bytes.

    Attributes:
        name: the product. compute_capability: e.g. ``"8.0"``.
        register_bytes: the register file of one SM (64K 32-bit registers = 256 KiB on each GPU here).
        shared_bytes: the largest shared-memory carve-out of one SM.
        shared_per_block_bytes: the most shared memory one thread block may use.
        max_registers_per_thread: 255 on each GPU here (more are spilled to local memory).
    """

    name: str
    compute_capability: str
    register_bytes: int
    shared_bytes: int
    shared_per_block_bytes: int
    max_registers_per_thread: int = 255


GPUS = {
    "A100": GPU("NVIDIA A100", "8.0", 256 * KiB, 164 * KiB, 163 * KiB),
    "RTX 4090": GPU("NVIDIA GeForce RTX 4090", "8.9", 256 * KiB, 100 * KiB, 99 * KiB),
    "H100": GPU("NVIDIA H100", "9.0", 256 * KiB, 228 * KiB, 227 * KiB),
}
"""Per-SM figures from the CUDA C++ Programming Guide's compute-capability table (8.0, 8.9, 9.0)."""

FA2_FORWARD_TILES = {
    ("A100", 64): (128, 128, 4),
    ("A100", 128): (128, 64, 4),
    ("A100", 256): (128, 64, 8),
    ("RTX 4090", 64): (128, 128, 4),
    ("RTX 4090", 128): (128, 32, 4),
    ("RTX 4090", 256): (64, 64, 4),
    ("H100", 64): (128, 128, 4),
    ("H100", 128): (128, 64, 4),
    ("H100", 256): (64, 64, 4),
}
"""What FlashAttention-2's CUDA forward kernel launches: ``(gpu, D) -> (B_r, B_c, num_warps)``, without causal
mask or dropout.

Read in Dao-AILab/flash-attention, ``csrc/flash_attn/src/flash_fwd_launch_template.h`` (``run_mha_fwd_hdim64``,
``run_mha_fwd_hdim128``, ``run_mha_fwd_hdim256``): ``kBlockM x kBlockN`` and ``kNWarps`` of the
``Flash_fwd_kernel_traits`` each one picks. For ``D = 128`` the RTX 4090 (sm89) gets ``128 x 32`` ("2 CTAs per SM",
says the comment; ``64 x 64`` with a causal mask); for ``D = 256`` the choice depends on the shared memory per SM
and per block (``128 x 64`` with 8 warps on an A100; ``64 x 64`` on an H100, "since then we can get 2 CTAs per SM",
and on an RTX 4090, whose blocks get 99 KiB). The kernel keeps one ``K`` and one ``V`` tile in shared memory
(``kSmemKVSize`` in ``kernel_traits.h``), so it compares with :func:`largest_query_tile` at ``stages=1``. An H100 runs
this Ampere kernel only in FlashAttention-2; FlashAttention-3 is its Hopper kernel, with other tiles.
"""


@dataclass(frozen=True)
class TileBytes:
    """The on-chip bytes of one query tile's working set (see the module docstring for where each lives).

    Attributes (bytes):
        q_tile, kv_tiles: shared memory: ``Q_i`` once, ``K_j`` and ``V_j`` times the pipeline stages.
        scores: registers: the score tile ``X_ij`` and weights ``P_ij`` in float32 (``P`` reuses ``X``'s registers
            in practice; counted once).
        accumulator: registers: ``s A'`` ``(B_r, Dv)`` in float32.
        row_states: registers: ``g`` and ``s`` ``(B_r,)`` in float32.
    """

    q_tile: int
    kv_tiles: int
    scores: int
    accumulator: int
    row_states: int

    @property
    def shared(self) -> int:
        """Bytes in shared memory."""
        return self.q_tile + self.kv_tiles

    @property
    def registers(self) -> int:
        """Bytes in registers (across the thread block)."""
        return self.scores + self.accumulator + self.row_states


def tile_bytes(
    D: int, block_q: int, block_k: int, *, dtype: DTypeLike = "float16", Dv: int | None = None, stages: int = 2
) -> TileBytes:
    """The on-chip bytes of FlashAttention-2's forward working set for one query tile.

    Args:
        D: head dimension of ``q`` and ``k``. Dv: of ``v`` (default ``D``).
        block_q, block_k: ``B_r`` and ``B_c``.
        dtype: the element type of ``Q``, ``K``, ``V`` in memory (accumulation is float32 whatever it is).
        stages: how many key/value tiles are in flight at once (software pipelining; 1 = no overlap).

    Returns:
        :class:`TileBytes`.

    Raises:
        TypeError: sizes that are not integers; ValueError: sizes below 1 or an unknown dtype.
    """
    D, block_q, block_k, stages = (
        size(x, n, 1) for x, n in ((D, "D"), (block_q, "block_q"), (block_k, "block_k"), (stages, "stages"))
    )
    Dv = D if Dv is None else size(Dv, "Dv", 1)
    try:
        element = np.dtype(dtype).itemsize
    except TypeError:
        raise ValueError(f"dtype must be a numpy dtype name such as 'float16', got {dtype!r}") from None
    f32 = 4
    return TileBytes(
        q_tile=block_q * D * element,  # Q_i (B_r, D)
        kv_tiles=stages * block_k * (D + Dv) * element,  # K_j (B_c, D) and V_j (B_c, Dv), per stage
        scores=block_q * block_k * f32,  # X_ij, then P_ij (B_r, B_c)
        accumulator=block_q * Dv * f32,  # s A' (B_r, Dv)
        row_states=2 * block_q * f32,  # g, s (B_r,)
    )


def register_limit(gpu: GPU, num_warps: int | None = None) -> int:
    """The register bytes one thread block can hold: the SM's register file, and, with ``num_warps`` given, at
    most ``gpu.max_registers_per_thread`` 4-byte registers for each of its ``32 * num_warps`` threads.

    With 4 warps that is ``128 * 255 * 4`` bytes (127.5 KiB), half the register file: a block that needs more
    registers per thread than 255 spills the rest to local memory (off chip), whatever the SM has left.

    Raises:
        TypeError: ``num_warps`` not an integer. ValueError: ``num_warps`` below 1.

    Source: CUDA C++ Programming Guide, the compute-capability table ("maximum number of 32-bit registers per
    thread": 255).
    """
    if num_warps is None:
        return gpu.register_bytes
    num_warps = size(num_warps, "num_warps", 1)
    return min(gpu.register_bytes, 32 * num_warps * gpu.max_registers_per_thread * 4)


def largest_query_tile(
    gpu: GPU,
    D: int,
    block_k: int,
    *,
    dtype: DTypeLike = "float16",
    stages: int = 2,
    candidates: tuple[int, ...] = (16, 32, 64, 128, 256),
    num_warps: int | None = None,
) -> int | None:
    """The largest ``B_r`` among ``candidates`` whose working set fits one SM of ``gpu``.

    Fits means: the shared-memory part within ``gpu.shared_per_block_bytes`` and the register part within
    :func:`register_limit` (the register file; with ``num_warps`` given, also 255 registers per thread of the
    block's ``32 * num_warps`` threads). Real kernels also need registers for addresses and loop counters, so
    this is an upper bound, and without ``num_warps`` a loose one (it lets one block fill the register file):
    with FlashAttention-2's own ``B_c``, warps and one stage it gives exactly the ``B_r`` of
    :data:`FA2_FORWARD_TILES`, without the warps often twice that. None when even the smallest candidate does not
    fit.

    Raises:
        TypeError, ValueError: a bad size (as :func:`tile_bytes`) or ``num_warps`` (as :func:`register_limit`).
    """
    limit = register_limit(gpu, num_warps)
    best = None
    for block_q in sorted(candidates):
        need = tile_bytes(D, block_q, block_k, dtype=dtype, stages=stages)
        if need.shared <= gpu.shared_per_block_bytes and need.registers <= limit:
            best = block_q
    return best


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a memory hierarchy: how many bytes it holds and how fast it is read.

    Attributes:
        name: ``"SRAM"``, ``"HBM"`` or ``"DRAM"``, as FlashAttention's Figure 1 labels them.
        size_bytes: the capacity in bytes (decimal units: 1 GB = 1e9 bytes, as the paper writes them).
        bandwidth: bytes per second.
        at_least: True when ``size_bytes`` is a lower bound (the paper's CPU DRAM is "> 1 TB").
    """

    name: str
    size_bytes: float
    bandwidth: float
    at_least: bool = False


@dataclass(frozen=True)
class MemoryHierarchy:
    """A GPU's on-chip SRAM and HBM and its host's DRAM, fastest first.

    Attributes:
        gpu: the GPU's on-chip figures per SM (:data:`GPUS`).
        sms: its number of streaming multiprocessors. sram_per_sm_bytes: the on-chip SRAM of one SM that the size of
            the SRAM level counts (shared memory and L1 together).
        levels: SRAM, HBM, DRAM.
        source: where the numbers come from.
    """

    gpu: GPU
    sms: int
    sram_per_sm_bytes: int
    levels: tuple[MemoryLevel, ...]
    source: str

    def level(self, name: str) -> MemoryLevel:
        """The level called ``name`` (KeyError for another name)."""
        for level in self.levels:
            if level.name == name:
                return level
        raise KeyError(f"no memory level {name!r}; the levels are {[level.name for level in self.levels]}")


FIGURE_1 = MemoryHierarchy(
    gpu=GPUS["A100"],
    sms=108,
    sram_per_sm_bytes=192 * KiB,
    levels=(
        MemoryLevel("SRAM", 20e6, 19e12),
        MemoryLevel("HBM", 40e9, 1.5e12),
        MemoryLevel("DRAM", 1e12, 12.8e9, at_least=True),
    ),
    source="T. Dao et al., FlashAttention (2022), Figure 1 (left) and section 2.1",
)
"""The memory hierarchy of FlashAttention's Figure 1 (left): SRAM 19 TB/s (20 MB), HBM 1.5 TB/s (40 GB), DRAM
12.8 GB/s (> 1 TB). The figure names no GPU; its GPU numbers are the A100's of section 2.1: 40-80 GB of HBM at
1.5-2.0 TB/s, and 192 KB of on-chip SRAM in each of 108 streaming multiprocessors, read at about 19 TB/s (the DRAM
numbers are the figure's alone). NVIDIA counts a KB
of on-chip memory as 1024 bytes (its 164 KB carve-out is the 164 KiB of :data:`GPUS`), so the SMs hold 108 x 192 KiB
= 21.2 MB, which the figure rounds to 20 MB; chapter 1's picture says so (``108 SMs × 192 KiB ≈ 20 MB``)."""
