"""Learner-style solutions, set A: exercises 0.1, 1.1, 2.1, 2.2, 2.3, 3.1, 4.1, 5.1, 5.2 and predictions P0..P5.

Written from the prompts of notebooks 00..05 alone (see README.md). One mistake per wrong solution.
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


def pred(prediction, value, kind, description):
    PREDICTIONS.append((prediction, value, kind, description))


# ======================================================================================================
# 0.1  score_row(q_n, K): x_m = q_n . k_m / sqrt(D), float64
# ======================================================================================================


@sol("0.1", "correct", "casts both to float64, K @ q / sqrt(D)")
def score_row_c1(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K @ q / np.sqrt(q.shape[0])


@sol("0.1", "correct", "one dot product per key in a Python loop, float64, then divide by math.sqrt(D)")
def score_row_c2(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    D = q.shape[0]
    scores = np.empty(K.shape[0], dtype=np.float64)
    for m in range(1, K.shape[0] + 1):
        k_m = K[m - 1]
        total = 0.0
        for d in range(D):
            total += q[d] * k_m[d]
        scores[m - 1] = total / math.sqrt(D)
    return scores


@sol("0.1", "correct", "folds the scale into the query first, then einsum over d")
def score_row_c3(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    q_scaled = q / math.sqrt(q.size)
    return np.einsum("md,d->m", K, q_scaled)


@sol("0.1", "wrong", "forgets the scale: returns the raw dot products K @ q")
def score_row_w1(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    return np.asarray(K, dtype=np.float64) @ q


@sol("0.1", "wrong", "divides by D instead of sqrt(D)")
def score_row_w2(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K @ q / q.shape[0]


@sol("0.1", "wrong", "divides by sqrt(M), the number of keys, instead of sqrt(D)")
def score_row_w3(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K @ q / np.sqrt(K.shape[0])


@sol("0.1", "wrong", "dots the query with the columns of K (K.T @ q) instead of its rows")
def score_row_w4(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K.T @ q / np.sqrt(q.shape[0])


@sol("0.1", "wrong", "scales the query in place (q_n /= sqrt(D)), modifying the caller's array")
def score_row_w5(q_n, K):
    D = q_n.shape[0]
    q_n /= np.sqrt(D)
    return np.asarray(K, dtype=np.float64) @ q_n


@sol("0.1", "wrong", "computes in float32 to save memory")
def score_row_w6(q_n, K):
    q = np.asarray(q_n, dtype=np.float32)
    K = np.asarray(K, dtype=np.float32)
    return K @ q / np.float32(np.sqrt(q.shape[0]))


@sol("0.1", "wrong", "writes the scale as D ** 1/2, which Python reads as (D ** 1) / 2 = D / 2")
def score_row_w7(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    D = q.shape[0]
    return K @ q / (D ** 1 / 2)


@sol("0.1", "wrong", "multiplies by sqrt(D) instead of dividing")
def score_row_w8(q_n, K):
    q = np.asarray(q_n, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    return K @ q * np.sqrt(q.shape[0])


# ======================================================================================================
# 1.1  my_safe_softmax(x)
# ======================================================================================================


def _softmax_work_dtype(x):
    """float16 -> float32 inside; integers/bools -> float64; other floats as they are."""
    if x.dtype == np.float16:
        return np.float32, np.float16
    if not np.issubdtype(x.dtype, np.floating):
        return np.float64, np.float64
    return x.dtype, x.dtype


@sol("1.1", "correct", "vectorised: float32 inside for float16, float64 for ints; guards empty and all -inf")
def safe_softmax_c1(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)  # a copy: x is never touched
    if w.size == 0:
        return w.astype(out)
    g = w.max()
    if g == -np.inf:  # fully masked row: attends to nothing
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "correct", "log-domain: y = exp(x - logaddexp.reduce(x)), with the all -inf guard")
def safe_softmax_c2(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    lse = np.logaddexp.reduce(w)
    return np.exp(w - lse).astype(out)


@sol("1.1", "correct", "the chapter's three passes with Python floats (math.exp), result cast to the out dtype")
def safe_softmax_c3(x):
    x = np.asarray(x)
    out = np.float16 if x.dtype == np.float16 else (x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64)
    vals = [float(v) for v in x]
    if not vals:
        return np.zeros(0, dtype=out)
    g = -math.inf
    for v in vals:  # pass 1
        g = v if (math.isnan(v) or v > g) else g
        if math.isnan(g):
            break
    if g == -math.inf:
        return np.zeros(len(vals), dtype=out)
    s = 0.0
    for v in vals:  # pass 2
        s += math.exp(v - g) if not math.isnan(v - g) else math.nan
    y = [(math.exp(v - g) if not math.isnan(v - g) else math.nan) / s for v in vals]  # pass 3
    return np.array(y, dtype=np.float64).astype(out)


@sol("1.1", "correct", "torch.softmax on a float32/float64 tensor, with guards for empty and all -inf")
def safe_softmax_c4(x):
    import torch

    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    y = torch.softmax(torch.from_numpy(w.copy()), dim=0).numpy()
    return y.astype(out)


@sol("1.1", "wrong", "starts the max at 0 (g = max(0, max(x))), so [-1000, -1001] underflows to 0/0")
def safe_softmax_w1(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    g = 0.0
    for v in w:
        g = max(g, v)
    e = np.exp(w - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "starts the sum at 1 instead of 0")
def safe_softmax_w2(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w - g)
    s = 1.0
    for t in e:
        s += t
    return (e / s).astype(out)


@sol("1.1", "wrong", "uses base 2 (np.exp2) as the GPU kernels do, without the log2(e) factor")
def safe_softmax_w3(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=out)
    e = np.exp2(w - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "divides by the sum twice (y = e / s, then y /= s again)")
def safe_softmax_w4(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w - g)
    s = e.sum()
    y = e / s
    y /= s
    return y.astype(out)


@sol("1.1", "wrong", "forgets to subtract the max (direct softmax in the work dtype)")
def safe_softmax_w5(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "subtracts the max in place (x -= x.max()), modifying the caller's array")
def safe_softmax_w6(x):
    if x.size == 0:
        return x.astype(np.float64) if not np.issubdtype(x.dtype, np.floating) else x.copy()
    out = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    g = x.max()
    if g == -np.inf:
        return np.zeros(x.shape, dtype=out)
    x -= g
    e = np.exp(x.astype(np.float32) if x.dtype == np.float16 else x)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "casts the result back to x.dtype, so integers [3, 1, 2] give [0, 0, 0]")
def safe_softmax_w7(x):
    x = np.asarray(x)
    work, _ = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(x.dtype)
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=x.dtype)
    e = np.exp(w - g)
    return (e / e.sum()).astype(x.dtype)


@sol("1.1", "wrong", "computes float16 input in float32 but forgets to cast back: float16 in gives float32 out")
def safe_softmax_w8(x):
    x = np.asarray(x)
    work, _ = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=work)
    e = np.exp(w - g)
    return e / e.sum()


@sol("1.1", "wrong", "no guard for the fully masked row: all -inf gives NaN (-inf - (-inf)) instead of zeros")
def safe_softmax_w9(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    e = np.exp(w - w.max())
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "cleans the result with np.nan_to_num, so NaN in (and +inf rows) give 0 instead of NaN")
def safe_softmax_w10(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    with np.errstate(invalid="ignore"):
        e = np.exp(w - w.max())
        y = e / e.sum()
    return np.nan_to_num(y, nan=0.0).astype(out)


@sol("1.1", "wrong", "no special case for the empty vector: x.max() raises on []")
def safe_softmax_w11(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    g = w.max()
    if g == -np.inf:
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "subtracts the largest absolute value, so [-1000, -1001] underflows to 0/0")
def safe_softmax_w12(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    finite = w[np.isfinite(w)]
    g = np.abs(finite).max() if finite.size else w.max()
    e = np.exp(w - g)
    return (e / e.sum()).astype(out)


@sol("1.1", "wrong", "subtracts the min instead of the max (a -inf entry makes x - min = +inf)")
def safe_softmax_w13(x):
    x = np.asarray(x)
    work, out = _softmax_work_dtype(x)
    w = x.astype(work)
    if w.size == 0:
        return w.astype(out)
    if np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out)
    e = np.exp(w - w.min())
    return (e / e.sum()).astype(out)


# ======================================================================================================
# 2.1  my_online_normalizer(x): (g, s) in one pass
# ======================================================================================================


@sol("2.1", "correct", "the chapter's loop with np.maximum (keeps NaN) and the skip of leading -inf")
def online_normalizer_c1(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:  # only masked elements so far
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "correct", "log-domain: running np.logaddexp and running max in one loop, s = exp(lse - g) at the end")
def online_normalizer_c2(x):
    g, lse = -math.inf, -math.inf
    for v in x:
        v = float(v)
        g = float(np.maximum(g, v))
        lse = float(np.logaddexp(lse, v))
    if g == -math.inf:
        return -math.inf, 0.0
    return g, math.exp(lse - g)


@sol("2.1", "correct", "branches: a new max rescales the old sum and adds 1, otherwise adds exp(v - g); NaN checked")
def online_normalizer_c3(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        if math.isnan(v) or math.isnan(g):
            g, s = math.nan, math.nan
            continue
        if v == -math.inf:
            continue  # a masked element adds nothing
        if v > g:
            s = s * math.exp(g - v) + 1.0
            g = v
        else:
            s += math.exp(v - g)
    return g, s


@sol("2.1", "wrong", "starts the running max at 0 instead of -inf")
def online_normalizer_w1(x):
    g, s = 0.0, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "forgets the rescale: s = s + exp(x_i - g_i) when the max jumps")
def online_normalizer_w2(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "inverts the rescale factor: exp(g_i - g_{i-1}) instead of exp(g_{i-1} - g_i)")
def online_normalizer_w3(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        factor = math.exp(g_new - g) if s else 0.0  # nothing to rescale before the first element
        s = s * factor + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "uses Python's max, which drops NaN (max(1.0, nan) is 1.0)")
def online_normalizer_w4(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = max(g, v)
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "two passes: the max first (max over x), then the sum in a second loop")
def online_normalizer_w5(x):
    g = -math.inf
    for v in x:
        g = float(np.maximum(g, float(v)))
    if g == -math.inf:
        return -math.inf, 0.0
    s = 0.0
    for v in x:
        s += math.exp(float(v) - g)
    return g, s


@sol("2.1", "wrong", "stores x first (np.array(list(x))) and then works on the copy")
def online_normalizer_w6(x):
    arr = np.array(list(x), dtype=np.float64)
    g, s = -math.inf, 0.0
    for v in arr:
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "no skip for masked elements: a fully masked row gives exp(-inf - (-inf)) = NaN")
def online_normalizer_w7(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "initialises g with x[0], so an empty x raises IndexError")
def online_normalizer_w8(x):
    g, s = float(x[0]), 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return g, s


@sol("2.1", "wrong", "returns the pair in the wrong order, (s, g)")
def online_normalizer_w9(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    return s, g


@sol("2.1", "wrong", "measures the new term from the old max: exp(x_i - g_{i-1}) instead of exp(x_i - g_i)")
def online_normalizer_w10(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        ref = g if g != -math.inf else g_new
        s = s * math.exp(g - g_new) + math.exp(v - ref)
        g = g_new
    return g, s


@sol("2.1", "wrong", "returns the logsumexp g + ln(s) as the second value instead of the sum s")
def online_normalizer_w11(x):
    g, s = -math.inf, 0.0
    for v in x:
        v = float(v)
        g_new = float(np.maximum(g, v))
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(v - g_new)
        g = g_new
    if g == -math.inf:
        return g, 0.0
    return g, g + math.log(s)


# ======================================================================================================
# 2.2  my_merge(g1, s1, g2, s2)
# ======================================================================================================


@sol("2.2", "correct", "np.maximum for the max, both sums rescaled to it, (-inf, 0) when both are empty")
def merge_c1(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return -math.inf, 0.0
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)
    return g, float(s)


@sol("2.2", "correct", "branches on which part holds the larger max, NaN and empty cases first")
def merge_c2(g1, s1, g2, s2):
    g1, s1, g2, s2 = float(g1), float(s1), float(g2), float(s2)
    if math.isnan(g1) or math.isnan(g2):
        return math.nan, math.nan
    if g1 == -math.inf and g2 == -math.inf:
        return -math.inf, s1 + s2  # both empty: 0
    if g1 >= g2:
        return g1, s1 + s2 * math.exp(g2 - g1)
    return g2, s1 * math.exp(g1 - g2) + s2


@sol("2.2", "correct", "numpy throughout: np.exp on differences, np.where guard for the empty-empty case")
def merge_c3(g1, s1, g2, s2):
    g1, s1, g2, s2 = (np.float64(a) for a in (g1, s1, g2, s2))
    g = np.maximum(g1, g2)
    safe = np.where(g == -np.inf, 0.0, g)
    with np.errstate(invalid="ignore", over="ignore"):
        s = s1 * np.exp(g1 - safe) + s2 * np.exp(g2 - safe)
    return g, s


@sol("2.2", "wrong", "no guard: two empty parts give exp(-inf - (-inf)) = NaN")
def merge_w1(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)
    return g, float(s)


@sol("2.2", "wrong", "uses Python's max, which loses a NaN max (max(3.0, nan) is 3.0)")
def merge_w2(g1, s1, g2, s2):
    g = max(g1, g2)
    if g == -math.inf:
        return -math.inf, 0.0
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)
    return g, s


@sol("2.2", "wrong", "takes exp of the maxima alone: (s1 e^g1 + s2 e^g2) / e^g overflows at 800")
def merge_w3(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = (s1 * np.exp(np.float64(g1)) + s2 * np.exp(np.float64(g2))) / np.exp(np.float64(g))
    return g, float(s)


@sol("2.2", "wrong", "adds the two sums without rescaling them to the common max")
def merge_w4(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return -math.inf, 0.0
    return g, s1 + s2


@sol("2.2", "wrong", "inverts the rescale factors: exp(g - g_k) instead of exp(g_k - g)")
def merge_w5(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = s1 * np.exp(np.float64(g - g1)) + s2 * np.exp(np.float64(g - g2))
    return g, float(s)


@sol("2.2", "wrong", "assumes the first part holds the max: s = s1 + s2 exp(g2 - g1)")
def merge_w6(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = s1 + s2 * np.exp(np.float64(g2) - np.float64(g1))
    return g, float(s)


@sol("2.2", "wrong", "returns the pair as (s, g)")
def merge_w7(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return 0.0, -math.inf
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)
    return float(s), g


# ======================================================================================================
# 2.3  my_merge_three(g1, s1, g2, s2, g3, s3): closed form
# ======================================================================================================


@sol("2.3", "correct", "closed form: g = max of the three (np.maximum), s = sum of s_k exp(g_k - g)")
def merge_three_c1(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    if g == -math.inf:
        return -math.inf, 0.0
    s = s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)
    return g, float(s)


@sol("2.3", "correct", "vectorised closed form over arrays of the three states, np.max propagates NaN")
def merge_three_c2(g1, s1, g2, s2, g3, s3):
    gs = np.array([g1, g2, g3], dtype=np.float64)
    ss = np.array([s1, s2, s3], dtype=np.float64)
    g = np.max(gs)
    if g == -np.inf:
        return -math.inf, 0.0
    return float(g), float(np.sum(ss * np.exp(gs - g)))


@sol("2.3", "wrong", "Python's max(g1, g2, g3): a NaN max in the middle part is lost")
def merge_three_w1(g1, s1, g2, s2, g3, s3):
    g = max(g1, g2, g3)
    if g == -math.inf:
        return -math.inf, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)


@sol("2.3", "wrong", "no guard: three empty parts give NaN")
def merge_three_w2(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    return g, float(s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g))


@sol("2.3", "wrong", "forgets to rescale the middle part's sum (as if it always held the max)")
def merge_three_w3(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    if g == -math.inf:
        return -math.inf, 0.0
    return g, float(s1 * math.exp(g1 - g) + s2 + s3 * math.exp(g3 - g))


@sol("2.3", "wrong", "exp of the maxima alone: sum s_k e^{g_k} / e^g overflows for maxima 1e4 apart")
def merge_three_w4(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        num = s1 * np.exp(np.float64(g1)) + s2 * np.exp(np.float64(g2)) + s3 * np.exp(np.float64(g3))
        return g, float(num / np.exp(np.float64(g)))


@sol("2.3", "wrong", "measures every part from the first part's max g1 instead of the overall max")
def merge_three_w5(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    if g == -math.inf:
        return -math.inf, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = s1 + s2 * np.exp(np.float64(g2) - g1) + s3 * np.exp(np.float64(g3) - g1)
    return g, float(s)


@sol("2.3", "wrong", "averages the three rescaled sums (divides by 3) instead of adding them")
def merge_three_w6(g1, s1, g2, s2, g3, s3):
    g = float(np.maximum(np.maximum(g1, g2), g3))
    if g == -math.inf:
        return -math.inf, 0.0
    return g, float((s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)) / 3)


# ======================================================================================================
# 3.1  my_attention(q, k, v): softmax(q k^T / sqrt(D)) v, batched
# ======================================================================================================


@sol("3.1", "correct", "float64, swapaxes(-1, -2), row max with keepdims, exp, normalise, @ v")
def attention_c1(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    g = x.max(axis=-1, keepdims=True)
    e = np.exp(x - g)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "correct", "einsum with the scale folded into q, softmax via a safe logsumexp")
def attention_c2(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    D = q.shape[-1]
    x = np.einsum("...nd,...md->...nm", q / math.sqrt(D), k)
    g = np.max(x, axis=-1, keepdims=True)
    lse = g + np.log(np.sum(np.exp(x - g), axis=-1, keepdims=True))
    return np.einsum("...nm,...md->...nd", np.exp(x - lse), v)


@sol("3.1", "correct", "the chapter-5 one loop over the keys, vectorised over the leading dims and rows")
def attention_c3(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    D = q.shape[-1]
    q_scaled = q / math.sqrt(D)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    N, M, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    g = np.full(lead + (N,), -np.inf)
    s = np.zeros(lead + (N,))
    a = np.zeros(lead + (N, Dv))
    with np.errstate(invalid="ignore"):
        for m in range(M):
            x_m = np.einsum("...nd,...d->...n", q_scaled, k[..., m, :])
            g_new = np.maximum(g, x_m)
            rescale = np.exp(g - g_new)
            e_m = np.exp(x_m - g_new)
            s_new = s * rescale + e_m
            a = a * (s * rescale / s_new)[..., None] + (e_m / s_new)[..., None] * v[..., m, None, :]
            g, s = g_new, s_new
    return a


@sol("3.1", "wrong", "forgets the 1/sqrt(D) scale")
def attention_w1(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "scales by 1/sqrt(M) (number of keys) instead of 1/sqrt(D)")
def attention_w2(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-2])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "softmax over the queries (axis -2) instead of over the keys")
def attention_w3(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return (e / e.sum(axis=-2, keepdims=True)) @ v


@sol("3.1", "wrong", "subtracts the max of the whole array (x.max()) instead of each row's max")
def attention_w4(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max())
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "forgets keepdims on the row max, so x - g broadcasts along the wrong axis")
def attention_w5(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    g = x.max(axis=-1)
    e = np.exp(x - g)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "uses k.T, which reverses the batch and head axes too")
def attention_w6(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ k.T / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "direct softmax without subtracting the row max (overflows for scores near 800)")
def attention_w7(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "scales by 1/sqrt(Dv), the width of v, instead of the width of q and k")
def attention_w8(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(v.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "computes in float32 (as GPUs do); the answer is compared to 1e-9")
def attention_w9(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@sol("3.1", "wrong", "multiplies the probabilities by v transposed (swapaxes on v as well as k)")
def attention_w10(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ np.swapaxes(v, -1, -2)


# ======================================================================================================
# 4.1  my_loop_swap(y, v): three loops, key loop outside the d loop, bitwise equal to n-d-m
# ======================================================================================================


@sol("4.1", "correct", "the chapter's matmul_n_m_d pasted (a Python list of D partial sums per row)")
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


@sol("4.1", "correct", "order m -> n -> d with a list of lists of partial sums; float16 inputs widened to float32")
def loop_swap_c2(y, v):
    y, v = np.asarray(y), np.asarray(v)
    if y.dtype == np.float16 or v.dtype == np.float16:  # a float16 partial sum can overflow: widen to float32
        y, v = y.astype(np.float32), v.astype(np.float32)
    N, M = y.shape
    D = v.shape[1]
    acc = [[0.0] * D for _ in range(N)]
    for m in range(M):
        for n in range(N):
            for d in range(D):
                acc[n][d] = acc[n][d] + y[n, m] * v[m, d]
    out = np.zeros((N, D))
    for n in range(N):
        for d in range(D):
            out[n, d] = acc[n][d]
    return out


@sol("4.1", "correct", "n -> m with the whole row updated at once: acc = acc + y[n, m] * v[m, :]")
def loop_swap_c3(y, v):
    y, v = np.asarray(y), np.asarray(v)
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = np.zeros(D)
        for m in range(M):
            acc = acc + y[n, m] * v[m, :]
        out[n] = acc
    return out


@sol("4.1", "wrong", "uses the BLAS product y @ v")
def loop_swap_w1(y, v):
    return np.asarray(y, dtype=np.float64) @ np.asarray(v, dtype=np.float64)


@sol("4.1", "wrong", "keeps the textbook order n -> d -> m (key loop inside the d loop)")
def loop_swap_w2(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        for d in range(D):
            total = 0.0
            for m in range(M):
                total = total + y[n, m] * v[m, d]
            out[n, d] = total
    return out


@sol("4.1", "wrong", "converts y and v to float arrays first (np.asarray(..., dtype=float)), then n -> m -> d")
def loop_swap_w3(y, v):
    y = np.asarray(y, dtype=float)
    v = np.asarray(v, dtype=float)
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "accumulates in float32 to save memory")
def loop_swap_w4(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [np.float32(0.0)] * D
        for m in range(M):
            for d in range(D):
                acc[d] = np.float32(acc[d] + np.float32(y[n, m] * v[m, d]))
        out[n] = acc
    return out


@sol("4.1", "wrong", "walks the keys backwards (m = M-1 down to 0)")
def loop_swap_w5(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in reversed(range(M)):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "collects the terms key by key but adds them with math.fsum (exact, not in key order)")
def loop_swap_w6(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        terms = [[] for _ in range(D)]
        for m in range(M):
            for d in range(D):
                terms[d].append(float(y[n, m] * v[m, d]))
        out[n] = [math.fsum(t) for t in terms]
    return out


@sol("4.1", "wrong", "off by one: the key loop runs range(1, M) and skips the first key")
def loop_swap_w7(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D
        for m in range(1, M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "creates the row of partial sums once, outside the n loop, so rows accumulate")
def loop_swap_w8(y, v):
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    acc = [0.0] * D
    for n in range(N):
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]
        out[n] = acc
    return out


@sol("4.1", "wrong", "multiplies the products out in key order but sums each row with np.sum (pairwise order)")
def loop_swap_w9(y, v):
    y, v = np.asarray(y), np.asarray(v)
    N, M = y.shape
    D = v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        prods = np.empty((D, M))  # one row of M terms per output dimension
        for m in range(M):
            for d in range(D):
                prods[d, m] = y[n, m] * v[m, d]
        out[n] = np.sum(prods, axis=1)
    return out


# ======================================================================================================
# 5.1  my_one_loop_step(g_prev, s_prev, a_prev, x_m, v_m)
# ======================================================================================================


@sol("5.1", "correct", "the chapter's four steps for one row in float64, state kept when the max stays -inf")
def one_loop_step_c1(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:  # nothing seen yet: the empty state stays
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    a = a_prev * (s_prev * rescale / s) + (e / s) * v_m
    return g, s, a


@sol("5.1", "correct", "convex combination: w = e^{x_m - g_m} / s_m, A' = A'_prev + w (V_m - A'_prev)")
def one_loop_step_c2(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = np.maximum(np.float64(g_prev), np.float64(x_m))
    if g == -np.inf:
        return g, np.float64(s_prev), a_prev.copy()
    s = np.float64(s_prev) * np.exp(g_prev - g) + np.exp(x_m - g)
    w = np.exp(x_m - g) / s
    return g, s, a_prev + w * (v_m - a_prev)


@sol("5.1", "correct", "numerator first, in float64: (A' s_{m-1} e^{g_{m-1}-g_m} + e^{x_m-g_m} V_m) / s_m")
def one_loop_step_c3(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g_prev, s_prev, x_m = float(g_prev), float(s_prev), float(x_m)
    if math.isnan(x_m) or math.isnan(g_prev):
        nan = math.nan
        return nan, nan, np.full_like(a_prev, nan)
    g = max(g_prev, x_m)
    if g == -math.inf:
        return g, s_prev, a_prev.copy()
    old = s_prev * math.exp(g_prev - g)
    new = math.exp(x_m - g)
    s = old + new
    return g, s, (a_prev * old + new * v_m) / s


@sol("5.1", "wrong", "forgets the correction: A' = A'_prev + e^{x_m - g_m} / s_m V_m")
def one_loop_step_w1(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    e = math.exp(x_m - g)
    s = s_prev * math.exp(g_prev - g) + e
    return g, s, a_prev + (e / s) * v_m


@sol("5.1", "wrong", "inverts the correction: s_m / (s_{m-1} e^{g_{m-1} - g_m})")
def one_loop_step_w2(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    old = s_prev * rescale
    corr = s / old if old else 0.0
    return g, s, a_prev * corr + (e / s) * v_m


@sol("5.1", "wrong", "divides the new term by s_{m-1} instead of s_m (first key: falls back to 1)")
def one_loop_step_w3(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    denom = s_prev if s_prev else 1.0
    return g, s, a_prev * (s_prev * rescale / s) + (e / denom) * v_m


@sol("5.1", "wrong", "uses Python's max, so NaN in the score leaves g_m = g_{m-1}")
def one_loop_step_w4(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = max(g_prev, x_m)
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    return g, s, a_prev * (s_prev * rescale / s) + (e / s) * v_m


@sol("5.1", "wrong", "forgets to divide the new value row's weight by s_m: + e^{x_m - g_m} V_m")
def one_loop_step_w5(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    return g, s, a_prev * (s_prev * rescale / s) + e * v_m


@sol("5.1", "wrong", "returns the state in the order (s, g, A') instead of (g, s, A')")
def one_loop_step_w6(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return float(s_prev), -math.inf, a_prev.copy()
    rescale = math.exp(g_prev - g)
    e = math.exp(x_m - g)
    s = s_prev * rescale + e
    return s, g, a_prev * (s_prev * rescale / s) + (e / s) * v_m


@sol("5.1", "wrong", "takes exp of the scores alone: weights e^{x_m} / (s e^{g} + e^{x_m}) overflow at a jump of 1000")
def one_loop_step_w7(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        old_total = np.float64(s_prev) * np.exp(np.float64(g_prev))  # sum of e^{x_i} so far
        new = np.exp(np.float64(x_m))
        total = old_total + new
        a = a_prev * (old_total / total) + (new / total) * v_m
        s = total / np.exp(np.float64(g))
    return g, float(s), a


@sol("5.1", "wrong", "uses the old max for the new key's weight: e^{x_m - g_{m-1}}")
def one_loop_step_w8(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = float(np.maximum(g_prev, x_m))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    ref = g_prev if g_prev != -math.inf else g
    e = math.exp(x_m - ref)
    s = s_prev * rescale + e
    return g, s, a_prev * (s_prev * rescale / s) + (e / s) * v_m


@sol("5.1", "wrong", "no guard for a -inf key from the empty state: exp(-inf - (-inf)) makes the state NaN "
     "(the stored checker output lists 'still (-inf, 0, 0)')")
def one_loop_step_w9(g_prev, s_prev, a_prev, x_m, v_m):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    v_m = np.asarray(v_m, dtype=np.float64)
    g = np.maximum(np.float64(g_prev), np.float64(x_m))
    with np.errstate(invalid="ignore"):
        rescale = np.exp(g_prev - g)
        e = np.exp(x_m - g)
        s = s_prev * rescale + e
        return g, s, a_prev * (s_prev * rescale / s) + (e / s) * v_m


# ======================================================================================================
# 5.2  my_block_step(g_prev, s_prev, a_prev, x_block, v_block)
# ======================================================================================================


@sol("5.2", "correct", "block recurrence: g_m = max(g_{m-b}, max x_block), rescale old state, add the block's p @ V")
def block_step_c1(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.sum()
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "correct", "folds the one-key step of 5.1 over the keys of the block (b = 1 recurrence, b times)")
def block_step_c2(g_prev, s_prev, a_prev, x_block, v_block):
    g, s, a = g_prev, s_prev, np.asarray(a_prev, dtype=np.float64).copy()
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    for j in range(x.shape[0]):
        g, s, a = one_loop_step_c1(g, s, a, x[j], V[j])
    return g, s, a


@sol("5.2", "correct", "summarises the block on its own (g_b, s_b, A'_b), then merges the two states")
def block_step_c3(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    V = np.asarray(v_block, dtype=np.float64)
    g_b = np.max(x)
    g = np.maximum(np.float64(g_prev), g_b)
    if g == -np.inf:
        return g, np.float64(s_prev), a_prev.copy()
    if g_b == -np.inf:  # the block adds nothing
        return np.float64(g_prev), np.float64(s_prev), a_prev.copy()
    p = np.exp(x - g_b)
    s_b = p.sum()
    a_b = (p @ V) / s_b
    w_old = s_prev * np.exp(g_prev - g)
    w_new = s_b * np.exp(g_b - g)
    s = w_old + w_new
    return g, s, a_prev * (w_old / s) + a_b * (w_new / s)


@sol("5.2", "wrong", "uses the block's max as the new max, ignoring the old one")
def block_step_w1(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.max(x))
    if g == -math.inf and g_prev == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        rescale = np.exp(np.float64(g_prev) - g)
        p = np.exp(x - g)
        s = s_prev * rescale + p.sum()
        return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "wrong", "does not rescale the old state: s = s_{m-b} + sum p, A' uses s_{m-b} / s_m only")
def block_step_w2(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    p = np.exp(x - g)
    s = s_prev + p.sum()
    return g, float(s), a_prev * (s_prev / s) + (p @ V) / s


@sol("5.2", "wrong", "measures the block's exponentials from the block max, not from the new overall max")
def block_step_w3(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g_b = float(np.max(x))
    g = float(np.maximum(g_prev, g_b))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g_b)
    s = s_prev * rescale + p.sum()
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "wrong", "divides the block's contribution by s_{m-b} instead of s_m")
def block_step_w4(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.sum()
    denom = s_prev if s_prev else s
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / denom


@sol("5.2", "wrong", "treats the block as its last key only (x_block[-1], v_block[-1])")
def block_step_w5(g_prev, s_prev, a_prev, x_block, v_block):
    x = np.asarray(x_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64).copy()
    V = np.asarray(v_block, dtype=np.float64)
    return one_loop_step_c1(g_prev, s_prev, a_prev, x[-1], V[-1])


@sol("5.2", "wrong", "no case for the empty block: np.max of an empty x_block raises")
def block_step_w6(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.sum()
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "wrong", "Python's max over the block's scores, so NaN in a key's score is lost from g")
def block_step_w7(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = max([g_prev] + [float(t) for t in x])
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.sum()
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "wrong", "averages the block's exponentials (p.mean()) instead of summing them into s")
def block_step_w8(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.mean()
    return g, float(s), a_prev * (s_prev * rescale / s) + (p @ V) / s


@sol("5.2", "wrong", "rescales the old output by e^{g_{m-b} - g_m} but forgets the factor s_{m-b} / s_m")
def block_step_w9(g_prev, s_prev, a_prev, x_block, v_block):
    a_prev = np.asarray(a_prev, dtype=np.float64)
    x = np.asarray(x_block, dtype=np.float64)
    V = np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, a_prev.copy()
    g = float(np.maximum(g_prev, np.max(x)))
    if g == -math.inf:
        return -math.inf, float(s_prev), a_prev.copy()
    rescale = math.exp(g_prev - g)
    p = np.exp(x - g)
    s = s_prev * rescale + p.sum()
    return g, float(s), a_prev * rescale + (p @ V) / s


# ======================================================================================================
# Predictions
# ======================================================================================================

# P0: the Python index of x_43 in a row of 46 scores
pred("P0", 42, "correct", "x_m is x[m - 1]: 43 - 1 = 42")
pred("P0", -4, "correct", "the same element counted from the end: x[-4] is x_43 of 46 (equivalent form)")
pred("P0", 43, "wrong", "types the math's count: forgets that Python starts at 0")
pred("P0", 44, "wrong", "shifts the wrong way: thinks Python's index is one more than the math's")
pred("P0", -3, "wrong", "counts from the end but off by one (x[-1] is x_46, so x_43 is x[-4], not x[-3])")

# P1: the sum of fm.softmax(np.full(46, 10.0, np.float16))
pred("P1", 0.0, "correct", "46 e^10 ~ 1e6 overflows float16's sum to inf, each finite e^10 / inf is 0: sum 0")
pred("P1", 0, "correct", "the same answer written as an integer")
pred("P1", 1.0, "wrong", "a softmax always sums to 1: ignores that only the sum overflows")
pred("P1", float("nan"), "wrong", "thinks any overflow gives NaN, but NaN needs inf / inf; here finite / inf = 0")
pred("P1", 46.0, "wrong", "thinks each output rounds to 1 because every term is the same e^10")

# P2: the rescale factor at steps 2..10 of x = 0, 1, ..., 9
pred("P2", math.exp(-1), "correct", "each step raises the max by 1: e^{g_{i-1} - g_i} = e^{-1}")
pred("P2", 1 / math.e, "correct", "the same factor written as 1/e (equivalent form)")
pred("P2", 0.368, "correct", "e^{-1} rounded to three digits")
pred("P2", math.e, "wrong", "inverts the factor: e^{g_i - g_{i-1}}")
pred("P2", 1, "wrong", "thinks the factor is 1 unless something is masked")
pred("P2", 0, "wrong", "generalises the first step's factor e^{-inf} = 0 to every step")

# P3: std of q . k for D = 64 standard normal components, unscaled
pred("P3", 8, "correct", "the variance is D = 64, so the standard deviation is sqrt(64) = 8")
pred("P3", math.sqrt(64), "correct", "sqrt(D) written out (equivalent form)")
pred("P3", 64, "wrong", "confuses the variance D with the standard deviation")
pred("P3", 1, "wrong", "thinks the dot product keeps the components' unit spread")
pred("P3", 0.125, "wrong", "mixes up the spread with the scale 1/sqrt(D)")

# P4: how many of the 12 elements differ between loop orders n-d-m and n-m-d
pred("P4", 0, "correct", "every element adds its own terms in the same key order: identical bits")
pred("P4", 12, "wrong", "thinks any change of loop order changes the rounding of every element")
pred("P4", 6, "wrong", "expects about half to differ, as with a BLAS product")
pred("P4", 3, "wrong", "thinks only a few elements (one per row) pick up a different rounding")

# P5: the correction factor at key 4 when all four scores are equal
pred("P5", 0.75, "correct", "no jump: s_3 / s_4 = 3/4")
pred("P5", 3 / 4, "correct", "the same, written as the fraction 3/4 (equivalent form)")
pred("P5", 1, "wrong", "the max holds so thinks there is no correction at all")
pred("P5", 0.25, "wrong", "gives the new key's weight 1/4 instead of what the old output keeps")
pred("P5", 4 / 3, "wrong", "inverts the ratio of sums: s_4 / s_3")
