"""The checkers of chapters 0-5 catch every classic mistake and name it, and never raise.

``WRONG[checker][mistake name]`` is a wrong solution written the way a learner would write it, with that one
mistake; the checker must fail it and name that mistake (and no other, except the ones listed in ``ALSO``). That the
solutions pass, with their property cases, is tested for every exercise in ``tests/test_exercises_registry.py``.
"""

import functools
import math
import re
import warnings

import numpy as np
import pytest
from helpers import checker_tests, named

import flashmath as fm
from flashmath import exercises, solutions
from flashmath.exercises import chapter2, chapter4
from flashmath.exercises._report import fmt


def failures(report):
    return [name for name, ok, _ in report.cases if not ok]


def message(report, prefix):
    """The message of the first case whose name starts with ``prefix``."""
    return next(msg for name, _, msg in report.cases if name.startswith(prefix))


def nan_max(a, b):
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


# ----------------------------------------------------------------------------------------------------------------
# Chapter 0: score_row
# ----------------------------------------------------------------------------------------------------------------


def score_row_scaled_in_place(q_n, K):
    q_n /= math.sqrt(len(q_n))  # modifies the caller's array
    return np.asarray(K) @ q_n


def score_row_cosine(q_n, K):
    return np.array([q_n @ k_m / (np.linalg.norm(q_n) * np.linalg.norm(k_m)) for k_m in K])


SCORE_ROW = {
    "no scale": lambda q, K: np.asarray(K) @ np.asarray(q),
    "divided by D": lambda q, K: np.asarray(K) @ q / len(q),
    "divided by sqrt(M)": lambda q, K: np.asarray(K) @ q / math.sqrt(len(K)),
    "multiplied by sqrt(D)": lambda q, K: np.asarray(K) @ q * math.sqrt(len(q)),
    "the columns of K instead of its rows": lambda q, K: np.asarray(q) @ np.asarray(K) / math.sqrt(len(q)),
    "a cosine similarity": score_row_cosine,
    "the input modified in place": score_row_scaled_in_place,
    "a wrong shape": lambda q, K: (np.asarray(K) @ q / math.sqrt(len(q)))[:, None],
    "q_n and K broadcast to a matrix": lambda q, K: np.asarray(q) * np.asarray(K) / math.sqrt(len(q)),
    "a lower precision": lambda q, K: solutions.score_row(np.float32(q), np.float32(K)),
    "D**1/2 (precedence)": lambda q, K: np.asarray(K, dtype=float) @ np.asarray(q, dtype=float) / len(q) ** 1 / 2,
    "math.isqrt (an integer square root)": lambda q, K: (
        np.asarray(K, dtype=float) @ np.asarray(q, dtype=float) / math.isqrt(len(q))
    ),
}


# ----------------------------------------------------------------------------------------------------------------
# Chapter 1: safe softmax
# ----------------------------------------------------------------------------------------------------------------


def out_dtype(x):
    """The dtype of a softmax of ``x``: its own when it is floating-point, float64 for integers."""
    x = np.asarray(x)
    return x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)


def softmax_with(g_of=np.max, exp=np.exp, finish=None, guard=True):
    """A learner's safe softmax with one step changed: the max, the exponential or the final division."""

    def fn(x):
        x = np.asarray(x)
        w = x.astype(np.promote_types(x.dtype, np.float32))
        if guard and np.all(w == -np.inf):
            return np.zeros(np.shape(x), out_dtype(x))
        e = exp(w - g_of(w))
        y = e / e.sum() if finish is None else finish(e, w)
        return y.astype(out_dtype(x))

    return fn


def max_from_zero(x):
    g = 0.0  # the running max starts at 0
    for v in x:
        g = nan_max(g, float(v))
    e = np.exp(np.asarray(x, dtype=np.float64) - g)
    return (e / e.sum()).astype(out_dtype(x))


def max_from_zero_guarded(x):
    if np.all(np.asarray(x) == -np.inf):
        return np.zeros(np.shape(x), out_dtype(x))
    return max_from_zero(x)


def sum_from_one(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(x.dtype, np.float32))
    g = w.max()
    if g == -np.inf:
        return np.zeros(np.shape(x), out_dtype(x))
    s = 1.0  # the sum starts at 1
    for v in w:
        s += np.exp(v - g)
    return (np.exp(w - g) / s).astype(out_dtype(x))


def naive(x):
    e = np.exp(np.asarray(x))
    return e / e.sum()


def in_place_softmax(x):
    x -= np.max(x)  # changes the caller's array
    e = np.exp(x)
    return e / e.sum()


def uniform_when_masked(x):
    x = np.asarray(x)
    if np.all(x == -np.inf):
        return np.full_like(x, 1 / len(x))
    return solutions.safe_softmax(x)


def softmax_inf_row_zeros(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(out_dtype(x), np.float32))
    if w.size == 0:
        return w.astype(out_dtype(x))
    g = w.max()
    if not np.isfinite(g):  # meant for -inf (a masked row), but +inf and NaN land here too
        return np.zeros(x.shape, out_dtype(x))
    e = np.exp(w - g)
    return (e / e.sum()).astype(out_dtype(x))


def softmax_cast_back(x):
    x = np.asarray(x)
    y = solutions.safe_softmax(x.astype(np.promote_types(x.dtype, np.float32)))
    return y.astype(x.dtype)  # the exercise's old hint: [3, 1, 2] gives [0, 0, 0]


SAFE_SOFTMAX = {
    "the max not subtracted": naive,
    "the max started at 0": max_from_zero,
    "the sum started at 1": sum_from_one,
    "a wrong base (2 or 10) instead of e": softmax_with(exp=np.exp2),
    "divided twice": softmax_with(finish=lambda e, w: e / e.sum() / e.sum()),
    "exp missing": lambda x: np.asarray(x) / np.sum(x),
    "log-probabilities returned": softmax_with(finish=lambda e, w: w - w.max() - np.log(e.sum())),
    "the min subtracted instead of the max": softmax_with(g_of=np.min),
    "NaN or +inf turned into zeros": lambda x: np.nan_to_num(solutions.safe_softmax(x)),
    "-inf - (-inf) on a fully masked row": softmax_with(guard=False),
    "a fully masked row made uniform": uniform_when_masked,
    "the input modified in place": in_place_softmax,
    "a different dtype out": lambda x: solutions.safe_softmax(np.asarray(x, dtype=np.float64)),
    "a wrong shape": lambda x: solutions.safe_softmax(x)[:, None],
    "a lower precision": lambda x: solutions.safe_softmax(np.asarray(x, dtype=np.float32)).astype(out_dtype(x)),
    "an integer result": softmax_cast_back,
}


def in_place_exp_softmax(x):
    x -= x.max()
    np.exp(x, out=x)  # integer x: numpy cannot write exp's floats into it
    x /= x.sum()
    return x


def exp_into_empty_like(x):
    x = np.asarray(x)
    y = np.empty_like(x)  # integer x: an integer array
    np.exp(x - x.max(), out=y)
    return y / y.sum()


@pytest.mark.parametrize("fn", [in_place_exp_softmax, exp_into_empty_like])
def test_exp_written_into_an_integer_array_gets_a_hint_besides_numpys_error(fn):
    """zhrev-e 01-7: the integer case raised numpy's UFuncTypeError with no hint of ours; the hint names both
    ways an integer array receives exp's results (the input changed in place, or an array of its dtype)."""
    text = message(exercises.check_safe_softmax(fn), "property: integers in give float64 out")
    assert "(raised UFuncTypeError: " in text and text.endswith(")")  # our hint first, numpy's text after it
    assert "the input modified in place" in text and "np.empty_like(x)" in text
    assert text.index("the input modified in place") < text.index("raised UFuncTypeError")


# ----------------------------------------------------------------------------------------------------------------
# Chapter 2: online normalizer, merge, three parts
# ----------------------------------------------------------------------------------------------------------------


def normalizer_with(step=None, g=-math.inf, s=0.0, guard=True, first=None, maximum=nan_max):
    """A learner's one-pass normalizer: ``s = step(s, g_old, g_new, x_i)``, the right one by default."""
    step = step or (lambda s, g_old, g_new, x_i: s * math.exp(g_old - g_new) + math.exp(x_i - g_new))

    def fn(x):
        g_run, s_run = g, s
        for x_i in x:  # the only pass
            g_new = maximum(g_run, x_i)
            if guard and g_new == -math.inf:
                continue
            s_run = first(x_i) if first and g_run == -math.inf else step(s_run, g_run, g_new, x_i)
            g_run = g_new
        return g_run, s_run

    return fn


def counted_twice(x):
    g, s = x[0], 1.0  # the first element already counted ...
    for x_i in x:  # ... and counted again here
        g_new = nan_max(g, x_i)
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


def two_passes(x):
    g = -math.inf
    for v in x:  # pass 1: the max
        g = nan_max(g, v)
    if g == -math.inf:
        return g, 0.0
    return g, sum(math.exp(v - g) for v in x)  # pass 2: the sum


def max_started_at_first_element(x):
    g, s = x[0], 0.0  # reads x[0] once more than the loop below
    for x_i in x:
        g_new = nan_max(g, x_i)
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, s


def normalizer_from_first(x):
    it = iter(x)
    g, s = next(it), 1.0  # the first element starts the state: StopIteration on an empty vector
    for x_i in it:
        g_new = nan_max(g, x_i)
        if g_new == -math.inf:
            continue
        s = (s * math.exp(g - g_new) if g != -math.inf else 0.0) + math.exp(x_i - g_new)
        g = g_new
    return (g, 0.0) if g == -math.inf else (g, s)


def normalizer_buffered(x):
    a = np.array(list(x), dtype=np.float64)  # one sweep of x ... into a copy, then two passes over the copy
    if a.size == 0 or np.all(a == -np.inf):
        return -math.inf, 0.0
    g = a.max()
    return float(g), float(np.exp(a - g).sum())


NORMALIZER = {
    "the max not subtracted": normalizer_with(step=lambda s, g_old, g_new, x_i: s + math.exp(x_i)),
    "the max started at 0": normalizer_with(g=0.0),
    "the sum started at 1": normalizer_with(s=1.0),
    "the first element counted twice": counted_twice,
    "a wrong base (2 or 10) instead of e": normalizer_with(
        step=lambda s, go, gn, xi: s * 2 ** (go - gn) + 2 ** (xi - gn)
    ),
    "the rescale missing": normalizer_with(step=lambda s, go, gn, xi: s + math.exp(xi - gn)),
    "the rescale inverted": normalizer_with(
        step=lambda s, go, gn, xi: s * math.exp(gn - go) + math.exp(xi - gn), first=lambda xi: 1.0
    ),
    "the new term relative to the old max": normalizer_with(
        step=lambda s, go, gn, xi: s * math.exp(go - gn) + math.exp(xi - go), first=lambda xi: 1.0
    ),
    "(s, g) swapped": lambda x: tuple(reversed(normalizer_with()(x))),
    "-inf - (-inf) while nothing is seen": normalizer_with(guard=False),
    "Python's max dropping NaN": normalizer_with(maximum=max),
    "two passes over x": two_passes,
    "an element read twice": max_started_at_first_element,
    "not a pair": lambda x: normalizer_with()(x)[1],
    "the rescale applied to the new term": normalizer_with(
        step=lambda s, go, gn, xi: s + math.exp(xi - gn) * math.exp(go - gn)
    ),
    "the empty vector not handled": normalizer_from_first,
    "the input buffered": normalizer_buffered,
}


MEMORY_CASE = "property: 4 000 values (the right state, in one pass, in constant memory)"


def test_the_memory_case_passes_a_right_answer():
    report = exercises.check_online_normalizer(normalizer_with())
    assert report.passed
    assert [name for name, _, _ in report.cases if name.startswith("property: 4 000")] == [MEMORY_CASE]


def test_an_inverted_rescale_first_fails_as_a_wrong_state_not_a_memory_problem():
    """rev8-a: the 4 000-value case compares the state as well as the memory; its name says so, and an inverted
    rescale fails it with the state and the mistake, not with a memory figure."""
    report = exercises.check_online_normalizer(NORMALIZER["the rescale inverted"])
    first = next((name, msg) for name, ok, msg in report.cases if not ok)
    assert first[0] == MEMORY_CASE
    assert first[1].startswith("expected (g, s) = (") and "looks like the rescale inverted" in first[1]
    assert "kB" not in first[1]
    assert "kB" in message(exercises.check_online_normalizer(normalizer_buffered), MEMORY_CASE)


def normalizer_reading_each_element_twice(x):
    g, s = -math.inf, 0.0
    for i in range(len(x)):
        g_new = nan_max(g, x[i])  # x[i] read here ...
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x[i] - g_new)  # ... and again here
        g = g_new
    return g, s


def test_an_element_read_twice_in_the_loop_is_not_told_it_read_x0_before_the_loop():
    """rev-p-02-3: a right loop that reads x[i] twice per step was told it read x[0] before the loop; the message
    now names both ways of reading an element twice, the per-step one first."""
    report = exercises.check_online_normalizer(normalizer_reading_each_element_twice)
    assert not report.passed
    failing = [msg for _, ok, msg in report.cases if not ok]
    assert failing and all("x_i = x[i]" in msg for msg in failing)
    assert exercises.check_online_normalizer(normalizer_with()).passed


def merge_with(term=lambda s, g_k, g: s * math.exp(g_k - g), g_of=nan_max, guard=True):
    def fn(g1, s1, g2, s2):
        g = g_of(g1, g2)
        if guard and g == -math.inf:
            return g, 0.0
        return g, term(s1, g1, g) + term(s2, g2, g)

    return fn


def merge_inverted(g1, s1, g2, s2):
    if g1 == -math.inf:  # an empty part changes nothing
        return g2, s2
    if g2 == -math.inf:
        return g1, s1
    g = nan_max(g1, g2)
    return g, s1 * math.exp(g - g1) + s2 * math.exp(g - g2)


def merge_one_side(g1, s1, g2, s2):
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2  # part 2 assumed to hold the max


def merge_exp_of_maxima(g1, s1, g2, s2):
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, float((s1 * np.exp(g1) + s2 * np.exp(g2)) / np.exp(g))  # e^800 = inf: inf / inf = NaN


def merge_g1_twice(g1, s1, g2, s2):
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g1 - g)  # copied the first term: g1 where g2 belongs


def merge_zero_for_empty(g1, s1, g2, s2):
    if g1 == -math.inf and g2 == -math.inf:
        return 0.0, 0.0  # nothing seen: "zero"
    g = nan_max(g1, g2)
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


def merge_if_else(g1, s1, g2, s2, strict=True):
    """The branch form of the merge (review rev-h-02-1): right but for a NaN in g1, where ``g1 > g2`` (or ``>=``) is
    False and the else branch returns g2."""
    if g1 == g2 == -math.inf:  # two empty parts
        return -math.inf, 0.0
    if (g1 > g2) if strict else (g1 >= g2):
        return g1, s1 + s2 * math.exp(g2 - g1)
    return g2, s2 + s1 * math.exp(g1 - g2)


MERGE = {
    "merged without rescaling": merge_with(term=lambda s, g_k, g: s),
    "the rescale inverted": merge_inverted,
    "only one part rescaled": merge_one_side,
    "the min of the two maxima": merge_with(g_of=lambda a, b: float(np.minimum(a, b))),
    "a wrong base (2 or 10) instead of e": merge_with(term=lambda s, g_k, g: s * 2.0 ** (g_k - g)),
    "(s, g) swapped": lambda *a: tuple(reversed(solutions.merge(*a))),
    "-inf - (-inf) while nothing is seen": merge_with(guard=False),
    "Python's max dropping NaN": merge_with(g_of=max),
    "an if/else on g1 > g2 dropping NaN": merge_if_else,
    "not a pair": lambda *a: solutions.merge(*a)[1],
    "the exponential of each max taken alone": merge_exp_of_maxima,
    "the two states swapped": lambda g1, g2, s1, s2: solutions.merge(g1, s1, g2, s2),  # parameters misordered
    "one part's max used for both": merge_g1_twice,
    "0 as the max of nothing": merge_zero_for_empty,
}


