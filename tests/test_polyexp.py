"""flashmath.polyexp: FlashAttention-4's polynomial exp2, against np.exp2 and against an ldexp of the polynomial."""

import numpy as np
import pytest

from flashmath.polyexp import POLY_EX2, exp2_poly, exp2_poly_error


def test_integers_are_exact_powers_of_two():
    n = np.arange(-126, 128, dtype=np.float32)
    assert np.array_equal(exp2_poly(n), np.exp2(n.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("degree", sorted(POLY_EX2))
def test_the_exponent_bit_trick_is_ldexp(degree):
    """Adding n << 23 to the bits of the polynomial's value is multiplying it by 2**n, in float32's normal range."""
    x = np.random.default_rng(degree).uniform(-120, 120, 20_000).astype(np.float32)
    n = np.floor(x)
    frac = x - n
    poly = np.polynomial.polynomial.polyval(frac.astype(np.float64), POLY_EX2[degree])
    expected = np.ldexp(poly, n.astype(int))
    np.testing.assert_allclose(exp2_poly(x, degree), expected, rtol=4 * 2.0**-24)


def test_degree_three_is_within_1e_4_and_one_16_bit_ulp():
    x = np.linspace(-126, 0, 400_001, dtype=np.float32)
    err = exp2_poly_error(x, 3)
    assert 5e-5 < err.max_rel_error < 1e-4  # the minimax fit's error, about 2**-13.5
    assert err.max_ulps_after_rounding == {"float16": 1.0, "bfloat16": 1.0}
    assert err.same_after_rounding["float16"] > 0.9 and err.same_after_rounding["bfloat16"] > 0.98


def test_the_error_falls_with_the_degree():
    x = np.linspace(-20, 0, 100_001, dtype=np.float32)
    errors = [exp2_poly_error(x, d).max_rel_error for d in sorted(POLY_EX2)]
    assert errors == sorted(errors, reverse=True)
    assert errors[0] > 1e-2 and errors[-1] < 1e-6


def test_nan_in_nan_out_and_the_clamp():
    out = exp2_poly(np.array([np.nan, -500.0, 0.0], dtype=np.float32))
    assert np.isnan(out[0]) and out[1] == exp2_poly(np.float32(-127.0)) and out[2] == 1.0


def test_bad_input_is_refused_and_the_input_kept():
    x = np.array([-1.5, 0.25])
    before = x.copy()
    exp2_poly(x)
    assert np.array_equal(x, before)
    with pytest.raises(ValueError, match="degree must be one of"):
        exp2_poly(x, 6)
    with pytest.raises(ValueError, match="at most 127"):
        exp2_poly(np.array([128.0]))
    with pytest.raises(ValueError, match="no input"):
        exp2_poly_error(np.array([np.nan, -300.0]))


def test_the_16_bit_shares_count_only_normal_results():
    """float16's share is measured where 2**x is a normal float16 (x >= -14); bfloat16's over float32's range."""
    x = np.linspace(-126, 0, 126_001)  # steps of 1e-3
    err = exp2_poly_error(x, 3)
    assert err.points_after_rounding == {"float16": 14_001, "bfloat16": 126_001}
    with pytest.raises(ValueError, match="normal float16"):
        exp2_poly_error(np.linspace(-30, -20, 11), 3)
