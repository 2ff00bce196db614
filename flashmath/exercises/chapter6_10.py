"""Chapters 6-10: the tile step (6.1), FlashAttention-2's numerator and finish (7.1, 7.2), the causal alignment and
the masked tile step (8.1, 8.2), and merging split-KV states (10.1).

Each checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference, and names the mistake whose wrong implementation gives the learner's answer. The mistake
models are written vectorised, as a learner would write the exercise; the catalogues are the ``*_MISTAKES`` tuples.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function
from flashmath.exercises._report import CheckReport, Mistake
from flashmath.flash import fa1_tile_step, fa2_tile_step
from flashmath.rowstate import nonempty  # the one guard: g = -inf (no key seen yet) measured against 0

# ------------------------------------------------------------------------------------------------------------------
# The tile step (6.1) and the masked tile step (8.2): (g, s, A') of B_r rows, a score tile X (B_r, B_c) and V (B_c, Dv)
# ------------------------------------------------------------------------------------------------------------------


def tile_step_reference(g, s, a, x_tile, v_tile, keep=None):
    """The state of each row after one key tile, normalised output (FlashAttention, query tiles outside): the
    package's own step, :func:`flashmath.flash.fa1_tile_step`, in float64.

    ``keep (B_r, B_c)``, True = attend: masked pairs are absent whatever ``x_tile`` and ``v_tile`` hold.
    """
    g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
    x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
    if keep is not None:
        keep = np.asarray(keep, dtype=bool)
        x = np.where(keep, x, -np.inf)  # a masked pair scores -inf (flashmath.tiling.tile_scores)
    return fa1_tile_step(g, s, a, x.copy(), V, keep)


def _tile_model(a_update=None, g_of=None, s_update=None, base=np.exp):
    """A wrong tile step: the right one except for the parts given.

    ``g_of(g, x)`` the new max; ``s_update(s, r, p, s_old_g...)``; ``a_update(a, s, r, pv, s_new, x, g, g_new, V)``.
    """
    def model(g, s, a, x_tile, v_tile, keep=None):
        g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        if keep is not None:
            x = np.where(keep, x, -np.inf)
        g_new = np.maximum(g, x.max(axis=1)) if g_of is None else g_of(g, x)
        r = base(g - nonempty(g_new))
        p = base(x - nonempty(g_new)[:, None])
        s_new = s * r + p.sum(axis=1) if s_update is None else s_update(s, r, p, g, g_new, x)
        pv = p @ V
        if a_update is None:
            return g_new, s_new, (a * (s * r)[:, None] + pv) / s_new[:, None]
        return g_new, s_new, a_update(a, s, r, pv, s_new, x, g, g_new, V)
    return model


TILE_RULE = "A'_new = A' s e^{g - g_new} / s_new + P V / s_new, with P = e^{X - g_new} and g_new = max(g, rowmax X)"
NOT_A_STATE = Mistake("not a triple", "return the three arrays (g_new, s_new, A'_new)")
TILE_MISTAKES = (
    Mistake("the old output not corrected", "A' must be multiplied by s e^{g - g_new} / s_new: the old average gives "
            "up the weight the new keys take", (_tile_model(lambda a, s, r, pv, sn, *_: a + pv / sn[:, None]),)),
    Mistake("no rescale when the max changes", "the old output and sum are relative to the old max g: multiply them "
            "by e^{g - g_new}", (_tile_model(lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None],
                                             s_update=lambda s, r, p, *_: s + p.sum(axis=1)),
                                 _tile_model(lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None]))),
    Mistake("the rescale of s missing", "s_new = s e^{g - g_new} + rowsum P: the old sum is relative to the old max",
            (_tile_model(s_update=lambda s, r, p, *_: s + p.sum(axis=1)),)),
    Mistake("divided by the old sum", f"both terms are divided by the new sum s_new: {TILE_RULE}",
            (_tile_model(lambda a, s, r, pv, sn, *_: a * r[:, None] + pv / s[:, None]),)),
    Mistake("FlashAttention-2's update (not divided)", "A' r + P V is the numerator s A' of chapter 7; here the output "
            "is normalised after every tile: divide by s_new",
            (_tile_model(lambda a, s, r, pv, *_: a * r[:, None] + pv),)),
    Mistake("divided twice", f"each term is divided by s_new once: {TILE_RULE}",
            (_tile_model(lambda a, s, r, pv, sn, *_: (a * (s * r)[:, None] + pv) / sn[:, None] ** 2),)),
    Mistake("the max over the whole tile", "each row has its own max: g_new = max(g, X.max(axis=1)), not X.max()",
            (_tile_model(g_of=lambda g, x: np.maximum(g, x.max())),)),
    Mistake("the max over the wrong axis", "X is (B_r, B_c), one row per query: the row max is X.max(axis=1)",
            (_tile_model(g_of=lambda g, x: np.maximum(g, x.max(axis=0))),)),
    Mistake("the tile's max only (the old max forgotten)", "the new max is over the old max and the tile: "
            "g_new = max(g, rowmax X)", (_tile_model(g_of=lambda g, x: x.max(axis=1)),)),
    Mistake("a wrong base (2) instead of e", "use the natural exponential np.exp", (_tile_model(base=np.exp2),)),
    NOT_A_STATE,
)


def _tile_cases(rng):
    a = rng.standard_normal((3, 2))
    V = rng.standard_normal((4, 2))
    X = rng.standard_normal((3, 4))
    return [
        ("the first tile, from the empty state (g, s, A') = (-inf, 0, 0)",
         (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V)),
        ("every row's max holds (old max 3)", (np.full(3, 3.0), np.array([1.5, 2.0, 1.0]), a, X, V)),
        ("the max jumps in some rows only", (np.array([0.5, 3.0, -1.0]), np.array([1.5, 2.0, 1.0]), a, X, V)),
        ("rows with maxima far apart (a tile max of 1000 in row 1)",
         (np.array([0.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0]), a, X + np.array([[0.0], [1000.0], [0.0]]), V)),
        ("a square tile (B_r = B_c = 4)", (np.array([0.5, 3.0, -1.0, 0.0]), np.array([1.5, 2.0, 1.0, 1.0]),
                                          rng.standard_normal((4, 2)), rng.standard_normal((4, 4)), V)),
    ]


def _fold_tiles(report: CheckReport, fn, name: str) -> None:
    """Fold the learner's step over the key tiles of a real query tile: it must give the attention output."""
    from flashmath.attention import attention
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, _ = heads.demo_rows[0]
    q, k, v = (arr[layer, head].astype(np.float64) for arr in (heads.q, heads.k, heads.v))
    q_tile = q[32:40] / np.sqrt(q.shape[1])
    g, s, a = np.full(8, -np.inf), np.zeros(8), np.zeros((8, v.shape[1]))
    try:
        with np.errstate(all="ignore"):
            for c0 in range(0, k.shape[0], 10):
                g, s, a = fn(g, s, a, q_tile @ k[c0:c0 + 10].T, v[c0:c0 + 10])
        ok = np.allclose(np.asarray(a, dtype=np.float64), attention(q, k, v)[32:40], rtol=1e-9, atol=1e-12)
    except NotImplementedError:
        report.add(name, False, "not implemented yet")
        return
    except Exception as exc:
        report.add(name, False, f"raised {type(exc).__name__}: {exc}")
        return
    report.add(name, ok, "" if ok else "the folded output differs from attention (the cases above say why)")


