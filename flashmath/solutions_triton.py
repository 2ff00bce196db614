"""Solutions to the exercises of chapters 11, 12 and 15, kept apart from the notebooks.

Try the exercise first. In a notebook: ``from flashmath import solutions_triton``, then
``solutions_triton.show("row_lse")``. The Triton solution needs the ``triton`` extra (PyTorch and Triton); the
others are plain numpy.
"""

from __future__ import annotations

import inspect
import math
import sys

import numpy as np

from flashmath.exercises import solution_names
from flashmath.solutions import source_of

#: ``show`` and every solution that an exercise's declaration names here (``solutions="flashmath.solutions_triton"``).
__all__ = ["show", *solution_names(__name__)]

from flashmath import triton_kernel  # without a GPU, importing it switches Triton to its interpreter

if triton_kernel.available():
    import triton
    import triton.language as tl

    @triton.jit
    def row_lse_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
        """Chapter 11 (11.1): one program per row of X; L[row] = logsumexp of the row, streamed BLOCK at a time."""
        row = tl.program_id(0)
        g = tl.full([1], float("-inf"), tl.float32)  # running max, g_0 = -inf
        s = tl.zeros([1], tl.float32)  # running sum, s_0 = 0
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            # past the end of the row: -inf, whose weight exp(-inf - g) is 0
            x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            g_new = tl.maximum(g, tl.max(x, 0))
            g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)  # nothing seen yet: measure against 0, not -inf
            # s_new = s * exp(g - g_new) + sum_j exp(x_j - g_new)
            s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
            g = g_new
        # L = g + log(s); -inf for a row of -inf (log is never taken of 0); NaN stays NaN (NaN > 0 is false)
        lse = tl.where(s == 0, float("-inf"), g + tl.log(tl.where(s == 0, 1.0, s)))
        tl.store(L + row + tl.arange(0, 1), lse)

    @triton.jit
    def backward_dq_kernel(Q, K, V, dA, LSE, Delta, Keep, dQ, N, M, D, scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
        """Chapter 12 (12.2): one program per query tile; dQ_i = scale sum_j dX_ij K_j, on chip for the sweep."""
        i = tl.program_id(0)  # this program's query tile
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)  # (B_r,) its queries n
        d = tl.arange(0, BLOCK_D)  # the features, D padded to BLOCK_D
        inside = (rows[:, None] < N) & (d[None, :] < D)
        q_tile = tl.load(Q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)  # Q_i (B_r, D)
        da_tile = tl.load(dA + rows[:, None] * D + d[None, :], mask=inside, other=0.0)  # dA_i (B_r, D)
        lse = tl.load(LSE + rows, mask=rows < N, other=float("-inf"))  # (B_r,) L_i
        delta = tl.load(Delta + rows, mask=rows < N, other=0.0)  # (B_r,) Delta_i
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # dQ_i, on chip for the whole sweep
        for c0 in range(0, M, BLOCK_N):  # key tile j starts at key c0 = j B_c: every key once
            cols = c0 + tl.arange(0, BLOCK_N)  # (B_c,) the tile's keys: the last tile may reach past M
            kv_inside = (cols[:, None] < M) & (d[None, :] < D)
            k_tile = tl.load(K + cols[:, None] * D + d[None, :], mask=kv_inside, other=0.0)  # K_j (B_c, D)
            v_tile = tl.load(V + cols[:, None] * D + d[None, :], mask=kv_inside, other=0.0)  # V_j (B_c, D)
            keep = tl.load(Keep + rows[:, None] * M + cols[None, :],
                           mask=(rows[:, None] < N) & (cols[None, :] < M), other=0) != 0  # (B_r, B_c)  # fmt: skip
            x_tile = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * scale  # X_ij = scale Q_i K_j^T
            # Y_ij = exp(X_ij - L_i), selected to 0 at the masked pairs (where L may be -inf: exp(+inf) = inf)
            y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0)
            dy_tile = tl.dot(da_tile, tl.trans(v_tile), input_precision="ieee")  # dY_ij = dA_i V_j^T
            # dX_ij = Y_ij * (dY_ij - Delta_i): 0 wherever Y is 0
            dx_tile = y_tile * (dy_tile - delta[:, None])
            # dQ_i += dX_ij K_j
            dq += tl.dot(dx_tile, k_tile, input_precision="ieee")
        # dQ_i = scale sum_j dX_ij K_j
        dq = dq * scale
        tl.store(dQ + rows[:, None] * D + d[None, :], dq, mask=inside)


def row_lse(x):
    """Chapter 11 (11.1): the logsumexp of each row of a float32 tensor ``x (R, C)``, one Triton program per row."""
    import torch

    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        row_lse_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


