"""Learner-style solutions, set C: chapters 11-14 (exercises 11.1, 11.2, 12.1, 13.1-13.6, 14.1, 14.2).

Written from the notebooks' prompts alone. Each entry: (exercise, kind, description, answer).
"""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the kernels run in the interpreter

import numpy as np
import torch
import triton
import triton.language as tl

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # chapters 11-14 have no 'Predict, then check' cells


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


def _launch(kernel, x):
    """The wrapper of the template (the same for every 11.1 solution, only the kernel changes)."""
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)  # one logsumexp per row
    if x.shape[0] > 0:  # one program per row (no rows: nothing to launch)
        kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


# =====================================================================================================================
# 11.1  my_row_lse(x): Triton kernel, running max and sum per row
# =====================================================================================================================

@triton.jit
def lse_kernel_c1(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "correct", "other=-inf, g_new = max(g, max(x)), s rescaled by exp(g - g_ref) plus the block's sum, L = g + log s")
def my_row_lse_c1(x):
    return _launch(lse_kernel_c1, x)


LOG2E = 1.4426950408889634


@triton.jit
def lse_kernel_c2(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        g_new = tl.maximum(tl.max(x, 0), g)
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        # base 2 like the tutorial: 2^((a - b) log2 e) = e^(a - b)
        s = s * tl.exp2((g - g_ref) * 1.4426950408889634) + tl.sum(tl.exp2((x - g_ref) * 1.4426950408889634), 0)
        g = g_new
    lse = g + tl.log2(s) * 0.6931471805599453  # log s = log2(s) ln 2
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "correct", "the tutorial's base-2 form: exp2 with log2(e) factors, L = g + log2(s) * ln 2")
def my_row_lse_c2(x):
    return _launch(lse_kernel_c2, x)


@triton.jit
def lse_kernel_w1(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=0.0)
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "other=0.0 for the columns past the row (the chapter's 'other (0 here)'), so they add e^(0 - g) to s")
def my_row_lse_w1(x):
    return _launch(lse_kernel_w1, x)


@triton.jit
def lse_kernel_w2(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "forgets to rescale the old s when the max moves: s = s + sum(exp(x - g_ref))")
def my_row_lse_w2(x):
    return _launch(lse_kernel_w2, x)


@triton.jit
def lse_kernel_w3(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "L = log(s) only: forgets to add the running max back")
def my_row_lse_w3(x):
    return _launch(lse_kernel_w3, x)


@triton.jit
def lse_kernel_w4(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = tl.log(s * tl.exp(g))  # the sum of exp(x) is s e^g
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "takes the log of the un-shifted sum, log(s * exp(g)): overflows to inf for values near 1e4")
def my_row_lse_w4(x):
    return _launch(lse_kernel_w4, x)


@triton.jit
def lse_kernel_w5(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g_ref - g) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "rescale factor upside down: s * exp(g_ref - g) instead of exp(g - g_ref)")
def my_row_lse_w5(x):
    return _launch(lse_kernel_w5, x)


@triton.jit
def lse_kernel_w6(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_new) + tl.sum(tl.exp(x - g_new), 0)  # measured against g_new, not g_ref
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "rescales against g_new instead of g_ref: a fully masked row gives exp(-inf - (-inf)) = NaN, not -inf")
def my_row_lse_w6(x):
    return _launch(lse_kernel_w6, x)


@triton.jit
def lse_kernel_w7(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g), 0)  # the block's terms against the old max
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "the block's terms measured against the old max g instead of g_ref: exp(x - g)")
def my_row_lse_w7(x):
    return _launch(lse_kernel_w7, x)


# =====================================================================================================================
# 11.2  where_it_lives
# =====================================================================================================================

_WHERE = {
    "Q, K, V (the whole arrays)": "HBM",
    "q_tile": "shared memory",
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE (the results)": "HBM",
}
SOLUTIONS.append(("11.2", "correct", "HBM for the arrays, shared memory for the k/v tiles and q_tile, registers for "
                  "the score tile, m_i, l_i, acc", dict(_WHERE)))
