"""flashmath.triton_backward: the backward kernels against PyTorch's autograd and against attention_backward.

Without a GPU the kernels run in Triton's interpreter; the tests are skipped, saying so, without the ``triton``
extra. Sizes stay small (the interpreter runs each program in Python). References: PyTorch's
``scaled_dot_product_attention`` differentiated by autograd in float64 where every row attends some key, and
:func:`flashmath.attention_backward` (numpy, float64) everywhere, fully masked rows included (PyTorch 2.13 gives such a
row output 0 and gradients 0, as attention_backward does; releases of 2023 gave NaN). float16 follows FlashAttention's
relative rule (flash-attention/tests/test_flash_attn.py, whose gradient tests take multipliers of 2 to 8, 3 in
test_flash_attn_output) with its strictest multiplier, 2: the kernels' gradient error against a float64 reference of
the same float16 inputs is at most twice that of naive attention computed and differentiated in float16.
"""

import numpy as np
import pytest
from helpers import HAVE_TRITON, needs_triton

import flashmath as fm
from flashmath.masks import causal_mask, padding_mask

pytestmark = needs_triton
if HAVE_TRITON:
    import torch
    import torch.nn.functional as F

    from flashmath import triton_backward as tb
    from flashmath import triton_kernel as tk
    from flashmath.triton_kernel import triton_flash_attention

TOL = 5e-6  # float32: |grad - grad_ref| <= TOL * (1 + max |grad_ref|); measured errors are below 1e-6


def inputs(seed, N, M, D, Dv, batch=()):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(batch + shape) for shape in ((N, D), (M, D), (M, Dv)))
    grad_a = rng.standard_normal(batch + (N, Dv))
    return rng, q, k, v, grad_a


def kernel_grads(q, k, v, grad_a, dtype=torch.float32 if HAVE_TRITON else None, **kwargs):
    """The kernels' (a, dq, dk, dv) through autograd, for float64 numpy inputs cast to ``dtype``."""
    qt, kt, vt = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v))
    a = triton_flash_attention(qt, kt, vt, **kwargs)
    a.backward(torch.tensor(grad_a, dtype=dtype))
    return a.detach(), qt.grad, kt.grad, vt.grad


def sdpa_grads(q, k, v, grad_a, *, causal=False, mask=None, scale=None):
    """PyTorch's scaled_dot_product_attention, differentiated by autograd, in float64 (masks as boolean tensors:
    SDPA's own is_causal is top-left aligned, the course's causal is bottom-right)."""
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    N, M = q.shape[-2], k.shape[-2]
    keep = None
    if mask is not None:  # as (N, M), or (..., N, M) for a mask with more dimensions than the inputs allow
        mask = np.asarray(mask)
        while mask.ndim > max(q.ndim, 2) and mask.shape[0] == 1:
            mask = mask[0]
        keep = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(mask, mask.shape[:-2] + (N, M))))
    if causal:
        c = torch.from_numpy(causal_mask(N, M))
        keep = c if keep is None else keep & c
    a = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=keep, scale=scale)
    a.backward(torch.from_numpy(grad_a))
    return qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def numpy_grads(q, k, v, grad_a, **kwargs):
    a, lse = fm.attention(q, k, v, return_lse=True, **kwargs)
    return fm.attention_backward(q, k, v, a, lse, grad_a, **kwargs)


def assert_grads_close(grads, refs, tol=TOL):
    for name, g, ref in zip(("dq", "dk", "dv"), grads, refs, strict=True):
        g = np.asarray(g.double() if isinstance(g, torch.Tensor) else g, np.float64)
        assert g.shape == ref.shape, f"{name}: shape {g.shape}, expected {ref.shape}"
        assert np.isfinite(g).all(), f"{name}: not finite"
        err = np.abs(g - ref).max(initial=0)
        assert err <= tol * (1 + np.abs(ref).max(initial=0)), f"{name}: max error {err:.2e}"


# (id, N, M, D, Dv, block_q, block_k, keyword arguments); every row attends some key: SDPA is the reference
SDPA_CASES = [
    ("N != M", 40, 30, 16, 24, 16, 16, {}),
    ("N < M, sizes not multiples of the tiles", 33, 70, 24, 40, 16, 32, {}),
    ("N = 1 (decoding)", 1, 50, 16, 16, 16, 16, {}),
    ("M = 1", 20, 1, 16, 16, 16, 16, {}),
    ("D = 128, Dv = 8", 20, 24, 128, 8, 16, 16, {}),
    ("causal, N < M (bottom-right)", 33, 70, 16, 16, 16, 16, {"causal": True}),
    ("causal, N = M", 45, 45, 16, 16, 16, 32, {"causal": True}),
    ("key padding", 30, 40, 16, 16, 16, 16, {"mask": padding_mask([27], 40)[0]}),
    ("a scale of 0.3", 30, 20, 16, 16, 16, 16, {"scale": 0.3}),
]


