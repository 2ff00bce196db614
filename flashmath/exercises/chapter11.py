"""Checkers for the exercises of chapter 11 (the Triton kernel).

Like every checker of :mod:`flashmath.exercises`, each one runs the learner's answer on cases where the classic
mistakes make a difference, never raises, and returns a :class:`flashmath.exercises.CheckReport`; a wrong answer
is compared with the answers of the known mistakes, and the first that matches is named, with what to change. Both
run through the one harness, :func:`~flashmath.exercises._cases.check_function` (the quiz as one case per question,
:func:`~flashmath.exercises._cases.check_quiz`).

* :func:`check_row_lse` (11.1): a Triton kernel for the logsumexp of each row, streamed in blocks of columns:
  chapter 2's online normalizer written as a GPU program; its mistakes are :data:`ROW_LSE_MISTAKES`.
* :func:`check_where_it_lives` (11.2): registers, shared memory or HBM for each quantity of the kernel.

Solutions: :mod:`flashmath.solutions_triton`.
"""

from __future__ import annotations

import functools

import numpy as np

from flashmath.exercises._cases import PropertyFailure, Said, check_function, check_quiz, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import CheckReport, Diagnosis, Instruction, Mistake, error_note, fmt
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = ["ROW_LSE_MISTAKES", "check_row_lse", "check_where_it_lives"]


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

    def model(x, *_wide):  # the strided case also passes the wide array
        cols = x.shape[1]
        if cols % block == 0:
            return None  # no padding: the mistake makes no difference here
        pad = np.zeros((x.shape[0], block - cols % block), np.float32)
        return _lse(np.concatenate([x, pad], axis=1))

    return model


def _blockwise(
    block: int,
    *,
    rescale: bool = True,
    g0: float = -np.inf,
    base2: bool | str = False,
    inverted: bool | str = False,
    terms_old: bool = False,
    guard: bool = True,
    pad: float = -np.inf,
    block_max_only: bool = False,
    result=None,
    unshifted: str | None = None,
):
    """The streamed loop in float32 with one of the mistakes switched on, as the exercise's template writes it: the
    exponents measured against ``g_ref``, 0 while the running max is still -inf. ``inverted``: the rescale factor
    upside down, ``exp(g_ref - g)`` (``0 * inf = NaN`` at the first block); ``terms_old``: the block's terms measured
    against the old max, ``exp(x - g)``; ``guard=False``: measured against ``g_new`` itself (``-inf - (-inf)`` is
    NaN on a fully masked row); ``inverted="guarded"``: upside down, with the old max read as 0 while it is -inf
    (``exp(g_ref - g_old)``); ``pad``: what the masked load fills the columns past the end with (``other=``);
    ``block_max_only``: the new max is the block's own, ``tl.max(x, 0)`` without ``tl.maximum(g, ...)``;
    ``result(g, s)``: the logsumexp taken from the final state in another way than ``g + log(s)``; ``unshifted``:
    the block's terms as exp(x) divided by exp(g_ref) afterwards, ``"sum"`` (sum(exp(x)) / exp(g_ref)) or
    ``"each"`` (sum(exp(x) / exp(g_ref))): equal in exact arithmetic, inf / inf in float32 above 88.7. ``base2``:
    ``True`` for tl.exp2 and tl.log2 throughout, ``"log"`` for tl.log2 at the end only, ``"exp"`` for tl.exp2 in the
    loop only."""
    exp = np.exp2 if base2 in (True, "exp") else np.exp
    log = np.log2 if base2 in (True, "log") else np.log

    def model(x, *_wide):
        x = np.asarray(x, np.float32)
        g = np.full(x.shape[0], g0, np.float32)
        s = np.zeros(x.shape[0], np.float32)
        with np.errstate(all="ignore"):
            for c0 in range(0, x.shape[1], block):
                blk = x[:, c0 : c0 + block]  # padded with -inf to BLOCK columns, as the masked load reads them
                blk = np.concatenate([blk, np.full((x.shape[0], block - blk.shape[1]), pad, np.float32)], axis=1)
                g_new = blk.max(axis=1) if block_max_only else np.maximum(g, blk.max(axis=1))
                g_ref = np.where(np.isneginf(g_new), np.float32(0), g_new) if guard else g_new
                if inverted == "guarded":
                    factor = exp(g_ref - np.where(np.isneginf(g), np.float32(0), g))
                else:
                    factor = exp(g_ref - g) if inverted else exp(g - g_ref)
                if unshifted == "sum":
                    terms = exp(blk).sum(axis=1) / exp(g_ref)
                elif unshifted == "each":
                    terms = (exp(blk) / exp(g_ref)[:, None]).sum(axis=1)
                else:
                    terms = exp(blk - (g if terms_old else g_ref)[:, None]).sum(axis=1)
                s = (s * factor if rescale else s) + terms
                g = g_new
            return g + log(s) if result is None else result(g, s)

    return model


