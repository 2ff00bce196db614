"""Chapter 13's variants against PyTorch's scaled_dot_product_attention (enable_gqa, boolean masks): grouped-query
heads, windows, packed sequences and a paged cache. Not in the fast tier: importing torch takes seconds."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, make, paged_case, window_keep

from flashmath.flash import flash_attention
from flashmath.packed import flash_attention_varlen, gather_pages, paged_attention

TOL32 = 2e-5
SIZES = [(7, 11), (11, 7), (1, 9), (9, 1), (16, 16), (5, 5)]


@pytest.mark.parametrize("N, M", SIZES)
@pytest.mark.parametrize("H, H_kv", [(4, 2), (6, 1), (3, 3)])
def test_gqa_matches_pytorch_sdpa(N, M, H, H_kv):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(N * 100 + M + H)
    q = rng.standard_normal((2, H, N, 8))
    k = rng.standard_normal((2, H_kv, M, 8))
    v = rng.standard_normal((2, H_kv, M, 5))
    got = flash_attention(q, k, v, enable_gqa=True, block_q=3, block_k=4)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), enable_gqa=True
    ).numpy()
    assert_close(got, want, 1e-10)


@pytest.mark.parametrize("window", [(2, 3), (None, 1), (0, 0)])
def test_window_matches_pytorch_masked_sdpa(window):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    q, k, v = make(rng, 5, 12, 4, 3, (2,))
    keep = window_keep(5, 12, *window)
    got = flash_attention(q, k, v, window=window, block_q=2, block_k=5)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=torch.from_numpy(keep)
    ).numpy()
    assert_close(got, want, 1e-10)


def test_varlen_matches_pytorch_per_sequence_with_gqa():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    cu = np.array([0, 4, 11, 12])
    q, k, v = rng.standard_normal((4, 12, 8)), rng.standard_normal((2, 12, 8)), rng.standard_normal((2, 12, 8))
    got = flash_attention_varlen(q, k, v, cu, cu, causal=True, enable_gqa=True, block_q=4, block_k=4)
    for s in range(3):
        r = slice(cu[s], cu[s + 1])
        want = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(a[:, r]) for a in (q, k, v)), is_causal=True, enable_gqa=True
        ).numpy()
        assert_close(got[:, r], want, 1e-10)


def test_paged_decoding_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(18)
    k_pages, v_pages, table, lens = paged_case(rng, [9, 3], 4, 2, 8, 8)
    q = rng.standard_normal((2, 2, 1, 8)).astype(np.float32)
    got = paged_attention(q, k_pages.astype(np.float32), v_pages.astype(np.float32), table, lens, num_splits=2)
    assert got.dtype == np.float32
    for b in range(2):
        k, v = gather_pages(k_pages, table, lens, b), gather_pages(v_pages, table, lens, b)
        want = torch.nn.functional.scaled_dot_product_attention(
            torch.from_numpy(q[b].astype(np.float64)), torch.from_numpy(k), torch.from_numpy(v)
        ).numpy()
        assert_close(got[b], want, TOL32)


def gpt_oss_eager(torch, q, k, v, sinks, keep=None):
    """HF transformers' GPT-OSS eager attention (models/gpt_oss/modeling_gpt_oss.py, eager_attention_forward) on
    (B, H, N, D) tensors: the scaled scores, the additive mask, the sink column concatenated, the row max
    subtracted, softmax, the sink column dropped before P V."""
    scores = q @ k.transpose(2, 3) * q.shape[-1] ** -0.5
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    column = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
    combined = torch.cat([scores, column], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)
    return probs[..., :-1] @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dq_mode", ["atomic", "separate"])
def test_sink_gradient_matches_autograd_on_the_gpt_oss_formula(causal, dq_mode):
    torch = pytest.importorskip("torch")
    from flashmath.backward import attention_backward

    rng = np.random.default_rng(30)
    q, k, v = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((2, 4, 7, 8)), rng.standard_normal((2, 4, 7, 5))
    sinks = np.array([-1.0, 0.3, 2.5, 9.0])
    grad_a = rng.standard_normal((2, 4, 9, 5))
    keep = window_keep(9, 7, None, 0) if causal else None  # N > M: the first two rows see no key
    a, lse = flash_attention(q, k, v, causal=causal, learnable_sink=sinks, return_lse=True, block_q=4, block_k=3)
    grads = attention_backward(
        q, k, v, a, lse, grad_a, causal=causal, learnable_sink=sinks, block_q=4, block_k=3, dq_mode=dq_mode
    )
    tensors = [torch.tensor(x, requires_grad=True) for x in (q, k, v, sinks)]
    out = gpt_oss_eager(torch, *tensors, None if keep is None else torch.from_numpy(keep))
    out.backward(torch.from_numpy(grad_a))
    if causal:  # autograd's softmax of a row with no key but the sink: its key weights are 0, A = 0
        assert torch.all(out[:, :, :2] == 0)
    assert_close(a, out.detach().numpy(), 1e-12)
    for got, t in zip(grads, tensors, strict=True):
        assert got.shape == tuple(t.shape)
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)