@pytest.mark.parametrize("dq_mode", ["separate", "atomic"])
@pytest.mark.parametrize("name, N, M, D, Dv, block_q, block_k, kwargs", SDPA_CASES, ids=[c[0] for c in SDPA_CASES])
def test_float32_equals_sdpa_autograd(name, N, M, D, Dv, block_q, block_k, kwargs, dq_mode):
    _, q, k, v, grad_a = inputs(N * 100 + M, N, M, D, Dv)
    a, *grads = kernel_grads(q, k, v, grad_a, block_q=block_q, block_k=block_k, dq_mode=dq_mode, **kwargs)
    assert a.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    assert_grads_close(grads, sdpa_grads(q, k, v, grad_a, **kwargs))


# cases with fully masked rows (SDPA gave NaN there before PyTorch 2.13's 0): attention_backward is the reference
MASKED_CASES = [
    ("causal, N > M: the first rows are fully masked", 50, 30, 16, 16, 16, 16, {"causal": True}),
    ("a random mask with fully masked rows and keys", 40, 50, 16, 16, 16, 16, {"mask": "random"}),
    ("key padding and causal", 40, 40, 16, 16, 16, 32, {"mask": padding_mask([29], 40)[0], "causal": True}),
    ("top-left causal as a mask", 30, 45, 16, 16, 16, 16, {"mask": causal_mask(30, 45, align="top-left")}),
    ("every key masked", 20, 30, 16, 16, 16, 16, {"mask": np.zeros((20, 30), bool)}),
]


@pytest.mark.parametrize("dq_mode", ["separate", "atomic"])
@pytest.mark.parametrize("name, N, M, D, Dv, block_q, block_k, kwargs", MASKED_CASES, ids=[c[0] for c in MASKED_CASES])
def test_masked_equals_attention_backward(name, N, M, D, Dv, block_q, block_k, kwargs, dq_mode):
    rng, q, k, v, grad_a = inputs(N * 100 + M + 1, N, M, D, Dv)
    if isinstance(kwargs.get("mask"), str):
        keep = rng.random((N, M)) < 0.3
        keep[::7] = False  # fully masked rows
        keep[:, 5] = False  # a key no row attends
        kwargs = {**kwargs, "mask": keep}
    q32, k32, v32 = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
    refs = numpy_grads(q32, k32, v32, grad_a, **kwargs)
    a, *grads = kernel_grads(q, k, v, grad_a, block_q=block_q, block_k=block_k, dq_mode=dq_mode, **kwargs)
    assert_grads_close(grads, refs)
    keep = np.asarray(kwargs.get("mask", True))
    keep = np.broadcast_to(keep.reshape(keep.shape[-2:]) if keep.ndim > 2 else keep, (N, M))
    if kwargs.get("causal"):
        keep = keep & causal_mask(N, M)
    empty_rows, empty_keys = ~keep.any(axis=1), ~keep.any(axis=0)
    assert empty_rows.any() or empty_keys.any()
    assert (grads[0][empty_rows] == 0).all(), "a fully masked row gets exactly 0 in dq"
    assert (a[empty_rows] == 0).all()
    assert (grads[1][empty_keys] == 0).all() and (grads[2][empty_keys] == 0).all(), "a masked key gets exactly 0"


@pytest.mark.parametrize("dq_mode", ["separate", "atomic"])
def test_masked_keys_holding_nan_get_zero_and_leak_nothing(dq_mode):
    _, q, k, v, grad_a = inputs(7, 30, 40, 16, 16)
    keep = padding_mask([25], 40)[0]  # the last 15 keys are padding
    refs = sdpa_grads(q, k, v, grad_a, mask=keep)
    k_nan, v_nan = k.copy(), v.copy()
    k_nan[25:], v_nan[25:] = np.nan, np.nan
    _, *grads = kernel_grads(q, k_nan, v_nan, grad_a, block_q=16, block_k=16, mask=keep, dq_mode=dq_mode)
    assert (grads[1][25:] == 0).all() and (grads[2][25:] == 0).all()
    assert_grads_close([grads[0], grads[1][:25], grads[2][:25]], [refs[0], refs[1][:25], refs[2][:25]])


