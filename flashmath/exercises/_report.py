"""What every checker shares: the report, running the learner's code safely, and naming mistakes.

A checker runs the learner's function on a list of cases, then compares each answer with the right one. When an
answer is wrong it asks the chapter's catalogue of classic mistakes (:class:`Mistake`) which wrong implementation
gives the same answer, and says so: the mistake's name, what was probably done, and what to change. When two
mistakes give the same wrong answer on a case, the one that matches the learner's answers on more cases of the run
is named (a max started at 0 and a max never subtracted both give NaN on ``[-1000, -1001]``; only one of them also
survives ``[1e4, ...]``). A mistake is named only when it explains the whole run: one of its models gives the
learner's answer on every case that failed (:meth:`Diagnosis.explaining`), or, for code with two slips, when two
mistakes together explain every failing case (:meth:`Diagnosis.covering`); a model that matches one failing case and
not the others says nothing about the learner's code, so the report then names the requirement alone.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from flashmath.i18n import aside, get_language
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

PASS, FAIL = N_("PASS"), N_("FAIL")


@dataclass
class CheckReport:
    """The outcome of a checker: one ``(name, ok, message)`` per case."""

    title: str
    cases: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every case passed (and there was at least one)."""
        return bool(self.cases) and all(ok for _, ok, _ in self.cases)

    def add(self, name: str, ok: bool, message: str = "") -> None:
        self.cases.append((name, bool(ok), message))

    def in_order(self, names) -> CheckReport:
        """Put the cases in the order of ``names`` (a checker records the cases that raised first); return self."""
        rank = {name: i for i, name in enumerate(names)}
        self.cases.sort(key=lambda case: rank.get(case[0], len(rank)))
        return self

    def __repr__(self) -> str:
        n_ok = sum(ok for _, ok, _ in self.cases)
        lines = [
            _("{title}: {passed} of {total} cases passed").format(title=self.title, passed=n_ok, total=len(self.cases))
        ]
        printed: list[tuple[str, str]] = []  # (message, case) of the long messages printed so far, each once
        for name, ok, message in self.cases:
            if not ok and message:
                message = _shortened(name, message, printed)
            lines.append(
                f"  {_(PASS) if ok else _(FAIL)}  {_case_name(name)}"
                + ("" if ok or not message else _(": {message}").format(message=_ended(message)))
            )
        if self.passed:
            lines.append(_("All good."))
        return "\n".join(lines)


def _ended(message: str) -> str:
    """``message`` as a Chinese sentence ends, with a full stop ("。") when it has none (an expected/got message
    assembled from parts ends with a value: "应为 0，得到的是 nan"); English messages are printed as they are."""
    if get_language().startswith("zh") and not message.endswith(("\u3002", "\uff01", "\uff1f")):
        return message + "\u3002"
    return message


SAME_AS_ABOVE = N_('the same diagnosis as for the case "{case}" above')
_LONG = 60  # a message at least this long is printed once; a later case that ends with it refers to it
_SEPARATORS = (": ", "\uff1a", "\u3002")  # where a message's own words end and its reason starts: ": ", "：", "。"


class Instruction(str):
    """A failure message that tells the learner what to write (``"no answer yet: write 'registers', ..."``), not why
    an answer is wrong: it has no reason for :data:`SAME_AS_ABOVE` to stand for, so :func:`_shortened` prints it in
    full for every case (review zhrev-ao 11-2: the Chinese of 11.2's instruction is over :data:`_LONG` characters, the
    English is not, and only the Chinese report read "no answer yet: " followed by a reference to an earlier case)."""


def _shortened(name: str, message: str, printed: list[tuple[str, str]]) -> str:
    """``message`` for the failing case ``name``, with the reason of a long message already printed for an earlier
    case replaced by :data:`SAME_AS_ABOVE`, which names that case by the label printed for it: one cause that fails
    several cases is explained once, and every case is still listed with its own words (its expected and got
    values, which may equal the earlier case's: "device 0 of P = 2: expected second chunk = 3, got 4: the same
    reason as for ..." says both what this case got and why). An :class:`Instruction` is printed as it is."""
    if isinstance(message, Instruction):
        return message
    for earlier, case in printed:
        if message.endswith(earlier):
            keep = len(message) - len(earlier) + _reason_start(earlier)
            same = _(SAME_AS_ABOVE).format(case=_case_name(case))
            if (opened := _unclosed_bracket(message[:keep])) >= 0:
                # the reason starts inside a note in parentheses ("got nan (NaN: ..."): the note is replaced whole,
                # so its parenthesis is closed ("got nan (the same diagnosis as for the case ... above)")
                return aside(message[:opened].rstrip(), same.rstrip("\u3002"))
            return message[:keep] + same
    if len(message) >= _LONG:
        printed.append((message, name))
    return message


