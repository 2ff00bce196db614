"""Dropout fused into the tiled attention and replayed by the backward (flashmath.dropout, chapter 12): the mask is a
function of (seed, offset, row, key) alone, the forward and backward equal a dense reference with the whole mask,
and PyTorch's autograd where PyTorch is installed."""

import importlib.util
import math

import numpy as np
import pytest

import flashmath as fm
from flashmath import dropout as fd

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def dense(q, k, v, grad_a, z):
    """Attention with the dropout mask ``z`` (keep / (1 - p), the whole N x M array) and its gradients, computed as
    whole matrices; ``D`` as rowsum(Y * dY), the other form than the module's."""
    scale = 1 / math.sqrt(q.shape[1])
    x = scale * q @ k.T
    y = np.exp(x - x.max(axis=1, keepdims=True))
    y /= y.sum(axis=1, keepdims=True)
    a = (y * z) @ v
    dv = (y * z).T @ grad_a
    dy = (grad_a @ v.T) * z
    dx = y * (dy - np.sum(y * dy, axis=1, keepdims=True))
    return a, (scale * dx @ k, scale * dx.T @ q, dv)


def inputs(rng, N, M, D, Dv=None):
    Dv = D if Dv is None else Dv
    return tuple(rng.standard_normal(shape) for shape in ((N, D), (M, D), (M, Dv), (N, Dv)))


@pytest.mark.parametrize("r0, r1, c0, c1", [(0, 1, 0, 1), (3, 9, 5, 18), (0, 37, 27, 29), (10, 37, 1, 2), (5, 5, 3, 3)])
def test_a_tile_of_the_mask_is_its_block_of_the_whole_mask(r0, r1, c0, c1):
    whole = fd.dropout_keep(7, 2, 0, 37, 0, 29, 0.3)
    assert whole.dtype == bool and whole.shape == (37, 29)
    np.testing.assert_array_equal(fd.dropout_keep(7, 2, r0, r1, c0, c1, 0.3), whole[r0:r1, c0:c1])


def test_the_mask_keeps_about_one_minus_p_and_changes_with_the_seed_and_the_offset():
    mask = fd.dropout_keep(1, 0, 0, 200, 0, 300, 0.2)
    assert abs(mask.mean() - 0.8) < 0.01  # 60,000 draws: the standard deviation of the mean is 0.0016
    assert not np.array_equal(mask, fd.dropout_keep(2, 0, 0, 200, 0, 300, 0.2))
    assert not np.array_equal(mask, fd.dropout_keep(1, 1, 0, 200, 0, 300, 0.2))
    assert fd.dropout_keep(1, 0, 0, 20, 0, 30, 0.0).all()
    # a larger p drops a superset: the same uniform numbers, another threshold
    assert not (fd.dropout_keep(1, 0, 0, 20, 0, 30, 0.5) & ~fd.dropout_keep(1, 0, 0, 20, 0, 30, 0.2)).any()


@pytest.mark.parametrize(
    "N, M, D, Dv, blocks",
    [(37, 29, 8, 8, (16, 16)), (1, 20, 4, 6, (16, 7)), (12, 1, 3, 3, (5, 5)), (9, 33, 5, 2, (4, 8))],
)
@pytest.mark.parametrize("p", [0.0, 0.1, 0.6])
def test_forward_and_backward_equal_the_dense_reference(N, M, D, Dv, blocks, p):
    rng = np.random.default_rng(N * M + D)
    q, k, v, grad_a = inputs(rng, N, M, D, Dv)
    z = fd.dropout_keep(5, 9, 0, N, 0, M, p) / (1 - p)
    a_ref, grads_ref = dense(q, k, v, grad_a, z)
    a, lse = fd.dropout_attention(q, k, v, p, 5, 9, block_q=blocks[0], block_k=blocks[1])
    np.testing.assert_allclose(a, a_ref, atol=1e-12)
    np.testing.assert_allclose(lse, fm.attention(q, k, v, return_lse=True)[1], atol=1e-12)  # dropout's L is softmax's
    for bq, bk in (blocks, (3, 5), (64, 64)):  # the backward's tiles need not be the forward's
        grads = fd.dropout_attention_backward(q, k, v, a, lse, grad_a, p, 5, 9, block_q=bq, block_k=bk)
        for got, want in zip(grads, grads_ref, strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, atol=1e-12)