def _no_max(x, *_wide):
    x = np.asarray(x, np.float32)
    return np.log(np.exp(x).sum(axis=1))


def _log_unshifted(x, *_wide):
    """The running max right, but the result taken as log(s * exp(g)): exp(g) overflows float32 above 88.7 and is 0
    below -103."""
    x = np.asarray(x, np.float32)
    g = x.max(axis=1)
    g_ref = np.where(np.isneginf(g), np.float32(0), g)
    s = np.exp(x - g_ref[:, None]).sum(axis=1)
    return np.log(s * np.exp(g))


def _without_g(x, *_wide):
    """log(s) alone: s is measured against g_ref (0 for a row of -inf, whose log(s) is -inf)."""
    g = np.asarray(x, np.float64).max(axis=1)
    return _lse(x) - np.where(np.isneginf(g), 0.0, g)


def _stride_ignored(x, wide=None):
    """A kernel that steps from row to row by the number of columns, ignoring the tensor's row stride
    (``x.stride(0)``): on a slice of a wider array it reads the first ``R * C`` numbers of the storage."""
    if wide is None:
        return None
    return _lse(np.asarray(wide, np.float32).ravel()[: x.size].reshape(x.shape))


def _plus_inf_empty(x, *_wide):
    lse = _lse(x)
    return np.where(np.isneginf(lse), np.inf, lse)


_SENTINELS = (-1e30, -1e9, -1e20, -1e38, float(np.finfo(np.float32).min), -1e4, -1e6)  # "a very negative number"

