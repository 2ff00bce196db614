"""FlashAttention-2's forward pass as a Triton kernel (chapter 11): the tile loop of :mod:`flashmath.flash` on a GPU.

The kernel is :func:`flashmath.flash.flash_attention` with ``order="fa2"`` written for a GPU, line for line (the
course's names on the left, the Triton tutorial's on the right):

=====================  =================  ==========================================================================
course                 kernel             lives in
=====================  =================  ==========================================================================
``B_r``, ``B_c``       ``BLOCK_M``,       compile-time constants (``tl.constexpr``): register arrays need fixed sizes
                       ``BLOCK_N``
``Q_i`` ``(B_r, D)``   ``q_tile``         loaded once from HBM; registers, staged through shared memory for ``tl.dot``
``K_j``, ``V_j``       ``k_tile``,        streamed from HBM, one tile per step; shared memory (``num_stages`` tiles
                       ``v_tile``         in flight when the loads are pipelined)
``X_ij``, ``P_ij``     ``x_tile``,        registers (float32), made by the matrix unit, dropped after the step
                       ``p_tile``
``g``, ``s``           ``m_i``, ``l_i``   registers (float32), one per row of the tile, for the whole sweep
``s A'``               ``acc``            registers (float32) ``(B_r, Dv)``, for the whole sweep
``A``, ``L``           ``A``, ``LSE``     written to HBM once, after the last key tile: one division, one log
=====================  =================  ==========================================================================

One *program* (a thread block of ``num_warps`` warps of 32 threads) handles one query tile of one (batch, head)
element: the grid is ``(ceil(N / B_r), batch)``. Every program sweeps the key/value tiles of its row: the
``for`` loop runs on the GPU, and ``num_stages`` lets the compiler load the next key/value tiles while the current
one is being computed.

Conventions are those of :func:`flashmath.flash.flash_attention` (shapes, ``scale``, bottom-right ``causal``,
boolean ``mask`` with True = attend; a row that attends no key gives 0 and logsumexp ``-inf``, a row that sees a
NaN gives NaN and logsumexp NaN, a row with a ``+inf`` score gives NaN and logsumexp ``+inf``, exactly as the numpy
loop), with these differences:

* dtypes: float16, bfloat16 (PyTorch tensors on a GPU only: numpy has no bfloat16, and the interpreter's
  ``tl.dot`` does not support it, triton-lang/triton#11584) or float32 in; the kernel computes in
  float32 (scores, row states, accumulator) and returns ``A`` in the input dtype and the logsumexp in float32.
  float64 is refused: GPU matrix units have no fast float64, and a silent cast would hide the loss. float32 matrix
  products use full float32 precision (``input_precision="ieee"``), not TF32 (the setting changes nothing for
  float16 and bfloat16 operands). float16 and bfloat16 weights ``P`` are rounded to the input dtype before
  ``P V``, as in FlashAttention-2.
* sizes: ``D`` and ``Dv`` up to 128 (the tile is padded to a power of two of at least 16 with masked loads);
  ``block_q`` and ``block_k`` powers of two from 16 to 256 (16 is the package's floor: Triton 3.9's NVIDIA backend
  needs a product's inner dimension to be at least 16 for 16-bit inputs, 8 for float32, ``min_dot_size``);
  ``order`` must be ``"fa2"``.
* a masked key is absent from every score (a masked ``k`` row never enters a row's max or sum, NaN included),
  and its ``v`` row is not even loaded when every row of the query tile masks it (key padding, the keys a causal
  tile does not reach, the padded keys past ``M``). A key that some rows of a query tile attend and others do not
  (a general mask, the causal diagonal) has its ``v`` row in the tile's ``P V`` product with weight 0 for the
  rows that mask it: finite values are exact, but a NaN or inf there reaches those rows as NaN (0 x NaN), which the
  numpy loop avoids with a per-key path that a matrix unit does not have.

Where it runs: tensors on a CUDA device run compiled. On a machine without a CUDA device, importing this module
switches Triton to its interpreter (``TRITON_INTERPRET=1``, unless that variable is already set; Triton must not
have been imported before, since it reads the variable when its functions are defined), which runs the
same kernel with numpy on the CPU, one program after another (slow: keep ``N`` and ``M`` in the hundreds). Numpy
arrays are accepted and returned (copied to the GPU and back when it runs compiled); PyTorch tensors come back as
tensors on their device.

Requires the ``triton`` extra (PyTorch and Triton), installed from the course's folder (:data:`INSTALL_COMMANDS`;
README.md, "The triton extra"). ``import flashmath`` never imports this module; :func:`require_extra` stops a
notebook with those commands where the extra is missing.

Sources: T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (2023),
Algorithm 1 and section 3.2 (parallelism over query tiles, warps); P. Tillet et al., "Triton: an intermediate
language and compiler for tiled neural network computations" (MAPL 2019); Triton's tutorial
``06-fused-attention.py`` (the same algorithm with ``exp2``, autotuning and a backward pass).
"""

