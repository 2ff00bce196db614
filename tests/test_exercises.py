"""The checkers pass the solutions and name the classic mistakes, without ever raising."""

import math

import numpy as np

from flashmath import exercises, solutions


def naive_softmax(x):
    e = np.exp(np.asarray(x))
    return e / e.sum()


def safe_but_nan_to_zero(x):
    x = np.asarray(x, dtype=np.float64)
    g = np.max(x)
    y = np.exp(x - g) / np.sum(np.exp(x - g))
    return np.nan_to_num(y)


def two_pass_normalizer(x):
    g = max(x)
    return g, sum(math.exp(v - g) for v in x)


def unguarded_merge(g1, s1, g2, s2):
    g = max(g1, g2)
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


def not_done(*args):
    raise NotImplementedError


def failures(report):
    return [name for name, ok, _ in report.cases if not ok]


def test_solutions_pass():
    assert exercises.check_score_row(solutions.score_row).passed
    assert exercises.check_safe_softmax(solutions.safe_softmax).passed
    assert exercises.check_online_normalizer(solutions.online_normalizer).passed
    assert exercises.check_merge(solutions.merge).passed


def test_naive_softmax_fails_on_overflow_and_masked_rows():
    report = exercises.check_safe_softmax(naive_softmax)
    assert not report.passed
    failed = failures(report)
    assert any("1e4" in f for f in failed) and any("fully masked" in f for f in failed)
    assert any("float16" in f for f in failed)
    assert "FAIL" in repr(report) and "NaN" in repr(report)


def test_nan_to_zero_is_caught():
    failed = failures(exercises.check_safe_softmax(safe_but_nan_to_zero))
    assert any("NaN propagates" in f for f in failed)


def test_two_passes_are_caught():
    report = exercises.check_online_normalizer(two_pass_normalizer)
    assert not report.passed
    assert "2 passes" in repr(report)


def test_unguarded_merge_fails_on_two_empty_parts():
    failed = failures(exercises.check_merge(unguarded_merge))
    assert failed == ["both parts fully masked: expected (-inf, 0), not NaN"]


def test_exceptions_become_failures():
    for check in (exercises.check_safe_softmax, exercises.check_online_normalizer, exercises.check_merge):
        report = check(not_done)
        assert not report.passed
        assert "not implemented yet" in repr(report)


def test_show_prints_a_solution(capsys):
    solutions.show("merge")
    assert "def merge" in capsys.readouterr().out
    try:
        solutions.show("nope")
    except ValueError as exc:
        assert "choose one of" in str(exc)
    else:
        raise AssertionError("show('nope') should raise ValueError")


def test_score_row_without_scale_is_named():
    report = exercises.check_score_row(lambda q, K: np.asarray(K) @ np.asarray(q))
    assert "divide by sqrt(D)" in repr(report)
    assert [ok for _, ok, _ in report.cases] == [False, True, False, False]  # D = 1 has scale 1
