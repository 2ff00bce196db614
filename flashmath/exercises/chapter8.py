"""Chapter 8: the causal alignment (8.1) and the masked tile step (8.2).

Each checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference, and names the mistake whose wrong implementation gives the learner's answer; the catalogues
are :data:`CAUSAL_MISTAKES` and :data:`MASKED_MISTAKES`.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import BOOL_OUT, check_function, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, ConsistentDiagnosis, Mistake, same
from flashmath.exercises._tiles import (
    NOT_A_STATE,
    inputs_unchanged,
    score_tile_copied,
    scores_clipped,
    shape_hint,
    shape_mistake,
    tile_properties,
    tile_step_reference,
)
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.rowstate import max_or_zero  # the one guard: g = -inf (no key seen yet) measured against 0

# ------------------------------------------------------------------------------------------------------------------
# 8.1 the causal alignment
# ------------------------------------------------------------------------------------------------------------------


def _tril(offset_of):
    return lambda N, M: np.tril(np.ones((N, M), dtype=bool), k=offset_of(N, M))


def _key0_always(N, M):
    """Every query sees key 0: the bottom-right mask with column 0 set (mask[:, 0] = True)."""
    mask = _tril(lambda N, M: M - N)(N, M)
    mask[:, :1] = True
    return mask


CAUSAL_MISTAKES = (
    # before the top-left alignment: with N > M the clamped offset max(M - N, 0) is top-left there only
    Mistake(
        N_("every query given a key (no empty row)"),
        N_(
            "with N > M the first N - M queries come before every key (bottom-right alignment): their rows are all "
            "False. A row with no key is allowed (its output is 0): do not clamp the offset M - N at 0 or set "
            "column 0"
        ),
        (_key0_always, _tril(lambda N, M: max(M - N, 0))),
    ),
    Mistake(
        N_("the top-left alignment (off by M - N)"),
        N_(
            "bottom-right aligns the last query with the last key: query n sees key m when m <= n + M - N "
            "(np.tril(..., k=M - N))"
        ),
        (_tril(lambda N, M: 0),),
    ),
    Mistake(
        N_("the offset N - M instead of M - N"),
        N_("with N < M each query sees more keys than in the square case: m <= n + (M - N)"),
        (_tril(lambda N, M: N - M),),
    ),
    Mistake(
        N_("the diagonal excluded (< instead of <=)"),
        N_("a query sees its own aligned key: m <= n + M - N"),
        (_tril(lambda N, M: M - N - 1),),
    ),
    Mistake(
        N_("the diagonal shifted by one (m <= n + M - N + 1)"),
        N_(
            "each query sees one key too many, the next one: query n sees key m when m <= n + M - N (np.tril(..., "
            "k=M - N))"
        ),
        (_tril(lambda N, M: M - N + 1),),
    ),
    Mistake(
        N_("transposed"),
        N_("the mask is (N, M): rows are queries, columns keys"),
        (
            lambda N, M: np.tril(np.ones((M, N), dtype=bool), k=M - N).T,
            lambda N, M: np.triu(np.ones((N, M), dtype=bool), k=M - N),
            lambda N, M: np.triu(np.ones((N, M), dtype=bool)),  # the mirror image: m >= n
        ),
    ),
    Mistake(
        N_("N and M swapped (an (M, N) mask)"),
        N_(
            "the mask has one row per query and one column per key, shape (N, M): np.tril(np.ones((N, M), "
            "dtype=bool), k=M - N), or np.tri(N, M, k=M - N, dtype=bool) (np.tri's first size is the rows)"
        ),
        (
            lambda N, M: _tril(lambda N, M: M - N)(M, N),  # the rule built with the sizes swapped
            lambda N, M: _tril(lambda N, M: M - N)(N, M).T,  # the right mask, key-major
        ),
    ),
    Mistake(
        N_("an inverted mask (True = masked)"),
        N_(
            "in this course True means attend (flashmath.inputs): query n sees key m when m <= n + M - N, so that "
            "pair is True"
        ),
        (lambda N, M: ~_tril(lambda N, M: M - N)(N, M),),
    ),
    Mistake(
        N_("a 0/-inf additive mask"),
        N_(
            "the exercise asks for a boolean mask (True = attend), not the bias added to the scores (0 where "
            "attended, -inf elsewhere): return m <= n + M - N"
        ),
        (lambda N, M: np.where(_tril(lambda N, M: M - N)(N, M), 0.0, -np.inf),),
    ),
    BOOL_OUT,  # "an integer 0/1 mask": the property battery's check of the result's dtype names it
)


@exercise("8.1", CAUSAL_MISTAKES, solution="causal_mask", property_cases=1)
def check_causal_mask(fn) -> CheckReport:
    """Check ``fn(N, M) -> (N, M)`` boolean, the bottom-right causal mask (8.1): query ``n`` sees key ``m`` when
    ``m <= n + M - N``. The property case N = M = 1 first (no empty or numpy-integer sizes: the prompt does not ask
    for them), then N = M, N < M, N > M, N = 1. Named mistakes: :data:`CAUSAL_MISTAKES`."""
    from flashmath.masks import causal_mask

    cases = [
        (_("N = M = 4"), (4, 4)),
        (_("N = 2 < M = 5"), (2, 5)),
        (_("N = 5 > M = 2 (the first rows see nothing)"), (5, 2)),
        (_("decoding: N = 1, M = 6 (the query sees the whole cache)"), (1, 6)),
    ]
    properties = property_cases([(_("N = M = 1"), (1, 1))])
    return check_function(
        "check_causal_mask",
        fn,
        cases,
        causal_mask,
        CAUSAL_MISTAKES,
        n_out=1,
        names=(_("the mask"),),
        hint=shape_hint,
        properties=properties,
    )


# ------------------------------------------------------------------------------------------------------------------
# 8.2 the masked tile step: (g, s, A') of B_r rows, a score tile X (B_r, B_c), V (B_c, Dv) and a keep tile (B_r, B_c)
# ------------------------------------------------------------------------------------------------------------------


def _absent_terms(p, keep, V):
    """``P V`` with the masked terms selected away (the right way)."""
    return np.where(keep[:, :, None], p[:, :, None] * V[None, :, :], 0.0).sum(axis=1)


def _masked_model(
    score=None,
    term=None,
    guard=True,
    fill=None,
    mask_of=None,
    mask_after_exp=False,
    guard_div=True,
    values=None,
    p_masked=False,
    raw_weights=False,
    numerator=None,
):
    """A wrong masked tile step: ``score(x, keep)`` the masked scores, ``mask_of(keep)`` the mask applied; with
    ``mask_after_exp`` the max is taken over the unmasked scores and the mask applied to the weights; without
    ``guard_div`` the output is divided by s_new even where it is 0; ``values(V)`` the value tile used; with
    ``p_masked`` the weights are multiplied by the mask (P * keep) before they are summed; with ``raw_weights`` the
    max is taken over the masked scores and the weights are those of the unmasked scores times the mask,
    e^{X - g_new} * keep (0 * NaN and 0 * inf are NaN in P itself); ``numerator(a, s, r)`` the old term of an
    output that is never divided by s_new (chapter 7's U)."""

    def model(g, s, a, x_tile, v_tile, keep):
        g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        keep = keep if mask_of is None else np.broadcast_to(mask_of(keep), keep.shape)
        if values is not None:
            V = values(V)
        raw = x
        x = np.where(keep, x, -np.inf if fill is None else fill) if score is None else score(x, keep)
        g_new = np.maximum(g, (raw if mask_after_exp else x).max(axis=1))
        ref = max_or_zero(g_new) if guard else g_new
        r, p = np.exp(g - ref), np.exp(x - ref[:, None])
        if mask_after_exp:
            p = np.where(keep, np.exp(raw - ref[:, None]), 0.0)
        if p_masked:
            p = p * keep
        if raw_weights:
            p = np.exp(raw - ref[:, None]) * keep
        s_new = s * r + p.sum(axis=1)
        pv = (p * keep) @ V if term is None else term(p, keep, V)
        if numerator is not None:
            return g_new, s_new, numerator(a, s, r) + pv
        return (
            g_new,
            s_new,
            (a * (s * r)[:, None] + pv) / (np.where(s_new == 0, 1, s_new) if guard_div else s_new)[:, None],
        )

    return model


MASKED_MISTAKES = (
    # before the 0 * NaN mistake: a mistake is named when it explains every failing case, the first in this order
    Mistake(
        N_("values zeroed only for keys that every row masks"),
        N_(
            "a key that some rows of the tile attend and others mask enters P V with weight 0 for the rows that "
            "mask it, and 0 * NaN and 0 * inf are NaN: that is the GPU kernels' exception (chapter 8's box), not the "
            "rule. Select "
            "each masked pair away: np.where(keep[:, :, None], P[:, :, None] * V[None], 0).sum(axis=1)"
        ),
        (_masked_model(term=lambda p, keep, V: p @ np.where(keep.any(axis=0)[:, None], V, 0.0)),),
    ),
    Mistake(
        N_("masked terms multiplied by 0 (0 * NaN)"),
        N_(
            "a masked key's weight is 0, but 0 * NaN and 0 * inf are NaN: select masked terms away with np.where "
            "instead of "
            "multiplying P by the mask"
        ),
        (
            _masked_model(),
            _masked_model(term=lambda p, keep, V: p @ V),
            # P = e^{X - g_new} * keep from the unmasked scores: a NaN or +inf masked score gives 0 * NaN in P
            *(_masked_model(raw_weights=True, term=term) for term in (None, _absent_terms)),
        ),
    ),
    Mistake(
        N_("-inf - (-inf) on a masked prefix"),
        N_(
            "while a row has seen no key its max is -inf, and e^{g - g_new} = e^{-inf + inf} is NaN: subtract 0 "
            "instead of -inf (np.where(g_new == -np.inf, 0, g_new))"
        ),
        (_masked_model(term=_absent_terms, guard=False),),
        compare=lambda answer, model: _unguarded_max(answer, model),
    ),
    Mistake(
        N_("a finite fill value instead of -inf"),
        N_(
            "a masked score is -inf, not a large negative number: with a fill a fully masked row averages the "
            "masked keys' values (and keeps a finite max)"
        ),
        tuple(
            _masked_model(fill=fill, term=term)
            for fill in (-1e9, -1e4)
            for term in (lambda p, keep, V: p @ V, _absent_terms)
        )
        + (tile_step_reference,),
        compare=lambda answer, right: _finite_fill(answer, right),
    ),
    Mistake(
        N_("the mask added to the scores (NaN + -inf)"),
        N_(
            "adding a 0/-inf bias keeps what a masked score holds: NaN + (-inf) is NaN and inf + (-inf) is NaN. "
            "Select masked scores away: np.where(keep, X, -np.inf)"
        ),
        # the terms selected: a bias then P @ V is two mistakes, this one and 0 * NaN, each named on its own cases
        (_masked_model(score=lambda x, keep: x + np.where(keep, 0.0, -np.inf), term=_absent_terms),),
        # g_new and s_new are NaN on a row with a NaN or +inf masked score: its A' is not compared, since a guarded
        # division (np.where(s_new > 0, ..., A' or 0)) gives a number there and an unguarded one NaN
        compare=lambda answer, model: _unguarded_max(answer, model),
    ),
    Mistake(
        N_("a per-column mask"),
        N_(
            "keep is (B_r, B_c), one entry per (query, key) pair: a causal or per-row mask differs from row to "
            "row, so mask each pair, not whole columns"
        ),
        tuple(
            _masked_model(mask_of=mask_of, term=term)
            for mask_of in (lambda k: k.all(axis=0), lambda k: k.any(axis=0), lambda k: k[0])
            for term in (None, _absent_terms)
        ),
    ),
    Mistake(
        N_("the mask applied after the max"),
        N_(
            "the row max is over the kept scores only: mask the scores first, X = np.where(keep, X, -np.inf), then "
            "take g_new = max(g, rowmax X); a masked score (large, +inf or NaN) must not move the max"
        ),
        tuple(_masked_model(mask_after_exp=True, term=term) for term in (_absent_terms, None)),
    ),
    Mistake(
        N_("keep read the wrong way round"),
        N_("keep is True where a query attends a key (True = kept): mask where keep is False, np.where(keep, X, -inf)"),
        tuple(_masked_model(mask_of=lambda k: ~np.asarray(k, bool), term=term) for term in (_absent_terms, None)),
    ),
    Mistake(
        N_("the scores multiplied by the mask (a masked score 0)"),
        N_(
            "X * keep gives a masked key the score 0, a weight e^{0 - g_new} > 0: a masked score is -inf, "
            "np.where(keep, X, -np.inf)"
        ),
        tuple(
            _masked_model(score=lambda x, keep: x * keep, term=term, p_masked=p_masked)
            for p_masked in (False, True)
            # the terms selected by keep, multiplied by it, or (the scores' mask thought enough) not masked at all
            for term in (_absent_terms, None, lambda p, keep, V: p @ V)
        ),
    ),
    Mistake(
        N_("the values cleaned of NaN and inf"),
        N_(
            "a value row that a query attends counts whatever it holds: NaN there makes the row's output NaN (NaN "
            "propagates). Only masked pairs are absent: select them away with np.where on the terms P V, and leave "
            "V as it is (no np.nan_to_num, no np.where(np.isfinite(V), V, 0))"
        ),
        tuple(
            _masked_model(values=values, term=term)
            for values in (lambda V: np.where(np.isfinite(V), V, 0.0), np.nan_to_num)
            for term in (_absent_terms, None)
        ),
    ),
    Mistake(
        N_("0 / 0 on a row with no key yet"),
        N_(
            "a row that has seen no key (every key so far masked) has s_new = 0 and keeps A' = 0: divide by "
            "np.where(s_new == 0, 1, s_new)"
        ),
        (_masked_model(term=_absent_terms, guard_div=False),),
    ),
    Mistake(
        N_("chapter 7's numerator kept (not divided by s_new)"),
        N_(
            "A' e^{g - g_new} + P V is chapter 7's update of the numerator U, divided only at the end; this exercise "
            "keeps exercise 6.1's average A', divided after every tile: A'_new = (A' s e^{g - g_new} + P V) / s_new"
        ),
        # U e^{g - g_new} + P V (the 7.1 step with the mask), or s_new A'_new (only the division missing)
        tuple(
            _masked_model(term=_absent_terms, numerator=numerator)
            for numerator in (lambda a, s, r: a * r[:, None], lambda a, s, r: a * (s * r)[:, None])
        ),
    ),
    scores_clipped(tile_step_reference),
    INPUT_MODIFIED,
    shape_mistake(tile_step_reference),
    NOT_A_STATE,
)


def _unguarded_max(answer, model) -> bool:
    """The answer agrees with a model whose state turns NaN on some rows (the unguarded max, the additive mask): the
    same ``g_new`` and ``s_new`` (NaN where the model's is), and the same ``A'`` on every row where the model's
    ``s_new`` is not NaN. On a row where it is NaN, ``A'`` is not compared: a learner may have guarded the division
    (``np.where(s_new > 0, ..., 0)`` gives 0 there, ``np.where(s_new > 0, ..., A')`` the old ``A'``) or not. On a
    case where no row's ``s_new`` is NaN, everything is compared (the model then agrees with a learner who passed it,
    and a 0/-inf bias then ``P @ V`` gives 0 * NaN where a masked value row holds NaN or inf)."""
    if answer is None or not isinstance(answer, tuple) or not isinstance(model, tuple) or len(answer) != 3:
        return False
    try:
        if not (same(answer[0], model[0]) and same(answer[1], model[1])):
            return False
        a, a_model = np.asarray(answer[2], np.float64), np.asarray(model[2], np.float64)
        active = np.isnan(np.asarray(model[1], np.float64))
        return bool(a.shape == a_model.shape and same(a[~active], a_model[~active]))
    except Exception:
        return False


def _finite_fill(answer, right) -> bool:
    """The answer gives a row with no key a finite, very negative max where the right one is -inf."""
    if answer is None or not isinstance(answer, tuple) or not isinstance(right, tuple):
        return False
    try:
        g, g_right = np.asarray(answer[0], np.float64), np.asarray(right[0], np.float64)
        empty = np.isneginf(g_right)
        return bool(
            g.shape == g_right.shape and empty.any() and np.all(np.isfinite(g[empty])) and np.all(g[empty] <= -50)
        )
    except Exception:
        return False


def _masked_properties(keep):
    """The edge cases of the masked tile step (8.2): the tile step's (:func:`tile_properties` with ``masked``: one
    row and one key, a row whose kept scores are all -inf, every score near -1000), each with the mask ``keep``
    where the tile has its shape (every pair kept for the one-key tile)."""
    cases = []
    for name, (g, s, a, x, V) in tile_properties(masked=True):
        mask = keep if x.shape == keep.shape else np.ones(x.shape, bool)
        cases.append((name, (g, s, a, x, V, mask)))
    return cases


@exercise("8.2", MASKED_MISTAKES, solution="masked_tile_step", property_cases=3)
def check_masked_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile, keep) -> (g_new, s_new, a_new)``: the tile step with a mask (8.2).

    ``keep (B_r, B_c)`` boolean, True = attend. A masked key is absent whatever its score and value row hold (NaN
    included), for a key masked for every row of the tile as for one masked for some rows only (a row that attends
    a key counts it whatever it holds); a row that has seen no key keeps ``(-inf, 0, 0)``. The property battery
    first (:func:`_masked_properties`). Named mistakes: :data:`MASKED_MISTAKES`.
    """
    rng = np.random.default_rng(8)
    X, V = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    V_nan = V.copy()
    V_nan[3] = np.nan
    keep = np.array([[True, True, False, False], [True, False, True, False], [True, True, True, False]])
    empty = np.array([[False] * 4, [True, False, True, False], [False] * 4])
    a = rng.standard_normal((3, 2))
    V_inf = V.copy()
    V_inf[3] = np.inf
    V_part = V.copy()
    V_part[2] = np.nan  # key 2: masked for row 0, attended by rows 1 and 2 (NaN there, as attended)
    X_bad = X.copy()
    X_bad[0, 2], X_bad[1, 1], X_bad[2, 3] = np.nan, np.inf, np.nan  # masked pairs only
    g0, s0 = np.array([0.5, 1.0, -1.0]), np.array([1.0, 2.0, 1.0])
    cases = [
        (_("a mask, every key finite"), (g0, s0, a, X, V, keep)),
        (_("NaN in the value row of a key masked for every row"), (g0, s0, a, X, V_nan, keep)),
        (_("+inf in the value row of a key masked for every row"), (g0, s0, a, X, V_inf, keep)),
        (_("NaN and +inf in masked scores"), (g0, s0, a, X_bad, V, keep)),
        (_("NaN in the value row of a key masked for some rows only"), (g0, s0, a, X, V_part, keep)),
        (
            _("rows that have seen no key and still see none (a masked prefix)"),
            (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V, empty),
        ),
    ]
    report = check_function(
        "check_masked_tile_step",
        fn,
        cases,
        tile_step_reference,
        MASKED_MISTAKES,
        n_out=3,
        names=("g_new", "s_new", "A'_new"),
        not_answer=NOT_A_STATE,
        hint=shape_hint,
        properties=_masked_properties(keep),
        call=score_tile_copied,
        # a model that fails a case the learner passed is not the learner's code (review rev-k-08-5: a 0/-inf bias
        # then P @ V is two mistakes, the bias and 0 * NaN, not "the scores multiplied by the mask")
        diagnosis=lambda args, answers: ConsistentDiagnosis(
            args, answers, MASKED_MISTAKES, same_arrays, pairs_first=False
        ),
    )
    inputs_unchanged(report, fn, _("the state given (g, s, A') is left unchanged"), cases[3][1], always=True)
    return report
