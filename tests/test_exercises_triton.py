"""The checkers of chapters 11 and 15 (flashmath.exercises.chapter11 and chapter15): each named mistake is caught by
its name, and nothing a learner writes makes a checker raise.

The wrong answers here are written independently of the checker's own models: a numpy emulation of a streamed
kernel with one switch per mistake, run the way a learner's kernel would run (same block, same padding).
"""

import importlib
import importlib.util
import math

import numpy as np
import pytest
from helpers import checker_tests

from flashmath import exercises
from flashmath.exercises import chapter11, chapter15

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_TRITON = HAVE_TORCH and importlib.util.find_spec("triton") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason='PyTorch is not installed: see README, "The triton extra"')
needs_triton = pytest.mark.skipif(
    not HAVE_TRITON, reason='the triton extra is not installed: see README, "The triton extra"'
)


def messages(report) -> str:
    return "\n".join(message for _, ok, message in report.cases if not ok)


# ------------------------------------------------------------------------------------------------------------------
# 11.1 check_row_lse
# ------------------------------------------------------------------------------------------------------------------


def emulated_kernel(
    block=32,
    *,
    other=-np.inf,
    rescale=True,
    g0=-np.inf,
    exp=np.exp,
    log=np.log,
    with_g=True,
    guard_empty=True,
    upside_down=False,
    terms_old=False,
    old_max_guarded=False,
    block_max=False,
    final=None,
):
    """A learner's streamed logsumexp, row by row, in float32, as a torch function."""

    def fn(x):
        import torch

        x = x.numpy().astype(np.float32)
        out = []
        for row in x:
            padded = np.concatenate([row, np.full(-len(row) % block, other, np.float32)])
            g, s = np.float32(g0), np.float32(0)
            for c0 in range(0, len(padded), block):
                blk = padded[c0 : c0 + block]
                g_new = blk.max() if block_max else max(g, blk.max())  # block_max: "the max of what I just read"
                ref = 0.0 if (guard_empty and g_new == -np.inf) else g_new
                old = 0.0 if (old_max_guarded and g == -np.inf) else g  # "the old max is 0 until I have one"
                with np.errstate(all="ignore"):  # a kernel does not warn
                    factor = exp(ref - old) if upside_down else exp(old - ref)  # "the new max over the old"
                    s = (s * factor if rescale else s) + exp(blk - (g if terms_old else ref)).sum()
                g = g_new
            if final is not None:
                with np.errstate(all="ignore"):
                    out.append(final(g, s))
                continue
            out.append((g if with_g else 0.0) + log(s) if (s != 0 or not guard_empty) else -np.inf)  # NaN: NaN
        return torch.tensor(np.array(out, np.float32))

    return fn


def no_max(x):
    import torch

    return torch.log(torch.exp(x).sum(dim=1))


def stride_ignoring_kernel(x):
    """A learner's kernel that steps rows by n_cols: it reads the storage as if x were contiguous."""
    import torch

    R, C = x.shape
    storage = torch.as_strided(x, (R * C,), (1,))  # what x_ptr + r * C + c reads
    return emulated_kernel()(storage.reshape(R, C).clone())


def plus_inf_kernel(x):
    """FlashAttention-2's convention: +inf for a row with no key."""
    import torch

    out = emulated_kernel()(x)
    return torch.where(torch.isneginf(out), torch.tensor(float("inf")), out)


def viewing_wrapper(x):
    """A wrapper that flattens with .view, which a non-contiguous tensor refuses."""
    flat = x.view(-1)
    return emulated_kernel()(flat.reshape(x.shape))


@needs_torch
@pytest.mark.parametrize(
    "fn, name",
    [(stride_ignoring_kernel, "the row stride ignored"), (plus_inf_kernel, "FlashAttention-2's +inf convention")],
)
def test_row_lse_strides_and_the_plus_inf_convention_are_named(fn, name):
    report = chapter11.check_row_lse(fn)
    assert not report.passed
    assert f"looks like {name}" in messages(report), report
    assert sum(not ok for _, ok, _ in report.cases) == 1, report  # only the case that shows it


@needs_torch
def test_row_lse_a_view_error_is_explained_and_torch_logsumexp_passes():
    import torch

    text = messages(chapter11.check_row_lse(viewing_wrapper))
    assert "non-contiguous" in text and "stride" in text, text
    assert chapter11.check_row_lse(lambda x: torch.logsumexp(x, dim=1)).passed


