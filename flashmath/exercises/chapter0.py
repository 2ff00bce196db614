"""Chapter 0: exercise 0.1, the scaled scores of one query against every key."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashmath.exercises._report import (
    INPUT_MODIFIED,
    LOWER_PRECISION,
    CheckReport,
    Diagnosis,
    Mistake,
    modified,
    report_value,
    run,
    same,
)


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


WRONG_SHAPE = Mistake("a wrong shape", "return one score per key: an array of shape (M,)")

MISTAKES = (
    Mistake("no scale", "these are the raw dot products q_n . k_m: divide them by sqrt(D)",
            (lambda q, K: _scores(q, K, lambda D, M: 1.0),)),
    Mistake("divided by D", "the scores were divided by D, the width of q_n: divide by sqrt(D)",
            (lambda q, K: _scores(q, K, lambda D, M: 1 / D),)),
    Mistake("divided by sqrt(M)", "the scores were divided by the square root of the number of keys M (len(K)): "
            "divide by sqrt(D), D = len(q_n) the width of q_n and of each key",
            (lambda q, K: _scores(q, K, lambda D, M: 1 / np.sqrt(M)),)),
    Mistake("multiplied by sqrt(D)", "the scale went the wrong way: divide by sqrt(D)",
            (lambda q, K: _scores(q, K, lambda D, M: np.sqrt(D)),)),
    Mistake("the columns of K instead of its rows", "q_n @ K sums over the keys: K is (M, D) with one key per "
            "row, so x_m = K[m, :] . q_n, that is K @ q_n", (_columns,)),
    Mistake("a cosine similarity", "the dot products were divided by the lengths of q_n and k_m: attention divides "
            "only by sqrt(D)", (_cosine,)),
    INPUT_MODIFIED,
    WRONG_SHAPE,
    LOWER_PRECISION,
)


def _hint(exc) -> str | None:
    if "matmul" in str(exc) or "aligned" in str(exc):
        return "K is (M, D), one key per row: the scores are K @ q_n"
    return None


def check_score_row(fn) -> CheckReport:
    """Check a learner's ``fn(q_n, K) -> x`` with ``x_m = q_n . K[m, :] / sqrt(D)`` (chapter 0, exercise 0.1).

    Cases: a small query and keys, ``D = 1``, a single key, a square ``K`` (``M = D``, where ``q_n @ K`` runs), a
    real head from :func:`flashmath.data.load_heads`. Named mistakes: :data:`MISTAKES`.
    """
    from flashmath.data import load_heads

    report = CheckReport("check_score_row")
    rng = np.random.default_rng(0)
    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    cases = [
        ("a small query (D = 3) against 4 keys", rng.normal(size=3), rng.normal(size=(4, 3))),
        ("D = 1 (the scale is 1)", np.array([2.0]), np.array([[1.0], [-3.0]])),
        ("a single key (M = 1)", rng.normal(size=5), rng.normal(size=(1, 5))),
        ("as many keys as dimensions (M = D = 4)", rng.normal(size=4), rng.normal(size=(4, 4))),
        ("a real head (D = 32, M = 46)", heads.q[layer, head, n].astype(np.float64),
         heads.k[layer, head].astype(np.float64)),
    ]
    answers: list[Any] = []  # per case: an array, None, or INPUT_MODIFIED
    ran: list[bool] = []
    for name, q_n, keys in cases:
        q_in, k_in = q_n.copy(), keys.copy()
        out, ok = run(report, name, fn, q_in, k_in, hint=_hint)
        ran.append(ok)
        if ok and (modified(q_n, q_in) or modified(keys, k_in)):
            answers.append(INPUT_MODIFIED)
            continue
        try:
            answers.append(None if not ok or out is None else np.asarray(out, dtype=np.float64))
        except (TypeError, ValueError):
            answers.append(None)
    diagnosis = Diagnosis([c[1:] for c in cases], [a if isinstance(a, np.ndarray) else None for a in answers],
                          MISTAKES, same)
    for i, ((name, q_n, keys), x, ok) in enumerate(zip(cases, answers, ran, strict=False)):
        if not ok:
            continue
        expected = _right(q_n, keys)
        if x is INPUT_MODIFIED:
            report.add(name, False, INPUT_MODIFIED.message())
        elif x is None or x.shape != expected.shape:
            report.add(name, False, f"expected shape {expected.shape}, got {None if x is None else x.shape}: "
                                    f"{WRONG_SHAPE.message()}")
        else:
            report_value(report, name, x, expected, same(x, expected), diagnosis.for_case(i))
    return report.in_order([name for name, *_ in cases])