def test_fully_masked_rows_holding_nan_reach_no_key():
    _, q, k, v, grad_a = inputs(8, 40, 25, 16, 16)
    q_nan, grad_nan = q.copy(), grad_a.copy()
    q_nan[:15], grad_nan[:15] = np.nan, np.nan  # causal with N - M = 15: the first 15 rows see no key
    refs = numpy_grads(
        q.astype(np.float32).astype(np.float64),
        k.astype(np.float32).astype(np.float64),
        v.astype(np.float32).astype(np.float64),
        grad_a,
        causal=True,
    )
    _, dq, dk, dv = kernel_grads(q_nan, k, v, grad_nan, block_q=16, block_k=16, causal=True)
    assert (dq[:15] == 0).all()
    assert_grads_close([dq[15:], dk, dv], [refs[0][15:], refs[1], refs[2]])


def test_nan_in_an_attended_key_gives_nan_gradients():
    _, q, k, v, grad_a = inputs(9, 20, 20, 16, 16)
    k[3, 0] = np.nan
    _, dq, dk, dv = kernel_grads(q, k, v, grad_a, block_q=16, block_k=16)
    assert torch.isnan(dq).all() and torch.isnan(dk[3]).all()  # every row attends key 3


@pytest.mark.parametrize("dq_mode", ["separate", "atomic"])
def test_nan_in_the_k_row_of_a_key_some_rows_of_the_tile_mask_reaches_their_dq(dq_mode):
    """Chapter 12 and flashmath.inputs: the k row of a key that some rows of a query tile attend and others mask
    enters the tile's ``dX K`` product with weight 0 for the rows that mask it, so a NaN there makes their dQ NaN
    (numpy selects it away: finite), while a finite value gives numpy's dQ to float32 rounding (review rev-f-12-1)."""
    _, q, k, v, grad_a = inputs(5, 8, 8, 16, 16)
    grad_a[5:] = 0  # the loss reads rows 0-4 only: causal, they mask key 5 (rows 5-7 attend it, one tile of 16)
    k_nan = k.copy()
    k_nan[5] = np.nan
    ref_dq = numpy_grads(q, k_nan, v, grad_a, causal=True)[0]
    kw = dict(block_q=16, block_k=16, causal=True, dq_mode=dq_mode)
    a, dq, _, _ = kernel_grads(q, k_nan, v, grad_a, **kw)
    assert torch.isfinite(a[:5]).all() and torch.isnan(a[5:]).all()  # the forward selects the score away
    assert np.isfinite(ref_dq[:5]).all() and np.isnan(ref_dq[5:]).all()
    assert torch.isnan(dq).any(dim=1).all(), "rows 0-4 too: their dX is 0 at key 5, and 0 x NaN is NaN"
    k_big = k.copy()
    k_big[5] = 1e3  # finite: weight 0 times a number is 0, the kernels' rows 0-4 equal numpy's
    _, dq, _, _ = kernel_grads(q, k_big, v, grad_a, **kw)
    err = np.abs(dq[:5].double().numpy() - ref_dq[:5]).max()
    assert err <= TOL * (1 + np.abs(ref_dq[:5]).max()), f"dq rows 0-4: max error {err:.2e}"


def test_nan_in_the_q_or_da_row_of_a_query_reaches_the_dk_or_dv_of_the_keys_it_masks():
    """The same exception through ``dX^T Q`` and ``Y^T dA``: causal, N = M = 32, key tiles of 16; row 2 attends keys
    0-2 and masks keys 3-15 of its key tile; a NaN in its q row reaches their dK, a NaN in its dA row their dV (numpy:
    keys 0-2 only). Keys 16-31, which row 2 masks too, stay finite: in their key tile row 2 attends no key, so its q
    and dA rows are not loaded there (``row_used``; review rev-f-12-1 of round 23)."""
    _, q, k, v, grad_a = inputs(5, 32, 32, 16, 16)
    for which, grad in (("q", 1), ("grad_a", 2)):  # dk from q, dv from dA
        q_nan, grad_nan = q.copy(), grad_a.copy()
        (q_nan if which == "q" else grad_nan)[2] = np.nan
        ref = numpy_grads(q_nan, k, v, grad_nan, causal=True)[grad]
        got = kernel_grads(q_nan, k, v, grad_nan, block_q=16, block_k=16, causal=True)[1 + grad]
        assert np.isnan(ref[:3]).all() and np.isfinite(ref[3:]).all(), which
        assert torch.isnan(got[:16]).any(dim=1).all(), f"NaN in {which}[2]: keys 3-15 too (0 x NaN)"
        assert torch.isfinite(got[16:]).all(), f"NaN in {which}[2]: keys 16-31, another key tile, stay finite"
        assert np.abs(got[16:].double().numpy() - ref[16:]).max() <= TOL * (1 + np.abs(ref[16:]).max()), which


