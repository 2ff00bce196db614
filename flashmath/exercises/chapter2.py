"""Chapter 2: exercises 2.1 (the online normalizer), 2.2 (merge) and 2.3 (derivation: merge is associative)."""

from __future__ import annotations

import inspect
import math
import os
import sys
import tracemalloc

import numpy as np

from flashmath.exercises._cases import PropertyFailure, check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import LOOKS_LIKE, CheckReport, ConsistentDiagnosis, Diagnosis, Mistake, close, run
from flashmath.exercises.chapter1 import softmax_cases
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.i18n import joined
from flashmath.softmax import merge, online_normalizer


class OnePassVector:
    """A read-only 1-D sequence that counts how often it is swept and how many elements are read.

    Iterating over it (``for x_i in x``, and so ``max(x)`` or ``sum(x)``) is one pass; indexing counts single
    reads. Converting it to a numpy array raises TypeError: the exercise is to write the loop.
    """

    def __init__(self, values, keep_type: bool = False):
        self._values = [v if keep_type else float(v) for v in values]
        self.passes = 0
        self.reads = 0

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self):
        self.passes += 1
        for v in self._values:
            self.reads += 1
            yield v

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise TypeError(_("OnePassVector does not slice: read it element by element in one loop"))
        self.reads += 1
        return self._values[i]

    def __array__(self, dtype=None, copy=None):
        raise TypeError(_("this exercise reads x element by element (for x_i in x), not as a whole numpy array"))


def _pair(out):
    """``out`` as a pair of floats ``(g, s)``, or None."""
    try:
        g, s = (float(v) for v in out)
    except Exception:
        return None
    return g, s


def same_state(a, b) -> bool:
    """Two states ``(g, s)`` agree (NaN with NaN, infinities exactly, else to 1e-9).

    When the second (the expected state) has ``g = +inf``, only ``g`` is compared: the logsumexp ``g + log s`` is
    +inf whatever ``s`` is (the package keeps ``s`` = the number of +inf elements; ``inf - inf`` gives NaN).
    """
    a, b = _pair(a), _pair(b)
    if a is None or b is None:
        return False
    if b[0] == math.inf:
        return a[0] == math.inf
    return close(a[0], b[0]) and close(a[1], b[1])


# ---------------------------------------------------------------------------------------------------------------
# The mistake models: wrong running states, written as the loops a learner would write
# ---------------------------------------------------------------------------------------------------------------


def _np_max(a, b):
    return float(np.maximum(a, b))  # NaN propagates


def _python_max(a, b):
    return max(a, b)  # max(1.0, nan) is 1.0: NaN is lost


def _scan(x, step, *, g0=-math.inf, s0=0.0, guard=True, first=None, maximum=_np_max):
    """A running state over ``x``: ``g_i = maximum(g_{i-1}, x_i)``, ``s_i = step(s_{i-1}, g_{i-1}, g_i, x_i)``.

    ``guard`` skips elements while the max is still -inf (nothing seen); ``first(x_i)``, when given, sets the
    state at the first element that is not -inf instead of ``step``.
    """
    g, s = g0, s0
    for x_i in (float(v) for v in x):
        g_new = maximum(g, x_i)
        if guard and g_new == -math.inf:
            continue
        s = first(x_i) if first is not None and g == -math.inf else step(s, g, g_new, x_i)
        g = g_new
    return g, s


def _right_step(s, g, g_new, x_i):
    # s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
    return s * np.exp(g - g_new) + np.exp(x_i - g_new)


def _from_zero(x, masked_guard=False, empty_sum_guard=False):
    """A running max started at 0; ``masked_guard`` returns (-inf, 0) for a fully masked row, ``empty_sum_guard``
    whenever the sum ends at 0 (which a max started at 0 also gives where every exp underflows)."""
    if masked_guard and all(v == -math.inf for v in x):
        return -math.inf, 0.0
    g, s = _scan(x, _right_step, g0=0.0, guard=False)
    return (-math.inf, 0.0) if empty_sum_guard and s == 0 else (g, s)


def _log_domain(x):
    """The state through the log domain, ``lse = logaddexp(lse, x_i)`` and ``s = exp(lse - g)``, without a guard for
    nothing seen: an empty or fully masked x gives exp(-inf - (-inf)) = NaN."""
    g, lse = -math.inf, -math.inf
    for x_i in (float(v) for v in x):
        g, lse = float(np.maximum(g, x_i)), float(np.logaddexp(lse, x_i))
    return g, float(np.exp(lse - g))


def _closed_form(x, term=np.exp, shift=True):
    """``(g, sum term(x_j - g))`` (or ``sum term(x_j)`` without ``shift``), for mistakes outside the recurrence."""
    x = np.asarray(x, dtype=np.float64)
    g = float(np.max(x))
    return g, float(np.sum(term(x - g if shift else x)))


def _guarded_state(model, x, **kw):
    """``model(x, **kw)`` behind the course's guard: an empty or fully masked x gives the empty state (-inf, 0)."""
    if all(float(v) == -math.inf for v in x):
        return -math.inf, 0.0
    return model(x, **kw)


def _from_first(x):
    """Started from the first element, (g, s) = (x_1, 1), then the recurrence over the rest without a guard: a
    leading -inf gives exp(-inf - (-inf)) = NaN (an empty x raises, which the hint names)."""
    x = [float(v) for v in x]
    if not x:
        raise IndexError("empty")
    with np.errstate(invalid="ignore"):
        return _scan(x[1:], _right_step, g0=x[0], s0=1.0, guard=False)


def _any_masked_empty(x):
    """The right state, but (-inf, 0) as soon as one element is -inf."""
    if any(float(v) == -math.inf for v in x):
        return -math.inf, 0.0
    return _scan(x, _right_step)


