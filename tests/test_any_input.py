"""Every attention function gives the right answer or a clear error, for any input (issue 11).

The functions: the float64 reference ``attention``, the loops of chapters 4-5, ``flash_attention`` in both orders
(any block sizes), ``split_kv_attention`` and, with the triton extra, the Triton kernel in Triton's interpreter.
Conventions (``flashmath.inputs``' docstring): a masked key is absent whatever its k and v rows hold; a fully masked
row gives 0 and logsumexp -inf; bad input raises a ValueError or TypeError naming the argument; nothing the caller
passed is modified; a mask never widens the output.
"""


import numpy as np
import pytest
from helpers import HAVE_TRITON, needs_triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashmath as fm
from flashmath.masks import causal_mask, padding_mask, sliding_window_mask


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

VARIANTS = [fm.one_loop_attention, fm.two_loop_attention, flash("fa2", 2, 3), flash("fa1", 3, 2),
            flash("fa2", 1, 1), flash("fa1", 64, 64), split(3)]
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


@pytest.mark.parametrize("f", TAKES_A_MASK, ids=with_kernel_ids + ["attention_backward", "flash_trace",
                                                                   "counted_attention", "one_loop_trace",
                                                                   "two_loop_trace"])
def test_a_mask_never_widens_the_output(f):
    """Issue 16: q, k, v of shape (B, N, D) with padding_mask(lengths, M), which is (B, 1, 1, M), would compute
    every sequence's rows under every sequence's mask, (B, B, N, Dv). Refused, naming both shapes and the fix;
    leading axes of size 1 beyond the inputs' are dropped (the output keeps the inputs' shape)."""
    q, k, v = head(N=2, M=5, D=4, Dv=3, batch=(3,), seed=11)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 1, 5\) would widen the output.*\(3,\).*"
                                         r"\(3, 3\).*padding_mask\(lengths, M\)\[:, 0\]"):
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
@given(N=st.integers(1, 6), M=st.integers(1, 7), D=st.integers(1, 4), block_q=st.integers(1, 5),
       block_k=st.integers(1, 5), order=st.sampled_from(["fa1", "fa2"]),
       dtype=st.sampled_from([np.float64, np.float32, np.float16]), seed=st.integers(0, 2**16),
       garbage=st.sampled_from([np.nan, np.inf, -np.inf, 1e30]), batch=st.sampled_from([(), (2,)]))
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


@pytest.mark.parametrize("block, error, match", [
    (0, ValueError, r"block_q must be >= 1 \(rows per tile\), got 0"),
    (-3, ValueError, r"block_q must be >= 1 \(rows per tile\), got -3"),
    (True, TypeError, "block_q must be a positive integer.*bool"), (2.0, TypeError, "block_q must be a positive"),
    ("8", TypeError, "block_q must be a positive"),
])
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
