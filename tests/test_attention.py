"""flashmath.attention: the float64 reference against a formula written here, every loop variant (and the tiled
flash_attention of flashmath.flash) against the reference, the bitwise loop swap, the traces, and the edge cases
(masks, empty rows, NaN, dtypes, errors)."""

import dataclasses
import math

import numpy as np
import pytest
from helpers import MASKS, assert_close, make, mask_kwargs, problems
from hypothesis import given, settings
from hypothesis import strategies as st

from flashmath.attention import (
    attention,
    loop_swap_trace,
    matmul_ndm,
    matmul_nmd,
    one_loop_attention,
    one_loop_trace,
    two_loop_attention,
    two_loop_trace,
)
from flashmath.flash import flash_attention
from flashmath.masks import causal_mask, padding_mask


def tiled(order):
    """flash_attention in one loop order, with tiles that divide none of the sizes below."""

    def variant(q, k, v, **kwargs):
        return flash_attention(q, k, v, block_q=3, block_k=4, order=order, **kwargs)

    return variant


VARIANTS = [two_loop_attention, one_loop_attention, tiled("fa1"), tiled("fa2")]

# (N, M, D, Dv): N != M both ways, N = 1 (decoding), M = 1, D = 1, primes, Dv != D
SHAPES = [(7, 13, 5, 5), (13, 7, 5, 3), (1, 13, 5, 5), (7, 1, 5, 5), (7, 13, 1, 1), (1, 1, 1, 1), (16, 16, 8, 8)]


