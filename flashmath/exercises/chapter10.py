"""Chapter 10: merging the states of two key ranges (10.1), as split-KV decoding does.

The checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference, and names the mistake whose wrong implementation gives the learner's answer; the catalogue
is :data:`MERGE_STATES_MISTAKES`.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake
from flashmath.exercises._tiles import inputs_unchanged, shape_hint, shape_mistake
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

# ------------------------------------------------------------------------------------------------------------------
# 10.1 merging split-KV states
# ------------------------------------------------------------------------------------------------------------------

#: 10.1's parameters, so that a message names the one changed in place
MERGE_ARGS = ("a1", "lse1", "a2", "lse2")
#: an argument changed in place, with examples in 10.1's own names (``w1``: the first range's share, as in the
#: solution)
MERGE_INPUT_MODIFIED = Mistake(
    INPUT_MODIFIED.name,
    N_(
        "your function wrote into a state it was given, for example with a1 *= w1[:, None] or lse1[...] = lse; "
        "build new arrays instead: an expression such as w1[:, None] * a1 or np.logaddexp(lse1, lse2) makes a new "
        "one"
    ),
)


def _merge_model(a_of, lse_of=None):
    def model(a1, lse1, a2, lse2):
        a1, lse1, a2, lse2 = (np.asarray(t, dtype=np.float64) for t in (a1, lse1, a2, lse2))
        lse = np.logaddexp(lse1, lse2) if lse_of is None else lse_of(lse1, lse2)
        return a_of(a1, lse1, a2, lse2, lse), lse

    return model


def _wrong_lse(lse_of):
    """The models of a wrong merged logsumexp: used for the weights too, or only returned (the output right)."""
    return (
        _merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l1, a2, l2, L), lse_of=lse_of),
        _merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l1, a2, l2, np.logaddexp(l1, l2)), lse_of=lse_of),
    )


def _selected(term, lp):
    """``term`` with a part of no key (L_p = -inf) selected away, as a careful learner writes it."""
    return np.where(np.isneginf(lp)[:, None], 0.0, term)


def _nonzero(total):
    return np.where(total == 0, 1.0, total)


def _shift_max(l1, l2):
    return np.maximum(l1, l2)


def _shift_total(l1, l2):
    m = _shift_max(l1, l2)
    return np.exp(l1 - m) + np.exp(l2 - m)


def _shifted_by_max(a1, l1, a2, l2, L):
    """The merge shifted by the larger logsumexp as in chapter 2, with no guard: 0 / 0 where both parts are empty."""
    m = _shift_max(l1, l2)
    num = _selected(np.exp(l1 - m)[:, None] * a1, l1) + _selected(np.exp(l2 - m)[:, None] * a2, l2)
    return num / _shift_total(l1, l2)[:, None]


def _unshared(a, lp, lother, guard: bool, select: bool):
    """Part ``p``'s term weighted by ``e^{L_p - m}``, ``m`` the larger logsumexp (-inf measured against 0 with
    ``guard``), never divided by the sum of the two weights; with ``select`` an empty part is selected away."""
    m = np.maximum(lp, lother)
    if guard:
        m = np.where(np.isneginf(m), 0.0, m)
    term = np.exp(lp - m)[:, None] * a
    return _selected(term, lp) if select else term


def _weights(l1, l2, lse):
    return np.exp(l1 - lse)[..., None], np.exp(l2 - lse)[..., None]


def _weighted_empty_parts(weights, lse_of=None):
    """The merges that multiply an empty part's output by its weight, in both parts or in one (the other selected
    away), the weights from ``weights(l1, l2, L)``, the merged logsumexp from ``lse_of`` (np.logaddexp if None)."""
    return (
        _merge_model(lambda a1, l1, a2, l2, L: weights(l1, l2, L)[0] * a1 + weights(l1, l2, L)[1] * a2, lse_of),
        _merge_model(
            lambda a1, l1, a2, l2, L: (
                weights(l1, l2, L)[0] * a1 + np.where(l2[..., None] == -np.inf, 0, weights(l1, l2, L)[1] * a2)
            ),
            lse_of,
        ),
        _merge_model(
            lambda a1, l1, a2, l2, L: (
                weights(l1, l2, L)[1] * a2 + np.where(l1[..., None] == -np.inf, 0, weights(l1, l2, L)[0] * a1)
            ),
            lse_of,
        ),
    )


def _shares_against_max(l1, l2, lse):
    """The shares as chapter 2 writes them, e^{L_p - m} / (e^{L_1 - m} + e^{L_2 - m}) with m the larger logsumexp
    (FlashAttention-2's reference), unguarded: NaN where both parts are empty (-inf - (-inf))."""
    m, total = _shift_max(l1, l2), _shift_total(l1, l2)
    return (np.exp(l1 - m) / total)[..., None], (np.exp(l2 - m) / total)[..., None]


def _lse_against_max(l1, l2):
    """The merged logsumexp m + log(e^{L_1 - m} + e^{L_2 - m}), unguarded: NaN where both parts are empty."""
    return _shift_max(l1, l2) + np.log(_shift_total(l1, l2))


def _guarded_weights(l1, l2, lse):
    """The shares e^{L_p - L}, with L measured against 0 where it is -inf: 0, not NaN, where both parts are empty."""
    return _weights(l1, l2, np.where(np.isneginf(lse), 0.0, lse))


MERGE_STATES_MISTAKES = (
    Mistake(
        N_("merged without rescaling"),
        N_(
            "weight each range by its share of the sum, e^{L_p - L}; the plain average of the outputs ignores "
            "how much weight each range holds"
        ),
        (
            _merge_model(lambda a1, l1, a2, l2, L: (a1 + a2) / 2),
            _merge_model(lambda a1, l1, a2, l2, L: a1 + a2),
            # an empty part selected away first, then the plain average (or sum, or mean of the parts present)
            _merge_model(lambda a1, l1, a2, l2, L: (_selected(a1, l1) + _selected(a2, l2)) / 2),
            _merge_model(lambda a1, l1, a2, l2, L: _selected(a1, l1) + _selected(a2, l2)),
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    (_selected(a1, l1) + _selected(a2, l2))
                    / np.maximum(1, (~np.isneginf(l1)).astype(float) + (~np.isneginf(l2)))[:, None]
                )
            ),
        ),
    ),
    Mistake(
        N_("the logsumexp as the max of the two"),
        N_("the sums add: L = log(e^{L_1} + e^{L_2}) (np.logaddexp), which is more than the larger one"),
        _wrong_lse(np.maximum),
    ),
    Mistake(
        N_("the logsumexps added"),
        N_("L_1 + L_2 is the log of a product; the sums add: L = np.logaddexp(L_1, L_2)"),
        _wrong_lse(lambda l1, l2: l1 + l2),
    ),
    Mistake(
        N_("a base-2 logsumexp"),
        N_("natural logarithms throughout: np.logaddexp, not np.logaddexp2"),
        _wrong_lse(np.logaddexp2),
    ),
    Mistake(
        N_("both parts empty: -inf - (-inf)"),
        N_(
            "when both parts are empty L = -inf and e^{L_p - L} = e^{-inf + inf} is NaN: the merged row has no "
            "key, so A = 0 and L = -inf (measure against 0 where L is -inf)"
        ),
        (
            _merge_model(
                lambda a1, l1, a2, l2, L: np.where(np.expand_dims(np.isneginf(L), -1), np.nan, _mix(a1, l1, a2, l2, L))
            ),
        ),
    ),
    Mistake(
        N_("an empty part's output read (0 * NaN)"),
        N_(
            "a part with L = -inf has no keys and contributes nothing, whatever its output holds (NaN or inf: 0 * "
            "inf is NaN too): select it away with np.where instead of multiplying by its weight 0"
        ),
        # the weights measured against 0 where both parts are empty (no -inf - (-inf)), so that each model's only
        # NaN is an empty part's output times its weight 0: a row whose NaN comes from 0 / 0 or -inf - (-inf) is
        # another mistake's (the next one; e^{L_p} without a common reference; both parts empty)
        _weighted_empty_parts(_guarded_weights),
    ),
    Mistake(
        N_("an empty part multiplied by its weight (0 * NaN, and -inf - (-inf))"),
        N_(
            "a part with L = -inf has no keys: select it away with np.where instead of multiplying its output by its "
            "weight. Its weight e^{L_p - L} (or e^{L_p - m} over their sum, m the larger logsumexp, as in chapter 2) "
            "is 0 when the other part has keys, and 0 * NaN (or 0 * inf) is NaN; when both parts are empty L and m "
            "are -inf too, and e^{-inf + inf} is NaN whatever the outputs hold: such a row gets A = 0 and L = -inf"
        ),
        (
            *_weighted_empty_parts(_weights),
            # chapter 2's form, the shares against the larger logsumexp and L = m + log(sum), neither part selected
            _weighted_empty_parts(_shares_against_max, _lse_against_max)[0],
        ),
    ),
    Mistake(
        N_("e^{L_p} without a common reference"),
        N_(
            "e^{L_p} alone overflows for a large logsumexp (e^{1000} = inf, and inf / inf is NaN) and is 0 for a very "
            "negative or empty one (e^{-1000} = 0: 0 / 0 and 0 * NaN are NaN): weight each part by its share e^{L_p - "
            "L}, which is at most 1, with L = np.logaddexp(L_1, L_2), and select an empty part away with np.where"
        ),
        (
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    (np.exp(l1)[..., None] * a1 + np.exp(l2)[..., None] * a2) / (np.exp(l1) + np.exp(l2))[..., None]
                )
            ),
            # the same with L = log(e^{L_1} + e^{L_2}): inf at 1000, -inf at -1000, and 0 / 0 where both are empty
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    (np.exp(l1)[..., None] * a1 + np.exp(l2)[..., None] * a2) / (np.exp(l1) + np.exp(l2))[..., None]
                ),
                lse_of=lambda l1, l2: np.log(np.exp(l1) + np.exp(l2)),
            ),
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    (
                        np.where(np.expand_dims(np.isneginf(l1), -1), 0, np.exp(l1)[..., None] * a1)
                        + np.where(np.expand_dims(np.isneginf(l2), -1), 0, np.exp(l2)[..., None] * a2)
                    )
                    / (np.exp(l1) + np.exp(l2))[..., None]
                )
            ),
            # e^{L_p} computed first, L = log(e^{L_1} + e^{L_2}), an empty part or a sum of 0 guarded
            *(
                _merge_model(
                    lambda a1, l1, a2, l2, L, guard=guard: (
                        (np.exp(l1)[:, None] * _selected(a1, l1) + np.exp(l2)[:, None] * _selected(a2, l2))
                        / (_nonzero(np.exp(l1) + np.exp(l2)) if guard else np.exp(l1) + np.exp(l2))[:, None]
                    ),
                    lse_of=lse_of,
                )
                for guard in (True, False)
                for lse_of in (None, lambda l1, l2: np.log(np.exp(l1) + np.exp(l2)))
            ),
        ),
    ),
    Mistake(
        N_("the weights swapped"),
        N_("part p is weighted by its own share e^{L_p - L}: a1 by e^{L_1 - L}, a2 by e^{L_2 - L}"),
        (
            _merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l2, a2, l1, L)),
            _merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[1] * a1 + _weights(l1, l2, L)[0] * a2),
        ),
    ),
    Mistake(
        N_("the weights inverted (e^{L - L_p})"),
        N_("a part's share of the sum is e^{L_p} / e^{L} = e^{L_p - L} <= 1, not its inverse"),
        (
            _merge_model(lambda a1, l1, a2, l2, L: np.exp(L - l1)[..., None] * a1 + np.exp(L - l2)[..., None] * a2),
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    (np.exp(L - l1)[..., None] * a1 + np.exp(L - l2)[..., None] * a2)
                    / (np.exp(L - l1) + np.exp(L - l2))[..., None]
                )
            ),
        ),
    ),
    Mistake(
        N_("a base-2 merge"),
        N_("the logsumexps are natural logarithms: weight by np.exp(L_p - L), not 2 ** (L_p - L)"),
        (
            _merge_model(
                lambda a1, l1, a2, l2, L: np.exp2(l1 - L)[..., None] * a1 + np.exp2(l2 - L)[..., None] * a2,
                lse_of=np.logaddexp2,
            ),
            _merge_model(lambda a1, l1, a2, l2, L: np.exp2(l1 - L)[..., None] * a1 + np.exp2(l2 - L)[..., None] * a2),
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    np.where(np.expand_dims(np.isneginf(l1), -1), 0, np.exp2(l1 - L)[..., None] * a1)
                    + np.where(np.expand_dims(np.isneginf(l2), -1), 0, np.exp2(l2 - L)[..., None] * a2)
                ),
                lse_of=np.logaddexp2,
            ),
        ),
    ),
    Mistake(
        N_("the logsumexp without the shift"),
        N_(
            "log(e^{L_1} + e^{L_2}) overflows once L > 709 and underflows to log(0) = -inf below about -745: use "
            "np.logaddexp(L_1, L_2), which subtracts the larger first"
        ),
        _wrong_lse(lambda l1, l2: np.log(np.exp(l1) + np.exp(l2))),
    ),
    Mistake(
        N_("the parts weighted by e^{L_p}, not by their shares"),
        N_(
            "e^{L_p} is a part's sum of weights, not its share: divide by the merged sum, weight by e^{L_p - L} "
            "with L = np.logaddexp(L_1, L_2), so that the shares add up to 1"
        ),
        (
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    _selected(np.exp(l1)[:, None] * a1, l1) + _selected(np.exp(l2)[:, None] * a2, l2)
                )
            ),
            _merge_model(lambda a1, l1, a2, l2, L: np.exp(l1)[:, None] * a1 + np.exp(l2)[:, None] * a2),
        ),
    ),
    Mistake(
        N_("the shares not divided by their sum"),
        N_(
            "e^{L_p - m}, with m the larger logsumexp, is relative to the larger part: the two add up to more than "
            "1. A part's share is e^{L_p - L} with L = np.logaddexp(L_1, L_2) (or divide by e^{L_1 - m} + e^{L_2 - "
            "m})"
        ),
        tuple(
            _merge_model(
                lambda a1, l1, a2, l2, L, guard=guard, select=select: (
                    _unshared(a1, l1, l2, guard, select) + _unshared(a2, l2, l1, guard, select)
                )
            )
            for guard in (True, False)
            for select in (True, False)
        ),
    ),
    Mistake(
        N_("the shares along the value columns (no [:, None])"),
        N_(
            "a share e^{L_p - L} is one number per row, shape (N,): w * A lines it up with A's last axis, the value "
            "columns; give it a column axis, w[:, None] * A"
        ),
        (
            _merge_model(
                lambda a1, l1, a2, l2, L: (
                    _selected(np.where(np.isneginf(l1), 0.0, np.exp(l1 - L)) * a1, l1)
                    + _selected(np.where(np.isneginf(l2), 0.0, np.exp(l2 - L)) * a2, l2)
                )
            ),
            _merge_model(lambda a1, l1, a2, l2, L: np.exp(l1 - L) * a1 + np.exp(l2 - L) * a2),
        ),
    ),
    Mistake(
        N_("0 / 0 where both ranges are empty"),
        N_(
            "a row with no key in either range has L_1 = L_2 = -inf: shifted by their max (-inf) its weights are "
            "NaN and their sum 0; such a row gets A = 0 and L = -inf: select it with np.where"
        ),
        (
            _merge_model(_shifted_by_max, lse_of=lambda l1, l2: _shift_max(l1, l2) + np.log(_shift_total(l1, l2))),
            # the output's empty parts selected away, the logsumexp shifted by -inf: NaN where both are empty
            _merge_model(
                lambda a1, l1, a2, l2, L: _mix(a1, l1, a2, l2, np.logaddexp(l1, l2)),
                lse_of=lambda l1, l2: _shift_max(l1, l2) + np.log(_shift_total(l1, l2)),
            ),
        ),
    ),
    MERGE_INPUT_MODIFIED,
    shape_mistake(
        lambda *args: _merge_reference(*args),
        N_(
            "the numbers are right but an array has another shape: keep per-row quantities 1-D (N,) (no "
            "keepdims=True, or .ravel() them) and outputs (N, D_v)"
        ),
    ),
    Mistake(N_("not a pair"), N_("return (A, lse)"), ()),
)


