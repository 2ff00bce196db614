"""Learner-style solutions, set A: chapters 0-5 of the flashmath course (exercises 0.1 ... 5.2 and P0 ... P5).

Written from the notebooks' prompts alone (Markdown and stored outputs), without the checkers or the reference
solutions. Each wrong solution carries one learner's mistake; each correct one is a different, equivalent form.
"""
import math
from functools import reduce

import numpy as np

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # (prediction, value, kind, description)


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


# =====================================================================================================
# 0.1  score_row(q_n, K): x_m = q_n . k_m / sqrt(D), K (M, D), rows are keys
# =====================================================================================================

@sol("0.1", "correct", "vectorised: K @ q_n / sqrt(D), computed in float64")
def score_row_c1(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K @ q_n / np.sqrt(q_n.shape[0])


@sol("0.1", "correct", "a loop over the keys with np.dot, one score per row of K, as in chapter 0's cell")
def score_row_c2(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    D = len(q_n)
    return np.array([np.dot(q_n, np.asarray(k_m, dtype=np.float64)) for k_m in K], dtype=np.float64) / math.sqrt(D)


@sol("0.1", "correct", "scale folded into the query first (chapter 3's trick): (q_n / sqrt(D)) @ K.T, via einsum")
def score_row_c3(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    q_scaled = q_n / math.sqrt(q_n.size)
    return np.einsum("d,md->m", q_scaled, K)


@sol("0.1", "wrong", "forgets the scale: returns the raw dot products K @ q_n")
def score_row_w1(q_n, K):
    return np.asarray(K, dtype=np.float64) @ np.asarray(q_n, dtype=np.float64)


@sol("0.1", "wrong", "divides by D instead of sqrt(D)")
def score_row_w2(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64) @ q_n / q_n.shape[0]


@sol("0.1", "wrong", "takes D from K.shape[0], which is the number of keys M, so divides by sqrt(M)")
def score_row_w3(q_n, K):
    K = np.asarray(K, dtype=np.float64)
    D = K.shape[0]
    return K @ np.asarray(q_n, dtype=np.float64) / np.sqrt(D)


@sol("0.1", "wrong", "uses the columns of K: K.T @ q_n (only runs when M = D)")
def score_row_w4(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64).T @ q_n / np.sqrt(q_n.shape[0])


@sol("0.1", "wrong", "scales the query in place (q_n /= sqrt(D)), modifying the caller's array")
def score_row_w5(q_n, K):
    q_n /= np.sqrt(q_n.shape[0])
    return K @ q_n


@sol("0.1", "wrong", "multiplies by sqrt(D) instead of dividing")
def score_row_w6(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64) @ q_n * np.sqrt(q_n.shape[0])


@sol("0.1", "wrong", "sums the elementwise product over the wrong axis (axis=0), giving D numbers, not M")
def score_row_w7(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return (q_n * K).sum(axis=0) / np.sqrt(q_n.shape[0])


@sol("0.1", "wrong", "returns a column (M, 1) instead of a vector of M scores: K @ q_n[:, None]")
def score_row_w8(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64) @ q_n[:, None] / np.sqrt(q_n.shape[0])


@sol("0.1", "wrong", "rounds the scale to an integer: divides by int(sqrt(D)) (5 instead of 5.66 for D = 32)")
def score_row_w9(q_n, K):
    q_n = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64) @ q_n / int(np.sqrt(q_n.shape[0]))


# =====================================================================================================
# 1.1  my_safe_softmax(x)
# =====================================================================================================

def _compute_dtype(x):
    """float16 -> float32 inside; integers -> float64; other floats kept."""
    if x.dtype == np.float16:
        return np.float32
    if np.issubdtype(x.dtype, np.floating):
        return x.dtype
    return np.float64


def _out_dtype(x):
    if x.dtype == np.float16:
        return np.float16
    if np.issubdtype(x.dtype, np.floating):
        return x.dtype
    return np.float64


@sol("1.1", "correct", "vectorised: subtract the max, exp, divide; float32 inside for float16, float64 for "
                       "integers; an all -inf row gives zeros")
def safe_softmax_c1(x):
    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    z = x.astype(_compute_dtype(x))  # a copy: x is never modified
    if z.size == 0:
        return z.astype(out_dtype)
    g = z.max()
    if g == -np.inf:  # fully masked row: the course convention is all zeros
        return np.zeros(x.shape, dtype=out_dtype)
    e = np.exp(z - g)
    return (e / e.sum()).astype(out_dtype)


@sol("1.1", "correct", "the chapter's three passes written as Python loops (max, sum, divide), with dtype rules")
def safe_softmax_c2(x):
    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    vals = [float(v) for v in x]
    if x.dtype == np.float16:
        vals = [float(np.float32(v)) for v in vals]
    g = -math.inf
    for v in vals:  # pass 1
        g = v if (v > g or math.isnan(v)) else g
    if g == -math.inf:
        return np.zeros(x.shape, dtype=out_dtype)
    s = 0.0
    for v in vals:  # pass 2
        s += math.exp(v - g) if not math.isnan(v - g) else math.nan
    y = [math.exp(v - g) / s if not math.isnan(v - g) else math.nan for v in vals]  # pass 3
    return np.array(y, dtype=np.float64).reshape(x.shape).astype(out_dtype)


@sol("1.1", "correct", "log-domain: y = exp(x - logsumexp(x)), logsumexp taken with the max out (no scipy)")
def safe_softmax_c3(x):
    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(out_dtype)
    g = np.max(z)
    if np.isneginf(g):
        return np.zeros_like(z, dtype=out_dtype)
    lse = g + np.log(np.sum(np.exp(z - g)))
    return np.exp(z - lse).astype(out_dtype)


@sol("1.1", "correct", "torch.softmax on a float32/float64 tensor, then back to numpy (all -inf row -> zeros)")
def safe_softmax_c4(x):
    import torch

    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    if x.size == 0:
        return np.zeros(x.shape, dtype=out_dtype)
    t = torch.from_numpy(np.array(x, dtype=_compute_dtype(x)))
    if bool(torch.all(torch.isneginf(t))):
        return np.zeros(x.shape, dtype=out_dtype)
    return torch.softmax(t, dim=0).numpy().astype(out_dtype)


@sol("1.1", "wrong", "does not subtract the max: exp(x) / sum(exp(x)) (the direct formula), dtype rules kept")
def safe_softmax_w1(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    e = np.exp(z)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "starts the running max at 0 instead of -inf, so an all-negative row is shifted by 0")
def safe_softmax_w2(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    g = 0.0
    for v in z:
        g = max(g, v)
    e = np.exp(z - g)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "starts the sum at 1 instead of 0")
def safe_softmax_w3(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=_out_dtype(x))
    s = 1.0
    for v in z:
        s += np.exp(v - g)
    return (np.exp(z - g) / s).astype(_out_dtype(x))


@sol("1.1", "wrong", "subtracts the max in place (x -= x.max()), modifying the caller's array")
def safe_softmax_w4(x):
    if x.size == 0:
        return x.astype(np.float64) if not np.issubdtype(x.dtype, np.floating) else x.copy()
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    g = x.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=x.dtype)
    x -= g
    if x.dtype == np.float16:
        e = np.exp(x.astype(np.float32))
        return (e / e.sum()).astype(np.float16)
    e = np.exp(x)
    return e / e.sum()


@sol("1.1", "wrong", "casts the result back to x.dtype, so integer input gives [0, 0, 0]")
def safe_softmax_w5(x):
    x = np.asarray(x)
    z = x.astype(np.float64 if x.dtype != np.float16 else np.float32)
    if z.size == 0:
        return x.copy()
    g = z.max()
    if g == -np.inf:
        return np.zeros_like(x)
    e = np.exp(z - g)
    return (e / e.sum()).astype(x.dtype)


@sol("1.1", "wrong", "computes float16 input in float64 and returns float64 (the prompt asks float16 out)")
def safe_softmax_w6(x):
    z = np.asarray(x, dtype=np.float64)
    if z.size == 0:
        return z
    g = z.max()
    if g == -np.inf:
        return np.zeros_like(z)
    e = np.exp(z - g)
    return e / e.sum()


@sol("1.1", "wrong", "no special case for the fully masked row: all -inf gives NaN (-inf - -inf) instead of zeros")
def safe_softmax_w7(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    e = np.exp(z - z.max())
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "guards with 'if the max is not finite return zeros', so a row holding +inf gives zeros, not NaN")
def safe_softmax_w8(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    g = z.max()
    if not np.isfinite(g):
        return np.zeros(x.shape, dtype=_out_dtype(x))
    e = np.exp(z - g)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "fixes the masked row with np.nan_to_num on the output, which also turns NaN input into 0")
def safe_softmax_w9(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    with np.errstate(invalid="ignore"):
        e = np.exp(z - np.max(z))
        y = e / e.sum()
    return np.nan_to_num(y, nan=0.0).astype(_out_dtype(x))


@sol("1.1", "wrong", "calls x.max() with no empty check: an empty vector raises instead of giving an empty vector")
def safe_softmax_w10(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=_out_dtype(x))
    e = np.exp(z - g)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "uses base 2 (np.exp2, as in the Triton kernels) without the log2(e) factor")
def safe_softmax_w11(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=_out_dtype(x))
    e = np.exp2(z - g)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "subtracts the mean instead of the max (fine for small values, overflows for large spreads)")
def safe_softmax_w12(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    if np.all(z == -np.inf):
        return np.zeros(x.shape, dtype=_out_dtype(x))
    finite = z[np.isfinite(z)]
    c = finite.mean() if finite.size else 0.0
    e = np.exp(z - c)
    return (e / e.sum()).astype(_out_dtype(x))


@sol("1.1", "wrong", "divides twice by the sum (y = e / s, then returns y / s)")
def safe_softmax_w13(x):
    x = np.asarray(x)
    z = x.astype(_compute_dtype(x))
    if z.size == 0:
        return z.astype(_out_dtype(x))
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=_out_dtype(x))
    e = np.exp(z - g)
    s = e.sum()
    y = e / s
    return (y / s).astype(_out_dtype(x))


# =====================================================================================================
# 2.1  my_online_normalizer(x) -> (g, s), one pass
# =====================================================================================================

@sol("2.1", "correct", "the chapter's loop: g = np.maximum(g, x_i), skip while g is -inf, s = s*exp(g_old-g)+exp(x_i-g)")
def online_normalizer_c1(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "correct", "one loop with numpy scalars; the masked-prefix guard written as 'if x_i == -inf and s == 0'")
def online_normalizer_c2(x):
    g = np.float64(-np.inf)
    s = np.float64(0.0)
    for x_i in x:
        x_i = np.float64(x_i)
        if x_i == -np.inf:  # a masked element adds nothing and never moves the max
            continue
        g_new = np.maximum(g, x_i)
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return float(g), float(s)


@sol("2.1", "correct", "a fold with functools.reduce over (g, s) states, merging (x_i, 1) each step")
def online_normalizer_c3(x):
    def step(state, x_i):
        g, s = state
        x_i = float(x_i)
        if x_i == -math.inf:
            return state
        g_new = x_i if (math.isnan(x_i) or x_i > g) else g
        return g_new, s * math.exp(g - g_new) + math.exp(x_i - g_new)

    return reduce(step, x, (-math.inf, 0.0))


@sol("2.1", "correct", "log-domain: keeps lse = log(sum exp x) with np.logaddexp, returns g and s = exp(lse - g)")
def online_normalizer_c4(x):
    g, lse = -math.inf, -math.inf
    for x_i in x:
        x_i = float(x_i)
        if x_i == -math.inf:
            continue
        g = float(np.maximum(g, x_i))
        lse = float(np.logaddexp(lse, x_i))
    if g == -math.inf:
        return g, 0.0
    return g, math.exp(lse - g)


@sol("2.1", "wrong", "starts the running max at 0 instead of -inf")
def online_normalizer_w1(x):
    g, s = 0.0, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = max(g, x_i)
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "starts the sum at 1 instead of 0")
def online_normalizer_w2(x):
    g, s = -math.inf, 1.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "forgets the rescale: s = s + exp(x_i - g_i), the old terms stay measured from the old max")