STATE_NOT_SUBTRACTED = Mistake(
    N_("the max not subtracted"),
    N_(
        "sum(exp(x_i)) overflows to inf for large x: add exp(x_i - g_i), relative to the "
        "running max, and rescale the old sum when the max grows"
    ),
    (lambda x: _closed_form(x, shift=False),),
)
NO_RESCALE = Mistake(
    N_("the rescale missing"),
    N_(
        "when the max grows from g_{i-1} to g_i the old sum is relative to the old max: multiply it "
        "by exp(g_{i-1} - g_i) before adding the new term (did you overwrite g before computing that "
        "factor?)"
    ),
    (lambda x: _scan(x, lambda s, g, gn, xi: s + np.exp(xi - gn)),),
)
RESCALE_ON_NEW = Mistake(
    N_("the rescale applied to the new term"),
    N_(
        "the factor exp(g_{i-1} - g_i) converts the OLD sum to the new max: s_i = s_{i-1} "
        "exp(g_{i-1} - g_i) + exp(x_i - g_i); the new term exp(x_i - g_i) is already relative to "
        "g_i"
    ),
    (
        lambda x: _scan(x, lambda s, g, gn, xi: s + np.exp(xi - gn) * np.exp(g - gn)),
        lambda x: _scan(x, lambda s, g, gn, xi: s + np.exp(xi - g) * np.exp(g - gn)),
    ),
)
INVERTED_RESCALE = Mistake(
    N_("the rescale inverted"),
    N_(
        "the factor is exp(g_{i-1} - g_i) = exp(old max - new max) <= 1, which shrinks the old "
        "sum; exp(g_i - g_{i-1}) grows it"
    ),
    (
        lambda x: _scan(x, lambda s, g, gn, xi: s * np.exp(gn - g) + np.exp(xi - gn)),
        lambda x: _scan(x, lambda s, g, gn, xi: s * np.exp(gn - g) + np.exp(xi - gn), first=lambda xi: 1.0),
    ),
)
OLD_MAX_TERM = Mistake(
    N_("the new term relative to the old max"),
    N_(
        "the new term is exp(x_i - g_i), with the new max g_i (compute g_i first); exp(x_i - "
        "g_{i-1}) can be above 1 and overflow"
    ),
    (
        lambda x: _scan(x, lambda s, g, gn, xi: s * np.exp(g - gn) + np.exp(xi - g)),
        lambda x: _scan(x, lambda s, g, gn, xi: s * np.exp(g - gn) + np.exp(xi - g), first=lambda xi: 1.0),
    ),
)
BASE_2 = Mistake(
    N_("a wrong base (2 or 10) instead of e"),
    N_("the sum is of natural exponentials: np.exp or math.exp, not 2 ** x or 10 ** x"),
    (
        lambda x: _guarded_state(_closed_form, x, term=np.exp2),
        lambda x: _guarded_state(_closed_form, x, term=lambda t: 10.0**t),
        lambda x: _scan(x, lambda s, g, gn, xi: s * np.exp2(g - gn) + np.exp2(xi - gn)),
        lambda x: _scan(x, lambda s, g, gn, xi: s * 10.0 ** (g - gn) + 10.0 ** (xi - gn)),
    ),
)
SWAPPED = Mistake(N_("(s, g) swapped"), N_("return the max first and the sum second: (g, s)"))
UNGUARDED = Mistake(
    N_("-inf - (-inf) while nothing is seen"),
    N_(
        "while the max is still -inf (nothing seen, or only masked elements) exp(g_{i-1} - g_i) is "
        "exp(-inf - (-inf)) = NaN. Skip such elements (keep s = 0), or treat the first finite element "
        "as a fresh start"
    ),
    (lambda x: _scan(x, _right_step, guard=False), _log_domain, _from_first),
)
PYTHON_MAX = Mistake(
    N_("Python's max dropping NaN"),
    N_(
        "Python's max(1.0, nan) returns 1.0 (every comparison with NaN is False), so a NaN went "
        "missing: test with math.isnan, or use np.maximum, which propagates NaN"
    ),
    (lambda x: _scan(x, _right_step, maximum=_python_max),),
)
TWO_PASSES = Mistake(
    N_("two passes over x"),
    N_(
        "the online normalizer reads each element once: one for loop that updates g and s together, "
        "no max(x) or sum(...) beforehand"
    ),
)
READ_TWICE = Mistake(
    N_("an element read twice"),
    N_(
        "every element is read once, in the one loop: read x[i] once per step into a variable (x_i = x[i]) and "
        "use it for both the max and the exponential; reading x[0] before a loop over all of x also reads it twice"
    ),
)
NOT_A_PAIR = Mistake(N_("not a pair"), N_("return the two numbers (g, s)"))
EMPTY_CRASH = Mistake(
    N_("the empty vector not handled"),
    N_(
        "an empty x (no element, or a row with no key) has the state of nothing seen, (g, s) = "
        "(-inf, 0): start from it instead of from x[0], and never take max(x) of nothing"
    ),
)
BUFFERED = Mistake(
    N_("the input buffered"),
    N_(
        "a one-pass function keeps a few numbers, not a copy of x: np.array(list(x)), list(x) or "
        "np.fromiter(x) store every element (and then read them again); update (g, s) as each element "
        "arrives"
    ),
)

NORMALIZER_MISTAKES = (
    STATE_NOT_SUBTRACTED,
    Mistake(
        N_("the max started at 0"),
        N_(
            "a running max that starts at 0 is never below 0: for [-3, -5] it stays 0 instead of -3. Start from "
            "g_0 = -inf (nothing seen) and s_0 = 0"
        ),
        (_from_zero, lambda x: _from_zero(x, masked_guard=True), lambda x: _from_zero(x, empty_sum_guard=True)),
    ),
    Mistake(
        N_("the sum started at 1"),
        N_("s_0 = 0 (the empty sum): with s_0 = 1 a fully masked row ends with s = 1 instead of 0"),
        (lambda x: _scan(x, _right_step, s0=1.0),),
    ),
    Mistake(
        N_("the first element counted twice"),
        N_(
            "starting from (g, s) = (x_1, 1) already counts x_1: then loop over the remaining elements only, or "
            "start from (-inf, 0) and loop over all of them"
        ),
        (lambda x: _scan(x, _right_step, g0=float(x[0]), s0=1.0),),
    ),
    BASE_2,
    NO_RESCALE,
    RESCALE_ON_NEW,
    INVERTED_RESCALE,
    OLD_MAX_TERM,
    Mistake(SWAPPED.name, SWAPPED.fix, (lambda x: tuple(reversed(_scan(x, _right_step))),)),
    Mistake(
        N_("the logsumexp returned instead of s"),
        N_(
            "g + ln(s) (or ln(s)) is the logsumexp, one number for the whole vector; the exercise asks for the "
            "state itself, the max g and the sum s = sum_i exp(x_i - g): return (g, s)"
        ),
        (lambda x: _log_of_sum(x, True), lambda x: _log_of_sum(x, False)),
    ),
    UNGUARDED,
    Mistake(
        N_("a -inf element taken for a fully masked row"),
        N_(
            "only a row whose every element is -inf is fully masked: a single -inf is a masked position, whose "
            "term exp(-inf - g) = 0 adds nothing. Skip it and go on; the state is (-inf, 0) only when the max is "
            "still -inf at the end"
        ),
        (_any_masked_empty,),
    ),
    PYTHON_MAX,
    TWO_PASSES,
    READ_TWICE,
    EMPTY_CRASH,
    BUFFERED,
    NOT_A_PAIR,
)