def _reason_start(message: str) -> int:
    """Where the reason of a message starts: at the named mistake ("looks like ..."), else after its first
    separator (``"expected x = 1, got 2: "`` are the case's own words), 0 when it has neither, and 0 for an
    exception explained by a hint (``"and, or, not and if take one truth value, ...: ... (raised ValueError: ...)"``,
    :func:`run`), whose every word is the reason: a repeat says only "the same diagnosis as for the case ... above"
    (review zhrev-ah 13-2), not the hint's first clause followed by it."""
    looks_like = _(LOOKS_LIKE).split("{name}")[0]  # "looks like " in the selected language
    if looks_like and looks_like in message:
        return message.index(looks_like)
    raised = _(RAISED).split("{error}")[0]  # "raised " in the selected language
    opened = _unclosed_bracket(message[:-1]) if message.endswith((")", "\uff09")) else -1
    if raised and opened > 0 and not message.startswith(raised) and message[opened + 1 :].startswith(raised):
        return 0
    # the case's own words run to the value it got: a name in front ("A：应为 1，得到 2：...", where the Chinese
    # puts the output's name first) is not where the reason starts
    got = _(GOT)
    start = message.find(got) + len(got) if got in message else 0
    ends = [message.find(sep, start) + len(sep) for sep in _SEPARATORS if sep in message[start:]]
    return min(ends) if ends else 0


def _unclosed_bracket(text: str) -> int:
    """Where the outermost parenthesis of ``text`` that is not closed opens ("(" or "\uff08"), -1 when every one is."""
    opened: list[int] = []
    for i, ch in enumerate(text):
        if ch in "(\uff08":
            opened.append(i)
        elif ch in ")\uff09" and opened:
            opened.pop()
    return opened[0] if opened else -1


LOOKS_LIKE = N_("looks like {name}: {fix}")
GOT = N_(", got ")  # what separates a case's expected value from the value it got (its translation: "，得到")
RAISED = N_("raised {error}: {text}")


@dataclass(frozen=True)
class Mistake:
    """A classic mistake of one exercise.

    Attributes:
        name: a short name, quoted in the message (tests look for it).
        fix: what was probably done and what to change.
        models: wrong implementations with the exercise's signature; the learner's answer is compared with theirs.
        compare: ``compare(answer, model_answer) -> bool``, when the checker's own comparison does not fit (for
            example to compare only ``(g, s)`` of a ``(g, s, A')`` triple).
        show_difference: when it is named, the message also gives the largest difference (a mistake of the last
            bits, whose expected and got print alike).
        cause: ``cause(*args) -> str | None``, when one mistake fails different cases for different reasons: the
            explanation for the case with these arguments (already translated), which replaces ``fix`` there.
        part: the part of the code the mistake is in (``"the shard index"``), when several mistakes of a catalogue
            are other ways to write that one part: a code has only one of them, so :meth:`Diagnosis.covering` never
            names two of one part together (each would explain its cases by coincidence).
    """

    name: str
    fix: str
    models: tuple = ()
    compare: Callable | None = None
    show_difference: bool = False
    cause: Callable | None = None
    part: str = ""

    def message(self, args: tuple | None = None) -> str:
        """The message, for the case with arguments ``args`` when given (see ``cause``)."""
        fix = quiet(self.cause, *args) if self.cause is not None and args is not None else None
        return _(LOOKS_LIKE).format(name=_(self.name), fix=fix or _(self.fix))


PROPERTY_PREFIX = "property: "  # how _cases.property_cases names a property case


def _case_name(name: str) -> str:
    """A case's name in the selected language (the checkers build their names with ``_()``; the property prefix
    is added by :func:`flashmath.exercises._cases.property_cases` and translated here)."""
    if name.startswith(PROPERTY_PREFIX):
        return _("property: {what}").format(what=name[len(PROPERTY_PREFIX) :])
    return name


