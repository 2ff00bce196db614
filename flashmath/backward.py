"""The backward pass of attention, recomputed tile by tile from the saved logsumexp (chapter 10).

The forward pass keeps only ``A`` and the logsumexp ``L_n = g_n + log(s_n)`` of each row, never the ``(N, M)``
probabilities ``Y``. The backward pass gets them back one tile at a time: ``Y_nm = exp(x_nm - L_n)`` is exact,
since ``L_n`` already holds the row's max and sum (chapter 2). With ``dA`` the gradient of the loss with respect
to the output, and the row term ``Delta_n = sum_d dA_nd A_nd`` (a dot product per row, computed once):

    dV  = Y^T dA                       (each key's value gets the rows' output gradients, weighted by Y)
    dY  = dA V^T
    dX  = Y * (dY - Delta)                 (the softmax Jacobian; Delta_n = sum_m Y_nm dY_nm = rowsum(dA * A))
    dQ  = scale * dX K,   dK = scale * dX^T Q

With a learnable sink (chapter 13) the sink is one more column of the softmax with no value, so its ``dY`` is 0:
the lines above are unchanged (``L_n`` includes the sink, so ``Y`` are the right probabilities, and ``Delta_n`` is
still ``rowsum(dA * A)``), and the sink's own score gradient is ``Y_sink,n (0 - Delta_n)``. Its gradient sums that over
every row that shares the sink (all the rows of its head, over the batch):

    d sink = - sum_n P_sink,n Delta_n,      P_sink,n = exp(sink - L_n)

(flash-attention's backward sums ``-exp(sink - lse) * dpsum`` over every row of every batch element of the head,
``dpsum`` its ``Delta``: ``flash_attn/cute/flash_bwd_postprocess.py``; PR #2706 added the sink to the SM90/SM100
backward).

The loops are those of the Triton backward kernels (:mod:`flashmath.triton_backward`, chapter 12), with their
names, so that chapter 12 prints them line for line side by side (``triton_backward.backward_line_for_line``):
``Delta`` first (``_bwd_delta``); then key/value tiles outside, ``dK_j`` and ``dV_j`` on chip while the query tiles
stream past (``_bwd_dkdv``, FlashAttention-2's Algorithm 2); then ``dQ`` either by a second sweep with query tiles
outside, ``dQ_i`` on chip and accumulated across the key tiles (``dq_mode="separate"``, ``_bwd_dq``), or added to
memory from the first sweep (``dq_mode="atomic"``). Both recompute a tile's ``Y`` and ``dX`` with
:func:`backward_tile`. Tiles come from :mod:`flashmath.tiling`; a tile whose pairs are all masked is skipped. A
masked pair is absent: its ``Y``, ``dX`` and every product term are selected away (``np.where``), never multiplied
by 0, so a key masked for every query gets a gradient of exactly 0 whatever its ``k`` and ``v`` rows hold, and a
fully masked row (``L = -inf``) passes no gradient.

Sources: T. Dao et al., "FlashAttention" (2022), section 3.1 and appendix B (the backward from the saved
statistics); T. Dao, "FlashAttention-2" (2023), section 3.2 and Algorithm 2 (``D = rowsum(dO * O)``,
FlashAttention-2's name for ``Delta``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array, compute_dtype
from flashmath.inputs import prepare_attention_inputs
from flashmath.rowstate import weighted_values
from flashmath.tiling import check_block, tile_keep, tiles

__all__ = ["DQ_MODES", "attention_backward", "backward_tile", "check_dq_mode"]

DQ_MODES = ("separate", "atomic")
"""How ``dQ`` is accumulated across the key tiles: ``"separate"``, a second sweep with query tiles outside and
``dQ_i`` on chip (deterministic), or ``"atomic"``, added to memory by the sweep of the key tiles (on a GPU by atomic
adds, in an order that varies from run to run)."""


def check_dq_mode(dq_mode: object) -> str:
    """``dq_mode`` when it is one of :data:`DQ_MODES`; ValueError naming them otherwise."""
    if not isinstance(dq_mode, str) or dq_mode not in DQ_MODES:
        raise ValueError(
            f"dq_mode must be one of {DQ_MODES} (a separate deterministic pass, or atomic adds), got {dq_mode!r}"
        )
    return dq_mode


def _unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` over the leading dimensions that were broadcast to reach it from an input of ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def backward_tile(
    q_tile: np.ndarray,
    k_tile: np.ndarray,
    v_tile: np.ndarray,
    da_tile: np.ndarray,
    lse_tile: np.ndarray,
    delta: np.ndarray,
    keep: np.ndarray,
    scale: np.floating,
) -> tuple:
    """A tile pair's probabilities and score gradients, recomputed from the saved logsumexp.

    Args:
        q_tile ``(..., B_r, D)``, k_tile ``(..., B_c, D)``, v_tile ``(..., B_c, Dv)``, da_tile ``(..., B_r, Dv)``:
            the tiles of ``Q``, ``K``, ``V``, ``dA``; lse_tile, delta ``(..., B_r)``: the rows' ``L`` and ``Delta``.
        keep: ``(..., B_r, B_c)`` the attended pairs (a fully masked row has none). scale: the scale.

    Returns:
        ``(y_tile, dx_tile)``, ``(..., B_r, B_c)`` each: ``Y_ij`` and ``dX_ij``, exactly 0 at masked pairs.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out
        # X_ij = Q_i K_j^T, recomputed  (times the scale)
        x_tile = scale * np.matmul(q_tile, np.swapaxes(k_tile, -1, -2))
        # Y_ij = exp(X_ij - L_i): the probabilities, exact from the saved logsumexp (0 where masked)
        y_tile = np.where(keep, np.exp(x_tile - np.where(keep, lse_tile[..., None], 0)), 0)
        # dY_ij = dA_i V_j^T
        dy_tile = np.matmul(da_tile, np.swapaxes(v_tile, -1, -2))
        # dX_ij = Y_ij * (dY_ij - Delta_i)
        dx_tile = np.where(keep, y_tile * (dy_tile - delta[..., None]), 0)
    return y_tile, dx_tile


