"""Learner set 4, part b: chapters 6-10 (exercises 6.1, 7.1, 7.2, 8.1, 8.2, 9.1, 10.1 and the
'Predict, then check' cells P6, P7, P8, P10). Written from the notebooks' prompts alone."""

import math

import numpy as np

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # (prediction, value, kind, description)


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


# =================================================================================================================
# 6.1  my_tile_step(g, s, a, x_tile, v_tile): normalised state (g, s, A') updated by one key tile
# =================================================================================================================

@sol("6.1", "correct", "vectorised, g_new first, guard -inf reference with np.where, divide by s_new")
def tile_step_c1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    denom = np.where(s_new == 0, 1.0, s_new)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / denom[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "row by row like Algorithm 1: tile's own max and sum first, then chapter 2's merge")
def tile_step_c2(g, s, a, x_tile, v_tile):
    B_r = x_tile.shape[0]
    g_new = np.empty(B_r)
    s_new = np.empty(B_r)
    a_new = np.empty_like(a, dtype=np.float64)
    for r in range(B_r):
        row = x_tile[r]
        m_t = row.max()
        p_t = np.exp(row - m_t)
        l_t = p_t.sum()
        gn = max(g[r], m_t)
        old = s[r] * math.exp(g[r] - gn) if g[r] != -math.inf else 0.0
        new = l_t * math.exp(m_t - gn)
        sn = old + new
        g_new[r] = gn
        s_new[r] = sn
        a_new[r] = (old * a[r] + math.exp(m_t - gn) * (p_t @ v_tile)) / sn
    return g_new, s_new, a_new


@sol("6.1", "correct", "log-domain: logsumexp of the tile, merge with logaddexp, weights as exp of differences")
def tile_step_c3(g, s, a, x_tile, v_tile):
    with np.errstate(divide="ignore"):
        L_old = g + np.log(s)  # -inf for the empty state (log 0 = -inf)
    t_max = x_tile.max(axis=1)
    p_t = np.exp(x_tile - t_max[:, None])
    L_tile = t_max + np.log(p_t.sum(axis=1))
    L_new = np.logaddexp(L_old, L_tile)
    g_new = np.maximum(g, t_max)
    s_new = np.exp(L_new - g_new)
    w_old = np.exp(L_old - L_new)
    w_tile = np.exp(L_tile - L_new)
    a_tile = (p_t @ v_tile) / p_t.sum(axis=1)[:, None]
    a_new = w_old[:, None] * a + w_tile[:, None] * a_tile
    return g_new, s_new, a_new


