"""Checkers for the exercises of chapter 15 (the recap).

Like every checker of :mod:`flashmath.exercises`, each one runs the learner's answer on cases where the classic
mistakes make a difference, never raises, and returns a :class:`flashmath.exercises.CheckReport`; a wrong answer
is compared with the answers of the known mistakes, and the first that matches is named, with what to change. Both
run through the one harness, :func:`~flashmath.exercises._cases.check_function` (the quiz as one case per question,
:func:`~flashmath.exercises._cases.check_quiz`).

* :func:`check_recap_quiz` (15.1): the closing self-test, one question per big step of the course
  (:func:`print_recap_quiz` prints it).
* :func:`check_flash_row` (15.2): FlashAttention-2 for one query row, from memory; its mistakes are
  :data:`FLASH_ROW_MISTAKES`.

Solutions: :mod:`flashmath.solutions_triton`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import numpy as np

from flashmath.exercises._cases import PropertyFailure, check_function, check_quiz, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import CheckReport, Diagnosis, Mistake, fmt
from flashmath.exercises._tiles import shape_hint
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = ["FLASH_ROW_MISTAKES", "RECAP_QUESTIONS", "check_recap_quiz", "check_flash_row", "print_recap_quiz"]


def _same(a, b, rtol: float) -> bool:
    """The harness's comparison (:func:`~flashmath.exercises._cases.same_arrays`: arrays or tuples of them) with
    ``atol = rtol``."""
    return same_arrays(a, b, rtol=rtol, atol=rtol)


# ------------------------------------------------------------------------------------------------------------------
# 15.1: the recap quiz
# ------------------------------------------------------------------------------------------------------------------

# (question, {letter: choice}, right letter, {wrong letter: why not})
RECAP_QUESTIONS = {
    1: (
        N_("After i steps of the online normalizer (chapter 2), s_i is"),
        {
            "a": N_("the softmax denominator of the whole row"),
            "b": N_("the sum of exp(x_j - g_i) over the first i elements, measured against the running max g_i"),
            "c": N_("the sum of exp(x_j) over the first i elements"),
        },
        "b",
        {
            "a": N_("only s_N, after the last element, is the denominator: that is the one idea"),
            "c": N_("exp(x_j) alone overflows; every term is measured against the running max"),
        },
    ),
    2: (
        N_("Subtracting the max before exp (chapter 1)"),
        {
            "a": N_("changes the probabilities slightly, for stability"),
            "b": N_("changes nothing mathematically and keeps every exponent <= 0"),
            "c": N_("is needed only in float16"),
        },
        "b",
        {
            "a": N_("the same factor exp(-g) is in the numerator and the denominator: it cancels exactly"),
            "c": N_("float32 overflows at exp(88.7) and float64 at exp(709.8): every dtype needs it"),
        },
    ),
    3: (
        N_("FlashAttention-2 keeps acc = s A' instead of the output A' (chapter 7) because"),
        {
            "a": N_(
                "the division by s can then wait until the last key tile: one division per output instead of one per "
                "tile"
            ),
            "b": N_("acc is a more accurate average than A'"),
            "c": N_("A' cannot be computed tile by tile"),
        },
        "a",
        {
            "b": N_("acc is not an average at all; it only becomes one when divided by s at the end"),
            "c": N_("FlashAttention (Algorithm 1) does compute A' tile by tile, normalised at every step"),
        },
    ),
    4: (
        N_("A query row whose keys are all masked (chapter 8) gives, in this course"),
        {
            "a": N_("NaN, from -inf - (-inf)"),
            "b": N_("an output of 0 and a logsumexp of -inf"),
            "c": N_("the mean of V"),
        },
        "b",
        {
            "a": N_("that NaN is the bug the chapter fixes: the convention is 0 and -inf"),
            "c": N_("with no key to attend to there is nothing to average"),
        },
    ),
    5: (
        N_("In the FlashAttention-2 loop (query tiles outside), each key/value tile is read from HBM"),
        {"a": N_("once in all"), "b": N_("once per query tile"), "c": N_("once per key")},
        "b",
        {
            "a": N_("every query tile sweeps every key tile: T_r reads of each (chapter 6)"),
            "c": N_("keys are read a tile at a time, not one by one"),
        },
    ),
    6: (
        N_("Flash-Decoding splits the keys of a single query (N = 1) into chunks (chapter 10) because"),
        {
            "a": N_("one query tile is too little work to fill a GPU; the chunks' (g, s, acc) states merge exactly"),
            "b": N_("it does fewer operations than one sweep"),
            "c": N_("it approximates attention to save time"),
        },
        "a",
        {
            "b": N_("it does the same work plus a small merge; it wins by running the chunks in parallel"),
            "c": N_("the merge is exact: it is chapter 2's rule for two (g, s) states"),
        },
    ),
    7: (
        N_("In the Triton kernel (chapter 11) on an A100 or H100, acc lives in"),
        {"a": N_("HBM"), "b": N_("shared memory"), "c": N_("registers")},
        "c",
        {
            "a": N_("it is written to HBM once, at the end, as A"),
            "b": N_("shared memory holds the streamed K, V tiles"),
        },
    ),
    8: (
        N_("The backward pass (chapter 12) needs the probabilities Y tile by tile; it gets them by"),
        {
            "a": N_("reading them from HBM, where the forward pass wrote them"),
            "b": N_("approximating them from the output A and its gradient dA"),
            "c": N_("recomputing each tile, Y_ij = exp(X_ij - L_i), from Q, K and the logsumexp L the forward saved"),
        },
        "c",
        {
            "a": N_("the forward never writes the N x M matrix Y: it keeps the output A and one logsumexp L_n per row"),
            "b": N_(
                "nothing is approximated: L_n = g_n + log s_n holds the row's max and sum, so exp(X - L) gives the "
                "softmax back, to rounding"
            ),
        },
    ),
    9: (
        N_("With a block mask (chapter 13), a tile in which no pair attends (an empty tile)"),
        {
            "a": N_("is skipped: its K_j and V_j are not even loaded"),
            "b": N_("is computed, then multiplied by 0"),
            "c": N_("resets the running state (g, s, acc)"),
        },
        "a",
        {
            "b": N_(
                "that is work for nothing: only a partial tile is masked element by element, and its masked scores "
                "are selected away, not multiplied by 0"
            ),
            "c": N_("an empty tile adds nothing: the state carries on, unchanged, to the next tile"),
        },
    ),
    10: (
        N_(
            "With the causal mask, ring attention (chapter 14) gives device r chunks r and 2P - 1 - r of 2P "
            "(zig-zag) because"
        ),
        {
            "a": N_("it sends fewer bytes than contiguous shards"),
            "b": N_(
                "with contiguous shards the last device has far more work than the first; one early and one late chunk "
                "even it out"
            ),
            "c": N_("the merge is exact only in that order"),
        },
        "b",
        {
            "a": N_(
                "each step still sends one key/value shard of N/P rows: the bytes are the same, only the work per "
                "step changes"
            ),
            "c": N_(
                "the merge is associative and commutative (chapter 10): any sharding and any order give the same "
                "attention, to rounding"
            ),
        },
    ),
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
    return (
        letter
        if letter in choices
        else PropertyFailure(
            _("{answer} is not one of {choices}").format(
                answer=_("'{letter}'").format(letter=answer),  # zh: full-width quotes
                choices=_(", ").join(sorted(choices)),
            )
        )
    )


class _QuizReport(CheckReport):
    """A quiz's report: its first line counts questions answered right, not cases passed."""

    def __repr__(self) -> str:
        lines = super().__repr__().split("\n")
        right = sum(ok for _name, ok, _message in self.cases)
        lines[0] = _("{title}: {right} of {total} questions right").format(
            title=self.title, right=right, total=len(self.cases)
        )
        return "\n".join(lines)