SOLUTIONS.append(("11.2", "correct", "same, with q_tile in registers (the other accepted on-chip answer)",
                  {**_WHERE, "q_tile": "registers"}))
SOLUTIONS.append(("11.2", "wrong", "acc in shared memory: thought a (BLOCK_M, Dv) accumulator is too big for registers",
                  {**_WHERE, "acc": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "k_tile, v_tile in HBM: they come from HBM, so I answered HBM",
                  {**_WHERE, "k_tile, v_tile": "HBM"}))
SOLUTIONS.append(("11.2", "wrong", "x_tile, p_tile in shared memory (FlashAttention-1's 'the scores stay in SRAM')",
                  {**_WHERE, "x_tile, p_tile": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "m_i, l_i in HBM, as FlashAttention-1 writes its l and m back to HBM",
                  {**_WHERE, "m_i, l_i": "HBM"}))
SOLUTIONS.append(("11.2", "wrong", "A, LSE in registers: the results are computed on chip",
                  {**_WHERE, "A, LSE (the results)": "registers"}))


# =====================================================================================================================
# 12.1  my_backward(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv), key tiles outside, numpy
# =====================================================================================================================

def _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, *, mistake=None):
    """A straightforward key-tiles-outside backward; `mistake` switches in one learner mistake (for the wrong ones)."""
    q, k, v, a, lse, grad_a = (np.asarray(t, dtype=np.float64) for t in (q, k, v, a, lse, grad_a))
    keep = np.asarray(keep, dtype=bool)
    N, D = q.shape
    M = k.shape[0]
    scale = 1.0 / math.sqrt(D)
    if mistake == "D_total":
        delta = np.full(N, np.sum(grad_a * a))
    else:
        delta = np.sum(grad_a * a, axis=1)  # D = rowsum(dA * A)
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    if mistake == "skip_last":
        starts = range(0, M - block_k + 1, block_k)
    else:
        starts = range(0, M, block_k)
    for c0 in starts:
        c1 = min(c0 + block_k, M)
        if mistake == "bounds":
            c1 = min(c0 + block_k - 1, M)
        kt, vt = k[c0:c1], v[c0:c1]
        keep_t = keep[:, c0:c1] & ~np.isneginf(lse)[:, None]
        used = keep_t.any(axis=0)  # keys that no row attends are never touched (padding may hold anything)
        kt = np.where(used[:, None], kt, 0.0)
        vt = np.where(used[:, None], vt, 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            x = scale * (q @ kt.T)
            if mistake == "no_mask":
                y = np.exp(x - lse[:, None])
            elif mistake == "times_keep":
                y = np.exp(x - lse[:, None]) * keep[:, c0:c1]
            elif mistake == "tile_softmax":
                xm = np.where(keep_t, x, -np.inf)
                gm = xm.max(axis=1, keepdims=True)
                gm = np.where(np.isneginf(gm), 0.0, gm)
                e = np.where(keep_t, np.exp(xm - gm), 0.0)
                ssum = e.sum(axis=1, keepdims=True)
                y = np.where(ssum > 0, e / np.where(ssum > 0, ssum, 1.0), 0.0)
            else:
                y = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0.0)), 0.0)
        if mistake == "dv_scaled":
            dv[c0:c1] = scale * (y.T @ grad_a)
        else:
            dv[c0:c1] = y.T @ grad_a
        dy = grad_a @ vt.T
        if mistake == "D_tile":
            d_here = np.sum(y * dy, axis=1)
        else:
            d_here = delta
        dx = y * (dy - d_here[:, None])
        if mistake not in ("no_mask", "times_keep"):
            dx = np.where(keep_t, dx, 0.0)
        if mistake == "dx_scaled":
            dx = scale * dx
        if mistake == "dq_times_sqrt":
            dq += math.sqrt(D) * (dx @ kt)
        else:
            dq += scale * (dx @ kt)
        if mistake == "dk_unscaled":
            dk[c0:c1] = dx.T @ q
        else:
            dk[c0:c1] = scale * (dx.T @ q)
    return dq, dk, dv


