"""flashmath.flash: tiled attention in both loop orders against the float64 reference, masked keys absent,
skipped tiles, the trace of tile steps, the memory bound, and the errors."""

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashmath.attention import attention
from flashmath.flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, flash_attention, flash_trace
from flashmath.masks import causal_mask

ORDERS = ["fa1", "fa2"]
# (N, M, D, Dv): N != M both ways, N = 1 (decoding), M = 1, sizes that are not multiples of the blocks
SHAPES = [(7, 13, 5, 5), (13, 7, 5, 3), (1, 13, 5, 5), (7, 1, 5, 5), (1, 1, 3, 2), (16, 16, 8, 8), (23, 29, 4, 6)]
BLOCKS = [(1, 1), (3, 4), (5, 2), (4, 16), (64, 64)]
MASKS = ["none", "causal", "top-left", "random", "padding"]


def make(rng, N, M, D, Dv, batch=(), dtype=np.float64):
    shapes = (batch + (N, D), batch + (M, D), batch + (M, Dv))
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in shapes)


def mask_kwargs(kind, N, M, rng):
    """Keyword arguments of the attention functions and the (N, M) keep-matrix they mean."""
    if kind == "none":
        return {}, np.ones((N, M), bool)
    if kind == "causal":
        return {"causal": True}, causal_mask(N, M)
    if kind == "top-left":
        keep = causal_mask(N, M, align="top-left")
    elif kind == "padding":
        keep = np.broadcast_to(np.arange(M) < max(M - 3, 1), (N, M))
    else:
        keep = rng.random((N, M)) < 0.5
    return {"mask": keep}, keep


def assert_close(actual, expected, tol):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    finite = np.isfinite(expected)
    err = np.abs(actual[finite] - expected[finite])
    assert np.all(err <= tol * (1 + np.abs(expected[finite]))), f"max error {err.max() if err.size else 0}"


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("N, M, D, Dv", SHAPES)
def test_equals_reference_float64(order, kind, N, M, D, Dv):
    rng = np.random.default_rng(N * 100 + M)
    q, k, v = make(rng, N, M, D, Dv)
    kwargs, _ = mask_kwargs(kind, N, M, rng)
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    for block_q, block_k in BLOCKS:
        a, lse = flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, return_lse=True, **kwargs)
        assert a.dtype == np.float64 and lse.dtype == np.float64
        assert_close(a, a_ref, 1e-10)
        assert_close(lse, lse_ref, 1e-10)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["none", "causal", "random"])
def test_equals_reference_float32(order, kind):
    rng = np.random.default_rng(3)
    q, k, v = make(rng, 37, 53, 16, 8, dtype=np.float32)
    kwargs, _ = mask_kwargs(kind, 37, 53, rng)
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    for block_q, block_k in [(8, 16), (5, 7), (64, 64)]:
        a, lse = flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, return_lse=True, **kwargs)
        assert a.dtype == np.float32 and lse.dtype == np.float32
        assert_close(a, a_ref, 1e-5)
        assert_close(lse, lse_ref, 1e-5)


@pytest.mark.parametrize("order", ORDERS)
def test_float16_in_float16_out_accumulated_in_float32(order):
    rng = np.random.default_rng(4)
    q, k, v = make(rng, 9, 11, 8, 4, dtype=np.float16)
    a, lse = flash_attention(q, k, v, block_q=4, block_k=3, order=order, causal=True, return_lse=True)
    assert a.dtype == np.float16 and lse.dtype == np.float32
    a_ref, lse_ref = attention(q, k, v, causal=True, return_lse=True)
    assert np.max(np.abs(a - a_ref)) < 2e-3 and np.max(np.abs(lse - lse_ref)) < 2e-3


@pytest.mark.parametrize("order", ORDERS)
def test_leading_dimensions_broadcast(order):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 7, 4))
    k = rng.standard_normal((1, 3, 9, 4))  # shared over the batch
    v = rng.standard_normal((2, 1, 9, 5))  # shared over the heads
    mask = rng.random((2, 1, 7, 9)) < 0.7  # per batch element
    a, lse = flash_attention(q, k, v, block_q=3, block_k=4, order=order, mask=mask, causal=True, return_lse=True)
    a_ref, lse_ref = attention(q, k, v, mask=mask, causal=True, return_lse=True)
    assert a.shape == (2, 3, 7, 5) and lse.shape == (2, 3, 7)
    assert_close(a, a_ref, 1e-10)
    assert_close(lse, lse_ref, 1e-10)
    for b in range(2):  # each (batch, head) is an independent attention
        for h in range(3):
            single = flash_attention(q[b, h], k[0, h], v[b, 0], mask=mask[b, 0], causal=True, order=order)
            assert_close(a[b, h], single, 1e-12)


