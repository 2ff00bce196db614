"""flashmath.flash: tiled attention in both loop orders against the float64 reference, masked keys absent,
skipped tiles, the trace of tile steps, the memory bound, and the errors."""

import math
import tracemalloc

import numpy as np
import pytest
from helpers import assert_close, make, problems
from helpers import mask_kwargs as reference_mask_kwargs
from hypothesis import given, settings
from hypothesis import strategies as st

from flashmath.attention import attention
from flashmath.counting import counted_attention, flash_trace
from flashmath.flash import (
    DEFAULT_BLOCK_K,
    DEFAULT_BLOCK_Q,
    fa2_tile_step,
    flash_attention,
    reference_trace,
    rescale_trace,
)
from flashmath.masks import causal_mask

# The conventions every variant keeps (fully masked rows, no keys, NaN, dtypes, inputs untouched, the errors of
# attention) are tested for flash_attention in both orders in test_attention.py. Here: what is particular to tiles.
ORDERS = ["fa1", "fa2"]
# (N, M, D, Dv): N != M both ways, N = 1 (decoding), M = 1, sizes that are not multiples of the blocks
SHAPES = [(7, 13, 5, 5), (13, 7, 5, 3), (1, 13, 5, 5), (7, 1, 5, 5), (1, 1, 3, 2), (16, 16, 8, 8), (23, 29, 4, 6)]
BLOCKS = [(1, 1), (3, 4), (5, 2), (4, 16), (64, 64)]
MASKS = ["none", "causal", "top-left", "random", "padding"]


def mask_kwargs(kind, N, M, rng):
    """test_attention's masks, and a padding mask: the last three keys masked for every query."""
    if kind != "padding":
        return reference_mask_kwargs(kind, N, M, rng)
    keep = np.broadcast_to(np.arange(M) < max(M - 3, 1), (N, M))
    return {"mask": keep}, keep


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
    q, k, v = (a.astype(np.float32) for a in make(rng, 37, 53, 16, 8))
    kwargs, _ = mask_kwargs(kind, 37, 53, rng)
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    for block_q, block_k in [(8, 16), (5, 7), (64, 64)]:
        a, lse = flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, return_lse=True, **kwargs)
        assert a.dtype == np.float32 and lse.dtype == np.float32
        assert_close(a, a_ref, 1e-5)
        assert_close(lse, lse_ref, 1e-5)


# --------------------------------------------------------------------------------------------------------------
# A masked key is absent
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("error")  # NaN and inf in, and no RuntimeWarning out
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


@pytest.mark.filterwarnings("error")
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


@pytest.mark.filterwarnings("error")
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


# --------------------------------------------------------------------------------------------------------------
# Memory: one score tile at a time
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_peak_memory_is_one_tile_not_n_by_m(order):
    rng = np.random.default_rng(14)
    N = M = 1024
    q, k, v = make(rng, N, M, 8, 8)  # float64: an N x M matrix is 8 MiB
    tile = 64 * 128 * 8
    arrays = 4 * N * 8 * 8  # the scaled copy of Q, the output and fa1's row states, with room to spare
    for workers in (1, 2):  # fa2's workers each hold their own tile (fa1 ignores workers)
        # once before measuring: the first call looks up the BLAS libraries (threadpoolctl), a one-time cost
        flash_attention(q[:64], k[:128], v[:128], block_q=64, block_k=128, order=order, workers=workers)
        tracemalloc.start()
        try:
            flash_attention(q, k, v, block_q=64, block_k=128, order=order, causal=True, workers=workers)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 3 * tile * workers + arrays < N * M * 8 / 4, f"peak {peak} bytes with {workers} workers"


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
    q, k, v = (a.astype(np.float32) for a in make(rng, N, M, 4, Dv))
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
    by_array = trace.bytes_by_array
    assert set(by_array) == set(trace.traffic.arrays)
    np.testing.assert_array_equal(sum(by_array.values())[:, 0], trace.loaded_bytes)
    np.testing.assert_array_equal(sum(by_array.values())[:, 1], trace.stored_bytes)
    assert by_array["Q"][-1, 0] == 4 * trace.traffic.arrays["Q"][0]