@sol("12.1", "correct", "key tiles outside; Y = exp(X - L) selected with np.where where kept; D = rowsum(dA*A) first; "
     "dV, dK per tile, dQ accumulated; keys no row attends zeroed before the products")
def my_backward_c1(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k)


@sol("12.1", "correct", "scores set to -inf where masked, L of fully masked rows replaced by 0 so exp gives 0; "
     "dX selected; dQ in a second sweep over the key tiles (the 'separate' mode)")
def my_backward_c2(q, k, v, a, lse, grad_a, keep, block_k):
    q, k, v, a, grad_a = (np.asarray(t, dtype=np.float64) for t in (q, k, v, a, grad_a))
    lse = np.asarray(lse, dtype=np.float64)
    keep = np.asarray(keep, dtype=bool)
    N, D = q.shape
    M = k.shape[0]
    scale = D ** -0.5
    delta = np.einsum("nd,nd->n", grad_a, a)
    lse_safe = np.where(np.isneginf(lse), 0.0, lse)
    tiles = [(c0, min(c0 + block_k, M)) for c0 in range(0, M, block_k)]
    dk = np.zeros((M, D))
    dv = np.zeros_like(v)
    dx_tiles = []
    for c0, c1 in tiles:
        kp = keep[:, c0:c1]
        attended = kp.any(axis=0)
        kt = np.where(attended[:, None], k[c0:c1], 0.0)
        vt = np.where(attended[:, None], v[c0:c1], 0.0)
        x = np.where(kp, scale * q @ kt.T, -np.inf)
        y = np.exp(x - lse_safe[:, None])  # exp(-inf) = 0 at masked pairs
        dv[c0:c1] = np.einsum("nm,nd->md", y, grad_a)
        dx = np.where(kp, y * (grad_a @ vt.T - delta[:, None]), 0.0)
        dk[c0:c1] = scale * dx.T @ q
        dx_tiles.append((dx, kt))
    dq = np.zeros_like(q)
    for dx, kt in dx_tiles:  # second sweep for dQ
        dq = dq + scale * dx @ kt
    return dq, dk, dv


@sol("12.1", "correct", "row-by-row loop inside each key tile (no big matrix products), selecting masked pairs away")
def my_backward_c3(q, k, v, a, lse, grad_a, keep, block_k):
    q, k, v, a, lse, grad_a = (np.asarray(t, dtype=np.float64) for t in (q, k, v, a, lse, grad_a))
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    Drow = (grad_a * a).sum(-1)
    for c0 in range(0, M, block_k):
        c1 = min(M, c0 + block_k)
        for n in range(N):
            kept = np.flatnonzero(keep[n, c0:c1]) + c0
            if kept.size == 0 or np.isneginf(lse[n]):
                continue
            y = np.exp(scale * (k[kept] @ q[n]) - lse[n])  # (m,)
            dv[kept] += np.outer(y, grad_a[n])
            dx = y * (v[kept] @ grad_a[n] - Drow[n])
            dq[n] += scale * dx @ k[kept]
            dk[kept] += scale * np.outer(dx, q[n])
    return dq, dk, dv


@sol("12.1", "wrong", "multiplies dX by the scale too, then dQ and dK by the scale again (scale applied twice)")
def my_backward_w1(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="dx_scaled")


@sol("12.1", "wrong", "dK = dX^T Q without the scale (only dQ scaled)")
def my_backward_w2(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="dk_unscaled")


@sol("12.1", "wrong", "dQ multiplied by sqrt(D) instead of 1/sqrt(D)")
def my_backward_w3(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="dq_times_sqrt")


@sol("12.1", "wrong", "D = sum(dA * A) over the whole array (one number) instead of one per row")
def my_backward_w4(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="D_total")