def online_normalizer_w3(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g = float(np.maximum(g, x_i))
        if g == -math.inf:
            continue
        s = s + math.exp(x_i - g)
    return g, s


@sol("2.1", "wrong", "inverts the rescale: multiplies the old sum by exp(g_i - g_{i-1})")
def online_normalizer_w4(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        rescale = math.exp(g_new - g) if g != -math.inf else 0.0
        s = s * rescale + math.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "updates g before computing the rescale, so the factor is always exp(0) = 1")
def online_normalizer_w5(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        if max(g, x_i) == -math.inf:
            continue
        g = max(g, x_i)
        s = s * math.exp(g - g) + math.exp(x_i - g)
    return g, s


@sol("2.1", "wrong", "two passes: g = max over x first, then a second loop for the sum (reads x twice)")
def online_normalizer_w6(x):
    g = -math.inf
    for x_i in x:
        g = float(np.maximum(g, float(x_i)))
    if g == -math.inf:
        return g, 0.0
    s = 0.0
    for x_i in x:
        s += math.exp(float(x_i) - g)
    return g, s


@sol("2.1", "wrong", "stores x first with np.array(list(x)) and then computes max and sum on the copy")
def online_normalizer_w7(x):
    arr = np.array(list(x), dtype=np.float64)
    if arr.size == 0 or np.all(arr == -np.inf):
        return -math.inf, 0.0
    g = arr.max()
    return float(g), float(np.exp(arr - g).sum())


@sol("2.1", "wrong", "no guard for masked elements: a row starting with -inf gives exp(-inf - (-inf)) = NaN")
def online_normalizer_w8(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, float(s)


@sol("2.1", "wrong", "new term measured from the old max: s = s*exp(g_old - g_new) + exp(x_i - g_old)")
def online_normalizer_w9(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        ref = g if g != -math.inf else g_new
        s = s * math.exp(g - g_new) + math.exp(x_i - ref)
        g = g_new
    return g, s


@sol("2.1", "wrong", "returns the pair in the wrong order, (s, g)")
def online_normalizer_w10(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return s, g


@sol("2.1", "wrong", "starts from the first element, g = x[0], s = 1, and loops over x[1:]: an empty x raises")
def online_normalizer_w11(x):
    g, s = float(x[0]), 1.0
    if g == -math.inf:
        s = 0.0
    for x_i in x[1:]:
        x_i = float(x_i)
        g_new = float(np.maximum(g, x_i))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


# =====================================================================================================
# 2.2  my_merge(g1, s1, g2, s2) -> (g, s)
# =====================================================================================================

@sol("2.2", "correct", "g = max, s = s1 exp(g1-g) + s2 exp(g2-g); both parts masked -> (-inf, 0)")
def merge_c1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -math.inf, 0.0
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


@sol("2.2", "correct", "if one part is empty (g = -inf) return the other; otherwise the merge formula with math")
def merge_c2(g1, s1, g2, s2):
    if g1 == -math.inf:
        return float(g2), float(s2)
    if g2 == -math.inf:
        return float(g1), float(s1)
    g = float(np.maximum(g1, g2))
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


@sol("2.2", "wrong", "no guard: two fully masked parts give exp(-inf - (-inf)) = NaN")
def merge_w1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


@sol("2.2", "wrong", "inverts the rescale: s1 exp(g - g1) + s2 exp(g - g2)")
def merge_w2(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore"):
        return float(g), float(s1 * np.exp(g - g1) + s2 * np.exp(g - g2))


@sol("2.2", "wrong", "adds the sums without rescaling them: s = s1 + s2")
def merge_w3(g1, s1, g2, s2):
    return float(np.maximum(g1, g2)), float(s1 + s2)


@sol("2.2", "wrong", "copy-paste slip: both terms use g1, s = s1 exp(g1-g) + s2 exp(g1-g)")
def merge_w4(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -math.inf, 0.0
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g1 - g))


@sol("2.2", "wrong", "returns (0, 0) for two fully masked parts instead of (-inf, 0)")
def merge_w5(g1, s1, g2, s2):
    if g1 == -math.inf and g2 == -math.inf:
        return 0.0, 0.0
    g = float(np.maximum(g1, g2))
    return g, float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


@sol("2.2", "wrong", "returns the pair in the wrong order, (s, g)")
def merge_w6(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return 0.0, -math.inf
    return float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)), float(g)


@sol("2.2", "wrong", "takes the min of the two maxima as the new max")
def merge_w7(g1, s1, g2, s2):
    if g1 == -math.inf and g2 == -math.inf:
        return -math.inf, 0.0
    g = float(np.minimum(g1, g2))
    if g == -math.inf:  # one part empty
        g = float(np.maximum(g1, g2))
    with np.errstate(over="ignore"):
        return g, float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


# =====================================================================================================
# 2.3  my_merge_three(g1, s1, g2, s2, g3, s3): closed form, one max and one sum
# =====================================================================================================

@sol("2.3", "correct", "closed form: g = max(g1, g2, g3), s = sum_k s_k exp(g_k - g); all masked -> (-inf, 0)")
def merge_three_c1(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -math.inf, 0.0
    terms = [s_k * np.exp(g_k - g) for g_k, s_k in ((g1, s1), (g2, s2), (g3, s3))]
    return float(g), float(terms[0] + terms[1] + terms[2])


@sol("2.3", "correct", "closed form with arrays and math.fsum, empty parts (g = -inf) skipped")
def merge_three_c2(g1, s1, g2, s2, g3, s3):
    gs = np.array([g1, g2, g3], dtype=np.float64)
    ss = np.array([s1, s2, s3], dtype=np.float64)
    g = gs.max()
    if g == -np.inf:
        return -math.inf, 0.0
    live = gs != -np.inf
    return float(g), math.fsum(ss[live] * np.exp(gs[live] - g))


@sol("2.3", "wrong", "calls the pairwise merge twice instead of writing the closed form (the prompt forbids it)")
def merge_three_w1(g1, s1, g2, s2, g3, s3):
    return merge_c1(*merge_c1(g1, s1, g2, s2), g3, s3)


@sol("2.3", "wrong", "no guard: three fully masked parts give NaN")
def merge_three_w2(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g))


@sol("2.3", "wrong", "forgets the s_k factors: s = exp(g1-g) + exp(g2-g) + exp(g3-g)")
def merge_three_w3(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -math.inf, 0.0
    return float(g), float(np.exp(g1 - g) + np.exp(g2 - g) + np.exp(g3 - g))


@sol("2.3", "wrong", "the max of the first two parts only, g = max(g1, g2), forgetting g3")
def merge_three_w4(g1, s1, g2, s2, g3, s3):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        g = g3
    if g == -np.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore"):
        return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g))


@sol("2.3", "wrong", "drops the third part's sum (s = s1 e^(g1-g) + s2 e^(g2-g)) though g includes g3")
def merge_three_w5(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -math.inf, 0.0
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


@sol("2.3", "wrong", "exponents inverted: s_k exp(g - g_k)")
def merge_three_w6(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -math.inf, 0.0
    total = 0.0
    for g_k, s_k in ((g1, s1), (g2, s2), (g3, s3)):
        if g_k != -np.inf:
            with np.errstate(over="ignore"):
                total += s_k * np.exp(g - g_k)
    return float(g), float(total)


# =====================================================================================================
# 3.1  my_attention(q, k, v) for (..., N, D), (..., M, D), (..., M, Dv)
# =====================================================================================================

@sol("3.1", "correct", "q @ swapaxes(k, -1, -2) / sqrt(D), row max with keepdims, exp, normalise, @ v")
def attention_c1(q, k, v):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "correct", "einsum, with the scale folded into q first (chapter 3's simplification)")
def attention_c2(q, k, v):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    q_scaled = q / math.sqrt(q.shape[-1])
    x = np.einsum("...nd,...md->...nm", q_scaled, k)
    y = np.exp(x - np.max(x, axis=-1, keepdims=True))
    y = y / np.sum(y, axis=-1, keepdims=True)
    return np.einsum("...nm,...md->...nd", y, v)


@sol("3.1", "correct", "reuses my 1.1 safe softmax (course convention: all -inf row -> zeros) on every score row")
def attention_c3(q, k, v):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    x = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    if x.size == 0:
        y = np.zeros(x.shape, dtype=np.result_type(x, np.float64) if x.dtype.kind != "f" else x.dtype)
    else:
        y = np.apply_along_axis(safe_softmax_c1, -1, x)
    return y @ v


@sol("3.1", "correct", "the chapter-5 one-pass loop over keys, on flattened batch dims (np.maximum, rescale)")
def attention_c4(q, k, v):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    *batch, N, D = q.shape
    M, Dv = k.shape[-2], v.shape[-1]
    B = int(np.prod(batch))  # 1 when there is no batch axis
    qf = (q / math.sqrt(D)).reshape(B, N, D)
    kf = np.broadcast_to(k, (*batch, M, D)).reshape(B, M, D)
    vf = np.broadcast_to(v, (*batch, M, Dv)).reshape(B, M, Dv)
    g = np.full((B, N), -np.inf)
    s = np.zeros((B, N))
    a = np.zeros((B, N, Dv))
    with np.errstate(invalid="ignore"):
        for m in range(M):
            x_m = np.einsum("bnd,bd->bn", qf, kf[:, m])
            g_new = np.maximum(g, x_m)
            rescale = np.exp(g - g_new)
            e_m = np.exp(x_m - g_new)
            s_new = s * rescale + e_m
            a = a * (s * rescale / s_new)[..., None] + (e_m / s_new)[..., None] * vf[:, m][:, None, :]
            g, s = g_new, s_new
    return a.reshape(*batch, N, Dv)


@sol("3.1", "wrong", "forgets the 1/sqrt(D) scale")
def attention_w1(q, k, v):
    x = q @ np.swapaxes(k, -1, -2)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "scales by 1/sqrt(M) (number of keys) instead of 1/sqrt(D)")
def attention_w2(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-2])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "softmax over the query axis (axis=-2) instead of the key axis")
def attention_w3(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return (e / e.sum(axis=-2, keepdims=True)) @ v


@sol("3.1", "wrong", "subtracts the max of the whole array, not the max of each row")
def attention_w4(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max())
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "row max without keepdims: x - x.max(axis=-1) broadcasts along the wrong axis")
def attention_w5(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "uses k.T, which on 4-D input also reverses the batch and head axes")
def attention_w6(q, k, v):
    x = q @ k.T / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "does not subtract the max at all (direct softmax), overflows on large scores")
