"""Checkers for the exercises of chapters 11 (the Triton kernel) and 14 (the recap).

Like every checker of :mod:`flashmath.exercises`, each one runs the learner's answer on cases where the classic
mistakes make a difference, never raises, and returns a :class:`flashmath.exercises.CheckReport`; a wrong answer
is compared with the answers of the known mistakes (:data:`MISTAKES` lists them per checker), and the first that
matches is named, with what to change. All four run through the one harness,
:func:`~flashmath.exercises._cases.check_function` (the two quizzes as one case per question, :func:`_check_quiz`).

* :func:`check_row_lse` (11.1): a Triton kernel for the logsumexp of each row, streamed in blocks of columns:
  chapter 2's online normalizer written as a GPU program.
* :func:`check_where_it_lives` (11.2): registers, shared memory or HBM for each quantity of the kernel.
* :func:`check_recap_quiz` (14.1): the closing self-test, one question per big step of the course.
* :func:`check_flash_row` (14.2): FlashAttention-2 for one query row, from memory.

Solutions: :mod:`flashmath.solutions_triton`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from flashmath.exercises._cases import PropertyFailure, Said, check_function, property_cases, same_arrays
from flashmath.exercises._report import CheckReport, Diagnosis, Mistake, fmt
from flashmath.exercises.chapter6_10 import shape_hint
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = ["MISTAKES", "RECAP_QUESTIONS", "check_row_lse", "check_where_it_lives", "check_recap_quiz",
           "check_flash_row", "print_recap_quiz"]


def _same(a, b, rtol: float) -> bool:
    """The harness's comparison (:func:`~flashmath.exercises._cases.same_arrays`: arrays or tuples of them) with
    ``atol = rtol``."""
    return same_arrays(a, b, rtol=rtol, atol=rtol)


def _diagnosis(cases, answers, mistakes, rtol: float) -> Diagnosis:
    return Diagnosis(cases, answers, mistakes, functools.partial(_same, rtol=rtol))


# ------------------------------------------------------------------------------------------------------------------
# 11.1: the logsumexp of each row, as a Triton kernel
# ------------------------------------------------------------------------------------------------------------------

BLOCKS = (16, 32, 64, 128, 256, 512, 1024)  # the BLOCK a learner's kernel may use


def _lse(x: np.ndarray) -> np.ndarray:
    """Reference: ``log sum_j exp(x_j)`` of each row in float64; ``-inf`` for a row of ``-inf``."""
    x = np.asarray(x, np.float64)
    g = x.max(axis=-1)
    g_safe = np.where(np.isneginf(g), 0.0, g)
    with np.errstate(divide="ignore"):
        return g_safe + np.log(np.exp(x - g_safe[:, None]).sum(axis=-1))


def _padded_with_zeros(block: int):
    """A kernel whose masked loads fill the columns past the end with 0 (``other=0.0``) instead of ``-inf``."""
    def model(x):
        cols = x.shape[1]
        if cols % block == 0:
            return None  # no padding: the mistake makes no difference here
        pad = np.zeros((x.shape[0], block - cols % block), np.float32)
        return _lse(np.concatenate([x, pad], axis=1))
    return model


def _blockwise(block: int, *, rescale: bool = True, g0: float = -np.inf, base2: bool = False):
    """The streamed loop in float32 with one of the mistakes switched on."""
    exp, log = (np.exp2, np.log2) if base2 else (np.exp, np.log)

    def model(x):
        x = np.asarray(x, np.float32)
        g = np.full(x.shape[0], g0, np.float32)
        s = np.zeros(x.shape[0], np.float32)
        for c0 in range(0, x.shape[1], block):
            blk = x[:, c0:c0 + block]
            g_new = np.maximum(g, blk.max(axis=1))
            s = (s * exp(g - g_new) if rescale else s) + exp(blk - g_new[:, None]).sum(axis=1)
            g = g_new
        return g + log(s)
    return model


def _no_max(x):
    x = np.asarray(x, np.float32)
    return np.log(np.exp(x).sum(axis=1))


def _without_g(x):
    return _lse(x) - np.asarray(x, np.float64).max(axis=1)


def _stride_ignored(x, wide=None):
    """A kernel that steps from row to row by the number of columns, ignoring the tensor's row stride
    (``x.stride(0)``): on a slice of a wider array it reads the first ``R * C`` numbers of the storage."""
    if wide is None:
        return None
    return _lse(np.asarray(wide, np.float32).ravel()[:x.size].reshape(x.shape))


def _plus_inf_empty(x):
    lse = _lse(x)
    return np.where(np.isneginf(lse), np.inf, lse)


ROW_LSE_MISTAKES = (
    Mistake(N_("the padding read as 0"),
            N_("the columns past the end of the row were loaded with other=0.0, so each adds exp(0 - g) to the sum; "
               "load them with other=float('-inf') (weight exp(-inf) = 0)"),
            tuple(_padded_with_zeros(b) for b in BLOCKS)),
    Mistake(N_("the max not subtracted"),
            N_("exp(x) overflows float32 once x > 88.7: keep a running max g and sum exp(x - g), every exponent <= 0"),
            (_no_max,)),
    Mistake(N_("the rescale of s missing"),
            N_("when a block raises the running max, the old sum is relative to the old max: s = s * exp(g - g_new) + "
               "sum(exp(x - g_new))"), tuple(_blockwise(b, rescale=False) for b in BLOCKS)),
    Mistake(N_("the running max started at 0"),
            N_("start g at -inf (tl.full([...], float('-inf'), tl.float32) or the first block's max): with g = 0, a "
               "row of -1000s gives exp(-1000) = 0 and log(0) = -inf"), tuple(_blockwise(b, g0=0.0) for b in BLOCKS)),
    Mistake(N_("g left out of the result"), N_("the logsumexp is g + log(s): s is relative to the max g"),
            (_without_g,)),
    Mistake(N_("base 2 instead of e"),
            N_("tl.exp2 and tl.log2 need the scores multiplied by log2(e) and the result divided by it; use tl.exp "
               "and tl.log"), tuple(_blockwise(b, base2=True) for b in BLOCKS)),
    Mistake(N_("the row stride ignored"),
            N_("a tensor that is a slice or a transpose of another is not contiguous: row r starts at x_ptr + r * "
               "x.stride(0), not r * n_cols. Pass x.stride(0) (and x.stride(1)) to the kernel, or call x = "
               "x.contiguous() first"), (_stride_ignored,)),
    Mistake(N_("FlashAttention-2's +inf convention"),
            N_("FlashAttention-2's kernels store +inf for a row with no key (so that exp(x - L) = 0 in their "
               "backward); this exercise, like the course, wants -inf, the log of an empty sum"), (_plus_inf_empty,)),
)


def _kernel_hint(exc) -> str | None:
    """What a stride or shape error raised by the learner's wrapper probably means."""
    text = str(exc)
    if "stride" in text or "contiguous" in text:
        return (_("the input is a non-contiguous view (a slice of a wider tensor): .view() needs contiguous memory; "
                  "use x.stride(0) in the kernel, or x.contiguous()"))
    if "shape" in text or "broadcast" in text:
        return (_("two blocks of different shapes met: g, s and the stored logsumexp hold one value per row (shape "
                  "[1]), x holds BLOCK values; reduce the block before combining it with them, tl.max(x, 0) and "
                  "tl.sum(..., 0) (tl.maximum(g, x) alone keeps BLOCK values)"))
    return None


