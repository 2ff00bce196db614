"""flashmath.precision and chapter 9: FlashAttention's test rule in float16 and bfloat16, where results are bitwise
equal and where not, fa2's accumulator overflowing in float16, bfloat16 accepted everywhere, the error measures,
naive low-precision attention against steps written here, the study, and its figure and widget."""

import io
import math
from contextlib import redirect_stdout

import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import pytest

import flashmath as fm
from flashmath import viz, widgets
from flashmath.data import load_heads
from flashmath.precision import (
    DTYPES,
    VARIANTS,
    max_abs_error,
    max_rel_error,
    naive_attention,
    precision_study,
    round_to,
    unit_roundoff,
)
from flashmath.softmax import NonFloatInputError, as_float_array, float_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)
LOW = [np.dtype(np.float16), BF16]
ORDERS = ["fa1", "fa2"]
BLOCKS = [(1, 1), (5, 7), (16, 16), (64, 32)]


pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


def random_inputs(dtype, N=37, M=53, D=32, Dv=16, spread=2.0, seed=0):
    """Seeded q, k, v rounded to ``dtype``; ``spread`` scales q (larger scores: the rounding of X matters more)."""
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((N, D)) * spread, rng.standard_normal((M, D)), rng.standard_normal((M, Dv))
    return tuple(round_to(a, dtype) for a in (q, k, v))


def real_inputs(dtype):
    """Every shipped real head (3 layers x 8 heads, 46 tokens, D = 32) in ``dtype``: batched (3, 8, 46, 32)."""
    heads = load_heads()
    return tuple(round_to(a, dtype) for a in (heads.q, heads.k, heads.v))


# --------------------------------------------------------------------------------------------------------------
# FlashAttention's test rule
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", LOW, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("source", ["random", "real heads"])
def test_flash_error_is_at_most_twice_the_naive_error(dtype, source):
    q, k, v = random_inputs(dtype) if source == "random" else real_inputs(dtype)
    ref = fm.attention(q, k, v)  # float64 from the same low-precision numbers
    naive = max_abs_error(naive_attention(q, k, v), ref)
    assert naive > unit_roundoff(dtype) * np.abs(ref).max()  # a real error, not 0 <= 2 * 0
    for order in ORDERS:
        for block_q, block_k in BLOCKS:
            out = fm.flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order)
            assert out.dtype == dtype
            error = max_abs_error(out, ref)
            assert error <= 2 * naive, (order, block_q, block_k, error, naive)


@pytest.mark.parametrize("dtype", LOW, ids=["float16", "bfloat16"])
def test_the_rule_can_fail_an_output_that_is_worse_than_naive(dtype):
    """The rule is not vacuous: rounding X, Y and A, then rounding the output of a float16 step once more, fails."""
    q, k, v = random_inputs(dtype, seed=3)
    ref = fm.attention(q, k, v)
    naive = max_abs_error(naive_attention(q, k, v), ref)
    coarse = round_to(naive_attention(q, k, v), ml_dtypes.float8_e4m3fn)  # 3 mantissa bits
    assert max_abs_error(coarse, ref) > 2 * naive


def test_the_rule_also_holds_for_the_loop_variants_and_float32():
    for dtype in (np.float16, BF16, np.float32):
        q, k, v = random_inputs(dtype, seed=5)
        ref = fm.attention(q, k, v)
        naive = max_abs_error(naive_attention(q, k, v), ref)
        for variant in (fm.one_loop_attention, fm.two_loop_attention):
            assert max_abs_error(variant(q, k, v), ref) <= 2 * naive


def test_flash_in_low_precision_is_within_a_unit_roundoff_of_the_rounded_reference():
    """With float32 arithmetic, the output's own rounding is nearly all of the error (u = half an ulp)."""
    for dtype in LOW:
        q, k, v = real_inputs(dtype)
        ref = fm.attention(q, k, v)
        out = fm.flash_attention(q, k, v, block_q=8, block_k=8)
        assert max_rel_error(out, ref) <= 1.5 * unit_roundoff(dtype)
        assert max_rel_error(naive_attention(q, k, v), ref) > 1.5 * unit_roundoff(dtype)


