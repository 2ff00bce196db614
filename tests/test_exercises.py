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


def test_show_without_a_name_lists_the_solutions(capsys):
    solutions.show()
    out = capsys.readouterr().out
    assert all(name in out for name in ("score_row", "loop_swap", "one_loop_step")) and "show(" in out


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
    assert "not bit for bit" in repr(report) and "strictly in the order m = 0, 1, ..., M-1" in repr(report)
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


# ----------------------------------------------------------------------------------------------------------------
# Review fixes: named mistakes, float32 answers, compact messages, the order of a sum
# ----------------------------------------------------------------------------------------------------------------

ORDER_CASE = "order-sensitive sums of 64 terms: 2^53, 60 terms below 1 that vanish into it in order, -2^53, ..."


def message(report, prefix):
    """The message of the first case whose name starts with ``prefix``."""
    return next(msg for name, _, msg in report.cases if name.startswith(prefix))


def attention_with_scale(scale_of):
    def fn(q, k, v):
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        x = q @ np.swapaxes(k, -1, -2) * scale_of(q.shape[-1], k.shape[-2], v.shape[-1])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True) @ v
    return fn


def test_wrong_scales_are_named():
    report = exercises.check_attention(attention_with_scale(lambda D, M, Dv: 1 / math.sqrt(M)))
    assert "divided by sqrt(M) = sqrt(7)" in message(report, "N != M")
    report = exercises.check_attention(attention_with_scale(lambda D, M, Dv: 1 / D))
    assert "divided by D = 32" in message(report, "a real head")
    assert "D = 1 (the scale is 1)" not in failures(report)  # 1 / D is right for D = 1
    report = exercises.check_attention(attention_with_scale(lambda D, M, Dv: 1 / math.sqrt(Dv)))
    assert "the width of V" in message(report, "values of another width")


def test_softmax_over_the_queries_is_named_for_one_query_too():
    report = exercises.check_attention(softmax_over_queries)
    assert "with one query (N = 1) every weight is then 1" in message(report, "N = 1")
    assert "normalise along the last axis" in message(report, "N != M")


def test_float32_answers_report_the_largest_difference_and_a_float32_hint():
    def attention32(q, k, v):
        return solutions.attention(*(np.asarray(a, dtype=np.float32) for a in (q, k, v))).astype(np.float32)

    def loop_swap32(y, v):
        return solutions.loop_swap(np.asarray(y, dtype=np.float32), np.asarray(v, dtype=np.float32))

    for report in (exercises.check_attention(attention32), exercises.check_loop_swap(loop_swap32)):
        text = message(report, "a small product" if "loop" in report.title else "N != M")
        assert "largest difference" in text and "float32" in text
        assert not report.passed


def test_messages_about_big_arrays_stay_short():
    def off_by_a_bit(q, k, v):
        return solutions.attention(q, k, v) + 0.1

    text = message(exercises.check_attention(off_by_a_bit), "batch and heads")
    assert "shape (2, 3, 4, 5)" in text and "largest difference 0.1" in text
    assert len(text) < 400, text  # not the 120 numbers of each array
    report = exercises.check_loop_swap(lambda y, v: solutions.loop_swap(y, v) + 1)
    assert all("\n" not in text for _, _, text in report.cases)  # one line per case, (4, 1) arrays included