@needs_torch
def test_row_lse_the_rescale_upside_down_with_the_old_max_guarded_is_named():
    report = chapter11.check_row_lse(emulated_kernel(upside_down=True, old_max_guarded=True))
    assert "looks like the rescale factor upside down" in messages(report), report


@needs_torch
def test_row_lse_a_wrapper_returning_numpy_is_told_to_return_the_tensor():
    right = emulated_kernel()
    report = chapter11.check_row_lse(lambda x: right(x).numpy())
    assert "looks like a numpy array returned" in messages(report), report


@needs_torch
def test_row_lse_nan_on_a_fully_masked_row_is_named():
    report = chapter11.check_row_lse(emulated_kernel(guard_empty=False))
    assert not report.passed
    assert "a fully masked row gives NaN" in messages(report)
    assert sum(not ok for _, ok, _ in report.cases) == 1  # only that case fails


@needs_torch
def test_row_lse_a_right_emulation_passes_and_errors_are_reported():
    assert chapter11.check_row_lse(emulated_kernel(block=64)).passed

    def not_yet(x):
        raise NotImplementedError

    report = chapter11.check_row_lse(not_yet)
    assert not report.passed and "not implemented yet" in messages(report)
    report = chapter11.check_row_lse(lambda x: None)
    assert "returned None" in messages(report)
    report = chapter11.check_row_lse(lambda x: x.sum())  # one number, not one per row
    assert "shape" in messages(report)


@needs_torch
def test_row_lse_the_result_must_be_a_float32_tensor():
    right = emulated_kernel()
    text = messages(chapter11.check_row_lse(lambda x: right(x).double()))
    assert "expected a float32 tensor on cpu (x's device), got torch.float64" in text, text
    text = messages(chapter11.check_row_lse(lambda x: right(x).numpy()))
    assert "returned ndarray, not a torch tensor" in text, text