# --------------------------------------------------------------------------------------------------------------
# Bitwise equal, and not
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64], ids=str)
def test_the_loop_swap_is_bitwise_equal_in_every_dtype(dtype):
    rng = np.random.default_rng(1)
    y = round_to(fm.safe_softmax(rng.standard_normal((5, 9)) * 3), dtype)
    v = round_to(rng.standard_normal((9, 4)), dtype)
    a_ndm, a_nmd = fm.matmul_ndm(y, v), fm.matmul_nmd(y, v)
    assert a_ndm.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a_ndm.view(np.uint8), a_nmd.view(np.uint8))  # every bit
    # the order of the terms matters: the same sums taken from m = M-1 down round differently
    y64, v64 = y.astype(np.float64), v.astype(np.float64)
    if dtype == np.float64:
        reversed_order = fm.matmul_ndm(y64[:, ::-1].copy(), v64[::-1].copy())
        assert not np.array_equal(reversed_order, a_ndm)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("order", ORDERS)
def test_the_same_tiles_twice_give_the_same_bits(dtype, order):
    q, k, v = random_inputs(dtype, seed=2)
    first = fm.flash_attention(q, k, v, block_q=8, block_k=16, order=order)
    second = fm.flash_attention(q.copy(), k.copy(), v.copy(), block_q=8, block_k=16, order=order)
    np.testing.assert_array_equal(first.view(np.uint8), second.view(np.uint8))


def test_other_key_tiles_reorder_the_additions_in_float32():
    """A seeded case: B_c = 8 and B_c = 12 sum each row's terms in different groups, so bits differ."""
    q, k, v = random_inputs(np.float32, N=8, M=24, D=16, Dv=8, spread=1.0, seed=11)
    for order in ORDERS:
        a8 = fm.flash_attention(q, k, v, block_q=8, block_k=8, order=order)
        a12 = fm.flash_attention(q, k, v, block_q=8, block_k=12, order=order)
        differ = a8 != a12
        assert differ.sum() >= a8.size // 4, differ.sum()
        np.testing.assert_allclose(a8, a12, rtol=1e-5, atol=1e-6)  # within float32 rounding all the same
    fa1 = fm.flash_attention(q, k, v, block_q=8, block_k=8, order="fa1")
    fa2 = fm.flash_attention(q, k, v, block_q=8, block_k=8, order="fa2")
    assert not np.array_equal(fa1, fa2)  # same tiles, other formulas: fa2 divides once


def test_in_float16_the_final_rounding_hides_almost_every_reordering():
    q, k, v = real_inputs(np.float16)
    outs = [fm.flash_attention(q, k, v, block_q=b, block_k=b) for b in (4, 16, 46)]
    for other in outs[1:]:
        share = np.mean(outs[0] != other)
        assert 0 < share < 0.005, share  # a few elements near a rounding tie, out of 35328


# --------------------------------------------------------------------------------------------------------------
# The FlashAttention-2 accumulator in float16
# --------------------------------------------------------------------------------------------------------------


def similar_scores_large_values(M=8192, N=4, D=16, seed=9):
    """Many keys with similar scores (every weight near 1, so s grows to about M) and values near 10."""
    rng = np.random.default_rng(seed)
    q = 0.02 * rng.standard_normal((N, D))
    k = rng.standard_normal((M, D))
    v = 10 + rng.standard_normal((M, D))
    return tuple(a.astype(np.float16) for a in (q, k, v))


def test_fa2_accumulator_overflows_in_float16_where_fa1_stays_finite():
    q, k, v = similar_scores_large_values()
    ref = fm.attention(q, k, v)
    fa2 = fm.flash_attention(q, k, v, block_q=4, block_k=256, order="fa2", acc_dtype=np.float16)
    fa1 = fm.flash_attention(q, k, v, block_q=4, block_k=256, order="fa1", acc_dtype=np.float16)
    assert not np.isfinite(fa2).any()  # acc = s A' passed 65504
    assert np.isfinite(fa1).all()
    assert max_abs_error(fa1, ref) < 0.1  # each step rounds A' to float16: less exact, but an average of values
    for order in ORDERS:  # the default keeps the state in float32, as real kernels do
        out = fm.flash_attention(q, k, v, block_q=4, block_k=256, order=order)
        assert max_abs_error(out, ref) <= max_abs_error(round_to(ref, np.float16), ref) * 1.01


