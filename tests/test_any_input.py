"""Every attention function gives the right answer or a clear error, for any input (issue 11).

The functions: the float64 reference ``attention``, the loops of chapters 4-5, ``flash_attention`` in both orders
(any block sizes), ``split_kv_attention`` and, with the triton extra, the Triton kernel in Triton's interpreter.
Conventions (``flashmath.inputs``' docstring): a masked key is absent whatever its k and v rows hold; a fully masked
row gives 0 and logsumexp -inf; bad input raises a ValueError or TypeError naming the argument; nothing the caller
passed is modified; a mask never widens the output.
"""

import functools
import re

import numpy as np
import pytest
from helpers import HAVE_TRITON, needs_triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashmath as fm
from flashmath.masks import causal_mask, padding_mask, sliding_window_mask
from flashmath.variants import alibi_slopes_for


def flash(order, block_q, block_k):
    def run(q, k, v, **kwargs):
        return fm.flash_attention(q, k, v, order=order, block_q=block_q, block_k=block_k, **kwargs)

    run.__name__ = f"flash_attention[{order}, {block_q}x{block_k}]"
    return run


def split(num_splits):
    def run(q, k, v, **kwargs):
        return fm.split_kv_attention(q, k, v, num_splits, **kwargs)

    run.__name__ = f"split_kv_attention[{num_splits}]"
    return run


def kernel(q, k, v, **kwargs):
    """The Triton kernel in its interpreter, on float32 copies of float64 arrays (it refuses float64), with its
    smallest tiles (16 x 16); results back as float64, so the tests read it like the numpy functions."""

    def cast(x):
        return x.astype(np.float32) if isinstance(x, np.ndarray) and x.dtype == np.float64 else x

    with np.errstate(over="ignore"):  # 1e30 garbage in a masked row is inf in float32: garbage all the same
        q, k, v = (cast(x) for x in (q, k, v))
    out = triton_flash_attention(q, k, v, block_q=16, block_k=16, **kwargs)
    return tuple(x.astype(np.float64) for x in out) if isinstance(out, tuple) else out.astype(np.float64)


kernel.tol = (2e-5, 2e-6)  # float32 against the float64 reference: (rtol, atol)

if HAVE_TRITON:
    from flashmath.triton_kernel import triton_flash_attention
KERNEL = [pytest.param(kernel, marks=needs_triton)]

VARIANTS = [
    fm.one_loop_attention,
    fm.two_loop_attention,
    flash("fa2", 2, 3),
    flash("fa1", 3, 2),
    flash("fa2", 1, 1),
    flash("fa1", 64, 64),
    split(3),
]
ALL = [fm.attention] + VARIANTS
ids = [f.__name__ for f in ALL]
WITH_KERNEL, with_kernel_ids = ALL + KERNEL, ids + ["triton_flash_attention (interpreter)"]


def tol(f):
    """``dict(rtol=, atol=)`` for comparing ``f`` with the float64 reference."""
    rtol, atol = getattr(f, "tol", (1e-10, 1e-12))
    return dict(rtol=rtol, atol=atol)


def head(N=4, M=6, D=3, Dv=2, batch=(), seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(batch + shape).astype(dtype) for shape in ((N, D), (M, D), (M, Dv)))