@pytest.mark.parametrize("kind", ["none", "causal", "random"])
@pytest.mark.parametrize("order", ORDERS)
def test_the_plain_counted_and_traced_loops_agree_bit_for_bit(order, kind):
    """The loop that is counted and traced is the loop that runs: flash_attention (a plain memory, on one worker
    and on three), counted_attention (a counted memory) and flash_trace (the loop step by step, on a counted memory)
    give the same bits, and so does the trace's last state."""
    rng = np.random.default_rng(41)
    N, M = 23, 31
    q, k, v = (a.astype(np.float32) for a in make(rng, N, M, 5, 4))
    kwargs = reference_mask_kwargs(kind, N, M, rng)[0]
    blocks = {"block_q": 4, "block_k": 8, "order": order}
    a, lse = flash_attention(q, k, v, return_lse=True, workers=1, **blocks, **kwargs)
    a3, lse3 = flash_attention(q, k, v, return_lse=True, workers=3, **blocks, **kwargs)
    counted, count = counted_attention(order, q, k, v, block_q=4, block_k=8, **kwargs)
    trace = flash_trace(q, k, v, **blocks, **kwargs)
    assert count.loads > 0 and len(trace) == 6 * 4  # the instrumented runs did count: T_r x T_c steps
    for got in (a3, counted, trace.output, trace.a[-1]):
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)
    for got in (lse3, trace.lse):
        np.testing.assert_array_equal(got, lse)
    assert_close(a, attention(q, k, v, **kwargs), 1e-5)  # and right, not only the same


def test_trace_errors():
    with pytest.raises(ValueError, match="at least one query and one key"):
        flash_trace(np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 3)))


# --------------------------------------------------------------------------------------------------------------
# Errors of the tiling arguments (attention's own errors are tested in test_attention.py for both orders)
# --------------------------------------------------------------------------------------------------------------

Q, K, V = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"block_q": 0}, ValueError, r"block_q must be >= 1 \(rows per tile\), got 0"),
        ({"block_k": -4}, ValueError, r"block_k must be >= 1 \(rows per tile\), got -4"),
        ({"block_q": 2.5}, TypeError, "block_q must be a positive integer"),
        ({"block_k": True}, TypeError, "block_k must be a positive integer"),
        ({"block_k": "64"}, TypeError, "block_k must be a positive integer"),
        ({"order": "fa3"}, ValueError, "order must be 'fa1'"),
        ({"order": "fa1", "block_q": None, "mask": np.ones((3, 4), bool)}, ValueError, "does not broadcast"),
    ],
)
@pytest.mark.parametrize("function", [flash_attention, flash_trace])
def test_errors(function, kwargs, error, match):
    with pytest.raises(error, match=match):
        function(Q, K, V, **kwargs)


def test_defaults_are_positive_and_numpy_integer_blocks_are_taken():
    rng = np.random.default_rng(17)
    q, k, v = make(rng, 5, 6, 3, 2)
    # the defaults are used when no block is given: a problem smaller than both is one tile
    assert flash_trace(q, k, v).grid == (1, 1) and (flash_trace(q, k, v).block_q, flash_trace(q, k, v).block_k) == (
        DEFAULT_BLOCK_Q,
        DEFAULT_BLOCK_K,
    )
    assert_close(flash_attention(q, k, v, block_q=np.int64(2), block_k=np.int32(4)), attention(q, k, v), 1e-12)


# --------------------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(problems(), st.integers(1, 13), st.integers(1, 13), st.sampled_from(ORDERS))
def test_property_equals_reference(problem, block_q, block_k, order):
    q, k, v, kwargs, _ = problem  # test_attention's problems: sizes 1-9, every mask kind, scores up to 100x
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    a, lse = flash_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, return_lse=True, **kwargs)
    scale = 1 + np.abs(v).max()
    assert_close(a / scale, a_ref / scale, 1e-10)
    assert_close(lse, lse_ref, 1e-10)


