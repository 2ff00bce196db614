"""Learner set B: solutions to exercises 6.1, 7.1, 7.2, 8.1, 8.2, 9.1, 10.1 and the predictions P6, P7, P8, P10.

Written from the notebooks' prompts (Markdown cells and stored outputs) alone.
Every function is self-contained (numpy and math only), as a learner would paste it into the notebook cell.
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


@sol("6.1", "correct", "vectorised: the chapter's three equations with g_new, one rescale factor, [:, None] everywhere")
def tile_step_vectorised(g, s, a, x_tile, v_tile):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    a = np.asarray(a, dtype=float)
    x = np.asarray(x_tile, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)  # a row with no key yet: measure against 0
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        old = s * alpha
        s_new = old + p.sum(axis=1)
        denom = np.where(s_new == 0, 1.0, s_new)
        a_new = (a * old[:, None] + p @ v) / denom[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "Algorithm 1 form: the tile's own max and sum first, then chapter 2's merge with two factors")
def tile_step_alg1(g, s, a, x_tile, v_tile):
    g = np.array(g, dtype=np.float64)
    s = np.array(s, dtype=np.float64)
    a = np.array(a, dtype=np.float64)
    x = np.array(x_tile, dtype=np.float64)
    v = np.array(v_tile, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m_loc = np.max(x, axis=1, initial=-np.inf)  # tile max per row
        m_loc_ref = np.where(np.isneginf(m_loc), 0.0, m_loc)
        p_loc = np.exp(x - m_loc_ref[:, None])
        l_loc = p_loc.sum(axis=1)
        g_new = np.maximum(g, m_loc)
        g_ref = np.where(np.isneginf(g_new), 0.0, g_new)
        alpha = np.exp(g - g_ref)
        beta = np.exp(m_loc - g_ref)
        s_new = s * alpha + l_loc * beta
        safe = np.where(s_new == 0, 1.0, s_new)
        a_new = ((s * alpha)[:, None] * a + beta[:, None] * (p_loc @ v)) / safe[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "row by row loop, convex combination of the old average and the tile's own P V / s_new")
def tile_step_rows(g, s, a, x_tile, v_tile):
    x = np.asarray(x_tile, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    B_r, Dv = x.shape[0], v.shape[1]
    g_new = np.empty(B_r)
    s_new = np.empty(B_r)
    a_new = np.empty((B_r, Dv))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for r in range(B_r):
            g_r, s_r = float(g[r]), float(s[r])
            a_r = np.asarray(a[r], dtype=float)
            gn = np.maximum(g_r, np.max(x[r], initial=-np.inf))  # NaN propagates
            ref = 0.0 if gn == -np.inf else gn
            w = np.exp(x[r] - ref)
            old = s_r * np.exp(g_r - ref)
            sn = old + w.sum()
            if sn == 0:
                a_new[r] = a_r
            else:
                a_new[r] = (old / sn) * a_r + (w @ v) / sn
            g_new[r], s_new[r] = gn, sn
    return g_new, s_new, a_new


@sol("6.1", "wrong", "rescale inverted: multiplies the old state by exp(g_new - g) instead of exp(g - g_new)")
def tile_step_w_rescale_inverted(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g_new - g)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgets the rescale: s_new = s + rowsum(P) and the old output weighted by s alone")
def tile_step_w_no_rescale(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    p = np.exp(x_tile - g_new[:, None])
    s_new = s + p.sum(axis=1)
    a_new = (a * s[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "takes the tile max over axis 0 (per key column) instead of per row")
def tile_step_w_axis0(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=0))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "starts the max at 0 (g_new = max(g, rowmax, 0)) so negative rows keep g = 0")
def tile_step_w_max_from_zero(g, s, a, x_tile, v_tile):
    g_new = np.maximum(np.maximum(g, 0.0), x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "divides the new output by the old s instead of s_new")
def tile_step_w_old_s(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    s_div = np.where(s == 0, s_new, s)  # avoid 0 division on the first tile, but otherwise divides by the old s
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_div[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "updates a and s in place (a *= ..., a += ...) and returns them: the given state is changed")
def tile_step_w_inplace(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_old = s * alpha
    s *= alpha
    s += p.sum(axis=1)
    a *= s_old[:, None]
    a += p @ v_tile
    a /= s[:, None]
    return g_new, s, a


@sol("6.1", "wrong", "computes P with the old max g instead of g_new (exp(x - g)): from the empty state exp(+inf)")
def tile_step_w_old_g_in_p(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "Algorithm 1 form but forgets the factor exp(tile max - g_new) on the tile's own sum and output")
def tile_step_w_missing_beta(g, s, a, x_tile, v_tile):
    m_loc = x_tile.max(axis=1)
    p_loc = np.exp(x_tile - m_loc[:, None])
    g_new = np.maximum(g, m_loc)
    alpha = np.exp(g - g_new)
    s_new = s * alpha + p_loc.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p_loc @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgets to divide the new tile's P V by s_new (only the old part is renormalised)")
def tile_step_w_new_part_undivided(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = a * (s * alpha / s_new)[:, None] + p @ v_tile
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgets [:, None] on the rescale of a: (B_r, Dv) * (B_r,) broadcasts over the columns")
def tile_step_w_no_newaxis(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = a * (s * alpha / s_new) + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "uses np.nanmax for the tile max 'to be safe': a NaN score no longer makes its row NaN")
def tile_step_w_nanmax(g, s, a, x_tile, v_tile):
    g_new = np.fmax(g, np.nanmax(x_tile, axis=1))
    alpha = np.exp(g - g_new)
    p = np.nan_to_num(np.exp(x_tile - g_new[:, None]), nan=0.0)
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "clips the scores to [-500, 500] to avoid overflow: a tile max of 1000 and +inf scores change")
def tile_step_w_clip(g, s, a, x_tile, v_tile):
    x = np.clip(x_tile, -500.0, 500.0)
    g_new = np.maximum(g, x.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


# ================================================================================================================
# 7.1  my_numerator_step(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new), no division
# ================================================================================================================


@sol("7.1", "correct", "vectorised FlashAttention-2 step, as in the chapter's query_tile_fa2, with a -inf guard")
def numerator_step_vec(g, s, u, x_tile, v_tile):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    u = np.asarray(u, dtype=float)
    x = np.asarray(x_tile, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(np.isneginf(g_new), 0.0, g_new)
        alpha = np.exp(g - ref)
        p_tile = np.exp(x - ref[:, None])
        s_new = s * alpha + p_tile.sum(axis=1)
        u_new = u * alpha[:, None] + p_tile @ v
    return g_new, s_new, u_new


@sol("7.1", "correct", "row loop with per-row scalars, rescale factor exp(g - g_new), accumulate P V without dividing")
def numerator_step_rows(g, s, u, x_tile, v_tile):
    x = np.array(x_tile, dtype=np.float64)
    v = np.array(v_tile, dtype=np.float64)
    u_new = np.array(u, dtype=np.float64)  # a copy
    g_new = np.array(g, dtype=np.float64)
    s_new = np.array(s, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(x.shape[0]):
            gn = np.maximum(g_new[r], np.max(x[r]))
            ref = 0.0 if gn == -np.inf else gn
            alpha = np.exp(g_new[r] - ref)
            p = np.exp(x[r] - ref)
            s_new[r] = s_new[r] * alpha + p.sum()
            u_new[r] = u_new[r] * alpha + p @ v
            g_new[r] = gn
    return g_new, s_new, u_new


@sol("7.1", "wrong", "divides by s_new at the end of the step (returns the normalised A', not the numerator U)")
def numerator_step_w_divides(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = (u * alpha[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgets to rescale the numerator: u_new = u + P V (only s is rescaled)")
def numerator_step_w_u_not_rescaled(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "rescale inverted: alpha = exp(g_new - g)")
def numerator_step_w_inverted(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g_new - g)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "mixes in 6.1's formula: rescales U by s * alpha (U is already s A')")
def numerator_step_w_times_s(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * (s * alpha)[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "updates u in place like the package's fa2_tile_step (u *= alpha; u += P V): the given u changes")
def numerator_step_w_inplace(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u *= alpha[:, None]
    u += p @ v_tile
    return g_new, s_new, u


@sol("7.1", "wrong", "forgets to rescale s: s_new = s + rowsum(P)")
def numerator_step_w_s_not_rescaled(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s + p.sum(axis=1)
    u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "weights P by the old max (exp(x - g)): the first tile from g = -inf gives inf / NaN")
def numerator_step_w_old_g(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "forgets [:, None] on alpha when rescaling U (broadcasts along the value dimension)")
def numerator_step_w_no_newaxis(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * alpha + p @ v_tile
    return g_new, s_new, u_new


@sol("7.1", "wrong", "the running max started at 0: g_new = max(g, rowmax, 0), so rows of negative scores report g = 0")
def numerator_step_w_max_zero(g, s, u, x_tile, v_tile):
    g_new = np.maximum(np.maximum(g, x_tile.max(axis=1)), 0.0)
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    u_new = u * alpha[:, None] + p @ v_tile
    return g_new, s_new, u_new


# ================================================================================================================
# 7.2  my_finish(g, s, u) -> (a, lse)
# ================================================================================================================


@sol("7.2", "correct", "A = U / s with s = 0 replaced by 1, L = g + log(s) (natural log; -inf + log 0 = -inf)")
def finish_where(g, s, u):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    u = np.asarray(u, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1.0, s)[:, None]
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "correct", "np.divide with where= into zeros; lse = -inf where s == 0, else g + log(s)")
def finish_divide_where(g, s, u):
    g = np.asarray(g, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    nonempty = s != 0
    a = np.zeros_like(u)
    np.divide(u, s[:, None], out=a, where=nonempty[:, None])
    lse = np.full_like(g, -np.inf)
    with np.errstate(invalid="ignore"):
        np.add(g, np.log(s, out=np.zeros_like(s), where=nonempty), out=lse, where=nonempty)
    # a NaN sum is "non-empty": NaN passes through both lines above
    return a, lse


@sol("7.2", "wrong", "logsumexp as log(exp(g) * s): e^g overflows for g = 800")
def finish_w_exp_g(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = u / np.where(s == 0, 1.0, s)[:, None]
        lse = np.log(np.exp(g) * s)
    return a, lse


@sol("7.2", "wrong", "uses log10 for the logsumexp (L = g + log10(s))")
def finish_w_log10(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1.0, s)[:, None]
        lse = g + np.log10(s)
    return a, lse


@sol("7.2", "wrong", "uses log2 for the logsumexp (Triton-tutorial habit)")
def finish_w_log2(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1.0, s)[:, None]
        lse = g + np.log2(s)
    return a, lse


@sol("7.2", "wrong", "divides U / s without any guard: a row that saw no key gets 0/0 = NaN")
def finish_w_no_guard(g, s, u):
    a = u / s[:, None]
    lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "guards both g and s (g -> 0, s -> 1) before the log: an empty row gets L = 0, not -inf")
def finish_w_lse_zero(g, s, u):
    s_safe = np.where(s == 0, 1.0, s)
    g_safe = np.where(np.isneginf(g), 0.0, g)
    a = u / s_safe[:, None]
    lse = g_safe + np.log(s_safe)
    return a, lse


@sol("7.2", "wrong", "stores L = +inf for a row with no key (FlashAttention-2 kernel's convention, not the course's)")
def finish_w_lse_posinf(g, s, u):
    s_safe = np.where(s == 0, 1.0, s)
    a = u / s_safe[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(s == 0, np.inf, g + np.log(s_safe))
    return a, lse


@sol("7.2", "wrong", "silences the empty rows with np.nan_to_num: also turns NaN into 0 and +inf into 1.8e308")
def finish_w_nan_to_num(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.nan_to_num(u / s[:, None])
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "forgets g in the logsumexp: L = log(s)")
def finish_w_no_g(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1.0, s)[:, None]
        lse = np.log(s)
    return a, lse


@sol("7.2", "wrong", "forgets [:, None]: divides U (N, Dv) by s (N,) along the value axis")
def finish_w_no_newaxis(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = u / np.where(s == 0, 1.0, s)
        lse = g + np.log(s)
    return a, lse


# ================================================================================================================
# 8.1  my_causal_mask(N, M): bottom-right, m <= n + M - N
# ================================================================================================================


@sol("8.1", "correct", "np.tri with the diagonal offset M - N, dtype=bool")
def causal_tri(N, M):
    N, M = int(N), int(M)
    return np.tri(N, M, k=M - N, dtype=bool)


@sol("8.1", "correct", "index comparison: arange(M)[None, :] <= arange(N)[:, None] + M - N")
def causal_compare(N, M):
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + (M - N)


@sol("8.1", "correct", "np.tril of a boolean ones matrix with offset M - N")
def causal_tril(N, M):
    return np.tril(np.ones((N, M), dtype=bool), k=int(M) - int(N))


@sol("8.1", "wrong", "top-left alignment (torch.tril style, offset 0)")
def causal_w_top_left(N, M):
    return np.tri(N, M, k=0, dtype=bool)


@sol("8.1", "wrong", "off by one: m < n + M - N (each query does not see its own key)")
def causal_w_strict(N, M):
    return np.arange(M)[None, :] < np.arange(N)[:, None] + (M - N)


@sol("8.1", "wrong", "offset sign flipped: m <= n + N - M")
def causal_w_sign(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + (N - M)


@sol("8.1", "wrong", "offset |M - N|: right for N <= M, but N > M lets the first rows see keys")
def causal_w_abs(N, M):
    return np.tri(N, M, k=abs(M - N), dtype=bool)


@sol("8.1", "wrong", "transposed: upper triangle (np.triu), query n sees the keys from n + M - N on")
def causal_w_triu(N, M):
    return np.triu(np.ones((N, M), dtype=bool), k=M - N)


@sol("8.1", "wrong", "returns np.tri's float 0/1 matrix instead of a boolean array")
def causal_w_float(N, M):
    return np.tri(N, M, k=M - N)


@sol("8.1", "wrong", "assumes every query sees at least key 0 (clamps the offset so no row is empty)")
def causal_w_clamped(N, M):
    mask = np.arange(M)[None, :] <= np.arange(N)[:, None] + (M - N)
    if M > 0:
        mask[:, 0] = True
    return mask


@sol("8.1", "wrong", "builds the (M, N) mask (key-major) and forgets to transpose")
def causal_w_shape(N, M):
    return np.tri(M, N, k=N - M, dtype=bool)


# ================================================================================================================
# 8.2  my_masked_tile_step(g, s, a, x_tile, v_tile, keep)
# ================================================================================================================


def _pv_absent(p, v, keep):
    """sum over kept keys only of p[r, m] v[m]: masked keys never enter (no 0 * NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(keep[:, :, None], p[:, :, None] * v[None, :, :], 0.0)
    return terms.sum(axis=1)


@sol("8.2", "correct", "np.where(keep, x, -inf), -inf guard on g_new, P V summed over kept keys only (np.where)")
def masked_step_where(g, s, a, x_tile, v_tile, keep):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    a = np.asarray(a, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    keep = np.asarray(keep, dtype=bool)
    x = np.where(keep, np.asarray(x_tile, dtype=float), -np.inf)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        g_new = np.maximum(g, np.max(x, axis=1, initial=-np.inf))
        ref = np.where(np.isneginf(g_new), 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])  # masked: exp(-inf) = 0
        old = s * alpha
        s_new = old + p.sum(axis=1)
        pv = np.where(keep[:, :, None], p[:, :, None] * v[None, :, :], 0.0).sum(axis=1)
        a_new = (old[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "correct", "row loop: each row keeps only its attended keys (boolean indexing) and updates like 6.1")
def masked_step_rows(g, s, a, x_tile, v_tile, keep):
    x = np.asarray(x_tile, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    keep = np.asarray(keep, dtype=bool)
    g_new = np.array(g, dtype=float)
    s_new = np.array(s, dtype=float)
    a_new = np.array(a, dtype=float)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for r in range(x.shape[0]):
            xs = x[r][keep[r]]
            vs = v[keep[r]]
            if xs.size == 0:
                continue  # nothing attended in this tile: the state stays
            gn = np.maximum(g_new[r], xs.max())
            if gn == -np.inf:
                continue  # only -inf scores: nothing changes
            alpha = np.exp(g_new[r] - gn)
            p = np.exp(xs - gn)
            old = s_new[r] * alpha
            sn = old + p.sum()
            a_new[r] = (old * a_new[r] + p @ vs) / sn
            g_new[r], s_new[r] = gn, sn
    return g_new, s_new, a_new


@sol("8.2", "correct", "finite value rows by a matrix product, non-finite value rows added back key by key where kept")
def masked_step_split(g, s, a, x_tile, v_tile, keep):
    g = np.asarray(g, dtype=float)
    s = np.asarray(s, dtype=float)
    a = np.asarray(a, dtype=float)
    v = np.asarray(v_tile, dtype=float)
    keep = np.asarray(keep, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        x = np.where(keep, np.asarray(x_tile, dtype=float), -np.inf)
        g_new = np.maximum(g, np.max(x, axis=1, initial=-np.inf))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        alpha = np.exp(g - ref)
        p = np.where(keep, np.exp(x - ref[:, None]), 0.0)
        s_new = s * alpha + p.sum(axis=1)
        finite = np.isfinite(v).all(axis=1)
        pv = p @ np.where(finite[:, None], v, 0.0)
        for c in np.flatnonzero(~finite):
            pv = pv + np.where(keep[:, c, None], p[:, c, None] * v[c][None, :], 0.0)
        a_new = ((s * alpha)[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks the scores with -inf but then P @ V: a masked key's NaN/inf value row gives 0 * NaN = NaN")
def masked_step_w_matmul(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_tile) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "multiplies the scores by the mask (x * keep): masked scores become 0, not -inf")
def masked_step_w_times_keep(g, s, a, x_tile, v_tile, keep):
    x = x_tile * keep
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None]) * keep
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_tile) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "finite fill -1e9 instead of -inf: a row with no key averages the masked values uniformly")
def masked_step_w_fill(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -1e9)
    g_new = np.maximum(g, x.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    pv = pv + np.where(~keep.any(axis=1)[:, None], p @ np.where(np.isfinite(v_tile), v_tile, 0.0), 0.0)
    a_new = ((s * alpha)[:, None] * a + pv) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "no -inf guard: a row that has seen no key and sees none gets exp(-inf - (-inf)) = NaN")
def masked_step_w_no_guard(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "reads keep the wrong way round (True = masked)")
def masked_step_w_inverted(g, s, a, x_tile, v_tile, keep):
    keep = ~np.asarray(keep, dtype=bool)
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "takes the tile max before applying the mask, so masked NaN/+inf scores set g_new")
def masked_step_w_max_before_mask(g, s, a, x_tile, v_tile, keep):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    x = np.where(keep, x_tile, -np.inf)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "sanitises the values (non-finite entries -> 0) before P V: a row attending a NaN value is not NaN")
def masked_step_w_sanitise_v(g, s, a, x_tile, v_tile, keep):
    v = np.where(np.isfinite(v_tile), v_tile, 0.0)
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "divides by s_new without a guard: a row with no key gets A = 0/0 = NaN instead of 0")
def masked_step_w_div_zero(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + pv) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "treats keep as a per-key padding mask: uses the first row's keep for every row")
def masked_step_w_row0_mask(g, s, a, x_tile, v_tile, keep):
    cols = np.asarray(keep)[0]
    keep = np.broadcast_to(cols, np.shape(x_tile))
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + pv) / np.where(s_new == 0, 1.0, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "updates g, s, a in place with boolean indexing on the given arrays")
def masked_step_w_inplace(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    old = s * alpha
    s[:] = old + p.sum(axis=1)
    a[:] = (old[:, None] * a + pv) / np.where(s == 0, 1.0, s)[:, None]
    g[:] = g_new
    return g, s, a


# ================================================================================================================
# 9.1  my_flash_test_ratio(out, q, k, v)
# ================================================================================================================


def _reference64(q, k, v):
    q64, k64, v64 = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    x = q64 @ k64.T / math.sqrt(q64.shape[-1])
    y = np.exp(x - x.max(axis=1, keepdims=True))
    y /= y.sum(axis=1, keepdims=True)
    return y @ v64


@sol("9.1", "correct", "float64 reference; naive: X, Y, A each computed in float32 and rounded to the input dtype")
def ratio_plain(out, q, k, v):
    q, k, v = (np.asarray(t) for t in (q, k, v))
    dt = q.dtype
    D = q.shape[-1]
    # reference: float64 attention of the same (rounded) inputs
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    x64 = q64 @ k64.T / math.sqrt(D)
    y64 = np.exp(x64 - x64.max(axis=1, keepdims=True))
    y64 = y64 / y64.sum(axis=1, keepdims=True)
    ref = y64 @ v64
    # naive attention in low precision
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    X = (q32 @ k32.T / np.float32(math.sqrt(D))).astype(dt)
    X32 = X.astype(np.float32)
    E = np.exp(X32 - X32.max(axis=1, keepdims=True))
    Y = (E / E.sum(axis=1, keepdims=True)).astype(dt)
    A = (Y.astype(np.float32) @ v32).astype(dt)
    err_out = np.max(np.abs(np.asarray(out).astype(np.float64) - ref))
    err_naive = np.max(np.abs(A.astype(np.float64) - ref))
    return err_out / err_naive


@sol("9.1", "correct", "scale folded into Q in float64 before the float32 product (as chapter 3 does); errors in float64")
def ratio_scale_in_q(out, q, k, v):
    q, k, v = (np.asarray(t) for t in (q, k, v))
    dt = q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1])
    ref = _reference64(q, k, v)
    qs = (q.astype(np.float64) * scale).astype(np.float32)
    x = (qs @ k.astype(np.float32).T).astype(dt).astype(np.float32)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    y = (e / e.sum(axis=-1, keepdims=True)).astype(dt).astype(np.float32)
    naive = (y @ v.astype(np.float32)).astype(dt)
    with np.errstate(invalid="ignore"):
        e_out = np.abs(np.asarray(out, dtype=np.float64) - ref).max()
        e_naive = np.abs(naive.astype(np.float64) - ref).max()
    return float(e_out / e_naive)


