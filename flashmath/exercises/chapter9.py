"""Checker for the chapter 9 exercise: FlashAttention's test rule.

The learner writes ``fn(out, q, k, v) -> ratio``: the largest absolute error of ``out`` (an attention output
computed from the low-precision inputs ``q``, ``k``, ``v``) divided by the largest absolute error of naive attention
in the inputs' dtype, both measured against the float64 reference of the same inputs (FlashAttention's tests round
their reference to the inputs' dtype; the course keeps it unrounded, chapter 9). FlashAttention's tests require the
ratio to be at most 2.

The checker runs ``fn`` on float16 and bfloat16 inputs with outputs of known quality, and names the classic
mistakes by the ratio they give: the naive attention computed entirely in the input dtype (its matrix products and
sums accumulated there), only its output rounded, never rounded at all (or computed in float64), the scores, the
probabilities or the output left unrounded, a reference stored in the input dtype, the mean or the relative error
instead of the largest absolute one, and the ratio upside down. Like every checker it never raises (see
:mod:`flashmath.exercises`).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from flashmath.attention import attention
from flashmath.exercises._cases import Said, check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import CheckReport
from flashmath.flash import flash_attention
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.precision import max_abs_error, naive_attention, round_to

__all__ = ["check_flash_test_ratio"]

RTOL = 0.02  # a learner's naive attention may round a rare element differently from the package's (ties)
MISTAKE_RTOL = 0.1  # a mistake made in another way (another order of the float16 steps) lands near, not on, ours


def _mean_abs_error(out, ref) -> float:
    return float(np.mean(np.abs(np.asarray(out, np.float64) - ref)))


def _naive_in_input_dtype(q, k, v):
    """Naive attention with every operation on arrays of the input dtype (products and sums accumulated there
    wherever numpy's or ml_dtypes' loops do so): the first classic mistake."""
    dtype = q.dtype
    x = (np.matmul(q, np.swapaxes(k, -1, -2)) * dtype.type(1 / math.sqrt(q.shape[-1]))).astype(dtype)
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # exp, max and sum in the input dtype
    y = (e / e.sum(axis=-1, keepdims=True)).astype(dtype)
    return np.matmul(y, v).astype(dtype)


def _naive_rounding(q, k, v, *, x=True, y=True, a=True):
    """Naive attention computed in float32 with only some of X, Y, A rounded to the input dtype (the classic
    half-done naive attentions; all three rounded is :func:`flashmath.precision.naive_attention`)."""
    dtype = q.dtype
    q32, k32, v32 = (arr.astype(np.float32) for arr in (q, k, v))
    scores = q32 @ k32.T / np.float32(math.sqrt(q.shape[-1]))
    if x:
        scores = round_to(scores, dtype).astype(np.float32)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    if y:
        probs = round_to(probs, dtype).astype(np.float32)
    out = probs @ v32
    return round_to(out, dtype) if a else out


def _naive_variant(q, k, v, *, scale=True, axis=-1, shift=True):
    """The framework's naive attention (X, Y, A stored in the input dtype, each computed in float32) with one slip:
    no 1/sqrt(D) scale, the softmax over the queries (``axis=0``), or (``shift=False``) a softmax without its max
    computed on the stored X in the input dtype (e^x overflows float16 once x > 11)."""
    dtype = q.dtype
    q32, k32, v32 = (arr.astype(np.float32) for arr in (q, k, v))
    scores = q32 @ k32.T
    if scale:
        scores = scores / np.float32(math.sqrt(q.shape[-1]))
    x = round_to(scores, dtype)
    if shift:
        x32 = x.astype(np.float32)
        e = np.exp(x32 - x32.max(axis=axis, keepdims=True))
        probs = e / e.sum(axis=axis, keepdims=True)
    else:
        low = np.asarray(x).astype(dtype)
        e = np.exp(low)
        probs = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    probs = round_to(probs, dtype).astype(np.float32)
    return round_to(probs @ v32, dtype)


def _unshifted_message(q, k, v) -> str:
    """What a softmax without its max, exponentiated in the input dtype, does on these inputs: overflow to inf
    (then inf / inf = NaN) when a score passes the log of the dtype's largest number, else only more rounding."""
    dtype = q.dtype
    largest = float(ml_dtypes.finfo(dtype).max)  # float16 65504 = e^11.09, bfloat16 3.39e38 = e^88.72
    q32, k32 = (arr.astype(np.float32) for arr in (q, k))
    with np.errstate(all="ignore"):
        scores = np.asarray(round_to(q32 @ k32.T / np.float32(math.sqrt(q.shape[-1])), dtype)).astype(dtype)
        overflows = not bool(np.all(np.isfinite(np.exp(scores))))
    if overflows:
        return _(
            "your naive softmax seems to exponentiate the scores in {dtype} without subtracting their max: e^x "
            "overflows {dtype} once x > {limit:.1f} ({dtype}'s largest number is {largest:.5g}), and inf / inf is "
            "NaN. A framework's softmax subtracts the row max and computes in float32"
        ).format(dtype=dtype.name, limit=math.log(largest), largest=largest)
    return _(
        "your naive softmax seems to exponentiate the scores in {dtype} without subtracting their max: no e^x "
        "overflows here (the scores stay below {limit:.1f}, the log of {dtype}'s largest number {largest:.5g}), but "
        "e^x, their sum and the quotient are each rounded to {dtype}: rounding errors that the framework's naive "
        "attention does not make. A framework's softmax subtracts the row max and computes in float32"
    ).format(dtype=dtype.name, limit=math.log(largest), largest=largest)


