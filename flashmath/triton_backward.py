"""FlashAttention-2's backward pass as Triton kernels (chapter 12): the gradients from the saved logsumexp.

The forward kernel (:mod:`flashmath.triton_kernel`) keeps only ``A`` and the logsumexp ``L`` of each row. With
``dA`` the gradient of the loss with respect to ``A``, the backward needs the probabilities ``Y`` again and gets
them one tile at a time, ``Y_ij = exp(X_ij - L_i)`` (exact: ``L`` holds the row's max and sum), then

    Delta_n = rowsum(dA * A)                 (one number per row, computed first: the preprocessing kernel)
    dV_j = sum_i Y_ij^T dA_i             (the rows' output gradients, weighted by Y)
    dY_ij = dA_i V_j^T
    dX_ij = Y_ij * (dY_ij - Delta_i)         (the softmax Jacobian: Delta_n = sum_m Y_nm dY_nm)
    dK_j = scale sum_i dX_ij^T Q_i,   dQ_i = scale sum_j dX_ij K_j

as :func:`flashmath.backward.attention_backward` computes them in numpy. Three kernels, the course's names on the
left, the Triton tutorial's (``06-fused-attention.py``) on the right:

=====================  =================  ==========================================================================
course                 kernel             what one program does
=====================  =================  ==========================================================================
``Delta``              ``_bwd_delta``     a query tile's ``Delta_n = rowsum(dA * A)`` (``Delta`` in the tutorial)
``dK_j``, ``dV_j``     ``_bwd_dkdv``      one key tile: ``dk``, ``dv`` in registers (float32) while every query tile
                                          that sees the keys streams past; written to HBM once
``dQ_i``               ``_bwd_dq``        one query tile: ``dq`` in registers while the key tiles stream past
                                          (the deterministic way: a second sweep that recomputes ``Y``)
``dQ_i`` (atomic)      ``_bwd_dkdv``      with ``ATOMIC_DQ``: each step adds its ``scale dX_ij K_j`` to ``dQ`` in HBM
                                          (``tl.atomic_add``, float32): no second sweep, but the order of the
                                          additions depends on which program gets there first
=====================  =================  ==========================================================================

Why two ways for ``dQ``: the dK/dV kernel has key tiles outside, so ``dQ_i`` gets one contribution from every key
tile, made by different programs. Either each program adds its contribution to ``dQ`` in HBM with an atomic add
(FlashAttention-2's choice: one sweep; on a GPU the additions arrive in a varying order, so ``dQ`` differs in its
last bits from run to run, Dao-AILab/flash-attention#414), or a second kernel with query tiles outside recomputes
``Y`` and ``dX`` and keeps ``dQ_i`` on chip (the Triton tutorial's choice: deterministic). Per pair of tiles the
dK/dV kernel makes four matrix products (``Q K^T``, ``Y^T dA``, ``dA V^T``, ``dX^T Q``) and the atomic way one more
(``dX K``); the separate pass makes three (``Q K^T`` and ``dA V^T`` again, then ``dX K``): seven products instead
of five, against the forward's two.
The interpreter runs programs one after another, so there both ways are reproducible.

Conventions are those of the forward kernel: float16, bfloat16 (GPU only) or float32 in, float32 accumulation,
gradients in the input dtype; bottom-right ``causal``; ``mask`` boolean with True = attend. A masked pair is
absent: its ``Y`` and ``dX`` are selected to 0 (``tl.where``), so a key that no row attends gets exactly 0 in
``dK`` and ``dV``, and a fully masked row (``L = -inf``) gets exactly 0 in ``dQ`` and gives nothing to any key;
the ``q`` and ``dA`` rows of fully masked queries, and the ``k`` and ``v`` rows of keys that no row of a tile
attends, are not even loaded (they read as 0: a NaN there reaches nothing). As in the forward, a key that some
rows of a query tile attend and others do not has its ``k`` row in that tile's ``dX K`` product with weight 0 for
the rows that mask it: finite values are exact, a NaN there reaches those rows' ``dQ``; likewise the ``q`` and
``dA`` rows of a query enter ``dX^T Q`` and ``Y^T dA`` with weight 0 for the keys it masks in a key tile where it
attends some key (a NaN there reaches those keys' ``dK`` or ``dV``; in the other key tiles these rows are not loaded).

GPU constraints, kept although the interpreter would accept less: ``tl.dot`` operands of one dtype (float32 with
float32, float16 with float16: the float32 ``Y`` and ``dX`` are cast to the input dtype before a product with a
float16 tile, as FlashAttention-2 does); every tile dimension at least 16 (``B_r``, ``B_c`` and the padded ``D``,
``Dv``: the package's floor, which covers Triton 3.9's NVIDIA minimum for a product's inner dimension, 16 for 16-bit
inputs and 8 for float32, ``min_dot_size``); block sizes are powers of two (``tl.arange``); atomic adds go to a
float32 buffer.

Chapter 13's variants: grouped-query heads (``enable_gqa``) and learnable sinks (``learnable_sink``) are handled by
the wrapper around the same three kernels, which stay as chapter 12 prints them:

* grouped-query heads: ``q`` is viewed as ``(..., H_kv, G, N, D)`` and ``k``, ``v`` as ``(..., H_kv, 1, M, D)``,
  broadcast over the ``G`` query heads of their group; each program differentiates one query head, and ``dK``,
  ``dV`` are summed over the group afterwards. flash-attention's CUDA backward does the same
  (``csrc/flash_attn/flash_api.cpp``, ``mha_bwd``: ``dk_expanded``, ``dv_expanded`` with one head per query head,
  then ``at::sum_out`` over ``num_heads / num_heads_k``); here the broadcast ``k``, ``v`` are copied ``G`` times
  too (the kernels read ``K + b * sk_b``, one key/value head per program), memory a GPU kernel would not spend.
* a learnable sink is one more column of the softmax with no value. The forward's logsumexp ``L_n`` already
  includes it, so ``Y_ij = exp(X_ij - L_i)`` are the right probabilities, ``Delta_n = rowsum(dA * A)`` is unchanged
  and so is ``dX_ij = Y_ij * (dY_ij - Delta_i)``: the kernels run as they are. The sink's own score gradient is
  ``P_sink,n (0 - Delta_n)`` (its ``dY`` is 0: no value), and the sink gets the sum over every row that shares it
  (the rows of its query head, over the batch):

      d sink = - sum_n P_sink,n Delta_n,      P_sink,n = exp(sink - L_n)

  computed in PyTorch after ``_bwd_delta``, from the ``(B, N)`` arrays ``L`` and ``Delta`` (an elementwise product
  and one sum per head: no tiles, no atomics, deterministic). flash-attention computes the same sum in a separate
  pass after the main backward kernel: ``flash_attn/cute/flash_bwd_postprocess.py`` (``dsink_row_term``: one
  row's ``-exp(sink - lse) * dpsum``, ``dpsum`` its ``Delta``; ``DSinkReduceKernel``: one thread block per query head
  sums it over the rows and the batch, or the dQ postprocess kernel folds it in), added to the CuTe backward by
  Dao-AILab/flash-attention#2706 (#2752, still open, brings the sink to the SM80/SM120 *forward*). With a finite sink
  ``L_n >= sink`` is never ``-inf``; a row with no key has ``L_n = sink``, ``P_sink,n = 1`` and ``A = 0``, so
  ``Delta_n = 0``: it adds nothing. A ``-inf`` sink is no sink (``P_sink = 0``; the kernels' gradients are bitwise
  those without one); a NaN sink makes its head's gradients NaN (but for the ``dQ`` rows of rows with no key,
  which have no pair to differentiate through: 0, as always).

FlashAttention-4's lazy rescaling (``rescale_threshold``, chapter 7) is forward-only: it changes which reference
``m_i`` the forward keeps while it sums, not ``L = m_i + log(l_i)``, and the backward recomputes ``Y`` from ``L``
alone, so it neither needs nor takes the threshold.

Requires the ``triton`` extra, like :mod:`flashmath.triton_kernel` (importing this module imports that one, which
switches Triton to its interpreter on a machine without a CUDA GPU). ``import flashmath`` never imports it.

Sources: T. Dao, "FlashAttention-2" (2023), section 3.1 and Algorithm 2 (``D = rowsum(dO * O)``, the course's
``Delta``; atomic ``dQ``);
T. Dao et al., "FlashAttention" (2022), appendix B.2 (the softmax Jacobian, the recomputation); Triton's tutorial
``06-fused-attention.py`` (``_attn_bwd_preprocess``, ``_attn_bwd_dkdv``, ``_attn_bwd_dq``); the sink's gradient:
flash-attention ``flash_attn/cute/flash_bwd_postprocess.py`` (commit 01afd16) and PR #2706; the reference formula
it is tested against: GPT-OSS's ``sdpa`` (``openai/gpt-oss``, ``gpt_oss/torch/model.py``: the sink column
concatenated to the scores, softmax, the column dropped before ``P V``).
"""