def test_batch_heads_and_broadcast_leading_dimensions():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 20, 16))
    k, v = rng.standard_normal((1, 3, 30, 16)), rng.standard_normal((2, 1, 30, 16))  # broadcast over batch, heads
    grad_a = rng.standard_normal((2, 3, 20, 16))
    _, *grads = kernel_grads(q, k, v, grad_a, block_q=16, block_k=16, causal=True)
    assert [tuple(g.shape) for g in grads] == [q.shape, k.shape, v.shape]
    assert_grads_close(grads, sdpa_grads(q, k, v, grad_a, causal=True))


@pytest.mark.parametrize("causal", [False, True])
def test_float16_error_at_most_twice_naive_float16(causal):
    _, q, k, v, grad_a = inputs(16, 48, 64, 32, 32)  # N <= M: no fully masked row
    q, k, v, grad_a = (fm.round_to(x, np.float16).astype(np.float64) for x in (q, k, v, grad_a))  # same inputs for all
    refs = sdpa_grads(q, k, v, grad_a, causal=True) if causal else sdpa_grads(q, k, v, grad_a)
    a, *grads = kernel_grads(q, k, v, grad_a, dtype=torch.float16, block_q=16, block_k=32, causal=causal)
    assert a.dtype == torch.float16 and all(g.dtype == torch.float16 for g in grads)
    # naive attention in float16, differentiated by autograd in float16 (as PyTorch would train it)
    q16, k16, v16 = (torch.tensor(x, dtype=torch.float16, requires_grad=True) for x in (q, k, v))
    x = (q16 @ k16.transpose(-1, -2)) * 32**-0.5
    if causal:
        x = x.masked_fill(~torch.from_numpy(causal_mask(48, 64)), float("-inf"))
    (torch.softmax(x, dim=-1) @ v16).backward(torch.tensor(grad_a, dtype=torch.float16))
    naive = (q16.grad, k16.grad, v16.grad)
    for name, g, g_naive, ref in zip(("dq", "dk", "dv"), grads[:3], naive, refs[:3], strict=True):
        err = np.abs(g.double().numpy() - ref).max()
        err_naive = np.abs(g_naive.double().numpy() - ref).max()
        assert err <= 2 * err_naive, f"{name}: kernel error {err:.2e} > 2 x naive float16 error {err_naive:.2e}"


def test_the_two_dq_modes_agree_and_separate_is_reproducible():
    _, q, k, v, grad_a = inputs(5, 40, 50, 16, 16)
    separate = [kernel_grads(q, k, v, grad_a, block_q=16, block_k=16, causal=True)[1] for _ in range(2)]
    atomic = kernel_grads(q, k, v, grad_a, block_q=16, block_k=16, causal=True, dq_mode="atomic")[1]
    assert torch.equal(separate[0], separate[1])
    np.testing.assert_allclose(atomic.numpy(), separate[0].numpy(), rtol=1e-5, atol=1e-6)


def test_numpy_inputs_give_numpy_gradients_equal_to_attention_backward():
    _, q, k, v, grad_a = inputs(4, 30, 20, 16, 8)
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, return_lse=True)
    grads = tb.triton_attention_backward(q, k, v, a, lse, grad_a.astype(np.float32), block_q=16, block_k=16)
    assert all(isinstance(g, np.ndarray) and g.dtype == np.float32 for g in grads)
    assert_grads_close(
        grads, fm.attention_backward(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), a, lse, grad_a)
    )


def test_empty_sizes_and_inputs_untouched():
    _, q, k, v, grad_a = inputs(2, 20, 0, 16, 16)
    _, dq, dk, dv = kernel_grads(q, k, v, grad_a, block_q=16, block_k=16)
    assert (dq == 0).all() and dk.shape == (0, 16) and dv.shape == (0, 16)
    _, q, k, v, grad_a = inputs(2, 20, 20, 16, 16)
    q32 = q.astype(np.float32)
    before = q32.copy()
    a, lse = triton_flash_attention(q32, k.astype(np.float32), v.astype(np.float32), return_lse=True)
    tb.triton_attention_backward(q32, k.astype(np.float32), v.astype(np.float32), a, lse, grad_a.astype(np.float32))
    np.testing.assert_array_equal(q32, before)