# -- FlashAttention-4's lazy rescaling (rescale_threshold, fa2) -------------------------------------------------------


def growing(N=6, M=40, D=4, Dv=3, rate=0.35, seed=0, dtype=np.float64):
    """Adversarial inputs: every query's scores grow along the keys (x_nm about rate m), so the running max rises
    at every key tile, by ``rate B_c`` per tile."""
    rng = np.random.default_rng(seed)
    q = np.zeros((N, D))
    q[:, 0] = np.sqrt(D)  # with scale 1 / sqrt(D): x_nm = k_m0 (plus a little noise below)
    k = rng.standard_normal((M, D)) * 0.01
    k[:, 0] = rate * np.arange(M)
    v = rng.standard_normal((M, Dv))
    return tuple(x.astype(dtype) for x in (q + rng.standard_normal((N, D)) * 0.01, k, v))


def lazy_kwargs():
    return [
        {},
        {"causal": True},
        {"learnable_sink": 3.0},
        {"window": (5, 0), "learnable_sink": -1.0},
        {"alibi_slopes": [0.5]},
    ]


@pytest.mark.parametrize("kwargs", lazy_kwargs())
@pytest.mark.parametrize("acc_dtype", [None, np.float16])
def test_rescale_threshold_zero_is_bitwise_the_eager_update(kwargs, acc_dtype):
    q, k, v = growing()
    base = flash_attention(
        q[None], k[None], v[None], block_q=4, block_k=3, return_lse=True, acc_dtype=acc_dtype, **kwargs
    )
    for zero in (0, 0.0, np.float32(0)):
        got = flash_attention(
            q[None], k[None], v[None], block_q=4, block_k=3, return_lse=True, acc_dtype=acc_dtype,
            rescale_threshold=zero, **kwargs,
        )  # fmt: skip
        for x, y in zip(got, base, strict=True):
            np.testing.assert_array_equal(x, y)
    trace = rescale_trace(
        q[None], k[None], v[None], rescale_threshold=0, block_q=4, block_k=3, acc_dtype=acc_dtype, **kwargs
    )
    np.testing.assert_array_equal(trace.output, base[0])  # the counted step takes the same path
    np.testing.assert_array_equal(trace.lse, base[1])
    assert np.array_equal(trace.done, trace.eager) and not trace.kept.any() and trace.skipped_share == 0


@pytest.mark.parametrize("threshold", [1, 4, 8])
@pytest.mark.parametrize("rate", [0.05, 0.35, 2.0])
@pytest.mark.parametrize("kwargs", lazy_kwargs())
def test_lazy_rescaling_equals_the_eager_update_to_rounding(threshold, rate, kwargs):
    q, k, v = growing(rate=rate)
    eager = flash_attention(q[None], k[None], v[None], block_q=4, block_k=3, return_lse=True, **kwargs)
    trace = rescale_trace(q[None], k[None], v[None], rescale_threshold=threshold, block_q=4, block_k=3, **kwargs)
    assert_close(trace.output, eager[0], 1e-12)
    assert_close(trace.lse, eager[1], 1e-12)
    assert np.all(trace.done <= trace.eager)  # a lazy rescale only where the eager update rescales too
    if rate * 3 <= threshold * math.log(2) and trace.eager.sum() > 0:  # each tile grows within the threshold
        assert trace.kept.sum() > 0 and trace.skipped.sum() > 0


