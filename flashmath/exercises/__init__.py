"""Checkers for the chapter exercises: they run the learner's function on edge cases and say what failed.

A checker never raises: an exception in the learner's code is reported as a failed case with its message.
It returns a :class:`CheckReport`, whose text (one line per case) is what a notebook shows. Each case is where
some classic mistake makes a difference (forgetting to subtract the max, a max started at 0, a fully masked row,
NaN or +inf turned into zeros, float16 overflow, reading the input twice, the loops in the wrong order, ...); when an
answer is wrong the checker names the mistake that gives that answer and says what to change (:class:`Mistake`). The
catalogue of each checker is in :data:`MISTAKES`, the one registry of every chapter's mistakes.

One harness (:mod:`flashmath.exercises._report`): :class:`Mistake`, :class:`CheckReport`, ``run`` (calls the
learner's code, never raises), ``Diagnosis`` (names the mistake whose model gives the learner's answer on the most
cases) and ``same``; ``flashmath.exercises._cases.check_function`` runs a whole list of cases through them, after
the property battery (``_cases.PROPERTIES``: the inputs unchanged, the result's form, the edge inputs).

One module per chapter, ``chapter0`` ... ``chapter15`` (``_tiles`` holds what chapters 6-12's checkers share), and
:mod:`~flashmath.exercises.predict` for the 'predict, then check' questions. Each checker is declared once, beside
its definition, with ``@exercise(number, mistakes, solution=...)`` (:mod:`flashmath.exercises._registry`): this
package exports every declared checker and derives :data:`EXERCISES` and :data:`MISTAKES` from the declarations.

Index convention of the messages: the math counts from 1 (``x_1 .. x_N``, keys ``m = 1..M``, ``A'_m`` after the
first ``m`` keys); a bracketed index such as ``Y[n, m]`` or ``at [0, 3]`` is a code (0-based) index.

Solutions live in :mod:`flashmath.solutions`, apart from the exercises.
"""

# Importing a chapter's module declares its exercises (the modules are the package's attributes too):
from flashmath.exercises import (  # noqa: F401
    chapter0,
    chapter1,
    chapter2,
    chapter3,
    chapter4,
    chapter5,
    chapter6,
    chapter7,
    chapter8,
    chapter9,
    chapter10,
    chapter11,
    chapter12,
    chapter13,
    chapter14,
    chapter15,
)
from flashmath.exercises._registry import Exercise, declared
from flashmath.exercises._report import CheckReport, Mistake
from flashmath.exercises.chapter2 import OnePassVector
from flashmath.exercises.chapter4 import Traced
from flashmath.exercises.chapter15 import print_recap_quiz
from flashmath.exercises.predict import check_prediction

#: Every exercise of the course, in the course's order: one :class:`~flashmath.exercises._registry.Exercise` per
#: checker, as its ``@exercise`` declaration gives it.
EXERCISES: tuple[Exercise, ...] = declared()

#: For each checker with a catalogue, the mistakes it names, in the order it tries them.
MISTAKES: dict[str, tuple[Mistake, ...]] = {e.name: e.mistakes for e in EXERCISES if e.mistakes}


def solution_names(module: str) -> list[str]:
    """The names of the solutions that ``module`` (``"flashmath.solutions"``) holds, as the exercises' declarations
    give them, in the course's order: what ``solutions.show`` lists."""
    return [e.solution for e in EXERCISES if e.solutions == module]


# Every checker by its name (check_tile_step, ...), as the notebooks import it: from flashmath.exercises import ...
globals().update({e.name: e.checker for e in EXERCISES})

__all__ = [
    "CheckReport",
    "Mistake",
    "Exercise",
    "EXERCISES",
    "MISTAKES",
    "OnePassVector",
    "Traced",
    "check_prediction",
    "print_recap_quiz",
    "solution_names",
    *(e.name for e in EXERCISES),
]