def test_no_grad_gives_a_plain_tensor():
    q = torch.randn(20, 16, requires_grad=True)
    with torch.no_grad():
        a = triton_flash_attention(q, q, q, block_q=16, block_k=16)
    assert not a.requires_grad
    a, lse = triton_flash_attention(q, q, q, block_q=16, block_k=16, return_lse=True)
    assert a.requires_grad and not lse.requires_grad


def test_bad_arguments_are_named():
    q = torch.randn(20, 16, requires_grad=True)
    with pytest.raises(ValueError, match="dq_mode"):
        triton_flash_attention(q, q, q, dq_mode="fast")
    with pytest.raises(TypeError, match="PyTorch tensors"):
        tk.differentiable_attention(np.zeros((4, 16), np.float32), q, q)
    a, lse = triton_flash_attention(q.detach(), q.detach(), q.detach(), return_lse=True)
    with pytest.raises(ValueError, match="grad_a must have shape"):
        tb.triton_attention_backward(q.detach(), q.detach(), q.detach(), a, lse, a[:3])
    with pytest.raises(TypeError, match="float64"):
        tb.triton_attention_backward(
            *(np.zeros((4, 16)) for _ in range(3)), np.zeros((4, 16)), np.zeros(4), np.zeros((4, 16))
        )
    with pytest.raises(ValueError, match="block_k"):
        tb.triton_attention_backward(q.detach(), q.detach(), q.detach(), a, lse, a, block_k=8)


def test_a_bad_dq_mode_is_refused_wherever_it_is_accepted():
    # the message names the allowed values, on every path that takes dq_mode (not only the differentiable one)
    q = torch.randn(20, 16, requires_grad=True)
    d = q.detach()
    a, lse = triton_flash_attention(d, d, d, return_lse=True)
    allowed = r"dq_mode must be one of \('separate', 'atomic'\).*got 'fast'"
    for call in (
        lambda: triton_flash_attention(q, q, q, dq_mode="fast"),
        lambda: triton_flash_attention(d, d, d, dq_mode="fast"),
        lambda: tk.differentiable_attention(q, q, q, dq_mode="fast"),
        lambda: tb.triton_attention_backward(d, d, d, a, lse, a, dq_mode="fast"),
        lambda: tb.backward_schedule(20, 20, 16, 16, dq_mode="fast"),
    ):
        with pytest.raises(ValueError, match=allowed):
            call()


def test_kernel_sources_carry_the_rules():
    sources = "\n".join(tb.backward_kernel_source(name) for name in ("_bwd_delta", "_bwd_dkdv", "_bwd_dq"))
    for rule in tb.BACKWARD_RULES:
        assert f"# {rule}" in sources, rule
    assert "tl.atomic_add" in tb.backward_kernel_source("_bwd_dkdv")
    with pytest.raises(ValueError, match="_bwd_dq"):
        tb.backward_kernel_source("dq")


# -- chapter 13's learnable sink and grouped-query heads in the backward ---------------------------------------------
# The reference is GPT-OSS's eager formula (openai/gpt-oss, gpt_oss/torch/model.py, sdpa): the sink column
# concatenated to the scaled, masked scores, softmax, the column dropped before P V; differentiated by PyTorch's
# autograd in float64, sink included. The kernels compute in float32: TOL as above (measured errors below 1e-6).

SINKS = np.array([-1.0, 0.5, 3.0, 40.0])  # one per query head; 40 is above every score


def gpt_oss_grads(q, k, v, sink, grad_a, *, causal=False, mask=None, enable_gqa=False):
    """(dq, dk, dv, d sink) of GPT-OSS's formula by autograd in float64; a row with no key is fine here (the sink
    column keeps its softmax finite)."""
    qt, kt, vt, st = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v, sink))
    k_, v_ = kt, vt
    if enable_gqa:  # query head h reads kv head h // G
        G = q.shape[-3] // k.shape[-3]
        k_, v_ = kt.repeat_interleave(G, dim=-3), vt.repeat_interleave(G, dim=-3)
    N, M = q.shape[-2], k.shape[-2]
    x = (qt @ k_.transpose(-1, -2)) / np.sqrt(q.shape[-1])
    keep = torch.ones((N, M), dtype=torch.bool)
    if mask is not None:
        keep = keep & torch.from_numpy(np.asarray(mask))
    if causal:
        keep = keep & torch.from_numpy(causal_mask(N, M))
    x = x.masked_fill(~keep, float("-inf"))
    column = st.reshape(st.shape + (1, 1)).expand(*x.shape[:-1], 1)  # (H,) or (B, H): a sink per query head
    w = torch.softmax(torch.cat([x, column], dim=-1), dim=-1)[..., :-1]
    (w @ v_).backward(torch.from_numpy(grad_a))
    return [t.grad.numpy() for t in (qt, kt, vt, st)]