from __future__ import annotations

import inspect
import math
import re
import sys

import numpy as np

from flashmath._checks import integer

__all__ = [
    "INSTALL_COMMANDS",
    "INSTALL_HINT",
    "ExtraNotInstalled",
    "available",
    "require_extra",
    "interpreted",
    "triton_flash_attention",
    "differentiable_attention",
    "compile_for_target",
    "FlashAttentionFunction",
    "line_for_line",
    "kernel_source",
    "DEFAULT_BLOCK_M",
    "DEFAULT_BLOCK_N",
    "MAX_HEAD_DIM",
    "TORCH_VERSION",
    "require_triton",
    "too_late",
    "DQ_MODES",
]

from flashmath.backward import DQ_MODES, check_dq_mode
from flashmath.flash import check_rescale_threshold
from flashmath.inputs import check_sink
from flashmath.rowstate import LN2
from flashmath.tiling import check_kernel_block
from flashmath.triton_backward import grouped_views, triton_attention_backward
from flashmath.triton_setup import (  # re-exported: chapter 11 and the tests use them through this module
    DEFAULT_BLOCK_M,
    DEFAULT_BLOCK_N,
    FLOAT32_SCALES,
    INSTALL_COMMANDS,
    INSTALL_HINT,
    MAX_HEAD_DIM,
    TORCH_VERSION,
    ExtraNotInstalled,
    as_tensor,
    available,
    check_kernel_inputs,
    interpreted,
    kernel_device,
    padded_width,
    quiet_interpreter,
    require_extra,
    require_triton,
    rule_blocks,
    tl,
    too_late,
    torch,
    triton,
)
from flashmath.variants import check_window, make_variant

