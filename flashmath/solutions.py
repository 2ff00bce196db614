"""Solutions to the chapter exercises, kept apart from the notebooks.

Try the exercise first. To read a solution in a notebook: ``from flashmath import solutions``, then
``solutions.show("safe_softmax")``. The solutions are written plainly, element by element, as a learner
would; the package's own vectorised versions are in :mod:`flashmath.softmax`.
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from flashmath.exercises import solution_names
from flashmath.i18n import gettext as _

#: ``show`` and every solution that an exercise's declaration names here (``@exercise(..., solution="tile_step")``).
__all__ = ["show", *solution_names(__name__)]


def score_row(q_n, K):
    """Chapter 0: scaled scores of one query against every key, in float64 (the dtype of every input of 0.1)."""
    D = len(q_n)
    scores = [sum(float(q_n[d]) * float(k_m[d]) for d in range(D)) for k_m in K]  # x_m = q_n . k_m
    return np.array(scores, dtype=np.float64) / math.sqrt(D)


def safe_softmax(x):
    """Chapter 1: safe softmax of a 1-D vector, three passes.

    Rules: float16 in, float16 out (computed in float32); integers in, float64 out; an empty vector gives an empty
    vector; a row of only -inf gives zeros; a row holding +inf or NaN gives NaN.
    """
    x = np.asarray(x)
    out_dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)  # probabilities are never integers
    work = x.astype(np.promote_types(out_dtype, np.float32))  # float16 is computed in float32
    if work.size == 0:  # the empty vector: nothing to normalise
        return work.astype(out_dtype)
    g = work.max()  # pass 1: the max (NaN propagates)
    if g == -np.inf:  # a fully masked row: no key to attend to
        return np.zeros(x.shape, dtype=out_dtype)
    e = np.exp(work - g)  # every exponent <= 0: no overflow (+inf - inf is NaN, on purpose)
    s = e.sum()  # pass 2: the sum
    return (e / s).astype(out_dtype)  # pass 3: divide


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


def merge_three(g1, s1, g2, s2, g3, s3):
    """Chapter 2, exercise 2.3 (derivation): the state of three parts, and why merge is associative.

    Write P_k for part k with state (g_k, s_k), s_k = sum_{j in P_k} exp(x_j - g_k). Left grouping: merging P1 and
    P2 gives g_12 = max(g_1, g_2) and s_12 = s_1 exp(g_1 - g_12) + s_2 exp(g_2 - g_12). Merging that with P3 gives
    g = max(g_12, g_3) = max(g_1, g_2, g_3) and

        s = s_12 exp(g_12 - g) + s_3 exp(g_3 - g)
          = s_1 exp(g_1 - g_12) exp(g_12 - g) + s_2 exp(g_2 - g_12) exp(g_12 - g) + s_3 exp(g_3 - g)
          = s_1 exp(g_1 - g) + s_2 exp(g_2 - g) + s_3 exp(g_3 - g),

    because exp(a - b) exp(b - c) = exp(a - c): the intermediate max g_12 cancels. The right grouping, P1 with
    (P2 with P3), gives the same three terms with g_23 cancelling instead. Both equal the closed form below, which
    is symmetric in the three parts; so the grouping does not matter (associative), and neither does the order
    (commutative). (-inf, 0) adds a term 0 * exp(-inf - g) = 0: it is the identity. Every s_k exp(g_k - g) is the
    sum of part k's exp(x_j - g), so the closed form is the state of the concatenated parts.
    """
    gs = (g1, g2, g3)
    g = math.nan if any(math.isnan(g_k) for g_k in gs) else max(gs)  # g = max(g_1, g_2, g_3); NaN propagates
    if g == -math.inf:  # all three parts empty or fully masked
        return g, 0.0
    # s = sum_k s_k exp(g_k - g)
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)


def attention(q, k, v):
    """Chapter 3: A = softmax(Q K^T / sqrt(D)) V for q (..., N, D), k (..., M, D), v (..., M, Dv)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    D = q.shape[-1]
    x = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)  # X = Q K^T / sqrt(D): (..., N, M); k.T would reverse every axis
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # subtract each row's max: every exponent <= 0
    y = e / e.sum(axis=-1, keepdims=True)  # Y = softmax(X) over the keys, the last axis
    return y @ v  # A = Y V: (..., N, Dv)


