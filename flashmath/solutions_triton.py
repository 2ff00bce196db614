"""Solutions to the exercises of chapters 11, 12 and 14, kept apart from the notebooks.

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


def row_lse(x):
    """Chapter 11 (11.1): the logsumexp of each row of a float32 tensor ``x (R, C)``, one Triton program per row."""
    import torch

    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        row_lse_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


where_it_lives = {
    "Q, K, V (the whole arrays)": "HBM",
    "q_tile": "registers",  # or shared memory: the compiler decides where a tl.dot operand waits
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE (the results)": "HBM",
}
"""Chapter 11 (11.2)."""

recap_quiz = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c"}
"""Chapter 14 (14.1)."""


def flash_row(q_n, K, V, B_c):
    """Chapter 14 (14.2): FlashAttention-2 for one query row; returns ``(a_n, lse_n)``."""
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


def show(name: str | None = None) -> None:
    """Print the solution called ``name`` (one that an exercise's declaration names in this module); without a name,
    the list of names.

    Raises:
        ValueError: no solution has that name.
    """
    text = source_of(name, globals(), solution_names(__name__), "solutions_triton")  # checks the name
    if name == "row_lse":  # the kernel is defined under a "triton installed" guard: print it first
        module = inspect.getsource(sys.modules[__name__])
        start = module.index("    @triton.jit\n    def row_lse_kernel")
        kernel = "\n".join(line[4:] for line in module[start : module.index("\n\n\n", start)].splitlines())
        text = kernel + "\n\n\n" + text
    print(text)


def backward_tiles(q, k, v, a, lse, grad_a, keep, block_k):
    """Chapter 12 (12.1): the backward with key tiles outside, from the saved logsumexp; returns ``(dq, dk, dv)``."""
    N, D = q.shape
    scale = 1 / math.sqrt(D)
    live = keep & ~np.isneginf(lse)[:, None]  # the attended pairs (a fully masked row attends none)
    # D_n = rowsum(dA * A), once, before the key tiles
    d_row = np.sum(grad_a * a, axis=1)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, k.shape[0], block_k):
        c1 = min(c0 + block_k, k.shape[0])
        keep_t = live[:, c0:c1]
        x = scale * q @ k[c0:c1].T  # (N, B_c)
        # Y = exp(X - L): the forward's probabilities, 0 for masked pairs
        y = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0)), 0)
        dv[c0:c1] = y.T @ grad_a  # dV_j = Y^T dA
        dx = np.where(keep_t, y * (grad_a @ v[c0:c1].T - d_row[:, None]), 0)  # dX = Y * (dY - D)
        dk[c0:c1] = scale * dx.T @ q  # dK_j = scale dX^T Q
        dq += scale * dx @ k[c0:c1]  # dQ accumulates over the key tiles
    return dq, dk, dv
