"""Chapter 13's variants: grouped-query heads, windows, softcap, ALiBi, score_mod / mask_mod, block masks, packed
sequences and a paged KV cache, each against an independent computation (the formulas written here; PyTorch's SDPA
in tests/test_variants_torch.py, outside the fast tier since importing torch alone takes seconds)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, make, paged_case, window_keep
from hypothesis import given, settings
from hypothesis import strategies as st

from flashmath.attention import attention
from flashmath.flash import flash_attention
from flashmath.packed import flash_attention_varlen, gather_pages, paged_attention
from flashmath.variants import (
    alibi_slopes_for,
    block_mask,
    document_mask_mod,
    mask_example,
    prefix_lm_mask_mod,
    streaming_mask_mod,
)

TOL32 = 2e-5


def direct(q, k, v, *, keep=None, bias=None, softcap=None, scale=None):
    """Attention written out in float64: scores, softcap, bias, mask, softmax (empty rows give 0)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    x = q @ np.swapaxes(k, -1, -2) * scale
    if softcap is not None:
        x = softcap * np.tanh(x / softcap)
    if bias is not None:
        x = x + bias
    if keep is not None:
        x = np.where(keep, x, -np.inf)
    g = x.max(axis=-1, keepdims=True)
    g = np.where(np.isneginf(g), 0, g)
    p = np.exp(x - g)
    s = p.sum(axis=-1, keepdims=True)
    return (p / np.where(s == 0, 1, s)) @ v


SIZES = [(7, 11), (11, 7), (1, 9), (9, 1), (16, 16), (5, 5)]


# -- grouped-query heads against PyTorch's SDPA ---------------------------------------------------------------------