def test_the_accumulator_is_s_times_the_average_and_passes_the_float16_limit():
    q, k, v = similar_scores_large_values()
    fa2 = fm.flash_trace(q, k, v, block_q=4, block_k=512, order="fa2")
    fa1 = fm.flash_trace(q, k, v, block_q=4, block_k=512, order="fa1")
    limit = float(np.finfo(np.float16).max)
    assert np.abs(fa2.acc[-1]).max() > limit  # computed in float32, it holds the value float16 cannot
    assert np.abs(fa1.a).max() < 20  # a weighted average of values near 10
    np.testing.assert_allclose(fa2.s[-1], 8192, rtol=0.1)  # every weight near 1: s is about the number of keys
    first_over = np.argmax(np.abs(fa2.acc).reshape(len(fa2), -1).max(axis=1) > limit)
    assert 0 < first_over < len(fa2) - 1  # fine for a while, then past the limit
    fig = viz.plot_accumulator_growth(fa2, fa1)
    assert len(fig.axes[0].get_lines()) == 3


def test_acc_dtype_float32_and_bfloat16_are_finite_on_the_same_input():
    q, k, v = similar_scores_large_values()
    for acc in (np.float32, "bfloat16", np.float64):
        out = fm.flash_attention(q, k, v, block_q=4, block_k=256, acc_dtype=acc)
        assert np.isfinite(out).all() and out.dtype == np.float16


@pytest.mark.parametrize("bad", ["int32", "nonsense", np.int8, complex, ml_dtypes.int4])
def test_acc_dtype_must_be_a_float_dtype(bad):
    q, k, v = random_inputs(np.float16, N=3, M=4, D=2, Dv=2)
    with pytest.raises(TypeError, match="acc_dtype must be a floating-point dtype"):
        fm.flash_attention(q, k, v, acc_dtype=bad)


def test_acc_dtype_default_is_unchanged():
    q, k, v = random_inputs(np.float16, seed=4)
    for order in ORDERS:
        default = fm.flash_attention(q, k, v, block_q=8, block_k=8, order=order)
        explicit = fm.flash_attention(q, k, v, block_q=8, block_k=8, order=order, acc_dtype=np.float32)
        np.testing.assert_array_equal(default, explicit)


# --------------------------------------------------------------------------------------------------------------
# bfloat16 everywhere
# --------------------------------------------------------------------------------------------------------------


def tiles(order):
    return lambda q, k, v, **kw: fm.flash_attention(q, k, v, block_q=3, block_k=4, order=order, **kw)


@pytest.mark.parametrize(
    "function",
    [fm.one_loop_attention, fm.two_loop_attention, tiles("fa1"), tiles("fa2"), naive_attention],
    ids=["one_loop", "two_loop", "fa1", "fa2", "naive"],
)
@pytest.mark.parametrize(
    "kwargs", [{}, {"causal": True}, {"mask": np.arange(9) % 3 != 1}], ids=["none", "causal", "mask"]
)
def test_bfloat16_in_bfloat16_out(function, kwargs):
    q, k, v = random_inputs(BF16, N=7, M=9, D=4, Dv=3)
    out = function(q, k, v, **kwargs)
    assert out.dtype == BF16
    ref = fm.attention(q, k, v, **kwargs)
    assert ref.dtype == np.float64
    assert max_rel_error(out, ref) <= 8 * unit_roundoff(BF16)


def test_bfloat16_is_taken_by_every_function_of_the_package():
    q, k, v = random_inputs(BF16, N=6, M=9, D=4, Dv=3)
    y = fm.safe_softmax(q.astype(np.float32) @ k.astype(np.float32).T).astype(BF16)
    for softmax in (fm.softmax, fm.safe_softmax, fm.online_softmax):
        out = softmax(q)
        assert out.dtype == BF16
        np.testing.assert_allclose(out.astype(np.float64), fm.safe_softmax(q.astype(np.float64)), atol=1e-2)
    g, s = fm.online_normalizer(q[0])
    assert g == q[0].astype(np.float32).max()
    assert fm.online_softmax_trace(q[0]).g.dtype == np.float32
    assert fm.merge(q[0, 0], np.float32(1), q[0, 1], np.float32(1))[1].dtype == np.float32
    assert fm.loop_swap_trace(y, v).a.dtype == np.float32
    assert fm.one_loop_trace(q, k, v).a.dtype == np.float32
    assert fm.two_loop_trace(q, k, v).a.dtype == np.float32
    trace = fm.flash_trace(q, k, v, block_q=2, block_k=4)
    assert trace.output.dtype == BF16 and trace.traffic.bytes_per_element == 2
    out, count = fm.counted_attention("fa2", q, k, v, block_q=2, block_k=4)
    assert out.dtype == BF16 and count.bytes_per_element == 2
    assert fm.count_ops("fa1", q, k, v, block_q=2, block_k=4).ops["exp"] > 0
    a, lse = fm.flash_attention(q, k, v, return_lse=True)
    grads = fm.attention_backward(q, k, v, a, lse, np.ones_like(a))
    assert all(np.isfinite(g).all() for g in grads)
    split = fm.split_kv_attention(q, k, v, 3)
    assert max_rel_error(split, fm.attention(q, k, v)) <= 8 * unit_roundoff(BF16)