def direct(q, k, v, scale=None, keep=None):
    """A = softmax(mask(q k^T * scale)) v and the row logsumexp, for 2-D float64 arrays, one row at a time."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[1]) if scale is None else scale
    N, M, Dv = q.shape[0], k.shape[0], v.shape[1]
    keep = np.ones((N, M), bool) if keep is None else np.broadcast_to(keep, (N, M))
    out, lse = np.zeros((N, Dv)), np.full(N, -np.inf)
    for n in range(N):
        x = (k @ q[n]) * scale
        x = x[keep[n]]
        if x.size == 0:
            continue  # no key: output 0, logsumexp -inf
        e = np.exp(x - x.max())
        out[n] = (e / e.sum()) @ v[keep[n]]
        lse[n] = x.max() + np.log(e.sum())
    return out, lse


# --------------------------------------------------------------------------------------------------------------
# The reference against the formula
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("N, M, D, Dv", SHAPES)
def test_reference_matches_direct_formula(N, M, D, Dv, kind):
    rng = np.random.default_rng(N * 1000 + M * 10 + D)
    q, k, v = make(rng, N, M, D, Dv)
    kwargs, keep = mask_kwargs(kind, N, M, rng)
    a, lse = attention(q, k, v, return_lse=True, **kwargs)
    a_ref, lse_ref = direct(q, k, v, keep=keep)
    assert a.dtype == np.float64 and lse.dtype == np.float64
    assert_close(a, a_ref)
    assert_close(lse, lse_ref)


def test_default_scale_is_one_over_sqrt_d_and_scale_is_applied_to_scores():
    rng = np.random.default_rng(1)
    q, k, v = make(rng, 5, 6, 9, 4)
    assert_close(attention(q, k, v), attention(q, k, v, scale=1 / 3))
    assert_close(attention(q, k, v, scale=0.7), direct(q, k, v, scale=0.7)[0])
    assert_close(attention(q, k, v, scale=2), attention(2 * q, k, v, scale=1))


# --------------------------------------------------------------------------------------------------------------
# Every variant against the reference
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("N, M, D, Dv", SHAPES)
def test_variants_match_reference(variant, N, M, D, Dv, kind):
    rng = np.random.default_rng(N * 1000 + M * 10 + D)
    q, k, v = make(rng, N, M, D, Dv)
    kwargs, _ = mask_kwargs(kind, N, M, rng)
    a, lse = variant(q, k, v, return_lse=True, **kwargs)
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    assert a.dtype == np.float64 and lse.dtype == np.float64
    assert_close(a, a_ref)
    assert_close(lse, lse_ref)
    assert_close(variant(q, k, v, **kwargs), a_ref)  # return_lse=False returns the array alone


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_leading_dimensions_broadcast(variant):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 7, 5))  # (batch, heads, N, D)
    k = rng.standard_normal((3, 11, 5))  # shared over the batch
    v = rng.standard_normal((1, 3, 11, 4))
    mask = rng.random((2, 1, 7, 11)) < 0.7  # one mask per batch entry, shared over heads
    a, lse = variant(q, k, v, mask=mask, causal=True, return_lse=True)
    assert a.shape == (2, 3, 7, 4) and lse.shape == (2, 3, 7)
    for b in range(2):
        for h in range(3):
            a_ref, lse_ref = direct(q[b, h], k[h], v[0, h], keep=mask[b, 0] & causal_mask(7, 11))
            assert_close(a[b, h], a_ref)
            assert_close(lse[b, h], lse_ref)


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_v_may_add_leading_dimensions_and_the_mask_broadcasts_within_them(variant):
    rng = np.random.default_rng(3)
    q, k, _ = make(rng, 4, 6, 3, 2)
    v = rng.standard_normal((5, 6, 2))  # a batch only v has: the output is (5, 4, 2)
    mask = rng.random((5, 1, 6)) < 0.5  # one key mask per batch element, broadcast over the rows
    mask[:, :, 0] = True
    a, lse = variant(q, k, v, mask=mask, return_lse=True)
    assert a.shape == (5, 4, 2) and lse.shape == (5, 4)
    assert_close(a[3], direct(q, k, v[3], keep=np.broadcast_to(mask[3], (4, 6)))[0])
    mask_1d = np.array([True, False, True, True, False, True])  # (M,) broadcasts over the rows
    assert_close(variant(q, k, v[0], mask=mask_1d), direct(q, k, v[0], keep=mask_1d)[0])


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_a_mask_never_widens_the_output(variant):
    """Issue 16: a mask with more leading dimensions than q, k, v would compute every element's rows under every
    element's mask (PyTorch's SDPA refuses the same call); it is refused, naming both shapes and the fix."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((3,) + shape) for shape in ((2, 4), (5, 4), (5, 4)))  # (B, N, D): no head axis
    mask = padding_mask([1, 2, 5], 5)  # (B, 1, 1, M): for (B, H, N, M) scores
    with pytest.raises(
        ValueError,
        match=r"mask of shape \(3, 1, 1, 5\) would widen the output.*\(3,\).*\(3, 3\)"
        r".*\(3, 3, 2, 4\) instead of \(3, 2, 4\)"
        r".*padding_mask\(lengths, M\)\[:, 0\]",
    ):
        variant(q, k, v, mask=mask)
    out = variant(q, k, v, mask=mask[:, 0])  # the fix the message names: (B, 1, M)
    for b, length in enumerate([1, 2, 5]):
        assert_close(out[b], attention(q[b], k[b, :length], v[b, :length]))
    with pytest.raises(ValueError, match="would widen the output"):  # one extra leading axis of size 2
        variant(q[0], k[0], v[0], mask=rng.random((2, 2, 5)) < 0.5)