def _row_lse_cases():
    rng = np.random.default_rng(11)
    trend = np.linspace(-4.0, 4.0, 300)[None, :] + 0.5 * rng.standard_normal((3, 300))
    masked = rng.standard_normal((3, 40))
    masked[0, ::3] = -np.inf
    masked[1, 5:] = -np.inf
    masked[2, :] = -np.inf
    return [
        (_("rows of 5 values (shorter than any block)"), rng.standard_normal((2, 5))),
        (_("rows of 300 values rising from -4 to 4 (several blocks, the max jumps between them)"), trend),
        (_("values near 1e4 (exp(1e4) overflows unless the max is subtracted)"), 1e4 + rng.standard_normal((2, 50))),
        (_("negative rows of 37 values (padding read as 0 would count)"), -8.0 + rng.standard_normal((3, 37))),
        (_("rows of -1000 (a running max started at 0 underflows)"), -1000.0 + rng.standard_normal((2, 64))),
        (_("-inf entries (masked), and a fully masked row: its logsumexp is -inf, not NaN"), masked),
        (_("one column"), rng.standard_normal((4, 1))),
        (_("a slice of a wider tensor (x[:, :40] of a (3, 64) tensor: row stride 64, not 40)"),
         rng.standard_normal((3, 64))),  # the last case: the strided one (check_row_lse)
    ]


STRIDED = 40  # the last case of _row_lse_cases (a slice) passes x[:, :STRIDED] of its array


