"""Solutions to the chapter exercises, kept apart from the notebooks.

Try the exercise first. To read a solution in a notebook: ``from flashmath import solutions``, then
``solutions.show("safe_softmax")``. The solutions are written plainly, element by element, as a learner
would; the package's own vectorised versions are in :mod:`flashmath.softmax`.
"""

from __future__ import annotations

import inspect
import math

import numpy as np

__all__ = ["show", "score_row", "safe_softmax", "online_normalizer", "merge", "attention", "loop_swap",
           "one_loop_step", "flash_test_ratio"]


def score_row(q_n, K):
    """Chapter 0: scaled scores of one query against every key."""
    D = len(q_n)
    return np.array([sum(q_n[d] * k_m[d] for d in range(D)) for k_m in K]) / math.sqrt(D)


def safe_softmax(x):
    """Chapter 1: safe softmax of a 1-D vector, three passes."""
    x = np.asarray(x)
    work = x.astype(np.promote_types(x.dtype, np.float32))  # float16 is computed in float32
    g = work.max()  # pass 1: the max (NaN propagates)
    if g == -np.inf:  # a fully masked row: no key to attend to
        return np.zeros_like(x)
    e = np.exp(work - g)  # every exponent <= 0: no overflow
    s = e.sum()  # pass 2: the sum
    return (e / s).astype(x.dtype)  # pass 3: divide


def online_normalizer(x):
    """Chapter 2: running max g and running sum s in one pass over x."""
    g, s = -math.inf, 0.0  # the empty prefix
    for x_i in x:  # the only pass
        g_new = max(g, x_i) if not (math.isnan(g) or math.isnan(x_i)) else math.nan
        if g_new == -math.inf:  # everything so far is masked
            continue
        # s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


def merge(g1, s1, g2, s2):
    """Chapter 2: the state of two concatenated parts from the states of each part."""
    g = max(g1, g2) if not (math.isnan(g1) or math.isnan(g2)) else math.nan
    if g == -math.inf:  # both parts are empty or fully masked
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


def attention(q, k, v):
    """Chapter 3: A = softmax(Q K^T / sqrt(D)) V for q (..., N, D), k (..., M, D), v (..., M, Dv)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)  # X = Q K^T / sqrt(D): (..., N, M); k.T would reverse every axis
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # subtract each row's max: every exponent <= 0
    y = e / e.sum(axis=-1, keepdims=True)  # Y = softmax(X) over the keys, the last axis
    return y @ v  # A = Y V: (..., N, Dv)


def loop_swap(y, v):
    """Chapter 4: A = Y V with the loops in the order n, m, d (a row of partial sums per query)."""
    y, v = np.asarray(y), np.asarray(v)
    N, M = y.shape
    Dv = v.shape[1]
    out_dtype = np.result_type(y, v)
    dtype = np.promote_types(out_dtype, np.float32)  # float16 is accumulated in float32
    y, v = y.astype(dtype), v.astype(dtype)
    a = np.zeros((N, Dv), dtype=dtype)  # (N, Dv)
    for n in range(N):
        acc = np.zeros(Dv, dtype=dtype)  # row n of A so far, sum_{m' < m} Y[n, m'] V[m', :]
        for m in range(M):
            for d in range(Dv):
                # A[n, d] = A[n, d] + Y[n, m] V[m, d]: each (n, d) still gets its terms in the order m = 0, 1, ...
                acc[d] = acc[d] + y[n, m] * v[m, d]
        a[n] = acc
    return a.astype(out_dtype)


def one_loop_step(g_prev, s_prev, a_prev, x_m, v_m):
    """Chapter 5: one key of the merged loop, (g_{m-1}, s_{m-1}, A'_{m-1}) and (x_m, V_m) -> (g_m, s_m, A'_m)."""
    g = max(g_prev, x_m)  # g_m = max(g_{m-1}, x_m)
    rescale = math.exp(g_prev - g)  # exp(g_{m-1} - g_m): 1 if the max held, < 1 if it jumped, 0 from the start
    e = math.exp(x_m - g)  # exp(x_m - g_m) <= 1
    s = s_prev * rescale + e  # s_m = s_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m)
    # A'_m = A'_{m-1} s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m V_m
    a = np.asarray(a_prev) * (s_prev * rescale / s) + (e / s) * np.asarray(v_m)
    return g, s, a


def flash_test_ratio(out, q, k, v):
    """Chapter 9: FlashAttention's test quantity, the error of out over the error of naive low-precision attention."""
    q, k, v = (np.asarray(a) for a in (q, k, v))
    dtype = q.dtype  # float16 or bfloat16: what a framework stores X, Y and A in
    D = q.shape[-1]
    # the reference: the very same input numbers, computed in float64
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    x = q64 @ np.swapaxes(k64, -1, -2) / math.sqrt(D)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    reference = (e / e.sum(axis=-1, keepdims=True)) @ v64
    # naive attention: each step computed in float32 (as a GPU accumulates), its result stored in the input dtype
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    x = (q32 @ np.swapaxes(k32, -1, -2) / np.float32(math.sqrt(D))).astype(dtype)  # X, stored
    x32 = x.astype(np.float32)
    e = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)).astype(dtype)  # Y = softmax(X), stored
    naive = (y.astype(np.float32) @ v32).astype(dtype)  # A = Y V, stored
    # the largest absolute errors, both against the float64 reference, compared in float64
    error_out = np.max(np.abs(np.asarray(out).astype(np.float64) - reference))
    error_naive = np.max(np.abs(naive.astype(np.float64) - reference))
    return float(error_out / error_naive)


def show(name: str | None = None) -> None:
    """Print the source of the solution called ``name`` (one of ``__all__`` except ``show``); without a name, the
    list of names.

    Raises:
        ValueError: no solution has that name.
    """
    names = [n for n in __all__ if n != "show"]
    if name is None:
        print("Solutions: " + ", ".join(names) + '. Print one with solutions.show("name").')
        return
    if name not in names:
        raise ValueError(f"no solution called {name!r}; choose one of {names}")
    print(inspect.getsource(globals()[name]))
