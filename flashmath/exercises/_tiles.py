"""What the checkers of chapters 6-12 share: raw shape errors explained, an answer of the wrong shape named, the
inputs checked for changes in place; and what the tile steps of chapters 6, 7 and 8 share: the reference step, the
ordinary cases and the property cases of a tile step.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from flashmath.exercises._cases import modified_message, property_cases
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake, modified
from flashmath.flash import fa1_tile_step
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_


def shape_hint(exc) -> str | None:
    """What a broadcast or shape error raised by the learner's numpy code probably means (``run``'s ``hint``)."""
    text = str(exc)
    if "broadcast" in text:
        shapes = re.findall(r"\(([\d, ]*)\)", text)
        dims = [tuple(int(d) for d in s.replace(" ", "").split(",") if d) for s in shapes]
        vector = next((d for d in dims if len(d) == 1), None)
        matrix = next((d for d in dims if len(d) == 2), None)
        vectors = [d for d in dims if len(d) == 1]
        if len(vectors) == 2 and vectors[0] != vectors[1] and not matrix:
            return _(
                "two vectors of different lengths, {a} and {b}: X is (B_r, B_c), so a max or a sum of X (or P) over "
                "axis=0 gives one value per key column (B_c,); a per-row quantity is taken over axis=1"
            ).format(a=vectors[0], b=vectors[1])
        if vector and matrix and vector[0] == matrix[0] != matrix[1]:
            return _(
                "a per-row vector of shape {vector} meets a {matrix} array: numpy lines up the last axes, so "
                "give the vector a column axis, v[:, None] (shape ({rows}, 1)), to scale each row"
            ).format(vector=vector, matrix=matrix, rows=vector[0])
        return _(
            "two arrays whose shapes do not line up: numpy matches shapes from the last axis; a per-row "
            "quantity (B_r,) needs [:, None] to act on a (B_r, Dv) array, and X is (B_r, B_c), V is (B_c, Dv)"
        )
    if "matmul" in text or "shapes" in text and "not aligned" in text:
        return _(
            "a matrix product whose inner sizes differ: X (B_r, B_c) @ V (B_c, Dv) and Q (N, D) @ K^T (D, M); "
            "check which array needs .T"
        )
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


#: The fix for a wrong shape in a tile's exercise (per-row quantities (B_r,), outputs (B_r, Dv)).
TILE_SHAPE_FIX = N_(
    "the numbers are right but an array has another shape: keep per-row quantities 1-D (B_r,) (no "
    "keepdims=True, or .ravel() them) and outputs (B_r, Dv)"
)


def shape_mistake(reference, fix: str = TILE_SHAPE_FIX) -> Mistake:
    """The mistake of right numbers in a wrong shape, for a checker whose right answer is ``reference(*args)``;
    ``fix`` (marked with ``N_``) names the shapes the exercise asks for."""
    return Mistake(
        N_("an answer of the wrong shape"),
        fix,
        (reference,),
        compare=_reshaped_equal,
    )


def inputs_unchanged(
    report: CheckReport,
    fn,
    name: str,
    args,
    which=(0, 1, 2),
    always: bool = False,
    arg_names=None,
    mistake: Mistake = INPUT_MODIFIED,
) -> None:
    """Run ``fn`` once more on copies of ``args`` and fail the case ``name`` when it changed one of the arguments
    ``which`` (the state: a tile step may overwrite its score tile, as the package's does) in place. With
    ``always``, a function that raises or returns nothing fails the case too (so that the number of cases does not
    depend on the answer); otherwise the case is left out (the cases above already say why). With ``arg_names``
    the message names the argument changed, and gives ``mistake``'s message."""
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*copies)
    except NotImplementedError:
        out, why = None, _("not implemented yet")
    except Exception as exc:  # noqa: BLE001 - any error of the learner's code is reported, not raised
        out, why = (
            None,
            _(
                "fails until the function runs: it raised {error}, so its arguments could not be checked (see the "
                "cases above)"
            ).format(error=type(exc).__name__),
        )
    else:
        why = _(
            "fails until the function returns its result: it returned nothing, so its arguments could not be checked"
        )
    if out is None:
        if always:
            report.add(name, False, why)
        return
    changed = [
        i
        for i, (a, b) in enumerate(zip(args, copies, strict=False))
        if i in which and isinstance(a, np.ndarray) and modified(a, b)
    ]
    report.add(
        name,
        not changed,
        ""
        if not changed
        else _("argument {k} was changed: {message}").format(k=changed[0] + 1, message=mistake.message())
        if arg_names is None
        else modified_message(changed[0], arg_names, mistake),
    )


# ------------------------------------------------------------------------------------------------------------------
# The tile step (6.1, 7.1) and the masked tile step (8.2): (g, s, A') of B_r rows, a score tile X (B_r, B_c) and
# V (B_c, Dv)
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


