"""Chapter 1: exercise 1.1, safe softmax of one vector."""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import (
    DTYPE_OUT,
    INTEGER_OUT,
    WRONG_SHAPE,
    PropertyFailure,
    check_function,
    property_cases,
)
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, LOWER_PRECISION, CheckReport, Mistake, fmt
from flashmath.exercises._report import same as _same
from flashmath.i18n import aside
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.softmax import compute_dtype, safe_softmax


def same_probs(a, b) -> bool:
    """Two probability vectors agree (to 2e-3 when either is float16, its precision; else to 1e-9).

    A row holding +inf is expected as :func:`_reference` writes it: NaN at its +inf entries, 0 at the others. Its NaN
    entries must be NaN, and its 0 entries may be NaN or 0: ``safe_softmax`` gives NaN everywhere (the max is +inf),
    a softmax through the logsumexp, ``exp(x - logaddexp.reduce(x))``, gives NaN at the +inf entries (inf - inf) and
    0 at the finite ones; both keep the NaN the rule asks for. Anything else, a row of NaN included (NaN in gives NaN
    in every entry), is compared as it is.
    """
    low = np.float16 in (np.asarray(a).dtype, np.asarray(b).dtype)
    if _same(a, b, rtol=2e-3 if low else 1e-9):
        return True
    loose = _inf_row_loose(b)
    if loose is None:
        return False
    try:
        a64 = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    b64 = np.asarray(b, dtype=np.float64)
    return a64.shape == b64.shape and bool(np.all(np.isnan(a64) | (loose & (a64 == 0))))


def _inf_row_loose(expected):
    """Where an expected +inf row (NaN at its +inf entries, 0 elsewhere) allows NaN or 0; None for any other."""
    try:
        b = np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    nan = np.isnan(b)
    if b.ndim != 1 or not nan.any() or nan.all() or not np.all(nan | (b == 0)):
        return None
    return ~nan


def _reference(x):
    """:func:`flashmath.safe_softmax`, but a row holding +inf (and no NaN) written as NaN at its +inf entries and 0 at
    the others (the least the rule asks: :func:`same_probs` lets those 0 be NaN), so that a message can point at the
    +inf entries."""
    y = safe_softmax(x)
    x = np.asarray(x)
    if x.dtype.kind == "f" and x.size and np.isposinf(x).any() and not np.isnan(x).any():
        return np.where(np.isposinf(x), np.nan, 0.0).astype(y.dtype)
    return y


def softmax_properties():
    """The property cases of exercise 1.1: ``[(name, x)]`` (the battery of :mod:`~flashmath.exercises._cases`), named
    with the prompt's own words.

    The rules they state: an empty vector gives an empty vector; a length-1 vector gives [1]; a row masked entirely
    (all -inf) gives all zeros; a row holding +inf gives NaN at its +inf entries (inf - inf; the others may be NaN
    or 0, as a logaddexp softmax gives them); NaN in gives NaN out, in every entry (never 0); float16 in gives
    float16 out (compute in
    float32); integers in give float64 out; values far below 0 give a softmax like any other.
    """
    return [
        (_("an empty vector gives an empty vector"), np.array([], dtype=np.float64)),
        (_("a length-1 vector"), np.array([3.0])),
        (_("a row masked entirely (all -inf) gives all zeros"), np.full(3, -np.inf)),
        (_("a row holding +inf gives NaN"), np.array([1.0, np.inf, 2.0])),
        (_("NaN in gives NaN out"), np.array([1.0, np.nan, 2.0])),
        (_("float16 in gives float16 out"), np.array([20.0, 19.0, 0.0], dtype=np.float16)),
        (_("integers in give float64 out"), np.array([3, 1, 2])),
        (_("values far below 0"), np.array([-1000.0, -1001.0])),
    ]