def nan_max_of(*gs):
    return math.nan if any(math.isnan(g) for g in gs) else max(gs)


def three_with(term=lambda s, g_k, g: s * math.exp(g_k - g), g_of=nan_max_of, guard=True):
    def fn(g1, s1, g2, s2, g3, s3):
        g = g_of(g1, g2, g3)
        if guard and g == -math.inf:
            return g, 0.0
        return g, term(s1, g1, g) + term(s2, g2, g) + term(s3, g3, g)

    return fn


def three_not_moved(g1, s1, g2, s2, g3, s3):
    g12, s12 = solutions.merge(g1, s1, g2, s2)
    g = nan_max(g12, g3)
    if g == -math.inf:
        return g, 0.0
    return g, s12 + s3 * math.exp(g3 - g)  # s12 is still relative to g12


def three_without_third(g1, s1, g2, s2, g3, s3):
    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)  # the third part's sum forgotten


THREE = {
    "merged without rescaling": three_with(term=lambda s, g_k, g: s),
    "the rescale inverted": three_with(term=lambda s, g_k, g: s * math.exp(g - g_k) if s else 0.0),
    "a max of two parts only": three_with(g_of=lambda g1, g2, g3: nan_max_of(g1, g2)),
    "-inf - (-inf) while nothing is seen": three_with(guard=False),
    "not a pair": lambda *a: solutions.merge_three(*a)[1],
    "Python's max dropping NaN": three_with(g_of=lambda *gs: max(gs)),
    "an intermediate state not moved to the new max": three_not_moved,
    "the s_k factors missing": three_with(term=lambda s, g_k, g: math.exp(g_k - g)),
    "a part's sum left out": three_without_third,
}


# ----------------------------------------------------------------------------------------------------------------
# Chapter 3: attention
# ----------------------------------------------------------------------------------------------------------------


def attention_with(
    scale=lambda q, k, v: 1 / math.sqrt(q.shape[-1]),
    shift=lambda x: x.max(axis=-1, keepdims=True),
    norm=lambda e: e.sum(axis=-1, keepdims=True),
    after=lambda a, q: a,
    kt=lambda k: np.swapaxes(k, -1, -2),
):
    """A learner's attention with one step changed."""

    def fn(q, k, v):
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        x = q @ kt(k) * scale(q, k, v)
        e = np.exp(x - shift(x))
        return after(e / norm(e) @ v, q)

    return fn


def attention_v_transposed(q, k, v):
    y = attention_with()(q, k, np.eye(np.shape(k)[-2]))  # the weights Y
    return y @ np.swapaxes(np.asarray(v, dtype=np.float64), -1, -2)  # V^T: runs only when M = Dv