def _row_lse_properties():
    """The edge cases of the logsumexp kernel: no rows (an empty result, no program launched), one row of one
    value, and a row holding NaN (NaN out: a guard such as ``s > 0 ? g + log(s) : -inf`` turns it into -inf). A
    fully masked row (-inf out), rows of -1000 (negative only) and values near 1e4 are ordinary cases; +inf, integer
    and float16 input are outside the exercise (a float32 tensor, finite or -inf)."""
    rng = np.random.default_rng(111)
    with_nan = rng.standard_normal((3, 45))
    with_nan[1, 7] = np.nan
    return property_cases([
        (_("the empty input: no rows (a (0, 5) tensor) give an empty result"), (np.zeros((0, 5), np.float32),)),
        (_("one element: a (1, 1) tensor"), (np.array([[0.75]], np.float32),)),
        (_("NaN propagates: a row holding NaN gives NaN (never -inf or a number)"), (with_nan.astype(np.float32),)),
    ])


class _RowLseDiagnosis:
    """The harness's ``diagnosis`` hook: NaN on a fully masked row first (it has no model), then the catalogue."""

    def __init__(self, cases, answers):
        self.cases, self.answers = cases, answers
        self.catalogue = _diagnosis(cases, answers, ROW_LSE_MISTAKES, 1e-5)

    def for_case(self, i: int):
        got, expected = self.answers[i], _lse(self.cases[i][0])
        try:
            nan_on_empty = bool(np.isnan(np.asarray(got)[np.isneginf(expected)]).any())
        except Exception:
            nan_on_empty = False
        if nan_on_empty:
            return Said(_("a fully masked row gives NaN, from -inf - (-inf) in exp(g - g_new) or exp(x - g_new); "
                          "subtract 0 while g_new is -inf (tl.where(g_new == float('-inf'), 0.0, g_new)), and return "
                          "-inf for s = 0"))
        return self.catalogue.for_case(i)


def check_row_lse(fn) -> CheckReport:
    """Check a learner's ``fn(x) -> L``: ``x`` a float32 PyTorch tensor ``(R, C)`` (on the GPU where the kernels are
    compiled, on the CPU in Triton's interpreter), ``L`` a float32 tensor ``(R,)`` on ``x``'s device, the logsumexp
    of each row, ``log sum_j exp(x[r, j])`` (natural log; ``-inf`` for a row of ``-inf``), computed by a Triton
    kernel that streams each row in blocks (exercise 11.1).

    The property battery first (:func:`_row_lse_properties`: no rows, one value, NaN; the tensor given unchanged
    and one logsumexp per row on every case), then the cases: a row shorter than any block, several blocks with a
    rising max, values near 1e4, negative rows whose length is not a multiple of the block, rows of -1000, masked
    entries and a fully masked row, one column, a slice of a wider tensor. Named mistakes:
    :data:`ROW_LSE_MISTAKES`, and NaN on the fully masked row. Compared to 1e-5 relative.
    """
    try:
        import torch
    except ImportError:
        from flashmath.triton_setup import INSTALL_HINT  # here: importing it tries to import torch

        report = CheckReport("check_row_lse")
        report.add("PyTorch", False, _("this exercise needs PyTorch and Triton (the triton extra): {how}").format(
            how=INSTALL_HINT))
        return report
    cases = []
    row_lse_cases = _row_lse_cases()
    for k, (name, x) in enumerate(row_lse_cases):
        wide = x.astype(np.float32)
        # a slice: the learner gets x[:, :STRIDED] of the wide array (row stride 64, 40 columns)
        strided = k == len(row_lse_cases) - 1
        cases.append((name, (wide[:, :STRIDED].copy(), wide) if strided else (wide,)))

    from flashmath.triton_setup import interpreted

    # where the kernels run: a compiled kernel reads GPU memory only; the interpreter reads CPU memory
    device = torch.device("cuda" if torch.cuda.is_available() and not interpreted() else "cpu")

    def call(fn, args):
        # on the CPU the tensor shares the memory of the harness's copy, so that a change in place is seen
        tensor = torch.from_numpy(args[-1]).to(device)
        x = tensor[:, :STRIDED] if len(args) == 2 else tensor
        out = fn(x)
        if device.type != "cpu":  # copy back what the learner's code left in x, for the harness to compare
            args[-1][...] = tensor.cpu().numpy()
        if out is None:
            return PropertyFailure(_("returned None: return the tensor of logsumexps"))
        if not isinstance(out, torch.Tensor):
            return PropertyFailure(_("returned {type}, not a torch tensor: write the results into out = "
                                     "torch.empty(x.shape[0], dtype=torch.float32, device=x.device) and return it"
                                     ).format(type=type(out).__name__))
        values = np.asarray(out.detach().cpu().numpy())
        if out.dtype != torch.float32 or out.device != x.device:
            return PropertyFailure(_("expected a float32 tensor on {device} (x's device), got {dtype} on "
                                     "{out_device}: torch.empty(x.shape[0], dtype=torch.float32, device=x.device)"
                                     ).format(device=x.device, dtype=out.dtype, out_device=out.device), values)
        return values

    def describe(got, expected):
        return _("expected {expected}, got {got}").format(expected=fmt(expected), got=fmt(got)), got, expected

    return check_function("check_row_lse", fn, cases, lambda x, *_: _lse(x), ROW_LSE_MISTAKES, n_out=1,
                          names=("L",), properties=_row_lse_properties(), compare=functools.partial(_same, rtol=1e-5),
                          describe=describe, call=call, diagnosis=_RowLseDiagnosis, hint=_kernel_hint,
                          not_answer=Said(_("expected one logsumexp per row, a tensor of shape (R,)")))