@exercise("15.1", solution="recap_quiz", solutions="flashmath.solutions_triton", property_cases=0, quiz=True)
def check_recap_quiz(answers) -> CheckReport:
    """Check a learner's ``{question number: letter}`` for :data:`RECAP_QUESTIONS` (exercise 15.1), one case per
    question through the harness (:func:`~flashmath.exercises._cases.check_function`); a wrong letter is answered
    with why that choice is wrong, naming the chapter to revisit."""
    report = check_quiz(
        "check_recap_quiz",
        answers,
        [(f"{number}. {_(question[0])}", number) for number, question in RECAP_QUESTIONS.items()],
        what=N_("question number: letter"),
        parse=_recap_parse,
        right=lambda number: {RECAP_QUESTIONS[number][2]},
        verdict=lambda number, letter: (
            _("not ({letter})").format(letter=letter),
            _(RECAP_QUESTIONS[number][3][letter]),
        ),
    )
    if not isinstance(answers, dict):  # one case, "the answers": not a question
        return report
    return _QuizReport(report.title, report.cases)


# ------------------------------------------------------------------------------------------------------------------
# 15.2: FlashAttention-2 for one query row
# ------------------------------------------------------------------------------------------------------------------


def _flash_row(
    q_n,
    K,
    V,
    B_c,
    *,
    scale=True,
    rescale_acc=True,
    rescale_s=True,
    g0=-np.inf,
    subtract_max=True,
    divide=True,
    lse_with_g=True,
    lse_unshifted=False,
    partial=True,
    inverted=None,
    terms_old=None,
    values=None,
    nan_to_zero=False,
):
    """One query row through FlashAttention-2's key-tile loop in float64, with mistakes as switches: ``(a_n,
    lse_n)``. ``np.log``, not ``math.log``: a wrong model's ``log(0) = -inf`` is an answer to compare with.
    ``scale``: True (``1/sqrt(D)``), False (none) or ``"D"`` (``1/D``); ``inverted``: alpha upside down,
    ``exp(g_new - g)``, ``"guarded"`` (0 while ``g`` is -inf) or ``"raw"`` (``exp(inf)``: ``0 * inf`` is NaN)."""
    q_n, K, V = (np.asarray(a, np.float64) for a in (q_n, K, V))
    if values is not None:  # V "cleaned" before use: np.nansum of P * V, np.nan_to_num(V), ...
        V = values(V)
    D = q_n.shape[0]
    g, s, acc = g0, 0.0, np.zeros(V.shape[1])
    last = K.shape[0] if partial else K.shape[0] - B_c + 1  # partial=False: the shorter last tile skipped
    for c0 in range(0, last, B_c):
        x = K[c0 : c0 + B_c] @ q_n / (D if scale == "D" else math.sqrt(D) if scale else 1.0)  # (B_c,)
        g_new = max(g, float(x.max())) if subtract_max else 0.0
        if inverted is None:
            alpha = math.exp(g - g_new) if g_new != -np.inf else 0.0
        else:
            with np.errstate(all="ignore"):
                alpha = 0.0 if (inverted == "guarded" and not np.isfinite(g)) else float(np.exp(g_new - g))
        with np.errstate(all="ignore"):
            if terms_old is None:
                p = np.exp(x - g_new)
            else:  # against the old max: "guarded" uses g_new while g is -inf, "raw" gives exp(+inf) there
                p = np.exp(x - (g_new if (terms_old == "guarded" and not np.isfinite(g)) else g))
            s = (s * alpha if rescale_s else s) + p.sum()
            acc = (acc * alpha if rescale_acc else acc) + p @ V[c0 : c0 + B_c]
        g = g_new
    with np.errstate(all="ignore"):
        a = acc / s if divide else acc
    if nan_to_zero:  # the output "cleaned": np.nan_to_num(acc / s)
        a = np.where(np.isnan(a), 0.0, a)
    if lse_unshifted:  # log(s * exp(g)): exp(g) overflows above 709, underflows below -745
        return a, float(np.log(s * np.exp(g)))
    return a, float((g if lse_with_g else 0.0) + np.log(s))