def test_without_dropout_it_is_attention_and_its_backward():
    rng = np.random.default_rng(3)
    q, k, v, grad_a = inputs(rng, 20, 13, 4)
    a, lse = fd.dropout_attention(q, k, v, 0.0, 0)
    np.testing.assert_allclose(a, fm.attention(q, k, v), atol=1e-13)
    grads = fd.dropout_attention_backward(q, k, v, a, lse, grad_a, 0.0, 0)
    for got, want in zip(grads, fm.attention_backward(q, k, v, a, lse, grad_a), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-13)


@pytest.mark.skipif(not HAVE_TORCH, reason='PyTorch is not installed: see README, "The triton extra"')
def test_the_gradients_equal_pytorchs_autograd():
    import torch

    rng = np.random.default_rng(4)
    q, k, v, grad_a = inputs(rng, 23, 17, 8)
    p = 0.3
    a, lse = fd.dropout_attention(q, k, v, p, 11, 0, block_q=8, block_k=8)
    grads = fd.dropout_attention_backward(q, k, v, a, lse, grad_a, p, 11, 0, block_q=16, block_k=4)
    z = torch.from_numpy(fd.dropout_keep(11, 0, 0, 23, 0, 17, p) / (1 - p))
    ts = [torch.tensor(t, requires_grad=True) for t in (q, k, v)]
    out = (torch.softmax(ts[0] @ ts[1].T / math.sqrt(8), dim=-1) * z) @ ts[2]
    out.backward(torch.from_numpy(grad_a))
    np.testing.assert_allclose(a, out.detach().numpy(), atol=1e-13)
    for got, t in zip(grads, ts, strict=True):
        np.testing.assert_allclose(got, t.grad.numpy(), atol=1e-13)


def test_the_bytes_saved():
    assert fd.RNG_STATE_BYTES == 16
    assert fd.dropout_mask_bytes(8192, 8192) == 64 * 2**20
    assert fd.dropout_mask_bytes(8192, 8192, bits=True) == 8 * 2**20
    assert fd.dropout_mask_bytes(3, 3, heads=2, bits=True) == 3  # 18 bits: 3 bytes
    assert fd.dropout_mask_bytes(0, 5) == 0


def test_bad_arguments_are_refused():
    q, k, v, grad_a = inputs(np.random.default_rng(0), 4, 5, 3)
    for p in (1.0, -0.1, 2):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            fd.dropout_keep(0, 0, 0, 2, 0, 2, p)
    with pytest.raises(TypeError, match="p must be a number"):
        fd.dropout_attention(q, k, v, "0.1", 0)
    with pytest.raises(TypeError, match="seed"):
        fd.dropout_keep(1.5, 0, 0, 2, 0, 2, 0.1)
    with pytest.raises(ValueError, match="seed must be in"):
        fd.dropout_keep(-1, 0, 0, 2, 0, 2, 0.1)
    with pytest.raises(ValueError, match="c1 must be >= 3"):
        fd.dropout_keep(0, 0, 0, 2, 3, 2, 0.1)
    with pytest.raises(ValueError, match="two-dimensional"):
        fd.dropout_attention(q[None], k, v, 0.1, 0)
    with pytest.raises(ValueError, match="at least one key"):
        fd.dropout_attention(q, k[:0], v[:0], 0.1, 0)
    a, lse = fd.dropout_attention(q, k, v, 0.1, 0)
    with pytest.raises(ValueError, match="expected a, grad_a"):
        fd.dropout_attention_backward(q, k, v, a, lse[:-1], grad_a, 0.1, 0)
