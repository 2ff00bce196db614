"""Chapter 12's Triton exercise (12.2, check_dq_kernel): learners' dQ kernels, right and wrong, run in Triton's
interpreter (or compiled on a GPU), each wrong one named by its mistake alone.

The kernels here are written apart from the checker's numpy models: one Triton kernel with a compile-time switch per
slip (``SLIP``), launched by the exercise's wrapper as the notebook gives it.
"""

import numpy as np
import pytest
from helpers import HAVE_TRITON, checker_tests, named

pytestmark = pytest.mark.skipif(
    not HAVE_TRITON, reason='the triton extra is not installed (PyTorch and Triton): see README, "The triton extra"'
)

if HAVE_TRITON:
    from flashmath import triton_kernel  # noqa: F401, I001  (first: without a GPU it switches Triton to its interpreter)
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def learner_dq_kernel(Q, K, V, dA, LSE, Delta, Keep, dQ, N, M, D, scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                          SLIP: tl.constexpr):  # fmt: skip
        """The notebook's template, filled in; ``SLIP`` 0 is right, each other value one learner's slip."""
        i = tl.program_id(0)
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, BLOCK_D)
        inside = (rows[:, None] < N) & (d[None, :] < D)
        q_tile = tl.load(Q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        da_tile = tl.load(dA + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        lse = tl.load(LSE + rows, mask=rows < N, other=float("-inf"))
        delta = tl.load(Delta + rows, mask=rows < N, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        lo = 0
        hi = M
        step = BLOCK_N
        if SLIP == 33:  # the first key tile skipped: range(BLOCK_N, M + BLOCK_N, BLOCK_N)
            lo = BLOCK_N
            hi = M + BLOCK_N
        if SLIP == 30:  # "whole tiles only"
            hi = M - M % BLOCK_N
        if SLIP == 31:  # "stop one tile before the end"
            hi = M - BLOCK_N
        if SLIP == 32:  # "one step per tile": tile numbers, not keys
            hi = tl.cdiv(M, BLOCK_N)
            step = 1
        for c0 in range(lo, hi, step):
            cols = c0 + tl.arange(0, BLOCK_N)
            k_tile = tl.load(K + cols[:, None] * D + d[None, :], mask=(cols[:, None] < M) & (d[None, :] < D), other=0.0)
            v_tile = tl.load(V + cols[:, None] * D + d[None, :], mask=(cols[:, None] < M) & (d[None, :] < D), other=0.0)
            keep = tl.load(Keep + rows[:, None] * M + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < M),
                           other=0) != 0  # fmt: skip
            x_tile = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * scale
            if SLIP == 1:  # "the softmax's exponentials"
                y_tile = tl.where(keep, tl.exp(x_tile), 0.0)
            elif SLIP == 2:  # "exp(X - L) is exp(X) / exp(L)"
                y_tile = tl.where(keep, tl.exp(x_tile) / tl.exp(lse[:, None]), 0.0)
            elif SLIP == 3:  # "the tutorial uses exp2"
                y_tile = tl.where(keep, tl.exp2(x_tile - lse[:, None]), 0.0)
            elif SLIP == 4:  # "exp2 with the scores in base 2", L left in base e
                y_tile = tl.where(keep, tl.exp2(x_tile * 1.4426950408889634 - lse[:, None]), 0.0)
            elif SLIP == 5:  # "masked: multiply by 0"
                y_tile = tl.exp(x_tile - lse[:, None]) * keep
            elif SLIP == 6:  # "masked scores are -inf, so exp gives 0"
                y_tile = tl.exp(tl.where(keep, x_tile, float("-inf")) - lse[:, None])
            elif SLIP == 7:  # the mask forgotten
                y_tile = tl.exp(x_tile - lse[:, None])
            elif SLIP == 8:  # lse without [:, None]
                y_tile = tl.where(keep, tl.exp(x_tile - lse), 0.0)
            else:
                y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0)
            dy_tile = tl.dot(da_tile, tl.trans(v_tile), input_precision="ieee")
            if SLIP == 10:  # "D added"
                dx_tile = y_tile * (dy_tile + delta[:, None])
            elif SLIP == 11:  # the parentheses missing
                dx_tile = y_tile * dy_tile - delta[:, None]
            elif SLIP == 12:  # "D is rowsum(Y * dY)", over this tile
                dx_tile = y_tile * (dy_tile - tl.sum(y_tile * dy_tile, 1)[:, None])
            elif SLIP == 13:  # delta without [:, None]
                dx_tile = y_tile * (dy_tile - delta)
            else:
                dx_tile = y_tile * (dy_tile - delta[:, None])
            if SLIP == 20:  # "A = Y V, so the values"
                dq += tl.dot(dx_tile, v_tile, input_precision="ieee")
            elif SLIP == 21:  # the transpose of X = Q K^T carried over
                dq += tl.dot(dx_tile, tl.trans(k_tile), input_precision="ieee")
            elif SLIP == 22:  # the scale in the loop and after it
                dq += tl.dot(dx_tile, k_tile, input_precision="ieee") * scale
            else:
                dq += tl.dot(dx_tile, k_tile, input_precision="ieee")
        if SLIP == 23:  # the scale forgotten
            dq = dq
        elif SLIP == 24:  # "the scale is sqrt(D)"
            dq = dq / scale
        else:
            dq = dq * scale
        tl.store(dQ + rows[:, None] * D + d[None, :], dq, mask=inside)

    @triton.jit
    def other_right_kernel(Q, K, V, dA, LSE, Delta, Keep, dQ, N, M, D, scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
        """Right, in another form: exp2 with both exponents in base 2, dX selected too, the scale inside the loop,
        the key tiles counted by number."""
        i = tl.program_id(0)
        rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, BLOCK_D)
        inside = (rows[:, None] < N) & (d[None, :] < D)
        q_tile = tl.load(Q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        da_tile = tl.load(dA + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        lse2 = tl.load(LSE + rows, mask=rows < N, other=float("-inf")) * 1.4426950408889634  # L in base 2
        delta = tl.load(Delta + rows, mask=rows < N, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for j in range(0, tl.cdiv(M, BLOCK_N)):
            cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
            k_tile = tl.load(K + cols[:, None] * D + d[None, :], mask=(cols[:, None] < M) & (d[None, :] < D), other=0.0)
            v_tile = tl.load(V + cols[:, None] * D + d[None, :], mask=(cols[:, None] < M) & (d[None, :] < D), other=0.0)
            keep = tl.load(Keep + rows[:, None] * M + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < M),
                           other=0) != 0  # fmt: skip
            x2 = tl.dot(q_tile, tl.trans(k_tile), input_precision="ieee") * (scale * 1.4426950408889634)
            y_tile = tl.where(keep, tl.exp2(x2 - lse2[:, None]), 0.0)
            dy_tile = tl.dot(da_tile, tl.trans(v_tile), input_precision="ieee")
            dx_tile = tl.where(keep, y_tile * (dy_tile - delta[:, None]), 0.0)
            dq += tl.dot(dx_tile, k_tile, input_precision="ieee") * scale
        tl.store(dQ + rows[:, None] * D + d[None, :], dq, mask=inside)


def wrapper(slip=0, kernel=None, block_n=16):
    """The exercise's wrapper (the notebook's ``my_dq``) around the learner's kernel."""

    def my_dq(q, k, v, a, lse, grad_a, keep):
        N, D = q.shape
        M = k.shape[0]
        delta = (grad_a * a).sum(dim=1)
        dq = torch.empty_like(q)
        extra = {} if kernel is not None else {"SLIP": slip}
        (kernel or learner_dq_kernel)[(triton.cdiv(N, 16),)](
            q, k, v, grad_a, lse, delta, keep.to(torch.uint8), dq, N, M, D, D**-0.5,
            BLOCK_M=16, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(D)), **extra,
        )  # fmt: skip
        return dq

    return my_dq


def in_place(q, k, v, a, lse, grad_a, keep):
    dq = wrapper()(q, k, v, a, lse, grad_a, keep)
    grad_a.zero_()  # "done with it"
    return dq


WRONG = {
    "check_dq_kernel": {
        "Y not from the logsumexp": wrapper(1),
        "exp(X) / exp(L) instead of exp(X - L)": wrapper(2),
        "base 2 instead of e": wrapper(3),
        "NaN on a fully masked row": wrapper(5),
        "the mask forgotten": wrapper(7),
        "a row's L or Delta broadcast along the keys": wrapper(8),
        "Delta with the wrong sign": wrapper(10),
        "dX = Y * dY - Delta (the parentheses missing)": wrapper(11),
        "Delta computed per key tile": wrapper(12),
        "dQ from the values": wrapper(20),
        "K transposed in dX K": wrapper(21),
        "the scale missing from dQ": wrapper(23),
        "the scale applied twice": wrapper(22),
        "sqrt(D) instead of 1/sqrt(D)": wrapper(24),
        "the key tiles' bounds wrong": wrapper(30),
        "the input modified in place": in_place,
    }
}

test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


@pytest.mark.parametrize(
    "slip, name",
    [
        (4, "base 2 instead of e"),
        (6, "NaN on a fully masked row"),
        (13, "a row's L or Delta broadcast along the keys"),
        (31, "the key tiles' bounds wrong"),
        (32, "the key tiles' bounds wrong"),
        (33, "the key tiles' bounds wrong"),  # the first tile skipped (review rev-f-12-6 of round 23)
    ],
)
def test_other_forms_of_a_mistake_are_named(slip, name):
    from flashmath.exercises import check_dq_kernel

    report = check_dq_kernel(wrapper(slip))
    assert not report.passed and named(report) == {name}, report


def test_the_transposed_k_raises_where_the_shapes_differ_and_is_explained():
    from flashmath.exercises import check_dq_kernel

    text = repr(check_dq_kernel(wrapper(21)))
    assert "N = M = 16, D = 32: one tile each: two blocks whose shapes do not fit" in text, text
    assert "tl.dot(dx_tile, k_tile)" in text and "(raised " in text, text  # the hint first, Triton's error after it


def test_the_nan_slip_fails_only_the_cases_with_an_empty_row():
    from flashmath.exercises import check_dq_kernel

    report = check_dq_kernel(wrapper(5))
    assert [name for name, ok, _ in report.cases if not ok] == [
        "property: every row fully masked: dQ is 0",
        "row 5 attends no key (L = -inf)",
    ], report


def test_a_result_that_is_not_a_float32_tensor_is_explained():
    from flashmath.exercises import check_dq_kernel

    right = wrapper()
    text = repr(check_dq_kernel(lambda *args: right(*args).double()))
    assert "expected a float32 tensor on cpu (q's device), got torch.float64" in text or "cuda" in text, text
    text = repr(check_dq_kernel(lambda *args: right(*args).numpy()))
    assert "returned ndarray, not a torch tensor" in text, text
    assert "returned None" in repr(check_dq_kernel(lambda *args: None))


def the_packages_kernels(q, k, v, a, lse, grad_a, keep):
    from flashmath.triton_backward import triton_attention_backward

    return triton_attention_backward(q, k, v, a, lse, grad_a, mask=keep, block_q=16, block_k=16)[0]


def autograd_of_sdpa(q, k, v, a, lse, grad_a, keep):
    """PyTorch's autograd through its own attention, in float64 (2.13 gives a fully masked row 0 and no gradient)."""
    q64 = q.double().requires_grad_()
    out = torch.nn.functional.scaled_dot_product_attention(q64, k.double(), v.double(), attn_mask=keep)
    out.backward(grad_a.double())
    return q64.grad.float()


def the_numpy_backward(q, k, v, a, lse, grad_a, keep):
    import flashmath as fm

    args = (x.cpu().numpy().astype(np.float64) for x in (q, k, v, a, lse, grad_a))
    return torch.from_numpy(fm.attention_backward(*args, mask=keep.cpu().numpy())[0].astype(np.float32))


def right_answer(name):
    """The right answers by name, built when a test runs (their kernels exist only where Triton is installed)."""
    from flashmath import solutions_triton

    return {
        "solution": lambda: solutions_triton.backward_dq,
        "learner": lambda: wrapper(),
        "exp2 and the scale inside": lambda: wrapper(kernel=other_right_kernel),
        "key tiles of 32": lambda: wrapper(block_n=32),
        "the package's kernels": lambda: the_packages_kernels,
        "autograd of SDPA": lambda: autograd_of_sdpa,
        "fm.attention_backward": lambda: the_numpy_backward,
    }[name]()


@pytest.mark.parametrize(
    "name",
    [
        "solution",
        "learner",
        "exp2 and the scale inside",
        "key tiles of 32",
        "the package's kernels",
        "autograd of SDPA",
        "fm.attention_backward",
    ],
)
def test_right_answers_pass(name):
    from flashmath.exercises import check_dq_kernel

    report = check_dq_kernel(right_answer(name))
    assert report.passed, report


def test_the_notebooks_template_filled_in_with_the_solution_passes(tmp_path, monkeypatch):
    """The template of 12.2 in the English chapter, its five TODO lines replaced by the solution's, is a right kernel:
    the template and the solution agree on every other line."""
    import importlib
    import json

    from helpers import ROOT

    from flashmath.exercises import check_dq_kernel

    cells = json.loads((ROOT / "notebooks" / "12_backward.ipynb").read_text(encoding="utf-8"))["cells"]
    (source,) = ["".join(c["source"]) for c in cells if "def my_dq_kernel" in "".join(c["source"])]
    answers = {
        "for c0 in range(...):": "for c0 in range(0, M, BLOCK_N):",
        "y_tile = ...": "y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0)",
        "dx_tile = ...": "dx_tile = y_tile * (dy_tile - delta[:, None])",
        "dq += ...": 'dq += tl.dot(dx_tile, k_tile, input_precision="ieee")',
        "dq = ...": "dq = dq * scale",
    }
    for todo, line in answers.items():
        assert source.count(todo) == 1, todo
        source = source.replace(todo, line)
    source = source.replace("    raise NotImplementedError", "    pass", 1).split("\n\n\nfrom flashmath.exercises")[0]
    (tmp_path / "filled_dq_template.py").write_text("import torch\n" + source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("filled_dq_template")  # a file: @triton.jit reads the kernel's source
    report = check_dq_kernel(module.my_dq)
    assert report.passed, report