def attention_w7(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "reads D from q.shape[1] (right for 2-D input, but H on (B, H, N, D) input)")
def attention_w8(q, k, v):
    D = q.shape[1]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "divides by D instead of sqrt(D)")
def attention_w9(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / q.shape[-1]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "normalises with the sum without keepdims, e / e.sum(axis=-1)")
def attention_w10(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1)) @ v


@sol("3.1", "wrong", "swaps the first two axes (np.swapaxes(k, 0, 1)) instead of the last two")
def attention_w11(q, k, v):
    x = q @ np.swapaxes(k, 0, 1) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


# =====================================================================================================
# 4.1  my_loop_swap(y, v): A = Y V with the key loop m outside the d loop, bitwise in key order
# =====================================================================================================

@sol("4.1", "correct", "the chapter's matmul_n_m_d pasted: a row of D partial sums per n, keys m, then d")
def loop_swap_c1(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "correct", "order m -> n -> d, accumulating into a list of rows")
def loop_swap_c2(y, v):
    y = np.asarray(y)
    v = np.asarray(v)
    N, M = y.shape
    D = v.shape[1]
    acc = [[0.0] * D for _ in range(N)]
    for m in range(M):
        for n in range(N):
            for d in range(D):
                acc[n][d] = acc[n][d] + y[n, m] * v[m, d]
    return np.array(acc, dtype=np.float64).reshape(N, D)