# --------------------------------------------------------------------------------------------------------------
# Causal alignment, fully masked rows, NaN
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_decoding_one_query_sees_the_whole_cache(variant):
    rng = np.random.default_rng(4)
    q, k, v = make(rng, 1, 9, 4, 4)
    assert_close(variant(q, k, v, causal=True), attention(q, k, v))
    # top-left alignment: the single query sees key 0 only, so A = V[0]
    assert_close(variant(q, k, v, mask=causal_mask(1, 9, align="top-left")), v[:1])


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_fully_masked_rows_give_zero_and_lse_minus_inf(variant):
    rng = np.random.default_rng(5)
    q, k, v = make(rng, 6, 3, 4, 2)  # bottom-right causal with N > M: queries 0..2 see no key
    v[1] = np.nan  # a fully masked row stays 0 even where v holds NaN
    a, lse = variant(q, k, v, causal=True, return_lse=True)
    np.testing.assert_array_equal(a[:3], 0)
    np.testing.assert_array_equal(lse[:3], -np.inf)
    assert not np.isnan(a[:3]).any()

    mask = np.ones((6, 3), bool)
    mask[[0, 4]] = False
    v = rng.standard_normal((3, 2))
    a, lse = variant(q, k, v, mask=mask, return_lse=True)
    np.testing.assert_array_equal(a[[0, 4]], 0)
    np.testing.assert_array_equal(lse[[0, 4]], -np.inf)
    assert np.isfinite(a).all() and np.isfinite(lse[[1, 2, 3, 5]]).all()


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_no_keys_at_all(variant):
    q, k, v = np.ones((2, 3, 4)), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    a, lse = variant(q, k, v, return_lse=True)
    assert a.shape == (2, 3, 5) and lse.shape == (2, 3)
    np.testing.assert_array_equal(a, 0)
    np.testing.assert_array_equal(lse, -np.inf)


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_nan_propagates_and_is_never_zeroed(variant):
    rng = np.random.default_rng(6)
    q, k, v = make(rng, 4, 5, 3, 2)
    q_nan = q.copy()
    q_nan[2, 1] = np.nan
    a, lse = variant(q_nan, k, v, return_lse=True)
    assert np.isnan(a[2]).all() and np.isnan(lse[2])
    assert np.isfinite(a[[0, 1, 3]]).all()

    k_nan = k.copy()
    k_nan[3, 0] = np.nan
    a = variant(q, k_nan, v, causal=True)  # bottom-right, N = 4, M = 5: query 0 sees keys 0..1 only
    assert np.isnan(a[2:]).all() and np.isfinite(a[:2]).all()

    v_nan = v.copy()
    v_nan[0, 1] = np.nan
    a = variant(q, k, v_nan)
    assert np.isnan(a[:, 1]).all() and np.isfinite(a[:, 0]).all()


@pytest.mark.parametrize("variant", [attention] + VARIANTS)
def test_inputs_are_not_modified(variant):
    rng = np.random.default_rng(7)
    arrays = make(rng, 3, 4, 2, 2)
    mask = rng.random((3, 4)) < 0.5
    copies = [a.copy() for a in arrays] + [mask.copy()]
    for a in (*arrays, mask):
        a.flags.writeable = False  # any in-place write would raise
    variant(*arrays, mask=mask, causal=True, return_lse=True)
    for a, c in zip((*arrays, mask), copies, strict=False):
        np.testing.assert_array_equal(a, c)


# --------------------------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-3), (np.float32, 1e-5)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_low_precision_output_dtype_and_accuracy(variant, dtype, tol):
    rng = np.random.default_rng(8)
    q, k, v = (a.astype(dtype) for a in make(rng, 7, 13, 5, 3))
    a, lse = variant(q, k, v, causal=True, return_lse=True)
    assert a.dtype == dtype and lse.dtype == np.float32  # accumulated in float32 at least
    a_ref, lse_ref = attention(q, k, v, causal=True, return_lse=True)
    assert a_ref.dtype == np.float64
    assert np.max(np.abs(a - a_ref)) < tol and np.max(np.abs(lse - lse_ref)) < tol


def test_large_float16_scores_do_not_overflow():
    q = np.full((2, 4), 30, np.float16)  # scores 30 * 30 * 4 / 2 = 1800: a bare exp(1800) overflows any float
    k = np.full((3, 4), 30, np.float16)
    v = np.arange(6, dtype=np.float16).reshape(3, 2)
    for variant in [attention] + VARIANTS:
        a = variant(q, k, v)
        np.testing.assert_allclose(np.asarray(a, np.float64), np.tile(v.mean(0), (2, 1)), rtol=1e-3)


@pytest.mark.parametrize("bad", [np.eye(2, dtype=int), np.eye(2, dtype=bool), np.eye(2) * 1j])
def test_non_float_input_is_refused_with_a_value_error(bad):
    good = np.eye(2)
    for variant in [attention] + VARIANTS:
        for args, name in (((bad, good, good), "q"), ((good, bad, good), "k"), ((good, good, bad), "v")):
            with pytest.raises(ValueError, match=f"{name} must hold real floating-point numbers"):
                variant(*args)
            with pytest.raises(TypeError):  # the same error is a TypeError too
                variant(*args)


# --------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------

