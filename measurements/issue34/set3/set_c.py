"""Learner set C: solutions written from the prompts of chapters 11-14 alone (exercises 11.1-14.2)."""
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


# ---------------------------------------------------------------------------------------------------------------
# 11.1  the row logsumexp kernel
# ---------------------------------------------------------------------------------------------------------------

def _launch(kernel, x, block=32):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block)
    return out


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


@sol("11.1", "correct", "the four TODOs: other=-inf, running max, s rescaled by exp(g - g_ref) plus the block's sum, g + log s")
def my_row_lse_ok(x):
    return _launch(lse_kernel_ok, x)


@triton.jit
def lse_kernel_ok2(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        block_max = tl.max(x, axis=0)
        g_new = tl.maximum(g, block_max)
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        alpha = tl.exp(g - g_ref)
        p = tl.exp(x - g_ref)
        s = alpha * s + tl.sum(p, axis=0)
        g = g_new
    lse = tl.log(s) + g
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "correct", "same algorithm with alpha and p named, a contiguous copy of x and BLOCK = 16")
def my_row_lse_ok2(x):
    xc = x.contiguous()  # a copy when x is a slice: its own row stride is passed
    out = torch.empty(xc.shape[0], dtype=torch.float32, device=xc.device)
    if xc.shape[0] > 0:
        lse_kernel_ok2[(xc.shape[0],)](xc, out, xc.shape[1], xc.stride(0), BLOCK=16)
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


@sol("11.1", "wrong", "TODO 1: other=0.0, so the padding past the end of the row counts as e^0 terms")
def my_row_lse_pad0(x):
    return _launch(lse_kernel_pad0, x)


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


@sol("11.1", "wrong", "TODO 3: adds the block's sum to s but forgets to rescale the old s when the max moves")
def my_row_lse_norescale(x):
    return _launch(lse_kernel_norescale, x)


@triton.jit
def lse_kernel_flipped(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 3: rescale factor upside down, exp(g_ref - g) instead of exp(g - g_ref)")
def my_row_lse_flipped(x):
    return _launch(lse_kernel_flipped, x)


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


@sol("11.1", "wrong", "TODO 4: returns log s and forgets to add back the max g")
def my_row_lse_nolog_g(x):
    return _launch(lse_kernel_nolog_g, x)


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
        s = s * tl.exp(g - g_new) + tl.sum(tl.exp(x - g_new), 0)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 3: measures against g_new instead of g_ref, so a fully masked row gives exp(-inf + inf) = NaN")
def my_row_lse_gnew(x):
    return _launch(lse_kernel_gnew, x)


@triton.jit
def lse_kernel_expdiv(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
        g_new = tl.maximum(g, tl.max(x, 0))
        g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
        s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x), 0) / tl.exp(g_ref)
        g = g_new
    lse = g + tl.log(s)
    tl.store(L + row + tl.arange(0, 1), lse)


@sol("11.1", "wrong", "TODO 3: sums exp(x) then divides by exp(g_ref): same in exact arithmetic, overflows near 1e4")
def my_row_lse_expdiv(x):
    return _launch(lse_kernel_expdiv, x)