def softmax_cases():
    """The ordinary cases of a softmax exercise: ``[(name, x)]``; each one is where some classic mistake shows."""
    return [
        (_("a small vector"), np.array([1.0, 2.0, 3.0, 0.5])),
        (_("all-equal values"), np.full(5, 7.0)),
        (_("values of 1e4 (exp overflows unless you subtract the max)"), np.array([1e4, 1e4 - 1.0, -1e4])),
        (_("-inf entries (masked positions get probability 0)"), np.array([0.5, -np.inf, 1.5, -np.inf])),
        (_("one value far below the others (subtract the max, not the largest |x|)"), np.array([2.0, 1.0, -1000.0])),
        (_("46 equal values of 10 in float16 (each exp(10) fits; their sum does not)"), np.full(46, 10.0, np.float16)),
    ]


def _softmax_like(x, shift, exp=np.exp, finish=None, in_dtype=False):
    """A softmax variant: ``e = exp(x - shift(x))``, then ``finish(e)`` (default ``e / sum(e)``), cast back.

    Computed in ``x``'s own dtype when ``in_dtype``, else in float32 for float16 input (as the right answer); the
    result in ``x``'s dtype, float64 for integers (as the rules ask: the models differ from the right answer only in
    their one mistake).
    """
    x = np.asarray(x)
    work = x if in_dtype else x.astype(compute_dtype(x.dtype))
    e = exp(work - shift(work))
    y = e / np.sum(e) if finish is None else finish(e, work)
    return np.asarray(y).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def _max(x):
    return np.max(x)


def _guarded(model):
    """``model`` with the special case of the course: a row of only -inf gives zeros."""
    return lambda x: np.zeros_like(np.asarray(x)) if np.all(np.asarray(x) == -np.inf) else model(x)


def _uniform_when_masked(x):
    x = np.asarray(x)
    return np.full_like(x, 1 / x.size) if np.all(x == -np.inf) else safe_softmax(x)


def _inf_row_zeros(x):
    x = np.asarray(x)
    g = np.max(x.astype(compute_dtype(x.dtype))) if x.size else 0.0
    return (
        np.zeros_like(x, dtype=np.result_type(x.dtype, np.float64) if x.dtype.kind in "iub" else x.dtype)
        if not np.isfinite(g)
        else safe_softmax(x)
    )


def _largest_abs(finite_only):
    """The largest absolute value as the shift (of the finite entries when ``finite_only``), with the guards."""

    def shift(w):
        kept = w[np.isfinite(w)] if finite_only else w
        return np.max(np.abs(kept)) if kept.size else (np.max(w) if w.size else 0.0)

    return _guarded(lambda x: _softmax_like(x, shift))


def _max_from_zero(x):
    return _softmax_like(x, lambda w: np.maximum(0, np.max(w)))


def _zero_sum_guard(e, w):
    """``e / sum(e)``, with zeros where the sum is 0 (a guard meant for the fully masked row, ``if s == 0``)."""
    s = np.sum(e)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.zeros_like(e) if s == 0 else e / s


def _any_masked_zeros(x):
    x = np.asarray(x)
    if x.size and np.any(x == -np.inf):
        return np.zeros_like(x, dtype=np.result_type(x.dtype, np.float64) if x.dtype.kind in "iub" else x.dtype)
    return safe_softmax(x)