def check_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile) -> (g_new, s_new, a_new)``, one key tile for a query tile (exercise 6.1).

    ``g, s (B_r,)``, ``a (B_r, Dv)`` the rows' state; ``x_tile (B_r, B_c)`` the scaled scores; ``v_tile (B_c, Dv)``.
    The output is normalised after the tile (chapter 6). Named mistakes: :data:`TILE_MISTAKES`.
    """
    rng = np.random.default_rng(6)
    report = check_function("check_tile_step", fn, _tile_cases(rng), tile_step_reference, TILE_MISTAKES, n_out=3,
                            names=("g_new", "s_new", "A'_new"), not_answer=NOT_A_STATE)
    _fold_tiles(report, fn, "a real query tile folded over 5 key tiles gives the attention output")
    return report


def _absent_terms(p, keep, V):
    """``P V`` with the masked terms selected away (the right way)."""
    return np.where(keep[:, :, None], p[:, :, None] * V[None, :, :], 0.0).sum(axis=1)


def _masked_model(score=None, term=None, guard=True, fill=None):
    """A wrong masked tile step."""
    def model(g, s, a, x_tile, v_tile, keep):
        g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        x = np.where(keep, x, -np.inf if fill is None else fill)
        g_new = np.maximum(g, x.max(axis=1))
        ref = nonempty(g_new) if guard else g_new
        r, p = np.exp(g - ref), np.exp(x - ref[:, None])
        s_new = s * r + p.sum(axis=1)
        pv = (p * keep) @ V if term is None else term(p, keep, V)
        return g_new, s_new, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return model


MASKED_MISTAKES = (
    Mistake("masked terms multiplied by 0 (0 * NaN)", "a masked key's weight is 0, but 0 * NaN is NaN: select masked "
            "terms away with np.where instead of multiplying P by the mask",
            (_masked_model(), _masked_model(term=lambda p, keep, V: p @ V))),
    Mistake("-inf - (-inf) on a masked prefix", "while a row has seen no key its max is -inf, and e^{g - g_new} = "
            "e^{-inf + inf} is NaN: subtract 0 instead of -inf (np.where(g_new == -np.inf, 0, g_new))",
            (_masked_model(term=_absent_terms, guard=False),)),
    Mistake("a finite fill value instead of -inf", "a masked score is -inf, not a large negative number: with a fill "
            "a fully masked row averages the masked keys' values",
            tuple(_masked_model(fill=fill, term=term) for fill in (-1e9, -1e4)
                  for term in (lambda p, keep, V: p @ V, _absent_terms))),
    NOT_A_STATE,
)


def check_masked_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile, keep) -> (g_new, s_new, a_new)``: the tile step with a mask (8.2).

    ``keep (B_r, B_c)`` boolean, True = attend. A masked key is absent whatever its score and value row hold (NaN
    included); a row that has seen no key keeps ``(-inf, 0, 0)``. Named mistakes: :data:`MASKED_MISTAKES`.
    """
    rng = np.random.default_rng(8)
    X, V = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    V_nan = V.copy()
    V_nan[3] = np.nan
    keep = np.array([[True, True, False, False], [True, False, True, False], [True, True, True, False]])
    empty = np.array([[False] * 4, [True, False, True, False], [False] * 4])
    a = rng.standard_normal((3, 2))
    cases = [
        ("a mask, every key finite", (np.array([0.5, 1.0, -1.0]), np.array([1.0, 2.0, 1.0]), a, X, V, keep)),
        ("NaN in the value row of a key masked for every row", (np.array([0.5, 1.0, -1.0]), np.array([1.0, 2.0, 1.0]),
                                                                a, X, V_nan, keep)),
        ("rows that have seen no key and still see none (a masked prefix)",
         (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V, empty)),
    ]
    return check_function("check_masked_tile_step", fn, cases, tile_step_reference, MASKED_MISTAKES, n_out=3,
                          names=("g_new", "s_new", "A'_new"), not_answer=NOT_A_STATE)


