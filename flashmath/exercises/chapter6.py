"""Chapter 6: the tile step (6.1), one key tile for a query tile, the output normalised after the tile.

The checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference (:func:`flashmath.flash.fa1_tile_step`), and names the mistake whose wrong implementation gives
the learner's answer; the catalogue is :data:`TILE_MISTAKES`. The mistake models are written vectorised, as a
learner would write the exercise.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake
from flashmath.exercises._tiles import (
    NOT_A_STATE,
    inputs_unchanged,
    score_tile_copied,
    scores_clipped,
    shape_hint,
    shape_mistake,
    tile_cases,
    tile_properties,
    tile_step_reference,
)
from flashmath.exercises.chapter5 import block_sum_moved
from flashmath.i18n import Filled, aside
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.rowstate import max_or_zero  # the one guard: g = -inf (no key seen yet) measured against 0


def _tile_model(a_update=None, g_of=None, s_update=None, base=np.exp, rescale=None, p_of=None):
    """A wrong tile step: the right one except for the parts given.

    ``g_of(g, x)`` the new max; ``s_update(s, r, p, s_old_g...)``; ``a_update(a, s, r, pv, s_new, x, g, g_new, V)``;
    ``rescale(g, g_new)`` the factor of the old state; ``p_of(x, g, g_new)`` the tile's weights.
    """

    def model(g, s, a, x_tile, v_tile, keep=None):
        g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        if keep is not None:
            x = np.where(keep, x, -np.inf)
        g_new = np.maximum(g, x.max(axis=1)) if g_of is None else g_of(g, x)
        r = base(g - max_or_zero(g_new)) if rescale is None else rescale(g, g_new)
        p = base(x - max_or_zero(g_new)[:, None]) if p_of is None else p_of(x, g, g_new)
        s_new = s * r + p.sum(axis=1) if s_update is None else s_update(s, r, p, g, g_new, x)
        pv = p @ V
        if a_update is None:
            return g_new, s_new, (a * (s * r)[:, None] + pv) / s_new[:, None]
        return g_new, s_new, a_update(a, s, r, pv, s_new, x, g, g_new, V)

    return model


def _row_by_row(block_step):
    """5.2's step for one row, ``block_step(g, s, a, x_block, v_block)``, applied to each row of the tile."""

    def model(g, s, a, x_tile, v_tile):
        rows = [block_step(g[i], s[i], a[i], x_tile[i], v_tile) for i in range(len(g))]
        return tuple(np.array([row[k] for row in rows], dtype=np.float64) for k in range(3))

    return model


#: the arguments of 6.1's step, so that a state changed in place is named
TILE_ARGS = ("g", "s", "a", "x_tile", "v_tile")
#: a state changed in place, with examples in 6.1's own names (the step may overwrite x_tile, not the state)
TILE_INPUT_MODIFIED = Mistake(
    INPUT_MODIFIED.name,
    N_(
        "your function wrote into the state it was given (g, s or a), for example with a *= ... or s += ...; "
        "x_tile you may overwrite, the state you may not: build new arrays instead, an expression such as "
        "a_new = a * ... + ... makes a new one"
    ),
)