if available():

    @triton.jit
    def _fa2_forward(
        Q, K, V, Keep, A, LSE,  # pointers to q (B, N, D), k (B, M, D), v (B, M, Dv), keep (B, N, M), a, lse (B, N)
        sq_b, sq_n, sk_b, sk_m, sv_b, sv_m, sa_b, sa_n, sp_b, sp_n, sp_m,  # strides, in elements (the last dim: 1)
        N, M, D, Dv, scale, offset,  # sizes; the score scale; offset = M - N, the causal diagonal
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr,
        G=1, left=0, right=0, cap=1.0,  # chapter 13: query heads per kv head, the window's extents, the softcap
        WINDOW: tl.constexpr = False, SOFTCAP: tl.constexpr = False,
        Sink=None, thr=0.0,  # chapter 13: the sink logit of each (batch, head) (B,); chapter 7: lazy rescaling's t ln 2
        HAS_SINK: tl.constexpr = False, LAZY: tl.constexpr = False,
    ):  # fmt: skip
        i = tl.program_id(0)  # this program's query tile
        b = tl.program_id(1)  # and its (batch, head) element
        kv = b // G  # grouped-query heads (chapter 13): the key/value head this query head reads (G = 1: its own)
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)  # (B_r,) query indices n of the tile
        d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) head dimensions, padded to a power of two
        dv = tl.arange(0, BLOCK_DV)
        # load Q_i once: (B_r, D); rows past N and padded dimensions read as 0
        q_tile = tl.load(
            Q + b * sq_b + rows[:, None] * sq_n + d[None, :], mask=(rows[:, None] < N) & (d[None, :] < D), other=0.0
        )
        # g = -inf, s = 0, acc = s A' = 0: nothing seen yet (all float32, in registers)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
        if HAS_SINK:  # chapter 13: the sink is a score already seen, with no value: g = sink, s = 1 (-inf: none)
            m_i = l_i + tl.load(Sink + b)  # g = 0 + sink, one per row
            # s = exp(sink - sink) = 1, an infinite sink measured against 0 (-inf: s = 0, no sink; +inf: s = +inf)
            l_i = tl.exp(m_i - tl.where((m_i == float("-inf")) | (m_i == float("inf")), 0.0, m_i))
        lo = 0
        hi = M
        if CAUSAL:  # key tiles right of the last row's diagonal are masked for every row: never visited
            hi = tl.minimum(M, (i + 1) * BLOCK_M + offset)
        if WINDOW:  # key tiles outside every row's window (chapter 13) are never visited either
            hi = tl.minimum(hi, (i + 1) * BLOCK_M + offset + right)
            lo = tl.maximum(0, i * BLOCK_M + offset - left) // BLOCK_N * BLOCK_N
        for c0 in range(lo, hi, BLOCK_N):
            cols = c0 + tl.arange(0, BLOCK_N)  # (B_c,) key indices m of the tile
            # keep_tile: True = attend, (B_r, B_c): keys past M, the causal triangle, the user's mask
            keep_tile = cols[None, :] < M  # (1, B_c), broadcast over the rows
            if CAUSAL:
                keep_tile = keep_tile & (cols[None, :] <= rows[:, None] + offset)
            if WINDOW:  # p - left <= m <= p + right, p = n + M - N (FlashAttention's window_size)
                keep_tile = keep_tile & (cols[None, :] >= rows[:, None] + offset - left)
                keep_tile = keep_tile & (cols[None, :] <= rows[:, None] + offset + right)
            if HAS_KEEP:
                keep_tile = keep_tile & (
                    tl.load(
                        Keep + b * sp_b + rows[:, None] * sp_n + cols[None, :] * sp_m,
                        mask=(rows[:, None] < N) & (cols[None, :] < M),
                        other=0,
                    )
                    != 0
                )
            # load K_j: (B_c, D)
            k_tile = tl.load(
                K + kv * sk_b + cols[:, None] * sk_m + d[None, :],
                mask=(cols[:, None] < M) & (d[None, :] < D),
                other=0.0,
            )
            # X_ij = Q_i K_j^T  (times the scale; masked pairs selected to -inf): (B_r, B_c), float32
            x_tile = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * scale  # float32 inputs: no TF32
            x_tile = tl.where(keep_tile, x_tile, float("-inf"))
            # chapter 13: softcap c tanh(x / c) on the scaled score, y = |x / c|
            if SOFTCAP:
                y = tl.abs(x_tile / cap)
                # y >= 0.3: c (1 - t) / (1 + t), t = exp(-2y), which never overflows
                t = tl.exp(-2.0 * y)
                far = cap * (1.0 - t) / (1.0 + t)
                # y < 0.3, where 1 - t would cancel (an error of c 2^-24 on every score): x tanh(y) / y by tanh's
                # series, x (1 - y^2/3 + 2y^4/15 - 17y^6/315 + 62y^8/2835 - 1382y^10/155925), error below 2e-9
                y2 = y * y
                series = 62.0 / 2835.0 + y2 * (-1382.0 / 155925.0)  # Horner's rule, from the innermost term out
                series = -17.0 / 315.0 + y2 * series
                series = 2.0 / 15.0 + y2 * series
                series = -1.0 / 3.0 + y2 * series
                near = x_tile * (1.0 + y2 * series)
                capped = tl.where(y < 0.3, near, tl.where(x_tile < 0, -far, far))
                x_tile = tl.where(keep_tile, capped, float("-inf"))
            # g_new = max(g, rowmax(X_ij));  a row that has seen no key keeps -inf
            m_new = tl.maximum(m_i, tl.max(x_tile, 1))
            # chapter 7, FlashAttention-4's lazy rescaling: the old reference is kept while the max grew by <= thr
            if LAZY:
                m_new = tl.where((m_i > float("-inf")) & (m_new - m_i <= thr), m_i, m_new)
            # measured against 0 where g_new is -inf (no key yet) or +inf (a +inf score: exp(x - 0) makes the sum
            # +inf, the row's logsumexp, where exp(inf - inf) would make it NaN)
            m_ref = tl.where((m_new == float("-inf")) | (m_new == float("inf")), 0.0, m_new)
            # alpha = exp(g - g_new): the rescale of everything summed so far
            alpha = tl.exp(m_i - m_ref)
            # P_ij = exp(X_ij - g_new)
            p_tile = tl.exp(x_tile - m_ref[:, None])
            # s_new = s * alpha + rowsum(P_ij)
            l_i = l_i * alpha + tl.sum(p_tile, 1)
            # load V_j: (B_c, Dv); a key that every row of the tile masks is not loaded (reads as 0)
            used = tl.max(keep_tile.to(tl.int32), 0) > 0  # (B_c,)
            v_tile = tl.load(
                V + kv * sv_b + cols[:, None] * sv_m + dv[None, :], mask=used[:, None] & (dv[None, :] < Dv), other=0.0
            )
            # acc_new = acc * alpha + P_ij V_j   (no division: FlashAttention-2 divides once, at the end)
            acc = acc * alpha[:, None] + tl.dot(p_tile.to(v_tile.dtype), v_tile, input_precision="ieee")

            m_i = m_new
        # a row that saw no key has s = 0 (a NaN score makes s NaN: tl.max may skip a NaN, as a GPU's max does, but
        # the sum never does; a +inf score makes s +inf)
        empty = l_i == 0
        # A_i = acc / s  (the only division; a row that saw no key: acc = 0, divided by 1)
        a_tile = acc / tl.where(empty, 1.0, l_i)[:, None]
        tl.store(
            A + b * sa_b + rows[:, None] * sa_n + dv[None, :],
            a_tile.to(A.dtype.element_ty),
            mask=(rows[:, None] < N) & (dv[None, :] < Dv),
        )
        # lse_i = g + log(s);  -inf for a row that saw no key, +inf for a +inf score (s is +inf), NaN for NaN
        lse = tl.where(empty, float("-inf"), m_i + tl.log(l_i))
        tl.store(LSE + b * N + rows, lse, mask=rows < N)