ROW_LSE_MISTAKES = (
    Mistake(
        N_("the padding read as 0"),
        N_(
            "the columns past the end of the row were loaded with other=0.0, so each adds exp(0 - g) to the sum; "
            "load them with other=float('-inf') (weight exp(-inf) = 0)"
        ),
        tuple(_padded_with_zeros(b) for b in BLOCKS),
    ),
    # before the next: where a max started at 0 is wrong (rows all far below 0), so is a max never subtracted
    Mistake(
        N_("the running max started at 0"),
        N_(
            "start g at -inf (tl.full([...], float('-inf'), tl.float32) or the first block's max): with g = 0, a "
            "row of -1000s gives exp(-1000) = 0 and log(0) = -inf"
        ),
        tuple(_blockwise(b, g0=0.0) for b in BLOCKS),
    ),
    Mistake(
        N_("the max not subtracted"),
        N_(
            "exp(x) overflows float32 once x > 88.7 (and exp(-1000) is 0): keep a running max g and sum exp(x - g), "
            "every exponent <= 0, and keep g outside the log at the end: L = g + log(s), not log(s * exp(g))"
        ),
        (_no_max, _log_unshifted, *(_blockwise(b, unshifted=u) for u in ("sum", "each") for b in BLOCKS)),
    ),
    Mistake(
        N_("the rescale of s missing"),
        N_(
            "when a block raises the running max, the old sum is relative to the old max: s = s * exp(g - g_ref) + "
            "sum(exp(x - g_ref)), with g_ref the new max (0 while it is -inf), as in the TODO"
        ),
        tuple(_blockwise(b, rescale=False) for b in BLOCKS),
    ),
    Mistake(
        N_("the rescale factor upside down"),
        N_(
            "the old sum shrinks when the max rises: s * exp(g - g_ref), the old max minus the new (an exponent ≤ 0, "
            "g_ref the new max, 0 while it is -inf, as in the TODO); exp(g_ref - g) is inf at the first block, where "
            "g = -inf, and 0 * inf is NaN"
        ),
        tuple(_blockwise(b, inverted=flavour) for flavour in (True, "guarded") for b in BLOCKS),
    ),
    Mistake(
        N_("the block's terms measured against the old max"),
        N_(
            "the new block's terms are measured against the new max, like the rescaled sum: sum(exp(x - g_ref)), with "
            "g_ref the new max (0 while it is -inf, as in the TODO); exp(x - g) with the old g (-inf at the first "
            "block) is inf, and NaN where x is -inf too"
        ),
        tuple(_blockwise(b, terms_old=True) for b in BLOCKS),
    ),
    Mistake(
        N_("NaN on a fully masked row"),
        N_(
            "a fully masked row gives NaN, from -inf - (-inf) in exp(g - g_new) or exp(x - g_new); subtract 0 while "
            "g_new is -inf (tl.where(g_new == float('-inf'), 0.0, g_new)), and return -inf for s = 0"
        ),
        tuple(_blockwise(b, guard=False) for b in BLOCKS),
    ),
    Mistake(
        N_("the running max not carried over"),
        N_(
            "the running max is the max of everything seen so far: g_new = tl.maximum(g, tl.max(x, 0)), not the "
            "block's own max tl.max(x, 0) (a block that is lower, or all -inf, would lower it)"
        ),
        tuple(_blockwise(b, block_max_only=True) for b in BLOCKS),
    ),
    Mistake(
        N_("g left out of the result"), N_("the logsumexp is g + log(s): s is relative to the max g"), (_without_g,)
    ),
    Mistake(
        N_("log(g + s) instead of g + log(s)"),
        N_("g stays outside the log: L = g + log(s), since sum exp(x) = exp(g) * s"),
        tuple(
            _blockwise(b, result=r) for r in (lambda g, s: np.log(g + s), lambda g, s: np.log(g * s)) for b in BLOCKS
        ),
    ),
    Mistake(
        N_("a large negative number for -inf"),
        N_(
            "load the columns past the end with other=float('-inf'): a finite stand-in such as -1e30 is a value, so "
            "a fully masked row's logsumexp comes out near -1e30 instead of -inf"
        ),
        tuple(_blockwise(b, pad=pad) for pad in _SENTINELS for b in BLOCKS),
    ),
    Mistake(
        N_("base 2 instead of e"),
        N_(
            "tl.exp2 and tl.log2 work in base 2: exp(x) = exp2(x * log2(e)) and log(s) = log2(s) / log2(e); the "
            "logsumexp is in base e, so use tl.exp and tl.log (in the loop and at the end)"
        ),
        tuple(_blockwise(b, base2=flavour) for flavour in (True, "log", "exp") for b in BLOCKS),
    ),
    Mistake(
        N_("the row stride ignored"),
        N_(
            "a tensor that is a slice or a transpose of another is not contiguous: row r starts at x_ptr + r * "
            "x.stride(0), not r * n_cols. Pass x.stride(0) (and x.stride(1)) to the kernel, or call x = "
            "x.contiguous() first"
        ),
        (_stride_ignored,),
    ),
    Mistake(
        N_("FlashAttention-2's +inf convention"),
        N_(
            "FlashAttention-2's kernels store +inf for a row with no key (so that exp(x - L) = 0 in their "
            "backward); this exercise, like the course, wants -inf, the log of an empty sum"
        ),
        (_plus_inf_empty,),
    ),
)