@pytest.mark.parametrize("order", ORDERS)
def test_mask_with_more_leading_dimensions_than_q_k_v(order):
    rng = np.random.default_rng(6)
    q, k, v = make(rng, 5, 6, 3, 2)
    mask = rng.random((4, 5, 6)) < 0.5
    a = flash_attention(q, k, v, mask=mask, block_q=2, block_k=4, order=order)
    assert a.shape == (4, 5, 2)
    assert_close(a, attention(q, k, v, mask=mask), 1e-10)


# --------------------------------------------------------------------------------------------------------------
# A masked key is absent
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_q, block_k", [(1, 1), (2, 3), (4, 8), (16, 16)])
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_masked_keys_are_absent_whatever_their_rows_hold(order, block_q, block_k, poison):
    rng = np.random.default_rng(7)
    N, M, D = 6, 9, 4
    q, k, v = make(rng, N, M, D, 3)
    padded = np.array([2, 5, 8])  # keys masked for every query (padding)
    keep = np.ones((N, M), bool)
    keep[:, padded] = False
    k_bad, v_bad = k.copy(), v.copy()
    k_bad[padded] = poison
    v_bad[padded] = poison
    kept = np.setdiff1d(np.arange(M), padded)
    a_ref, lse_ref = attention(q, k[kept], v[kept], return_lse=True)  # attention with those keys removed
    a, lse = flash_attention(q, k_bad, v_bad, mask=keep, block_q=block_q, block_k=block_k, order=order, return_lse=True)
    assert_close(a, a_ref, 1e-12)
    assert_close(lse, lse_ref, 1e-12)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_q, block_k", [(1, 1), (3, 4), (8, 8)])
def test_causal_future_keys_are_absent_even_when_nan(order, block_q, block_k):
    rng = np.random.default_rng(8)
    N, M = 5, 8  # bottom-right: query n sees keys m <= n + 3
    q, k, v = make(rng, N, M, 3, 2)
    k[7], v[7] = np.nan, np.inf  # key 7 is seen by the last query only
    a = flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k, order=order)
    assert np.isnan(a[4]).all()  # the last query attends to key 7: NaN in, NaN out
    for n in range(4):  # the others never see it: exactly attention over their own keys
        assert_close(a[n], attention(q[n : n + 1], k[: n + 4], v[: n + 4])[0], 1e-12)


@pytest.mark.parametrize("order", ORDERS)
def test_key_masked_for_one_row_and_attended_by_another(order):
    rng = np.random.default_rng(9)
    q, k, v = make(rng, 4, 6, 3, 2)
    v[2, 0] = np.nan
    keep = np.ones((4, 6), bool)
    keep[[0, 3], 2] = False  # rows 0 and 3 do not see key 2; rows 1 and 2 do
    a = flash_attention(q, k, v, mask=keep, block_q=4, block_k=6, order=order)  # one tile holds all of it
    assert np.isnan(a[[1, 2], 0]).all() and np.isfinite(a[[1, 2], 1]).all()
    others = np.array([0, 1, 3, 4, 5])
    for n in (0, 3):
        assert_close(a[n], attention(q[n : n + 1], k[others], v[others])[0], 1e-12)


@pytest.mark.parametrize("order", ORDERS)
def test_fully_masked_rows_and_no_keys(order):
    rng = np.random.default_rng(10)
    q, k, v = make(rng, 6, 3, 4, 2)  # bottom-right causal with N > M: queries 0..2 see no key
    v[1] = np.nan
    a, lse = flash_attention(q, k, v, causal=True, block_q=2, block_k=2, order=order, return_lse=True)
    np.testing.assert_array_equal(a[:3], 0)
    np.testing.assert_array_equal(lse[:3], -np.inf)
    q, k, v = np.ones((2, 3, 4)), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    a, lse = flash_attention(q, k, v, order=order, return_lse=True)
    assert a.shape == (2, 3, 5) and lse.shape == (2, 3)
    np.testing.assert_array_equal(a, 0)
    np.testing.assert_array_equal(lse, -np.inf)
    a = flash_attention(np.ones((0, 4)), np.ones((3, 4)), np.ones((3, 2)), order=order)
    assert a.shape == (0, 2)


@pytest.mark.parametrize("order", ORDERS)
def test_nan_propagates_and_is_never_zeroed(order):
    rng = np.random.default_rng(11)
    q, k, v = make(rng, 4, 5, 3, 2)
    q[2, 1] = np.nan
    a, lse = flash_attention(q, k, v, block_q=3, block_k=2, order=order, return_lse=True)
    assert np.isnan(a[2]).all() and np.isnan(lse[2]) and np.isfinite(a[[0, 1, 3]]).all()
    q, k, v = make(rng, 4, 5, 3, 2)
    k[3, 0] = np.nan
    a = flash_attention(q, k, v, causal=True, block_q=3, block_k=2, order=order)  # query 0 sees keys 0..1
    assert np.isnan(a[2:]).all() and np.isfinite(a[:2]).all()


