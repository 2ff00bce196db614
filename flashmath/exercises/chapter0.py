"""Chapter 0: exercise 0.1, the scaled scores of one query against every key."""

from __future__ import annotations

import math

import numpy as np

from flashmath.exercises._cases import WRONG_SHAPE, check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, LOWER_PRECISION, CheckReport, Mistake
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_


def _scores(q_n, K, scale):
    q_n, K = np.asarray(q_n, dtype=np.float64), np.asarray(K, dtype=np.float64)
    return K @ q_n * scale(q_n.shape[0], K.shape[0])


def _right(q_n, K):
    return _scores(q_n, K, lambda D, M: 1 / np.sqrt(D))


def _columns(q_n, K):
    q_n, K = np.asarray(q_n, dtype=np.float64), np.asarray(K, dtype=np.float64)
    return q_n @ K / np.sqrt(q_n.shape[0])  # sums over the keys: runs only when M == D


def _cosine(q_n, K):
    q_n, K = np.asarray(q_n, dtype=np.float64), np.asarray(K, dtype=np.float64)
    return K @ q_n / (np.linalg.norm(K, axis=1) * np.linalg.norm(q_n))


MISTAKES = (
    Mistake(
        N_("no scale"),
        N_("these are the raw dot products q_n . k_m: divide them by sqrt(D)"),
        (lambda q, K: _scores(q, K, lambda D, M: 1.0),),
    ),
    Mistake(
        N_("divided by D"),
        N_("the scores were divided by D, the width of q_n: divide by sqrt(D)"),
        (lambda q, K: _scores(q, K, lambda D, M: 1 / D),),
    ),
    Mistake(
        N_("divided by sqrt(M)"),
        N_(
            "the scores were divided by the square root of the number of keys M (len(K)): divide by sqrt(D), D = "
            "len(q_n) the width of q_n and of each key"
        ),
        (lambda q, K: _scores(q, K, lambda D, M: 1 / np.sqrt(M)),),
    ),
    Mistake(
        N_("D**1/2 (precedence)"),
        N_(
            "x / D**1/2 is (x / D**1) / 2 = x / (2 D): ** binds tighter than /, and / goes left to right. Write "
            "D**0.5, D**(1/2) or math.sqrt(D) (and x / (D ** 1 / 2) divides by D / 2, not sqrt(D))"
        ),
        (lambda q, K: _scores(q, K, lambda D, M: 1 / (2 * D)), lambda q, K: _scores(q, K, lambda D, M: 2 / D)),
    ),
    Mistake(
        N_("math.isqrt (an integer square root)"),
        N_(
            "math.isqrt(D) rounds sqrt(D) down to an integer (isqrt(32) = 5, not 5.657): use math.sqrt(D) or np.sqrt(D)"
        ),
        (lambda q, K: _scores(q, K, lambda D, M: 1 / math.isqrt(D)),),
    ),
    Mistake(
        N_("multiplied by sqrt(D)"),
        N_("the scale went the wrong way: divide by sqrt(D)"),
        (lambda q, K: _scores(q, K, lambda D, M: np.sqrt(D)),),
    ),
    Mistake(
        N_("the columns of K instead of its rows"),
        N_(
            "q_n @ K sums over the keys: K is (M, D) with one key per row, so x[m] = K[m, :] . q_n (code indices, "
            "from 0), that is K @ q_n"
        ),
        (_columns,),
    ),
    Mistake(
        N_("a cosine similarity"),
        N_("the dot products were divided by the lengths of q_n and k_m: attention divides only by sqrt(D)"),
        (_cosine,),
    ),
    INPUT_MODIFIED,
    Mistake(
        N_("q_n and K broadcast to a matrix"),
        N_(
            "return a 1-D array of the M scores, K @ q_n / sqrt(D): q_n * K broadcasts to an (M, D) matrix "
            "instead of summing over d"
        ),
        (lambda q, K: np.asarray(q) * np.asarray(K) / math.sqrt(len(q)), lambda q, K: np.asarray(q) * np.asarray(K)),
    ),
    WRONG_SHAPE,
    LOWER_PRECISION,
)


def _hint(exc) -> str | None:
    if "matmul" in str(exc) or "aligned" in str(exc):
        return _("K is (M, D), one key per row: the scores are K @ q_n")
    return None


def score_row_properties():
    """The property cases of exercise 0.1: ``[(name, (q_n, K))]`` (the module :mod:`~flashmath.exercises._cases`).

    Only what the prompt states: one key of width one, and a query and keys whose entries are all negative (so
    every score is positive). Chapter 0 teaches notation, not floating point: the empty input, -inf, +inf, NaN,
    float16 and integer input are not its subject and are not tested here
    (chapters 1-3 state and test them where they teach them).
    """
    rng = np.random.default_rng(10)
    q, K = rng.normal(size=3), rng.normal(size=(4, 3))
    return property_cases(
        [
            (_("one key of width one (D = 1, M = 1)"), (np.array([3.0]), np.array([[-2.0]]))),
            (_("negative-only q_n and K (positive scores)"), (-np.abs(q) - 1, -np.abs(K) - 1)),
        ]
    )


@exercise("0.1", MISTAKES, solution="score_row", property_cases=2)
def check_score_row(fn) -> CheckReport:
    """Check a learner's ``fn(q_n, K) -> x`` with ``x[m] = q_n . K[m, :] / sqrt(D)`` (chapter 0, exercise 0.1).

    The property battery first (:func:`score_row_properties`: one key of width one, negative-only q_n and K; the
    inputs unchanged and the result's form on every case), then a small query and keys, ``D = 1``, a single key,
    a square ``K`` (``M = D``, where ``q_n @ K`` runs), a real head from :func:`flashmath.data.load_heads`. Every
    input is float64 and the scores are compared in float64 (to 1e-9). Named mistakes: :data:`MISTAKES`.
    """
    from flashmath.data import load_heads

    rng = np.random.default_rng(0)
    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    cases = [
        (_("a small query (D = 3) against 4 keys"), (rng.normal(size=3), rng.normal(size=(4, 3)))),
        (_("D = 1 (the scale is 1)"), (np.array([2.0]), np.array([[1.0], [-3.0]]))),
        (_("a single key (M = 1)"), (rng.normal(size=5), rng.normal(size=(1, 5)))),
        (_("as many keys as dimensions (M = D = 4)"), (rng.normal(size=4), rng.normal(size=(4, 4)))),
        (
            _("a real head (D = 32, M = 46)"),
            (heads.q[layer, head, n].astype(np.float64), heads.k[layer, head].astype(np.float64)),
        ),
    ]
    return check_function(
        "check_score_row",
        fn,
        cases,
        _right,
        MISTAKES,
        n_out=1,
        names=("x",),
        not_answer=WRONG_SHAPE,
        hint=_hint,
        properties=score_row_properties(),
        arg_names=("q_n", "K"),
    )