#: The length of the vector of the one-pass memory case, and the memory a one-pass function may use on it (bytes):
#: a copy of the vector takes at least 8 bytes per element.
MEMORY_CASE_LENGTH, MEMORY_LIMIT = 4_000, 8_000


def _log_of_sum(x, plus_g):
    """The right state with ``g + ln(s)`` (``plus_g``) or ``ln(s)`` in place of ``s``."""
    g, s = _scan(x, _right_step)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_s = float(np.log(np.float64(s)))
    return g, (g + log_s if plus_g else log_s)


def _normalizer_hint(exc) -> str | None:
    if isinstance(exc, IndexError | StopIteration) or "empty" in str(exc) or "zero-size" in str(exc):
        return EMPTY_CRASH.message()
    return None


def _call_one_pass(fn, args):
    """Call ``fn`` on a :class:`OnePassVector` of ``args[0]``; a second argument "memory" also measures the memory
    the call allocates. Returns the result, or a :class:`~flashmath.exercises._cases.PropertyFailure` when the
    function read an element twice, swept the vector twice or kept a copy of it."""
    x, *mode = args
    vec = OnePassVector(x, keep_type=np.asarray(x).dtype.kind in "iu")
    if mode == ["memory"]:
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        try:
            out = fn(vec)
        finally:
            peak = tracemalloc.get_traced_memory()[1] - start
            if not tracing:
                tracemalloc.stop()
        if peak > MEMORY_LIMIT:
            used = _("used {used:.0f} kB for {n} elements (a copy of x takes {copy:.0f} kB or more)").format(
                used=peak / 1000, n=len(x), copy=8 * len(x) / 1000
            )
            return PropertyFailure(joined(used, BUFFERED.message()), out)
    else:
        out = fn(vec)
    if vec.reads > len(x) or vec.passes > 1:
        count = _("read {reads} elements of a vector of length {n}").format(reads=vec.reads, n=len(x)) + (
            _(" in {passes} passes").format(passes=vec.passes) if vec.passes > 1 else ""
        )
        if _pair(out) is not None and not same_state(out, online_normalizer(np.asarray(x, dtype=np.float64))):
            return out  # a wrong state: the mistake models say more than the count
        return PropertyFailure(joined(count, (TWO_PASSES if vec.passes > 1 else READ_TWICE).message()), out)
    return out


def _state_describe(state, expected):
    return _state_message(state, expected, None), np.asarray(state), np.asarray(expected)


def _normalizer_reference(x, *mode):
    x = np.asarray(x, dtype=np.float64)
    if mode == ("memory",):  # finite values: the closed form, vectorised (the package's scan is slow on 4 000)
        g = float(x.max())
        return g, float(np.exp(x - g).sum())
    return tuple(float(v) for v in online_normalizer(x))


def normalizer_properties():
    """The property cases of exercise 2.1 (those of chapter 1 that apply, without float16, and the one-pass memory
    case), named with the prompt's words.

    Rules: an empty x and a fully masked row have the state (-inf, 0) (nothing seen); a +inf element gives g = +inf
    (the state's logsumexp is +inf; s is not compared); NaN in gives NaN out; integers are read as numbers.
    """
    props: list[tuple[str, tuple]] = [
        (_("an empty x"), (np.array([], dtype=np.float64),)),
        (_("a length-1 vector"), (np.array([3.0]),)),
        (_("a fully masked row"), (np.full(3, -np.inf),)),
        (_("a +inf element gives g = +inf"), (np.array([1.0, np.inf, 2.0]),)),
        (_("NaN in gives NaN out"), (np.array([1.0, np.nan, 2.0]),)),
        (_("integers [3, 1, 2]"), (np.array([3, 1, 2]),)),
        (_("values far below 0"), (np.array([-1000.0, -1001.0]),)),
        (
            # named by its data and its state first: a wrong state here reads as a wrong state, not a memory problem
            _("4 000 values (the right state, in one pass, in constant memory)"),
            (np.random.default_rng(21).normal(size=MEMORY_CASE_LENGTH), "memory"),
        ),
    ]
    return property_cases(props)


@exercise("2.1", NORMALIZER_MISTAKES, solution="online_normalizer")
def check_online_normalizer(fn) -> CheckReport:
    """Check a learner's one-pass ``fn(x) -> (g, s)`` (running max and sum) for 1-D ``x`` (exercise 2.1).

    ``x`` is passed as a :class:`OnePassVector`, so the checker also reports how many times the function
    read the input: the online normalizer reads every element exactly once; and one case of 4 000 elements
    measures the memory the call allocates (``tracemalloc``), so that a function that stores the vector
    (``np.array(list(x))``) and then sweeps its copy is caught. The property battery first
    (:func:`normalizer_properties`), then the cases of chapter 1 (without float16), negative values (the max is
    below 0), a masked element first. Named mistakes: :data:`NORMALIZER_MISTAKES`.
    """
    cases = [(name, (x,)) for name, x in softmax_cases() if x.dtype != np.float16]
    cases += [
        (_("negative values, [-3, -5] (the max is -3)"), (np.array([-3.0, -5.0]),)),
        (_("a masked element first, [-inf, 1, 2]"), (np.array([-np.inf, 1.0, 2.0]),)),
    ]
    return check_function(
        "check_online_normalizer",
        fn,
        cases,
        _normalizer_reference,
        NORMALIZER_MISTAKES,
        n_out=2,
        names=("g", "s"),
        not_answer=NOT_A_PAIR,
        hint=_normalizer_hint,
        properties=normalizer_properties(),
        compare=same_state,
        convert=_pair,
        describe=_state_describe,
        check_form=False,
        call=_call_one_pass,
        # the models take x alone (the memory case passes x and "memory")
        diagnosis=lambda args, answers: Diagnosis([a[:1] for a in args], answers, NORMALIZER_MISTAKES, same_state),
    )


