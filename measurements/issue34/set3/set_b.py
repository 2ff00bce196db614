"""Learner set 3, file b: chapters 6-10 (6.1, 7.1, 7.2, 8.1, 8.2, 9.1, 10.1) and predictions P6, P7, P8, P10.

Written from the notebook prompts alone."""
import math

import numpy as np

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # (prediction, value, kind, description)


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


def _ref(g):
    """0 where the row max is still -inf (nothing seen), else g."""
    return np.where(g == -np.inf, 0.0, g)


# =====================================================================================================
# 6.1  my_tile_step(g, s, a, x_tile, v_tile) -> (g_new, s_new, a_new), a normalised
# =====================================================================================================

@sol("6.1", "correct", "vectorised: g_new = max(g, rowmax), one rescale exp(g - g_new), A' = (A' s alpha + P V) / s_new")
def tile_step_c1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "Algorithm 1 form: the tile's own max and sum first, then chapter 2's merge with two exponentials")
def tile_step_c2(g, s, a, x_tile, v_tile):
    g_loc = x_tile.max(axis=1)
    p_loc = np.exp(x_tile - g_loc[:, None])
    s_loc = p_loc.sum(axis=1)
    g_new = np.maximum(g, g_loc)
    alpha = np.exp(g - g_new)          # 0 for a row that had seen nothing (g = -inf, g_new finite)
    beta = np.exp(g_loc - g_new)
    s_new = s * alpha + s_loc * beta
    a_new = (a * (s * alpha)[:, None] + beta[:, None] * (p_loc @ v_tile)) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "correct", "row by row with Python loops and math.exp, copies of the state")