@sol("6.1", "wrong", "keeps the old output rescaled by e^(g - g_new) only, forgot the factor s / s_new")
def tile_step_w1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = a * alpha[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "weights measured against the tile's own max but summed into s without the e^(m~ - g_new) factor")
def tile_step_w2(g, s, a, x_tile, v_tile):
    m_t = x_tile.max(axis=1)
    g_new = np.maximum(g, m_t)
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - m_t[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "exponentiates the raw scores and divides by e^g_new afterwards (overflows at a tile max of 1000)")
def tile_step_w3(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile) / np.exp(g_new)[:, None]
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "updates a in place (a *= ..., a += ...) and returns it: the caller's a is changed")
def tile_step_w4(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a *= (s * alpha / s_new)[:, None]
    a += (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a


@sol("6.1", "wrong", "rescale factor upside down: e^(g_new - g) instead of e^(g - g_new)")
def tile_step_w5(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(over="ignore", invalid="ignore"):
        alpha = np.exp(g_new - g)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "the old sum is not rescaled when the max moves: s_new = s + rowsum(P)")
def tile_step_w6(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "g_new is the tile's row max only, forgot max(g, .) with the old running max")
def tile_step_w7(g, s, a, x_tile, v_tile):
    g_new = x_tile.max(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "takes the max over the whole tile (one number) instead of one max per row")
def tile_step_w8(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, np.max(x_tile))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + np.sum(p, axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "row loop, but the new term P V is not divided by s_new (only the old part is normalised)")
def tile_step_w9(g, s, a, x_tile, v_tile):
    g_out, s_out, a_out = g.copy(), s.copy(), a.copy()
    for r in range(x_tile.shape[0]):
        gn = max(g[r], x_tile[r].max())
        alpha = math.exp(g[r] - gn)
        p = np.exp(x_tile[r] - gn)
        sn = s[r] * alpha + p.sum()
        a_out[r] = a[r] * (s[r] * alpha / sn) + p @ v_tile
        g_out[r], s_out[r] = gn, sn
    return g_out, s_out, a_out


# =================================================================================================================
# 7.1  my_numerator_step(g, s, u, x_tile, v_tile): fa2 step, U = s A', no division, inputs untouched
# =================================================================================================================

@sol("7.1", "correct", "vectorised fa2 step with -inf guard, new arrays")
def numerator_c1(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=-1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    return g_new, s * alpha + p.sum(axis=-1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "correct", "row loop with python floats, copies of the state")
def numerator_c2(g, s, u, x_tile, v_tile):
    g_new, s_new, u_new = np.array(g, dtype=float), np.array(s, dtype=float), np.array(u, dtype=float)
    for r in range(len(g_new)):
        gn = max(float(g[r]), float(np.max(x_tile[r])))
        scale = math.exp(g[r] - gn)
        w = np.exp(x_tile[r] - gn)
        s_new[r] = s[r] * scale + w.sum()
        u_new[r] = u[r] * scale + w @ v_tile
        g_new[r] = gn
    return g_new, s_new, u_new


@sol("7.1", "wrong", "calls the package's fa2_tile_step directly on u (no copy): the caller's u is updated in place")
def numerator_w1(g, s, u, x_tile, v_tile):
    import flashmath as fm
    return fm.flash.fa2_tile_step(g, s, u, x_tile, v_tile, None)


@sol("7.1", "wrong", "divides the numerator by s_new at the end of the step (fa1 habit)")
def numerator_w2(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = (u * alpha[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgot to rescale the numerator: u_new = u + P V")
def numerator_w3(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    return g_new, s * alpha + p.sum(axis=1), u + p @ v_tile


@sol("7.1", "wrong", "rescales u by s * e^(g - g_new), mixing in the fa1 formula for the normalised output")
def numerator_w4(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * (s * alpha)[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "updates s in place with s *= alpha (the caller's s changes)")
def numerator_w5(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s *= alpha
    s_new = s + p.sum(axis=1)
    u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "P measured against the tile's row max instead of g_new")
def numerator_w6(g, s, u, x_tile, v_tile):
    tile_max = x_tile.max(axis=1, keepdims=True)
    g_new = np.maximum(g, tile_max[:, 0])
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - tile_max)
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "wrong", "scores not shifted at all: P = e^X and alpha = 1 (overflows at a tile max of 1000)")
def numerator_w7(g, s, u, x_tile, v_tile):
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_tile)
        g_new = np.maximum(g, x_tile.max(axis=1))
        s_new = s + p.sum(axis=1)
        u_new = u + p @ v_tile
    return g_new, s_new, u_new


# =================================================================================================================
# 7.2  my_finish(g, s, u) -> (a, lse), empty row: a = 0, lse = -inf
# =================================================================================================================

@sol("7.2", "correct", "np.where guards for s = 0, lse = g + log s with divide warnings silenced")
def finish_c1(g, s, u):
    safe = np.where(s == 0, 1.0, s)
    a = u / safe[:, None]
    with np.errstate(divide="ignore"):
        lse = np.where(s == 0, -np.inf, g + np.log(safe))
    return a, lse


@sol("7.2", "correct", "row loop with math.log, empty rows set by hand")
def finish_c2(g, s, u):
    a = np.zeros(u.shape)
    lse = np.full(len(s), -np.inf)
    for r in range(len(s)):
        if s[r] > 0:
            a[r] = u[r] / s[r]
            lse[r] = g[r] + math.log(s[r])
    return a, lse


@sol("7.2", "correct", "divide then np.nan_to_num for the 0/0 rows; lse = g + log(s) (gives -inf there)")
def finish_c3(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.nan_to_num(u / s[:, None])
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "lse = log(e^g * s): overflows for g = 800 and underflows near -1000")
def finish_w1(g, s, u):
    safe = np.where(s == 0, 1.0, s)
    with np.errstate(over="ignore", divide="ignore"):
        lse = np.log(np.exp(g) * s)
    return u / safe[:, None], lse


@sol("7.2", "wrong", "lse = log(s) only, forgot to add the max g")
def finish_w2(g, s, u):
    safe = np.where(s == 0, 1.0, s)
    with np.errstate(divide="ignore"):
        lse = np.log(s)
    return u / safe[:, None], lse


@sol("7.2", "wrong", "uses log10 instead of the natural log")
def finish_w3(g, s, u):
    safe = np.where(s == 0, 1.0, s)
    with np.errstate(divide="ignore"):
        lse = g + np.log10(s)
    return u / safe[:, None], lse


@sol("7.2", "wrong", "plain u / s[:, None] with no guard: an empty row gives 0/0 = NaN")
def finish_w4(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        return u / s[:, None], g + np.log(s)


@sol("7.2", "wrong", "an empty row gets lse = 0 instead of -inf")
def finish_w5(g, s, u):
    a = np.zeros_like(u, dtype=float)
    lse = np.zeros(len(s))
    seen = s > 0
    a[seen] = u[seen] / s[seen][:, None]
    lse[seen] = g[seen] + np.log(s[seen])
    return a, lse


@sol("7.2", "wrong", "divides u by s without [:, None] (broadcasts over the columns, not the rows)")
def finish_w6(g, s, u):
    safe = np.where(s == 0, 1.0, s)
    with np.errstate(divide="ignore"):
        lse = g + np.log(s)
    return u / safe, lse


@sol("7.2", "wrong", "lse written as log(s) - g (sign of g flipped)")
def finish_w7(g, s, u):
    a = np.divide(u, s[:, None], out=np.zeros(np.shape(u)), where=(s[:, None] != 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(s > 0, np.log(s) - g, -np.inf)
    return a, lse


# =================================================================================================================
# 8.1  my_causal_mask(N, M): bottom-right causal, m <= n + M - N, boolean (N, M)
# =================================================================================================================

@sol("8.1", "correct", "index comparison with broadcasting")
def causal_c1(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + (M - N)


@sol("8.1", "correct", "np.tril of a boolean ones matrix with diagonal offset M - N")
def causal_c2(N, M):
    return np.tril(np.ones((N, M), dtype=bool), k=M - N)


@sol("8.1", "wrong", "top-left alignment (torch.tril style): m <= n")
def causal_w1(N, M):
    return np.tril(np.ones((N, M), dtype=bool))


@sol("8.1", "wrong", "offset sign flipped: m <= n + N - M")
def causal_w2(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + N - M


@sol("8.1", "wrong", "strict inequality: a query does not see its own (aligned) key")
def causal_w3(N, M):
    n, m = np.meshgrid(np.arange(N), np.arange(M), indexing="ij")
    return m < n + M - N


@sol("8.1", "wrong", "returns np.tril of np.ones: a float 0/1 array, not booleans")
def causal_w4(N, M):
    return np.tril(np.ones((N, M)), k=M - N)


@sol("8.1", "wrong", "offset clipped at 0: max(M - N, 0), so with N > M no row is empty")
def causal_w5(N, M):
    offset = max(M - N, 0)
    mask = np.zeros((N, M), dtype=bool)
    for n in range(N):
        mask[n, : min(M, n + offset + 1)] = True
    return mask


@sol("8.1", "wrong", "row loop that builds the (M, N) transpose (key index on rows)")
def causal_w6(N, M):
    mask = np.zeros((M, N), dtype=bool)
    for m in range(M):
        for n in range(N):
            mask[m, n] = m <= n + M - N
    return mask


@sol("8.1", "wrong", "uses the absolute difference |M - N| as offset")
def causal_w7(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + abs(M - N)


@sol("8.1", "wrong", "returns the mask of what is hidden (np.triu above the diagonal): True = masked")
def causal_w8(N, M):
    return np.triu(np.ones((N, M), dtype=bool), k=M - N + 1)


# =================================================================================================================
# 8.2  my_masked_tile_step(g, s, a, x_tile, v_tile, keep)
# =================================================================================================================

def _masked_weights(g, x_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    with np.errstate(invalid="ignore"):
        alpha = np.exp(g - ref)
        p = np.where(keep, np.exp(x - ref[:, None]), 0.0)
    return g_new, alpha, p


@sol("8.2", "correct", "select scores with np.where, P V as a masked 3-D sum so masked values are never read")
def masked_c1(g, s, a, x_tile, v_tile, keep):
    g_new, alpha, p = _masked_weights(g, x_tile, keep)
    with np.errstate(invalid="ignore"):
        terms = np.where(keep[:, :, None], p[:, :, None] * v_tile[None, :, :], 0.0)
    pv = terms.sum(axis=1)
    old = s * alpha
    s_new = old + p.sum(axis=1)
    den = np.where(s_new == 0, 1.0, s_new)
    a_new = (old[:, None] * a + pv) / den[:, None]
    return g_new, s_new, a_new


@sol("8.2", "correct", "row loop over the kept keys only (boolean indexing); rows with nothing new keep their state")
def masked_c2(g, s, a, x_tile, v_tile, keep):
    g_new = np.array(g, dtype=float)
    s_new = np.array(s, dtype=float)
    a_new = np.array(a, dtype=float)
    for r in range(x_tile.shape[0]):
        cols = np.flatnonzero(keep[r])
        if cols.size == 0:
            continue
        xr = x_tile[r, cols]
        m_t = xr.max()
        if m_t == -np.inf:  # every kept score is -inf: nothing to add
            continue
        gn = max(g[r], m_t)
        old = s[r] * math.exp(g[r] - gn) if s[r] > 0 else 0.0
        w = np.exp(xr - gn)
        sn = old + w.sum()
        with np.errstate(invalid="ignore"):
            a_new[r] = (old * a[r] + w @ v_tile[cols]) / sn
        g_new[r], s_new[r] = gn, sn
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks by multiplying the weights by keep: NaN/+inf in masked scores give 0*NaN = NaN")
def masked_w1(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, np.where(keep, x_tile, -np.inf).max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x_tile - ref[:, None]) * keep
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "sets masked scores to -inf correctly but uses P @ V: a NaN/inf value row of a masked key leaks in")
def masked_w2(g, s, a, x_tile, v_tile, keep):
    g_new, alpha, p = _masked_weights(g, x_tile, keep)
    with np.errstate(invalid="ignore"):
        pv = p @ v_tile
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "no -inf guard: a row with no key yet computes e^(-inf - (-inf)) = NaN")
def masked_w3(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    with np.errstate(invalid="ignore"):
        alpha = np.exp(g - g_new)
        p = np.where(keep, np.exp(x - g_new[:, None]), 0.0)
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "divides by s_new without a guard: a row that has seen no key gets 0/0 = NaN")
def masked_w4(g, s, a, x_tile, v_tile, keep):
    g_new, alpha, p = _masked_weights(g, x_tile, keep)
    with np.errstate(invalid="ignore"):
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + pv) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "uses -1e9 as 'minus infinity' for masked scores: a row with no key ends with g = -1e9, not -inf")
def masked_w5(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -1e9)
    g_new = np.maximum(g, x.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.where(keep, np.exp(x - g_new[:, None]), 0.0)
    with np.errstate(invalid="ignore"):
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "drops the keys nobody attends, then P @ V on the rest: a partly masked NaN value reaches masked rows")
def masked_w6(g, s, a, x_tile, v_tile, keep):
    used = keep.any(axis=0)
    x = np.where(keep, x_tile, -np.inf)[:, used]
    v = v_tile[used]
    g_new = np.maximum(g, x.max(axis=1)) if x.shape[1] else np.array(g, dtype=float)
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    with np.errstate(invalid="ignore"):
        pv = p @ v
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "cleans the value tile with np.nan_to_num: a row that attends a NaN value row is no longer NaN")
def masked_w7(g, s, a, x_tile, v_tile, keep):
    g_new, alpha, p = _masked_weights(g, x_tile, keep)
    pv = p @ np.nan_to_num(v_tile, nan=0.0, posinf=0.0, neginf=0.0)
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "the new max is taken over the raw tile (masked +inf/NaN scores included)")
def masked_w8(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore"):
        g_new = np.maximum(g, x_tile.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.where(keep, np.exp(np.where(keep, x_tile, -np.inf) - ref[:, None]), 0.0)
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "x_tile[~keep] = -inf is fine, but also zeroes the masked value rows in place: v_tile changed")
def masked_w9(g, s, a, x_tile, v_tile, keep):
    x_tile[~keep] = -np.inf
    dead = ~keep.any(axis=0)
    v_tile[dead] = 0.0
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    with np.errstate(invalid="ignore"):
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


# =================================================================================================================
# 9.1  my_flash_test_ratio(out, q, k, v)
# =================================================================================================================

def _softmax32(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ref64(q, k, v):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    x = q @ k.T / math.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("9.1", "correct", "own naive attention: X, Y, A each computed in float32 and rounded to the input dtype; own float64 reference")
def ratio_c1(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    err_out = np.max(np.abs(out.astype(np.float64) - ref))
    err_naive = np.max(np.abs(naive.astype(np.float64) - ref))
    return err_out / err_naive


@sol("9.1", "correct", "scale folded into q in float64 first, reference from fm.attention, fm.max_abs_error")
def ratio_c2(out, q, k, v):
    import flashmath as fm
    dt = q.dtype
    qs = (q.astype(np.float64) / math.sqrt(q.shape[1])).astype(np.float32)
    x = np.matmul(qs, k.astype(np.float32).T).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = np.matmul(y.astype(np.float32), v.astype(np.float32)).astype(dt)
    ref = fm.attention(q, k, v)
    return fm.max_abs_error(out, ref) / fm.max_abs_error(naive, ref)


@sol("9.1", "wrong", "naive attention computed all in float32 and rounded only once at the end (forgot to round X and Y)")
def ratio_w1(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))
    naive = (_softmax32(x) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "rounds to np.float16 whatever the input dtype (bfloat16 inputs get float16 rounding)")
def ratio_w2(out, q, k, v):
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(np.float16)
    y = _softmax32(x).astype(np.float16)
    naive = (y.astype(np.float32) @ v32).astype(np.float16)
    ref = _ref64(q, k, v)
    return np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "uses np.nanmax for the errors, so an output holding NaN still gives a finite ratio")
def ratio_w3(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.nanmax(np.abs(out.astype(np.float64) - ref)) / np.nanmax(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "ratio upside down: naive error / out error")
def ratio_w4(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.max(np.abs(naive.astype(np.float64) - ref)) / np.max(np.abs(out.astype(np.float64) - ref))


@sol("9.1", "wrong", "forgot the 1/sqrt(D) scale in the naive attention (the reference has it)")
def ratio_w5(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "compares in the inputs' dtype: the reference is rounded to float16/bfloat16 before subtracting")
def ratio_w6(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v).astype(dt)
    e_out = np.max(np.abs((out - ref).astype(np.float64)))
    e_naive = np.max(np.abs((naive - ref).astype(np.float64)))
    return e_out / e_naive


@sol("9.1", "wrong", "mean absolute error instead of the largest absolute error")
def ratio_w7(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x).astype(dt)
    naive = (y.astype(np.float32) @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.mean(np.abs(out.astype(np.float64) - ref)) / np.mean(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "rounds the scores and the output but keeps the probabilities Y in float32")
def ratio_w8(out, q, k, v):
    dt = q.dtype
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x = (q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))).astype(dt)
    y = _softmax32(x)
    naive = (y @ v32).astype(dt)
    ref = _ref64(q, k, v)
    return np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


# =================================================================================================================
# 10.1  my_merge_states(a1, lse1, a2, lse2) -> (a, lse)
# =================================================================================================================

@sol("10.1", "correct", "np.logaddexp for L, shares e^(L_p - L) selected away with np.where where L_p = -inf")
def merge_c1(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))
        a = (np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)
             + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2))
    return a, lse


@sol("10.1", "correct", "row loop with if/else on empty ranges, max-shifted weights")
def merge_c2(a1, lse1, a2, lse2):
    N, Dv = a1.shape
    a = np.zeros((N, Dv))
    lse = np.full(N, -np.inf)
    for n in range(N):
        l1, l2 = float(lse1[n]), float(lse2[n])
        if l1 == -math.inf and l2 == -math.inf:
            continue
        if l1 == -math.inf:
            a[n], lse[n] = a2[n], l2
            continue
        if l2 == -math.inf:
            a[n], lse[n] = a1[n], l1
            continue
        g = max(l1, l2)
        e1, e2 = math.exp(l1 - g), math.exp(l2 - g)
        a[n] = (e1 * a1[n] + e2 * a2[n]) / (e1 + e2)
        lse[n] = g + math.log(e1 + e2)
    return a, lse


@sol("10.1", "correct", "chapter 2 style: common reference g = max(L1, L2) (0 where -inf), sums e^(L_p - g), boolean-index fill")
def merge_c3(a1, lse1, a2, lse2):
    g = np.maximum(lse1, lse2)
    ref = np.where(np.isneginf(g), 0.0, g)
    e1, e2 = np.exp(lse1 - ref), np.exp(lse2 - ref)
    tot = e1 + e2
    with np.errstate(divide="ignore"):
        lse = ref + np.log(tot)
    a = np.zeros(np.broadcast(a1, a2).shape)
    only1 = (e1 > 0) & (e2 == 0)
    only2 = (e2 > 0) & (e1 == 0)
    both = (e1 > 0) & (e2 > 0)
    a[only1] = a1[only1]
    a[only2] = a2[only2]
    a[both] = (e1[both, None] * a1[both] + e2[both, None] * a2[both]) / tot[both, None]
    return a, lse


@sol("10.1", "wrong", "L = log(e^L1 + e^L2) written directly: overflows at 1000, gives -inf near -1000")
def merge_w1(a1, lse1, a2, lse2):
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        lse = np.log(np.exp(lse1) + np.exp(lse2))
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))
        a = (np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)
             + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2))
    return a, lse


@sol("10.1", "wrong", "weights fine, but multiplies the empty range's output by 0 instead of selecting it away (0*NaN)")
def merge_w2(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.where(np.isneginf(lse1), 0.0, np.exp(lse1 - lse))
        w2 = np.where(np.isneginf(lse2), 0.0, np.exp(lse2 - lse))
        a = w1[:, None] * a1 + w2[:, None] * a2
    return a, lse


@sol("10.1", "wrong", "adds the logsumexps (L = L1 + L2) instead of log-adding them")
def merge_w3(a1, lse1, a2, lse2):
    lse = lse1 + lse2
    tot = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - tot))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - tot))
        a = (np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)
             + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2))
    return a, lse