def test_ml_dtypes_floats_are_floats_and_the_rest_is_refused():
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        x = np.ones(3, dtype=getattr(ml_dtypes, name))
        assert as_float_array(x) is x
    for name in ("int4", "uint4"):
        with pytest.raises(NonFloatInputError, match=r"x must hold real floating-point numbers \(float16, bfloat16"):
            as_float_array(np.ones(3, dtype=getattr(ml_dtypes, name)))
    with pytest.raises(NonFloatInputError, match="q must hold real floating-point numbers"):
        fm.attention(np.ones((2, 2), dtype=ml_dtypes.complex32), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(TypeError):  # bfloat16 and float16 have no common type: cast one first
        fm.attention(np.ones((2, 2), BF16), np.ones((2, 2), np.float16), np.ones((2, 2), np.float16))


# --------------------------------------------------------------------------------------------------------------
# The measures and naive attention
# --------------------------------------------------------------------------------------------------------------


def test_round_to_rounds_to_nearest_even_and_overflows_to_inf():
    assert round_to([1 + 2**-11], np.float16)[0] == 1.0  # a tie: to the even neighbour 1.0
    assert round_to([1 + 3 * 2**-11], np.float16)[0] == 1 + 2**-9  # a tie: to the even neighbour 1 + 2 * 2**-10
    assert round_to([1 + 2**-9], "bfloat16")[0] == 1.0  # bfloat16 keeps 7 mantissa bits: 2**-8 is half an ulp
    assert round_to([70000.0], np.float16)[0] == np.inf
    assert round_to([70000.0], "bfloat16")[0] == 70144.0  # float32's range, 8 significant bits
    x = np.array([1.0, 2.0])
    assert round_to(x, np.float64) is not x
    with pytest.raises(TypeError, match="dtype must be a floating-point dtype"):
        round_to(x, "int8")


def test_unit_roundoff_is_half_an_ulp_of_one():
    assert unit_roundoff(np.float16) == 2.0**-11
    assert unit_roundoff("bfloat16") == 2.0**-8
    assert unit_roundoff(np.float32) == 2.0**-24
    assert unit_roundoff(np.float64) == 2.0**-53
    for name, dtype in DTYPES.items():  # rounding 1 + u/2... stays within u of the value
        x = 1 + np.linspace(0, 1, 1001)
        assert np.max(np.abs(round_to(x, dtype).astype(np.float64) - x) / x) <= unit_roundoff(dtype), name


def test_error_measures():
    out, ref = np.array([[1.0, 2.5], [3.0, -4.0]], np.float16), np.array([[1.0, 2.0], [3.5, -4.0]])
    assert max_abs_error(out, ref) == 0.5
    assert max_rel_error(out, ref) == 0.5 / 4.0
    assert max_abs_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    assert max_rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert max_rel_error(np.ones(3), np.zeros(3)) == math.inf
    assert math.isnan(max_abs_error([1.0, np.nan], [1.0, 2.0]))  # never silently ignored
    assert max_abs_error([np.inf], [1.0]) == math.inf
    with pytest.raises(ValueError, match=r"out and ref must have the same shape, got \(2,\) and \(2, 1\)"):
        max_abs_error([1.0, 2.0], [[1.0], [2.0]])
    with pytest.raises(TypeError, match="out must hold real floating-point numbers"):
        max_abs_error(np.array([1 + 1j]), np.array([1.0]))


@pytest.mark.parametrize("dtype", LOW, ids=["float16", "bfloat16"])
def test_naive_attention_is_three_rounded_steps(dtype):
    """Against the three steps written out here: each computed in float32 and rounded when stored."""
    q, k, v = random_inputs(dtype, N=9, M=16, D=16, Dv=5)  # D = 16: the scale 1/4 is exact
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    x = (q32 @ k32.T / 4).astype(dtype)
    x32 = x.astype(np.float32)
    e = np.exp(x32 - x32.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(dtype)
    a = (y.astype(np.float32) @ v32).astype(dtype)
    out = naive_attention(q, k, v)
    assert out.dtype == dtype
    assert np.mean(out == a) > 0.97  # a tie may break the other way where float32 sums differ in the last bit
    np.testing.assert_allclose(out.astype(np.float64), a.astype(np.float64), rtol=4 * unit_roundoff(dtype), atol=1e-6)
    # rounding only the output is not the same thing: the stored X and Y move many outputs off the rounded value
    assert np.mean(out != round_to(fm.attention(q, k, v), dtype)) > 0.1


def test_naive_attention_conventions():
    q, k, v = random_inputs(np.float64, N=5, M=7, D=4, Dv=3)
    np.testing.assert_allclose(naive_attention(q, k, v), fm.attention(q, k, v), rtol=1e-12, atol=1e-14)
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    keep = np.ones(7, bool)
    keep[2] = False
    v_poisoned = v16.copy()
    v_poisoned[2] = np.nan
    masked = naive_attention(q16, k16, v_poisoned, mask=keep)
    removed = naive_attention(q16, np.delete(k16, 2, axis=0), np.delete(v16, 2, axis=0))
    np.testing.assert_array_equal(masked, removed)  # a masked key is absent
    empty = naive_attention(q16, k16, v16, mask=np.zeros((5, 7), bool))
    assert np.all(empty == 0)
    big = naive_attention(q16 * np.float16(300), k16 * np.float16(300), v16, scale=1.0)  # scores past 65504
    assert np.isnan(big).any()  # a framework that stores X in float16 sees inf, then NaN
    assert np.isfinite(fm.flash_attention(q16 * np.float16(300), k16 * np.float16(300), v16, scale=1.0)).all()
    before = q16.copy()
    naive_attention(q16, k16, v16)
    np.testing.assert_array_equal(q16, before)


# --------------------------------------------------------------------------------------------------------------
# The study, its figure and its widget
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study():
    q, k, v = random_inputs(np.float64, N=12, M=20, D=8, Dv=4)
    return precision_study(q, k, v, blocks=(4, (8, 16), 20)), (q, k, v)


def test_the_study_holds_the_errors_measured_directly(study):
    study, (q, k, v) = study
    assert study.dtypes == ("float16", "bfloat16", "float32") and study.variants == VARIANTS
    assert study.blocks == ((4, 4), (8, 16), (20, 20))
    assert study.abs_error.shape == (3, len(VARIANTS), 3)
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    ref = fm.attention(q16, k16, v16)
    fa1 = fm.flash_attention(q16, k16, v16, block_q=8, block_k=16, order="fa1")
    assert study.error("float16", "fa1")[1] == np.abs(fa1.astype(np.float64) - ref).max()
    assert study.error(np.float16, "naive")[0] == np.abs(naive_attention(q16, k16, v16) - ref).max()
    rounded = ref.astype(np.float16).astype(np.float64)
    assert study.error("float16", "rounded reference")[2] == np.abs(rounded - ref).max()
    assert np.all(study.misrounded[:, 0] == 0)
    assert study.misrounded_share("float16", "fa2")[0] == np.mean(
        fm.flash_attention(q16, k16, v16, block_q=4, block_k=4) != ref.astype(np.float16)
    )
    np.testing.assert_allclose(
        study.ratio("bfloat16", "fa2"), study.error("bfloat16", "fa2") / study.error("bfloat16", "naive")
    )
    assert np.all(study.ratio("float16") <= 2) and np.all(study.ratio("bfloat16", "fa1") <= 2)
    for untiled in ("rounded reference", "naive", "one_loop", "two_loop", "rounded P"):  # one value for all tiles
        assert len(set(study.error("float32", untiled))) == 1
    # P rounded to 16 bits before P V: the error of that one rounding, measured here with P rounded by hand
    x = (q16.astype(np.float32) / np.float32(np.sqrt(8))) @ k16.astype(np.float32).T
    p = np.exp(x - x.max(axis=1, keepdims=True))
    by_hand = (p.astype(np.float16).astype(np.float32) @ v16.astype(np.float32)) / p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(
        study.error("float16", "rounded P")[0],
        np.abs(by_hand.astype(np.float16).astype(np.float64) - ref).max(),
        rtol=0.05,
    )
    assert study.error("float16", "rounded P")[0] >= study.error("float16", "rounded reference")[0]


def test_study_arguments_are_checked():
    q, k, v = random_inputs(np.float64, N=3, M=4, D=2, Dv=2)
    with pytest.raises(TypeError, match="each of dtypes must be a floating-point dtype"):
        precision_study(q, k, v, dtypes=("float16", "int8"))
    with pytest.raises(ValueError, match="dtypes must list at least one dtype"):
        precision_study(q, k, v, dtypes=())
    with pytest.raises(ValueError, match="each tile size must be >= 1"):
        precision_study(q, k, v, blocks=(0,))
    with pytest.raises(ValueError, match="each tile size must be B or"):
        precision_study(q, k, v, blocks=((1, 2, 3),))
    with pytest.raises(TypeError, match="each tile size must be a positive integer"):
        precision_study(q, k, v, blocks=(2.5,))
    study = precision_study(q, k, v, dtypes="float16", blocks=(2,))
    with pytest.raises(ValueError, match="dtype must be one of"):
        study.error("float32", "fa2")
    with pytest.raises(ValueError, match="variant must be one of"):
        study.error("float16", "fa3")
    with pytest.raises(ValueError, match="order must be 'fa1' or 'fa2'"):
        study.ratio("float16", "naive")


def test_float_dtype_names():
    assert float_dtype("bfloat16") == BF16 and float_dtype(np.float16) == np.float16
    for bad in (None, "int8", "nonsense", object):
        with pytest.raises(TypeError, match="dtype must be a floating-point dtype"):
            float_dtype(bad)


def test_the_plot_moves_its_cursor_and_bars_and_keeps_its_layout(study):
    study, _ = study
    plot = viz.PrecisionPlot(study, block=0)
    positions = [ax.get_position().bounds for ax in plot.fig.axes]
    pictures = {plot.update(block=b).rgb().tobytes() for b in (1, 2, 0)}
    assert len(pictures) == 3
    assert [ax.get_position().bounds for ax in plot.fig.axes] == positions
    fresh = viz.PrecisionPlot(study, block=1).update(block=0)
    assert plot.rgb().tobytes() == fresh.rgb().tobytes()  # blitting leaves nothing of an earlier step behind
    assert "8 x 16" in viz.PrecisionPlot(study, block=1).title.get_text()
    with pytest.raises(ValueError, match=r"block must be in 0..2 \(the study has 3 tile sizes\)"):
        plot.update(block=3)
    with pytest.raises(TypeError, match="study must come from flashmath.precision.precision_study"):
        viz.PrecisionPlot(object())
    assert len(plt.get_fignums()) == 0  # live plots stay out of pyplot...
    viz.plot_precision_study(study, block=2)
    assert len(plt.get_fignums()) == 1  # ...and the static picture goes through it


def test_the_widget_redraws_for_every_tile_size(study):
    study, _ = study
    with redirect_stdout(io.StringIO()):
        ui = widgets.precision_explorer(study, block=1)
        slider = ui.kwargs_widgets[0]
        assert [label for label, _ in slider.options] == ["4", "8x16", "20"]
        first = bytes(ui.image.value)
        seen = {first}
        for b in (2, 0):
            slider.value = b
            assert bytes(ui.image.value) not in seen, ui.out.outputs  # a new picture for every tile size
            seen.add(bytes(ui.image.value))
        slider.value = 1
        assert bytes(ui.image.value) == first  # and back
    with pytest.raises(ValueError, match="block must be in 0..2"):
        widgets.precision_explorer(study, block=5)
    with pytest.raises(TypeError, match="study must come from"):
        widgets.precision_explorer([1, 2])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rounding_p_before_pv_leaves_the_floor_but_keeps_the_twice_naive_rule(dtype):
    # A real kernel rounds the weights P to 16 bits before P V: many more of its outputs miss the correctly
    # rounded value than the float32-P model's (which sits on the floor), fewer than naive attention's, and its
    # error stays within FlashAttention's rule of twice the naive error.
    q, k, v = real_inputs(dtype)
    reference = fm.attention(q, k, v)
    floor = fm.round_to(reference, dtype)
    outputs = {
        "model": fm.flash_attention(q, k, v, block_q=8, block_k=8),
        "kernel": fm.rounded_p_attention(q, k, v),
        "naive": naive_attention(q, k, v),
    }
    missed = {name: float((out != floor).mean()) for name, out in outputs.items()}
    mean_error = {name: float(np.abs(out.astype(np.float64) - reference).mean()) for name, out in outputs.items()}
    assert missed["model"] < 0.005 and 0.1 < missed["kernel"] < missed["naive"], missed
    assert mean_error["model"] < mean_error["kernel"] < mean_error["naive"], mean_error
    assert max_abs_error(outputs["kernel"], reference) <= 2 * max_abs_error(outputs["naive"], reference)


def test_rounded_p_attention_in_float32_is_plain_attention_and_keeps_the_conventions():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 6, 4)).astype(np.float32) for _ in range(3))
    out = fm.rounded_p_attention(q, k, v)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, fm.attention(q, k, v), rtol=1e-5, atol=1e-6)
    # P rounded to float16: every weight within a unit roundoff of float16, so the output moves a little
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    out16 = fm.rounded_p_attention(q16, k16, v16)
    assert out16.dtype == np.float16
    assert 0 < fm.max_abs_error(out16, fm.attention(q16, k16, v16)) < 4 * fm.unit_roundoff("float16")
    # a fully masked row gives 0, a NaN in a query gives NaN in its row only, inputs are never modified
    keep = np.ones((6, 6), dtype=bool)
    keep[2] = False
    masked = fm.rounded_p_attention(q16, k16, v16, mask=keep)
    assert np.all(masked[:, 2] == 0) and np.all(np.isfinite(masked))
    q_nan = q16.copy()
    q_nan[0, 1, 0] = np.nan
    before = q_nan.copy()
    out_nan = fm.rounded_p_attention(q_nan, k16, v16)
    assert np.all(np.isnan(out_nan[0, 1])) and np.isfinite(np.delete(out_nan[0], 1, axis=0)).all()
    np.testing.assert_array_equal(q_nan, before)
    with pytest.raises(ValueError):
        fm.rounded_p_attention(q16, k16[:, :, :3], v16)