def tile_step_c3(g, s, a, x_tile, v_tile):
    B_r, B_c = x_tile.shape
    g_new, s_new, a_new = np.array(g, dtype=float), np.array(s, dtype=float), np.array(a, dtype=float)
    for r in range(B_r):
        gn = max(g[r], max(x_tile[r]))
        alpha = math.exp(g[r] - gn) if g[r] != -math.inf else 0.0
        w = [math.exp(x - gn) for x in x_tile[r]]
        sn = s[r] * alpha + math.fsum(w)
        num = s[r] * alpha * a[r] + sum(w[c] * v_tile[c] for c in range(B_c))
        g_new[r], s_new[r], a_new[r] = gn, sn, num / sn
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgets to rescale the old sum: s_new = s + rowsum(P) (the old s stays measured against the old max)")
def tile_step_w1(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "rescales A' by alpha only, forgetting the old sum s (A' alpha + P V / s_new)")
def tile_step_w2(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = a * alpha[:, None] + (p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "rescale factor upside down: exp(g_new - g) instead of exp(g - g_new)")
def tile_step_w3(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g_new - g)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = ((s * alpha)[:, None] * a + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "updates the state in place (a *= ..., s *= ...), so the caller's g, s, a change")
def tile_step_w4(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s *= alpha
    a *= s[:, None]
    s += p.sum(axis=1)
    a += p @ v_tile
    a /= s[:, None]
    return g_new, s, a


@sol("6.1", "wrong", "takes one max over the whole tile (x_tile.max()) instead of each row's max")
def tile_step_w5(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max())
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = ((s * alpha)[:, None] * a + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "measures the new weights against the old max g (0 while empty) instead of g_new")
def tile_step_w6(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref_old = _ref(g)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(x_tile - ref_old[:, None])
        s_new = s + p.sum(axis=1)
        a_new = (s[:, None] * a + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "forgets to divide the new tile's P V by s_new (only the old part is normalised)")
def tile_step_w7(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = (s * alpha)[:, None] * a / s_new[:, None] + p @ v_tile
    return g_new, s_new, a_new


@sol("6.1", "wrong", "returns the old max g instead of g_new")
def tile_step_w8(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_tile) / s_new[:, None]
    return g.copy(), s_new, a_new


@sol("6.1", "wrong", "no max subtraction at all: P = exp(X), s and A' summed against 0 (overflows at a tile max of 1000)")
def tile_step_w9(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = np.exp(x_tile)
        s_new = s + p.sum(axis=1)
        a_new = (s[:, None] * a + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


@sol("6.1", "wrong", "divides by the old sum s instead of s_new")
def tile_step_w10(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a_new = ((s * alpha)[:, None] * a + p @ v_tile) / np.where(s == 0, 1, s)[:, None]
    return g_new, s_new, a_new


# =====================================================================================================
# 7.1  my_numerator_step(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new), no division
# =====================================================================================================

@sol("7.1", "correct", "vectorised FA-2 step: U_new = U exp(g - g_new) + P V, new arrays")
def numerator_step_c1(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "correct", "works in place on x_tile (allowed) and on a copy of u, using np.subtract/np.exp out=")
def numerator_step_c2(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, np.max(x_tile, axis=-1))
    alpha = np.exp(g - g_new)  # g_new is finite here: every tile row has a finite score
    p = np.exp(np.subtract(x_tile, g_new[:, None], out=x_tile), out=x_tile)
    u_new = u.copy()
    u_new *= alpha[:, None]
    u_new += p @ v_tile
    s_new = s * alpha + p.sum(axis=-1)
    return g_new, s_new, u_new


@sol("7.1", "correct", "einsum for P V and a per-row list of rescale factors")
def numerator_step_c3(g, s, u, x_tile, v_tile):
    g_new = np.array([max(gi, xi.max()) for gi, xi in zip(g, x_tile)])
    alpha = np.array([0.0 if gi == -np.inf else math.exp(gi - gn) for gi, gn in zip(g, g_new)])
    p = np.exp(x_tile - g_new[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + np.einsum("rc,cd->rd", p, v_tile)


@sol("7.1", "wrong", "FA-1 habit: divides the numerator by s_new at the end of the step")
def numerator_step_w1(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (u * alpha[:, None] + p @ v_tile) / s_new[:, None]


@sol("7.1", "wrong", "forgets to rescale U when the max moves: U_new = U + P V")
def numerator_step_w2(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    return g_new, s * alpha + p.sum(axis=1), u + p @ v_tile


@sol("7.1", "wrong", "copies chapter 6's A' formula without the division: U_new = U s alpha + P V")
def numerator_step_w3(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * (s * alpha)[:, None] + p @ v_tile


@sol("7.1", "wrong", "updates the accumulator in place like the package's fa2_tile_step (u *= alpha; u += P V)")
def numerator_step_w4(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    u *= alpha[:, None]
    u += p @ v_tile
    return g_new, s * alpha + p.sum(axis=1), u


@sol("7.1", "wrong", "weights P measured against each tile row's own max, but U and s rescaled to g_new")
def numerator_step_w5(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - x_tile.max(axis=1)[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "wrong", "rescales the numerator but not the sum: s_new = s + rowsum(P)")
def numerator_step_w6(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - g_new[:, None])
    return g_new, s + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "wrong", "rescale factor upside down: exp(g_new - g)")
def numerator_step_w7(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.exp(g_new - g)
        p = np.exp(x_tile - g_new[:, None])
        return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


@sol("7.1", "wrong", "new max taken from the tile alone, ignoring the old max: g_new = rowmax(X)")
def numerator_step_w8(g, s, u, x_tile, v_tile):
    g_new = x_tile.max(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x_tile - g_new[:, None])
        return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


# =====================================================================================================
# 7.2  my_finish(g, s, u) -> (a, lse)
# =====================================================================================================

@sol("7.2", "correct", "A = U / s with s = 0 replaced by 1, L = g + log s under errstate")
def finish_c1(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    with np.errstate(divide="ignore"):
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "correct", "np.divide with where=, lse set to -inf explicitly for empty rows")
def finish_c2(g, s, u):
    a = np.divide(u, s[:, None], out=np.zeros_like(u, dtype=float), where=s[:, None] != 0)
    lse = np.full(s.shape, -np.inf)
    np.add(g, np.log(s, out=np.zeros_like(s, dtype=float), where=s > 0), out=lse, where=s > 0)
    return a, lse


@sol("7.2", "correct", "divides then np.nan_to_num(nan=0) for the 0/0 rows; lse = g + log(s)")
def finish_c3(g, s, u):
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.nan_to_num(u / s[:, None], nan=0.0, posinf=np.inf, neginf=-np.inf)
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "logsumexp as log(s * exp(g)): overflows at g = 800, -inf near -1000")
def finish_w1(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    with np.errstate(divide="ignore", over="ignore"):
        lse = np.log(s * np.exp(g))
    return a, lse


@sol("7.2", "wrong", "no guard for an empty row: A = U / s gives 0/0 = NaN")
def finish_w2(g, s, u):
    with np.errstate(invalid="ignore", divide="ignore"):
        return u / s[:, None], g + np.log(s)


@sol("7.2", "wrong", "forgets the max in the logsumexp: L = log s")
def finish_w3(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    with np.errstate(divide="ignore"):
        return a, np.log(s)


@sol("7.2", "wrong", "uses log10 instead of the natural log")
def finish_w4(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    with np.errstate(divide="ignore"):
        return a, g + np.log10(s)


@sol("7.2", "wrong", "gives an empty row logsumexp 0 instead of -inf")
def finish_w5(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(s == 0, 0.0, g + np.log(s))
    return a, lse


@sol("7.2", "wrong", "divides without the new axis: u / s broadcasts s along the columns")
def finish_w6(g, s, u):
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.nan_to_num(u / np.where(s == 0, 1, s))
        lse = g + np.log(s)
    return a, lse


@sol("7.2", "wrong", "log1p(s) 'for accuracy': L = g + log(1 + s)")
def finish_w7(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    return a, g + np.log1p(s)


@sol("7.2", "wrong", "multiplies by the rescale exp(g) as well: A = U e^g / s (thinks U is measured against 0)")
def finish_w8(g, s, u):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a = u * np.exp(_ref(g))[:, None] / np.where(s == 0, 1, s)[:, None]
        lse = g + np.log(s)
    return a, lse


# =====================================================================================================
# 8.1  my_causal_mask(N, M): bottom-right, m <= n + M - N
# =====================================================================================================

@sol("8.1", "correct", "index comparison with broadcasting: arange(M)[None] <= arange(N)[:, None] + M - N")
def causal_mask_c1(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + (M - N)


@sol("8.1", "correct", "np.tri(N, M, k=M - N, dtype=bool)")
def causal_mask_c2(N, M):
    return np.tri(N, M, k=M - N, dtype=bool)


@sol("8.1", "correct", "double Python loop filling a boolean array")
def causal_mask_c3(N, M):
    out = np.zeros((N, M), dtype=bool)
    for n in range(N):
        for m in range(M):
            out[n, m] = m <= n + M - N
    return out


@sol("8.1", "wrong", "top-left alignment: np.tril(ones((N, M))) with offset 0")
def causal_mask_w1(N, M):
    return np.tril(np.ones((N, M), dtype=bool))


@sol("8.1", "wrong", "strict inequality m < n + M - N (a query does not see its own key)")
def causal_mask_w2(N, M):
    return np.arange(M)[None, :] < np.arange(N)[:, None] + (M - N)


@sol("8.1", "wrong", "offset with the sign swapped: N - M")
def causal_mask_w3(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + (N - M)


@sol("8.1", "wrong", "returns a float 0/1 array from np.tril instead of booleans")
def causal_mask_w4(N, M):
    return np.tril(np.ones((N, M)), k=M - N)


@sol("8.1", "wrong", "upper triangle: np.triu with the offset (mixes up which side is the future)")
def causal_mask_w5(N, M):
    return np.triu(np.ones((N, M), dtype=bool), k=M - N)


@sol("8.1", "wrong", "clamps the offset at 0 (max(M - N, 0)), so with N > M the first rows still see keys")
def causal_mask_w6(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + max(M - N, 0)


@sol("8.1", "wrong", "1-based reasoning off by one: m <= n + M - N + 1")
def causal_mask_w7(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + (M - N) + 1


@sol("8.1", "wrong", "shape swapped: builds an (M, N) mask")
def causal_mask_w8(N, M):
    return np.tri(M, N, k=M - N, dtype=bool)


# =====================================================================================================
# 8.2  my_masked_tile_step(g, s, a, x_tile, v_tile, keep)
# =====================================================================================================

def _pv_absent(p, v_tile, keep):
    """P V where a masked pair never reads its value row (non-finite rows added key by key)."""
    finite = np.isfinite(v_tile).all(axis=1)
    pv = p @ np.where(finite[:, None], v_tile, 0.0)
    for c in np.flatnonzero(~finite):
        with np.errstate(invalid="ignore"):
            pv = pv + np.where(keep[:, c, None], p[:, c, None] * v_tile[None, c, :], 0.0)
    return pv


@sol("8.2", "correct", "np.where on the scores, max-or-zero reference, finite value rows by matmul and the rest key by key")
def masked_step_c1(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "correct", "3-D broadcast: sum over keys of where(keep, p v, 0), so masked pairs are selected away")
def masked_step_c2(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None, :, :], 0.0).sum(axis=1)
    num = (s * alpha)[:, None] * a + pv
    a_new = np.divide(num, s_new[:, None], out=np.zeros_like(num), where=s_new[:, None] != 0)
    return g_new, s_new, a_new


@sol("8.2", "correct", "row by row: keep only the attended keys of the row (boolean indexing), skip a row with nothing new")
def masked_step_c3(g, s, a, x_tile, v_tile, keep):
    g_new, s_new, a_new = g.astype(float).copy(), s.astype(float).copy(), a.astype(float).copy()
    for r in range(x_tile.shape[0]):
        xs = x_tile[r, keep[r]]
        vs = v_tile[keep[r]]
        if xs.size == 0 or np.all(xs == -np.inf):
            continue  # nothing attended in this tile: the state stays as it was
        gn = max(g[r], xs.max())
        alpha = 0.0 if g[r] == -np.inf else math.exp(g[r] - gn)
        w = np.exp(xs - gn)
        sn = s[r] * alpha + w.sum()
        a_new[r] = (s[r] * alpha * a[r] + w @ vs) / sn
        g_new[r], s_new[r] = gn, sn
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks by multiplying the scores by keep (masked scores become 0, not -inf)")
def masked_step_w1(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore"):
        x = x_tile * keep
    return masked_step_c1(g, s, a, x, v_tile, np.ones_like(keep))


@sol("8.2", "wrong", "additive mask x + log(keep): NaN or +inf in a masked score stays NaN")
def masked_step_w2(g, s, a, x_tile, v_tile, keep):
    with np.errstate(divide="ignore", invalid="ignore"):
        x = x_tile + np.log(keep.astype(float))
        g_new = np.maximum(g, x.max(axis=1))
        ref = _ref(g_new)
        alpha = np.exp(g - ref)
        p = np.exp(x - ref[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks the scores with np.where but then a plain P @ V (0 * NaN = NaN from masked value rows)")
def masked_step_w3(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        a_new = ((s * alpha)[:, None] * a + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "cleans the values first with np.nan_to_num(v) / zeroing non-finite rows, so an attended NaN value is lost")
def masked_step_w4(g, s, a, x_tile, v_tile, keep):
    v_clean = np.where(np.isfinite(v_tile), v_tile, 0.0)
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    a_new = ((s * alpha)[:, None] * a + p @ v_clean) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "drops only the keys masked for every row (v[keep.any(0)]) and multiplies the rest by 0")
def masked_step_w5(g, s, a, x_tile, v_tile, keep):
    cols = keep.any(axis=0)
    x = np.where(keep, x_tile, -np.inf)[:, cols]
    g_new = np.maximum(g, x.max(axis=1, initial=-np.inf))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        a_new = ((s * alpha)[:, None] * a + p @ v_tile[cols]) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "no -inf guard: subtracts g_new even while it is -inf (exp(-inf + inf) = NaN for empty rows)")
def masked_step_w6(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    with np.errstate(invalid="ignore"):
        alpha = np.exp(g - g_new)
        p = np.exp(x - g_new[:, None])
        s_new = s * alpha + p.sum(axis=1)
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) \
            / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "guards the exponentials but divides by s_new even when it is 0 (0/0 for rows that saw no key)")
def masked_step_w7(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) / s_new[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "finite fill: masked scores set to -1e9 instead of -inf (a row with nothing to see averages masked keys)")
def masked_step_w8(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -1e9)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "masks after the exponential: row max taken over all scores, masked ones included")
def masked_step_w9(g, s, a, x_tile, v_tile, keep):
    with np.errstate(invalid="ignore", over="ignore"):
        g_new = np.maximum(g, x_tile.max(axis=1))
        ref = _ref(g_new)
        alpha = np.exp(g - ref)
        p = np.where(keep, np.exp(x_tile - ref[:, None]), 0.0)
        s_new = s * alpha + p.sum(axis=1)
        a_new = ((s * alpha)[:, None] * a + _pv_absent(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


@sol("8.2", "wrong", "reads keep backwards (True = masked): np.where(keep, -inf, x)")
def masked_step_w10(g, s, a, x_tile, v_tile, keep):
    return masked_step_c1(g, s, a, x_tile, v_tile, ~keep)


@sol("8.2", "wrong", "updates s and a in place (s *= alpha, a *= ...) instead of returning new arrays")
def masked_step_w11(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = _ref(g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None])
    s *= alpha
    a *= s[:, None]
    s += p.sum(axis=1)
    with np.errstate(invalid="ignore"):
        a += _pv_absent(p, v_tile, keep)
    a /= np.where(s == 0, 1, s)[:, None]
    return g_new, s, a


# =====================================================================================================
# 9.1  my_flash_test_ratio(out, q, k, v)
# =====================================================================================================

def _reference64(q, k, v):
    q64, k64, v64 = (np.asarray(t).astype(np.float64) for t in (q, k, v))
    x = q64 @ k64.T / math.sqrt(q64.shape[-1])
    y = np.exp(x - x.max(axis=1, keepdims=True))
    y /= y.sum(axis=1, keepdims=True)
    return y @ v64


def _naive(q, k, v, dt=None, round_x=True, round_y=True, scale=True, compute=np.float32):
    dt = q.dtype if dt is None else dt
    q32, k32, v32 = (t.astype(compute) for t in (q, k, v))
    x = q32 @ k32.T
    if scale:
        x = x / compute(math.sqrt(q.shape[-1]))
    if round_x:
        x = x.astype(dt)
    x = x.astype(compute)
    y = np.exp(x - x.max(axis=1, keepdims=True))
    y = y / y.sum(axis=1, keepdims=True)
    if round_y:
        y = y.astype(dt)
    return (y.astype(compute) @ v32).astype(dt)


def _max_err(a, ref):
    with np.errstate(invalid="ignore"):
        return np.max(np.abs(np.asarray(a).astype(np.float64) - ref))


@sol("9.1", "correct", "naive in float32 with X, Y, A each rounded to the inputs' dtype; ratio of max abs errors vs a float64 reference")
def ratio_c1(out, q, k, v):
    ref = _reference64(q, k, v)
    return _max_err(out, ref) / _max_err(_naive(q, k, v), ref)


@sol("9.1", "correct", "scale folded into Q in float64 before the float32 product; reference from fm.attention")
def ratio_c2(out, q, k, v):
    import flashmath as fm
    dt = q.dtype
    ref = fm.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    qs = (q.astype(np.float64) / math.sqrt(q.shape[-1])).astype(np.float32)
    x = (qs @ k.astype(np.float32).T).astype(dt).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)).astype(dt).astype(np.float32)
    naive = (y @ v.astype(np.float32)).astype(dt)
    err_out = np.max(np.abs(out.astype(np.float64) - ref))
    err_naive = np.max(np.abs(naive.astype(np.float64) - ref))
    return float(err_out / err_naive)


@sol("9.1", "wrong", "computes the 'naive' attention in float64 without rounding anything (it equals the reference)")
def ratio_w1(out, q, k, v):
    ref = _reference64(q, k, v)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _max_err(out, ref) / _max_err(_reference64(q, k, v), ref)


@sol("9.1", "wrong", "naive attention rounds only the output, not the scores and probabilities")
def ratio_w2(out, q, k, v):
    ref = _reference64(q, k, v)
    return _max_err(out, ref) / _max_err(_naive(q, k, v, round_x=False, round_y=False), ref)


@sol("9.1", "wrong", "ratio upside down: naive error / out error")
def ratio_w3(out, q, k, v):
    ref = _reference64(q, k, v)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _max_err(_naive(q, k, v), ref) / _max_err(out, ref)


@sol("9.1", "wrong", "np.nanmax for the errors, so an output holding NaN is not noticed")
def ratio_w4(out, q, k, v):
    ref = _reference64(q, k, v)
    e_out = np.nanmax(np.abs(out.astype(np.float64) - ref))
    return e_out / np.nanmax(np.abs(_naive(q, k, v).astype(np.float64) - ref))


@sol("9.1", "wrong", "mean absolute error instead of the largest")
def ratio_w5(out, q, k, v):
    ref = _reference64(q, k, v)
    e = lambda a: np.mean(np.abs(a.astype(np.float64) - ref))
    return e(out) / e(_naive(q, k, v))


@sol("9.1", "wrong", "forgets the 1/sqrt(D) scale in the naive attention")
def ratio_w6(out, q, k, v):
    ref = _reference64(q, k, v)
    return _max_err(out, ref) / _max_err(_naive(q, k, v, scale=False), ref)


@sol("9.1", "wrong", "rounds the naive steps to float16 always (hard-coded), also for bfloat16 inputs")
def ratio_w7(out, q, k, v):
    ref = _reference64(q, k, v)
    with np.errstate(over="ignore", invalid="ignore"):
        return _max_err(out, ref) / _max_err(_naive(q, k, v, dt=np.dtype(np.float16)), ref)


@sol("9.1", "wrong", "casts the reference to the inputs' dtype before subtracting (errors measured in float16)")
def ratio_w8(out, q, k, v):
    ref = _reference64(q, k, v).astype(q.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        e_out = np.max(np.abs(out - ref)).astype(np.float64)
        e_naive = np.max(np.abs(_naive(q, k, v) - ref)).astype(np.float64)
        return float(e_out / e_naive)


@sol("9.1", "wrong", "largest signed difference max(out - ref), the abs forgotten")
def ratio_w9(out, q, k, v):
    ref = _reference64(q, k, v)
    with np.errstate(invalid="ignore"):
        return np.max(out.astype(np.float64) - ref) / np.max(_naive(q, k, v).astype(np.float64) - ref)


@sol("9.1", "wrong", "relative error for out (divided by max|ref|) but absolute for naive")
def ratio_w10(out, q, k, v):
    ref = _reference64(q, k, v)
    return (_max_err(out, ref) / np.max(np.abs(ref))) / _max_err(_naive(q, k, v), ref)


@sol("9.1", "wrong", "naive attention computed in the inputs' own dtype (float16/bfloat16 arithmetic), not float32")
def ratio_w11(out, q, k, v):
    ref = _reference64(q, k, v)
    with np.errstate(over="ignore", invalid="ignore"):
        return _max_err(out, ref) / _max_err(_naive(q, k, v, compute=q.dtype.type), ref)


# =====================================================================================================
# 10.1  my_merge_states(a1, lse1, a2, lse2)
# =====================================================================================================

@sol("10.1", "correct", "np.logaddexp for L, shares exp(L_p - L), an empty range selected away with np.where")
def merge_c1(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))
    with np.errstate(invalid="ignore"):
        a = (np.where((lse1 == -np.inf)[:, None], 0.0, w1[:, None] * a1)
             + np.where((lse2 == -np.inf)[:, None], 0.0, w2[:, None] * a2))
    return a, lse


@sol("10.1", "correct", "max-shifted by hand: m = max(L1, L2) (0 if -inf), L = m + log(e^(L1-m) + e^(L2-m))")
def merge_c2(a1, lse1, a2, lse2):
    m = np.maximum(lse1, lse2)
    m0 = np.where(m == -np.inf, 0.0, m)
    e1, e2 = np.exp(lse1 - m0), np.exp(lse2 - m0)
    tot = e1 + e2
    with np.errstate(divide="ignore"):
        lse = m0 + np.log(tot)
    safe = np.where(tot == 0, 1.0, tot)
    a1c = np.where((e1 > 0)[:, None], a1, 0.0)
    a2c = np.where((e2 > 0)[:, None], a2, 0.0)
    a = ((e1 / safe)[:, None] * a1c + (e2 / safe)[:, None] * a2c)
    return a, lse


@sol("10.1", "correct", "row by row in Python with math, skipping an empty range")
def merge_c3(a1, lse1, a2, lse2):
    N, Dv = a1.shape
    a, lse = np.zeros((N, Dv)), np.full(N, -np.inf)
    for n in range(N):
        parts = [(l, x) for l, x in ((lse1[n], a1[n]), (lse2[n], a2[n])) if l != -math.inf]
        if not parts:
            continue
        top = max(l for l, _ in parts)
        tot = sum(math.exp(l - top) for l, _ in parts)
        lse[n] = top + math.log(tot)
        a[n] = sum(math.exp(l - lse[n]) * x for l, x in parts)
    return a, lse


@sol("10.1", "correct", "logaddexp, then np.nan_to_num on the outputs and weights that are exactly 0 for empty ranges")
def merge_c4(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.nan_to_num(np.exp(lse1 - lse), nan=0.0)
        w2 = np.nan_to_num(np.exp(lse2 - lse), nan=0.0)
    a = w1[:, None] * np.nan_to_num(a1, nan=0.0) + w2[:, None] * np.nan_to_num(a2, nan=0.0)
    return a, lse


@sol("10.1", "wrong", "L = log(exp(L1) + exp(L2)) directly: overflows at L = 1000, -inf near -1000")
def merge_w1(a1, lse1, a2, lse2):
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        e1, e2 = np.exp(lse1), np.exp(lse2)
        lse = np.log(e1 + e2)
        a = (e1[:, None] * np.where(np.isneginf(lse1)[:, None], 0, a1)
             + e2[:, None] * np.where(np.isneginf(lse2)[:, None], 0, a2)) / np.where(e1 + e2 == 0, 1, e1 + e2)[:, None]
    return a, lse


@sol("10.1", "wrong", "weights an empty range by 0 but still multiplies its output (0 * NaN = NaN)")
def merge_w2(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - lse))
        w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - lse))
        return w1[:, None] * a1 + w2[:, None] * a2, lse


@sol("10.1", "wrong", "plain average of the two outputs, ignoring their weights")
def merge_w3(a1, lse1, a2, lse2):
    return (np.where(np.isneginf(lse1)[:, None], 0, a1) + np.where(np.isneginf(lse2)[:, None], 0, a2)) / 2, \
        np.logaddexp(lse1, lse2)


@sol("10.1", "wrong", "merged logsumexp = max(L1, L2) instead of logaddexp")
def merge_w4(a1, lse1, a2, lse2):
    a, _ = merge_c1(a1, lse1, a2, lse2)
    return a, np.maximum(lse1, lse2)


@sol("10.1", "wrong", "adds the logsumexps: L = L1 + L2")
def merge_w5(a1, lse1, a2, lse2):
    a, _ = merge_c1(a1, lse1, a2, lse2)
    return a, lse1 + lse2


@sol("10.1", "wrong", "weights the outputs by exp(L_p) without dividing by exp(L)")
def merge_w6(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(over="ignore", invalid="ignore"):
        a = (np.where(np.isneginf(lse1)[:, None], 0, np.exp(lse1)[:, None] * a1)
             + np.where(np.isneginf(lse2)[:, None], 0, np.exp(lse2)[:, None] * a2))
    return a, lse


@sol("10.1", "wrong", "both ranges empty: shares exp(-inf - (-inf)) = NaN not guarded (only the single empty range handled)")
def merge_w7(a1, lse1, a2, lse2):
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(lse1, lse2)
        w1, w2 = np.exp(lse1 - lse), np.exp(lse2 - lse)
        a = (w1[:, None] * np.where(np.isneginf(lse1)[:, None], 0, a1)
             + w2[:, None] * np.where(np.isneginf(lse2)[:, None], 0, a2))
    return a, lse


@sol("10.1", "wrong", "shares broadcast without [:, None]: w1 * a1 pairs the (N,) weights with the columns")
def merge_w8(a1, lse1, a2, lse2):
    lse = np.logaddexp(lse1, lse2)
    with np.errstate(invalid="ignore"):
        w1 = np.where(np.isneginf(lse1), 0.0, np.exp(lse1 - lse))
        w2 = np.where(np.isneginf(lse2), 0.0, np.exp(lse2 - lse))
    a1c = np.where(np.isneginf(lse1)[:, None], 0, a1)
    a2c = np.where(np.isneginf(lse2)[:, None], 0, a2)
    return w1 * a1c + w2 * a2c, lse


@sol("10.1", "wrong", "both empty gives L = NaN: m + log(e^(L1-m) + e^(L2-m)) with m = -inf unguarded")
def merge_w9(a1, lse1, a2, lse2):
    m = np.maximum(lse1, lse2)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = m + np.log(np.exp(lse1 - m) + np.exp(lse2 - m))
        w1 = np.where(np.isneginf(lse1), 0.0, np.exp(lse1 - lse))
        w2 = np.where(np.isneginf(lse2), 0.0, np.exp(lse2 - lse))
    a = (np.where(np.isneginf(lse1)[:, None], 0, w1[:, None] * a1)
         + np.where(np.isneginf(lse2)[:, None], 0, w2[:, None] * a2))
    return a, lse


# =====================================================================================================
# Predictions
# =====================================================================================================

PREDICTIONS += [
    ("P6", 12, "correct", "fa1 reads Q once per key tile: T_c = ceil(46 / 4) = 12"),
    ("P6", 6, "wrong", "counts the query tiles T_r = ceil(46 / 8) instead of the key tiles"),
    ("P6", 11, "wrong", "46 // 4: forgets the short last key tile of 2 keys"),
    ("P6", 13, "wrong", "adds the '+1' initial write of the fa1 table (that is for A, g, s stores, not Q loads)"),
    ("P6", 1, "wrong", "thinks each input is read once, as for K and V in fa1 (fa2's count for Q)"),
    ("P7", 1, "correct", "fa1 divides B_r x D_v outputs per key tile of B_r x B_c scores: D_v / B_c = 64 / 64 = 1"),
    ("P7", 0.125, "wrong", "copies fa2's D_v / M: believes both orders divide once per output"),
    ("P7", 8, "wrong", "T_c = 512 / 64 divisions of each output element, not per score"),
    ("P7", 2, "wrong", "thinks fa1's two rescale exponentials mean two divisions per score"),
    ("P8", 28, "correct", "strict upper triangle of the 8 x 8 grid: 8 * 7 / 2 = 28"),
    ("P8", 36, "wrong", "counts the diagonal tiles as skipped too: 8 * 9 / 2"),
    ("P8", 32, "wrong", "half of 64 tiles, forgetting the diagonal tiles are partial"),
    ("P8", 120, "wrong", "copies the 16 x 16 tile count from the text (16 * 15 / 2) instead of 32 x 32 tiles"),
    ("P10", 3, "correct", "6 -> 3 -> 2 -> 1: three levels, the odd one carried up"),
    ("P10", 5, "wrong", "counts the merges (N - 1 = 5), not the levels"),
    ("P10", 2, "wrong", "floor(log2 6) = 2, forgetting the carried odd range needs one more level"),
    ("P10", 4, "wrong", "counts the lists 6, 3, 2, 1 instead of the steps between them"),
]
