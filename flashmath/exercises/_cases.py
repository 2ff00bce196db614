"""The one checker of the course: run the learner's function on a list of cases, check the properties every right
answer has, compare with the reference and name the mistake.

The property battery (:data:`PROPERTIES`) runs before the mistake models, on every case of every checker:

- the inputs unchanged: each argument (every array, ``v_m`` and ``v_block`` included) is passed as a copy and
  compared with the original after the call;
- the result's type, dtype and shape: the number of parts, each part's shape, a floating-point result where the
  reference gives one (an integer array of zeros is not a probability vector), a boolean array where it gives a
  mask, and the reference's own dtype where it is narrower than float64 (float16 in, float16 out);

and a checker adds the edge inputs that apply to its exercise as property cases (:func:`property_cases`): the
empty input, one element, an all -inf row, +inf, NaN, float16 overflow, integer input, negative-only input. A
property case is compared with the reference like any other, and its name says which property it checks. A wrong
answer is then explained by the catalogue of mistakes (:class:`~flashmath.exercises._report.Diagnosis`); a
failed property needs no model: it names itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from flashmath.exercises._report import (
    INPUT_MODIFIED,
    CheckReport,
    Diagnosis,
    Mistake,
    error_note,
    explaining,
    fmt,
    largest_difference,
    modified,
    run,
)
from flashmath.i18n import display_width, joined
from flashmath.i18n import gettext as _  # the learner-facing text (flashmath.i18n)
from flashmath.i18n import gettext_noop as N_

#: The property battery, in the order a checker runs it (the first two on every case, the rest as edge cases).
PROPERTIES = (
    "the inputs unchanged",
    "the result's type, dtype and shape",
    "the empty input",
    "one element",
    "an all -inf row",
    "+inf",
    "NaN",
    "float16 overflow",
    "integer input",
    "negative-only input",
)

INTEGER_OUT = Mistake(
    N_("an integer result"),
    N_(
        "the result is made of fractions: cast to a float type, and never cast the result back to an integer "
        "input's dtype (y.astype(x.dtype) turns the answer for [3, 1, 2] into [0, 0, 0]); integers in give "
        "float64 out"
    ),
)
DTYPE_OUT = Mistake(
    N_("a different dtype out"),
    N_("return the input's dtype (float16 in, float16 out): compute in a wider type if you like, then cast back"),
)
BOOL_OUT = Mistake(
    N_("an integer 0/1 mask"),
    N_(
        "return a boolean array (dtype=bool), True where the query may attend: np.tril(np.ones((N, M))) "
        "holds 0/1 numbers, and x[mask] or ~mask do something else with them (~1 is -2, an index array "
        "picks rows 0 and 1)"
    ),
)
WRONG_SHAPE = Mistake(
    N_("a wrong shape"), N_("the result must have the shape of the reference's (see the expected shape)")
)


def property_cases(cases: Sequence[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    """Edge cases ``[(what, args)]`` named as property cases: ``"property: " + what``."""
    return [(f"property: {what}", args) for what, args in cases]


def copy_args(args: tuple) -> tuple:
    """A copy of each argument that is an array (or a list or tuple of arrays), for the learner's call."""

    def one(a):
        if isinstance(a, np.ndarray):
            return a.copy()
        if isinstance(a, list | tuple) and any(isinstance(e, np.ndarray) for e in a):
            return type(a)(e.copy() if isinstance(e, np.ndarray) else e for e in a)
        return a

    return tuple(one(a) for a in args)


def changed_arg(before: tuple, after: tuple) -> int | None:
    """The index of the first argument the call changed in place (an array, or a list or tuple holding one), or
    None."""
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and modified(a, b):
            return i
        if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
            if changed_arg(tuple(a), tuple(b)) is not None:
                return i
    return None


def args_modified(before: tuple, after: tuple) -> bool:
    """True when the call changed one of its arguments in place (arrays, and arrays inside lists or tuples)."""
    return changed_arg(before, after) is not None