def _naive_rounded_to(q, k, v, dtype):
    """The framework's naive attention (computed in float32) with X, Y and A rounded to ``dtype`` instead of the
    inputs' dtype (a learner's hard-coded float16 or bfloat16)."""
    q32, k32, v32 = (arr.astype(np.float32) for arr in (q, k, v))
    x = round_to(q32 @ k32.T / np.float32(math.sqrt(q.shape[-1])), dtype).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    probs = round_to(e / e.sum(axis=-1, keepdims=True), dtype).astype(np.float32)
    return round_to(probs @ v32, dtype)


def _signed_error(out, ref) -> float:
    return float(np.max(np.asarray(out, np.float64) - ref))


def _relative_error(out, ref) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(np.abs(np.asarray(out, np.float64) - ref) / np.abs(ref)))


def _ratios(out, q, k, v) -> tuple[float, list[tuple[float, str]]]:
    """The right ratio and the ratio each classic mistake gives, ``(ratio, [(wrong ratio, message)])``."""
    dtype = q.dtype.name
    other = np.dtype(np.float16) if dtype != "float16" else np.dtype(ml_dtypes.bfloat16)
    ref = attention(q, k, v)  # float64, from the very numbers given
    naive = naive_attention(q, k, v)
    right = max_abs_error(out, ref) / max_abs_error(naive, ref)
    low_ref = round_to(ref, q.dtype)
    q64, k64, v64 = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    unscaled = attention(q64 * math.sqrt(q.shape[-1]), k64, v64)  # the float64 reference without its 1/sqrt(D)
    with np.errstate(all="ignore"):
        mistakes = [
            (
                max_abs_error(out, ref) / max_abs_error(_naive_in_input_dtype(q, k, v), ref),
                _(
                    "some step of your naive attention seems to compute in {dtype} instead of float32: its matrix "
                    "products, its softmax (the max, the exponentials and their sum), or both. A framework stores X, "
                    "Y and A in {dtype} but computes each in float32 (GPUs accumulate in float32): cast to np.float32 "
                    "before each product and the softmax, and round to {dtype} only when a result is stored"
                ).format(dtype=dtype),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(round_to(ref, q.dtype), ref),
                _(
                    "your naive attention seems to round only its output to {dtype}. A framework that stores the "
                    "scores X "
                    "and the probabilities Y rounds them too: X = round(Q K^T / sqrt(D)), Y = round(softmax(X)), A = "
                    "round(Y V), each computed in float32"
                ).format(dtype=dtype),
            ),
            (
                max_abs_error(out, low_ref) / max_abs_error(naive, low_ref),
                _(
                    "the errors seem measured against a reference stored in {dtype}. FlashAttention's tests do round "
                    "their reference (out_ref) to the inputs' dtype; this exercise asks for the unrounded float64 one, "
                    "which keeps the output's own rounding in view: compute it from the same inputs (fm.attention "
                    "does) and compare in float64"
                ).format(dtype=dtype),
            ),
            (
                _mean_abs_error(out, ref) / _mean_abs_error(naive, ref),
                _(
                    "this is the ratio of the mean errors. FlashAttention's rule compares the largest absolute "
                    "errors, max "
                    "|A - A_ref| over all elements"
                ),
            ),
            (
                max_abs_error(naive, ref) / max_abs_error(out, ref),
                _("the ratio is upside down: error of out divided by error of the naive attention"),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_rounding(q, k, v, x=False, y=False, a=False), ref),
                _(
                    "your naive attention seems never rounded to {dtype}: computed in float32 and kept there, its "
                    "error is "
                    "float32's (about 1e-7), so the ratio is thousands. The naive attention FlashAttention compares "
                    "with "
                    "stores X, Y and A in {dtype}: round each to {dtype} when it is stored"
                ).format(dtype=dtype),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_rounding(q, k, v, y=False), ref),
                _(
                    "your naive attention seems to leave the probabilities Y unrounded: a framework stores Y = "
                    "softmax(X) "
                    "in {dtype} before Y V, so round Y too"
                ).format(dtype=dtype),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_rounding(q, k, v, x=False), ref),
                _(
                    "your naive attention seems to leave the scores X unrounded: a framework stores X = Q K^T / "
                    "sqrt(D) in "
                    "{dtype} before the softmax, so round X too"
                ).format(dtype=dtype),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_rounding(q, k, v, a=False), ref),
                _(
                    "your naive output A seems left in float32: a framework stores A = Y V in {dtype} too, as it "
                    "stores X and Y, so round A as well"
                ).format(dtype=dtype),
            ),
            (
                _relative_error(out, ref) / _relative_error(naive, ref),
                _(
                    "this is the ratio of the largest relative errors. FlashAttention's rule compares the largest "
                    "absolute "
                    "errors, max |A - A_ref| (an output element near 0 makes a relative error meaningless)"
                ),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_variant(q, k, v, scale=False), ref),
                _(
                    "your naive attention seems to leave out the scale: the scores are X = Q K^T / sqrt(D), as in "
                    "the float64 reference; without 1/sqrt(D) the naive attention computes another, sharper attention"
                ),
            ),
            (
                max_abs_error(out, unscaled) / max_abs_error(_naive_variant(q, k, v, scale=False), unscaled),
                _(
                    "your reference and naive attention both seem to leave out the scale: the scores are X = Q K^T "
                    "/ sqrt(D) in both; without 1/sqrt(D) they compute another, sharper attention than the kernel's"
                ),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_variant(q, k, v, axis=0), ref),
                _(
                    "your naive softmax seems normalised over the queries (axis 0): each row of X (one query) is "
                    "normalised over its keys, softmax along axis=-1"
                ),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_variant(q, k, v, shift=False), ref),
                _unshifted_message(q, k, v),
            ),
            (
                max_abs_error(out, ref) / max_abs_error(_naive_rounded_to(q, k, v, other), ref),
                _(
                    "your naive attention seems to round to {other} whatever the inputs' dtype: with {dtype} inputs "
                    "the framework stores X, Y and A in {dtype}; round to q.dtype, not a fixed type"
                ).format(dtype=dtype, other=other.name),
            ),
            (
                max_abs_error(out, ref) / np.max(np.abs(ref)) / max_abs_error(naive, ref),
                _(
                    "the error of out seems divided by max |A| (a relative error) and the naive one not: both errors "
                    "are the same kind, max |out - A| and max |naive - A|, so that their ratio compares them"
                ),
            ),
            (
                max_abs_error(out, ref) / (max_abs_error(naive, ref) / np.max(np.abs(ref))),
                _(
                    "the error of the naive attention seems divided by max |A| (a relative error) and that of out "
                    "not: both errors are the same kind, max |out - A| and max |naive - A|, so that their ratio "
                    "compares them"
                ),
            ),
            (
                _signed_error(out, ref) / _signed_error(naive, ref),
                _(
                    "this is the ratio of the largest signed differences, max(out - A): an error is a distance, "
                    "max |out - A| (np.abs), whichever side of A it falls"
                ),
            ),
        ]
    return right, mistakes


