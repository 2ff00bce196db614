"""Learner set 4, part a: exercises 0.1, 1.1, 2.1, 2.2, 2.3, 3.1, 4.1, 5.1, 5.2 and predictions P0..P5.

Written from the notebook prompts alone (chapters 0-5)."""
import functools
import math

import numpy as np

SOLUTIONS = []  # (exercise, kind, description, answer)
PREDICTIONS = []  # (prediction, value, kind, description)


def sol(exercise, kind, description):
    def add(fn):
        SOLUTIONS.append((exercise, kind, description, fn))
        return fn
    return add


# =====================================================================================================
# 0.1  score_row(q_n, K)
# =====================================================================================================

@sol("0.1", "correct", "matrix-vector product K @ q_n divided by sqrt(D), D from the query length")
def score_row_c1(q_n, K):
    D = q_n.shape[0]
    return K @ q_n / np.sqrt(D)


@sol("0.1", "correct", "Python loop over the keys, one dot product per key, scale with math.sqrt")
def score_row_c2(q_n, K):
    D = len(q_n)
    scale = 1.0 / math.sqrt(D)
    out = np.empty(K.shape[0])
    for m in range(K.shape[0]):
        out[m] = float(np.dot(q_n, K[m])) * scale
    return out


@sol("0.1", "correct", "einsum over d, query scaled first")
def score_row_c3(q_n, K):
    q_scaled = q_n / np.sqrt(K.shape[1])
    return np.einsum("d,md->m", q_scaled, K)


@sol("0.1", "wrong", "divides by sqrt(M) (number of keys) instead of sqrt(D)")
def score_row_w1(q_n, K):
    return K @ q_n / np.sqrt(len(K))


@sol("0.1", "wrong", "forgets the 1/sqrt(D) scale entirely")
def score_row_w2(q_n, K):
    return np.array([q_n @ k_m for k_m in K])


@sol("0.1", "wrong", "divides by D instead of sqrt(D)")
def score_row_w3(q_n, K):
    D = q_n.size
    return (K @ q_n) / D


@sol("0.1", "wrong", "uses the columns of K (q_n @ K) instead of its rows")
def score_row_w4(q_n, K):
    return q_n @ K / math.sqrt(q_n.shape[0])


@sol("0.1", "wrong", "scales the query in place (q_n /= sqrt(D)), modifying the caller's input")
def score_row_w5(q_n, K):
    q_n /= np.sqrt(q_n.shape[0])
    return K @ q_n


@sol("0.1", "wrong", "multiplies by sqrt(D) instead of dividing")
def score_row_w6(q_n, K):
    return np.sqrt(q_n.shape[0]) * (K @ q_n)


@sol("0.1", "wrong", "casts to float32 to 'save memory', losing precision below 1e-9")
def score_row_w7(q_n, K):
    q32 = q_n.astype(np.float32)
    k32 = K.astype(np.float32)
    return k32 @ q32 / np.float32(np.sqrt(q_n.shape[0]))


@sol("0.1", "wrong", "loop over d stops one early (range(D - 1)), dropping the last dimension")
def score_row_w8(q_n, K):
    D = len(q_n)
    scores = []
    for k_m in K:
        total = 0.0
        for d in range(D - 1):
            total += q_n[d] * k_m[d]
        scores.append(total / math.sqrt(D))
    return np.array(scores)


# =====================================================================================================
# 1.1  my_safe_softmax(x)
# =====================================================================================================

def _work_dtype(x):
    """float16 -> compute in float32; other floats kept; integers (and bools) -> float64."""
    if x.dtype == np.float16:
        return np.float32, np.float16
    if np.issubdtype(x.dtype, np.floating):
        return x.dtype, x.dtype
    return np.float64, np.float64


@sol("1.1", "correct", "vectorised: cast (float16 -> float32, ints -> float64), guard empty and all -inf, "
                       "subtract the max, exp, divide, cast back")
def safe_softmax_c1(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "correct", "log-domain: y = exp(x - logsumexp(x)) with np.logaddexp.reduce, guards for empty and "
                       "fully masked rows")
def safe_softmax_c2(x):
    arr = np.asarray(x)
    if arr.dtype == np.float16:
        z, out_dtype = arr.astype(np.float32), np.float16
    elif arr.dtype.kind == "f":
        z, out_dtype = arr, arr.dtype
    else:
        z, out_dtype = arr.astype(np.float64), np.float64
    if z.size == 0:
        return np.zeros(arr.shape, dtype=out_dtype)
    if np.all(z == -np.inf):
        return np.zeros(arr.shape, dtype=out_dtype)
    lse = np.logaddexp.reduce(z)
    return np.exp(z - lse).astype(out_dtype)