def _naive_lowp(q, k, v):
    dt = q.dtype
    D = q.shape[-1]
    q32, k32, v32 = (np.asarray(t).astype(np.float32) for t in (q, k, v))
    X = (q32 @ k32.T / np.float32(math.sqrt(D))).astype(dt).astype(np.float32)
    E = np.exp(X - X.max(axis=1, keepdims=True))
    Y = (E / E.sum(axis=1, keepdims=True)).astype(dt).astype(np.float32)
    return (Y @ v32).astype(dt)


@sol("9.1", "wrong", "ratio inverted: naive error divided by the output's error")
def ratio_w_inverted(out, q, k, v):
    ref = _reference64(q, k, v)
    naive = _naive_lowp(q, k, v)
    return np.max(np.abs(naive.astype(np.float64) - ref)) / np.max(np.abs(np.asarray(out, dtype=np.float64) - ref))


@sol("9.1", "wrong", "rounds the naive steps to float32 instead of the inputs' dtype (wrong dtype)")
def ratio_w_dtype(out, q, k, v):
    ref = _reference64(q, k, v)
    D = q.shape[-1]
    q32, k32, v32 = (np.asarray(t).astype(np.float32) for t in (q, k, v))
    X = q32 @ k32.T / np.float32(math.sqrt(D))
    E = np.exp(X - X.max(axis=1, keepdims=True))
    Y = E / E.sum(axis=1, keepdims=True)
    naive = Y @ v32
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "mean absolute error instead of the largest")
def ratio_w_mean(out, q, k, v):
    ref = _reference64(q, k, v)
    naive = _naive_lowp(q, k, v)
    return np.mean(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.mean(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "element-wise relative errors max(|out - ref| / |ref|) instead of absolute errors")
def ratio_w_relative(out, q, k, v):
    ref = _reference64(q, k, v)
    naive = _naive_lowp(q, k, v)
    e_out = np.max(np.abs(np.asarray(out, dtype=np.float64) - ref) / np.abs(ref))
    e_naive = np.max(np.abs(naive.astype(np.float64) - ref) / np.abs(ref))
    return e_out / e_naive


@sol("9.1", "wrong", "np.nanmax for the errors: an output holding NaN is silently ignored")
def ratio_w_nanmax(out, q, k, v):
    ref = _reference64(q, k, v)
    naive = _naive_lowp(q, k, v)
    return np.nanmax(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.nanmax(
        np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "largest signed error (max(out - ref)) without the absolute value")
def ratio_w_signed(out, q, k, v):
    ref = _reference64(q, k, v)
    naive = _naive_lowp(q, k, v)
    return np.max(np.asarray(out, dtype=np.float64) - ref) / np.max(naive.astype(np.float64) - ref)


@sol("9.1", "wrong", "naive softmax computed in the low-precision dtype without subtracting the max (exp overflows)")
def ratio_w_softmax_lowp(out, q, k, v):
    ref = _reference64(q, k, v)
    dt = q.dtype
    D = q.shape[-1]
    q32, k32, v32 = (np.asarray(t).astype(np.float32) for t in (q, k, v))
    X = (q32 @ k32.T / np.float32(math.sqrt(D))).astype(dt)
    with np.errstate(over="ignore", invalid="ignore"):
        E = np.exp(X)  # in float16 / bfloat16
        Y = (E / E.sum(axis=1, keepdims=True)).astype(dt)
    naive = (Y.astype(np.float32) @ v32).astype(dt)
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "forgets the 1/sqrt(D) scale in the reference and the naive attention")
def ratio_w_no_scale(out, q, k, v):
    q64, k64, v64 = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    x = q64 @ k64.T
    y = np.exp(x - x.max(axis=1, keepdims=True))
    ref = (y / y.sum(axis=1, keepdims=True)) @ v64
    dt = q.dtype
    q32, k32, v32 = (np.asarray(t).astype(np.float32) for t in (q, k, v))
    X = (q32 @ k32.T).astype(dt).astype(np.float32)
    E = np.exp(X - X.max(axis=1, keepdims=True))
    Y = (E / E.sum(axis=1, keepdims=True)).astype(dt).astype(np.float32)
    naive = (Y @ v32).astype(dt)
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "rounds only Y and A in the naive attention (the scores X stay float32)")
def ratio_w_x_not_rounded(out, q, k, v):
    ref = _reference64(q, k, v)
    dt = q.dtype
    D = q.shape[-1]
    q32, k32, v32 = (np.asarray(t).astype(np.float32) for t in (q, k, v))
    X = q32 @ k32.T / np.float32(math.sqrt(D))
    E = np.exp(X - X.max(axis=1, keepdims=True))
    Y = (E / E.sum(axis=1, keepdims=True)).astype(dt).astype(np.float32)
    naive = (Y @ v32).astype(dt)
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