def sink_kernel_grads(q, k, v, sink, grad_a, dtype=torch.float32 if HAVE_TRITON else None, **kwargs):
    """The kernels' (a, dq, dk, dv, d sink) through autograd, the sink a float32 tensor that requires grad."""
    qt, kt, vt = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v))
    st = torch.tensor(np.asarray(sink), dtype=torch.float32, requires_grad=True)
    a = triton_flash_attention(qt, kt, vt, learnable_sink=st, **kwargs)
    a.backward(torch.tensor(grad_a, dtype=dtype))
    return a.detach(), qt.grad, kt.grad, vt.grad, st.grad


def assert_sink_grads_close(grads, refs, tol=TOL):
    """The four gradients within ``tol * (1 + max |ref|)`` of the reference; returns the four max errors."""
    errors = []
    for name, g, ref in zip(("dq", "dk", "dv", "dsink"), grads, refs, strict=True):
        g = g.double().numpy()
        assert g.shape == ref.shape, f"{name}: shape {g.shape}, expected {ref.shape}"
        assert np.isfinite(g).all(), f"{name}: not finite"
        err = np.abs(g - ref).max(initial=0)
        assert err <= tol * (1 + np.abs(ref).max(initial=0)), f"{name}: max error {err:.2e}"
        errors.append(err)
    return errors


# (id, N, M, H, H_kv, keyword arguments); q (2, H, N, 16), k and v (2, H_kv, M, 16)
SINK_CASES = [
    ("N != M", 40, 30, 4, 4, {}),
    ("causal, N < M", 24, 45, 4, 4, {"causal": True}),
    ("causal, N > M: the first rows see no key, only the sink", 40, 25, 4, 4, {"causal": True}),
    ("a mask with a row and a key that see nothing", 30, 36, 4, 4, {"mask": "random"}),
    ("grouped-query heads, G = 2", 30, 40, 4, 2, {"enable_gqa": True}),
    ("grouped-query heads, G = 4, causal, N > M", 36, 20, 4, 1, {"enable_gqa": True, "causal": True}),
]


@pytest.mark.parametrize("dq_mode", ["separate", "atomic"])
@pytest.mark.parametrize("name, N, M, H, H_kv, kwargs", SINK_CASES, ids=[c[0] for c in SINK_CASES])
def test_sink_gradients_equal_autograd_on_the_gpt_oss_formula(name, N, M, H, H_kv, kwargs, dq_mode):
    rng = np.random.default_rng(N * 100 + M + H_kv)
    q = 2 * rng.standard_normal((2, H, N, 16))  # scores of a few units: the sinks -1 .. 3 take part, 40 dominates
    k, v = rng.standard_normal((2, H_kv, M, 16)), rng.standard_normal((2, H_kv, M, 16))
    grad_a = rng.standard_normal((2, H, N, 16))
    if kwargs.get("mask") == "random":
        keep = rng.random((N, M)) < 0.4
        keep[5], keep[:, 7] = False, False  # row 5 sees no key, key 7 is seen by no row
        kwargs = {**kwargs, "mask": keep}
    q, k, v = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))  # the kernels' inputs exactly
    refs = gpt_oss_grads(q, k, v, SINKS, grad_a, **kwargs)
    a, *grads = sink_kernel_grads(q, k, v, SINKS, grad_a, block_q=16, block_k=16, dq_mode=dq_mode, **kwargs)
    assert [tuple(g.shape) for g in grads] == [q.shape, k.shape, v.shape, SINKS.shape]
    assert_sink_grads_close(grads, refs)
    if kwargs.get("causal") and N > M:
        empty = slice(0, N - M)  # rows with no key: output 0, no gradient to q (A = 0 there, so D = 0)
        assert (a[..., empty, :] == 0).all() and (grads[0][..., empty, :] == 0).all()
    if "mask" in kwargs:
        assert (
            (grads[0][..., 5, :] == 0).all() and (grads[1][..., 7, :] == 0).all() and (grads[2][..., 7, :] == 0).all()
        )