def triton_flash_attention(
    q,
    k,
    v,
    *,
    block_q=None,
    block_k=None,
    order="fa2",
    scale=None,
    causal=False,
    mask=None,
    return_lse=False,
    num_warps=4,
    num_stages=2,
    dq_mode="separate",
    enable_gqa=False,
    window=None,
    softcap=None,
    learnable_sink=None,
    rescale_threshold=0.0,
):
    """Attention by the Triton kernel: :func:`flashmath.flash.flash_attention` (``order="fa2"``) on a GPU.

    Args:
        q: queries ``(..., N, D)``; k: keys ``(..., M, D)``; v: values ``(..., M, Dv)``: numpy arrays or PyTorch
            tensors of float16, bfloat16 (tensors only) or float32, ``D`` and ``Dv`` at most 128. The leading
            dimensions broadcast.
        block_q: ``B_r`` = ``BLOCK_M``, query rows per program, a power of two from 16 to 256 (default 64).
        block_k: ``B_c`` = ``BLOCK_N``, keys per step, a power of two from 16 to 256 (default 64).
        order: only ``"fa2"``: the kernel is FlashAttention-2's loop (query tiles across programs).
        scale, causal, mask, return_lse: as :func:`flashmath.flash.flash_attention` (``causal`` bottom-right
            aligned; ``mask`` boolean, True = attend, broadcastable to ``(..., N, M)``).
        num_warps: warps (32 threads each) per program on a GPU: how many threads share one query tile.
        num_stages: key/value tiles in flight on a GPU (software pipelining of the loads). Both are ignored by
            the interpreter; neither changes the result.
        dq_mode: how the backward accumulates ``dQ`` (chapter 12, :mod:`flashmath.triton_backward`):
            ``"separate"`` (deterministic) or ``"atomic"``. Tensors that require grad make the result
            differentiable: ``.backward()`` runs the backward kernels.
        enable_gqa, window, softcap: chapter 13's variants, as :func:`flashmath.flash.flash_attention` (conventions
            and sources: :mod:`flashmath.variants`): ``k``, ``v`` with ``H_kv`` heads read by groups of query heads
            (the kernel reads kv head ``b // G``, nothing repeated), FlashAttention's ``window_size`` (key tiles
            outside every row's window are not visited), ``c tanh(x / c)`` on the scaled score. Compile-time
            switches (``WINDOW``, ``SOFTCAP``). ``enable_gqa`` is differentiable (the backward sums ``dK``, ``dV``
            over each group: :mod:`flashmath.triton_backward`); ``window`` and ``softcap`` are forward only (the
            backward kernels do not take them yet).
        learnable_sink: attention sinks (chapter 13), one logit per query head ``(H,)`` (numpy array, tensor or
            list; also ``(B, H)`` or a scalar), as :func:`flashmath.flash.flash_attention`'s: each program starts its
            rows at ``(m_i, l_i, acc) = (sink, 1, 0)`` (compile-time switch ``HAS_SINK``; the sink in float32). The
            logsumexp includes the sink; a row with no key gives 0 and logsumexp = the sink; ``-inf`` is no sink.
            Differentiable: a sink tensor that requires grad gets ``d sink = -sum_n exp(sink - L_n) Delta_n``
            (chapter 12's ``D``; :mod:`flashmath.triton_backward`).
        rescale_threshold: FlashAttention-4's lazy rescaling, log2 units (:func:`flashmath.flash.flash_attention`):
            a row keeps its old ``m_i`` unless the tile's max exceeds it by more than ``rescale_threshold ln 2``
            (compile-time switch ``LAZY``); 0: the eager update. The result is the same to float32 rounding.
            Forward only: the backward recomputes the weights from the logsumexp, which does not depend on it.

    Returns:
        ``A (..., N, Dv)`` in the input dtype and, if ``return_lse``, the logsumexp ``(..., N)`` in float32: numpy
        arrays for numpy inputs, tensors on the inputs' device for tensors. A fully masked row gives 0 and ``-inf``;
        a row that sees a NaN gives NaN and NaN; a row with a ``+inf`` score gives NaN and ``+inf`` (its weights are
        measured against 0, so its sum is ``+inf``; a NaN reaches the sum even where ``tl.max`` skips it). A masked
        key is absent, with the exception stated in :mod:`flashmath.inputs` (and the module docstring): a NaN or inf
        ``v`` row of a key that other rows of the same query tile attend reaches the rows that mask it as NaN
        (``0 x NaN`` in the tile's ``P V`` product).

    Raises:
        ModuleNotFoundError: PyTorch or Triton is not installed (the message gives the install command).
        RuntimeError: no CUDA device and the interpreter is off (``TRITON_INTERPRET=0``, or Triton was imported
            before this module).
        TypeError: float64 or non-float inputs, a non-boolean mask, non-integer block sizes; ValueError: the
            shapes, ``D`` or ``Dv`` above 128, a block size that is not a power of two from 16 to 256, an
            ``order`` other than ``"fa2"``. The shape and mask checks are those of
            :func:`flashmath.attention.prepare_attention_inputs`, with the same messages; the sink's those of
            :func:`flashmath.inputs.check_sink`, the threshold's :func:`flashmath.flash.check_rescale_threshold`.
        NotImplementedError: ``window`` or ``softcap`` with tensors that require grad (the backward kernels do not
            take them).

    Sources: Dao (2023), Algorithm 1; see the module docstring.
    """
    require_triton()
    dq_mode = check_dq_mode(dq_mode)  # refused here too, not only when a backward is needed
    if order != "fa2":
        raise ValueError(
            f"order must be 'fa2': the kernel is FlashAttention-2's loop (query tiles across programs), "
            f"got {order!r}; flashmath.flash_attention(..., order='fa1') runs the other order in numpy"
        )
    if not isinstance(enable_gqa, (bool, np.bool_)):  # np.True_ and np.False_ as numpy's functions take them
        raise TypeError(f"enable_gqa must be True or False, got {enable_gqa!r}")
    enable_gqa = bool(enable_gqa)
    threshold = check_rescale_threshold(rescale_threshold)
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in (q, k, v, learnable_sink)
    )
    if needs_grad and (window is not None or softcap is not None):
        raise NotImplementedError(
            "window and softcap are forward-only in the Triton kernels: the backward kernels do not take them yet "
            "(flashmath.flash_attention computes them in numpy)"
        )
    if needs_grad:
        return differentiable_attention(
            q,
            k,
            v,
            block_q=block_q,
            block_k=block_k,
            scale=scale,
            causal=causal,
            mask=mask,
            return_lse=return_lse,
            dq_mode=dq_mode,
            num_warps=num_warps,
            num_stages=num_stages,
            enable_gqa=enable_gqa,
            learnable_sink=learnable_sink,
            rescale_threshold=threshold,
        )
    block_m = check_kernel_block(block_q, "block_q", DEFAULT_BLOCK_M)
    block_n = check_kernel_block(block_k, "block_k", DEFAULT_BLOCK_N)
    num_warps, num_stages = integer(num_warps, "num_warps"), integer(num_stages, "num_stages")
    tensors = [isinstance(x, torch.Tensor) for x in (q, k, v)]
    extents = check_window(window)  # chapter 13: (left, right) or None
    cap = make_variant(0, 0, (), softcap=softcap).softcap
    G = 1
    if enable_gqa:
        q, k, v, mask, G = grouped_views(q, k, v, mask)
    inp = check_kernel_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    sink = None
    if learnable_sink is not None:  # one logit per query head: checked against (..., H), viewed as the programs' batch
        if isinstance(learnable_sink, torch.Tensor):
            learnable_sink = learnable_sink.detach().float().cpu().numpy()
        heads = inp.batch_shape[:-2] + (inp.batch_shape[-2] * inp.batch_shape[-1],) if enable_gqa else inp.batch_shape
        checked = check_sink(learnable_sink, heads)
        assert checked is not None
        sink = checked.reshape(inp.batch_shape)

    device = kernel_device(q, k, v, tensors)
    q_t, k_t, v_t = (as_tensor(x, device) for x in (q, k, v))
    dtype = torch.promote_types(torch.promote_types(q_t.dtype, k_t.dtype), v_t.dtype)
    scale = inp.scale
    tiny, huge = FLOAT32_SCALES
    if abs(scale) > huge or 0 < abs(scale) < tiny:
        # a scale that float32 cannot hold (the kernel multiplies the float32 score tile by it): folded into q in
        # float64 here instead, as the numpy loops always do, so that q * scale is right wherever it fits
        q_t, scale = q_t.to(torch.float64) * scale, 1.0
    if dtype == torch.bfloat16 and device.type == "cpu":
        raise TypeError(
            "Triton's interpreter does not support bfloat16 matrix products (its tl.dot multiplies the "
            "raw bits: triton-lang/triton#11584); on a CPU use float16 or float32 inputs, bfloat16 runs "
            "compiled on a GPU"
        )
    batch, N, M, D, Dv = inp.batch_shape, inp.N, inp.M, inp.D, inp.Dv
    B = math.prod(batch)
    # (B, N, D), contiguous in the last dimension (copies only where needed); q broadcast over the batch first
    q_b = q_t.to(dtype).expand(*batch, N, D).reshape(B, N, D).contiguous()
    # (B, M, D), (B, M, Dv); grouped-query heads: (B / G, M, D), one kv head per group of G programs, nothing
    # repeated (batch ends with (H_kv, G); explicit sizes, never B // G, since G may be 0 with no query head)
    kv_batch = batch if G == 1 else (*batch[:-1], 1)
    k_b, v_b = (
        x.to(dtype).expand(*kv_batch, *x.shape[-2:]).reshape(math.prod(kv_batch), *x.shape[-2:]).contiguous()
        for x in (k_t, v_t)
    )
    a = torch.empty((B, N, Dv), dtype=dtype, device=device)
    lse = torch.empty((B, N), dtype=torch.float32, device=device)
    if mask is not None:
        keep = as_tensor(mask, device).view(torch.uint8)  # bool as bytes, 1 = attend
        keep = keep.reshape((1,) * (2 - keep.dim()) + tuple(keep.shape))  # at least (N or 1, M or 1)
        while keep.dim() > len(batch) + 2:  # leading axes of size 1 beyond the inputs' (larger ones are refused)
            keep = keep[0]
        keep = keep.expand(*batch, N, M).reshape(B, N, M)
        keep_strides = keep.stride()  # 0 along the dimensions the mask broadcasts over: nothing is copied there
    else:
        keep, keep_strides = a, (0, 0, 0)  # not read (HAS_KEEP is False)
    # the sink of each program's (batch, head) element, (B,) float32; not read without one (HAS_SINK is False)
    sinks = lse if sink is None else torch.from_numpy(sink.reshape(B).astype(np.float32)).to(device)
    # the window's extents as int32 kernel arguments: an unbounded side (None), or any extent beyond M + N (which
    # every key is within), is M + N, so that (i + 1) B_r + (M - N) + right cannot overflow (2**31 - 1 would)
    left, right = (
        (M + N) if extents is None or extent is None else min(extent, M + N) for extent in (extents or (None, None))
    )
    if B > 0 and N > 0:
        grid = (triton.cdiv(N, block_m), B)
        with quiet_interpreter():
            _fa2_forward[grid](
                q_b,
                k_b,
                v_b,
                keep,
                a,
                lse,
                q_b.stride(0),
                q_b.stride(1),
                k_b.stride(0),
                k_b.stride(1),
                v_b.stride(0),
                v_b.stride(1),
                a.stride(0),
                a.stride(1),
                *keep_strides,
                N,
                M,
                D,
                Dv,
                scale,
                M - N,
                BLOCK_M=block_m,
                BLOCK_N=block_n,
                BLOCK_D=padded_width(D),
                BLOCK_DV=padded_width(Dv),
                CAUSAL=bool(causal),
                HAS_KEEP=mask is not None,
                G=G,
                left=left,
                right=right,
                cap=cap or 1.0,
                WINDOW=extents is not None,
                SOFTCAP=cap is not None,
                Sink=sinks,
                thr=threshold * LN2,
                HAS_SINK=sink is not None,
                LAZY=threshold > 0,
                num_warps=num_warps,
                num_stages=num_stages,
            )
    a, lse = a.reshape(*batch, N, Dv), lse.reshape(*batch, N)
    if enable_gqa:  # (..., H_kv, G, N) back to (..., H, N); explicit sizes, never -1: any of them may be 0
        H = batch[-2] * batch[-1]
        a, lse = a.reshape(*batch[:-2], H, N, Dv), lse.reshape(*batch[:-2], H, N)
    if not any(tensors):  # numpy in, numpy out
        a_np, lse_np = a.cpu().numpy(), lse.cpu().numpy()
        return (a_np, lse_np) if return_lse else a_np
    return (a, lse) if return_lse else a


