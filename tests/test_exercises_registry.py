"""Every exercise, from its one declaration (``@exercise`` beside its checker; ``flashmath.exercises.EXERCISES``):
its solution passes with the property cases it declares, an unfinished answer is reported and not raised, its
catalogue names each mistake once, and a test module gives each mistake a learner's wrong solution. Nothing here is
a hand-kept list: a new exercise is tested as soon as it is declared.
"""

import ast
import importlib
import inspect
import pkgutil

import pytest
from helpers import HAVE_TRITON, ROOT

from flashmath import exercises
from flashmath.exercises import _registry

EXERCISES = exercises.EXERCISES
NEEDS_TRITON = {"check_row_lse", "check_dq_kernel"}  # their solutions are Triton kernels


def solution_of(exercise):
    return getattr(importlib.import_module(exercise.solutions), exercise.solution)


def skip_without_triton(exercise):
    if exercise.name in NEEDS_TRITON and not HAVE_TRITON:
        pytest.skip('the triton extra is not installed: see README, "The triton extra"')


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.name for e in EXERCISES])
def test_the_solution_passes_with_its_property_cases(exercise):
    skip_without_triton(exercise)
    report = exercise.checker(solution_of(exercise))
    assert report.title == exercise.name
    assert report.passed, repr(report)
    assert repr(report).endswith("All good.")
    properties = sum(case.startswith("property: ") for case, _, _ in report.cases)
    assert properties >= exercise.property_cases, repr(report)


FUNCTIONS = [e for e in EXERCISES if not e.quiz]


@pytest.mark.parametrize("exercise", FUNCTIONS, ids=[e.name for e in FUNCTIONS])
def test_an_unfinished_exercise_is_reported_not_raised(exercise):
    skip_without_triton(exercise)

    def todo(*args):
        raise NotImplementedError

    report = exercise.checker(todo)
    assert not report.passed
    assert all(msg == "not implemented yet" for _, ok, msg in report.cases if not ok), repr(report)


QUIZZES = [e for e in EXERCISES if e.quiz]


@pytest.mark.parametrize("exercise", QUIZZES, ids=[e.name for e in QUIZZES])
def test_an_unanswered_quiz_is_reported_not_raised(exercise):
    report = exercise.checker({})
    assert not report.passed and "no answer yet" in repr(report)
    assert not exercise.checker(["a list"]).passed


def test_every_chapter_module_declares_its_exercises_and_the_package_exports_them():
    modules = {info.name for info in pkgutil.iter_modules(exercises.__path__) if info.name.startswith("chapter")}
    assert modules == {f"chapter{e.chapter}" for e in EXERCISES}
    for e in EXERCISES:
        assert e.checker.__module__ == f"flashmath.exercises.chapter{e.chapter}", e
        assert getattr(exercises, e.name) is e.checker and e.name in exercises.__all__
    assert len({e.number for e in EXERCISES}) == len({e.name for e in EXERCISES}) == len(EXERCISES)
    assert exercises.MISTAKES == {e.name: e.mistakes for e in EXERCISES if e.mistakes}


def test_each_catalogue_names_its_mistakes_once_each_with_a_fix():
    for e in EXERCISES:
        names = [m.name for m in e.mistakes]
        assert len(names) == len(set(names)), e.name
        assert all(m.fix for m in e.mistakes), e.name


def test_every_solution_is_declared_and_every_declared_solution_exists():
    for module_name in _registry.SOLUTION_MODULES:
        module = importlib.import_module(module_name)
        declared = {e.solution for e in EXERCISES if e.solutions == module_name}
        assert all(hasattr(module, name) for name in declared), module_name
        defined = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module_name
        } - {"show", "source_of"}
        assert defined <= declared, f"{module_name}: solutions no exercise declares: {defined - declared}"
        assert module.__all__ == ["show", *[e.solution for e in EXERCISES if e.solutions == module_name]]


def test_a_declaration_is_checked():
    with pytest.raises(ValueError, match="solutions must be one of"):
        _registry.exercise("99.1", solution="x", solutions="flashmath.elsewhere")
    with pytest.raises(ValueError, match="already declared by check_tile_step"):
        _registry.exercise("6.1", solution="x")(lambda fn: None)


def wrong_dicts() -> dict:
    """``{test module: the checker names that key its module-level WRONG dict}``, read from the source (test modules
    never import each other)."""
    found = {}
    for path in sorted((ROOT / "tests").glob("test_exercises*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "WRONG" for t in node.targets)
                and isinstance(node.value, ast.Dict)
            ):
                found[path.name] = {ast.literal_eval(key) for key in node.value.keys}
    return found


def test_every_catalogue_has_learners_wrong_solutions_in_one_test_module():
    """Each checker with a catalogue keys the ``WRONG`` dict of exactly one ``tests/test_exercises*.py`` module,
    whose ``checker_tests(WRONG)`` (tests/helpers.py) requires a wrong solution for every mistake."""
    found = wrong_dicts()
    for e in EXERCISES:
        if e.mistakes:
            modules = [name for name, checkers in found.items() if e.name in checkers]
            assert len(modules) == 1, (e.name, modules)
    assert set().union(*found.values()) == set(exercises.MISTAKES)
