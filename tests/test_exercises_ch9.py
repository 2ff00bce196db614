"""Chapter 9's checker (FlashAttention's test ratio): the solution passes, each classic mistake is named."""

import math

import numpy as np
import pytest

from flashmath import solutions
from flashmath.exercises import check_flash_test_ratio


def learner(mistake=None):
    """A learner's ratio function, right or with one classic mistake, written plainly (not with flashmath)."""

    def ratio(out, q, k, v):
        q, k, v = (np.asarray(a) for a in (q, k, v))
        dtype, D = q.dtype, q.shape[-1]
        if mistake == "float16 always":  # the naive steps rounded to a hard-coded float16
            dtype = np.dtype(np.float16)
        q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
        x = q64 @ k64.T / (1.0 if mistake == "no scale anywhere" else math.sqrt(D))
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        reference = (e / e.sum(axis=-1, keepdims=True)) @ v64
        if mistake == "low-precision reference":
            reference = reference.astype(dtype).astype(np.float64)
        q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
        if mistake == "float32 reference":  # a right variant: the reference in float32
            x32 = q.astype(np.float32) @ k.astype(np.float32).T / np.float32(math.sqrt(D))
            e32 = np.exp(x32 - x32.max(axis=-1, keepdims=True))
            reference = ((e32 / e32.sum(axis=-1, keepdims=True)) @ v.astype(np.float32)).astype(np.float64)
        if mistake == "four roundings":  # a right variant here: FlashAttention's out_pt also rounds K / sqrt(D)
            k32 = (k64 / math.sqrt(D)).astype(dtype).astype(np.float32)
            x = (q32 @ k32.T).astype(dtype).astype(np.float32)
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = (e / e.sum(axis=-1, keepdims=True)).astype(dtype)
            naive = (y.astype(np.float32) @ v32).astype(dtype)
        elif mistake in ("never rounded", "float64 naive", "Y unrounded", "X unrounded", "A unrounded"):
            x = q32 @ k32.T / np.float32(math.sqrt(D)) if mistake != "float64 naive" else q64 @ k64.T / math.sqrt(D)
            if mistake in ("Y unrounded", "A unrounded"):
                x = x.astype(dtype).astype(np.float32)
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
            if mistake in ("X unrounded", "A unrounded"):
                y = y.astype(dtype).astype(np.float32)
            naive = y @ (v64 if mistake == "float64 naive" else v32)
            if mistake in ("Y unrounded", "X unrounded"):
                naive = naive.astype(dtype)
        elif mistake == "input dtype":  # every step on arrays of the input dtype
            x = (q @ k.T / dtype.type(math.sqrt(D))).astype(dtype)
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            naive = (e / e.sum(axis=-1, keepdims=True)) @ v
        elif mistake == "softmax in input dtype":  # the products in float32, the softmax on arrays of the input dtype
            x = (q32 @ k32.T / np.float32(math.sqrt(D))).astype(dtype)
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
            naive = (y.astype(np.float32) @ v32).astype(dtype)
        elif mistake in ("no scale", "no scale anywhere", "axis 0", "no max"):  # the recipe, each with one slip
            unscaled = mistake in ("no scale", "no scale anywhere")
            x = (q32 @ k32.T / (np.float32(1) if unscaled else np.float32(math.sqrt(D)))).astype(dtype)
            if mistake == "no max":  # exp of the rounded scores in the input dtype, the max never subtracted
                e = np.exp(x)
            else:
                x = x.astype(np.float32)
                axis = 0 if mistake == "axis 0" else -1
                e = np.exp(x - x.max(axis=axis, keepdims=True))
            y = (e / e.sum(axis=0 if mistake == "axis 0" else -1, keepdims=True)).astype(dtype)
            naive = (y.astype(np.float32) @ v32).astype(dtype)
        elif mistake == "only the output":
            x = q32 @ k32.T / np.float32(math.sqrt(D))
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            naive = ((e / e.sum(axis=-1, keepdims=True)) @ v32).astype(dtype)
        else:  # the scale on Q before the product this time: a different float32 rounding than the solution's
            x = ((q32 * np.float32(1 / math.sqrt(D))) @ k32.T).astype(dtype).astype(np.float32)
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = (e / e.sum(axis=-1, keepdims=True)).astype(dtype)
            naive = (y.astype(np.float32) @ v32).astype(dtype)
        error_out = np.abs(np.asarray(out).astype(np.float64) - reference)
        error_naive = np.abs(naive.astype(np.float64) - reference)
        if mistake == "mean":
            return error_out.mean() / error_naive.mean()
        if mistake == "relative":
            return (error_out / np.abs(reference)).max() / (error_naive / np.abs(reference)).max()
        if mistake == "relative out":  # out's error relative to the largest output, the naive one absolute
            return error_out.max() / np.abs(reference).max() / error_naive.max()
        if mistake == "relative naive":
            return error_out.max() / (error_naive.max() / np.abs(reference).max())
        if mistake == "upside down":
            return error_naive.max() / error_out.max()
        if mistake == "signed":
            signed_out = (np.asarray(out).astype(np.float64) - reference).max()
            return signed_out / (naive.astype(np.float64) - reference).max()
        return error_out.max() / error_naive.max()

    return ratio


