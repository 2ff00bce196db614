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
# 11.1  my_row_lse(x): a Triton kernel for the logsumexp of each row
# ======================================================================================================


@triton.jit
def c_lse_ok_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "correct", "fills the four TODOs as the chapter's kernel: other=-inf, running max, rescaled sum, g + log s")
def my_row_lse_ok(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_ok_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_ok2_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        block_max = tl.max(x, 0)
        g_new = tl.maximum(g, block_max)
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        alpha = tl.exp(g - g_ref)
        p = tl.exp(x - g_ref)
        s = alpha * s + tl.sum(p, 0)
        g = g_new
    tl.store(L + row + tl.arange(0, 1), tl.log(s) + g)


@sol("11.1", "correct", "same kernel with named alpha and p, BLOCK=16, and the wrapper makes a contiguous copy first")
def my_row_lse_ok2(x):
    xc = x.contiguous()  # a copy for a slice; x itself is not touched
    out = torch.empty(xc.shape[0], dtype=torch.float32, device=xc.device)
    if xc.shape[0] > 0:
        c_lse_ok2_kernel[(xc.shape[0],)](xc, out, xc.shape[1], xc.stride(0), BLOCK=16)
    return out


@triton.jit
def c_lse_other0_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 1: other=0.0, so the columns past the end of the row add exp(0 - g) to s (and 0 to the max)")
def my_row_lse_other0(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_other0_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_norescale_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 3: forgets to rescale the old s when the max moves (s = s + sum exp(x - g_ref))")
def my_row_lse_norescale(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_norescale_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_logonly_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 4: lse = log(s), forgetting to add the running max g back")
def my_row_lse_logonly(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_logonly_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_logsumexpx_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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
    lse = tl.log(g + s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 4: takes the log of the wrong thing, log(g + s) instead of g + log(s)")
def my_row_lse_logwrong(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_logsumexpx_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@sol("11.1", "wrong", "wrapper passes x.shape[1] as the row stride (ignores x.stride(0): wrong for a slice of a wider tensor)")
def my_row_lse_nostride(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_ok_kernel[(x.shape[0],)](x, out, x.shape[1], x.shape[1], BLOCK=32)
    return out


@triton.jit
def c_lse_gnew_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_new) + tl.sum(tl.exp(x - g_new), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 3: rescales against g_new instead of g_ref, so a fully masked row makes exp(-inf - -inf) = NaN")
def my_row_lse_gnew(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_gnew_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_bigneg_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=-1e30)
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 1: other=-1e30 ('a very negative number') instead of -inf: a fully masked short row gives about -1e30, not -inf")
def my_row_lse_bigneg(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_bigneg_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_invalpha_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        g_old = tl.where(g == float("-inf"), 0.0, g)
        s = s * tl.exp(g_ref - g_old) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 3: the rescale factor upside down, exp(g_new - g) instead of exp(g - g_new)")
def my_row_lse_invalpha(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_invalpha_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@triton.jit
def c_lse_blockmax_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.max(x, 0) + tl.zeros([1], tl.float32)
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 2: g_new = this block's max only (forgets tl.maximum with the running g)")
def my_row_lse_blockmax(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_blockmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out


@sol("11.1", "wrong", "correct kernel, but the wrapper returns the numpy array out.numpy() instead of the tensor")
def my_row_lse_numpy(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        c_lse_ok_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out.numpy()


# ======================================================================================================
# 11.2  where each quantity lives
# ======================================================================================================

_WHERE_OK = {
    "Q, K, V (the whole arrays)": "HBM",
    "q_tile": "shared memory",
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE (the results)": "HBM",
}
SOLUTIONS.append(("11.2", "correct", "the chapter's placement, q_tile in shared memory", dict(_WHERE_OK)))
SOLUTIONS.append(("11.2", "correct", "the chapter's placement, q_tile in registers (the other on-chip answer)",
                  {**_WHERE_OK, "q_tile": "registers"}))
SOLUTIONS.append(("11.2", "wrong", "puts acc in shared memory (it is too big for registers, thinks the learner)",
                  {**_WHERE_OK, "acc": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "puts the results A, LSE in shared memory (written on chip, thinks the learner)",
                  {**_WHERE_OK, "A, LSE (the results)": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "puts the score tile x_tile, p_tile in shared memory",
                  {**_WHERE_OK, "x_tile, p_tile": "shared memory"}))
SOLUTIONS.append(("11.2", "wrong", "puts k_tile, v_tile in registers, like q_tile",
                  {**_WHERE_OK, "k_tile, v_tile": "registers", "q_tile": "registers"}))
SOLUTIONS.append(("11.2", "wrong", "puts q_tile in HBM (it is read from Q, thinks the learner)",
                  {**_WHERE_OK, "q_tile": "HBM"}))
SOLUTIONS.append(("11.2", "wrong", "puts the row states m_i, l_i in shared memory",
                  {**_WHERE_OK, "m_i, l_i": "shared memory"}))


# ======================================================================================================
# 12.1  my_backward(q, k, v, a, lse, grad_a, keep, block_k)
# ======================================================================================================


@sol("12.1", "correct", "key tiles outside; Y = where(keep, exp(X - L), 0); dX selected; masked keys zeroed before dQ")
def my_backward_ok(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    scale = 1.0 / math.sqrt(D)
    empty = np.isneginf(lse)
    delta = np.sum(grad_a * np.where(empty[:, None], 0.0, a), axis=1)
    dq = np.zeros_like(q, dtype=np.float64)
    dk = np.zeros_like(k, dtype=np.float64)
    dv = np.zeros_like(v, dtype=np.float64)
    lse_safe = np.where(empty, 0.0, lse)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k, M)
        kj, vj, keepj = k[c0:c1], v[c0:c1], keep[:, c0:c1]
        with np.errstate(invalid="ignore", over="ignore"):
            x = scale * (q @ kj.T)
            y = np.where(keepj, np.exp(x - lse_safe[:, None]), 0.0)
            dy = grad_a @ vj.T
            dx = np.where(keepj, y * (dy - delta[:, None]), 0.0)
        used = keepj.any(axis=0)
        kj0 = np.where(used[:, None], kj, 0.0)
        dv[c0:c1] = y.T @ grad_a
        dk[c0:c1] = scale * (dx.T @ q)
        dq += scale * (dx @ kj0)
    return dq, dk, dv


@sol("12.1", "correct", "per-pair selection with einsum (no matrix product touches a masked key), D from the whole rows")
def my_backward_ok2(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    sc = D ** -0.5
    dead = lse == -np.inf
    Drow = (grad_a * np.where(dead[:, None], 0, a)).sum(-1)
    dq = np.zeros((N, D))
    dk = np.zeros((M, D))
    dv = np.zeros(v.shape)
    for c0 in range(0, M, block_k):
        c1 = min(M, c0 + block_k)
        kp = keep[:, c0:c1]
        with np.errstate(all="ignore"):
            X = np.einsum("nd,md->nm", q, k[c0:c1]) * sc
            Y = np.where(kp, np.exp(X - np.where(dead, 0, lse)[:, None]), 0)
            dY = np.where(kp, np.einsum("ne,me->nm", grad_a, v[c0:c1]), 0)
            dX = np.where(kp, Y * (dY - Drow[:, None]), 0)
            dv[c0:c1] = np.einsum("nm,ne->me", Y, grad_a)
            dk[c0:c1] = sc * np.einsum("nm,nd->md", dX, q)
            dq += sc * np.where(kp[:, :, None], dX[:, :, None] * k[None, c0:c1, :], 0).sum(1)
    return dq, dk, dv


@sol("12.1", "correct", "rows that attend no key dropped up front (only live rows enter the products)")
def my_backward_ok3(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D)
    live = ~np.isneginf(lse)
    dq = np.zeros((N, D))
    dk = np.zeros((M, D))
    dv = np.zeros((M, v.shape[1]))
    ql, gl, al, ll, kl = q[live], grad_a[live], a[live], lse[live], keep[live]
    delta = np.einsum("nd,nd->n", gl, al)
    dq_live = np.zeros_like(ql)
    c0 = 0
    while c0 < M:
        c1 = min(c0 + block_k, M)
        kk = kl[:, c0:c1]
        cols = kk.any(0)
        kj = np.where(cols[:, None], k[c0:c1], 0.0)
        vj = np.where(cols[:, None], v[c0:c1], 0.0)
        x = (ql @ kj.T) * scale
        y = np.where(kk, np.exp(np.where(kk, x - ll[:, None], -np.inf)), 0.0)
        dy = gl @ vj.T
        dx = np.where(kk, y * (dy - delta[:, None]), 0.0)
        dv[c0:c1] = y.T @ gl
        dk[c0:c1] = (dx.T @ ql) * scale
        dq_live += (dx @ kj) * scale
        c0 = c1
    dq[live] = dq_live
    return dq, dk, dv


def _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, *, scale=None, scale_dv=False, scale_dk=True,
                  delta_mode="rows", mask_y=True, mask_dx=True, tiles="all", c1_mode="ok", dq_mode="acc",
                  y_mode="sub", inplace=False, safe_lse=True):
    """One backward written with knobs, each wrong learner turns one knob."""
    N, D = q.shape
    M = k.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    empty = np.isneginf(lse)
    if inplace:
        q *= scale
        qs = q
    else:
        qs = q
    if delta_mode == "rows":
        delta_all = np.sum(grad_a * np.where(empty[:, None], 0.0, a), axis=1)
    dq = np.zeros((N, D))
    dk = np.zeros((M, D))
    dv = np.zeros(v.shape)
    lse_use = np.where(empty, 0.0, lse) if safe_lse else lse
    if tiles == "all":
        starts = range(0, M, block_k)
    else:  # full tiles only
        starts = range(0, M - block_k + 1, block_k)
    for c0 in starts:
        if c1_mode == "ok":
            c1 = min(c0 + block_k, M)
        elif c1_mode == "minus1":
            c1 = min(c0 + block_k, M) - 1
        kj, vj, keepj = k[c0:c1], v[c0:c1], keep[:, c0:c1]
        kj0 = np.where(keepj.any(0)[:, None], kj, 0.0)
        with np.errstate(all="ignore"):
            x = (qs @ kj.T) if inplace else scale * (q @ kj.T)
            if y_mode == "sub":
                e = np.exp(x - lse_use[:, None])
            else:  # exp(X) / exp(L)
                e = np.exp(x) / np.exp(lse_use[:, None])
            if not safe_lse:
                x = np.where(keepj, x, -np.inf)
                e = np.exp(x - lse_use[:, None])
            y = np.where(keepj, e, 0.0) if mask_y else e
            dy = grad_a @ vj.T
            if delta_mode == "rows":
                delta = delta_all
            else:  # per tile, from this tile's Y and dY only
                delta = np.sum(y * dy, axis=1)
            dx = y * (dy - delta[:, None])
            if mask_dx:
                dx = np.where(keepj, dx, 0.0)
        dv[c0:c1] = (scale if scale_dv else 1.0) * (y.T @ grad_a)
        dk[c0:c1] = (scale if scale_dk else 1.0) * (dx.T @ (q if not inplace else q / scale))
        part = scale * (dx @ kj0)
        if dq_mode == "acc":
            dq += part
        else:
            dq = part.copy()
    return dq, dk, dv


@sol("12.1", "wrong", "scale 1/D instead of 1/sqrt(D)")
def my_backward_scale_D(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale=1.0 / q.shape[1])


@sol("12.1", "wrong", "multiplies dV by the scale too (the scale belongs to dQ and dK only)")
def my_backward_scale_dv(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale_dv=True)


@sol("12.1", "wrong", "forgets the scale in dK (puts it only in X and dQ)")
def my_backward_noscale_dk(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, scale_dk=False)


@sol("12.1", "wrong", "computes D inside each key tile from that tile's Y * dY only (not rowsum(dA * A) over the whole row)")
def my_backward_delta_tile(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, delta_mode="tile")


@sol("12.1", "wrong", "ignores the mask: Y = exp(X - L) for every pair, masked ones included")
def my_backward_nomask(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mask_y=False, mask_dx=False)


@sol("12.1", "wrong", "skips the last, shorter key tile (loops over range(0, M - block_k + 1, block_k))")
def my_backward_skip_partial(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, tiles="full")


@sol("12.1", "wrong", "tile bounds off by one: c1 = min(c0 + block_k, M) - 1, so the last key of every tile is dropped")
def my_backward_offbyone(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, c1_mode="minus1")


@sol("12.1", "wrong", "dQ not accumulated: dq = the current tile's part, so only the last key tile counts")
def my_backward_dq_assign(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, dq_mode="assign")


@sol("12.1", "wrong", "Y = exp(X) / exp(L): overflows to inf/inf = NaN for scores above 709")
def my_backward_exp_div(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, y_mode="div")


@sol("12.1", "wrong", "folds the scale into q in place (q *= scale), changing the caller's q")
def my_backward_inplace(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, inplace=True)


@sol("12.1", "wrong", "masks X with -inf and then Y = exp(X - L): a fully masked row (L = -inf) gives exp(-inf + inf) = NaN")
def my_backward_nan_row(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, safe_lse=False, mask_y=False)


@sol("12.1", "wrong", "selects Y with the mask but not dX: NaN in a padded value row reaches dX as 0 * NaN")
def my_backward_no_dx_mask(q, k, v, a, lse, grad_a, keep, block_k):
    return _bwd_template(q, k, v, a, lse, grad_a, keep, block_k, mask_dx=False)


@sol("12.1", "wrong", "D = rowsum(dA * A) without leaving out fully masked rows, and Y computed against L = -inf directly")
def my_backward_delta_dA_only(q, k, v, a, lse, grad_a, keep, block_k):
    # D taken as rowsum(dA) (forgets the A factor)
    N, D = q.shape
    M = k.shape[0]
    scale = 1.0 / math.sqrt(D)
    empty = np.isneginf(lse)
    delta = np.sum(grad_a, axis=1)
    dq, dk, dv = np.zeros((N, D)), np.zeros((M, D)), np.zeros(v.shape)
    L = np.where(empty, 0.0, lse)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k, M)
        kp = keep[:, c0:c1]
        kj0 = np.where(kp.any(0)[:, None], k[c0:c1], 0.0)
        with np.errstate(all="ignore"):
            y = np.where(kp, np.exp(scale * (q @ k[c0:c1].T) - L[:, None]), 0.0)
            dx = np.where(kp, y * (grad_a @ v[c0:c1].T - delta[:, None]), 0.0)
        dv[c0:c1] = y.T @ grad_a
        dk[c0:c1] = scale * dx.T @ q
        dq += scale * dx @ kj0
    return dq, dk, dv


# fix the description of the last one (one mistake only: D = rowsum(dA))
SOLUTIONS[-1] = ("12.1", "wrong", "D = rowsum(dA), forgetting the factor A in D = rowsum(dA * A)", my_backward_delta_dA_only)


# ======================================================================================================
# 13.1  my_window(q_idx, kv_idx, N, M, left, right)
# ======================================================================================================


@sol("13.1", "correct", "p = q_idx + M - N; start from all-True of the broadcast shape; & each bounded edge")
def my_window_ok(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx >= p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "correct", "distance m - p compared with -inf/+inf bounds for None (float infinities)")
def my_window_ok2(q_idx, kv_idx, N, M, left, right):
    lo = -np.inf if left is None else -left
    hi = np.inf if right is None else right
    d = kv_idx - (q_idx + (M - N))
    return (d >= lo) & (d <= hi)


@sol("13.1", "correct", "np.where-free: uses np.logical_and with big integer bounds for None")
def my_window_ok3(q_idx, kv_idx, N, M, left, right):
    big = int(N) + int(M) + 1
    l = big if left is None else int(left)
    r = big if right is None else int(right)
    p = np.asarray(q_idx) + (int(M) - int(N))
    m = np.asarray(kv_idx)
    return np.logical_and(m >= p - l, m <= p + r)


@sol("13.1", "wrong", "both edges exclusive (p - left < m < p + right)")
def my_window_exclusive(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx > p - left
    if right is not None:
        keep &= kv_idx < p + right
    return keep


@sol("13.1", "wrong", "left edge exclusive only (m > p - left): the window has one key too few on the left")
def my_window_left_excl(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx > p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "wrong", "top-left aligned: p = n (forgets + M - N)")
def my_window_topleft(q_idx, kv_idx, N, M, left, right):
    p = q_idx
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx >= p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "wrong", "symmetric window: uses left on both sides (|m - p| <= left)")
def my_window_symmetric(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    if left is None:
        return np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    return np.abs(kv_idx - p) <= left


@sol("13.1", "wrong", "offset sign swapped: p = n + N - M")
def my_window_sign(q_idx, kv_idx, N, M, left, right):
    p = q_idx + N - M
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx >= p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "wrong", "tests 'if left:' for None, so an extent of 0 is taken as no limit")
def my_window_falsy(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left:
        keep &= kv_idx >= p - left
    if right:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "wrong", "left and right swapped (m >= p - right and m <= p + left)")
def my_window_swapped(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if right is not None:
        keep &= kv_idx >= p - right
    if left is not None:
        keep &= kv_idx <= p + left
    return keep


@sol("13.1", "wrong", "builds the positions with np.arange(N), np.arange(M) instead of q_idx, kv_idx (wrong for a tile)")
def my_window_arange(q_idx, kv_idx, N, M, left, right):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    p = n + M - N
    keep = np.ones((N, M), dtype=bool)
    if left is not None:
        keep &= m >= p - left
    if right is not None:
        keep &= m <= p + right
    return keep


@sol("13.1", "wrong", "None is replaced by 0 (reads FlashAttention's -1 as 'no keys on that side')")
def my_window_none0(q_idx, kv_idx, N, M, left, right):
    left = 0 if left is None else left
    right = 0 if right is None else right
    p = q_idx + M - N
    return (kv_idx >= p - left) & (kv_idx <= p + right)


# ======================================================================================================
# 13.2  my_document(q_idx, kv_idx, doc)
# ======================================================================================================


@sol("13.2", "correct", "doc[q_idx] == doc[kv_idx] and kv_idx <= q_idx")
def my_document_ok(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)


@sol("13.2", "correct", "via np.equal / np.less_equal with an explicit int index array")
def my_document_ok2(q_idx, kv_idx, doc):
    d = np.asarray(doc)
    qi, ki = np.asarray(q_idx, dtype=np.intp), np.asarray(kv_idx, dtype=np.intp)
    return np.logical_and(np.equal(d[qi], d[ki]), np.less_equal(ki, qi))


@sol("13.2", "wrong", "forgets the causal part: same document only")
def my_document_nocausal(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return doc[q_idx] == doc[kv_idx]


@sol("13.2", "wrong", "strict kv_idx < q_idx: drops the diagonal")
def my_document_strict(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx < q_idx)


@sol("13.2", "wrong", "causal the wrong way round: kv_idx >= q_idx")
def my_document_reversed(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx >= q_idx)


@sol("13.2", "wrong", "document start from np.searchsorted(doc, doc[q]): assumes the ids are sorted")
def my_document_searchsorted(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    start = np.searchsorted(doc, doc[q_idx], side="left")
    return (kv_idx >= start) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "document start from cumsum of np.bincount(doc): assumes ids 0, 1, 2, ...")
def my_document_bincount(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    counts = np.bincount(doc) if doc.size else np.zeros(0, dtype=int)
    starts = np.concatenate([[0], np.cumsum(counts)])
    start = starts[doc[q_idx]]
    return (kv_idx >= start) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "keeps keys of the same or an earlier document (doc[kv] <= doc[q]) with kv <= q")
def my_document_le(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[kv_idx] <= doc[q_idx]) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "reads doc as cu_seqlens: same document when no boundary of doc falls in (kv, q]")
def my_document_cu(q_idx, kv_idx, doc):
    cu = np.asarray(doc)
    # the document of a token: number of boundaries <= token, minus one
    dq = np.searchsorted(cu, q_idx, side="right")
    dk = np.searchsorted(cu, kv_idx, side="right")
    return (dq == dk) & (kv_idx <= q_idx)


# ======================================================================================================
# 13.3  my_softcap(qk, scale, cap)
# ======================================================================================================


@sol("13.3", "correct", "cap * tanh(qk * scale / cap)")
def my_softcap_ok(qk, scale, cap):
    return cap * np.tanh(qk * scale / cap)


@sol("13.3", "correct", "x = scale * qk first, then c * tanh(x / c), on np.asarray")
def my_softcap_ok2(qk, scale, cap):
    x = np.asarray(qk) * scale
    return np.tanh(x / cap) * cap


@sol("13.3", "correct", "np.multiply / np.divide / np.tanh written as ufunc calls")
def my_softcap_ok3(qk, scale, cap):
    x = np.multiply(qk, scale)
    return np.multiply(cap, np.tanh(np.divide(x, cap)))


@sol("13.3", "wrong", "forgets the scale: cap * tanh(qk / cap)")
def my_softcap_noscale(qk, scale, cap):
    return cap * np.tanh(qk / cap)


@sol("13.3", "wrong", "scales after the tanh: cap * tanh(qk / cap) * scale")
def my_softcap_scale_after(qk, scale, cap):
    return cap * np.tanh(qk / cap) * scale


@sol("13.3", "wrong", "forgets to multiply back by cap: tanh(x / cap)")
def my_softcap_nocap_out(qk, scale, cap):
    return np.tanh(qk * scale / cap)


@sol("13.3", "wrong", "a hard cap: np.clip(x, -cap, cap) instead of the smooth tanh")
def my_softcap_clip(qk, scale, cap):
    return np.clip(qk * scale, -cap, cap)


@sol("13.3", "wrong", "tanh written as (e^{2y} - 1) / (e^{2y} + 1): inf / inf = NaN for large or infinite scores")
def my_softcap_expform(qk, scale, cap):
    y = qk * scale / cap
    e = np.exp(2 * y)
    return cap * (e - 1) / (e + 1)


@sol("13.3", "wrong", "cap inside out: tanh(x * cap) / cap")
def my_softcap_inverted(qk, scale, cap):
    return np.tanh(qk * scale * cap) / cap


# ======================================================================================================
# 13.4  my_alibi(score, slope, q_idx, kv_idx, N, M)
# ======================================================================================================


@sol("13.4", "correct", "score - slope * |q_idx + M - N - kv_idx|")
def my_alibi_ok(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "correct", "bias built as a float array first, then added: score + (-slope) * distance")
def my_alibi_ok2(score, slope, q_idx, kv_idx, N, M):
    dist = np.abs((np.asarray(q_idx) + (M - N)) - np.asarray(kv_idx)).astype(np.float64)
    bias = -float(slope) * dist
    return np.asarray(score) + bias


@sol("13.4", "wrong", "sign wrong: adds +slope * distance (rewards distant keys)")
def my_alibi_plus(score, slope, q_idx, kv_idx, N, M):
    return score + slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "top-left aligned distance |n - m| (forgets M - N)")
def my_alibi_topleft(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx - kv_idx)


@sol("13.4", "wrong", "offset the wrong way: |n + N - M - m|")
def my_alibi_offset_sign(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + N - M - kv_idx)


@sol("13.4", "wrong", "no absolute value: score - slope * (n + M - N - m), a bonus for keys after the aligned one")
def my_alibi_noabs(score, slope, q_idx, kv_idx, N, M):
    return score - slope * (q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "slope read as an exponent: score - 2^(-slope) * distance")
def my_alibi_slope_pow(score, slope, q_idx, kv_idx, N, M):
    return score - 2.0 ** (-slope) * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "multiplies instead of adding: score * (1 - slope * distance)")
def my_alibi_mult(score, slope, q_idx, kv_idx, N, M):
    return score * (1 - slope * np.abs(q_idx + M - N - kv_idx))


# ======================================================================================================
# 13.5  my_tile_kind(r0, r1, c0, c1, N, M)
# ======================================================================================================


@sol("13.5", "correct", "from the corners: empty if c0 > (r1-1)+M-N, full if c1-1 <= r0+M-N, else partial")
def my_tile_kind_ok(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "correct", "brute force on the tile's index arrays: all seen -> 2, any seen -> 1, else 0")
def my_tile_kind_ok2(r0, r1, c0, c1, N, M):
    n = np.arange(int(r0), int(r1))[:, None]
    m = np.arange(int(c0), int(c1))[None, :]
    seen = m <= n + (int(M) - int(N))
    if seen.all():
        return 2
    if seen.any():
        return 1
    return 0


@sol("13.5", "correct", "diagonal range of the tile: d = m - n - (M - N) from c0-(r1-1) to (c1-1)-r0, compared with 0")
def my_tile_kind_ok3(r0, r1, c0, c1, N, M):
    lo = int(c0) - (int(r1) - 1) - (int(M) - int(N))
    hi = (int(c1) - 1) - int(r0) - (int(M) - int(N))
    return 2 if hi <= 0 else (0 if lo > 0 else 1)


@sol("13.5", "wrong", "top-left causal: forgets the offset M - N")
def my_tile_kind_topleft(r0, r1, c0, c1, N, M):
    if c0 > r1 - 1:
        return 0
    if c1 - 1 <= r0:
        return 2
    return 1


@sol("13.5", "wrong", "codes swapped: returns 1 for full and 2 for partial")
def my_tile_kind_swapped(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 1
    return 2


@sol("13.5", "wrong", "uses the wrong corners: full when (r0, c0) and (r1-1, c1-1) are both seen, empty when neither")
def my_tile_kind_corners(r0, r1, c0, c1, N, M):
    off = M - N
    tl_seen = c0 <= r0 + off
    br_seen = c1 - 1 <= r1 - 1 + off
    if tl_seen and br_seen:
        return 2
    if not tl_seen and not br_seen:
        return 0
    return 1


@sol("13.5", "wrong", "off by one: uses c1 and r1 as if they were inclusive (c0 > r1 + off empty, c1 <= r0 + off full)")
def my_tile_kind_inclusive(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 + off:
        return 0
    if c1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "offset sign swapped: N - M")
def my_tile_kind_offsign(r0, r1, c0, c1, N, M):
    off = N - M
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "empty tested with the first row r0 instead of the last row r1 - 1")
def my_tile_kind_emptyrow(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r0 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "returns the names 'empty' / 'partial' / 'full' instead of 0 / 1 / 2")
def my_tile_kind_names(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return "empty"
    if c1 - 1 <= r0 + off:
        return "full"
    return "partial"


# ======================================================================================================
# 13.6  my_page_gather(pages, block_table, b, t)
# ======================================================================================================


@sol("13.6", "correct", "pages[block_table[b, t // page_size], t % page_size]")
def my_page_gather_ok(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "correct", "divmod, then index step by step")
def my_page_gather_ok2(pages, block_table, b, t):
    logical, row = divmod(int(t), np.shape(pages)[1])
    physical = int(np.asarray(block_table)[int(b)][logical])
    return np.asarray(pages)[physical][row]


@sol("13.6", "wrong", "page and row swapped: page t % page_size, row t // page_size")
def my_page_gather_swapped(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[block_table[b, t % ps], t // ps]


@sol("13.6", "wrong", "ignores the block table: reads physical page t // page_size directly")
def my_page_gather_notable(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[t // ps, t % ps]


@sol("13.6", "wrong", "page_size taken from block_table.shape[1] (max_pages) instead of pages.shape[1]")
def my_page_gather_wrongsize(pages, block_table, b, t):
    ps = block_table.shape[1]
    return pages[block_table[b, t // ps], t % ps]


@sol("13.6", "wrong", "block table indexed the wrong way round: block_table[t // page_size, b]")
def my_page_gather_transposed(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[block_table[t // ps, b], t % ps]


@sol("13.6", "wrong", "copies the key to float64 (np.asarray(..., dtype=float)): float16 and integer caches change dtype")
def my_page_gather_float(pages, block_table, b, t):
    ps = pages.shape[1]
    return np.asarray(pages[block_table[b, t // ps], t % ps], dtype=float)


@sol("13.6", "wrong", "1-based token thinking: page (t - 1) // page_size, row (t - 1) % page_size")
def my_page_gather_minus1(pages, block_table, b, t):
    ps = pages.shape[1]
    return pages[block_table[b, (t - 1) // ps], (t - 1) % ps]


# ======================================================================================================
# 14.1  recap quiz
# ======================================================================================================

_QUIZ_OK = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c"}
SOLUTIONS.append(("14.1", "correct", "the right letters", dict(_QUIZ_OK)))
SOLUTIONS.append(("14.1", "wrong", "q1: thinks s_i is already the whole row's denominator (a)", {**_QUIZ_OK, 1: "a"}))
SOLUTIONS.append(("14.1", "wrong", "q4: thinks a fully masked row gives NaN (a)", {**_QUIZ_OK, 4: "a"}))
SOLUTIONS.append(("14.1", "wrong", "q5: thinks each key/value tile is read once in all (a), confusing with FA1's loop order",
                  {**_QUIZ_OK, 5: "a"}))
SOLUTIONS.append(("14.1", "wrong", "q7: puts acc in shared memory (b)", {**_QUIZ_OK, 7: "b"}))
SOLUTIONS.append(("14.1", "wrong", "q3: thinks acc is a more accurate average (b)", {**_QUIZ_OK, 3: "b"}))
SOLUTIONS.append(("14.1", "wrong", "q2: thinks subtracting the max changes the probabilities slightly (a)",
                  {**_QUIZ_OK, 2: "a"}))
SOLUTIONS.append(("14.1", "wrong", "q6: thinks Flash-Decoding does fewer operations (b)", {**_QUIZ_OK, 6: "b"}))


# ======================================================================================================
# 14.2  my_flash_row(q_n, K, V, B_c)
# ======================================================================================================


@sol("14.2", "correct", "running g, s, acc over key tiles; one division acc / s at the end; L = g + log s")
def my_flash_row_ok(q_n, K, V, B_c):
    M, D = K.shape
    scale = 1.0 / math.sqrt(D)
    g = -np.inf
    s = 0.0
    acc = np.zeros(V.shape[1], dtype=np.float64)
    for c0 in range(0, M, B_c):
        c1 = min(c0 + B_c, M)
        x = (K[c0:c1] @ q_n) * scale
        g_new = max(g, float(x.max()))
        alpha = math.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + float(p.sum())
        acc = acc * alpha + p @ V[c0:c1]
        g = g_new
    return acc / s, g + math.log(s)


@sol("14.2", "correct", "numpy scalars throughout, q scaled once, L = g + log(s) returned as float")
def my_flash_row_ok2(q_n, K, V, B_c):
    q = np.asarray(q_n, dtype=np.float64) * (1 / np.sqrt(K.shape[1]))
    g = np.float64(-np.inf)
    s = np.float64(0.0)
    acc = np.zeros(V.shape[-1])
    for j in range(0, K.shape[0], B_c):
        x = K[j:j + B_c] @ q
        m_new = np.maximum(g, x.max())
        corr = np.exp(g - m_new)
        p = np.exp(x - m_new)
        s = corr * s + p.sum()
        acc = corr * acc + V[j:j + B_c].T @ p
        g = m_new
    a_n = acc / s
    return a_n, float(g + np.log(s))


@sol("14.2", "correct", "one key at a time inside each tile (scalar loop), still one division at the end")
def my_flash_row_ok3(q_n, K, V, B_c):
    M, D = K.shape
    sc = D ** -0.5
    g, s = -math.inf, 0.0
    acc = np.zeros(V.shape[1])
    tiles = [(c0, min(c0 + B_c, M)) for c0 in range(0, M, B_c)]
    for c0, c1 in tiles:
        xs = [float(K[m] @ q_n) * sc for m in range(c0, c1)]
        g_new = max([g] + xs)
        a = math.exp(g - g_new)
        s *= a
        acc = acc * a
        for m, xm in zip(range(c0, c1), xs):
            w = math.exp(xm - g_new)
            s += w
            acc = acc + w * V[m]
        g = g_new
    return acc * (1.0 / s), g + math.log(s)


def _flash_template(q_n, K, V, B_c, *, scale="sqrt", rescale_acc=True, rescale_s=True, lse="ok",
                    per_tile_div=False, tiles="all", alpha_mode="ok", dtype=np.float64, inplace=False):
    M, D = K.shape
    sc = {"sqrt": 1.0 / math.sqrt(D), "D": 1.0 / D, "none": 1.0}[scale]
    if inplace:
        q_n *= sc
        q = q_n
    else:
        q = q_n * sc
    g = -np.inf
    s = dtype(0.0)
    acc = np.zeros(V.shape[1], dtype=dtype)
    stop = M if tiles == "all" else M - B_c + 1
    for c0 in range(0, stop, B_c):
        c1 = min(c0 + B_c, M)
        x = (K[c0:c1].astype(dtype) @ q.astype(dtype))
        g_new = max(g, x.max())
        if alpha_mode == "ok":
            alpha = np.exp(dtype(g - g_new))
        elif alpha_mode == "after":  # g updated before alpha is taken
            g = g_new
            alpha = np.exp(dtype(g - g_new))
        elif alpha_mode == "inverted":
            alpha = np.exp(dtype(g_new - g)) if np.isfinite(g) else dtype(0.0)
        p = np.exp((x - g_new).astype(dtype))
        s_old = s
        s = (s * alpha if rescale_s else s) + p.sum()
        if per_tile_div:
            # keep the normalised output A' and divide at every tile
            acc = (acc * (s_old * alpha) + p @ V[c0:c1].astype(dtype)) / s
        else:
            acc = (acc * alpha if rescale_acc else acc) + p @ V[c0:c1].astype(dtype)
        g = g_new
    a_n = acc if per_tile_div else acc / s
    if lse == "ok":
        L = g + np.log(s)
    elif lse == "log_s":
        L = np.log(s)
    return a_n, float(L)


@sol("14.2", "wrong", "divides the output at every tile (keeps A' normalised) instead of once at the end")
def my_flash_row_div_tile(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, per_tile_div=True)


@sol("14.2", "wrong", "no rescale of acc when the max rises (acc += P V only)")
def my_flash_row_no_rescale_acc(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, rescale_acc=False)


@sol("14.2", "wrong", "no rescale of s when the max rises (s += sum P only)")
def my_flash_row_no_rescale_s(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, rescale_s=False)


@sol("14.2", "wrong", "L = log s (forgets + g)")
def my_flash_row_lse_log_s(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, lse="log_s")


@sol("14.2", "wrong", "scale 1/D instead of 1/sqrt(D)")
def my_flash_row_scale_D(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, scale="D")


@sol("14.2", "wrong", "forgets the scale altogether (raw q . k scores)")
def my_flash_row_noscale(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, scale="none")


@sol("14.2", "wrong", "updates g before taking alpha, so alpha = exp(g_new - g_new) = 1 (no rescale in effect)")
def my_flash_row_alpha_after(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, alpha_mode="after")


@sol("14.2", "wrong", "alpha upside down: exp(g_new - g)")
def my_flash_row_alpha_inv(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, alpha_mode="inverted")


@sol("14.2", "wrong", "skips the last, shorter key tile (range(0, M - B_c + 1, B_c))")
def my_flash_row_skip_partial(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, tiles="full")


@sol("14.2", "wrong", "keeps s and acc in float32 (as the GPU kernel does) instead of float64")
def my_flash_row_float32(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, dtype=np.float32)


@sol("14.2", "wrong", "scales q in place (q_n *= scale), changing the caller's array")
def my_flash_row_inplace(q_n, K, V, B_c):
    return _flash_template(q_n, K, V, B_c, inplace=True)
