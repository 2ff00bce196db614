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


def python_max_merge(g1, s1, g2, s2):
    """Guarded, but Python's max drops a NaN in its second argument."""
    g = max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


def test_unguarded_merge_fails_on_two_empty_parts():
    report = exercises.check_merge(unguarded_merge)
    assert failures(report) == ["both parts fully masked, (-inf, 0) each", "NaN in the second part's max propagates"]
    assert "-inf - (-inf) is NaN" in repr(report)


def test_python_max_losing_nan_is_explained():
    report = exercises.check_merge(python_max_merge)
    assert failures(report) == ["NaN in the second part's max propagates"]
    assert "max(1.0, nan) returns 1.0" in repr(report)


def test_wrong_dtype_is_named_not_hidden_by_rounding():
    report = exercises.check_safe_softmax(lambda x: solutions.safe_softmax(np.asarray(x, dtype=np.float32)))
    assert "float64 in should give float64 out, got float32" in repr(report)
    report = exercises.check_score_row(lambda q, K: solutions.score_row(np.float32(q), np.float32(K)))
    assert "lower precision" in repr(report)


def test_indexing_twice_counts_reads():
    def index_twice(x):
        g = max(x[i] for i in range(len(x)))
        return g, sum(math.exp(x[i] - g) for i in range(len(x)))

    report = exercises.check_online_normalizer(index_twice)
    assert "read 8 elements of a vector of length 4;" in repr(report)


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


# ----------------------------------------------------------------------------------------------------------------
# Chapters 3-5
# ----------------------------------------------------------------------------------------------------------------


def test_new_solutions_pass():
    assert exercises.check_attention(solutions.attention).passed
    assert exercises.check_loop_swap(solutions.loop_swap).passed
    assert exercises.check_one_loop_step(solutions.one_loop_step).passed


def unscaled_attention(q, k, v):
    x = np.asarray(q) @ np.swapaxes(k, -1, -2)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ v


def softmax_over_queries(q, k, v):
    x = np.asarray(q) @ np.swapaxes(k, -1, -2) / np.sqrt(np.shape(q)[-1])
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True) @ v


def transpose_with_dot_t(q, k, v):
    x = np.asarray(q) @ np.asarray(k).T / np.sqrt(np.shape(q)[-1])  # .T reverses every axis of a 4-D array
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ v


def unsafe_attention(q, k, v):
    x = np.asarray(q) @ np.swapaxes(k, -1, -2) / np.sqrt(np.shape(q)[-1])
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True) @ v


def test_attention_mistakes_are_named():
    report = exercises.check_attention(unscaled_attention)
    assert "divide the scores by sqrt(D)" in repr(report)
    assert [name for name in failures(report) if name.startswith("D = 1")] == []  # D = 1: the scale is 1
    assert "normalise along the last axis" in repr(exercises.check_attention(softmax_over_queries))
    failed = failures(exercises.check_attention(transpose_with_dot_t))
    assert failed == ["batch and heads, shape (B, H, N, D) = (2, 3, 4, 5): transpose only the last two axes of k"]
    report = exercises.check_attention(unsafe_attention)
    assert failures(report) == ["large scores (entries of size 30): the softmax must subtract the row max"]
    assert "subtract each row's max" in repr(report)


def loop_swap_reversed(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        for m in reversed(range(y.shape[1])):  # the keys from last to first: another rounding
            for d in range(v.shape[1]):
                a[n, d] += y[n, m] * v[m, d]
    return a


def test_loop_swap_wants_bits_not_just_closeness():
    report = exercises.check_loop_swap(loop_swap_reversed)
    assert "order-sensitive terms [1, 1e16, -1e16]: added from m = 0 they give 0" in failures(report)
    assert "not bitwise" in repr(report) or "expected" in repr(report)
    transposed = exercises.check_loop_swap(lambda y, v: solutions.loop_swap(y, v).T)
    assert not transposed.passed and "shape" in repr(transposed)
    assert "not implemented yet" in repr(exercises.check_loop_swap(not_done))


def unnormalised_step(g_prev, s_prev, a_prev, x_m, v_m):
    g, s, a = solutions.one_loop_step(g_prev, s_prev, a_prev, x_m, v_m)
    return g, s, a * s  # FlashAttention-2's numerator, never divided


def no_rescale_step(g_prev, s_prev, a_prev, x_m, v_m):
    g = max(g_prev, x_m)
    s = s_prev * math.exp(g_prev - g) + math.exp(x_m - g)
    a = (np.asarray(a_prev) * s_prev + math.exp(x_m - g) * np.asarray(v_m)) / s  # forgot exp(g_{m-1} - g_m)
    return g, s, a


def overflowing_step(g_prev, s_prev, a_prev, x_m, v_m):
    g = max(g_prev, x_m)
    s = s_prev * math.exp(g_prev) / math.exp(g) + math.exp(x_m) / math.exp(g)  # exp of a score alone
    return g, s, (np.asarray(a_prev) * s_prev * math.exp(g_prev - g) + math.exp(x_m - g) * np.asarray(v_m)) / s


def test_one_loop_step_mistakes_are_named():
    report = exercises.check_one_loop_step(unnormalised_step)
    assert "divide by s_m" in repr(report)
    assert failures(report)[0].startswith("the max holds")  # the first key has s_1 = 1: A' = s A' there
    report = exercises.check_one_loop_step(no_rescale_step)
    failed = failures(report)
    assert "the max jumps by 3 (x_m = 5 > g_{m-1} = 2)" in failed
    assert "must be multiplied by s_{m-1} exp(g_{m-1} - g_m) / s_m" in repr(report)
    assert not any(name.startswith("the max holds") for name in failed)
    failed = failures(exercises.check_one_loop_step(overflowing_step))
    assert "the max jumps by 1000 (no overflow: never take exp of a score alone)" in failed
    assert "not implemented yet" in repr(exercises.check_one_loop_step(not_done))


def test_show_prints_the_new_solutions(capsys):
    for name in ("attention", "loop_swap", "one_loop_step"):
        solutions.show(name)
        assert f"def {name}" in capsys.readouterr().out
