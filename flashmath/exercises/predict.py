"""'Predict, then check': the learner writes a number before running a cell, and the cell compares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from flashmath.exercises._report import apart
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.i18n import then

PLACEHOLDER_MESSAGE = N_(
    "No prediction yet: write your number in place of the ... above, then run this cell again "
    "(the answer is printed only once you have committed to a prediction)."
)


def check_prediction(
    prediction,
    answer: float,
    *,
    tolerance: float | None = None,
    why: str = "",
    length: int | None = None,
    misconceptions: Mapping[float, str] | None = None,
    question: str | None = None,
) -> None:
    """Print how a learner's ``prediction`` compares with the computed ``answer``.

    Args:
        prediction: the learner's number; ``...`` (the placeholder) or None prints :data:`PLACEHOLDER_MESSAGE` and
            nothing else, so a notebook run with the placeholder left in always shows the same text.
        answer: the number the cell computed.
        tolerance: how far a prediction may be and still count as right: ``|prediction - answer| <= tolerance *
            max(|answer|, 0.2)`` (relative, with a floor near 0). By default 0 (the exact value) when the answer is
            a whole number (a count, an index: 11.5 is not 12 tiles), else 5 % (so that for an answer of 3/4 the
            neighbours 2/3 and 4/5 are not right). NaN matches NaN, an infinity itself.
        why: one sentence printed after the verdict (what explains the answer), in the selected language when the
            catalog has it (the chapters' sentences are in :data:`QUESTIONS`).
        length: for a prediction of an index into a sequence of this length: a negative index ``-k`` (``x[-k]``)
            names the element ``length - k``, and counts as that index.
        misconceptions: ``{wrong answer: why a learner gives it}``: the common wrong answers and the half-understood
            rule behind each (matched with the same tolerance); a wrong prediction that is one of them prints its
            sentence, in the selected language when the catalog has it. The
            prediction is matched as typed, before a negative index is converted (``-3`` is its own mistake).
        question: the key of a chapter's question in :data:`QUESTIONS` (``"P8"``), which gives ``why`` and
            ``misconceptions``: a chapter's cell names its question instead of spelling them out, so the cell the
            learner types into shows neither the explanation nor the common wrong answers before the prediction.

    Raises:
        TypeError: ``prediction`` is not a number (or the placeholder).
        KeyError: ``question`` is not a key of :data:`QUESTIONS`.
        ValueError: ``question`` given with ``why`` or ``misconceptions``.
    """
    why_after_tailored = True
    if question is not None:
        if why or misconceptions:
            raise ValueError("give either question= or why= and misconceptions=, not both")
        why, misconceptions = QUESTIONS[question].why, QUESTIONS[question].misconceptions
        why_after_tailored = QUESTIONS[question].why_after_tailored
    if prediction is ... or prediction is None:
        print(_(PLACEHOLDER_MESSAGE))
        return
    try:
        guess = float(prediction)
    except (TypeError, ValueError):
        raise TypeError(_("a prediction is a number, got {prediction!r}").format(prediction=prediction)) from None
    answer = float(answer)
    if tolerance is None:
        tolerance = 0.0 if answer.is_integer() else 0.05
    note = ""
    raw = guess  # a misconception is looked up with the number typed: x[-3] is not "43 is the math's count"
    if length is not None and guess.is_integer() and -length <= guess < 0:
        note = _(" (x[{guess:.0f}] is x[{index:.0f}] in a sequence of {length})").format(
            guess=guess, index=guess + length, length=length
        )
        guess += length
    right = _matches(guess, answer, tolerance)
    verdict = _("right") if right else _("not quite")
    misconception = (
        ""
        if right
        else next(
            (text for wrong, text in (misconceptions or {}).items() if _matches(raw, float(wrong), tolerance)), ""
        )
    )
    shown_guess, shown_answer = f"{guess:.4g}", f"{answer:.4g}"
    if not right and shown_guess == shown_answer:  # 2.0001 is not 2: as many digits as it takes to tell them apart
        shown_guess, shown_answer = apart(guess, answer)
    text = _("You predicted {guess}{note}; the answer is {answer}: {verdict}.").format(
        guess=shown_guess, note=note, answer=shown_answer, verdict=verdict
    )
    if misconception and not why_after_tailored:  # the tailored sentence already gives the general reason
        why = ""
    for more in (misconception, why):
        text = then(text, _(more)) if more else text
    print(text)


def _matches(guess: float, answer: float, tolerance: float) -> bool:
    if math.isnan(answer) or math.isinf(answer):
        return guess == answer or (math.isnan(answer) and math.isnan(guess))
    return abs(guess - answer) <= tolerance * max(abs(answer), 0.2)


@dataclass(frozen=True)
class Question:
    """A chapter's 'predict, then check' question: what explains its answer, and the common wrong answers.

    Attributes:
        why: one sentence printed after the verdict.
        misconceptions: ``{wrong answer: the half-understood rule that gives it, and why}``.
        why_after_tailored: print ``why`` after a misconception's sentence too; False where every tailored
            sentence already states the general reason (printed then only for the right answer and for a wrong
            answer that has no sentence of its own).
    """

    why: str
    misconceptions: Mapping[float, str] = field(default_factory=dict)
    why_after_tailored: bool = True


#: The chapters' questions by key (``"P<chapter>"``), the sentences marked for the catalog: a chapter's cell passes
#: ``question="P8"`` to :func:`check_prediction`, and both editions print the sentences in their language.
QUESTIONS: dict[str, Question] = {
    "P0": Question(
        why=N_("x_m is x[m - 1], and x[-1] is x_46."),
        misconceptions={
            43: N_("43 is the math's count, which starts at 1: Python starts at 0, so every index is one less."),
            44: N_("One step the wrong way: Python's index is one less than the math's (m - 1), not one more."),
            -3: N_(
                "Counted from the end, x[-1] is already x_46, so x_43 is three places before it: x[-4], "
                "not x[-3] (which is x_44)."
            ),
        },
    ),
    "P1": Question(
        why=N_("Every output is 0: read on."),
        misconceptions={
            1: N_(
                "A distribution adds up to 1 only when its sum is finite: 46 x 22026 is about 1e6, above "
                "float16's 65504, so the sum is inf and each e^10 / inf is 0."
            ),
            math.nan: N_(
                "NaN needs inf / inf or 0 / 0: here every term is finite and only the sum is inf, and a "
                "finite number / inf is 0."
            ),
            46: N_(
                "Each output is e^10 / sum, not e^10 / e^10 = 1: the sum of the 46 terms is the "
                "denominator of every output, and here it overflows to inf."
            ),
        },
    ),
    "P2": Question(
        why=N_("Each step raises the max by 1, so every factor is exp(-1) = 1/e."),
        misconceptions={
            math.e: N_(
                "That is exp(g_i - g_{i-1}), the inverse of the rescale factor. The factor is exp(g_{i-1} - g_i): "
                "it converts the old sum to the new, larger max, so it is below 1."
            ),
            1: N_("The factor is 1 only when the max holds; here every element raises it."),
            -1: N_("-1 is the exponent g_{i-1} - g_i; the factor is its exponential, exp(-1) = 1/e."),
            0: N_(
                "exp(g_0 - g_1) = exp(-inf) = 0 is the factor of the first step only (nothing seen yet); "
                "from then on the max rises by 1 at each step."
            ),
        },
    ),
    "P3": Question(
        why=N_("The variance of q . k is D = 64, so its spread is sqrt(64) = 8."),
        misconceptions={
            64: N_(
                "64 is the variance of q . k (D products of variance 1 add up); the standard deviation is "
                "its square root."
            ),
            1: N_(
                "Each component has standard deviation 1, but q . k adds D = 64 products, and their "
                "variances add up to 64."
            ),
            0.125: N_(
                "0.125 is 1 / sqrt(64), the scale that undoes the spread; the spread of q . k itself is "
                "sqrt(64) = 8, the number the scale divides by."
            ),
            0: N_(
                "0 is the mean of q . k (positive and negative products cancel on average); the question "
                "asks its spread, the standard deviation."
            ),
        },
    ),
    "P4": Question(
        why=N_("Every element receives the same additions in the same order, so not one bit differs."),
        misconceptions={
            12: N_(
                "The loops run in another order, but each element still adds its own terms in the order m "
                "= 1, 2, ..., M: the same roundings, the same bits."
            ),
            6: N_(
                "Rounding differs when an element's additions change order, or when each multiply and add is "
                "fused into one rounding (a BLAS may do either); swapping the m and d loops changes the order "
                "of the work, not of any element's operations."
            ),
            3: N_(
                "Swapping the loops changes which elements are worked on first, not the order of any "
                "element's own additions: no row or column is special."
            ),
            4: N_(
                "Swapping the loops changes which elements are worked on first, not the order of any "
                "element's own additions: no row or column is special."
            ),
        },
    ),
    "P5": Question(
        why=N_("No jump, s_3 = 3 and s_4 = 4: the old output keeps 3/4 and the new key gets 1/4."),
        misconceptions={
            1: N_(
                "The max holds, so e^{g_3 - g_4} = 1, but the old output must still give up the weight of "
                "the new key: s_3 / s_4 = 3/4."
            ),
            0.25: N_(
                "1/4 is the new key's weight e^{x_4 - g_4} / s_4; the correction applied to A'_3 is what "
                "the old output keeps, 3/4."
            ),
            4 / 3: N_(
                "That is s_4 / s_3, the ratio inverted: the old output keeps the share s_3 / s_4 of the "
                "new sum, at most 1 when the max holds."
            ),
        },
    ),
    "P6": Question(
        why=N_(
            "fa1 keeps one key tile on chip and streams every query tile past it: Q is read once per "
            "key tile, T_c = ceil(46 / 4) = 12 times, whatever B_r is."
        ),
        misconceptions={
            1: N_(
                "1 is the fa2 order's count: there each query tile is loaded once; fa1 swaps the loops, so "
                "Q streams past every key tile, T_c = ceil(46 / 4) = 12 times."
            ),
            6: N_(
                "6 is T_r = ceil(46 / 8), the number of query tiles: fa1 reads all of them again for every key "
                "tile, T_c = ceil(46 / 4) = 12 times."
            ),
            11.5: N_("46 / 4 = 11.5, but the last key tile, of 2 keys, is a tile too: T_c = ceil(46 / 4) = 12."),
            11: N_("11 is 46 / 4 rounded down: the last key tile, of 2 keys, is a tile too: T_c = ceil(46 / 4) = 12."),
            46: N_(
                "46 counts one pass per key, but keys are loaded a tile at a time: one pass over Q per key "
                "tile of B_c = 4, T_c = ceil(46 / 4) = 12."
            ),
            13: N_(
                "13 = T_c + 1 is the count of the stores of A', g and s (written once before the key "
                "tiles, then after each); Q is only loaded, once per key tile: T_c = 12."
            ),
            72: N_(
                "72 = T_r x T_c = 6 x 12 counts tile loads of Q (every query tile once per key tile); a "
                "pass reads all of Q once: T_c = 12 passes."
            ),
        },
        why_after_tailored=False,
    ),
    "P6b": Question(
        why=N_(
            "fa2 reads K and V once per query tile, about 2 N M D / B_r elements, against standard attention's "
            "4 N M for writing and reading X and Y: below from B_r = D / 2 = 32. Exactly 32 here, as for every N "
            "that is a multiple of 32 or over 1000; a shorter N can go a little lower, where a smaller B_r gives as "
            "few query tiles as 32 does (24 for N = 48)."
        ),
        misconceptions={
            16: N_(
                "16 is this head's threshold, where D = 32: fa2's passes over K and V, 2 N M D / B_r elements, "
                "grow with D, so for D = 64 they fall below standard attention's 4 N M only from B_r = D / 2 = 32."
            ),
            33: N_(
                "At B_r = D / 2 = 32 itself fa2 already moves less: its passes over K and V, 2 (N / 32) N D = 4 N^2 "
                "elements, tie with standard attention's X and Y, and of the rest fa2 moves Q and A once (2 N D, "
                "and N for the logsumexp) against standard attention's Q, K, V and A (4 N D)."
            ),
            64: N_(
                "64 = D counts standard attention's X and Y once (2 N M); it writes them and reads them back, "
                "4 N M, so fa2's 2 N M D / B_r falls below it from B_r = D / 2 = 32 (at B_r = 64 fa2 moves "
                "about half)."
            ),
        },
        why_after_tailored=False,
    ),
    "P7": Question(
        why=N_(
            "fa1 divides the B_r x D_v output of a query tile after each key tile, and those divisions are shared "
            "by the tile's B_r x B_c scores: D_v / B_c = 64 / 32 = 2. B_r cancels."
        ),
        misconceptions={
            1: N_(
                "1 is the count for the 64 x 64 tiles printed above (64 / 64); with B_c = 32 each key tile holds "
                "half as many keys to share the same D_v divisions per row: 64 / 32."
            ),
            0.125: N_(
                "0.125 = D_v / M is the fa2 order's count, one division at the end of each query tile; fa1 "
                "divides after every key tile."
            ),
            0.5: N_(
                "0.5 = D_v / B_r divides by the query tile's height, but a row's D_v divisions after a key tile "
                "are shared by that row's B_c scores, not by the B_r rows: 64 / 32."
            ),
            64: N_(
                "64 would be D_v divisions for every score; the B_r x D_v divisions after a key tile are "
                "shared by its B_r x B_c scores."
            ),
            1 / 32: N_(
                "1/32 counts one division per row and key tile (s_new alone); fa1 divides each of the "
                "row's D_v outputs."
            ),
            16: N_(
                "16 = T_c = 512 / 32 is how often one output element is divided (once per key tile); per "
                "score, the D_v divisions after a key tile are shared by its B_c scores: 64 / 32."
            ),
            4: N_(
                "4 counts a division for each of the update's two terms (the old A' and P V); they are "
                "added first and divided by s_new once: B_r x D_v divisions per key tile, 64 / 32 per "
                "score."
            ),
        },
    ),
    "P8": Question(
        why=N_("The 8 x 8 grid's strict upper triangle: 8 x 7 / 2 = 28 tiles."),
        misconceptions={
            36: N_(
                "36 = 8 x 9 / 2 counts the diagonal tiles too, but each holds its part of the diagonal: "
                "partial, not skipped."
            ),
            32: N_("32 is half the grid, but the 8 diagonal tiles belong to neither half: (64 - 8) / 2."),
            56: N_("56 = 8 x 7 counts both triangles: only the tiles above the diagonal are masked."),
            8: N_(
                "8 counts the diagonal tiles, which are partial, not skipped; the skipped tiles lie above "
                "them: 8 x 7 / 2."
            ),
            120: N_(
                "120 = 16 x 15 / 2 is the text's count for 16 x 16 tiles; with 32 x 32 tiles the 256 keys "
                "make an 8 x 8 grid: 8 x 7 / 2 = 28."
            ),
            496: N_(
                "496 = 32 x 31 / 2 takes the tile size for the grid size: 256 / 32 = 8 tiles per side, 8 x 7 / 2 = 28."
            ),
        },
    ),
    "P8b": Question(
        why=N_(
            "fa1 reads Q_i and reads and writes back A_i for every key tile: 3 D / B_c = 12 elements per score of "
            "each tile it computes, against standard attention's 4 per score, masked or not. The window leaves 15 "
            "of the 36 tiles: 15/36 x 12 = 5 > 4, above (fa2, 2 D / B_r = 8, ends at 15/36 x 8, about 3.3: below)."
        ),
        misconceptions={
            -1: N_(
                "Below is where fa2 ends (15/36 x 8, about 3.3 elements per score, against standard attention's "
                "4); fa1 moves 3 D / B_c = 12 per score of each tile it computes, and 15/36 x 12 = 5 stays above 4."
            ),
            0: N_(
                "Level would need fa1's 15/36 x 12 = 5 elements per score (3 D / B_c = 12 on each of the 15 tiles "
                "it computes, of 36) to equal standard attention's 4; it moves more: above."
            ),
        },
        why_after_tailored=False,
    ),
    "P9": Question(
        why=N_(
            "fa2 computes in float32 and rounds only its output, as the floor does: its float32 additions, in "
            "whatever order, err by about 2^-24, far below float16's 2^-11, so its largest error is the floor's; "
            "naive attention rounds X and Y to float16 as well."
        ),
        misconceptions={
            1: N_("1 would mean that adding tile by tile costs as much as naive attention's roundings of X and Y."),
            2: N_("2 is the most FlashAttention's rule allows, not where fa2 lands."),
        },
    ),
    "P10": Question(
        why=N_("6 ranges -> 3 -> 2 -> 1: three levels (the odd one is carried up once)."),
        misconceptions={
            5: N_("5 is the number of merges (each turns two states into one); a level merges its pairs side by side."),
            2: N_(
                "2 is log2 6 rounded down, but the odd range is carried up and merged one level later: "
                "ceil(log2 6) = 3."
            ),
            6: N_("One level per range gives 6, but a level merges all its pairs at once, halving the count."),
            1: N_("1 level would merge all six at once, but a merge takes two states: each level halves the count."),
            4: N_("4 counts the lists 6, 3, 2, 1; the levels are the steps between them: three."),
        },
    ),
    "P10b": Question(
        why=N_(
            "B_r = 128 needs 64 KiB of shared memory and 97 KiB of registers; B_r = 256 would need 96 KiB of shared "
            "memory, within the 99 KiB a block may use, but 194 KiB of registers, over the 127.5 KiB that 4 warps "
            "hold: the register cap breaks, not the shared one."
        ),
        misconceptions={
            256: N_(
                "256 fits only the whole register file (256 KiB), but a block of 4 warps holds at most 127.5 KiB of it."
            ),
            64: N_(
                "64 halves the A100's 128 for twice the D, but a row's registers grow only from 520 to 776 bytes (its "
                "B_c = 64 scores do not grow with D). With Q, K and V in float16, as in the table, 128 rows fit; in "
                "float32 they would need 128 KiB of shared memory, and 64 would be right."
            ),
        },
    ),
    "P13": Question(
        why=N_(
            "The first row of query tile i sees keys from 128 i - 511 = 128 (i - 4) + 1 on, inside key tile i - 4: "
            "each query tile from tile 4 on computes 5 key tiles, i - 4 (partial) to i (the diagonal, partial), and "
            "the first four compute 1, 2, 3 and 4: 28 x 5 + 10 = 150."
        ),
        misconceptions={
            128: N_(
                "128 = 32 x 4 takes the 512 keys for 4 whole tiles, but the window is not aligned with them: it ends "
                "inside the diagonal tile and reaches back into a fifth key tile, so 28 x 5 + 1 + 2 + 3 + 4 = 150."
            ),
            160: N_(
                "160 = 32 x 5 gives every query tile 5 key tiles, but the first four query tiles have only 1, 2, 3 "
                "and 4 key tiles up to the diagonal: 28 x 5 + 10 = 150."
            ),
            528: N_(
                "528 = 32 x 33 / 2 is the causal mask's count; the window also skips every key tile that lies wholly "
                "more than 511 keys before its rows: 150."
            ),
            874: N_("874 is the count of the tiles skipped; the loop computes the other 1024 - 874 = 150."),
            90: N_(
                "90 counts the full tiles only; the partial ones are computed too, the 32 on the diagonal and the 28 "
                "at the window's far end: 90 + 60 = 150."
            ),
        },
    ),
    "P13b": Question(
        why=N_(
            "The merge adds the parts' denominators, so the sink's term e^sink counts three times: 3 e^sink = "
            "e^(sink + ln 3), one sink larger by ln 3, about 1.10."
        ),
        misconceptions={
            3: N_(
                "The sink's term is tripled, 3 e^sink; as a logit that is sink + ln 3, about sink + 1.10, not sink + 3 "
                "(e^(sink + 3) is about 20 e^sink)."
            ),
            2: N_(
                "The two extra copies add 2 e^sink to the one that belongs there: 3 e^sink in all, which as a logit is "
                "sink + ln 3, about sink + 1.10, not sink + 2."
            ),
            math.log(2): N_(
                "ln 2 is the sink counted in two parts; in all three, 3 e^sink = e^(sink + ln 3), about sink + 1.10."
            ),
            0: N_(
                "The merge keeps no single copy of the sink: it adds the parts' denominators, each with its own "
                "e^sink, so 3 e^sink = e^(sink + ln 3)."
            ),
        },
    ),
    "P14": Question(
        why=N_(
            "Device 0 holds the first quarter of the queries: the shards of devices 1, 2 and 3 hold only later keys, "
            "so 3 of its 4 steps are skipped; device 3 skips none."
        ),
        misconceptions={
            0: N_(
                "0 is the non-causal ring, where every device computes every step; with the causal mask device 0's "
                "queries see none of the later shards."
            ),
            4: N_(
                "The own shard (step 0) is never skipped: its diagonal block is half visible, computed with the "
                "causal mask inside it."
            ),
            1: N_("1 skipped step is device 2's count; device 0, the first, skips the most: every later shard."),
            2: N_("2 is device 1's count (shards 2 and 3 come after its queries); device 0 skips shards 1, 2 and 3."),
        },
    ),
}

#: Every ``why`` and every misconception sentence of :data:`QUESTIONS` (the catalog's tests read them).
NOTEBOOK_WHY = tuple(q.why for q in QUESTIONS.values())
NOTEBOOK_MISCONCEPTIONS = tuple(text for q in QUESTIONS.values() for text in q.misconceptions.values())
