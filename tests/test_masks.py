"""flashmath.masks: causal masks in both alignments, sliding windows, key padding."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashmath.masks import causal_mask, padding_mask, sliding_window_mask

T, F = True, False


def test_square_causal_is_lower_triangle_in_both_alignments():
    expected = np.array([[T, F, F], [T, T, F], [T, T, T]])
    for align in ("bottom-right", "top-left"):
        mask = causal_mask(3, 3, align=align)
        assert mask.dtype == np.bool_ and mask.shape == (3, 3)
        np.testing.assert_array_equal(mask, expected)


def test_bottom_right_fewer_queries_than_keys():
    # N = 2 queries are the last two of M = 4 positions: query n sees keys m <= n + 2
    np.testing.assert_array_equal(causal_mask(2, 4), [[T, T, T, F], [T, T, T, T]])
    np.testing.assert_array_equal(causal_mask(2, 4, align="top-left"), [[T, F, F, F], [T, T, F, F]])


def test_decoding_one_query_sees_the_whole_cache_only_bottom_right():
    np.testing.assert_array_equal(causal_mask(1, 5), np.ones((1, 5), bool))
    np.testing.assert_array_equal(causal_mask(1, 5, align="top-left"), [[T, F, F, F, F]])


def test_bottom_right_more_queries_than_keys_leaves_empty_rows():
    mask = causal_mask(5, 2)  # query n sees m <= n - 3
    np.testing.assert_array_equal(mask, [[F, F], [F, F], [F, F], [T, F], [T, T]])
    assert not mask[:3].any()
    np.testing.assert_array_equal(causal_mask(5, 2, align="top-left"), [[T, F], [T, T], [T, T], [T, T], [T, T]])


def test_empty_sizes():
    assert causal_mask(0, 4).shape == (0, 4)
    assert causal_mask(3, 0).shape == (3, 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.sampled_from(["bottom-right", "top-left"]))
def test_causal_equals_tril_with_offset(N, M, align):
    offset = M - N if align == "bottom-right" else 0
    np.testing.assert_array_equal(causal_mask(N, M, align=align), np.tril(np.ones((N, M), bool), k=offset))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10), st.integers(0, 10), st.integers(1, 12), st.sampled_from(["bottom-right", "top-left"]))
def test_sliding_window_is_causal_minus_older_keys(N, M, window, align):
    mask = sliding_window_mask(N, M, window, align=align)
    offset = M - N if align == "bottom-right" else 0
    expected = np.tril(np.ones((N, M), bool), k=offset) & ~np.tril(np.ones((N, M), bool), k=offset - window)
    np.testing.assert_array_equal(mask, expected)
    assert np.all(mask.sum(axis=1) <= window)
    if window >= N + offset:  # every row's window reaches back past key 0
        np.testing.assert_array_equal(mask, causal_mask(N, M, align=align))


def test_sliding_window_example():
    np.testing.assert_array_equal(
        sliding_window_mask(4, 4, 2), [[T, F, F, F], [T, T, F, F], [F, T, T, F], [F, F, T, T]]
    )


def test_padding_mask():
    mask = padding_mask([3, 0, 4], 4)
    assert mask.shape == (3, 1, 1, 4) and mask.dtype == np.bool_
    np.testing.assert_array_equal(mask[:, 0, 0], [[T, T, T, F], [F, F, F, F], [T, T, T, T]])


@pytest.mark.parametrize("H", [2, 3])  # H == B used to broadcast silently against the heads axis
def test_padding_mask_as_returned_masks_the_right_batch_rows_of_b_h_n_d_inputs(H):
    import flashmath as fm

    rng = np.random.default_rng(H)
    B, N, M, D = 2, 3, 4, 5
    q, k, v = rng.standard_normal((B, H, N, D)), rng.standard_normal((B, H, M, D)), rng.standard_normal((B, H, M, D))
    lengths = [1, 3]
    out = fm.attention(q, k, v, mask=padding_mask(lengths, M))
    for b, length in enumerate(lengths):  # each sequence alone, its padding removed
        np.testing.assert_allclose(out[b], fm.attention(q[b], k[b, :, :length], v[b, :, :length]), rtol=1e-12)


def test_sliding_window_extents_as_flashattention_window_size():
    # window_size = (left, right) = (1, 1): the aligned key and one on each side
    np.testing.assert_array_equal(sliding_window_mask(3, 3, left=1, right=1), [[T, T, F], [T, T, T], [F, T, T]])
    np.testing.assert_array_equal(
        sliding_window_mask(3, 5, left=0, right=None),  # bottom-right: key p = n + 2
        [[F, F, T, T, T], [F, F, F, T, T], [F, F, F, F, T]],
    )
    np.testing.assert_array_equal(sliding_window_mask(3, 3, left=None, right=0), causal_mask(3, 3))
    np.testing.assert_array_equal(sliding_window_mask(4, 4, 2), sliding_window_mask(4, 4, left=1, right=0))
    np.testing.assert_array_equal(
        sliding_window_mask(2, 4, left=1, right=0, align="top-left"), [[T, F, F, F], [T, T, F, F]]
    )


def test_padding_mask_of_an_empty_batch():
    for lengths in ([], (), np.array([], dtype=np.int64)):
        mask = padding_mask(lengths, 3)
        assert mask.shape == (0, 1, 1, 3) and mask.dtype == np.bool_


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: causal_mask(3, 3, align="bottom_right"), ValueError, "align must be 'bottom-right' or 'top-left'"),
        (lambda: causal_mask(-1, 3), ValueError, "N must be >= 0"),
        (lambda: causal_mask(3, 2.0), TypeError, "M must be an integer"),
        (lambda: sliding_window_mask(3, 3, 0), ValueError, "window must be >= 1"),
        (lambda: padding_mask([1, 5], 4), ValueError, r"every length must lie in \[0, M\]"),
        (lambda: padding_mask([[1]], 4), ValueError, "lengths must be a 1-D array"),
        (lambda: padding_mask([1.5], 4), TypeError, "lengths must be integers"),
        (lambda: padding_mask([True, False], 4), TypeError, "lengths must be integers"),
        (lambda: causal_mask(True, 5), TypeError, "N must be an integer, got the bool True"),
        (lambda: causal_mask(3, np.True_), TypeError, "M must be an integer, got the bool"),
        (lambda: sliding_window_mask(3, 3, True), TypeError, "window must be an integer, got the bool"),
        (lambda: padding_mask([1], False), TypeError, "M must be an integer, got the bool"),
        (lambda: sliding_window_mask(3, 3, 2, left=1), ValueError, "either window or left/right"),
        (lambda: sliding_window_mask(3, 3), ValueError, "give window"),
        (lambda: sliding_window_mask(3, 3, left=-1), ValueError, "left must be >= 0"),
        (lambda: sliding_window_mask(3, 3, left=1, right=1.0), TypeError, "right must be an integer"),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