#: the update rule quoted by several diagnoses, translated where it is shown (a Filled value, see flashmath.i18n)
TILE_RULE = Filled(
    N_("A'_new = A' s e^{g - g_new} / s_new + P V / s_new, with P = e^{X - g_new} and g_new = max(g, rowmax X)")
)
TILE_MISTAKES = (
    Mistake(
        N_("the old output not corrected"),
        N_("A' must be multiplied by s e^{g - g_new} / s_new: the old average gives up the weight the new keys take"),
        (_tile_model(lambda a, s, r, pv, sn, *_: a + pv / sn[:, None]),),
    ),
    Mistake(
        N_("no rescale when the max changes"),
        N_(
            "the old sum and the old output are measured against the old max g: multiply both s and the old "
            "output's weight by e^{g - g_new} (A' is normalised, so its weight is s e^{g - g_new} / s_new)"
        ),
        (
            _tile_model(
                lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None],
                s_update=lambda s, r, p, *_: s + p.sum(axis=1),
            ),
            _tile_model(lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None]),
        ),
    ),
    Mistake(
        N_("the rescale of s missing"),
        N_("s_new = s e^{g - g_new} + rowsum P: the old sum is relative to the old max"),
        (_tile_model(s_update=lambda s, r, p, *_: s + p.sum(axis=1)),),
    ),
    Mistake(
        N_("divided by the old sum"),
        Filled(N_("both terms are divided by the new sum s_new: {rule}"), rule=TILE_RULE),
        (
            _tile_model(lambda a, s, r, pv, sn, *_: a * r[:, None] + pv / s[:, None]),
            # both terms over the old sum, with the first tile's s = 0 guarded to 1
            _tile_model(lambda a, s, r, pv, sn, *_: (a * (s * r)[:, None] + pv) / np.where(s == 0, 1, s)[:, None]),
        ),
    ),
    Mistake(
        N_("P V not divided by s_new"),
        Filled(N_("the new tile's term is divided by s_new too: {rule}"), rule=TILE_RULE),
        (_tile_model(lambda a, s, r, pv, sn, *_: a * (s * r / sn)[:, None] + pv),),
    ),
    Mistake(
        N_("the factor s missing from the old term"),
        Filled(
            N_("A' is an average: A' s is the old numerator, which is rescaled and added to P V: {rule}"),
            rule=TILE_RULE,
        ),
        (_tile_model(lambda a, s, r, pv, sn, *_: (a * r[:, None] + pv) / sn[:, None]),),
    ),
    Mistake(
        N_("the factor s / s_new missing from the old term"),
        Filled(
            N_(
                "A' is an average over the old total weight s, which becomes a share of the new total s_new, so the "
                "old term takes the factor s / s_new besides the rescale (if s was updated before this line, "
                "s_new / s_new cancels: keep the old s until A' is updated): {rule}"
            ),
            rule=TILE_RULE,
        ),
        (_tile_model(lambda a, s, r, pv, sn, *_: a * r[:, None] + pv / sn[:, None]),),
    ),
    Mistake(
        N_("P measured against the tile's own max"),
        N_(
            "P = e^{X - m} with m = rowmax X is relative to the tile's max: measured against g_new it is "
            "e^{X - g_new} (or multiply by e^{m - g_new}) before it is summed and multiplied by V"
        ),
        (
            _tile_model(p_of=lambda x, g, gn: np.exp(x - max_or_zero(x.max(axis=1))[:, None])),
            _tile_model(p_of=lambda x, g, gn: np.exp(x - x.max(axis=1)[:, None])),
        ),
    ),
    Mistake(
        N_("the tile's numerator not moved to the new max"),
        N_(
            "in Algorithm 1's form the tile's sum rowsum e^{X - m} (m = rowmax X) was moved to the new max by "
            "e^{m - g_new}, but not its numerator e^{X - m} V: multiply it by e^{m - g_new} too (or take P = "
            "e^{X - g_new} at once); it matters in a row whose tile max m stays below g_new"
        ),
        (_row_by_row(block_sum_moved),),  # 5.2's model of the same mistake, row by row
    ),
    Mistake(
        N_("the row max not given a column axis ([:, None] missing)"),
        N_(
            "X - g_new subtracts g_new[j] from column j: on a square tile (B_r = B_c) numpy broadcasts it without "
            "an error, on the other tiles it raises; each row's max belongs to its own row: X - g_new[:, None]"
        ),
        (_tile_model(p_of=lambda x, g, gn: np.exp(x - max_or_zero(gn))),),
    ),
    Mistake(
        N_("the numerator returned (not divided by s_new)"),
        N_(
            "A' s e^{g - g_new} + P V is the unnormalised numerator s_new A'_new: both terms are right, only the "
            "division is missing: A'_new = (A' s e^{g - g_new} + P V) / s_new"
        ),
        (_tile_model(lambda a, s, r, pv, *_: a * (s * r)[:, None] + pv),),
    ),
    Mistake(
        N_("FlashAttention-2's update (not divided)"),
        N_(
            "A' e^{g - g_new} + P V is the update of the next chapter, which keeps the numerator s A'; here A' is "
            "normalised after every tile: A'_new = (A' s e^{g - g_new} + P V) / s_new"
        ),
        (_tile_model(lambda a, s, r, pv, *_: a * r[:, None] + pv),),
    ),
    Mistake(
        N_("divided twice"),
        Filled(N_("each term is divided by s_new once: {rule}"), rule=TILE_RULE),
        (_tile_model(lambda a, s, r, pv, sn, *_: (a * (s * r)[:, None] + pv) / sn[:, None] ** 2),),
    ),
    Mistake(
        N_("the max over the whole tile"),
        N_(
            "each row needs its own max, x_tile.max(axis=1), so g_new = np.maximum(g, x_tile.max(axis=1)), "
            "subtracted from its own row: x_tile - g_new[:, None]"
        ),
        (
            _tile_model(g_of=lambda g, x: np.maximum(g, x.max())),
            # the tile max taken as a number, so g_new subtracted without a column axis (numpy raises unless the
            # tile is square)
            _tile_model(g_of=lambda g, x: np.maximum(g, x.max()), p_of=lambda x, g, gn: np.exp(x - max_or_zero(gn))),
            # the division guarded as in fa1_tile_step (np.where(s_new == 0, 1, s_new)): a row far below the tile
            # max has s_new = 0 and gives A' = 0, not NaN
            _tile_model(
                g_of=lambda g, x: np.maximum(g, x.max()),
                a_update=lambda a, s, r, pv, sn, *_: (a * (s * r)[:, None] + pv) / np.where(sn == 0, 1, sn)[:, None],
            ),
        ),
    ),
    Mistake(
        N_("the max over the wrong axis"),
        N_(
            "x_tile is (B_r, B_c), one row per query: x_tile.max(axis=0) is the max of each key column, one per "
            "key; each row needs the max over its own keys, x_tile.max(axis=1), so g_new = np.maximum(g, "
            "x_tile.max(axis=1))"
        ),
        (
            _tile_model(g_of=lambda g, x: np.maximum(g, x.max(axis=0))),
            # the column maxima subtracted without a column axis too
            _tile_model(
                g_of=lambda g, x: np.maximum(g, x.max(axis=0)), p_of=lambda x, g, gn: np.exp(x - max_or_zero(gn))
            ),
            # Algorithm 1's form, tile max first, with the tile max over the columns: P = e^{X - m} takes it
            # column by column (no [:, None] is needed for that), then e^{m - g_new} per row
            _tile_model(
                g_of=lambda g, x: np.maximum(g, x.max(axis=0)),
                p_of=lambda x, g, gn: np.exp(x - x.max(axis=0)) * np.exp(x.max(axis=0) - gn)[:, None],
            ),
            # the column maxima cut to the number of rows, so that the shapes fit (B_c >= B_r)
            _tile_model(g_of=lambda g, x: np.maximum(g, x.max(axis=0)[: len(g)])),
        ),
    ),
    Mistake(
        N_("the row sum over the wrong axis"),
        N_("P is (B_r, B_c), one row per query: its row sums are P.sum(axis=1)"),
        (_tile_model(s_update=lambda s, r, p, *_: s * r + p.sum(axis=0)),),
    ),
    Mistake(
        N_("the tile's max only (the old max forgotten)"),
        N_("the new max is over the old max and the tile: g_new = max(g, rowmax X)"),
        (_tile_model(g_of=lambda g, x: x.max(axis=1)),),
    ),
    Mistake(
        N_("a wrong base (2) instead of e"), N_("use the natural exponential np.exp"), (_tile_model(base=np.exp2),)
    ),
    Mistake(
        N_("P measured against the old max (e^{X - g})"),
        N_(
            "the tile's weights are P = e^{X - g_new}: the old g is -inf before the first tile (e^{X + inf} = "
            "inf), and below the tile's scores whenever the max jumps"
        ),
        (
            _tile_model(p_of=lambda x, g, gn: np.exp(x - g[:, None])),
            _tile_model(p_of=lambda x, g, gn: np.exp(x - max_or_zero(g)[:, None])),
            # the whole step kept against the old max: P = e^{X - g}, the old state not rescaled (r = 1)
            _tile_model(p_of=lambda x, g, gn: np.exp(x - g[:, None]), rescale=lambda g, gn: np.ones_like(g)),
            _tile_model(
                p_of=lambda x, g, gn: np.exp(x - max_or_zero(g)[:, None]), rescale=lambda g, gn: np.ones_like(g)
            ),
        ),
    ),
    Mistake(
        N_("no max subtracted (P = e^X)"),
        N_(
            "e^X overflows once a score passes 709 (e^{1000} = inf) and is 0 for scores near -1000: subtract the "
            "running max, P = e^{X - g_new}, and rescale the old state by e^{g - g_new}"
        ),
        (
            _tile_model(p_of=lambda x, g, gn: np.exp(x), rescale=lambda g, gn: np.ones_like(g)),
            _tile_model(p_of=lambda x, g, gn: np.exp(x)),
        ),
    ),
    Mistake(
        N_("the old max returned (g, not g_new)"),
        N_(
            "the state returned is the new one: g_new = max(g, rowmax X), the max the new s and A' are measured "
            "against; returning the old g leaves the next tile measuring against the wrong max"
        ),
        (
            lambda g, s, a, x, v: (np.asarray(g, dtype=np.float64), *tile_step_reference(g, s, a, x, v)[1:]),
            lambda g, s, a, x, v: (
                max_or_zero(np.asarray(g, dtype=np.float64)),
                *tile_step_reference(g, s, a, x, v)[1:],
            ),
        ),
    ),
    Mistake(
        N_("the rescale inverted (e^{g_new - g})"),
        N_(
            "the old state is measured against the old max g; measured against the larger g_new it is multiplied by "
            "e^{g - g_new} (≤ 1), not by e^{g_new - g} (which is inf for a row that has seen no key yet)"
        ),
        (
            _tile_model(rescale=lambda g, gn: np.exp(gn - g)),
            _tile_model(rescale=lambda g, gn: np.exp(max_or_zero(gn) - g)),
            _tile_model(rescale=lambda g, gn: np.exp(gn - max_or_zero(g))),
        ),
    ),
    Mistake(
        N_("the max started at 0"),
        N_(
            "a row that has seen no key has g = -inf, and its new max is the tile's row max even when that is "
            "negative: g_new = max(g, rowmax X), with -inf replaced by 0 only where it is subtracted"
        ),
        (
            _tile_model(g_of=lambda g, x: np.maximum(max_or_zero(g), x.max(axis=1))),
            _tile_model(g_of=lambda g, x: np.maximum(np.maximum(g, 0), x.max(axis=1))),
            # the state's max itself clamped at 0 before the step (g = np.maximum(g, 0)): the rescale too
            lambda g, s, a, x, v: tile_step_reference(np.maximum(g, 0), s, a, x, v),
        ),
    ),
    scores_clipped(tile_step_reference),
    TILE_INPUT_MODIFIED,
    shape_mistake(tile_step_reference),
    NOT_A_STATE,
)