def _state_message(state, expected, mistake: Mistake | None) -> str:
    (g, s), (g_ref, s_ref) = state, expected
    message = _("expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})").format(
        g_ref=g_ref, s_ref=s_ref, g=g, s=s
    )
    return joined(message, mistake.message()) if mistake is not None else message


# ---------------------------------------------------------------------------------------------------------------
# 2.2 merge
# ---------------------------------------------------------------------------------------------------------------


def _merge_model(g_of=_np_max, term=lambda s, g_k, g: s * np.exp(g_k - g), guard=False):
    """A merge variant: ``g = g_of(g1, g2)``, ``s = term(s1, g1, g) + term(s2, g2, g)``; ``guard`` skips empty parts."""

    def model(g1, s1, g2, s2):
        g = g_of(g1, g2)
        if guard:
            parts = [(s_k, g_k) for s_k, g_k in ((s1, g1), (s2, g2)) if g_k != -math.inf]
            if not parts:
                return g, 0.0
            return g, float(sum(term(s_k, g_k, g) for s_k, g_k in parts))
        return g, float(term(s1, g1, g) + term(s2, g2, g))

    return model


def _guarded_merge(g_of):
    def model(g1, s1, g2, s2):
        g = g_of(g1, g2)
        if g == -math.inf:
            return g, 0.0
        return g, float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))

    return model


def _exp_of_maxima(g1, s1, g2, s2):
    """``(s1 e^{g1} + s2 e^{g2}) / e^g``: the exponential of each max alone overflows for a max above 709."""
    g = _np_max(g1, g2)
    return g, float((s1 * np.exp(g1) + s2 * np.exp(g2)) / np.exp(g))


def _right_merge(g1, s1, g2, s2):
    return tuple(float(v) for v in merge(g1, s1, g2, s2))


# In the order the whole-run rule tries them: a mistake whose model also gives another's answers on the cases that
# other fails comes after it (Python's max and an unguarded empty state first: the exponential of each max alone and
# the min of the maxima give their NaN on those cases too; one part rescaled before none: the two agree on every case
# where the part rescaled holds the max).
def _one_max_for_both(k):
    """A copy-paste slip: both sums moved from the max of part ``k`` (s1 exp(g1 - g) + s2 exp(g1 - g))."""

    def model(g1, s1, g2, s2):
        g = _np_max(g1, g2)
        if g == -math.inf:
            return g, 0.0
        return g, float((s1 + s2) * np.exp((g1, g2)[k] - g))

    return model


def _from_part_max(k):
    """Every sum measured from part ``k``'s max instead of the common one: s = s_k + sum_j s_j exp(g_j - g_k)."""

    def model(*args):
        gs, ss = [np.float64(v) for v in args[0::2]], [np.float64(v) for v in args[1::2]]
        g = float(np.max(gs))
        if g == -math.inf:
            return g, 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            s = ss[k] + sum(ss[j] * np.exp(gs[j] - gs[k]) for j in range(len(gs)) if j != k)
        return g, float(s)

    return model


def _averaged(*args):
    """The right state with the parts' rescaled sums averaged (divided by the number of parts) instead of added."""
    gs, ss = args[0::2], args[1::2]
    g = float(np.max(np.asarray(gs, dtype=np.float64)))
    if g == -math.inf:
        return g, 0.0
    return g, float(sum(s * np.exp(np.float64(g_k) - g) for g_k, s in zip(gs, ss, strict=True)) / len(gs))


FROM_PART_MAX = Mistake(
    N_("the sums measured from one part's max"),
    N_(
        "each s_k moves to the common max g = max of the parts' maxima, not to one part's max (which need not be "
        "the largest): s = sum_k s_k exp(g_k - g)"
    ),
)
AVERAGED = Mistake(
    N_("the sums averaged instead of added"),
    N_("the merged sum adds the parts' rescaled sums, s = sum_k s_k exp(g_k - g): do not divide by the count"),
)


def _empty_if_any_empty(by_sum, first_only=False):
    """The right merge (of any number of parts), but (-inf, 0) as soon as one part (the first when ``first_only``)
    is empty, tested by its max ``g_k == -inf`` or (``by_sum``) by its sum ``s_k == 0``."""

    def model(*args):
        gs, ss = args[0::2], args[1::2]
        tested = ss if by_sum else gs
        if any(v == (0 if by_sum else -math.inf) for v in (tested[:1] if first_only else tested)):
            return -math.inf, 0.0
        g = float(np.max(np.asarray(gs, dtype=np.float64)))
        if g == -math.inf:
            return g, 0.0
        return g, float(sum(s * np.exp(np.float64(g_k) - g) for g_k, s in zip(gs, ss, strict=True)))

    return model


def _nan_cleaned(factors):
    """The merge with np.nan_to_num on the sum (and on each factor when ``factors``) instead of a guard for the empty
    merge: a NaN that comes in becomes 0 too."""

    def model(*args):
        gs, ss = [np.float64(v) for v in args[0::2]], args[1::2]
        g = np.max(gs)
        with np.errstate(invalid="ignore"):
            fs = [np.exp(g_k - g) for g_k in gs]
            fs = [np.nan_to_num(f) for f in fs] if factors else fs
            return float(g), float(np.nan_to_num(sum(s * f for s, f in zip(ss, fs, strict=True))))

    return model


EMPTY_PART = Mistake(
    N_("an empty part taken for an empty merge"),
    N_(
        "the merged state is empty only when every part is empty: an empty part (-inf, 0) merged with a real one "
        "gives the real one. Test the merged max, g == -inf, not each part's"
    ),
    (_empty_if_any_empty(False), _empty_if_any_empty(True)),
)
NAN_CLEANED = Mistake(
    N_("NaN cleaned into 0"),
    N_(
        "np.nan_to_num (or a NaN test that returns 0) also erases a NaN that comes in, which must propagate: guard "
        "the empty merge with g == -inf instead"
    ),
    (_nan_cleaned(True), _nan_cleaned(False)),
)