def _cases():
    """``(name, out, q, k, v)``: float16 and bfloat16 inputs, outputs of known quality."""
    rng = np.random.default_rng(9)
    D = 16  # the scale 1/sqrt(D) = 1/4 is exact in every dtype

    def inputs(dtype, N, M, spread):
        q, k, v = (rng.standard_normal(shape) for shape in ((N, D), (M, D), (M, D)))
        return round_to(spread * q, dtype), round_to(k, dtype), round_to(v, dtype)

    q16, k16, v16 = inputs(np.float16, 48, 80, 3.0)  # large scores: the rounding of X matters
    qb, kb, vb = inputs(ml_dtypes.bfloat16, 32, 512, 1.0)  # 512 keys: a sum kept in bfloat16 stalls
    q2, k2, v2 = inputs(np.float16, 48, 80, 1.0)
    return [
        (
            _("float16 inputs, out = flash_attention (fa2, 16 x 16 tiles)"),
            flash_attention(q16, k16, v16, block_q=16, block_k=16),
            q16,
            k16,
            v16,
        ),
        (
            _("bfloat16 inputs, out = flash_attention (fa1, 8 x 8 tiles)"),
            flash_attention(qb, kb, vb, block_q=8, block_k=8, order="fa1"),
            qb,
            kb,
            vb,
        ),
        (
            _("float16 inputs, out = naive attention itself: expected exactly 1"),
            naive_attention(q2, k2, v2),
            q2,
            k2,
            v2,
        ),
        (
            _("float16 inputs, out = the float64 reference rounded to float16 (the best a float16 output can be)"),
            round_to(attention(q2, k2, v2), np.float16),
            q2,
            k2,
            v2,
        ),
    ]