def backward_dq(q, k, v, a, lse, grad_a, keep):
    """Chapter 12 (12.2): ``dQ`` of attention by a Triton kernel, one program per query tile of 16 rows; float32
    tensors ``q``, ``k``, ``v``, ``a``, ``grad_a`` ``(N, D)`` / ``(M, D)``, ``lse (N,)``, ``keep (N, M)`` boolean."""
    import torch

    N, D = q.shape
    M = k.shape[0]
    delta = (grad_a * a).sum(dim=1)  # Delta_n = rowsum(dA * A), once, before the key tiles (_bwd_delta's work)
    dq = torch.empty_like(q)
    backward_dq_kernel[(triton.cdiv(N, 16),)](
        q, k, v, grad_a, lse, delta, keep.to(torch.uint8), dq, N, M, D, D**-0.5,
        BLOCK_M=16, BLOCK_N=16, BLOCK_D=max(16, triton.next_power_of_2(D)),
    )  # fmt: skip
    return dq


where_it_lives = {
    "Q, K, V": "HBM",
    "q_tile": "registers",  # or shared memory: the compiler decides where a tl.dot operand waits
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE": "HBM",
}
"""Chapter 11 (11.2)."""

recap_quiz = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c", 8: "c", 9: "a", 10: "b"}
"""Chapter 15 (15.1)."""


def flash_row(q_n, K, V, B_c):
    """Chapter 15 (15.2): FlashAttention-2 for one query row; returns ``(a_n, lse_n)``."""
    q_n, K, V = (np.asarray(a, dtype=np.float64) for a in (q_n, K, V))
    g, s, acc = -math.inf, 0.0, np.zeros(V.shape[1])  # g = -inf, s = 0, acc = s A' = 0
    for c0 in range(0, len(K), B_c):
        x = K[c0 : c0 + B_c] @ q_n / math.sqrt(len(q_n))  # scores of the key tile, (B_c,)
        g_new = max(g, float(x.max()))  # g_new = max(g, rowmax(X))
        alpha = math.exp(g - g_new)  # the rescale of everything so far (0 at the first tile)
        p = np.exp(x - g_new)  # P = exp(X - g_new), every exponent <= 0
        s = s * alpha + p.sum()  # s_new = s alpha + rowsum(P)
        acc = acc * alpha + p @ V[c0 : c0 + B_c]  # acc_new = acc alpha + P V: no division
        g = g_new
    return acc / s, g + math.log(s)  # one division at the end; lse = g + log(s)


_KERNELS = {"row_lse": "row_lse_kernel", "backward_dq": "backward_dq_kernel"}  # a solution's Triton kernel


def show(name: str | None = None) -> None:
    """Print the solution called ``name`` (one that an exercise's declaration names in this module); without a name,
    the list of names.

    Raises:
        ValueError: no solution has that name.
    """
    text = source_of(name, globals(), solution_names(__name__), "solutions_triton")  # checks the name
    if name in _KERNELS:  # the kernel is defined under a "triton installed" guard: print it first
        module = inspect.getsource(sys.modules[__name__])
        start = module.index(f"    @triton.jit\n    def {_KERNELS[name]}(")
        end = min(module.index(end, start) for end in ("\n\n\n", "\n\n    @triton.jit") if end in module[start:])
        kernel = "\n".join(line[4:].removesuffix("  # fmt: skip") for line in module[start:end].splitlines())
        text = kernel + "\n\n\n" + text.replace("  # fmt: skip", "")
    print(text)


def backward_tiles(q, k, v, a, lse, grad_a, keep, block_k):
    """Chapter 12 (12.1): the backward with key tiles outside, from the saved logsumexp; returns ``(dq, dk, dv)``."""
    N, D = q.shape
    scale = 1 / math.sqrt(D)
    live = keep & ~np.isneginf(lse)[:, None]  # the attended pairs (a fully masked row attends none)
    # Delta_n = rowsum(dA * A), once, before the key tiles
    d_row = np.sum(grad_a * a, axis=1)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, k.shape[0], block_k):
        c1 = min(c0 + block_k, k.shape[0])
        keep_t = live[:, c0:c1]
        x = scale * q @ k[c0:c1].T  # (N, B_c)
        # Y = exp(X - L): the forward's probabilities, 0 for masked pairs
        y = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0)), 0)
        dv[c0:c1] = y.T @ grad_a  # dV_j = Y^T dA
        dx = np.where(keep_t, y * (grad_a @ v[c0:c1].T - d_row[:, None]), 0)  # dX = Y * (dY - Delta)
        dk[c0:c1] = scale * dx.T @ q  # dK_j = scale dX^T Q
        dq += scale * dx @ k[c0:c1]  # dQ accumulates over the key tiles
    return dq, dk, dv