def test_gqa_head_mapping_is_h_over_g():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((6, 4, 3)), rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    got = flash_attention(q, k, v, enable_gqa=True, block_q=2, block_k=2)
    for h in range(6):  # query head h reads kv head h // 3
        assert_close(got[h], attention(q[h], k[h // 3], v[h // 3]), 1e-12)


def test_gqa_refuses_heads_that_do_not_divide():
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        flash_attention(
            rng.standard_normal((5, 3, 4)),
            rng.standard_normal((2, 3, 4)),
            rng.standard_normal((2, 3, 4)),
            enable_gqa=True,
        )
    with pytest.raises(TypeError, match="enable_gqa"):
        flash_attention(*make(rng, 3, 3, 2, 2), enable_gqa="yes")


# -- sliding window ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N, M", SIZES)
@pytest.mark.parametrize("window", [(2, 0), (0, 0), (3, 1), (None, 0), (1, None), 3])
@pytest.mark.parametrize("order", ["fa1", "fa2"])
def test_window_matches_formula(N, M, window, order):
    rng = np.random.default_rng(N + 13 * M)
    q, k, v = make(rng, N, M, 4, 3, (2,))
    left, right = (window - 1, 0) if isinstance(window, int) else window
    got = flash_attention(q, k, v, window=window, block_q=3, block_k=4, order=order)
    assert_close(got, direct(q, k, v, keep=window_keep(N, M, left, right)), 1e-12)


def test_window_with_causal_caps_the_right_extent():
    rng = np.random.default_rng(3)
    q, k, v = make(rng, 6, 9, 4, 3)
    got = flash_attention(q, k, v, window=(2, 3), causal=True, block_q=2, block_k=2)
    assert_close(got, direct(q, k, v, keep=window_keep(6, 9, 2, 0)), 1e-12)


def test_window_that_empties_rows_gives_zero_and_minus_inf():
    rng = np.random.default_rng(4)
    q, k, v = make(rng, 9, 3, 4, 2)  # N > M: the first rows see no key at all with a window (1, 0)
    a, lse = flash_attention(q, k, v, window=(1, 0), block_q=4, block_k=2, return_lse=True)
    keep = window_keep(9, 3, 1, 0)
    empty = ~keep.any(axis=1)
    assert empty.any()
    assert np.all(a[empty] == 0) and np.all(np.isneginf(lse[empty]))
    assert_close(a, direct(q, k, v, keep=keep), 1e-12)


def test_window_skips_tiles_without_building_a_mask():
    bm = block_mask(64, 64, block_q=8, block_k=8, window=(7, 0))
    # band of 8 diagonals: tiles on the diagonal and just below are visited, the others skipped
    assert bm.counts == {"empty": 64 - 8 - 7, "partial": 8 + 7, "full": 0}


@pytest.mark.parametrize(
    "bad, error", [((1, -2), ValueError), ((1,), TypeError), (0, ValueError), ("3", TypeError), ((1.5, 0), TypeError)]
)
def test_window_refuses_bad_values(bad, error):
    rng = np.random.default_rng(6)
    with pytest.raises(error, match="window"):
        flash_attention(*make(rng, 3, 3, 2, 2), window=bad)


# -- softcap and ALiBi -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N, M", SIZES)
@pytest.mark.parametrize("cap", [0.5, 5.0, 30.0])
def test_softcap_on_the_scaled_score(N, M, cap):
    rng = np.random.default_rng(N * M)
    q, k, v = (3 * a for a in make(rng, N, M, 6, 3, (2,)))
    got = flash_attention(q, k, v, softcap=cap, block_q=4, block_k=3, causal=True)
    keep = np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N
    assert_close(got, direct(q, k, v, softcap=cap, keep=keep), 1e-12)


def test_softcap_refuses_bad_values():
    rng = np.random.default_rng(7)
    for bad, error in ((0, ValueError), (-1.0, ValueError), (np.inf, ValueError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(error, match="softcap"):
            flash_attention(*make(rng, 3, 3, 2, 2), softcap=bad)


@pytest.mark.parametrize("N, M", SIZES)
@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi_bias_formula(N, M, per_batch):
    rng = np.random.default_rng(N + M)
    q, k, v = make(rng, N, M, 4, 3, (2, 4))
    slopes = alibi_slopes_for(4) if not per_batch else rng.random((2, 4))
    got = flash_attention(q, k, v, alibi_slopes=slopes, block_q=3, block_k=4)
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    # FlashAttention: -slope * |i + seqlen_k - seqlen_q - j|
    bias = -np.asarray(slopes)[..., None, None] * np.abs(n + M - N - m)
    assert_close(got, direct(q, k, v, bias=bias), 1e-12)


def test_alibi_slopes_geometric():
    assert_close(alibi_slopes_for(8), 2.0 ** (-np.arange(1, 9)), 0)
    s12 = alibi_slopes_for(12)
    assert_close(s12[:8], 2.0 ** (-np.arange(1, 9)), 0)
    assert_close(s12[8:], (2.0 ** (-8 / 16)) ** np.arange(1, 16, 2)[:4], 1e-15)


def test_alibi_with_gqa_uses_the_query_head():
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((4, 5, 3)), rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 2))
    slopes = np.array([0.1, 0.2, 0.4, 0.8])
    got = flash_attention(q, k, v, enable_gqa=True, alibi_slopes=slopes, block_q=2, block_k=4)
    for h in range(4):
        bias = -slopes[h] * np.abs(np.arange(5)[:, None] + 1 - np.arange(6))
        assert_close(got[h], direct(q[h], k[h // 2], v[h // 2], bias=bias), 1e-12)


def test_alibi_refuses_slopes_of_the_wrong_shape():
    rng = np.random.default_rng(9)
    q, k, v = make(rng, 3, 3, 2, 2, (4,))
    with pytest.raises(ValueError, match="alibi_slopes"):
        flash_attention(q, k, v, alibi_slopes=np.ones(3))


# -- score_mod and mask_mod (FlexAttention) --------------------------------------------------------------------------


def test_score_mod_and_mask_mod_get_index_arrays():
    rng = np.random.default_rng(10)
    q, k, v = make(rng, 9, 10, 4, 3, (2, 3))
    calls = []

    def score_mod(score, b, h, q_idx, kv_idx):
        calls.append((np.shape(b), np.shape(h), q_idx.shape, kv_idx.shape))
        return score + 0.1 * h - 0.05 * b + 0.01 * (q_idx - kv_idx)

    def mask_mod(b, h, q_idx, kv_idx):
        return ((q_idx + kv_idx + h) % 3 != 0) | (b == 1)

    got = flash_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, block_q=4, block_k=4)
    b, h = np.arange(2)[:, None, None, None], np.arange(3)[None, :, None, None]
    n, m = np.arange(9)[:, None], np.arange(10)[None, :]
    keep = ((n + m + h) % 3 != 0) | (b == 1)
    bias = 0.1 * h - 0.05 * b + 0.01 * (n - m)
    assert_close(got, direct(q, k, v, keep=keep, bias=bias), 1e-12)
    assert calls and all(c[:2] == ((2, 3, 1, 1), (2, 3, 1, 1)) for c in calls)
    assert len(calls) <= 3 * 3  # once per visited tile, never per element


def test_mask_mod_must_return_booleans():
    rng = np.random.default_rng(11)
    with pytest.raises(TypeError, match="mask_mod must return booleans"):
        flash_attention(*make(rng, 3, 3, 2, 2), mask_mod=lambda b, h, q, kv: q - kv)
    with pytest.raises(TypeError, match="score_mod"):
        flash_attention(*make(rng, 3, 3, 2, 2), score_mod=3)


def test_prefix_lm_and_document_mask_mods():
    rng = np.random.default_rng(12)
    q, k, v = make(rng, 12, 12, 4, 3)
    n, m = np.arange(12)[:, None], np.arange(12)[None, :]
    got = flash_attention(q, k, v, mask_mod=prefix_lm_mask_mod(4), block_q=5, block_k=5)
    assert_close(got, direct(q, k, v, keep=(m < 4) | (m <= n)), 1e-12)
    docs = np.array([0] * 5 + [1] * 3 + [2] * 4)
    got = flash_attention(q, k, v, mask_mod=document_mask_mod(docs), causal=True, block_q=4, block_k=4)
    assert_close(got, direct(q, k, v, keep=(docs[:, None] == docs[None, :]) & (m <= n)), 1e-12)


def test_streaming_mask_mod_keeps_the_sink_tokens_and_the_window():
    """StreamingLLM's mask (chapter 13): causal, and the first S keys or the last W; the sink tokens add the first key
    tile of every query tile the window does not reach (at 4096 with 128 x 128 tiles: 27, all partial)."""
    rng = np.random.default_rng(36)
    q, k, v = make(rng, 19, 19, 4, 3)
    n, m = np.arange(19)[:, None], np.arange(19)[None, :]
    for S, W in ((4, 6), (0, 3), (2, 1), (5, 40)):
        got = flash_attention(q, k, v, mask_mod=streaming_mask_mod(S, W), block_q=4, block_k=5)
        assert_close(got, direct(q, k, v, keep=(m <= n) & ((m < S) | (n - m < W))), 1e-12)
    window = block_mask(4096, 4096, window=(511, 0)).counts
    sinks = block_mask(4096, 4096, mask_mod=streaming_mask_mod(4, 512)).counts
    assert sinks == {"empty": window["empty"] - 27, "partial": window["partial"] + 27, "full": window["full"]}
    with pytest.raises(ValueError):
        streaming_mask_mod(-1, 4)
    with pytest.raises(ValueError):
        streaming_mask_mod(4, 0)


def test_the_mask_explorer_s_sink_kinds():
    """ "sink tokens + window" keeps the first 4 keys and the window; "learnable sink" is no mask (the causal tiles)
    and colours row n by log(1 - P_sink,n), the factor of every probability of that row."""
    ex = mask_example("sink tokens + window", 6, 8, N=32)
    n, m = np.arange(32)[:, None], np.arange(32)[None, :]
    np.testing.assert_array_equal(ex.keep, (m <= n) & ((m < 4) | (n - m < 6)))
    sink = mask_example("learnable sink", 8, 8, N=32)  # a sink logit of 8 / 4 = 2
    causal = mask_example("causal", 8, 8, N=32)
    np.testing.assert_array_equal(sink.keep, causal.keep)
    np.testing.assert_array_equal(sink.blocks.kinds, causal.blocks.kinds)
    x = np.where(m <= n, np.random.default_rng(0).standard_normal((32, 32)), -np.inf)  # its sample scores
    y = np.exp(x - np.logaddexp.reduce(np.append(x, np.full((32, 1), 2.0), axis=1), axis=1, keepdims=True))
    with np.errstate(invalid="ignore"):  # 0 / 0 at the masked pairs, which are not compared
        shrink = y / np.exp(x - np.logaddexp.reduce(x, axis=1, keepdims=True))  # Y with the sink / Y without it
    np.testing.assert_allclose(sink.change[sink.keep], np.log(shrink)[sink.keep], atol=1e-12)


def test_masked_key_stays_absent_with_softcap_and_alibi():
    rng = np.random.default_rng(13)
    q, k, v = make(rng, 4, 6, 3, 2)
    k[0], v[0] = np.nan, np.inf  # masked by the window below: must not leak
    got = flash_attention(q, k, v, window=(1, 0), softcap=2.0, alibi_slopes=[0.5], block_q=2, block_k=3)
    keep = window_keep(4, 6, 1, 0)
    assert not keep[:, 0].any()
    assert np.isfinite(got).all()
    bias = -0.5 * np.abs(np.arange(4)[:, None] + 2 - np.arange(6))
    assert_close(got, direct(q, np.nan_to_num(k), np.nan_to_num(v, posinf=0), keep=keep, bias=bias, softcap=2.0), 1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_variants_in_low_precision(dtype):
    rng = np.random.default_rng(14)
    q, k, v = make(rng, 13, 17, 8, 4, (2,))
    got = flash_attention(
        q.astype(dtype),
        k.astype(dtype),
        v.astype(dtype),
        window=(5, 2),
        softcap=3.0,
        alibi_slopes=[0.25, 0.5],
        block_q=4,
        block_k=8,
    )
    assert got.dtype == dtype
    bias = -np.array([0.25, 0.5])[:, None, None] * np.abs(np.arange(13)[:, None] + 4 - np.arange(17))
    want = direct(
        q.astype(dtype), k.astype(dtype), v.astype(dtype), keep=window_keep(13, 17, 5, 2), bias=bias, softcap=3.0
    )
    tol = 2e-3 if dtype == np.float16 else TOL32
    assert_close(got, want, tol)


# -- block masks: skipped tiles are exactly the empty ones ---------------------------------------------------------


@st.composite
def random_tiled_masks(draw):
    N, M = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    bq, bk = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.05, 0.3, 0.9, 1.0]))
    rng = np.random.default_rng(seed)
    # blocky masks so that whole tiles are often empty or full
    coarse = rng.random((-(-N // 3), -(-M // 3))) < density
    keep = np.kron(coarse, np.ones((3, 3), bool))[:N, :M] ^ (rng.random((N, M)) < 0.02)
    return N, M, bq, bk, keep, seed


@settings(max_examples=60, deadline=None)
@given(random_tiled_masks())
def test_block_mask_result_and_skipped_tiles(case):
    N, M, bq, bk, keep, seed = case
    rng = np.random.default_rng(seed)
    q, k, v = make(rng, N, M, 3, 2)
    mask_mod = lambda b, h, qi, ki: keep[qi, ki]  # noqa: E731
    got = flash_attention(q, k, v, mask_mod=mask_mod, block_q=bq, block_k=bk)
    assert_close(got, direct(q, k, v, keep=keep), 1e-12)
    assert_close(got, flash_attention(q, k, v, mask=keep, block_q=bq, block_k=bk), 1e-12)
    bm = block_mask(N, M, block_q=bq, block_k=bk, mask_mod=mask_mod)
    for i, r0 in enumerate(range(0, N, bq)):
        for j, c0 in enumerate(range(0, M, bk)):
            tile = keep[r0 : r0 + bq, c0 : c0 + bk]
            assert bm.kinds[i, j] == (0 if not tile.any() else 2 if tile.all() else 1)
    visited = bm.areas[bm.kinds != 0].sum()
    assert bm.computed_share == pytest.approx(visited / (N * M))


@pytest.mark.parametrize("N, bq", [(4096, 128), (1000, 64), (37, 8)])
def test_causal_block_mask_counts(N, bq):
    bm = block_mask(N, N, block_q=bq, block_k=bq, causal=True)
    T = -(-N // bq)
    assert bm.counts == {"empty": T * (T - 1) // 2, "partial": T, "full": T * (T - 1) // 2}
    kinds = bm.kinds
    assert np.array_equal(kinds == 0, np.triu(np.ones((T, T), bool), 1))


def test_document_block_mask_matches_elementwise_classification():
    cu = np.array([0, 5, 5, 19, 30])
    bm = block_mask(30, 30, block_q=4, block_k=4, cu_seqlens_q=cu, causal=True)
    doc = np.repeat(np.arange(4), np.diff(cu))
    local = np.arange(30) - cu[:-1][doc]
    keep = (doc[:, None] == doc[None, :]) & (local[None, :] <= local[:, None])
    for i in range(8):
        for j in range(8):
            tile = keep[4 * i : 4 * i + 4, 4 * j : 4 * j + 4]
            assert bm.kinds[i, j] == (0 if not tile.any() else 2 if tile.all() else 1)


# -- packed sequences -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lens_q, lens_k", [([3, 5, 1], [3, 5, 1]), ([2, 0, 4], [6, 3, 4]), ([1, 1], [7, 9]), ([5, 2], [2, 3])]
)
@pytest.mark.parametrize(
    "kwargs", [{}, {"causal": True}, {"window": (2, 1)}, {"alibi_slopes": [0.3, 0.6]}, {"softcap": 1.5, "causal": True}]
)
def test_varlen_equals_each_sequence_alone(lens_q, lens_k, kwargs):
    rng = np.random.default_rng(sum(lens_q) + 7 * sum(lens_k))
    cu_q, cu_k = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q, k, v = make(rng, cu_q[-1], cu_k[-1], 4, 3, (2,))
    got = flash_attention_varlen(q, k, v, cu_q, cu_k, block_q=3, block_k=4, **kwargs)
    for s in range(len(lens_q)):
        rq, rk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
        want = flash_attention(q[:, rq], k[:, rk], v[:, rk], **kwargs)
        assert_close(got[:, rq], want, 1e-12)


def test_varlen_refuses_bad_cu_seqlens():
    rng = np.random.default_rng(16)
    q, k, v = make(rng, 6, 6, 2, 2)
    for cu, error in (
        ([0, 3, 5], ValueError),
        ([1, 6], ValueError),
        ([0, 4, 3, 6], ValueError),
        ([0.0, 6.0], TypeError),
    ):
        with pytest.raises(error, match="cu_seqlens"):
            flash_attention_varlen(q, k, v, cu)


# -- paged KV cache -----------------------------------------------------------------------------------------------


def test_gather_pages_is_the_contiguous_cache():
    rng = np.random.default_rng(17)
    k_pages, _, table, lens = paged_case(rng, [5, 8, 1], 3, 2, 4, 4)
    for b, n in enumerate(lens):
        want = np.concatenate([k_pages[table[b, j]] for j in range(-(-n // 3))], axis=-2)[:, :n]
        assert np.array_equal(gather_pages(k_pages, table, lens, b), want)


@pytest.mark.parametrize("N", [1, 3])
@pytest.mark.parametrize("num_splits", [1, 2, 5])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"causal": True},
        {"window": (4, 0)},
        {"softcap": 2.0, "causal": True},
        {"alibi_slopes": [0.1, 0.2, 0.3, 0.4], "causal": True},
    ],
)
def test_paged_equals_contiguous_cache(N, num_splits, kwargs):
    rng = np.random.default_rng(N * 10 + num_splits)
    seqlens = [7, 12, 4]
    k_pages, v_pages, table, lens = paged_case(rng, seqlens, 4, 2, 5, 3)
    q = rng.standard_normal((3, 4, N, 5))
    got, lse = paged_attention(
        q, k_pages, v_pages, table, lens, enable_gqa=True, num_splits=num_splits, return_lse=True, **kwargs
    )
    for b in range(3):
        k, v = gather_pages(k_pages, table, lens, b), gather_pages(v_pages, table, lens, b)
        want, want_lse = flash_attention(q[b], k, v, enable_gqa=True, return_lse=True, **kwargs)
        assert_close(got[b], want, 1e-12)
        assert_close(lse[b], want_lse, 1e-12)


def test_paged_refuses_bad_tables():
    rng = np.random.default_rng(19)
    k_pages, v_pages, table, lens = paged_case(rng, [5], 4, 1, 3, 3, spare=0)
    q = rng.standard_normal((1, 1, 1, 3))
    with pytest.raises(ValueError, match="points outside"):
        paged_attention(q, k_pages, v_pages, table + 5, lens)
    with pytest.raises(ValueError, match="seqlen"):
        paged_attention(q, k_pages, v_pages, table, lens + 100)
    with pytest.raises(ValueError, match="enable_gqa"):
        paged_attention(rng.standard_normal((1, 2, 1, 3)), k_pages, v_pages, table, lens)
    with pytest.raises(TypeError, match="block_table"):
        paged_attention(q, k_pages, v_pages, table.astype(float), lens)


# -- learnable sinks (chapter 13): every loop order, variant and layout against the explicit formula ---------------


def direct_sink(q, k, v, sink, *, keep=None, bias=None, softcap=None, scale=None, groups=1):
    """GPT-OSS's formula (openai/gpt-oss, gpt_oss/torch/model.py, sdpa) written out in float64, with the variants'
    scores: softcap, bias, mask, then the sink column concatenated, softmax, the column dropped before P V. Grouped
    heads: kv head h // groups for query head h (repeat_interleave). Returns the output and the logsumexp."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    x = q @ np.swapaxes(k, -1, -2) * scale
    if softcap is not None:
        x = softcap * np.tanh(x / softcap)
    if bias is not None:
        x = x + bias
    if keep is not None:
        x = np.where(keep, x, -np.inf)
    column = np.broadcast_to(np.asarray(sink, np.float64)[..., None, None], x.shape[:-1] + (1,))
    combined = np.concatenate([x, column], axis=-1)
    top = combined.max(axis=-1, keepdims=True)
    e = np.exp(combined - top)
    return (e[..., :-1] / e.sum(axis=-1, keepdims=True)) @ v, (top + np.log(e.sum(axis=-1, keepdims=True)))[..., 0]


SINK = np.array([-1.5, 0.0, 2.0, 40.0])  # one per query head; 40 is above every score


def alibi_bias(slopes, N, M):
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    return -np.asarray(slopes)[:, None, None] * np.abs(m - (n + M - N))


SINK_VARIANTS = {
    "none": ({}, {}),
    "causal": ({"causal": True}, {"keep": "causal"}),
    "window": ({"window": (2, 1)}, {"keep": (2, 1)}),
    "softcap": ({"softcap": 2.0}, {"softcap": 2.0}),
    "alibi": ({"alibi_slopes": [0.1, 0.2, 0.4, 0.8]}, {"bias": [0.1, 0.2, 0.4, 0.8]}),
    "gqa": ({"enable_gqa": True}, {"groups": 2}),
    "gqa, causal, window, softcap": (
        {"enable_gqa": True, "causal": True, "window": (3, 0), "softcap": 3.0},
        {"groups": 2, "keep": (3, 0), "softcap": 3.0},
    ),
    "score_mod": ({"score_mod": lambda x, b, h, n, m: x + 0.1 * h - 0.05 * (n - m)}, {"score_mod": True}),
    "mask_mod": ({"mask_mod": lambda b, h, n, m: (m % 3 != 1) | (h == 0)}, {"mask_mod": True}),
}


def sink_case(name, N, M, seed=0):
    """q (B=2, H=4, N, D), k, v (2, H_kv, M, ...), the flash_attention keyword arguments, and direct_sink's."""
    rng = np.random.default_rng(seed)
    kwargs, formula = SINK_VARIANTS[name]
    H_kv = 4 // formula.get("groups", 1)
    q = rng.standard_normal((2, 4, N, 5))
    k, v = rng.standard_normal((2, H_kv, M, 5)), rng.standard_normal((2, H_kv, M, 3))
    f = dict(formula)
    keep = f.pop("keep", None)
    if keep == "causal":
        f["keep"] = window_keep(N, M, None, 0)
    elif keep is not None:
        f["keep"] = window_keep(N, M, *keep)
    if "bias" in f:
        f["bias"] = alibi_bias(f["bias"], N, M)
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    h = np.arange(4)[:, None, None]
    if f.pop("score_mod", False):
        f["bias"] = 0.1 * h - 0.05 * (n - m) + 0 * n
    if f.pop("mask_mod", False):
        f["keep"] = (m % 3 != 1) | (h == 0)
    return q, k, v, kwargs, f


@pytest.mark.parametrize("name", list(SINK_VARIANTS))
@pytest.mark.parametrize("order", ["fa1", "fa2"])
@pytest.mark.parametrize("N, M", [(7, 11), (11, 7), (1, 9)])
def test_sink_equals_formula_for_every_order_and_variant(name, order, N, M):
    q, k, v, kwargs, formula = sink_case(name, N, M, seed=N + M)
    a, lse = flash_attention(q, k, v, learnable_sink=SINK, order=order, block_q=3, block_k=4, return_lse=True, **kwargs)
    want_a, want_lse = direct_sink(q, k, v, SINK, **formula)
    assert_close(a, want_a, 1e-12)
    assert_close(lse, want_lse, 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(0, 9),
    st.integers(1, 5),
    st.integers(1, 5),
    st.sampled_from(["fa1", "fa2"]),
    st.lists(st.floats(-20, 20), min_size=3, max_size=3),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_property_sink_loops_equal_the_reference(N, M, block_q, block_k, order, sink, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make(rng, N, M, 4, 3, (3,))
    keep = rng.random((N, M)) < 0.7
    a, lse = flash_attention(
        q, k, v, learnable_sink=sink, mask=keep, causal=causal, order=order, block_q=block_q, block_k=block_k,
        return_lse=True,
    )  # fmt: skip
    want_a, want_lse = attention(q, k, v, learnable_sink=sink, mask=keep, causal=causal, return_lse=True)
    assert_close(a, want_a, 1e-12)
    assert_close(lse, want_lse, 1e-12)


def test_sink_gqa_is_per_query_head_and_its_shape_is_checked():
    q, k, v, kwargs, _ = sink_case("gqa", 5, 6)
    with pytest.raises(ValueError, match=r"must be \(H,\) = \(4,\)"):
        flash_attention(q, k, v, learnable_sink=[1.0, 2.0, 3.0], **kwargs)
    with pytest.raises(TypeError, match="learnable_sink must be real numbers"):
        flash_attention(q, k, v, learnable_sink="sink", **kwargs)
    a = flash_attention(q, k, v, learnable_sink=SINK, **kwargs)
    for h in range(4):  # query head h: its own sink, kv head h // 2
        assert_close(a[:, h], direct_sink(q[:, h], k[:, h // 2], v[:, h // 2], SINK[h])[0], 1e-12)


def to_pages(k, v, page, rng):
    """The cache k, v (B, H, M, D) cut into pages in a shuffled physical order: (k_pages, v_pages, table, lens)."""
    B, H, M = k.shape[:3]
    n = max(-(-M // page), 1)
    order = rng.permutation(B * n)
    k_pages = np.zeros((B * n, H, page, k.shape[-1]), k.dtype)
    v_pages = np.zeros((B * n, H, page, v.shape[-1]), v.dtype)
    table = order.reshape(B, n)
    for b in range(B):
        for j in range(-(-M // page)):
            width = min(page, M - j * page)
            k_pages[table[b, j], :, :width] = k[b, :, j * page : j * page + width]
            v_pages[table[b, j], :, :width] = v[b, :, j * page : j * page + width]
    return k_pages, v_pages, table, np.full(B, M)


def varlen_path(q, k, v, sink, **kwargs):
    """flash_attention_varlen on the batch packed along the tokens: q (B, H, N, D) as (H, B N, D)."""
    B, H, N = q.shape[:3]
    M = k.shape[2]
    packed = [x.swapaxes(0, 1).reshape(H, -1, x.shape[-1]) for x in (q, k, v)]
    cu_q, cu_k = np.arange(B + 1) * N, np.arange(B + 1) * M
    a, lse = flash_attention_varlen(
        *packed, cu_q, cu_k, learnable_sink=sink, return_lse=True, block_q=3, block_k=4, **kwargs
    )
    return a.reshape(H, B, N, -1).swapaxes(0, 1), lse.reshape(H, B, N).swapaxes(0, 1)


def paged_path(num_splits):
    def run(q, k, v, sink, **kwargs):
        pages = to_pages(k, v, 4, np.random.default_rng(0))
        return paged_attention(q, *pages, learnable_sink=sink, num_splits=num_splits, return_lse=True, **kwargs)

    return run


SINK_PATHS = {
    "fa2": lambda q, k, v, sink, **kw: flash_attention(
        q, k, v, learnable_sink=sink, block_q=3, block_k=4, return_lse=True, **kw
    ),
    "fa1": lambda q, k, v, sink, **kw: flash_attention(
        q, k, v, learnable_sink=sink, block_q=3, block_k=4, order="fa1", return_lse=True, **kw
    ),
    "fa2, 3 workers": lambda q, k, v, sink, **kw: flash_attention(
        q, k, v, learnable_sink=sink, block_q=2, block_k=4, workers=3, return_lse=True, **kw
    ),
    "varlen": varlen_path,
    "paged, 1 split": paged_path(1),
    "paged, 2 splits": paged_path(2),
    "paged, more splits than pages": paged_path(7),
}


def sink_inputs(dtype=np.float64, N=9, M=6, spread=1.0, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 4, N, 5)) * spread
    k, v = rng.standard_normal((2, 4, M, 5)), rng.standard_normal((2, 4, M, 3))
    return tuple(x.astype(dtype) for x in (q, k, v))


@pytest.mark.parametrize("path", list(SINK_PATHS))
@pytest.mark.parametrize("M", [6, 0])
def test_sink_paths_equal_the_formula_rows_without_keys_included(path, M):
    q, k, v = sink_inputs(M=M)  # causal with N = 9 > M: the first rows see no key
    a, lse = SINK_PATHS[path](q, k, v, SINK, causal=True)
    want_a, want_lse = direct_sink(q, k, v, SINK, keep=window_keep(9, M, None, 0))
    assert_close(a, want_a, 1e-12)
    assert_close(lse, want_lse, 1e-12)
    empty = np.arange(9) < 9 - M  # no key: output 0, logsumexp = the sink
    assert np.all(a[:, :, empty] == 0)
    assert np.array_equal(lse[:, :, empty], np.broadcast_to(SINK[:, None], lse[:, :, empty].shape))


@pytest.mark.parametrize("path", list(SINK_PATHS))
def test_minus_inf_sink_is_no_sink_bitwise(path):
    q, k, v = sink_inputs()
    for got, want in zip(
        SINK_PATHS[path](q, k, v, [-np.inf] * 4, causal=True), SINK_PATHS[path](q, k, v, None, causal=True), strict=True
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", list(SINK_PATHS))
def test_sink_above_every_score_overflows_nothing(path):
    import warnings

    q, k, v = sink_inputs(np.float32, spread=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, lse = SINK_PATHS[path](q, k, v, [100.0] * 4, causal=True)
    assert a.dtype == np.float32 and lse.dtype == np.float32
    assert np.isfinite(a).all() and np.isfinite(lse).all()
    assert np.abs(a).max() < 1e-40  # each weight is about exp(-100): the sink takes all the attention
    assert np.array_equal(lse, np.full(lse.shape, 100.0, np.float32))  # 100 + log(1 + about 1e-43) rounds to 100
    want_a, want_lse = direct_sink(q, k, v, [100.0] * 4, keep=window_keep(9, 6, None, 0))
    assert np.abs(a - want_a).max() < 1e-44


@pytest.mark.parametrize("path", list(SINK_PATHS))
def test_nan_sink_makes_its_head_nan(path):
    q, k, v = sink_inputs()
    a, lse = SINK_PATHS[path](q, k, v, [np.nan, 0.0, 1.0, 2.0], causal=True)
    assert np.isnan(a[:, 0]).all() and np.isnan(lse[:, 0]).all()  # rows without a key too: every row sees its sink
    assert np.isfinite(a[:, 1:]).all() and np.isfinite(lse[:, 1:]).all()


@pytest.mark.parametrize("path", list(SINK_PATHS))
def test_sink_with_float16_inputs(path):
    q, k, v = sink_inputs(np.float16)
    a, lse = SINK_PATHS[path](q, k, v, SINK.astype(np.float16), causal=True)
    assert a.dtype == np.float16 and lse.dtype == np.float32  # computed in float32, returned as the inputs
    want_a, want_lse = direct_sink(q, k, v, SINK, keep=window_keep(9, 6, None, 0))
    assert_close(a, want_a, 1e-3)  # float16's rounding of the output (2^-11 = 4.9e-4)
    assert_close(lse, want_lse, 1e-6)


def test_sink_workers_are_bitwise_the_sequential_loop():
    q, k, v = sink_inputs(N=20, M=17)
    one = flash_attention(q, k, v, learnable_sink=SINK, block_q=3, block_k=4, workers=1, return_lse=True)
    many = flash_attention(q, k, v, learnable_sink=SINK, block_q=3, block_k=4, workers=4, return_lse=True)
    for got, want in zip(many, one, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("function", ["varlen", "paged"])
def test_sink_shape_errors_of_the_layouts(function):
    q, k, v = sink_inputs()
    run = varlen_path if function == "varlen" else paged_path(1)
    with pytest.raises(ValueError, match=r"must be \(H,\) = \(4,\)"):
        run(q, k, v, [1.0, 2.0])
    with pytest.raises(TypeError, match="learnable_sink must be real numbers"):
        run(q, k, v, ["a"] * 4)


def test_varlen_sink_is_the_same_for_every_sequence():
    rng = np.random.default_rng(44)
    cu = np.array([0, 3, 3, 8])  # an empty sequence in the middle
    q, k, v = make(rng, 8, 8, 4, 3, (4,))
    a, lse = flash_attention_varlen(
        q, k, v, cu, learnable_sink=SINK, causal=True, block_q=2, block_k=3, return_lse=True
    )
    for s in range(3):
        r = slice(cu[s], cu[s + 1])
        want_a, want_lse = attention(q[:, r], k[:, r], v[:, r], learnable_sink=SINK, causal=True, return_lse=True)
        assert_close(a[:, r], want_a, 1e-12)
        assert_close(lse[:, r], want_lse, 1e-12)


def test_block_mask_counts_in_words_in_each_language():
    """What chapter 13 prints for a block mask's tiles: words, not a dict with English keys (issue 38, 13-3)."""
    import flashmath as fm
    from flashmath.variants import block_mask

    bm = block_mask(6, 10, block_q=2, block_k=2, window=(3, 0))
    assert bm.counts == {"empty": 6, "partial": 6, "full": 3}
    assert bm.counts_text() == "6 empty, 6 partial, 3 full"
    try:
        fm.set_language("zh_CN")
        assert bm.counts_text() == "空块 6、部分块 6、满块 3"
    finally:
        fm.set_language("en")