def _close(a: float, b: float, rtol: float = RTOL) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and math.isclose(a, b, rel_tol=rtol))


def _same_ratio(answer, right) -> bool:
    """The harness's comparison: within 2 percent, or both the same non-finite value (NaN with NaN, inf with inf)."""
    if answer is None:
        return False
    if not (np.isfinite(answer) and np.isfinite(right)):
        return bool(answer == right or (np.isnan(answer) and np.isnan(right)))
    return _close(answer, right)


def _right(out, q, k, v) -> float:
    """The reference: ``max |out - A| / max |naive - A|`` (NaN when ``out`` holds NaN, inf when it overflowed)."""
    with np.errstate(all="ignore"):
        ref = attention(q, k, v)
        return max_abs_error(out, ref) / max_abs_error(naive_attention(q, k, v), ref)


def _number(out) -> float | None:
    """The learner's ratio as a Python float, or None when it is not one number."""
    try:
        return float(out) if np.ndim(out) == 0 else None
    except Exception:
        return None


RECIPE = N_(
    "divide max |out - A| by max |naive - A|, with A the float64 attention of the given inputs and naive the "
    "attention that stores X, Y and A in the inputs' dtype, computing each in float32"
)


class _RatioDiagnosis:
    """The harness's ``diagnosis`` hook: what the learner's wrong ratios mean, by the whole-run rule.

    A classic mistake is named only when it explains every failing case of the run: the learner's ratio is within
    10 percent of the one the mistake gives on each of them, and on at least one of them that ratio is not within
    10 percent of the right one (there the mistake is told apart). Likewise "the naive error seems to be 0" (a
    non-finite ratio where the right one is finite) and "your naive error is tiny" (a ratio over 20 times the right
    one) only when every failing case shows it, and "a finite ratio for an output holding NaN or +inf" when every
    failing case is such an output. Otherwise every failing case gets the recipe. The message of the
    named mistake is worded for each case's dtype (float16 or bfloat16), which is why the hook says ``per_case``:
    its ``for_case`` is already consistent over the run.
    """

    per_case = True

    def __init__(self, cases, answers):
        self.cases, self.answers = cases, answers
        self._ratios: dict[int, tuple[float, list[tuple[float, str]]]] = {}
        failing = [i for i, value in enumerate(answers) if value is not None and not _same_ratio(value, self._right(i))]
        self._kind = self._whole_run(failing)

    def _right(self, i: int) -> float:
        return self._all(i)[0]

    def _all(self, i: int) -> tuple[float, list[tuple[float, str]]]:
        if i not in self._ratios:
            out, q, k, v = self.cases[i]
            self._ratios[i] = _ratios(out, q, k, v)
        return self._ratios[i]

    def _whole_run(self, failing: list[int]):
        """The one explanation of every failing case: ``("mistake", j)``, ``("zero naive error",)``, ``("tiny
        naive error",)``, or None (the recipe)."""
        if not failing:
            return None
        n_mistakes = len(self._all(failing[0])[1])
        for j in range(n_mistakes):
            matches, apart, finite = True, False, False
            for i in failing:
                right, mistakes = self._all(i)
                wrong, value = mistakes[j][0], self.answers[i]
                # a non-finite ratio (an overflow to NaN) matches a mistake giving the same one, when the mistake
                # also matches a finite failing case of the run
                both_off = not np.isfinite(value) and not np.isfinite(wrong) and _same_ratio(value, wrong)
                if not (_close(value, wrong, MISTAKE_RTOL) or both_off):
                    matches = False
                    break
                finite |= not both_off
                apart |= not _close(wrong, right, MISTAKE_RTOL)
            if matches and apart and finite:
                return ("mistake", j)
        rights = [self._right(i) for i in failing]
        values = [self.answers[i] for i in failing]
        if all(not np.isfinite(x) and np.isfinite(r) for x, r in zip(values, rights, strict=True)):
            return ("zero naive error",)
        if all(np.isfinite(r) and np.isfinite(x) and x > 20 * max(r, 1.0) for x, r in zip(values, rights, strict=True)):
            return ("tiny naive error",)
        if all(not np.isfinite(r) and np.isfinite(x) for x, r in zip(values, rights, strict=True)):
            return ("nan hidden",)
        return None

    def for_case(self, i: int) -> Said:
        dtype = self.cases[i][1].dtype.name
        if self._kind is None:
            return Said(_(RECIPE))
        if self._kind[0] == "mistake":
            return Said(self._all(i)[1][self._kind[1]][1])
        if self._kind[0] == "zero naive error":
            return Said(
                _(
                    "the naive error seems to be 0 (a ratio of inf or NaN): your naive attention equals the float64 "
                    "reference, so it was never rounded to {dtype}. Store X, Y and A in the inputs' dtype"
                ).format(dtype=dtype)
            )
        if self._kind[0] == "nan hidden":
            return Said(
                _(
                    "a finite ratio for an output holding NaN or +inf: the largest error of such an output is NaN or "
                    "inf (np.max(np.abs(out - A))), and so is the ratio. np.nanmax, np.nan_to_num or a mask of the "
                    "finite elements would let a broken kernel pass"
                )
            )
        return Said(
            _(
                "a ratio this large means your naive error is tiny: is your naive attention rounded to {dtype} "
                "where a framework stores X, Y and A?"
            ).format(dtype=dtype)
        )