@sol("1.1", "correct", "three explicit passes in Python loops (max with NaN check, sum, divide) in the working "
                       "dtype, written into a new array")
def safe_softmax_c3(x):
    x = np.asarray(x)
    if x.dtype == np.float16:
        work, out_dtype = np.float32, np.float16
    elif x.dtype.kind == "f":
        work, out_dtype = x.dtype.type, x.dtype
    else:
        work, out_dtype = np.float64, np.float64
    vals = [work(v) for v in x]
    result = np.zeros(len(vals), dtype=out_dtype)
    if not vals:
        return result
    # pass 1: max, NaN-aware
    g = work(-np.inf)
    for v in vals:
        if np.isnan(v):
            return np.full(len(vals), np.nan, dtype=out_dtype)
        if v > g:
            g = v
    if g == -np.inf:
        return result
    # pass 2: sum
    s = work(0.0)
    for v in vals:
        s = s + np.exp(v - g)
    # pass 3: divide
    for i, v in enumerate(vals):
        result[i] = np.exp(v - g) / s
    return result


@sol("1.1", "wrong", "starts the running max at 0 instead of -inf (g = 0.0; g = max(g, v))")
def safe_softmax_w1(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = 0.0
    for v in z:
        g = max(g, v)
    if np.all(z == -np.inf):
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "starts the sum at 1 instead of 0")
def safe_softmax_w2(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    s = 1.0
    for v in z:
        s += np.exp(v - g)
    return (np.exp(z - g) / s).astype(out)


@sol("1.1", "wrong", "uses base 2 (np.exp2) instead of e")
def safe_softmax_w3(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = np.max(z)
    if g == -np.inf:
        return np.zeros_like(z, dtype=out)
    p = np.exp2(z - g)
    return (p / np.sum(p)).astype(out)


@sol("1.1", "wrong", "divides by the sum twice (y = e / s; y /= s)")
def safe_softmax_w4(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z - g)
    s = e.sum()
    y = e / s
    y /= s
    return y.astype(out)


@sol("1.1", "wrong", "subtracts the max in place (x -= x.max()), modifying the caller's array")
def safe_softmax_w5(x):
    if x.size == 0:
        return np.empty(x.shape, dtype=np.float16 if x.dtype == np.float16 else np.float64)
    if x.dtype.kind != "f":
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


@sol("1.1", "wrong", "computes float16 input in float32 but forgets to cast the result back to float16")
def safe_softmax_w6(x):
    x = np.asarray(x)
    z = x.astype(np.float32) if x.dtype == np.float16 else x.astype(np.float64) if x.dtype.kind != "f" else x
    if z.size == 0:
        return np.empty(x.shape, dtype=z.dtype)
    g = z.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=z.dtype)
    e = np.exp(z - g)
    return e / e.sum()


@sol("1.1", "wrong", "casts the result back to x.dtype to 'keep the input type', so integers give [0, 0, 0]")
def safe_softmax_w7(x):
    x = np.asarray(x)
    if x.size == 0:
        return x.copy()
    z = x.astype(np.float32) if x.dtype == np.float16 else x.astype(np.float64)
    g = z.max()
    if g == -np.inf:
        return np.zeros_like(x)
    e = np.exp(z - g)
    return (e / e.sum()).astype(x.dtype)


@sol("1.1", "wrong", "no guard for a fully masked row: all -inf gives NaN instead of zeros")
def safe_softmax_w8(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    with np.errstate(invalid="ignore"):
        e = np.exp(z - z.max())
        return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "subtracts the largest |x| instead of the max")
def safe_softmax_w9(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    if np.all(np.isneginf(z)):
        return np.zeros(x.shape, dtype=out)
    c = np.abs(z[np.isfinite(z)]).max() if np.isfinite(z).any() else z.max()
    e = np.exp(z - c)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "no special case for an empty vector: x.max() raises on it")
def safe_softmax_w10(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    g = z.max()
    if np.isneginf(g):
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "guards with 'if not np.isfinite(max): return zeros', so +inf and NaN rows give zeros too")
def safe_softmax_w11(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    g = z.max()
    if not np.isfinite(g):
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "cleans the result with np.nan_to_num, turning NaN (from NaN or +inf input) into 0")
def safe_softmax_w12(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    z = x.astype(work)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    with np.errstate(invalid="ignore"):
        e = np.exp(z - z.max())
        y = e / e.sum()
    return np.nan_to_num(y, nan=0.0).astype(out)


@sol("1.1", "wrong", "direct softmax without subtracting the max (computed in float64): overflows for 1e4")
def safe_softmax_w13(x):
    x = np.asarray(x)
    out = np.float16 if x.dtype == np.float16 else (x.dtype if x.dtype.kind == "f" else np.float64)
    z = x.astype(np.float64)
    if z.size == 0:
        return np.empty(x.shape, dtype=out)
    if np.all(z == -np.inf):
        return np.zeros(x.shape, dtype=out)
    e = np.exp(z)
    return (e / e.sum()).astype(out)


# =====================================================================================================
# 2.1  my_online_normalizer(x)
# =====================================================================================================

@sol("2.1", "correct", "one for loop, np.maximum for the max, skip while the max is -inf, rescale then add")
def online_normalizer_c1(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "correct", "log-domain: running logsumexp with np.logaddexp and running max, s = exp(lse - g) at the end")
def online_normalizer_c2(x):
    g = -np.inf
    lse = -np.inf
    for xi in x:
        g = np.maximum(g, xi)
        lse = np.logaddexp(lse, xi)
    if g == -np.inf:
        return -np.inf, 0.0
    return float(g), float(np.exp(lse - g))


@sol("2.1", "correct", "if/else on whether the element beats the max, explicit NaN check with math.isnan")
def online_normalizer_c3(x):
    best = float("-inf")
    total = 0.0
    for item in x:
        xi = float(item)
        if math.isnan(xi) or math.isnan(best):
            best, total = math.nan, math.nan
            continue
        if xi == -math.inf:
            continue  # masked: adds e^-inf = 0
        if xi > best:
            total = total * math.exp(best - xi) + 1.0
            best = xi
        else:
            total += math.exp(xi - best)
    return best, total


@sol("2.1", "wrong", "starts the running max at 0 instead of -inf")
def online_normalizer_w1(x):
    g, s = 0.0, 0.0
    for v in x:
        g_new = np.maximum(g, v)
        s = s * np.exp(g - g_new) + np.exp(v - g_new)
        g = g_new
    return float(g), float(s)


@sol("2.1", "wrong", "forgets the rescale: s += exp(x_i - g_i) without multiplying the old sum")
def online_normalizer_w2(x):
    g, s = -math.inf, 0.0
    for v in x:
        g_new = np.maximum(g, v)
        if g_new == -math.inf:
            continue
        s = s + math.exp(v - g_new)
        g = g_new
    return float(g), float(s)


@sol("2.1", "wrong", "inverted rescale exp(g_new - g_old), with a special case for the first element")
def online_normalizer_w3(x):
    g, s = -math.inf, 0.0
    for v in x:
        g_new = np.maximum(g, v)
        if g_new == -math.inf:
            continue
        if s == 0.0:
            s, g = 1.0, g_new
            continue
        s = s * math.exp(g_new - g) + math.exp(v - g_new)
        g = g_new
    return float(g), float(s)


@sol("2.1", "wrong", "uses Python's max(g, x_i), which drops a NaN")
def online_normalizer_w4(x):
    g, s = -math.inf, 0.0
    for v in x:
        g_new = max(g, v)
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "takes the max with np.max(x) first, then sums in a loop: two passes")
def online_normalizer_w5(x):
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return -math.inf, 0.0
    g = np.max(x)
    if g == -np.inf:
        return -math.inf, 0.0
    s = 0.0
    for v in x:
        s += np.exp(v - g)
    return float(g), float(s)


@sol("2.1", "wrong", "copies x into a list first (xs = list(x)) and loops over the copy: not constant memory")
def online_normalizer_w6(x):
    xs = list(x)
    g, s = -math.inf, 0.0
    for v in xs:
        g_new = np.maximum(g, v)
        if g_new == -math.inf:
            continue
        s = s * np.exp(g - g_new) + np.exp(v - g_new)
        g = g_new
    return float(g), float(s)


@sol("2.1", "wrong", "no skip for masked elements: exp(-inf - (-inf)) gives NaN for a row starting with -inf")
def online_normalizer_w7(x):
    g, s = -np.inf, 0.0
    with np.errstate(invalid="ignore"):
        for v in x:
            g_new = np.maximum(g, v)
            s = s * np.exp(g - g_new) + np.exp(v - g_new)
            g = g_new
    return float(g), float(s)


@sol("2.1", "wrong", "initialises the state from the first element (g = x[0], s = 1): fails on empty / fully masked")
def online_normalizer_w8(x):
    it = iter(x)
    first = next(it)
    g, s = float(first), 1.0
    for v in it:
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(float(v) - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "adds the new term measured from the OLD max (updates g too late)")
def online_normalizer_w9(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        if g == -math.inf:
            s, g = 1.0, g_new
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g)
        g = g_new
    return g, s


@sol("2.1", "wrong", "sums plain exp(x_i) and divides by exp(g) at the end: overflows for 1e4")
def online_normalizer_w10(x):
    g, total = -math.inf, 0.0
    for v in x:
        g = np.maximum(g, v)
        with np.errstate(over="ignore"):
            total += np.exp(float(v))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(g), float(total / np.exp(g))


# =====================================================================================================
# 2.2  my_merge(g1, s1, g2, s2)
# =====================================================================================================

@sol("2.2", "correct", "np.maximum for the max, guard for two empty parts, rescale both sums to the new max")
def merge_c1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)
    return float(g), float(s)