# ------------------------------------------------------------------------------------------------------------------
# 7.1 the numerator step and 7.2 the finish
# ------------------------------------------------------------------------------------------------------------------


def numerator_step_reference(g, s, u, x_tile, v_tile):
    """FlashAttention-2's step: ``U_new = U e^{g - g_new} + P V``, no division: the package's own step,
    :func:`flashmath.flash.fa2_tile_step`, in float64 (on copies: it updates its accumulator in place)."""
    g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
    x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
    return fa2_tile_step(g, s, u.copy(), x.copy(), V, None)


def _numerator_model(u_update=None, s_update=None, base=np.exp):
    def model(g, s, u, x_tile, v_tile):
        g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        g_new = np.maximum(g, x.max(axis=1))
        r, p = base(g - nonempty(g_new)), base(x - nonempty(g_new)[:, None])
        s_new = s * r + p.sum(axis=1) if s_update is None else s_update(s, r, p)
        return g_new, s_new, u_update(u, s, r, p @ V, s_new)
    return model


NOT_A_NUMERATOR = Mistake("not a triple", "return the three arrays (g_new, s_new, U_new)")
NUMERATOR_MISTAKES = (
    Mistake("divided every step", "U is the numerator s A': it is rescaled and accumulated, never divided; the one "
            "division by s comes at the end (exercise 7.2)",
            (_numerator_model(lambda u, s, r, pv, sn: (u * r[:, None] + pv) / sn[:, None]),
             _numerator_model(lambda u, s, r, pv, sn: (u * (s * r)[:, None] + pv) / sn[:, None]))),
    Mistake("no rescale when the max changes", "U and s are measured against the running max: when it moves, multiply "
            "the old U by e^{g - g_new}", (_numerator_model(lambda u, s, r, pv, sn: u + pv),)),
    Mistake("the rescale inverted", "the factor is e^{g - g_new} <= 1: the old numerator shrinks",
            (_numerator_model(lambda u, s, r, pv, sn: u / r[:, None] + pv),)),
    Mistake("the rescale of s missing", "s_new = s e^{g - g_new} + rowsum P",
            (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv,
                              s_update=lambda s, r, p: s + p.sum(axis=1)),)),
    Mistake("a wrong base (2) instead of e", "use np.exp",
            (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, base=np.exp2),)),
    NOT_A_NUMERATOR,
)