def loop_swap(y, v):
    """Chapter 4: A = Y V with the loops in the order n, m, d (a row of partial sums per query), in float64."""
    y, v = np.asarray(y), np.asarray(v)  # no dtype: traced inputs stay traced
    N, M = y.shape
    Dv = v.shape[1]
    a = np.zeros((N, Dv))  # (N, Dv), float64
    for n in range(N):
        acc = np.zeros(Dv)  # row n of A so far, sum_{m' < m} Y[n, m'] V[m', :]
        for m in range(M):
            for d in range(Dv):
                # A[n, d] = A[n, d] + Y[n, m] V[m, d]: each (n, d) still gets its terms in the order m = 0, 1, ...
                acc[d] = acc[d] + y[n, m] * v[m, d]
        a[n] = acc
    return a


def one_loop_step(g_prev, s_prev, a_prev, x_m, v_m):
    """Chapter 5: one key of the merged loop, (g_{m-1}, s_{m-1}, A'_{m-1}) and (x_m, V_m) -> (g_m, s_m, A'_m)."""
    g = math.nan if math.isnan(g_prev) or math.isnan(x_m) else max(g_prev, x_m)  # g_m = max(g_{m-1}, x_m)
    if g == -math.inf:  # nothing seen yet (only masked keys): the empty state
        return g, 0.0, np.zeros_like(np.asarray(a_prev, dtype=np.float64))
    rescale = math.exp(g_prev - g)  # exp(g_{m-1} - g_m): 1 if the max held, < 1 if it jumped, 0 from the start
    e = math.exp(x_m - g)  # exp(x_m - g_m) <= 1 (NaN for a key of +inf: inf - inf)
    s = s_prev * rescale + e  # s_m = s_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m)
    # A'_m = A'_{m-1} s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m V_m
    a = np.asarray(a_prev) * (s_prev * rescale / s) + (e / s) * np.asarray(v_m)
    return g, s, a


def block_step(g_prev, s_prev, a_prev, x_block, v_block):
    """Chapter 5, exercise 5.2 (derivation): the state after a block of b keys, m-b+1 .. m, in one step.

    By definition A'_m = sum_{i <= m} exp(x_i - g_m) / s_m V_i. Split the sum into the keys before the block,
    i <= m-b, and the block. In the first part write exp(x_i - g_m) = exp(x_i - g_{m-b}) exp(g_{m-b} - g_m) and
    1 / s_m = (1 / s_{m-b}) (s_{m-b} / s_m); what remains of it is the definition of A'_{m-b}:

        A'_m = A'_{m-b} s_{m-b} exp(g_{m-b} - g_m) / s_m + sum_{i = m-b+1..m} exp(x_i - g_m) / s_m V_i,

    with g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m) and s_m = s_{m-b} exp(g_{m-b} - g_m) + sum_i exp(x_i - g_m) (the
    same split applied to the sum). With b = 1 it is the recurrence of the chapter; with a block of B_c keys it is
    the rescaling of FlashAttention, section 3.1, that chapter 6 uses for tiles.
    """
    x = np.asarray(x_block, dtype=np.float64)  # (b,) the block's scores
    V = np.asarray(v_block, dtype=np.float64)  # (b, Dv) the block's value rows
    if x.size == 0:  # a block of no key: the state as it is
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    g = float(np.max(np.append(x, g_prev)))  # g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m); NaN propagates
    if g == -math.inf:  # nothing seen yet (only masked keys): the empty state
        return g, 0.0, np.zeros_like(np.asarray(a_prev, dtype=np.float64))
    rescale = math.exp(g_prev - g)  # exp(g_{m-b} - g_m): 0 from the empty state
    e = np.exp(x - g)  # exp(x_i - g_m) <= 1, one per key of the block
    s = s_prev * rescale + e.sum()  # s_m = s_{m-b} exp(g_{m-b} - g_m) + sum_i exp(x_i - g_m)
    # A'_m = A'_{m-b} s_{m-b} exp(g_{m-b} - g_m) / s_m + sum_i exp(x_i - g_m) / s_m V_i
    a = np.asarray(a_prev) * (s_prev * rescale / s) + (e / s) @ V
    return g, s, a