@sol("2.2", "correct", "branch on which max is larger, with explicit NaN and empty checks (math module)")
def merge_c2(g1, s1, g2, s2):
    g1, s1, g2, s2 = float(g1), float(s1), float(g2), float(s2)
    if math.isnan(g1) or math.isnan(g2):
        return math.nan, math.nan
    if g1 == -math.inf and g2 == -math.inf:
        return -math.inf, 0.0
    if g1 >= g2:
        if g2 == -math.inf:
            return g1, s1 + 0.0 * s2
        return g1, s1 + s2 * math.exp(g2 - g1)
    if g1 == -math.inf:
        return g2, s2 + 0.0 * s1
    return g2, s1 * math.exp(g1 - g2) + s2


@sol("2.2", "wrong", "no guard for two empty parts: -inf - (-inf) gives NaN")
def merge_w1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    with np.errstate(invalid="ignore"):
        s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)
    return float(g), float(s)


@sol("2.2", "wrong", "picks the max with 'g1 if g1 > g2 else g2', which loses a NaN in the first max")
def merge_w2(g1, s1, g2, s2):
    g = g1 if g1 > g2 else g2
    if g == -math.inf:
        return -math.inf, 0.0
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)
    return g, s


@sol("2.2", "wrong", "takes exp of each max alone and divides by exp(g): overflows for maxima of 800")
def merge_w3(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = (s1 * np.exp(g1) + s2 * np.exp(g2)) / np.exp(g)
    return float(g), float(s)


@sol("2.2", "wrong", "rescale factors inverted: exp(g - g1) instead of exp(g1 - g)")
def merge_w4(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = s1 * np.exp(g - g1) + s2 * np.exp(g - g2)
    return float(g), float(s)


@sol("2.2", "wrong", "assumes the first part holds the larger max: s = s1 + s2 * exp(g2 - g1)")
def merge_w5(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    if g1 == -np.inf:
        return float(g2), float(s2)
    with np.errstate(over="ignore"):
        s = s1 + s2 * np.exp(g2 - g1)
    return float(g), float(s)


@sol("2.2", "wrong", "adds the two sums without rescaling them to the common max")
def merge_w6(g1, s1, g2, s2):
    return float(np.maximum(g1, g2)), float(s1 + s2)


@sol("2.2", "wrong", "uses np.fmax (thinking it is the float max), which ignores NaN")
def merge_w7(g1, s1, g2, s2):
    g = np.fmax(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)
    return float(g), float(s)


@sol("2.2", "wrong", "returns the pair in the wrong order, (s, g)")
def merge_w8(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return 0.0, -np.inf
    s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)
    return float(s), float(g)


# =====================================================================================================
# 2.3  my_merge_three(g1, s1, g2, s2, g3, s3)
# =====================================================================================================

@sol("2.3", "correct", "closed form: g = max of the three (np.maximum), s = sum s_i exp(g_i - g), guard all empty")
def merge_three_c1(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    s = s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)
    return float(g), float(s)


@sol("2.3", "correct", "closed form on arrays: gs.max() (propagates NaN), then a dot product of sums and factors")
def merge_three_c2(g1, s1, g2, s2, g3, s3):
    gs = np.array([g1, g2, g3], dtype=np.float64)
    ss = np.array([s1, s2, s3], dtype=np.float64)
    g = gs.max()
    if np.isneginf(g):
        return -np.inf, 0.0
    return float(g), float(np.dot(ss, np.exp(gs - g)))


@sol("2.3", "wrong", "calls the package's merge twice instead of writing the closed form")
def merge_three_w1(g1, s1, g2, s2, g3, s3):
    import flashmath as fm
    g12, s12 = fm.merge(g1, s1, g2, s2)
    return fm.merge(g12, s12, g3, s3)


@sol("2.3", "wrong", "no guard for three empty parts: exp(-inf - (-inf)) gives NaN")
def merge_three_w2(g1, s1, g2, s2, g3, s3):
    g = np.maximum.reduce([g1, g2, g3])
    with np.errstate(invalid="ignore"):
        s = sum(si * np.exp(gi - g) for gi, si in ((g1, s1), (g2, s2), (g3, s3)))
    return float(g), float(s)


@sol("2.3", "wrong", "adds the three sums without rescaling")
def merge_three_w3(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    return float(g), float(s1 + s2 + s3)


@sol("2.3", "wrong", "uses Python's max(g1, g2, g3), which drops a NaN that is not first")
def merge_three_w4(g1, s1, g2, s2, g3, s3):
    g = max(g1, g2, g3)
    if g == -math.inf:
        return -math.inf, 0.0
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)
    return g, s


@sol("2.3", "wrong", "exp of each max alone, divided by exp(g): overflows when the maxima are large")
def merge_three_w5(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = (s1 * np.exp(g1) + s2 * np.exp(g2) + s3 * np.exp(g3)) / np.exp(g)
    return float(g), float(s)


@sol("2.3", "wrong", "rescale factors inverted, exp(g - g_i)")
def merge_three_w6(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = s1 * np.exp(g - g1) + s2 * np.exp(g - g2) + s3 * np.exp(g - g3)
    return float(g), float(s)


@sol("2.3", "wrong", "forgets to rescale the third part's sum (adds s3 as is)")
def merge_three_w7(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    return float(g), float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3)


# =====================================================================================================
# 3.1  my_attention(q, k, v)
# =====================================================================================================

@sol("3.1", "correct", "matmul with swapaxes(-1, -2), scale by sqrt(D), row max with keepdims, softmax, @ v")
def attention_c1(q, k, v):
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "correct", "einsum with the scale folded into q, softmax through a logsumexp")
def attention_c2(q, k, v):
    qs = q / math.sqrt(q.shape[-1])
    x = np.einsum("...nd,...md->...nm", qs, k)
    g = np.max(x, axis=-1, keepdims=True)
    lse = g + np.log(np.sum(np.exp(x - g), axis=-1, keepdims=True))
    y = np.exp(x - lse)
    return np.einsum("...nm,...me->...ne", y, v)


@sol("3.1", "correct", "loops over the leading dimensions with np.ndindex and over the query rows, 1-D safe softmax")
def attention_c3(q, k, v):
    lead = q.shape[:-2]
    N, D = q.shape[-2:]
    Dv = v.shape[-1]
    out = np.zeros(lead + (N, Dv))
    for idx in np.ndindex(*lead):
        qb, kb, vb = q[idx], k[idx], v[idx]
        for n in range(N):
            row = kb @ qb[n] / math.sqrt(D)
            w = np.exp(row - row.max())
            out[idx + (n,)] = (w / w.sum()) @ vb
    return out


@sol("3.1", "wrong", "scales by sqrt(M), the number of keys, instead of sqrt(D)")
def attention_w1(q, k, v):
    M = k.shape[-2]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(M)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True) @ v


@sol("3.1", "wrong", "forgets the 1/sqrt(D) scale")
def attention_w2(q, k, v):
    x = np.matmul(q, np.swapaxes(k, -1, -2))
    x -= x.max(axis=-1, keepdims=True)
    p = np.exp(x)
    p /= p.sum(axis=-1, keepdims=True)
    return np.matmul(p, v)


@sol("3.1", "wrong", "softmax over axis -2 (over the queries) instead of the keys")
def attention_w3(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-2, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-2, keepdims=True)) @ v


@sol("3.1", "wrong", "subtracts the max of the whole score array instead of each row's max")
def attention_w4(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max())
    with np.errstate(invalid="ignore"):
        return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "row max without keepdims, so the subtraction broadcasts along the wrong axis")
def attention_w5(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "uses k.T, which also reverses the batch and head axes")
def attention_w6(q, k, v):
    x = q @ k.T / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "plain softmax without subtracting the row max: overflows for scores near 800")
