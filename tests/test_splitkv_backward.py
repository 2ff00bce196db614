"""Split-KV merging and the backward pass (chapter 10), against the float64 reference and finite differences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flashmath as fm
from flashmath.backward import attention_backward
from flashmath.splitkv import merge_states, split_kv_attention, split_kv_trace, split_ranges


def head(N=3, M=7, D=4, Dv=5, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(batch + (N, D)),
        rng.standard_normal(batch + (M, D)),
        rng.standard_normal(batch + (M, Dv)),
    )


# ------------------------------------------------------------------------------------------------------------------
# split-KV
# ------------------------------------------------------------------------------------------------------------------


def test_split_ranges_cover_the_keys_in_order():
    assert split_ranges(7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert split_ranges(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]  # more splits than keys: empty ranges
    with pytest.raises(ValueError, match="num_splits must be >= 1"):
        split_ranges(5, 0)
    with pytest.raises(TypeError, match="num_splits must be an integer"):
        split_ranges(5, 2.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N, M", [(1, 46), (5, 9), (9, 5), (4, 4)])
def test_every_split_count_from_1_to_M_equals_attention(N, M, causal):
    q, k, v = head(N=N, M=M, seed=N * M)
    expected, expected_lse = fm.attention(q, k, v, causal=causal, return_lse=True)
    for num_splits in list(range(1, M + 1)) + [M + 3]:  # M + 3: empty parts too
        a, lse = split_kv_attention(q, k, v, num_splits, causal=causal, return_lse=True)
        np.testing.assert_allclose(a, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, expected_lse, rtol=1e-12, atol=1e-12)


def test_split_kv_with_masks_and_batch_dimensions():
    q, k, v = head(N=3, M=8, batch=(2, 2), seed=3)
    mask = np.random.default_rng(4).random((2, 1, 3, 8)) < 0.6
    mask[0, 0, 1] = False  # a fully masked row
    expected, expected_lse = fm.attention(q, k, v, mask=mask, return_lse=True)
    a, lse = split_kv_attention(q, k, v, 3, mask=mask, return_lse=True)
    np.testing.assert_allclose(a, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(expected_lse))
    assert (a[0, :, 1] == 0).all()


def test_the_merge_tree_has_the_parts_as_leaves_and_one_root():
    q, k, v = head(N=1, M=10)
    trace = split_kv_trace(q, k, v, 5)
    assert [len(level) for level in trace.levels] == [5, 3, 2, 1]
    np.testing.assert_allclose(trace.levels[-1][0][0], trace.output)


states = st.tuples(st.floats(-30, 30), st.floats(-3, 3), st.booleans())


def state(lse, value, empty):
    """A part's (output (1, 2), lse (1,)); an empty part holds NaN in its output, which must never be read."""
    if empty:
        return np.array([[np.nan, np.nan]]), np.array([-np.inf])
    return np.array([[value, -value]]), np.array([lse])