def _zero_for_empty(g1, s1, g2, s2):
    """The right merge, with (0, 0) for two empty parts."""
    g = _np_max(g1, g2)
    if g == -math.inf:
        return 0.0, 0.0
    return g, float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g))


def _guard_forms(*models):
    """Each model of a merge three times: as it is, behind the guard of the empty merge ((-inf, 0) when the merged max
    is -inf), and behind a guard per part (an empty part returns the other part). The checker names a mistake only
    through a model that also gives the learner's answer on every case that passed, so a mistake in the factors or in
    the max needs a model for each way the learner may have guarded the empty parts (review rev-h-02-1). The min of
    the maxima keeps its own two forms: with a guard per part it would pair with "an empty part taken for an empty
    merge" to explain the min guarded on itself, which one model already explains."""

    def empty_guarded(model):
        def guarded(g1, s1, g2, s2):
            return (-math.inf, 0.0) if _np_max(g1, g2) == -math.inf else model(g1, s1, g2, s2)

        return guarded

    def part_guarded(model):
        def guarded(g1, s1, g2, s2):
            if g1 == -math.inf:
                return float(g2), float(s2)
            return (float(g1), float(s1)) if g2 == -math.inf else model(g1, s1, g2, s2)

        return guarded

    return tuple(form for model in models for form in (model, empty_guarded(model), part_guarded(model)))


def _swapped_factors(g1, s1, g2, s2):
    """Each sum moved by the other part's max: s1 exp(g2 - g) + s2 exp(g1 - g)."""
    g = _np_max(g1, g2)
    return g, float(s1 * np.exp(g2 - g) + s2 * np.exp(g1 - g))


def _branch_max(a, b):
    """``a if a > b else b`` (``>=`` gives the same value): the if/else of a merge on ``g1 > g2``, where a NaN in
    ``g1`` makes the comparison False and falls into the else branch, which returns ``g2``."""
    return a if a > b else b


#: The part of a merge's code that Python's max, an if/else and the min of the maxima are three ways to write: one
#: code has one of them, so two are never named together (a Python min explains all but a NaN in g1, the if/else
#: that case alone).
MERGED_MAX = "the merged max"

MERGE_MISTAKES = (
    Mistake(PYTHON_MAX.name, PYTHON_MAX.fix, _guard_forms(_merge_model(g_of=_python_max)), part=MERGED_MAX),
    Mistake(
        N_("an if/else on g1 > g2 dropping NaN"),
        N_(
            "every comparison with NaN is False (nan > 0 and nan >= 0 alike), so a NaN in g1 fell into the else "
            "branch, which returns g2, and went missing: test with math.isnan, or take g = np.maximum(g1, g2), which "
            "propagates NaN"
        ),
        _guard_forms(_merge_model(g_of=_branch_max)),
        part=MERGED_MAX,
    ),
    Mistake(
        UNGUARDED.name,
        N_(
            "when both parts are empty (g1 = g2 = -inf) the factor exp(g_k - g) is exp(-inf - (-inf)) = NaN: "
            "return (-inf, 0) when the merged max is -inf"
        ),
        (_merge_model(),),
    ),
    EMPTY_PART,
    NAN_CLEANED,
    Mistake(
        N_("the exponential of each max taken alone"),
        N_(
            "s1 e^{g1} + s2 e^{g2} overflows as soon as a max is above 709 (inf / inf = NaN): never take exp of a "
            "max alone; take exp of differences, s1 exp(g1 - g) + s2 exp(g2 - g), each <= 1"
        ),
        _guard_forms(_exp_of_maxima),
    ),
    Mistake(
        N_("the two states swapped"),
        N_(
            "merge(g1, s1, g2, s2) takes part 1's state (g1, s1), then part 2's (g2, s2): each sum s_k is rescaled "
            "by its own max, s_k exp(g_k - g) (reading the arguments as (g1, g2, s1, s2), or pairing s1 with g2, "
            "mixes the parts)"
        ),
        (lambda g1, s1, g2, s2: _guarded_merge(_np_max)(g1, g2, s1, s2), *_guard_forms(_swapped_factors)),
    ),
    Mistake(
        N_("only one part rescaled"),
        N_(
            "both sums need converting to the common max: whichever part does not hold it is rescaled by a factor "
            "below 1, and the one that holds it by exactly 1, so write both factors"
        ),
        _guard_forms(
            lambda g1, s1, g2, s2: (_np_max(g1, g2), s1 * np.exp(g1 - _np_max(g1, g2)) + s2),
            lambda g1, s1, g2, s2: (_np_max(g1, g2), s1 + s2 * np.exp(g2 - _np_max(g1, g2))),
        ),
    ),
    Mistake(
        N_("merged without rescaling"),
        N_(
            "s1 is relative to g1 and s2 to g2: convert both to the common max g first, s = s1 exp(g1 - g) + s2 "
            "exp(g2 - g)"
        ),
        _guard_forms(lambda g1, s1, g2, s2: (_np_max(g1, g2), s1 + s2)),
    ),
    Mistake(FROM_PART_MAX.name, FROM_PART_MAX.fix, _guard_forms(_from_part_max(0), _from_part_max(1))),
    Mistake(AVERAGED.name, AVERAGED.fix, _guard_forms(_averaged)),
    Mistake(
        INVERTED_RESCALE.name,
        N_("each factor is exp(g_k - g) = exp(part max - common max) <= 1"),
        _guard_forms(_merge_model(term=lambda s, g_k, g: s * np.exp(g - g_k))),
    ),
    Mistake(
        N_("the min of the two maxima"),
        N_(
            "the merged state's max is the larger one, g = max(g1, g2); relative to the smaller one the factors "
            "exp(g_k - g) can overflow"
        ),
        tuple(
            model
            # np.fmin drops a NaN, np.minimum keeps it, Python's min keeps it in g1 only; a guard tests the min
            for g_of in (lambda a, b: float(np.fmin(a, b)), lambda a, b: float(np.minimum(a, b)), min)
            for model in (_guarded_merge(g_of), _merge_model(g_of=g_of))
        ),
        part=MERGED_MAX,
    ),
    Mistake(
        BASE_2.name,
        BASE_2.fix,
        _guard_forms(
            _merge_model(term=lambda s, g_k, g: s * np.exp2(g_k - g)),
            _merge_model(term=lambda s, g_k, g: s * 10.0 ** (g_k - g)),
        ),
    ),
    Mistake(
        N_("one part's max used for both"),
        N_("each sum moves from its own max: s = s1 exp(g1 - g) + s2 exp(g2 - g), g1 for s1 and g2 for s2"),
        _guard_forms(_one_max_for_both(0), _one_max_for_both(1)),
    ),
    Mistake(
        N_("0 as the max of nothing"),
        N_(
            "two empty parts merge into the empty state (-inf, 0): the max of nothing is -inf, not 0 "
            "(max(g1, g2) = -inf already; keep it)"
        ),
        (_zero_for_empty,),
    ),
    Mistake(SWAPPED.name, SWAPPED.fix, (lambda *a: tuple(reversed(_guarded_merge(_np_max)(*a))),)),
    NOT_A_PAIR,
)