def tile_step(g, s, a, x_tile, v_tile):
    """Chapter 6: one key tile for a query tile; the output normalised after the tile."""
    g_new = np.maximum(g, x_tile.max(axis=1))  # each row's new max
    ref = np.where(g_new == -np.inf, 0.0, g_new)  # a row that has seen nothing: subtract 0, not -inf
    rescale = np.exp(g - ref)  # e^{g - g_new}
    p = np.exp(x_tile - ref[:, None])  # P = e^{X - g_new}, (B_r, B_c)
    s_new = s * rescale + p.sum(axis=1)
    a_new = (a * (s * rescale)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, a_new


def numerator_step(g, s, u, x_tile, v_tile):
    """Chapter 7: FlashAttention-2's tile step on the numerator U = s A' (no division)."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    rescale = np.exp(g - ref)
    p = np.exp(x_tile - ref[:, None])
    return g_new, s * rescale + p.sum(axis=1), u * rescale[:, None] + p @ v_tile


def finish(g, s, u):
    """Chapter 7: the end of a query tile, A = U / s and the logsumexp L = g + log(s)."""
    empty = s == 0  # a row that saw no key
    a = np.where(empty[:, None], 0.0, u / np.where(empty, 1.0, s)[:, None])
    lse = np.where(empty, -np.inf, g + np.log(np.where(empty, 1.0, s)))
    return a, lse


def causal_mask(N, M):
    """Chapter 8: the bottom-right causal mask, query n sees key m when m <= n + M - N."""
    n = np.arange(N)[:, None]
    m = np.arange(M)[None, :]
    return m <= n + (M - N)


def masked_tile_step(g, s, a, x_tile, v_tile, keep):
    """Chapter 8: the tile step with a mask; a masked key is absent whatever its score and value hold."""
    x = np.where(keep, x_tile, -np.inf)  # masked scores are -inf
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)  # no key seen yet: no -inf - (-inf)
    rescale = np.exp(g - ref)
    p = np.exp(x - ref[:, None])  # 0 where masked
    s_new = s * rescale + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None, :, :], 0.0).sum(axis=1)  # never 0 * NaN
    a_new = np.where(
        s_new[:, None] == 0, 0.0, (a * (s * rescale)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    )
    return g_new, s_new, a_new


def merge_states(a1, lse1, a2, lse2):
    """Chapter 10: the output and logsumexp of two key ranges merged."""
    lse = np.logaddexp(lse1, lse2)  # the sums add
    w1 = np.where(lse1 == -np.inf, 0.0, np.exp(lse1 - np.where(lse == -np.inf, 0.0, lse)))  # each part's share
    w2 = np.where(lse2 == -np.inf, 0.0, np.exp(lse2 - np.where(lse == -np.inf, 0.0, lse)))
    a = (
        np.where(lse1[:, None] == -np.inf, 0.0, w1[:, None] * a1)  # an empty part is never read
        + np.where(lse2[:, None] == -np.inf, 0.0, w2[:, None] * a2)
    )
    return a, lse


def flash_test_ratio(out, q, k, v):
    """Chapter 9: the course's version of FlashAttention's test quantity, the error of out over the error of naive
    low-precision attention, both against the unrounded float64 reference."""
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


def window_mask(q_idx, kv_idx, N, M, left, right):
    """Chapter 13: FlashAttention's sliding window as a mask_mod on index arrays (bottom-right aligned)."""
    p = q_idx + M - N  # the key aligned with each query
    seen = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), bool)
    if left is not None:  # None: no limit on that side
        seen &= kv_idx >= p - left
    if right is not None:
        seen &= kv_idx <= p + right
    return seen  # both extents inclusive


def document_mask(q_idx, kv_idx, doc):
    """Chapter 13: packed documents, causal inside each."""
    return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)


def softcap(qk, scale, cap):
    """Chapter 13: softcap on the scaled score."""
    x = qk * scale  # scale first
    return cap * np.tanh(x / cap)


def alibi(score, slope, q_idx, kv_idx, N, M):
    """Chapter 13: ALiBi's bias, a penalty growing with the distance to the bottom-right aligned key."""
    return score - slope * np.abs(q_idx + M - N - kv_idx)