def _fold_tiles(report: CheckReport, fn, name: str) -> None:
    """Fold the learner's step over the key tiles of a real query tile: it must give the attention output."""
    from flashmath.attention import attention
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, _row = heads.demo_rows[0]
    q, k, v = (arr[layer, head].astype(np.float64) for arr in (heads.q, heads.k, heads.v))
    q_tile = q[32:40] / np.sqrt(q.shape[1])
    g, s, a = np.full(8, -np.inf), np.zeros(8), np.zeros((8, v.shape[1]))
    try:
        with np.errstate(all="ignore"):
            for c0 in range(0, k.shape[0], 10):
                g, s, a = fn(g, s, a, q_tile @ k[c0 : c0 + 10].T, v[c0 : c0 + 10])
        ok = np.allclose(np.asarray(a, dtype=np.float64), attention(q, k, v)[32:40], rtol=1e-9, atol=1e-12)
    except NotImplementedError:
        report.add(name, False, _("not implemented yet"))
        return
    except Exception as exc:  # the hint of the cases above, for the same shapes here: (8,) and (10,)
        raised = _("raised {error}: {text}").format(error=type(exc).__name__, text=exc)
        hint = shape_hint(exc)
        report.add(name, False, aside(hint, raised) if hint else raised)  # the hint first, as _report.run
        return
    report.add(name, ok, "" if ok else _("the folded output differs from attention (the cases above say why)"))