def merge_cases():
    """The cases of exercise 2.2: ``[(name, (g1, s1, g2, s2))]``."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=10)
    left, right = (tuple(float(v) for v in online_normalizer(part)) for part in (x[:4], x[4:]))
    return [
        (_("two halves give the whole vector's state"), (*left, *right)),
        (_("the identity (-inf, 0) on the left"), (-np.inf, 0.0, *right)),
        (_("the identity (-inf, 0) on the right"), (*left, -np.inf, 0.0)),
        (_("the other order"), (*right, *left)),
        (_("the first part holds the larger max"), (2.0, 1.5, -1.0, 2.5)),
        (_("maxima 1e4 apart (no overflow)"), (1e4, 2.0, 0.0, 3.0)),
        (_("maxima of 800 and 799 (no overflow: never exp of a max alone)"), (800.0, 2.0, 799.0, 3.0)),
        (_("NaN in the first part's max propagates"), (np.nan, 1.0, 0.0, 1.0)),
        # the NaN is in the second part's sum: an answer of (nan, nan) is then no swapped-state model's answer
        (_("NaN in a sum gives s = NaN (g is still the larger max)"), (0.0, 1.0, -1.0, np.nan)),
    ]


def merge_properties():
    """The property cases of exercise 2.2 (the battery of :mod:`~flashmath.exercises._cases`).

    Rules: two empty parts give the empty state (-inf, 0); a part with max +inf gives g = +inf; NaN gives NaN;
    integer states are numbers like any other.
    """
    return property_cases(
        [
            (_("two empty parts"), (-np.inf, 0.0, -np.inf, 0.0)),
            (_("one element on each side"), (0.5, 1.0, -0.25, 1.0)),
            (_("an empty part and a real one"), (-np.inf, 0.0, 1.0, 2.0)),
            (_("a part with max +inf"), (np.inf, 1.0, 0.0, 1.0)),
            (_("NaN in a max"), (0.0, 1.0, np.nan, 1.0)),
            (_("integer states"), (3, 1, 1, 2)),
            (_("negative maxima"), (-3.0, 1.0, -5.0, 2.0)),
        ]
    )


@exercise("2.2", MERGE_MISTAKES, solution="merge")
def check_merge(fn) -> CheckReport:
    """Check a learner's ``fn(g1, s1, g2, s2) -> (g, s)`` against :func:`flashmath.merge` (exercise 2.2).

    The property battery first (:func:`merge_properties`), then :func:`merge_cases`: two halves give the state of
    the whole; the identity ``(-inf, 0)`` on either side; either part holding the larger max; maxima 1e4 apart
    and maxima of 800 (no overflow); NaN in a max (g = s = NaN) or in a sum (s = NaN, g still the larger
    max). Named mistakes: :data:`MERGE_MISTAKES`, only through models that also give the learner's answer on every
    case that passed (:class:`ConsistentDiagnosis`), so that code with two slips, no guard for two empty parts and
    Python's max, is named as those two, and code that no such model explains gets the case's requirement alone.
    """
    return _check_states(
        "check_merge",
        fn,
        merge_cases(),
        _right_merge,
        MERGE_MISTAKES,
        merge_properties(),
        diagnosis=lambda args, answers: ConsistentDiagnosis(
            args, answers, MERGE_MISTAKES, same_state, consistent_only=True
        ),
        hint=_merge_hint,
    )


MATH_EXP_ALONE = N_(
    "math.exp of a max above 709 raises OverflowError: never take exp of a max alone; take exp of differences, "
    "s1 exp(g1 - g) + s2 exp(g2 - g), each <= 1"
)


def _merge_hint(exc, args) -> str | None:
    """What an ``OverflowError`` of a merge means (``math.exp`` raises where ``np.exp`` gives inf, review rev14-a).

    With two finite maxima less than 709 apart no ``exp`` of a difference of them can overflow, so only the
    exponential of a max alone explains it: the same hint as for its ``np.exp`` form. With maxima 1e4 apart an
    inverted factor ``exp(g - g_k)`` overflows as well, and the hint names no single mistake."""
    if not isinstance(exc, OverflowError):
        return _state_hint(exc)
    g1, g2 = (float(a) for a in (args[0], args[2]))
    if math.isfinite(g1) and math.isfinite(g2) and abs(g1 - g2) < 709:
        (alone,) = (m for m in MERGE_MISTAKES if m.name == "the exponential of each max taken alone")
        # its own fix, not the np.exp form's "(inf / inf = NaN)": math.exp raised before any division (rev15-a)
        return _(LOOKS_LIKE).format(name=_(alone.name), fix=_(MATH_EXP_ALONE))
    return _(
        "math.exp overflowed: every exponent must be <= 0, g1 - g and g2 - g with g = max(g1, g2) (never a max "
        "alone, nor g - g1 or g - g2)"
    )


def _check_states(title, fn, cases, reference, mistakes, properties=(), diagnosis=None, hint=None) -> CheckReport:
    """A checker of a function of numbers that returns a state ``(g, s)``, on the one harness."""
    return check_function(
        title,
        fn,
        cases,
        lambda *a: tuple(float(v) for v in reference(*a)),
        mistakes,
        n_out=2,
        names=("g", "s"),
        not_answer=NOT_A_PAIR,
        properties=properties,
        compare=same_state,
        convert=_pair,
        describe=_state_describe,
        check_form=False,
        hint=_state_hint if hint is None else hint,
        diagnosis=diagnosis,
    )


def _state_hint(exc) -> str | None:
    if "Cannot cast ufunc" in str(exc) and "int" in str(exc):
        return _(
            "integer states: an array built from integer sums (np.array([s1, s2])) is an integer array, and "
            "multiplying it in place by the float factors (*=) cannot store the result: build the sums as floats, "
            "or write s = s1 * exp(g1 - g) + s2 * exp(g2 - g) without updating in place"
        )
    return None


# ---------------------------------------------------------------------------------------------------------------
# 2.3 derivation: merge is associative
# ---------------------------------------------------------------------------------------------------------------


def _three(term=lambda s, g_k, g: s * np.exp(g_k - g), guard=True, g_of=None):
    def model(g1, s1, g2, s2, g3, s3):
        g = float(np.maximum(np.maximum(g1, g2), g3)) if g_of is None else g_of((g1, g2, g3))
        if guard and g == -math.inf:
            return g, 0.0
        return g, float(term(s1, g1, g) + term(s2, g2, g) + term(s3, g3, g))

    return model


def _three_python_max(g1, s1, g2, s2, g3, s3):
    g = max(g1, g2, g3)  # Python's max: a NaN after the first argument is lost
    if g == -math.inf:
        return g, 0.0
    return g, float(s1 * np.exp(g1 - g) + s2 * np.exp(g2 - g) + s3 * np.exp(g3 - g))


def _three_not_moved(g1, s1, g2, s2, g3, s3):
    """merge(P1, P2) relative to its own max g12, then s3 added without moving s12 to the new max."""
    g12, s12 = _right_merge(g1, s1, g2, s2)
    g = float(np.maximum(g12, g3))
    return g, float(s12 + s3 * np.exp(g3 - g))


def _three_not_rescaled(k):
    """The closed form with part ``k``'s sum added as it is, without its factor exp(g_k - g)."""

    def model(*args):
        gs, ss = args[0::2], args[1::2]
        g = float(np.max(np.asarray(gs, dtype=np.float64)))
        if g == -math.inf:
            return g, 0.0
        return g, float(
            sum(s if i == k else s * np.exp(np.float64(g_k) - g) for i, (g_k, s) in enumerate(zip(gs, ss, strict=True)))
        )

    return model