def failures(report):
    return [(name, message) for name, ok, message in report.cases if not ok]


def test_the_solution_and_another_right_answer_pass():
    assert check_flash_test_ratio(solutions.flash_test_ratio).passed
    report = check_flash_test_ratio(learner())
    assert report.passed, repr(report)
    report = check_flash_test_ratio(learner("float32 reference"))  # FlashAttention's tests use one
    assert report.passed, repr(report)
    report = check_flash_test_ratio(learner("four roundings"))  # chapter 9's exercise text: with D = 16 it passes
    assert report.passed, repr(report)
    assert "All good." in repr(report)


@pytest.mark.parametrize(
    "mistake, named",
    [
        ("input dtype", "seems to compute in bfloat16 instead of float32"),
        ("softmax in input dtype", "seems to compute in bfloat16 instead of float32"),
        ("only the output", "seems to round only its output"),
        ("low-precision reference", "measured against a reference stored in"),
        ("mean", "ratio of the mean errors"),
        ("upside down", "upside down"),
        ("never rounded", "seems never rounded"),
        ("float64 naive", "naive error seems to be 0"),
        ("Y unrounded", "probabilities Y unrounded"),
        ("X unrounded", "scores X unrounded"),
        ("A unrounded", "naive output A seems left in float32"),
        ("relative", "relative errors"),
        ("no scale", "leave out the scale"),
        ("no scale anywhere", "reference and naive attention both seem to leave out the scale"),
        ("axis 0", "normalised over the queries"),
        ("no max", "without subtracting their max"),
        ("signed", "largest signed differences"),
        ("float16 always", "round to float16 whatever the inputs' dtype"),
        ("relative out", "error of out seems divided by max |A|"),
        ("relative naive", "error of the naive attention seems divided by max |A|"),
    ],
)
def test_each_classic_mistake_is_named(mistake, named):
    report = check_flash_test_ratio(learner(mistake))
    assert not report.passed
    messages = [message for _, message in failures(report)]
    assert any(named in message for message in messages), repr(report)
    assert all("expected the ratio" in message for message in messages)


def test_a_wrong_answer_without_a_name_gets_the_recipe():
    report = check_flash_test_ratio(lambda out, q, k, v: 0.123)
    assert not report.passed
    assert all("divide max |out - A| by max |naive - A|" in message for _, message in failures(report))


def test_not_implemented_bad_returns_and_modified_inputs_are_failures_not_exceptions():
    def not_done(*args):
        raise NotImplementedError

    def two_numbers(out, q, k, v):
        return (1.0, 2.0)

    def modifies(out, q, k, v):
        ratio = solutions.flash_test_ratio(out, q, k, v)
        q[...] = 0
        return ratio

    assert all(message == "not implemented yet" for _, message in failures(check_flash_test_ratio(not_done)))
    assert all("expected one number" in message for _, message in failures(check_flash_test_ratio(two_numbers)))
    assert all("the input modified in place" in message for _, message in failures(check_flash_test_ratio(modifies)))


def test_the_softmax_without_its_max_is_explained_by_what_happens_in_each_dtype():
    """Review 35 (rev-b): a softmax without its max, exponentiated in the input dtype, overflows float16 only where a
    score passes 11.1; in bfloat16 (largest number 3.39e38 = e^88.7) and on float16's small scores the ratio is
    finite, and the message names rounding there, not an overflow to NaN."""
    report = check_flash_test_ratio(learner("no max"))
    said = dict(failures(report))
    bf16 = said["bfloat16 inputs, out = flash_attention (fa1, 8 x 8 tiles)"]
    assert "no e^x overflows here" in bf16 and "88.7" in bf16 and "3.3895e+38" in bf16, bf16
    assert "65504" not in bf16 and "NaN" not in bf16
    small = said["property: values all below 0"]
    assert "no e^x overflows here" in small and "11.1" in small and "NaN" not in small, small
    for name in ("property: float16 scores near 20", "float16 inputs, out = flash_attention (fa2, 16 x 16 tiles)"):
        assert "overflows float16 once x > 11.1" in said[name] and "inf / inf is NaN" in said[name], said[name]
    assert all("without subtracting their max" in message for message in said.values())


def test_the_fourth_rounding_changes_one_quotient_of_the_checkers_inputs():
    """Chapter 9's exercise text: the checker's heads have D = 16, where K / 4 rounds exactly but for subnormal
    quotients, one in all its inputs."""
    from flashmath.exercises.chapter9 import _cases, _properties

    inputs = [(q, k) for _, _, q, k, _ in _cases()] + [(args[1], args[2]) for _, args in _properties()]
    assert {q.shape[-1] for q, _ in inputs} == {16}
    changed = 0
    for _, k in inputs:
        quotient = np.asarray(k, np.float64) / 4
        changed += int((quotient.astype(k.dtype).astype(np.float64) != quotient).sum())
    assert changed == 1