def quiet(fn, *args):
    """``fn(*args)`` with numpy's warnings silenced; None if it raises (for the mistake models)."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    except Exception:  # a model that cannot run on a case simply does not match it
        return None


class Diagnosis:
    """Which mistake of a catalogue explains each wrong answer of a run.

    Args:
        cases: the arguments of each case (a tuple per case).
        answers: the learner's answer per case (None where the function raised or returned nothing usable).
        mistakes: the catalogue.
        same: ``same(answer, model_answer) -> bool``, the default comparison.
    """

    def __init__(self, cases, answers, mistakes, same):
        self._rows = []  # per model of each mistake: (mistake, [matches the learner's answer on case i])
        for mistake in mistakes:
            compare = mistake.compare or same
            for model in mistake.models:
                row = []
                for args, answer in zip(cases, answers, strict=False):
                    wrong = None if answer is None else quiet(model, *args)
                    row.append(wrong is not None and bool(quiet(compare, answer, wrong)))
                self._rows.append((mistake, row))

    def for_case(self, i: int) -> Mistake | None:
        """The mistake whose model gives the learner's answer on case ``i`` and on the most cases of the run (the
        first in the catalogue on a tie), or None."""
        candidates = [(sum(row), -k, mistake) for k, (mistake, row) in enumerate(self._rows) if row[i]]
        return max(candidates, key=lambda c: c[:2])[2] if candidates else None

    def explaining(self, failing) -> Mistake | None:
        """The first mistake of the catalogue one of whose models gives the learner's answer on every case of
        ``failing`` (the indices of the cases the learner's answer failed), or None."""
        failing = list(failing)
        if not failing:
            return None
        for mistake, row in self._rows:
            if all(row[i] for i in failing):
                return mistake
        return None

    def covering(self, failing) -> dict[int, Mistake]:
        """Two mistakes that together explain every case of ``failing``, when no one mistake does: ``{case index:
        mistake}``, each failing case given to the first of the two (in the catalogue's order) whose model gives the
        learner's answer there, and each of the two explaining a failing case the other does not. Empty when no
        pair does (a learner's code with two slips, say a max started at 0 and Python's ``max``, which drops NaN),
        and never two mistakes of one :attr:`Mistake.part`."""
        failing = list(failing)
        rows = self._rows
        for a, (first, row_a) in enumerate(rows):
            for second, row_b in rows[a + 1 :]:
                if second is first or not all(row_a[i] or row_b[i] for i in failing):
                    continue
                if first.part and first.part == second.part:
                    continue  # two ways to write one part of the code: a code has only one of them
                if all(row_a[i] for i in failing) or all(row_b[i] for i in failing):
                    continue  # one alone explains the run: explaining() names it
                return {i: first if row_a[i] else second for i in failing}
        return {}


class ConsistentDiagnosis(Diagnosis):
    """A :class:`Diagnosis` that first looks for the mistake, or the two mistakes, among the models that also give
    the learner's answer on every case that passed (a model that fails a case the learner got right is not the
    learner's code), and only then among all models. Without this, in 2.2 an fmin merge with no guard gives the two
    failing answers of ``g = max(g1, g2)`` with no guard, whose Python max drops a NaN, and "the min of the two maxima"
    would be named, though it fails most of the cases that passed; in 8.2 a 0/-inf bias followed by ``P @ V`` would be
    named "the scores multiplied by the mask", though that model fails the masked prefix the learner got right.

    With ``pairs_first`` (2.2's rule) two consistent mistakes are named before one consistent mistake that explains
    every failing case; without it (8.2's), the one mistake first. With ``consistent_only`` (2.2's rule) a mistake is
    named only when it is consistent: when none is, the failing cases get their requirement alone, never a mistake
    whose model fails a case the learner passed (review rev-h-02-1: an if/else merge, right but for a NaN in g1, was
    told "the min of the two maxima")."""

    def __init__(self, cases, answers, mistakes, same, pairs_first: bool = True, consistent_only: bool = False):
        super().__init__(cases, answers, mistakes, same)
        self._pairs_first = pairs_first
        self._consistent_only = consistent_only
        self._answered = [answer is not None for answer in answers]
        self._all_rows = self._rows

    def _explained(self, failing, how):
        failing = list(failing)
        passing = [i for i, answered in enumerate(self._answered) if answered and i not in failing]
        self._rows = [(mistake, row) for mistake, row in self._all_rows if all(row[i] for i in passing)]
        try:
            found = how(self, failing)
        finally:
            self._rows = self._all_rows
        return found

    def explaining(self, failing) -> Mistake | None:
        one = None if self._pairs_first else self._explained(failing, Diagnosis.explaining)
        if one is not None:
            return one
        if self._explained(failing, Diagnosis.covering):  # two consistent mistakes: covering() names them
            return None
        found = self._explained(failing, Diagnosis.explaining)
        return found if found is not None or self._consistent_only else super().explaining(failing)

    def covering(self, failing) -> dict[int, Mistake]:
        found = self._explained(failing, Diagnosis.covering)
        return found if found or self._consistent_only else super().covering(failing)


def explaining(diagnosis, failing) -> dict[int, Mistake]:
    """Which mistake explains each failing case of a run, ``{case index: mistake}``, from any diagnosis object: one
    mistake that explains every failing case (its ``explaining``), else two that together do (its ``covering``);
    a diagnosis without them is asked ``for_case`` on each failing case, and trusted only where it names the same
    mistake, or two mistakes, on all of them. Empty when nothing explains every failing case."""
    failing = list(failing)
    if not failing:
        return {}
    if hasattr(diagnosis, "explaining"):
        one = diagnosis.explaining(failing)
        if one is not None:
            return dict.fromkeys(failing, one)
        return diagnosis.covering(failing) if hasattr(diagnosis, "covering") else {}
    named = {i: diagnosis.for_case(i) for i in failing}
    kinds = set(named.values())
    return named if None not in kinds and len(kinds) <= 2 else {}


def run(report: CheckReport, name: str, fn, *args, hint=None):
    """Call ``fn(*args)``; return ``(result, True)``, or record a failure and return ``(None, False)``.

    ``hint(exc) -> str | None`` may add what the exception probably means; it comes first, and the exception's own
    text follows in parentheses. A hint with a second parameter is called ``hint(exc, args)``, for a text that
    depends on the inputs (a batched-array hint only for batched input).
    """
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow warnings would print temporary paths
            return fn(*args), True
    except NotImplementedError:
        report.add(name, False, _("not implemented yet"))
    except Exception as exc:  # the learner's code may raise anything; report it, don't propagate
        extra = None if hint is None else hint(exc, args) if _takes_args(hint) else hint(exc)
        raised = _(RAISED).format(error=type(exc).__name__, text=str(exc).strip())
        # our explanation first, in the learner's language; the exception's own (English) text after it
        report.add(name, False, aside(extra, raised) if extra else raised)
    return None, False


def _takes_args(hint) -> bool:
    """True when ``hint`` has a second parameter, for the arguments of the call that raised."""
    try:
        return len(inspect.signature(hint).parameters) > 1
    except (TypeError, ValueError):
        return False


def pick(mistakes, *names):
    """The mistakes of a catalogue with these names, in that order."""
    by_name = {mistake.name: mistake for mistake in mistakes}
    return tuple(by_name[name] for name in names)


def fmt(a, other=None, start: int | None = None) -> str:
    """An array for a message: in full when it has at most 8 numbers, else its shape and four of its values.

    The four values are its first ones, or, when ``other`` (the array it is compared with, of the same shape) agrees
    with it there, the four from the first position where the two differ (:func:`first_difference`), so that the
    expected and the got previews of one message show where they part; ``start`` (a flat position) overrides that
    position, for a message about one particular entry (the first NaN of a got array, say). The values have 4
    decimals, or, when the two previews would print alike while the numbers differ, as many more as it takes to tell
    them apart (expected ``[0.124974]``, got ``[0.125]``, not ``[0.125]`` twice); a single number has 6 significant
    digits, or more the same way (:func:`apart`). A boolean array (a mask) is shown as ``True``/``False``, not as the
    numbers ``1.``/``0.``.
    """
    a = np.asarray(a)
    if a.dtype != np.bool_:
        a = a.astype(np.float64)
    b = _numbers_like(other, a)
    if a.ndim == 0:
        if a.dtype == np.bool_:
            return str(a.item())
        return apart(float(a.item()), float(b.item()))[0] if b is not None else f"{a.item():.6g}"  # 2, not "2."

    if a.size <= 8:
        return _show(a, _decimals(a, b))
    if start is None:
        start = first_difference(a, other) if other is not None else 0
    if start < 4:
        shown = slice(0, 4)
        first = _show(a.ravel()[shown], _decimals(a.ravel()[shown], None if b is None else b.ravel()[shown]))[:-1]
        return _("an array of shape {shape} starting {first}, ...]").format(shape=a.shape, first=first)
    shown = slice(start, start + 4)
    values = _show(a.ravel()[shown], _decimals(a.ravel()[shown], None if b is None else b.ravel()[shown]))[:-1]
    return _("an array of shape {shape}, from {at} on {values}, ...]").format(
        shape=a.shape, at=at(np.unravel_index(start, a.shape)), values=values
    )


def _show(values, precision: int = 4) -> str:
    """``values`` as numpy prints them, on one line, with ``precision`` decimals; a boolean as ``True`` (not numpy's
    padded ``" True"``)."""
    return np.array2string(values, precision=precision, separator=", ", formatter={"bool": str}).replace("\n", "")


def _numbers_like(other, a):
    """``other`` as a float64 array of ``a``'s shape, for the digits :func:`fmt` prints; None for a mask, another
    shape or anything that is not numbers."""
    if other is None or a.dtype == np.bool_:
        return None
    try:
        b = np.asarray(other, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return b if b.shape == a.shape and np.asarray(other).dtype != np.bool_ else None


def _decimals(a, b) -> int:
    """The decimals :func:`fmt` prints ``a`` with: 4, or, when ``b`` (what it is compared with) differs from it but
    prints alike with 4, the fewest up to 17 with which the two print differently."""
    if b is None or a.dtype == np.bool_ or np.array_equal(a, b, equal_nan=True):
        return 4
    for precision in range(4, 18):
        if _show(a, precision) != _show(b, precision):
            return precision
    return 4


def first_difference(a, b) -> int:
    """The first flat position where ``a`` and ``b`` (of one shape) differ by more than rounding (1e-9 relative;
    NaN equal to NaN), else the first where their bits differ, else 0 (also for other shapes or non-numbers)."""
    try:
        a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return 0
    if a.shape != b.shape:
        return 0
    with np.errstate(invalid="ignore", over="ignore"):
        apart = ~np.isclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)
    if not apart.any():
        apart = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return int(np.argmax(apart)) if apart.any() else 0


def same(a, b, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
    """Two answers agree: same shape, equal to ``rtol`` and ``atol`` (NaN equal to NaN, inf to inf of the same
    sign); False for anything that is not an array of numbers."""
    try:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def close(a: float, b: float) -> bool:
    """Two floats agree: NaN with NaN, an infinity exactly, else to 1e-9 relative."""
    if np.isnan(b):
        return bool(np.isnan(a))
    if np.isinf(b):
        return a == b
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-12))