Q, K, V = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((np.zeros(4), K, V), {}, ValueError, r"q must have shape \(\.\.\., N, D\)"),
        ((Q, np.zeros((5, 3)), V), {}, ValueError, "same head dimension D, got D = 4 for q"),
        ((Q, K, np.zeros((6, 2))), {}, ValueError, "same number of keys M, got 5 for k"),
        ((np.zeros((2, 3, 4)), np.zeros((3, 5, 4)), V), {}, ValueError, r"leading \(batch, head\) dimensions"),
        ((np.zeros((3, 0)), np.zeros((5, 0)), V), {}, ValueError, "D must be at least 1"),
        ((Q, K, V), {"mask": np.ones((3, 4), bool)}, ValueError, r"does not broadcast to \(\.\.\., N, M\)"),
        ((Q, K, V), {"mask": np.ones((2, 5), bool)}, ValueError, r"mask of shape \(2, 5\) does not broadcast"),
        ((Q, K, V), {"mask": np.ones((3, 5))}, TypeError, "mask must be a boolean array"),
        ((Q.astype(complex), K, V), {}, TypeError, "q must hold real floating-point numbers"),
        ((Q, K, np.array([["a", "b"]] * 5)), {}, TypeError, "v must hold real floating-point numbers"),
        ((Q, K, V), {"causal": "top-left"}, TypeError, "causal must be True or False"),
        ((Q, K, V), {"scale": "0.5"}, TypeError, "scale must be a real number"),
        ((Q, K, V), {"scale": np.inf}, ValueError, "scale must be finite"),
    ],
)
@pytest.mark.parametrize("function", [attention] + VARIANTS + [one_loop_trace, two_loop_trace])
def test_errors(function, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        function(*args, **kwargs)


@pytest.mark.parametrize("trace", [one_loop_trace, two_loop_trace])
def test_traces_need_a_key(trace):
    with pytest.raises(ValueError, match=r"at least one key \(M >= 1\)"):
        trace(Q, np.zeros((0, 4)), np.zeros((0, 2)))


# --------------------------------------------------------------------------------------------------------------
# The loop swap: bitwise equal
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("N, M, Dv", [(3, 7, 5), (1, 1, 1), (5, 2, 1), (2, 11, 3)])
def test_loop_swap_is_bitwise_equal(N, M, Dv, dtype):
    rng = np.random.default_rng(N * 100 + M * 10 + Dv)
    y = rng.random((N, M)).astype(dtype)
    v = rng.standard_normal((M, Dv)).astype(dtype)
    a1, a2 = matmul_ndm(y, v), matmul_nmd(y, v)
    assert a1.dtype == a2.dtype == dtype and a1.shape == (N, Dv)
    assert (a1 == a2).all()  # ==, not allclose: same additions in the same order per element
    rtol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(a1, y.astype(np.float64) @ v.astype(np.float64), rtol=rtol)


def test_loop_swap_of_reference_probabilities_gives_attention():
    rng = np.random.default_rng(9)
    q, k, v = make(rng, 5, 7, 3, 2)
    x = q @ k.T / math.sqrt(3)
    y = np.exp(x - x.max(1, keepdims=True))
    y /= y.sum(1, keepdims=True)
    assert_close(matmul_nmd(y, v), attention(q, k, v))
    assert (matmul_nmd(y, v) == matmul_ndm(y, v)).all()


def test_loop_swap_nan_and_errors():
    y, v = np.ones((2, 3)), np.ones((3, 2))
    v[1, 0] = np.nan
    np.testing.assert_array_equal(matmul_ndm(y, v), matmul_nmd(y, v))  # NaN positions match
    assert np.isnan(matmul_nmd(y, v)[:, 0]).all()
    with pytest.raises(ValueError, match="must share M"):
        matmul_nmd(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="both 2-D"):
        matmul_ndm(np.ones(3), np.ones((3, 2)))
    with pytest.raises(TypeError, match="y must hold real"):
        matmul_ndm(np.ones((2, 3), complex), np.ones((3, 2)))


def test_loop_swap_trace_rows_of_partial_sums():
    rng = np.random.default_rng(10)
    y, v = rng.random((3, 6)), rng.standard_normal((6, 4))
    y_in, v_in = y.copy(), v.copy()
    t = loop_swap_trace(y, v)
    assert t.partial.shape == (3, 6, 4) and len(t) == 6
    assert (t.a == matmul_nmd(y, v)).all() and (t.partial[:, -1] == t.a).all()
    for j in range(6):  # after keys 0..j the row holds exactly the product of the first j + 1 keys
        assert (t.partial[:, j] == matmul_ndm(y[:, : j + 1], v[: j + 1])).all()
    np.testing.assert_array_equal(y, y_in)
    np.testing.assert_array_equal(v, v_in)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.a = None
    with pytest.raises(ValueError, match=r"M >= 1"):
        loop_swap_trace(np.ones((2, 0)), np.ones((0, 3)))


# --------------------------------------------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------------------------------------------


def test_one_loop_trace_states():
    rng = np.random.default_rng(11)
    q, k, v = make(rng, 6, 9, 4, 3)
    mask = rng.random((6, 9)) < 0.7
    mask[0] = False  # one fully masked row
    t = one_loop_trace(q, k, v, mask=mask, causal=True)
    keep = mask & causal_mask(6, 9)
    assert len(t) == 9 and t.x.shape == t.g.shape == t.s.shape == t.correction.shape == (9, 6)
    assert t.a.shape == (9, 6, 3)
    x_ref = np.where(keep, q @ k.T / 2, -np.inf).T  # (M, N): x_m for every row
    assert_close(t.x, x_ref)
    np.testing.assert_array_equal(t.g, np.maximum.accumulate(t.x, axis=0))  # g_m is the running max
    for j in range(9):  # s_m = sum_{i <= m} exp(x_i - g_m), and A'_m is attention over the first m keys
        g = np.where(t.g[j] == -np.inf, 0, t.g[j])
        assert_close(t.s[j], np.exp(t.x[: j + 1] - g).sum(0))
        assert_close(t.a[j], direct(q, k[: j + 1], v[: j + 1], keep=keep[:, : j + 1])[0])
    seen = t.s > 0
    assert_close((t.correction + t.weight)[seen], np.ones(seen.sum()))
    np.testing.assert_array_equal(t.correction[~seen], 0)
    np.testing.assert_array_equal(t.weight[~seen], 0)
    assert (t.a[-1] == one_loop_attention(q, k, v, mask=mask, causal=True)).all()
    assert_close(t.target, attention(q, k, v, mask=mask, causal=True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.a = None


def test_two_loop_trace_states():
    rng = np.random.default_rng(12)
    q, k, v = make(rng, 5, 8, 3, 2)
    t = two_loop_trace(q, k, v, causal=True)
    keep = causal_mask(5, 8)
    a_ref, lse_ref = attention(q, k, v, causal=True, return_lse=True)
    assert len(t) == 8 and t.a.shape == (8, 5, 2) and t.y.shape == (8, 5)
    np.testing.assert_array_equal(t.g, np.maximum.accumulate(t.x, axis=0))
    assert_close(t.g[-1] + np.log(t.s[-1]), lse_ref)
    x = np.where(keep, q @ k.T / math.sqrt(3), -np.inf)
    assert_close(t.y.T, np.exp(x - lse_ref[:, None]))  # y_m = exp(x_m - g_M) / s_M: the probabilities
    assert_close(t.a[3], np.exp(x[:, :4] - lse_ref[:, None]) @ v[:4])  # partial sums of loop (2)
    assert (t.output == two_loop_attention(q, k, v, causal=True)).all()
    assert_close(t.output, a_ref)
    assert_close(t.lse, lse_ref)


def test_traces_broadcast_leading_dimensions():
    rng = np.random.default_rng(13)
    q, k, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    t1, t2 = one_loop_trace(q, k, v), two_loop_trace(q, k, v)
    assert t1.x.shape == t2.x.shape == (5, 2, 4) and t1.a.shape == t2.a.shape == (5, 2, 4, 2)
    assert_close(t1.a[-1], t2.output)


# --------------------------------------------------------------------------------------------------------------
# Real data
# --------------------------------------------------------------------------------------------------------------


def test_real_heads():
    data = pytest.importorskip("flashmath.data")
    h = data.load_heads()
    q, k, v = h.q[:, :4], h.k[:, :4], h.v[:, :4]  # (L, 4, T, D) float32, read-only
    a, lse = attention(q, k, v, return_lse=True)
    assert a.shape == q.shape[:-1] + (v.shape[-1],)
    # against the model's own probabilities (float32) and the loader's float64 scores
    np.testing.assert_allclose(a, h.probs[:, :4] @ v.astype(np.float64), atol=1e-5)
    x = h.scores(1, 2)
    assert_close(lse[1, 2], np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1))
    q64, k64, v64 = (np.asarray(t, np.float64) for t in (q, k, v))
    for variant in VARIANTS:
        for causal in (False, True):
            ref = attention(q64, k64, v64, causal=causal, return_lse=True)
            got = variant(q64, k64, v64, causal=causal, return_lse=True)
            assert_close(got[0], ref[0])
            assert_close(got[1], ref[1])
        a32 = variant(q, k, v)  # float32 in, accumulated and returned in float32
        assert a32.dtype == np.float32 and np.max(np.abs(a32 - a)) < 1e-5


def test_real_head_loop_swap_is_bitwise():
    data = pytest.importorskip("flashmath.data")
    h = data.load_heads()
    y = np.asarray(h.probs[0, 0, :4, :12], np.float64)  # (4, 12), a small block: the loops are scalar
    v = np.asarray(h.v[0, 0, :12, :6], np.float64)  # (12, 6)
    assert (matmul_ndm(y, v) == matmul_nmd(y, v)).all()


# --------------------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(problems())
def test_property_variants_agree_and_lse_is_logsumexp(problem):
    q, k, v, kwargs, keep = problem
    a, lse = attention(q, k, v, return_lse=True, **kwargs)
    # lse = log sum_m exp(x_m) over the attended keys, written out directly
    x = np.where(keep, q @ k.T / math.sqrt(q.shape[1]), -np.inf)
    g = x.max(1, initial=-np.inf)
    with np.errstate(divide="ignore"):
        lse_ref = np.where(g == -np.inf, -np.inf, g + np.log(np.exp(x - np.where(g == -np.inf, 0, g)[:, None]).sum(1)))
    assert_close(lse, lse_ref)
    # every output row is a convex combination of the attended V rows: inside their min and max
    scale = 1 + np.abs(v).max()
    for n in range(q.shape[0]):
        if keep[n].any():
            lo, hi = v[keep[n]].min(0), v[keep[n]].max(0)
            assert np.all(a[n] >= lo - 1e-12 * scale) and np.all(a[n] <= hi + 1e-12 * scale)
        else:
            assert (a[n] == 0).all() and lse[n] == -np.inf
    for variant in VARIANTS:
        a_v, lse_v = variant(q, k, v, return_lse=True, **kwargs)
        assert_close(a_v / scale, a / scale)
        assert_close(lse_v, lse)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_property_loop_swap_bitwise(N, M, Dv, seed):
    rng = np.random.default_rng(seed)
    y, v = rng.standard_normal((N, M)) * 1e3, rng.standard_normal((M, Dv))
    assert (matmul_ndm(y, v) == matmul_nmd(y, v)).all()


def test_inf_and_nan_inputs_raise_no_warnings():
    import warnings

    rng = np.random.default_rng(11)
    for _ in range(100):
        q, k, v = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
        for arr in (q, k, v):
            if rng.random() < 0.6:
                arr[tuple(rng.integers(0, s) for s in arr.shape)] = rng.choice([np.inf, -np.inf, np.nan])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for f in (attention, two_loop_attention, one_loop_attention):
                f(q, k, v, return_lse=True)


def test_loop_swap_and_zero_scale_with_inf_raise_no_warnings():
    import warnings

    y = np.array([[1.0, 0.0]])
    v = np.array([[1.0, 2.0], [np.inf, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = matmul_ndm(y, v)
        assert np.array_equal(a, matmul_nmd(y, v), equal_nan=True)
        assert np.isnan(a[0, 0]) and a[0, 1] == 2.0  # 0 * inf is NaN, as in y @ v
        loop_swap_trace(y, v)
        q = np.array([[np.inf, 1.0]])
        for f in (two_loop_attention, one_loop_attention):
            f(q, np.ones((2, 2)), np.ones((2, 2)), scale=0.0)


# -- learnable sinks (chapter 13): the reference is GPT-OSS's explicit formula -------------------------------------


def gpt_oss(q, k, v, sink, keep=None, scale=None):
    """GPT-OSS's reference (openai/gpt-oss, gpt_oss/torch/model.py, sdpa) in float64: the scaled, masked scores, the
    sink column concatenated, softmax, the sink column dropped before P V; and the logsumexp of the whole row."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    x = q @ np.swapaxes(k, -1, -2) * scale
    if keep is not None:
        x = np.where(keep, x, -np.inf)
    column = np.broadcast_to(np.asarray(sink, np.float64)[..., None, None], x.shape[:-1] + (1,))
    combined = np.concatenate([x, column], axis=-1)
    top = combined.max(axis=-1, keepdims=True)
    e = np.exp(combined - top)
    w = e / e.sum(axis=-1, keepdims=True)
    return w[..., :-1] @ v, (top + np.log(e.sum(axis=-1, keepdims=True)))[..., 0]


@settings(max_examples=60, deadline=None)
@given(problems(), st.floats(-30, 30))
def test_property_sink_reference_is_the_gpt_oss_formula(problem, sink):
    q, k, v, kwargs, keep = problem
    a, lse = attention(q, k, v, learnable_sink=sink, return_lse=True, **kwargs)
    want_a, want_lse = gpt_oss(q, k, v, sink, keep)
    assert_close(a, want_a, 1e-12)
    assert_close(lse, want_lse, 1e-12)
    # the logsumexp includes the sink term: log(exp(L_keys) + exp(sink))
    assert_close(lse, np.logaddexp(attention(q, k, v, return_lse=True, **kwargs)[1], sink), 1e-12)


def test_sink_is_one_logit_per_query_head():
    rng = np.random.default_rng(40)
    q, k, v = make(rng, 5, 7, 4, 3, (2, 3))  # (B, H, N, D)
    sink = np.array([-1.0, 0.5, 3.0])
    a, lse = attention(q, k, v, learnable_sink=sink, return_lse=True)
    for h in range(3):
        want_a, want_lse = gpt_oss(q[:, h], k[:, h], v[:, h], sink[h])
        assert_close(a[:, h], want_a, 1e-12)
        assert_close(lse[:, h], want_lse, 1e-12)
    per_batch = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])  # (B, H), broadcast like alibi_slopes
    assert_close(attention(q, k, v, learnable_sink=per_batch), gpt_oss(q, k, v, per_batch)[0], 1e-12)


def test_sink_edge_cases_of_the_reference():
    rng = np.random.default_rng(41)
    q, k, v = make(rng, 4, 6, 3, 2, (2,))
    keep = np.ones((4, 6), bool)
    keep[1] = False  # a row with no key
    a, lse = attention(q, k, v, mask=keep, learnable_sink=[2.0, -1.0], return_lse=True)
    assert np.all(a[:, 1] == 0) and np.array_equal(lse[:, 1], [2.0, -1.0])  # output 0, logsumexp = the sink
    # a sink far above every score: no overflow, the logsumexp is the sink
    a, lse = attention(q * 0.01, k, v, learnable_sink=[100.0, 100.0], return_lse=True)
    assert np.isfinite(a).all() and np.abs(a).max() < 1e-40 and np.allclose(lse, 100.0, rtol=0, atol=1e-12)
    # -inf is no sink, bitwise
    for got, want in zip(
        attention(q, k, v, mask=keep, learnable_sink=-np.inf, return_lse=True),
        attention(q, k, v, mask=keep, return_lse=True),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)
    # every row sees its sink: a NaN sink makes its head NaN, rows with no key included
    a, lse = attention(q, k, v, mask=keep, learnable_sink=[np.nan, 0.0], return_lse=True)
    assert np.isnan(a[0]).all() and np.isnan(lse[0]).all() and np.isfinite(a[1]).all() and np.isfinite(lse[1]).all()
    # no keys at all: 0 and the sink
    a, lse = attention(q, k[:, :0], v[:, :0], learnable_sink=[1.5, -2.0], return_lse=True)
    assert a.shape == (2, 4, 2) and np.all(a == 0) and np.array_equal(lse, [[1.5] * 4, [-2.0] * 4])


@pytest.mark.parametrize(
    "sink, error, match",
    [
        ([1.0, 2.0, 3.0], ValueError, r"must be \(H,\) = \(2,\)"),
        (np.zeros((3, 2)), ValueError, r"must be \(H,\) = \(2,\)"),
        ("a", TypeError, "learnable_sink must be real numbers"),
        ([True, False], TypeError, "learnable_sink must be real numbers"),
    ],
)
def test_sink_errors_name_the_expected_shape(sink, error, match):
    q, k, v = make(np.random.default_rng(42), 3, 4, 2, 2, (2,))
    with pytest.raises(error, match=match):
        attention(q, k, v, learnable_sink=sink)