def _not_subtracted_cause(x) -> str | None:
    """Why a softmax without the max fails on ``x`` when it is not overflow: on a fully masked row every exp(-inf)
    is 0; far below 0 every exp(x) underflows to 0 (in the dtype the answer is computed in, float32 for float16);
    either way the sum is 0 and 0 / 0 is NaN."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and x.size and np.all(x == -np.inf):  # a fully masked row: nothing overflows here
        return _(
            "on a fully masked row every exp(-inf) is 0, so the sum is 0 and 0 / 0 is NaN; subtracting the max "
            "alone does not fix that row (-inf - (-inf) is NaN too): test for a max of -inf and return zeros"
        )
    if x.dtype.kind != "f" or not x.size or not np.isfinite(x).all():
        return None
    with np.errstate(under="ignore"):
        underflows = bool(np.all(np.exp(x.astype(compute_dtype(x.dtype))) == 0))
    return (
        _(
            "far below 0 every exp(x) of this vector underflows to 0 (below -17.33 in float16, "
            "-103.97 in float32, -745.13 in float64), so the sum is 0 and 0 / 0 is NaN (or a guard's zeros). "
            "Subtract the max first: exp(x - max(x)) / sum(exp(x - max(x))), whose largest term is exp(0) = 1"
        )
        if underflows
        else None
    )


NOT_SUBTRACTED = Mistake(
    N_("the max not subtracted"),
    N_(
        "exp(x) overflows to inf for large x (above 11.09 in float16, 88.72 in float32, 709.78 in "
        "float64), or their sum does, and inf / inf is NaN, finite / inf is 0. Subtract the max "
        "first: exp(x - max(x)) / sum(exp(x - max(x)))"
    ),
    (
        lambda x: _softmax_like(x, lambda w: 0, in_dtype=True),
        lambda x: _softmax_like(x, lambda w: 0),
        _guarded(lambda x: _softmax_like(x, lambda w: 0)),
        lambda x: _softmax_like(x, lambda w: 0, finish=_zero_sum_guard),
        lambda x: _softmax_like(x, lambda w: 0, in_dtype=True, finish=_zero_sum_guard),
    ),
    cause=_not_subtracted_cause,
)

MAX_FROM_ZERO = Mistake(
    N_("the max started at 0"),
    N_(
        "a max that starts at 0 (g = 0 before the loop, or max(0, x.max())) is never below 0, so for a vector of "
        "very negative values every exp(x - g) underflows to 0 and the sum is 0: 0 / 0 gives NaN (in Python floats "
        "it raises ZeroDivisionError; a guard such as if s == 0 gives zeros). Start the max at -inf (nothing seen "
        "yet), or take np.max(x); then also test for a max of -inf (a fully masked row, where -inf - (-inf) is NaN) "
        "and return zeros"
    ),
    (
        _max_from_zero,
        _guarded(_max_from_zero),
        lambda x: _softmax_like(x, lambda w: np.maximum(0, np.max(w)), finish=_zero_sum_guard),
    ),
)


def _max_from_zero_sum_is_zero(x) -> bool:
    """The max started at 0 leaves a sum of 0 on ``x`` (every exp(x - max(0, max x)) underflows, in float64 as a
    Python-float loop computes it, or in the answer's compute dtype): where such a loop raises ZeroDivisionError."""
    x = np.asarray(x)
    if x.dtype.kind not in "fiub" or not x.size or np.isnan(x).any():
        return False
    with np.errstate(all="ignore"):
        return any(
            bool(np.sum(np.exp(w - max(0.0, float(np.max(w))))) == 0)
            for w in (x.astype(np.float64), x.astype(compute_dtype(x.dtype)))
        )


def _name_zero_division(report: CheckReport, cases, raised) -> None:
    """Give the cases that raised ZeroDivisionError a diagnosis: "the max started at 0" when that mistake explains
    every failing case of the run (each ZeroDivisionError falls where its sum is 0, each wrong answer is already
    named so), else what a division by zero means here."""
    if len(raised) != len(cases):
        return
    failing = [i for i, (_name, ok, _msg) in enumerate(report.cases) if not ok]
    by_name = {name: i for i, (name, _) in enumerate(cases)}
    named = all(
        (raised[by_name[report.cases[i][0]]] and _max_from_zero_sum_is_zero(cases[by_name[report.cases[i][0]]][1][0]))
        or (not raised[by_name[report.cases[i][0]]] and _(MAX_FROM_ZERO.name) in report.cases[i][2])
        for i in failing
    )
    for i in failing:
        name, ok, text = report.cases[i]
        k = by_name[name]
        if raised[k]:
            extra = (
                MAX_FROM_ZERO.message(cases[k][1])
                if named
                else _("the sum is 0: every exp(x - g) underflowed to 0, or the row is fully masked (all -inf)")
            )
            report.cases[i] = (name, ok, aside(extra, text))  # the explanation first, the exception after it


# In the order the whole-run rule tries them (the first whose model gives the learner's answer on every failing case
# is named): a missing guard for the masked row first (its model is right everywhere else; a max started at 0 also
# gives NaN on a masked row), then a max started at 0 (on a run that fails only where every exp underflows, a masked
# row and values far below 0, a max not subtracted gives NaN too, but it would also fail the large values).
MISTAKES = (
    Mistake(
        N_("-inf - (-inf) on a fully masked row"),
        N_(
            "when every entry is -inf the max is -inf and x - max is -inf - (-inf) = NaN. The course's convention "
            "for a fully masked row is all zeros: test for a max of -inf and return zeros"
        ),
        (lambda x: _softmax_like(x, _max),),
    ),
    MAX_FROM_ZERO,
    NOT_SUBTRACTED,
    Mistake(
        N_("the largest absolute value subtracted"),
        N_(
            "max |x_j| is far above max x_j when a value is far below 0 (for [2, 1, -1000] it is 1000), and then "
            "every exp(x_i - 1000) underflows to 0 and 0 / 0 gives NaN: subtract the max itself, g = max_j x_j"
        ),
        (_largest_abs(True), _largest_abs(False)),
    ),
    Mistake(
        N_("the sum started at 1"),
        N_("the denominator is sum_j exp(x_j - g) and nothing more: start the sum at 0"),
        (lambda x: _softmax_like(x, _max, finish=lambda e, w: e / (1 + np.sum(e))),),
    ),
    Mistake(
        N_("a wrong base (2 or 10) instead of e"),
        N_("softmax uses the natural exponential: np.exp or math.exp, not 2 ** x or 10 ** x"),
        (lambda x: _softmax_like(x, _max, exp=np.exp2), lambda x: _softmax_like(x, _max, exp=lambda t: 10.0**t)),
    ),
    Mistake(
        N_("divided twice"),
        N_("each exp(x_i - g) is divided by the sum once: y_i = exp(x_i - g) / s"),
        (lambda x: _softmax_like(x, _max, finish=lambda e, w: e / np.sum(e) / np.sum(e)),),
    ),
    Mistake(
        N_("exp missing"),
        N_("the values were normalised without exponentiating: y_i = exp(x_i - g) / sum_j exp(x_j - g)"),
        (lambda x: _softmax_like(x, _max, exp=lambda t: t), lambda x: _softmax_like(x, lambda w: 0, exp=lambda t: t)),
    ),
    Mistake(
        N_("log-probabilities returned"),
        N_("x - g - log(s) is the log-softmax: return exp(x - g) / s"),
        (lambda x: _softmax_like(x, _max, finish=lambda e, w: w - np.max(w) - np.log(np.sum(e))),),
    ),
    Mistake(
        N_("the min subtracted instead of the max"),
        N_(
            "subtracting the min makes the exponents >= 0, so exp still overflows; subtract the max: every "
            "exponent is then <= 0"
        ),
        (lambda x: _softmax_like(x, np.min),),
    ),
    Mistake(
        N_("NaN or +inf turned into zeros"),
        N_(
            "a NaN in the input means something went wrong upstream, and a row holding +inf gives NaN (inf - inf): "
            "let both through (NaN out) instead of np.nan_to_num or a guard such as `if not np.isfinite(g): return "
            "zeros`. Only a max of -inf (a fully masked row) gives zeros: test g == -np.inf"
        ),
        (lambda x: np.nan_to_num(safe_softmax(x), nan=0.0), _inf_row_zeros),
    ),
    Mistake(
        N_("a -inf element taken for a fully masked row"),
        N_(
            "only a row whose every entry is -inf is fully masked: a single -inf is a masked position, which gets "
            "probability exp(-inf - g) = 0 while the others share the rest: test np.all(x == -np.inf) (or a max of "
            "-inf), not np.any"
        ),
        (_any_masked_zeros,),
    ),
    Mistake(
        N_("a fully masked row made uniform"),
        N_("a row with no key to attend to gets zeros in this course (it attends to nothing), not 1/N everywhere"),
        (_uniform_when_masked,),
    ),
    INPUT_MODIFIED,
    DTYPE_OUT,
    INTEGER_OUT,
    WRONG_SHAPE,
    LOWER_PRECISION,
)


def _as_array(out):
    """The learner's answer as a numeric array in its own dtype (the tolerance depends on it), or None."""
    try:
        y = np.asarray(out)
    except Exception:
        return None
    if y.dtype.kind not in "fiub":
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            return None
    return y


def _describe(y, expected):
    y64, e64 = np.asarray(y, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    loose = _inf_row_loose(e64)
    if loose is not None and y64.shape == e64.shape:
        # a row holding +inf: NaN is required at its +inf entries alone, so the numbers compared (and the position
        # the message names) take the learner's NaN or 0 where either is allowed
        want = np.where(loose & (np.isnan(y64) | (y64 == 0)), y64, e64)
        where = [int(i) for i in np.flatnonzero(~loose)]
        text = _("expected NaN at the +inf entries {where} (the others NaN or 0), got {got}").format(
            where=where, got=fmt(y, want)
        )
        return text, y64, want
    hint = ""
    if np.isnan(y64).any() and not np.isnan(e64).any():
        hint = _(" (NaN: did exp overflow, did -inf - (-inf) happen, or 0/0 (every term 0)?)")
    return (
        _("expected {expected}, got {got}").format(expected=fmt(expected, y), got=fmt(y, expected)) + hint,
        y,
        expected,
    )


def _hint(exc) -> str | None:
    if "zero-size" in str(exc) or "empty" in str(exc):
        return _("the empty input: np.max of nothing has no value; return an empty float vector")
    if "Cannot cast ufunc" in str(exc) and "output" in str(exc):  # numpy's UFuncTypeError for out= of integer dtype
        return _(
            "an integer array cannot hold the float results: they were written into x itself (np.exp(x, out=x), "
            "x /= x.sum(): the input modified in place) or into an array of x's integer dtype (np.empty_like(x)); "
            "work on a copy, x = x - x.max(), and let exp and / return new float arrays"
        )
    return None


@exercise("1.1", MISTAKES, solution="safe_softmax")
def check_safe_softmax(fn) -> CheckReport:
    """Check a learner's ``fn(x) -> probabilities`` for 1-D ``x`` against :func:`flashmath.safe_softmax` (exercise 1.1).

    The property battery first (:func:`softmax_properties`, whose docstring states the rules: empty, one element,
    all -inf, +inf, NaN, float16, integer and very negative input, each named with the prompt's words; the inputs
    unchanged and the result's type, dtype and shape on every case), then :func:`softmax_cases`: a small vector,
    all-equal values, values of 1e4, ``-inf`` entries, 46 equal float16 values whose exponentials fit but whose sum
    does not. Named mistakes: :data:`MISTAKES`.
    """
    cases = [(name, (x,)) for name, x in softmax_cases()]
    properties = property_cases([(name, (x,)) for name, x in softmax_properties()])
    raised: list[bool] = []  # per call, in the order of the cases: did it raise ZeroDivisionError?

    def recorded(x):
        try:
            out = fn(x)
        except ZeroDivisionError:
            raised.append(True)
            raise
        except BaseException:
            raised.append(False)
            raise
        raised.append(False)
        if out is None:  # a forgotten return: said so, not "got nan" (np.asarray(None, float) is NaN)
            return PropertyFailure(_("returned None: return the probabilities y (is a return statement missing?)"))
        return out

    report = check_function(
        "check_safe_softmax",
        recorded,
        cases,
        _reference,
        MISTAKES,
        n_out=1,
        names=("y",),
        not_answer=WRONG_SHAPE,
        properties=properties,
        compare=same_probs,
        convert=_as_array,
        describe=_describe,
        hint=_hint,
    )
    _name_zero_division(report, list(properties) + cases, raised)
    return report