@exercise("6.1", TILE_MISTAKES, solution="tile_step", property_cases=2)
def check_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile) -> (g_new, s_new, a_new)``, one key tile for a query tile (exercise 6.1).

    ``g, s (B_r,)``, ``a (B_r, Dv)`` the rows' state; ``x_tile (B_r, B_c)`` the scaled scores; ``v_tile (B_c, Dv)``.
    The output is normalised after the tile (chapter 6). The property battery first (:func:`tile_properties`: one
    row and one key, every score near -1000). The step may overwrite ``x_tile`` (the package's
    :func:`flashmath.flash.fa1_tile_step` does), not the state. Named mistakes: :data:`TILE_MISTAKES`, each only
    when its model explains every failing case.
    """
    rng = np.random.default_rng(6)
    cases = tile_cases(rng)
    report = check_function(
        "check_tile_step",
        fn,
        cases,
        tile_step_reference,
        TILE_MISTAKES,
        n_out=3,
        names=("g_new", "s_new", "A'_new"),
        not_answer=NOT_A_STATE,
        hint=shape_hint,
        properties=tile_properties(),
        call=score_tile_copied,
        arg_names=TILE_ARGS,
        modified_mistake=TILE_INPUT_MODIFIED,
    )
    inputs_unchanged(
        report,
        fn,
        _("the state given (g, s, A') is left unchanged"),
        cases[2][1],
        always=True,
        arg_names=TILE_ARGS,
        mistake=TILE_INPUT_MODIFIED,
    )
    _fold_tiles(report, fn, _("a real query tile folded over 5 key tiles gives the attention output"))
    return report