def test_lazy_rescaling_skips_rescales_on_growing_maxima():
    q, k, v = growing(rate=0.35, M=60)  # the max grows by 1.05 per tile of 3 keys
    counts = {t: rescale_trace(q, k, v, rescale_threshold=t, block_q=6, block_k=3) for t in (0, 1, 4, 8)}
    assert np.all(counts[0].done == 19)  # 20 key tiles: every one after the first raises the max
    # t ln 2 = 0.69: every tile moves the reference; 2.77: every third; 5.55: every sixth
    assert [int(counts[t].done[0]) for t in (1, 4, 8)] == [19, 6, 3]
    assert [round(counts[t].skipped_share, 3) for t in (1, 4, 8)] == [0.0, 0.684, 0.842]


@settings(max_examples=80, deadline=None)
@given(problems(), st.integers(1, 7), st.integers(1, 7), st.sampled_from([0.5, 1, 4, 8]), st.booleans())
def test_property_lazy_rescaling_is_exact(problem, block_q, block_k, threshold, sink):
    q, k, v, kwargs, _ = problem
    if sink:
        kwargs = {**kwargs, "learnable_sink": 1.0}
    eager = flash_attention(q, k, v, block_q=block_q, block_k=block_k, return_lse=True, **kwargs)
    trace = rescale_trace(q, k, v, rescale_threshold=threshold, block_q=block_q, block_k=block_k, **kwargs)
    assert_close(trace.output, eager[0], 1e-12)
    assert_close(trace.lse, eager[1], 1e-12)
    assert np.all(trace.done <= trace.eager)


@pytest.mark.parametrize("threshold", [1.0, 4.0, 8.0])
def test_lazy_weights_stay_below_two_to_the_threshold(threshold):
    # the tile step itself: after each step every weight exp(x - g) is at most 2^t (the stale reference is at most
    # t ln 2 below the max), whatever the scores do
    rng = np.random.default_rng(7)
    g, s = np.full(5, -np.inf), np.zeros(5)
    acc = np.zeros((5, 2))
    largest = 0.0
    for j in range(60):
        x = rng.standard_normal((5, 4)) + 0.3 * j * rng.random((5, 1))  # maxima that grow, at various speeds
        g, s, acc = fa2_tile_step(g, s, acc, x, rng.standard_normal((4, 2)), None, rescale_threshold=threshold)
        largest = max(largest, x.max())  # x now holds the weights P
    assert 1 < largest <= 2.0**threshold * (1 + 1e-12)


@pytest.mark.parametrize("threshold", [8, 16])
def test_float32_lazy_rescaling_does_not_overflow(threshold):
    import warnings

    # scores from -3000 up to +3000 along the keys (the max grows by 150 per tile), and a second run whose
    # scores stay just below each stale reference's threshold: the weights reach 2^t, the sums (M + 1) 2^t
    q, k, v = growing(N=8, M=41, rate=150.0, dtype=np.float32)
    k[:, 0] -= 3000
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        a, lse = flash_attention(q, k, v, block_q=8, block_k=1, rescale_threshold=threshold, return_lse=True)
        q2, k2, v2 = growing(N=8, M=200, rate=threshold * math.log(2) / 200, dtype=np.float32)
        a2, lse2 = flash_attention(q2, k2, v2, block_q=8, block_k=7, rescale_threshold=threshold, return_lse=True)
    want, want_lse = attention(q, k, v, return_lse=True)
    assert np.isfinite(a).all() and np.isfinite(lse).all()
    assert_close(a, want, 1e-5)
    assert_close(lse, want_lse, 1e-6)
    assert_close(a2, attention(q2, k2, v2), 1e-5)


def test_rescale_counts_with_workers_and_grouped_heads():
    rng = np.random.default_rng(9)
    q, k, v = (
        rng.standard_normal((2, 4, 30, 8)) * 3,
        rng.standard_normal((2, 2, 25, 8)),
        rng.standard_normal((2, 2, 25, 3)),
    )
    traces = [
        rescale_trace(q, k, v, rescale_threshold=2, block_q=4, block_k=3, enable_gqa=True, workers=w) for w in (1, 3)
    ]
    assert traces[0].done.shape == traces[0].eager.shape == (2, 4, 30)
    for name in ("done", "kept", "eager", "output", "lse"):
        np.testing.assert_array_equal(getattr(traces[0], name), getattr(traces[1], name))
    assert_close(traces[0].output, flash_attention(q, k, v, enable_gqa=True), 1e-12)


