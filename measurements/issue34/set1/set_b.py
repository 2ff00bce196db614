"""Learner-style solutions, set B: chapters 6-10 (exercises 6.1, 7.1, 7.2, 8.1, 8.2, 9.1, 10.1 and the
'Predict, then check' cells P6, P7, P8, P10).

Written from the notebooks' prompts and chapter text only (see README.md). Each entry is one learner: the
correct ones are equivalent forms a good learner writes, the wrong ones each hold one realistic near-miss.
"""

import math

import numpy as np

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # (prediction, value, kind, description)


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn

    return add


# ================================================================================================================
# 6.1  my_tile_step(g, s, a, x_tile, v_tile) -> (g_new, s_new, a_new), a normalised
# ================================================================================================================


@sol("6.1", "correct", "the chapter's three equations, vectorised over the rows")
def tile_step_c1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "Algorithm 1 style: the tile's own max and sum first, then two rescale factors")
def tile_step_c2(g, s, a, x_tile, v_tile):
    with np.errstate(invalid="ignore", over="ignore"):
        m_tile = np.max(x_tile, axis=-1)
        p_tile = np.exp(x_tile - m_tile[:, None])
        l_tile = np.sum(p_tile, axis=-1)
        m_new = np.maximum(g, m_tile)
        alpha = np.exp(g - m_new)
        beta = np.exp(m_tile - m_new)
        l_new = alpha * s + beta * l_tile
        a_new = ((alpha * s)[:, None] * a + beta[:, None] * (p_tile @ v_tile)) / l_new[:, None]
    return m_new, l_new, a_new


@sol("6.1", "correct", "a plain Python loop over the rows of the tile")
def tile_step_c3(g, s, a, x_tile, v_tile):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    a = np.asarray(a, dtype=float)
    x_tile = np.asarray(x_tile, dtype=float)
    v_tile = np.asarray(v_tile, dtype=float)
    B_r = x_tile.shape[0]
    g_new = np.empty(B_r)
    s_new = np.empty(B_r)
    a_new = np.empty((B_r, v_tile.shape[1]))
    with np.errstate(invalid="ignore", over="ignore"):
        for n in range(B_r):
            row = x_tile[n]
            gn = max(g[n], row.max()) if not np.isnan(row).any() and not np.isnan(g[n]) else np.nan
            old = s[n] * np.exp(g[n] - gn)
            w = np.exp(row - gn)
            sn = old + w.sum()
            g_new[n] = gn
            s_new[n] = sn
            a_new[n] = a[n] * old / sn + (w @ v_tile) / sn
    return g_new, s_new, a_new


@sol("6.1", "correct", "convex combination: the old average and the tile's own average, weighted by their shares")
def tile_step_c4(g, s, a, x_tile, v_tile):
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, x_tile.max(axis=1))
        old = s * np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        tile_sum = p.sum(axis=1)
        s_new = old + tile_sum
        share_old = (old / s_new)[:, None]
        tile_avg = (p @ v_tile) / tile_sum[:, None]
        a_new = share_old * a + (1 - share_old) * tile_avg
    return g_new, s_new, a_new


