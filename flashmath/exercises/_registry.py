"""One declaration per exercise: its checker, its catalogue of mistakes, its solution and its property rule.

A chapter module declares each checker where it defines it::

    @exercise("6.1", TILE_MISTAKES, solution="tile_step")
    def check_tile_step(fn) -> CheckReport:
        ...

and everything that lists exercises reads the declarations instead of keeping a list of its own:
:mod:`flashmath.exercises` exports every declared checker and builds ``MISTAKES`` and ``EXERCISES`` from them;
:func:`flashmath.solutions.show` and :func:`flashmath.solutions_triton.show` list and check the solution names;
the tests (``tests/test_exercises_registry.py``) run every solution through its checker, require the property
cases declared here, give every exercise an unfinished answer, and find a learner's wrong solution for every mistake
of every catalogue. CONTRIBUTING.md, "Adding a checker", gives the rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from flashmath.exercises._report import CheckReport, Mistake

SOLUTION_MODULES = ("flashmath.solutions", "flashmath.solutions_triton")


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise of a chapter.

    Attributes:
        number: its number in the chapter, ``"6.1"`` (chapter 6, first exercise), as the notebook and the checker's
            docstring number it.
        checker: the function the notebook calls, ``check_tile_step(fn) -> CheckReport``; its name is the
            exercise's name (:attr:`name`) and the report's title.
        mistakes: the catalogue of mistakes the checker names (its ``*_MISTAKES`` tuple), in the order it tries
            them; empty for a checker that diagnoses without models (chapter 9's ratio, the quizzes).
        solution: the name of the solution in its module, the name ``solutions.show`` takes.
        solutions: the module that holds the solution (one of :data:`SOLUTION_MODULES`).
        property_cases: the least number of property cases (case names starting ``property: ``) the checker runs
            on the solution, all passed.
        quiz: the checker takes a dict of answers, not a function (chapters 11 and 14).
    """

    number: str
    checker: Callable[..., CheckReport]
    mistakes: tuple[Mistake, ...]
    solution: str
    solutions: str = "flashmath.solutions"
    property_cases: int = 3
    quiz: bool = False

    @property
    def name(self) -> str:
        """The checker's name, ``"check_tile_step"``: what the notebook imports from :mod:`flashmath.exercises`."""
        return self.checker.__name__

    @property
    def chapter(self) -> int:
        return int(self.number.split(".")[0])

    def sort_key(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.number.split("."))


_DECLARED: dict[str, Exercise] = {}


def exercise(
    number: str,
    mistakes: tuple[Mistake, ...] = (),
    *,
    solution: str,
    solutions: str = "flashmath.solutions",
    property_cases: int = 3,
    quiz: bool = False,
) -> Callable[[Callable[..., CheckReport]], Callable[..., CheckReport]]:
    """Declare the decorated checker as exercise ``number`` (the fields of :class:`Exercise`); the checker itself
    is returned unchanged.

    Raises:
        ValueError: another checker already declared that number, or an unknown solutions module.
    """
    if solutions not in SOLUTION_MODULES:
        raise ValueError(f"solutions must be one of {SOLUTION_MODULES}, got {solutions!r}")

    def declare(checker: Callable[..., CheckReport]) -> Callable[..., CheckReport]:
        record = Exercise(number, checker, tuple(mistakes), solution, solutions, property_cases, quiz)
        taken = [e.name for e in _DECLARED.values() if e.number == number and e.name != record.name]
        if taken:
            raise ValueError(f"exercise {number} is already declared by {taken[0]}")
        _DECLARED[record.name] = record  # by name: a module imported again replaces its own declarations
        return checker

    return declare


def declared() -> tuple[Exercise, ...]:
    """Every exercise declared so far, in the course's order (chapter, then number)."""
    return tuple(sorted(_DECLARED.values(), key=Exercise.sort_key))
