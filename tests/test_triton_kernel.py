"""flashmath.triton_kernel: the Triton FlashAttention-2 kernel against the float64 reference.

Without a GPU the kernel runs in Triton's interpreter (importing the module sets TRITON_INTERPRET=1), so these
tests run on any machine with the ``triton`` extra; they are skipped, saying so, without it. Sizes stay small:
the interpreter runs each program in Python (about 0.1-0.5 s per call here).

The error rule for float16 is FlashAttention's (its tests, flash-attention/tests/test_flash_attn.py): the kernel's
largest error against a float64 reference may be at most twice that of naive attention computed in float16.
"""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import HAVE_TRITON, make, max_error, needs_triton

from flashmath.attention import attention
from flashmath.masks import causal_mask, padding_mask

if HAVE_TRITON:
    import torch

    from flashmath.triton_kernel import triton_flash_attention

FLOAT32_TOL = 2e-6  # |A - A_ref| <= tol (1 + |A_ref|); measured errors are below 1e-6


def assert_matches(a, lse, a_ref, lse_ref, tol=FLOAT32_TOL):
    scale_a, scale_l = 1 + np.abs(a_ref).max(initial=0), 1 + np.abs(lse_ref[np.isfinite(lse_ref)]).max(initial=0)
    err_a, err_l = max_error(a, a_ref), max_error(lse, lse_ref)
    assert err_a <= tol * scale_a, f"output: max error {err_a:.2e}"
    assert err_l <= tol * scale_l, f"logsumexp: max error {err_l:.2e}"
    return err_a, err_l


# (id, N, M, D, Dv, block_q, block_k, keyword arguments)
CASES = [
    ("N != M", 100, 77, 16, 16, 32, 32, {}),
    ("N < M", 33, 90, 32, 32, 16, 32, {}),
    ("N = 1 (decoding)", 1, 77, 32, 32, 16, 16, {}),
    ("M = 1", 20, 1, 16, 16, 16, 16, {}),
    ("sizes not multiples of the blocks, D and Dv not powers of two", 45, 70, 24, 40, 16, 32, {}),
    ("D = 128, Dv = 8", 37, 41, 128, 8, 32, 16, {}),
    ("causal, N < M (bottom-right)", 40, 75, 16, 16, 16, 16, {"causal": True}),
    ("causal, N > M: the first rows are fully masked", 75, 40, 16, 16, 16, 16, {"causal": True}),
    ("causal, N = M, one tile", 30, 30, 16, 16, 32, 32, {"causal": True}),
    ("top-left causal as a mask", 50, 70, 16, 16, 16, 32, {"mask": causal_mask(50, 70, align="top-left")}),
    ("key padding", 50, 70, 16, 16, 16, 32, {"mask": padding_mask([53], 70)[0]}),
    ("key padding and causal", 70, 70, 16, 16, 32, 16, {"mask": padding_mask([45], 70)[0], "causal": True}),
    ("a random mask with fully masked rows", 40, 50, 16, 16, 16, 16, {"mask": "random"}),
    ("every key masked", 20, 30, 16, 16, 16, 16, {"mask": np.zeros((20, 30), bool)}),
    ("no keys (M = 0)", 20, 0, 16, 16, 16, 16, {}),
    ("a scale of 0.3", 30, 40, 16, 16, 16, 16, {"scale": 0.3}),
]


def _kwargs(kwargs, N, M, rng):
    if isinstance(kwargs.get("mask"), str):
        keep = rng.random((N, M)) < 0.3
        keep[::7] = False  # every 7th row fully masked
        kwargs = {**kwargs, "mask": keep}
    return kwargs