def _keep_pairs(lse_tile: np.ndarray, keep_tile: np.ndarray | None, c0: int, c1: int) -> np.ndarray:
    """The attended pairs of a tile that is not skipped, ``(..., B_r, B_c)``: the tile's keep mask, less the fully
    masked rows (``L = -inf``); as the kernels' ``_keep_pairs``."""
    keep = ~np.isneginf(lse_tile)[..., None]  # (..., B_r, 1)
    if keep_tile is not None:
        keep = keep & keep_tile
    return np.broadcast_to(keep, keep.shape[:-1] + (c1 - c0,))


def attention_backward(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    lse: ArrayLike,
    grad_a: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    block_q: int = 64,
    block_k: int = 64,
    dq_mode: str = "atomic",
    learnable_sink: ArrayLike | None = None,
) -> tuple[np.ndarray, ...]:
    """Gradients of attention with respect to ``q``, ``k``, ``v`` (and the sink), from the forward's output and
    logsumexp.

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)``; scale, causal, mask: exactly as given to the
            forward pass (:func:`flashmath.attention.attention` or :func:`flashmath.flash_attention`).
        a: the forward's output ``(..., N, Dv)``.
        lse: the forward's logsumexp ``(..., N)`` (``return_lse=True``); ``-inf`` for a fully masked row.
        grad_a: ``dA``, the gradient of the loss with respect to ``a``, ``(..., N, Dv)``.
        block_q, block_k: tile sizes ``B_r``, ``B_c`` of the recomputation (any positive integers).
        dq_mode: how ``dQ`` is accumulated across the key tiles, as the kernels do it (:data:`DQ_MODES`):
            ``"atomic"`` (default: added to ``dQ`` in memory during the one sweep of the key tiles, chapter 10's
            loop; FlashAttention-2's atomic adds) or ``"separate"`` (a second sweep with query tiles outside,
            ``dQ_i`` on chip: the kernels' default). Both give the same gradients up to rounding.
        learnable_sink: the sink logits given to the forward (``(H,)``, :func:`flashmath.inputs.check_sink`), whose
            ``lse`` then includes the sink term; None: no sink.

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes of ``q``, ``k``, ``v`` (summed over broadcast leading
        dimensions), in the compute dtype (float32 for float16 inputs, else the promoted dtype). A key masked for
        every query gets exactly 0 in ``grad_k`` and ``grad_v``; a fully masked row gets 0 in ``grad_q``. With a
        ``learnable_sink``, ``(grad_q, grad_k, grad_v, grad_sink)`` (as flash-attention's backward, which returns
        ``dsink`` only with a sink): ``grad_sink = -sum_n P_sink,n Delta_n`` summed over the rows and the leading
        dimensions that share each sink, with the shape of ``learnable_sink``, in the compute dtype. A row with no
        key has ``A = 0``, so ``Delta = 0``: it adds nothing.

    Raises:
        as :func:`flashmath.attention.prepare_attention_inputs`; ValueError when ``a``, ``lse`` or ``grad_a`` do
        not have the shapes ``(..., N, Dv)``, ``(..., N)``, ``(..., N, Dv)``, a block size below 1, or a
        ``dq_mode`` not in :data:`DQ_MODES`; TypeError for a non-integer block size or non-real ``a``, ``lse``,
        ``grad_a``; as :func:`flashmath.inputs.check_sink` for ``learnable_sink``.

    Sources: Dao (2023), Algorithm 2; Dao et al. (2022), appendix B; Triton's tutorial ``06-fused-attention.py``;
    the sink's gradient: flash-attention, ``flash_attn/cute/flash_bwd_postprocess.py`` (the dSink reduction).
    """
    block_q, block_k = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    dq_mode = check_dq_mode(dq_mode)
    # the causal mask is built tile by tile (flashmath.tiling.tile_keep), never as a whole (N, M) array
    inp = prepare_attention_inputs(
        q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False, learnable_sink=learnable_sink
    )
    rows = inp.batch_shape + (inp.N,)
    a, lse, grad_a = (as_float_array(x, name) for x, name in ((a, "a"), (lse, "lse"), (grad_a, "grad_a")))
    for arr, name, shape in ((a, "a", rows + (inp.Dv,)), (lse, "lse", rows), (grad_a, "grad_a", rows + (inp.Dv,))):
        try:
            ok = np.broadcast_shapes(arr.shape, shape) == shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} must have shape (..., N{', Dv' if arr is not lse else ''}) = {shape} "
                f"(from q, k, v), got {arr.shape}"
            )
    dtype = compute_dtype(np.result_type(inp.dtype, a, lse, grad_a))
    q_, k_, v_ = (np.broadcast_to(x, inp.batch_shape + x.shape[-2:]).astype(dtype) for x in (inp.q, inp.k, inp.v))
    a, lse, grad_a = (
        np.broadcast_to(x, shape).astype(dtype)
        for x, shape in ((a, rows + (inp.Dv,)), (lse, rows), (grad_a, rows + (inp.Dv,)))
    )
    scale_ = dtype.type(inp.scale)
    grad_q = np.zeros(q_.shape, dtype)
    grad_k = np.zeros(k_.shape, dtype)
    grad_v = np.zeros(v_.shape, dtype)
    query_tiles, key_tiles = tiles(inp.N, block_q), tiles(inp.M, block_k)

    # _bwd_delta: one number per row, before any tile
    # Delta_n = rowsum(dA * A)  (a fully masked row's A is not read)
    with np.errstate(invalid="ignore", over="ignore"):
        delta_row = np.sum(grad_a * np.where(np.isneginf(lse)[..., None], 0, a), axis=-1)  # (..., N)

    # _bwd_dkdv: key tiles outside; dK_j, dV_j on chip while the query tiles that see the keys stream past
    for c0, c1 in key_tiles:
        k_tile, v_tile = k_[..., c0:c1, :], v_[..., c0:c1, :]  # load K_j, V_j: (..., B_c, D), (..., B_c, Dv)
        dk = np.zeros(k_tile.shape, dtype)
        dv_acc = np.zeros(v_tile.shape, dtype)
        for r0, r1 in query_tiles:
            keep_tile = tile_keep(inp, r0, r1, c0, c1)
            if keep_tile is False:
                continue  # every pair of the tile is masked: it adds nothing to any gradient
            lse_tile, delta = lse[..., r0:r1], delta_row[..., r0:r1]  # (..., B_r) L_i, Delta_i
            keep = _keep_pairs(lse_tile, keep_tile, c0, c1)
            keep_t = np.swapaxes(keep, -1, -2)
            q_tile, da_tile = q_[..., r0:r1, :], grad_a[..., r0:r1, :]  # load Q_i, dA_i: (..., B_r, D), (..., B_r, Dv)
            y_tile, dx_tile = backward_tile(q_tile, k_tile, v_tile, da_tile, lse_tile, delta, keep, scale_)
            with np.errstate(invalid="ignore", over="ignore"):
                # dV_j += Y_ij^T dA_i   (a masked pair absent: flashmath.rowstate.weighted_values)
                dv_acc += weighted_values(np.swapaxes(y_tile, -1, -2), da_tile, keep_t)
                # dK_j += dX_ij^T Q_i  (the scale once, at the end)
                dk += weighted_values(np.swapaxes(dx_tile, -1, -2), q_tile, keep_t)
                if dq_mode == "atomic":
                    # dQ_i += scale dX_ij K_j, added to memory (on a GPU an atomic add from each key tile's program)
                    grad_q[..., r0:r1, :] += scale_ * weighted_values(dx_tile, k_tile, keep)
        # dK_j = scale sum_i dX_ij^T Q_i
        grad_k[..., c0:c1, :] = dk * scale_
        grad_v[..., c0:c1, :] = dv_acc

    # _bwd_dq: query tiles outside; dQ_i on chip, accumulated across the key tiles, written once
    if dq_mode == "separate":
        for r0, r1 in query_tiles:
            q_tile, da_tile = q_[..., r0:r1, :], grad_a[..., r0:r1, :]  # load Q_i, dA_i once
            lse_tile, delta = lse[..., r0:r1], delta_row[..., r0:r1]
            dq = np.zeros(q_tile.shape, dtype)  # dQ_i = 0, on chip for the whole sweep over the key tiles
            for c0, c1 in key_tiles:
                keep_tile = tile_keep(inp, r0, r1, c0, c1)
                if keep_tile is False:
                    continue
                keep = _keep_pairs(lse_tile, keep_tile, c0, c1)
                k_tile, v_tile = k_[..., c0:c1, :], v_[..., c0:c1, :]  # load K_j, V_j
                _, dx_tile = backward_tile(q_tile, k_tile, v_tile, da_tile, lse_tile, delta, keep, scale_)
                with np.errstate(invalid="ignore", over="ignore"):
                    # dQ_i += dX_ij K_j  (accumulated across the key tiles, on chip; the scale once, at the end)
                    dq += weighted_values(dx_tile, k_tile, keep)
            # dQ_i = scale sum_j dX_ij K_j
            grad_q[..., r0:r1, :] = dq * scale_
    grads = (_unbroadcast(grad_q, inp.q.shape), _unbroadcast(grad_k, inp.k.shape), _unbroadcast(grad_v, inp.v.shape))
    if inp.sink is None:
        return grads
    return (*grads, _sink_gradient(inp.sink, lse, delta_row, learnable_sink))