# ------------------------------------------------------------------------------------------------------------------
# Autograd: triton_flash_attention differentiable
# ------------------------------------------------------------------------------------------------------------------

if available():

    class FlashAttentionFunction(torch.autograd.Function):
        """``A = attention(q, k, v)`` by the forward kernel, with the backward kernels as its gradient.

        ``forward`` saves ``q``, ``k``, ``v``, the output and the logsumexp (``N`` numbers per head, never the
        ``N x M`` probabilities); ``backward`` recomputes ``Y`` tile by tile. A learnable sink (None, a tensor or
        an array) gets its gradient when it is a tensor that requires grad. Use :func:`differentiable_attention`
        (or :func:`flashmath.triton_kernel.triton_flash_attention` on tensors that require grad) rather than
        ``apply``.
        """

        @staticmethod
        def forward(ctx, q, k, v, sink, mask, options):
            a, lse = triton_flash_attention(
                q, k, v, mask=mask, learnable_sink=sink, return_lse=True, **options["forward"]
            )
            ctx.save_for_backward(q, k, v, a, lse)
            ctx.sink, ctx.mask, ctx.options = sink, mask, options
            ctx.mark_non_differentiable(lse)
            return a, lse

        @staticmethod
        def backward(ctx, grad_a, grad_lse):
            q, k, v, a, lse = ctx.saved_tensors
            grad_a = torch.zeros_like(a) if grad_a is None else grad_a.contiguous()
            grads = triton_attention_backward(
                q, k, v, a, lse, grad_a, mask=ctx.mask, learnable_sink=ctx.sink, **ctx.options["backward"]
            )
            dq, dk, dv = grads[:3]
            dsink = grads[3] if ctx.sink is not None and ctx.needs_input_grad[3] else None
            return dq, dk, dv, dsink, None, None