def _kernel_hint(exc) -> str | None:
    """What a stride or shape error raised by the learner's wrapper probably means."""
    text = str(exc)
    if "stride" in text or "contiguous" in text:
        return _(
            "the input is a non-contiguous view (a slice of a wider tensor): .view() needs contiguous memory; "
            "use x.stride(0) in the kernel, or x.contiguous()"
        )
    if "shape" in text or "broadcast" in text:
        return _(
            "two blocks of different shapes met: g, s and the stored logsumexp hold one value per row (shape "
            "[1]), x holds BLOCK values; reduce the block before combining it with them, tl.max(x, 0) and "
            "tl.sum(..., 0) (tl.maximum(g, x) alone keeps BLOCK values)"
        )
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
        (
            _("rows of -1000 (with the running max started at 0, exp underflows to 0)"),
            -1000.0 + rng.standard_normal((2, 64)),
        ),
        (_("-inf entries (masked), and a fully masked row: its logsumexp is -inf, not NaN"), masked),
        (_("one column"), rng.standard_normal((4, 1))),
        (
            _("a slice of a wider tensor (x[:, :40] of a (3, 64) tensor: row stride 64, not 40)"),
            rng.standard_normal((3, 64)),
        ),  # the last case: the strided one (check_row_lse)
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
    return property_cases(
        [
            (_("the empty input: no rows give an empty result"), (np.zeros((0, 5), np.float32),)),
            (_("one element: a (1, 1) tensor"), (np.array([[0.75]], np.float32),)),
            (_("NaN propagates: a row holding NaN gives NaN"), (with_nan.astype(np.float32),)),
        ]
    )


_NAN_ON_EMPTY = next(m for m in ROW_LSE_MISTAKES if m.name == "NaN on a fully masked row")


class _RowLseDiagnosis:
    """The harness's ``diagnosis`` hook: the catalogue first; NaN on a fully masked row where no model explains the
    answer (a kernel that writes NaN there in some other way)."""

    def __init__(self, cases, answers):
        self.cases, self.answers = cases, answers
        self.catalogue = _diagnosis(cases, answers, ROW_LSE_MISTAKES, 1e-5)

    def _nan_on_empty(self, i: int) -> bool:
        got, expected = self.answers[i], _lse(self.cases[i][0])
        try:
            return bool(np.isnan(np.asarray(got)[np.isneginf(expected)]).any())
        except Exception:
            return False

    def for_case(self, i: int):
        found = self.catalogue.for_case(i)
        if found is None and self._nan_on_empty(i):
            return _NAN_ON_EMPTY
        return found

    def explaining(self, failing):
        """The catalogue's mistake that explains every failing case (the harness's whole-run rule), else NaN on the
        fully masked row when that is every failing case's trouble."""
        failing = list(failing)
        found = self.catalogue.explaining(failing)
        if found is None and failing and all(self._nan_on_empty(i) for i in failing):
            return _NAN_ON_EMPTY
        return found


@exercise("11.1", ROW_LSE_MISTAKES, solution="row_lse", solutions="flashmath.solutions_triton")
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
        from flashmath.triton_setup import install_hint  # here: importing it tries to import torch

        report = CheckReport("check_row_lse")
        report.add(
            "PyTorch",
            False,
            _("this exercise needs PyTorch and Triton (the triton extra): {how}").format(how=install_hint()),
        )
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
        if isinstance(out, np.ndarray):
            return PropertyFailure(
                _(
                    "returned ndarray, not a torch tensor: looks like a numpy array returned (out.numpy()): return "
                    "the tensor out itself, on x's device"
                )
            )
        if not isinstance(out, torch.Tensor):
            return PropertyFailure(
                _(
                    "returned {type}, not a torch tensor: write the results into out = "
                    "torch.empty(x.shape[0], dtype=torch.float32, device=x.device) and return it"
                ).format(type=type(out).__name__)
            )
        values = np.asarray(out.detach().cpu().numpy())
        if out.dtype != torch.float32 or out.device != x.device:
            return PropertyFailure(
                _(
                    "expected a float32 tensor on {device} (x's device), got {dtype} on "
                    "{out_device}: torch.empty(x.shape[0], dtype=torch.float32, device=x.device)"
                ).format(device=x.device, dtype=out.dtype, out_device=out.device),
                values,
            )
        return values

    def describe(got, expected):
        return (
            _("expected {expected}, got {got}").format(expected=fmt(expected, got), got=fmt(got, expected)),
            got,
            expected,
        )

    return check_function(
        "check_row_lse",
        fn,
        cases,
        lambda x, *_: _lse(x),
        ROW_LSE_MISTAKES,
        n_out=1,
        names=("L",),
        properties=_row_lse_properties(),
        compare=functools.partial(_same, rtol=1e-5),
        describe=describe,
        call=call,
        diagnosis=_RowLseDiagnosis,
        hint=_kernel_hint,
        not_answer=Said(_("expected one logsumexp per row, a tensor of shape (R,)")),
        # the kernel computes in float32, which meets the 1e-5 tolerance: no "compute in float64" hint
        note=functools.partial(error_note, precision_hint=False, rtol=1e-5, atol=1e-5),
    )