@triton.jit
def lse_kernel_bigneg(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 1: other=-1e30 'a very negative number': a fully masked row shorter than a block gives about -1e30, not -inf")
def my_row_lse_bigneg(x):
    return _launch(lse_kernel_bigneg, x)


@triton.jit
def lse_kernel_blockmax(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
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


@sol("11.1", "wrong", "TODO 2: g_new is this block's max only (drops the running max): breaks when the last block is all -inf or the max falls a lot")
def my_row_lse_blockmax(x):
    return _launch(lse_kernel_blockmax, x)


@sol("11.1", "wrong", "wrapper passes the row length x.shape[1] as the row stride, so a slice of a wider tensor reads the wrong rows")
def my_row_lse_stride(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.shape[0] > 0:
        lse_kernel_ok[(x.shape[0],)](x, out, x.shape[1], x.shape[1], BLOCK=32)
    return out


@sol("11.1", "wrong", "wrapper replaces -inf and NaN in x in place first (nan_to_num_), to 'be safe': x changes and NaN no longer propagates")
def my_row_lse_sanitize(x):
    x.nan_to_num_(nan=0.0, posinf=3e38, neginf=-3e38)
    return _launch(lse_kernel_ok, x)


@sol("11.1", "wrong", "wrapper returns out.numpy() (a numpy array) instead of the tensor")
def my_row_lse_numpy(x):
    return _launch(lse_kernel_ok, x).numpy()


# ---------------------------------------------------------------------------------------------------------------
# 11.2  where each quantity lives
# ---------------------------------------------------------------------------------------------------------------

_WHERE = {
    "Q, K, V (the whole arrays)": "HBM",
    "q_tile": "registers",
    "k_tile, v_tile": "shared memory",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "registers",
    "acc": "registers",
    "A, LSE (the results)": "HBM",
}
sol("11.2", "correct", "HBM for the arrays and results, shared memory for k/v tiles, registers for the rest")(dict(_WHERE))
sol("11.2", "correct", "as above but q_tile in shared memory (the tutorial's 'stays in SRAM')")(
    {**_WHERE, "q_tile": "shared memory"})
sol("11.2", "wrong", "puts acc in shared memory because it is too big for registers")(
    {**_WHERE, "acc": "shared memory"})
sol("11.2", "wrong", "puts the score tile x_tile, p_tile in shared memory, like the k/v tiles")(
    {**_WHERE, "x_tile, p_tile": "shared memory"})
sol("11.2", "wrong", "thinks the k/v tiles are loaded into registers, not shared memory")(
    {**_WHERE, "k_tile, v_tile": "registers"})
sol("11.2", "wrong", "thinks the results A, LSE stay in registers (they are written to HBM)")(
    {**_WHERE, "A, LSE (the results)": "registers"})
sol("11.2", "wrong", "thinks the whole Q, K, V are copied into shared memory")(
    {**_WHERE, "Q, K, V (the whole arrays)": "shared memory"})
sol("11.2", "wrong", "puts the row states m_i, l_i in HBM, one float per row")(
    {**_WHERE, "m_i, l_i": "HBM"})


# ---------------------------------------------------------------------------------------------------------------
# 12.1  the backward with key tiles outside
# ---------------------------------------------------------------------------------------------------------------

def _backward(q, k, v, a, lse, grad_a, keep, block_k, *, mistake=None):
    """One parametrised learner backward; `mistake` selects a single error."""
    q, k, v, a, lse, grad_a = (np.asarray(t, np.float64) for t in (q, k, v, a, lse, grad_a))
    keep = np.asarray(keep, bool)
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D) if mistake != "scale_D" else 1 / D
    empty = np.isneginf(lse)
    delta = np.sum(grad_a * np.where(empty[:, None], 0.0, a), axis=1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    starts = range(0, M, block_k) if mistake != "drop_last" else range(0, M - block_k + 1, block_k)
    for c0 in starts:
        c1 = min(c0 + block_k, M)
        kt, vt, kp = k[c0:c1], v[c0:c1], keep[:, c0:c1]
        used = kp.any(axis=0)[:, None]  # keys no row attends: absent, whatever they hold
        kt, vt = np.where(used, kt, 0.0), np.where(used, vt, 0.0)
        x = q @ kt.T if mistake == "x_unscaled" else scale * (q @ kt.T)
        lse_safe = np.where(kp, lse[:, None], 0.0)
        if mistake == "exp_div":
            with np.errstate(over="ignore", invalid="ignore"):
                y = np.where(kp, np.exp(x) / np.exp(lse_safe), 0.0)
        elif mistake == "mult_keep":
            with np.errstate(invalid="ignore"):
                y = np.exp(x - lse[:, None]) * kp
        else:
            y = np.where(kp, np.exp(x - lse_safe), 0.0)
        dy = grad_a @ vt.T
        d_row = np.sum(y * dy, axis=1) if mistake == "delta_tile" else delta
        if mistake == "no_paren":
            dx = np.where(kp, y * dy - d_row[:, None], 0.0)
        else:
            dx = np.where(kp, y * (dy - d_row[:, None]), 0.0)
        dv[c0:c1] += y.T @ grad_a * (scale if mistake == "scale_dv" else 1.0)
        dk[c0:c1] += scale * (dx.T @ q)
        if mistake == "dq_noscale":
            dq += dx @ kt
        elif mistake == "dq_v":
            dq += scale * (dx @ vt)
        else:
            dq += scale * (dx @ kt)
    return dq, dk, dv


@sol("12.1", "correct", "D = rowsum(dA*A) once; per key tile recompute Y = exp(X - L) with np.where, dV, dY, dX, dK, dQ")
def my_backward_ok(q, k, v, a, lse, grad_a, keep, block_k):
    return _backward(q, k, v, a, lse, grad_a, keep, block_k)


@sol("12.1", "correct", "the same with masked pairs selected away inside the products (einsum over kept pairs, NaN-proof keys)")
def my_backward_ok2(q, k, v, a, lse, grad_a, keep, block_k):
    q, k, v, a, grad_a = (np.array(t, dtype=np.float64) for t in (q, k, v, a, grad_a))
    lse = np.array(lse, dtype=np.float64)
    keep = np.asarray(keep).astype(bool)
    N, D = q.shape
    M = k.shape[0]
    scale = D ** -0.5
    a_safe = np.where(np.isneginf(lse)[:, None], 0.0, a)
    delta = (grad_a * a_safe).sum(-1)
    dq = np.zeros((N, D))
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    c0 = 0
    while c0 < M:
        c1 = min(c0 + block_k, M)
        kt, vt, kp = k[c0:c1], v[c0:c1], keep[:, c0:c1]
        with np.errstate(invalid="ignore", over="ignore"):
            x = scale * np.einsum("nd,md->nm", q, kt)
            y = np.where(kp, np.exp(x - np.where(kp, lse[:, None], 0.0)), 0.0)
            dy = np.einsum("nd,md->nm", grad_a, vt)
            dx = np.where(kp, y * (dy - delta[:, None]), 0.0)
        # products over kept pairs only: a masked (possibly NaN) key never enters
        dv[c0:c1] = np.where(kp[:, :, None], y[:, :, None] * grad_a[:, None, :], 0.0).sum(0)
        dk[c0:c1] = scale * np.where(kp[:, :, None], dx[:, :, None] * q[:, None, :], 0.0).sum(0)
        dq += scale * np.where(kp[:, :, None], dx[:, :, None] * kt[None, :, :], 0.0).sum(1)
        c0 = c1
    return dq, dk, dv


for _mistake, _desc in [
    ("scale_dv", "multiplies dV by the scale too (the scale belongs to dQ and dK only)"),
    ("dq_noscale", "forgets the scale 1/sqrt(D) in dQ"),
    ("exp_div", "computes Y as exp(X) / exp(L): overflows for scores above 709"),
    ("delta_tile", "computes D inside the loop as rowsum(Y_ij * dY_ij) of the current tile only"),
    ("drop_last", "loops range(0, M - block_k + 1, block_k): the last, shorter key tile is dropped"),
    ("mult_keep", "multiplies by keep instead of selecting: exp(X - L) * keep gives inf * 0 = NaN on a fully masked row"),
    ("no_paren", "writes dX = Y * dY - D (missing parentheses) instead of Y * (dY - D)"),
    ("dq_v", "dQ accumulates dX @ V_j instead of dX @ K_j"),
    ("x_unscaled", "recomputes X = Q K^T without the scale (kept it only in dQ and dK)"),
    ("scale_D", "uses scale 1/D instead of 1/sqrt(D)"),
]:
    def _make(m):
        def my_backward(q, k, v, a, lse, grad_a, keep, block_k):
            return _backward(q, k, v, a, lse, grad_a, keep, block_k, mistake=m)
        my_backward.__name__ = f"my_backward_{m}"
        return my_backward
    sol("12.1", "wrong", _desc)(_make(_mistake))


@sol("12.1", "wrong", "scales q in place (q *= scale) to fold the scale in once: the caller's q is changed")
def my_backward_inplace(q, k, v, a, lse, grad_a, keep, block_k):
    D = q.shape[1]
    q *= 1 / np.sqrt(D)
    M = k.shape[0]
    delta = np.sum(grad_a * np.where(np.isneginf(lse)[:, None], 0.0, a), axis=1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k, M)
        kp = keep[:, c0:c1]
        x = q @ k[c0:c1].T
        y = np.where(kp, np.exp(x - np.where(kp, lse[:, None], 0.0)), 0.0)
        dx = np.where(kp, y * (grad_a @ v[c0:c1].T - delta[:, None]), 0.0)
        dv[c0:c1] += y.T @ grad_a
        dk[c0:c1] += dx.T @ q  # q already scaled
        dq += dx @ k[c0:c1] / np.sqrt(D)
    return dq, dk, dv


@sol("12.1", "wrong", "tile end c1 = min(c0 + block_k - 1, M): one key per tile is skipped")
def my_backward_offbyone(q, k, v, a, lse, grad_a, keep, block_k):
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D)
    delta = np.sum(grad_a * np.where(np.isneginf(lse)[:, None], 0.0, a), axis=1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k - 1, M)
        kp = keep[:, c0:c1]
        x = scale * q @ k[c0:c1].T
        y = np.where(kp, np.exp(x - np.where(kp, lse[:, None], 0.0)), 0.0)
        dx = np.where(kp, y * (grad_a @ v[c0:c1].T - delta[:, None]), 0.0)
        dv[c0:c1] += y.T @ grad_a
        dk[c0:c1] += scale * dx.T @ q
        dq += scale * dx @ k[c0:c1]
    return dq, dk, dv


# ---------------------------------------------------------------------------------------------------------------
# 13.1  window mask_mod
# ---------------------------------------------------------------------------------------------------------------

@sol("13.1", "correct", "p = q_idx + M - N; start from all True of the broadcast shape, AND each bounded side")
def my_window_ok(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), dtype=bool)
    if left is not None:
        keep &= kv_idx >= p - left
    if right is not None:
        keep &= kv_idx <= p + right
    return keep


@sol("13.1", "correct", "None turned into an infinite bound, then one two-sided comparison")
def my_window_ok2(q_idx, kv_idx, N, M, left, right):
    p = q_idx + (M - N)
    lo = p - left if left is not None else np.full(np.shape(p), -np.inf)
    hi = p + right if right is not None else np.full(np.shape(p), np.inf)
    return (kv_idx >= lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "aligns the window top-left: p = n (forgets + M - N)")
def my_window_topleft(q_idx, kv_idx, N, M, left, right):
    p = q_idx
    lo = p - left if left is not None else -np.inf
    hi = p + right if right is not None else np.inf
    return (kv_idx >= lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "offset with the wrong sign: p = n + N - M")
def my_window_sign(q_idx, kv_idx, N, M, left, right):
    p = q_idx + N - M
    lo = p - left if left is not None else -np.inf
    hi = p + right if right is not None else np.inf
    return (kv_idx >= lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "left edge exclusive: m > p - left")
def my_window_strict(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    lo = p - left if left is not None else -np.inf
    hi = p + right if right is not None else np.inf
    return (kv_idx > lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "swaps left and right (left extent applied after the aligned key)")
def my_window_swapped(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    lo = p - right if right is not None else -np.inf
    hi = p + left if left is not None else np.inf
    return (kv_idx >= lo) & (kv_idx <= hi)


@sol("13.1", "wrong", "treats None as 0 (left or 0), so None means 'no key on that side'")
def my_window_none0(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    return (kv_idx >= p - (left or 0)) & (kv_idx <= p + (right or 0))


@sol("13.1", "wrong", "builds the rows from np.arange(N) instead of q_idx: wrong for a tile")
def my_window_arange(q_idx, kv_idx, N, M, left, right):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    p = n + M - N
    keep = np.ones((N, M), dtype=bool)
    if left is not None:
        keep &= m >= p - left
    if right is not None:
        keep &= m <= p + right
    return keep[np.asarray(q_idx).min():np.asarray(q_idx).min() + np.shape(q_idx)[0], :np.shape(kv_idx)[1]]


@sol("13.1", "wrong", "uses Python 'and' between the two comparisons instead of '&'")
def my_window_and(q_idx, kv_idx, N, M, left, right):
    p = q_idx + M - N
    lo = p - left if left is not None else -np.inf
    hi = p + right if right is not None else np.inf
    return (kv_idx >= lo) and (kv_idx <= hi)


# ---------------------------------------------------------------------------------------------------------------
# 13.2  document mask_mod
# ---------------------------------------------------------------------------------------------------------------

@sol("13.2", "correct", "same document id (doc[q] == doc[kv]) and kv_idx <= q_idx")
def my_document_ok(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "drops the diagonal: kv_idx < q_idx")
def my_document_strict(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx < q_idx)


@sol("13.2", "wrong", "only the same-document test, forgets the causal part")
def my_document_nocausal(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return doc[q_idx] == doc[kv_idx]


@sol("13.2", "wrong", "causal the wrong way round: kv_idx >= q_idx")
def my_document_reversed(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx >= q_idx)


@sol("13.2", "wrong", "doc[kv] <= doc[q] ('key document not after the query's') instead of the same document")
def my_document_le(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    return (doc[kv_idx] <= doc[q_idx]) & (kv_idx <= q_idx)


@sol("13.2", "wrong", "rebuilds segments from np.bincount(doc), assuming sorted ids 0, 1, 2 ...")
def my_document_bincount(q_idx, kv_idx, doc):
    doc = np.asarray(doc)
    counts = np.bincount(doc)
    seg = np.repeat(np.arange(len(counts)), counts)
    return (seg[q_idx] == seg[kv_idx]) & (kv_idx <= q_idx)


# ---------------------------------------------------------------------------------------------------------------
# 13.3  softcap
# ---------------------------------------------------------------------------------------------------------------

@sol("13.3", "correct", "cap * tanh(qk * scale / cap)")
def my_softcap_ok(qk, scale, cap):
    return cap * np.tanh(np.asarray(qk) * scale / cap)


@sol("13.3", "correct", "tanh written as 1 - 2 / (exp(2z) + 1), which is +-1 at +-inf")
def my_softcap_ok2(qk, scale, cap):
    z = np.asarray(qk, dtype=np.float64) * scale / cap
    with np.errstate(over="ignore"):
        t = 1.0 - 2.0 / (np.exp(2.0 * z) + 1.0)
    return cap * t


@sol("13.3", "wrong", "caps the raw dot product, scales after: cap * tanh(qk / cap) * scale")
def my_softcap_scale_after(qk, scale, cap):
    return cap * np.tanh(np.asarray(qk) / cap) * scale


@sol("13.3", "wrong", "forgets to divide by cap inside tanh: cap * tanh(x)")
def my_softcap_nodiv(qk, scale, cap):
    return cap * np.tanh(np.asarray(qk) * scale)


@sol("13.3", "wrong", "forgets the factor cap outside: tanh(x / cap)")
def my_softcap_nomul(qk, scale, cap):
    return np.tanh(np.asarray(qk) * scale / cap)


@sol("13.3", "wrong", "hard cap with np.clip(x, -cap, cap) instead of the smooth tanh")
def my_softcap_clip(qk, scale, cap):
    return np.clip(np.asarray(qk) * scale, -cap, cap)


@sol("13.3", "wrong", "tanh from (e^z - e^-z) / (e^z + e^-z): inf / inf = NaN at +-inf")
def my_softcap_expform(qk, scale, cap):
    z = np.asarray(qk, dtype=np.float64) * scale / cap
    with np.errstate(over="ignore", invalid="ignore"):
        return cap * (np.exp(z) - np.exp(-z)) / (np.exp(z) + np.exp(-z))


@sol("13.3", "wrong", "forgets the scale: cap * tanh(qk / cap)")
def my_softcap_noscale(qk, scale, cap):
    return cap * np.tanh(np.asarray(qk) / cap)


# ---------------------------------------------------------------------------------------------------------------
# 13.4  ALiBi
# ---------------------------------------------------------------------------------------------------------------

@sol("13.4", "correct", "score - slope * |q_idx + M - N - kv_idx|")
def my_alibi_ok(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "distance measured top-left: |q_idx - kv_idx|")
def my_alibi_topleft(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx - kv_idx)


@sol("13.4", "wrong", "adds the bias instead of subtracting it: score + slope * distance")
def my_alibi_plus(score, slope, q_idx, kv_idx, N, M):
    return score + slope * np.abs(q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "no absolute value: score - slope * (p - m), keys after p get a bonus")
def my_alibi_noabs(score, slope, q_idx, kv_idx, N, M):
    return score - slope * (q_idx + M - N - kv_idx)


@sol("13.4", "wrong", "offset with the wrong sign: |n + N - M - m|")
def my_alibi_sign(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + N - M - kv_idx)


@sol("13.4", "wrong", "multiplies the score by the bias factor: score * (1 - slope * distance)")
def my_alibi_mult(score, slope, q_idx, kv_idx, N, M):
    return score * (1 - slope * np.abs(q_idx + M - N - kv_idx))


# ---------------------------------------------------------------------------------------------------------------
# 13.5  tile kind of the bottom-right causal mask
# ---------------------------------------------------------------------------------------------------------------

@sol("13.5", "correct", "from the corners: empty if c0 > r1 - 1 + M - N, full if c1 - 1 <= r0 + M - N, else partial")
def my_tile_kind_ok(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "correct", "builds the tile's small keep mask with np.arange and tests any/all")
def my_tile_kind_ok2(r0, r1, c0, c1, N, M):
    keep = np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None] + (M - N)
    if not keep.any():
        return 0
    return 2 if keep.all() else 1


@sol("13.5", "correct", "int(last row sees first key) + int(first row sees last key)")
def my_tile_kind_ok3(r0, r1, c0, c1, N, M):
    off = int(M) - int(N)
    return int(int(c0) <= int(r1) - 1 + off) + int(int(c1) - 1 <= int(r0) + off)


@sol("13.5", "wrong", "ignores M - N (top-left causal diagonal)")
def my_tile_kind_topleft(r0, r1, c0, c1, N, M):
    if c0 > r1 - 1:
        return 0
    if c1 - 1 <= r0:
        return 2
    return 1


@sol("13.5", "wrong", "treats r1 and c1 as the last row/key (inclusive), not one past")
def my_tile_kind_inclusive(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 + off:
        return 0
    if c1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "swaps the codes: 0 for full and 2 for empty")
def my_tile_kind_swapped(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 2
    if c1 - 1 <= r0 + off:
        return 0
    return 1


@sol("13.5", "wrong", "full test on the first key instead of the last: c0 <= r0 + M - N")
def my_tile_kind_fullc0(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r1 - 1 + off:
        return 0
    if c0 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "offset with the wrong sign: N - M")
def my_tile_kind_sign(r0, r1, c0, c1, N, M):
    off = N - M
    if c0 > r1 - 1 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


@sol("13.5", "wrong", "empty test on the first row instead of the last: c0 > r0 + M - N")
def my_tile_kind_emptyr0(r0, r1, c0, c1, N, M):
    off = M - N
    if c0 > r0 + off:
        return 0
    if c1 - 1 <= r0 + off:
        return 2
    return 1


# ---------------------------------------------------------------------------------------------------------------
# 13.6  paged KV cache
# ---------------------------------------------------------------------------------------------------------------

@sol("13.6", "correct", "pages[block_table[b, t // page_size], t % page_size]")
def my_page_gather_ok(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "wrong", "swaps // and %: pages[block_table[b, t % page_size], t // page_size]")
def my_page_gather_swapped(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t % page_size], t // page_size]


@sol("13.6", "wrong", "ignores the block table: uses the logical page t // page_size as the physical page")
def my_page_gather_notable(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[t // page_size, t % page_size]


@sol("13.6", "wrong", "indexes the block table transposed: block_table[t // page_size, b]")
def my_page_gather_transposed(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[t // page_size, b], t % page_size]


@sol("13.6", "wrong", "takes the page size from pages.shape[-1] (that is D)")
def my_page_gather_pagesize_d(pages, block_table, b, t):
    page_size = pages.shape[-1]
    return pages[block_table[b, t // page_size], t % page_size]


@sol("13.6", "wrong", "counts tokens from 1: uses t - 1")
def my_page_gather_onebased(pages, block_table, b, t):
    page_size = pages.shape[1]
    t = t - 1
    return pages[block_table[b, t // page_size], t % page_size]


# ---------------------------------------------------------------------------------------------------------------
# 14.1  recap quiz
# ---------------------------------------------------------------------------------------------------------------

_QUIZ = {1: "b", 2: "b", 3: "a", 4: "b", 5: "b", 6: "a", 7: "c"}
sol("14.1", "correct", "b, b, a, b, b, a, c")(dict(_QUIZ))
sol("14.1", "wrong", "1: thinks s_i is already the whole row's denominator (a)")({**_QUIZ, 1: "a"})
sol("14.1", "wrong", "2: thinks subtracting the max changes the probabilities slightly (a)")({**_QUIZ, 2: "a"})
sol("14.1", "wrong", "4: thinks a fully masked row gives NaN (a)")({**_QUIZ, 4: "a"})
sol("14.1", "wrong", "5: thinks each key/value tile is read once in all (a), as in the FA1 order")({**_QUIZ, 5: "a"})
sol("14.1", "wrong", "7: puts acc in shared memory (b)")({**_QUIZ, 7: "b"})
sol("14.1", "wrong", "6: thinks Flash-Decoding does fewer operations (b)")({**_QUIZ, 6: "b"})


# ---------------------------------------------------------------------------------------------------------------
# 14.2  FlashAttention-2 for one row
# ---------------------------------------------------------------------------------------------------------------

def _flash_row(q_n, K, V, B_c, *, mistake=None):
    q_n, K, V = (np.asarray(t, dtype=np.float64) for t in (q_n, K, V))
    D = q_n.shape[0]
    M = K.shape[0]
    scale = 1 / D if mistake == "scale_D" else 1 / np.sqrt(D)
    g = 0.0 if mistake == "g0" else -np.inf
    s = 0.0
    acc = np.zeros(V.shape[1], dtype=np.float32 if mistake == "float32" else np.float64)
    stop = M - B_c + 1 if mistake == "drop_last" else M
    for c0 in range(0, stop, B_c):
        x = (K[c0:c0 + B_c] @ q_n) * scale
        if mistake == "nomax":
            g_new = 0.0
        else:
            g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = (s if mistake == "no_s_rescale" else s * alpha) + p.sum()
        pv = np.nansum(p[:, None] * V[c0:c0 + B_c], axis=0) if mistake == "nansum" else p @ V[c0:c0 + B_c]
        acc = (acc if mistake == "no_acc_rescale" else acc * alpha) + pv
        if mistake == "float32":
            acc = acc.astype(np.float32)
        g = g_new
    L = np.log(s) if mistake == "no_g" else g + np.log(s)
    return acc / s, float(L)


@sol("14.2", "correct", "running g, s, acc over the key tiles, alpha = exp(g - g_new), one division acc / s at the end")
def my_flash_row_ok(q_n, K, V, B_c):
    return _flash_row(q_n, K, V, B_c)


@sol("14.2", "correct", "scale folded into a copy of q, tiles counted with ceil(M / B_c), states updated in place")
def my_flash_row_ok2(q_n, K, V, B_c):
    q = np.asarray(q_n, dtype=np.float64) * (1.0 / np.sqrt(len(q_n)))
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    M = K.shape[0]
    g, s = -np.inf, 0.0
    acc = np.zeros(V.shape[1])
    for j in range(-(-M // B_c)):
        kt, vt = K[j * B_c:(j + 1) * B_c], V[j * B_c:(j + 1) * B_c]
        x = kt @ q
        g_new = np.maximum(g, np.max(x))
        corr = np.exp(g - g_new)
        w = np.exp(x - g_new)
        s = corr * s + np.sum(w)
        acc *= corr
        acc += w @ vt
        g = g_new
    a_n = acc / s
    return a_n, float(g + np.log(s))


@sol("14.2", "wrong", "divides at every tile (a = acc / s inside the loop) and returns the last one")
def my_flash_row_divide_each(q_n, K, V, B_c):
    q_n, K, V = (np.asarray(t, dtype=np.float64) for t in (q_n, K, V))
    D, M = q_n.shape[0], K.shape[0]
    g, s, acc = -np.inf, 0.0, np.zeros(V.shape[1])
    a = np.zeros(V.shape[1])
    for c0 in range(0, M, B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        a = acc / s
        g = g_new
    return a, float(g + np.log(s))


for _mistake, _desc in [
    ("g0", "starts the running max at 0 instead of -inf: scores of -1000 underflow to s = 0"),
    ("nomax", "never subtracts a max (exp(x) directly): overflows for scores near 2000"),
    ("no_acc_rescale", "rescales s by alpha but forgets to rescale acc"),
    ("no_s_rescale", "rescales acc by alpha but forgets to rescale s"),
    ("scale_D", "scales the scores by 1/D instead of 1/sqrt(D)"),
    ("no_g", "returns L = log s, forgetting to add the max g"),
    ("drop_last", "loops range(0, M - B_c + 1, B_c): the last, shorter tile is dropped"),
    ("float32", "keeps the accumulator in float32 to save memory (the prompt asks float64, 1e-9)"),
    ("nansum", "uses np.nansum for the tile's weighted values 'to be safe': a NaN in V no longer propagates"),
]:
    def _make_row(m):
        def my_flash_row(q_n, K, V, B_c):
            return _flash_row(q_n, K, V, B_c, mistake=m)
        my_flash_row.__name__ = f"my_flash_row_{m}"
        return my_flash_row
    sol("14.2", "wrong", _desc)(_make_row(_mistake))


@sol("14.2", "wrong", "folds the scale into q in place (q_n *= scale): the caller's array changes")
def my_flash_row_inplace(q_n, K, V, B_c):
    q_n *= 1 / np.sqrt(q_n.shape[0])
    M = K.shape[0]
    g, s, acc = -np.inf, 0.0, np.zeros(V.shape[1])
    for c0 in range(0, M, B_c):
        x = K[c0:c0 + B_c] @ q_n
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, float(g + np.log(s))


@sol("14.2", "wrong", "subtracts the old max g instead of g_new in p: the first tile gives exp(x + inf) = inf")
def my_flash_row_oldmax(q_n, K, V, B_c):
    q_n, K, V = (np.asarray(t, dtype=np.float64) for t in (q_n, K, V))
    D, M = q_n.shape[0], K.shape[0]
    g, s, acc = -np.inf, 0.0, np.zeros(V.shape[1])
    for c0 in range(0, M, B_c):
        x = K[c0:c0 + B_c] @ q_n / np.sqrt(D)
        g_new = max(g, x.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x - g)
        s = s * alpha + p.sum()
        acc = acc * alpha + p @ V[c0:c0 + B_c]
        g = g_new
    return acc / s, float(g + np.log(s))
