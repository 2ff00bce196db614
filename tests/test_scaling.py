"""flashmath.scaling: the spread of dot products grows as sqrt(D); dividing by sqrt(D) keeps softmax from
becoming one-hot."""

import math

import numpy as np
import pytest

from flashmath import safe_softmax, scale_sweep, softmax_entropy


def test_entropy_of_one_hot_uniform_and_a_direct_sum():
    assert softmax_entropy(np.array([0.0, 1.0, 0.0])) == 0.0
    np.testing.assert_allclose(softmax_entropy(np.full(8, 1 / 8)), math.log(8), rtol=1e-15)
    y = safe_softmax(np.array([[0.3, -1.0, 2.0], [5.0, 5.0, -np.inf]]))
    expected = [-sum(p * math.log(p) for p in row if p > 0) for row in y]
    np.testing.assert_allclose(softmax_entropy(y), expected, rtol=1e-14)
    np.testing.assert_allclose(softmax_entropy(y.T, axis=0), expected, rtol=1e-14)


def test_sweep_shapes_and_scaled_equals_raw_over_sqrt_d():
    dims = [1, 3, 16]
    sweep = scale_sweep(dims, rng=np.random.default_rng(0), n_queries=7, n_keys=5)
    assert len(sweep) == 3 and sweep.dims.tolist() == dims and sweep.n_keys == 5
    assert sweep.raw.shape == sweep.scaled.shape == (3, 35)
    for arr in (sweep.max_prob_raw, sweep.max_prob_scaled, sweep.entropy_raw, sweep.entropy_scaled):
        assert arr.shape == (3, 7)
    np.testing.assert_allclose(sweep.scaled, sweep.raw / np.sqrt(np.array(dims))[:, None], rtol=1e-15)
    assert ((sweep.max_prob_raw >= 1 / 5) & (sweep.max_prob_raw <= 1)).all()
    assert ((sweep.entropy_scaled >= 0) & (sweep.entropy_scaled <= math.log(5) + 1e-12)).all()


def test_variance_grows_as_d_unscaled_and_stays_one_scaled():
    sweep = scale_sweep([4, 64, 256], rng=np.random.default_rng(1), n_queries=300, n_keys=100)
    raw, scaled = sweep.std()
    np.testing.assert_allclose(raw, np.sqrt([4, 64, 256]), rtol=0.1)
    np.testing.assert_allclose(scaled, 1.0, rtol=0.1)
    # unscaled softmax sharpens towards one-hot as D grows; scaled stays put
    assert sweep.max_prob_raw[-1].mean() > 0.8 > sweep.max_prob_scaled[-1].mean()
    assert sweep.entropy_raw[-1].mean() < 0.5 * sweep.entropy_scaled[-1].mean()


def test_same_seed_same_sweep():
    a = scale_sweep([2, 8], rng=np.random.default_rng(5), n_queries=4, n_keys=3)
    b = scale_sweep([2, 8], rng=np.random.default_rng(5), n_queries=4, n_keys=3)
    np.testing.assert_array_equal(a.raw, b.raw)


@pytest.mark.parametrize(
    "kwargs",
    [{"dims": []}, {"dims": [0, 4]}, {"dims": [2.5]}, {"dims": [4], "n_keys": 1}, {"dims": [4], "n_queries": 0}],
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        scale_sweep(rng=np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"rng": 3}, TypeError, r"rng must be a numpy Generator: pass np.random.default_rng\(SEED\), got int 3"),
        ({"rng": np.random.RandomState(0)}, TypeError, "rng must be a numpy Generator"),
        ({"n_keys": "8"}, TypeError, "n_keys must be an integer, got str '8'"),
        ({"n_queries": 2.5}, TypeError, "n_queries must be an integer, got float 2.5"),
        ({"n_queries": True}, TypeError, "n_queries must be an integer, got the bool"),
        ({"dims": ["8"]}, ValueError, "dims must be a non-empty 1-D list of positive integers"),
        ({"dims": [[1], [2, 3]]}, ValueError, "dims must be a non-empty 1-D list of positive integers"),
    ],
)
def test_bad_arguments_say_what_is_expected(kwargs, error, match):
    arguments = {"dims": [4], "rng": np.random.default_rng(0)} | kwargs
    with pytest.raises(error, match=match):
        scale_sweep(**arguments)


def test_numpy_integers_are_sizes():
    sweep = scale_sweep(np.array([2, 4]), rng=np.random.default_rng(0), n_queries=np.int64(3), n_keys=np.int32(4))
    assert sweep.raw.shape == (2, 12)
