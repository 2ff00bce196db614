"""Learner set 3, part a: chapters 0-5 (exercises 0.1, 1.1, 2.1, 2.2, 2.3, 3.1, 4.1, 5.1, 5.2 and P0..P5).

Written from the notebooks' prompts alone (the checkers, solutions and tests were not read).
"""
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


# ======================================================================================================
# 0.1  score_row(q_n, K): x_m = q_n . k_m / sqrt(D)
# ======================================================================================================

@sol("0.1", "correct", "K @ q_n divided by sqrt(D), D taken from q_n")
def score_row_c1(q_n, K):
    return K @ q_n / np.sqrt(q_n.shape[0])


@sol("0.1", "correct", "explicit loop over the keys with math.sqrt, D from K's second axis")
def score_row_c2(q_n, K):
    D = K.shape[1]
    return np.array([float(np.dot(q_n, k_m)) / math.sqrt(D) for k_m in K])


@sol("0.1", "correct", "scale folded into the query first, then einsum over d")
def score_row_c3(q_n, K):
    q_scaled = q_n / math.sqrt(len(q_n))
    return np.einsum("md,d->m", K, q_scaled)


@sol("0.1", "wrong", "forgets the 1/sqrt(D) scale")
def score_row_w1(q_n, K):
    return K @ q_n


@sol("0.1", "wrong", "divides by D instead of sqrt(D)")
def score_row_w2(q_n, K):
    return K @ q_n / q_n.shape[0]


@sol("0.1", "wrong", "divides by sqrt(M), the number of keys, instead of sqrt(D)")
def score_row_w3(q_n, K):
    return K @ q_n / np.sqrt(K.shape[0])


@sol("0.1", "wrong", "writes q_n @ K, which pairs q_n with the columns of K (only runs when M == D)")
def score_row_w4(q_n, K):
    return q_n @ K / np.sqrt(len(q_n))


@sol("0.1", "wrong", "scales the query in place (q_n /= sqrt(D)), modifying the input")
def score_row_w5(q_n, K):
    q_n /= np.sqrt(q_n.shape[0])
    return K @ q_n


@sol("0.1", "wrong", "rounds sqrt(D) down to an integer (int(np.sqrt(D)))")
def score_row_w6(q_n, K):
    return K @ q_n / int(np.sqrt(q_n.shape[0]))


@sol("0.1", "wrong", "computes in float32 to save memory")
def score_row_w7(q_n, K):
    return (K.astype(np.float32) @ q_n.astype(np.float32)) / np.float32(np.sqrt(q_n.shape[0]))


@sol("0.1", "wrong", "returns a (1, M) row matrix instead of the M scores (q_n[None] @ K.T)")
def score_row_w8(q_n, K):
    return q_n[None, :] @ K.T / np.sqrt(q_n.shape[0])


# ======================================================================================================
# 1.1  my_safe_softmax(x)
# ======================================================================================================

def _work_dtype(x):
    """(dtype to compute in, dtype to return)."""
    if x.dtype == np.float16:
        return np.float32, np.float16
    if np.issubdtype(x.dtype, np.floating):
        return x.dtype, x.dtype
    return np.float64, np.float64


@sol("1.1", "correct", "subtract the max, exp, divide; float16 through float32, ints to float64, guards for empty"
                       " and fully masked rows")
