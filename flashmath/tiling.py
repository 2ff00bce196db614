"""Tiles: how the loops of chapters 6-11 cut the queries and keys, and what each tile attends to.

The queries are cut into tiles of ``B_r`` rows and the keys and values into tiles of ``B_c`` rows
(:func:`tiles`); a pair of tiles gives a score tile ``X_ij = Q_i K_j^T`` (:func:`tile_scores`). Each tile is
classified by :func:`tile_keep`: *empty* (every pair masked: skipped, neither loaded nor computed), *full* (no
pair masked: no mask applied) or *partial* (a boolean keep mask for the tile). The forward loops
(:mod:`flashmath.flash`), the backward (:mod:`flashmath.backward`), the traffic model (:mod:`flashmath.traffic`)
and the kernel's wrapper (:mod:`flashmath.triton_kernel`) share these, and the block checks.

Sources: T. Dao et al., "FlashAttention" (2022), Algorithm 1 and section 3.3 (block-sparse attention skips zero
blocks); T. Dao, "FlashAttention-2" (2023), section 3.1.1 and Algorithm 1 (its "causal masking" paragraph:
blocks above the diagonal are skipped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from flashmath._checks import integer, size
from flashmath.inputs import AttentionInputs

__all__ = [
    "DEFAULT_BLOCK_K",
    "DEFAULT_BLOCK_Q",
    "ORDERS",
    "check_block",
    "check_order",
    "check_tiling",
    "tile_keep",
    "tile_score_mod",
    "tile_scores",
    "tile_scores_for",
    "tiles",
    "variant_tile_scores",
]

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


def check_block(value: object, name: str) -> int:
    """A tile size: a positive integer. TypeError for a non-integer (a bool is not), ValueError below 1."""
    return size(value, name, 1, "a positive integer (rows per tile)", why=" (rows per tile)")


def check_kernel_block(value: object, name: str, default: int) -> int:
    """A tile size of the Triton kernels (chapters 11-12): ``default`` for None, else a power of two from 16 to 256.

    The range is the course's choice. Powers of two: ``tl.arange`` needs them. At least 16: each of ``B_r`` and
    ``B_c`` is the inner dimension K of some ``tl.dot`` of the kernels (``B_c`` in ``P V``, ``B_r`` in the
    backward's ``P^T dA``), and Triton 3.9's NVIDIA backend needs K >= 16 for 16-bit inputs (8 for float32; M and N
    have no minimum, they are padded): ``min_dot_size`` in ``third_party/nvidia/backend/compiler.py``. The
    interpreter needs no minimum. At most 256: a bound of ours (a 256 x 128 float32 accumulator alone takes half of
    an SM's 256 KB of registers).

    Raises:
        TypeError: a non-integer (a bool is not). ValueError: anything else outside 16, 32, 64, 128, 256.
    """
    number = default if value is None else integer(value, name, "a power of two from 16 to 256 (rows per tile)")
    if number < 16 or number > 256 or number & (number - 1):
        raise ValueError(
            f"{name} must be a power of two from 16 to 256 (on a GPU, Triton's tl.dot needs an inner "
            f"dimension of at least 16 for float16 inputs), got {number}"
        )
    return number


def check_order(order: object) -> str:
    """``order`` when it is ``"fa1"`` or ``"fa2"``; ValueError otherwise."""
    if order not in ORDERS:
        raise ValueError(
            f"order must be 'fa1' (FlashAttention: key tiles outside) or 'fa2' (FlashAttention-2: query tiles "
            f"outside), got {order!r}"
        )
    return str(order)


def check_tiling(block_q: object, block_k: object, order: object) -> tuple[int, int]:
    """Checked block sizes ``(B_r, B_c)``, defaults filled in for None.

    Raises:
        ValueError: an unknown ``order``, a block below 1. TypeError: a block that is not an integer.
    """
    check_order(order)
    sizes = []
    for value, name, default in ((block_q, "block_q", DEFAULT_BLOCK_Q), (block_k, "block_k", DEFAULT_BLOCK_K)):
        sizes.append(default if value is None else check_block(value, name))
    return sizes[0], sizes[1]


def tiles(size: int, block: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` cutting ``range(size)`` into blocks; the last one may be shorter."""
    return [(start, min(start + block, size)) for start in range(0, size, block)]


def tile_keep(inp: AttentionInputs, r0: int, r1: int, c0: int, c1: int) -> np.ndarray | Literal[False] | None:
    """What tile ``(r0:r1, c0:c1)`` attends to, classified: ``False`` = no pair (*empty*: skip the tile),
    ``None`` = every pair (*full*: no mask to apply), or a boolean array ``(..., B_r, B_c)``, True = attend
    (*partial*). The causal mask (``inp.causal``, not folded into ``inp.keep``) is built for the tile alone, and so
    is a variant's mask (``inp.variant``, chapter 13: window, documents, ``mask_mod``;
    :meth:`flashmath.variants.Variant.tile_keep`)."""
    keep = None
    if inp.variant is not None:
        keep = inp.variant.tile_keep(r0, r1, c0, c1)
        if keep is False:
            return False  # outside the window, another document, or mask_mod false everywhere: skipped
    if inp.causal:
        # query n sees key m <= n + M - N (bottom-right alignment, as flashmath.masks.causal_mask)
        offset = inp.M - inp.N
        if c0 > r1 - 1 + offset:
            return False  # even the last row of the tile sees none of its keys
        if c1 - 1 > r0 + offset:  # the diagonal crosses the tile
            causal = np.arange(c0, c1) <= np.arange(r0, r1)[:, None] + offset  # (B_r, B_c)
            keep = causal if keep is None else keep & causal
    if inp.keep is not None:
        tile = inp.keep[..., r0:r1, c0:c1]  # (..., B_r, B_c), a view
        keep = tile if keep is None else tile & keep
    if keep is not None:
        if not keep.any():
            return False
        if keep.all():
            return None
    return keep


def tile_score_mod(
    inp: AttentionInputs, r0: int, r1: int, c0: int, c1: int
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The element-wise change of tile ``(r0:r1, c0:c1)``'s scores for :func:`tile_scores`: None without a variant
    (:meth:`flashmath.variants.Variant.scores`)."""
    variant = inp.variant
    if variant is None or (variant.softcap is None and variant.slopes is None and variant.score_mod is None):
        return None
    return lambda x_tile: variant.scores(x_tile, r0, r1, c0, c1)


def tile_scores(q_tile: np.ndarray, k_tile: np.ndarray, keep_tile: np.ndarray | None, batch: tuple) -> np.ndarray:
    """``X_ij = Q_i K_j^T`` with masked pairs set to ``-inf`` by selection: a new array ``(*batch, B_r, B_c)``."""
    # X_ij = Q_i K_j^T  (the scale is already folded into Q)
    x_tile = np.matmul(q_tile, np.swapaxes(k_tile, -1, -2))  # (..., B_r, D) @ (..., D, B_c) -> (..., B_r, B_c)
    if keep_tile is not None:
        # a masked pair scores -inf whatever q and k hold: selected, so NaN in a masked k row cannot leak
        x_tile = np.where(keep_tile, x_tile, -np.inf)
    if x_tile.shape[:-2] != batch:  # v or the mask has more leading dimensions than q and k
        x_tile = np.broadcast_to(x_tile, batch + x_tile.shape[-2:]).copy()
    return x_tile


def variant_tile_scores(
    q_tile: np.ndarray,
    k_tile: np.ndarray,
    keep_tile: np.ndarray | None,
    batch: tuple,
    score_mod: Callable[[np.ndarray], np.ndarray] | None,
) -> np.ndarray:
    """:func:`tile_scores` with a variant's element-wise change of the scaled scores (chapter 13: softcap, ALiBi,
    FlexAttention's ``score_mod``; ``score_mod`` from :func:`tile_score_mod`), applied before the mask selects the
    masked pairs away. Without a change, exactly :func:`tile_scores`."""
    if score_mod is None:
        return tile_scores(q_tile, k_tile, keep_tile, batch)
    x_tile = score_mod(tile_scores(q_tile, k_tile, None, batch))  # x -> f(x, b, h, n, m), every pair of the tile
    if keep_tile is not None:
        x_tile = np.where(keep_tile, x_tile, -np.inf)  # then the mask, as tile_scores does
    return x_tile


def tile_scores_for(
    inp: AttentionInputs,
    q_tile: np.ndarray,
    k_tile: np.ndarray,
    keep_tile: np.ndarray | None,
    r0: int,
    r1: int,
    c0: int,
    c1: int,
) -> np.ndarray:
    """The score tile ``X_ij`` of tile ``(r0:r1, c0:c1)`` as the loops of :mod:`flashmath.flash` compute it: a new
    array ``(..., B_r, B_c)``, masked pairs ``-inf`` (:func:`tile_scores`), with the element-wise line of
    ``inp``'s variant when it has one (chapter 13: :func:`variant_tile_scores`, :func:`tile_score_mod`). inf or
    NaN in the inputs give NaN, without a warning."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        return variant_tile_scores(q_tile, k_tile, keep_tile, inp.batch_shape, tile_score_mod(inp, r0, r1, c0, c1))