def _three_exp_of_maxima(guard):
    def model(*args):
        gs, ss = [np.float64(v) for v in args[0::2]], args[1::2]
        g = np.max(gs)
        if guard and g == -math.inf:
            return float(g), 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            return float(g), float(sum(s * np.exp(g_k) for g_k, s in zip(gs, ss, strict=True)) / np.exp(g))

    return model


def _three_without(k):
    """The closed form with part ``k``'s term left out of s (g still over all three)."""

    def model(*args):
        gs, ss = args[0::2], args[1::2]
        g = float(np.max(gs))
        if g == -math.inf:
            return g, 0.0
        return g, float(sum(s * np.exp(g_k - g) for i, (g_k, s) in enumerate(zip(gs, ss, strict=True)) if i != k))

    return model


THREE_MISTAKES = (
    Mistake(
        PYTHON_MAX.name,
        N_(
            "Python's max(0.0, nan, 1.0) returns 1.0 (every comparison with NaN is False), so a NaN in a later "
            "part went missing: test with math.isnan, or use np.maximum / np.max, which propagate NaN"
        ),
        (_three_python_max,),
    ),
    Mistake(UNGUARDED.name, N_("when all three parts are empty the merged state is (-inf, 0)"), (_three(guard=False),)),
    Mistake(
        EMPTY_PART.name,
        EMPTY_PART.fix,
        (
            _empty_if_any_empty(False),
            _empty_if_any_empty(True),
            _empty_if_any_empty(False, first_only=True),
            _empty_if_any_empty(True, first_only=True),
        ),
    ),
    Mistake(NAN_CLEANED.name, NAN_CLEANED.fix, NAN_CLEANED.models),
    Mistake(
        N_("an intermediate state not moved to the new max"),
        N_(
            "the state of P1 and P2 is relative to their max g_12; once P3 brings a larger max g, that sum must be "
            "moved to it too, s_12 exp(g_12 - g) (with the closed form: s = sum_k s_k exp(g_k - g), every part "
            "relative to the same g)"
        ),
        (_three_not_moved,),
    ),
    Mistake(
        N_("merged without rescaling"),
        N_("each s_k is relative to its own max g_k: s = sum_k s_k exp(g_k - g) with g = max(g_1, g_2, g_3)"),
        (_three(term=lambda s, g_k, g: s),),
    ),
    Mistake(
        INVERTED_RESCALE.name,
        N_("each factor is exp(g_k - g) <= 1"),
        (
            _three(term=lambda s, g_k, g: s * np.exp(g - g_k)),
            _three(term=lambda s, g_k, g: s * np.exp(g - g_k) if s else 0.0),  # an empty part skipped
        ),
    ),
    Mistake(
        N_("a part's sum not rescaled"),
        N_(
            "every part's sum moves to the common max, the one that holds it too (its factor is then 1): "
            "s = s_1 exp(g_1 - g) + s_2 exp(g_2 - g) + s_3 exp(g_3 - g)"
        ),
        (_three_not_rescaled(0), _three_not_rescaled(1), _three_not_rescaled(2)),
    ),
    Mistake(FROM_PART_MAX.name, FROM_PART_MAX.fix, (_from_part_max(0), _from_part_max(1), _from_part_max(2))),
    Mistake(
        N_("the exponential of each max taken alone"),
        N_(
            "sum_k s_k e^{g_k} overflows as soon as a max is above 709 (inf / inf = NaN): never take exp of a max "
            "alone; take exp of differences, s_k exp(g_k - g), each <= 1"
        ),
        (_three_exp_of_maxima(True), _three_exp_of_maxima(False)),
    ),
    Mistake(AVERAGED.name, AVERAGED.fix, (_averaged,)),
    Mistake(
        N_("the s_k factors missing"),
        N_("each part brings its sum moved to the common max, s_k exp(g_k - g): s = sum_k s_k exp(g_k - g)"),
        (_three(term=lambda s, g_k, g: np.exp(g_k - g)),),
    ),
    Mistake(
        N_("a part's sum left out"),
        N_("s adds the three parts' sums, s = s_1 exp(g_1 - g) + s_2 exp(g_2 - g) + s_3 exp(g_3 - g)"),
        (_three_without(0), _three_without(1), _three_without(2)),
    ),
    Mistake(
        N_("a max of two parts only"),
        N_("g is the max of all three parts' maxima, g = max(g_1, g_2, g_3)"),
        tuple(_three(g_of=lambda gs, pair=pair: max(gs[pair[0]], gs[pair[1]])) for pair in ((0, 1), (1, 2), (0, 2))),
    ),
    NOT_A_PAIR,
)