# ------------------------------------------------------------------------------------------------------------------
# The quizzes (11.2, 14.1): one case per question, through the harness
# ------------------------------------------------------------------------------------------------------------------


class _Verdicts:
    """The harness's ``diagnosis`` hook for a quiz: why the learner's choice is wrong, ``verdict(key, choice)[1]``."""

    def __init__(self, verdict, cases, answers):
        self.verdict, self.cases, self.answers = verdict, cases, answers

    def for_case(self, i: int) -> Said:
        return Said(self.verdict(self.cases[i][0], self.answers[i])[1])


def _check_quiz(title: str, answers, questions, *, what: str, parse, right, verdict) -> CheckReport:
    """Check a quiz ``answers = {key: choice}`` through :func:`~flashmath.exercises._cases.check_function`.

    Args:
        questions: ``(case name, key)`` per question, in order.
        what: what ``answers`` maps, for the message when it is not a dict (``"quantity: place"``).
        parse: ``parse(answers, key) -> choice``, or a :class:`~flashmath.exercises._cases.PropertyFailure` for no
            answer yet or a choice that is not one of the choices.
        right: ``right(key) -> set`` of the right choices.
        verdict: ``verdict(key, choice) -> (what was wrong, why)`` for a wrong choice.
    """
    if not isinstance(answers, dict):
        report = CheckReport(title)
        report.add(_("the answers"), False, _("expected a dict {{{what}}}, got {type}").format(
            what=_(what), type=type(answers).__name__))
        return report
    return check_function(
        title, answers, [(name, (key,)) for name, key in questions], lambda key: (key, right(key)), (), n_out=1,
        names=(_("the answer"),), call=lambda answers, args: parse(answers, args[0]), convert=lambda choice: choice,
        compare=lambda choice, expected: choice in expected[1],
        describe=lambda choice, expected: (verdict(expected[0], choice)[0], choice, expected),
        diagnosis=functools.partial(_Verdicts, verdict), check_form=False)


# ------------------------------------------------------------------------------------------------------------------
# 11.2: where each quantity lives
# ------------------------------------------------------------------------------------------------------------------

PLACES = {"registers": ("registers", "register", "register file", "rf", "寄存器"),
          "shared memory": ("shared memory", "shared", "smem", "sram", "lds", "共享内存"),
          "HBM": ("hbm", "global memory", "global", "dram", "device memory", "gpu memory", "显存")}

#: How a place is named in a verdict ("not registers"): the PLACES key, translated where it is shown.
PLACE_NAMES = {"registers": N_("registers"), "shared memory": N_("shared memory"), "HBM": N_("HBM")}

WHERE = {
    N_("Q, K, V (the whole arrays)"): ({"HBM"}, N_("the inputs stay in the GPU's main memory (HBM); a program loads "
                                                   "only its tiles")),
    "q_tile": ({"registers", "shared memory"}, N_("loaded once per program and kept for the whole sweep")),
    "k_tile, v_tile": ({"shared memory"}, N_("streamed: one tile per step, staged in shared memory for the matrix "
                                             "unit (num_stages tiles in flight when the loads are pipelined)")),
    "x_tile, p_tile": ({"registers"}, N_("tl.dot leaves the score tile in registers (float32), where the matrix unit "
                                         "writes its result, and it is dropped after the step")),
    "m_i, l_i": ({"registers"}, N_("one float32 per row of the tile, updated every step: registers")),
    "acc": ({"registers"}, N_("(B_r, Dv) float32, updated every step and written once at the end: registers, spread "
                              "over the program's threads (num_warps x 32 of them)")),
    N_("A, LSE (the results)"): ({"HBM"}, N_("written once, at the end, to HBM")),
}
"""For each quantity of the kernel: the right places, and why. The learner's dict uses these English keys in both
editions; a key holding words is marked, and its case in the report is named in the selected language."""

SCORES_IN_SHARED_MEMORY = (
    N_("tl.dot leaves the score tile in registers, where Ampere's and Hopper's matrix units write their results "
       "(NVIDIA's CUTLASS MMA guides), and the exponentials and row sums work on it there; shared memory holds the "
       "tiles on their way from HBM (k_tile, v_tile)"))
