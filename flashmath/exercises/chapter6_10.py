"""Chapters 6-10: the tile step (6.1), FlashAttention-2's numerator and finish (7.1, 7.2), the causal alignment and
the masked tile step (8.1, 8.2), and merging split-KV states (10.1).

Each checker runs the learner's function on cases where a classic mistake makes a difference, compares with the
package's reference, and names the mistake whose wrong implementation gives the learner's answer. The mistake
models are written vectorised, as a learner would write the exercise; the catalogues are the ``*_MISTAKES`` tuples.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from flashmath.exercises._cases import BOOL_OUT, check_function, property_cases
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake, modified
from flashmath.flash import fa1_tile_step, fa2_tile_step
from flashmath.i18n import Filled
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.rowstate import max_or_zero  # the one guard: g = -inf (no key seen yet) measured against 0

# ------------------------------------------------------------------------------------------------------------------
# What every checker of chapters 6-12 shares: raw shape errors explained, an answer of the wrong shape named, the
# inputs checked for changes in place
# ------------------------------------------------------------------------------------------------------------------


def shape_hint(exc) -> str | None:
    """What a broadcast or shape error raised by the learner's numpy code probably means (``run``'s ``hint``)."""
    text = str(exc)
    if "broadcast" in text:
        shapes = re.findall(r"\(([\d, ]*)\)", text)
        dims = [tuple(int(d) for d in s.replace(" ", "").split(",") if d) for s in shapes]
        vector = next((d for d in dims if len(d) == 1), None)
        matrix = next((d for d in dims if len(d) == 2), None)
        if vector and matrix and vector[0] == matrix[0] != matrix[1]:
            return _("a per-row vector of shape {vector} meets a {matrix} array: numpy lines up the last axes, so "
                     "give the vector a column axis, v[:, None] (shape ({rows}, 1)), to scale each row").format(
                         vector=vector, matrix=matrix, rows=vector[0])
        return (_("two arrays whose shapes do not line up: numpy matches shapes from the last axis; a per-row "
                  "quantity (B_r,) needs [:, None] to act on a (B_r, Dv) array, and X is (B_r, B_c), V is (B_c, Dv)"))
    if "matmul" in text or "shapes" in text and "not aligned" in text:
        return (_("a matrix product whose inner sizes differ: X (B_r, B_c) @ V (B_c, Dv) and Q (N, D) @ K^T (D, M); "
                  "check which array needs .T"))
    if "index" in text and "out of bounds" in text:
        return _("an index past the end of an axis: check which axis holds rows (queries) and which columns (keys)")
    return None


def _reshaped_equal(answer, wrong) -> bool:
    """The answer holds the right numbers in another shape (keepdims, a missing [:, None], a flattened array)."""
    a, b = (x if isinstance(x, tuple) else (x,) for x in (answer, wrong))
    if len(a) != len(b):
        return False
    differs = False
    for x, y in zip(a, b, strict=False):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.size != y.size or not np.allclose(x.ravel(), y.ravel(), rtol=1e-9, atol=1e-12, equal_nan=True):
            return False
        differs |= x.shape != y.shape
    return differs


def shape_mistake(reference) -> Mistake:
    """The mistake of right numbers in a wrong shape, for a checker whose right answer is ``reference(*args)``."""
    return Mistake(N_("an answer of the wrong shape"),
                   N_("the numbers are right but an array has another shape: keep per-row quantities 1-D (B_r,) (no "
                      "keepdims=True, or .ravel() them) and outputs (B_r, Dv)"), (reference,), compare=_reshaped_equal)


def inputs_unchanged(report: CheckReport, fn, name: str, args, which=(0, 1, 2), always: bool = False) -> None:
    """Run ``fn`` once more on copies of ``args`` and fail the case ``name`` when it changed one of the arguments
    ``which`` (the state: a tile step may overwrite its score tile, as the package's does) in place. With
    ``always``, a function that raises or returns nothing fails the case too (so that the number of cases does not
    depend on the answer); otherwise the case is left out (the cases above already say why)."""
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*copies)
    except NotImplementedError:
        out, why = None, _("not implemented yet")
    except Exception as exc:  # noqa: BLE001 - any error of the learner's code is reported, not raised
        out, why = None, _("not checked: the function raised {error} (see the cases above)").format(
            error=type(exc).__name__)
    else:
        why = _("not checked: the function returned nothing")
    if out is None:
        if always:
            report.add(name, False, why)
        return
    changed = [i for i, (a, b) in enumerate(zip(args, copies, strict=False))
               if i in which and isinstance(a, np.ndarray) and modified(a, b)]
    report.add(name, not changed, "" if not changed else _("argument {k} was changed: {message}").format(
        k=changed[0] + 1, message=INPUT_MODIFIED.message()))


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


TILE_RULE = "A'_new = A' s e^{g - g_new} / s_new + P V / s_new, with P = e^{X - g_new} and g_new = max(g, rowmax X)"
NOT_A_STATE = Mistake(N_("not a triple"), N_("return the three arrays (g_new, s_new, A'_new)"))
TILE_MISTAKES = (
    Mistake(N_("the old output not corrected"),
            N_("A' must be multiplied by s e^{g - g_new} / s_new: the old average gives up the weight the new keys "
               "take"), (_tile_model(lambda a, s, r, pv, sn, *_: a + pv / sn[:, None]),)),
    Mistake(N_("no rescale when the max changes"),
            N_("the old output and sum are relative to the old max g: multiply them by e^{g - g_new}"),
            (_tile_model(lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None],
                         s_update=lambda s, r, p, *_: s + p.sum(axis=1)),
             _tile_model(lambda a, s, r, pv, sn, *_: (a * s[:, None] + pv) / sn[:, None]))),
    Mistake(N_("the rescale of s missing"),
            N_("s_new = s e^{g - g_new} + rowsum P: the old sum is relative to the old max"),
            (_tile_model(s_update=lambda s, r, p, *_: s + p.sum(axis=1)),)),
    Mistake(N_("divided by the old sum"),
            Filled(N_("both terms are divided by the new sum s_new: {rule}"), rule=TILE_RULE),
            (_tile_model(lambda a, s, r, pv, sn, *_: a * r[:, None] + pv / s[:, None]),)),
    Mistake(N_("FlashAttention-2's update (not divided)"),
            N_("A' r + P V is the numerator s A' that the next chapter keeps; here the output is normalised after "
               "every tile: divide by s_new"), (_tile_model(lambda a, s, r, pv, *_: a * r[:, None] + pv),)),
    Mistake(N_("divided twice"), Filled(N_("each term is divided by s_new once: {rule}"), rule=TILE_RULE),
            (_tile_model(lambda a, s, r, pv, sn, *_: (a * (s * r)[:, None] + pv) / sn[:, None] ** 2),)),
    Mistake(N_("the max over the whole tile"),
            N_("each row has its own max: g_new = max(g, X.max(axis=1)), not X.max()"),
            (_tile_model(g_of=lambda g, x: np.maximum(g, x.max())),)),
    Mistake(N_("the max over the wrong axis"), N_("X is (B_r, B_c), one row per query: the row max is X.max(axis=1)"),
            (_tile_model(g_of=lambda g, x: np.maximum(g, x.max(axis=0))),)),
    Mistake(N_("the tile's max only (the old max forgotten)"),
            N_("the new max is over the old max and the tile: g_new = max(g, rowmax X)"),
            (_tile_model(g_of=lambda g, x: x.max(axis=1)),)),
    Mistake(N_("a wrong base (2) instead of e"), N_("use the natural exponential np.exp"),
            (_tile_model(base=np.exp2),)),
    Mistake(N_("P measured against the old max (e^{X - g})"),
            N_("the tile's weights are P = e^{X - g_new}: the old g is -inf before the first tile (e^{X + inf} = "
               "inf), and below the tile's scores whenever the max jumps"),
            (_tile_model(p_of=lambda x, g, gn: np.exp(x - g[:, None])),
             _tile_model(p_of=lambda x, g, gn: np.exp(x - max_or_zero(g)[:, None])))),
    Mistake(N_("the rescale inverted (e^{g_new - g})"),
            N_("the old state is measured against the old max g; against the larger g_new it shrinks by e^{g - g_new} "
               "<= 1, not e^{g_new - g} (which is inf for a row that has seen no key yet)"),
            (_tile_model(rescale=lambda g, gn: np.exp(gn - g)),
             _tile_model(rescale=lambda g, gn: np.exp(max_or_zero(gn) - g)),
             _tile_model(rescale=lambda g, gn: np.exp(gn - max_or_zero(g))))),
    Mistake(N_("the max started at 0"),
            N_("a row that has seen no key has g = -inf, and its new max is the tile's row max even when that is "
               "negative: g_new = max(g, rowmax X), with -inf replaced by 0 only where it is subtracted"),
            (_tile_model(g_of=lambda g, x: np.maximum(max_or_zero(g), x.max(axis=1))),
             _tile_model(g_of=lambda g, x: np.maximum(np.maximum(g, 0), x.max(axis=1))))),
    INPUT_MODIFIED,
    shape_mistake(tile_step_reference),
    NOT_A_STATE,
)


def _tile_cases(rng, state: str = "(g, s, A')"):
    a = rng.standard_normal((3, 2))
    V = rng.standard_normal((4, 2))
    X = rng.standard_normal((3, 4))
    return [
        (_("the first tile, from the empty state {state} = (-inf, 0, 0)").format(state=state),
         (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V)),
        (_("every row's max holds (old max 3)"), (np.full(3, 3.0), np.array([1.5, 2.0, 1.0]), a, X, V)),
        (_("the max jumps in some rows only"), (np.array([0.5, 3.0, -1.0]), np.array([1.5, 2.0, 1.0]), a, X, V)),
        (_("rows with maxima far apart (a tile max of 1000 in row 1)"),
         (np.array([0.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0]), a, X + np.array([[0.0], [1000.0], [0.0]]), V)),
        (_("a square tile (B_r = B_c = 4)"), (np.array([0.5, 3.0, -1.0, 0.0]), np.array([1.5, 2.0, 1.0, 1.0]),
                                          rng.standard_normal((4, 2)), rng.standard_normal((4, 4)), V)),
        (_("the first tile, every score negative (row maxima below 0)"),
         (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X - 6.0, V)),
    ]


def _tile_properties(state: str = "(g, s, A')", masked: bool = False):
    """The edge cases of a tile step (6.1, 7.1): ``[(what, (g, s, a, x_tile, v_tile))]``, ``a`` the output or the
    numerator. A tile of no rows; one row and one key; a score of +inf (its row is NaN: inf - inf); a NaN score (its
    row is NaN); integer scores, values, sums and outputs (the maxima, which may be -inf, stay floats); scores all
    far below 0. With ``masked`` (8.2), a row whose tile is all -inf (it keeps its state): chapters 6 and 7 have no
    mask, and FlashAttention's Algorithm 1 as written gives such a row NaN. No float16 case: these steps are
    checked in float64 (chapter 9 measures float16)."""
    g, s = np.array([0.5, 2.0, -1.0]), np.array([1.5, 2.0, 1.0])
    a = np.array([[0.5, -1.0], [2.0, 0.25], [-0.5, 1.0]])
    X = np.array([[0.3, -1.2, 2.2, 0.1], [1.0, 0.4, -0.3, 2.5], [-2.0, 0.7, 1.1, -0.4]])
    V = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5], [0.75, -1.0]])
    inf_row, pos_inf, nan = X.copy(), X.copy(), X.copy()
    inf_row[1] = -np.inf
    pos_inf[0, 2] = np.inf
    nan[2, 1] = np.nan
    cases = [
        (_("the empty input: a tile of no rows gives an empty {state}").format(state=state),
         (np.zeros(0), np.zeros(0), np.zeros((0, 2)), np.zeros((0, 4)), V)),
        (_("one element: one row, one key, one value dimension"),
         (np.array([-np.inf]), np.zeros(1), np.zeros((1, 1)), np.array([[0.7]]), np.array([[2.0]]))),
        (_("+inf: a score of +inf makes its row NaN (inf - inf), not a clipped number"), (g, s, a, pos_inf, V)),
        (_("NaN propagates: a NaN score makes its row NaN (never silently 0)"), (g, s, a, nan, V)),
        (_("integer input: integer scores, values, sums and outputs give floats out"),
         (np.array([1.0, 2.0, 0.0]), np.array([2, 1, 3]), np.array([[1, 0], [2, 1], [0, 3]]),
          np.array([[0, 3, 1, 2], [1, 1, 0, 4], [2, 0, 1, 1]]), np.array([[1, 0], [0, 2], [3, 1], [1, 1]]))),
        (_("negative-only input: every score and max near -1000"),
         (np.array([-1000.5, -998.0, -1003.0]), s, a, X - 1000.0, V)),
    ]
    if masked:
        cases.insert(2, (_("an all -inf row (kept keys scoring -inf): row 1 keeps its {state}").format(state=state),
                         (g, s, a, inf_row, V)))
    return property_cases(cases)


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
                g, s, a = fn(g, s, a, q_tile @ k[c0:c0 + 10].T, v[c0:c0 + 10])
        ok = np.allclose(np.asarray(a, dtype=np.float64), attention(q, k, v)[32:40], rtol=1e-9, atol=1e-12)
    except NotImplementedError:
        report.add(name, False, _("not implemented yet"))
        return
    except Exception as exc:
        report.add(name, False, _("raised {error}: {text}").format(error=type(exc).__name__, text=exc))
        return
    report.add(name, ok, "" if ok else _("the folded output differs from attention (the cases above say why)"))


def check_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile) -> (g_new, s_new, a_new)``, one key tile for a query tile (exercise 6.1).

    ``g, s (B_r,)``, ``a (B_r, Dv)`` the rows' state; ``x_tile (B_r, B_c)`` the scaled scores; ``v_tile (B_c, Dv)``.
    The output is normalised after the tile (chapter 6). The property battery first (:func:`_tile_properties`).
    Named mistakes: :data:`TILE_MISTAKES`.
    """
    rng = np.random.default_rng(6)
    cases = _tile_cases(rng)
    report = check_function("check_tile_step", fn, cases, tile_step_reference, TILE_MISTAKES, n_out=3,
                            names=("g_new", "s_new", "A'_new"), not_answer=NOT_A_STATE, hint=shape_hint,
                            properties=_tile_properties())
    inputs_unchanged(report, fn, _("the state given (g, s, A') is left unchanged"), cases[2][1], always=True)
    _fold_tiles(report, fn, _("a real query tile folded over 5 key tiles gives the attention output"))
    return report


def _absent_terms(p, keep, V):
    """``P V`` with the masked terms selected away (the right way)."""
    return np.where(keep[:, :, None], p[:, :, None] * V[None, :, :], 0.0).sum(axis=1)


def _masked_model(score=None, term=None, guard=True, fill=None, mask_of=None):
    """A wrong masked tile step: ``score(x, keep)`` the masked scores, ``mask_of(keep)`` the mask applied."""
    def model(g, s, a, x_tile, v_tile, keep):
        g, s, a = (np.asarray(t, dtype=np.float64) for t in (g, s, a))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        keep = keep if mask_of is None else np.broadcast_to(mask_of(keep), keep.shape)
        x = np.where(keep, x, -np.inf if fill is None else fill) if score is None else score(x, keep)
        g_new = np.maximum(g, x.max(axis=1))
        ref = max_or_zero(g_new) if guard else g_new
        r, p = np.exp(g - ref), np.exp(x - ref[:, None])
        s_new = s * r + p.sum(axis=1)
        pv = (p * keep) @ V if term is None else term(p, keep, V)
        return g_new, s_new, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return model


MASKED_MISTAKES = (
    Mistake(N_("masked terms multiplied by 0 (0 * NaN)"),
            N_("a masked key's weight is 0, but 0 * NaN is NaN: select masked terms away with np.where instead of "
               "multiplying P by the mask"), (_masked_model(), _masked_model(term=lambda p, keep, V: p @ V))),
    Mistake(N_("-inf - (-inf) on a masked prefix"),
            N_("while a row has seen no key its max is -inf, and e^{g - g_new} = e^{-inf + inf} is NaN: subtract 0 "
               "instead of -inf (np.where(g_new == -np.inf, 0, g_new))"),
            (_masked_model(term=_absent_terms, guard=False),)),
    Mistake(N_("a finite fill value instead of -inf"),
            N_("a masked score is -inf, not a large negative number: with a fill a fully masked row averages the "
               "masked keys' values (and keeps a finite max)"),
            tuple(_masked_model(fill=fill, term=term) for fill in (-1e9, -1e4)
                  for term in (lambda p, keep, V: p @ V, _absent_terms))
            + (tile_step_reference,), compare=lambda answer, right: _finite_fill(answer, right)),
    Mistake(N_("the mask added to the scores (NaN + -inf)"),
            N_("adding a 0/-inf bias keeps what a masked score holds: NaN + (-inf) is NaN and inf + (-inf) is NaN. "
               "Select masked scores away: np.where(keep, X, -np.inf)"),
            tuple(_masked_model(score=lambda x, keep: x + np.where(keep, 0.0, -np.inf), term=term)
                  for term in (None, _absent_terms, lambda p, keep, V: p @ V))),
    Mistake(N_("a per-column mask"),
            N_("keep is (B_r, B_c), one entry per (query, key) pair: a causal or per-row mask differs from row to "
               "row, so mask each pair, not whole columns"),
            tuple(_masked_model(mask_of=mask_of, term=term) for mask_of in (lambda k: k.all(axis=0),
                                                                           lambda k: k.any(axis=0), lambda k: k[0])
                  for term in (None, _absent_terms))),
    INPUT_MODIFIED,
    shape_mistake(tile_step_reference),
    NOT_A_STATE,
)


def _finite_fill(answer, right) -> bool:
    """The answer gives a row with no key a finite, very negative max where the right one is -inf."""
    if answer is None or not isinstance(answer, tuple) or not isinstance(right, tuple):
        return False
    try:
        g, g_right = np.asarray(answer[0], np.float64), np.asarray(right[0], np.float64)
        empty = np.isneginf(g_right)
        return bool(g.shape == g_right.shape and empty.any() and np.all(np.isfinite(g[empty]))
                    and np.all(g[empty] <= -50))
    except Exception:
        return False


def _masked_properties(keep):
    """The edge cases of the masked tile step (8.2): the tile step's (:func:`_tile_properties`), each with a mask
    (``keep``; every pair kept for the +inf and NaN cases and for tiles of another shape), and a row whose kept
    keys all score -inf."""
    cases = []
    for name, (g, s, a, x, V) in _tile_properties(masked=True):
        mask = keep if x.shape == keep.shape else np.ones(x.shape, bool)
        if np.isnan(x).any() or np.isposinf(x).any():  # a kept +inf or NaN: masked ones are the ordinary cases
            mask = np.ones(x.shape, bool)
        cases.append((name, (g, s, a, x, V, mask)))
    return cases


def check_masked_tile_step(fn) -> CheckReport:
    """Check ``fn(g, s, a, x_tile, v_tile, keep) -> (g_new, s_new, a_new)``: the tile step with a mask (8.2).

    ``keep (B_r, B_c)`` boolean, True = attend. A masked key is absent whatever its score and value row hold (NaN
    included); a row that has seen no key keeps ``(-inf, 0, 0)``. The property battery first
    (:func:`_masked_properties`). Named mistakes: :data:`MASKED_MISTAKES`.
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
    X_bad = X.copy()
    X_bad[0, 2], X_bad[1, 1], X_bad[2, 3] = np.nan, np.inf, np.nan  # masked pairs only
    g0, s0 = np.array([0.5, 1.0, -1.0]), np.array([1.0, 2.0, 1.0])
    cases = [
        (_("a mask, every key finite"), (g0, s0, a, X, V, keep)),
        (_("NaN in the value row of a key masked for every row"), (g0, s0, a, X, V_nan, keep)),
        (_("+inf in the value row of a key masked for every row"), (g0, s0, a, X, V_inf, keep)),
        (_("NaN and +inf in masked scores"), (g0, s0, a, X_bad, V, keep)),
        (_("rows that have seen no key and still see none (a masked prefix)"),
         (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V, empty)),
    ]
    report = check_function("check_masked_tile_step", fn, cases, tile_step_reference, MASKED_MISTAKES, n_out=3,
                            names=("g_new", "s_new", "A'_new"), not_answer=NOT_A_STATE, hint=shape_hint,
                            properties=_masked_properties(keep))
    inputs_unchanged(report, fn, _("the state given (g, s, A') is left unchanged"), cases[3][1])
    return report


# ------------------------------------------------------------------------------------------------------------------
# 7.1 the numerator step and 7.2 the finish
# ------------------------------------------------------------------------------------------------------------------


def numerator_step_reference(g, s, u, x_tile, v_tile):
    """FlashAttention-2's step: ``U_new = U e^{g - g_new} + P V``, no division: the package's own step,
    :func:`flashmath.flash.fa2_tile_step`, in float64 (on copies: it updates its accumulator in place)."""
    g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
    x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
    return fa2_tile_step(g, s, u.copy(), x.copy(), V, None)


def _numerator_model(u_update=None, s_update=None, base=np.exp, rescale=None, g_of=None):
    def model(g, s, u, x_tile, v_tile):
        g, s, u = (np.asarray(t, dtype=np.float64) for t in (g, s, u))
        x, V = np.asarray(x_tile, dtype=np.float64), np.asarray(v_tile, dtype=np.float64)
        g_new = np.maximum(g, x.max(axis=1)) if g_of is None else g_of(g, x)
        r, p = base(g - max_or_zero(g_new)), base(x - max_or_zero(g_new)[:, None])
        if rescale is not None:
            r = rescale(g, g_new)
        s_new = s * r + p.sum(axis=1) if s_update is None else s_update(s, r, p)
        return g_new, s_new, u_update(u, s, r, p @ V, s_new)
    return model


NOT_A_NUMERATOR = Mistake(N_("not a triple"), N_("return the three arrays (g_new, s_new, U_new)"))
NUMERATOR_MISTAKES = (
    Mistake(N_("divided every step"),
            N_("U is the numerator s A': it is rescaled and accumulated, never divided; the one division by s comes "
               "at the end (exercise 7.2)"),
            (_numerator_model(lambda u, s, r, pv, sn: (u * r[:, None] + pv) / sn[:, None]),
             _numerator_model(lambda u, s, r, pv, sn: (u * (s * r)[:, None] + pv) / sn[:, None]))),
    Mistake(N_("no rescale when the max changes"),
            N_("U and s are measured against the running max: when it moves, multiply the old U by e^{g - g_new}"),
            (_numerator_model(lambda u, s, r, pv, sn: u + pv),)),
    Mistake(N_("the rescale inverted"),
            N_("the factor is e^{g - g_new} <= 1: the old numerator shrinks (e^{g_new - g} grows it, and is inf for a "
               "row that has seen no key yet)"),
            (_numerator_model(lambda u, s, r, pv, sn: u / r[:, None] + pv),
             *(_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, rescale=inverted)
               for inverted in (lambda g, gn: np.exp(gn - g), lambda g, gn: np.exp(max_or_zero(gn) - g),
                                lambda g, gn: np.exp(gn - max_or_zero(g)))))),
    Mistake(N_("the rescale of s missing"), N_("s_new = s e^{g - g_new} + rowsum P"),
            (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv,
                              s_update=lambda s, r, p: s + p.sum(axis=1)),)),
    Mistake(N_("a wrong base (2) instead of e"), N_("use np.exp"),
            (_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, base=np.exp2),)),
    Mistake(N_("the max started at 0"),
            N_("a row that has seen no key has g = -inf, and its new max is the tile's row max even when that is "
               "negative: g_new = max(g, rowmax X), with -inf replaced by 0 only where it is subtracted"),
            tuple(_numerator_model(lambda u, s, r, pv, sn: u * r[:, None] + pv, g_of=g_of)
                  for g_of in (lambda g, x: np.maximum(max_or_zero(g), x.max(axis=1)),
                               lambda g, x: np.maximum(np.maximum(g, 0), x.max(axis=1))))),
    INPUT_MODIFIED,
    shape_mistake(numerator_step_reference),
    NOT_A_NUMERATOR,
)


def check_numerator_step(fn) -> CheckReport:
    """Check ``fn(g, s, u, x_tile, v_tile) -> (g_new, s_new, u_new)``, FlashAttention-2's tile step (7.1).

    ``u (B_r, Dv)`` the numerator ``s A'``: ``U_new = U e^{g - g_new} + P V`` with no division. The property
    battery first (:func:`_tile_properties`). Named mistakes: :data:`NUMERATOR_MISTAKES`.
    """
    rng = np.random.default_rng(7)
    cases = _tile_cases(rng, "(g, s, U)")
    report = check_function("check_numerator_step", fn, cases, numerator_step_reference, NUMERATOR_MISTAKES, n_out=3,
                            names=("g_new", "s_new", "U_new"), not_answer=NOT_A_NUMERATOR, hint=shape_hint,
                            properties=_tile_properties("(g, s, U)"))
    inputs_unchanged(report, fn, _("the state given (g, s, U) is left unchanged"), cases[2][1])
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
    Mistake(N_("a base-2 logsumexp"), N_("the logsumexp is natural: g + log(s) with np.log, not np.log2"),
            (_finish_model(lse_of=lambda g, s, u: g + np.log2(s)),)),
    Mistake(N_("log(s) without g"), N_("s is relative to the running max: L = g + log(s)"),
            (_finish_model(lse_of=lambda g, s, u: np.log(s)),)),
    Mistake(N_("divided again"),
            N_("U is divided by s exactly once, here at the end: a loop that already divided every step (chapter 6) "
               "must not divide again"), (_finish_model(a_of=lambda g, s, u: u / s[:, None] ** 2),)),
    Mistake(N_("not divided"), N_("A = U / s: the numerator still has to be divided"),
            (_finish_model(a_of=lambda g, s, u: u),)),
    Mistake(N_("0 / 0 on a row with no key"),
            N_("a row that saw no key has s = 0 and U = 0: give it A = 0 (and L = -inf), not NaN"),
            (_finish_model(a_of=lambda g, s, u: u / s[:, None]),)),
    Mistake(N_("the logsumexp without the shift"),
            N_("log(e^g s) overflows once g > 709 (e^g is inf in float64): keep the shift, L = g + log(s)"),
            (_finish_model(lse_of=lambda g, s, u: np.log(np.exp(g) * s)),)),
    Mistake(N_("FlashAttention-2's +inf convention"),
            N_("FlashAttention-2's kernels store L = +inf for a row with no key (so that exp(X - L) = 0 in their "
               "backward); this course uses L = -inf, the log of an empty sum (chapter 8's conventions table)"),
            (_finish_model(lse_of=lambda g, s, u: np.where(
                s == 0, np.inf, g + np.log(np.where(s == 0, 1, s)))),)),
    INPUT_MODIFIED,
    shape_mistake(finish_reference),
    NOT_A_PAIR,
)


def check_finish(fn) -> CheckReport:
    """Check ``fn(g, s, u) -> (a, lse)``, the end of a FlashAttention-2 query tile (7.2): ``A = U / s`` (0 for a row
    with no key) and ``L = g + log(s)`` (natural log; -inf for a row with no key). Property cases first: no rows,
    one row, every row without a key, +inf in U, NaN in s, maxima near -1000 (no integer case: s and U are sums of
    exponentials). Named: :data:`FINISH_MISTAKES`."""
    rng = np.random.default_rng(72)
    u = rng.standard_normal((3, 2)) * 3
    cases = [
        (_("three rows"), (np.array([0.5, 2.0, -1.0]), np.array([3.0, 1.5, 7.0]), u)),
        (_("a row that saw no key (g = -inf, s = 0, U = 0)"), (np.array([0.5, -np.inf, 1.0]), np.array([3.0, 0.0, 2.0]),
                                                           u * np.array([[1.0], [0.0], [1.0]]))),
        (_("large maxima (g = 800: e^g overflows float64)"), (np.array([800.0, -2.0, 750.0]), np.array([3.0, 1.5, 7.0]),
                                                          u)),
    ]
    properties = property_cases([
        (_("the empty input: no rows give an empty A and lse"), (np.zeros(0), np.zeros(0), np.zeros((0, 2)))),
        (_("one element: one row, one value dimension"), (np.array([0.5]), np.array([2.0]), np.array([[3.0]]))),
        (_("an all -inf row: every row saw no key (A = 0, lse = -inf)"),
         (np.full(2, -np.inf), np.zeros(2), np.zeros((2, 2)))),
        (_("+inf: an accumulator holding +inf stays +inf"), (np.array([0.5, 1.0]), np.array([2.0, 1.0]),
                                                          np.array([[np.inf, 1.0], [0.5, 2.0]]))),
        (_("NaN propagates: a NaN sum gives NaN (never silently 0)"),
         (np.array([0.5, 1.0]), np.array([np.nan, 1.0]), np.array([[1.0, 1.0], [0.5, 2.0]]))),
        (_("negative-only input: maxima near -1000 (lse = g + log s, no exp(g))"),
         (np.array([-1000.0, -1002.5]), np.array([2.0, 1.5]), u[:2])),
    ])
    report = check_function("check_finish", fn, cases, finish_reference, FINISH_MISTAKES, n_out=2,
                            names=("A", "lse"), not_answer=NOT_A_PAIR, hint=shape_hint, properties=properties)
    inputs_unchanged(report, fn, _("the state given (g, s, U) is left unchanged"), cases[1][1])
    return report


# ------------------------------------------------------------------------------------------------------------------
# 8.1 the causal alignment
# ------------------------------------------------------------------------------------------------------------------


def _tril(offset_of):
    return lambda N, M: np.tril(np.ones((N, M), dtype=bool), k=offset_of(N, M))


CAUSAL_MISTAKES = (
    Mistake(N_("the top-left alignment (off by M - N)"),
            N_("bottom-right aligns the last query with the last key: query n sees key m when m <= n + M - N "
               "(np.tril(..., k=M - N))"), (_tril(lambda N, M: 0),)),
    Mistake(N_("the offset N - M instead of M - N"),
            N_("with N < M each query sees more keys than in the square case: m <= n + (M - N)"),
            (_tril(lambda N, M: N - M),)),
    Mistake(N_("the diagonal excluded (< instead of <=)"), N_("a query sees its own aligned key: m <= n + M - N"),
            (_tril(lambda N, M: M - N - 1),)),
    Mistake(N_("the diagonal shifted by one (m <= n + M - N + 1)"),
            N_("each query sees one key too many, the next one: query n sees key m when m <= n + M - N (np.tril(..., "
               "k=M - N))"), (_tril(lambda N, M: M - N + 1),)),
    Mistake(N_("transposed"), N_("the mask is (N, M): rows are queries, columns keys"),
            (lambda N, M: np.tril(np.ones((M, N), dtype=bool), k=M - N).T,
             lambda N, M: np.triu(np.ones((N, M), dtype=bool), k=M - N))),
    Mistake(N_("an inverted mask (True = masked)"),
            N_("in this course True means attend (flashmath.inputs): query n sees key m when m <= n + M - N, so that "
               "pair is True"), (lambda N, M: ~_tril(lambda N, M: M - N)(N, M),)),
    Mistake(N_("a 0/-inf additive mask"),
            N_("the exercise asks for a boolean mask (True = attend), not the bias added to the scores (0 where "
               "attended, -inf elsewhere): return m <= n + M - N"),
            (lambda N, M: np.where(_tril(lambda N, M: M - N)(N, M), 0.0, -np.inf),)),
    BOOL_OUT,  # "an integer 0/1 mask": the property battery's check of the result's dtype names it
)


def check_causal_mask(fn) -> CheckReport:
    """Check ``fn(N, M) -> (N, M)`` boolean, the bottom-right causal mask (8.1): query ``n`` sees key ``m`` when
    ``m <= n + M - N``. Property cases first (N = 0, M = 0, N = M = 1, numpy integers), then N = M, N < M,
    N > M, N = 1. Named mistakes: :data:`CAUSAL_MISTAKES`."""
    from flashmath.masks import causal_mask

    cases = [(_("N = M = 4"), (4, 4)), (_("N = 2 < M = 5"), (2, 5)),
             (_("N = 5 > M = 2 (the first rows see nothing)"), (5, 2)),
             (_("decoding: N = 1, M = 6 (the query sees the whole cache)"), (1, 6))]
    properties = property_cases([
        (_("the empty input: N = 0 queries, M = 3 keys give a (0, 3) mask"), (0, 3)),
        (_("the empty input: N = 3 queries, M = 0 keys give a (3, 0) mask"), (3, 0)),
        (_("one element: N = M = 1"), (1, 1)),
        (_("integer input: N and M as numpy integers"), (np.int64(3), np.int64(4))),
    ])
    return check_function("check_causal_mask", fn, cases, causal_mask, CAUSAL_MISTAKES, n_out=1,
                          names=(_("the mask"),), hint=shape_hint, properties=properties)


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
    Mistake(N_("merged without rescaling"),
            N_("each part is weighted by its share of the sum, e^{L_p - L}; the plain average of the outputs ignores "
               "how much weight each range holds"),
            (_merge_model(lambda a1, l1, a2, l2, L: (a1 + a2) / 2), _merge_model(lambda a1, l1, a2, l2, L: a1 + a2))),
    Mistake(N_("the logsumexp as the max of the two"),
            N_("the sums add: L = log(e^{L_1} + e^{L_2}) (np.logaddexp), which is more than the larger one"),
            _wrong_lse(np.maximum)),
    Mistake(N_("the logsumexps added"),
            N_("L_1 + L_2 is the log of a product; the sums add: L = np.logaddexp(L_1, L_2)"),
            _wrong_lse(lambda l1, l2: l1 + l2)),
    Mistake(N_("a base-2 logsumexp"), N_("natural logarithms throughout: np.logaddexp, not np.logaddexp2"),
            _wrong_lse(np.logaddexp2)),
    Mistake(N_("e^{L_p} without a common reference"),
            N_("e^{L} overflows for large logsumexps: weight the parts by e^{L_p - L}, which is at most 1"),
            (_merge_model(
                lambda a1, l1, a2, l2, L: (np.exp(l1)[..., None] * a1 + np.exp(l2)[..., None] * a2)
                / (np.exp(l1) + np.exp(l2))[..., None]),)),
    Mistake(N_("an empty part's output read (0 * NaN)"),
            N_("a part with L = -inf has no keys and contributes nothing, whatever its output holds (NaN or inf: 0 * "
               "inf is NaN too): select it away with np.where instead of multiplying by its weight 0"),
            (_merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[0] * a1 + _weights(l1, l2, L)[1] * a2),
             _merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[0] * a1
                          + np.where(l2[..., None] == -np.inf, 0, _weights(l1, l2, L)[1] * a2)),
             _merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[1] * a2
                          + np.where(l1[..., None] == -np.inf, 0, _weights(l1, l2, L)[0] * a1)))),
    Mistake(N_("both parts empty: -inf - (-inf)"),
            N_("when both parts are empty L = -inf and e^{L_p - L} = e^{-inf + inf} is NaN: the merged row has no "
               "key, so A = 0 and L = -inf (measure against 0 where L is -inf)"),
            (_merge_model(lambda a1, l1, a2, l2, L: np.where(
                np.expand_dims(np.isneginf(L), -1), np.nan, _mix(a1, l1, a2, l2, L))),)),
    Mistake(N_("the weights swapped"),
            N_("part p is weighted by its own share e^{L_p - L}: a1 by e^{L_1 - L}, a2 by e^{L_2 - L}"),
            (_merge_model(lambda a1, l1, a2, l2, L: _mix(a1, l2, a2, l1, L)),
             _merge_model(lambda a1, l1, a2, l2, L: _weights(l1, l2, L)[1] * a1
                          + _weights(l1, l2, L)[0] * a2))),
    Mistake(N_("the weights inverted (e^{L - L_p})"),
            N_("a part's share of the sum is e^{L_p} / e^{L} = e^{L_p - L} <= 1, not its inverse"),
            (_merge_model(lambda a1, l1, a2, l2, L: np.exp(L - l1)[..., None] * a1
                          + np.exp(L - l2)[..., None] * a2),
             _merge_model(lambda a1, l1, a2, l2, L: (np.exp(L - l1)[..., None] * a1
                          + np.exp(L - l2)[..., None] * a2)
                          / (np.exp(L - l1) + np.exp(L - l2))[..., None]))),
    Mistake(N_("a base-2 merge"),
            N_("the logsumexps are natural logarithms: weight by np.exp(L_p - L), not 2 ** (L_p - L)"),
            (_merge_model(lambda a1, l1, a2, l2, L: np.exp2(l1 - L)[..., None] * a1 + np.exp2(l2 - L)[..., None] * a2,
                          lse_of=np.logaddexp2),
             _merge_model(lambda a1, l1, a2, l2, L: np.exp2(l1 - L)[..., None] * a1 + np.exp2(l2 - L)[..., None] * a2),
             _merge_model(lambda a1, l1, a2, l2, L: np.where(
                 np.expand_dims(np.isneginf(l1), -1), 0, np.exp2(l1 - L)[..., None] * a1) + np.where(
                 np.expand_dims(np.isneginf(l2), -1), 0, np.exp2(l2 - L)[..., None] * a2), lse_of=np.logaddexp2))),
    Mistake(N_("the logsumexp without the shift"),
            N_("log(e^{L_1} + e^{L_2}) overflows once L > 709: use np.logaddexp(L_1, L_2), which subtracts the larger "
               "first"), _wrong_lse(lambda l1, l2: np.log(np.exp(l1) + np.exp(l2)))),
    INPUT_MODIFIED,
    shape_mistake(lambda *args: _merge_reference(*args)),
    Mistake(N_("not a pair"), N_("return (A, lse)"), ()),
)


def _merge_reference(a1, lse1, a2, lse2):
    from flashmath.splitkv import merge_states

    return merge_states(a1, lse1, a2, lse2)


def _mix(a1, l1, a2, l2, L):
    with np.errstate(invalid="ignore"):
        w1, w2 = _weights(l1, l2, L)
        return np.where(l1[..., None] == -np.inf, 0, w1 * a1) + np.where(l2[..., None] == -np.inf, 0, w2 * a2)


def check_merge_states(fn) -> CheckReport:
    """Check ``fn(a1, lse1, a2, lse2) -> (a, lse)``, the split-KV merge (10.1), against
    :func:`flashmath.merge_states`. Cases: two ranges of one row, ranges with very different logsumexps, large
    logsumexps (1000), an empty range whose output holds NaN, after the property cases (no rows, one row, every
    range empty, +inf in an output, a NaN logsumexp, integers, logsumexps near -1000; no float16 case: the package
    promotes float16 to float32). Named mistakes: :data:`MERGE_STATES_MISTAKES`."""
    from flashmath.splitkv import merge_states

    a1, a2 = np.array([[1.0, -2.0], [0.5, 0.5]]), np.array([[3.0, 1.0], [-1.0, 2.0]])
    cases = [
        (_("two key ranges of two rows"), (a1, np.array([0.3, 1.2]), a2, np.array([1.0, -0.5]))),
        (_("ranges of very different weight (L = 5 and L = -2)"),
         (a1, np.array([5.0, -2.0]), a2, np.array([-2.0, 5.0]))),
        (_("large logsumexps (L = 1000 and 999: e^L overflows)"), (a1, np.array([1000.0, 999.0]), a2,
                                                                np.array([999.0, 1000.0]))),
        (_("an empty range (L = -inf) whose output holds NaN"), (a1, np.array([0.3, 1.2]), np.full((2, 2), np.nan),
                                                             np.array([-np.inf, -np.inf]))),
        (_("the first range empty, its output +inf"), (np.full((2, 2), np.inf), np.array([-np.inf, -np.inf]), a2,
                                                    np.array([0.3, 1.2]))),
        (_("both ranges empty (row 0), then one (row 1)"), (np.full((2, 2), np.nan), np.array([-np.inf, -np.inf]), a2,
                                                        np.array([-np.inf, 0.7]))),
    ]
    properties = property_cases([
        (_("the empty input: no rows give an empty A and lse"),
         (np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2)), np.zeros(0))),
        (_("one element: one row, one value dimension"), (np.array([[2.0]]), np.array([0.5]), np.array([[-1.0]]),
                                                       np.array([1.5]))),
        (_("an all -inf row: both ranges empty in every row (A = 0, lse = -inf)"),
         (np.zeros((2, 2)), np.full(2, -np.inf), np.zeros((2, 2)), np.full(2, -np.inf))),
        (_("+inf: an output holding +inf in a range that counts stays +inf"),
         (np.array([[np.inf, 1.0], [0.5, 0.5]]), np.array([0.3, 1.2]), a2, np.array([1.0, -0.5]))),
        (_("NaN propagates: a NaN logsumexp gives NaN (never silently 0)"),
         (a1, np.array([np.nan, 1.2]), a2, np.array([1.0, -0.5]))),
        (_("integer input: integer outputs and logsumexps give floats out"),
         (np.array([[1, -2], [0, 3]]), np.array([1, 2]), np.array([[3, 1], [-1, 2]]), np.array([2, 0]))),
        (_("negative-only input: logsumexps near -1000 (e^L underflows to 0)"),
         (a1, np.array([-1000.0, -1001.0]), a2, np.array([-1001.0, -1000.0]))),
    ])
    report = check_function("check_merge_states", fn, cases, merge_states, MERGE_STATES_MISTAKES, n_out=2,
                            names=("A", "lse"), not_answer=MERGE_STATES_MISTAKES[-1], hint=shape_hint,
                            properties=properties)
    inputs_unchanged(report, fn, _("the two states given are left unchanged"), cases[0][1], which=(0, 1, 2, 3))
    return report