# The largest relative error error_note blames on float32 alone: its rounding (about 6e-8 a step) grown over a few
# dozen steps stays well below it. Above it, a formula off by 1e-4 (review zhrev-j 13-1) and float32 on scores near
# 800 (review rev11-b 3.1) look alike, so the hint names both.
FLOAT32_EXPLAINS = 1e-5


def error_note(actual, expected, *, precision_hint: bool = True, rtol: float = 1e-9, atol: float = 1e-12) -> str:
    """Where two arrays of one shape differ most, e.g. '; largest difference 2.1e-08 at [0, 3] (...)'.

    When they agree to 1e-3 relative (they print alike) it adds a hint: up to :data:`FLOAT32_EXPLAINS` relative,
    was part of it computed in float32?; above it, both causes: a wrong formula, or float32 on large numbers. Its
    figure is the largest difference over the largest expected magnitude (an entry expected to be 0 has no relative
    error of its own). ``precision_hint=False`` leaves the hint out, for an exercise whose answer must compute in
    float32 and is compared with a tolerance that float32 meets (11.1): there a lower precision explains nothing.
    Empty when the shapes differ or nothing finite differs. Two boolean arrays (masks): :func:`first_mismatch`.
    A NaN where a number was expected (or the other way round) is named first; the largest difference among the
    finite numbers follows only when they too differ by more than the check's tolerance (``rtol``, ``atol``: those
    of :func:`same`), since a rounding difference of 1e-16 beside a NaN reads like a second mistake (review
    zhrev-aq, note on ``check_ring_step``).
    """
    if _both_boolean(actual, expected):
        return first_mismatch(actual, expected)
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return ""
    note = ""
    nan_moved = np.argwhere(np.isnan(actual) != np.isnan(expected))
    if nan_moved.size:
        where = tuple(nan_moved[0])
        note = _("; got {got:.6g} at {at} where {expected:.6g} was expected").format(
            got=actual[where], at=at(where), expected=expected[where]
        )
    finite = np.isfinite(actual) & np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(actual - expected), 0.0)
    if not finite.any() or diff.max() == 0 or not np.isfinite(diff.max()):
        return note
    if nan_moved.size and np.allclose(actual[finite], expected[finite], rtol=rtol, atol=atol):
        return note  # the NaN is the failure: the finite numbers agree to the check's tolerance
    note += largest_difference(actual, expected)
    if (
        precision_hint
        and not nan_moved.size
        and np.array_equal(np.isinf(actual), np.isinf(expected))
        and np.allclose(actual[finite], expected[finite], rtol=1e-3, atol=1e-6)
    ):  # rounding alone: NaN and inf where expected, and every finite number close (a NaN hidden is not float32)
        # relative to the largest expected magnitude: an entry expected to be 0 (a sum that cancels) has no
        # relative error of its own, and dividing by it would print a meaningless 1e+291
        scale = np.max(np.abs(expected[finite]))
        if scale > 0 and diff.max() / scale <= FLOAT32_EXPLAINS:
            note += _(
                ": they agree to {err:.1e} relative. Was part of it computed in a lower precision than "
                "float64, such as float32 (about 1e-7 relative)? Compute in float64"
            ).format(err=diff.max() / scale)
        elif scale > 0:  # a wrong formula (review zhrev-j 13-1), or float32 on large numbers (review rev11-b 3.1):
            # a float32 score near 800 is off by about 1e-4 and exp passes that on as a relative error; name both
            note += _(
                ": they agree only to {err:.1e} relative. Either the formula is wrong, or part of it ran in a lower "
                "precision than float64, such as float32, whose error grows with the size of the numbers (large "
                "scores amplify it): compute in float64 and check the formula"
            ).format(err=diff.max() / scale)
        else:
            note += _(
                ": every expected value is 0 and they differ by {err:.1e}. Was part of it computed in a lower "
                "precision than float64, such as float32? Compute in float64"
            ).format(err=diff.max())
    return note