def attention_w7(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "divides the scores by D instead of sqrt(D)")
def attention_w8(q, k, v):
    D = q.shape[-1]
    x = np.einsum("...nd,...md->...nm", q, k) / D
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "multiplies the probabilities by v transposed (y @ v.T)")
def attention_w9(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    y = e / e.sum(axis=-1, keepdims=True)
    return y @ np.swapaxes(v, -1, -2)


@sol("3.1", "wrong", "computes in float32 for speed; error above 1e-9")
def attention_w10(q, k, v):
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    x = q32 @ np.swapaxes(k32, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v32


# =====================================================================================================
# 4.1  my_loop_swap(y, v)
# =====================================================================================================

@sol("4.1", "correct", "n -> m -> d with a Python list of D partial sums per row (the chapter's order)")
def loop_swap_c1(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "correct", "m -> n -> d, accumulating straight into the output array")
def loop_swap_c2(y, v):
    N, M = len(y), len(v)
    D = len(v[0])
    out = np.zeros((N, D))
    for m in range(M):
        for n in range(N):
            for d in range(D):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "correct", "n -> m with the whole row updated at once, acc += y[n, m] * v[m, :] (allowed by the prompt)")
def loop_swap_c3(y, v):
    N, M = y.shape
    out = np.zeros((N, v.shape[1]))
    for n in range(N):
        acc = np.zeros(v.shape[1])
        for m in range(M):
            acc += y[n, m] * v[m, :]
        out[n] = acc
    return out


@sol("4.1", "wrong", "keeps the textbook order n -> d -> m (the key loop inside the output-dimension loop)")
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


@sol("4.1", "wrong", "replaces the inner loops with a BLAS product per row, y[n] @ v")
def loop_swap_w2(y, v):
    y = np.asarray(y)
    out = np.zeros((y.shape[0], np.asarray(v).shape[1]))
    for n in range(y.shape[0]):
        out[n] = y[n] @ v
    return out


@sol("4.1", "wrong", "converts the inputs with np.asarray(..., dtype=float) first, hiding the product order")
def loop_swap_w3(y, v):
    y = np.asarray(y, dtype=float)
    v = np.asarray(v, dtype=float)
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        for m in range(M):
            for d in range(D):
                out[n, d] += y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "accumulates each row in a float32 array")