def check_numerator_step(fn) -> CheckReport:
    """Check ``fn(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new)``, FlashAttention-2's tile step (7.1).

    ``u (B_r, Dv)`` the numerator ``s A'``: ``U_new = U e^{g - g_new} + P V`` with no division.
    Named mistakes: :data:`NUMERATOR_MISTAKES`.
    """
    rng = np.random.default_rng(7)
    cases = [(name.replace("(g, s, A')", "(g, s, U)"), args) for name, args in _tile_cases(rng)]
    return check_function("check_numerator_step", fn, cases, numerator_step_reference, NUMERATOR_MISTAKES, n_out=3,
                          names=("g_new", "s_new", "U_new"), not_answer=NOT_A_NUMERATOR)


def finish_reference(g, s, u):
    """``A = U / s`` and ``L = g + log(s)``; a row with no key gives 0 and -inf."""
    g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(s[:, None] == 0, 0.0, u / np.where(s == 0, 1, s)[:, None])
        return a, np.where(s == 0, -np.inf, g + np.log(s))


def _finish_model(a_of=None, lse_of=None):
    def model(g, s, u):
        g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
        a, lse = finish_reference(g, s, u)
        return (a if a_of is None else a_of(g, s, u)), (lse if lse_of is None else lse_of(g, s, u))
    return model


NOT_A_PAIR = Mistake("not a pair", "return (A, lse)")
FINISH_MISTAKES = (
    Mistake("a base-2 logsumexp", "the logsumexp is natural: g + log(s) with np.log, not np.log2",
            (_finish_model(lse_of=lambda g, s, u: g + np.log2(s)),)),
    Mistake("log(s) without g", "s is relative to the running max: L = g + log(s)",
            (_finish_model(lse_of=lambda g, s, u: np.log(s)),)),
    Mistake("divided again", "U is divided by s exactly once, here at the end: a loop that already divided every "
            "step (chapter 6) must not divide again", (_finish_model(a_of=lambda g, s, u: u / s[:, None] ** 2),)),
    Mistake("not divided", "A = U / s: the numerator still has to be divided",
            (_finish_model(a_of=lambda g, s, u: u),)),
    Mistake("0 / 0 on a row with no key", "a row that saw no key has s = 0 and U = 0: give it A = 0 (and L = -inf), "
            "not NaN", (_finish_model(a_of=lambda g, s, u: u / s[:, None]),)),
    NOT_A_PAIR,
)