def modified_message(k: int, arg_names: Sequence[str] | None = None, mistake: Mistake = INPUT_MODIFIED) -> str:
    """The message for an argument changed in place, ``k`` its index: the argument named when ``arg_names`` are
    given, then ``mistake``'s message."""
    if arg_names is None:
        return mistake.message()
    return _("{arg} (argument {k}) was changed: {message}").format(arg=arg_names[k], k=k + 1, message=mistake.message())


def as_arrays(out, n: int):
    """``out`` as a tuple of ``n`` float64 arrays (a single array when ``n == 1``), or None."""
    if n > 1 and isinstance(out, np.ndarray):  # one array where a tuple of n was asked for
        return None
    try:
        parts = (out,) if n == 1 else tuple(out)
        if len(parts) != n:
            return None
        arrays = tuple(np.asarray(p, dtype=np.float64) for p in parts)
    except Exception:
        return None
    return arrays[0] if n == 1 else arrays


def _parts(out, n: int) -> tuple:
    return (out,) if n == 1 else tuple(out)


def same_arrays(a, b, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
    """Two answers (arrays or tuples of arrays) agree: same shapes, equal to ``rtol`` and ``atol``, NaN with NaN."""
    a, b = (x if isinstance(x, tuple) else (x,) for x in (a, b))
    if len(a) != len(b):
        return False
    try:
        return all(
            np.shape(x) == np.shape(y)
            and bool(
                np.allclose(
                    np.asarray(x, dtype=np.float64),
                    np.asarray(y, dtype=np.float64),
                    rtol=rtol,
                    atol=atol,
                    equal_nan=True,
                )
            )
            for x, y in zip(a, b, strict=False)
        )
    except (TypeError, ValueError):
        return False


def form_problem(out, expected, n_out: int, names) -> str | None:
    """The battery's second property: what is wrong with the type, dtype or shape of ``out`` (None when nothing).

    ``expected`` is the reference's raw result. Checked per part: the shape; a floating-point array where the
    reference gives one (not an integer array); a boolean array where the reference gives a mask; the reference's
    dtype where it is narrower than float64.
    """
    try:
        got, want = _parts(out, n_out), _parts(expected, n_out)
    except TypeError:
        return None
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        name = names[k] if n_out > 1 else None  # several parts: each problem is led by its part's name
        try:
            g_arr, w_arr = np.asarray(g), np.asarray(w)
        except Exception:
            return None
        if g_arr.dtype == object:
            return None
        if g_arr.size == 0 and w_arr.size == 0 and not isinstance(g, np.ndarray):
            continue  # a list [] is the empty result, whatever the reference's empty shape
        if g_arr.shape != w_arr.shape:
            return joined(
                _led(name, _("expected shape {expected}, got {got}").format(expected=w_arr.shape, got=g_arr.shape)),
                WRONG_SHAPE.message(),
            )
        if w_arr.dtype.kind == "b" and g_arr.dtype.kind != "b":
            return joined(
                _led(name, _("expected a boolean mask, got {dtype}").format(dtype=g_arr.dtype)), BOOL_OUT.message()
            )
        if w_arr.dtype.kind == "f" and g_arr.dtype.kind in "iub":
            return joined(
                _led(name, _("expected a float result, got {dtype}").format(dtype=g_arr.dtype)), INTEGER_OUT.message()
            )
        if (
            isinstance(w, np.ndarray)
            and w.dtype.kind == "f"
            and w.dtype.itemsize < 8
            and isinstance(g, np.ndarray)
            and g.dtype != w.dtype
        ):
            return joined(
                _led(name, _("expected dtype {expected}, got {got}").format(expected=w.dtype, got=g.dtype)),
                DTYPE_OUT.message(),
            )
    return None


def _led(name: str | None, problem: str) -> str:
    """``problem``, led by the name of the result's part it concerns (``"A: ..."``; none for a single result)."""
    return _("{name}: {problem}").format(name=name, problem=problem) if name else problem


def _is_mask(out) -> bool:
    """``out`` is a boolean array (a mask)."""
    return isinstance(out, np.ndarray | np.bool_) and np.asarray(out).dtype == np.bool_


def _zero_one(raws, answers) -> bool:
    """The run's answers are a mask written as numbers: every number of every answer is 0 or 1."""
    try:
        return all(
            bool(np.isin(np.asarray(out, dtype=np.float64), (0, 1)).all())
            for out, (ok, _) in zip(raws, answers, strict=False)
            if ok
        )
    except (TypeError, ValueError):
        return False


def _default_describe(names, n_out):
    def describe(answer, expected) -> tuple[str, object, object]:
        got = answer if n_out > 1 else (answer,)
        want = expected if n_out > 1 else (expected,)
        wrong = [k for k in range(n_out) if not same_arrays(got[k], want[k])] or [0]
        k = wrong[0]
        return (
            _("expected {what} = {expected}, got {got}").format(
                what=names[k], expected=fmt(want[k], got[k]), got=fmt(got[k], want[k])
            ),
            got[k],
            want[k],
        )

    return describe


def check_function(
    title: str,
    fn,
    cases,
    reference,
    mistakes,
    *,
    n_out: int,
    names=None,
    not_answer: Mistake | None = None,
    hint=None,
    properties: Sequence[tuple[str, tuple]] = (),
    compare: Callable | None = None,
    convert: Callable | None = None,
    describe: Callable | None = None,
    check_form: bool = True,
    call: Callable | None = None,
    diagnosis: Callable | None = None,
    arg_names: Sequence[str] | None = None,
    modified_mistake: Mistake = INPUT_MODIFIED,
    note: Callable = error_note,
) -> CheckReport:
    """Run ``fn`` on every case ``(name, args)``, check the property battery, compare with ``reference(*args)`` and
    name the mistake.

    Args:
        n_out: how many arrays ``fn`` returns (1: a single array).
        names: the names of the returned parts, for the messages (e.g. ``("g", "s", "U")``).
        not_answer: the mistake to name when the answer does not have that form.
        hint: ``hint(exc) -> str | None``, what an exception probably means.
        properties: edge cases ``(name, args)`` run first (:func:`property_cases` names them).
        compare: ``compare(answer, expected) -> bool`` on converted answers (default :func:`same_arrays`); also
            the comparison of the mistake models, unless a mistake brings its own.
        convert: ``convert(out) -> answer | None`` (default :func:`as_arrays` with ``n_out``).
        describe: ``describe(answer, expected) -> (text, got, want)`` for a wrong answer; ``error_note(got,
            want)`` is added when no mistake is named.
        check_form: check the result's type, dtype and shape against the reference's raw result.
        call: ``call(fn, args) -> out`` when the learner's function is not called as ``fn(*args)``; it may report
            a case's own failure by returning a :class:`PropertyFailure`.
        diagnosis: ``diagnosis(args_per_case, answers) -> obj`` with ``obj.for_case(i) -> Mistake | None``, when
            one :class:`~flashmath.exercises._report.Diagnosis` over the whole catalogue does not fit.
        arg_names: the names of ``fn``'s parameters, so that an argument changed in place is named.
        modified_mistake: the message for an argument changed in place (default :data:`INPUT_MODIFIED`, whose
            examples are generic; an exercise may give examples in its own names).
        note: ``note(got, want) -> str``, added to a wrong answer's message when no mistake is named (default
            :func:`~flashmath.exercises._report.error_note`).
    """
    report = CheckReport(title)
    compare = compare or same_arrays
    convert = convert or (lambda out: as_arrays(out, n_out))
    names = names or tuple(f"part {i + 1}" for i in range(n_out))
    shows_masks = describe is None and n_out == 1  # the default message shows a boolean mask as True/False
    describe = describe or _default_describe(names, n_out)
    cases = list(properties) + list(cases)
    answers, problems, raws = [], [], []
    for name, args in cases:
        copies = copy_args(args)
        if call is None:
            out, ok = run(report, name, fn, *copies, hint=hint)
        else:
            out, ok = run(report, name, call, fn, copies, hint=hint)
        problem = None
        if ok and (k := changed_arg(args, copies)) is not None:
            problem = modified_message(k, arg_names, modified_mistake)
        elif ok and isinstance(out, PropertyFailure):
            problem, out = out.message, out.out
        answers.append((ok, convert(out) if ok else None))
        problems.append(problem)
        raws.append(out)
    all_args, all_answers = [args for _, args in cases], [answer for _, answer in answers]
    named = (
        diagnosis(all_args, all_answers)
        if diagnosis is not None
        else Diagnosis(all_args, all_answers, mistakes, compare)
    )
    raw_expected = [
        reference(*args) if ok and problems[i] is None else None
        for i, ((_, args), (ok, _)) in enumerate(zip(cases, answers, strict=False))
    ]
    failing = [
        i
        for i, (ok, answer) in enumerate(answers)
        if ok
        and problems[i] is None
        and answer is not None
        and (
            (check_form and form_problem(raws[i], raw_expected[i], n_out, names) is not None)
            or not compare(answer, convert(raw_expected[i]))
        )
    ]
    # A mistake is named only when it explains every failing case of the run (a quiz's questions are each their
    # own: its diagnosis says so with per_case = True)
    whole_run = {} if getattr(named, "per_case", False) else explaining(named, failing)

    def mistake_for(i: int) -> Mistake | None:
        return named.for_case(i) if getattr(named, "per_case", False) else whole_run.get(i)

    for i, ((name, args), (ok, answer)) in enumerate(zip(cases, answers, strict=False)):
        if not ok:
            continue
        if (problem := problems[i]) is not None:
            report.add(name, False, problem)
            continue
        raw = raw_expected[i]
        expected = convert(raw)
        if answer is None:
            # one output: its name ("expected the kind"); several: their tuple ("expected (A, lse)")
            if len(names) == 2:  # a pair: "expected (A, lse)", in Chinese the two names joined by 和
                form = _("expected ({first}, {second})").format(first=names[0], second=names[1])
            elif len(names) > 2:
                # translated names are listed in the language's own brackets, code names as the tuple they are in
                # code ("expected (g_new, s_new, A'_new)")
                form = (
                    _("expected ({form})").format(form=_(", ").join(names))
                    if _wide(names)
                    else _("expected {tuple}").format(tuple="(" + ", ".join(names) + ")")
                )
            elif isinstance(raws[i], str) and raw is not None and np.ndim(raw) == 0:
                # a word for a number ('full' for 2): the number expected and the word got (review rev-j-13-9)
                form = _("expected {what} = {expected}, got {got}").format(
                    what=names[0], expected=fmt(raw), got=repr(raws[i])
                )
            else:
                form = _("expected {name}").format(name=names[0])
            # a Chinese form may end with its full stop; joined() adds its own between the two sentences
            report.add(name, False, joined(form.rstrip("\u3002"), not_answer.message()) if not_answer else form)
            continue
        if check_form and (form_text := form_problem(raws[i], raw, n_out, names)) is not None:
            # a wrong shape, or a mask that is not boolean and wrong in its values too (a 0/-inf bias): a model
            # of the checker's own may say which it is
            if WRONG_SHAPE.message() in form_text:
                mistake = mistake_for(i)  # a named mistake explains the shape: its message replaces the generic one
                if mistake is not None:
                    form_text = form_text.replace(WRONG_SHAPE.message(), mistake.message(args))
                elif all(getattr(m, "name", None) != WRONG_SHAPE.name for m in (*(mistakes or ()), not_answer)):
                    # no mistake of this exercise is called a wrong shape: the rule alone, without the name
                    form_text = form_text.replace(WRONG_SHAPE.message(), _(WRONG_SHAPE.fix))
            elif BOOL_OUT.message() in form_text and not _zero_one(raws, answers) and (mistake := mistake_for(i)):
                form_text = form_text.replace(BOOL_OUT.message(), mistake.message(args))
            report.add(name, False, form_text)
            continue
        if compare(answer, expected):
            report.add(name, True)
            continue
        if shows_masks and _is_mask(raws[i]) and _is_mask(raw):
            answer, expected = np.asarray(raws[i]), np.asarray(raw)  # fmt shows True/False, not 1./0.
        text, got, want = describe(answer, expected)
        mistake = mistake_for(i)
        if mistake is None:
            report.add(name, False, text + note(got, want))
        else:
            difference = largest_difference(got, want) if mistake.show_difference else ""
            report.add(name, False, joined(f"{text}{difference}", mistake.message(args)))
    return report.in_order([name for name, _ in cases])


def _wide(names) -> bool:
    """True when a name holds a wide character (a translated name, "第一份"): the names are then listed with the
    language's own separator (``_(", ")``), code names ("A, lse") with a comma."""
    return any(display_width(name) > len(name) for name in names)


class PropertyFailure:
    """What a ``call`` hook returns when a case broke a property of its own (read twice, buffered the input)."""

    def __init__(self, message: str, out=None):
        self.message, self.out = message, out


class Said(Mistake):
    """A diagnosis without a model (for the ``diagnosis`` and ``not_answer`` hooks): its message is its whole text,
    ``Said(text)``."""

    def __init__(self, text: str):
        super().__init__(text, "")

    def message(self, args: tuple | None = None) -> str:
        return _(self.name)  # a module-level Said(N_(...)) is translated here; a text built at run time is itself


# The quizzes (11.2, 14.1): one case per question, through the harness


class _Verdicts:
    """The harness's ``diagnosis`` hook for a quiz: why the learner's choice is wrong, ``verdict(key, choice)[1]``."""

    per_case = True  # each question is its own: a verdict explains its one answer

    def __init__(self, verdict, cases, answers):
        self.verdict, self.cases, self.answers = verdict, cases, answers

    def for_case(self, i: int) -> Said:
        return Said(self.verdict(self.cases[i][0], self.answers[i])[1])


def check_quiz(title: str, answers, questions, *, what: str, parse, right, verdict) -> CheckReport:
    """Check a quiz ``answers = {key: choice}`` through :func:`~flashmath.exercises._cases.check_function`.

    Args:
        questions: ``(case name, key)`` per question, in order.
        what: what ``answers`` maps, for the message when it is not a dict (``"quantity: place"``).
        parse: ``parse(answers, key) -> choice``, or a :class:`~flashmath.exercises._cases.PropertyFailure` for no
            answer yet or a choice that is not one of the choices.
        right: ``right(key) -> set`` of the right choices.
        verdict: ``verdict(key, choice) -> (what was wrong, why)`` for a wrong choice.
    """
    if not isinstance(answers, dict):
        report = CheckReport(title)
        report.add(
            _("the answers"),
            False,
            _("expected a dict {{{what}}}, got {type}").format(what=_(what), type=type(answers).__name__),
        )
        return report
    return check_function(
        title,
        answers,
        [(name, (key,)) for name, key in questions],
        lambda key: (key, right(key)),
        (),
        n_out=1,
        names=(_("the answer"),),
        call=lambda answers, args: parse(answers, args[0]),
        convert=lambda choice: choice,
        compare=lambda choice, expected: choice in expected[1],
        describe=lambda choice, expected: (verdict(expected[0], choice)[0], choice, expected),
        diagnosis=functools.partial(_Verdicts, verdict),
        check_form=False,
    )