"""Why the score tile is not in shared memory (exercise 11.2)."""


def _place(answer) -> str | None:
    text = str(answer).strip().lower()
    return next((place for place, names in PLACES.items() if text in names), None)


def _where_parse(answers, quantity):
    """The place the learner gave for ``quantity``, one of the three, or why there is none."""
    if quantity not in answers or answers[quantity] in (None, ...):
        return PropertyFailure(_("no answer yet: write 'registers', 'shared memory' or 'HBM'"))
    place = _place(answers[quantity])
    if place is None:
        return PropertyFailure(_("{answer} is not one of 'registers', 'shared memory', 'HBM'").format(
            answer=repr(answers[quantity])))
    return place


def _where_verdict(quantity: str, place: str) -> tuple[str, str]:
    """What is wrong with ``place`` for ``quantity``, and why: about the place the learner gave."""
    why = _(WHERE[quantity][1])
    if quantity == "k_tile, v_tile" and place == "registers":
        return _("not registers for the whole sweep"), why
    if quantity == "x_tile, p_tile" and place == "HBM":
        why = _("{why}: it never reaches HBM, the whole point of FlashAttention. A score tile in HBM is standard "
                "attention, which writes X and Y (N x M each) and reads them back").format(why=why)
    elif quantity == "x_tile, p_tile" and place == "shared memory":
        why = _(SCORES_IN_SHARED_MEMORY)
    elif quantity == "acc" and place == "HBM":
        why = _("FlashAttention (Algorithm 1, key tiles outside) reads and writes A at every step; FlashAttention-2 "
                "keeps acc on chip. {why}").format(why=why)
    return _("not {place}").format(place=_(PLACE_NAMES[place])), why


def check_where_it_lives(answers) -> CheckReport:
    """Check a learner's ``{quantity: place}`` for the quantities of :data:`WHERE` (exercise 11.2); a place is
    ``"registers"``, ``"shared memory"`` or ``"HBM"`` (synonyms accepted: ``"smem"``, ``"global memory"``...).

    One case per quantity, through the harness (:func:`~flashmath.exercises._cases.check_function`; no edge input
    applies to a quiz). Each wrong place is answered about that place: a place that is not one of the three; the
    score tile in HBM (that is standard attention) or in shared memory (the matrix unit writes it in registers); a
    streamed tile in registers for the whole sweep; the accumulator in HBM (FlashAttention, Algorithm 1, reads and
    writes it each step; FlashAttention-2 does not).
    """
    report = _check_quiz("check_where_it_lives", answers, [(_(quantity), quantity) for quantity in WHERE],
                         what=N_("quantity: place"), parse=_where_parse, right=lambda quantity: WHERE[quantity][0],
                         verdict=_where_verdict)
    extra = sorted(set(answers) - set(WHERE), key=str) if isinstance(answers, dict) else []
    if extra:
        report.add(_("unknown quantities"), False, _("{extra}: answer for {quantities}").format(
            extra=extra, quantities=list(WHERE)))
    return report


# ------------------------------------------------------------------------------------------------------------------
# 14.1: the recap quiz
# ------------------------------------------------------------------------------------------------------------------