def test_blas_description_names_the_kernel_openblas_chose():
    import os
    import platform
    import subprocess
    import sys

    from threadpoolctl import threadpool_info

    if not any(info.get("internal_api") == "openblas" for info in threadpool_info()):
        pytest.skip("numpy's BLAS is not OpenBLAS here (e.g. Accelerate on macOS)")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("OpenBLAS's x86-64 kernels")
    code = "import flashmath as fm; print(fm.blas_description())"
    for kernel in ("Nehalem", "Haswell"):  # OPENBLAS_CORETYPE picks the kernel (nothing is computed with it here)
        env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
        assert out.startswith("OpenBLAS ") and f", {kernel} kernel, " in out, out


def test_rounded_p_attention_with_exp2_is_the_same_attention():
    from flashmath.polyexp import exp2_poly

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 7, 8)) for _ in range(3))
    q16, k16, v16 = (fm.round_to(a, "float16") for a in (q, k, v))
    exact = fm.rounded_p_attention(q16, k16, v16)
    # 2^((X - g) log2 e) by np.exp2 is exp(X - g) to float32 rounding; the polynomial to 8.8e-5 relative
    np.testing.assert_allclose(fm.rounded_p_attention(q16, k16, v16, exp2=np.exp2), exact, rtol=2e-3, atol=2e-3)
    poly = fm.rounded_p_attention(q16, k16, v16, exp2=exp2_poly)
    assert poly.dtype == np.float16
    reference = fm.attention(q16, k16, v16)
    assert fm.max_abs_error(poly, reference) <= 2 * fm.max_abs_error(fm.naive_attention(q16, k16, v16), reference)
    keep = np.tril(np.ones((7, 7), bool))  # masks and a float64 run go through as without exp2
    np.testing.assert_allclose(
        fm.rounded_p_attention(q, k, v, mask=keep, exp2=np.exp2),
        fm.attention(q, k, v, mask=keep),
        rtol=1e-12,
        atol=1e-12,
    )