@sol("12.1", "wrong", "D computed per key tile as rowsum(Y_ij * dY_ij) of this tile only, instead of over the whole row")
def my_backward_w5(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="D_tile")


@sol("12.1", "wrong", "ignores the keep mask: Y = exp(X - L) everywhere")
def my_backward_w6(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="no_mask")


@sol("12.1", "wrong", "multiplies Y by keep instead of selecting: a fully masked row gives inf * 0 = NaN")
def my_backward_w7(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="times_keep")


@sol("12.1", "wrong", "loops range(0, M - block_k + 1, block_k): the last, shorter key tile is skipped")
def my_backward_w8(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="skip_last")


@sol("12.1", "wrong", "tile end c1 = c0 + block_k - 1 (inclusive end used with an exclusive slice): last key of each tile lost")
def my_backward_w9(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="bounds")


@sol("12.1", "wrong", "dV scaled by 1/sqrt(D) as well (the scale put in all three gradients)")
def my_backward_w10(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="dv_scaled")


@sol("12.1", "wrong", "recomputes Y as a softmax within each key tile instead of exp(X - L) with the saved logsumexp")
def my_backward_w11(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mistake="tile_softmax")


# =====================================================================================================================
# 13.1  my_window(q_idx, kv_idx, N, M, left, right)
# =====================================================================================================================

@sol("13.1", "correct", "p = q + M - N; (kv >= p - left) & (kv <= p + right), None or -1 = unbounded")
def my_window_c1(q_idx, kv_idx, N, M, left, right):
    p = q_idx + (M - N)
    keep = np.ones(np.broadcast(q_idx, kv_idx).shape, dtype=bool)
    if left is not None and left != -1:
        keep &= kv_idx >= p - left
    if right is not None and right != -1:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "correct", "diagonal form: d = kv - q - (M - N) in [-left, right], None as infinity")
def my_window_c2(q_idx, kv_idx, N, M, left, right):
    d = np.asarray(kv_idx) - np.asarray(q_idx) - (M - N)
    lo = -np.inf if left is None or left < 0 else -left
    hi = np.inf if right is None or right < 0 else right
    return (d >= lo) & (d <= hi)


def _window_fixed(q_idx, kv_idx, lo_fn, hi_fn, left, right):
    keep = np.ones(np.broadcast(q_idx, kv_idx).shape, dtype=bool)
    if left is not None and left != -1:
        keep &= lo_fn(left)
    if right is not None and right != -1:
        keep &= hi_fn(right)
    return keep


@sol("13.1", "wrong", "top-left aligned: p = q_idx (forgot the M - N shift)")
def my_window_w1(q_idx, kv_idx, N, M, left, right):
    p = q_idx
    return _window_fixed(q_idx, kv_idx, lambda l: kv_idx >= p - l, lambda r: kv_idx <= p + r, left, right)