def compile_for_target(q, k, v, *, capability: int, **kwargs):
    """Compile, without running it, the launch that ``triton_flash_attention(q, k, v, **kwargs)`` would make, for
    an NVIDIA GPU of compute capability ``capability`` (80 for an A100, 90 for an H100), on any machine.

    The wrapper builds the launch's arguments as usual; instead of launching, they go through the steps of Triton's
    ``JITFunction.run`` (its binder specializes them: a pointer or an integer divisible by 16 is compiled as such;
    ``_pack_args``), and ``triton.compile`` takes the kernel down to a cubin with Triton's bundled ``ptxas``. Used
    by :func:`flashmath.triton_aot.compile_forward`, which runs it in a child process.

    Args:
        q, k, v: PyTorch tensors on the CPU, as for :func:`triton_flash_attention` (their values are not read).
        capability: compute capability times 10. kwargs: the other arguments of :func:`triton_flash_attention`.

    Returns:
        Triton's ``CompiledKernel`` (``metadata.shared``: shared memory in bytes; ``asm``: "ptx", "cubin", ...).

    Raises:
        RuntimeError: Triton is in its interpreter (this needs ``TRITON_INTERPRET=0`` before ``import triton``).
    """
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    global _fa2_forward, kernel_device
    kernel, device = _fa2_forward, kernel_device
    if not hasattr(kernel, "_pack_args"):
        raise RuntimeError("compiling for a GPU needs TRITON_INTERPRET=0 set before Triton is imported")
    launch: dict = {}

    class StandIn:  # takes the kernel's place for one call of the wrapper: records the launch, runs nothing
        def __getitem__(self, grid):
            def record(*args, **kwargs):
                launch.update(args=args, kwargs=kwargs)

            return record

    _fa2_forward, kernel_device = StandIn(), lambda *_: torch.device("cpu")  # no GPU here, interpreter off
    try:
        triton_flash_attention(q, k, v, **kwargs)  # the returned (uncomputed) output is not used
    finally:
        _fa2_forward, kernel_device = kernel, device
    args, options = launch["args"], dict(launch["kwargs"])
    # as JITFunction.run (Triton 3.9): the options it adds, the binder's specialization, then _pack_args
    options["debug"] = options.get("debug", kernel.debug) or knobs.runtime.debug
    options["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    options["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, parsed = binder(*args, **options)
    parsed, signature, constexprs, attrs = kernel._pack_args(backend, options, bound, specialization, parsed)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=parsed.__dict__)


