"""Chapter 7: FlashAttention-2's numerator step (7.1) and the finish (7.2).

Each checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference, and names the mistake whose wrong implementation gives the learner's answer; the catalogues
are :data:`NUMERATOR_MISTAKES` and :data:`FINISH_MISTAKES`.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake
from flashmath.exercises._tiles import (
    inputs_unchanged,
    score_tile_copied,
    scores_clipped,
    shape_hint,
    shape_mistake,
    tile_cases,
    tile_properties,
)
from flashmath.flash import fa2_tile_step
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.rowstate import max_or_zero  # the one guard: g = -inf (no key seen yet) measured against 0

# ------------------------------------------------------------------------------------------------------------------
# 7.1 the numerator step and 7.2 the finish
# ------------------------------------------------------------------------------------------------------------------


def numerator_step_reference(g, s, u, x_tile, v_tile):
    """FlashAttention-2's step: ``U_new = U e^{g - g_new} + P V``, no division: the package's own step,
    :func:`flashmath.flash.fa2_tile_step`, in float64 (on copies: it updates its accumulator in place)."""
    g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
    x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
    return fa2_tile_step(g, s, u.copy(), x.copy(), V, None)


def _numerator_model(u_update=None, s_update=None, base=np.exp, rescale=None, g_of=None, p_of=None):
    def model(g, s, u, x_tile, v_tile):
        g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        g_new = np.maximum(g, x.max(axis=1)) if g_of is None else g_of(g, x)
        r, p = base(g - max_or_zero(g_new)), base(x - max_or_zero(g_new)[:, None])
        if p_of is not None:
            p = p_of(x, g, g_new)
        if rescale is not None:
            r = rescale(g, g_new)
        s_new = s * r + p.sum(axis=1) if s_update is None else s_update(s, r, p)
        return g_new, s_new, u_update(u, s, r, p @ V, s_new)

    return model


#: the arguments of 7.1's step, so that a state changed in place is named
NUMERATOR_ARGS = ("g", "s", "u", "x_tile", "v_tile")
#: a state changed in place, with examples in 7.1's own names (the step may overwrite x_tile, not the state)
NUMERATOR_INPUT_MODIFIED = Mistake(
    INPUT_MODIFIED.name,
    N_(
        "your function wrote into the state it was given (g, s or u), for example with u *= ... or s += ...; "
        "x_tile you may overwrite, the state you may not: build new arrays instead, an expression such as "
        "u_new = u * ... + ... makes a new one"
    ),
)
#: the arguments of 7.2's finish, so that a state changed in place is named
FINISH_ARGS = ("g", "s", "u")
#: a state changed in place, with examples in 7.2's own names
FINISH_INPUT_MODIFIED = Mistake(
    INPUT_MODIFIED.name,
    N_(
        "your function wrote into the state it was given (g, s or u), for example with u /= s[:, None] or "
        "g += np.log(s): build new arrays instead, an expression such as a = u / s[:, None] makes a new one"
    ),
)
NOT_A_NUMERATOR = Mistake(N_("not a triple"), N_("return the three arrays (g_new, s_new, U_new)"))
NUMERATOR_MISTAKES = (
    Mistake(
        N_("divided every step"),
        N_(
            "U is the numerator s A': it is rescaled and accumulated, never divided; the one division by s comes "
            "at the end (exercise 7.2)"
        ),
        (
            _numerator_model(lambda u, s, r, pv, sn: (u * r[:, None] + pv) / sn[:, None]),
            _numerator_model(lambda u, s, r, pv, sn: (u * (s * r)[:, None] + pv) / sn[:, None]),
        ),
    ),
    Mistake(
        N_("no rescale when the max changes"),
        N_("U and s are measured against the running max: when it moves, multiply the old U by e^{g - g_new}"),
        (_numerator_model(lambda u, s, r, pv, sn: u + pv),),
    ),
    Mistake(
        N_("the rescale inverted"),
        N_(
            "the factor is e^{g - g_new} <= 1: the old numerator shrinks (e^{g_new - g} grows it, and is inf for a "
            "row that has seen no key yet)"
        ),
        (
            _numerator_model(lambda u, s, r, pv, sn: u / r[:, None] + pv),
            *(
                _numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, rescale=inverted)
                for inverted in (
                    lambda g, gn: np.exp(gn - g),
                    lambda g, gn: np.exp(max_or_zero(gn) - g),
                    lambda g, gn: np.exp(gn - max_or_zero(g)),
                )
            ),
        ),
    ),
    Mistake(
        N_("the rescale of s missing"),
        N_("s_new = s e^{g - g_new} + rowsum P"),
        (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, s_update=lambda s, r, p: s + p.sum(axis=1)),),
    ),
    Mistake(
        N_("chapter 6's factor s e^{g - g_new} on U"),
        N_(
            "U already holds the factor s (U = s A'): it is rescaled by e^{g - g_new} alone; s e^{g - g_new} is "
            "chapter 6's factor for the normalised A'"
        ),
        (_numerator_model(lambda u, s, r, pv, sn: u * (s * r)[:, None] + pv),),
    ),
    Mistake(
        N_("the tile's max only (the old max forgotten)"),
        N_("the new max is over the old max and the tile: g_new = max(g, rowmax X)"),
        (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, g_of=lambda g, x: x.max(axis=1)),),
    ),
    Mistake(
        N_("P measured against the old max (e^{X - g})"),
        N_(
            "the tile's weights are P = e^{X - g_new}: the old g is -inf before the first tile (e^{X + inf} = "
            "inf), and below the tile's scores whenever the max jumps"
        ),
        (
            _numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, p_of=lambda x, g, gn: np.exp(x - g[:, None])),
            _numerator_model(
                lambda u, s, r, pv, sn: u * r[:, None] + pv, p_of=lambda x, g, gn: np.exp(x - max_or_zero(g)[:, None])
            ),
            # the whole step kept against the old max: P = e^{X - g}, U and s not rescaled
            *(
                _numerator_model(lambda u, s, r, pv, sn: u + pv, rescale=lambda g, gn: np.ones_like(g), p_of=p_of)
                for p_of in (
                    lambda x, g, gn: np.exp(x - g[:, None]),
                    lambda x, g, gn: np.exp(x - max_or_zero(g)[:, None]),
                )
            ),
        ),
    ),
    Mistake(
        N_("P measured against the tile's own max"),
        N_(
            "P = e^{X - m} with m = rowmax X is relative to the tile's max, while U and s are measured against "
            "g_new: use P = e^{X - g_new} (or multiply by e^{m - g_new}) before it is summed and multiplied by V"
        ),
        tuple(
            _numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, p_of=p_of)
            for p_of in (
                lambda x, g, gn: np.exp(x - max_or_zero(x.max(axis=1))[:, None]),
                lambda x, g, gn: np.exp(x - x.max(axis=1)[:, None]),
            )
        ),
    ),
    Mistake(
        N_("no max subtracted (P = e^X)"),
        N_(
            "e^X overflows once a score passes 709 (e^{1000} = inf) and is 0 for scores near -1000: subtract the "
            "running max, P = e^{X - g_new}, and rescale the old U and s by e^{g - g_new}"
        ),
        (
            _numerator_model(
                lambda u, s, r, pv, sn: u + pv, rescale=lambda g, gn: np.ones_like(g), p_of=lambda x, g, gn: np.exp(x)
            ),
            _numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, p_of=lambda x, g, gn: np.exp(x)),
        ),
    ),
    Mistake(
        N_("the old max returned (g, not g_new)"),
        N_(
            "the state returned is the new one: g_new = max(g, rowmax X), the max the new s and U are measured "
            "against; returning the old g leaves the next tile measuring against the wrong max"
        ),
        (
            lambda g, s, u, x, v: (np.asarray(g, dtype=np.float64), *numerator_step_reference(g, s, u, x, v)[1:]),
            lambda g, s, u, x, v: (
                max_or_zero(np.asarray(g, dtype=np.float64)),
                *numerator_step_reference(g, s, u, x, v)[1:],
            ),
        ),
    ),
    Mistake(
        N_("a wrong base (2) instead of e"),
        N_("use np.exp"),
        (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, base=np.exp2),),
    ),
    Mistake(
        N_("the max started at 0"),
        N_(
            "a row that has seen no key has g = -inf, and its new max is the tile's row max even when that is "
            "negative: g_new = max(g, rowmax X), with -inf replaced by 0 only where it is subtracted"
        ),
        (
            *(
                _numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, g_of=g_of)
                for g_of in (
                    lambda g, x: np.maximum(max_or_zero(g), x.max(axis=1)),
                    lambda g, x: np.maximum(np.maximum(g, 0), x.max(axis=1)),
                )
            ),
            # the state's max itself clamped at 0 before the step (g = np.maximum(g, 0)): the rescale too
            lambda g, s, u, x, v: numerator_step_reference(np.maximum(g, 0), s, u, x, v),
        ),
    ),
    scores_clipped(numerator_step_reference),
    NUMERATOR_INPUT_MODIFIED,
    shape_mistake(numerator_step_reference),
    NOT_A_NUMERATOR,
)


@exercise("7.1", NUMERATOR_MISTAKES, solution="numerator_step", property_cases=2)
def check_numerator_step(fn) -> CheckReport:
    """Check ``fn(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new)``, FlashAttention-2's tile step (7.1).

    ``u (B_r, Dv)`` the numerator ``s A'``: ``U_new = U e^{g - g_new} + P V`` with no division. The property
    battery first (:func:`tile_properties`: one row and one key, every score near -1000). The step may overwrite
    ``x_tile``, not ``g``, ``s``, ``u`` (the package's :func:`flashmath.flash.fa2_tile_step` updates its accumulator
    in place: it passes on a copy, as the prompt says). Named mistakes: :data:`NUMERATOR_MISTAKES`.
    """
    rng = np.random.default_rng(7)
    cases = tile_cases(rng, "(g, s, U)")
    report = check_function(
        "check_numerator_step",
        fn,
        cases,
        numerator_step_reference,
        NUMERATOR_MISTAKES,
        n_out=3,
        names=("g_new", "s_new", "U_new"),
        not_answer=NOT_A_NUMERATOR,
        hint=shape_hint,
        properties=tile_properties("(g, s, U)"),
        call=score_tile_copied,
        arg_names=NUMERATOR_ARGS,
        modified_mistake=NUMERATOR_INPUT_MODIFIED,
    )
    inputs_unchanged(
        report,
        fn,
        _("the state given (g, s, U) is left unchanged"),
        cases[2][1],
        always=True,
        arg_names=NUMERATOR_ARGS,
        mistake=NUMERATOR_INPUT_MODIFIED,
    )
    return report


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


NOT_A_PAIR = Mistake(N_("not a pair"), N_("return (A, lse)"))
FINISH_MISTAKES = (
    Mistake(
        N_("a base-2 logsumexp"),
        N_("the logsumexp is natural: g + log(s) with np.log, not np.log2"),
        (_finish_model(lse_of=lambda g, s, u: g + np.log2(s)),),
    ),
    Mistake(
        N_("a base-10 logsumexp"),
        N_("the logsumexp is natural: g + log(s) with np.log, not np.log10"),
        (_finish_model(lse_of=lambda g, s, u: g + np.log10(s)),),
    ),
    Mistake(
        N_("log(s) without g"),
        N_("s is relative to the running max: L = g + log(s)"),
        (_finish_model(lse_of=lambda g, s, u: np.log(s)),),
    ),
    Mistake(
        N_("divided again"),
        N_(
            "U is divided by s exactly once, here at the end: a loop that already divided every step (chapter 6) "
            "must not divide again"
        ),
        (_finish_model(a_of=lambda g, s, u: u / s[:, None] ** 2),),
    ),
    Mistake(
        N_("not divided"),
        N_("A = U / s: the numerator still has to be divided"),
        (_finish_model(a_of=lambda g, s, u: u),),
    ),
    Mistake(
        N_("0 / 0 on a row with no key"),
        N_("a row that saw no key has s = 0 and U = 0: give it A = 0 (and L = -inf), not NaN"),
        (_finish_model(a_of=lambda g, s, u: u / s[:, None]),),
    ),
    Mistake(
        N_("the logsumexp without the shift"),
        N_(
            "e^g leaves float64's range at both ends: it overflows to inf once g > 709.8 (log(e^g s) = inf) and "
            "underflows to 0 once g < -745.2 (log(e^g s) = log 0 = -inf): keep the shift, L = g + log(s)"
        ),
        (_finish_model(lse_of=lambda g, s, u: np.log(np.exp(g) * s)),),
    ),
    Mistake(
        N_("log(1 + s) instead of log(s)"),
        N_(
            "the logsumexp is g + log(s): log1p(s) = log(1 + s) adds 1 to the sum (log1p is for log(1 + x) with x "
            "near 0, not for log(x))"
        ),
        (
            _finish_model(lse_of=lambda g, s, u: g + np.log1p(s)),
            _finish_model(lse_of=lambda g, s, u: np.where(s == 0, -np.inf, g + np.log1p(s))),
        ),
    ),
    Mistake(
        N_("U multiplied by e^g (the shift undone in A)"),
        N_(
            "the shift by g cancels in A = U / s (U and s are both measured against g): divide, A = U / s, with no "
            "factor e^g; the shift stays only in the logsumexp, L = g + log(s)"
        ),
        tuple(
            _finish_model(a_of=a_of)
            for a_of in (
                lambda g, s, u: u * np.exp(max_or_zero(g))[:, None] / np.where(s == 0, 1, s)[:, None],
                lambda g, s, u: u * np.exp(g)[:, None] / s[:, None],
                lambda g, s, u: np.where(
                    (s == 0)[:, None], 0.0, u * np.exp(g)[:, None] / np.where(s == 0, 1, s)[:, None]
                ),
            )
        ),
    ),
    Mistake(
        N_("FlashAttention-2's +inf convention"),
        N_(
            "FlashAttention-2's kernels store L = +inf for a row with no key (so that exp(X - L) = 0 in their "
            "backward); this course uses L = -inf, the log of an empty sum (chapter 8's conventions table)"
        ),
        (_finish_model(lse_of=lambda g, s, u: np.where(s == 0, np.inf, g + np.log(np.where(s == 0, 1, s)))),),
    ),
    Mistake(
        N_("the empty row's logsumexp guarded to 0"),
        N_(
            "the guards g -> 0 and s -> 1 keep the division finite, but a row that saw no key has the logsumexp of "
            "an empty sum, L = log 0 = -inf: use the guards for A only"
        ),
        (_finish_model(lse_of=lambda g, s, u: max_or_zero(g) + np.log(np.where(s == 0, 1, s))),),
    ),
    Mistake(
        N_("s divided along the value columns (no [:, None])"),
        N_(
            "u / s lines s up with U's last axis, the value columns: give s a column axis, u / s[:, None], so "
            "each row is divided by its own sum"
        ),
        (
            _finish_model(a_of=lambda g, s, u: u / np.where(s == 0, 1, s)),
            _finish_model(a_of=lambda g, s, u: u / s),
        ),
    ),
    FINISH_INPUT_MODIFIED,
    shape_mistake(finish_reference),
    NOT_A_PAIR,
)


@exercise("7.2", FINISH_MISTAKES, solution="finish")
def check_finish(fn) -> CheckReport:
    """Check ``fn(g, s, u) -> (a, lse)``, the end of a FlashAttention-2 query tile (7.2): ``A = U / s`` (0 for a row
    with no key) and ``L = g + log(s)`` (natural log; -inf for a row with no key). Property cases first, each a
    phrase of the prompt: one row, every row saw no key, maxima near -1000 (no empty, +inf, NaN or integer case:
    chapter 7 does not teach them). Named: :data:`FINISH_MISTAKES`."""
    rng = np.random.default_rng(72)
    u = rng.standard_normal((3, 2)) * 3
    cases = [
        (_("three rows"), (np.array([0.5, 2.0, -1.0]), np.array([3.0, 1.5, 7.0]), u)),
        (
            _("a row that saw no key (g = -inf, s = 0, U = 0)"),
            (np.array([0.5, -np.inf, 1.0]), np.array([3.0, 0.0, 2.0]), u * np.array([[1.0], [0.0], [1.0]])),
        ),
        (
            _("large maxima (g = 800: e^g overflows float64)"),
            (np.array([800.0, -2.0, 750.0]), np.array([3.0, 1.5, 7.0]), u),
        ),
    ]
    properties = property_cases(
        [
            (_("one row"), (np.array([0.5]), np.array([2.0]), np.array([[3.0]]))),
            (_("every row saw no key"), (np.full(2, -np.inf), np.zeros(2), np.zeros((2, 2)))),
            (_("maxima near -1000"), (np.array([-1000.0, -1002.5]), np.array([2.0, 1.5]), u[:2])),
        ]
    )
    report = check_function(
        "check_finish",
        fn,
        cases,
        finish_reference,
        FINISH_MISTAKES,
        n_out=2,
        names=("A", "lse"),
        not_answer=NOT_A_PAIR,
        hint=shape_hint,
        properties=properties,
        arg_names=FINISH_ARGS,
        modified_mistake=FINISH_INPUT_MODIFIED,
    )
    inputs_unchanged(
        report,
        fn,
        _("the state given (g, s, U) is left unchanged"),
        cases[1][1],
        always=True,
        arg_names=FINISH_ARGS,
        mistake=FINISH_INPUT_MODIFIED,
    )
    return report