@pytest.mark.parametrize(
    "threshold, order, error, match",
    [
        (-1.0, "fa2", ValueError, "finite and >= 0"),
        (np.inf, "fa2", ValueError, "finite and >= 0"),
        (np.nan, "fa2", ValueError, "finite and >= 0"),
        (True, "fa2", TypeError, "rescale_threshold must be a real number"),
        ("8", "fa2", TypeError, "rescale_threshold must be a real number"),
        ([8.0], "fa2", TypeError, "rescale_threshold must be a real number"),
        (8.0, "fa1", ValueError, "needs order='fa2'"),
    ],
)
def test_rescale_threshold_errors(threshold, order, error, match):
    q, k, v = make(np.random.default_rng(0), 3, 4, 2, 2)
    with pytest.raises(error, match=match):
        flash_attention(q, k, v, rescale_threshold=threshold, order=order)


def test_rescale_threshold_zero_is_taken_by_fa1_and_rescale_trace_checks_its_arguments():
    q, k, v = make(np.random.default_rng(0), 3, 4, 2, 2)
    np.testing.assert_array_equal(
        flash_attention(q, k, v, order="fa1", rescale_threshold=0), flash_attention(q, k, v, order="fa1")
    )
    for kwargs in ({"order": "fa2"}, {"return_lse": True}, {"blocks": 3}):
        with pytest.raises(TypeError, match="rescale_trace"):
            rescale_trace(q, k, v, **kwargs)


@pytest.mark.parametrize("threshold", [0.0, 0.5, 2.0, 8.0])
@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"learnable_sink": np.array([1.5, -0.5])}])
def test_reference_trace_records_the_kept_reference_and_its_rescales(threshold, kwargs):
    rng = np.random.default_rng(11)
    q, k, v = (3 * rng.standard_normal((2, 9, 4)), rng.standard_normal((2, 11, 4)), rng.standard_normal((2, 11, 3)))
    trace = reference_trace(q, k, v, rescale_threshold=threshold, block_q=4, block_k=3, **kwargs)
    counts = rescale_trace(q, k, v, rescale_threshold=threshold, block_q=4, block_k=3, **kwargs)
    assert trace.reference.shape == trace.row_max.shape == trace.rescaled.shape == (2, 9, 4)
    assert trace.cols.tolist() == [[0, 3], [3, 6], [6, 9], [9, 11]]
    assert np.array_equal(trace.rescaled.sum(axis=-1), counts.done)  # the same rescales as the loop counts
    lag = trace.lag()
    assert np.all(lag >= 0) and np.all(lag <= threshold + 1e-12)  # every weight at most 2^t
    # the true running max: the max of the scores (and the sink) seen so far, whatever the threshold
    x = np.where(
        np.tril(np.ones((9, 11), bool), 2) if kwargs.get("causal") else True, q @ k.swapaxes(-1, -2) / 2, -np.inf
    )
    if "learnable_sink" in kwargs:
        x = np.concatenate([np.broadcast_to(kwargs["learnable_sink"][:, None, None], (2, 9, 1)), x], axis=-1)
    ends = [c1 + ("learnable_sink" in kwargs) for _, c1 in trace.cols]
    expected = np.stack([x[..., :end].max(axis=-1) for end in ends], axis=-1)
    assert_close(trace.row_max, expected, tol=1e-12)
    if threshold == 0:
        assert np.array_equal(trace.reference, trace.row_max)


def test_reference_trace_rejects_unknown_keywords():
    q = np.ones((3, 2))
    with pytest.raises(TypeError, match="unknown keyword"):
        reference_trace(q, q, q, order="fa1")
    with pytest.raises(ValueError, match="rescale_threshold"):
        reference_trace(q, q, q, rescale_threshold=-1)