def _describe(value, right) -> tuple[str, float, float]:
    return _("expected the ratio {right:.4g}, got {value:.4g}").format(right=right, value=value), value, right


def _properties():
    """The edge cases of the ratio: an output holding NaN (the ratio is NaN: ``np.nanmax`` would hide a broken
    kernel), an output holding +inf (inf), a single query row, values all negative (the largest error is the
    largest absolute one), float16 scores near 20 (exp(20) overflows float16)."""
    rng = np.random.default_rng(99)
    D = 16

    def inputs(N, M, spread=1.0, shift=0.0):
        q, k, v = (rng.standard_normal(shape) for shape in ((N, D), (M, D), (M, D)))
        return round_to(spread * q, np.float16), round_to(k, np.float16), round_to(v + shift, np.float16)

    q, k, v = inputs(24, 64)
    out = flash_attention(q, k, v, block_q=8, block_k=16)
    with_nan, with_inf = out.copy(), out.copy()
    with_nan[3, 5], with_inf[7, 2] = np.nan, np.inf
    q1, k1, v1 = inputs(1, 64)
    qn, kn, vn = inputs(24, 64, shift=-4.0)
    qb, kb, vb = inputs(24, 64, spread=5.0)
    return property_cases(
        [
            (
                _("an output holding NaN gives a NaN ratio"),
                (with_nan, q, k, v),
            ),
            (_("an output holding +inf gives a ratio of inf"), (with_inf, q, k, v)),
            (
                _("a single query row"),
                (flash_attention(q1, k1, v1, block_q=1, block_k=16), q1, k1, v1),
            ),
            (
                _("values all below 0"),
                (flash_attention(qn, kn, vn, block_q=8, block_k=16), qn, kn, vn),
            ),
            (
                _("float16 scores near 20"),
                (flash_attention(qb, kb, vb, block_q=8, block_k=16), qb, kb, vb),
            ),
        ]
    )


