"""One contract per exercise: the checker tests what the prompt states, in the prompt's words.

Each exercise's prompt is its paragraph of the English notebook (``**6.1** ...``, up to the next exercise's
number). Every property case of its checker (a case named ``property: ...``) names the requirement it enforces with
a phrase of that prompt, so a checker that tests a property its prompt never states fails here; and the prompt
names its checker's cases by their words, so a learner reads in the prompt what a failure message will say.
"""

from __future__ import annotations

import importlib
import re

import nbformat
import pytest
from helpers import HAVE_TRITON, ROOT

from flashmath.exercises import EXERCISES
from flashmath.exercises._report import PROPERTY_PREFIX

NEEDS_TRITON = {"check_row_lse", "check_dq_kernel"}
LATEX = {r"\infty": "inf", r"\ne": "!=", r"\le": "<=", r"\ge": ">=", r"\vec ": "", r"\times": "x", r"\cdot": "."}


def normalise(text: str) -> str:
    """Prompt text and case names in one form: no Markdown or math markup, LaTeX symbols as code writes them
    (``$-\\infty$`` is ``-inf``), one space between words, lower case."""
    for latex, code in LATEX.items():
        text = text.replace(latex, code)
    text = re.sub(r"[`$*]|\\[,;!]", "", text)
    text = text.replace("\\", "")
    return " ".join(text.split()).lower()


def prompt(number: str) -> str:
    """The prompt of exercise ``number``, from its chapter's English notebook: the text from ``**number`` to the
    next exercise's marker (or the end of its Markdown cell)."""
    chapter = int(number.split(".")[0])
    (path,) = sorted((ROOT / "notebooks").glob(f"{chapter:02d}_*.ipynb"))
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "markdown" or f"**{number}" not in cell.source:
            continue
        text = cell.source.split(f"**{number}", 1)[1]
        return re.split(r"\*\*\d+\.\d+", text)[0]
    raise AssertionError(f"no prompt for exercise {number} in {path.name}")


def test_every_exercise_has_a_prompt():
    for e in EXERCISES:
        assert len(prompt(e.number).split()) > 10, e.number


FUNCTIONS = [e for e in EXERCISES if not e.quiz]


@pytest.mark.parametrize("exercise", FUNCTIONS, ids=[e.name for e in FUNCTIONS])
def test_each_property_case_enforces_a_sentence_of_its_prompt(exercise):
    if exercise.name in NEEDS_TRITON and not HAVE_TRITON:
        pytest.skip('the triton extra is not installed: see README, "The triton extra"')
    solution = getattr(importlib.import_module(exercise.solutions), exercise.solution)
    report = exercise.checker(solution)
    text = normalise(prompt(exercise.number))
    stated = [name[len(PROPERTY_PREFIX) :] for name, _, _ in report.cases if name.startswith(PROPERTY_PREFIX)]
    unstated = [name for name in stated if normalise(name) not in text]
    assert not unstated, f"{exercise.number}: property cases whose words are not in the prompt: {unstated}"


def test_the_normal_form_reads_math_as_code():
    assert normalise("a row of $-\\infty$ gives `(-inf, 0)`, **not** NaN") == "a row of -inf gives (-inf, 0), not nan"


# Exercises whose prompts name every case of their checker, not only the property cases, in the checker's words
# (the others describe their remaining cases in their own words: "a max that jumps (by 3 and by 1000)"); and the
# cases of other exercises that their prompts name verbatim.
EVERY_CASE_NAMED = ("1.1", "2.1", "2.2", "4.1")
CASES_NAMED = {
    "3.1": ["square values (M = Dv = 5, where v.T also runs), D = 5"],
    "8.2": ["the state given (g, s, A') is left unchanged"],
    "13.4": ["a tile: q_idx rows 1..3 and kv_idx keys 2..5 of N = 5, M = 7"],  # review rev-j-13-7
}


@pytest.mark.parametrize("number", [*EVERY_CASE_NAMED, *CASES_NAMED])
def test_the_prompt_names_these_cases_in_the_checkers_words(number):
    (exercise,) = [e for e in FUNCTIONS if e.number == number]
    solution = getattr(importlib.import_module(exercise.solutions), exercise.solution)
    names = [name.removeprefix(PROPERTY_PREFIX) for name, _, _ in exercise.checker(solution).cases]
    wanted = names if number in EVERY_CASE_NAMED else CASES_NAMED[number]
    assert set(wanted) <= set(names), f"{number}: no such case: {set(wanted) - set(names)}"
    text = normalise(prompt(number))
    unnamed = [name for name in wanted if normalise(name) not in text]
    assert not unnamed, f"{number}: cases whose words are not in the prompt: {unnamed}"


def test_the_merge_prompt_states_its_inputs_unchanged_case():
    """Issue 35 (review rev-c): 10.1's checker adds the case "the two states given are left unchanged" once the stub
    is replaced; the prompt states it, in the case's words."""
    from flashmath import solutions
    from flashmath.exercises import check_merge_states

    report = check_merge_states(solutions.merge_states)
    names = [name for name, _, _ in report.cases]
    assert "the two states given are left unchanged" in names
    assert normalise("the two states given are left unchanged") in normalise(prompt("10.1"))