# (question, {letter: choice}, right letter, {wrong letter: why not})
RECAP_QUESTIONS = {
    1: (N_("After i steps of the online normalizer (chapter 2), s_i is"),
        {"a": N_("the softmax denominator of the whole row"),
         "b": N_("the sum of exp(x_j - g_i) over the first i elements, measured against the running max g_i"),
         "c": N_("the sum of exp(x_j) over the first i elements")},
        "b", {"a": N_("only s_N, after the last element, is the denominator: that is the one idea"),
              "c": N_("exp(x_j) alone overflows; every term is measured against the running max")}),
    2: (N_("Subtracting the max before exp (chapter 1)"),
        {"a": N_("changes the probabilities slightly, for stability"),
         "b": N_("changes nothing mathematically and keeps every exponent <= 0"),
         "c": N_("is needed only in float16")},
        "b", {"a": N_("the same factor exp(-g) is in the numerator and the denominator: it cancels exactly"),
              "c": N_("float32 overflows at exp(88.7) and float64 at exp(709.8): every dtype needs it")}),
    3: (N_("FlashAttention-2 keeps acc = s A' instead of the output A' (chapter 7) because"),
        {"a": N_("the division by s can then wait until the last key tile: one division per output instead of one per "
                 "tile"),
         "b": N_("acc is a more accurate average than A'"),
         "c": N_("A' cannot be computed tile by tile")},
        "a", {"b": N_("acc is not an average at all; it only becomes one when divided by s at the end"),
              "c": N_("FlashAttention (Algorithm 1) does compute A' tile by tile, normalised at every step")}),
    4: (N_("A query row whose keys are all masked (chapter 8) gives, in this course"),
        {"a": N_("NaN, from -inf - (-inf)"), "b": N_("an output of 0 and a logsumexp of -inf"),
         "c": N_("the mean of V")},
        "b", {"a": N_("that NaN is the bug the chapter fixes: the convention is 0 and -inf"),
              "c": N_("with no key to attend to there is nothing to average")}),
    5: (N_("In the FlashAttention-2 loop (query tiles outside), each key/value tile is read from HBM"),
        {"a": N_("once in all"), "b": N_("once per query tile"), "c": N_("once per key")},
        "b", {"a": N_("every query tile sweeps every key tile: T_r reads of each (chapter 6)"),
              "c": N_("keys are read a tile at a time, not one by one")}),
    6: (N_("Flash-Decoding splits the keys of a single query (N = 1) into chunks (chapter 10) because"),
        {"a": N_("one query tile is too little work to fill a GPU; the chunks' (g, s, acc) states merge exactly"),
         "b": N_("it does fewer operations than one sweep"),
         "c": N_("it approximates attention to save time")},
        "a", {"b": N_("it does the same work plus a small merge; it wins by running the chunks in parallel"),
              "c": N_("the merge is exact: it is chapter 2's rule for two (g, s) states")}),
    7: (N_("In the Triton kernel (chapter 11), acc lives in"),
        {"a": N_("HBM"), "b": N_("shared memory"), "c": N_("registers")},
        "c", {"a": N_("it is written to HBM once, at the end, as A"),
              "b": N_("shared memory holds the streamed K, V tiles")}),
}


def print_recap_quiz() -> None:
    """Print the questions of :func:`check_recap_quiz`."""
    for number, (question, choices, _right, _why) in RECAP_QUESTIONS.items():
        print(f"{number}. {_(question)}")
        for letter, choice in choices.items():
            print(f"     ({letter}) {_(choice)}")


def _recap_parse(answers, number):
    """The letter the learner gave for question ``number`` (its key an int or a string; ``"(B)"`` is ``"b"``)."""
    answer = answers.get(number, answers.get(str(number)))
    if answer in (None, ...):
        return PropertyFailure(_("no answer yet"))
    letter = str(answer).strip().lower().strip("()")
    choices = RECAP_QUESTIONS[number][1]
    return letter if letter in choices else PropertyFailure(_("{answer} is not one of {choices}").format(
        answer=repr(answer), choices=sorted(choices)))


def check_recap_quiz(answers) -> CheckReport:
    """Check a learner's ``{question number: letter}`` for :data:`RECAP_QUESTIONS` (exercise 14.1), one case per
    question through the harness (:func:`~flashmath.exercises._cases.check_function`); a wrong letter is answered
    with why that choice is wrong, naming the chapter to revisit."""
    return _check_quiz("check_recap_quiz", answers,
                       [(f"{number}. {_(question[0])}", number) for number, question in RECAP_QUESTIONS.items()],
                       what=N_("question number: letter"), parse=_recap_parse,
                       right=lambda number: {RECAP_QUESTIONS[number][2]},
                       verdict=lambda number, letter: (_("not ({letter})").format(letter=letter),
                                                       _(RECAP_QUESTIONS[number][3][letter])))


# ------------------------------------------------------------------------------------------------------------------
# 14.2: FlashAttention-2 for one query row
# ------------------------------------------------------------------------------------------------------------------


def _flash_row(q_n, K, V, B_c, *, scale=True, rescale_acc=True, rescale_s=True, g0=-np.inf, subtract_max=True,
               divide=True, lse_with_g=True):
    """One query row through FlashAttention-2's key-tile loop in float64, with mistakes as switches: ``(a_n,
    lse_n)``. ``np.log``, not ``math.log``: a wrong model's ``log(0) = -inf`` is an answer to compare with."""
    q_n, K, V = (np.asarray(a, np.float64) for a in (q_n, K, V))
    D = q_n.shape[0]
    g, s, acc = g0, 0.0, np.zeros(V.shape[1])
    for c0 in range(0, K.shape[0], B_c):
        x = K[c0:c0 + B_c] @ q_n / (math.sqrt(D) if scale else 1.0)  # (B_c,)
        g_new = max(g, float(x.max())) if subtract_max else 0.0
        alpha = math.exp(g - g_new) if g_new != -np.inf else 0.0
        p = np.exp(x - g_new)
        s = (s * alpha if rescale_s else s) + p.sum()
        acc = (acc * alpha if rescale_acc else acc) + p @ V[c0:c0 + B_c]
        g = g_new
    return (acc / s if divide else acc), float((g if lse_with_g else 0.0) + np.log(s))