from __future__ import annotations

import inspect
import math
import sys

import numpy as np

from flashmath._checks import size
from flashmath.backward import DQ_MODES, check_dq_mode
from flashmath.inputs import check_sink
from flashmath.tiling import check_kernel_block
from flashmath.triton_setup import (
    DEFAULT_BLOCK_M,
    DEFAULT_BLOCK_N,
    FLOAT32_SCALES,
    as_tensor,
    available,
    check_kernel_inputs,
    kernel_device,
    padded_width,
    quiet_interpreter,
    require_triton,
    rule_blocks,
    tl,
    torch,
    triton,
)

__all__ = [
    "DQ_MODES",
    "grouped_views",
    "triton_attention_backward",
    "backward_kernel_source",
    "BACKWARD_RULES",
    "backward_line_for_line",
    "backward_schedule",
]


if available():

    @triton.jit
    def _bwd_delta(
        A, dA, Delta,  # pointers to a, da (B, N, Dv) and delta (B, N)
        sa_b, sa_n, sd_b, sd_n,  # strides, in elements
        N, Dv,
        BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr,
    ):  # fmt: skip
        i = tl.program_id(0)
        b = tl.program_id(1)
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)  # (B_r,)
        dv = tl.arange(0, BLOCK_DV)
        inside = (rows[:, None] < N) & (dv[None, :] < Dv)
        a_tile = tl.load(A + b * sa_b + rows[:, None] * sa_n + dv[None, :], mask=inside, other=0.0).to(tl.float32)
        da_tile = tl.load(dA + b * sd_b + rows[:, None] * sd_n + dv[None, :], mask=inside, other=0.0).to(tl.float32)
        # Delta_n = rowsum(dA * A)
        delta = tl.sum(da_tile * a_tile, 1)  # (B_r,) float32
        tl.store(Delta + b * N + rows, delta, mask=rows < N)

    @triton.jit
    def _keep_pairs(Keep, b, rows, cols, lse, sp_b, sp_n, sp_m, N, M, offset,
                    CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr):  # fmt: skip
        """The attended pairs of a tile, (B_r, B_c): inside the arrays, not a fully masked row (L = -inf), on or
        left of the causal diagonal, allowed by the user's mask."""
        keep = (rows[:, None] < N) & (cols[None, :] < M) & (lse[:, None] != float("-inf"))
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + offset)
        if HAS_KEEP:
            keep = keep & (
                tl.load(
                    Keep + b * sp_b + rows[:, None] * sp_n + cols[None, :] * sp_m,
                    mask=(rows[:, None] < N) & (cols[None, :] < M),
                    other=0,
                )
                != 0
            )
        return keep

    @triton.jit
    def _bwd_dkdv(
        Q, K, V, dA, LSE, Delta, Keep, dK, dV, dQ,  # q (B, N, D), k, dk (B, M, D), v, dv (B, M, Dv), da (B, N, Dv),
        # lse, delta (B, N), keep (B, N, M), dq (B, N, D) float32 (only with ATOMIC_DQ)
        sq_b, sq_n, sk_b, sk_m, sv_b, sv_m, sd_b, sd_n, sp_b, sp_n, sp_m,  # strides, in elements (the last dim: 1)
        N, M, D, Dv, scale, offset,  # sizes; the score scale; offset = M - N, the causal diagonal
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr, ATOMIC_DQ: tl.constexpr,
    ):  # fmt: skip
        j = tl.program_id(0)  # this program's key tile
        b = tl.program_id(1)  # and its (batch, head) element
        cols = j * BLOCK_N + tl.arange(0, BLOCK_N)  # (B_c,) key indices m of the tile
        d = tl.arange(0, BLOCK_D)
        dv = tl.arange(0, BLOCK_DV)
        # load K_j, V_j once: (B_c, D), (B_c, Dv)
        k_tile = tl.load(
            K + b * sk_b + cols[:, None] * sk_m + d[None, :], mask=(cols[:, None] < M) & (d[None, :] < D), other=0.0
        )
        v_tile = tl.load(
            V + b * sv_b + cols[:, None] * sv_m + dv[None, :], mask=(cols[:, None] < M) & (dv[None, :] < Dv), other=0.0
        )
        # dK_j = 0, dV_j = 0: on chip (float32) for the whole sweep over the query tiles
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv_acc = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
        lo = 0
        if CAUSAL:  # query rows above the first key's diagonal see none of the tile's keys: never visited
            lo = (tl.maximum(j * BLOCK_N - offset, 0) // BLOCK_M) * BLOCK_M
        for r0 in range(lo, N, BLOCK_M):
            rows = r0 + tl.arange(0, BLOCK_M)  # (B_r,) query indices n
            lse = tl.load(LSE + b * N + rows, mask=rows < N, other=float("-inf"))  # (B_r,) L_i
            delta = tl.load(Delta + b * N + rows, mask=rows < N, other=0.0)  # (B_r,) Delta_i
            keep = _keep_pairs(Keep, b, rows, cols, lse, sp_b, sp_n, sp_m, N, M, offset, CAUSAL, HAS_KEEP)
            # load Q_i, dA_i: (B_r, D), (B_r, Dv); a row that attends none of the tile's keys is not loaded
            row_used = tl.max(keep.to(tl.int32), 1) > 0  # (B_r,)
            q_tile = tl.load(
                Q + b * sq_b + rows[:, None] * sq_n + d[None, :], mask=row_used[:, None] & (d[None, :] < D), other=0.0
            )
            da_tile = tl.load(
                dA + b * sd_b + rows[:, None] * sd_n + dv[None, :],
                mask=row_used[:, None] & (dv[None, :] < Dv),
                other=0.0,
            )
            # X_ij = Q_i K_j^T, recomputed  (times the scale): (B_r, B_c), float32
            x_tile = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * scale
            # Y_ij = exp(X_ij - L_i): the probabilities, exact from the saved logsumexp (0 where masked)
            y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0)
            # dV_j += Y_ij^T dA_i
            dv_acc += tl.dot(tl.trans(y_tile).to(da_tile.dtype), da_tile, input_precision="ieee")
            # dY_ij = dA_i V_j^T
            dy_tile = tl.dot(da_tile, tl.trans(v_tile), input_precision="ieee")
            # dX_ij = Y_ij * (dY_ij - Delta_i)
            dx_tile = tl.where(keep, y_tile * (dy_tile - delta[:, None]), 0.0)
            # dK_j += dX_ij^T Q_i  (the scale once, at the end)
            dk += tl.dot(tl.trans(dx_tile).to(q_tile.dtype), q_tile, input_precision="ieee")
            if ATOMIC_DQ:
                # dQ_i += scale dX_ij K_j, added to HBM: keys no row of the tile attends are left out (read as 0)
                col_used = tl.max(keep.to(tl.int32), 0) > 0  # (B_c,)
                k_used = tl.where(col_used[:, None], k_tile, 0.0).to(k_tile.dtype)
                dq_part = tl.dot(dx_tile.to(k_tile.dtype), k_used, input_precision="ieee") * scale
                tl.atomic_add(
                    dQ + b * N * BLOCK_D + rows[:, None] * BLOCK_D + d[None, :],
                    dq_part,
                    mask=row_used[:, None] & (d[None, :] < D),
                )
        # dK_j = scale sum_i dX_ij^T Q_i
        dk = dk * scale
        tl.store(
            dK + b * sk_b + cols[:, None] * sk_m + d[None, :],
            dk.to(dK.dtype.element_ty),
            mask=(cols[:, None] < M) & (d[None, :] < D),
        )
        tl.store(
            dV + b * sv_b + cols[:, None] * sv_m + dv[None, :],
            dv_acc.to(dV.dtype.element_ty),
            mask=(cols[:, None] < M) & (dv[None, :] < Dv),
        )

    @triton.jit
    def _bwd_dq(
        Q, K, V, dA, LSE, Delta, Keep, dQ,  # as _bwd_dkdv; dq (B, N, D) in the input dtype
        sq_b, sq_n, sk_b, sk_m, sv_b, sv_m, sd_b, sd_n, sp_b, sp_n, sp_m,
        N, M, D, Dv, scale, offset,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr,
    ):  # fmt: skip
        i = tl.program_id(0)  # this program's query tile
        b = tl.program_id(1)
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)  # (B_r,)
        d = tl.arange(0, BLOCK_D)
        dv = tl.arange(0, BLOCK_DV)
        lse = tl.load(LSE + b * N + rows, mask=rows < N, other=float("-inf"))  # (B_r,) L_i
        delta = tl.load(Delta + b * N + rows, mask=rows < N, other=0.0)  # (B_r,) Delta_i
        # load Q_i, dA_i once: a fully masked row (L = -inf) is not loaded
        row_ok = (rows < N) & (lse != float("-inf"))
        q_tile = tl.load(
            Q + b * sq_b + rows[:, None] * sq_n + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0
        )
        da_tile = tl.load(
            dA + b * sd_b + rows[:, None] * sd_n + dv[None, :], mask=row_ok[:, None] & (dv[None, :] < Dv), other=0.0
        )
        # dQ_i = 0: on chip (float32) for the whole sweep over the key tiles
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        hi = M
        if CAUSAL:  # key tiles right of the last row's diagonal: never visited
            hi = tl.minimum(M, (i + 1) * BLOCK_M + offset)
        for c0 in range(0, hi, BLOCK_N):
            cols = c0 + tl.arange(0, BLOCK_N)  # (B_c,)
            keep = _keep_pairs(Keep, b, rows, cols, lse, sp_b, sp_n, sp_m, N, M, offset, CAUSAL, HAS_KEEP)
            # load K_j, V_j: a key that no row of the tile attends is not loaded (reads as 0)
            col_used = tl.max(keep.to(tl.int32), 0) > 0  # (B_c,)
            k_tile = tl.load(
                K + b * sk_b + cols[:, None] * sk_m + d[None, :], mask=col_used[:, None] & (d[None, :] < D), other=0.0
            )
            v_tile = tl.load(
                V + b * sv_b + cols[:, None] * sv_m + dv[None, :],
                mask=col_used[:, None] & (dv[None, :] < Dv),
                other=0.0,
            )
            # X_ij = Q_i K_j^T, recomputed
            x_tile = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * scale
            # Y_ij = exp(X_ij - L_i)
            y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0)
            # dY_ij = dA_i V_j^T
            dy_tile = tl.dot(da_tile, tl.trans(v_tile), input_precision="ieee")
            # dX_ij = Y_ij * (dY_ij - Delta_i)
            dx_tile = tl.where(keep, y_tile * (dy_tile - delta[:, None]), 0.0)
            # dQ_i += dX_ij K_j  (accumulated across the key tiles, on chip; the scale once, at the end)
            dq += tl.dot(dx_tile.to(k_tile.dtype), k_tile, input_precision="ieee")
        # dQ_i = scale sum_j dX_ij K_j
        dq = dq * scale
        tl.store(
            dQ + b * sq_b + rows[:, None] * sq_n + d[None, :],
            dq.to(dQ.dtype.element_ty),
            mask=(rows[:, None] < N) & (d[None, :] < D),
        )