def test_sink_gradient_takes_the_sinks_shape_and_sums_what_it_shares():
    rng = np.random.default_rng(70)
    q, k, v = (rng.standard_normal((2, 3, 20, 16)).astype(np.float32).astype(np.float64) for _ in range(3))
    grad_a = rng.standard_normal((2, 3, 20, 16))
    per_batch = np.array([[0.1, 0.2, 0.3], [1.0, -1.0, 2.0]])
    # (sink as given, the gradient of each (batch, head) summed to its shape)
    cases = [
        (SINKS[:3], lambda g: g.sum(axis=0)),  # (H,): one per head, shared by the batch
        (per_batch, lambda g: g),  # (B, H)
        (np.array(0.7), lambda g: g.sum()),  # one for every head
        (np.array([0.7]), lambda g: g.sum().reshape(1)),
    ]
    for sink, reduce in cases:
        full = np.ascontiguousarray(np.broadcast_to(sink, (2, 3)))
        want = reduce(gpt_oss_grads(q, k, v, full, grad_a, causal=True)[3])
        *_, dsink = sink_kernel_grads(q, k, v, sink, grad_a, block_q=16, block_k=16, causal=True)
        assert dsink.shape == sink.shape and dsink.dtype == torch.float32
        assert np.abs(dsink.double().numpy() - want).max() <= TOL * (1 + np.abs(want).max())


@pytest.mark.parametrize("sink, rtol", [(20.0, TOL), (60.0, TOL), (100.0, 1e-2)])
def test_a_sink_above_every_score_overflows_nothing(sink, rtol):
    """Scores below 4 here. exp(sink) overflows float32 above 88.7: the kernels never form it (the forward starts at
    m_i = sink; P_sink = exp(sink - L) is 1). Every gradient is tiny (about exp(-sink)), so it is checked against
    its own size: to TOL up to a sink of 60 (measured 1.4e-6); at 100 the weights exp(-95) are float32 subnormals
    (below 1.2e-38, spaced 1.4e-45) and gradients of about 1e-42 keep only a few bits (measured 4e-3)."""
    rng = np.random.default_rng(71)
    q, k, v = (rng.standard_normal((4, 24, 16)).astype(np.float32).astype(np.float64) for _ in range(3))
    grad_a = rng.standard_normal((4, 24, 16))
    refs = gpt_oss_grads(q, k, v, np.full(4, sink), grad_a, causal=True)
    a, *grads = sink_kernel_grads(q, k, v, np.full(4, sink), grad_a, block_q=16, block_k=16, causal=True)
    assert torch.isfinite(a).all() and all(torch.isfinite(g).all() for g in grads)
    for name, g, ref in zip(("dq", "dk", "dv", "dsink"), grads, refs, strict=True):
        err = np.abs(g.double().numpy() - ref).max()
        assert err <= rtol * np.abs(ref).max(), f"{name}: error {err:.1e} against gradients of {np.abs(ref).max():.1e}"


def test_minus_inf_sink_is_no_sink_bitwise_and_nan_sink_is_nan():
    _, q, k, v, grad_a = inputs(72, 40, 30, 16, 16, batch=(4,))  # causal, N > M: 10 rows with no key (L = -inf)
    kwargs = dict(block_q=16, block_k=16, causal=True)
    for dq_mode in ("separate", "atomic"):
        none = kernel_grads(q, k, v, grad_a, dq_mode=dq_mode, **kwargs)
        a, *grads, dsink = sink_kernel_grads(q, k, v, [-np.inf] * 4, grad_a, dq_mode=dq_mode, **kwargs)
        for got, want in zip((a, *grads), none, strict=True):
            assert torch.equal(got, want)  # the kernels' gradients, bitwise those without a sink
        assert (dsink == 0).all()  # P_sink = exp(-inf - L) = 0, also where L = -inf
    a, dq, dk, dv, dsink = sink_kernel_grads(q, k, v, [np.nan, 0.0, 0.0, 0.0], grad_a, **kwargs)
    assert torch.isnan(a[0]).all() and torch.isnan(dk[0]).all() and torch.isnan(dsink[0])
    # rows that see keys: NaN; the rows with no key have no key to differentiate through: dq = 0 (selected away)
    assert torch.isnan(dq[0, 10:]).all() and (dq[0, :10] == 0).all()
    assert all(torch.isfinite(g[1:]).all() for g in (a, dq, dk, dv, dsink))  # the other heads are untouched