def _model(**mistake):
    """The answer ``(a_n, lse_n)`` of :func:`_flash_row` with a mistake switched on."""
    return lambda q_n, K, V, B_c: _flash_row(q_n, K, V, B_c, **mistake)


def _close_in_float32(answer, right) -> bool:
    """The answer agrees with the right one to float32's precision (1e-5 relative) but not to 1e-9."""
    return _same(answer, right, 1e-5) and not _same(answer, right, 1e-9)


FLASH_ROW_MISTAKES = (
    Mistake(
        N_("acc not divided by s at the end"),
        N_("A = acc / s: acc = s A' is the unnormalised numerator"),
        (_model(divide=False),),
    ),
    Mistake(N_("the scale 1/sqrt(D) missing"), N_("the scores are q_n . K[m] / sqrt(D)"), (_model(scale=False),)),
    Mistake(
        N_("the scale 1/D instead of 1/sqrt(D)"),
        N_("the scores are divided by the square root of D: q_n . K[m] / sqrt(D), not / D"),
        (_model(scale="D"),),
    ),
    Mistake(
        N_("acc not rescaled"),
        N_("when a key tile raises the max, acc must be multiplied by alpha = exp(g - g_new) before P V is added"),
        (_model(rescale_acc=False),),
    ),
    Mistake(
        N_("s not rescaled"),
        N_("s = s * exp(g - g_new) + sum(P): the old sum is measured against the old max"),
        (_model(rescale_s=False),),
    ),
    Mistake(
        N_("both rescales missing"),
        N_("acc and s are measured against the running max: multiply both by exp(g - g_new) when it moves"),
        (_model(rescale_acc=False, rescale_s=False),),
    ),
    Mistake(
        N_("the running max started at 0"),
        N_("start g at -inf: with g = 0, scores far below 0 give exp(x - 0) = 0, s = 0 and 0 / 0"),
        (_model(g0=0.0),),
    ),
    Mistake(
        N_("the max not subtracted"),
        N_(
            "exp(x) overflows for scores above 709 (float64), and when every score is far below 0 each exp(x) "
            "underflows to 0, so s = 0 and 0 / 0: subtract the running max"
        ),
        (_model(subtract_max=False),),
    ),
    # after the max not subtracted: both give NaN where the scores are near 2000. The unguarded forms of the two
    # next mistakes give the same NaN everywhere (exp(+inf) at the first tile): named together, before either
    Mistake(
        N_("exp(+inf) at the first tile (the old max -inf in an exponent)"),
        N_(
            "at the first tile g = -inf, so exp(x - g) and exp(g_new - g) are exp(+inf) = inf, and inf * 0 or inf "
            "/ inf is NaN: measure against the new max, p = exp(x - g_new) and alpha = exp(g - g_new)"
        ),
        (_model(inverted="raw"), _model(terms_old="raw")),
    ),
    Mistake(
        N_("the tile's terms measured against the old max"),
        N_(
            "p = exp(x - g_new), against the new max, the one acc and s are rescaled to: exp(x - g) with the old "
            "max g can exceed 1 and overflow when the max rises"
        ),
        (_model(terms_old="guarded"),),
    ),
    Mistake(
        N_("alpha upside down"),
        N_(
            "alpha = exp(g - g_new), the old max minus the new (at most 1): the old acc and s shrink when the max "
            "rises; exp(g_new - g) makes them grow"
        ),
        (_model(inverted="guarded"),),
    ),
    Mistake(
        N_("g left out of the logsumexp"),
        N_("lse = g + log(s): s is measured against the max g"),
        (_model(lse_with_g=False),),
    ),
    Mistake(
        N_("the logsumexp as log(s * exp(g))"),
        N_(
            "exp(g) overflows for g above 709 and is 0 below -745 (float64): keep the max outside the log, lse = g + "
            "log(s)"
        ),
        (_model(lse_unshifted=True),),
    ),
    Mistake(
        N_("the last, shorter tile skipped"),
        N_(
            "when B_c does not divide M the last tile is shorter, and it counts: range(0, M, B_c), with K[c0 : c0 + "
            "B_c] (a slice stops at the end)"
        ),
        (_model(partial=False),),
    ),
    Mistake(
        N_("NaN in V dropped"),
        N_(
            "NaN propagates: a NaN value in a key tile makes the output NaN where it is weighted, so use P V as it "
            "is: no np.nansum, np.nan_to_num or np.where(np.isnan(...), 0, ...) on V, P V or the output"
        ),
        (
            _model(values=lambda V: np.where(np.isnan(V), 0.0, V)),
            _model(nan_to_zero=True),
        ),
    ),
    Mistake(
        N_("the output divided at every tile"),
        N_(
            "FlashAttention-2 keeps acc unnormalised through the key tiles and divides once, after the last: A = "
            "acc / s. Dividing at every tile is FlashAttention's Algorithm 1 (one division of the output per tile)"
        ),
    ),
    Mistake(
        N_("float32 instead of float64"),
        N_(
            "the answer agrees to about 1e-7 relative, float32's precision: this exercise is checked against "
            "float64 to 1e-9, so compute in float64 (np.zeros(..., np.float64), no .astype(np.float32), torch "
            "tensors of dtype float64). A real kernel computes in float32 and is tested with a tolerance instead "
            "(chapter 9)"
        ),
        (_model(),),
        compare=_close_in_float32,
    ),
)