# ------------------------------------------------------------------------------------------------------------------
# The four faults of issue 11
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_a_row_with_an_infinite_score_has_logsumexp_inf(f):
    a, lse = f(np.array([[1.0]]), np.array([[np.inf], [0.0]]), np.array([[1.0], [2.0]]), scale=1.0, return_lse=True)
    assert lse[0] == np.inf  # log(sum(exp)) is +inf; the output (inf / inf) is NaN
    assert np.isnan(a).all()


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_nan_in_a_masked_value_row_does_not_reach_the_output(f):
    q, k = np.zeros((1, 4)), np.zeros((2, 4))
    v = np.array([[3.0, -1.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(f(q, k, v, mask=np.array([[True, False]])), [[3.0, -1.0]])


@pytest.mark.parametrize("H", [2, 3])
@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_padding_mask_as_returned_with_batch_and_heads(f, H):
    q, k, v = head(N=3, M=5, batch=(2, H), seed=H)
    lengths = [2, 5]
    out = f(q, k, v, mask=padding_mask(lengths, 5))
    for b, length in enumerate(lengths):
        np.testing.assert_allclose(out[b], fm.attention(q[b], k[b, :, :length], v[b, :, :length]), **tol(f))


def backward(q, k, v, **kwargs):
    a, lse = fm.attention(q, k, v, return_lse=True, **kwargs)
    return fm.attention_backward(q, k, v, a, lse, np.ones_like(a), **kwargs)[0]


def counted(q, k, v, **kwargs):
    return fm.counted_attention("fa2", q, k, v, **kwargs)


TAKES_A_MASK = WITH_KERNEL + [backward, fm.flash_trace, counted, fm.one_loop_trace, fm.two_loop_trace]


@pytest.mark.parametrize(
    "f",
    TAKES_A_MASK,
    ids=with_kernel_ids
    + ["attention_backward", "flash_trace", "counted_attention", "one_loop_trace", "two_loop_trace"],
)
def test_a_mask_never_widens_the_output(f):
    """Issue 16: q, k, v of shape (B, N, D) with padding_mask(lengths, M), which is (B, 1, 1, M), would compute
    every sequence's rows under every sequence's mask, (B, B, N, Dv). Refused, naming both shapes and the fix;
    leading axes of size 1 beyond the inputs' are dropped (the output keeps the inputs' shape)."""
    q, k, v = head(N=2, M=5, D=4, Dv=3, batch=(3,), seed=11)
    with pytest.raises(
        ValueError,
        match=r"mask of shape \(3, 1, 1, 5\) would widen the output.*\(3,\).*"
        r"\(3, 3\).*padding_mask\(lengths, M\)\[:, 0\]",
    ):
        f(q, k, v, mask=padding_mask([1, 2, 5], 5))
    f(q, k, v, mask=padding_mask([1, 2, 5], 5)[:, 0])  # (B, 1, M): the fix the message names
    if f in (fm.attention, kernel):  # leading axes of size 1 add nothing
        out = f(q[0], k[0], v[0], mask=np.ones((1, 1, 2, 5), bool))
        assert out.shape == (2, 3)


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_a_scale_beyond_float32_gives_the_right_answer(f):
    q = np.array([[1e-10, 0.0]], np.float32)
    k, v = np.eye(2, dtype=np.float32), np.array([[1.0], [2.0]], np.float32)
    a, lse = f(q, k, v, scale=1e39, return_lse=True)
    assert a[0, 0] == 1.0  # the first key has score 1e29, the second 0
    np.testing.assert_allclose(lse, [1e29], rtol=1e-6)


# ------------------------------------------------------------------------------------------------------------------
# Every mask kind, every alignment, N < M, N = M, N > M, N = 1, both orders
# ------------------------------------------------------------------------------------------------------------------


def masks(N, M):
    return {
        "causal bottom-right": causal_mask(N, M),
        "causal top-left": causal_mask(N, M, align="top-left"),
        "window 2": sliding_window_mask(N, M, 2),
        "window (1, 1) top-left": sliding_window_mask(N, M, left=1, right=1, align="top-left"),
        "padding": padding_mask([max(M - 2, 0)], M)[0, 0],  # (1, M): the last two keys are padding
        "causal & padding": causal_mask(N, M) & padding_mask([max(M - 1, 0)], M)[0, 0],
    }


@pytest.mark.parametrize("N, M", [(3, 7), (5, 5), (7, 3), (1, 6)])
@pytest.mark.parametrize("f", VARIANTS + KERNEL, ids=[f.__name__ for f in VARIANTS] + with_kernel_ids[-1:])
def test_every_mask_kind_in_every_shape(f, N, M):
    q, k, v = head(N=N, M=M, seed=N * 10 + M)
    for name, mask in masks(N, M).items():
        expected, expected_lse = fm.attention(q, k, v, mask=mask, return_lse=True)
        a, lse = f(q, k, v, mask=mask, return_lse=True)
        np.testing.assert_allclose(a, expected, **tol(f), err_msg=name)
        np.testing.assert_allclose(lse, expected_lse, **tol(f), err_msg=name)
        empty = ~np.broadcast_to(mask, (N, M)).any(axis=-1)
        assert (a[empty] == 0).all() and (lse[empty] == -np.inf).all(), name


def test_causal_flag_is_the_bottom_right_mask():
    q, k, v = head(N=3, M=6)
    for f in VARIANTS:
        np.testing.assert_allclose(f(q, k, v, causal=True), fm.attention(q, k, v, mask=causal_mask(3, 6)), rtol=1e-10)


# ------------------------------------------------------------------------------------------------------------------
# Masked = absent, whatever the masked rows hold: a hypothesis test over shapes, masks, blocks, dtypes, orders
# ------------------------------------------------------------------------------------------------------------------

TOL = {np.float64: (1e-9, 1e-12), np.float32: (2e-4, 2e-5), np.float16: (2e-2, 2e-3)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    N=st.integers(1, 6),
    M=st.integers(1, 7),
    D=st.integers(1, 4),
    block_q=st.integers(1, 5),
    block_k=st.integers(1, 5),
    order=st.sampled_from(["fa1", "fa2"]),
    dtype=st.sampled_from([np.float64, np.float32, np.float16]),
    seed=st.integers(0, 2**16),
    garbage=st.sampled_from([np.nan, np.inf, -np.inf, 1e30]),
    batch=st.sampled_from([(), (2,)]),
)
def test_masked_keys_are_absent_in_every_variant(N, M, D, block_q, block_k, order, dtype, seed, garbage, batch):
    rng = np.random.default_rng(seed)
    q, k, v = head(N=N, M=M, D=D, Dv=2, batch=batch, seed=seed, dtype=dtype)
    mask = rng.random(batch + (N, M)) < 0.6
    absent = rng.random(M) < 0.4  # keys masked for every query: their rows may hold anything
    mask[..., absent] = False
    k_bad, v_bad = k.copy(), v.copy()
    with np.errstate(over="ignore"):  # 1e30 is inf in float16: garbage all the same
        k_bad[..., absent, :] = garbage
        v_bad[..., absent, :] = garbage
    kept = ~absent
    reference, ref_lse = fm.attention(q, k[..., kept, :], v[..., kept, :], mask=mask[..., kept], return_lse=True)
    functions = [fm.attention, fm.one_loop_attention, fm.two_loop_attention, flash(order, block_q, block_k)]
    if HAVE_TRITON:  # the kernel in the interpreter (float64 inputs as float32)
        functions.append(kernel)
    for f in functions:
        rtol, atol = np.maximum(TOL[dtype], getattr(f, "tol", (0, 0)))
        a, lse = f(q, k_bad, v_bad, mask=mask, return_lse=True)
        assert np.isfinite(a).all(), f.__name__
        np.testing.assert_allclose(a.astype(np.float64), reference, rtol=rtol, atol=atol, err_msg=f.__name__)
        np.testing.assert_allclose(lse.astype(np.float64), ref_lse, rtol=rtol, atol=atol, err_msg=f.__name__)


# ------------------------------------------------------------------------------------------------------------------
# Empty sizes, odd arrays, inputs never modified
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_empty_queries_and_empty_keys_have_defined_results(f):
    q, k, v = head(N=0, M=4)
    a, lse = f(q, k, v, return_lse=True)
    assert a.shape == (0, 2) and lse.shape == (0,)
    q, k, v = head(N=3, M=0)
    a, lse = f(q, k, v, return_lse=True)
    assert a.shape == (3, 2) and (a == 0).all() and (lse == -np.inf).all()  # no key: fully masked rows


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_read_only_and_non_contiguous_inputs_are_used_and_left_alone(f):
    q, k, v = head(N=5, M=6, D=4, Dv=3, seed=3)
    big_q = np.repeat(q, 2, axis=1)  # q as a strided view: every other column
    qs, ks, vs = big_q[:, ::2], k.T.copy().T, v[::-1][::-1]
    assert not qs.flags.c_contiguous and not ks.flags.c_contiguous
    mask = causal_mask(5, 6)
    for arr in (qs, ks, vs, mask, big_q):
        arr.flags.writeable = False
    before = [a.copy() for a in (qs, ks, vs, mask)]
    out = f(qs, ks, vs, mask=mask)
    np.testing.assert_allclose(out, fm.attention(q, k, v, mask=mask), **tol(f))
    for arr, copy in zip((qs, ks, vs, mask), before, strict=True):
        np.testing.assert_array_equal(arr, copy)


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
@pytest.mark.parametrize("scale", [-2.0, 0.0, 1e-300, 7, np.float32(0.5), 1e5])
def test_scales_of_any_sign_and_size(f, scale):
    q, k, v = head(seed=4)
    tolerance = tol(f) if hasattr(f, "tol") else dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(f(q, k, v, scale=scale), fm.attention(q, k, v, scale=scale), **tolerance)


BAD = [
    (dict(q=np.ones((3,))), ValueError, r"q must have shape \(\.\.\., N, D\)"),
    (dict(k=np.ones((6, 4))), ValueError, "same head dimension D"),
    (dict(v=np.ones((5, 2))), ValueError, "same number of keys M"),
    (dict(q=np.ones((2, 4, 3)), k=np.ones((3, 6, 3)), v=np.ones((3, 6, 2))), ValueError, "do not broadcast"),
    (dict(q=np.ones((4, 3), dtype=int)), TypeError, "q must hold real floating-point numbers"),
    (dict(k=np.ones((6, 3), dtype=complex)), TypeError, "k must hold real floating-point numbers"),
    (dict(v=np.array([[object()] * 2] * 6)), TypeError, "v must hold real floating-point numbers"),
    (dict(mask=np.ones((4, 6))), TypeError, "mask must be a boolean array"),
    (dict(mask=np.ones((4, 5), bool)), ValueError, "does not broadcast to"),
    (dict(scale=np.nan), ValueError, "scale must be finite"),
    (dict(scale="0.5"), TypeError, "scale must be a real number"),
    (dict(scale=True), TypeError, "scale must be a real number"),
    (dict(causal=1), TypeError, "causal must be True or False"),
]


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
@pytest.mark.parametrize("bad, error, match", BAD, ids=[b[2][:30] for b in BAD])
def test_bad_input_raises_an_error_that_names_the_argument(f, bad, error, match):
    q, k, v = head()
    args, bad = dict(q=q, k=k, v=v), dict(bad)  # the parameter dicts are shared by every f
    kwargs = {key: bad.pop(key) for key in list(bad) if key not in args}
    args.update(bad)
    with pytest.raises(error, match=match):
        f(args["q"], args["k"], args["v"], **kwargs)


@pytest.mark.parametrize(
    "block, error, match",
    [
        (0, ValueError, r"block_q must be >= 1 \(rows per tile\), got 0"),
        (-3, ValueError, r"block_q must be >= 1 \(rows per tile\), got -3"),
        (True, TypeError, "block_q must be a positive integer.*bool"),
        (2.0, TypeError, "block_q must be a positive"),
        ("8", TypeError, "block_q must be a positive"),
    ],
)
def test_bad_block_sizes(block, error, match):
    q, k, v = head()
    for order in ("fa1", "fa2"):
        with pytest.raises(error, match=match):
            fm.flash_attention(q, k, v, block_q=block, order=order)
    with pytest.raises(ValueError, match="order must be 'fa1'"):
        fm.flash_attention(q, k, v, order="fa3")


def test_mixed_low_precision_types_are_named():
    import ml_dtypes

    q, k, v = head()
    with pytest.raises(TypeError, match="no common floating-point type: bfloat16, float16"):
        fm.flash_attention(q.astype(ml_dtypes.bfloat16), k.astype(np.float16), v)


# ------------------------------------------------------------------------------------------------------------------
# Issue 33: the variants of chapter 13 (grouped heads, windows, softcap, ALiBi, packed and paged sequences, block
# masks) for any input, in numpy and in the kernel: the same battery as above
# ------------------------------------------------------------------------------------------------------------------


def gqa_numpy(q, k, v, **kwargs):
    return fm.flash_attention(q, k, v, block_q=2, block_k=3, **kwargs)


def varlen(q, k, v, **kwargs):
    """flash_attention_varlen with all tokens in one sequence: attention itself."""
    return fm.flash_attention_varlen(q, k, v, [0, q.shape[-2]], [0, k.shape[-2]], block_q=2, block_k=3, **kwargs)


def paged(q, k, v, page_size=3, **kwargs):
    """paged_attention on k, v ``(B, H_kv, M, D)`` cut into pages of 3 tokens stored in a shuffled order."""
    B, H_kv, M, D = k.shape
    n = -(-M // page_size)
    table = np.random.default_rng(7).permutation(max(B * n, 1))[: B * n].reshape(B, n)

    def pages(x):
        padded = np.zeros((B, H_kv, n * page_size, x.shape[-1]), x.dtype)
        padded[:, :, :M] = x
        out = np.zeros((max(B * n, 1), H_kv, page_size, x.shape[-1]), x.dtype)
        # (B, H_kv, n, page_size, D) -> the physical pages block_table[b, j]
        out[table.ravel()] = (
            padded.reshape(B, H_kv, n, page_size, x.shape[-1])
            .transpose(0, 2, 1, 3, 4)
            .reshape(B * n, H_kv, page_size, x.shape[-1])
        )
        return out

    return fm.paged_attention(q, pages(k), pages(v), table, np.full(B, M), **kwargs)


GQA = [gqa_numpy, varlen, paged] + [pytest.param(kernel, marks=needs_triton)]
gqa_ids = ["flash_attention", "flash_attention_varlen", "paged_attention", "triton_flash_attention (interpreter)"]


def repeated(q, k, v, **kwargs):
    """The reference for grouped heads: k, v repeated to q's heads (SDPA's repeat_interleave), float64."""
    G = q.shape[-3] // max(k.shape[-3], 1)
    return fm.attention(q, np.repeat(k, G, axis=-3), np.repeat(v, G, axis=-3), **kwargs)


def window_keep(N, M, left, right):
    """The window written out: query n sees key m when p - left <= m - ... <= p + right, p = n + M - N."""
    rel = np.arange(M)[None, :] - (np.arange(N)[:, None] + M - N)
    return ((left is None) | (rel >= -(left or 0))) & ((right is None) | (rel <= (right or 0)))


HUGE = [2**31 - 1, 2**63, 10**30]


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("N, M", [(20, 24), (24, 20)])
@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
def test_a_huge_window_extent_is_an_unbounded_side(f, N, M, huge):
    """flash-attention #895: INT32_MAX (or more) for "unbounded" overflowed the kernel's int32 bounds, every row 0."""
    rng = np.random.default_rng(N)
    q, k, v = (rng.standard_normal((1, 2) + shape) for shape in ((N, 16), (M, 16), (M, 8)))
    for left, right in ((2, huge), (huge, 2), (huge, huge)):
        keep = window_keep(N, M, None if left == huge else left, None if right == huge else right)
        a, lse = f(q, k, v, window=(left, right), return_lse=True)
        ref, ref_lse = repeated(q, k, v, mask=keep, return_lse=True)
        np.testing.assert_allclose(a, ref, **tol(f), err_msg=f"window=({left}, {right})")
        np.testing.assert_allclose(lse, ref_lse, **tol(f), err_msg=f"window=({left}, {right})")


BAD_VARIANT_ARGS = [
    (dict(window=(-2, 1)), ValueError, "window's left extent must be >= 0"),
    (dict(window=(1, -5)), ValueError, "window's right extent must be >= 0"),
    (dict(window=0), ValueError, "an integer window is the number of keys"),
    (dict(window=(1.5, 2)), TypeError, "window's left extent must be an integer"),
    (dict(window="2"), TypeError, "window must be None, an integer or a pair"),
    (dict(enable_gqa="no"), TypeError, "enable_gqa must be True or False, got 'no'"),
    (dict(enable_gqa=1), TypeError, "enable_gqa must be True or False"),
    (dict(causal=1), TypeError, "causal must be True or False"),
    (dict(scale="0.5"), TypeError, "scale must be a real number"),
    (dict(scale=np.inf), ValueError, "scale must be finite"),
    (dict(softcap="30"), TypeError, "softcap must be a real number"),
    (dict(softcap=-1.0), ValueError, "softcap must be finite and > 0"),
]


@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
@pytest.mark.parametrize("bad, error, match", BAD_VARIANT_ARGS, ids=[b[2][:30] for b in BAD_VARIANT_ARGS])
def test_bad_variant_arguments_raise_an_error_that_names_them(f, bad, error, match):
    q, k, v = head(N=3, M=5, D=4, batch=(2, 2), seed=1)
    with pytest.raises(error, match=match):
        f(q, k, v, **bad)


@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
def test_numpy_bools_are_bools(f):
    """Issue 33, fault 9: np.True_ and np.False_ are what numpy's own comparisons return."""
    q, k, v = head(N=3, M=5, D=4, batch=(2, 4), seed=2)
    kv = k[:, :2], v[:, :2]
    np.testing.assert_allclose(
        f(q, *kv, enable_gqa=np.True_, causal=np.True_), repeated(q, *kv, mask=causal_mask(3, 5)), **tol(f)
    )
    np.testing.assert_allclose(f(q, k, v, enable_gqa=np.False_), fm.attention(q, k, v), **tol(f))


@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
@pytest.mark.parametrize("batch_q, batch_kv", [((1, 4), (2, 2)), ((2, 4), (1, 2)), ((2, 4), (2, 1))])
def test_grouped_heads_with_a_broadcast_batch(f, batch_q, batch_kv):
    """Issue 33, fault 3: q (1, 4, N, D) with k, v (2, 2, M, D) crashed in the kernel."""
    if f is paged and batch_q[0] != batch_kv[0]:
        return  # paged_attention's q and pages have no broadcast batch: the cache holds each sequence's pages
    rng = np.random.default_rng(3)
    q = rng.standard_normal(batch_q + (5, 16))
    k, v = (rng.standard_normal(batch_kv + (7, 16)) for _ in range(2))
    a = f(q, k, v, enable_gqa=True)
    batch = np.broadcast_shapes(batch_q[:-1], batch_kv[:-1]) + batch_q[-1:]
    assert a.shape == batch + (5, 16)
    np.testing.assert_allclose(
        a,
        repeated(
            np.broadcast_to(q, batch + (5, 16)),
            *(np.broadcast_to(x, batch[:-1] + batch_kv[-1:] + (7, 16)) for x in (k, v)),
        ),
        **tol(f),
    )


@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
@pytest.mark.parametrize(
    "B, H, H_kv, N, M", [(0, 4, 2, 5, 7), (2, 4, 2, 0, 7), (2, 4, 2, 5, 0), (2, 0, 2, 5, 7), (0, 0, 1, 0, 0)]
)
def test_grouped_heads_with_empty_sizes(f, B, H, H_kv, N, M):
    """Issue 33, fault 4 (PyTorch #166318, sglang #34474): a reshape with -1 cannot size an empty array."""
    q, k, v = (np.ones((B, heads, L, 8)) for heads, L in ((H, N), (H_kv, M), (H_kv, M)))
    a, lse = f(q, k, v, enable_gqa=True, return_lse=True)
    assert a.shape == (B, H, N, 8) and lse.shape == (B, H, N)
    assert (a == 0).all() and (lse == -np.inf).all()  # M = 0: no key for any row; otherwise no row at all


@pytest.mark.parametrize("f", GQA, ids=gqa_ids)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_variants_keep_the_input_dtype_and_refuse_integers(f, dtype):
    q, k, v = head(N=4, M=6, D=8, Dv=8, batch=(2, 4), seed=5, dtype=dtype)
    kv = k[:, :2], v[:, :2]
    if f is kernel:  # the kernel itself, without the float64 cast of the tests' wrapper
        f = functools.partial(triton_flash_attention, block_q=16, block_k=16)
    a, lse = f(q, *kv, enable_gqa=True, window=(1, 2), softcap=5.0, return_lse=True)
    assert a.dtype == dtype and lse.dtype == np.float32
    ref = fm.flash_attention(*(x.astype(np.float64) for x in (q, *kv)), enable_gqa=True, window=(1, 2), softcap=5.0)
    np.testing.assert_allclose(a, ref, rtol=TOL[dtype][0], atol=TOL[dtype][1] * 10)
    with pytest.raises(TypeError, match="q must hold real floating-point numbers"):
        f(q.astype(np.int64), *kv, enable_gqa=True)


def test_paged_attention_without_key_value_heads_names_the_heads():
    """Issue 33, fault 5: a ZeroDivisionError before."""
    q = np.ones((2, 4, 3, 8))
    pages = np.ones((4, 0, 2, 8))
    for enable_gqa in (True, False):
        with pytest.raises(ValueError, match=r"at least one key/value head \(H_kv >= 1\) for the query heads H = 4"):
            fm.paged_attention(q, pages, pages, np.array([[0, 1], [2, 3]]), np.array([3, 4]), enable_gqa=enable_gqa)


def test_paged_attention_broadcasts_alibi_slopes_and_names_a_wrong_shape():
    """Issue 33, fault 6 (flash-attention #1585, #907): (1, H) was an IndexError, (B + 1, H) accepted."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal(shape) for shape in ((3, 4, 2, 8), (3, 2, 7, 8), (3, 2, 7, 8)))
    slopes = alibi_slopes_for(4)
    for shaped in (slopes[None], slopes, np.broadcast_to(slopes, (3, 4))):
        a = paged(q, k, v, enable_gqa=True, alibi_slopes=shaped)
        for b in range(3):  # sequence by sequence, against flash_attention with the (H,) slopes
            np.testing.assert_allclose(
                a[b], fm.flash_attention(q[b], k[b], v[b], enable_gqa=True, alibi_slopes=slopes), rtol=1e-10, atol=1e-12
            )
    for wrong in (np.ones((4, 4)), np.ones((2, 4)), np.ones((3, 3)), np.ones((1, 3, 4))):
        with pytest.raises(ValueError, match=re.escape(f"alibi_slopes of shape {wrong.shape}")):
            paged(q, k, v, enable_gqa=True, alibi_slopes=wrong)
    with pytest.raises(TypeError, match="alibi_slopes must be real numbers"):
        paged(q, k, v, enable_gqa=True, alibi_slopes=np.array(["1"] * 4))


def test_paged_attention_names_q_and_the_pages_when_they_have_no_common_dtype():
    """Issue 33, fault 8: numpy's DTypePromotionError, naming no argument, before."""
    import ml_dtypes

    q, k, v = head(N=2, M=4, D=8, Dv=8, batch=(1, 2))
    with pytest.raises(
        TypeError, match="q, k_pages and v_pages have no common floating-point type: bfloat16, float16, float16"
    ):
        paged(q.astype(ml_dtypes.bfloat16), k.astype(np.float16), v.astype(np.float16))


def test_paged_and_packed_sequences_with_empty_sizes():
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 6, 4)) for _ in range(3))
    # empty sequences among the packed ones: their rows do not exist, the others are attention on their own keys
    a, lse = fm.flash_attention_varlen(q, k, v, [0, 0, 2, 2, 6], [0, 3, 3, 3, 6], block_q=2, block_k=2, return_lse=True)
    assert (a[:, :2] == 0).all() and (lse[:, :2] == -np.inf).all()  # sequence 1 has queries but no key
    np.testing.assert_allclose(a[:, 2:], fm.attention(q[:, 2:], k[:, 3:], v[:, 3:]), rtol=1e-10)
    empty = fm.flash_attention_varlen(q[:, :0], k[:, :0], v[:, :0], [0])  # no sequence at all
    assert empty.shape == (2, 0, 4)
    # a paged cache: a sequence with no token yet, and a batch of no sequence
    qp = rng.standard_normal((2, 2, 3, 4))
    pages = rng.standard_normal((3, 2, 2, 4))
    a, lse = fm.paged_attention(qp, pages, pages, np.array([[0, 1], [2, 0]]), np.array([0, 3]), return_lse=True)
    assert (a[0] == 0).all() and (lse[0] == -np.inf).all()
    np.testing.assert_allclose(
        a[1], fm.attention(qp[1], *(2 * [fm.gather_pages(pages, [[0, 1], [2, 0]], [0, 3], 1)])), rtol=1e-10
    )
    assert fm.paged_attention(qp[:0], pages, pages, np.zeros((0, 2), int), np.zeros(0, int)).shape == (0, 2, 3, 4)


def test_block_mask_with_empty_sizes_huge_extents_and_bad_types():
    assert fm.block_mask(0, 5, block_q=2, block_k=2).kinds.shape == (0, 3)
    assert fm.block_mask(4, 0, block_q=2, block_k=2, causal=True).computed_share == 0.0
    for huge in HUGE:
        unbounded = fm.block_mask(9, 13, block_q=4, block_k=4, window=(2, None))
        np.testing.assert_array_equal(
            fm.block_mask(9, 13, block_q=4, block_k=4, window=(2, huge)).kinds, unbounded.kinds
        )
    with pytest.raises(ValueError, match="window's left extent must be >= 0"):
        fm.block_mask(4, 4, window=(-3, 0))
    with pytest.raises(TypeError, match="causal must be True or False|N must be an integer"):
        fm.block_mask(4.0, 4)


def test_block_mask_needs_cu_seqlens_q_with_cu_seqlens_k():
    """Issue 33, fault 7: cu_seqlens_k alone was silently ignored (every tile "full")."""
    with pytest.raises(ValueError, match="cu_seqlens_k was given without cu_seqlens_q"):
        fm.block_mask(8, 8, block_q=4, block_k=4, cu_seqlens_k=[0, 4, 8])
    both = fm.block_mask(8, 8, block_q=4, block_k=4, cu_seqlens_q=[0, 4, 8], cu_seqlens_k=[0, 4, 8])
    assert both.counts == {"empty": 2, "partial": 0, "full": 2}  # two documents: the off-diagonal tiles skipped


@needs_triton
@pytest.mark.parametrize("cap", [0.5, 2.0, 5.0, 50.0, 1e3, 1e4, 1e6])
def test_the_kernels_softcap_keeps_float32_accuracy_at_every_cap(cap):
    """Issue 33, fault 2 (flash-attention PR #1025, vLLM #56578): c (1 - t) / (1 + t) with t = exp(-2|x / c|)
    cancels for small |x / c|, an error of about c 2^-24 on every score: 3e-5, 5e-4 and 4e-2 at caps 1e3, 1e4 and
    1e6 before; numpy's float32 loop stays near 2e-6. Caps of a few units put |x / c| on both sides of the
    kernel's switch between tanh's series and its exponential form."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape) for shape in ((48, 32), (80, 32), (80, 16)))
    q *= 3  # scores of a few units: |x / c| small at every cap here, where the cancellation was
    ref, ref_lse = fm.flash_attention(q, k, v, softcap=cap, return_lse=True)
    a, lse = kernel(q, k, v, softcap=cap, return_lse=True)
    a32, lse32 = fm.flash_attention(
        *(x.astype(np.float32) for x in (q, k, v)), softcap=cap, return_lse=True
    )  # float32 accuracy: numpy's float32 loop
    assert np.abs(a - ref).max() <= max(2 * np.abs(a32 - ref).max(), 2e-6)
    assert np.abs(lse - ref_lse).max() <= max(2 * np.abs(lse32 - ref_lse).max(), 2e-6)


@needs_triton
def test_false_enable_gqa_as_a_numpy_bool_keeps_the_kernel_differentiable():
    """Issue 33, fault 9: np.False_ was taken for a variant, and tensors that require grad were refused."""
    import torch

    q = torch.tensor(head(N=3, M=3, D=4, Dv=4, seed=9)[0], dtype=torch.float32, requires_grad=True)
    out = triton_flash_attention(q, q, q, enable_gqa=np.False_)
    out.sum().backward()
    expected = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, q, q).sum(), q)[0]
    torch.testing.assert_close(q.grad, expected, rtol=1e-4, atol=1e-5)


KEEP_SOME_ROWS = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], bool)  # key 2: row 0 masks it, 1 and 2 see it


@pytest.mark.parametrize("f", WITH_KERNEL, ids=with_kernel_ids)
def test_nan_in_a_key_masked_for_some_rows_of_a_tile(f):
    """Issue 33, fault 11, the exception of ``flashmath.inputs``' conventions. A NaN ``k`` row is absent from the
    rows that mask it in every forward (its score is selected away; not in the backward kernels' ``dQ``:
    tests/test_triton_backward.py). A NaN ``v`` row is absent from them in numpy, but not
    in the kernel when another row of the same query tile attends that key: the tile's ``P V`` product multiplies it
    by the masked rows' weight 0, and 0 x NaN is NaN (a matrix unit has no per-key path). A key that every row of the
    tile masks is not even loaded, so it stays absent there too (test_masked_keys_are_absent_in_every_variant)."""
    q, k, v = head(N=3, M=4, D=4, Dv=2, seed=10)
    reference = fm.attention(q[:1], k[:2], v[:2])  # row 0 without keys 2 and 3
    for name in ("k", "v"):
        k_nan, v_nan = k.copy(), v.copy()
        (k_nan if name == "k" else v_nan)[2] = np.nan
        a = f(q, k_nan, v_nan, mask=KEEP_SOME_ROWS)
        assert np.isnan(a[1:]).all(), name  # rows 1 and 2 attend key 2: NaN in, NaN out, everywhere
        if f is kernel and name == "v":
            assert np.isnan(a[0]).all()  # 0 x NaN in the tile's P V: the kernels' stated exception
        else:
            np.testing.assert_allclose(a[:1], reference, **tol(f), err_msg=name)