def merge_three_cases():
    """The cases of exercise 2.3: ``[(name, (g1, s1, g2, s2, g3, s3), elements)]``, where ``elements`` is the
    concatenation of the three parts when they come from a vector (None for made-up states)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=12)
    a, b, c = x[:3], 3 + x[3:8], x[8:] - 2  # b holds the max

    def state(*parts):
        return tuple(float(v) for p in parts for v in online_normalizer(p))

    empty = (-np.inf, 0.0)
    return [
        (_("three parts of a vector (the middle one holds the max)"), state(a, b, c), np.concatenate([a, b, c])),
        (_("the first part holds the max"), state(b, a, c), np.concatenate([b, a, c])),
        (_("the last part holds the max"), state(a, c, b), np.concatenate([a, c, b])),
        (_("an empty part (-inf, 0) in the middle"), (*state(a), *empty, *state(c)), np.concatenate([a, c])),
        (_("maxima 1e4 apart"), (1e4, 1.0, 0.0, 2.0, -1e4, 3.0), None),
    ]


def merge_three_properties():
    """The property cases of exercise 2.3 (the battery of :mod:`~flashmath.exercises._cases`)."""
    empty = (-np.inf, 0.0)
    return property_cases(
        [
            (_("three empty parts"), empty * 3),
            (_("one element in each part"), (0.5, 1.0, -0.25, 1.0, 1.5, 1.0)),
            (_("an empty part first"), (*empty, 1.0, 2.0, 0.0, 1.0)),
            (_("a part with max +inf"), (0.0, 1.0, np.inf, 1.0, 1.0, 1.0)),
            (_("NaN in a max"), (0.0, 1.0, np.nan, 1.0, 1.0, 1.0)),
            (_("integer states"), (3, 1, 1, 2, 2, 1)),
            (_("negative maxima"), (-3.0, 1.0, -5.0, 2.0, -4.0, 1.5)),
        ]
    )


@exercise("2.3", THREE_MISTAKES, solution="merge_three")
def check_merge_three(fn) -> CheckReport:
    """Check a learner's closed form ``fn(g1, s1, g2, s2, g3, s3) -> (g, s)`` of three parts (exercise 2.3).

    The derivation shows that both groupings, ``merge(merge(P1, P2), P3)`` and ``merge(P1, merge(P2, P3))``, equal
    ``g = max(g_1, g_2, g_3)``, ``s = sum_k s_k exp(g_k - g)``; the checker runs the property battery
    (:func:`merge_three_properties`), then compares the learner's closed form with :func:`merge_three_reference` on
    :func:`merge_three_cases`. Named mistakes: :data:`THREE_MISTAKES`.
    """
    cases = [(name, args) for name, args, _ in merge_three_cases()]
    report = _check_states(
        "check_merge_three", fn, cases, merge_three_reference, THREE_MISTAKES, merge_three_properties()
    )
    name = _("one max and one sum, without calling a merge")
    first = cases[0][1]  # three parts of a vector: plain floats
    called, ran = run(report, name, _pairwise_calls, fn, first, hint=_state_hint)  # a function that raises: FAIL
    if ran:
        calls = sorted(set(_merges_called(fn)) | set(called))
        report.add(
            name,
            not calls,
            _(
                "your function calls {names}: the exercise asks for the closed form itself, g = max(g1, g2, g3) "
                "and s = s1 exp(g1 - g) + s2 exp(g2 - g) + s3 exp(g3 - g), written without the pairwise merge"
            ).format(names=", ".join(calls)),
        )
    return report


def _merges_called(fn) -> list[str]:
    """The names of the functions called ``*merge*`` that ``fn``'s code refers to (``my_merge``, ``fm.merge``,
    ``merge_states``): the closed form of 2.3 calls none."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names = set(code.co_names) | set(code.co_freevars)  # globals and attributes (fm.merge), and closures
    for const in code.co_consts:  # the code of functions defined inside fn (a lambda, a helper)
        if hasattr(const, "co_names"):
            names |= set(const.co_names)
    return sorted(name for name in names if "merge" in name.lower())


_NUMPY_DIR = os.path.dirname(np.__file__)


def _number(a) -> bool:
    return isinstance(a, int | float | np.integer | np.floating) and not isinstance(a, bool)


def _two_states(values) -> bool:
    """Two ``(g, s)`` states: four numbers, or two pairs of numbers."""
    if len(values) == 4:
        return all(_number(a) for a in values)
    return len(values) == 2 and all(
        isinstance(a, tuple | list) and len(a) == 2 and all(_number(e) for e in a) for a in values
    )


def _pairwise_calls(fn, args) -> list[str]:
    """Run ``fn(*args)`` once and return the names of the Python functions it called with two states as their
    arguments, ``f(g1, s1, g2, s2)`` or ``f((g1, s1), (g2, s2))``: a pairwise merge, whatever its name (``fm.merge``,
    the learner's own helper, a lambda given to ``functools.reduce``). numpy's own functions are not counted.
    Raises what ``fn`` raises."""
    found: list[str] = []
    own = getattr(fn, "__code__", None)

    def profile(frame, event, _arg):
        code = frame.f_code
        if event != "call" or code is own or code.co_filename.startswith(_NUMPY_DIR):
            return
        n = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[: n + bool(code.co_flags & inspect.CO_VARARGS)]
        values = [frame.f_locals.get(name) for name in names[:n]]
        if code.co_flags & inspect.CO_VARARGS:
            values += list(frame.f_locals.get(names[n], ()))
        if _two_states(values) and code.co_name not in found:
            found.append(code.co_name)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with np.errstate(all="ignore"):
            fn(*args)
    finally:
        sys.setprofile(previous)
    return found


def merge_three_reference(g1, s1, g2, s2, g3, s3):
    """The state of three parts as ``merge(merge(P1, P2), P3)`` (the tests check the other grouping agrees)."""
    return merge(*merge(g1, s1, g2, s2), g3, s3)