def largest_difference(actual, expected) -> str:
    """Where two arrays of one shape differ most among their finite numbers, e.g. '; largest difference 2.06 at
    [1, 0] (expected 1.27456, got 3.33865)', or '; largest difference 4.44e-16 at [0, 3] (expected
    0.12345678901234566, got 0.12345678901234522)' (:func:`apart`: the digits it takes to tell them apart); empty
    for one number, other shapes or no finite difference. Two boolean arrays (masks): :func:`first_mismatch`."""
    if _both_boolean(actual, expected):
        return first_mismatch(actual, expected)
    try:
        actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return ""
    if actual.shape != expected.shape or not actual.ndim:  # one number: the message already shows both
        return ""
    finite = np.isfinite(actual) & np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(actual - expected), 0.0)
    if not finite.any() or diff.max() == 0 or not np.isfinite(diff.max()):
        return ""
    where = np.unravel_index(np.argmax(diff), diff.shape)
    want, got = apart(float(expected[where]), float(actual[where]))
    return _("; largest difference {diff:.3g} at {at} (expected {expected}, got {got})").format(
        diff=diff[where], at=at(where), expected=want, got=got
    )


def _both_boolean(actual, expected) -> bool:
    return np.asarray(actual).dtype == np.bool_ and np.asarray(expected).dtype == np.bool_


