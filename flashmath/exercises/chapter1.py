"""Chapter 1: exercise 1.1, safe softmax of one vector."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashmath.exercises._report import (
    INPUT_MODIFIED,
    LOWER_PRECISION,
    CheckReport,
    Diagnosis,
    Mistake,
    error_note,
    fmt,
    modified,
    run,
)
from flashmath.exercises._report import same as _same
from flashmath.softmax import compute_dtype, safe_softmax


def same_probs(a, b) -> bool:
    """Two probability vectors agree (to 2e-3 when either is float16, its precision; else to 1e-9)."""
    low = np.float16 in (np.asarray(a).dtype, np.asarray(b).dtype)
    return _same(a, b, rtol=2e-3 if low else 1e-9)


def softmax_cases():
    """The edge cases of a softmax exercise: ``[(name, x)]``; each one is where some classic mistake shows."""
    return [
        ("a small vector", np.array([1.0, 2.0, 3.0, 0.5])),
        ("a length-1 vector", np.array([3.0])),
        ("all-equal values", np.full(5, 7.0)),
        ("values of 1e4 (exp overflows unless you subtract the max)", np.array([1e4, 1e4 - 1.0, -1e4])),
        ("values far below 0, [-1000, -1001]", np.array([-1000.0, -1001.0])),
        ("-inf entries (masked positions get probability 0)", np.array([0.5, -np.inf, 1.5, -np.inf])),
        ("a fully masked row (all -inf): expected zeros", np.full(3, -np.inf)),
        ("NaN propagates (never silently 0)", np.array([1.0, np.nan, 2.0])),
        ("float16 input of 20 (exp(20) overflows float16)", np.array([20.0, 19.0, 0.0], dtype=np.float16)),
        ("46 equal values of 10 in float16 (each exp(10) fits; their sum does not)", np.full(46, 10.0, np.float16)),
    ]


def _softmax_like(x, shift, exp=np.exp, finish=None, in_dtype=False):
    """A softmax variant: ``e = exp(x - shift(x))``, then ``finish(e)`` (default ``e / sum(e)``), cast back.

    Computed in ``x``'s own dtype when ``in_dtype``, else in float32 for float16 input (as the right answer).
    """
    x = np.asarray(x)
    work = x if in_dtype else x.astype(compute_dtype(x.dtype))
    e = exp(work - shift(work))
    y = e / np.sum(e) if finish is None else finish(e, work)
    return np.asarray(y).astype(x.dtype)


def _max(x):
    return np.max(x)


def _guarded(model):
    """``model`` with the special case of the course: a row of only -inf gives zeros."""
    return lambda x: np.zeros_like(np.asarray(x)) if np.all(np.asarray(x) == -np.inf) else model(x)


def _uniform_when_masked(x):
    x = np.asarray(x)
    return np.full_like(x, 1 / x.size) if np.all(x == -np.inf) else safe_softmax(x)


def _max_from_zero(x):
    return _softmax_like(x, lambda w: np.maximum(0, np.max(w)))


NOT_SUBTRACTED = Mistake(
    "the max not subtracted", "exp(x) overflows to inf for large x (above 11.09 in float16, 88.72 in float32, 709.78 "
    "in float64), or their sum does, and inf / inf is NaN, finite / inf is 0. Subtract the max first: "
    "exp(x - max(x)) / sum(exp(x - max(x)))",
    (lambda x: _softmax_like(x, lambda w: 0, in_dtype=True), lambda x: _softmax_like(x, lambda w: 0)))

MISTAKES = (
    NOT_SUBTRACTED,
    Mistake("the max started at 0", "a running max that starts at 0 is never below 0, so for a vector of very "
            "negative values every exp(x - g) underflows to 0 and 0 / 0 gives NaN. Start the max at -inf (nothing "
            "seen yet), or take np.max(x)", (_max_from_zero, _guarded(_max_from_zero))),
    Mistake("the sum started at 1", "the denominator is sum_j exp(x_j - g) and nothing more: start the sum at 0",
            (lambda x: _softmax_like(x, _max, finish=lambda e, w: e / (1 + np.sum(e))),)),
    Mistake("a wrong base (2 or 10) instead of e", "softmax uses the natural exponential: np.exp or math.exp, "
            "not 2 ** x or 10 ** x",
            (lambda x: _softmax_like(x, _max, exp=np.exp2), lambda x: _softmax_like(x, _max, exp=lambda t: 10.0 ** t))),
    Mistake("divided twice", "each exp(x_i - g) is divided by the sum once: y_i = exp(x_i - g) / s",
            (lambda x: _softmax_like(x, _max, finish=lambda e, w: e / np.sum(e) / np.sum(e)),)),
    Mistake("exp missing", "the values were normalised without exponentiating: y_i = exp(x_i - g) / "
            "sum_j exp(x_j - g)", (lambda x: _softmax_like(x, _max, exp=lambda t: t),
                                   lambda x: _softmax_like(x, lambda w: 0, exp=lambda t: t))),
    Mistake("log-probabilities returned", "x - g - log(s) is the log-softmax: return exp(x - g) / s",
            (lambda x: _softmax_like(x, _max, finish=lambda e, w: w - np.max(w) - np.log(np.sum(e))),)),
    Mistake("the min subtracted instead of the max", "subtracting the min makes the exponents >= 0, so exp still "
            "overflows; subtract the max: every exponent is then <= 0", (lambda x: _softmax_like(x, np.min),)),
    Mistake("NaN turned into 0", "a NaN in the input means something went wrong upstream: let it through (NaN in, "
            "NaN out) instead of np.nan_to_num or a guard that returns zeros",
            (lambda x: np.nan_to_num(safe_softmax(x), nan=0.0),)),
    Mistake("-inf - (-inf) on a fully masked row", "when every entry is -inf the max is -inf and x - max is "
            "-inf - (-inf) = NaN. The course's convention for a fully masked row is all zeros: test for a max of "
            "-inf and return zeros", (lambda x: _softmax_like(x, _max),)),
    Mistake("a fully masked row made uniform", "a row with no key to attend to gets zeros in this course (it "
            "attends to nothing), not 1/N everywhere", (_uniform_when_masked,)),
    INPUT_MODIFIED,
    Mistake("a different dtype out", "return the input's dtype (float16 in, float16 out): compute in a wider type "
            "if you like, then cast back with .astype(x.dtype)"),
    Mistake("a wrong shape", "return one probability per input entry, the shape of x"),
    LOWER_PRECISION,
)
DTYPE_OUT, WRONG_SHAPE = MISTAKES[-3], MISTAKES[-2]


def check_safe_softmax(fn) -> CheckReport:
    """Check a learner's ``fn(x) -> probabilities`` for 1-D ``x`` against :func:`flashmath.safe_softmax` (exercise 1.1).

    Cases (:func:`softmax_cases`): a small vector, length 1, all-equal values, values of 1e4, values far below 0,
    ``-inf`` entries, a fully masked row (zeros expected), NaN (NaN expected), float16 input (float16 output, no
    overflow), 46 equal float16 values whose exponentials fit but whose sum does not. Named mistakes: :data:`MISTAKES`.
    """
    report = CheckReport("check_safe_softmax")
    cases = softmax_cases()
    answers: list[Any] = []  # per case: an array, None, or INPUT_MODIFIED
    ran: list[bool] = []
    for name, x in cases:
        x_in = x.copy()
        y, ok = run(report, name, fn, x_in)
        ran.append(ok)
        if ok and modified(x, x_in):
            answers.append(INPUT_MODIFIED)
            continue
        try:
            answers.append(np.asarray(y) if ok and y is not None else None)
            if answers[-1] is not None and answers[-1].dtype.kind not in "fiub":
                answers[-1] = answers[-1].astype(np.float64)
        except (TypeError, ValueError):
            answers[-1] = None
    usable = [a if isinstance(a, np.ndarray) else None for a in answers]
    diagnosis = Diagnosis([(x,) for _, x in cases], usable, MISTAKES, same_probs)
    for i, ((name, x), y, ok) in enumerate(zip(cases, answers, ran, strict=False)):
        if not ok:
            continue
        expected = safe_softmax(x)
        if y is INPUT_MODIFIED:
            report.add(name, False, INPUT_MODIFIED.message())
        elif y is None or y.shape != x.shape:
            report.add(name, False, f"expected shape {x.shape}, got {None if y is None else y.shape}: "
                                    f"{WRONG_SHAPE.message()}")
        elif y.dtype != x.dtype and same_probs(y.astype(np.float64), expected.astype(np.float64)):
            report.add(name, False, f"{x.dtype} in should give {x.dtype} out, got {y.dtype}: {DTYPE_OUT.message()}")
        elif same_probs(y, expected):
            report.add(name, True)
        elif mistake := diagnosis.for_case(i):
            report.add(name, False, f"expected {fmt(expected)}, got {fmt(y)}: {mistake.message()}")
        elif y.dtype != x.dtype:
            report.add(name, False, f"{x.dtype} in should give {x.dtype} out, got {y.dtype}: {DTYPE_OUT.message()}")
        else:
            hint = ""
            if np.isnan(y.astype(np.float64)).any() and not np.isnan(expected.astype(np.float64)).any():
                hint = " (NaN: did exp overflow, or -inf - (-inf) happen?)"
            report.add(name, False, f"expected {fmt(expected)}, got {fmt(y)}{hint}{error_note(y, expected)}")
    return report.in_order([name for name, *_ in cases])