@needs_triton
@pytest.mark.parametrize("name, N, M, D, Dv, block_q, block_k, kwargs", CASES, ids=[c[0] for c in CASES])
def test_float32_equals_reference(name, N, M, D, Dv, block_q, block_k, kwargs):
    rng = np.random.default_rng(N * 1000 + M)
    q, k, v = make(rng, N, M, D, Dv, dtype=np.float32)
    kwargs = _kwargs(kwargs, N, M, rng)
    a, lse = triton_flash_attention(q, k, v, block_q=block_q, block_k=block_k, return_lse=True, **kwargs)
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and lse.dtype == np.float32
    assert_matches(a, lse, a_ref, lse_ref)
    empty = np.isneginf(lse_ref)
    assert np.all(a[empty] == 0)  # fully masked rows are exactly 0


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
def test_float16_error_at_most_twice_naive_float16(causal):
    rng = np.random.default_rng(16)
    N, M, D = 80, 96, 32  # N <= M: no fully masked row (naive softmax would give NaN there)
    q, k, v = make(rng, N, M, D, D, dtype=np.float64)
    a_ref = attention(q, k, v, causal=causal)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    a = triton_flash_attention(q16, k16, v16, block_q=32, block_k=32, causal=causal)
    assert a.dtype == np.float16
    # naive attention in float16, as PyTorch computes it (scores, softmax and product in float16 tensors)
    qt, kt, vt = (torch.from_numpy(x) for x in (q16, k16, v16))
    x = (qt @ kt.T) * D**-0.5
    if causal:
        x = x.masked_fill(~torch.from_numpy(causal_mask(N, M)), float("-inf"))
    naive = (torch.softmax(x, dim=-1) @ vt).double().numpy()
    err, err_naive = max_error(a, a_ref), max_error(naive, a_ref)
    assert err <= 2 * err_naive, f"kernel error {err:.2e} > 2 x naive float16 error {err_naive:.2e}"


@needs_triton
def test_batch_and_heads_broadcast():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 40, 16)).astype(np.float32)  # (batch, heads, N, D)
    k, v = (rng.standard_normal((2, 1, 50, 16)).astype(np.float32) for _ in range(2))  # shared by the heads
    keep = padding_mask([50, 37], 50)  # key padding per batch element: (2, 1, 1, 50), against (2, 3, 40, 50) scores
    a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, mask=keep, causal=True, return_lse=True)
    assert_matches(a, lse, *attention(q, k, v, mask=keep, causal=True, return_lse=True))


@needs_triton
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_padded_keys_are_absent_whatever_their_rows_hold(poison):
    rng = np.random.default_rng(6)
    q, k, v = make(rng, 30, 45, 16, 16, dtype=np.float32)
    lengths = np.arange(45) < 29
    k[~lengths], v[~lengths] = poison, poison
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the interpreter's numpy warnings (inf - inf in Q K^T) stay inside
        a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, mask=lengths[None, :], return_lse=True)
    assert_matches(a, lse, *attention(q[:, :], k[:29], v[:29], return_lse=True))


@needs_triton
def test_future_keys_of_a_causal_tile_are_absent_even_when_nan():
    # keys right of the last row's diagonal are never loaded: NaN there cannot leak
    rng = np.random.default_rng(7)
    q, k, v = make(rng, 32, 64, 16, 16, dtype=np.float32)
    k[48:], v[48:] = np.nan, np.nan  # the first 16 query rows see keys up to 32 + 15 = 47
    a = triton_flash_attention(q, k, v, block_q=16, block_k=16, causal=True)
    a_ref = attention(q[:16], k[:48], v[:48], mask=causal_mask(32, 64)[:16, :48])
    assert max_error(a[:16], a_ref) <= FLOAT32_TOL * 2
    assert np.isnan(a[16:]).all()  # the second query tile attends the NaN keys


@needs_triton
def test_nan_in_a_query_row_gives_nan_there_only():
    rng = np.random.default_rng(8)
    q, k, v = make(rng, 20, 30, 16, 16, dtype=np.float32)
    q[3, 5] = np.nan
    a = triton_flash_attention(q, k, v, block_q=16, block_k=16)
    assert np.isnan(a[3]).all() and not np.isnan(np.delete(a, 3, axis=0)).any()