def check_finish(fn) -> CheckReport:
    """Check ``fn(g, s, u) -> (a, lse)``, the end of a FlashAttention-2 query tile (7.2): ``A = U / s`` (0 for a row
    with no key) and ``L = g + log(s)`` (natural log; -inf for a row with no key). Named: :data:`FINISH_MISTAKES`."""
    rng = np.random.default_rng(72)
    u = rng.standard_normal((3, 2)) * 3
    cases = [
        ("three rows", (np.array([0.5, 2.0, -1.0]), np.array([3.0, 1.5, 7.0]), u)),
        ("a row that saw no key (g = -inf, s = 0, U = 0)", (np.array([0.5, -np.inf, 1.0]), np.array([3.0, 0.0, 2.0]),
                                                           u * np.array([[1.0], [0.0], [1.0]]))),
    ]
    return check_function("check_finish", fn, cases, finish_reference, FINISH_MISTAKES, n_out=2, names=("A", "lse"),
                          not_answer=NOT_A_PAIR)


# ------------------------------------------------------------------------------------------------------------------
# 8.1 the causal alignment
# ------------------------------------------------------------------------------------------------------------------


def _tril(offset_of):
    return lambda N, M: np.tril(np.ones((N, M), dtype=bool), k=offset_of(N, M))


CAUSAL_MISTAKES = (
    Mistake("the top-left alignment (off by M - N)", "bottom-right aligns the last query with the last key: query n "
            "sees key m when m <= n + M - N (np.tril(..., k=M - N))", (_tril(lambda N, M: 0),)),
    Mistake("the offset N - M instead of M - N", "with N < M each query sees more keys than in the square case: "
            "m <= n + (M - N)", (_tril(lambda N, M: N - M),)),
    Mistake("the diagonal excluded (< instead of <=)", "a query sees its own aligned key: m <= n + M - N",
            (_tril(lambda N, M: M - N - 1),)),
    Mistake("transposed", "the mask is (N, M): rows are queries, columns keys",
            (lambda N, M: np.tril(np.ones((M, N), dtype=bool), k=M - N).T,
             lambda N, M: np.triu(np.ones((N, M), dtype=bool), k=M - N))),
)


def check_causal_mask(fn) -> CheckReport:
    """Check ``fn(N, M) -> (N, M)`` boolean, the bottom-right causal mask (8.1): query ``n`` sees key ``m`` when
    ``m <= n + M - N``. Cases: N = M, N < M, N > M, N = 1. Named mistakes: :data:`CAUSAL_MISTAKES`."""
    from flashmath.masks import causal_mask

    cases = [("N = M = 4", (4, 4)), ("N = 2 < M = 5", (2, 5)), ("N = 5 > M = 2 (the first rows see nothing)", (5, 2)),
             ("decoding: N = 1, M = 6 (the query sees the whole cache)", (1, 6))]
    return check_function("check_causal_mask", fn, cases, causal_mask, CAUSAL_MISTAKES, n_out=1, names=("the mask",))


# ------------------------------------------------------------------------------------------------------------------
# 10.1 merging split-KV states
# ------------------------------------------------------------------------------------------------------------------


def _merge_model(a_of, lse_of=None):
    def model(a1, lse1, a2, lse2):
        a1, lse1, a2, lse2 = (np.asarray(t, dtype=np.float64) for t in (a1, lse1, a2, lse2))
        lse = np.logaddexp(lse1, lse2) if lse_of is None else lse_of(lse1, lse2)
        return a_of(a1, lse1, a2, lse2, lse), lse
    return model