def _sink_gradient(sink: np.ndarray, lse: np.ndarray, delta: np.ndarray, given: ArrayLike | None) -> np.ndarray:
    """``d sink = -sum_n P_sink,n Delta_n`` with ``P_sink,n = exp(sink - L_n)``, from the sink ``(...)`` of every
    leading element, the rows' ``L`` and ``Delta`` ``(..., N)``, summed to the shape of the sink as given."""
    dtype = lse.dtype
    with np.errstate(invalid="ignore", over="ignore"):
        sink_col = sink.astype(dtype)[..., None]  # (..., 1)
        # P_sink,n = exp(sink - L_n): the probability of the sink column (0 for a -inf sink, whatever L_n)
        p_sink = np.where(sink_col == -np.inf, 0, np.exp(sink_col - np.where(np.isneginf(lse), 0, lse)))
        # d sink = -sum_n P_sink,n Delta_n, over the rows of each leading element
        grad = -np.sum(p_sink * delta, axis=-1)  # (...)
    given_shape: tuple[int, ...] = tuple(np.shape(np.asarray(given)))
    shape = given_shape
    while len(shape) > grad.ndim and shape[0] == 1:  # as check_sink: leading axes of size 1 dropped
        shape = shape[1:]
    grad = _unbroadcast(grad, shape)  # summed over the leading dimensions that share a sink
    return grad.reshape(given_shape).astype(dtype, copy=False)