def first_mismatch(actual, expected) -> str:
    """Where two boolean arrays of one shape first differ (row-major order), e.g. '; first mismatch at [0, 2]
    (expected True, got False)': a largest difference of 1 says nothing about a mask. Empty for one value, other
    shapes or equal arrays."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or not actual.ndim:
        return ""
    differ = np.argwhere(actual != expected)
    if not differ.size:
        return ""
    where = tuple(differ[0])
    return _("; first mismatch at {at} (expected {expected}, got {got})").format(
        at=at(where), expected=bool(expected[where]), got=bool(actual[where])
    )


def apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` with 6 significant digits, or with as many more (up to 17, all of a float64) as it takes for
    the two to print differently: 1.27456 and 3.33865, but 0.1234567891 and 0.1234567892."""
    for digits in range(6, 18):
        left, right = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if left != right:
            break
    return left, right


def at(index) -> str:
    """An array index for a message, in code (0-based) form: ``[1, 2]``."""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def modified(before, after) -> bool:
    """True when an input array was changed in place (NaN equal to NaN)."""
    return not np.array_equal(np.asarray(before), np.asarray(after), equal_nan=True)


INPUT_MODIFIED = Mistake(
    N_("the input modified in place"),
    N_(
        "your function changed an array it was given (for "
        "example x -= x.max() or q /= ...); work on a copy: x = x - x.max() or q = q / ..."
    ),
)
# Named by error_note, whose hint says "... computed in a lower precision than float64 ...".
LOWER_PRECISION = Mistake(
    N_("a lower precision"), N_("part of the computation ran in float32 or float16: compute in float64")
)