def tile_kind(r0, r1, c0, c1, N, M):
    """Chapter 13: 0 empty, 1 partial, 2 full for a tile of the bottom-right causal mask, from two corners."""
    offset = M - N
    if c0 > (r1 - 1) + offset:  # even the last row does not see the first key
        return 0
    if c1 - 1 <= r0 + offset:  # even the first row sees the last key
        return 2
    return 1


def page_gather(pages, block_table, b, t):
    """Chapter 13: token t of sequence b, through the block table."""
    page_size = pages.shape[1]
    physical = block_table[b, t // page_size]  # logical page t // page_size -> physical page
    return pages[physical, t % page_size]  # its row inside the page


def zigzag_pair(P, r):
    """Chapter 14: the two chunks of 2P that device r holds under zig-zag sharding, the smaller first."""
    return r, 2 * P - 1 - r  # one early chunk and its mirror from the end


def ring_merge_step(a, lse, q, k, v, keep):
    """Chapter 14: one ring step of one device: attention over the held shard alone, merged into (a, lse)."""
    x = q @ k.T / math.sqrt(q.shape[-1])  # (n, m) scores over the held keys only
    x = np.where(keep, x, -np.inf)  # a hidden key is absent
    g = x.max(axis=1)
    g_ref = np.where(g == -np.inf, 0.0, g)  # a row that sees no key: measured against 0, never -inf - (-inf)
    p = np.exp(x - g_ref[:, None])
    s = p.sum(axis=1)
    a_s = np.where(s[:, None] > 0, (p @ v) / np.where(s > 0, s, 1.0)[:, None], 0.0)  # A_s, 0 for such a row
    lse_s = np.where(s > 0, g_ref + np.log(np.where(s > 0, s, 1.0)), -np.inf)  # L_s = g + log s, -inf: no key
    # chapter 10's merge: (A, L) and (A_s, L_s) of disjoint key ranges
    return merge_states(a, lse, a_s, lse_s)


def ring_step_bytes(M, P, t, r, row_bytes, zigzag):
    """Chapter 14: bytes device r sends after step t of the forward ring: the K, V shard it held."""
    if t >= P - 1:
        return 0  # after the last step every device has seen every shard
    s = (r - t) % P  # the shard device r holds at step t

    def rows(c, pieces):  # rows of piece c of M rows cut into `pieces` nearly equal pieces
        return (c + 1) * M // pieces - c * M // pieces

    shard_rows = rows(s, 2 * P) + rows(2 * P - 1 - s, 2 * P) if zigzag else rows(s, P)
    return shard_rows * row_bytes


def sink_row(x, v, sink):
    """Chapter 13: one row of attention with a learnable sink, chapter 2's loop started at the sink."""
    # the sink is a score already seen, with no value: (g, s, acc) = (sink, exp(sink - sink), 0)
    g, s, acc = sink, 1.0, np.zeros(v.shape[1])
    for x_m, v_m in zip(x, v, strict=True):
        g_new = max(g, x_m)  # never -inf: the sink is finite, so no guard is needed
        alpha, p = np.exp(g - g_new), np.exp(x_m - g_new)  # a masked key: exp(-inf) = 0
        # s_m = s_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m), and acc likewise with exp(x_m - g_m) v_m
        s, acc, g = s * alpha + p, acc * alpha + p * v_m, g_new
    return acc / s, g + np.log(s)  # A = acc / s, L = g + log(s)


def show(name: str | None = None) -> None:
    """Print the source of the solution called ``name`` (one that an exercise's declaration names in this module);
    without a name, the list of names.

    Raises:
        ValueError: no solution has that name.
    """
    print(source_of(name, globals(), solution_names(__name__), "solutions"))


def source_of(name, namespace: dict, names, module: str) -> str:
    """The text ``show`` prints for ``name`` among a solutions module's ``names`` (the list when ``name`` is None).

    Raises:
        ValueError: no solution has that name.
    """
    names = [n for n in names if n != "show"]
    if name is None:
        return _('Solutions: {names}. Print one with {module}.show("name").').format(
            names=", ".join(names), module=module
        )
    if name not in names:
        raise ValueError(
            _("no solution called {name!r}; choose one of: {names}").format(name=name, names=", ".join(names))
        )
    value = namespace[name]
    return inspect.getsource(value) if callable(value) else f"{name} = {value!r}"