def test_the_order_case_needs_exactly_the_order_m_0_1_2():
    """The sums of the order case give their bits only in the strict order, whatever BLAS a machine has."""
    from fractions import Fraction

    y, v = exercises._order_case()
    terms = y * v[:, 0]  # (N, M): the products, all exact but the last one of rows 0-2
    strict = [sum(row[1:], row[0]) for row in terms]  # left to right, from m = 0

    def blocked(row, k):  # k accumulators, as SIMD or BLAS kernels keep
        return sum(sum(row[j::k]) for j in range(1, k)) + sum(row[0::k])

    def pairwise(row):
        return row[0] if len(row) == 1 else pairwise(row[:len(row) // 2]) + pairwise(row[len(row) // 2:])

    def fused(n):  # the strict order with a fused multiply-add: one rounding per step
        acc = 0.0
        for m in range(y.shape[1]):
            acc = float(Fraction(acc) + Fraction(y[n, m]) * Fraction(v[m, 0]))
        return acc

    others = {"reversed": [sum(row[::-1][1:], row[::-1][0]) for row in terms], "fsum": [math.fsum(r) for r in terms],
              "pairwise": [pairwise(list(r)) for r in terms], "fused multiply-add": [fused(n) for n in range(4)]}
    others.update({f"{k} accumulators": [blocked(r, k) for r in terms] for k in (2, 4, 8, 16)})
    assert strict[:3] == [0.0, 0.0, 0.0]
    for name, sums in others.items():
        assert sums[:3] != strict[:3], name


def loop_swap_python_floats(y, v):
    y, v = np.asarray(y).tolist(), np.asarray(v).tolist()
    a = [[0.0] * len(v[0]) for _ in y]
    for n in range(len(y)):
        for m in range(len(v)):
            for d in range(len(v[0])):
                a[n][d] += y[n][m] * v[m][d]
    return a


def loop_swap_rows(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        for m in range(y.shape[1]):
            a[n] += y[n, m] * v[m]  # the whole row of partial sums at once: still one add per element and key
    return a


def test_strict_order_loops_pass_the_loop_swap_check():
    for fn in (solutions.loop_swap, loop_swap_python_floats, loop_swap_rows):
        assert exercises.check_loop_swap(fn).passed, fn.__name__


def test_blas_einsum_fsum_and_other_orders_fail_the_order_case():
    def fsum(y, v):
        y, v = np.asarray(y), np.asarray(v)
        return np.array([[math.fsum(y[n] * v[:, d]) for d in range(v.shape[1])] for n in range(y.shape[0])])

    wrong = {
        "@": lambda y, v: y @ v,
        "np.dot": np.dot,
        "np.einsum": lambda y, v: np.einsum("nm,md->nd", y, v),
        "np.einsum, optimize": lambda y, v: np.einsum("nm,md->nd", y, v, optimize=True),
        "a row at a time with @": lambda y, v: np.array([row @ v for row in y]),
        "math.fsum": fsum,
        "reversed": loop_swap_reversed,
    }
    for name, fn in wrong.items():
        report = exercises.check_loop_swap(fn)
        assert ORDER_CASE in failures(report), name
        text = message(report, ORDER_CASE)
        assert "BLAS" in text and "order m = 0, 1, ..., M-1" in text, (name, text)


def test_the_loop_swap_solution_is_bitwise_the_package_loop_in_every_dtype():
    import inspect

    from flashmath import matmul_nmd

    rng = np.random.default_rng(7)
    for dtype in (np.float16, np.float32, np.float64):
        y, v = rng.random((3, 9)).astype(dtype), rng.standard_normal((9, 4)).astype(dtype)
        a = solutions.loop_swap(y, v)
        assert a.dtype == dtype and np.array_equal(a, matmul_nmd(y, v))
    assert "[[0.0]" not in inspect.getsource(solutions.loop_swap)  # our idiom: a numpy row of partial sums


def one_loop_variant(update):
    """A step with the right (g_m, s_m) and ``update(a_prev, v_m, rescale, e, s_prev, s) -> A'_m``."""
    def step(g_prev, s_prev, a_prev, x_m, v_m):
        g = max(g_prev, x_m)
        rescale, e = math.exp(g_prev - g), math.exp(x_m - g)
        s = s_prev * rescale + e
        return g, s, update(np.asarray(a_prev), np.asarray(v_m), rescale, e, s_prev, s)
    return step


def test_each_wrong_one_loop_update_is_named():
    cases = {
        "divided by s_m twice": lambda a, v, r, e, sp, s: (a * sp * r / s + e / s * v) / s,
        "A'_{m-1} was not corrected": lambda a, v, r, e, sp, s: a + e / s * v,
        "unnormalised numerator s A' of FlashAttention-2": lambda a, v, r, e, sp, s: a * r + e * v,
        "exp(g_{m-1} - g_m) is missing": lambda a, v, r, e, sp, s: (a * sp + e * v) / s,
        "s_{m-1} is missing": lambda a, v, r, e, sp, s: (a * r + e * v) / s,
    }
    for named, update in cases.items():
        report = exercises.check_one_loop_step(one_loop_variant(update))
        assert not report.passed
        assert named in message(report, failures(report)[0]), (named, repr(report))
    # no correction at all is wrong even when the max holds: s_{m-1} / s_m < 1
    report = exercises.check_one_loop_step(one_loop_variant(cases["A'_{m-1} was not corrected"]))
    assert "the max holds (x_m = 0.5 < g_{m-1} = 2)" in failures(report)


def test_an_unnamed_wrong_update_gets_the_generic_hint_only_where_the_max_jumps():
    report = exercises.check_one_loop_step(
        one_loop_variant(lambda a, v, r, e, sp, s: a * sp * r / s + e / s * v + 0.01))
    assert "when the max jumps" in message(report, "the max jumps by 3")
    assert "when the max jumps" not in message(report, "the max holds")
    assert "largest difference 0.01" in message(report, "the max holds")