def _merge_reference(a1, lse1, a2, lse2):
    from flashmath.splitkv import merge_states

    return merge_states(a1, lse1, a2, lse2)


def _mix(a1, l1, a2, l2, L):
    with np.errstate(invalid="ignore"):
        w1, w2 = _weights(l1, l2, L)
        return np.where(l1[..., None] == -np.inf, 0, w1 * a1) + np.where(l2[..., None] == -np.inf, 0, w2 * a2)


@exercise("10.1", MERGE_STATES_MISTAKES, solution="merge_states")
def check_merge_states(fn) -> CheckReport:
    """Check ``fn(a1, lse1, a2, lse2) -> (a, lse)``, the split-KV merge (10.1), against
    :func:`flashmath.merge_states`. Cases: two ranges of two rows, ranges with very different logsumexps, large
    logsumexps (1000), an empty range whose output holds NaN or +inf, both ranges empty, after the property cases,
    each a phrase of the prompt (one row, both ranges empty in every row, logsumexps near -1000; no empty input,
    +inf in a range that counts, NaN logsumexp or integer case: chapter 10 does not teach them). Named mistakes:
    :data:`MERGE_STATES_MISTAKES`, each only when its model explains every failing case."""
    from flashmath.splitkv import merge_states

    a1, a2 = np.array([[1.0, -2.0], [0.5, 0.5]]), np.array([[3.0, 1.0], [-1.0, 2.0]])
    cases = [
        (_("two key ranges of two rows"), (a1, np.array([0.3, 1.2]), a2, np.array([1.0, -0.5]))),
        (
            _("ranges of very different weight (L = 5 and L = -2)"),
            (a1, np.array([5.0, -2.0]), a2, np.array([-2.0, 5.0])),
        ),
        (
            _("large logsumexps (L = 1000 and 999: e^L overflows)"),
            (a1, np.array([1000.0, 999.0]), a2, np.array([999.0, 1000.0])),
        ),
        (
            _("an empty range (L = -inf) whose output holds NaN"),
            (a1, np.array([0.3, 1.2]), np.full((2, 2), np.nan), np.array([-np.inf, -np.inf])),
        ),
        (
            _("the first range empty, its output +inf"),
            (np.full((2, 2), np.inf), np.array([-np.inf, -np.inf]), a2, np.array([0.3, 1.2])),
        ),
        (
            _("both ranges empty (row 0), then one (row 1)"),
            (np.full((2, 2), np.nan), np.array([-np.inf, -np.inf]), a2, np.array([-np.inf, 0.7])),
        ),
    ]
    properties = property_cases(
        [
            (_("one row"), (np.array([[2.0]]), np.array([0.5]), np.array([[-1.0]]), np.array([1.5]))),
            (
                _("both ranges empty in every row"),
                (np.zeros((2, 2)), np.full(2, -np.inf), np.zeros((2, 2)), np.full(2, -np.inf)),
            ),
            (_("logsumexps near -1000"), (a1, np.array([-1000.0, -1001.0]), a2, np.array([-1001.0, -1000.0]))),
        ]
    )
    report = check_function(
        "check_merge_states",
        fn,
        cases,
        merge_states,
        MERGE_STATES_MISTAKES,
        n_out=2,
        names=("A", "lse"),
        not_answer=MERGE_STATES_MISTAKES[-1],
        hint=shape_hint,
        properties=properties,
        arg_names=MERGE_ARGS,
        modified_mistake=MERGE_INPUT_MODIFIED,
    )
    inputs_unchanged(
        report,
        fn,
        _("the two states given are left unchanged"),
        cases[0][1],
        which=(0, 1, 2, 3),
        always=True,
        arg_names=MERGE_ARGS,
        mistake=MERGE_INPUT_MODIFIED,
    )
    return report