@sol("10.1", "wrong", "L = max(L1, L2): keeps the larger part's logsumexp, forgets to add the other sum")
def merge_w4(a1, lse1, a2, lse2):
    lse = np.maximum(lse1, lse2)
    tot = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - tot))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - tot))
        a = (np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)
             + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2))
    return a, lse


@sol("10.1", "wrong", "softmax weights e^L1 / (e^L1 + e^L2) without shifting: NaN at L = 1000, 0/0 near -1000")
def merge_w5(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(over="ignore", invalid="ignore"):
        e1, e2 = np.exp(lse1), np.exp(lse2)
        w1, w2 = e1 / (e1 + e2), e2 / (e1 + e2)
        a = (np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)
             + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2))
    a = np.where(np.isneginf(lse)[:, None], 0.0, a)
    return a, lse


@sol("10.1", "wrong", "row loop: when a range is empty returns the other one as is, so both empty returns a2's garbage")
def merge_w6(a1, lse1, a2, lse2):
    a = np.empty(np.shape(a1))
    lse = np.empty(len(lse1))
    for n in range(len(lse1)):
        if lse1[n] == -np.inf:
            a[n], lse[n] = a2[n], lse2[n]
        elif lse2[n] == -np.inf:
            a[n], lse[n] = a1[n], lse1[n]
        else:
            L = np.logaddexp(lse1[n], lse2[n])
            a[n] = math.exp(lse1[n] - L) * a1[n] + math.exp(lse2[n] - L) * a2[n]
            lse[n] = L
    return a, lse