def loop_swap_w4(y, v):
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


@sol("4.1", "wrong", "runs the keys backwards (m from M-1 down to 0)")
def loop_swap_w5(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        for m in reversed(range(M)):
            for d in range(D):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "sums each element's terms with math.fsum (exact, not in key order)")
def loop_swap_w6(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        terms = [[0.0] * M for _ in range(D)]
        for m in range(M):
            for d in range(D):
                terms[d][m] = y[n, m] * v[m, d]
        for d in range(D):
            out[n, d] = math.fsum(float(t) for t in terms[d])
    return out


@sol("4.1", "wrong", "sizes the output with y.shape[1] (M) instead of v.shape[1] (D)")
def loop_swap_w7(y, v):
    N, M = y.shape
    out = np.zeros((N, M))
    for n in range(N):
        for m in range(M):
            for d in range(M):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "typo: assigns the product instead of adding it (acc[d] = y * v), keeping only the last key")
def loop_swap_w8(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M):
            for d in range(D):
                acc[d] = y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "uses np.einsum('nm,md->nd') instead of loops")
def loop_swap_w9(y, v):
    return np.einsum("nm,md->nd", np.asarray(y), np.asarray(v))


# =====================================================================================================
# 5.1  my_one_loop_step(g_prev, s_prev, a_prev, x_m, v_m)
# =====================================================================================================

