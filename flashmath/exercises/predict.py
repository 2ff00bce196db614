"""'Predict, then check': the learner writes a number before running a cell, and the cell compares."""

from __future__ import annotations

import math

PLACEHOLDER_MESSAGE = ("No prediction yet: write your number in place of the ... above, then run this cell again "
                       "(the answer is printed only once you have committed to a prediction).")


def check_prediction(prediction, answer: float, *, tolerance: float = 0.05, why: str = "",
                     length: int | None = None) -> None:
    """Print how a learner's ``prediction`` compares with the computed ``answer``.

    Args:
        prediction: the learner's number; ``...`` (the placeholder) or None prints :data:`PLACEHOLDER_MESSAGE` and
            nothing else, so a notebook run with the placeholder left in always shows the same text.
        answer: the number the cell computed.
        tolerance: how far a prediction may be and still count as right: ``|prediction - answer| <= tolerance *
            max(|answer|, 0.2)`` (relative, with a floor near 0: 5 % by default, so that for an answer of 3/4 the
            neighbours 2/3 and 4/5 are not right). 0 asks for the exact value. NaN matches NaN, an infinity itself.
        why: one sentence printed after the verdict (what explains the answer).
        length: for a prediction of an index into a sequence of this length: a negative index ``-k`` (``x[-k]``)
            names the element ``length - k``, and counts as that index.

    Raises:
        TypeError: ``prediction`` is not a number (or the placeholder).
    """
    if prediction is ... or prediction is None:
        print(PLACEHOLDER_MESSAGE)
        return
    try:
        guess = float(prediction)
    except (TypeError, ValueError):
        raise TypeError(f"a prediction is a number, got {prediction!r}") from None
    answer = float(answer)
    note = ""
    if length is not None and guess.is_integer() and -length <= guess < 0:
        note = f" (x[{guess:.0f}] is x[{guess + length:.0f}] in a sequence of {length})"
        guess += length
    if math.isnan(answer) or math.isinf(answer):
        right = guess == answer or (math.isnan(answer) and math.isnan(guess))
    else:
        right = abs(guess - answer) <= tolerance * max(abs(answer), 0.2)
    verdict = "right" if right else "not quite"
    print(f"You predicted {guess:.4g}{note}; the answer is {answer:.4g}: {verdict}." + (f" {why}" if why else ""))