def _model(**mistake):
    """The answer ``(a_n, lse_n)`` of :func:`_flash_row` with a mistake switched on."""
    return lambda q_n, K, V, B_c: _flash_row(q_n, K, V, B_c, **mistake)


def _close_in_float32(answer, right) -> bool:
    """The answer agrees with the right one to float32's precision (1e-5 relative) but not to 1e-9."""
    return _same(answer, right, 1e-5) and not _same(answer, right, 1e-9)


FLASH_ROW_MISTAKES = (
    Mistake(N_("acc not divided by s at the end"), N_("A = acc / s: acc = s A' is the unnormalised numerator"),
            (_model(divide=False),)),
    Mistake(N_("the scale 1/sqrt(D) missing"), N_("the scores are q_n . K[m] / sqrt(D)"), (_model(scale=False),)),
    Mistake(N_("acc not rescaled"),
            N_("when a key tile raises the max, acc must be multiplied by alpha = exp(g - g_new) before P V is added"),
            (_model(rescale_acc=False),)),
    Mistake(N_("s not rescaled"), N_("s = s * exp(g - g_new) + sum(P): the old sum is measured against the old max"),
            (_model(rescale_s=False),)),
    Mistake(N_("both rescales missing"),
            N_("acc and s are measured against the running max: multiply both by exp(g - g_new) when it moves"),
            (_model(rescale_acc=False, rescale_s=False),)),
    Mistake(N_("the running max started at 0"),
            N_("start g at -inf: with g = 0, scores far below 0 give exp(x - 0) = 0, s = 0 and 0 / 0"),
            (_model(g0=0.0),)),
    Mistake(N_("the max not subtracted"),
            N_("exp(x) overflows for scores above 709 (float64): subtract the running max"),
            (_model(subtract_max=False),)),
    Mistake(N_("g left out of the logsumexp"), N_("lse = g + log(s): s is measured against the max g"),
            (_model(lse_with_g=False),)),
    Mistake(N_("float32 instead of float64"),
            N_("the answer agrees to about 1e-7 relative, float32's precision: this exercise is checked against "
               "float64 to 1e-9, so compute in float64 (np.zeros(..., np.float64), no .astype(np.float32), torch "
               "tensors of dtype float64). A real kernel computes in float32 and is tested with a tolerance instead "
               "(chapter 9)"), (_model(),), compare=_close_in_float32),
)


def _flash_row_hint(exc) -> str | None:
    """What a math error in a one-row FlashAttention probably means."""
    by_name = {m.name: m for m in FLASH_ROW_MISTAKES}
    if isinstance(exc, (ValueError, ZeroDivisionError)) and ("domain" in str(exc) or "division" in str(exc)):
        return _("s = 0 after every key: {message}").format(
            message=by_name["the running max started at 0"].message())
    if isinstance(exc, OverflowError):
        return by_name["the max not subtracted"].message()
    return shape_hint(exc)


def _flash_row_cases():
    from flashmath.data import load_heads

    rng = np.random.default_rng(12)
    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    q, k, v = (a[layer, head].astype(np.float64) for a in (heads.q, heads.k, heads.v))
    D = 4
    K = rng.standard_normal((10, D))
    V = rng.standard_normal((10, 3))
    rising = K.copy()
    rising[:, 0] = np.linspace(-3, 3, 10)  # with q along the first axis the max rises from tile to tile
    q_rise = np.array([2.0, 0.0, 0.0, 0.0])
    cases = [
        (_("10 keys in tiles of 4 (the last tile is shorter)"), (rng.standard_normal(D), K, V, 4)),
        (_("a max that rises from tile to tile (acc and s must be rescaled)"), (q_rise, rising, V, 3)),
        (_("tiles of one key"), (rng.standard_normal(D), K, V, 1)),
        (_("one tile holding every key"), (rng.standard_normal(D), K, V, 16)),
        (_("scores near 2000 (exp overflows unless the max is subtracted)"), (600.0 * q_rise, rising, V, 4)),
        (_("scores of -1000 and below (a max started at 0 underflows: exp(-1000) = 0)"),
         (-1000.0 * q_rise, rising + 4.0 * np.eye(D)[0], V, 4)),
        (_("a real head's row (46 keys, D = 32) in tiles of 8"), (q[n], k, v, 8)),
    ]
    with_nan = V.copy()
    with_nan[6, 0] = np.nan
    properties = property_cases([
        (_("one element: a single key"), (rng.standard_normal(D), K[:1], V[:1], 4)),
        (_("NaN propagates: NaN in one value, V[6, 0], gives NaN in a_n[0] alone"), (q_rise, rising, with_nan, 4)),
    ])
    return cases, properties