@needs_triton
def test_row_lse_a_row_not_reduced_is_explained():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def unreduced_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        g = tl.full([1], float("-inf"), tl.float32)
        s = tl.zeros([1], tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
            g_new = tl.maximum(g, x)  # the block not reduced: BLOCK values, not one
            g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
            s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
            g = g_new
        tl.store(L + row + tl.arange(0, 1), g + tl.log(s))

    def unreduced(x):
        out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        if x.shape[0] > 0:
            unreduced_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
        return out

    text = messages(chapter11.check_row_lse(unreduced))
    assert "tl.max(x, 0)" in text and "one value per row" in text, text


@needs_triton
def test_row_lse_tl_log2_at_the_end_is_named_base_2_and_never_told_float64():
    """Review rev18-c: a kernel right but for tl.log2 at the end was told, on the values near 1e4, to compute in
    float64; the kernel must be float32 (which meets the 1e-5 tolerance), so only base 2 explains the failure."""
    from flashmath import triton_kernel  # noqa: F401, I001  (first: without a GPU it switches Triton to its interpreter)
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def log2_kernel(X, L, n_cols, stride_row, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        g = tl.full([1], float("-inf"), tl.float32)
        s = tl.zeros([1], tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
            g_new = tl.maximum(g, tl.max(x, 0))
            g_ref = tl.where(g_new == float("-inf"), 0.0, g_new)
            s = s * tl.exp(g - g_ref) + tl.sum(tl.exp(x - g_ref), 0)
            g = g_new
        tl.store(L + row + tl.arange(0, 1), g + tl.log2(s))  # base 2 at the end only

    def log2_at_the_end(x):
        out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        if x.shape[0] > 0:
            log2_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
        return out

    report = chapter11.check_row_lse(log2_at_the_end)
    failing = [(name, message) for name, ok, message in report.cases if not ok]
    assert failing and not report.passed
    near_1e4 = [message for name, message in failing if name.startswith("values near 1e4")]
    assert near_1e4, report
    for name, message in failing:
        assert "looks like base 2 instead of e" in message, (name, message)
        assert "float64" not in message, (name, message)


@needs_torch
def test_row_lse_base_2_in_the_loop_only_is_named_and_an_unknown_error_gets_no_precision_hint():
    report = chapter11.check_row_lse(emulated_kernel(exp=np.exp2))  # tl.exp2 in the loop, tl.log at the end
    assert not report.passed and "looks like base 2 instead of e" in messages(report), report

    def off_by_a_little(x):  # no mistake of the catalogue: L + 1e-3
        return emulated_kernel()(x) + 1e-3

    text = messages(chapter11.check_row_lse(off_by_a_little))
    assert "largest difference" in text and "float64" not in text and "float32" not in text, text


@needs_triton
def test_row_lse_solution_passes_in_triton():
    from flashmath import solutions_triton

    assert chapter11.check_row_lse(solutions_triton.row_lse).passed


# ------------------------------------------------------------------------------------------------------------------
# 11.2 check_where_it_lives, 12.1 check_recap_quiz
# ------------------------------------------------------------------------------------------------------------------

WHERE = {
    "Q, K, V": "HBM",
    "q_tile": "shared memory",
    "k_tile, v_tile": "smem",
    "x_tile, p_tile": "registers",
    "m_i, l_i": "Registers",
    "acc": "register file",
    "A, LSE": "global memory",
}


def test_where_it_lives_accepts_synonyms_and_explains_each_wrong_place():
    assert chapter11.check_where_it_lives(WHERE).passed
    report = chapter11.check_where_it_lives(
        {**WHERE, "x_tile, p_tile": "HBM", "acc": "HBM", "k_tile, v_tile": "registers", "m_i, l_i": "the cloud"}
    )
    text = messages(report)
    assert "standard attention" in text  # the score tile in HBM
    assert "Algorithm 1" in text  # acc in HBM is FlashAttention's first loop order
    assert "not registers for the whole sweep" in text
    assert "'the cloud' is not one of" in text
    verdict = messages(chapter11.check_where_it_lives({**WHERE, "x_tile, p_tile": "shared memory"}))
    assert verdict.startswith("not shared memory: tl.dot leaves the score tile in registers"), verdict
    assert "standard attention" not in verdict and "never reaches HBM" not in verdict  # about what was answered
    assert "no answer yet" in messages(chapter11.check_where_it_lives({}))
    assert not chapter11.check_where_it_lives(["HBM"]).passed


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_where_it_lives_gives_its_instruction_whole_for_every_unanswered_quantity(language):
    """Review zhrev-ao 11-2: the Chinese instruction is longer than the report's threshold for repeated reasons, and
    every line after the first read "还没有答案：原因同上面的“Q, K, V（整个数组）”", an instruction referred to as a
    reason. Each unanswered quantity now gets the instruction itself, in both languages."""
    import flashmath as fm
    from flashmath.exercises._report import SAME_AS_ABOVE
    from flashmath.i18n import gettext as _

    previous = fm.i18n.get_language()
    fm.set_language(language)
    try:
        text = repr(chapter11.check_where_it_lives({}))
        instruction = _("no answer yet: write 'registers', 'shared memory' or 'HBM'")
        reference = _(SAME_AS_ABOVE).split("{case}")[0]
    finally:
        fm.set_language(previous)
    lines = text.splitlines()[1:]
    assert len(lines) == len(chapter11.WHERE) and all(instruction in line for line in lines), text
    assert reference not in text, text


def test_where_it_lives_says_when_sram_is_read_as_shared_memory():
    verdict = messages(chapter11.check_where_it_lives({**WHERE, "x_tile, p_tile": "SRAM"}))
    assert verdict.startswith("'SRAM' read as shared memory (registers are on-chip SRAM too): not shared memory"), (
        verdict
    )
    assert chapter11.check_where_it_lives({**WHERE, "q_tile": "SRAM", "k_tile, v_tile": "sram"}).passed


def test_where_it_lives_keys_are_code_names_and_the_old_keys_still_count():
    """zhrev-al 11-15: the learner's keys hold no English words; the report names those two cases in words."""
    report = chapter11.check_where_it_lives(WHERE)
    names = [case[0] for case in report.cases]
    assert "Q, K, V (the whole arrays)" in names and "A, LSE (the results)" in names
    old = {
        ("Q, K, V (the whole arrays)" if key == "Q, K, V" else "A, LSE (the results)" if key == "A, LSE" else key): a
        for key, a in WHERE.items()
    }
    assert chapter11.check_where_it_lives(old).passed
    unknown = messages(chapter11.check_where_it_lives({**WHERE, "Q": "HBM"}))
    assert "'Q, K, V'" in unknown and "whole arrays" not in unknown


def test_recap_quiz():
    right = {number: question[2] for number, question in chapter15.RECAP_QUESTIONS.items()}
    assert chapter15.check_recap_quiz(right).passed
    assert chapter15.check_recap_quiz({str(n): f"({a.upper()})" for n, a in right.items()}).passed  # "(B)" and "1" work
    report = chapter15.check_recap_quiz({**right, 1: "a", 7: "z", 3: ...})
    text = messages(report)
    assert "only s_N" in text and "'z' is not one of" in text and "no answer yet" in text
    assert sum(not ok for _, ok, _ in report.cases) == 3


def test_recap_quiz_covers_chapters_12_to_14():
    """Issue 35 (review rev5-f): the closing self-test asks about the backward (12), the variants (13) and the ring
    (14) too, and each wrong letter of those questions gets its reason."""
    chapters = " ".join(q[0] for q in chapter15.RECAP_QUESTIONS.values())
    assert all(f"chapter {c})" in chapters for c in (12, 13, 14)), chapters
    right = {number: question[2] for number, question in chapter15.RECAP_QUESTIONS.items()}
    assert right == importlib.import_module("flashmath.solutions_triton").recap_quiz
    for number in (8, 9, 10):
        for letter, why in chapter15.RECAP_QUESTIONS[number][3].items():
            report = chapter15.check_recap_quiz({**right, number: letter})
            failed = [(name, msg) for name, ok, msg in report.cases if not ok]
            assert len(failed) == 1 and failed[0][0].startswith(f"{number}. "), failed
            assert failed[0][1] == f"not ({letter}): {why}", failed


def test_print_recap_quiz(capsys):
    chapter15.print_recap_quiz()
    out = capsys.readouterr().out
    assert all(f"{n}. " in out for n in chapter15.RECAP_QUESTIONS) and "(c)" in out


# ------------------------------------------------------------------------------------------------------------------
# 12.2 check_flash_row
# ------------------------------------------------------------------------------------------------------------------


def learner_flash_row(
    *,
    scale=True,
    rescale_acc=True,
    rescale_s=True,
    g0=-math.inf,
    subtract_max=True,
    divide=True,
    lse_g=True,
    lse_of_product=False,
    full_tiles_only=False,
    divisor=None,
    alpha_inverted=False,
):
    """A learner's one-row FlashAttention-2, with switches for the mistakes (written apart from the checker)."""

    def fn(q_n, K, V, B_c):
        g, s, acc = g0, 0.0, np.zeros(V.shape[1])
        for c0 in range(0, len(K) - B_c + 1 if full_tiles_only else len(K), B_c):
            x = K[c0 : c0 + B_c] @ q_n
            if scale:
                x = x / (divisor or math.sqrt(len(q_n)))
            g_new = max(g, x.max()) if subtract_max else 0.0
            alpha = math.exp(g - g_new)
            if alpha_inverted:  # "the new max over the old"; nothing to rescale before the first tile
                alpha = math.exp(g_new - g) if g != -math.inf else 0.0
            p = np.exp(x - g_new)
            s = (s * alpha if rescale_s else s) + p.sum()
            acc = (acc * alpha if rescale_acc else acc) + p @ V[c0 : c0 + B_c]
            g = g_new
        if lse_of_product:  # "undo the shift": log of the true sum
            return acc / s, float(np.log(s * np.exp(g)))
        return (acc / s if divide else acc), (g if lse_g else 0.0) + math.log(s)

    return fn


def flash_row_in_float32(q_n, K, V, B_c):
    a, lse = learner_flash_row()(*(np.asarray(arr, np.float32) for arr in (q_n, K, V)), B_c)
    return a.astype(np.float32), lse


def test_flash_row_a_shape_error_is_explained():
    def transposed(q_n, K, V, B_c):
        x = K.T @ q_n  # (D, M) @ (D,): the inner sizes differ
        return x, 0.0

    text = messages(chapter15.check_flash_row(transposed))
    assert "raised ValueError" in text and ".T" in text, text


def test_flash_row_logsumexp_without_g_is_named_where_a_n_is_right():
    report = chapter15.check_flash_row(learner_flash_row(lse_g=False))
    assert not report.passed and "a_n is right; expected lse_n" in messages(report)
    assert "looks like g left out of the logsumexp" in messages(report)


def test_flash_row_a_second_mistake_in_the_logsumexp_does_not_hide_the_first():
    report = chapter15.check_flash_row(learner_flash_row(divide=False, lse_g=False))
    text = messages(report)
    assert "looks like acc not divided by s at the end" in text and "looks like g left out" in text, report


def test_flash_row_inputs_changed_in_place_are_named():
    right = learner_flash_row()

    def scales_q_in_place(q_n, K, V, B_c):
        q_n /= math.sqrt(len(q_n))  # a learner's "fold the scale into q"
        return right(q_n * math.sqrt(len(q_n)), K, V, B_c)

    report = chapter15.check_flash_row(scales_q_in_place)
    assert not report.passed and "looks like the input modified in place" in messages(report), report


def test_flash_row_nan_must_propagate():
    right = learner_flash_row()

    def nan_to_zero(q_n, K, V, B_c):  # "clean" the inputs first: a NaN value silently becomes 0
        return right(q_n, K, np.nan_to_num(V), B_c)

    report = chapter15.check_flash_row(nan_to_zero)
    assert [name for name, ok, _ in report.cases if not ok] == [
        "property: NaN propagates: NaN in one value, V[6, 0], gives NaN in a_n[0] alone"
    ], report


def test_flash_row_a_logsumexp_that_is_not_one_number_is_explained():
    right = learner_flash_row()
    report = chapter15.check_flash_row(lambda q_n, K, V, B_c: (right(q_n, K, V, B_c)[0], np.zeros(2)))
    assert "lse_n must be one number (a float), got ndarray of shape (2,)" in messages(report)


def test_flash_row_an_array_alone_is_reported_as_an_ndarray_on_every_case():
    """Returning a_n alone: every case says "got ndarray", the one whose V counts divisions too (its arrays are of
    the checker's own subclass, whose name the learner never wrote)."""
    right = learner_flash_row()
    report = chapter15.check_flash_row(lambda q_n, K, V, B_c: right(q_n, K, V, B_c)[0])
    failed = [message for _name, ok, message in report.cases if not ok]
    assert len(failed) == len(report.cases) and all("got ndarray" in m for m in failed), failed
    assert "Counted" not in messages(report)


def algorithm_1_row(q_n, K, V, B_c):
    """FlashAttention's Algorithm 1 for one row: the output normalised after every tile, two exponentials a tile."""
    g, s, a = -math.inf, 0.0, np.zeros(V.shape[1])
    for c0 in range(0, len(K), B_c):
        x = K[c0 : c0 + B_c] @ q_n / math.sqrt(len(q_n))
        m = x.max()
        p = np.exp(x - m)
        g_new = max(g, m)
        s_new = math.exp(g - g_new) * s + math.exp(m - g_new) * p.sum()
        a = (s * math.exp(g - g_new) * a + math.exp(m - g_new) * (p @ V[c0 : c0 + B_c])) / s_new
        g, s = g_new, s_new
    return a, g + math.log(s)


def torch_float64_row(q_n, K, V, B_c):
    """The same loop on float64 torch tensors, lse with torch.logsumexp of the tile maxima's states."""
    import torch

    q, k, v = (torch.from_numpy(np.asarray(x, np.float64)) for x in (q_n, K, V))
    g, s, acc = torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64), 0 * v[0]
    for c0 in range(0, len(K), B_c):
        x = k[c0 : c0 + B_c] @ q / math.sqrt(len(q_n))
        g_new = torch.maximum(g, x.max())
        alpha, p = torch.exp(g - g_new), torch.exp(x - g_new)
        s, acc, g = s * alpha + p.sum(), acc * alpha + p @ v[c0 : c0 + B_c], g_new
    return (acc / s).numpy(), float(torch.logsumexp(torch.stack([g + torch.log(s)]), 0))


def the_packages_attention_row(q_n, K, V, B_c):
    """fm.attention on a one-row query: the package's reference, as chapter 15's own code calls it."""
    import flashmath as fm

    a, lse = fm.attention(q_n[None, :], K, V, return_lse=True)
    return a[0], float(lse[0])


def the_packages_flash_attention_row(q_n, K, V, B_c):
    import flashmath as fm

    a, lse = fm.flash_attention(q_n[None, :], K, V, block_q=1, block_k=B_c, return_lse=True)
    return a[0], float(lse[0])


def reciprocal_and_logaddexp_row(q_n, K, V, B_c):
    """The same loop with the logsumexp kept as one running number (np.logaddexp) and the end as acc * (1 / s)."""
    g, lse, acc = -math.inf, -math.inf, np.zeros(V.shape[1])
    for c0 in range(0, len(K), B_c):
        x = K[c0 : c0 + B_c] @ q_n / math.sqrt(len(q_n))
        g_new = max(g, float(np.max(x)))
        acc = acc * math.exp(g - g_new) + np.exp(x - g_new) @ V[c0 : c0 + B_c]
        lse = np.logaddexp(lse, np.logaddexp.reduce(x))
        g = g_new
    return acc * (1.0 / math.exp(lse - g)), float(lse)


def converted_row(*, every_tile=False, reciprocal=False, nansum=False, terms_old=None, raw_alpha=False):
    """A learner's row that converts its inputs first (np.asarray(..., dtype=np.float64)), with switches."""

    def fn(q_n, K, V, B_c):
        q_n, K, V = (np.asarray(t, dtype=np.float64) for t in (q_n, K, V))
        g, s, acc, a = -np.inf, 0.0, np.zeros(V.shape[1]), np.zeros(V.shape[1])
        for c0 in range(0, K.shape[0], B_c):
            x = K[c0 : c0 + B_c] @ q_n / np.sqrt(q_n.shape[0])
            g_new = max(g, x.max())
            with np.errstate(all="ignore"):
                alpha = np.exp(g_new - g) if raw_alpha else np.exp(g - g_new)
                if terms_old == "raw":
                    p = np.exp(x - g)
                elif terms_old == "guarded":
                    p = np.exp(x - (g if np.isfinite(g) else g_new))
                else:
                    p = np.exp(x - g_new)
                s = s * alpha + p.sum()
                pv = np.nansum(p[:, None] * V[c0 : c0 + B_c], axis=0) if nansum else p @ V[c0 : c0 + B_c]
                acc = acc * alpha + pv
                if every_tile:
                    a = acc / s
            g = g_new
        if not every_tile:
            with np.errstate(all="ignore"):
                a = acc * (1.0 / s) if reciprocal else acc / s
        return a, float(g + np.log(s))

    return fn


def test_flash_row_a_division_at_every_tile_is_counted_after_np_asarray():
    report = chapter15.check_flash_row(converted_row(every_tile=True))
    failed = [name for name, ok, _ in report.cases if not ok]
    assert failed == ["one division at the end (the divisions of arrays computed from V are counted: at most one)"]
    assert "looks like the output divided at every tile" in messages(report), report


@pytest.mark.parametrize(
    "fn",
    [
        converted_row(),
        converted_row(reciprocal=True),
        the_packages_attention_row,
        the_packages_flash_attention_row,
        reciprocal_and_logaddexp_row,
        pytest.param(torch_float64_row, marks=needs_torch),
    ],
)
def test_flash_row_correct_solutions_written_differently_pass(fn):
    report = chapter15.check_flash_row(fn)
    assert report.passed, report


def test_flash_row_a_division_at_every_tile_is_counted():
    report = chapter15.check_flash_row(algorithm_1_row)
    failed = [(name, message) for name, ok, message in report.cases if not ok]
    assert len(failed) == 1 and failed[0][0].startswith("one division at the end"), report
    assert "4 divisions of arrays computed from V, over 4 key tiles" in failed[0][1], report


def test_flash_row_two_divisions_over_four_tiles_are_not_called_one_per_tile():
    def twice(q_n, K, V, B_c):
        a, lse = converted_row()(q_n, K, V, B_c)
        return (a / 2.0) / 0.5, lse  # two divisions of an array computed from V, the right values

    report = chapter15.check_flash_row(twice)
    failed = [(name, message) for name, ok, message in report.cases if not ok]
    assert len(failed) == 1 and failed[0][0].startswith("one division at the end"), report
    assert "3 divisions of arrays computed from V, over 4 key tiles: at most one is allowed" in failed[0][1], report
    assert "every tile" not in failed[0][1], report


def test_flash_row_solution_passes_and_bad_answers_are_reported():
    from flashmath import solutions_triton

    assert chapter15.check_flash_row(solutions_triton.flash_row).passed
    assert chapter15.check_flash_row(learner_flash_row()).passed
    assert "expected a pair" in messages(chapter15.check_flash_row(lambda q, K, V, B: 3.0))
    assert "shape" in messages(chapter15.check_flash_row(lambda q, K, V, B: (np.zeros(2), 0.0)))


# ------------------------------------------------------------------------------------------------------------------
# Every mistake of chapters 11 and 15's catalogues, made by a learner-style wrong solution and named
# ------------------------------------------------------------------------------------------------------------------

WRONG = {
    "check_row_lse": {
        "the padding read as 0": emulated_kernel(other=0.0),
        "the max not subtracted": no_max,
        "the rescale of s missing": emulated_kernel(rescale=False),
        "the running max started at 0": emulated_kernel(g0=0.0),
        "g left out of the result": emulated_kernel(with_g=False),
        "base 2 instead of e": emulated_kernel(exp=np.exp2, log=np.log2),
        "the row stride ignored": stride_ignoring_kernel,
        "FlashAttention-2's +inf convention": plus_inf_kernel,
        "the rescale factor upside down": emulated_kernel(upside_down=True),
        "the block's terms measured against the old max": emulated_kernel(terms_old=True),
        "NaN on a fully masked row": emulated_kernel(guard_empty=False),
        "the running max not carried over": emulated_kernel(block_max=True),
        "log(g + s) instead of g + log(s)": emulated_kernel(final=lambda g, s: np.log(g + s)),
        "a large negative number for -inf": emulated_kernel(other=-1e30),
    },
    "check_flash_row": {
        "acc not divided by s at the end": learner_flash_row(divide=False),
        "the scale 1/sqrt(D) missing": learner_flash_row(scale=False),
        "acc not rescaled": learner_flash_row(rescale_acc=False),
        "s not rescaled": learner_flash_row(rescale_s=False),
        "both rescales missing": learner_flash_row(rescale_acc=False, rescale_s=False),
        "the running max started at 0": learner_flash_row(g0=0.0),
        "the max not subtracted": learner_flash_row(subtract_max=False),
        "g left out of the logsumexp": learner_flash_row(lse_g=False),
        "float32 instead of float64": flash_row_in_float32,
        "the output divided at every tile": algorithm_1_row,
        "the logsumexp as log(s * exp(g))": learner_flash_row(lse_of_product=True),
        "the last, shorter tile skipped": learner_flash_row(full_tiles_only=True),
        "the scale 1/D instead of 1/sqrt(D)": lambda q_n, K, V, B_c: learner_flash_row(divisor=len(q_n))(
            q_n, K, V, B_c
        ),
        "alpha upside down": learner_flash_row(alpha_inverted=True),
        "NaN in V dropped": converted_row(nansum=True),
        "the tile's terms measured against the old max": converted_row(terms_old="guarded"),
        "exp(+inf) at the first tile (the old max -inf in an exponent)": converted_row(terms_old="raw"),
    },
}
CASES = [(checker, mistake) for checker, fns in WRONG.items() for mistake in fns]


@pytest.mark.parametrize("checker, mistake", CASES, ids=[f"{c}: {m}" for c, m in CASES])
def test_each_mistake_is_caught_and_named(checker, mistake):
    if checker == "check_row_lse" and not HAVE_TORCH:
        pytest.skip('PyTorch is not installed: see README, "The triton extra"')
    report = getattr(exercises, checker)(WRONG[checker][mistake])
    assert not report.passed
    assert f"looks like {mistake}" in messages(report), report


test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)[1]


@needs_torch
def test_row_lse_missing_rescale_hint_typed_as_given_passes():
    """The hint's formula, with g_ref as in the TODO, passes every case, the fully masked row included."""
    hint = "s = s * exp(g - g_ref) + sum(exp(x - g_ref))"
    report = exercises.check_row_lse(emulated_kernel(rescale=False))
    assert hint in messages(report), report
    assert exercises.check_row_lse(emulated_kernel()).passed  # s * exp(g - ref) + sum(exp(blk - ref)), ref = g_ref


def test_flash_row_the_max_not_subtracted_explains_the_underflow_too():
    def no_max_np_log(q_n, K, V, B_c):  # g stays 0; np.log(0) = -inf instead of math's ValueError
        s, acc = 0.0, np.zeros(V.shape[1])
        for c0 in range(0, len(K), B_c):
            p = np.exp(K[c0 : c0 + B_c] @ q_n / math.sqrt(len(q_n)))
            s, acc = s + p.sum(), acc + p @ V[c0 : c0 + B_c]
        with np.errstate(divide="ignore", invalid="ignore"):
            return acc / s, float(np.log(s))

    report = chapter15.check_flash_row(no_max_np_log)
    below = [m for name, ok, m in report.cases if not ok and name.startswith("scores of -1000")]
    assert below and "the max not subtracted" in below[0], report
    assert "underflows to 0" in below[0] and "0 / 0" in below[0], report