@sol("9.1", "wrong", "rounds the float64 reference to the inputs' dtype before measuring (the floor becomes error 0)")
def ratio_w_ref_rounded(out, q, k, v):
    ref = _reference64(q, k, v).astype(q.dtype).astype(np.float64)
    naive = _naive_lowp(q, k, v)
    return np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(naive.astype(np.float64) - ref))


# ================================================================================================================
# 10.1  my_merge_states(a1, lse1, a2, lse2) -> (a, lse)
# ================================================================================================================


@sol("10.1", "correct", "np.logaddexp for L, shares exp(L_p - L), an empty range selected away with np.where")
def merge_logaddexp(a1, lse1, a2, lse2):
    a1, a2 = np.asarray(a1, dtype=float), np.asarray(a2, dtype=float)
    lse1, lse2 = np.asarray(lse1, dtype=float), np.asarray(lse2, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        lse = np.logaddexp(lse1, lse2)
        L0 = np.where(np.isneginf(lse), 0.0, lse)
        w1 = np.exp(lse1 - L0)
        w2 = np.exp(lse2 - L0)
        part1 = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1)
        part2 = np.where(np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
    return part1 + part2, lse


@sol("10.1", "correct", "common reference m = max(L1, L2) (0 if -inf): L = m + log(e1 + e2), A = (e1 A1 + e2 A2)/(e1+e2)")
def merge_max_ref(a1, lse1, a2, lse2):
    a1, a2 = np.asarray(a1, dtype=np.float64), np.asarray(a2, dtype=np.float64)
    l1, l2 = np.asarray(lse1, dtype=np.float64), np.asarray(lse2, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.maximum(l1, l2)
        m0 = np.where(m == -np.inf, 0.0, m)
        e1, e2 = np.exp(l1 - m0), np.exp(l2 - m0)
        tot = e1 + e2
        lse = m0 + np.log(tot)
        t = np.where(tot == 0, 1.0, tot)
        empty1 = (l1 == -np.inf)[:, None]
        empty2 = (l2 == -np.inf)[:, None]
        a = (np.where(empty1, 0.0, e1[:, None] * a1) + np.where(empty2, 0.0, e2[:, None] * a2)) / t[:, None]
    return a, lse


@sol("10.1", "correct", "row loop with math.exp, chapter 2's merge written for (A, L) pairs")
def merge_rows(a1, lse1, a2, lse2):
    a1, a2 = np.asarray(a1, dtype=float), np.asarray(a2, dtype=float)
    l1s, l2s = np.asarray(lse1, dtype=float), np.asarray(lse2, dtype=float)
    n, dv = a1.shape
    a = np.zeros((n, dv))
    lse = np.empty(n)
    for r in range(n):
        l1, l2 = float(l1s[r]), float(l2s[r])
        if math.isnan(l1) or math.isnan(l2):
            a[r], lse[r] = np.nan, np.nan
            continue
        if l1 == -math.inf and l2 == -math.inf:
            lse[r] = -math.inf  # a stays 0
            continue
        if l1 == -math.inf:
            a[r], lse[r] = a2[r], l2
            continue
        if l2 == -math.inf:
            a[r], lse[r] = a1[r], l1
            continue
        L = max(l1, l2) + math.log1p(math.exp(-abs(l1 - l2))) if math.isfinite(l1 - l2) else max(l1, l2)
        with np.errstate(invalid="ignore", over="ignore"):
            a[r] = math.exp(l1 - L) * a1[r] + math.exp(l2 - L) * a2[r] if math.isfinite(L) else np.nan
        lse[r] = L
    return a, lse


@sol("10.1", "wrong", "L = log(exp(L1) + exp(L2)) directly: overflows to inf for logsumexps of 1000")
def merge_w_overflow(a1, lse1, a2, lse2):
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        lse = np.log(np.exp(lse1) + np.exp(lse2))
        w1 = np.where(np.isneginf(lse1), 0.0, np.exp(lse1 - lse))
        w2 = np.where(np.isneginf(lse2), 0.0, np.exp(lse2 - lse))
        a = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1) + np.where(
            np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "weights not normalised: A = e^{L1} A1 + e^{L2} A2 without dividing by e^{L}")
def merge_w_unnormalised(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    m = np.maximum(lse1, lse2)
    m0 = np.where(np.isneginf(m), 0.0, m)
    w1, w2 = np.exp(lse1 - m0), np.exp(lse2 - m0)
    a = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1) + np.where(
        np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "logsumexp of the merge taken as max(L1, L2) (forgets to add the sums)")
def merge_w_max_lse(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        L_true = np.logaddexp(lse1, lse2)
        L0 = np.where(np.isneginf(L_true), 0.0, L_true)
        w1, w2 = np.exp(lse1 - L0), np.exp(lse2 - L0)
        a = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1) + np.where(
            np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
    return a, np.maximum(lse1, lse2)


@sol("10.1", "wrong", "multiplies an empty range's output by its weight 0: NaN or inf in that output leaks (0 * NaN)")
def merge_w_nan_leak(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        L0 = np.where(np.isneginf(lse), 0.0, lse)
        w1, w2 = np.exp(lse1 - L0), np.exp(lse2 - L0)
        a = w1[:, None] * a1 + w2[:, None] * a2
    return a, lse


@sol("10.1", "wrong", "handles one empty range, but both empty gives exp(-inf - (-inf)) = NaN shares and NaN output")
def merge_w_both_empty(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1, w2 = np.exp(lse1 - lse), np.exp(lse2 - lse)
        a = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1) + np.where(
            np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
        a = np.where((np.isneginf(lse1) & np.isneginf(lse2))[:, None], np.nan, a)
    return a, lse


@sol("10.1", "wrong", "forgets [:, None] on the shares: (N,) * (N, Dv) broadcasts over the value axis")
def merge_w_no_newaxis(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        L0 = np.where(np.isneginf(lse), 0.0, lse)
        w1, w2 = np.exp(lse1 - L0), np.exp(lse2 - L0)
        a = np.where(np.isneginf(lse1)[:, None], 0.0, w1 * a1) + np.where(
            np.isneginf(lse2)[:, None], 0.0, w2 * a2)
    return a, lse


@sol("10.1", "wrong", "shares swapped: range 1's output weighted by range 2's share")
def merge_w_swapped(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        L0 = np.where(np.isneginf(lse), 0.0, lse)
        w1, w2 = np.exp(lse1 - L0), np.exp(lse2 - L0)
        a = np.where(np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a1) + np.where(
            np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "mixes bases: L = logaddexp2(L1, L2) (base 2) with natural exp for the shares")
def merge_w_base2(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp2(lse1, lse2)
        L0 = np.where(np.isneginf(lse), 0.0, lse)
        w1, w2 = np.exp(lse1 - L0), np.exp(lse2 - L0)
        a = np.where(np.isneginf(lse1)[:, None], 0.0, w1[:, None] * a1) + np.where(
            np.isneginf(lse2)[:, None], 0.0, w2[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "cleans the result with np.nan_to_num: +inf outputs become finite and a NaN logsumexp row becomes 0")
def merge_w_nan_to_num(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1, w2 = np.exp(lse1 - lse), np.exp(lse2 - lse)
        a = np.nan_to_num(w1[:, None] * a1) + np.nan_to_num(w2[:, None] * a2)
    return a, lse


@sol("10.1", "wrong", "equal-weight average (A1 + A2) / 2 whenever both ranges are non-empty")
def merge_w_plain_average(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    e1 = np.isneginf(lse1)[:, None]
    e2 = np.isneginf(lse2)[:, None]
    a = np.where(e1 & e2, 0.0, np.where(e1, a2, np.where(e2, a1, (a1 + a2) / 2)))
    return a, lse


# ================================================================================================================
# Predictions
# ================================================================================================================

PREDICTIONS += [
    ("P6", 12, "correct", "fa1 keeps a key tile on chip and streams all of Q past it: T_c = ceil(46 / 4) = 12 passes"),
    ("P6", 1, "wrong", "thinks Q is loaded once, as in the fa2 order (query tiles outside)"),
    ("P6", 6, "wrong", "counts the query tiles T_r = ceil(46 / 8) instead of the key tiles"),
    ("P6", 11.5, "wrong", "divides 46 / 4 without rounding up: forgets the last, shorter key tile"),
    ("P7", 1, "correct", "fa1 divides the B_r x D_v output after every key tile: D_v / B_c = 64 / 64 = 1 per score"),
    ("P7", 0.125, "wrong", "copies fa2's count D_v / M: thinks fa1 also divides once at the end"),
    ("P7", 64, "wrong", "counts D_v divisions per score, not sharing them over the tile's B_c scores"),
    ("P7", 1 / 64, "wrong", "counts one division per row and key tile (only s_new), not one per output element"),
    ("P8", 28, "correct", "the strict upper triangle of the 8 x 8 grid: 8 * 7 / 2"),
    ("P8", 36, "wrong", "includes the diagonal tiles, which are only partly masked"),
    ("P8", 32, "wrong", "takes half of the 64 tiles, forgetting the diagonal belongs to neither half"),
    ("P8", 56, "wrong", "counts both triangles off the diagonal, 8 * 7"),
    ("P10", 3, "correct", "6 -> 3 -> 2 -> 1: three levels, the odd one carried up"),
    ("P10", 5, "wrong", "counts merges (P - 1 = 5), not levels of merges done side by side"),
    ("P10", 2, "wrong", "floor(log2 6) = 2: forgets the odd range carried up needs one more level"),
    ("P10", 6, "wrong", "one level per range"),
]