@sol("4.1", "correct", "n -> m with the whole row updated at once, acc += y[n, m] * v[m, :] (allowed by the prompt)")
def loop_swap_c3(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = np.zeros(D)
        for m in range(M):
            acc += y[n, m] * v[m, :]
        out[n, :] = acc
    return out


@sol("4.1", "correct", "order m -> d -> n: key loop outermost, so within each row key m still precedes key m+1")
def loop_swap_c4(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = [[0.0] * D for _ in range(N)]
    for m in range(M):
        for d in range(D):
            for n in range(N):
                out[n][d] = out[n][d] + y[n, m] * v[m, d]
    return np.array(out, dtype=np.float64).reshape(N, D)


@sol("4.1", "correct", "n -> m with the row updated as acc = acc + y[n, m] * v[m] (a new array each key)")
def loop_swap_c5(y, v):
    N, M = y.shape
    out = np.zeros((N, v.shape[1]))
    for n in range(N):
        acc = np.zeros(v.shape[1])
        for m in range(M):
            acc = acc + y[n, m] * v[m]
        out[n] = acc
    return out


@sol("4.1", "wrong", "the textbook order n -> d -> m (the key loop innermost), not swapped")
def loop_swap_w1(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        for d in range(D):
            total = 0.0
            for m in range(M):
                total = total + y[n, m] * v[m, d]
            out[n, d] = total
    return out


@sol("4.1", "wrong", "uses y @ v (BLAS order) instead of the three loops")
def loop_swap_w2(y, v):
    return np.asarray(y, dtype=np.float64) @ np.asarray(v, dtype=np.float64)


@sol("4.1", "wrong", "uses np.einsum('nm,md->nd', y, v)")
def loop_swap_w3(y, v):
    return np.einsum("nm,md->nd", np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64))


@sol("4.1", "wrong", "converts y and v to float arrays first (np.asarray(..., dtype=float)), then the right loops")
def loop_swap_w4(y, v):
    y = np.asarray(y, dtype=float)
    v = np.asarray(v, dtype=float)
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        for m in range(M):
            for d in range(D):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "runs the keys backwards, range(M - 1, -1, -1)")
def loop_swap_w5(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M - 1, -1, -1):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "accumulates each element with math.fsum (exact, so not the key-order rounding)")
def loop_swap_w6(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        terms = [[] for _ in range(D)]
        for m in range(M):
            for d in range(D):
                terms[d].append(float(y[n, m] * v[m, d]))
        out[n] = [math.fsum(t) for t in terms]
    return out


@sol("4.1", "wrong", "creates the row accumulator once, outside the n loop, so it is never reset between rows")
def loop_swap_w7(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    acc = [0.0] * D
    for n in range(N):
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "off by one: for m in range(M - 1) skips the last key")
def loop_swap_w8(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M - 1):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "allocates the output with np.zeros_like(y), shape (N, M) instead of (N, D)")
def loop_swap_w9(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros_like(np.asarray(y), dtype=np.float64)
    for n in range(N):
        for m in range(M):
            for d in range(D):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "order d -> n -> m: the d loop outermost and the key loop innermost")