@pytest.mark.parametrize("order", ORDERS)
def test_inputs_are_not_modified(order):
    rng = np.random.default_rng(12)
    arrays = make(rng, 5, 7, 3, 2, dtype=np.float32)
    mask = rng.random((5, 7)) < 0.5
    copies = [a.copy() for a in (*arrays, mask)]
    for a in (*arrays, mask):
        a.flags.writeable = False  # any in-place write would raise
    flash_attention(*arrays, mask=mask, causal=True, block_q=2, block_k=3, order=order, return_lse=True)
    for a, c in zip((*arrays, mask), copies):
        np.testing.assert_array_equal(a, c)


def test_no_warnings_with_inf_and_nan_inputs():
    import warnings

    rng = np.random.default_rng(13)
    for _ in range(60):
        q, k, v = rng.normal(size=(3, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
        for arr in (q, k, v):
            if rng.random() < 0.6:
                arr[tuple(rng.integers(0, s) for s in arr.shape)] = rng.choice([np.inf, -np.inf, np.nan])
        mask = rng.random((3, 5)) < 0.6
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for order in ORDERS:
                flash_attention(q, k, v, mask=mask, block_q=2, block_k=2, order=order, return_lse=True)


# --------------------------------------------------------------------------------------------------------------
# Memory: one score tile at a time
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_peak_memory_is_one_tile_not_n_by_m(order):
    rng = np.random.default_rng(14)
    N = M = 1024
    q, k, v = make(rng, N, M, 8, 8)  # float64: an N x M matrix is 8 MiB
    tracemalloc.start()
    try:
        flash_attention(q, k, v, block_q=64, block_k=128, order=order, causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    tile = 64 * 128 * 8
    arrays = 4 * N * 8 * 8  # the scaled copy of Q, the output and fa1's row states, with room to spare
    assert peak < 3 * tile + arrays < N * M * 8 / 4, f"peak {peak} bytes"


# --------------------------------------------------------------------------------------------------------------
# Skipped tiles and the trace
# --------------------------------------------------------------------------------------------------------------


def _masked_tiles(keep, block_q, block_k):
    """Tiles whose pairs are all masked, counted directly on the (N, M) keep-matrix."""
    N, M = keep.shape
    return sum(
        not keep[r : r + block_q, c : c + block_k].any() for r in range(0, N, block_q) for c in range(0, M, block_k)
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("N, M, block_q, block_k", [(16, 16, 4, 4), (10, 23, 3, 5), (23, 10, 5, 3), (12, 12, 2, 1)])
def test_trace_skips_masked_tiles_and_loads_nothing_for_them(order, N, M, block_q, block_k):
    rng = np.random.default_rng(15)
    q, k, v = make(rng, N, M, 4, 3)
    trace = flash_trace(q, k, v, causal=True, block_q=block_q, block_k=block_k, order=order)
    T_r, T_c = math.ceil(N / block_q), math.ceil(M / block_k)
    assert trace.grid == (T_r, T_c) and len(trace) == T_r * T_c
    assert trace.n_skipped == _masked_tiles(causal_mask(N, M), block_q, block_k) > 0
    moved = np.diff(np.concatenate([[0], trace.hbm_bytes]))
    if order == "fa2":  # a skipped step moves nothing, except where it ends a query tile: A_i is written
        ends = trace.tiles[:, 1] == T_c - 1
        assert (moved[trace.skipped & ~ends] == 0).all()
    else:  # the first step also carries fa1's initialisation of A, g and s in memory
        assert (moved[1:][trace.skipped[1:]] == 0).all()
    full = flash_trace(q, k, v, block_q=block_q, block_k=block_k, order=order)
    assert full.n_skipped == 0 and full.traffic.bytes > trace.traffic.bytes


@pytest.mark.parametrize("order", ORDERS)
def test_trace_states(order):
    rng = np.random.default_rng(16)
    N, M, Dv = 7, 10, 3
    q, k, v = make(rng, N, M, 4, Dv, dtype=np.float32)
    trace = flash_trace(q, k, v, block_q=3, block_k=4, order=order)
    T_r, T_c = 3, 3
    i, j = trace.tiles[:, 0], trace.tiles[:, 1]
    if order == "fa2":  # query tiles outside: the key tile changes fastest
        assert (i == np.repeat(np.arange(T_r), T_c)).all() and (j == np.tile(np.arange(T_c), T_r)).all()
    else:
        assert (j == np.repeat(np.arange(T_c), T_r)).all() and (i == np.tile(np.arange(T_r), T_c)).all()
    assert (trace.rows == np.array([(0, 3), (3, 6), (6, 7)])[i]).all()
    assert (trace.cols == np.array([(0, 4), (4, 8), (8, 10)])[j]).all()
    assert trace.g.shape == trace.s.shape == (9, N) and trace.a.shape == (9, N, Dv)
    # after the last step every row has seen every key: A' = A, g + log(s) = logsumexp
    a_ref, lse_ref = attention(q, k, v, return_lse=True)
    assert_close(trace.a[-1], a_ref, 1e-5)
    assert_close(trace.g[-1] + np.log(trace.s[-1]), lse_ref, 1e-5)
    assert_close(trace.output, a_ref, 1e-5)
    # each step's state of the rows it touched is attention over the keys seen so far
    for t in range(len(trace)):
        r0, r1 = trace.rows[t]
        seen = trace.cols[t, 1]  # key tiles are taken in order in both loop orders
        part, lse_part = attention(q[r0:r1], k[:seen], v[:seen], return_lse=True)
        assert_close(trace.a[t, r0:r1], part, 1e-5)
        assert_close(trace.g[t, r0:r1] + np.log(trace.s[t, r0:r1]), lse_part, 1e-5)
    np.testing.assert_allclose(trace.acc, trace.s[..., None] * trace.a)
    assert (np.diff(trace.hbm_bytes) > 0).all()
    assert trace.hbm_bytes[-1] == trace.traffic.bytes and trace.traffic.bytes_per_element == 4


def test_trace_errors():
    with pytest.raises(ValueError, match="at least one query and one key"):
        flash_trace(np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 3)))
    with pytest.raises(ValueError, match="order must be"):
        flash_trace(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)), order="fa3")