class _CountedV(np.ndarray):
    """``V`` for the case that counts divisions: every array computed from it (a tile, ``P V``, the accumulator) is
    one too, and each ``np.divide`` whose numerator is one of them adds 1 to the shared counter ``divisions``."""

    divisions: list | None = None

    def __array_finalize__(self, obj) -> None:
        self.divisions = getattr(obj, "divisions", None)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        counted = [x for x in inputs + (out or ()) if isinstance(x, _CountedV) and x.divisions is not None]
        counter = counted[0].divisions if counted else None
        if ufunc is np.divide and method == "__call__" and isinstance(inputs[0], _CountedV) and counter is not None:
            counter[0] += 1
        plain = [x.view(np.ndarray) if isinstance(x, _CountedV) else x for x in inputs]
        if out:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, _CountedV) else o for o in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out:
            return out[0] if len(out) == 1 else out

        def wrap(r):
            if not isinstance(r, np.ndarray):
                return r
            r = r.view(_CountedV)
            r.divisions = counter
            return r

        return tuple(wrap(r) for r in result) if isinstance(result, tuple) else wrap(result)


def _counted(V) -> _CountedV:
    values = np.array(V, np.float64).view(_CountedV)
    values.divisions = [0]
    return values


@contextlib.contextmanager
def _counted_kept():
    """While the learner's function runs: ``np.asarray``, ``np.array``, ``np.asanyarray``, ``np.ascontiguousarray``
    and ``np.copy`` of a counted ``V`` keep it counted (``np.asarray(V, dtype=np.float64)``, the usual first line,
    would otherwise hand back a plain array, and every division after it would go uncounted)."""
    names = ("asarray", "array", "asanyarray", "ascontiguousarray", "copy")
    originals = {name: getattr(np, name) for name in names}

    def keeping(original):
        @functools.wraps(original)
        def convert(a, *args, **kwargs):
            result = original(a, *args, **kwargs)
            if isinstance(a, _CountedV) and isinstance(result, np.ndarray) and not isinstance(result, _CountedV):
                counted = result.view(_CountedV)
                counted.divisions = a.divisions
                return counted
            return result

        return convert

    try:
        for name, original in originals.items():
            setattr(np, name, keeping(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(np, name, original)


def _flash_row_hint(exc) -> str | None:
    """What a math error in a one-row FlashAttention probably means."""
    by_name = {m.name: m for m in FLASH_ROW_MISTAKES}
    if isinstance(exc, (ValueError, ZeroDivisionError)) and ("domain" in str(exc) or "division" in str(exc)):
        return _(
            "s = 0 after every key: either no key was counted (a loop that skips the last, shorter tile sees no key "
            "when M < B_c: range(0, M, B_c)), or every exp(x - g) underflowed: {message}"
        ).format(message=by_name["the running max started at 0"].message())
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
        (
            _("scores of -1000 and below (a max started at 0 underflows: exp(-1000) = 0)"),
            (-1000.0 * q_rise, rising + 4.0 * np.eye(D)[0], V, 4),
        ),
        (_("a real head's row (46 keys, D = 32) in tiles of 8"), (q[n], k, v, 8)),
        (
            _("one division at the end (the divisions of arrays computed from V are counted: at most one)"),
            (q_rise, rising, _counted(V), 3),
        ),
    ]
    with_nan = V.copy()
    with_nan[6, 0] = np.nan
    properties = property_cases(
        [
            (_("one element: a single key"), (rng.standard_normal(D), K[:1], V[:1], 4)),
            (_("NaN propagates: NaN in one value, V[6, 0], gives NaN in a_n[0] alone"), (q_rise, rising, with_nan, 4)),
        ]
    )
    return cases, properties


def _flash_row_call(fn, args):
    """The harness's ``call`` hook: the learner's ``(a_n, lse_n)`` as ``(array, float)``, or why it is not a pair;
    on the case whose ``V`` counts divisions, more than one division of an array computed from ``V`` fails it."""
    V = args[2]
    divisions: list = [0]
    if isinstance(V, _CountedV):
        V.divisions = divisions
    if isinstance(V, _CountedV):
        with _counted_kept():
            out = fn(*args)
    else:
        out = fn(*args)
    if isinstance(V, _CountedV) and divisions[0] > 1:
        tiles = -(-len(V) // args[3])
        if divisions[0] < tiles:  # more than one division, but not one at every tile: the mistake is not named
            return PropertyFailure(
                _(
                    "{n} divisions of arrays computed from V, over {tiles} key tiles: at most one is allowed. "
                    "FlashAttention-2 keeps acc unnormalised through the key tiles and divides once, after the "
                    "last: A = acc / s"
                ).format(n=divisions[0], tiles=tiles)
            )
        by_name = {m.name: m for m in FLASH_ROW_MISTAKES}
        return PropertyFailure(
            _("{n} divisions of arrays computed from V, over {tiles} key tiles: {message}").format(
                n=divisions[0],
                tiles=tiles,
                message=by_name["the output divided at every tile"].message(),
            )
        )
    if out is None:
        return PropertyFailure(_("returned None: return the pair (a_n, lse_n)"))
    try:
        a, lse = out
    except (TypeError, ValueError):
        return PropertyFailure(_("expected a pair (a_n, lse_n), got {type}").format(type=_type_name(out)))
    try:
        return np.asarray(a), float(lse)
    except (TypeError, ValueError):
        return PropertyFailure(
            _("lse_n must be one number (a float), got {type} of shape {shape}").format(
                type=_type_name(lse), shape=np.shape(lse)
            )
        )


def _type_name(value) -> str:
    """The type of the learner's value as they know it: an array computed from the counted ``V`` is an ndarray."""
    return "ndarray" if isinstance(value, np.ndarray) else type(value).__name__


def _flash_row_reference(q_n, K, V, B_c):
    from flashmath.attention import attention

    a, lse = attention(np.asarray(q_n)[None, :], np.asarray(K), np.asarray(V), return_lse=True)
    return a[0], float(lse[0])


def _flash_row_describe(answer, expected) -> tuple[str, object, object]:
    """What differs: ``a_n`` first; when it is right, the logsumexp (both numbers in the text, nothing to add)."""
    (a, lse), (a_ref, lse_ref) = answer, expected
    if not _same(a, a_ref, 1e-9):
        return _("expected a_n = {expected}, got {got}").format(expected=fmt(a_ref, a), got=fmt(a, a_ref)), a, a_ref
    return (
        _("a_n is right; expected lse_n = {expected:.10g}, got {got:.10g}").format(
            expected=float(lse_ref), got=float(lse)
        ),
        lse_ref,
        lse_ref,
    )


def _a_only(mistake: Mistake) -> Mistake:
    """The mistake with models that give ``a_n`` alone (its comparison, if any, works on arrays as on pairs; the
    :class:`~flashmath.exercises._report.Diagnosis` runs each model quietly)."""
    return dataclasses.replace(
        mistake, models=tuple((lambda *args, model=model: model(*args)[0]) for model in mistake.models)
    )


class _FlashRowDiagnosis:
    """The harness's ``diagnosis`` hook: where ``a_n`` is wrong, the mistake whose model gives the same ``a_n``
    (so that a second mistake, in the logsumexp, does not hide the first); where ``a_n`` is right, the one that gives
    the same pair."""

    def __init__(self, cases, answers):
        self.a_wrong = [
            answer is not None and not _same(answer[0], _flash_row_reference(*args)[0], 1e-9)
            for args, answer in zip(cases, answers, strict=True)
        ]
        same = functools.partial(_same, rtol=1e-9)
        self.by_a = Diagnosis(
            cases,
            [None if answer is None else answer[0] for answer in answers],
            [_a_only(mistake) for mistake in FLASH_ROW_MISTAKES],
            same,
        )
        self.by_pair = Diagnosis(cases, answers, FLASH_ROW_MISTAKES, same)

    def for_case(self, i: int) -> Mistake | None:
        return (self.by_a if self.a_wrong[i] else self.by_pair).for_case(i)

    def explaining(self, failing) -> Mistake | None:
        """The whole-run rule: the mistake whose model gives the learner's pair on every failing case; else the one
        whose ``a_n`` is the learner's on every case where ``a_n`` is wrong, and, where some cases have ``a_n``
        right and ``lse_n`` wrong, with the one whose pair is the learner's on all of those (both named)."""
        failing = list(failing)
        whole = self.by_pair.explaining(failing)
        if whole is not None or not failing:
            return whole
        a_wrong = [i for i in failing if self.a_wrong[i]]
        lse_wrong = [i for i in failing if not self.a_wrong[i]]
        first = self.by_a.explaining(a_wrong) if a_wrong else None
        second = self.by_pair.explaining(lse_wrong) if lse_wrong else None
        if a_wrong and first is None or lse_wrong and second is None:
            return None
        if first is None or second is None or first.name == second.name:
            return first or second
        return _Both(first, second)


class _Both(Mistake):
    """Two mistakes, one in ``a_n`` and one in the logsumexp, each explaining its own failing cases."""

    second: Mistake

    def __init__(self, first: Mistake, second: Mistake):
        super().__init__(first.name, first.fix)
        object.__setattr__(self, "second", second)

    def message(self, args: tuple | None = None) -> str:
        return _("{first}; and {second}").format(first=super().message(args), second=self.second.message(args))


@exercise("15.2", FLASH_ROW_MISTAKES, solution="flash_row", solutions="flashmath.solutions_triton", property_cases=2)
def check_flash_row(fn) -> CheckReport:
    """Check a learner's ``fn(q_n, K, V, B_c) -> (a_n, lse_n)``: attention of one query row ``q_n (D,)`` over keys
    ``K (M, D)`` and values ``V (M, Dv)``, computed as FlashAttention-2 does, key tiles of ``B_c`` at a time with a
    running max, sum and unnormalised accumulator, one division at the end; ``lse_n = g + log(s)`` (exercise 15.2).

    Through the harness (:func:`~flashmath.exercises._cases.check_function`): the property battery on every case
    (the arrays given unchanged, ``a_n`` of shape ``(Dv,)`` and a float result), the property cases (a single key;
    NaN in one value gives NaN in that output alone), then the cases: a shorter last tile, a max that rises from
    tile to tile, tiles of one key, one tile of all keys, scores near 2000 and of -1000 and below, a real head's
    row. Named mistakes: :data:`FLASH_ROW_MISTAKES`, the logsumexp without ``g`` among them. Compared to 1e-9
    relative.
    """
    cases, properties = _flash_row_cases()
    return check_function(
        "check_flash_row",
        fn,
        cases,
        _flash_row_reference,
        FLASH_ROW_MISTAKES,
        n_out=2,
        names=("a_n", "lse_n"),
        properties=properties,
        call=_flash_row_call,
        compare=functools.partial(_same, rtol=1e-9),
        describe=_flash_row_describe,
        diagnosis=_FlashRowDiagnosis,
        hint=_flash_row_hint,
    )