def safe_softmax_c1(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(xw - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "correct", "log-domain: exp(x - logsumexp(x)) with np.logaddexp.reduce")
def safe_softmax_c2(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return np.empty(x.shape, dtype=out)
    lse = np.logaddexp.reduce(xw)
    if lse == -np.inf:
        return np.zeros(x.shape, dtype=out)
    return np.exp(xw - lse).astype(out)


@sol("1.1", "correct", "three explicit passes (max with np.maximum, sum, divide) over a float copy")
def safe_softmax_c3(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    work = np.dtype(work).type
    g = work(-np.inf)
    for v in xw:  # pass 1
        g = np.maximum(g, v)
    if g == -np.inf:  # empty or all masked
        return np.zeros(x.shape, dtype=out)
    s = work(0.0)
    for v in xw:  # pass 2
        s = s + np.exp(v - g)
    y = np.empty(xw.shape, dtype=work)
    for i, v in enumerate(xw):  # pass 3
        y[i] = np.exp(v - g) / s
    return y.astype(out)


@sol("1.1", "correct", "keepdims max, np.where guard for the fully masked row, np.errstate to keep quiet")
def safe_softmax_c4(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = np.array(x, dtype=work)
    if xw.size == 0:
        return xw.astype(out)
    g = np.max(xw, keepdims=True)
    g_safe = np.where(np.isneginf(g), 0.0, g).astype(work)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(xw - g_safe)
        s = e.sum()
        y = e / s if s != 0 else np.zeros_like(e)
    return y.astype(out)


@sol("1.1", "wrong", "does not subtract the max (plain exp / sum)")
def safe_softmax_w1(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(xw)
        s = e.sum()
        if s == 0:
            return np.zeros(x.shape, dtype=out)
        return (e / s).astype(out)


@sol("1.1", "wrong", "the running max starts at 0 instead of -inf")
def safe_softmax_w2(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    if np.all(np.isneginf(xw)):
        return np.zeros(x.shape, dtype=out)
    g = 0.0
    for v in xw:
        g = np.maximum(g, v)
    with np.errstate(invalid="ignore"):
        e = np.exp(xw - g)
        return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "subtracts the largest |x| instead of the max")
def safe_softmax_w3(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    if np.all(np.isneginf(xw)):
        return np.zeros(x.shape, dtype=out)
    finite = xw[np.isfinite(xw)]
    g = np.abs(finite).max() if finite.size else xw.max()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(xw - g)
        return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "the sum starts at 1 instead of 0")
def safe_softmax_w4(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(xw - g)
    s = 1.0
    for v in e:
        s += v
    return (e / s).astype(out)


@sol("1.1", "wrong", "uses base 2 (np.exp2) instead of e")
def safe_softmax_w5(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp2(xw - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "divides by the sum twice")
def safe_softmax_w6(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(xw - g)
    s = e.sum()
    return (e / s / s).astype(out)


@sol("1.1", "wrong", "subtracts the max in place (x -= x.max()), modifying the caller's array")
def safe_softmax_w7(x):
    work, out = _work_dtype(x)
    if x.size == 0:
        return x.astype(out)
    g = x.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    if np.issubdtype(x.dtype, np.floating) and x.dtype != np.float16:
        x -= g
        e = np.exp(x)
    else:
        e = np.exp(x.astype(work) - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "casts the result back to x.dtype (integers give [0, 0, 0])")
def safe_softmax_w8(x):
    x = np.asarray(x)
    xw = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
    if xw.size == 0:
        return xw.astype(x.dtype)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=x.dtype)
    e = np.exp(xw - g)
    return (e / e.sum()).astype(x.dtype)


@sol("1.1", "wrong", "no guard for the fully masked row (all -inf gives NaN)")
def safe_softmax_w9(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    with np.errstate(invalid="ignore"):
        e = np.exp(xw - xw.max())
        return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "calls x.max() on an empty vector (raises instead of returning an empty vector)")
def safe_softmax_w10(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    e = np.exp(xw - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "cleans the result with np.nan_to_num, so NaN in gives 0 out")
def safe_softmax_w11(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    with np.errstate(invalid="ignore"):
        e = np.exp(xw - xw.max())
        return np.nan_to_num(e / e.sum()).astype(out)


@sol("1.1", "wrong", "returns float32 for float16 input (forgets to cast back)")
def safe_softmax_w12(x):
    x = np.asarray(x)
    work, _ = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw
    g = xw.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=work)
    e = np.exp(xw - g)
    return e / e.sum()


@sol("1.1", "wrong", "subtracts the min instead of the max")
def safe_softmax_w13(x):
    x = np.asarray(x)
    work, out = _work_dtype(x)
    xw = x.astype(work)
    if xw.size == 0:
        return xw.astype(out)
    if np.all(np.isneginf(xw)):
        return np.zeros(x.shape, dtype=out)
    finite = xw[np.isfinite(xw)]
    g = finite.min() if finite.size else xw.max()
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(xw - g)
        return (e / e.sum()).astype(out)


# ======================================================================================================
# 2.1  my_online_normalizer(x): (g, s) in one pass
# ======================================================================================================

@sol("2.1", "correct", "the chapter's recurrence with np.maximum and the skip while only -inf has been seen")
def online_normalizer_c1(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        if g_new == -math.inf:
            continue
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "correct", "log-domain: running max and running logsumexp via np.logaddexp, s = exp(lse - g) at the end")
def online_normalizer_c2(x):
    g, lse = -np.inf, -np.inf
    for x_i in x:
        x_i = np.float64(x_i)
        g = np.maximum(g, x_i)
        lse = np.logaddexp(lse, x_i)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, np.exp(lse - g)


@sol("2.1", "correct", "functools.reduce over the elements, merging (x_i, 1) into the state")
def online_normalizer_c3(x):
    def step(state, x_i):
        g, s = state
        x_i = float(x_i)
        if math.isnan(x_i) or math.isnan(g):
            return math.nan, math.nan
        if x_i == -math.inf:
            return g, s
        g_new = max(g, x_i)
        return g_new, s * math.exp(g - g_new) + math.exp(x_i - g_new)
    return functools.reduce(step, x, (-math.inf, 0.0))


@sol("2.1", "correct", "skips masked elements outright, otherwise rescales only when the max jumps")
def online_normalizer_c4(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        if x_i == -np.inf:
            continue
        if np.isnan(x_i) or np.isnan(g):
            g, s = np.nan, np.nan
        elif x_i > g:
            s = s * np.exp(g - x_i) + 1.0
            g = x_i
        else:
            s = s + np.exp(x_i - g)
    return g, s


@sol("2.1", "wrong", "the running max starts at 0 instead of -inf")
def online_normalizer_w1(x):
    g, s = 0.0, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "forgets the rescale factor: s += exp(x_i - g_i)")
def online_normalizer_w2(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        if g_new == -np.inf:
            continue
        s = s + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "inverts the rescale factor: exp(g_i - g_{i-1})")
def online_normalizer_w3(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        if g_new == -np.inf:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            s = s * np.exp(g_new - g) + np.exp(x_i - g_new) if s else np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "uses Python's max, which drops a NaN")
def online_normalizer_w4(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        g_new = max(g, x_i)
        if g_new == -math.inf:
            continue
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "no skip for leading -inf: a fully masked row gives NaN")
def online_normalizer_w5(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        with np.errstate(invalid="ignore"):
            s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "two passes: takes max(x) first, then sums in a second loop")
def online_normalizer_w6(x):
    g = -np.inf
    for x_i in x:
        g = np.maximum(g, x_i)
    if g == -np.inf:
        return g, 0.0
    s = 0.0
    for x_i in x:
        s += np.exp(x_i - g)
    return g, s


@sol("2.1", "wrong", "copies x into an array first (np.array(list(x))) and sweeps the copy")
def online_normalizer_w7(x):
    xs = np.array(list(x), dtype=np.float64)
    g, s = -np.inf, 0.0
    for x_i in xs:
        g_new = np.maximum(g, x_i)
        if g_new == -np.inf:
            continue
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "measures the new term from the old max: exp(x_i - g_{i-1})")
def online_normalizer_w8(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        g_new = np.maximum(g, x_i)
        if g_new == -np.inf:
            continue
        if g == -np.inf:
            s = 1.0
        else:
            with np.errstate(over="ignore"):
                s = s * np.exp(g - g_new) + np.exp(x_i - g)
        g = g_new
    return g, s


@sol("2.1", "wrong", "starts from the first element (g = x[0], s = 1): fails on an empty x and a leading -inf")
def online_normalizer_w9(x):
    it = iter(x)
    g = next(it)
    s = 1.0
    for x_i in it:
        g_new = np.maximum(g, x_i)
        with np.errstate(invalid="ignore"):
            s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "treats any -inf element as a fully masked row and returns (-inf, 0)")
def online_normalizer_w10(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        if x_i == -np.inf:
            return -np.inf, 0.0
        g_new = np.maximum(g, x_i)
        s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "does not subtract the max at all: s = sum of exp(x_i) (overflows at 1e4)")
def online_normalizer_w11(x):
    g, s = -np.inf, 0.0
    for x_i in x:
        g = np.maximum(g, x_i)
        with np.errstate(over="ignore"):
            s = s + np.exp(np.float64(x_i))
    return g, s


# ======================================================================================================
# 2.2  my_merge(g1, s1, g2, s2)
# ======================================================================================================

@sol("2.2", "correct", "np.maximum, early return for two empty parts, both sums rescaled to the new max")
def merge_c1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


@sol("2.2", "correct", "returns the other part when one is empty, otherwise the usual merge (floats)")
def merge_c2(g1, s1, g2, s2):
    g1, s1, g2, s2 = float(g1), float(s1), float(g2), float(s2)
    if g1 == -math.inf:
        return (g2, s2) if g2 != -math.inf else (-math.inf, 0.0)
    if g2 == -math.inf:
        return g1, s1
    g = float(np.maximum(g1, g2))
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


@sol("2.2", "correct", "log-domain: logaddexp of (g_i + log s_i - g), then exp")
def merge_c3(g1, s1, g2, s2):
    g = np.maximum(np.float64(g1), np.float64(g2))
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.logaddexp(np.log(np.float64(s1)) + (g1 - g), np.log(np.float64(s2)) + (g2 - g))
    return g, np.exp(t)


@sol("2.2", "wrong", "no guard for two empty parts: -inf - (-inf) gives NaN")
def merge_w1(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    with np.errstate(invalid="ignore"):
        return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


@sol("2.2", "wrong", "uses Python's max, which loses a NaN in the second max")
def merge_w2(g1, s1, g2, s2):
    g = max(g1, g2)
    if g == -math.inf:
        return -math.inf, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


@sol("2.2", "wrong", "adds the sums without rescaling them to the common max")
def merge_w3(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, s1 + s2


@sol("2.2", "wrong", "inverts the rescale factors: exp(g - g_i)")
def merge_w4(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, s1 * np.exp(g - g1) + s2 * np.exp(g - g2)


@sol("2.2", "wrong", "assumes the first part holds the larger max: s = s1 + s2 exp(g2 - g1)")
def merge_w5(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    if g1 == -np.inf:
        return g2, s2
    with np.errstate(over="ignore"):
        return g, s1 + s2 * np.exp(g2 - g1)


@sol("2.2", "wrong", "takes exp of the maxima alone: (s1 e^g1 + s2 e^g2) / e^g (overflows)")
def merge_w6(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, (s1 * np.exp(g1) + s2 * np.exp(g2)) / np.exp(g)


@sol("2.2", "wrong", "returns (-inf, 0) as soon as either part is empty")
def merge_w7(g1, s1, g2, s2):
    if g1 == -np.inf or g2 == -np.inf:
        return -np.inf, 0.0
    g = np.maximum(g1, g2)
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


@sol("2.2", "wrong", "cleans the factors with np.nan_to_num to avoid -inf - (-inf), which also kills NaN inputs")
def merge_w8(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    with np.errstate(invalid="ignore"):
        f1 = np.nan_to_num(np.exp(g1 - g))
        f2 = np.nan_to_num(np.exp(g2 - g))
    s = np.nan_to_num(s1 * f1 + s2 * f2)
    return g, s


@sol("2.2", "wrong", "rescales the sums in place in an array built from the inputs (fails for integer states)")
def merge_w9(g1, s1, g2, s2):
    gs = np.array([g1, g2], dtype=np.float64)
    ss = np.array([s1, s2])
    g = np.max(gs)
    if g == -np.inf:
        return -np.inf, 0.0
    ss *= np.exp(gs - g)
    return g, ss.sum()


@sol("2.2", "wrong", "two empty parts return (0, 0) instead of (-inf, 0)")
def merge_w10(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    if g == -np.inf:
        return 0.0, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


# ======================================================================================================
# 2.3  my_merge_three(g1, s1, g2, s2, g3, s3): closed form
# ======================================================================================================

@sol("2.3", "correct", "g = max of the three (np.maximum), s = sum of s_i exp(g_i - g), guard for all empty")
def merge_three_c1(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


@sol("2.3", "correct", "vectorised: np.max over the maxima, dot product of sums and factors")
def merge_three_c2(g1, s1, g2, s2, g3, s3):
    gs = np.array([g1, g2, g3], dtype=np.float64)
    ss = np.array([s1, s2, s3], dtype=np.float64)
    g = np.max(gs)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, float(np.exp(gs - g) @ ss)


@sol("2.3", "correct", "math.fsum of the terms, skipping empty parts")
def merge_three_c3(g1, s1, g2, s2, g3, s3):
    parts = [(float(g1), float(s1)), (float(g2), float(s2)), (float(g3), float(s3))]
    if any(math.isnan(gi) or math.isnan(si) for gi, si in parts):
        return math.nan, math.nan
    g = max(gi for gi, _ in parts)
    if g == -math.inf:
        return -math.inf, 0.0
    return g, math.fsum(si * math.exp(gi - g) for gi, si in parts if gi != -math.inf)


@sol("2.3", "wrong", "no guard: three empty parts give NaN")
def merge_three_w1(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    with np.errstate(invalid="ignore"):
        return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


@sol("2.3", "wrong", "uses Python's max(g1, g2, g3), which can drop a NaN")
def merge_three_w2(g1, s1, g2, s2, g3, s3):
    g = max(g1, g2, g3)
    if g == -math.inf:
        return -math.inf, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


@sol("2.3", "wrong", "measures every part from g1, as if the first part held the max")
def merge_three_w3(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    if g1 == -np.inf:
        g1 = g
    with np.errstate(over="ignore", invalid="ignore"):
        return g, s1 + s2 * np.exp(g2 - g1) + s3 * np.exp(g3 - g1)


@sol("2.3", "wrong", "adds the three sums without rescaling")
def merge_three_w4(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    return g, s1 + s2 + s3


@sol("2.3", "wrong", "calls the two-part merge twice instead of writing the closed form")
def merge_three_w5(g1, s1, g2, s2, g3, s3):
    import flashmath as fm
    return fm.merge(*fm.merge(g1, s1, g2, s2), g3, s3)


@sol("2.3", "wrong", "takes exp of the maxima alone (overflows when the maxima are far apart)")
def merge_three_w6(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    if g == -np.inf:
        return -np.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, (s1 * np.exp(g1) + s2 * np.exp(g2) + s3 * np.exp(g3)) / np.exp(g)


@sol("2.3", "wrong", "np.nanmax for the max, so a NaN max is ignored")
def merge_three_w7(g1, s1, g2, s2, g3, s3):
    g = np.nanmax([g1, g2, g3])
    if g == -np.inf:
        return -np.inf, 0.0
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


@sol("2.3", "wrong", "returns (-inf, 0) when the first part is empty (guard on g1 instead of on the max)")
def merge_three_w8(g1, s1, g2, s2, g3, s3):
    if g1 == -np.inf:
        return -np.inf, 0.0
    g = np.maximum(np.maximum(g1, g2), g3)
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


# ======================================================================================================
# 3.1  my_attention(q, k, v)
# ======================================================================================================

@sol("3.1", "correct", "swapaxes for K^T, row max with keepdims, softmax over the last axis, then @ v")
def attention_c1(q, k, v):
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "correct", "einsum for both products, scale folded into q")
def attention_c2(q, k, v):
    qs = q / math.sqrt(q.shape[-1])
    x = np.einsum("...nd,...md->...nm", qs, k)
    p = np.exp(x - np.max(x, axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("...nm,...md->...nd", p, v)


@sol("3.1", "correct", "log-domain softmax with np.logaddexp.reduce over the keys")
def attention_c3(q, k, v):
    kt = np.moveaxis(k, -1, -2)
    x = np.matmul(q, kt) / np.sqrt(k.shape[-1])
    lse = np.logaddexp.reduce(x, axis=-1, keepdims=True)
    return np.matmul(np.exp(x - lse), v)


@sol("3.1", "correct", "normalise after the product: (e @ v) / row sums")
def attention_c4(q, k, v):
    x = (q @ k.transpose(*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)) * (1.0 / math.sqrt(q.shape[-1]))
    e = np.exp(x - np.amax(x, axis=-1)[..., None])
    return (e @ v) / e.sum(axis=-1)[..., None]


@sol("3.1", "wrong", "k.T reverses the batch axes too")
def attention_w1(q, k, v):
    x = q @ k.T / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "forgets the 1/sqrt(D) scale")
def attention_w2(q, k, v):
    x = q @ np.swapaxes(k, -1, -2)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "scales by sqrt(M), the number of keys")
def attention_w3(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-2])
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "scales by sqrt(Dv), the width of v, instead of sqrt(D)")
def attention_w4(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(v.shape[-1])
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "softmax over the query axis (-2) instead of the key axis")
def attention_w5(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-2, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=-2, keepdims=True)) @ v


@sol("3.1", "wrong", "subtracts the max of the whole score array, not of each row")
def attention_w6(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    x = x - x.max()
    e = np.exp(x)
    with np.errstate(invalid="ignore"):
        return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "row max without keepdims (broadcasts against the wrong axis)")
def attention_w7(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    x = x - x.max(axis=-1)
    e = np.exp(x)
    with np.errstate(invalid="ignore"):
        return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "does not subtract the row max (overflow for scores around 800)")
def attention_w8(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "multiplies the probabilities by v transposed (p @ v.T)")
def attention_w9(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return p @ np.swapaxes(v, -1, -2)


@sol("3.1", "wrong", "computes the scores in float32")
def attention_w10(q, k, v):
    q32, k32 = q.astype(np.float32), k.astype(np.float32)
    x = q32 @ np.swapaxes(k32, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64) @ v


# ======================================================================================================
# 4.1  my_loop_swap(y, v): A = YV, key loop outside the d loop, bitwise equal to n-d-m
# ======================================================================================================

@sol("4.1", "correct", "n -> m -> d with a list of D partial sums per row (the chapter's loop)")
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
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for m in range(M):
        for n in range(N):
            for d in range(D):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "correct", "n -> m with the whole row updated at once: acc = acc + y[n, m] * v[m, :]")
def loop_swap_c3(y, v):
    y, v = np.asarray(y), np.asarray(v)
    N, M = y.shape
    out = np.zeros((N, v.shape[1]))
    for n in range(N):
        acc = np.zeros(v.shape[1])
        for m in range(M):
            acc = acc + y[n, m] * v[m, :]
        out[n] = acc
    return out


@sol("4.1", "correct", "m -> d -> n: the key loop is still outside the d loop, so key m comes before key m + 1")
def loop_swap_c4(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for m in range(M):
        for d in range(D):
            for n in range(N):
                out[n, d] = out[n, d] + y[n, m] * v[m, d]
    return out


@sol("4.1", "wrong", "uses the BLAS product y @ v")
def loop_swap_w1(y, v):
    return np.asarray(y, dtype=float) @ np.asarray(v, dtype=float)


@sol("4.1", "wrong", "keeps the textbook order n -> d -> m (same bits, wrong loop order)")
def loop_swap_w2(y, v):
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


@sol("4.1", "wrong", "runs the keys backwards (m = M-1 down to 0)")
def loop_swap_w3(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in reversed(range(M)):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "accumulates in float32")
def loop_swap_w4(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D), dtype=np.float32)
    for n in range(N):
        for m in range(M):
            for d in range(D):
                out[n, d] = out[n, d] + np.float32(y[n, m] * v[m, d])
    return out.astype(np.float64)


@sol("4.1", "wrong", "converts the inputs to float arrays first (np.asarray(..., dtype=float))")
def loop_swap_w5(y, v):
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


@sol("4.1", "wrong", "adds each output's terms with math.fsum (exact sum, not the key-order sum)")
def loop_swap_w6(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        terms = [[] for _ in range(D)]
        for m in range(M):
            for d in range(D):
                terms[d].append(y[n, m] * v[m, d])
        out[n] = [math.fsum(t) for t in terms]
    return out


@sol("4.1", "wrong", "collects each output's products in key order, then adds them with np.sum (pairwise)")
def loop_swap_w7(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        terms = [[] for _ in range(D)]
        for m in range(M):
            for d in range(D):
                terms[d].append(y[n, m] * v[m, d])
        out[n] = [np.sum(np.array(t, dtype=np.float64)) for t in terms]
    return out


@sol("4.1", "wrong", "the row of partial sums is created once, outside the row loop, and never reset")
def loop_swap_w8(y, v):
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


@sol("4.1", "wrong", "uses np.einsum('nm,md->nd')")
def loop_swap_w9(y, v):
    return np.einsum("nm,md->nd", np.asarray(y, dtype=float), np.asarray(v, dtype=float))


@sol("4.1", "wrong", "indexes v[d, m] instead of v[m, d]")
def loop_swap_w10(y, v):
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[d, m]
        out[n] = acc
    return out


# ======================================================================================================
# 5.1  my_one_loop_step(g_prev, s_prev, a_prev, x_m, v_m)
# ======================================================================================================

@sol("5.1", "correct", "the chapter's four steps: max, rescale, sum, correction + weight")
def one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    rescale = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * rescale + e
    a = a_prev * (s_prev * rescale / s) + (e / s) * v_m
    return g, s, a


@sol("5.1", "correct", "un-normalise, add, re-normalise: (s_prev e^{g_prev-g} A' + e^{x-g} V) / s")
def one_loop_step_c2(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    kept = s_prev * np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = kept + e
    return g, s, (kept * np.asarray(a_prev) + e * np.asarray(v_m)) / s


@sol("5.1", "correct", "weighted average: A' = A'_{m-1} + w (V_m - A'_{m-1}) with w = e^{x-g}/s")
def one_loop_step_c3(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    s = s_prev * np.exp(g_prev - g) + np.exp(x_m - g)
    w = np.exp(x_m - g) / s
    return g, s, a_prev + w * (v_m - a_prev)


@sol("5.1", "correct", "floats with math.exp, np.maximum only for the max, returns a new array")
def one_loop_step_c4(g_prev, s_prev, a_prev, x_m, v_m):
    g = float(np.maximum(g_prev, x_m))
    corr_num = s_prev * math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = corr_num + e
    a = np.array(a_prev, dtype=np.float64) * (corr_num / s) + np.array(v_m, dtype=np.float64) * (e / s)
    return g, s, a


@sol("5.1", "wrong", "forgets the correction of the old output: A' = A'_{m-1} + w V_m")
def one_loop_step_w1(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    s = s_prev * np.exp(g_prev - g) + np.exp(x_m - g)
    return g, s, a_prev + (np.exp(x_m - g) / s) * v_m


@sol("5.1", "wrong", "rescales the old output by e^{g_prev - g} only, without s_{m-1}/s_m")
def one_loop_step_w2(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    s = s_prev * r + np.exp(x_m - g)
    return g, s, a_prev * r + (np.exp(x_m - g) / s) * v_m


@sol("5.1", "wrong", "inverts the correction: s_m / (s_{m-1} e^{g_prev - g})")
def one_loop_step_w3(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    kept = s_prev * np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = kept + e
    with np.errstate(divide="ignore", invalid="ignore"):
        return g, s, a_prev * (s / kept) + (e / s) * v_m


@sol("5.1", "wrong", "divides by s_{m-1} instead of s_m")
def one_loop_step_w4(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    denom = s_prev if s_prev != 0 else s
    return g, s, a_prev * (s_prev * r / denom) + (e / denom) * v_m


@sol("5.1", "wrong", "uses Python's max, which drops a NaN score")
def one_loop_step_w5(g_prev, s_prev, a_prev, x_m, v_m):
    g = max(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    return g, s, a_prev * (s_prev * r / s) + (e / s) * v_m


@sol("5.1", "wrong", "returns the un-normalised accumulator (FlashAttention-2 style) instead of A'_m")
def one_loop_step_w6(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    return g, s, a_prev * r + e * v_m


@sol("5.1", "wrong", "takes exp of the score alone: e^{x_m} / sum of e^{x} (overflows on a jump by 1000)")
def one_loop_step_w7(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    with np.errstate(over="ignore", invalid="ignore"):
        old_total = s_prev * np.exp(g_prev)  # the old sum of exponentials, unshifted
        s_raw = old_total + np.exp(x_m)
        a = a_prev * (old_total / s_raw) + (np.exp(x_m) / s_raw) * v_m
        s = s_raw / np.exp(g)
    return g, s, a


@sol("5.1", "wrong", "updates A' in place (a_prev *= ...), modifying the caller's array")
def one_loop_step_w8(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev * r + e
    a_prev *= s_prev * r / s
    a_prev += (e / s) * v_m
    return g, s, a_prev


@sol("5.1", "wrong", "the sum forgets the rescale: s_m = s_{m-1} + e^{x_m - g_m}")
def one_loop_step_w9(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    e = np.exp(x_m - g)
    s = s_prev + e
    return g, s, a_prev * (s_prev * r / s) + (e / s) * v_m


@sol("5.1", "wrong", "the weight of the new key uses the old max: e^{x_m - g_{m-1}}")
def one_loop_step_w10(g_prev, s_prev, a_prev, x_m, v_m):
    g = np.maximum(g_prev, x_m)
    r = np.exp(g_prev - g)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x_m - g) if g_prev == -np.inf else np.exp(x_m - g_prev)
        s = s_prev * r + e
        return g, s, a_prev * (s_prev * r / s) + (e / s) * v_m


# ======================================================================================================
# 5.2  my_block_step(g_prev, s_prev, a_prev, x_block, v_block)
# ======================================================================================================

@sol("5.2", "correct", "closed form: g = max(g_prev, max x_block), one rescale for the old part, weights for the block")
def block_step_c1(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block, dtype=np.float64)
    g = np.maximum(g_prev, np.max(x_block))
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = kept + p.sum()
    return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "correct", "folds the one-key step of 5.1 over the keys of the block")
def block_step_c2(g_prev, s_prev, a_prev, x_block, v_block):
    g, s, a = g_prev, s_prev, np.array(a_prev, dtype=np.float64)
    for x_m, v_m in zip(x_block, v_block):
        g, s, a = one_loop_step_c1(g, s, a, x_m, v_m)
    return g, s, a


@sol("5.2", "correct", "summarise the block on its own (g_b, s_b, A'_b), then merge the two states")
def block_step_c3(g_prev, s_prev, a_prev, x_block, v_block):
    x_block = np.asarray(x_block, dtype=np.float64)
    g_b = np.max(x_block)
    p = np.exp(x_block - g_b)
    s_b = p.sum()
    a_b = p @ v_block / s_b
    g = np.maximum(g_prev, g_b)
    w_old = s_prev * np.exp(g_prev - g)
    w_new = s_b * np.exp(g_b - g)
    s = w_old + w_new
    return g, s, a_prev * (w_old / s) + a_b * (w_new / s)


@sol("5.2", "wrong", "takes the block's max only, ignoring the old max")
def block_step_w1(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.max(x_block)
    with np.errstate(over="ignore", invalid="ignore"):
        kept = s_prev * np.exp(g_prev - g)
        p = np.exp(x_block - g)
        s = kept + p.sum()
        return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "forgets s_{m-b} in the old output's weight: A' = (e^{g_prev-g} A'_prev + p V) / s")
def block_step_w2(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    r = np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev * r + p.sum()
    return g, s, (r * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "weights the block by exp(x - g_prev), the old max")
def block_step_w3(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    kept = s_prev * np.exp(g_prev - g)
    ref = g if g_prev == -np.inf else g_prev
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_block - ref)
        s = kept + p.sum()
        return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "normalises the block part by its own sum instead of the new total s_m")
def block_step_w4(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = kept + p.sum()
    return g, s, kept * a_prev / s + p @ v_block / p.sum()


@sol("5.2", "wrong", "Python's max(g_prev, max(x_block)) loses a NaN score")
def block_step_w5(g_prev, s_prev, a_prev, x_block, v_block):
    g = max(g_prev, max(x_block))
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(np.asarray(x_block) - g)
    s = kept + p.sum()
    return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "shifts the block by its own max but never rescales it to the new max")
def block_step_w6(g_prev, s_prev, a_prev, x_block, v_block):
    g_b = np.max(x_block)
    g = np.maximum(g_prev, g_b)
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(x_block - g_b)
    s = kept + p.sum()
    return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "forgets to rescale the old sum: s = s_prev + sum of the block's terms")
def block_step_w7(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.maximum(g_prev, np.max(x_block))
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = s_prev + p.sum()
    return g, s, (kept * a_prev + p @ v_block) / s


@sol("5.2", "wrong", "uses the old max as the reference, g = g_prev unless the block is the first")
def block_step_w8(g_prev, s_prev, a_prev, x_block, v_block):
    g = np.max(x_block) if g_prev == -np.inf else g_prev
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_block - g)
        s = s_prev + p.sum()
        return np.maximum(g_prev, np.max(x_block)), s, (s_prev * a_prev + p @ v_block) / s


# ======================================================================================================
# Predictions
# ======================================================================================================

PREDICTIONS += [
    ("P0", 42, "correct", "x_m is x[m - 1]: x_43 is x[42]"),
    ("P0", -4, "correct", "counting from the end of the 46 scores: x[-1] is x_46, so x_43 is x[-4]"),
    ("P0", 43, "wrong", "uses the math's count directly, forgetting that Python starts at 0"),
    ("P0", 44, "wrong", "shifts the index the wrong way (m + 1)"),
    ("P0", -3, "wrong", "counts from the end thinking x[-0] would be the last, so 46 - 43 = 3"),
    ("P1", 0, "correct", "the sum 46 e^10 overflows float16 to inf, every e^10 / inf is 0"),
    ("P1", 1, "wrong", "a softmax always adds up to 1"),
    ("P1", np.nan, "wrong", "overflow always means NaN"),
    ("P1", 46, "wrong", "each output is e^10 / e^10 = 1"),
    ("P2", math.exp(-1), "correct", "the max rises by 1 each step: e^{-1} = 1/e"),
    ("P2", math.e, "wrong", "writes the factor as e^{g_i - g_{i-1}}, inverted"),
    ("P2", 1, "wrong", "thinks the factor is always 1 except at the first step"),
    ("P2", -1, "wrong", "gives the exponent g_{i-1} - g_i instead of the factor"),
    ("P3", 8, "correct", "the variance is D = 64, the standard deviation sqrt(64) = 8"),
    ("P3", 64, "wrong", "confuses the variance with the standard deviation"),
    ("P3", 1, "wrong", "each component has std 1, so the dot product does too"),
    ("P3", 0.125, "wrong", "gives the scale 1/sqrt(D) instead of the spread"),
    ("P4", 0, "correct", "each element adds its terms in the same key order: identical bits"),
    ("P4", 12, "wrong", "thinks any change of loop order changes every rounding"),
    ("P4", 6, "wrong", "expects about half of the elements to round differently, as with BLAS"),
    ("P4", 4, "wrong", "thinks one row (of 4 columns) ends up differing"),
    ("P5", 0.75, "correct", "no jump, s_3 = 3 and s_4 = 4: s_3 / s_4 = 3/4"),
    ("P5", 1, "wrong", "the max holds, so the correction must be 1"),
    ("P5", 0.25, "wrong", "gives the new key's weight 1/4 instead of what the old output keeps"),
    ("P5", 4 / 3, "wrong", "inverts the ratio: s_4 / s_3"),
]