NOT_A_NUMBER = Said(N_("expected one number (the ratio of two errors), not a tuple or an array"))


@exercise("9.1", solution="flash_test_ratio")
def check_flash_test_ratio(fn) -> CheckReport:
    """Check a learner's ``fn(out, q, k, v) -> ratio``, the course's version of FlashAttention's test quantity
    (chapter 9).

    The ratio is ``max |out - A| / max |naive - A|`` with ``A`` the float64 attention of the given inputs and
    ``naive`` attention in the inputs' dtype with ``X``, ``Y`` and ``A`` each rounded to it, computed in float32
    (:func:`flashmath.precision.naive_attention`). The property battery first (:func:`_properties`: NaN and +inf in
    the output, one query row, negative values, float16 scores near 20; the inputs unchanged and the result one
    number on every case), then the cases: float16 and bfloat16 inputs with a FlashAttention output, the naive
    output itself (ratio 1), and the rounded reference. Named mistakes: computing the naive attention in the input
    dtype, rounding only its output, a reference stored in the input dtype, mean errors, the ratio upside down.
    Agreement within 2 percent counts (the learner's float32 arithmetic may break a rare rounding tie the other way);
    a mistake is named when the ratio is within 10 percent of the one it gives.
    """
    cases = [(name, (out, q, k, v)) for name, out, q, k, v in _cases()]
    return check_function(
        "check_flash_test_ratio",
        fn,
        cases,
        _right,
        (),
        n_out=1,
        names=(_("the ratio"),),
        not_answer=NOT_A_NUMBER,
        properties=_properties(),
        compare=_same_ratio,
        convert=_number,
        describe=_describe,
        diagnosis=_RatioDiagnosis,
    )