@sol("10.1", "wrong", "cleans the result with np.nan_to_num: a row with one empty NaN range becomes 0 instead of the other range")
def merge_w7(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.exp(lse1 - lse)
        w2 = np.exp(lse2 - lse)
        a = np.nan_to_num(w1[:, None] * a1 + w2[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "plain average of the two outputs, ignoring how much each range weighs")
def merge_w8(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    e1, e2 = ~np.isneginf(lse1), ~np.isneginf(lse2)
    cnt = (e1.astype(float) + e2.astype(float))
    a = (np.where(e1[:, None], a1, 0.0) + np.where(e2[:, None], a2, 0.0)) / np.where(cnt == 0, 1, cnt)[:, None]
    return a, lse


# =================================================================================================================
# Predictions
# =================================================================================================================

PREDICTIONS += [
    ("P6", 12, "correct", "fa1 reads all of Q once per key tile: T_c = ceil(46 / 4) = 12"),
    ("P6", 6, "wrong", "counted the query tiles T_r = ceil(46 / 8) instead of the key tiles"),
    ("P6", 11.5, "wrong", "divided 46 / 4 without rounding up (a tile count is a whole number)"),
    ("P6", 1, "wrong", "thought Q is loaded once, as in the fa2 order"),
    ("P7", 1, "correct", "B_r x D_v divisions per key tile shared by B_r x B_c scores: D_v / B_c = 64 / 64 = 1"),
    ("P7", 0.125, "wrong", "gave the fa2 count D_v / M (divide once at the end)"),
    ("P7", 8, "wrong", "counted how often each output element is divided (T_c = 512 / 64), not per score"),
    ("P7", 64, "wrong", "thought every score costs D_v divisions"),
    ("P8", 28, "correct", "strict upper triangle of the 8 x 8 grid: 8 * 7 / 2"),
    ("P8", 36, "wrong", "counted the diagonal tiles as skipped too: 8 * 9 / 2"),
    ("P8", 32, "wrong", "half of the 64 tiles, forgetting the diagonal tiles are partial"),
    ("P8", 56, "wrong", "counted both triangles off the diagonal"),
    ("P10", 3, "correct", "6 -> 3 -> 2 -> 1: three levels, the odd one carried up"),
    ("P10", 5, "wrong", "counted the merges (each removes one state) instead of the levels"),
    ("P10", 2, "wrong", "floor(log2 6) = 2, forgetting the odd range carried up"),
    ("P10", 4, "wrong", "counted the lists 6, 3, 2, 1 instead of the steps between them"),
]
