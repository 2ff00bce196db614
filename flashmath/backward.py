"""The backward pass of attention, recomputed tile by tile from the saved logsumexp (chapter 10).

The forward pass keeps only ``A`` and the logsumexp ``L_n = g_n + log(s_n)`` of each row, never the ``(N, M)``
probabilities ``Y``. The backward pass gets them back one tile at a time: ``Y_nm = exp(x_nm - L_n)`` is exact,
since ``L_n`` already holds the row's max and sum (chapter 2). With ``dA`` the gradient of the loss with respect
to the output, and the row term ``D_n = sum_d dA_nd A_nd`` (a dot product per row, computed once):

    dV  = Y^T dA                       (each key's value gets the rows' output gradients, weighted by Y)
    dY  = dA V^T
    dX  = Y * (dY - D)                 (the softmax Jacobian; D_n = sum_m Y_nm dY_nm = rowsum(dA * A))
    dQ  = scale * dX K,   dK = scale * dX^T Q

Key/value tiles are the outer loop (their ``dK``, ``dV`` stay on chip while the query tiles stream past, as in
FlashAttention-2's Algorithm 2); ``dQ`` is accumulated in memory. A masked pair is absent: its ``Y``, ``dX`` and
every product term are selected away (``np.where``), never multiplied by 0, so a key masked for every query gets a
gradient of exactly 0 whatever its ``k`` and ``v`` rows hold, and a fully masked row (``L = -inf``) passes no
gradient.

Sources: T. Dao et al., "FlashAttention" (2022), section 3.1 and appendix B (the backward from the saved
statistics); T. Dao, "FlashAttention-2" (2023), section 3.2 and Algorithm 2 (``D = rowsum(dO * O)``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array, compute_dtype
from flashmath.inputs import prepare_attention_inputs
from flashmath.rowstate import weighted_values
from flashmath.tiling import check_block, tile_keep, tiles

__all__ = ["attention_backward"]


def _unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` over the leading dimensions that were broadcast to reach it from an input of ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def attention_backward(q: ArrayLike, k: ArrayLike, v: ArrayLike, a: ArrayLike, lse: ArrayLike, grad_a: ArrayLike,
                       *, scale: float | None = None, causal: bool = False, mask: ArrayLike | None = None,
                       block_q: int = 64, block_k: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of attention with respect to ``q``, ``k``, ``v``, from the forward's output and logsumexp.

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)``; scale, causal, mask: exactly as given to the
            forward pass (:func:`flashmath.attention.attention` or :func:`flashmath.flash_attention`).
        a: the forward's output ``(..., N, Dv)``.
        lse: the forward's logsumexp ``(..., N)`` (``return_lse=True``); ``-inf`` for a fully masked row.
        grad_a: ``dA``, the gradient of the loss with respect to ``a``, ``(..., N, Dv)``.
        block_q, block_k: tile sizes ``B_r``, ``B_c`` of the recomputation (any positive integers).

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes of ``q``, ``k``, ``v`` (summed over broadcast leading
        dimensions), in the compute dtype (float32 for float16 inputs, else the promoted dtype). A key masked for
        every query gets exactly 0 in ``grad_k`` and ``grad_v``; a fully masked row gets 0 in ``grad_q``.

    Raises:
        as :func:`flashmath.attention.prepare_attention_inputs`; ValueError when ``a``, ``lse`` or ``grad_a`` do
        not have the shapes ``(..., N, Dv)``, ``(..., N)``, ``(..., N, Dv)``, or a block size below 1; TypeError
        for a non-integer block size or non-real ``a``, ``lse``, ``grad_a``.

    Sources: Dao (2023), Algorithm 2; Dao et al. (2022), appendix B.
    """
    block_q, block_k = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    # the causal mask is built tile by tile (flashmath.tiling.tile_keep), never as a whole (N, M) array
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    rows = inp.batch_shape + (inp.N,)
    a, lse, grad_a = (as_float_array(x, name) for x, name in ((a, "a"), (lse, "lse"), (grad_a, "grad_a")))
    for arr, name, shape in ((a, "a", rows + (inp.Dv,)), (lse, "lse", rows), (grad_a, "grad_a", rows + (inp.Dv,))):
        try:
            ok = np.broadcast_shapes(arr.shape, shape) == shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must have shape (..., N{', Dv' if arr is not lse else ''}) = {shape} "
                             f"(from q, k, v), got {arr.shape}")
    dtype = compute_dtype(np.result_type(inp.dtype, a, lse, grad_a))
    q_, k_, v_ = (np.broadcast_to(x, inp.batch_shape + x.shape[-2:]).astype(dtype) for x in (inp.q, inp.k, inp.v))
    a, lse, grad_a = (np.broadcast_to(x, shape).astype(dtype) for x, shape in
                      ((a, rows + (inp.Dv,)), (lse, rows), (grad_a, rows + (inp.Dv,))))
    scale_ = dtype.type(inp.scale)
    with np.errstate(invalid="ignore", over="ignore"):
        # D_n = sum_d dA_nd A_nd: once per row, before any tile
        d_row = np.sum(grad_a * np.where(np.isneginf(lse)[..., None], 0, a), axis=-1)  # (..., N)
    grad_q = np.zeros(q_.shape, dtype)  # accumulated in memory over the key tiles
    grad_k = np.zeros(k_.shape, dtype)
    grad_v = np.zeros(v_.shape, dtype)
    query_tiles = tiles(inp.N, block_q)
    for c0, c1 in tiles(inp.M, block_k):  # key/value tiles outside: dK_j, dV_j stay on chip
        k_tile, v_tile = k_[..., c0:c1, :], v_[..., c0:c1, :]  # (..., B_c, D), (..., B_c, Dv)
        dk_tile = np.zeros(k_tile.shape, dtype)
        dv_tile = np.zeros(v_tile.shape, dtype)
        for r0, r1 in query_tiles:
            keep_tile = tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is False:
                continue  # every pair of the tile is masked: it adds nothing to any gradient
            q_tile, da_tile = q_[..., r0:r1, :], grad_a[..., r0:r1, :]  # (..., B_r, D), (..., B_r, Dv)
            lse_tile, d_tile = lse[..., r0:r1], d_row[..., r0:r1]  # (..., B_r)
            # the pairs of the tile that are attended: the tile's keep mask, less the fully masked rows (L = -inf)
            keep = ~np.isneginf(lse_tile)[..., None]  # (..., B_r, 1)
            if keep_tile is not None:
                keep = keep & keep_tile  # (..., B_r, B_c)
            keep = np.broadcast_to(keep, keep.shape[:-1] + (c1 - c0,))
            keep_t = np.swapaxes(keep, -1, -2)
            with np.errstate(invalid="ignore", over="ignore"):
                # X_ij = scale Q_i K_j^T, recomputed
                x_tile = scale_ * np.matmul(q_tile, np.swapaxes(k_tile, -1, -2))  # (..., B_r, B_c)
                # Y_ij = exp(X_ij - L_i): the probabilities, exact from the saved logsumexp
                y_tile = np.where(keep, np.exp(x_tile - np.where(keep, lse_tile[..., None], 0)), 0)
                # dV_j += Y_ij^T dA_i   (a masked pair absent: flashmath.rowstate.weighted_values)
                dv_tile += weighted_values(np.swapaxes(y_tile, -1, -2), da_tile, keep_t)
                # dY_ij = dA_i V_j^T
                dy_tile = np.matmul(da_tile, np.swapaxes(v_tile, -1, -2))  # (..., B_r, B_c)
                # dX_ij = Y_ij * (dY_ij - D_i)
                dx_tile = np.where(keep, y_tile * (dy_tile - d_tile[..., None]), 0)
                # dQ_i += scale dX_ij K_j;  dK_j += scale dX_ij^T Q_i
                grad_q[..., r0:r1, :] += scale_ * weighted_values(dx_tile, k_tile, keep)
                dk_tile += scale_ * weighted_values(np.swapaxes(dx_tile, -1, -2), q_tile, keep_t)
        grad_k[..., c0:c1, :] = dk_tile
        grad_v[..., c0:c1, :] = dv_tile
    return (_unbroadcast(grad_q, inp.q.shape), _unbroadcast(grad_k, inp.k.shape), _unbroadcast(grad_v, inp.v.shape))