@needs_triton
def test_tensors_in_tensors_out_and_inputs_untouched():
    rng = np.random.default_rng(9)
    q, k, v = make(rng, 25, 35, 16, 16, dtype=np.float32)
    copies = [x.copy() for x in (q, k, v)]
    qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
    a, lse = triton_flash_attention(qt, kt, vt, block_q=16, block_k=16, return_lse=True)
    assert isinstance(a, torch.Tensor) and a.dtype == torch.float32 and lse.shape == (25,)
    assert_matches(a.numpy(), lse.numpy(), *attention(q, k, v, return_lse=True))
    for x, copy in zip((q, k, v), copies, strict=False):
        np.testing.assert_array_equal(x, copy)


@needs_triton
def test_num_warps_and_num_stages_do_not_change_the_result():
    rng = np.random.default_rng(10)
    q, k, v = make(rng, 40, 40, 16, 16, dtype=np.float32)
    a1 = triton_flash_attention(q, k, v, block_q=16, block_k=16, num_warps=4, num_stages=2)
    a2 = triton_flash_attention(q, k, v, block_q=16, block_k=16, num_warps=8, num_stages=3)
    np.testing.assert_allclose(a1, a2, rtol=1e-6, atol=1e-7)


@needs_triton
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"dtype": np.float64}, TypeError, "float16, bfloat16 or float32"),
        ({"D": 160}, ValueError, "up to 128"),
        ({"block_q": 24}, ValueError, "power of two from 16 to 256"),
        ({"block_k": 8}, ValueError, "power of two from 16 to 256"),
        ({"block_q": 32.0}, TypeError, "block_q"),
        ({"order": "fa1"}, ValueError, "order must be 'fa2'"),
        ({"mask": np.ones((3, 4))}, TypeError, "boolean"),
        ({"mask": np.ones((5, 4), bool)}, ValueError, "does not broadcast"),
    ],
)
def test_errors(kwargs, error, match):
    kwargs = dict(kwargs)
    dtype, D = kwargs.pop("dtype", np.float32), kwargs.pop("D", 16)
    q, k, v = make(np.random.default_rng(0), 3, 4, D, D, dtype=dtype)
    with pytest.raises(error, match=match):
        triton_flash_attention(q, k, v, **kwargs)


@needs_triton
@pytest.mark.skipif(HAVE_TRITON and torch.cuda.is_available(), reason="bfloat16 runs compiled on a GPU")
def test_bfloat16_in_the_interpreter_is_refused_with_the_reason():
    q = torch.zeros((3, 16), dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="11584"):
        triton_flash_attention(q, q, q)