@sol("6.1", "wrong", "rescale factor inverted: e^(g_new - g) instead of e^(g - g_new)")
def tile_step_w1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g_new - g)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgot to rescale the old sum: s_new = s + sum of the tile's weights")
def tile_step_w2(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "tile max taken over axis 0 (per key column) instead of per row")
def tile_step_w3(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=0))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgot [:, None] when subtracting the row max from the tile (broadcasts along the keys)")
def tile_step_w4(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new)
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgot to divide the new tile's term P V by s_new")
def tile_step_w5(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + p @ v_tile
    return g_new, s_new, a_new


@sol("6.1", "wrong", "divides the new state by the old s instead of s_new")
def tile_step_w6(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        s_div = np.where(s == 0, 1, s)  # (guard for the first tile)
        a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_div[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgot the factor s in the old term: A' rescaled by e^(g - g_new) / s_new only")
def tile_step_w7(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * alpha[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "weights taken against the tile's own max but summed without the beta = e^(tile max - g_new) factor")
def tile_step_w8(g, s, a, x_tile, v_tile):
    with np.errstate(invalid="ignore", over="ignore"):
        m_tile = x_tile.max(axis=1)
        p = np.exp(x_tile - m_tile[:, None])
        g_new = np.maximum(g, m_tile)
        alpha = np.exp(g - g_new)
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "updates a in place (a *= ...), so the caller's state is changed")
def tile_step_w9(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a *= (s * alpha / s_new)[:, None]
        a += (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a


@sol("6.1", "wrong", "one max for the whole tile (x_tile.max() without axis) instead of one per row")
def tile_step_w10(g, s, a, x_tile, v_tile):
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, x_tile.max())
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "overwrites s with s_new before using the old s in the output update")
def tile_step_w11(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s = s * alpha + p.sum(axis=1)
        a_new = a * (s * alpha / s)[:, None] + (p @ v_tile) / s[:, None]
    return g_new, s, a_new


@sol("6.1", "wrong", "row sums of P taken over axis 0 (sums the columns)")
def tile_step_w12(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=0)
        a_new = a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


# ================================================================================================================
# 7.1  my_numerator_step(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new), no division
# ================================================================================================================


@sol("7.1", "correct", "the chapter's query_tile_fa2 loop body, pasted")
def numerator_step_c1(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p_tile = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p_tile.sum(axis=1)
        u_new = u * alpha[:, None] + p_tile @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "correct", "keepdims everywhere and einsum for P V")
def numerator_step_c2(g, s, u, x_tile, v_tile):
    with np.errstate(invalid="ignore", over="ignore"):
        row_max = np.max(x_tile, axis=1, keepdims=True)  # (B_r, 1)
        g_new = np.maximum(g[:, None], row_max)  # (B_r, 1)
        scale = np.exp(g[:, None] - g_new)
        p = np.exp(x_tile - g_new)
        s_new = (s[:, None] * scale + p.sum(axis=1, keepdims=True))[:, 0]
        u_new = u * scale + np.einsum("rc,cd->rd", p, v_tile)
    return g_new[:, 0], s_new, u_new


@sol("7.1", "correct", "loop over rows, np.dot per row")
def numerator_step_c3(g, s, u, x_tile, v_tile):
    x_tile = np.asarray(x_tile, dtype=float)
    v_tile = np.asarray(v_tile, dtype=float)
    g_out = np.array(g, dtype=float, copy=True)
    s_out = np.array(s, dtype=float, copy=True)
    u_out = np.array(u, dtype=float, copy=True)
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(x_tile.shape[0]):
            gn = np.maximum(g_out[r], np.max(x_tile[r]))
            c = np.exp(g_out[r] - gn)
            w = np.exp(x_tile[r] - gn)
            s_out[r] = s_out[r] * c + w.sum()
            u_out[r] = u_out[r] * c + np.dot(w, v_tile)
            g_out[r] = gn
    return g_out, s_out, u_out


@sol("7.1", "wrong", "still divides by s_new (returns the normalised A' instead of the numerator U)")
def numerator_step_w1(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = (u * alpha[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgot to rescale U when the max moves: u_new = u + P V")
def numerator_step_w2(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "rescale factor inverted: e^(g_new - g)")
def numerator_step_w3(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g_new - g)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "carried chapter 6's factor over: U rescaled by s * e^(g - g_new)")
def numerator_step_w4(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u * (s * alpha)[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgot [:, None] on the rescale of U (alpha broadcast along the value columns)")
def numerator_step_w5(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u * alpha + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "new max from the tile alone: g_new = rowmax(X_ij), forgetting the old g")
def numerator_step_w6(g, s, u, x_tile, v_tile):
    g_new = x_tile.max(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgot to rescale s (s_new = s + rowsum P), U rescaled correctly")
def numerator_step_w7(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s + p.sum(axis=1)
        u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "weights measured against the old max g instead of g_new")
def numerator_step_w8(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g[:, None])
        s_new = s * alpha + p.sum(axis=1)
        u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


# ================================================================================================================
# 7.2  my_finish(g, s, u) -> (a, lse)
# ================================================================================================================


@sol("7.2", "correct", "divide by s with 0 replaced by 1; lse = g + log(s) with warnings silenced")
def finish_c1(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1, s)[:, None]
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "correct", "np.where on the empty rows, for both A and L")
def finish_c2(g, s, u):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    u = np.asarray(u, dtype=float)
    empty = s == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(empty[:, None], 0.0, u / s[:, None])
        lse = np.where(empty, -np.inf, g + np.log(s))
    return a, lse


@sol("7.2", "correct", "row loop with math.log")
def finish_c3(g, s, u):
    u = np.asarray(u, dtype=float)
    a = np.zeros_like(u)
    lse = np.empty(len(s))
    for n in range(len(s)):
        if s[n] == 0:
            lse[n] = -math.inf
        elif np.isnan(s[n]) or np.isnan(g[n]):
            lse[n] = math.nan
            a[n] = u[n] / s[n]
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                a[n] = u[n] / s[n]
            lse[n] = g[n] + math.log(s[n]) if np.isfinite(s[n]) else g[n] + np.log(s[n])
    return a, lse


@sol("7.2", "wrong", "logsumexp in base 2: g + log2(s)")
def finish_w1(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1, s)[:, None]
        lse = g + np.log2(s)
    return a, lse


@sol("7.2", "wrong", "forgot the max: lse = log(s)")
def finish_w2(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1, s)[:, None]
        lse = np.log(s)
    return a, lse


@sol("7.2", "wrong", "lse = log(e^g * s): the definition written literally, e^g overflows for large g")
def finish_w3(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = u / np.where(s == 0, 1, s)[:, None]
        lse = np.log(np.exp(g) * s)
    return a, lse


@sol("7.2", "wrong", "plain U / s: a row that saw no key gets 0/0 = NaN")
def finish_w4(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / s[:, None]
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "empty row gets lse = +inf (FlashAttention-2 kernel's convention) instead of -inf")
def finish_w5(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1, s)[:, None]
        lse = np.where(s == 0, np.inf, g + np.log(s))
    return a, lse


@sol("7.2", "wrong", "forgot [:, None]: u / s broadcasts s along the value columns")
def finish_w6(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1, s)
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "reused chapter 8's guards for g and s in the logsumexp too: empty row gets lse = 0 + log 1 = 0")
def finish_w7(g, s, u):
    g_ref = np.where(g == -np.inf, 0, g)
    s_ref = np.where(s == 0, 1, s)
    a = u / s_ref[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = g_ref + np.log(s_ref)
    return a, lse


# ================================================================================================================
# 8.1  my_causal_mask(N, M): bottom-right, query n sees key m when m <= n + M - N
# ================================================================================================================


@sol("8.1", "correct", "index comparison with broadcasting, as in the prompt's formula")
def causal_c1(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + (M - N)


@sol("8.1", "correct", "np.tril of a boolean ones matrix with offset k = M - N")
def causal_c2(N, M):
    return np.tril(np.ones((N, M), dtype=bool), k=M - N)


@sol("8.1", "correct", "np.tri with dtype=bool")
def causal_c3(N, M):
    return np.tri(N, M, M - N, dtype=bool)


@sol("8.1", "correct", "double loop filling a boolean array")
def causal_c4(N, M):
    out = np.zeros((int(N), int(M)), dtype=bool)
    for n in range(int(N)):
        for m in range(int(M)):
            out[n, m] = m <= n + M - N
    return out


@sol("8.1", "wrong", "top-left alignment (torch.tril style): m <= n")
def causal_w1(N, M):
    return np.tril(np.ones((N, M), dtype=bool))


@sol("8.1", "wrong", "off by one: strict m < n + M - N (the diagonal masked)")
def causal_w2(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m < n + M - N


@sol("8.1", "wrong", "offset sign flipped: m <= n + N - M")
def causal_w3(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + N - M


@sol("8.1", "wrong", "np.tril of np.ones without dtype: returns a float 0/1 array, not a boolean one")
def causal_w4(N, M):
    return np.tril(np.ones((N, M)), k=M - N)


@sol("8.1", "wrong", "np.triu instead of np.tril (keys after the query kept)")
def causal_w5(N, M):
    return np.triu(np.ones((N, M), dtype=bool), k=M - N)


@sol("8.1", "wrong", "True marks the masked pairs (m > n + M - N) instead of the attended ones")
def causal_w6(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m > n + M - N


@sol("8.1", "wrong", "offset taken as |M - N|, wrong when N > M")
def causal_w7(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + abs(M - N)


@sol("8.1", "wrong", "off by one the other way: 1-based key index, m + 1 <= n + M - N")
def causal_w8(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m + 1 <= n + M - N


# ================================================================================================================
# 8.2  my_masked_tile_step(g, s, a, x_tile, v_tile, keep)
# ================================================================================================================


def _select_pv(p, v_tile, keep):
    """P V with masked terms selected away (never 0 * NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        terms = p[:, :, None] * v_tile[None, :, :]  # (B_r, B_c, Dv)
        return np.where(keep[:, :, None], terms, 0.0).sum(axis=1)


@sol("8.2", "correct", "scores to -inf with np.where, max measured against 0 for empty rows, masked terms selected away")
def masked_c1(g, s, a, x_tile, v_tile, keep):
    keep = np.asarray(keep, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, np.asarray(v_tile, dtype=float), keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "correct", "row by row with boolean indexing: only the kept keys of each row enter")
def masked_c2(g, s, a, x_tile, v_tile, keep):
    x_tile = np.asarray(x_tile, dtype=float)
    v_tile = np.asarray(v_tile, dtype=float)
    keep = np.asarray(keep, dtype=bool)
    B_r = x_tile.shape[0]
    g_new = np.array(g, dtype=float, copy=True)
    s_new = np.array(s, dtype=float, copy=True)
    a_new = np.array(a, dtype=float, copy=True)
    with np.errstate(invalid="ignore", over="ignore"):
        for n in range(B_r):
            xs = x_tile[n, keep[n]]
            vs = v_tile[keep[n]]
            if xs.size == 0:
                continue  # nothing attended in this tile: state unchanged
            gn = np.maximum(g[n], xs.max())
            if gn == -np.inf:
                continue  # every kept score is -inf: still no weight, state unchanged
            old = s[n] * np.exp(g[n] - gn)
            w = np.exp(xs - gn)
            sn = old + w.sum()
            g_new[n], s_new[n] = gn, sn
            a_new[n] = (a[n] * old + w @ vs) / sn
    return g_new, s_new, a_new


@sol("8.2", "correct", "Algorithm 1 form (tile max first) with the max_or_zero guard and masked value rows selected per row")
def masked_c3(g, s, a, x_tile, v_tile, keep):
    keep = np.asarray(keep, dtype=bool)
    v_tile = np.asarray(v_tile, dtype=float)

    def max_or_zero(m):
        return np.where(m == -np.inf, 0.0, m)

    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        m_loc = x.max(axis=1)
        p = np.exp(x - max_or_zero(m_loc)[:, None])
        l_loc = p.sum(axis=1)
        m_new = np.maximum(g, m_loc)
        ref = max_or_zero(m_new)
        alpha, beta = np.exp(g - ref), np.exp(m_loc - ref)
        l_new = s * alpha + l_loc * beta
        pv = np.stack([np.where(keep[n][:, None], p[n][:, None] * v_tile, 0.0).sum(axis=0)
                       for n in range(x.shape[0])]) if x.shape[0] else np.zeros((0, v_tile.shape[1]))
        a_new = ((s * alpha)[:, None] * a + beta[:, None] * pv) / np.where(l_new == 0, 1, l_new)[:, None]
    return m_new, l_new, a_new


@sol("8.2", "wrong", "masks the weights after exp (p * keep) but takes the max over the unmasked scores")
def masked_w1(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, x_tile.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.where(keep, np.exp(x_tile - ref[:, None]), 0.0)
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masked scores set to -inf but P V a plain matrix product: a NaN value row of a masked key leaks (0 * NaN)")
def masked_w2(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = (a * (s * alpha)[:, None] + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "no guard for a row with no key yet: exp(-inf - (-inf)) makes it NaN")
def masked_w3(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "finite fill -1e9 instead of -inf for masked scores (a fully masked row averages the masked keys)")
def masked_w4(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -1e9)
        g_new = np.maximum(g, x.max(axis=1))
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "guarded the weights but not the final division: a row still empty gets 0/0 = NaN in A'")
def masked_w5(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "keep read the wrong way round (True taken as 'masked')")
def masked_w6(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, -np.inf, x_tile)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, ~np.asarray(keep, dtype=bool))
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks by multiplying the scores by keep (masked score 0, not -inf)")
def masked_w7(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = x_tile * keep
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "additive mask x + log(keep): a NaN or +inf masked score survives (NaN + -inf = NaN)")
def masked_w8(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        x = x_tile + np.log(np.asarray(keep, dtype=float))
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "max_or_zero applied to the weights only; the rescale e^(g - g_new) is -inf - (-inf) = NaN for an empty row")
def masked_w9(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - g_new)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        pv = _select_pv(p, v_tile, keep)
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "zeroes the masked keys' value rows by multiplying v by the mask (NaN * 0 = NaN)")
def masked_w10(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        v_masked = v_tile * np.asarray(keep).any(axis=0)[:, None]
        a_new = (a * (s * alpha)[:, None] + p @ v_masked) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "drops the value rows of keys no row of the tile attends (kernel style), so a key masked for "
                     "one row but attended by another still brings 0 * NaN into the masked row")
def masked_w11(g, s, a, x_tile, v_tile, keep):
    keep = np.asarray(keep, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(keep, x_tile, -np.inf)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        used = keep.any(axis=0)
        pv = p[:, used] @ v_tile[used]
        a_new = (a * (s * alpha)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


# ================================================================================================================
# 9.1  my_flash_test_ratio(out, q, k, v)
# ================================================================================================================


def _ref64(q, k, v):
    q64, k64, v64 = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    x = q64 @ k64.T / math.sqrt(q64.shape[-1])
    x = x - x.max(axis=-1, keepdims=True)
    y = np.exp(x)
    y /= y.sum(axis=-1, keepdims=True)
    return y @ v64


def _softmax32(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _naive(q, k, v, *, fold_scale=True):
    dt = q.dtype
    D = q.shape[-1]
    if fold_scale:
        qs = (q.astype(np.float64) / math.sqrt(D)).astype(np.float32)
        x = (qs @ k.astype(np.float32).T).astype(dt)
    else:
        x = (q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(D))).astype(dt)
    y = _softmax32(x).astype(dt)
    return (y.astype(np.float32) @ v.astype(np.float32)).astype(dt)


def _maxerr(out, ref):
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref))


@sol("9.1", "correct", "scale applied in float32 after Q K^T; X, Y, A each rounded to the input dtype; max abs errors")
def ratio_c1(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=False)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "correct", "scale folded into Q in float64 first (as the package does), then the three rounded steps")
def ratio_c2(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=True)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "correct", "written out inline, scores scaled in float32 by multiplying with 1/sqrt(D)")
def ratio_c3(out, q, k, v):
    dtype = q.dtype
    f32 = np.float32
    scale = 1.0 / np.sqrt(q.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):
        # float64 reference of the same (already rounded) inputs
        s64 = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
        p64 = np.exp(s64 - s64.max(axis=1, keepdims=True))
        ref = (p64 / p64.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
        # naive: three kernels, each result stored in the input dtype
        s = ((q.astype(f32) @ k.astype(f32).T) * f32(scale)).astype(dtype)
        s32 = s.astype(f32)
        e = np.exp(s32 - s32.max(axis=1, keepdims=True))
        p = (e / e.sum(axis=1, keepdims=True)).astype(dtype)
        a_naive = (p.astype(f32) @ v.astype(f32)).astype(dtype)
        err_out = np.abs(out.astype(np.float64) - ref).max()
        err_naive = np.abs(a_naive.astype(np.float64) - ref).max()
    return float(err_out / err_naive)


@sol("9.1", "wrong", "ratio inverted: naive error divided by the output's error")
def ratio_w1(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=False)
        return float(_maxerr(naive, ref) / _maxerr(out, ref))


@sol("9.1", "wrong", "naive attention computed all in float32 and rounded only once at the end (X and Y not stored)")
def ratio_w2(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        x = q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(q.shape[1]))
        naive = (_softmax32(x) @ v.astype(np.float32)).astype(q.dtype)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "wrong", "naive softmax computed in the input dtype without subtracting the max (e^x overflows float16)")
def ratio_w3(out, q, k, v):
    dt = q.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        x = (q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(q.shape[1]))).astype(dt)
        e = np.exp(x)  # in float16 / bfloat16
        y = (e / e.sum(axis=-1, keepdims=True)).astype(dt)
        naive = (y.astype(np.float32) @ v.astype(np.float32)).astype(dt)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "wrong", "reference rounded to the input dtype instead of kept in float64")
def ratio_w4(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = _ref64(q, k, v).astype(q.dtype).astype(np.float64)
        naive = _naive(q, k, v, fold_scale=False)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "wrong", "mean absolute error instead of the largest")
def ratio_w5(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=False)
        e_out = np.mean(np.abs(out.astype(np.float64) - ref))
        e_naive = np.mean(np.abs(naive.astype(np.float64) - ref))
        return float(e_out / e_naive)


@sol("9.1", "wrong", "largest signed difference max(out - ref), forgot the absolute value")
def ratio_w6(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=False)
        e_out = np.max(out.astype(np.float64) - ref)
        e_naive = np.max(naive.astype(np.float64) - ref)
        return float(e_out / e_naive)


@sol("9.1", "wrong", "element-wise relative error max(|out - ref| / |ref|) instead of the absolute error")
def ratio_w7(out, q, k, v):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = _ref64(q, k, v)
        naive = _naive(q, k, v, fold_scale=False)
        e_out = np.max(np.abs(out.astype(np.float64) - ref) / np.abs(ref))
        e_naive = np.max(np.abs(naive.astype(np.float64) - ref) / np.abs(ref))
        return float(e_out / e_naive)


@sol("9.1", "wrong", "naive attention without the 1/sqrt(D) scale")
def ratio_w8(out, q, k, v):
    dt = q.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        x = (q.astype(np.float32) @ k.astype(np.float32).T).astype(dt)
        y = _softmax32(x).astype(dt)
        naive = (y.astype(np.float32) @ v.astype(np.float32)).astype(dt)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "wrong", "naive attention rounds X and A but keeps the probabilities Y in float32")
def ratio_w9(out, q, k, v):
    dt = q.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        x = (q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(q.shape[1]))).astype(dt)
        y = _softmax32(x)
        naive = (y @ v.astype(np.float32)).astype(dt)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


@sol("9.1", "wrong", "differences taken in the input dtype: ref cast to float16/bfloat16 before subtracting")
def ratio_w10(out, q, k, v):
    dt = q.dtype
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = _ref64(q, k, v).astype(dt)
        naive = _naive(q, k, v, fold_scale=False)
        e_out = np.max(np.abs(out.astype(dt) - ref)).astype(np.float64)
        e_naive = np.max(np.abs(naive - ref)).astype(np.float64)
        return float(e_out / e_naive)


@sol("9.1", "wrong", "naive softmax normalised over axis 0 (over the queries) instead of over the keys")
def ratio_w11(out, q, k, v):
    dt = q.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _ref64(q, k, v)
        x = (q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(q.shape[1]))).astype(dt)
        x32 = x.astype(np.float32)
        e = np.exp(x32 - x32.max(axis=0, keepdims=True))
        y = (e / e.sum(axis=0, keepdims=True)).astype(dt)
        naive = (y.astype(np.float32) @ v.astype(np.float32)).astype(dt)
        return float(_maxerr(out, ref) / _maxerr(naive, ref))


# ================================================================================================================
# 10.1  my_merge_states(a1, lse1, a2, lse2) -> (a, lse)
# ================================================================================================================


@sol("10.1", "correct", "np.logaddexp for L, shares e^(L_p - L), an empty range selected away with np.where")
def merge_c1(a1, lse1, a2, lse2):
    a1, lse1, a2, lse2 = (np.asarray(t, dtype=float) for t in (a1, lse1, a2, lse2))
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.exp(lse1 - lse)[:, None]
        w2 = np.exp(lse2 - lse)[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "correct", "chapter 2's merge: shift by the larger L (0 if both empty), sum, log; divide with 0 -> 1")
def merge_c2(a1, lse1, a2, lse2):
    a1, lse1, a2, lse2 = (np.asarray(t, dtype=float) for t in (a1, lse1, a2, lse2))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.maximum(lse1, lse2)
        ref = np.where(m == -np.inf, 0.0, m)
        e1 = np.exp(lse1 - ref)
        e2 = np.exp(lse2 - ref)
        total = e1 + e2
        lse = ref + np.log(total)
        num = np.where(lse1[:, None] == -np.inf, 0.0, e1[:, None] * a1) \
            + np.where(lse2[:, None] == -np.inf, 0.0, e2[:, None] * a2)
        a = num / np.where(total == 0, 1.0, total)[:, None]
    return a, lse


@sol("10.1", "correct", "convex combination with a sigmoid share w = 1 / (1 + e^(L2 - L1)), empty ranges handled first")
def merge_c3(a1, lse1, a2, lse2):
    a1, lse1, a2, lse2 = (np.asarray(t, dtype=float) for t in (a1, lse1, a2, lse2))
    empty1 = lse1 == -np.inf
    empty2 = lse2 == -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        w1 = 1.0 / (1.0 + np.exp(lse2 - lse1))
        w1 = np.where(empty1, 0.0, np.where(empty2, 1.0, w1))
        w2 = np.where(empty2, 0.0, np.where(empty1, 1.0, 1.0 - w1))
        w1 = np.where(empty1 & empty2, 0.0, w1)
        a = np.where(empty1[:, None], 0.0, w1[:, None] * a1) + np.where(empty2[:, None], 0.0, w2[:, None] * a2)
        lse = np.logaddexp(lse1, lse2)
    return a, lse


@sol("10.1", "wrong", "L = log(e^L1 + e^L2) written literally: e^1000 overflows to inf")
def merge_w1(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        lse = np.log(np.exp(lse1) + np.exp(lse2))
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))[:, None]
        a = np.where(w1 == 0, 0.0, w1 * a1) + np.where(w2 == 0, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "weights not normalised: A = e^L1 A1 + e^L2 A2 (forgot dividing by e^L)")
def merge_w2(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.exp(lse1)[:, None]
        w2 = np.exp(lse2)[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "empty range multiplied by its share 0 instead of selected away: 0 * NaN = NaN leaks")
def merge_w3(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        a = np.exp(lse1 - lse)[:, None] * a1 + np.exp(lse2 - lse)[:, None] * a2
    return a, lse


@sol("10.1", "wrong", "plain average (A1 + A2) / 2, ignoring how much each range weighs")
def merge_w4(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        a1c = np.where(lse1[:, None] == -np.inf, 0.0, a1)
        a2c = np.where(lse2[:, None] == -np.inf, 0.0, a2)
        count = (lse1 != -np.inf).astype(float) + (lse2 != -np.inf).astype(float)
        a = (a1c + a2c) / np.where(count == 0, 1, count)[:, None]
    return a, lse


@sol("10.1", "wrong", "merged logsumexp taken as max(L1, L2), the sum of the two ranges forgotten")
def merge_w5(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse_sum = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse_sum))[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse_sum))[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
        lse = np.maximum(lse1, lse2)
    return a, lse


@sol("10.1", "wrong", "logsumexps added (L1 + L2) as if the sums multiplied")
def merge_w6(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - total))[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - total))[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
        lse = lse1 + lse2
    return a, lse


@sol("10.1", "wrong", "forgot [:, None] on the shares (broadcast along the value columns)")
def merge_w7(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "shifted by the larger L as in chapter 2, without a guard: both ranges empty gives 0/0 = NaN")
def merge_w8(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.maximum(lse1, lse2)
        e1 = np.exp(lse1 - m)
        e2 = np.exp(lse2 - m)
        total = e1 + e2
        lse = m + np.log(total)
        num = np.where(lse1[:, None] == -np.inf, 0.0, e1[:, None] * a1) \
            + np.where(lse2[:, None] == -np.inf, 0.0, e2[:, None] * a2)
        a = num / total[:, None]
    return a, lse


@sol("10.1", "wrong", "np.logaddexp2 (base 2, as in Triton's tutorial) for logsumexps that are natural logs")
def merge_w9(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp2(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp2(lse1 - lse))[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp2(lse2 - lse))[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "share inverted: e^(L - L_p) instead of e^(L_p - L)")
def merge_w10(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse - lse1))[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse - lse2))[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "shares as e^L1 / (e^L1 + e^L2): overflows to inf / inf = NaN for L = 1000")
def merge_w11(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        e1, e2 = np.exp(lse1), np.exp(lse2)
        tot = e1 + e2
        w1 = np.where(lse1 == -np.inf, 0.0, e1 / tot)[:, None]
        w2 = np.where(lse2 == -np.inf, 0.0, e2 / tot)[:, None]
        a = np.where(lse1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(lse2[:, None] == -np.inf, 0.0, w2 * a2)
    return a, lse


# ================================================================================================================
# Predictions
# ================================================================================================================

PREDICTIONS += [
    # P6: fa1, B_c = 4, M = 46: passes over Q
    ("P6", 12, "correct", "Q is read once per key tile: T_c = ceil(46 / 4) = 12"),
    ("P6", 6, "wrong", "mixes up the loop orders: counts the query tiles ceil(46 / 8) = 6 (what fa2 does to K and V)"),
    ("P6", 1, "wrong", "thinks the inputs are read once (the 'one sweep' misreading the chapter warns about)"),
    ("P6", 11, "wrong", "floors 46 / 4 = 11.5, forgetting the last, shorter key tile"),
    # P7: fa1 divisions per score, N = M = 512, D_v = 64, 64 x 64 tiles
    ("P7", 1, "correct", "fa1 divides a row's D_v outputs after every key tile: D_v / B_c = 64 / 64 = 1"),
    ("P7", 0.125, "wrong", "thinks fa1 also divides once per output element at the end (D_v / M), like fa2"),
    ("P7", 8, "wrong", "counts the divisions per output element (once per key tile, T_c = 512 / 64) instead of per score"),
    ("P7", 64, "wrong", "counts D_v divisions per row and key tile but forgets to spread them over the B_c scores"),
    # P8: causal, N = M = 256, 32 x 32 tiles: skipped tiles
    ("P8", 28, "correct", "the 8 x 8 grid's strict upper triangle: 8 * 7 / 2 = 28"),
    ("P8", 36, "wrong", "counts the diagonal tiles as skipped too: 8 * 9 / 2"),
    ("P8", 32, "wrong", "'half of the tiles': 64 / 2, forgetting the diagonal ones must be computed"),
    ("P8", 56, "wrong", "every off-diagonal tile, 64 - 8, forgetting the tiles below the diagonal are fully attended"),
    # P10: 6 ranges merged pairwise, levels
    ("P10", 3, "correct", "6 -> 3 -> 2 (one carried up) -> 1: three levels"),
    ("P10", 5, "wrong", "counts the merges (n - 1 = 5) instead of the levels of the tree"),
    ("P10", 2, "wrong", "floor(log2 6) = 2, forgetting the odd range carried up needs one more level"),
]