def _keep_tensor(mask, batch, N, M, device):
    """The mask as a ``(B, N, M)`` uint8 view (1 = attend), broadcast without copying, and its strides; as the
    forward wrapper builds it."""
    keep = as_tensor(mask, device).view(torch.uint8)
    keep = keep.reshape((1,) * (2 - keep.dim()) + tuple(keep.shape))
    while keep.dim() > len(batch) + 2:
        keep = keep[0]
    keep = keep.expand(*batch, N, M).reshape(math.prod(batch), N, M)
    return keep, keep.stride()


def _unbroadcast(grad, shape):
    """Sum ``grad`` over the dimensions that were broadcast to reach it from a tensor of ``shape``."""
    extra = grad.dim() - len(shape)
    if extra:
        grad = grad.sum(dim=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(dim=axes, keepdim=True) if axes else grad


def triton_attention_backward(
    q,
    k,
    v,
    a,
    lse,
    grad_a,
    *,
    scale=None,
    causal=False,
    mask=None,
    block_q=None,
    block_k=None,
    dq_mode="separate",
    num_warps=4,
    num_stages=1,
    enable_gqa=False,
    learnable_sink=None,
):
    """Gradients of attention with respect to ``q``, ``k``, ``v`` (and the sink) by the Triton backward kernels.

    Args:
        q ``(..., N, D)``, k ``(..., M, D)``, v ``(..., M, Dv)``: the forward's inputs, numpy arrays or PyTorch
            tensors (float16, bfloat16 on a GPU, float32; ``D``, ``Dv`` at most 128); scale, causal, mask,
            enable_gqa, learnable_sink: exactly as given to the forward
            (:func:`flashmath.triton_kernel.triton_flash_attention`).
        a ``(..., N, Dv)``, lse ``(..., N)``: the forward's output and float32 logsumexp (``return_lse=True``; with
            a sink, the logsumexp that includes it). With ``enable_gqa`` these have the query heads ``H``.
        grad_a: ``dA``, the gradient of the loss with respect to ``a``, ``(..., N, Dv)``.
        block_q, block_k: ``B_r``, ``B_c``, powers of two from 16 to 256 (default 64).
        dq_mode: ``"separate"`` (a second kernel, query tiles outside: deterministic) or ``"atomic"`` (atomic adds
            from the dK/dV kernel into a float32 buffer: one sweep, not bitwise reproducible on a GPU).
        num_warps, num_stages: as for the forward (ignored by the interpreter).
        enable_gqa: ``k``, ``v`` with ``H_kv`` heads read by groups of ``G = H / H_kv`` query heads; ``dK``, ``dV``
            summed over each group (see the module docstring).
        learnable_sink: the sink logits given to the forward (``(H,)``, or ``(B, H)``, or a scalar: as
            :func:`flashmath.inputs.check_sink`), or None. The forward's ``rescale_threshold`` is not an argument:
            the backward recomputes ``Y`` from ``L`` alone, whatever reference the forward kept.

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes of ``q``, ``k``, ``v`` (summed over broadcast dimensions) and
        the inputs' promoted dtype: numpy arrays for numpy inputs, tensors on the inputs' device for tensors. With a
        ``learnable_sink``, ``(grad_q, grad_k, grad_v, grad_sink)`` (as :func:`flashmath.attention_backward`):
        ``grad_sink = -sum_n P_sink,n Delta_n`` summed over the rows and the leading dimensions that share each sink,
        with the shape of ``learnable_sink``; in its dtype for a floating-point tensor (as flash-attention's
        ``dsink``), else float32; a tensor where the inputs are tensors, else a numpy array.

    Raises:
        as :func:`flashmath.triton_kernel.triton_flash_attention`; ValueError for ``a``, ``lse`` or ``grad_a`` of
        other shapes than ``(..., N, Dv)``, ``(..., N)``, ``(..., N, Dv)``, a ``dq_mode`` other than those of
        :data:`DQ_MODES`, or a scale that float32 cannot hold; TypeError for an ``enable_gqa`` that is not a bool.

    Sources: Dao (2023), Algorithm 2; the sink's gradient: flash-attention's ``flash_bwd_postprocess.py``; see the
    module docstring.
    """
    require_triton()
    dq_mode = check_dq_mode(dq_mode)
    block_m = check_kernel_block(block_q, "block_q", DEFAULT_BLOCK_M)
    block_n = check_kernel_block(block_k, "block_k", DEFAULT_BLOCK_N)
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise TypeError(f"enable_gqa must be True or False, got {enable_gqa!r}")
    tensors = [isinstance(x, torch.Tensor) for x in (q, k, v)]
    shapes = [tuple(x.shape) for x in (q, k, v)]  # as given: the gradients take them
    if enable_gqa:  # q as (..., H_kv, G, N, D), k and v as (..., H_kv, 1, M, D): views, as the forward's wrapper
        q, k, v, mask, _ = grouped_views(q, k, v, mask)
    inp = check_kernel_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    tiny, huge = FLOAT32_SCALES
    if abs(inp.scale) > huge or 0 < abs(inp.scale) < tiny:
        raise ValueError(
            f"the backward kernels multiply float32 tiles by the scale: it must be 0 or between "
            f"{tiny:.1e} and {huge:.1e} in magnitude, got {inp.scale}"
        )
    batch, N, M, D, Dv = inp.batch_shape, inp.N, inp.M, inp.D, inp.Dv
    # the leading dimensions as the caller sees them: (..., H) with grouped heads, not (..., H_kv, G)
    heads = batch[:-2] + (batch[-2] * batch[-1],) if enable_gqa else batch
    rows = heads + (N,)
    for arr, name, shape in ((a, "a", rows + (Dv,)), (lse, "lse", rows), (grad_a, "grad_a", rows + (Dv,))):
        if tuple(arr.shape) != shape:
            raise ValueError(
                f"{name} must have shape (..., N{', Dv' if name != 'lse' else ''}) = {shape} "
                f"(from q, k, v), got {tuple(arr.shape)}"
            )
    sink = None
    if learnable_sink is not None:  # one logit per query head, (B,) in the programs' order (float64, checked)
        given = learnable_sink
        if isinstance(given, torch.Tensor):
            given = given.detach().float().cpu().numpy()
        checked = check_sink(given, heads)
        assert checked is not None
        sink = checked.reshape(math.prod(heads))
    device = kernel_device(q, k, v, tensors)
    q_t, k_t, v_t = (as_tensor(x, device) for x in (q, k, v))
    dtype = torch.promote_types(torch.promote_types(q_t.dtype, k_t.dtype), v_t.dtype)
    if dtype == torch.bfloat16 and device.type == "cpu":
        raise TypeError(
            "Triton's interpreter does not support bfloat16 matrix products (triton-lang/triton#11584); "
            "on a CPU use float16 or float32 inputs, bfloat16 runs compiled on a GPU"
        )
    B = math.prod(batch)
    # (B, N, D), (B, M, D), (B, M, Dv), (B, N, Dv), (B, N), contiguous in the last dimension (grouped heads: k and v
    # copied once per query head of their group)
    q_b, k_b, v_b = (
        x.to(dtype).expand(*batch, *x.shape[-2:]).reshape(B, *x.shape[-2:]).contiguous() for x in (q_t, k_t, v_t)
    )
    a_b, da_b = (as_tensor(x, device).to(dtype).reshape(B, N, Dv).contiguous() for x in (a, grad_a))
    lse_b = as_tensor(lse, device).to(torch.float32).reshape(B, N).contiguous()
    dq = torch.zeros((B, N, D), dtype=dtype, device=device)
    dk = torch.zeros((B, M, D), dtype=dtype, device=device)
    dv = torch.zeros((B, M, Dv), dtype=dtype, device=device)
    delta = torch.zeros((B, N), dtype=torch.float32, device=device)  # stays 0 with no key (M = 0: A = 0)
    if mask is not None:
        keep, keep_strides = _keep_tensor(mask, batch, N, M, device)
    else:
        keep, keep_strides = lse_b, (0, 0, 0)  # not read (HAS_KEEP is False)
    block_d, block_dv = padded_width(D), padded_width(Dv)
    atomic = dq_mode == "atomic"
    if B > 0 and N > 0 and M > 0:
        strides = (
            q_b.stride(0),
            q_b.stride(1),
            k_b.stride(0),
            k_b.stride(1),
            v_b.stride(0),
            v_b.stride(1),
            da_b.stride(0),
            da_b.stride(1),
            *keep_strides,
        )
        sizes = (N, M, D, Dv, float(inp.scale), M - N)
        consts = dict(
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_D=block_d,
            BLOCK_DV=block_dv,
            CAUSAL=bool(causal),
            HAS_KEEP=mask is not None,
            num_warps=num_warps,
            num_stages=num_stages,
        )
        # the atomic adds go to a float32 buffer (B, N, BLOCK_D), cast to the input dtype at the end
        dq_acc = torch.zeros((B, N, block_d), dtype=torch.float32, device=device) if atomic else dq
        with quiet_interpreter():
            _bwd_delta[(triton.cdiv(N, block_m), B)](
                a_b,
                da_b,
                delta,
                a_b.stride(0),
                a_b.stride(1),
                da_b.stride(0),
                da_b.stride(1),
                N,
                Dv,
                BLOCK_M=block_m,
                BLOCK_DV=block_dv,
                num_warps=num_warps,
            )
            _bwd_dkdv[(triton.cdiv(M, block_n), B)](
                q_b, k_b, v_b, da_b, lse_b, delta, keep, dk, dv, dq_acc, *strides, *sizes, ATOMIC_DQ=atomic, **consts
            )
            if atomic:
                dq = dq_acc[..., :D].to(dtype)
            else:
                _bwd_dq[(triton.cdiv(N, block_m), B)](
                    q_b, k_b, v_b, da_b, lse_b, delta, keep, dq, *strides, *sizes, **consts
                )
    grads = [
        _unbroadcast(g.reshape(*batch, *g.shape[-2:]), tuple(x.shape)).reshape(shape)
        for g, x, shape in ((dq, q_t, shapes[0]), (dk, k_t, shapes[1]), (dv, v_t, shapes[2]))
    ]
    if sink is not None:
        grads.append(_sink_gradient(sink, lse_b, delta, heads, learnable_sink, device))
    if not any(tensors):
        grads = [g.cpu().numpy() for g in grads]
    return tuple(grads)


def _sink_gradient(sink, lse, delta, heads, given, device):
    """``d sink = -sum_n P_sink,n Delta_n`` with ``P_sink,n = exp(sink - L_n)``, from the sink of each program ``(B,)``
    (float64, checked) and the float32 ``L``, ``Delta`` ``(B, N)``; summed over the rows, then over the leading
    dimensions ``heads`` that share a sink of the shape ``given`` has, in its dtype for a floating-point tensor."""
    sink_col = torch.from_numpy(sink.astype(np.float32)).to(device)[:, None]  # (B, 1), as the forward kernel's
    # P_sink,n = exp(sink - L_n): the sink column's probability (0 for a -inf sink: no sink, whatever L_n)
    p_sink = torch.where(
        sink_col == float("-inf"), 0.0, torch.exp(sink_col - torch.where(lse == float("-inf"), 0.0, lse))
    )
    # d sink = -sum_n P_sink,n Delta_n, over the rows of each (batch, head) element
    grad = -(p_sink * delta).sum(dim=1).reshape(heads)
    shape = given_shape = tuple(given.shape) if hasattr(given, "shape") else tuple(np.shape(given))
    while len(shape) > grad.dim() and shape[0] == 1:  # as check_sink: leading axes of size 1 dropped
        shape = shape[1:]
    grad = _unbroadcast(grad, shape).reshape(given_shape)  # summed over the leading dimensions that share a sink
    if isinstance(given, torch.Tensor) and given.is_floating_point():
        return grad.to(device=given.device, dtype=given.dtype)
    return grad


# ------------------------------------------------------------------------------------------------------------------
# The kernels' sources, for chapter 12
# ------------------------------------------------------------------------------------------------------------------

BACKWARD_RULES = (
    "Delta_n = rowsum(dA * A)",
    "X_ij = Q_i K_j^T",
    "Y_ij = exp(X_ij - L_i)",
    "dV_j += Y_ij^T dA_i",
    "dY_ij = dA_i V_j^T",
    "dX_ij = Y_ij * (dY_ij - Delta_i)",
    "dK_j += dX_ij^T Q_i",
    "dQ_i += dX_ij K_j",
)
"""The backward's update rules, in the order the kernels apply them (the comments above their code)."""


def backward_kernel_source(name: str = "_bwd_dkdv") -> str:
    """The source of one backward kernel (``"_bwd_delta"``, ``"_bwd_dkdv"`` or ``"_bwd_dq"``), read from this
    file (works without Triton installed).

    Raises:
        ValueError: another name.
    """
    names = ("_bwd_delta", "_bwd_dkdv", "_bwd_dq")
    if name not in names:
        raise ValueError(f"name must be one of {names}, got {name!r}")
    text = inspect.getsource(sys.modules[__name__])
    start = text.index(f"    @triton.jit\n    def {name}(")
    end = text.index("\n\n", start)
    return "\n".join(line[4:].removesuffix("  # fmt: skip") for line in text[start:end].splitlines())


def backward_line_for_line() -> list[tuple[str, list[str], list[str]]]:
    """The numpy backward of :mod:`flashmath.backward` beside the three kernels, one update rule at a time (chapter
    12, as :func:`flashmath.triton_kernel.line_for_line` does for the forward in chapter 11).

    Returns:
        ``[(rule, numpy lines, triton lines)]`` for each of :data:`BACKWARD_RULES`, in the kernels' order, read from
        the two sources (the first code under each rule's comment: the dK/dV sweep's, then the dQ sweep's
        ``dQ_i += dX_ij K_j``). Works without Triton installed.

    Raises:
        LookupError: a rule is missing from one of the sources (a comment was reworded).
    """
    from flashmath import backward

    numpy_source = "\n".join(inspect.getsource(f) for f in (backward.attention_backward, backward.backward_tile))
    kernels = "\n".join(backward_kernel_source(name) for name in ("_bwd_delta", "_bwd_dkdv", "_bwd_dq"))
    numpy_blocks, triton_blocks = rule_blocks(numpy_source, BACKWARD_RULES), rule_blocks(kernels, BACKWARD_RULES)
    missing = [
        (rule, where)
        for rule in BACKWARD_RULES
        for where, blocks in (("flashmath.backward", numpy_blocks), ("the kernels", triton_blocks))
        if not blocks.get(rule)
    ]
    if missing:
        raise LookupError(f"no code under these rule comments: {missing}")
    return [(rule, numpy_blocks[rule], triton_blocks[rule]) for rule in BACKWARD_RULES]


# ------------------------------------------------------------------------------------------------------------------
# The order in which the kernels visit the tiles (chapter 12's figure): pure Python, no Triton needed
# ------------------------------------------------------------------------------------------------------------------


def backward_schedule(
    N: int, M: int, block_q: int, block_k: int, *, causal: bool = False, dq_mode: str = "separate"
) -> list[tuple[str, int, int]]:
    """The tile pairs the backward kernels visit, in order, for one (batch, head) element.

    Each step is ``(kernel, i, j)``: ``"dkdv"`` steps (the program of key tile ``j`` meets query tile ``i``; with
    ``dq_mode="atomic"`` it also adds to ``dQ_i``), then, for ``dq_mode="separate"``, ``"dq"`` steps (the
    program of query tile ``i`` meets key tile ``j``). On a GPU the programs run side by side; the list puts them
    one after another, as the interpreter runs them. Tile pairs that a causal mask hides from every row are never
    visited, exactly as the kernels skip them (the loops' bounds ``lo`` and ``hi``).

    Raises:
        ValueError: a negative size, a block size below 1, or an unknown ``dq_mode``. TypeError: a size that is
        not an integer.
    """
    N, M = size(N, "N"), size(M, "M")
    block_q, block_k = size(block_q, "block_q", 1), size(block_k, "block_k", 1)
    dq_mode = check_dq_mode(dq_mode)
    offset = M - N
    steps = []
    for j, c0 in enumerate(range(0, M, block_k)):  # _bwd_dkdv: key tiles outside
        lo = (max(c0 - offset, 0) // block_q) * block_q if causal else 0
        steps += [("dkdv", r0 // block_q, j) for r0 in range(lo, N, block_q)]
    if dq_mode == "separate":
        for i, r0 in enumerate(range(0, N, block_q)):  # _bwd_dq: query tiles outside
            hi = min(M, r0 + block_q + offset) if causal else M
            steps += [("dq", i, c0 // block_k) for c0 in range(0, hi, block_k)]
    return steps


def grouped_views(q, k, v, mask):
    """Grouped-query heads for the kernels (forward and backward): ``q`` viewed as ``(..., H_kv, G, N, D)``, ``k``
    and ``v`` as ``(..., H_kv, 1, M, D)`` and the mask likewise (as :func:`flashmath.variants.group_heads`, on tensors
    too, nothing copied), and ``G``. ValueError as that function."""
    shapes = [tuple(x.shape) for x in (q, k, v)]
    if min(len(sh) for sh in shapes) < 3:
        raise ValueError(f"enable_gqa needs a heads axis: q, k, v must be (..., H, L, D), got shapes {shapes}")
    H, H_kv = shapes[0][-3], shapes[1][-3]
    if shapes[2][-3] != H_kv or H_kv == 0 or H % H_kv:
        raise ValueError(
            f"enable_gqa: the query heads H = {H} must be a multiple of the key/value heads (k has "
            f"{H_kv}, v has {shapes[2][-3]}); query head h reads kv head h // (H / H_kv)"
        )
    G = H // H_kv
    q = q.reshape(*shapes[0][:-3], H_kv, G, *shapes[0][-2:])
    k, v = k[..., None, :, :], v[..., None, :, :]
    if mask is not None and len(mask.shape) >= 3:
        if mask.shape[-3] == H:
            mask = mask.reshape(*mask.shape[:-3], H_kv, G, *mask.shape[-2:])
        elif mask.shape[-3] == 1:
            mask = mask[..., None, :, :]
        else:
            raise ValueError(f"mask of shape {tuple(mask.shape)}: its head axis must be 1 or H = {H} with enable_gqa")
    return q, k, v, mask, G