@pytest.mark.parametrize("causal", [False, True])
def test_sink_float16_errors(causal):
    """dq, dk, dv: at most twice naive float16's error, as above. d sink has one number per head, too few for that
    rule (naive float16 is sometimes lucky on four numbers): its error comes from ``Delta_n = rowsum(dA * A)`` with
    ``A`` and ``dA`` rounded to float16 (unit roundoff u = 2^-11), so it is held within ``u S``,
    ``S = sum_n P_sink,n sum_d |dA_nd A_nd|`` per head (measured: at most 0.06 u S over 8 seeds, naive float16 0.11)."""
    _, q, k, v, grad_a = inputs(73, 48, 64, 32, 32, batch=(4,))  # N <= M: every row sees a key
    sink = SINKS / 10  # -0.1 .. 4: every sink takes part
    refs = gpt_oss_grads(q, k, v, sink, grad_a, causal=causal)
    a, *grads = sink_kernel_grads(q, k, v, sink, grad_a, dtype=torch.float16, block_q=16, block_k=32, causal=causal)
    assert a.dtype == torch.float16 and all(g.dtype == torch.float16 for g in grads[:3])
    assert grads[3].dtype == torch.float32  # the sink's dtype
    # GPT-OSS's formula in float16, differentiated by autograd in float16
    q16, k16, v16 = (torch.tensor(x, dtype=torch.float16, requires_grad=True) for x in (q, k, v))
    x = (q16 @ k16.transpose(-1, -2)) * 32**-0.5
    if causal:
        x = x.masked_fill(~torch.from_numpy(causal_mask(48, 64)), float("-inf"))
    column = torch.tensor(sink, dtype=torch.float16)[:, None, None].expand(4, 48, 1)
    w = torch.softmax(torch.cat([x, column], dim=-1), dim=-1)[..., :-1]
    (w @ v16).backward(torch.tensor(grad_a, dtype=torch.float16))
    naive = (q16.grad, k16.grad, v16.grad)
    for name, g, g_naive, ref in zip(("dq", "dk", "dv"), grads[:3], naive, refs[:3], strict=True):
        err = np.abs(g.double().numpy() - ref).max()
        err_naive = np.abs(g_naive.double().numpy() - ref).max()
        assert err <= 2 * err_naive, f"{name}: kernel error {err:.2e} > 2 x naive float16 error {err_naive:.2e}"
    a_ref, lse_ref = fm.attention(q, k, v, learnable_sink=sink, causal=causal, return_lse=True)
    S = (np.exp(sink[:, None] - lse_ref) * np.abs(grad_a * a_ref).sum(axis=-1)).sum(axis=-1)  # (H,)
    err = np.abs(grads[3].double().numpy() - refs[3])
    assert (err <= 2.0**-11 * S).all(), f"d sink: errors {err} above u S = {2.0**-11 * S}"


def test_lazy_rescaling_is_forward_only_and_changes_the_gradients_only_by_rounding():
    _, q, k, v, grad_a = inputs(74, 40, 70, 16, 16, batch=(4,))
    k[..., 0] += np.arange(70) / 2  # growing maxima: the lazy forward skips rescales
    q[..., 0] = np.abs(q[..., 0]) + 1
    kwargs = dict(block_q=16, block_k=16, causal=True)
    eager = sink_kernel_grads(q, k, v, SINKS / 10, grad_a, **kwargs)
    lazy = sink_kernel_grads(q, k, v, SINKS / 10, grad_a, rescale_threshold=8.0, **kwargs)
    for got, want in zip(lazy, eager, strict=True):
        assert (got - want).abs().max() <= 1e-5 * (1 + want.abs().max())


def test_only_the_sink_requires_grad_and_numpy_inputs_give_numpy_gradients():
    _, q, k, v, grad_a = inputs(75, 20, 24, 16, 16, batch=(4,))
    q, k, v, grad_a = (x.astype(np.float32) for x in (q, k, v, grad_a))
    st = torch.tensor(SINKS, dtype=torch.float32, requires_grad=True)
    a = triton_flash_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), learnable_sink=st)
    a.backward(torch.from_numpy(grad_a))
    a_np, lse = triton_flash_attention(q, k, v, learnable_sink=SINKS, return_lse=True)
    grads = tb.triton_attention_backward(q, k, v, a_np, lse, grad_a, learnable_sink=SINKS)
    assert len(grads) == 4 and all(isinstance(g, np.ndarray) and g.dtype == np.float32 for g in grads)
    assert torch.equal(st.grad, torch.from_numpy(grads[3]))
    want = fm.attention_backward(*(x.astype(np.float64) for x in (q, k, v, a_np, lse, grad_a)), learnable_sink=SINKS)
    assert_sink_grads_close([torch.from_numpy(g) for g in grads], want)


def test_window_and_softcap_stay_forward_only():
    q = torch.randn(4, 20, 16, requires_grad=True)
    for variant in ({"window": (4, 0)}, {"softcap": 2.0}):
        with pytest.raises(NotImplementedError, match="window and softcap are forward-only"):
            triton_flash_attention(q, q, q, learnable_sink=SINKS, **variant)