# ------------------------------------------------------------------------------------------------------------------
# 11.2: where each quantity lives
# ------------------------------------------------------------------------------------------------------------------

PLACES = {
    "registers": ("registers", "register", "register file", "rf", "寄存器"),
    "shared memory": ("shared memory", "shared", "smem", "sram", "lds", "共享内存"),
    "HBM": ("hbm", "global memory", "global", "dram", "device memory", "gpu memory", "显存"),
}

#: How a place is named in a verdict ("not registers"): the PLACES key, translated where it is shown.
PLACE_NAMES = {"registers": N_("registers"), "shared memory": N_("shared memory"), "HBM": N_("HBM")}

WHERE = {
    "Q, K, V": (
        {"HBM"},
        N_("the inputs stay in the GPU's main memory (HBM); a program loads only its tiles"),
    ),
    "q_tile": ({"registers", "shared memory"}, N_("loaded once per program and kept for the whole sweep")),
    "k_tile, v_tile": (
        {"shared memory"},
        N_(
            "streamed: one tile per step, staged in shared memory for the matrix "
            "unit (up to num_stages buffers when the loads are pipelined; how many, "
            "the compiled kernel in the chapter shows)"
        ),
    ),
    "x_tile, p_tile": (
        {"registers"},
        N_(
            "tl.dot leaves the score tile in registers (float32), where the matrix unit "
            "writes its result, and it is dropped after the step"
        ),
    ),
    "m_i, l_i": ({"registers"}, N_("one float32 per row of the tile, updated every step: registers")),
    "acc": (
        {"registers"},
        N_(
            "(B_r, Dv) float32, updated every step and written once at the end: registers, spread "
            "over the program's threads (num_warps x 32 of them)"
        ),
    ),
    "A, LSE": ({"HBM"}, N_("written once, at the end, to HBM")),
}
"""For each quantity of the kernel: the right places, and why. The learner's dict uses these keys, code names, in both
editions; its cases in the report are named by :data:`WHERE_LABELS`, in the selected language."""

WHERE_LABELS = {"Q, K, V": N_("Q, K, V (the whole arrays)"), "A, LSE": N_("A, LSE (the results)")}
"""The case name of a key that is not a name in the kernel (the others are named as they are)."""

WHERE_ALIASES = {"Q, K, V (the whole arrays)": "Q, K, V", "A, LSE (the results)": "A, LSE"}
"""The keys of the exercise before zhrev-al 11-15 (English words in the learner's code), still accepted."""

SCORES_IN_SHARED_MEMORY = N_(
    "tl.dot leaves the score tile in registers, where Ampere's and Hopper's matrix units write their results "
    "(NVIDIA's CUTLASS MMA guides), and the exponentials and row sums work on it there; shared memory holds the "
    "tiles on their way from HBM (k_tile, v_tile)"
)
"""Why the score tile is not in shared memory (exercise 11.2)."""


