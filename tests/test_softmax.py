"""flashmath.softmax against a direct float64 computation written here, plus its edge cases."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flashmath as fm


def reference(x):
    """Safe softmax in float64, spelled out with Python's math module, one row."""
    x = [float(v) for v in x]
    g = max(x)
    if g == -math.inf:
        return np.zeros(len(x))
    e = [math.exp(v - g) for v in x]
    d = math.fsum(e)
    return np.array([v / d for v in e])


def assert_rel(actual, expected, rtol=1e-12, floor=1e-300):
    """Relative agreement, with an absolute floor for subnormal probabilities."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    err = np.abs(actual - expected)
    bound = rtol * np.abs(expected) + floor
    assert np.all(err <= bound), f"max rel err {np.max(err / np.maximum(np.abs(expected), floor))}"


finite_or_neg_inf = st.one_of(
    st.floats(-1e4, 1e4, allow_nan=False), st.just(-np.inf), st.sampled_from([1e4, -1e4, 2e4, -3e4])
)
vectors = hnp.arrays(np.float64, st.integers(1, 40), elements=finite_or_neg_inf)


@settings(max_examples=300, deadline=None)
@given(vectors)
def test_online_and_safe_match_float64_reference(x):
    expected = reference(x)
    assert_rel(fm.online_softmax(x), expected)
    assert_rel(fm.safe_softmax(x), expected)


@settings(max_examples=300, deadline=None)
@given(vectors)
def test_online_normalizer_matches_direct_max_and_sum(x):
    g, s = fm.online_normalizer(x)
    g_ref = max(x)
    assert g == g_ref
    s_ref = 0.0 if g_ref == -math.inf else math.fsum(math.exp(v - g_ref) for v in x)
    assert abs(s - s_ref) <= 1e-12 * s_ref


@settings(max_examples=200, deadline=None)
@given(vectors, st.integers(0, 40))
def test_merge_of_two_parts_equals_whole(x, cut):
    cut = min(cut, len(x))
    g, s = fm.merge(*fm.online_normalizer(x[:cut]), *fm.online_normalizer(x[cut:]))
    g_ref, s_ref = fm.online_normalizer(x)
    assert g == g_ref
    assert abs(s - s_ref) <= 1e-12 * s_ref


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 9)), elements=finite_or_neg_inf),
    st.sampled_from([0, 1, -1]),
)
def test_axis_argument_on_2d(x, axis):
    expected = np.apply_along_axis(reference, axis, x)
    for f in (fm.online_softmax, fm.safe_softmax):
        assert_rel(f(x, axis=axis), expected)


def test_merge_is_associative_and_has_identity():
    rng = np.random.default_rng(1)
    a, b, c = (fm.online_normalizer(rng.normal(size=5) * 10) for _ in range(3))
    left = fm.merge(*fm.merge(*a, *b), *c)
    right = fm.merge(*a, *fm.merge(*b, *c))
    np.testing.assert_allclose(left, right, rtol=1e-14)
    assert fm.merge(*a, -np.inf, 0.0) == a
    assert fm.merge(-np.inf, 0.0, *a) == a


def test_length_one_and_all_equal():
    for f in (fm.softmax, fm.safe_softmax, fm.online_softmax):
        assert f(np.array([42.0])).tolist() == [1.0]
        np.testing.assert_allclose(f(np.full(7, 3.0)), np.full(7, 1 / 7), rtol=1e-15)
    assert fm.online_normalizer(np.array([42.0])) == (42.0, 1.0)
    assert fm.online_normalizer(np.full(7, 3.0)) == (3.0, 7.0)


def test_direct_softmax_overflows_and_safe_does_not():
    x = np.array([1e4, 0.0])
    assert np.isnan(fm.softmax(x)[0])  # inf / inf
    np.testing.assert_allclose(fm.safe_softmax(x), [1.0, 0.0])
    np.testing.assert_allclose(fm.online_softmax(x), [1.0, 0.0])
    big = np.array([1e5, -1e5, 2e5])
    assert_rel(fm.online_softmax(big), reference(big))


def test_float16_in_float16_out_without_overflow():
    x = np.array([20.0, 19.0, 0.0], dtype=np.float16)  # exp(20) > 65504 overflows float16
    assert np.isnan(fm.softmax(x)).any()
    for f in (fm.safe_softmax, fm.online_softmax):
        y = f(x)
        assert y.dtype == np.float16
        # float16 rounds to ~3 digits and flushes below its smallest subnormal (6e-8) to 0
        np.testing.assert_allclose(y.astype(np.float64), reference(x.astype(np.float64)), rtol=1e-3, atol=6e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_preserved(dtype):
    x = np.linspace(-3, 3, 11).astype(dtype)
    for f in (fm.softmax, fm.safe_softmax, fm.online_softmax):
        assert f(x).dtype == dtype
    assert fm.online_normalizer(x)[1].dtype == dtype


def test_integers_are_taken_as_float64():
    assert fm.safe_softmax([1, 2, 3]).dtype == np.float64


def test_neg_inf_entries_and_fully_masked_rows():
    x = np.array([0.5, -np.inf, 1.5, -np.inf])
    y = fm.online_softmax(x)
    assert y[1] == 0 and y[3] == 0
    assert_rel(y, reference(x))
    masked = np.full(4, -np.inf)
    assert np.isnan(fm.softmax(masked)).all()  # 0 / 0: the lesson of chapter 1
    assert fm.safe_softmax(masked).tolist() == [0.0] * 4
    assert fm.online_softmax(masked).tolist() == [0.0] * 4
    assert fm.online_normalizer(masked) == (-np.inf, 0.0)
    assert fm.online_normalizer(np.array([])) == (-np.inf, 0.0)
    rows = np.array([[1.0, 2.0], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(fm.online_softmax(rows)[1], [0.0, 0.0])


@pytest.mark.parametrize(
    "bad", [np.array([1.0, np.nan, 2.0]), np.array([1.0, np.inf, 2.0]), np.array([-np.inf, np.nan])]
)
def test_nan_and_plus_inf_give_nan_never_zero(bad):
    for f in (fm.safe_softmax, fm.online_softmax):
        assert np.isnan(f(bad)).all(), f.__name__
    assert np.isnan(fm.softmax(bad)).any()  # the direct formula: NaN where exp is inf or NaN
    g, s = fm.online_normalizer(bad)
    with np.errstate(invalid="ignore"):
        lse = g + np.log(s)
    if np.isnan(bad).any():
        assert np.isnan(s) and np.isnan(lse)  # NaN in, NaN out
    else:
        assert lse == np.inf  # the logsumexp of a vector holding +inf (issue 16)


INF = np.inf


@pytest.mark.parametrize(
    "x, state",
    [
        ([INF, 0.0], (INF, 1.0)),
        ([0.0, INF], (INF, 1.0)),
        ([INF, -INF, INF, 3.0], (INF, 2.0)),
        ([INF], (INF, 1.0)),
    ],
)
def test_the_state_of_a_vector_holding_plus_inf_counts_its_infinities(x, state):
    """The +inf convention (flashmath.softmax's docstring): each element at the max adds exp(0) = 1 to s, also at
    +inf, so g + log(s) is +inf, the logsumexp, where the plain recurrence gives inf - inf = NaN."""
    g, s = fm.online_normalizer(np.array(x))
    assert (g, s) == state
    with np.errstate(divide="ignore"):
        assert (
            g + np.log(s)
            == fm.attention(np.ones((1, 1)), np.array(x)[:, None], np.ones((len(x), 1)), scale=1.0, return_lse=True)[1][
                0
            ]
        )


@given(st.lists(st.sampled_from([-INF, -1.5, 0.0, 2.0, INF, np.nan]), min_size=0, max_size=7), st.data())
def test_merge_with_infinite_and_nan_elements_equals_the_whole(values, data):
    """Any split of any vector holding -inf, +inf or NaN merges to the state of the whole, in either order."""
    x = np.array(values, dtype=np.float64)
    cut = data.draw(st.integers(0, len(x)))
    whole = fm.online_normalizer(x)
    left, right = fm.online_normalizer(x[:cut]), fm.online_normalizer(x[cut:])
    for merged in (fm.merge(*left, *right), fm.merge(*right, *left)):
        np.testing.assert_allclose(np.array(merged), np.array(whole), rtol=1e-12)  # NaN where whole is NaN


def test_nan_stays_in_its_row():
    x = np.array([[1.0, np.nan], [1.0, 2.0]])
    y = fm.online_softmax(x)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


def test_inputs_not_modified():
    x = np.array([3.0, -np.inf, 1.0])
    before = x.copy()
    for f in (fm.softmax, fm.safe_softmax, fm.online_softmax, fm.online_normalizer, fm.online_softmax_trace):
        f(x)
    np.testing.assert_array_equal(x, before)


def test_errors_are_clear():
    with pytest.raises(TypeError, match="floating-point"):
        fm.safe_softmax(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="complex128"):
        fm.online_softmax(np.array([1j]))
    with pytest.raises(ValueError, match="scalar"):
        fm.softmax(np.float64(1.0))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fm.safe_softmax(np.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match="1-D vector"):
        fm.online_normalizer(np.ones((2, 2)))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        fm.online_softmax_trace(np.array([]))


def test_trace_states():
    x = np.array([1.0, 3.0, 2.0, 5.0, -np.inf, 4.0])
    t = fm.online_softmax_trace(x)
    np.testing.assert_array_equal(t.g, np.maximum.accumulate(x))
    for i in range(len(x)):  # s_i = sum_{j <= i} exp(x_j - g_i)
        np.testing.assert_allclose(t.s[i], np.sum(np.exp(x[: i + 1] - t.g[i])), rtol=1e-14)
    g_prev = np.concatenate([[-np.inf], t.g[:-1]])
    expected_rescale = np.where(g_prev == t.g, 1.0, np.exp(g_prev - t.g))
    np.testing.assert_allclose(t.rescale, expected_rescale, rtol=1e-15)
    assert t.rescale[0] == 0.0  # g_0 = -inf
    assert t.jumps.tolist() == [False, True, False, True, False, False]  # step 1 is not a jump
    assert t.denominator == fm.online_normalizer(x)[1]
    masked_prefix = fm.online_softmax_trace(np.array([-np.inf, -np.inf, 1.0]))
    assert masked_prefix.rescale.tolist() == [1.0, 1.0, 0.0]
    assert masked_prefix.s.tolist() == [0.0, 0.0, 1.0]


def test_merge_keeps_nan_in_empty_states_and_rejects_negative_sums():
    g, s = fm.merge(-np.inf, np.nan, -np.inf, 0.0)
    assert g == -np.inf and np.isnan(s)
    with pytest.raises(ValueError, match="s2 must be >= 0"):
        fm.merge(0.0, 1.0, 0.0, -1.0)


@pytest.mark.parametrize("axis", [None, "0", 1.5, (0, 1)])
def test_axis_must_be_an_integer(axis):
    for f in (fm.softmax, fm.safe_softmax, fm.online_softmax):
        with pytest.raises(TypeError, match="axis must be an integer"):
            f(np.ones((2, 2)), axis=axis)


def test_extreme_finite_values_raise_no_warning():
    import warnings

    x = np.array([1e308, -1e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for f in (fm.safe_softmax, fm.online_softmax):
            np.testing.assert_array_equal(f(x), [1.0, 0.0])
        fm.online_normalizer(x)
        fm.online_softmax_trace(x)


def test_overflow_study_the_direct_softmax_fails_once_the_logsumexp_passes_the_dtypes_limit():
    from flashmath.softmax import overflow_study

    x = np.array([1.0, 2.0, 3.0])
    small = overflow_study(x, 1.0, np.float16)
    assert small.lse < small.limit and not small.overflowed.any()
    np.testing.assert_allclose(small.direct, small.safe, rtol=1e-3)
    big = overflow_study(x, 5.0, np.float16)  # 15 > ln(65504) = 11.09: exp(15) overflows float16
    assert big.lse > big.limit and big.overflowed[-1]
    assert np.isnan(big.direct).any() and np.isclose(big.safe.sum(), 1.0, rtol=1e-3)
    assert big.limit == pytest.approx(np.log(65504.0), rel=1e-3)  # ln of the largest float16, in float16