def _wrong_lse(lse_of):
    """The models of a wrong merged logsumexp: used for the weights too, or only returned (the output right)."""
    return (_merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l1, a2, l2, L), lse_of=lse_of),
            _merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l1, a2, l2, np.logaddexp(l1, l2)), lse_of=lse_of))


def _weights(l1, l2, lse):
    return np.exp(l1 - lse)[..., None], np.exp(l2 - lse)[..., None]


MERGE_STATES_MISTAKES = (
    Mistake("merged without rescaling", "each part is weighted by its share of the sum, e^{L_p - L}; the plain average "
            "of the outputs ignores how much weight each range holds",
            (_merge_model(lambda a1, l1, a2, l2, L: (a1 + a2) / 2), _merge_model(lambda a1, l1, a2, l2, L: a1 + a2))),
    Mistake("the logsumexp as the max of the two", "the sums add: L = log(e^{L_1} + e^{L_2}) (np.logaddexp), which is "
            "more than the larger one", _wrong_lse(np.maximum)),
    Mistake("the logsumexps added", "L_1 + L_2 is the log of a product; the sums add: L = np.logaddexp(L_1, L_2)",
            _wrong_lse(lambda l1, l2: l1 + l2)),
    Mistake("a base-2 logsumexp", "natural logarithms throughout: np.logaddexp, not np.logaddexp2",
            _wrong_lse(np.logaddexp2)),
    Mistake("e^{L_p} without a common reference", "e^{L} overflows for large logsumexps: weight the parts by "
            "e^{L_p - L}, which is at most 1", (_merge_model(
                lambda a1, l1, a2, l2, L: (np.exp(l1)[..., None] * a1 + np.exp(l2)[..., None] * a2)
                / (np.exp(l1) + np.exp(l2))[..., None]),)),
    Mistake("an empty part's output read (0 * NaN)", "a part with L = -inf has no keys and contributes nothing, "
            "whatever its output holds: select it away with np.where instead of multiplying by its weight 0",
            (_merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[0] * a1 + _weights(l1, l2, L)[1] * a2),)),
    Mistake("not a pair", "return (A, lse)", ()),
)


def _mix(a1, l1, a2, l2, L):
    with np.errstate(invalid="ignore"):
        w1, w2 = _weights(l1, l2, L)
        return np.where(l1[..., None] == -np.inf, 0, w1 * a1) + np.where(l2[..., None] == -np.inf, 0, w2 * a2)


def check_merge_states(fn) -> CheckReport:
    """Check ``fn(a1, lse1, a2, lse2) -> (a, lse)``, the split-KV merge (10.1), against
    :func:`flashmath.merge_states`. Cases: two ranges of one row, ranges with very different logsumexps, large
    logsumexps (1000), an empty range whose output holds NaN. Named mistakes: :data:`MERGE_STATES_MISTAKES`."""
    from flashmath.splitkv import merge_states

    a1, a2 = np.array([[1.0, -2.0], [0.5, 0.5]]), np.array([[3.0, 1.0], [-1.0, 2.0]])
    cases = [
        ("two key ranges of two rows", (a1, np.array([0.3, 1.2]), a2, np.array([1.0, -0.5]))),
        ("ranges of very different weight (L = 5 and L = -2)", (a1, np.array([5.0, -2.0]), a2, np.array([-2.0, 5.0]))),
        ("large logsumexps (L = 1000 and 999: e^L overflows)", (a1, np.array([1000.0, 999.0]), a2,
                                                                np.array([999.0, 1000.0]))),
        ("an empty range (L = -inf) whose output holds NaN", (a1, np.array([0.3, 1.2]), np.full((2, 2), np.nan),
                                                             np.array([-np.inf, -np.inf]))),
    ]
    return check_function("check_merge_states", fn, cases, merge_states, MERGE_STATES_MISTAKES, n_out=2,
                          names=("A", "lse"), not_answer=MERGE_STATES_MISTAKES[-1])