def loop_swap_w10(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for d in range(D):
        for n in range(N):
            total = 0.0
            for m in range(M):
                total = total + y[n, m] * v[m, d]
            out[n, d] = total
    return out


@sol("4.1", "wrong", "accumulates the row of partial sums in float32 (np.zeros(D, dtype=np.float32))")
def loop_swap_w11(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = np.zeros(D, dtype=np.float32)
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


# =====================================================================================================
# 5.1  my_one_loop_step(g_prev, s_prev, a_prev, x_m, v_m) -> (g_m, s_m, A'_m)
# =====================================================================================================

@sol("5.1", "correct", "the chapter's four steps for one row, masked key from the empty state keeps (-inf, 0, 0)")
def one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev)
    v_m = np.asarray(v_m)
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, a_prev
    rescale = np.exp(g_prev - g_m)
    e_m = np.exp(x_m - g_m)
    s_m = s_prev * rescale + e_m
    a_m = a_prev * (s_prev * rescale / s_m) + (e_m / s_m) * v_m
    return g_m, s_m, a_m


@sol("5.1", "correct", "convex combination: w = exp(x_m - g_m)/s_m, A' = A'_prev (1 - w) + w V_m")
def one_loop_step_c2(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g_m = float(np.maximum(g_prev, x_m))
    if g_m == -math.inf:
        return g_m, float(s_prev), a_prev
    s_m = s_prev * math.exp(g_prev - g_m) + math.exp(x_m - g_m)
    w = math.exp(x_m - g_m) / s_m
    return g_m, s_m, a_prev * (1.0 - w) + v_m * w


@sol("5.1", "correct", "the chapter's one_loop body pasted unchanged (no special case for a masked key)")
def one_loop_step_c3(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.float64(g_prev)
    s = np.float64(s_prev)
    a = np.asarray(a_prev)
    g_new = np.maximum(g, x_m)
    rescale = np.exp(g - g_new)
    e_m = np.exp(x_m - g_new)
    s_new = s * rescale + e_m
    a = a * (s * rescale / s_new) + (e_m / s_new) * np.asarray(v_m)
    return g_new, s_new, a


@sol("5.1", "correct", "unnormalised form: A' = (A'_prev s_prev e^(g_prev-g) + e^(x-g) V) / s_m, masked key guarded")
def one_loop_step_c4(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    new = np.exp(x_m - g_m)
    s_m = old + new
    a_m = (np.asarray(a_prev) * old + new * np.asarray(v_m)) / s_m
    return g_m, s_m, a_m


@sol("5.1", "wrong", "leaves out the exp(g_prev - g_m) rescale in the correction of A' (s is rescaled correctly)")
def one_loop_step_w1(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    s_m = s_prev * np.exp(g_prev - g_m) + np.exp(x_m - g_m)
    a_m = np.asarray(a_prev) * (s_prev / s_m) + np.exp(x_m - g_m) / s_m * np.asarray(v_m)
    return g_m, s_m, a_m


@sol("5.1", "wrong", "inverts the rescale: exp(g_m - g_prev) in the correction of A'")
def one_loop_step_w2(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    s_m = s_prev * np.exp(g_prev - g_m) + np.exp(x_m - g_m)
    corr = s_prev * np.exp(g_m - g_prev) / s_m if s_prev > 0 else 0.0
    a_m = np.asarray(a_prev) * corr + np.exp(x_m - g_m) / s_m * np.asarray(v_m)
    return g_m, s_m, a_m


@sol("5.1", "wrong", "divides by s_{m-1} instead of s_m in the correction and the weight")
def one_loop_step_w3(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    rescale = np.exp(g_prev - g_m)
    e_m = np.exp(x_m - g_m)
    s_m = s_prev * rescale + e_m
    denom = s_prev if s_prev > 0 else s_m
    a_m = np.asarray(a_prev) * (s_prev * rescale / denom) + (e_m / denom) * np.asarray(v_m)
    return g_m, s_m, a_m


@sol("5.1", "wrong", "forgets to divide the new value's weight by s_m: A' = A'_prev*corr + exp(x_m - g_m) V_m")
def one_loop_step_w4(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    rescale = np.exp(g_prev - g_m)
    e_m = np.exp(x_m - g_m)
    s_m = s_prev * rescale + e_m
    a_m = np.asarray(a_prev) * (s_prev * rescale / s_m) + e_m * np.asarray(v_m)
    return g_m, s_m, a_m


@sol("5.1", "wrong", "weight written as exp(x_m) / s_m (not measured from the max): overflows on a jump of 1000")
def one_loop_step_w5(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    rescale = np.exp(g_prev - g_m)
    s_m = s_prev * rescale + np.exp(x_m - g_m)
    with np.errstate(over="ignore", invalid="ignore"):
        a_m = np.asarray(a_prev) * (s_prev * rescale / s_m) + np.exp(x_m) / (s_m * np.exp(g_m)) * np.asarray(v_m)
    return g_m, s_m, a_m


@sol("5.1", "wrong", "returns the state in the wrong order, (s_m, g_m, A'_m)")
def one_loop_step_w6(g_prev, s_prev, a_prev, x_m, v_m):
    g_m, s_m, a_m = one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m)
    return s_m, g_m, a_m


@sol("5.1", "wrong", "convex combination with the weights swapped: A' = A'_prev w + V_m (1 - w)")
def one_loop_step_w7(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = float(np.maximum(g_prev, x_m))
    if g_m == -math.inf:
        return g_m, float(s_prev), np.asarray(a_prev)
    s_m = s_prev * math.exp(g_prev - g_m) + math.exp(x_m - g_m)
    w = math.exp(x_m - g_m) / s_m
    return g_m, s_m, np.asarray(a_prev) * w + np.asarray(v_m) * (1.0 - w)


@sol("5.1", "wrong", "correction ratio inverted: A'_prev * s_m / (s_prev e^(g_prev - g_m))")
def one_loop_step_w8(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    e_m = np.exp(x_m - g_m)
    s_m = old + e_m
    corr = s_m / old if old > 0 else 0.0
    return g_m, s_m, np.asarray(a_prev) * corr + e_m / s_m * np.asarray(v_m)


@sol("5.1", "wrong", "returns the old max g_{m-1} instead of the new g_m (the state itself is right)")
def one_loop_step_w9(g_prev, s_prev, a_prev, x_m, v_m):
    g_m, s_m, a_m = one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m)
    return g_prev, s_m, a_m


@sol("5.1", "wrong", "does not rescale the sum: s_m = s_{m-1} + exp(x_m - g_m) (A' uses that s_m)")
def one_loop_step_w10(g_prev, s_prev, a_prev, x_m, v_m):
    g_m = np.maximum(g_prev, x_m)
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    rescale = np.exp(g_prev - g_m)
    e_m = np.exp(x_m - g_m)
    s_m = s_prev + e_m
    a_m = np.asarray(a_prev) * (s_prev * rescale / s_m) + (e_m / s_m) * np.asarray(v_m)
    return g_m, s_m, a_m


# =====================================================================================================
# 5.2  my_block_step(g_prev, s_prev, a_prev, x_block, v_block) -> (g_m, s_m, A'_m)
# =====================================================================================================

@sol("5.2", "correct", "block closed form: g = max(g_prev, max x), s = s_prev e^(g_prev-g) + sum e^(x-g), "
                       "A' = (A'_prev s_prev e^(g_prev-g) + sum e^(x_j-g) V_j) / s")
def block_step_c1(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    v_block = np.asarray(v_block)
    a_prev = np.asarray(a_prev)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:  # nothing seen but masked keys (or an empty block from the empty state)
        return g_m, s_prev, a_prev
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)  # (b,)
    s_m = old + p.sum()
    a_m = (old * a_prev + p @ v_block) / s_m
    return g_m, s_m, a_m


@sol("5.2", "correct", "folds the one-key step (5.1) over the keys of the block")
def block_step_c2(g_prev, s_prev, a_prev, x_block, v_block):
    state = (g_prev, s_prev, np.asarray(a_prev))
    for x_j, v_j in zip(x_block, v_block):
        state = one_loop_step_c1(*state, x_j, v_j)
    return state


@sol("5.2", "correct", "convex form: A' = c A'_prev + sum_j w_j V_j, c = s_prev e^(g_prev-g)/s, w_j = e^(x_j-g)/s")
def block_step_c3(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block, dtype=np.float64).reshape(-1)
    v_block = np.asarray(v_block, dtype=np.float64)
    a_prev = np.asarray(a_prev, dtype=np.float64)
    if x_block.size == 0:
        return g_prev, s_prev, a_prev
    g_m = float(np.maximum(g_prev, x_block.max()))
    if g_m == -math.inf:
        return g_m, float(s_prev), a_prev
    p = np.exp(x_block - g_m)
    s_m = s_prev * math.exp(g_prev - g_m) + p.sum()
    c = s_prev * math.exp(g_prev - g_m) / s_m
    w = p / s_m
    return g_m, s_m, c * a_prev + (w[:, None] * v_block).sum(axis=0)


@sol("5.2", "wrong", "forgets the exp(g_prev - g_m) rescale on the old A' (keeps it on s)")
def block_step_w1(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    p = np.exp(x_block - g_m)
    s_m = s_prev * np.exp(g_prev - g_m) + p.sum()
    return g_m, s_m, (s_prev * np.asarray(a_prev) + p @ np.asarray(v_block)) / s_m


@sol("5.2", "wrong", "measures the block's exponentials from the old max g_prev instead of the new g_m")
def block_step_w2(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    ref = g_prev if g_prev != -np.inf else g_m
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_block - ref)
        s_m = s_prev + p.sum()
        a_m = (s_prev * np.asarray(a_prev) + p @ np.asarray(v_block)) / s_m
    return g_m, s_m, a_m


@sol("5.2", "wrong", "takes the new max from the block alone, g = max(x_block), ignoring g_prev")
def block_step_w3(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    if x_block.size == 0:
        return g_prev, s_prev, np.asarray(a_prev)
    g_m = x_block.max()
    if g_m == -np.inf:
        return g_prev, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)
    s_m = old + p.sum()
    return g_m, s_m, (old * np.asarray(a_prev) + p @ np.asarray(v_block)) / s_m


@sol("5.2", "wrong", "divides by s_prev (the state before the block) instead of s_m")
def block_step_w4(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)
    s_m = old + p.sum()
    denom = s_prev if s_prev > 0 else s_m
    return g_m, s_m, (old * np.asarray(a_prev) + p @ np.asarray(v_block)) / denom


@sol("5.2", "wrong", "returns the unnormalised numerator s_m A'_m (forgets the final division by s_m)")
def block_step_w5(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)
    s_m = old + p.sum()
    return g_m, s_m, old * np.asarray(a_prev) + p @ np.asarray(v_block)


@sol("5.2", "wrong", "sums the weighted value rows over the wrong axis (axis=1), giving b numbers instead of D")
def block_step_w6(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    v_block = np.asarray(v_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)
    s_m = old + p.sum()
    return g_m, s_m, (old * np.asarray(a_prev) + (p[:, None] * v_block).sum(axis=1)) / s_m


@sol("5.2", "wrong", "treats the block like one key: uses only its max score and the mean of its value rows")
def block_step_w7(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    v_block = np.asarray(v_block)
    if x_block.size == 0:
        return g_prev, s_prev, np.asarray(a_prev)
    return one_loop_step_c1(g_prev, s_prev, a_prev, x_block.max(), v_block.mean(axis=0))


@sol("5.2", "wrong", "does not rescale the old sum: s_m = s_prev + sum e^(x_j - g_m)")
def block_step_w8(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    old = s_prev * np.exp(g_prev - g_m)
    p = np.exp(x_block - g_m)
    s_m = s_prev + p.sum()
    return g_m, s_m, (old * np.asarray(a_prev) + p @ np.asarray(v_block)) / s_m


@sol("5.2", "wrong", "normalises the block on its own first (its softmax @ V) and averages with A'_prev 50/50")
def block_step_w9(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block)
    v_block = np.asarray(v_block)
    g_m = np.maximum(g_prev, np.max(x_block, initial=-np.inf))
    if g_m == -np.inf:
        return g_m, s_prev, np.asarray(a_prev)
    p = np.exp(x_block - g_m)
    s_m = s_prev * np.exp(g_prev - g_m) + p.sum()
    block_out = (p / p.sum()) @ v_block
    if s_prev == 0:
        return g_m, s_m, block_out
    return g_m, s_m, 0.5 * np.asarray(a_prev) + 0.5 * block_out


# =====================================================================================================
# Predictions
# =====================================================================================================

PREDICTIONS += [
    ("P0", 42, "correct", "x_43 is x[43 - 1]: the math counts from 1, Python from 0"),
    ("P0", -4, "correct", "the same element from the end: 46 keys, x[-1] is x_46, so x_43 is x[-4]"),
    ("P0", 43, "wrong", "counted from 1 as the math does: wrote the math index as the Python index"),
    ("P0", 44, "wrong", "shifted the wrong way: thought Python needs m + 1"),
    ("P0", -3, "wrong", "counting from the end, forgot that x[-1] is already the 46th: 46 - 43 = 3"),

    ("P1", 0, "correct", "the sum 46 e^10 overflows float16 to inf; each finite e^10 / inf is 0, so all outputs are 0"),
    ("P1", 0.0, "correct", "the same, typed as a float"),
    ("P1", 1, "wrong", "softmax outputs always add up to 1 (each e^10 fits, so thought nothing overflows)"),
    ("P1", float("nan"), "wrong", "thought overflow always gives NaN (inf / inf), as when one exponential overflows"),
    ("P1", 46, "wrong", "thought each output rounds to 1 (e^10 / e^10) and summed 46 of them"),

    ("P2", math.exp(-1), "correct", "each step raises the max by 1: exp(g_{i-1} - g_i) = exp(-1) = 1/e"),
    ("P2", 0.3679, "correct", "1/e, rounded to four digits"),
    ("P2", math.e, "wrong", "inverted the exponent: exp(g_i - g_{i-1}) = e"),
    ("P2", 1.0, "wrong", "thought the factor is 1 whenever the elements are evenly spaced (mixed up with 'max held')"),
    ("P2", 0.0, "wrong", "took the factor of step 1, exp(-inf) = 0, as the factor of every step"),

    ("P3", 8, "correct", "Var(q . k) = D = 64, so the standard deviation is sqrt(64) = 8"),
    ("P3", 8.0, "correct", "the same, as a float"),
    ("P3", 64, "wrong", "confused the variance D with the standard deviation"),
    ("P3", 1, "wrong", "thought standard normal entries give standard normal dot products (forgot the sum of D terms)"),
    ("P3", 0, "wrong", "answered the mean (0) instead of the spread"),

    ("P4", 0, "correct", "each element receives the same additions in the same order: no bit differs"),
    ("P4", 12, "wrong", "floating-point addition is not associative, so thought every element changes"),
    ("P4", 6, "wrong", "guessed about half differ, as with BLAS @ in the chapter's later cell"),
    ("P4", 4, "wrong", "thought only the last column (or one row of 4) is affected by reordering"),

    ("P5", 0.75, "correct", "no jump: e^0 = 1, s_3 = 3, s_4 = 4, correction 3/4"),
    ("P5", 3 / 4, "correct", "the same, typed as a fraction"),
    ("P5", 1.0, "wrong", "thought that without a jump of the max there is no correction (mixed up with the rescale e^0)"),
    ("P5", 0.25, "wrong", "mixed up the correction with the new key's weight 1/4"),
    ("P5", 4 / 3, "wrong", "inverted the ratio: s_4 / s_3"),
]
