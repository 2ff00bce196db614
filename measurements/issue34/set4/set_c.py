"""Learner set C: solutions to exercises 11.1, 11.2, 12.1, 13.1-13.6, 14.1, 14.2, written from the prompts alone."""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
import triton
import triton.language as tl

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


# ======================================================================================================
# 11.1  row logsumexp in Triton
# ======================================================================================================

@triton.jit
def lse_kernel_ok(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "correct", "fills the four TODOs: other=-inf, running max, s rescaled by exp(g - g_ref), g + log(s)")
def my_row_lse_ok(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_ok[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_pad0(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "loads the columns past the end of the row as 0 (other=0.0), so they add exp(0 - g) to s")
def my_row_lse_pad0(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_pad0[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_flip(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        alpha = tl.exp(g_ref - g)  # rescale factor (sign swapped)
        alpha = tl.where(g == float("-inf"), 0.0, alpha)
        s = s * alpha + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "rescales the old sum with exp(g_ref - g) instead of exp(g - g_ref)")
def my_row_lse_flip(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_flip[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_nolog_g(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 4 returns log(s) and forgets to add the running max g back")
def my_row_lse_nolog_g(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_nolog_g[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_norescale(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "adds the block's sum to s without rescaling the old s when the max moves")
def my_row_lse_norescale(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_norescale[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_blockmax(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.max(x, 0) + tl.zeros([1], tl.float32)  # the block's max only
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 2 takes only this block's max, not the max with the running g (a later block of -inf or far smaller values loses or overflows s)")
def my_row_lse_blockmax(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_blockmax[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def lse_kernel_gnew(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 3 measures against g_new instead of g_ref, so a fully masked block gives -inf - (-inf) = NaN")
def my_row_lse_gnew(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_gnew[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@sol("11.1", "wrong", "the kernel is right but the wrapper passes the row length x.shape[1] as the row stride")
def my_row_lse_stride(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_ok[(x.shape[0],)](x, out, x.shape[1], x.shape[1], BLOCK=32)
    return out


@sol("11.1", "wrong", "the kernel is right but the wrapper returns a numpy array (out.numpy()) instead of the tensor")
def my_row_lse_numpy(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_ok[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out.cpu().numpy()


@triton.jit
def lse_kernel_zero_start(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.zeros([1], tl.float32)  # running max started at 0
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


@sol("11.1", "wrong", "changes the first line of the kernel so the running max starts at 0 instead of -inf")
def my_row_lse_zero_start(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_zero_start[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


# ======================================================================================================
# 11.2  where each quantity lives
# ======================================================================================================

_WHERE_OK = {
    "Q, K, V (the whole arrays)": "HBM",
    "q_tile": "registers",
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE (the results)": "HBM",
}
SOLUTIONS.append(("11.2", "correct", "q_tile in registers, k/v tiles in shared memory, states in registers", dict(_WHERE_OK)))
SOLUTIONS.append(("11.2", "correct", "the same, with q_tile in shared memory (the tutorial's 'stays in SRAM')",
                  {**_WHERE_OK, "q_tile": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "thinks the accumulator acc is too big for registers and puts it in shared memory",
                  {**_WHERE_OK, "acc": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "puts the streamed k_tile, v_tile in registers, like the query tile",
                  {**_WHERE_OK, "k_tile, v_tile": "registers"}))
SOLUTIONS.append(("11.2", "wrong", "thinks the score tile x_tile/p_tile is staged in shared memory",
                  {**_WHERE_OK, "x_tile, p_tile": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "thinks the results A, LSE stay on chip in shared memory",
                  {**_WHERE_OK, "A, LSE (the results)": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "puts the row states m_i, l_i in HBM",
                  {**_WHERE_OK, "m_i, l_i": "HBM"}))


# ======================================================================================================
# 12.1  the backward with key tiles outside
# ======================================================================================================

@sol("12.1", "correct", "key tiles outside, Y = exp(X - L) selected with np.where, masked pairs selected away in every product")
def my_backward_ok(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    scale = 1.0 / math.sqrt(D)
    keep = np.asarray(keep, bool)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.sum(grad_a * np.where(np.isneginf(lse)[:, None], 0.0, a), axis=1)
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    lse_safe = np.where(np.isneginf(lse), 0.0, lse)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k, M)
        kj, vj, kp = k[c0:c1], v[c0:c1], keep[:, c0:c1]
        with np.errstate(invalid="ignore", over="ignore"):
            x = scale * (q @ kj.T)
            y = np.where(kp, np.exp(x - lse_safe[:, None]), 0.0)
            dy = grad_a @ vj.T
            dx = np.where(kp, y * (dy - delta[:, None]), 0.0)
        dv[c0:c1] = np.where(kp[:, :, None], y[:, :, None] * grad_a[:, None, :], 0.0).sum(axis=0)
        dk[c0:c1] = scale * np.where(kp[:, :, None], dx[:, :, None] * q[:, None, :], 0.0).sum(axis=0)
        dq += scale * np.where(kp[:, :, None], dx[:, :, None] * kj[None, :, :], 0.0).sum(axis=1)
    return dq, dk, dv


@sol("12.1", "correct", "tile loop, then a loop over the tile's keys using only the rows that attend each key")
def my_backward_ok_loop(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    scale = D ** -0.5
    attends = np.isfinite(lse)  # rows that see at least one key
    delta = np.zeros(N)
    delta[attends] = (grad_a[attends] * a[attends]).sum(-1)
    dq, dk, dv = np.zeros((N, D)), np.zeros((M, k.shape[1])), np.zeros((M, v.shape[1]))
    c0 = 0
    while c0 < M:
        c1 = min(c0 + block_k, M)
        for m in range(c0, c1):
            rows = np.flatnonzero(keep[:, m])
            if rows.size == 0:
                continue
            x = scale * (q[rows] @ k[m])
            y = np.exp(x - lse[rows])
            dy = grad_a[rows] @ v[m]
            dx = y * (dy - delta[rows])
            dv[m] = y @ grad_a[rows]
            dk[m] = scale * (dx @ q[rows])
            dq[rows] += scale * dx[:, None] * k[m][None, :]
        c0 = c1
    return dq, dk, dv


def _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, *, y_mode="sub", scale_dk=True, scale_dv=False,
                  delta_mode="once", tiles="all", dx_sign=1, use_delta=True, scale_fn=None):
    """(helper of several wrong learners: one structure, one switch flipped each)"""
    N, D = q.shape
    M = k.shape[0]
    scale = scale_fn(q, k) if scale_fn else 1 / np.sqrt(D)
    with np.errstate(invalid="ignore"):
        delta = np.sum(grad_a * np.nan_to_num(a), axis=1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    stop = M if tiles == "all" else (M // block_k) * block_k
    for c0 in range(0, stop, block_k):
        c1 = min(c0 + block_k, M)
        kp = keep[:, c0:c1]
        with np.errstate(all="ignore"):
            x = scale * q @ k[c0:c1].T
            if y_mode == "sub":
                y = np.where(kp, np.exp(x - np.where(np.isneginf(lse), 0, lse)[:, None]), 0)
            elif y_mode == "div":
                y = np.where(kp, np.exp(x) / np.exp(lse)[:, None], 0)
            elif y_mode == "mul":
                y = np.exp(x - lse[:, None]) * kp
            dy = grad_a @ v[c0:c1].T
            d = delta if delta_mode == "once" else np.sum(y * dy, axis=1)
            dx = np.where(kp, y * (dx_sign * (dy - (d[:, None] if use_delta else 0))), 0)
        dv[c0:c1] = (scale if scale_dv else 1) * y.T @ grad_a
        dk[c0:c1] = (scale if scale_dk else 1) * dx.T @ q
        dq += scale * dx @ k[c0:c1]
    return dq, dk, dv


@sol("12.1", "wrong", "computes Y as exp(X) / exp(L) (overflows for scores above 709)")
def my_backward_div(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, y_mode="div")


@sol("12.1", "wrong", "puts the scale in dQ only and forgets it in dK")
def my_backward_noscale_dk(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale_dk=False)


@sol("12.1", "wrong", "also multiplies dV by the scale")
def my_backward_scale_dv(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale_dv=True)


@sol("12.1", "wrong", "computes D inside the tile loop as rowsum(Y_ij * dY_ij) of the current tile only")
def my_backward_tile_delta(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, delta_mode="tile")


@sol("12.1", "wrong", "loops over M // block_k full tiles and drops the shorter last tile")
def my_backward_drop_last(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, tiles="full")


@sol("12.1", "wrong", "masks Y by multiplying with keep instead of np.where: inf * 0 = NaN on a fully masked row")
def my_backward_mul_mask(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, y_mode="mul")


@sol("12.1", "wrong", "writes dX = Y * (D - dY), the sign of the softmax gradient flipped")
def my_backward_sign(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, dx_sign=-1)


@sol("12.1", "wrong", "forgets the row term: dX = Y * dY")
def my_backward_no_delta(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, use_delta=False)


@sol("12.1", "wrong", "uses the scale 1/sqrt(M) (number of keys) instead of 1/sqrt(D)")
def my_backward_scale_m(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale_fn=lambda q, k: 1 / np.sqrt(k.shape[0]))


@sol("12.1", "wrong", "replaces -inf in the caller's lse in place (lse[...] = 0) to avoid NaN: gradients right, input changed")
def my_backward_inplace(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    s = 1 / math.sqrt(D)
    lse[np.isneginf(lse)] = 0.0
    delta = (grad_a * a).sum(axis=1)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, M, block_k):
        c1 = min(M, c0 + block_k)
        kp = keep[:, c0:c1]
        x = s * np.einsum("nd,md->nm", q, k[c0:c1])
        y = np.where(kp, np.exp(np.where(kp, x - lse[:, None], -np.inf)), 0.0)
        dy = np.einsum("nd,md->nm", grad_a, v[c0:c1])
        dx = np.where(kp, y * (dy - delta[:, None]), 0.0)
        dv[c0:c1] = np.einsum("nm,nd->md", y, grad_a)
        dk[c0:c1] = s * np.einsum("nm,nd->md", dx, q)
        dq += s * np.einsum("nm,md->nd", dx, k[c0:c1])
    return dq, dk, dv


# ======================================================================================================
# 13.1  sliding window mask_mod
# ======================================================================================================

@sol("13.1", "correct", "p = q_idx + M - N, each bound applied only when it is not None")
def my_window_ok(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx >= p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "correct", "None turned into an infinite extent, then one band test on the diagonal kv_idx - p")
def my_window_ok_inf(q_idx, kv_idx, N, M, left, right):
    lo = np.inf if left is None else left
    hi = np.inf if right is None else right
    diag = kv_idx - (q_idx + (M - N))
    return (diag >= -lo) & (diag <= hi)


@sol("13.1", "wrong", "aligns the window top-left: p = q_idx (forgets the M - N shift)")
def my_window_topleft(q_idx, kv_idx, N, M, left, right):
    p = q_idx
    lo = -np.inf if left is None else p - left
    hi = np.inf if right is None else p + right
    return (kv_idx >= lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "excludes the left edge: kv_idx > p - left")
def my_window_strict_left(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    ok = np.full(np.broadcast(q_idx, kv_idx).shape, True)
    if left is not None:
        ok = ok & (kv_idx > p - left)
    if right is not None:
        ok = ok & (kv_idx <= p + right)
    return ok


@sol("13.1", "wrong", "swaps left and right: kv_idx >= p - right and kv_idx <= p + left")
def my_window_swapped(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    ok = np.ones(np.broadcast(q_idx, kv_idx).shape, dtype=bool)
    if right is not None:
        ok &= kv_idx >= p - right
    if left is not None:
        ok &= kv_idx <= p + left
    return ok


@sol("13.1", "wrong", "tests 'if left:' for None, so a window extent of 0 is treated as unbounded")
def my_window_falsy(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    ok = np.ones(np.broadcast(q_idx, kv_idx).shape, dtype=bool)
    if left:
        ok &= kv_idx >= p - left
    if right:
        ok &= kv_idx <= p + right
    return ok


@sol("13.1", "wrong", "builds the positions with np.arange(N), np.arange(M) instead of q_idx, kv_idx")
def my_window_arange(q_idx, kv_idx, N, M, left, right):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    p = n + M - N
    lo = p - (left if left is not None else M + N)
    hi = p + (right if right is not None else M + N)
    return (m >= lo) & (m <= hi)


@sol("13.1", "wrong", "aligns with p = n + N - M (the offset's sign flipped)")
def my_window_offset_sign(q_idx, kv_idx, N, M, left, right):
    p = q_idx + N - M
    left = np.inf if left is None else left
    right = np.inf if right is None else right
    return np.logical_and(kv_idx >= p - left, kv_idx <= p + right)


# ======================================================================================================
# 13.2  document mask
# ======================================================================================================

@sol("13.2", "correct", "same document id by indexing doc with both index arrays, and kv_idx <= q_idx")
def my_document_ok(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "uses kv_idx < q_idx and drops the diagonal")
def my_document_strict(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx < q_idx)


@sol("13.2", "wrong", "keeps every pair of the same document (forgets the causal part)")
def my_document_nocausal(q_idx, kv_idx, doc):
    d = np.asarray(doc)
    return d[q_idx] == d[kv_idx]


@sol("13.2", "wrong", "writes the causal part the wrong way round: kv_idx >= q_idx")
def my_document_reversed(q_idx, kv_idx, doc):
    same = np.equal(np.take(doc, q_idx), np.take(doc, kv_idx))
    return np.where(same, kv_idx >= q_idx, False)


@sol("13.2", "wrong", "rebuilds document starts with np.bincount(doc) assuming ids 0, 1, 2, ...")
def my_document_bincount(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    starts = np.concatenate([[0], np.cumsum(np.bincount(doc))])[:-1]
    start_q = starts[doc[q_idx]]
    return (kv_idx >= start_q) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "finds a query's document start as the first index with doc >= doc[q] (assumes ids increase)")
def my_document_sorted(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    start = np.searchsorted(doc, doc[q_idx], side="left")
    return (kv_idx >= start) & (kv_idx <= q_idx)


# ======================================================================================================
# 13.3  softcap
# ======================================================================================================

@sol("13.3", "correct", "cap * tanh(qk * scale / cap)")
def my_softcap_ok(qk, scale, cap):
    return cap * np.tanh(qk * scale / cap)


@sol("13.3", "correct", "scales first into x, then np.multiply(cap, np.tanh(np.divide(x, cap)))")
def my_softcap_ok2(qk, scale, cap):
    x = np.asarray(qk, dtype=np.float64) * scale
    return np.multiply(cap, np.tanh(np.divide(x, cap)))


@sol("13.3", "wrong", "applies the scale after the cap: scale * cap * tanh(qk / cap)")
def my_softcap_scale_after(qk, scale, cap):
    return scale * cap * np.tanh(qk / cap)


@sol("13.3", "wrong", "hard clip to [-cap, cap] instead of the tanh")
def my_softcap_clip(qk, scale, cap):
    return np.clip(qk * scale, -cap, cap)


@sol("13.3", "wrong", "writes tanh by hand as (e^{2y} - 1) / (e^{2y} + 1): inf / inf = NaN for large scores")
def my_softcap_manual_tanh(qk, scale, cap):
    y = np.asarray(qk, dtype=np.float64) * scale / cap
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(2 * y)
        t = (e - 1) / (e + 1)
    return cap * t


@sol("13.3", "wrong", "forgets the division inside: cap * tanh(x)")
def my_softcap_nodiv(qk, scale, cap):
    x = qk * scale
    return cap * np.tanh(x)


@sol("13.3", "wrong", "divides instead of multiplying by the scale: x = qk / scale")
def my_softcap_divscale(qk, scale, cap):
    x = np.asarray(qk) / scale
    return cap * np.tanh(x / cap)


# ======================================================================================================
# 13.4  ALiBi
# ======================================================================================================

@sol("13.4", "correct", "score - slope * |q_idx + M - N - kv_idx|")
def my_alibi_ok(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "measures the distance top-left: |q_idx - kv_idx|")
def my_alibi_topleft(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx - kv_idx)


@sol("13.4", "wrong", "adds the bias instead of subtracting it")
def my_alibi_plus(score, slope, q_idx, kv_idx, N, M):
    dist = np.abs(q_idx + (M - N) - kv_idx)
    return score + slope * dist


@sol("13.4", "wrong", "no absolute value: subtracts slope * (p - m), which rewards keys after p")
def my_alibi_noabs(score, slope, q_idx, kv_idx, N, M):
    p = q_idx + M - N
    return score - slope * (p - kv_idx)


@sol("13.4", "wrong", "aligns with p = n + N - M")
def my_alibi_offset(score, slope, q_idx, kv_idx, N, M):
    bias = -slope * np.abs(q_idx + N - M - kv_idx)
    return np.add(score, bias)


# ======================================================================================================
# 13.5  tile kind under the bottom-right causal mask
# ======================================================================================================

@sol("13.5", "correct", "two corners: empty if c0 > (r1 - 1) + M - N, full if c1 - 1 <= r0 + M - N, else partial")
def my_tile_kind_ok(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "correct", "builds the tile's keep mask from np.arange and checks .any() / .all()")
def my_tile_kind_ok_brute(r0, r1, c0, c1, N, M):
    n = np.arange(int(r0), int(r1))[:, None]
    m = np.arange(int(c0), int(c1))[None, :]
    keep = m <= n + (M - N)
    if not keep.any():
        return 0
    return 2 if keep.all() else 1


@sol("13.5", "wrong", "uses r1 as the last row (off by one: r1 instead of r1 - 1) in the empty test")
def my_tile_kind_r1(r0, r1, c0, c1, N, M):
    if c0 > r1 + M - N:
        return 0
    if c1 - 1 <= r0 + M - N:
        return 2
    return 1


@sol("13.5", "wrong", "ignores the bottom-right shift: uses the top-left causal mask m <= n")
def my_tile_kind_topleft(r0, r1, c0, c1, N, M):
    if c0 > r1 - 1:
        return 0
    if c1 - 1 <= r0:
        return 2
    return 1


@sol("13.5", "wrong", "full test with c1 instead of c1 - 1: a tile whose last key is on the first row's diagonal is partial")
def my_tile_kind_c1(r0, r1, c0, c1, N, M):
    d = M - N
    if c0 > r1 - 1 + d:
        return 0
    elif c1 <= r0 + d:
        return 2
    else:
        return 1


@sol("13.5", "wrong", "empty test on the first row (c0 > r0 + M - N) instead of the last row")
def my_tile_kind_first_row(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r0 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "swaps the codes: 0 for full and 2 for empty")
def my_tile_kind_swapped(r0, r1, c0, c1, N, M):
    n = np.arange(r0, r1)[:, None]
    m = np.arange(c0, c1)[None, :]
    keep = m <= n + M - N
    return 0 if keep.all() else (2 if not keep.any() else 1)


# ======================================================================================================
# 13.6  paged KV cache gather
# ======================================================================================================

@sol("13.6", "correct", "physical page block_table[b, t // page_size], row t % page_size")
def my_page_gather_ok(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "wrong", "indexes the block table as block_table[t // page_size, b] (rows and columns swapped)")
def my_page_gather_swapped_table(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[block_table[t // ps, b], t % ps]


@sol("13.6", "wrong", "skips the block table: uses the logical page t // page_size as the physical page")
def my_page_gather_no_table(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[t // ps, t % ps]


@sol("13.6", "wrong", "swaps // and %: page block_table[b, t % page_size], row t // page_size")
def my_page_gather_divmod(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[block_table[b, t % ps], t // ps]


@sol("13.6", "wrong", "takes the page size from pages.shape[0] (the number of pages)")
def my_page_gather_pagesize(pages, block_table, b, t):
    page_size = len(pages)
    page, row = divmod(t, page_size)
    return pages[block_table[b][page]][row]


@sol("13.6", "wrong", "flattens all pages into one array and indexes token t directly, ignoring the table")
def my_page_gather_flat(pages, block_table, b, t):
    flat = pages.reshape(-1, pages.shape[-1])
    return flat[b * block_table.shape[1] * pages.shape[1] + t]


# ======================================================================================================
# 14.1  recap quiz
# ======================================================================================================

_QUIZ_OK = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c"}
SOLUTIONS.append(("14.1", "correct", "all seven right", dict(_QUIZ_OK)))
SOLUTIONS.append(("14.1", "wrong", "thinks s_i is already the whole row's denominator (1: a)", {**_QUIZ_OK, 1: "a"}))
SOLUTIONS.append(("14.1", "wrong", "thinks subtracting the max changes probabilities slightly (2: a)", {**_QUIZ_OK, 2: "a"}))
SOLUTIONS.append(("14.1", "wrong", "thinks each K/V tile is read once in all (5: a)", {**_QUIZ_OK, 5: "a"}))
SOLUTIONS.append(("14.1", "wrong", "thinks acc lives in shared memory (7: b)", {**_QUIZ_OK, 7: "b"}))
SOLUTIONS.append(("14.1", "wrong", "thinks a fully masked row gives NaN (4: a)", {**_QUIZ_OK, 4: "a"}))
SOLUTIONS.append(("14.1", "wrong", "thinks Flash-Decoding does fewer operations (6: b)", {**_QUIZ_OK, 6: "b"}))


# ======================================================================================================
# 14.2  FlashAttention-2 for one row
# ======================================================================================================

@sol("14.2", "correct", "running g, s, acc over key tiles; acc / s and g + log s at the end")
def my_flash_row_ok(q_n, K, V, B_c):
    D = q_n.shape[0]
    M = K.shape[0]
    g, s = -np.inf, 0.0
    acc = np.zeros(V.shape[1])
    for c0 in range(0, M, B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, float(g + np.log(s))


@sol("14.2", "correct", "scale folded into a copy of q, tiles listed first, einsum for P V")
def my_flash_row_ok2(q_n, K, V, B_c):
    q = np.asarray(q_n, np.float64) * (1.0 / math.sqrt(len(q_n)))
    M = len(K)
    tiles = [(c, min(c + B_c, M)) for c in range(0, M, B_c)]
    g = -math.inf
    s = 0.0
    acc = np.zeros(V.shape[-1], dtype=np.float64)
    for c0, c1 in tiles:
        x = np.einsum("md,d->m", K[c0:c1], q)
        g_new = np.maximum(g, np.max(x))
        scale_old = math.exp(g - g_new) if g != -math.inf else 0.0
        p = np.exp(x - g_new)
        s = scale_old * s + float(np.sum(p))
        acc = scale_old * acc + np.einsum("m,md->d", p, V[c0:c1])
        g = g_new
    a_n = acc / s
    return a_n, float(g) + math.log(s)


def _row_template(q_n, K, V, B_c, *, scale=None, g0=-np.inf, rescale_acc=True, add_g=True, last_tile=True,
                  dtype=np.float64, sub_max=True):
    D = len(q_n)
    M = len(K)
    sc = 1 / np.sqrt(D) if scale is None else scale(D)
    g, s = g0, 0.0
    acc = np.zeros(V.shape[1], dtype=dtype)
    stop = M if last_tile else M - M % B_c
    for c0 in range(0, stop, B_c):
        x = (K[c0:c0 + B_c] @ q_n) * sc
        if sub_max:
            g_new = max(g, float(x.max()))
        else:
            g_new = 0.0
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = (acc * alpha if rescale_acc else acc) + (p @ V[c0:c0 + B_c]).astype(dtype)
        g = g_new
    lse = g + np.log(s) if add_g else np.log(s)
    return acc / s, float(lse)


@sol("14.2", "wrong", "scales the scores by 1/D instead of 1/sqrt(D)")
def my_flash_row_scale_d(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, scale=lambda D: 1.0 / D)


@sol("14.2", "wrong", "forgets the 1/sqrt(D) scale")
def my_flash_row_noscale(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, scale=lambda D: 1.0)


@sol("14.2", "wrong", "starts the running max at 0 instead of -inf (scores near -1000 underflow)")
def my_flash_row_g0(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, g0=0.0)


@sol("14.2", "wrong", "never subtracts a max: plain exp of the scores (overflows near 2000)")
def my_flash_row_nomax(q_n, K, V, B_c):
    with np.errstate(over="ignore", invalid="ignore"):
        return _row_template(q_n, K, V, B_c, g0=0.0, sub_max=False)


@sol("14.2", "wrong", "rescales s when the max jumps but forgets to rescale acc")
def my_flash_row_no_acc_rescale(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, rescale_acc=False)


@sol("14.2", "wrong", "returns L = log(s), forgetting the running max g")
def my_flash_row_lse_no_g(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, add_g=False)


@sol("14.2", "wrong", "loops over M // B_c whole tiles and drops the shorter last tile")
def my_flash_row_drop_last(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, last_tile=False)


@sol("14.2", "wrong", "keeps the accumulator in float32 to save memory")
def my_flash_row_f32(q_n, K, V, B_c):
    return _row_template(q_n, K, V, B_c, dtype=np.float32)


@sol("14.2", "wrong", "keeps the normalised output A' and divides by the new s at every tile (FlashAttention-1 style)")
def my_flash_row_divide_each(q_n, K, V, B_c):
    D = q_n.shape[0]
    g, s = -np.inf, 0.0
    a = np.zeros(V.shape[1])
    for c0 in range(0, K.shape[0], B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s_new = s * alpha + p.sum()
        a = (a * s * alpha + p @ V[c0:c0 + B_c]) / s_new
        s, g = s_new, g_new
    return a, float(g + np.log(s))


@sol("14.2", "wrong", "scales q_n in place (q_n *= 1/sqrt(D)): the result is right but the caller's array changes")
def my_flash_row_inplace(q_n, K, V, B_c):
    q_n *= 1 / np.sqrt(q_n.shape[0])
    g, s = -np.inf, 0.0
    acc = np.zeros(V.shape[1])
    for c0 in range(0, K.shape[0], B_c):
        x = K[c0:c0 + B_c] @ q_n
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, float(g + np.log(s))


@sol("14.2", "wrong", "uses the rescale factor exp(g_new - g) (sign flipped)")
def my_flash_row_alpha_flip(q_n, K, V, B_c):
    D = q_n.shape[0]
    g, s = -np.inf, 0.0
    acc = np.zeros(V.shape[1])
    for c0 in range(0, K.shape[0], B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        alpha = 0.0 if g == -np.inf else np.exp(g_new - g)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, float(g + np.log(s))