def differentiable_attention(
    q,
    k,
    v,
    *,
    block_q=None,
    block_k=None,
    scale=None,
    causal=False,
    mask=None,
    return_lse=False,
    dq_mode="separate",
    num_warps=4,
    num_stages=2,
    enable_gqa=False,
    learnable_sink=None,
    rescale_threshold=0.0,
):
    """:func:`flashmath.triton_kernel.triton_flash_attention` on PyTorch tensors, differentiable.

    Arguments and results as the forward's (tensors only); ``dq_mode`` as :func:`triton_attention_backward`.
    ``.backward()`` on the output (or ``torch.autograd.grad``) runs the backward kernels. The logsumexp, if
    returned, is not differentiable. ``enable_gqa`` and ``learnable_sink`` go to both passes (a sink tensor that
    requires grad gets ``d sink``); ``rescale_threshold`` only to the forward: the backward recomputes ``Y`` from
    the logsumexp, which is the same whatever reference the lazy forward kept.

    Raises:
        TypeError: ``q``, ``k`` or ``v`` is not a tensor; otherwise as the forward and the backward.
    """
    require_triton()
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        raise TypeError(
            "differentiable attention needs PyTorch tensors for q, k and v (autograd tracks tensors), "
            f"got {', '.join(type(x).__name__ for x in (q, k, v))}; use torch.from_numpy(x)"
        )
    dq_mode = check_dq_mode(dq_mode)
    shared = dict(block_q=block_q, block_k=block_k, scale=scale, causal=causal, enable_gqa=enable_gqa)
    options = {
        "forward": dict(shared, num_warps=num_warps, num_stages=num_stages, rescale_threshold=rescale_threshold),
        "backward": dict(shared, dq_mode=dq_mode, num_warps=num_warps, num_stages=1),
    }
    a, lse = FlashAttentionFunction.apply(q, k, v, learnable_sink, mask, options)
    return (a, lse) if return_lse else a