@sol("13.1", "wrong", "right edge exclusive: kv < p + right")
def my_window_w2(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    return _window_fixed(q_idx, kv_idx, lambda l: kv_idx >= p - l, lambda r: kv_idx < p + r, left, right)


@sol("13.1", "wrong", "left edge exclusive: kv > p - left")
def my_window_w3(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    return _window_fixed(q_idx, kv_idx, lambda l: kv_idx > p - l, lambda r: kv_idx <= p + r, left, right)


@sol("13.1", "wrong", "alignment shift with the wrong sign: p = q + N - M")
def my_window_w4(q_idx, kv_idx, N, M, left, right):
    p = q_idx + N - M
    return _window_fixed(q_idx, kv_idx, lambda l: kv_idx >= p - l, lambda r: kv_idx <= p + r, left, right)


@sol("13.1", "wrong", "left and right swapped: kv >= p - right and kv <= p + left")
def my_window_w5(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    return _window_fixed(q_idx, kv_idx, lambda r: kv_idx <= p + r, lambda l: kv_idx >= p - l, left, right)


# =====================================================================================================================
# 13.2  my_document(q_idx, kv_idx, doc)
# =====================================================================================================================

@sol("13.2", "correct", "(doc[q] == doc[kv]) & (kv <= q)")
def my_document_c1(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "key strictly before the query (kv < q): a token does not see itself")
def my_document_w1(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx < q_idx)


@sol("13.2", "wrong", "same document only, forgot the causal condition")
def my_document_w2(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return doc[q_idx] == doc[kv_idx]


@sol("13.2", "wrong", "causal condition reversed: kv >= q")
def my_document_w3(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx >= q_idx)


@sol("13.2", "wrong", "'or' instead of 'and': same document | not after the query")
def my_document_w4(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) | (kv_idx <= q_idx)


@sol("13.2", "wrong", "misreads doc as boundaries (like cu_seqlens): document = searchsorted(doc, index, 'right')")
def my_document_w5(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    dq = np.searchsorted(doc, q_idx, side="right")
    dk = np.searchsorted(doc, kv_idx, side="right")
    return (dq == dk) & (kv_idx <= q_idx)


# =====================================================================================================================
# 13.3  my_softcap(qk, scale, cap)
# =====================================================================================================================

@sol("13.3", "correct", "cap * tanh(scale * qk / cap)")
def my_softcap_c1(qk, scale, cap):
    return cap * np.tanh(scale * qk / cap)


@sol("13.3", "correct", "scaled first into x, then np.tanh(x / cap) * cap")
def my_softcap_c2(qk, scale, cap):
    x = np.asarray(qk, dtype=np.float64) * scale
    return np.tanh(x / cap) * cap


@sol("13.3", "correct", "tanh written out with exp: cap * (1 - 2 / (exp(2x/cap) + 1)), x = scale * qk")
def my_softcap_c3(qk, scale, cap):
    x = np.asarray(qk, dtype=np.float64) * scale
    with np.errstate(over="ignore"):
        return cap * (1.0 - 2.0 / (np.exp(2.0 * x / cap) + 1.0))


@sol("13.3", "wrong", "softcap on the raw dot product: forgot the scale")
def my_softcap_w1(qk, scale, cap):
    return cap * np.tanh(qk / cap)


@sol("13.3", "wrong", "scale applied after the cap: scale * cap * tanh(qk / cap)")
def my_softcap_w2(qk, scale, cap):
    return scale * cap * np.tanh(qk / cap)


@sol("13.3", "wrong", "forgot to divide inside the tanh: cap * tanh(scale * qk)")
def my_softcap_w3(qk, scale, cap):
    return cap * np.tanh(scale * qk)


@sol("13.3", "wrong", "forgot the factor cap outside: tanh(scale * qk / cap)")
def my_softcap_w4(qk, scale, cap):
    return np.tanh(scale * qk / cap)


@sol("13.3", "wrong", "hard cap: clips the scaled score to [-cap, cap] instead of tanh")
def my_softcap_w5(qk, scale, cap):
    return np.clip(scale * qk, -cap, cap)


@sol("13.3", "wrong", "divides by scale (read it as sqrt(D)): cap * tanh(qk / scale / cap)")
def my_softcap_w6(qk, scale, cap):
    return cap * np.tanh(qk / scale / cap)


# =====================================================================================================================
# 13.4  my_alibi(score, slope, q_idx, kv_idx, N, M)
# =====================================================================================================================

@sol("13.4", "correct", "score - slope * |q + M - N - kv|")
def my_alibi_c1(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "bias added with the wrong sign: + slope * distance")
def my_alibi_w1(score, slope, q_idx, kv_idx, N, M):
    return score + slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "distance top-left aligned: |q - kv|")
def my_alibi_w2(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx - kv_idx)


@sol("13.4", "wrong", "no absolute value (the causal ALiBi form): -slope * (q + M - N - kv)")
def my_alibi_w3(score, slope, q_idx, kv_idx, N, M):
    return score - slope * (q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "treats slope as the exponent of the explorer (slope 2^-param): -2^-slope * distance")
def my_alibi_w4(score, slope, q_idx, kv_idx, N, M):
    return score - 2.0 ** (-slope) * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "alignment shift with the wrong sign: |q + N - M - kv|")
def my_alibi_w5(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + N - M - kv_idx)


# =====================================================================================================================
# 13.5  my_tile_kind(r0, r1, c0, c1, N, M): 0 empty, 1 partial, 2 full (bottom-right causal)
# =====================================================================================================================

@sol("13.5", "correct", "from the corners: empty if c0 > r1 - 1 + M - N, full if c1 - 1 <= r0 + M - N, else partial")
def my_tile_kind_c1(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "correct", "brute force: build the tile's causal keep mask and test any()/all()")
def my_tile_kind_c2(r0, r1, c0, c1, N, M):
    n = np.arange(r0, r1)[:, None]
    m = np.arange(c0, c1)[None, :]
    keep = m <= n + (M - N)
    if not keep.any():
        return 0
    return 2 if keep.all() else 1


@sol("13.5", "correct", "diagonal range of the tile: d = m - n - (M - N) from c0-(r1-1)-(M-N) to (c1-1)-r0-(M-N); "
     "all > 0 empty, all <= 0 full")
def my_tile_kind_c3(r0, r1, c0, c1, N, M):
    d_lo = c0 - (r1 - 1) - (M - N)
    d_hi = (c1 - 1) - r0 - (M - N)
    return 0 if d_lo > 0 else (2 if d_hi <= 0 else 1)


@sol("13.5", "wrong", "emptiness from the top-left corner only: empty if c0 > r0 + M - N")
def my_tile_kind_w1(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r0 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "fullness from the bottom-right corner only: full if c1 - 1 <= r1 - 1 + M - N")
def my_tile_kind_w2(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r1 - 1 + off:
        return 2
    return 1


@sol("13.5", "wrong", "top-left causal (offset 0) instead of bottom-right")
def my_tile_kind_w3(r0, r1, c0, c1, N, M):
    if c0 > r1 - 1:
        return 0
    if c1 - 1 <= r0:
        return 2
    return 1


@sol("13.5", "wrong", "uses the exclusive ends as if inclusive: empty if c0 > r1 + M - N")
def my_tile_kind_w4(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "full test with the exclusive end c1: full if c1 <= r0 + M - N")
def my_tile_kind_w5(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "codes for partial and full swapped (returns 1 for full, 2 for partial)")
def my_tile_kind_w6(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 1
    return 2


# =====================================================================================================================
# 13.6  my_page_gather(pages, block_table, b, t)
# =====================================================================================================================

@sol("13.6", "correct", "pages[block_table[b, t // page_size], t % page_size] with page_size = pages.shape[1]")
def my_page_gather_c1(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "correct", "divmod(t, page_size), then the physical page from the block table row of b")
def my_page_gather_c2(pages, block_table, b, t):
    pages = np.asarray(pages)
    logical, row = divmod(t, pages.shape[-2])
    physical = np.asarray(block_table)[b][logical]
    return pages[physical, row, :]


@sol("13.6", "wrong", "block table indexed the wrong way round: block_table[t // page_size, b]")
def my_page_gather_w1(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[t // page_size, b], t % page_size]


@sol("13.6", "wrong", "page size read from the last axis (that is D)")
def my_page_gather_w2(pages, block_table, b, t):
    page_size = pages.shape[-1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "wrong", "ignores the block table: uses the logical page t // page_size as the physical one")
def my_page_gather_w3(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[t // page_size, t % page_size]


@sol("13.6", "wrong", "page and row swapped: page from t % page_size, row t // page_size")
def my_page_gather_w4(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t % page_size], t // page_size]


@sol("13.6", "wrong", "takes the page size from the block table (max_pages) instead of from pages")
def my_page_gather_w5(pages, block_table, b, t):
    page_size = block_table.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


# =====================================================================================================================
# 14.1  recap quiz
# =====================================================================================================================

_QUIZ = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c"}
SOLUTIONS.append(("14.1", "correct", "all seven right", dict(_QUIZ)))
SOLUTIONS.append(("14.1", "wrong", "Q4 (a): a fully masked row gives NaN from -inf - (-inf)", {**_QUIZ, 4: "a"}))
SOLUTIONS.append(("14.1", "wrong", "Q5 (a): each key/value tile read once in all (confused with the FA1 order)",
                  {**_QUIZ, 5: "a"}))
SOLUTIONS.append(("14.1", "wrong", "Q7 (b): acc lives in shared memory", {**_QUIZ, 7: "b"}))
SOLUTIONS.append(("14.1", "wrong", "Q1 (a): s_i is already the softmax denominator", {**_QUIZ, 1: "a"}))
SOLUTIONS.append(("14.1", "wrong", "Q3 (b): acc is a more accurate average", {**_QUIZ, 3: "b"}))
SOLUTIONS.append(("14.1", "wrong", "Q2 (a): subtracting the max changes the probabilities slightly", {**_QUIZ, 2: "a"}))
SOLUTIONS.append(("14.1", "wrong", "Q6 (b): Flash-Decoding does fewer operations", {**_QUIZ, 6: "b"}))


# =====================================================================================================================
# 14.2  my_flash_row(q_n, K, V, B_c) -> (A_n, L_n)
# =====================================================================================================================

@sol("14.2", "correct", "loop over key tiles: g_new = max(g, max x), rescale s and acc by exp(g - g_new), one division "
     "at the end, L = g + log s")
def my_flash_row_c1(q_n, K, V, B_c):
    q_n = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    M, D = K.shape
    g, s = -np.inf, 0.0
    acc = np.zeros(V.shape[1])
    for c0 in range(0, M, B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        p = np.exp(x - g_new)
        corr = np.exp(g - g_new)
        s = s * corr + p.sum()
        acc = acc * corr + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, g + np.log(s)


@sol("14.2", "correct", "each tile's own state (g_t, s_t, acc_t) merged into the running one with chapter 2's rule")
def my_flash_row_c2(q_n, K, V, B_c):
    scale = 1.0 / math.sqrt(len(q_n))
    g, s, acc = -math.inf, 0.0, None
    for c0 in range(0, K.shape[0], B_c):
        c1 = min(c0 + B_c, K.shape[0])
        x = scale * (K[c0:c1].astype(np.float64) @ q_n.astype(np.float64))
        g_t = float(np.max(x))
        p = np.exp(x - g_t)
        s_t, acc_t = float(p.sum()), p @ V[c0:c1].astype(np.float64)
        if acc is None:
            g, s, acc = g_t, s_t, acc_t
            continue
        g_new = max(g, g_t)
        a_old, a_new = math.exp(g - g_new), math.exp(g_t - g_new)
        s = s * a_old + s_t * a_new
        acc = acc * a_old + acc_t * a_new
        g = g_new
    return acc / s, g + math.log(s)


@sol("14.2", "correct", "same loop with np.maximum / einsum, scale folded into a copy of q (q_n * scale, not in place)")
def my_flash_row_c3(q_n, K, V, B_c):
    qs = q_n * (1.0 / np.sqrt(q_n.shape[-1]))  # a new array, q_n untouched
    g = np.float64(-np.inf)
    s = np.float64(0.0)
    acc = np.zeros(V.shape[-1], dtype=np.float64)
    start = 0
    while start < K.shape[0]:
        stop = min(start + B_c, K.shape[0])
        x = np.einsum("md,d->m", K[start:stop], qs).astype(np.float64)
        g_new = np.maximum(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = alpha * s + p.sum()
        acc = alpha * acc + np.einsum("m,mv->v", p, V[start:stop].astype(np.float64))
        g = g_new
        start = stop
    return acc / s, g + np.log(s)


def _flash_row_template(q_n, K, V, B_c, *, mistake=None):
    q_n = np.asarray(q_n)
    M, D = K.shape
    if mistake == "inplace":
        q_n /= np.sqrt(D)  # fold the scale into q once
        scale = 1.0
    else:
        scale = 1.0 / np.sqrt(D)
    g = 0.0 if mistake == "g0" else -np.inf
    s = 0.0
    acc = np.zeros(V.shape[1])
    stop = M - B_c + 1 if mistake == "skip_last" else M
    for c0 in range(0, stop, B_c):
        kt, vt = K[c0:c0 + B_c].astype(np.float64), V[c0:c0 + B_c].astype(np.float64)
        x = kt @ q_n.astype(np.float64)
        if mistake != "no_scale":
            x = x * scale
        if mistake == "no_max":
            p = np.exp(x)
            s = s + p.sum()
            acc = acc + p @ vt
            continue
        g_new = max(g, x.max())
        p = np.exp(x - g_new)
        corr = np.exp(g - g_new)
        if mistake == "no_rescale":
            s = s + p.sum()
            acc = acc + p @ vt
        elif mistake == "acc_not_rescaled":
            s = s * corr + p.sum()
            acc = acc + p @ vt
        elif mistake == "divide_each_tile":
            s = s * corr + p.sum()
            acc = (acc * corr + p @ vt) / s
        elif mistake == "fa1_normalised":
            s_new = s * corr + p.sum()
            acc = (acc * s * corr + p @ vt) / s_new
            s = s_new
        else:
            s = s * corr + p.sum()
            acc = acc * corr + p @ vt
        g = g_new
    if mistake == "no_max":
        return acc / s, np.log(s)
    if mistake in ("divide_each_tile", "fa1_normalised"):
        a_out = acc
    else:
        a_out = acc / s
    if mistake == "L_no_g":
        return a_out, np.log(s)
    if mistake == "L_overflow":
        with np.errstate(over="ignore"):
            return a_out, np.log(s * np.exp(g))
    return a_out, g + np.log(s)


@sol("14.2", "wrong", "divides acc by s at every tile (and not at the end), but keeps rescaling it as if unnormalised")
def my_flash_row_w1(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="divide_each_tile")


@sol("14.2", "wrong", "FlashAttention-1 form: keeps the normalised A' and divides at every tile; output right, but the "
     "prompt asks for an unnormalised accumulator and one division at the end")
def my_flash_row_w2(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="fa1_normalised")


@sol("14.2", "wrong", "no rescale when the max moves: s and acc just add the new tile")
def my_flash_row_w3(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="no_rescale")


@sol("14.2", "wrong", "rescales s but forgets to rescale acc")
def my_flash_row_w4(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="acc_not_rescaled")


@sol("14.2", "wrong", "L = log(s) without adding g")
def my_flash_row_w5(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="L_no_g")


@sol("14.2", "wrong", "L = log(s * exp(g)): overflows for scores near 2000")
def my_flash_row_w6(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="L_overflow")


@sol("14.2", "wrong", "no running max at all: exp(x) directly, L = log(sum)")
def my_flash_row_w7(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="no_max")


@sol("14.2", "wrong", "forgot the 1/sqrt(D) scale on the scores")
def my_flash_row_w8(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="no_scale")


@sol("14.2", "wrong", "folds the scale into q in place (q_n /= sqrt(D)): the caller's array is changed")
def my_flash_row_w9(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="inplace")


@sol("14.2", "wrong", "range(0, M - B_c + 1, B_c): the shorter last tile is skipped")
def my_flash_row_w10(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="skip_last")


@sol("14.2", "wrong", "running max starts at 0 instead of -inf: scores near -1000 underflow, s = 0, 0/0")
def my_flash_row_w11(q_n, K, V, B_c):
    return _flash_row_template(q_n, K, V, B_c, mistake="g0")