def test_without_triton_flashmath_imports_and_the_wrapper_names_the_install_command():
    # A fresh interpreter in which torch and triton cannot be imported (runs whether or not they are installed).
    code = (
        "import sys\n"
        "sys.modules['torch'] = sys.modules['triton'] = None\n"
        "import flashmath, flashmath.triton_kernel as tk\n"
        "assert not tk.available()\n"
        "import numpy as np\n"
        "try:\n"
        "    tk.triton_flash_attention(np.zeros((2, 16), np.float32), np.zeros((2, 16), np.float32),\n"
        "                              np.zeros((2, 16), np.float32))\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from flashmath.triton_kernel import INSTALL_COMMANDS

    # the commands that work from the clone (the package is not on PyPI: no `pip install "flashmath[triton]"`)
    assert all(command in out.stdout for command in INSTALL_COMMANDS) and "flashmath[triton]" not in out.stdout
    assert INSTALL_COMMANDS[1] == 'pip install -e ".[triton]" -c constraints.txt'


def test_the_install_commands_are_readmes():
    import re
    from pathlib import Path

    from flashmath.triton_kernel import INSTALL_COMMANDS, TORCH_VERSION

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## The triton extra") :]
    section = section[: section.index("\n## ")]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    assert block.splitlines() == list(INSTALL_COMMANDS)
    assert f"pip install torch=={TORCH_VERSION}" in section  # the alternative without PyTorch's own index
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert f"pip install torch=={TORCH_VERSION} && {INSTALL_COMMANDS[1]}" in ci, ".ci/run installs the same torch"


@pytest.mark.parametrize("chapter, name", [(11, "11_triton.ipynb"), (12, "12_backward.ipynb")])
def test_a_chapter_without_the_extra_stops_at_its_check_cell_with_the_commands(tmp_path, chapter, name):
    """Run All of chapters 11 and 12 in a kernel where torch and triton cannot be imported (whether or not they are
    installed here): the check cell fails with the install commands as its whole traceback, and nothing after it
    runs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from pathlib import Path

    from flashmath.triton_kernel import INSTALL_COMMANDS

    path = Path(__file__).resolve().parents[1] / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    markdown = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert all(command in markdown for command in INSTALL_COMMANDS), "the title cell shows the commands too"
    stored = [c for c in nb.cells if c.cell_type == "code"]
    check = next(i for i, c in enumerate(nb.cells) if "require_extra" in c.source)
    assert nb.cells.index(stored[1]) == check, "the extra is checked by the chapter's first cell after Colab's"
    for cell in stored:
        cell.outputs, cell.execution_count = [], None
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys\nsys.modules['torch'] = sys.modules['triton'] = None"))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}})
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute()
    cell = nb.cells[check + 1]
    (error,) = [o for o in cell.outputs if o.output_type == "error"]
    assert error.ename == "ExtraNotInstalled"
    assert error.traceback[0].startswith(f"Chapter {chapter} needs the triton extra, PyTorch and Triton")
    assert len(error.traceback) <= 10 and not any('File "' in line or "---->" in line for line in error.traceback)
    assert all(f"    {command}" in error.traceback for command in INSTALL_COMMANDS)
    ran = [c.execution_count for c in nb.cells[check + 2 :] if c.cell_type == "code"]
    assert set(ran) == {None}, "Run All stops at the check cell"


# ------------------------------------------------------------------------------------------------------------------
# Issue 16: a poisoned row is never "empty". The kernel follows flash_attention's convention exactly: logsumexp NaN
# for a row that sees a NaN (in q, in an attended k row, or NaN and +inf together), +inf for a row with a +inf
# score (exp(inf - inf) is NaN inside), -inf only for a row that attended no key. Merged and differentiated, a
# poisoned state stays poisoned; only a -inf state is dropped as "attended nothing".
# ------------------------------------------------------------------------------------------------------------------

NAN, INF = np.nan, np.inf
POISONED = {  # id: (q, k, v, mask) as float32, one query row; the key k = [1, 0] from the issue
    "NaN in q": ([[NAN, 0]], [[1, 0]], [[1, 1]], None),
    "+inf score": ([[INF, 0]], [[1, 0]], [[1, 1]], None),
    "NaN in an attended key": ([[1, 0]], [[1, 0], [NAN, 0]], [[1, 1], [2, 2]], None),
    "+inf and NaN scores": ([[1, 0]], [[INF, 0], [NAN, 0]], [[1, 1], [2, 2]], None),
    "-inf scores only": ([[-INF, 0]], [[1, 0]], [[1, 1]], None),
    "no key attended": ([[NAN, 0]], [[1, 0]], [[1, 1]], [[False]]),
}


def _poisoned(name, rows=1):
    q, k, v, mask = (
        None if x is None else np.array(x, np.float32 if x is not POISONED[name][3] else bool) for x in POISONED[name]
    )
    return np.repeat(q, rows, axis=0), k, v, None if mask is None else np.repeat(mask, rows, axis=0)


@needs_triton
@pytest.mark.parametrize("name", POISONED)
@pytest.mark.parametrize("rows", [1, 20])  # one row; rows in two query tiles
def test_a_poisoned_row_gets_the_logsumexp_of_flash_attention(name, rows):
    from flashmath.flash import flash_attention

    q, k, v, mask = _poisoned(name, rows)
    a_ref, lse_ref = flash_attention(q, k, v, mask=mask, return_lse=True)
    a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, mask=mask, return_lse=True)
    np.testing.assert_array_equal(lse, lse_ref)  # NaN where NaN, +inf where +inf, -inf where -inf
    np.testing.assert_array_equal(np.isnan(a), np.isnan(a_ref))
    np.testing.assert_array_equal(a[~np.isnan(a)], a_ref[~np.isnan(a_ref)])
    expected = {
        "NaN in q": NAN,
        "+inf score": INF,
        "NaN in an attended key": NAN,
        "+inf and NaN scores": NAN,
        "-inf scores only": -INF,
        "no key attended": -INF,
    }[name]
    np.testing.assert_array_equal(lse, np.full(rows, expected, np.float32))


@needs_triton
@pytest.mark.parametrize("name", POISONED)
def test_a_poisoned_state_stays_poisoned_when_merged_and_differentiated(name):
    from flashmath.backward import attention_backward
    from flashmath.splitkv import merge_states

    q, k, v, mask = _poisoned(name)
    a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, mask=mask, return_lse=True)
    # merged with a healthy part (the state of other keys): a poisoned part is never dropped as "attended nothing"
    a2, lse2 = np.array([[5, 5]], np.float32), np.array([0.5], np.float32)
    a_m, lse_m = merge_states(a, lse, a2, lse2)
    grads = attention_backward(q, k, v, a, lse, np.ones_like(a), mask=mask)
    if name in ("-inf scores only", "no key attended"):  # attended nothing: the part is absent, no gradient
        np.testing.assert_array_equal(lse_m, lse2)
        np.testing.assert_array_equal(a_m, a2)
        assert all((g == 0).all() for g in grads)
    else:  # NaN stays NaN, +inf stays +inf with a NaN output: never silently a finite number or 0
        assert np.isnan(lse_m[0]) if np.isnan(lse[0]) else lse_m[0] == INF
        assert np.isnan(a_m).all()
        assert np.isnan(grads[0]).all()  # dq of the poisoned row


# -- chapter 13: grouped-query heads, sliding window, softcap as compile-time switches of the same kernel -----------


@needs_triton
@pytest.mark.parametrize("N, M", [(40, 40), (17, 50), (50, 17), (1, 33)])
@pytest.mark.parametrize(
    "variant",
    [
        {"enable_gqa": True},
        {"window": (5, 0)},
        {"window": (3, 7)},
        {"window": (None, 2), "causal": True},
        {"softcap": 1.5},
        {"softcap": 2.0, "window": 9, "enable_gqa": True, "causal": True},
    ],
)
def test_kernel_variants_match_the_numpy_loop(N, M, variant):
    from flashmath.flash import flash_attention

    rng = np.random.default_rng(N + 3 * M)
    q = (3 * rng.standard_normal((2, 4, N, 16))).astype(np.float32)
    heads = 2 if variant.get("enable_gqa") else 4
    k, v = (rng.standard_normal((2, heads, M, 16)).astype(np.float32) for _ in range(2))
    got, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, return_lse=True, **variant)
    want, want_lse = flash_attention(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), return_lse=True, **variant
    )
    assert got.shape == want.shape and got.dtype == np.float32
    assert max_error(got, want) < 2e-5
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))  # rows the window empties
    finite = np.isfinite(want_lse)
    assert np.abs(lse[finite] - want_lse[finite]).max() < 2e-5


@needs_triton
def test_kernel_variants_refuse_what_they_do_not_support():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 16, 16)).astype(np.float32)
    k = rng.standard_normal((2, 16, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        triton_flash_attention(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="softcap"):
        triton_flash_attention(q, q, q, softcap=-1.0)
    with pytest.raises(NotImplementedError, match="forward-only"):
        t = torch.from_numpy(q).requires_grad_()
        triton_flash_attention(t, t, t, window=(2, 0))


# -- chapter 13's learnable sink (HAS_SINK) and chapter 7's lazy rescaling (LAZY) ------------------------------------
# The kernel computes in float32 (float64 is refused), so "equal to the formula" means to float32 rounding here; the
# numpy loops are checked against the formula to 1e-12 in float64 (tests/test_variants.py).

SINKS = np.array([-1.0, 0.5, 3.0, 40.0], np.float32)  # one per query head; 40 is above every score


@needs_triton
@pytest.mark.parametrize("N, M", [(40, 40), (50, 17), (1, 33)])
@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"causal": True},
        {"mask": "random"},
        {"enable_gqa": True, "causal": True},
        {"window": (5, 0)},
        {"softcap": 2.0},
    ],
)
def test_kernel_sink_equals_the_formula(N, M, variant):
    from flashmath.flash import flash_attention

    rng = np.random.default_rng(N + 7 * M)
    q = (2 * rng.standard_normal((2, 4, N, 16))).astype(np.float32)
    heads = 2 if variant.get("enable_gqa") else 4
    k, v = (rng.standard_normal((2, heads, M, 16)).astype(np.float32) for _ in range(2))
    variant = _kwargs(variant, N, M, rng)
    got, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, learnable_sink=SINKS, return_lse=True, **variant)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    if "enable_gqa" in variant or "window" in variant or "softcap" in variant:  # the float64 loop (test_variants)
        want, want_lse = flash_attention(q64, k64, v64, learnable_sink=SINKS, return_lse=True, **variant)
    else:  # GPT-OSS's formula (flashmath.attention.attention)
        want, want_lse = attention(q64, k64, v64, learnable_sink=SINKS, return_lse=True, **variant)
    assert_matches(got, lse, want, want_lse)


@needs_triton
def test_kernel_sink_edge_cases():
    rng = np.random.default_rng(60)
    q, k, v = (rng.standard_normal((4, 20, 16)).astype(np.float32) for _ in range(3))
    keep = np.ones((20, 20), bool)
    keep[3] = False  # a row with no key
    run = lambda sink, **kw: triton_flash_attention(  # noqa: E731
        q, k, v, block_q=16, block_k=16, mask=keep, return_lse=True, learnable_sink=sink, **kw
    )
    a, lse = run(SINKS)
    assert np.all(a[:, 3] == 0) and np.array_equal(lse[:, 3], SINKS)  # output 0, logsumexp = the sink
    for got, want in zip(run([-np.inf] * 4), run(None), strict=True):  # -inf is no sink, bitwise
        np.testing.assert_array_equal(got, want)
    a, lse = run([100.0] * 4)  # above every score: nothing overflows
    assert np.isfinite(a).all() and np.abs(a).max() < 1e-30 and np.array_equal(lse, np.full_like(lse, 100.0))
    a, lse = run([np.nan, 0.0, 0.0, 0.0])  # every row sees its sink
    assert np.isnan(a[0]).all() and np.isnan(lse[0]).all() and np.isfinite(a[1:]).all() and np.isfinite(lse[1:]).all()
    a, lse = triton_flash_attention(q, k[:, :0], v[:, :0], learnable_sink=torch.from_numpy(SINKS), return_lse=True)
    assert np.all(a == 0) and np.array_equal(lse, np.broadcast_to(SINKS[:, None], lse.shape))  # M = 0


@needs_triton
def test_kernel_sink_with_float16_inputs():
    rng = np.random.default_rng(61)
    q, k, v = make(rng, 48, 40, 16, 16, (4,), dtype=np.float16)
    a, lse = triton_flash_attention(q, k, v, block_q=16, block_k=16, learnable_sink=SINKS, causal=True, return_lse=True)
    want, want_lse = attention(q, k, v, learnable_sink=SINKS, causal=True, return_lse=True)
    assert a.dtype == np.float16 and lse.dtype == np.float32
    assert max_error(a, want) < 2e-3 and max_error(lse, want_lse) < 1e-5


@needs_triton
def test_kernel_sink_errors():
    q = np.zeros((4, 16, 16), np.float32)
    with pytest.raises(ValueError, match=r"must be \(H,\) = \(4,\)"):
        triton_flash_attention(q, q, q, learnable_sink=[1.0, 2.0])
    with pytest.raises(TypeError, match="learnable_sink must be real numbers"):
        triton_flash_attention(q, q, q, learnable_sink=["a"] * 4)
    t = torch.from_numpy(q).requires_grad_()  # differentiable with a sink (tests/test_triton_backward.py), not with
    with pytest.raises(NotImplementedError, match="window and softcap are forward-only"):  # a softcap or window
        triton_flash_attention(t, t, t, learnable_sink=SINKS, softcap=2.0)


@needs_triton
@pytest.mark.parametrize("threshold", [1, 4, 8])
@pytest.mark.parametrize("growth", [0.0, 0.2, 2.0])
def test_kernel_lazy_rescaling_equals_the_eager_kernel(threshold, growth):
    rng = np.random.default_rng(62)
    q, k, v = make(rng, 40, 70, 16, 16, (2,), dtype=np.float32)
    k[..., 0] += growth * np.arange(70) / np.sqrt(16) * 4  # growing maxima (q's first column scales them)
    q[..., 0] = np.abs(q[..., 0]) + 1
    kwargs = dict(block_q=16, block_k=16, return_lse=True, causal=True, learnable_sink=[0.5, 2.0])
    eager = triton_flash_attention(q, k, v, **kwargs)
    for got, want in zip(triton_flash_attention(q, k, v, rescale_threshold=0, **kwargs), eager, strict=True):
        np.testing.assert_array_equal(got, want)  # 0: the eager update, bitwise
    lazy = triton_flash_attention(q, k, v, rescale_threshold=threshold, **kwargs)
    # the same float32 scores, another reference point: equal to the eager kernel to float32 rounding (measured:
    # 2.4e-7 for the output, 3.8e-6 for logsumexps up to 110)
    assert max_error(lazy[0], eager[0]) <= 1e-6 * (1 + np.abs(eager[0]).max())
    assert max_error(lazy[1], eager[1]) <= 1e-7 * (1 + np.abs(eager[1]).max())
    if growth <= 0.2:  # scores below 15: both within FLOAT32_TOL of the float64 formula (at 110 the scores'
        # own float32 rounding, about 110 x 6e-8, is what separates the kernel from it, eager or lazy)
        assert_matches(*lazy, *attention(q, k, v, causal=True, learnable_sink=[0.5, 2.0], return_lse=True))


@needs_triton
def test_kernel_rescale_threshold_errors_and_the_differentiable_path():
    q = np.zeros((16, 16), np.float32)
    with pytest.raises(ValueError, match="finite and >= 0"):
        triton_flash_attention(q, q, q, rescale_threshold=-1)
    with pytest.raises(TypeError, match="rescale_threshold must be a real number"):
        triton_flash_attention(q, q, q, rescale_threshold="8")
    rng = np.random.default_rng(63)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in make(rng, 20, 24, 16, 16, dtype=np.float32))
    a = triton_flash_attention(q, k, v, block_q=16, block_k=16, rescale_threshold=8.0)
    a.sum().backward()  # the forward's logsumexp is exact whatever reference was kept: the backward is unchanged
    want = attention(*(x.detach().numpy() for x in (q, k, v)))
    assert max_error(a.detach().numpy(), want) < 2e-6 and torch.isfinite(q.grad).all()