@settings(max_examples=150, deadline=None)
@given(states, states, states)
def test_merge_is_commutative_and_associative_and_empty_parts_add_nothing(p1, p2, p3):
    s1, s2, s3 = state(*p1), state(*p2), state(*p3)
    a12, l12 = merge_states(*s1, *s2)
    a21, l21 = merge_states(*s2, *s1)
    np.testing.assert_allclose(a12, a21, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(l12, l21, rtol=1e-12)
    left = merge_states(*merge_states(*s1, *s2), *s3)
    right = merge_states(*s1, *merge_states(*s2, *s3))
    np.testing.assert_allclose(left[0], right[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(left[1], right[1], rtol=1e-12)
    assert not np.isnan(left[0]).any()  # the NaN outputs of empty parts never leak
    if p2[2]:  # merging an empty part changes nothing
        a, lse = merge_states(*s1, *s2)
        expected = (np.zeros((1, 2)), np.array([-np.inf])) if p1[2] else s1
        np.testing.assert_array_equal(a, expected[0])
        np.testing.assert_array_equal(lse, expected[1])


def test_merge_states_propagates_nan_and_checks_shapes():
    a, lse = merge_states(np.ones((2, 3)), np.array([0.0, np.nan]), np.ones((2, 3)), np.array([1.0, 1.0]))
    assert np.isnan(lse[1]) and np.isnan(a[1]).all() and np.isfinite(a[0]).all()
    with pytest.raises(ValueError, match="lse1 must have the shape of a1"):
        merge_states(np.ones((2, 3)), np.zeros(3), np.ones((2, 3)), np.zeros(2))


# ------------------------------------------------------------------------------------------------------------------
# backward
# ------------------------------------------------------------------------------------------------------------------


def reference_grads(q, k, v, grad_a, scale=None, keep=None):
    """Direct differentiation of attention with full (N, M) matrices, float64."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    x = scale * q @ np.swapaxes(k, -1, -2)
    if keep is not None:
        x = np.where(keep, x, -np.inf)
    y = fm.safe_softmax(x)
    dv = np.swapaxes(y, -1, -2) @ grad_a
    dy = grad_a @ np.swapaxes(v, -1, -2)
    dx = y * (dy - np.sum(dy * y, axis=-1, keepdims=True))
    return scale * dx @ k, scale * np.swapaxes(dx, -1, -2) @ q, dv


def rel(g, ref):
    return np.linalg.norm(g - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (64, 64)])
@pytest.mark.parametrize("N, M", [(1, 9), (6, 4), (5, 5)])
def test_backward_equals_direct_differentiation(N, M, blocks):
    q, k, v = head(N=N, M=M, seed=10 + N)
    grad_a = np.random.default_rng(11).standard_normal((N, v.shape[-1]))
    a, lse = fm.attention(q, k, v, return_lse=True)
    grads = attention_backward(q, k, v, a, lse, grad_a, block_q=blocks[0], block_k=blocks[1])
    for g, ref in zip(grads, reference_grads(q, k, v, grad_a), strict=False):
        assert g.shape == ref.shape
        assert rel(g, ref) < 1e-12


def finite_difference(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        grad[idx] = (f(plus) - f(minus)) / (2 * eps)
    return grad


@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_finite_differences(causal):
    q, k, v = head(N=4, M=6, D=3, Dv=2, seed=5)
    w = np.random.default_rng(6).standard_normal((4, 2))  # loss = sum(w * A)

    def loss(q_, k_, v_):
        return float(np.sum(w * fm.attention(q_, k_, v_, causal=causal)))

    a, lse = fm.attention(q, k, v, causal=causal, return_lse=True)
    gq, gk, gv = attention_backward(q, k, v, a, lse, w, causal=causal, block_q=3, block_k=4)
    assert rel(gq, finite_difference(lambda x: loss(x, k, v), q)) < 1e-6
    assert rel(gk, finite_difference(lambda x: loss(q, x, v), k)) < 1e-6
    assert rel(gv, finite_difference(lambda x: loss(q, k, x), v)) < 1e-6


def test_a_masked_key_gets_exactly_zero_gradient_whatever_it_holds():
    q, k, v = head(N=4, M=5, seed=7)
    k[2], v[2] = np.nan, np.inf  # key 2 is masked for every query: garbage must not matter
    mask = np.ones((4, 5), dtype=bool)
    mask[:, 2] = False
    mask[1] = False  # and row 1 is fully masked
    clean_k, clean_v = np.delete(k, 2, axis=0), np.delete(v, 2, axis=0)
    a, lse = fm.attention(q, clean_k, clean_v, mask=np.delete(mask, 2, axis=1), return_lse=True)
    grad_a = np.random.default_rng(8).standard_normal(a.shape)
    gq, gk, gv = attention_backward(q, k, v, a, lse, grad_a, mask=mask, block_q=3, block_k=2)
    assert (gk[2] == 0).all() and (gv[2] == 0).all()
    assert (gq[1] == 0).all()
    ref = reference_grads(q, clean_k, clean_v, grad_a, keep=np.delete(mask, 2, axis=1))
    np.testing.assert_allclose(gq, np.nan_to_num(ref[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.delete(gk, 2, axis=0), ref[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.delete(gv, 2, axis=0), ref[2], rtol=1e-12, atol=1e-14)


def test_backward_sums_gradients_over_broadcast_heads():
    q, _, _ = head(N=3, M=4, batch=(2,), seed=9)
    _, k, v = head(N=3, M=4, seed=9)  # k, v shared by both heads
    a, lse = fm.attention(q, k, v, return_lse=True)
    grad_a = np.ones_like(a)
    gq, gk, gv = attention_backward(q, k, v, a, lse, grad_a)
    assert gq.shape == q.shape and gk.shape == k.shape and gv.shape == v.shape
    parts = [attention_backward(q[h], k, v, a[h], lse[h], grad_a[h]) for h in range(2)]
    np.testing.assert_allclose(gk, parts[0][1] + parts[1][1], rtol=1e-12)


def test_backward_checks_its_arguments():
    q, k, v = head()
    a, lse = fm.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse must have shape"):
        attention_backward(q, k, v, a, lse[:2], a)
    with pytest.raises(ValueError, match=r"block_k must be >= 1 \(rows per tile\)"):
        attention_backward(q, k, v, a, lse, a, block_k=0)
    with pytest.raises(TypeError, match="block_q must be a positive integer"):
        attention_backward(q, k, v, a, lse, a, block_q=2.5)


def test_both_dq_modes_give_the_same_gradients_and_a_bad_one_is_named():
    rng = np.random.default_rng(19)
    q, k, v = rng.standard_normal((7, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 3))
    a, lse = fm.attention(q, k, v, causal=True, return_lse=True)
    grad_a = rng.standard_normal(a.shape)
    separate = attention_backward(q, k, v, a, lse, grad_a, causal=True, block_q=2, block_k=3, dq_mode="separate")
    atomic = attention_backward(q, k, v, a, lse, grad_a, causal=True, block_q=2, block_k=3, dq_mode="atomic")
    for s, t in zip(separate, atomic, strict=True):
        np.testing.assert_allclose(s, t, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(separate[1], atomic[1])  # dK and dV come from the same sweep in both
    for bad in ("fast", None, 1):
        with pytest.raises(ValueError, match=r"dq_mode must be one of \('separate', 'atomic'\)"):
            attention_backward(q, k, v, a, lse, grad_a, dq_mode=bad)


# ------------------------------------------------------------------------------------------------------------------
# learnable sinks (chapter 13): in the first part of split-KV only; the sink's gradient
# ------------------------------------------------------------------------------------------------------------------

SINKS = np.array([-2.0, 0.5, 6.0])  # one per head; 6 is above most scores


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N, M", [(1, 12), (5, 9), (9, 5)])
def test_split_kv_with_a_sink_equals_attention_for_every_split_count(N, M, causal):
    q, k, v = head(N=N, M=M, batch=(2, 3), seed=N + M)
    want, want_lse = fm.attention(q, k, v, causal=causal, learnable_sink=SINKS, return_lse=True)
    for num_splits in range(1, M + 3):  # more splits than keys too: the first part may hold no key, only the sink
        a, lse = split_kv_attention(q, k, v, num_splits, causal=causal, learnable_sink=SINKS, return_lse=True)
        np.testing.assert_allclose(a, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-12)


def test_the_sink_is_in_the_first_part_only():
    q, k, v = head(N=3, M=8, batch=(3,), seed=2)
    trace = split_kv_trace(q, k, v, 4, learnable_sink=SINKS)
    for p, (c0, c1) in enumerate(trace.ranges):
        _, lse_alone = fm.attention(q, k[..., c0:c1, :], v[..., c0:c1, :], return_lse=True)
        want = np.logaddexp(lse_alone, SINKS[:, None]) if p == 0 else lse_alone
        np.testing.assert_allclose(trace.parts[p][1], want, rtol=0, atol=1e-12)
    # in every part it would be counted four times: the denominator's exp(sink) four times is a sink of sink + ln 4
    parts = [
        fm.attention(q, k[..., c0:c1, :], v[..., c0:c1, :], learnable_sink=SINKS, return_lse=True)
        for c0, c1 in trace.ranges
    ]
    merged = parts[0]
    for part in parts[1:]:
        merged = merge_states(*merged, *part)
    np.testing.assert_allclose(merged[1], fm.attention(q, k, v, learnable_sink=SINKS + np.log(4), return_lse=True)[1])


def test_split_kv_minus_inf_sink_is_no_sink_bitwise_and_nan_sink_is_nan():
    q, k, v = head(N=4, M=7, batch=(3,), seed=3)
    for got, want in zip(
        split_kv_attention(q, k, v, 3, learnable_sink=-np.inf, return_lse=True),
        split_kv_attention(q, k, v, 3, return_lse=True),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)
    a, lse = split_kv_attention(q, k, v, 3, learnable_sink=[np.nan, 0.0, 0.0], return_lse=True)
    assert np.isnan(a[0]).all() and np.isnan(lse[0]).all() and np.isfinite(a[1:]).all()


def gpt_oss_grads(q, k, v, sink, grad_a, keep=None):
    """Direct differentiation of GPT-OSS's formula (the sink column concatenated, softmax, dropped before P V),
    with full matrices, float64: (dq, dk, dv, d sink) with d sink summed over the rows and the batch."""
    scale = 1 / np.sqrt(q.shape[-1])
    x = scale * q @ np.swapaxes(k, -1, -2)
    if keep is not None:
        x = np.where(keep, x, -np.inf)
    column = np.broadcast_to(np.asarray(sink)[:, None, None], x.shape[:-1] + (1,))
    y_all = fm.safe_softmax(np.concatenate([x, column], axis=-1))
    y, y_sink = y_all[..., :-1], y_all[..., -1]
    dv = np.swapaxes(y, -1, -2) @ grad_a
    dy = grad_a @ np.swapaxes(v, -1, -2)
    delta = np.sum(dy * y, axis=-1, keepdims=True)  # the sink column's dY is 0
    dx = y * (dy - delta)
    d_sink = (y_sink * (0 - delta[..., 0])).sum(axis=(0, 2))
    return scale * dx @ k, scale * np.swapaxes(dx, -1, -2) @ q, dv, d_sink


@pytest.mark.parametrize("dq_mode", ["atomic", "separate"])
@pytest.mark.parametrize("masked", [False, True])
def test_backward_with_a_sink_equals_direct_differentiation(dq_mode, masked):
    q, k, v = head(N=6, M=8, batch=(2, 3), seed=7)
    keep = None
    if masked:
        keep = np.random.default_rng(8).random((6, 8)) < 0.5
        keep[2] = False  # a row with no key: it passes no gradient (A = 0, so D = 0)
    grad_a = np.random.default_rng(9).standard_normal((2, 3, 6, v.shape[-1]))
    a, lse = fm.flash_attention(q, k, v, mask=keep, learnable_sink=SINKS, return_lse=True, block_q=4, block_k=3)
    grads = attention_backward(
        q, k, v, a, lse, grad_a, mask=keep, learnable_sink=SINKS, block_q=4, block_k=3, dq_mode=dq_mode
    )
    assert len(grads) == 4 and grads[3].shape == (3,)
    for g, ref in zip(grads, gpt_oss_grads(q, k, v, SINKS, grad_a, keep), strict=True):
        np.testing.assert_allclose(g, ref, rtol=0, atol=1e-12)


def test_sink_gradient_matches_finite_differences_and_takes_the_sinks_shape():
    q, k, v = head(N=4, M=5, D=3, Dv=2, batch=(2, 3), seed=12)
    w = np.random.default_rng(13).standard_normal((2, 3, 4, 2))  # loss = sum(w * A)
    for sink in (SINKS, np.array([[0.1, 0.2, 0.3], [1.0, -1.0, 2.0]]), np.array(0.7), np.array([0.7])):
        a, lse = fm.attention(q, k, v, learnable_sink=sink, return_lse=True)
        *_, g_sink = attention_backward(q, k, v, a, lse, w, learnable_sink=sink, block_q=3, block_k=2)
        fd = finite_difference(lambda s: float(np.sum(w * fm.attention(q, k, v, learnable_sink=s))), sink.astype(float))
        assert g_sink.shape == sink.shape
        np.testing.assert_allclose(g_sink, fd, rtol=1e-6, atol=1e-9)


def test_backward_minus_inf_sink_gives_the_gradients_without_a_sink_and_zero():
    q, k, v = head(N=4, M=5, batch=(3,), seed=14)
    grad_a = np.random.default_rng(15).standard_normal((3, 4, v.shape[-1]))
    a, lse = fm.attention(q, k, v, return_lse=True)
    *grads, g_sink = attention_backward(q, k, v, a, lse, grad_a, learnable_sink=np.full(3, -np.inf))
    for g, want in zip(grads, attention_backward(q, k, v, a, lse, grad_a), strict=True):
        np.testing.assert_array_equal(g, want)
    assert np.array_equal(g_sink, np.zeros(3))
    with pytest.raises(ValueError, match=r"must be \(H,\) = \(3,\)"):
        attention_backward(q, k, v, a, lse, grad_a, learnable_sink=[1.0, 2.0])