def _place(answer) -> str | None:
    text = str(answer).strip().lower()
    return next((place for place, names in PLACES.items() if text in names), None)


def _where_parse(answers, quantity):
    """The place the learner gave for ``quantity``, one of the three, or why there is none."""
    if quantity not in answers or answers[quantity] in (None, ...):
        # what to write, not a reason: printed in full for every unanswered quantity (review zhrev-ao 11-2)
        return PropertyFailure(Instruction(_("no answer yet: write 'registers', 'shared memory' or 'HBM'")))
    place = _place(answers[quantity])
    if place is None:
        return PropertyFailure(
            _("{answer} is not one of 'registers', 'shared memory', 'HBM'").format(answer=repr(answers[quantity]))
        )
    return place


def _where_verdict(quantity: str, place: str, answer=None) -> tuple[str, str]:
    """What is wrong with ``place`` for ``quantity``, and why: about the place the learner gave (``answer``, the
    learner's word, is named where it was mapped: "SRAM" is read as shared memory)."""
    what, why = _where_wrong(quantity, place)
    if place == "shared memory" and isinstance(answer, str) and answer.strip().lower() == "sram":
        what = _("'{answer}' read as shared memory (registers are on-chip SRAM too): {what}").format(
            answer=answer.strip(), what=what
        )
    return what, why


def _where_wrong(quantity: str, place: str) -> tuple[str, str]:
    why = _(WHERE[quantity][1])
    if quantity == "k_tile, v_tile" and place == "registers":
        return _("not registers for the whole sweep"), why
    if quantity == "x_tile, p_tile" and place == "HBM":
        why = _(
            "{why}: it never reaches HBM, the whole point of FlashAttention. A score tile in HBM is standard "
            "attention, which writes X and Y (N x M each) and reads them back"
        ).format(why=why)
    elif quantity == "x_tile, p_tile" and place == "shared memory":
        why = _(SCORES_IN_SHARED_MEMORY)
    elif quantity == "acc" and place == "HBM":
        why = _(
            "FlashAttention (Algorithm 1, key tiles outside) reads and writes A at every step; FlashAttention-2 "
            "keeps acc on chip. {why}"
        ).format(why=why)
    return _("not {place}").format(place=_(PLACE_NAMES[place])), why


@exercise("11.2", solution="where_it_lives", solutions="flashmath.solutions_triton", property_cases=0, quiz=True)
def check_where_it_lives(answers) -> CheckReport:
    """Check a learner's ``{quantity: place}`` for the quantities of :data:`WHERE` (exercise 11.2); a place is
    ``"registers"``, ``"shared memory"`` or ``"HBM"`` (synonyms accepted: ``"smem"``, ``"global memory"``...).

    One case per quantity, through the harness (:func:`~flashmath.exercises._cases.check_function`; no edge input
    applies to a quiz). Each wrong place is answered about that place: a place that is not one of the three; the
    score tile in HBM (that is standard attention) or in shared memory (the matrix unit writes it in registers); a
    streamed tile in registers for the whole sweep; the accumulator in HBM (FlashAttention, Algorithm 1, reads and
    writes it each step; FlashAttention-2 does not).
    """
    if isinstance(answers, dict):
        answers = {WHERE_ALIASES.get(key, key): answer for key, answer in answers.items()}
    report = check_quiz(
        "check_where_it_lives",
        answers,
        [(_(WHERE_LABELS.get(quantity, quantity)), quantity) for quantity in WHERE],
        what=N_("quantity: place"),
        parse=_where_parse,
        right=lambda quantity: WHERE[quantity][0],
        verdict=lambda quantity, place: _where_verdict(
            quantity, place, answers.get(quantity) if isinstance(answers, dict) else None
        ),
    )
    extra = sorted(set(answers) - set(WHERE), key=str) if isinstance(answers, dict) else []
    if extra:
        report.add(
            _("unknown quantities"),
            False,
            _("{extra}: answer for {quantities}").format(extra=extra, quantities=list(WHERE)),
        )
    return report