def _flash_row_call(fn, args):
    """The harness's ``call`` hook: the learner's ``(a_n, lse_n)`` as ``(array, float)``, or why it is not a pair."""
    out = fn(*args)
    if out is None:
        return PropertyFailure(_("returned None: return the pair (a_n, lse_n)"))
    try:
        a, lse = out
    except (TypeError, ValueError):
        return PropertyFailure(_("expected a pair (a_n, lse_n), got {type}").format(type=type(out).__name__))
    try:
        return np.asarray(a), float(lse)
    except (TypeError, ValueError):
        return PropertyFailure(_("lse_n must be one number (a float), got {type} of shape {shape}").format(
            type=type(lse).__name__, shape=np.shape(lse)))


def _flash_row_reference(q_n, K, V, B_c):
    from flashmath.attention import attention

    a, lse = attention(q_n[None, :], K, V, return_lse=True)
    return a[0], float(lse[0])


def _flash_row_describe(answer, expected) -> tuple[str, object, object]:
    """What differs: ``a_n`` first; when it is right, the logsumexp (both numbers in the text, nothing to add)."""
    (a, lse), (a_ref, lse_ref) = answer, expected
    if not _same(a, a_ref, 1e-9):
        return _("expected a_n = {expected}, got {got}").format(expected=fmt(a_ref), got=fmt(a)), a, a_ref
    return (_("a_n is right; expected lse_n = {expected:.10g}, got {got:.10g}").format(
        expected=float(lse_ref), got=float(lse)), lse_ref, lse_ref)


def _a_only(mistake: Mistake) -> Mistake:
    """The mistake with models that give ``a_n`` alone (its comparison, if any, works on arrays as on pairs; the
    :class:`~flashmath.exercises._report.Diagnosis` runs each model quietly)."""
    return dataclasses.replace(mistake, models=tuple((lambda *args, model=model: model(*args)[0])
                                                     for model in mistake.models))


class _FlashRowDiagnosis:
    """The harness's ``diagnosis`` hook: where ``a_n`` is wrong, the mistake whose model gives the same ``a_n``
    (so that a second mistake, in the logsumexp, does not hide the first); where ``a_n`` is right, the one that gives
    the same pair."""

    def __init__(self, cases, answers):
        self.a_wrong = [answer is not None and not _same(answer[0], _flash_row_reference(*args)[0], 1e-9)
                        for args, answer in zip(cases, answers, strict=True)]
        same = functools.partial(_same, rtol=1e-9)
        self.by_a = Diagnosis(cases, [None if answer is None else answer[0] for answer in answers],
                              [_a_only(mistake) for mistake in FLASH_ROW_MISTAKES], same)
        self.by_pair = Diagnosis(cases, answers, FLASH_ROW_MISTAKES, same)

    def for_case(self, i: int) -> Mistake | None:
        return (self.by_a if self.a_wrong[i] else self.by_pair).for_case(i)


def check_flash_row(fn) -> CheckReport:
    """Check a learner's ``fn(q_n, K, V, B_c) -> (a_n, lse_n)``: attention of one query row ``q_n (D,)`` over keys
    ``K (M, D)`` and values ``V (M, Dv)``, computed as FlashAttention-2 does, key tiles of ``B_c`` at a time with a
    running max, sum and unnormalised accumulator, one division at the end; ``lse_n = g + log(s)`` (exercise 14.2).

    Through the harness (:func:`~flashmath.exercises._cases.check_function`): the property battery on every case
    (the arrays given unchanged, ``a_n`` of shape ``(Dv,)`` and a float result), the property cases (a single key;
    NaN in one value gives NaN in that output alone), then the cases: a shorter last tile, a max that rises from
    tile to tile, tiles of one key, one tile of all keys, scores near 2000 and of -1000 and below, a real head's
    row. Named mistakes: :data:`FLASH_ROW_MISTAKES`, the logsumexp without ``g`` among them. Compared to 1e-9
    relative.
    """
    cases, properties = _flash_row_cases()
    return check_function("check_flash_row", fn, cases, _flash_row_reference, FLASH_ROW_MISTAKES, n_out=2,
                          names=("a_n", "lse_n"), properties=properties, call=_flash_row_call,
                          compare=functools.partial(_same, rtol=1e-9), describe=_flash_row_describe,
                          diagnosis=_FlashRowDiagnosis, hint=_flash_row_hint)


#: For each checker, the mistakes it names, in the order it tries them.
MISTAKES: dict[str, tuple] = {
    "check_row_lse": ROW_LSE_MISTAKES,
    "check_flash_row": FLASH_ROW_MISTAKES,
}