@sol("5.1", "correct", "the chapter's four steps: np.maximum, rescale, new sum, correction and weight")
def one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    rescale = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * rescale + e
    a = a_prev * (s_prev * rescale / s) + (e / s) * v_m
    return g, s, a


@sol("5.1", "correct", "unnormalised numerator: (s_prev * alpha * a_prev + e * v) / s_new")
def one_loop_step_c2(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g_new = np.maximum(g_prev, x_m)
    alpha = math.exp(g_prev - g_new)
    p = math.exp(x_m - g_new)
    s_new = s_prev * alpha + p
    numerator = (s_prev * alpha) * a_prev + p * v_m
    return float(g_new), s_new, numerator / s_new


@sol("5.1", "correct", "branches on whether the max jumps, explicit NaN case, math module")
def one_loop_step_c3(g_prev, s_prev, a_prev, x_m, v_m):
    if math.isnan(x_m) or math.isnan(g_prev):
        return math.nan, math.nan, np.full(np.shape(a_prev), np.nan)
    if x_m > g_prev:  # the max jumps (always true for the first key)
        old = s_prev * math.exp(g_prev - x_m)
        s_new = old + 1.0
        a_new = (old / s_new) * a_prev + (1.0 / s_new) * v_m
        return x_m, s_new, a_new
    w = math.exp(x_m - g_prev)
    s_new = s_prev + w
    return g_prev, s_new, (s_prev / s_new) * a_prev + (w / s_new) * v_m


@sol("5.1", "correct", "log domain: carry lse = g + log s, update with np.logaddexp")
def one_loop_step_c4(g_prev, s_prev, a_prev, x_m, v_m):
    with np.errstate(divide="ignore"):
        lse_prev = g_prev + np.log(s_prev)
    lse = np.logaddexp(lse_prev, x_m)
    g = np.maximum(g_prev, x_m)
    s = np.exp(lse - g)
    a = np.exp(lse_prev - lse) * a_prev + np.exp(x_m - lse) * v_m
    return g, s, a


@sol("5.1", "wrong", "uses Python's max(g_prev, x_m), which drops a NaN score")
def one_loop_step_w1(g_prev, s_prev, a_prev, x_m, v_m):
    g = max(g_prev, x_m)
    alpha = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * alpha + e
    return g, s, a_prev * (s_prev * alpha / s) + v_m * (e / s)


@sol("5.1", "wrong", "forgets the correction of the old output: a = a_prev + w * v")
def one_loop_step_w2(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    e = np.exp(x_m - g)
    s = s_prev * np.exp(g_prev - g) + e
    return g, s, a_prev + (e / s) * v_m


@sol("5.1", "wrong", "correction inverted: multiplies the old output by s_m / (s_{m-1} e^{g_{m-1} - g_m})")
def one_loop_step_w3(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    old = s_prev * r
    corr = s / old if old > 0 else 0.0
    return g, s, corr * a_prev + (e / s) * v_m


@sol("5.1", "wrong", "divides the new key's weight by s_{m-1} instead of s_m")
def one_loop_step_w4(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    weight = e / s_prev if s_prev > 0 else 1.0
    return g, s, a_prev * (s_prev * r / s) + weight * v_m


@sol("5.1", "wrong", "forgets to divide the new term by s_m: a = correction * a_prev + e^{x_m - g_m} v_m")
def one_loop_step_w5(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    return g, s, a_prev * (s_prev * r / s) + e * v_m


@sol("5.1", "wrong", "rescale factor inverted: exp(g_m - g_{m-1})")
def one_loop_step_w6(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.exp(g - g_prev)
        e = np.exp(x_m - g)
        s = s_prev * r + e
        return g, s, a_prev * (s_prev * r / s) + (e / s) * v_m


@sol("5.1", "wrong", "takes exp of the scores alone, then divides by exp(g): overflows on a jump of 1000")
def one_loop_step_w7(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    with np.errstate(over="ignore", invalid="ignore"):
        old = s_prev * np.exp(g_prev)
        new = np.exp(x_m)
        s = (old + new) / np.exp(g)
        a = (old * a_prev + new * v_m) / (old + new)
    return g, s, a


@sol("5.1", "wrong", "returns the old max g_prev instead of g_m")
def one_loop_step_w8(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    return g_prev, s, a_prev * (s_prev * r / s) + (e / s) * v_m


@sol("5.1", "wrong", "updates a_prev in place (a_prev *= ...; a_prev += ...), modifying the caller's array")
def one_loop_step_w9(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    a_prev *= s_prev * r / s
    a_prev += (e / s) * v_m
    return g, s, a_prev


# =====================================================================================================
# 5.2  my_block_step(g_prev, s_prev, a_prev, x_block, v_block)
# =====================================================================================================

@sol("5.2", "correct", "block recurrence: g = max(g_prev, max x), s = s_prev e^{g_prev-g} + sum e^{x-g}, "
                       "A' = (s_prev e^{g_prev-g} A'_prev + e @ V) / s")
def block_step_c1(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block, dtype=np.float64)
    g = np.maximum(g_prev, x_block.max())
    alpha = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * alpha + p.sum()
    a = (s_prev * alpha * a_prev + p @ v_block) / s
    return g, s, a


@sol("5.2", "correct", "folds the one-key recurrence over the keys of the block in a loop")
def block_step_c2(g_prev, s_prev, a_prev, x_block, v_block):
    g, s, a = g_prev, s_prev, np.array(a_prev, dtype=np.float64)
    for x_j, v_j in zip(x_block, v_block):
        g_new = np.maximum(g, x_j)
        r = np.exp(g - g_new)
        e = np.exp(x_j - g_new)
        s_new = s * r + e
        a = a * (s * r / s_new) + (e / s_new) * v_j
        g, s = g_new, s_new
    return g, s, a


@sol("5.2", "wrong", "forgets the factor s_prev / s_m on the old output: a = a_prev e^{g_prev-g} + (e @ V) / s")
def block_step_w1(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    alpha = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * alpha + np.sum(p)
    return g, s, a_prev * alpha + (p @ v_block) / s


@sol("5.2", "wrong", "Python max(g_prev, x_block.max()) drops a NaN score")
def block_step_w2(g_prev, s_prev, a_prev, x_block, v_block):
    g = max(g_prev, float(np.max(x_block)))
    alpha = math.exp(g_prev - g)
    p = np.exp(np.asarray(x_block) - g)
    s = s_prev * alpha + p.sum()
    return g, s, (s_prev * alpha * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "adds the mean of the block's exponentials to the sum instead of their sum")
def block_step_w3(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    alpha = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * alpha + p.mean()
    return g, s, (s_prev * alpha * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "treats the block as one key: uses only its last score and value row")
def block_step_w4(g_prev, s_prev, a_prev, x_block, v_block):
    x_m, v_m = x_block[-1], v_block[-1]
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    return g, s, a_prev * (s_prev * r / s) + (e / s) * v_m


@sol("5.2", "wrong", "sums the weighted value rows over the wrong axis (axis=1 instead of axis=0)")
def block_step_w5(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    alpha = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * alpha + p.sum()
    block_term = (p[:, None] * v_block).sum(axis=1)
    return g, s, (s_prev * alpha * a_prev + block_term) / s


@sol("5.2", "wrong", "divides the block's contribution by s_prev instead of the new sum s_m")
def block_step_w6(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    alpha = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * alpha + p.sum()
    denom = s_prev if s_prev > 0 else s
    return g, s, (s_prev * alpha / s) * a_prev + (p @ v_block) / denom


@sol("5.2", "wrong", "rescale inverted: exp(g_m - g_prev) for the old state")
def block_step_w7(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    with np.errstate(over="ignore", invalid="ignore"):
        alpha = np.exp(g - g_prev)
        p = np.exp(x_block - g)
        s = s_prev * alpha + p.sum()
        return g, s, (s_prev * alpha * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "exponentiates the block's scores without subtracting the max, scales by exp(-g) after: "
                     "overflows for a key 1000 above")
def block_step_w8(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_block) * np.exp(-g)
        alpha = np.exp(g_prev - g)
        s = s_prev * alpha + p.sum()
        return g, s, (s_prev * alpha * a_prev + p @ v_block) / s


# =====================================================================================================
# Predictions (P0..P5)
# =====================================================================================================

PREDICTIONS += [
    ("P0", 42, "correct", "x_m is x[m - 1], so x_43 is x[42]"),
    ("P0", -4, "correct", "counted from the end: x[-1] is x_46, so x_43 is x[-4] (same element as x[42])"),
    ("P0", 43, "wrong", "uses the math's count directly, forgetting Python starts at 0"),
    ("P0", 44, "wrong", "shifts the index the wrong way (m + 1)"),
    ("P0", -3, "wrong", "counts back from the end but forgets x[-1] is already x_46"),
    ("P1", 0, "correct", "the sum 46 e^10 overflows float16 to inf, so every e^10 / inf is 0: total 0"),
    ("P1", 1, "wrong", "a softmax always adds up to 1"),
    ("P1", float("nan"), "wrong", "overflow always shows up as NaN"),
    ("P1", 46, "wrong", "each output is e^10 / e^10 = 1, so 46 ones"),
    ("P2", math.exp(-1), "correct", "each step raises the max by 1, so every factor is e^{-1}"),
    ("P2", 0.368, "correct", "e^{-1} typed to three decimals"),
    ("P2", math.e, "wrong", "inverts the factor: e^{g_i - g_{i-1}}"),
    ("P2", 1, "wrong", "thinks the factor is 1 at every step"),
    ("P2", 0, "wrong", "takes the first step's factor e^{-inf} = 0 for all steps"),
    ("P3", 8, "correct", "Var(q.k) = D = 64, so the std is sqrt(64) = 8"),
    ("P3", 64, "wrong", "confuses the variance with the standard deviation"),
    ("P3", 1, "wrong", "each component has std 1, so the dot product has std 1"),
    ("P3", 0.125, "wrong", "gives the scale 1/sqrt(D) instead of the spread"),
    ("P4", 0, "correct", "every element gets its terms in the same order m = 1..M: identical bits"),
    ("P4", 12, "wrong", "a different loop order changes the rounding of every element"),
    ("P4", 6, "wrong", "about half of the elements differ, as with BLAS"),
    ("P4", 3, "wrong", "one element per row differs"),
    ("P5", 0.75, "correct", "no jump, s_3 = 3 and s_4 = 4: the correction is s_3 / s_4 = 3/4"),
    ("P5", 1, "wrong", "the max holds so the correction is e^0 = 1"),
    ("P5", 0.25, "wrong", "gives the new key's weight 1/4 instead of what the old output keeps"),
    ("P5", 4 / 3, "wrong", "inverts the ratio, s_4 / s_3"),
]