# --------------------------------------------------------------------------------------------------------------
# Errors: those of attention, plus the tiling arguments
# --------------------------------------------------------------------------------------------------------------

Q, K, V = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((np.zeros(4), K, V), {}, ValueError, r"q must have shape \(\.\.\., N, D\)"),
        ((Q, np.zeros((5, 3)), V), {}, ValueError, "same head dimension D, got D = 4 for q"),
        ((Q, K, np.zeros((6, 2))), {}, ValueError, "same number of keys M, got 5 for k"),
        ((Q, K, V), {"mask": np.ones((3, 4), bool)}, ValueError, r"does not broadcast to \(\.\.\., N, M\)"),
        ((Q, K, V), {"mask": np.ones((3, 5))}, TypeError, "mask must be a boolean array"),
        ((Q.astype(int), K, V), {}, ValueError, "q must hold real floating-point numbers"),
        ((Q, K, V), {"causal": "top-left"}, TypeError, "causal must be True or False"),
        ((Q, K, V), {"scale": np.inf}, ValueError, "scale must be finite"),
        ((Q, K, V), {"block_q": 0}, ValueError, "block_q must be a positive number of rows per tile, got 0"),
        ((Q, K, V), {"block_k": -4}, ValueError, "block_k must be a positive number of rows per tile, got -4"),
        ((Q, K, V), {"block_q": 2.5}, TypeError, "block_q must be a positive integer"),
        ((Q, K, V), {"block_k": True}, TypeError, "block_k must be a positive integer"),
        ((Q, K, V), {"block_k": "64"}, TypeError, "block_k must be a positive integer"),
        ((Q, K, V), {"order": "fa3"}, ValueError, "order must be 'fa1'"),
    ],
)
def test_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        flash_attention(*args, **kwargs)


def test_defaults_are_positive_and_numpy_integer_blocks_are_taken():
    assert DEFAULT_BLOCK_Q >= 1 and DEFAULT_BLOCK_K >= 1
    rng = np.random.default_rng(17)
    q, k, v = make(rng, 5, 6, 3, 2)
    assert_close(flash_attention(q, k, v, block_q=np.int64(2), block_k=np.int32(4)), attention(q, k, v), 1e-12)


# --------------------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------------------


@st.composite
def problems(draw):
    N, M = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    D, Dv = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([0.1, 1.0, 10.0, 100.0]))
    rng = np.random.default_rng(seed)
    q, k, v = (a * spread for a in make(rng, N, M, D, Dv))
    kind = draw(st.sampled_from(MASKS + ["sparse"]))
    if kind == "sparse":
        kwargs = {"mask": rng.random((N, M)) < 0.2}
    else:
        kwargs, _ = mask_kwargs(kind, N, M, rng)
    blocks = draw(st.integers(1, 13)), draw(st.integers(1, 13))
    return q, k, v, kwargs, blocks, draw(st.sampled_from(ORDERS))


@settings(max_examples=120, deadline=None)
@given(problems())
def test_property_equals_reference(problem):
    q, k, v, kwargs, (block_q, block_k), order = problem
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    a, lse = flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, return_lse=True, **kwargs)
    scale = 1 + np.abs(v).max()
    assert_close(a / scale, a_ref / scale, 1e-10)
    assert_close(lse, lse_ref, 1e-10)