#: The bounds a learner clips the scores to "to avoid overflow" (np.clip(X, -c, c) or np.minimum(X, c)): round
#: numbers, and float32's and float64's exp limits (88, 709).
CLIP_BOUNDS = (10.0, 20.0, 30.0, 50.0, 80.0, 88.0, 100.0, 500.0, 700.0, 709.0)


def _clipped(step, c: float, lower: bool):
    def model(*args):
        x = np.asarray(args[3], dtype=np.float64)
        return step(*args[:3], np.clip(x, -c if lower else None, c), *args[4:])

    return model


def scores_clipped(step) -> Mistake:
    """The scores clipped to a bound "to avoid overflow" before the step ``step`` (6.1, 7.1, 8.2): a row whose
    scores lie past the bound (a max of 1000, every score near -1000) gets another max and other weights."""
    return Mistake(
        N_("the scores clipped"),
        N_(
            "np.clip (or np.minimum) changes every score past its bound, and with it the row's max and weights: no "
            "clip is needed, since subtracting the running max g_new already keeps every exponent <= 0"
        ),
        tuple(_clipped(step, c, lower) for c in CLIP_BOUNDS for lower in (True, False)),
    )


NOT_A_STATE = Mistake(N_("not a triple"), N_("return the three arrays together, as one tuple"))


def tile_cases(rng, state: str = "(g, s, A')"):
    a = rng.standard_normal((3, 2))
    V = rng.standard_normal((4, 2))
    X = rng.standard_normal((3, 4))
    return [
        (
            _("the first tile, from the empty state {state} = (-inf, 0, 0)").format(state=state),
            (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X, V),
        ),
        (_("every row's max holds (old max 3)"), (np.full(3, 3.0), np.array([1.5, 2.0, 1.0]), a, X, V)),
        (_("the max jumps in some rows only"), (np.array([0.5, 3.0, -1.0]), np.array([1.5, 2.0, 1.0]), a, X, V)),
        (
            _("rows with maxima far apart (a tile max of 1000 in row [1])"),
            (np.array([0.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0]), a, X + np.array([[0.0], [1000.0], [0.0]]), V),
        ),
        (
            _("a square tile (B_r = B_c = 4)"),
            (
                np.array([0.5, 3.0, -1.0, 0.0]),
                np.array([1.5, 2.0, 1.0, 1.0]),
                rng.standard_normal((4, 2)),
                rng.standard_normal((4, 4)),
                V,
            ),
        ),
        (
            _("the first tile, every score negative (row maxima below 0)"),
            (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)), X - 6.0, V),
        ),
    ]


def tile_properties(state: str = "(g, s, A')", masked: bool = False):
    """The edge cases of a tile step (6.1, 7.1, 8.2): ``[(what, (g, s, a, x_tile, v_tile))]``, ``a`` the output or
    the numerator, each named by the phrase of the exercise's prompt that states it. One row and one key (from the
    empty state); every score and max near -1000 (a max started at 0 or a rescale without the max underflows).
    With ``masked`` (8.2), a row whose kept scores are all -inf (it keeps its state): chapters 6 and 7 have no
    mask. ``state`` is kept for the callers' sake (the names no longer quote it).

    Not tested, since no prompt of these chapters teaches them (issue 34): a tile of no rows, a score of +inf, a
    NaN score (NaN propagates in the package, but a step right for every finite input may turn a NaN row into
    another number), integer inputs. No float16 case: these steps are checked in float64 (chapter 9 measures
    float16)."""
    del state
    s = np.array([1.5, 2.0, 1.0])
    a = np.array([[0.5, -1.0], [2.0, 0.25], [-0.5, 1.0]])
    X = np.array([[0.3, -1.2, 2.2, 0.1], [1.0, 0.4, -0.3, 2.5], [-2.0, 0.7, 1.1, -0.4]])
    V = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5], [0.75, -1.0]])
    inf_row = X.copy()
    inf_row[1] = -np.inf
    cases = [
        (
            _("one row and one key"),
            (np.array([-np.inf]), np.zeros(1), np.zeros((1, 1)), np.array([[0.7]]), np.array([[2.0]])),
        ),
        (_("every score near -1000"), (np.array([-1000.5, -998.0, -1003.0]), s, a, X - 1000.0, V)),
    ]
    if masked:
        cases.insert(1, (_("a row whose kept scores are all -inf"), (np.array([0.5, 2.0, -1.0]), s, a, inf_row, V)))
    return property_cases(cases)


def score_tile_copied(fn, args):
    """The harness's ``call`` for a tile step: the learner's step gets its own copy of the score tile ``x_tile``
    (argument 4), which it may overwrite as the package's steps do (:func:`flashmath.flash.fa1_tile_step` turns
    the scores into the weights in place); every other argument must come back unchanged."""
    return fn(*args[:3], np.array(args[3], copy=True), *args[4:])