def attention_first_key_skipped(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    out = []
    for q_n in q.reshape(-1, q.shape[-1]) if q.ndim == 2 else []:
        xs = [q_n @ k[m] / math.sqrt(len(q_n)) for m in range(1, len(k))]  # range(1, M): key 0 left out
        g = max(xs)
        e = [math.exp(x - g) for x in xs]
        out.append(sum(e_m * v[m + 1] for m, e_m in enumerate(e)) / sum(e))
    if q.ndim != 2:
        return attention_with()(q, k[..., 1:, :], v[..., 1:, :])
    return np.array(out).reshape(q.shape[0], v.shape[-1])


def attention_einsum_2d(q, k, v):
    x = np.einsum("nd,md->nm", q, k) / math.sqrt(np.shape(q)[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return np.einsum("nm,mv->nv", e / e.sum(axis=-1, keepdims=True), v)


def attention_scaled_in_place(q, k, v):
    q *= 1 / math.sqrt(q.shape[-1])  # changes the caller's array
    return attention_with(scale=lambda q, k, v: 1.0)(q, k, v)


def attention_returns_y(q, k, v):
    x = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


ATTENTION = {
    "no scale": attention_with(scale=lambda q, k, v: 1.0),
    "divided by sqrt(M)": attention_with(scale=lambda q, k, v: 1 / math.sqrt(k.shape[-2])),
    "D read from the wrong axis": attention_with(scale=lambda q, k, v: 1 / math.sqrt(q.shape[1])),
    "divided by D": attention_with(scale=lambda q, k, v: 1 / q.shape[-1]),
    "divided by sqrt(Dv)": attention_with(scale=lambda q, k, v: 1 / math.sqrt(v.shape[-1])),
    "the scale from the wrong axis of q": attention_with(scale=lambda q, k, v: 1 / math.sqrt(len(q))),
    "multiplied by sqrt(D)": attention_with(scale=lambda q, k, v: math.sqrt(q.shape[-1])),
    "the scale applied to the output": attention_with(
        scale=lambda q, k, v: 1.0, after=lambda a, q: a / math.sqrt(q.shape[-1])
    ),
    "softmax over the wrong axis (the queries)": attention_with(
        shift=lambda x: x.max(axis=-2, keepdims=True), norm=lambda e: e.sum(axis=-2, keepdims=True)
    ),
    "the max over the wrong axis": attention_with(shift=lambda x: x.max(axis=-2, keepdims=True)),
    "keepdims missing": attention_with(shift=lambda x: x.max(axis=-1)),
    "the global max instead of each row's max": attention_with(shift=lambda x: x.max()),
    "the max not subtracted": attention_with(shift=lambda x: 0.0),
    "normalised over the whole matrix": attention_with(norm=lambda e: e.sum()),
    "k.T on a batched array": attention_with(kt=lambda k: k.T),
    "the probabilities Y returned": attention_returns_y,
    "the input modified in place": attention_scaled_in_place,
    "a wrong shape": lambda q, k, v: solutions.attention(q, k, v)[..., None],
    "a lower precision": lambda q, k, v: solutions.attention(*(np.asarray(a, dtype=np.float32) for a in (q, k, v))),
    "D**1/2 (precedence)": attention_with(scale=lambda q, k, v: 1 / q.shape[-1] ** 1 / 2),
    "math.isqrt (an integer square root)": attention_with(scale=lambda q, k, v: 1 / math.isqrt(q.shape[-1])),
    "V transposed": attention_v_transposed,
    "the first key skipped": attention_first_key_skipped,
    "einsum written for 2-D inputs": attention_einsum_2d,
}


# ----------------------------------------------------------------------------------------------------------------
# Chapter 4: the loop swap
# ----------------------------------------------------------------------------------------------------------------


def loops(order="nmd", fresh_row=True, add=True, keys=lambda M: range(M), pair=lambda n, m: m):
    """A learner's triple loop in ``order`` ("nmd" or "ndm") with one step changed."""

    def fn(y, v):
        y, v = np.asarray(y), np.asarray(v)
        (N, M), Dv = y.shape, v.shape[1]
        a = np.zeros((N, Dv))
        acc = np.zeros(Dv)
        for n in range(N):
            if fresh_row:
                acc = np.zeros(Dv)  # the row of partial sums of A[n, :]
            if order == "nmd":
                for m in keys(M):
                    for d in range(Dv):
                        term = y[n, m] * v[pair(n, m), d]
                        acc[d] = acc[d] + term if add else term
            else:
                for d in range(Dv):
                    for m in keys(M):
                        acc[d] = acc[d] + y[n, m] * v[pair(n, m), d]
            a[n] = acc
        return a

    return fn


def loop_swap_skipping_zero_products(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        for m in range(y.shape[1]):
            for d in range(v.shape[1]):
                if y[n, m] * v[m, d] != 0:  # "saves" the adds of zeros, and computes each product twice
                    a[n, d] += y[n, m] * v[m, d]
    return a


def loop_swap_converted(y, v):
    return loops()(np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64))


def loop_swap_never_stored(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        acc = np.zeros(v.shape[1])
        for m in range(y.shape[1]):
            acc += y[n, m] * v[m]
    return a  # the rows were never stored


def loop_swap_float32(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]), dtype=np.float32)  # a float32 row of partial sums
    for n in range(y.shape[0]):
        for m in range(y.shape[1]):
            for d in range(v.shape[1]):
                a[n, d] = a[n, d] + np.float32(y[n, m] * v[m, d])
    return a


def loop_swap_normalising_in_place(y, v):
    y /= y.sum(axis=1, keepdims=True)  # changes the caller's array
    return loops()(y, v)


LOOP_SWAP = {
    "summed in another order": lambda y, v: np.asarray(y, dtype=np.float64) @ np.asarray(v, dtype=np.float64),
    "@, np.dot, np.sum or math.fsum over the keys (order n, d, m)": lambda y, v: y @ v,
    "the loops not swapped (order n, d, m)": loops(order="ndm"),
    "keys out of order": loops(keys=lambda M: reversed(range(M))),
    "products missing or repeated": loop_swap_skipping_zero_products,
    "Y[n, m] paired with another key's values": loops(pair=lambda n, m: n),
    "the inputs converted before the loops": loop_swap_converted,
    "the row of partial sums not reset for each row": loops(fresh_row=False),
    "= instead of +=": loops(add=False),
    "a key skipped (off by one)": loops(keys=lambda M: range(M - 1)),
    "the result transposed": lambda y, v: loops()(y, v).T,
    "zeros returned": loop_swap_never_stored,
    "the input modified in place": loop_swap_normalising_in_place,
    "a wrong shape": lambda y, v: loops()(y, v).ravel(),
    "a lower precision": loop_swap_float32,
}


# ----------------------------------------------------------------------------------------------------------------
# Chapter 5: one step, a block of keys
# ----------------------------------------------------------------------------------------------------------------


def block_with(update=None, s_of=None, g_of=None, guard=True):
    """A learner's block step (``x`` may hold one key) with the update of A' or s, or the max, changed.

    ``update(a, s_prev, rescale, e, V, s, x, g_prev, g)``; ``s_of(s_prev, g_prev, g, x)``; ``g_of(g_prev, x)``.
    """

    def fn(g_prev, s_prev, a_prev, x, V):
        x, V = np.atleast_1d(np.asarray(x, dtype=np.float64)), np.atleast_2d(V)
        g = nan_max_of(g_prev, *x) if g_of is None else g_of(g_prev, x)
        if guard and g == -math.inf:  # nothing seen yet
            return g, 0.0, np.zeros(np.shape(a_prev))
        rescale, e = math.exp(g_prev - g), np.exp(x - g)
        s = s_prev * rescale + e.sum() if s_of is None else s_of(s_prev, g_prev, g, x)
        if update is None:
            return g, s, a_prev * (s_prev * rescale / s) + (e / s) @ V
        return g, s, update(a_prev, s_prev, rescale, e, V, s, x, g_prev, g)

    return fn


def as_step(block):
    return lambda g_prev, s_prev, a_prev, x_m, v_m: block(g_prev, s_prev, a_prev, [x_m], [v_m])


def to_step(fn):
    """A block-step mistake as a one-step solution ``(g_prev, s_prev, a_prev, x_m, v_m)``."""
    return lambda g_prev, s_prev, a_prev, x_m, v_m: fn(g_prev, s_prev, np.asarray(a_prev), [x_m], [v_m])


def a_updates(old):
    """The wrong updates of A', written for a block; ``old`` is the index of the previous state in the names."""
    return {
        "s_m A'_m returned (not divided)": block_with(lambda a, sp, r, e, V, s, *_: a * sp * r + e @ V),
        "divided by s_m twice": block_with(lambda a, sp, r, e, V, s, *_: (a * sp * r / s + e @ V / s) / s),
        f"A'_{{{old}}} not corrected": block_with(lambda a, sp, r, e, V, s, *_: a + e @ V / s),
        "FlashAttention-2's update": block_with(lambda a, sp, r, e, V, s, *_: a * r + e @ V),
        f"exp(g_{{{old}}} - g_m) missing": block_with(lambda a, sp, r, e, V, s, *_: (a * sp + e @ V) / s),
        f"s_{{{old}}} missing": block_with(lambda a, sp, r, e, V, s, *_: (a * r + e @ V) / s),
        f"divided by s_{{{old}}} instead of s_m": block_with(
            lambda a, sp, r, e, V, s, *_: (a * sp * r + e @ V) / sp if sp else a * r + e @ V / s
        ),
        f"the factor s_{{{old}}} / s_m missing": block_with(lambda a, sp, r, e, V, s, *_: a * s * r / s + e @ V / s),
        "the correction inverted": block_with(
            lambda a, sp, r, e, V, s, *_: a * s / (sp * r) + e @ V / s if sp else e @ V / s
        ),
        "the new weight relative to the old max": block_with(
            lambda a, sp, r, e, V, s, x, gp, g: a * sp * r / s + np.exp(x - gp) @ V / s
        ),
        f"A'_{{{old}}} returned unchanged": block_with(lambda a, *_: a),
        "the rescale of s missing": block_with(s_of=lambda sp, gp, g, x: sp + np.exp(x - g).sum()),
        "the rescale of s inverted": block_with(
            s_of=lambda sp, gp, g, x: (sp * math.exp(g - gp) if sp else 0.0) + np.exp(x - g).sum()
        ),
        "the new term of s relative to the old max": block_with(
            s_of=lambda sp, gp, g, x: sp * math.exp(gp - g) + np.exp(x - (gp if gp > -math.inf else g)).sum()
        ),
        "a wrong base (2 or 10) instead of e": block_with(
            s_of=lambda sp, gp, g, x: sp * 2 ** (gp - g) + (2 ** (x - g)).sum()
        ),
        "a lower precision": lambda g, s, a, x, V: solutions.block_step(
            g, s, np.float32(a), np.float32(np.atleast_1d(x)), np.float32(np.atleast_2d(V))
        ),
    }


def learner_step_mistakes(old):
    """Set 1's wrong steps, written as a learner would (numpy, for a block; ``old`` names the previous state)."""

    def state(g_prev, x):
        return float(np.maximum(g_prev, np.max(x, initial=-np.inf)))

    def inverted_rescale(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        p = np.exp(np.asarray(x) - g)
        s = s_prev * np.exp(g_prev - g) + p.sum()
        correction = s_prev * np.exp(g - g_prev) / s if s_prev > 0 else 0.0
        return g, s, np.asarray(a_prev) * correction + p @ np.asarray(V) / s

    def weight_not_divided(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        p = np.exp(np.asarray(x) - g)
        s = s_prev * np.exp(g_prev - g) + p.sum()
        return g, s, np.asarray(a_prev) * (s_prev * np.exp(g_prev - g) / s) + p @ np.asarray(V)

    def exp_apart(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        s = s_prev * np.exp(g_prev - g) + np.exp(np.asarray(x) - g).sum()
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.exp(np.asarray(x)) / (s * np.exp(g))
        return g, s, np.asarray(a_prev) * (s_prev * np.exp(g_prev - g) / s) + w @ np.asarray(V)

    def convex_swapped(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        p = np.exp(np.asarray(x) - g)
        s = s_prev * np.exp(g_prev - g) + p.sum()
        w = p.sum() / s
        new = p @ np.asarray(V) / p.sum() if p.sum() > 0 else np.asarray(V).mean(axis=0)
        return g, s, np.asarray(a_prev) * w + new * (1 - w)

    def half_and_half(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        p = np.exp(np.asarray(x) - g)
        s = s_prev * np.exp(g_prev - g) + p.sum()
        block = (p / p.sum()) @ np.asarray(V)
        return (g, s, block) if s_prev == 0 else (g, s, 0.5 * np.asarray(a_prev) + 0.5 * block)

    def from_old_max(g_prev, s_prev, a_prev, x, V):
        g = state(g_prev, x)
        ref = g_prev if g_prev != -math.inf else g
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(np.asarray(x) - ref)
            s = s_prev + p.sum()
            return g, s, (s_prev * np.asarray(a_prev) + p @ np.asarray(V)) / s

    return {
        f"exp(g_m - g_{{{old}}}) instead of exp(g_{{{old}}} - g_m)": inverted_rescale,
        "the new weight not divided by s_m": weight_not_divided,
        "exp(x) and exp(g_m) taken apart": exp_apart,
        "the weights of the convex combination swapped": convex_swapped,
        "a 50/50 average with the new keys' softmax": half_and_half,
        "the state measured from the old max": from_old_max,
        "(s, g) swapped": lambda *args: (lambda g, s, a: (s, g, a))(*solutions.block_step(*args)),
        f"g_{{{old}}} returned instead of g_m": lambda g_prev, *rest: (
            g_prev,
            *solutions.block_step(g_prev, *rest)[1:],
        ),
    }


def block_max_from_the_block(g_prev, s_prev, a_prev, x_block, v_block):
    x = np.asarray(x_block)
    g = x.max()  # the block's max only: g_prev forgotten
    old = s_prev * np.exp(g_prev - g)
    p = np.exp(x - g)
    return g, old + p.sum(), (old * np.asarray(a_prev) + p @ np.asarray(v_block)) / (old + p.sum())


def block_as_one_key(g_prev, s_prev, a_prev, x_block, v_block):
    return solutions.one_loop_step(g_prev, s_prev, a_prev, float(np.max(x_block)), np.mean(v_block, axis=0))


def block_rows_summed_per_row(g_prev, s_prev, a_prev, x_block, v_block):
    x = np.asarray(x_block)
    g = np.maximum(g_prev, x.max())
    old = s_prev * np.exp(g_prev - g)
    p = np.exp(x - g)
    s = old + p.sum()
    return g, s, (old * np.asarray(a_prev) + (p[:, None] * np.asarray(v_block)).sum(axis=1)) / s


ONE_LOOP_STEP = {name: to_step(fn) for name, fn in a_updates("m-1").items()}
ONE_LOOP_STEP.update({name: to_step(fn) for name, fn in learner_step_mistakes("m-1").items()})
ONE_LOOP_STEP["not a triple"] = lambda *args: solutions.one_loop_step(*args)[2]

BLOCK_STEP = dict(a_updates("m-b"))
BLOCK_STEP.update(learner_step_mistakes("m-b"))
BLOCK_STEP["the old max left out of g_m"] = block_max_from_the_block
BLOCK_STEP["the block taken as one key"] = block_as_one_key
BLOCK_STEP["the weighted value rows summed over the wrong axis"] = block_rows_summed_per_row
BLOCK_STEP["the max of one key of the block only"] = block_with(g_of=lambda g_prev, x: nan_max_of(g_prev, x[0]))
for steps in (ONE_LOOP_STEP, BLOCK_STEP):
    wrap = to_step if steps is ONE_LOOP_STEP else (lambda fn: fn)
    steps["a max that drops NaN"] = wrap(block_with(g_of=lambda g_prev, x: max(g_prev, *x)))
BLOCK_STEP["not a triple"] = lambda *args: solutions.block_step(*args)[:2]


def _block_nan_skipped(*args):
    return block_nan_skipped(*args)  # defined below, with the review's other learner attempts


BLOCK_STEP["a NaN score skipped (np.nanmax, np.nansum)"] = _block_nan_skipped
ONE_LOOP_STEP["a NaN score skipped (np.nanmax, np.nansum)"] = to_step(_block_nan_skipped)


def block_step_algorithm_1(g_prev, s_prev, a_prev, x_block, v_block):
    """Algorithm 1's block-local statistics m~, l~, P~ V, merged without moving them to the new max."""
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    m_tilde = x.max()  # the block's own max
    g = nan_max_of(g_prev, m_tilde)
    if g == -math.inf:
        return g, 0.0, np.zeros(np.shape(a_prev))
    p_tilde = np.exp(x - m_tilde)
    l_tilde = p_tilde.sum()
    s = s_prev * math.exp(g_prev - g) + l_tilde  # l~ still relative to m~: exp(m~ - g) forgotten
    return g, s, np.asarray(a_prev) * s_prev * math.exp(g_prev - g) / s + p_tilde @ V / s


BLOCK_STEP["the block's own max not moved to the new max"] = block_step_algorithm_1


def block_step_numerator_not_moved(g_prev, s_prev, a_prev, x_block, v_block):
    """rev20-b: Algorithm 1's l~ moved to the new max by exp(m~ - g), its numerator P~ V not."""
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    m_tilde = x.max()
    g = np.maximum(g_prev, m_tilde)
    if g == -math.inf:
        return g, 0.0, np.zeros(np.shape(a_prev))
    p_tilde = np.exp(x - m_tilde)
    s = s_prev * np.exp(g_prev - g) + p_tilde.sum() * np.exp(m_tilde - g)
    return g, s, (np.asarray(a_prev) * s_prev * np.exp(g_prev - g) + p_tilde @ V) / s  # P~ V still against m~


BLOCK_STEP["the block's numerator not moved to the new max"] = block_step_numerator_not_moved


@pytest.mark.parametrize("fn", [block_step_algorithm_1, block_step_numerator_not_moved])
def test_a_block_not_moved_to_the_new_max_fails_the_real_row_too(fn):
    # rev20-b: every block of 8 of the real row in key order raised the max (m~ = g_m), so both passed the fold
    report = exercises.check_block_step(fn)
    failed = [name for name, ok, _ in report.cases if not ok]
    assert any(name.startswith("a real score row folded in blocks of 8 keys") for name in failed), report
    assert "a block of 3 keys below the old max" in failed, report


# ----------------------------------------------------------------------------------------------------------------
# Set 2's kinds (issue 34, third pass): a learner's code for each new mistake, and other usual forms of old ones
# ----------------------------------------------------------------------------------------------------------------


def softmax_largest_abs(x):
    x = np.asarray(x)
    w = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
    if w.size == 0 or np.all(w == -np.inf):
        return np.zeros(w.shape, dtype=out_dtype(x))
    g = np.abs(w).max()  # "the largest value", by size: -1000 wins over 2
    e = np.exp(w - g)
    return (e / e.sum()).astype(out_dtype(x))


def normalizer_logsumexp(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        g_new = nan_max(g, x_i)
        if g_new == -math.inf:
            continue
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new)
        g = g_new
    return g, (g + math.log(s) if s else -math.inf)  # the logsumexp, not the state's sum


def merge_from_the_second_max(g1, s1, g2, s2):
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, float(s2 + s1 * np.exp(np.float64(g1) - g2))  # as if part 2 always held the max


def merge_averaged(g1, s1, g2, s2):
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    return g, (s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)) / 2  # the mean of the two parts


def three_first_not_rescaled(g1, s1, g2, s2, g3, s3):
    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    return g, s1 + s2 * math.exp(g2 - g) + s3 * math.exp(g3 - g)  # as if part 1 held the max


def three_from_the_last_max(g1, s1, g2, s2, g3, s3):
    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return g, float(s3 + s1 * np.exp(np.float64(g1) - g3) + s2 * np.exp(np.float64(g2) - g3))


def three_exp_of_maxima(g1, s1, g2, s2, g3, s3):
    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        total = s1 * np.exp(np.float64(g1)) + s2 * np.exp(np.float64(g2)) + s3 * np.exp(np.float64(g3))
        return g, float(total / np.exp(np.float64(g)))


def block_terms_averaged(g_prev, s_prev, a_prev, x_block, v_block):
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    g = nan_max_of(g_prev, x.max())
    if g == -math.inf:
        return g, 0.0, np.zeros(np.shape(a_prev))
    p = np.exp(x - g)
    s = s_prev * math.exp(g_prev - g) + p.mean()  # np.mean where the sum belongs
    return g, s, np.asarray(a_prev) * (s_prev * math.exp(g_prev - g) / s) + p @ V / s


SAFE_SOFTMAX["the largest absolute value subtracted"] = softmax_largest_abs
NORMALIZER["the logsumexp returned instead of s"] = normalizer_logsumexp
MERGE["the sums measured from one part's max"] = merge_from_the_second_max
MERGE["the sums averaged instead of added"] = merge_averaged
THREE["a part's sum not rescaled"] = three_first_not_rescaled
THREE["the sums measured from one part's max"] = three_from_the_last_max
THREE["the exponential of each max taken alone"] = three_exp_of_maxima
THREE["the sums averaged instead of added"] = three_with(term=lambda s, g_k, g: s * math.exp(g_k - g) / 3)
BLOCK_STEP["the block's terms averaged instead of summed"] = block_terms_averaged


def step_new_term_over_old_sum(g_prev, s_prev, a_prev, x_m, v_m):
    g = nan_max(g_prev, x_m)
    if g == -math.inf:
        return g, s_prev, np.asarray(a_prev, dtype=np.float64)
    r, e = math.exp(g_prev - g), math.exp(x_m - g)
    s = s_prev * r + e
    return g, s, np.asarray(a_prev) * (s_prev * r / s) + e / (s_prev or 1.0) * np.asarray(v_m)


def step_plain_totals(g_prev, s_prev, a_prev, x_m, v_m):
    g = nan_max(g_prev, x_m)
    if g == -math.inf:
        return g, s_prev, np.asarray(a_prev, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        old = np.float64(s_prev) * np.exp(np.float64(g_prev))  # the sum of e^{x_i} so far
        total = old + np.exp(np.float64(x_m))
        a = np.asarray(a_prev) * (old / total) + np.exp(np.float64(x_m)) / total * np.asarray(v_m)
        return g, float(total / np.exp(np.float64(g))), a


def block_last_key_only(g_prev, s_prev, a_prev, x_block, v_block):
    if len(x_block) == 0:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    return solutions.one_loop_step(g_prev, s_prev, a_prev, float(x_block[-1]), np.asarray(v_block)[-1])


def block_new_rows_over_old_sum(g_prev, s_prev, a_prev, x_block, v_block):
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    if x.size == 0:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    g = nan_max_of(g_prev, x.max())
    if g == -math.inf:
        return g, 0.0, np.zeros(np.shape(a_prev))
    p = np.exp(x - g)
    s = s_prev * math.exp(g_prev - g) + p.sum()
    return g, s, np.asarray(a_prev) * (s_prev * math.exp(g_prev - g) / s) + p @ V / (s_prev or s)


#: Other usual forms of a catalogue mistake (a second learner's code for it): (checker, mistake, solution).
OTHER_FORMS = [
    (
        "check_score_row",
        "D**1/2 (precedence)",
        lambda q, K: np.asarray(K, dtype=float) @ np.asarray(q, dtype=float) / (len(q) ** 1 / 2),
    ),
    ("check_one_loop_step", "divided by s_{m-1} instead of s_m", step_new_term_over_old_sum),
    ("check_one_loop_step", "exp(x) and exp(g_m) taken apart", step_plain_totals),
    ("check_block_step", "the block taken as one key", block_last_key_only),
    ("check_block_step", "divided by s_{m-b} instead of s_m", block_new_rows_over_old_sum),
]


@pytest.mark.parametrize("checker, mistake, fn", OTHER_FORMS, ids=[f"{c}: {m}" for c, m, _ in OTHER_FORMS])
def test_another_usual_form_of_a_mistake_is_named(checker, mistake, fn):
    report = getattr(exercises, checker)(fn)
    assert not report.passed, report
    assert named(report) == {mistake}, report


def test_the_largest_absolute_value_is_not_called_a_max_started_at_0():
    """[-1000, -1001] fails both; [2, 1, -1000] separates them (0 is below the max 2, 1000 far above it)."""
    assert named(exercises.check_safe_softmax(softmax_largest_abs)) == {"the largest absolute value subtracted"}
    assert named(exercises.check_safe_softmax(max_from_zero)) == {"the max started at 0"}


# Set 3's kinds (issue 34, fourth pass): each written as a learner would.


def softmax_any_masked_zeros(x):
    x = np.asarray(x)
    out = x.dtype if x.dtype.kind == "f" else np.float64
    if np.any(np.isneginf(x)):  # meant for the fully masked row
        return np.zeros(x.shape, dtype=out)
    w = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
    if w.size == 0:
        return w.astype(out)
    e = np.exp(w - w.max())
    return (e / e.sum()).astype(out)


def softmax_not_subtracted_zero_sum_guard(x):
    x = np.asarray(x)
    w = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(w)
        s = e.sum()
        if s == 0:
            return np.zeros(x.shape, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
        return (e / s).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def normalizer_any_masked_empty(x):
    g, s = -math.inf, 0.0
    for x_i in x:
        if x_i == -math.inf:
            return -math.inf, 0.0
        g_new = max(g, x_i) if not math.isnan(x_i) else x_i
        s = s * math.exp(g - g_new) + math.exp(x_i - g_new) if not math.isnan(g_new) else math.nan
        g = g_new
    return g, s


def merge_empty_if_any_empty(g1, s1, g2, s2):
    if s1 == 0 or s2 == 0:
        return -math.inf, 0.0
    g = np.maximum(g1, g2)
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)


def merge_nan_cleaned(g1, s1, g2, s2):
    g = np.maximum(g1, g2)
    with np.errstate(invalid="ignore"):
        return g, np.nan_to_num(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


def merge_three_first_empty(g1, s1, g2, s2, g3, s3):
    if g1 == -math.inf:
        return -math.inf, 0.0
    g = np.maximum(np.maximum(g1, g2), g3)
    return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g)


def merge_three_nan_cleaned(g1, s1, g2, s2, g3, s3):
    g = np.maximum(np.maximum(g1, g2), g3)
    with np.errstate(invalid="ignore"):
        f = [np.nan_to_num(np.exp(g_k - g)) for g_k in (g1, g2, g3)]
    return g, np.nan_to_num(s1 * f[0] + s2 * f[1] + s3 * f[2])


def block_own_sum(g_prev, s_prev, a_prev, x_block, v_block):
    x_block, v_block = np.asarray(x_block, dtype=float), np.asarray(v_block, dtype=float)
    g = np.maximum(g_prev, np.max(x_block))
    if g == -np.inf:
        return g, 0.0, np.zeros_like(np.asarray(a_prev, dtype=float))
    kept = s_prev * np.exp(g_prev - g)
    p = np.exp(x_block - g)
    s = kept + p.sum()
    return g, s, kept * np.asarray(a_prev) / s + p @ v_block / p.sum()


SAFE_SOFTMAX["a -inf element taken for a fully masked row"] = softmax_any_masked_zeros
NORMALIZER["a -inf element taken for a fully masked row"] = normalizer_any_masked_empty
MERGE["an empty part taken for an empty merge"] = merge_empty_if_any_empty
MERGE["NaN cleaned into 0"] = merge_nan_cleaned
THREE["an empty part taken for an empty merge"] = merge_three_first_empty
THREE["NaN cleaned into 0"] = merge_three_nan_cleaned
BLOCK_STEP["the block's part divided by its own sum"] = block_own_sum


def test_set3_kinds_are_named():
    assert named(exercises.check_safe_softmax(softmax_not_subtracted_zero_sum_guard)) == {"the max not subtracted"}
    report = exercises.check_online_normalizer(normalizer_from_first_unguarded)
    assert "-inf - (-inf) while nothing is seen" in message(report, "property: a fully masked row")
    assert "a wrong base" not in " ".join(text for _, _, text in report.cases)


def normalizer_from_first_unguarded(x):
    it = iter(x)
    g, s = next(it), 1.0
    for x_i in it:
        g_new = np.maximum(g, x_i)
        with np.errstate(invalid="ignore"):
            s = s * np.exp(g - g_new) + np.exp(x_i - g_new)
        g = g_new
    return g, s


def test_an_integer_array_updated_in_place_gets_a_hint():
    def merge_in_place(g1, s1, g2, s2):
        gs, ss = np.array([g1, g2], dtype=np.float64), np.array([s1, s2])
        g = np.max(gs)
        if g == -np.inf:
            return -np.inf, 0.0
        ss *= np.exp(gs - g)
        return g, ss.sum()

    assert "build the sums as floats" in message(exercises.check_merge(merge_in_place), "property: integer states")


def test_a_merge_that_returns_nan_nan_for_a_nan_sum_is_told_the_requirement_not_a_swap():
    """rev6-a: an answer that returns (nan, nan) whenever any input is NaN fails only the NaN-sum case, whose name
    states the requirement (g is still the larger max); no swapped-state model explains (nan, nan) there."""

    def nan_in_nan_out(g1, s1, g2, s2):
        if any(math.isnan(v) for v in (g1, s1, g2, s2)):
            return math.nan, math.nan
        return fm.merge(g1, s1, g2, s2)

    report = exercises.check_merge(nan_in_nan_out)
    failing = [(name, msg) for name, ok, msg in report.cases if not ok]
    assert [name for name, _ in failing] == ["NaN in a sum gives s = NaN (g is still the larger max)"]
    assert "swapped" not in failing[0][1] and "looks like" not in failing[0][1]


def test_the_natural_merge_without_a_guard_and_with_python_max_is_named_as_those_two_mistakes():
    """rev11-a: ``g = max(g1, g2)`` with no guard for two empty parts fails two cases, which an unguarded fmin merge
    also gives; the checker names the two real slips, as 2.1 and 2.3 do, and never a mistake whose model fails a
    case that passed."""

    def natural(g1, s1, g2, s2):
        g = max(g1, g2)
        return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)

    report = exercises.check_merge(natural)
    failing = {name: msg for name, ok, msg in report.cases if not ok}
    assert list(failing) == ["property: two empty parts", "property: NaN in a max"]
    assert "-inf - (-inf) while nothing is seen" in failing["property: two empty parts"]
    assert "Python's max dropping NaN" in failing["property: NaN in a max"]
    assert all("min of the two maxima" not in msg for msg in failing.values())
    for alone, name in (
        (merge_with(g_of=max), "Python's max dropping NaN"),
        (merge_with(g_of=lambda a, b: float(np.maximum(a, b)), guard=False), "-inf - (-inf) while nothing is seen"),
        (merge_with(g_of=lambda a, b: float(np.fmin(a, b)), guard=False), "the min of the two maxima"),
    ):
        msgs = [msg for _, ok, msg in exercises.check_merge(alone).cases if not ok]
        named = [msg for msg in msgs if "looks like" in msg]  # an OverflowError is reported as such
        assert named and all(name in msg for msg in named), (name, msgs)


@pytest.mark.parametrize("strict", [True, False], ids=[">", ">="])
def test_an_if_else_merge_that_drops_a_nan_in_g1_is_named_as_such_not_as_the_min_of_the_maxima(strict):
    """rev-h-02-1: the branch form of the merge fails only "NaN in the first part's max", with (0, nan), which the
    min of the two maxima also gives there; that model fails most cases the answer passed, so it is not named. The
    answer is named as what it is: a comparison with NaN is False, and the NaN fell into the else branch."""
    report = exercises.check_merge(lambda *a: merge_if_else(*a, strict=strict))
    failing = {name: msg for name, ok, msg in report.cases if not ok}
    assert list(failing) == ["NaN in the first part's max propagates"]
    (msg,) = failing.values()
    assert "looks like an if/else on g1 > g2 dropping NaN" in msg and "every comparison with NaN is False" in msg
    assert "min of the two maxima" not in msg
    assert named(report) == {"an if/else on g1 > g2 dropping NaN"}


def test_a_merge_no_consistent_model_explains_gets_the_requirement_alone():
    """rev-h-02-1: 2.2 names a mistake only through a model that also gives the answer on every case it passed. An
    answer that is right but for NaN where both maxima are above 709 matches the exponential of each max alone on
    the maxima of 800 and 799 only; that model also fails the maxima 1e4 apart, which the answer passed, so the case
    gets its requirement alone. A right answer names nothing."""

    def nan_when_both_large(g1, s1, g2, s2):
        if g1 > 709 and g2 > 709:
            return max(g1, g2), math.nan
        return fm.merge(g1, s1, g2, s2)

    report = exercises.check_merge(nan_when_both_large)
    failing = {name: msg for name, ok, msg in report.cases if not ok}
    assert list(failing) == ["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    assert not named(report) and "looks like" not in repr(report)
    right = exercises.check_merge(lambda *a: fm.merge(*a))
    assert right.passed and not named(right)


def test_math_exp_of_each_max_alone_gets_the_hint_of_its_np_exp_form():
    """rev14-a: ``math.exp(g1)`` raises OverflowError where ``np.exp`` gives inf; on the maxima of 800 and 799 only
    the exponential of a max alone overflows, so that case gets the same hint as the np.exp form. With maxima 1e4
    apart an inverted factor overflows too, and the hint names no single mistake."""

    def alone(g1, s1, g2, s2, exp=math.exp):
        g = float(np.maximum(g1, g2))
        if g == -math.inf:
            return -math.inf, 0.0
        return g, (s1 * exp(g1) + s2 * exp(g2)) / exp(g)

    def inverted(g1, s1, g2, s2):
        g = float(np.maximum(g1, g2))
        if g == -math.inf:
            return -math.inf, 0.0
        return g, s1 * math.exp(g - g1) + s2 * math.exp(g - g2)

    by_math = {name: msg for name, ok, msg in exercises.check_merge(alone).cases if not ok}
    by_np = {name: msg for name, ok, msg in exercises.check_merge(lambda *a: alone(*a, exp=np.exp)).cases if not ok}
    assert (
        list(by_math)
        == list(by_np)
        == [
            "maxima 1e4 apart (no overflow)",
            "maxima of 800 and 799 (no overflow: never exp of a max alone)",
        ]
    )
    hint = "looks like the exponential of each max taken alone"
    assert hint in by_math["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    assert "OverflowError" in by_math["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    assert "math.exp overflowed" in by_math["maxima 1e4 apart (no overflow)"]
    assert hint in by_np["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    # rev15-a: math.exp raised, so its message speaks of the OverflowError, not of the np.exp form's inf / inf = NaN
    assert "inf / inf" not in by_math["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    assert (
        "math.exp of a max above 709 raises" in by_math["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    )
    assert "inf / inf = NaN" in by_np["maxima of 800 and 799 (no overflow: never exp of a max alone)"]
    inv = {name: msg for name, ok, msg in exercises.check_merge(inverted).cases if not ok}
    assert "math.exp overflowed" in inv["maxima 1e4 apart (no overflow)"]
    assert all(hint not in msg for msg in inv.values())


def test_a_right_merge_with_math_exp_passes():
    def right(g1, s1, g2, s2):
        g = float(np.maximum(g1, g2))
        if g == -math.inf:
            return -math.inf, 0.0
        if g == math.inf:  # the parts whose max is +inf keep their sums
            return g, (s1 if g1 == g else 0.0) + (s2 if g2 == g else 0.0)
        return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)

    assert exercises.check_merge(right).passed


@pytest.mark.parametrize(
    "right",
    [
        merge_with(),
        merge_with(g_of=lambda a, b: float(np.maximum(a, b))),
        lambda g1, s1, g2, s2: fm.merge(g1, s1, g2, s2),
    ],
)
def test_right_merges_pass_with_the_consistent_diagnosis(right):
    assert exercises.check_merge(right).passed


def test_the_two_mistakes_named_for_the_natural_merge_give_its_answer_on_every_case_that_passed():
    """The models of the two mistakes named for ``g = max(g1, g2)`` without a guard agree with that answer on every
    case it passed (the min of the two maxima, named before, failed most of them)."""
    from flashmath.exercises._report import quiet
    from flashmath.exercises.chapter2 import MERGE_MISTAKES, merge_cases, merge_properties, same_state

    def natural(g1, s1, g2, s2):
        g = max(g1, g2)
        return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)

    cases = list(merge_properties()) + list(merge_cases())
    report = exercises.check_merge(natural)
    passed = [args for (name, args), (_, ok, _) in zip(cases, report.cases, strict=True) if ok]
    assert len(passed) == 14
    for name in ("Python's max dropping NaN", "-inf - (-inf) while nothing is seen"):
        models = [model for m in MERGE_MISTAKES if m.name == name for model in m.models]
        assert any(all(same_state(natural(*args), quiet(model, *args)) for args in passed) for model in models)


@pytest.mark.parametrize("arg", ["q_n", "K"])
def test_a_score_row_that_changes_an_input_names_it(arg):
    def scale_in_place(q_n, K):
        if arg == "q_n":
            q_n /= np.sqrt(q_n.shape[0])
            return K @ q_n
        K /= np.sqrt(K.shape[1])
        return K @ q_n

    text = message(exercises.check_score_row(scale_in_place), "property: negative-only q_n and K (positive scores)")
    assert text.startswith(f"{arg} (argument {1 if arg == 'q_n' else 2}) was changed: ")


def test_v_indexed_the_wrong_way_gets_a_hint():
    def loop_swap_vdm(y, v):
        N, M = y.shape
        out = np.zeros((N, v.shape[1]))
        for n in range(N):
            for m in range(M):
                for d in range(v.shape[1]):
                    out[n, d] = out[n, d] + y[n, m] * v[d, m]
        return out

    texts = " ".join(text for _, ok, text in exercises.check_loop_swap(loop_swap_vdm).cases if not ok)
    assert "V[m, d] is v[m, d]" in texts


WRONG = {
    "check_score_row": SCORE_ROW,
    "check_safe_softmax": SAFE_SOFTMAX,
    "check_online_normalizer": NORMALIZER,
    "check_merge": MERGE,
    "check_merge_three": THREE,
    "check_attention": ATTENTION,
    "check_loop_swap": LOOP_SWAP,
    "check_one_loop_step": ONE_LOOP_STEP,
    "check_block_step": BLOCK_STEP,
}

# A wrong solution may rightly show a second mistake of the catalogue too (for example a reversed loop is both out
# of key order and summed in another order): {(checker, mistake): the other names allowed}.
ALSO = {
    ("check_online_normalizer", "the first element counted twice"): {
        "an element read twice",
        "the empty vector not handled",
    },
    ("check_online_normalizer", "an element read twice"): {"the empty vector not handled"},  # x[0] of nothing
    ("check_loop_swap", "summed in another order"): {"the inputs converted before the loops"},
    ("check_loop_swap", "@, np.dot, np.sum or math.fsum over the keys (order n, d, m)"): {"summed in another order"},
    ("check_loop_swap", "keys out of order"): {"summed in another order"},
    ("check_loop_swap", "a key skipped (off by one)"): {"products missing or repeated"},
}

test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(
    WRONG, ALSO
)


def test_a_plus_inf_row_message_points_at_the_plus_inf_entry():
    # rev3-a: [0, 1, 0] for [1, inf, 2] was told "got 0 at [0]", an entry allowed to be 0
    def one_hot_inf(x):
        x = np.asarray(x)
        return (x == np.inf).astype(np.float64) if np.isposinf(x).any() else solutions.safe_softmax(x)

    report = exercises.check_safe_softmax(one_hot_inf)
    assert failures(report) == ["property: a row holding +inf gives NaN"]
    text = message(report, "property: a row holding +inf")
    assert "expected NaN at the +inf entries [1] (the others NaN or 0)" in text
    assert "got 1 at [1] where nan was expected" in text and "at [0]" not in text, text

    def nonzero_beside_inf(x):  # NaN at the +inf entry, but 0.5 where NaN or 0 is allowed
        x = np.asarray(x)
        if np.isposinf(x).any():
            return np.where(np.isposinf(x), np.nan, 0.5)
        return solutions.safe_softmax(x)

    text = message(exercises.check_safe_softmax(nonzero_beside_inf), "property: a row holding +inf")
    assert "largest difference 0.5 at [0] (expected 0, got 0.5)" in text, text


@pytest.mark.parametrize(
    "form",
    [
        lambda x: np.full(np.shape(x), np.nan),  # the max is +inf: NaN everywhere
        lambda x: np.where(np.isposinf(x), np.nan, 0.0),  # the logaddexp form
        lambda x: np.where(np.asarray(x) == 1.0, 0.0, np.nan),  # NaN or 0 at the finite entries
    ],
)
def test_every_allowed_plus_inf_row_passes(form):
    def fn(x):
        x = np.asarray(x)
        return form(x) if np.isposinf(x).any() else solutions.safe_softmax(x)

    assert exercises.check_safe_softmax(fn).passed


def test_nan_in_gives_nan_in_every_entry():
    # rev3-a: [0, nan, 0] for [1, nan, 2] passed, yet the rule says NaN out, never 0; the prompt now says every entry
    def nan_only_where_nan(x):
        x = np.asarray(x)
        return np.where(np.isnan(x), np.nan, 0.0) if np.isnan(x).any() else solutions.safe_softmax(x)

    report = exercises.check_safe_softmax(nan_only_where_nan)
    assert failures(report) == ["property: NaN in gives NaN out"]
    assert "got 0 at [0] where nan was expected" in message(report, "property: NaN in gives NaN out")


def test_a_masked_row_without_the_max_subtracted_is_hinted_0_over_0():
    # rev3-a: exp(-inf) / sum gives 0/0, neither an overflow nor -inf - (-inf)
    def naive_but_dtype(x):
        x = np.asarray(x)
        w = x.astype(np.promote_types(x.dtype, np.float32))
        with np.errstate(all="ignore"):
            e = np.exp(w)
            return (e / e.sum()).astype(out_dtype(x))

    text = message(exercises.check_safe_softmax(naive_but_dtype), "property: a row masked entirely")
    assert "or 0/0 (every term 0)?" in text, text


def test_a_plus_inf_row_turned_into_zeros_is_named():
    report = exercises.check_safe_softmax(softmax_inf_row_zeros)
    assert "NaN or +inf turned into zeros" in message(report, "property: a row holding +inf")


# ----------------------------------------------------------------------------------------------------------------
# The cases the issue named, and messages
# ----------------------------------------------------------------------------------------------------------------


def test_a_max_started_at_0_with_a_masked_row_guard_is_caught_where_it_matters():
    report = exercises.check_safe_softmax(max_from_zero_guarded)
    assert failures(report) == ["property: values far below 0"]
    assert "the max started at 0" in message(report, "property: values far below 0")
    for fn in (normalizer_with(g=0.0), max_from_zero_normalizer_guarded):
        report = exercises.check_online_normalizer(fn)
        assert "negative values, [-3, -5] (the max is -3)" in failures(report)
        assert "the max started at 0" in message(report, "negative values")
    report = exercises.check_online_normalizer(max_from_zero_normalizer_guarded)
    assert "property: a fully masked row" not in failures(report)


def max_from_zero_normalizer_guarded(x):
    g, s = normalizer_with(g=0.0)(x)
    return (-math.inf, 0.0) if s == 0 else (g, s)  # a special case for the fully masked row


def test_the_silent_all_zeros_case_is_named():
    text = message(exercises.check_safe_softmax(naive), "46 equal values of 10 in float16")
    assert "got an array of shape (46,) starting [0., 0., 0., 0., ...]" in text
    assert "the max not subtracted" in text


def test_wrong_scales_fail_the_large_scores_case_too():
    for scale in (lambda q, k, v: 1.0, lambda q, k, v: 1 / q.shape[-1], lambda q, k, v: 1 / math.sqrt(k.shape[-2])):
        report = exercises.check_attention(attention_with(scale=scale))
        assert "large scores close together (about 800 each): subtract the row max" in failures(report)


def test_the_global_max_is_not_called_an_overflow():
    text = message(exercises.check_attention(ATTENTION["the global max instead of each row's max"]), "rows at very")
    assert "underflow to 0" in text and "overflow" not in text.replace("underflow", "")


def test_dividing_by_the_old_sum_is_not_called_a_missing_exp_factor():
    text = message(exercises.check_one_loop_step(ONE_LOOP_STEP["divided by s_{m-1} instead of s_m"]), "the max holds")
    assert "divided by s_{m-1} instead of s_m" in text and "exp(g_{m-1} - g_m) missing" not in text


def test_messages_are_one_line_and_short():
    for checker, wrong in WRONG.items():
        for fn in wrong.values():
            for _, _, text in getattr(exercises, checker)(fn).cases:
                assert "\n" not in text and len(text) < 700, (checker, text)


def test_float32_answers_report_the_largest_difference_and_a_float32_hint():
    for report in (
        exercises.check_attention(ATTENTION["a lower precision"]),
        exercises.check_loop_swap(LOOP_SWAP["a lower precision"]),
    ):
        text = message(report, "a small product" if "loop" in report.title else "N != M")
        assert "largest difference" in text and "float32" in text


def test_a_float32_accumulator_gets_a_sane_relative_figure():
    """Review rev2-a (4.1): the relative figure divided by an expected 0 ("agree to 5.6e+291 relative")."""

    def float32_accumulator(y, v):  # the learner's attempt: the loops right, the accumulator float32
        out = np.zeros((y.shape[0], v.shape[1]), np.float32)
        for n in range(y.shape[0]):
            for m in range(y.shape[1]):
                for d in range(v.shape[1]):
                    out[n, d] = out[n, d] + y[n, m] * v[m, d]
        return out

    report = exercises.check_loop_swap(float32_accumulator)
    text = message(report, "order-sensitive sums of 64 terms")
    assert "float32" in text
    figures = [float(f) for _, ok, t in report.cases if not ok for f in re.findall(r"agree to (\S+) relative", t)]
    assert figures and max(figures) < 1e-5, figures  # float32 rounding: about 1e-7, never 1e+291
    assert exercises.check_loop_swap(solutions.loop_swap).passed


def test_the_float32_hint_when_every_expected_value_is_0():
    from flashmath.exercises._report import error_note

    text = error_note(np.array([1e-9, -2e-9]), np.zeros(2))
    assert "every expected value is 0" in text and "2.0e-09" in text and "relative" not in text.split(")")[-1]


def test_a_nan_failure_shows_the_largest_difference_only_beyond_the_tolerance():
    """Review zhrev-aq (note on check_ring_step): beside a NaN, a finite difference of 1e-16 is rounding, not a second
    mistake; one beyond the check's tolerance is still shown."""
    from flashmath.exercises._report import error_note

    want = np.array([0.3503590311274776, 0.361937, -1.25])
    got = np.array([0.3503590311274777, np.nan, -1.25])
    text = error_note(got, want)
    assert "got nan at [1] where 0.361937 was expected" in text and "largest difference" not in text, text
    assert "largest difference 0.5 at [2]" in error_note(got + np.array([0, 0, 0.5]), want)
    assert "largest difference" in error_note(got + np.array([0, 0, 1e-7]), want)  # beyond 1e-9: shown
    assert "largest difference" not in error_note(got + np.array([0, 0, 1e-7]), want, rtol=1e-5, atol=1e-5)
    assert "largest difference" in error_note(want + np.array([1e-16, 0, 0]), want)  # no NaN: shown as before


def test_the_float32_hint_only_where_float32_explains_the_error():
    """Review zhrev-j 13-1: a logsumexp off by 8.2e-4 relative was asked whether it ran in float32 (about 1e-7)."""
    from flashmath.exercises._report import FLOAT32_EXPLAINS, error_note

    want = np.array([1.21302, -0.5, 2.0])
    rounded = error_note(want.astype(np.float32).astype(np.float64) * (1 + 1e-7), want)  # float32 and a step
    assert "agree to" in rounded and "such as float32" in rounded and "check the formula" not in rounded
    for rel in (8.2e-4, 1e-4, 2 * FLOAT32_EXPLAINS):  # a formula off by that much: not float32
        text = error_note(want + np.array([0, 0, rel * 2.0]), want)
        assert f"agree only to {rel:.1e} relative" in text and "check the formula" in text, text
        assert "Was part of it computed" not in text and "Either the formula is wrong" in text
    assert "such as float32" in error_note(want + np.array([0, 0, 0.9 * FLOAT32_EXPLAINS * 2.0]), want)
    assert "agree" not in error_note(want + np.array([0.1, 0, 0]), want)  # beyond 1e-3: no hint at all


def test_float32_on_large_scores_is_not_ruled_out():
    """Review rev11-b 3.1: a right formula in float32 was told on the scores near 800 and +-1000 that float32 does
    not explain its error; there a float32 score is off by about 1e-4. The hint names both causes, for it and for a
    formula off by a little alike, and keeps the float32 question where the error is float32-sized."""
    right = attention_with()

    def in_float32(q, k, v):
        return right(*(np.asarray(a, dtype=np.float32) for a in (q, k, v)))

    off = attention_with(scale=lambda q, k, v: 1 / math.sqrt(q.shape[-1] + 2e-4))  # a formula a little off
    for fn in (in_float32, off):
        report = exercises.check_attention(fn)
        for case in ("large scores close together (about 800 each)", "rows at very different levels"):
            text = message(report, case)
            assert "agree only to" in text and "Either the formula is wrong" in text, text
            assert "such as float32" in text and "large scores amplify it" in text and "check the formula" in text
            assert "does not explain" not in text
    text = message(exercises.check_attention(in_float32), "N != M")
    assert "they agree to" in text and "such as float32 (about 1e-7 relative)" in text and "formula" not in text


def test_a_nan_message_previews_the_first_nan():
    """rev15-a 3.1 nit 1: the max over axis -2 on the rows at very different levels got "(NaN: 0 / 0 or inf /
    inf?...)" after a preview from index 0 that showed no NaN; both previews now start at the first NaN, as for the
    global max (whose first difference is that NaN anyway)."""
    for mistake in ("the max over the wrong axis", "the global max instead of each row's max"):
        text = message(exercises.check_attention(ATTENTION[mistake]), "rows at very different levels")
        assert "(NaN: 0 / 0 or inf / inf?" in text, text
        got = text.split(", got ", 1)[1]
        assert "from [1, 0] on [nan" in got, text
        assert "expected an array of shape (3, 4), from [1, 0] on" in text, text
    # without a NaN the preview still starts where the two arrays part
    text = message(exercises.check_attention(ATTENTION["no scale"]), "N != M")
    assert "nan" not in text and "NaN" not in text


def test_the_max_not_subtracted_names_underflow_where_exp_underflows():
    """Review rev2-a (1.1): a softmax without the max, guarded against a zero sum, was told on [-1000, -1001]
    that exp overflows; there every exp underflows to 0."""

    def naive_guarded(x):  # the learner's attempt
        x = np.asarray(x)
        out = np.float16 if x.dtype == np.float16 else np.float64
        e = np.exp(x.astype(np.float64))
        s = e.sum()
        if not s > 0:
            return np.zeros(x.shape, out)
        return (e / s).astype(out)

    report = exercises.check_safe_softmax(naive_guarded)
    below = message(report, "property: values far below 0")
    assert "the max not subtracted" in below and "underflows to 0" in below and "overflows to inf" not in below
    large = message(report, "values of 1e4")
    assert "the max not subtracted" in large and "overflows to inf" in large and "underflows" not in large
    plain = message(exercises.check_safe_softmax(naive), "property: values far below 0")
    assert "underflows to 0" in plain and "0 / 0 is NaN" in plain
    for right in (solutions.safe_softmax, fm.safe_softmax):
        assert exercises.check_safe_softmax(right).passed


def test_the_batched_hint_only_for_batched_input():
    """Review rev2-a (3.1): `p @ v.T` raising on plain 2-D input was asked "k.T on a batched array?"."""

    def v_transposed(q, k, v):  # the learner's attempt
        x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True) @ v.T

    report = exercises.check_attention(v_transposed)
    plain = message(report, "N != M")
    assert "raised ValueError" in plain and "k.T on a batched array" not in plain and "not transposed" in plain
    batched = message(report, "batch and heads")
    assert "V transposed" in batched and "k.T on a batched array" not in batched, batched  # rev18-a
    assert "looks like V transposed" in message(report, "square values")
    assert exercises.check_attention(solutions.attention).passed


def test_a_batched_k_t_error_names_only_k_t():
    """Reviews rev15-a to rev18-a (3.1): a batched `k.T` raising in `q @ k.T` was also asked "Or V transposed?",
    a mistake that does not explain the failure. The hint names only the product that raised."""
    for kt in (lambda k: k.T, lambda k: np.transpose(k)):
        batched = message(exercises.check_attention(attention_with(kt=kt)), "batch and heads")
        assert "k.T on a batched array" in batched and "V transposed" not in batched, batched
    v_swapped = message(exercises.check_attention(ATTENTION["V transposed"]), "batch and heads")
    assert "V transposed" in v_swapped and "k.T on a batched array" not in v_swapped, v_swapped


def test_an_unnamed_wrong_update_gets_the_largest_difference():
    report = exercises.check_one_loop_step(
        to_step(block_with(lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V / s + 0.01))
    )
    assert "largest difference 0.01" in message(report, "the max holds")
    assert "looks like" not in message(report, "the max holds")


# ----------------------------------------------------------------------------------------------------------------
# 2.3: the claim of the derivation
# ----------------------------------------------------------------------------------------------------------------


def test_both_groupings_of_three_parts_agree_and_give_the_state_of_the_whole():
    for name, args, elements in chapter2.merge_three_cases():
        g1, s1, g2, s2, g3, s3 = args
        left = solutions.merge(*solutions.merge(g1, s1, g2, s2), g3, s3)
        right = solutions.merge(g1, s1, *solutions.merge(g2, s2, g3, s3))
        assert chapter2.same_state(left, right), name
        assert chapter2.same_state(chapter2.merge_three_reference(*args), solutions.merge_three(*args)), name
        if elements is not None:
            assert chapter2.same_state(left, solutions.online_normalizer(elements)), name


# ----------------------------------------------------------------------------------------------------------------
# 4.1: the traced order and the bits
# ----------------------------------------------------------------------------------------------------------------


def loop_swap_rows(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        acc = np.zeros(v.shape[1])
        for m in range(y.shape[1]):
            acc += y[n, m] * v[m, :]  # the whole row of partial sums at once: still one add per element and key
        a[n] = acc
    return a


def loop_swap_rows_value_first(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for n in range(y.shape[0]):
        for m in range(y.shape[1]):
            a[n] += v[m] * y[n, m]  # numpy hands the traced product back to the checker
    return a


def loop_swap_python_floats(y, v):
    y, v = np.asarray(y).tolist(), np.asarray(v).tolist()
    a = [[0.0] * len(v[0]) for _ in y]
    for n in range(len(y)):
        for m in range(len(v)):
            for d in range(len(v[0])):
                a[n][d] += y[n][m] * v[m][d]
    return a


def loop_swap_float_calls(y, v):
    a = np.zeros((len(y), len(v[0])))
    for n in range(len(y)):
        for m in range(len(v)):
            for d in range(len(v[0])):
                a[n, d] += float(y[n][m]) * float(v[m][d])  # per element, inside the loops
    return a


def loop_swap_keys_outermost(y, v):
    y, v = np.asarray(y), np.asarray(v)
    a = np.zeros((y.shape[0], v.shape[1]))
    for m in range(y.shape[1]):  # m, n, d: for each row the key loop is still outside the d loop
        for n in range(y.shape[0]):
            for d in range(v.shape[1]):
                a[n, d] = a[n, d] + y[n, m] * v[m, d]
    return a


def test_every_loop_with_the_keys_outside_the_output_dimension_passes():
    for fn in (
        solutions.loop_swap,
        loops(),
        loop_swap_rows,
        loop_swap_rows_value_first,
        loop_swap_python_floats,
        loop_swap_float_calls,
        loop_swap_keys_outermost,
    ):
        assert exercises.check_loop_swap(fn).passed, (fn, repr(exercises.check_loop_swap(fn)))


def test_the_unswapped_order_is_caught_only_by_its_trace():
    report = exercises.check_loop_swap(loops(order="ndm"))
    assert failures(report) == [chapter4.TRACED_CASE]  # bitwise equal everywhere else, by design
    assert message(report, chapter4.TRACED_CASE).startswith("the right numbers, in the wrong order")


def test_traced_numbers_record_products_in_order():
    y, v = np.arange(1.0, 7.0).reshape(2, 3), np.arange(1.0, 7.0).reshape(3, 2)
    y_t, v_t, log = chapter4.traced(y, v)
    assert np.asarray(y_t) is y_t  # np.asarray keeps the record
    row = y_t[1, 2] * v_t[2]  # a vectorised row update
    assert row.dtype == np.float64 and np.array_equal(row, y[1, 2] * v[2])
    assert chapter4.products(log) == [((1, 2), (2, 0)), ((1, 2), (2, 1))]
    log.clear()
    _ = np.asarray(y_t, dtype=np.float64)  # a conversion in bulk hides the order
    assert chapter4.products(log) is None


def test_the_order_case_needs_exactly_the_order_m_0_1_2():
    """The sums of the order case give their bits only in the strict order, whatever BLAS a machine has."""
    from fractions import Fraction

    y, v = chapter4.order_case()
    terms = y * v[:, 0]  # (N, M): the products, all exact but the last one of rows 0-2
    strict = [sum(row[1:], row[0]) for row in terms]  # left to right, from m = 0

    def blocked(row, k):  # k accumulators, as SIMD or BLAS kernels keep
        return sum(sum(row[j::k]) for j in range(1, k)) + sum(row[0::k])

    def pairwise(row):
        return row[0] if len(row) == 1 else pairwise(row[: len(row) // 2]) + pairwise(row[len(row) // 2 :])

    def fused(n):  # the strict order with a fused multiply-add: one rounding per step
        acc = 0.0
        for m in range(y.shape[1]):
            acc = float(Fraction(acc) + Fraction(y[n, m]) * Fraction(v[m, 0]))
        return acc

    others = {
        "reversed": [sum(row[::-1][1:], row[::-1][0]) for row in terms],
        "fsum": [math.fsum(r) for r in terms],
        "pairwise": [pairwise(list(r)) for r in terms],
        "fused multiply-add": [fused(n) for n in range(4)],
    }
    others.update({f"{k} accumulators": [blocked(r, k) for r in terms] for k in (2, 4, 8, 16)})
    assert strict[:3] == [0.0, 0.0, 0.0]
    for name, sums in others.items():
        assert sums[:3] != strict[:3], name


ORDER_CASE = "order-sensitive sums of 64 terms: 2^53, 60 terms below 1 that vanish into it in order, -2^53, ..."


def test_blas_einsum_fsum_and_other_orders_fail_the_order_case():
    def fsum(y, v):
        y, v = np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64)
        return np.array([[math.fsum(y[n] * v[:, d]) for d in range(v.shape[1])] for n in range(y.shape[0])])

    def floats(fn):
        return lambda y, v: fn(np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64))

    wrong = {
        "@": floats(lambda y, v: y @ v),
        "np.dot": floats(np.dot),
        "np.einsum": floats(lambda y, v: np.einsum("nm,md->nd", y, v)),
        "np.einsum, optimize": floats(lambda y, v: np.einsum("nm,md->nd", y, v, optimize=True)),
        "a row at a time with @": floats(lambda y, v: np.array([row @ v for row in y])),
        "math.fsum": fsum,
        "reversed": loops(keys=lambda M: reversed(range(M))),
    }
    for name, fn in wrong.items():
        report = exercises.check_loop_swap(fn)
        assert ORDER_CASE in failures(report), name
        text = message(report, ORDER_CASE)
        assert "summed in another order" in text and "order m = 0, 1, ..., M-1" in text, (name, text)


def test_the_loop_swap_solution_is_bitwise_the_package_loop_and_follows_its_own_rules():
    import inspect

    from flashmath import matmul_nmd

    rng = np.random.default_rng(7)
    y, v = rng.random((3, 9)), rng.standard_normal((9, 4))  # the exercise's inputs are float64
    a = solutions.loop_swap(y, v)
    assert a.dtype == np.float64 and np.array_equal(a, matmul_nmd(y, v))
    source = inspect.getsource(solutions.loop_swap)
    assert "[[0.0]" not in source  # our idiom: a numpy row of partial sums
    assert "astype" not in source and "dtype=" not in source  # what the note under exercise 4.1 says fails


# ----------------------------------------------------------------------------------------------------------------
# Predict, then check; solutions.show
# ----------------------------------------------------------------------------------------------------------------


def test_a_prediction_left_as_the_placeholder_prints_a_fixed_message(capsys):
    exercises.check_prediction(..., 0.368)
    exercises.check_prediction(..., 12345.0)
    out = capsys.readouterr().out
    assert out == 2 * (exercises.predict.PLACEHOLDER_MESSAGE + "\n")
    assert "0.368" not in out and "12345" not in out  # nothing of the answer shows


def test_a_prediction_is_compared_with_the_answer(capsys):
    exercises.check_prediction(0.37, math.exp(-1), why="e^{-1}.")
    exercises.check_prediction(0.5, math.exp(-1))
    exercises.check_prediction(1000, 1050.0, tolerance=0.05)
    exercises.check_prediction(0, 0.0)
    exercises.check_prediction(float("nan"), float("nan"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "You predicted 0.37; the answer is 0.3679: right. e^{-1}."
    assert lines[1].endswith("not quite.")
    assert [line.split(": ")[-1] for line in lines[2:]] == ["right.", "right.", "right."]


def test_a_whole_number_answer_asks_for_the_exact_number(capsys):
    for guess in (11.5, 12, 12.4, 13):  # ceil(46 / 4) = 12 tiles: 11.5 and 12.4 are not a number of tiles
        exercises.check_prediction(guess, 12.0)
    verdicts = [line.rsplit(": ", 1)[-1] for line in capsys.readouterr().out.splitlines()]
    assert verdicts == ["not quite.", "right.", "not quite.", "not quite."]
    exercises.check_prediction(8.3, 8.0, tolerance=0.05)  # a measured spread: an explicit tolerance still holds
    assert capsys.readouterr().out.strip().endswith("right.")


def test_a_common_wrong_prediction_is_told_its_misconception(capsys):
    why_not = {43: "43 counts from 1.", 64: "64 is the variance."}
    exercises.check_prediction(43, 42, misconceptions=why_not, why="x_43 is x[42].")
    exercises.check_prediction(44, 42, misconceptions=why_not, why="x_43 is x[42].")
    exercises.check_prediction(42, 42, misconceptions=why_not)
    first, second, third = capsys.readouterr().out.splitlines()
    assert first == "You predicted 43; the answer is 42: not quite. 43 counts from 1. x_43 is x[42]."
    assert second == "You predicted 44; the answer is 42: not quite. x_43 is x[42]."  # no misconception known
    assert third == "You predicted 42; the answer is 42: right."
    with pytest.raises(TypeError, match="a prediction is a number"):
        exercises.check_prediction("0.5 maybe", 0.5)


def test_a_prediction_that_is_not_a_number_is_told_so_in_the_selected_language(monkeypatch):
    """Text typed in place of a number raises TypeError with a message from the catalog (a zh learner reads it in
    Chinese): the message goes through gettext, the text the learner typed filled in."""
    from flashmath.exercises import predict

    monkeypatch.setattr(predict, "_", lambda message: "[zh] " + message)
    with pytest.raises(TypeError, match=r"^\[zh\] a prediction is a number, got 'a'$"):
        exercises.check_prediction("a", 0.5)


def test_a_negative_index_is_matched_with_its_misconception_as_typed(capsys):
    """-3 names x[43] in a 46-vector, but the learner typed -3, not 43: the misconception of 43 ("counted from
    1") is not theirs; the one given for -3 is."""
    why_not = {43: "43 counts from 1.", -3: "x[-1] is already x_46."}
    exercises.check_prediction(-3, 42, tolerance=0, length=46, misconceptions=why_not)
    exercises.check_prediction(-2, 42, tolerance=0, length=46, misconceptions=why_not)
    exercises.check_prediction(43, 42, tolerance=0, length=46, misconceptions=why_not)
    first, second, third = capsys.readouterr().out.splitlines()
    assert first.endswith("not quite. x[-1] is already x_46.") and "x[-3] is x[43]" in first
    assert second.endswith("not quite.")  # x[-2] is x[44]: no misconception typed as -2
    assert third.endswith("not quite. 43 counts from 1.")


def test_show_without_a_name_lists_the_solutions(capsys):
    solutions.show()
    out = capsys.readouterr().out
    assert all(name in out for name in ("score_row", "loop_swap", "one_loop_step", "merge_three", "block_step"))


def test_show_prints_a_solution_and_the_derivations(capsys):
    for name in ("merge", "merge_three", "block_step"):
        solutions.show(name)
        assert f"def {name}" in capsys.readouterr().out
    solutions.show("merge_three")
    assert "associative" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no solution called 'nope'; choose one of: score_row, safe_softmax"):
        solutions.show("nope")


def test_an_unknown_solution_name_is_answered_in_the_selected_language():
    """A mistyped name after "Stuck?" gets the catalog's message, as the checkers' own errors do."""
    fm.set_language("zh_CN")
    try:
        with pytest.raises(ValueError, match="没有 'tile_stpe' 这个参考答案；可以查看的有：score_row, "):
            solutions.show("tile_stpe")
    finally:
        fm.set_language("en")


def test_the_report_keeps_the_order_of_the_cases_when_some_raise():
    from flashmath.exercises import chapter3

    report = exercises.check_attention(ATTENTION["k.T on a batched array"])  # raises in the batch case only
    assert [name for name, _, _ in report.cases] == [
        name for name, _ in chapter3.attention_properties() + chapter3.attention_cases()
    ]


def test_off_by_one_predictions_are_rejected_and_a_negative_index_is_its_element(capsys):
    for guess in (2 / 3, 4 / 5):  # the neighbours of 3/4 (chapter 5's correction factor)
        exercises.check_prediction(guess, 0.75)
    exercises.check_prediction(0.75, 0.75)
    exercises.check_prediction(-4, 42, tolerance=0, length=46)  # x[-4] is x[42] in a 46-vector (chapter 0)
    exercises.check_prediction(-5, 42, tolerance=0, length=46)
    exercises.check_prediction(-4, 42, tolerance=0)  # without the length, -4 is a number like any other
    verdicts = [line.split(": ")[-1].split(".")[0] for line in capsys.readouterr().out.splitlines()]
    assert verdicts == ["not quite", "not quite", "right", "right", "not quite", "not quite"]


# ----------------------------------------------------------------------------------------------------------------
# The property battery: each property catches a wrong solution that the mistake models alone would miss
# ----------------------------------------------------------------------------------------------------------------


def models_only(checker, fn):
    """The mistakes the catalogue's models name for ``fn`` on the checker's ordinary cases, without the properties:
    what the checkers did before the battery (a wrong answer that no model gives stays unnamed)."""
    from flashmath.exercises import _cases

    original = _cases.check_function

    def without_properties(*args, **kw):
        kw["properties"], kw["check_form"] = (), False
        return original(*args, **kw)

    modules = [exercises.chapter0, exercises.chapter1, exercises.chapter2, exercises.chapter3, exercises.chapter5]
    try:
        for module in modules:
            module.check_function = without_properties
        return getattr(exercises, checker)(fn)
    finally:
        for module in modules:
            module.check_function = original


def step_clearing_v_m(g_prev, s_prev, a_prev, x_m, v_m):
    g, s, a = solutions.one_loop_step(g_prev, s_prev, a_prev, x_m, v_m)
    v_m *= 0.0  # "done with this value row": clears the caller's array
    return g, s, a


def block_clearing_v_block(g_prev, s_prev, a_prev, x_block, v_block):
    g, s, a = solutions.block_step(g_prev, s_prev, a_prev, x_block, v_block)
    v_block *= 0.0  # the same, for the block's value rows
    return g, s, a


def softmax_float64_out(x):
    return solutions.safe_softmax(np.asarray(x, dtype=np.float64))  # float16 in, float64 out


def softmax_crashing_on_empty(x):
    x = np.asarray(x)
    if x.size == 0:
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    return solutions.safe_softmax(x)


def softmax_first_and_rest(x):
    x = np.asarray(x, dtype=float)
    m = max(x[0], x[1:].max())  # the first element against the largest of the rest: no rest for one element
    e = np.exp(x - m)
    return e / e.sum()


def softmax_into_zeros_like(x):
    y = np.zeros_like(np.asarray(x))  # the dtype of x: integers for [3, 1, 2]
    y[...] = solutions.safe_softmax(x)
    return y


PROPERTY_CATCHES = {
    # property: (checker, wrong solution, the start of the property case that catches it)
    "the inputs unchanged (v_m)": ("check_one_loop_step", step_clearing_v_m, "property"),
    "the inputs unchanged (v_block)": ("check_block_step", block_clearing_v_block, "property"),
    "the result's dtype": ("check_safe_softmax", softmax_float64_out, "property: float16 in gives float16 out"),
    "the result's type (integer zeros)": (
        "check_safe_softmax",
        softmax_cast_back,
        "property: integers in give float64 out",
    ),
    "the empty input": ("check_safe_softmax", softmax_crashing_on_empty, "property: an empty vector"),
    "one element": ("check_safe_softmax", softmax_first_and_rest, "property: a length-1 vector"),
    "an all -inf row": ("check_merge", merge_with(guard=False), "property: two empty parts"),
    "+inf": ("check_safe_softmax", softmax_inf_row_zeros, "property: a row holding +inf"),
    "NaN": ("check_merge_three", THREE["Python's max dropping NaN"], "property: NaN"),
    # (float16 is a property of chapter 1 alone, where the models catch its overflow too)
    "float16 overflow": ("check_safe_softmax", naive, "property: float16 in gives float16 out"),
    "integer input": ("check_safe_softmax", softmax_into_zeros_like, "property: integers in give float64 out"),
    "negative-only input": (
        "check_online_normalizer",
        normalizer_with(g=0.0, guard=True),
        "property: values far below 0",
    ),
    "one pass in constant memory": (
        "check_online_normalizer",
        normalizer_buffered,
        "property: 4 000 values (the right state, in one pass, in constant memory)",
    ),
    "the shape": ("check_merge_three", lambda *a: (*solutions.merge_three(*a), 0.0), "property"),
}


@pytest.mark.parametrize("prop", list(PROPERTY_CATCHES))
def test_each_property_catches_a_wrong_solution(prop):
    checker, fn, case = PROPERTY_CATCHES[prop]
    report = getattr(exercises, checker)(fn)
    assert any(name.startswith(case) and not ok for name, ok, _ in report.cases), repr(report)


MISSED_BY_MODELS = [
    "the result's dtype",
    "the result's type (integer zeros)",
    "the empty input",
    "one element",
    "+inf",
    "integer input",
    "one pass in constant memory",
    "NaN",
    "an all -inf row",
]


@pytest.mark.parametrize("prop", MISSED_BY_MODELS)
def test_the_mistake_models_alone_miss_what_the_property_catches(prop):
    checker, fn, _ = PROPERTY_CATCHES[prop]
    assert models_only(checker, fn).passed, prop


# ----------------------------------------------------------------------------------------------------------------
# Right answers pass (issue 34): the package's function, the chapter's own code and equivalent forms
# ----------------------------------------------------------------------------------------------------------------


def score_row_loop(q_n, K):
    return np.array([math.fsum(a * b for a, b in zip(q_n, k_m, strict=True)) / math.sqrt(len(q_n)) for k_m in K])


def softmax_logaddexp(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(x.dtype, np.float32))
    if w.size and np.all(w == -np.inf):
        return np.zeros(x.shape, out_dtype(x))
    return np.exp(w - np.logaddexp.reduce(w)).astype(out_dtype(x))  # a +inf row: NaN at the +inf, 0 elsewhere


def softmax_chapter_logsumexp(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(x.dtype, np.float32))
    if w.size == 0 or w.max() == -np.inf:
        return np.zeros(x.shape, out_dtype(x))
    g = w.max()
    return np.exp(w - (g + np.log(np.exp(w - g).sum()))).astype(out_dtype(x))


def online_states_chapter(x):
    """Chapter 2's online_states loop (with np.maximum, as its comment says for NaN), its last state."""
    g_prev, s_prev = -math.inf, 0.0
    for x_i in x:
        g_i = float(np.maximum(g_prev, x_i))
        if g_i == -math.inf:
            continue
        s_prev = s_prev * math.exp(g_prev - g_i) + math.exp(x_i - g_i) if not math.isnan(g_i) else math.nan
        g_prev = g_i
    return g_prev, s_prev


def online_log_domain(x):
    g, lse = -math.inf, -math.inf  # the running max and log(sum of exp)
    for x_i in x:
        g, lse = float(np.maximum(g, x_i)), float(np.logaddexp(lse, x_i))
    return (g, 0.0) if g == -math.inf else (g, math.exp(lse - g) if g < math.inf else math.nan)


def merge_log_domain(g1, s1, g2, s2):
    g = float(np.maximum(g1, g2))
    if g == -math.inf:
        return g, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.logaddexp(g1 + np.log(s1), g2 + np.log(s2))
    return g, float(np.exp(lse - g))


def merge_three_vectorised(g1, s1, g2, s2, g3, s3):
    g_all, s_all = np.array([g1, g2, g3], dtype=float), np.array([s1, s2, s3], dtype=float)
    g = g_all.max()
    if g == -np.inf:
        return g, 0.0
    seen = s_all > 0
    return g, float(np.sum(s_all[seen] * np.exp(g_all[seen] - g)))


def merge_three_fsum(g1, s1, g2, s2, g3, s3):
    g = float(np.max([g1, g2, g3]))
    if g == -math.inf:
        return g, 0.0
    return g, math.fsum(s * math.exp(gk - g) if s else 0.0 for s, gk in ((s1, g1), (s2, g2), (s3, g3)))


def attention_einsum(q, k, v):
    x = np.einsum("...nd,...md->...nm", q, k) / math.sqrt(q.shape[-1])
    y = np.exp(x - x.max(axis=-1, keepdims=True))
    return np.einsum("...nm,...mv->...nv", y / y.sum(axis=-1, keepdims=True), v)


def attention_rows(q, k, v):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    out = np.zeros(q.shape[:-1] + v.shape[-1:])
    for index in np.ndindex(q.shape[:-1]):
        x = k[index[:-1]] @ q[index] / math.sqrt(q.shape[-1])
        out[index] = solutions.safe_softmax(x) @ v[index[:-1]]
    return out


def matmul_n_m_d(y, v):
    """Chapter 4's matmul_n_m_d, verbatim."""
    (N, M), D = y.shape, v.shape[1]
    out = np.zeros((N, D))
    for n in range(N):
        acc = [0.0] * D  # the row of partial sums of A[n, :]
        for m in range(M):
            for d in range(D):
                acc[d] = acc[d] + y[n, m] * v[m, d]  # each acc[d] still gets its terms in the order m = 0, 1, ...
        out[n] = acc
    return out


def loop_swap_mnd(y, v):
    (N, M), D = np.shape(y), np.shape(v)[1]
    out = np.zeros((N, D))
    for m in range(M):
        for n in range(N):
            out[n] = out[n] + y[n, m] * v[m, :]
    return out


def one_loop_step_chapter(g, s, a, x_m, v_m):
    """Chapter 5's one_loop update (its loop body), for one row."""
    g_new = np.maximum(g, x_m)
    rescale = np.exp(g - g_new)
    e_m = np.exp(x_m - g_new)
    s_new = s * rescale + e_m
    return g_new, s_new, a * (s * rescale / s_new) + (e_m / s_new) * np.asarray(v_m)


def one_loop_step_convex(g, s, a, x_m, v_m):
    g_new = max(g, x_m) if not (math.isnan(g) or math.isnan(x_m)) else math.nan
    s_new = s * math.exp(g - g_new) + math.exp(x_m - g_new)
    w = math.exp(x_m - g_new) / s_new  # the new key's weight; the old output keeps 1 - w
    return g_new, s_new, (1 - w) * np.asarray(a) + w * np.asarray(v_m)


def block_step_folded(g, s, a, x_block, v_block):
    for x_m, v_m in zip(x_block, v_block, strict=True):
        g, s, a = one_loop_step_chapter(g, s, a, x_m, v_m)
    return g, s, a


def block_step_vectorised(g, s, a, x_block, v_block):
    x, V = np.asarray(x_block, dtype=float), np.asarray(v_block, dtype=float)
    g_new = np.max(np.append(x, g))
    e = np.exp(x - g_new)
    s_new = s * np.exp(g - g_new) + e.sum()
    return g_new, s_new, (np.asarray(a) * s * np.exp(g - g_new) + e @ V) / s_new


RIGHT = {
    "check_score_row": {
        "the package's solution": solutions.score_row,
        "K @ q_n / sqrt(D)": lambda q, K: K @ q / np.sqrt(len(q)),
        "a loop with math.fsum": score_row_loop,
        "einsum": lambda q, K: np.einsum("md,d->m", K, q) / math.sqrt(q.shape[0]),
    },
    "check_safe_softmax": {
        "fm.safe_softmax": fm.safe_softmax,
        "through np.logaddexp": softmax_logaddexp,
        "through the logsumexp of chapter 1": softmax_chapter_logsumexp,
    },
    "check_online_normalizer": {
        "chapter 2's loop (np.maximum)": online_states_chapter,
        "the log domain (np.logaddexp)": online_log_domain,
    },
    "check_merge": {
        "fm.merge": lambda *a: tuple(float(t) for t in fm.merge(*a)),
        "the log domain": merge_log_domain,
    },
    "check_merge_three": {
        "math.fsum": merge_three_fsum,  # (two pairwise merges give the same numbers, but the prompt rules them out)
        "numpy, vectorised": merge_three_vectorised,
    },
    "check_attention": {
        "fm.attention": fm.attention,
        "einsum": attention_einsum,
        "a loop over the rows": attention_rows,
    },
    "check_loop_swap": {
        "chapter 4's matmul_n_m_d, verbatim": matmul_n_m_d,
        "the order m -> n -> d": loop_swap_mnd,
    },
    "check_one_loop_step": {
        "chapter 5's loop body": one_loop_step_chapter,
        "a convex combination": one_loop_step_convex,
    },
    "check_block_step": {
        "chapter 5's loop body, key by key": block_step_folded,
        "vectorised": block_step_vectorised,
    },
}
RIGHT_CASES = [(checker, form) for checker, forms in RIGHT.items() for form in forms]


@pytest.mark.parametrize("checker, form", RIGHT_CASES, ids=[f"{c}: {f}" for c, f in RIGHT_CASES])
def test_a_right_answer_passes(checker, form):
    report = getattr(exercises, checker)(RIGHT[checker][form])
    assert report.passed, report


def test_the_package_loop_swap_fails_only_the_traced_case_which_the_prompt_explains():
    report = exercises.check_loop_swap(fm.matmul_nmd)  # it refuses arrays of traced numbers (not floats)
    assert failures(report) == [exercises.chapter4._(exercises.chapter4.TRACED_CASE)]
    assert "NonFloatInputError" in message(report, "the order of your loops")


def test_a_log_domain_normalizer_without_a_guard_is_named_for_its_nan_not_a_max_started_at_0():
    def log_domain(x):
        g, lse = -math.inf, -math.inf
        for x_i in x:
            g, lse = float(np.maximum(g, x_i)), float(np.logaddexp(lse, x_i))
        return g, math.exp(lse - g)  # exp(-inf - (-inf)) = NaN when nothing was seen

    report = exercises.check_online_normalizer(log_domain)
    assert failures(report) == ["property: an empty x", "property: a fully masked row"]
    assert "-inf - (-inf) while nothing is seen" in message(report, "property: an empty x")
    assert "the max started at 0" not in repr(report)


def test_a_float16_overflow_is_never_called_off_by_one():
    def float16_acc(y, v):  # chapter 4's loop with float16 partial sums, on float16 input
        return matmul_n_m_d(np.asarray(y, np.float16), np.asarray(v, np.float16))

    report = exercises.check_loop_swap(float16_acc)
    assert not report.passed
    assert "off by one" not in repr(report)


# ----------------------------------------------------------------------------------------------------------------
# The prediction cells of chapters 0-5: the misconception of each common wrong answer
# ----------------------------------------------------------------------------------------------------------------


def prediction_cells(chapter: int) -> list[str]:
    import nbformat
    from helpers import ROOT

    (path,) = sorted((ROOT / "notebooks").glob(f"{chapter:02d}_*.ipynb"))
    cells = nbformat.read(path, as_version=4).cells
    return [c.source for c in cells if c.cell_type == "code" and "check_prediction(my_prediction" in c.source]


@pytest.mark.parametrize("chapter", range(6))
def test_each_prediction_cell_names_the_misconception_of_its_common_wrong_answers(chapter, capsys):
    """Run the cell with each wrong answer of its misconceptions: the verdict is "not quite" and prints that
    misconception's sentence, which the cell's question in predict.QUESTIONS marks for the catalog."""
    import ast

    from flashmath.data import load_heads
    from flashmath.exercises.predict import NOTEBOOK_MISCONCEPTIONS

    (source,) = prediction_cells(chapter)
    call = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check_prediction"
    )
    from flashmath.exercises.predict import QUESTIONS

    (key,) = [ast.literal_eval(k.value) for k in call.keywords if k.arg == "question"]
    env = {"np": np, "math": math, "fm": fm, "rng": np.random.default_rng(0), "SEED": 0, "heads": load_heads()}
    wrongs, texts = list(QUESTIONS[key].misconceptions), list(QUESTIONS[key].misconceptions.values())
    assert len(wrongs) >= 2  # the common wrong answers (two may share a sentence: one per row or column)
    for wrong, text in zip(wrongs, texts, strict=True):
        assert text in NOTEBOOK_MISCONCEPTIONS, text
        exec(source.replace("my_prediction = ...", f"my_prediction = {wrong!r}".replace("nan", "float('nan')")), env)
        printed = capsys.readouterr().out
        assert "not quite" in printed and text in printed, printed


def test_a_negative_index_for_the_same_position_is_right(capsys):
    (source,) = prediction_cells(0)
    from flashmath.data import load_heads

    exec(source.replace("my_prediction = ...", "my_prediction = -4"), {"heads": load_heads()})
    assert ": right." in capsys.readouterr().out


def test_a_closed_form_that_calls_the_pairwise_merge_is_told_so():
    def my_merge(g1, s1, g2, s2):
        g = np.maximum(g1, g2)
        if g == -np.inf:
            return g, 0.0
        return g, s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g)

    def twice(g1, s1, g2, s2, g3, s3):  # right numbers, but not the closed form the exercise asks for
        return my_merge(*my_merge(g1, s1, g2, s2), g3, s3)

    report = exercises.check_merge_three(twice)
    failed = {name: message for name, ok, message in report.cases if not ok}
    assert "one max and one sum, without calling a merge" in failed, repr(report)
    assert "my_merge" in failed["one max and one sum, without calling a merge"]
    solution = {name: ok for name, ok, _ in exercises.check_merge_three(solutions.merge_three).cases}
    assert solution["one max and one sum, without calling a merge"]


# ----------------------------------------------------------------------------------------------------------------
# Issue 35 (rev-a): 2.3's merge found by behaviour, 4.1's @ in the traced case, previews where values differ
# ----------------------------------------------------------------------------------------------------------------

MERGE_FREE = "one max and one sum, without calling a merge"


def _pairwise(g1, s1, g2, s2):  # a learner's own pairwise merge, under a name without "merge"
    g = nan_max(g1, g2)
    if g == -math.inf:
        return g, 0.0
    return g, s1 * math.exp(g1 - g) + s2 * math.exp(g2 - g)


def three_through_own_helper(g1, s1, g2, s2, g3, s3):
    return _pairwise(*_pairwise(g1, s1, g2, s2), g3, s3)


def three_reduced_over_pairs(g1, s1, g2, s2, g3, s3):
    return functools.reduce(lambda a, b: _pairwise(*a, *b), [(g1, s1), (g2, s2), (g3, s3)])


def three_fm_merge(g1, s1, g2, s2, g3, s3):
    import flashmath as fm

    return fm.merge(*fm.merge(g1, s1, g2, s2), g3, s3)


def three_stub(g1, s1, g2, s2, g3, s3):
    raise NotImplementedError


@pytest.mark.parametrize("fn", [three_through_own_helper, three_reduced_over_pairs, three_fm_merge])
def test_a_merge_through_any_pairwise_function_is_found_by_its_arguments(fn):
    report = exercises.check_merge_three(fn)
    failed = {name: message for name, ok, message in report.cases if not ok}
    assert list(failed) == [MERGE_FREE], repr(report)  # the numbers are right; the form is not
    assert "_pairwise" in failed[MERGE_FREE] or "merge" in failed[MERGE_FREE]


def test_a_function_that_raises_gets_no_pass_for_its_form():
    report = exercises.check_merge_three(three_stub)
    assert not any(ok for _, ok, _ in report.cases), repr(report)
    assert message(report, MERGE_FREE) == "not implemented yet"
    report = exercises.check_merge_three(lambda *a: 1 / 0)
    assert "raised ZeroDivisionError" in message(report, MERGE_FREE)


def three_numpy_form(g1, s1, g2, s2, g3, s3):
    gs, ss = np.array([g1, g2, g3], dtype=np.float64), np.array([s1, s2, s3], dtype=np.float64)
    g = np.max(gs)
    if g == -np.inf:
        return float(g), 0.0
    return float(g), float(np.sum(ss * np.exp(gs - g)))


def three_loop_form(g1, s1, g2, s2, g3, s3):
    states = ((g1, s1), (g2, s2), (g3, s3))
    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    total = 0.0
    for g_k, s_k in states:
        total += s_k * math.exp(g_k - g)
    return g, total


def three_with_a_term_helper(g1, s1, g2, s2, g3, s3):
    def term(s, g_k, g):  # three numbers: not two states
        return s * math.exp(g_k - g)

    g = nan_max_of(g1, g2, g3)
    if g == -math.inf:
        return g, 0.0
    return g, term(s1, g1, g) + term(s2, g2, g) + term(s3, g3, g)


@pytest.mark.parametrize(
    "fn", [solutions.merge_three, three_numpy_form, three_loop_form, three_with_a_term_helper, three_with()]
)
def test_every_closed_form_passes_2_3(fn):
    report = exercises.check_merge_three(fn)
    assert report.passed, repr(report)


def loops_ndm_by_hand(y, v):
    (N, M), Dv = np.shape(y), np.shape(v)[1]
    a = np.zeros((N, Dv))
    for n in range(N):
        for d in range(Dv):
            for m in range(M):
                a[n, d] = a[n, d] + y[n, m] * v[m, d]
    return a


@pytest.mark.parametrize(
    "fn", [lambda y, v: y @ v, lambda y, v: np.dot(y, v), lambda y, v: np.array([row @ v for row in y])]
)
def test_matmul_in_the_traced_case_is_named_as_matmul_not_as_unswapped_loops(fn):
    report = exercises.check_loop_swap(fn)
    text = message(report, "the order of your loops")
    assert "@, np.dot, np.sum or math.fsum over the keys (order n, d, m)" in text and "loops not swapped" not in text
    assert named(report) <= {"@, np.dot, np.sum or math.fsum over the keys (order n, d, m)", "summed in another order"}


def loops_ndm_np_sum(y, v):
    N, Dv = np.shape(y)[0], np.shape(v)[1]
    a = np.zeros((N, Dv))
    for n in range(N):
        for d in range(Dv):
            a[n, d] = np.sum(y[n, :] * v[:, d])  # numpy's pairwise sum over the keys
    return a


def loops_ndm_fsum(y, v):
    (N, M), Dv = np.shape(y), np.shape(v)[1]
    a = np.zeros((N, Dv))
    for n in range(N):
        for d in range(Dv):
            a[n, d] = math.fsum(y[n, m] * v[m, d] for m in range(M))  # an exact sum over the keys
    return a


@pytest.mark.parametrize("fn", [loops_ndm_np_sum, loops_ndm_fsum])
def test_np_sum_or_fsum_over_the_keys_in_the_order_n_d_m_is_named_as_such_not_as_matmul(fn):
    # rev3-a: these were told "@ or np.dot", which the learner never wrote
    report = exercises.check_loop_swap(fn)
    text = message(report, "the order of your loops")
    assert NEW_MATMUL in text and "np.sum or math.fsum of y[n, :] * v[:, d]" in text, text
    assert "loops not swapped" not in text
    others = [msg for name, ok, msg in report.cases if not ok and not name.startswith("the order of your loops")]
    assert others and all("summed in another order" in msg and "np.sum (pairwise)" in msg for msg in others)
    assert named(report) <= {NEW_MATMUL, "summed in another order"}


def test_inputs_converted_then_multiplied_read_as_one_sentence():
    # rev3-a: "expected ..., got ...; and but the order of your loops could not be seen"
    report = exercises.check_loop_swap(lambda y, v: np.asarray(y, float) @ np.asarray(v, float))
    text = message(report, "the order of your loops")
    assert "and but" not in text and "; and;" not in text
    assert "the inputs converted before the loops" in text
    assert text.startswith("the right numbers, but the order") or "; and the order of your loops could not be" in text
    report = exercises.check_loop_swap(loop_swap_converted)  # n, m, d loops on floats: the right numbers
    assert message(report, "the order of your loops").startswith("the right numbers, but the order of your loops")


def loops_ndm_reversed_by_hand(y, v):
    (N, M), Dv = np.shape(y), np.shape(v)[1]
    a = np.zeros((N, Dv))
    for n in range(N):
        for d in range(Dv):
            for m in reversed(range(M)):
                a[n, d] = a[n, d] + y[n, m] * v[m, d]
    return a


def test_wrong_numbers_in_the_wrong_order_read_as_one_sentence():
    text = message(exercises.check_loop_swap(loops_ndm_reversed_by_hand), "the order of your loops")
    assert text.startswith("expected ") and "; and in the wrong order: " in text, text


NEW_MATMUL = "@, np.dot, np.sum or math.fsum over the keys (order n, d, m)"


def test_own_loops_in_the_order_n_d_m_are_still_told_to_swap():
    report = exercises.check_loop_swap(loops_ndm_by_hand)
    assert len(failures(report)) == 1 and failures(report)[0].startswith("the order of your loops"), repr(report)
    assert "the loops not swapped (order n, d, m)" in message(report, "the order of your loops")


def test_an_order_only_failure_prints_the_largest_difference():
    report = exercises.check_loop_swap(LOOP_SWAP["summed in another order"])
    text = message(report, "real probabilities")
    assert "summed in another order" in text
    difference = float(re.search(r"largest difference ([0-9.e+-]+)", text).group(1))
    assert 0 < difference < 1e-14  # the last bits alone


def test_a_boolean_mask_is_shown_as_booleans():
    """A mask in a message reads True/False, not the numbers 1./0. (review zhrev-f 13-18)."""
    expected = np.zeros((3, 8), dtype=bool)
    expected[:, 3:] = True
    got = expected.copy()
    got[0, 0] = True
    assert fmt(expected, got) == "an array of shape (3, 8) starting [False, False, False, True, ...]"
    assert fmt(expected[:1, :4]) == "[[False, False, False, True]]"
    assert fmt(np.bool_(True)) == "True"


def test_a_preview_starts_where_expected_and_got_part():
    expected = np.arange(12.0).reshape(3, 4)
    got = expected.copy()
    got[2, 1] = np.nan
    assert fmt(expected, got) == "an array of shape (3, 4), from [2, 1] on [ 9., 10., 11., ...]"
    assert fmt(got, expected) == "an array of shape (3, 4), from [2, 1] on [nan, 10., 11., ...]"
    got = expected.copy()
    got[0, 2] = -1.0
    assert fmt(expected, got).startswith("an array of shape (3, 4) starting [0., 1., 2., 3.")  # within the first 4
    assert fmt(expected) == fmt(expected, expected)  # nothing differs: the first values
    text = message(exercises.check_attention(ATTENTION["the global max instead of each row's max"]), "rows at very")
    shown = re.findall(r"from \[[0-9, ]+\] on \[([^\]]*)", text)
    assert len(shown) == 2 and shown[0] != shown[1], text


def block_nan_skipped(g_prev, s_prev, a_prev, x_block, v_block):
    """A learner who "handles" NaN: np.nanmax for the max, np.nansum for the sum, np.nan_to_num on the weights."""
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = max(g_prev, float(np.nanmax(x)))
        r, e = np.exp(g_prev - g), np.exp(x - g)
        s = s_prev * r + np.nansum(e)
        return g, s, (np.asarray(a_prev) * s_prev * r + np.nan_to_num(e) @ V) / s


def block_nanmax_only(g_prev, s_prev, a_prev, x_block, v_block):
    """np.nanmax for the max, the rest right: the sum still propagates the NaN, the max does not."""
    x, V = np.asarray(x_block, dtype=np.float64), np.asarray(v_block, dtype=np.float64)
    g = max(g_prev, float(np.nanmax(x)))
    r, e = np.exp(g_prev - g), np.exp(x - g)
    s = s_prev * r + e.sum()
    return g, s, (np.asarray(a_prev) * s_prev * r + e @ V) / s


def step_factor_dropped(g_prev, s_prev, a_prev, x_m, v_m):
    """The old output rescaled by exp(g_{m-1} - g_m) alone, the factor s_{m-1} / s_m dropped."""
    g = np.maximum(g_prev, x_m)
    r, e = np.exp(g_prev - g), np.exp(x_m - g)
    s = s_prev * r + e
    return g, s, np.asarray(a_prev) * r + e * np.asarray(v_m) / s


@pytest.mark.parametrize(
    "checker, fn, mistake",
    [
        ("check_block_step", block_nan_skipped, "a NaN score skipped (np.nanmax, np.nansum)"),
        ("check_block_step", block_nanmax_only, "a max that drops NaN"),
        ("check_one_loop_step", to_step(block_nan_skipped), "a NaN score skipped (np.nanmax, np.nansum)"),
        ("check_one_loop_step", step_factor_dropped, "the factor s_{m-1} / s_m missing"),
    ],
)
def test_the_nan_handling_and_the_dropped_factor_get_their_own_names(checker, fn, mistake):
    """Review 35 (rev-b): np.nanmax with np.nansum failed the NaN property under "the block taken as one key" (its
    last key alone matched by chance); np.nanmax alone was called Python's max; a dropped s_{m-1} / s_m was called
    s_m used where s_{m-1} belongs. Each is now named for what it is, and only the NaN case fails."""
    report = getattr(exercises, checker)(fn)
    assert not report.passed, report
    assert named(report) == {mistake}, report
    if "NaN" in mistake:
        assert [name for name, ok, _ in report.cases if not ok] == [
            next(name for name, _, _ in report.cases if "NaN" in name)
        ], report


def _step_in_place(g_prev, s_prev, a_prev, x_m, v_m):
    """5.1 with the old output scaled in place (a_prev *= ...): right values, a_prev changed."""
    g, s, a = solutions.one_loop_step(g_prev, s_prev, a_prev.copy(), x_m, v_m)
    a_prev *= 0.0
    a_prev += a
    return g, s, a_prev


def _block_in_place(g_prev, s_prev, a_prev, x_block, v_block):
    """5.2 with the old output scaled in place (a_prev *= ...): right values, a_prev changed."""
    g, s, a = solutions.block_step(g_prev, s_prev, a_prev.copy(), x_block, v_block)
    a_prev *= 0.0
    a_prev += a
    return g, s, a_prev


@pytest.mark.parametrize(
    "checker, right, in_place",
    [
        ("check_one_loop_step", solutions.one_loop_step, _step_in_place),
        ("check_block_step", solutions.block_step, _block_in_place),
    ],
)
def test_one_loop_steps_in_place_name_a_prev_with_their_own_example(checker, right, in_place):
    """Review 35 (rev8-b): 5.1 and 5.2, like 6.1, name the argument changed in place and give an example in their
    own names (a_prev *= ...), not another exercise's (x -= x.max(), q /= ...); the right answer passes."""
    assert getattr(exercises, checker)(right).passed
    report = getattr(exercises, checker)(in_place)
    failed = [msg for _name, ok, msg in report.cases if not ok]
    assert failed and not report.passed, report
    first = failed[0]
    assert first.startswith("a_prev (argument 3) was changed: looks like the input modified in place"), first
    assert "a_prev *= ..." in first and "leave the inputs unchanged" in first, first
    assert "x.max()" not in first and "q /=" not in first, first


def test_a_boolean_mask_names_its_first_mismatch_not_a_difference():
    from flashmath.exercises._report import error_note, first_mismatch, largest_difference

    want = np.array([[True, True, False], [False, True, True]])
    got = np.array([[True, False, False], [True, True, True]])
    note = "; first mismatch at [0, 1] (expected True, got False)"
    assert first_mismatch(got, want) == error_note(got, want) == largest_difference(got, want) == note
    assert first_mismatch(want, want) == "" and first_mismatch(np.True_, np.False_) == ""
    assert first_mismatch(got[:1], want) == ""
    assert "largest difference" in error_note(got.astype(float), want.astype(float))  # numbers: unchanged


def _loop_softmax(g0: float, guard_sum: bool = False):
    """The chapter's three-pass loop in Python floats (cell 30), its max started at ``g0``; ``guard_sum`` returns
    zeros when the sum is 0 instead of dividing."""

    def fn(x):
        x = np.asarray(x)
        g = g0
        for v in x:
            g = max(g, float(v))
        if g == -math.inf:
            return np.zeros(x.shape, out_dtype(x))
        s = 0.0
        for v in x:
            s += math.exp(float(v) - g)
        if guard_sum and s == 0:
            return np.zeros(x.shape, out_dtype(x))
        return np.array([math.exp(float(v) - g) / s for v in x]).astype(out_dtype(x))

    return fn


def _vectorised_max_from_zero_guarded(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(x.dtype, np.float32))
    if not w.size:
        return w.astype(out_dtype(x))
    e = np.exp(w - max(0, w.max()))
    s = e.sum()
    return (np.zeros_like(e) if s == 0 else e / s).astype(out_dtype(x))


def _vectorised_unshifted_guarded(x):
    x = np.asarray(x)
    w = x.astype(np.promote_types(x.dtype, np.float32))
    e = np.exp(w)
    s = e.sum()
    return (np.zeros_like(e) if s == 0 else e / s).astype(out_dtype(x))


def test_a_python_loop_with_the_max_started_at_0_raising_zero_division_is_named():
    for right in (_loop_softmax(-math.inf), _loop_softmax(-math.inf, guard_sum=True)):
        assert exercises.check_safe_softmax(right).passed
    report = exercises.check_safe_softmax(_loop_softmax(0.0))
    assert failures(report) == [
        "property: a row masked entirely (all -inf) gives all zeros",
        "property: values far below 0",
    ]
    for case in failures(report):
        assert "raised ZeroDivisionError" in message(report, case)
    assert "the max started at 0" in message(report, "property: a row masked entirely")
    assert 'the same diagnosis as for the case "property: a row masked entirely' in repr(report)
    report = exercises.check_safe_softmax(_loop_softmax(0.0, guard_sum=True))
    assert failures(report) == ["property: values far below 0"]
    assert "the max started at 0" in message(report, "property: values far below 0")


def test_a_zero_division_that_the_max_started_at_0_does_not_explain_is_not_named_so():
    def unshifted_loop(x):  # no max at all: 1e4 overflows (OverflowError) besides the two zero sums
        x = np.asarray(x)
        s = sum(math.exp(float(v)) for v in x)
        return np.array([math.exp(float(v)) / s for v in x]).astype(out_dtype(x))

    report = exercises.check_safe_softmax(unshifted_loop)
    assert "the max started at 0" not in repr(report)
    text = message(report, "property: a row masked entirely")
    assert "raised ZeroDivisionError" in text and "the sum is 0" in text


def test_the_vectorised_max_from_0_with_a_zero_sum_guard_is_named_the_max_started_at_0():
    report = exercises.check_safe_softmax(_vectorised_max_from_zero_guarded)
    assert failures(report) == ["property: values far below 0"]
    text = message(report, "property: values far below 0")
    assert "the max started at 0" in text and "the max not subtracted" not in text
    report = exercises.check_safe_softmax(_vectorised_unshifted_guarded)  # no max at all: 1e4 fails too
    assert "the max not subtracted" in message(report, "values of 1e4")
    assert "the max started at 0" not in repr(report)


def test_the_softmax_over_the_queries_says_what_it_does_to_one_query_only_on_the_one_query_case():
    """Issue 35 (reviews rev10-b, rev12-b): the sentence on N = 1 (every weight 1, A the sum of V's rows) is given on
    the case with one query, not on the cases with several."""
    report = exercises.check_attention(ATTENTION["softmax over the wrong axis (the queries)"])
    for name, ok, text in report.cases:
        if ok:
            continue
        assert "softmax over the wrong axis (the queries)" in text, (name, text)
        assert ("N = 1) a softmax over the queries" in text) == name.startswith("N = 1:"), (name, text)


def test_a_prediction_not_accepted_never_prints_as_the_answer(capsys):
    """Review 35 (rev14-c): a prediction of 2.0001 for an answer of 2 printed "You predicted 2; the answer is 2: not
    quite" (the guess rounded to 4 digits); a prediction that is not accepted prints with the digits that tell it
    from the answer, and an accepted one stays rounded."""
    exercises.check_prediction(2.0001, 2.0)
    exercises.check_prediction(0.12501, 0.125, tolerance=0.0)
    exercises.check_prediction(0.36789, math.exp(-1))  # right within 5 %: rounded as before
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "You predicted 2.0001; the answer is 2: not quite."
    assert lines[1] == "You predicted 0.12501; the answer is 0.125: not quite."
    assert lines[2] == "You predicted 0.3679; the answer is 0.3679: right."


def test_expected_and_got_that_differ_never_print_alike():
    """Review 35 (rev14-e): for np.clip in 13.3 the property case printed "expected the scores = [[5, 0.125, -5]],
    got [[5, 0.125, -5]]" (4 decimals); the shared formatter prints as many more decimals as it takes to tell two
    arrays (or numbers) apart, and 4 when they print apart anyway."""
    from flashmath.exercises._report import fmt

    report = exercises.check_softcap(lambda qk, scale, cap: np.clip(qk * scale, -cap, cap))
    (text,) = [m for name, ok, m in report.cases if not ok and name.startswith("property: +inf, 1 and -inf")]
    expected, got = text.split("; largest difference")[0].split(", got ")
    assert "0.12497" in expected and "0.125" in got, text
    assert expected.split(" = ", 1)[1] != got, text
    want, have = np.array([1.0, 0.124974, 2.0]), np.array([1.0, 0.125, 2.0])
    assert fmt(want, have) != fmt(have, want)
    assert fmt(np.array([1.0, 0.5]), np.array([1.0, 0.25])) == "[1. , 0.5]"  # apart at 4 decimals: unchanged
    assert fmt(np.float64(2.0001), np.float64(2.0)) == "2.0001"
    big, other = np.arange(20.0), np.arange(20.0)
    other[10] += 1e-7
    assert "10.0000001" in fmt(other, big) and "10.0000001" not in fmt(big, other)


def test_a_case_that_refers_to_an_earlier_one_keeps_its_own_numbers():
    """Review 35 (rev9-f to rev14-f): in 14.1, "device 0 of P = 2: the same as for 'property: the last device: r =
    P - 1' above" hid the case's own expected and got behind another case's label. The case now prints its own
    numbers, and only the reason refers to the earlier case, by the label printed for it."""
    report = exercises.check_zigzag_chunks(lambda P, r: (r, 2 * P - r))
    lines = repr(report).splitlines()
    line = next(line for line in lines if "device 0 of P = 2" in line)
    assert line == (
        "  FAIL  device 0 of P = 2: expected second chunk = 3, got 4: the same diagnosis as for the case "
        '"property: the last device: r = P - 1" above'
    ), line
    earlier = next(
        i for i, line in enumerate(lines) if line.startswith("  FAIL  property: the last device: r = P - 1:")
    )
    assert earlier < lines.index(line)
    assert "looks like the second chunk off by one (2P - r)" in lines[earlier]


def test_safe_softmax_says_a_function_returned_none():
    """A function that returns None (a forgotten return) is told so, not "got nan" (zhrev-y 01-9)."""
    text = repr(exercises.check_safe_softmax(lambda x: None))
    assert "returned None" in text and "got nan" not in text


def test_the_same_reason_closes_the_parenthesis_it_replaces():
    """A repeated reason that starts inside a note in parentheses replaces the whole note and closes it (zhrev-y
    01-9): 'got [nan, nan, nan] (the same diagnosis as for the case "..." above)', no "(" left open."""
    text = repr(exercises.check_safe_softmax(lambda x: np.full(np.shape(x), np.nan)))
    line = next(line for line in text.splitlines() if "the same diagnosis as for" in line)
    assert line.endswith(" above)") and line.count("(") == line.count(")"), line


@pytest.mark.parametrize(
    ("language", "message"),
    [
        ("en", "A: expected [1, 2], got [1, 3]: the row's max was not subtracted, so large scores overflowed to inf"),
        (
            "zh_CN",
            "输出 A：应为 [1, 2]，得到 [1, 3]：这一行的最大值没有减去，所以很大的分数溢出成了 inf，请先减去最大值。",
        ),
    ],
)
def test_a_repeated_reason_keeps_the_values_after_a_name_in_front(language, message):
    """Review zhrev-ah (chapter 13): a message that puts the output's name first ("A：应为 ...，得到 ...：reason", the
    Chinese order) lost its expected and got values when repeated ("A：说明同上……"): the reason starts after the
    value the case got, not at the first separator."""
    from flashmath.exercises._report import _shortened

    previous = fm.i18n.get_language()
    fm.set_language(language)
    try:
        printed: list = []
        assert _shortened("case one", message, printed) == message
        repeat = _shortened("case two", message, printed)
    finally:
        fm.set_language(previous)
    own_words = message[: message.index("[1, 3]") + len("[1, 3]")]
    assert repeat.startswith(own_words) and "case one" in repeat, repeat
    assert len(repeat) < len(message), repeat


def test_an_instruction_is_printed_in_full_every_time():
    """Review zhrev-ao 11-2: a long message that says what to write, not why an answer is wrong, is never replaced
    by a reference to an earlier case ("还没有答案：原因同上面的……" does not read); a plain message as long is."""
    from flashmath.exercises._report import _LONG, Instruction, _shortened

    text = "no answer yet: write 'registers', 'shared memory' or 'HBM' (or their names in Chinese)"
    assert len(text) >= _LONG
    printed: list = []
    assert [_shortened(case, Instruction(text), printed) for case in ("a", "b", "c")] == [text] * 3
    assert not printed
    assert _shortened("b", text, [(text, "a")]) != text  # without the marker, the repeat refers to case a