# ------------------------------------------------------------------------------------------------------------------
# The kernel beside the numpy loop (chapter 11), read from the sources so that the listing cannot drift from the code
# ------------------------------------------------------------------------------------------------------------------

RULES = (
    "X_ij = Q_i K_j^T",
    "g_new = max(g, rowmax(X_ij))",
    "alpha = exp(g - g_new)",
    "P_ij = exp(X_ij - g_new)",
    "s_new = s * alpha + rowsum(P_ij)",
    "acc_new = acc * alpha + P_ij V_j",
    "A_i = acc / s",
    "lse_i = g + log(s)",
)
"""The update rules, in loop order, that both :mod:`flashmath.flash` and the kernel write above their code."""


VARIANT_FLAGS = ("WINDOW", "SOFTCAP", "HAS_SINK", "LAZY")
"""The kernel's switches for chapter 13's variants (sliding window, softcap, sink) and chapter 7's lazy rescaling,
which ``kernel_source(core=True)`` leaves out."""

_CORE_SIGNATURE_LINE = (
    "    G=1,  # chapter 13: query heads per kv head (its other variants and chapter 7's lazy rescaling: not listed)"
)


def kernel_source(core: bool = False) -> str:
    """The source of the Triton kernel ``_fa2_forward`` (read from this file: works without Triton installed).

    Args:
        core: leave out what chapter 11 does not teach: each ``if WINDOW:``, ``if SOFTCAP:``, ``if HAS_SINK:`` and
            ``if LAZY:`` block (:data:`VARIANT_FLAGS`, all off in chapter 11) with the comment lines just above it,
            and the signature's parameters for them (one line, ``G=1``, stays: ``kv = b // G`` reads it). Every
            other line is the kernel's own, in order.

    Raises:
        LookupError: ``core`` and the kernel's signature no longer has the lines this expects.
    """
    text = inspect.getsource(sys.modules[__name__])
    start = text.index("    @triton.jit\n    def _fa2_forward(")
    end = text.index("\n\n\n", start)
    # one level less indented, as if at module level; without the formatter's marker that keeps the signature's
    # groups of arguments on their lines
    lines = [line[4:].removesuffix("  # fmt: skip") for line in text[start:end].splitlines()]
    return "\n".join(_core_lines(lines) if core else lines)


def _core_lines(lines: list[str]) -> list[str]:
    """``lines`` of the kernel without the variants' blocks and parameters (see :func:`kernel_source`)."""
    try:
        first = next(k for k, line in enumerate(lines) if line.startswith("    G=1,"))
        close = lines.index("):", first)
    except (StopIteration, ValueError):
        raise LookupError("the kernel's signature changed: kernel_source(core=True) expects a 'G=1,' line") from None
    out, k = [*lines[:first], _CORE_SIGNATURE_LINE], close
    flags = "|".join(VARIANT_FLAGS)
    while k < len(lines):
        line = lines[k]
        block = re.match(rf"( *)if ({flags}):", line)
        if not block:
            out.append(line)
            k += 1
            continue
        indent = len(block.group(1))
        while out and out[-1].strip().startswith("#") and len(out[-1]) - len(out[-1].lstrip()) == indent:
            out.pop()  # the block's own comment, just above it
        k += 1
        while k < len(lines) and (not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent):
            k += 1
    return out


def line_for_line() -> list[tuple[str, list[str], list[str]]]:
    """The FlashAttention-2 loop of :mod:`flashmath.flash` beside the Triton kernel, one update rule at a time.

    Returns:
        ``[(rule, numpy lines, triton lines)]`` for each of :data:`RULES`, in loop order, read from the two sources.

    Raises:
        LookupError: a rule is missing from one of the sources (a comment was reworded).
    """
    from flashmath import flash, tiling

    numpy_source = "\n".join(inspect.getsource(f) for f in (tiling.tile_scores, flash.fa2_tile_step, flash.fa2_write))
    numpy_blocks, triton_blocks = rule_blocks(numpy_source, RULES), rule_blocks(kernel_source(), RULES)
    missing = [
        (rule, where)
        for rule in RULES
        for where, blocks in (("flashmath.flash", numpy_blocks), ("the kernel", triton_blocks))
        if not blocks.get(rule)
    ]
    if missing:
        raise LookupError(f"no code under these rule comments: {missing}")
    return [(rule, numpy_blocks[rule], triton_blocks[rule]) for rule in RULES]
