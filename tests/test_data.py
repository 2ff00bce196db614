"""The shipped real heads (flashmath/data/heads.npz): file, shapes, read-only cache, probabilities, demo rows."""

import math

import numpy as np
import pytest

from flashmath.data import HEADS_PATH, Heads, load_heads


@pytest.fixture(scope="module")
def h() -> Heads:
    return load_heads()


def softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_file_is_small():
    assert HEADS_PATH.is_file()
    assert HEADS_PATH.stat().st_size < 1_000_000


def test_no_pickle_needed():
    with np.load(HEADS_PATH, allow_pickle=False) as f:
        assert all(f[name].dtype != object for name in f.files)


def test_shapes_and_dtypes(h):
    L, H, T, D = h.q.shape
    assert (L, H, D) == (len(h.layers), len(h.heads), 32)
    for arr in (h.q, h.k, h.v):
        assert arr.shape == (L, H, T, D) and arr.dtype == np.float32
    assert h.probs.shape == (L, H, T, T) and h.probs.dtype == np.float32
    assert h.token_ids.shape == (T,) and h.token_ids.dtype == np.int32
    assert len(h.tokens) == T and all(isinstance(t, str) for t in h.tokens)
    assert h.tokens[0] == "[CLS]" and h.tokens[-1] == "[SEP]" and "[PAD]" not in h.tokens
    assert all(0 <= i < 6 for i in h.layers) and all(0 <= j < 12 for j in h.heads)
    assert h.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert len(h.sha256) == 64
    for arr in (h.q, h.k, h.v, h.probs):
        assert np.isfinite(arr).all()


def test_cached_and_read_only(h):
    assert load_heads() is h
    for arr in (h.q, h.k, h.v, h.probs, h.token_ids):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[(0,) * arr.ndim] = 1
    with pytest.raises(AttributeError):
        h.q = np.zeros(1)


def test_probs_are_softmax_of_scaled_scores(h):
    # P = softmax(Q K^T / sqrt(D)), recomputed in float64 from the stored float32 q and k
    L, H, T, D = h.q.shape
    q, k = h.q.astype(np.float64), h.k.astype(np.float64)
    p = softmax64(q @ k.swapaxes(-1, -2) / math.sqrt(D))  # (L, H, T, T)
    np.testing.assert_allclose(h.probs, p, rtol=0, atol=1e-5)
    np.testing.assert_allclose(h.probs.astype(np.float64).sum(-1), 1.0, rtol=0, atol=1e-5)


def test_scores_and_score_row(h):
    L, H, T, D = h.q.shape
    for li in range(L):
        for hi in range(H):
            x = h.scores(li, hi)
            assert x.shape == (T, T) and x.dtype == np.float64
            expected = h.q[li, hi].astype(np.float64) @ h.k[li, hi].astype(np.float64).T / math.sqrt(D)
            np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(h.score_row(li, hi, T - 1), x[T - 1], rtol=1e-12, atol=1e-12)
    assert h.score_row(0, 0, 0).shape == (T,)


def test_demo_rows_have_many_running_max_jumps(h):
    L, H, T, _ = h.q.shape
    assert len(h.demo_rows) >= 3 and len(h.demo_jumps) == len(h.demo_rows)
    assert len({(li, hi) for li, hi, _ in h.demo_rows}) == len(h.demo_rows)  # distinct heads
    jumps = []
    for li, hi, n in h.demo_rows:
        assert 0 <= li < L and 0 <= hi < H and 0 <= n < T
        g = np.maximum.accumulate(h.score_row(li, hi, n))  # running max g_m = max(x_0..x_m)
        jumps.append(int(np.count_nonzero(g[1:] > g[:-1])))
    assert jumps == list(h.demo_jumps)
    assert min(jumps) >= 3
    assert jumps == sorted(jumps, reverse=True)


@pytest.mark.parametrize(
    "args, match",
    [
        ((3, 0), r"0 <= layer < 3 .*layers = \(0, 2, 5\)"),
        ((5, 0), r"0 <= layer < 3"),
        ((-1, 0), r"0 <= layer < 3"),
        ((0, 8), r"0 <= head < 8"),
        ((0, 0, 46), r"0 <= query < 46"),
        ((0, 0, -1), r"0 <= query < 46"),
    ],
)
def test_bad_index_raises_with_valid_range(h, args, match):
    assert h.q.shape[:3] == (3, 8, 46)  # the messages below name these sizes
    with pytest.raises(IndexError, match=match):
        (h.scores if len(args) == 2 else h.score_row)(*args)


@pytest.mark.parametrize("bad", [1.0, "0", True, None])
def test_non_integer_index_raises_type_error(h, bad):
    with pytest.raises(TypeError, match="integer position"):
        h.scores(bad, 0)
    with pytest.raises(TypeError, match="integer position"):
        h.score_row(0, 0, bad)


def test_numpy_integer_indices_work(h):
    np.testing.assert_array_equal(h.scores(np.int64(1), np.int32(2)), h.scores(1, 2))
