"""Chapter 5: exercises 5.1 (one step of the one-loop recurrence) and 5.2 (derivation: a block of keys at once)."""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import (
    INPUT_MODIFIED,
    LOWER_PRECISION,
    CheckReport,
    Diagnosis,
    Mistake,
    close,
    error_note,
    fmt,
    run,
)
from flashmath.exercises._report import same as same_array
from flashmath.i18n import Filled, joined
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.softmax import merge

RULE = "A'_m = A'_{m-1} s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m V_m"


def block_reference(g_prev, s_prev, a_prev, x_block, v_block):
    """The state after a block of keys, by the one-key recurrence applied key by key: ``(g, s, A')`` in float64."""
    g, s, a = float(g_prev), float(s_prev), np.asarray(a_prev, dtype=np.float64)
    for x_m, v_m in zip(np.atleast_1d(x_block), np.atleast_2d(v_block), strict=False):
        g_new, s_new = (float(t) for t in merge(g, s, float(x_m), 1.0))
        if g_new == -np.inf:  # nothing seen yet (only masked keys): the empty state
            g, s, a = g_new, 0.0, np.zeros_like(a)
            continue
        correction = s * np.exp(g - g_new) / s_new  # s_{m-1} exp(g_{m-1} - g_m) / s_m
        weight = np.exp(x_m - g_new) / s_new  # exp(x_m - g_m) / s_m
        g, s, a = g_new, s_new, a * correction + weight * np.asarray(v_m, dtype=np.float64)
    return g, s, a


def step_reference(g_prev, s_prev, a_prev, x_m, v_m):
    """One step of the chapter 5 recurrence: ``(g_m, s_m, A'_m)``."""
    return block_reference(g_prev, s_prev, a_prev, [x_m], [v_m])


def _triple(out):
    """``out`` as ``(g, s, A')`` with floats and a float64 array, or None."""
    try:
        g, s, a = out
        return float(g), float(s), np.asarray(a, dtype=np.float64)
    except Exception:
        return None


def _close_state(a, b) -> bool:
    """``(g, s)`` agree; when the second has ``g = +inf`` only ``g`` is compared (the logsumexp is +inf whatever
    ``s`` is: ``inf - inf`` gives NaN, the package keeps the count of +inf keys)."""
    if b[0] == np.inf:
        return a[0] == np.inf
    return close(a[0], b[0]) and close(a[1], b[1])


def same_triple(a, b) -> bool:
    a, b = _triple(a), _triple(b)
    return a is not None and b is not None and _close_state(a, b) and same_array(a[2], b[2])


def same_state(a, b) -> bool:
    """Only ``(g, s)`` of two triples agree (for the mistakes in the running max and sum)."""
    a, b = _triple(a), _triple(b)
    return a is not None and b is not None and _close_state(a, b)


def _max_of(g_prev, x, python_max=False):
    """``max(g_prev, x_1, ..., x_b)``: NaN propagates, unless ``python_max`` (Python's max drops a NaN)."""
    return max(g_prev, float(x.max())) if python_max else float(np.max(np.append(x, g_prev)))


def _block_model(update, state=None, guard=True, python_max=False):
    """A variant of the block step: right ``(g, s)`` unless ``state`` is given, and ``A' = update(...)``.

    ``update(a_prev, s_prev, rescale, e, V, s, x, g_prev, g)`` gets ``rescale = exp(g_prev - g)``, the weights
    ``e = exp(x_i - g)`` of the block's keys ``(b,)`` and their value rows ``V (b, Dv)``.
    """

    def model(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
        a_prev = np.asarray(a_prev, dtype=np.float64)
        g = _max_of(g_prev, x, python_max)
        if guard and g == -np.inf:  # nothing seen yet: the empty state
            return g, 0.0, np.zeros_like(a_prev)
        rescale, e = np.exp(g_prev - g), np.exp(x - g)
        s = s_prev * rescale + e.sum() if state is None else state(s_prev, g_prev, g, x)
        return g, s, update(a_prev, s_prev, rescale, e, V, s, x, g_prev, g)

    return model


def _step_model(update, state=None, **kw):
    """:func:`_block_model` with the signature of one step, ``(g_prev, s_prev, a_prev, x_m, v_m)``."""
    block = _block_model(update, state, **kw)
    return lambda g_prev, s_prev, a_prev, x_m, v_m: block(g_prev, s_prev, a_prev, [x_m], [v_m])


def _rows_average(e, V):
    """The new value rows averaged with the weights ``e`` (a learner's ``softmax(x) @ V``; ``V``'s mean when every
    weight underflowed to 0, where the one-key code keeps ``V_m``)."""
    total = e.sum()
    return e @ V / total if total > 0 else V.mean(axis=0)


def _softmax_rows(e, V):
    """``(e / e.sum()) @ V``, the new keys' own softmax times their rows (NaN when every weight underflowed)."""
    with np.errstate(all="ignore"):
        return (e / e.sum()) @ V


def _apart_state(s_prev, g_prev, g, x):
    """s_m from the plain exponentials: (s_{m-1} e^{g_{m-1}} + sum e^{x_i}) / e^{g_m} (inf / inf beyond 709)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.float64(s_prev) * np.exp(np.float64(g_prev)) + np.exp(x).sum()) / np.exp(np.float64(g))


def _apart_update(a, sp, r, e, V, s, x, gp, g):
    """A' as the convex combination of the plain exponentials' totals, old total s_{m-1} e^{g_{m-1}}."""
    with np.errstate(over="ignore", invalid="ignore"):
        old, new = np.float64(sp) * np.exp(np.float64(gp)), np.exp(x)
        total = old + new.sum()
        return a * (old / total) + (new / total) @ V


def _a_mistakes(model, rule, old="m-1"):
    """The classic wrong ``A'`` of chapter 5; ``model`` turns an update into a model with the exercise's signature.

    ``old`` is the index of the state before the step: "m-1" for one key, "m-b" for a block of ``b`` keys. The texts
    are :class:`~flashmath.i18n.Filled` templates, translated with the names of the state filled in.
    """
    a_old, s_old, g_old = f"A'_{{{old}}}", f"s_{{{old}}}", f"g_{{{old}}}"
    names = dict(a_old=a_old, s_old=s_old, g_old=g_old, rule=rule, correction=f"{s_old} exp({g_old} - g_m) / s_m")

    def text(template):
        return Filled(template, **{k: v for k, v in names.items() if "{" + k + "}" in template})

    return (
        Mistake(
            N_("s_m A'_m returned (not divided)"),
            N_("that is the unnormalised numerator of FlashAttention-2 (chapter 7): divide by s_m"),
            (model(lambda a, sp, r, e, V, s, *_: a * sp * r + e @ V),),
        ),
        Mistake(
            N_("divided by s_m twice"),
            text(N_("{rule} divides each term by s_m once")),
            (model(lambda a, sp, r, e, V, s, *_: (a * sp * r / s + e @ V / s) / s),),
        ),
        Mistake(
            text(N_("{a_old} not corrected")),
            text(
                N_(
                    "the old output must be multiplied by {correction}, which is below 1 even when the max holds "
                    "({s_old} < s_m): the old average gives up the weight the new keys take"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: a + e @ V / s),),
        ),
        Mistake(
            N_("FlashAttention-2's update"),
            text(
                N_(
                    "{a_old} exp({g_old} - g_m) + exp(x - g_m) V updates the unnormalised numerator s A' of "
                    "FlashAttention-2 (chapter 7); here A' is normalised at every step: {rule}"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: a * r + e @ V),),
        ),
        Mistake(
            text(N_("exp({g_old} - g_m) missing")),
            text(
                N_(
                    "when the max jumps, {a_old} must be multiplied by {correction} (did you overwrite g with the "
                    "new max before computing exp({g_old} - g_m)?)"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: (a * sp + e @ V) / s),),
        ),
        Mistake(
            text(N_("{s_old} missing")),
            text(N_("{a_old} is an average over a total weight of {s_old}, so it must be multiplied by {correction}")),
            (model(lambda a, sp, r, e, V, s, *_: (a * r + e @ V) / s),),
        ),
        Mistake(
            text(N_("divided by {s_old} instead of s_m")),
            text(N_("both terms are divided by the new sum s_m, which includes the new keys: {rule}")),
            (
                model(lambda a, sp, r, e, V, s, *_: a * r + e @ V / sp),
                model(lambda a, sp, r, e, V, s, *_: (a * sp * r + e @ V) / sp),
                # only the new term divided by the old sum (which is 0 on the first key: 1 or s_m in its place)
                model(lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V / (sp if sp else 1.0)),
                model(lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V / (sp if sp else s)),
            ),
        ),
        Mistake(
            text(N_("the factor {s_old} / s_m missing")),
            text(
                N_(
                    "the correction is {correction}: {a_old} is an average over the old total weight {s_old}, "
                    "which becomes a share of the new total s_m (if s was updated before this line, s_m / s_m "
                    "cancels: keep {s_old} before updating s)"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: a * r + e @ V / s),),
        ),
        Mistake(
            N_("the correction inverted"),
            text(N_("the factor is {correction} <= 1: the old output shrinks")),
            (model(lambda a, sp, r, e, V, s, *_: a * s / (sp * r) + e @ V / s),),
        ),
        Mistake(
            N_("the new weight relative to the old max"),
            N_("a new value row's weight is exp(x - g_m) / s_m, with the new max g_m"),
            (model(lambda a, sp, r, e, V, s, x, gp, g: a * sp * r / s + np.exp(x - gp) @ V / s),),
        ),
        Mistake(
            text(N_("{a_old} returned unchanged")),
            text(N_("the output must take in the new keys: {rule}")),
            (model(lambda a, *_: a),),
        ),
        Mistake(
            text(N_("exp(g_m - {g_old}) instead of exp({g_old} - g_m)")),
            text(
                N_(
                    "the old output is rescaled by exp({g_old} - g_m), old max minus new max, <= 1: it moves "
                    "{a_old} down to the new max; exp(g_m - {g_old}) grows it"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: (a * sp / r / s if sp > 0 else 0 * a) + e @ V / s),),
        ),
        Mistake(
            N_("the new weight not divided by s_m"),
            text(N_("the new value rows weigh exp(x - g_m) / s_m, divided by the new sum like the old part: {rule}")),
            (model(lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V),),
        ),
        Mistake(
            N_("exp(x) and exp(g_m) taken apart"),
            N_(
                "exp(x) / exp(g_m) is exp(x - g_m) only while both fit: for a score of 1000 exp(x) overflows to "
                "inf and inf / inf is NaN. Take one exponential of the difference, exp(x - g_m)"
            ),
            (
                model(lambda a, sp, r, e, V, s, x, gp, g: a * sp * r / s + (np.exp(x) / (s * np.exp(g))) @ V),
                model(_apart_update, state=_apart_state),  # the running total of e^{x_i} kept, s = total / e^{g_m}
            ),
        ),
        Mistake(
            N_("the weights of the convex combination swapped"),
            text(
                N_(
                    "in A'_m = (1 - w) {a_old} + w V_new, w = exp(x - g_m) / s_m is the new keys' share (0 for a "
                    "key far below the max): the old output keeps 1 - w"
                )
            ),
            (model(lambda a, sp, r, e, V, s, *_: a * (e.sum() / s) + _rows_average(e, V) * (1 - e.sum() / s)),),
        ),
        Mistake(
            N_("a 50/50 average with the new keys' softmax"),
            text(
                N_(
                    "the old output and the new keys weigh by their shares of the new sum, {a_old} by {correction} "
                    "and the new keys' softmax-weighted rows by sum exp(x - g_m) / s_m, not 1/2 each"
                )
            ),
            (
                model(
                    lambda a, sp, r, e, V, s, *_: 0.5 * a + 0.5 * _softmax_rows(e, V) if sp > 0 else _softmax_rows(e, V)
                ),
            ),
        ),
    )


def _state_mistakes(model, old="m-1"):
    """The classic wrong ``(g, s)`` of a step (compared on ``(g, s)`` only)."""
    s_old, g_old = f"s_{{{old}}}", f"g_{{{old}}}"
    return (
        Mistake(
            N_("the rescale of s missing"),
            Filled(
                N_(
                    "s_m = {s_old} exp({g_old} - g_m) + the new terms exp(x - g_m): the old sum is relative to "
                    "the old max"
                ),
                s_old=s_old,
                g_old=g_old,
            ),
            (model(None, lambda sp, gp, g, x: sp + np.exp(x - g).sum()),),
            same_state,
        ),
        Mistake(
            N_("the rescale of s inverted"),
            Filled(N_("the factor on {s_old} is exp({g_old} - g_m) <= 1"), s_old=s_old, g_old=g_old),
            (model(None, lambda sp, gp, g, x: sp * np.exp(g - gp) + np.exp(x - g).sum()),),
            same_state,
        ),
        Mistake(
            N_("the new term of s relative to the old max"),
            N_("a new term is exp(x - g_m), with the new max"),
            (model(None, lambda sp, gp, g, x: sp * np.exp(gp - g) + np.exp(x - gp).sum()),),
            same_state,
        ),
        Mistake(
            N_("a wrong base (2 or 10) instead of e"),
            N_("use the natural exponential, np.exp or math.exp"),
            (model(None, lambda sp, gp, g, x: sp * np.exp2(gp - g) + np.exp2(x - g).sum()),),
            same_state,
        ),
        Mistake(
            N_("the state measured from the old max"),
            Filled(
                N_(
                    "s_m is relative to the new max g_m: {s_old} exp({g_old} - g_m) + the new terms exp(x - g_m); "
                    "{s_old} + exp(x - {g_old}) is the sum relative to {g_old}, and exp(x - {g_old}) can overflow"
                ),
                s_old=s_old,
                g_old=g_old,
            ),
            (model(None, lambda sp, gp, g, x: sp + np.exp(x - (gp if gp > -np.inf else g)).sum()),),
            same_state,
        ),
        Mistake(
            N_("(s, g) swapped"),
            N_("return the max first, then the sum and the output: (g_m, s_m, A'_m)"),
            (_reordered(model(None), (1, 0, 2)),),
            same_state,
        ),
        Mistake(
            Filled(N_("{g_old} returned instead of g_m"), g_old=g_old),
            Filled(
                N_("return the new max g_m = max({g_old}, x): the state (g_m, s_m, A'_m) is relative to it"),
                g_old=g_old,
            ),
            (_old_max_returned(model(None)),),
            same_state,
        ),
    )


def _reordered(model, order):
    """``model`` returning its triple in another ``order``."""

    def wrong(*args):
        out = model(*args)
        return tuple(out[i] for i in order)

    return wrong


def _old_max_returned(model):
    """``model`` returning the old max ``g_prev`` with the right ``s`` and ``A'``."""

    def wrong(g_prev, *args):
        _, s, a = model(g_prev, *args)
        return g_prev, s, a

    return wrong


def _right_update(a, sp, r, e, V, s, *_):
    return a * sp * r / s + e @ V / s


def _with_state(make):
    """``make(update, state)`` adapted so that ``update=None`` keeps the right ``A'`` (for the state mistakes)."""

    def model(update, state=None):
        return make(_right_update if update is None else update, state)

    return model


def _nan_skipped(model):
    """The step with every NaN score skipped, its key left out (a learner's ``np.nanmax`` with ``np.nansum``, or
    ``np.nan_to_num`` on the weights)."""

    def skipped(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
        keep = ~np.isnan(x)
        return _block_model(_right_update)(g_prev, s_prev, a_prev, x[keep], V[keep])

    if model is _block_model:
        return skipped
    return lambda g_prev, s_prev, a_prev, x_m, v_m: skipped(g_prev, s_prev, a_prev, [x_m], [v_m])


def _guard_mistakes(model, old="m-1"):
    """A max that drops NaN (Python's max, np.nanmax), and a NaN key skipped altogether (np.nanmax with np.nansum);
    both compared on ``(g, s)``. (A key of -inf from the empty state, whose missing guard gives
    exp(-inf - (-inf)) = NaN, is not a case of chapter 5: masked keys come in chapter 8.)"""
    return (
        Mistake(
            N_("a max that drops NaN"),
            N_(
                "Python's max(2.0, nan) returns 2.0 (every comparison with NaN is False), and np.nanmax and np.fmax "
                "skip NaN on purpose: use np.max or np.maximum, which propagate NaN (or test with math.isnan)"
            ),
            (model(_right_update, python_max=True),),
            same_state,
        ),
        Mistake(
            N_("a NaN score skipped (np.nanmax, np.nansum)"),
            N_(
                "np.nanmax and np.nansum (or np.nan_to_num) leave a key whose score is NaN out, as if it were not "
                "there; the exercise asks that NaN in a key's score gives NaN out, as in chapter 2, so that a bug "
                "upstream shows: use np.max or np.maximum and np.sum, which propagate NaN"
            ),
            (_nan_skipped(model),),
            same_state,
        ),
    )


#: the arguments of 5.1's step and of 5.2's block step, so that an array changed in place is named
STEP_ARGS = ("g_prev", "s_prev", "a_prev", "x_m", "v_m")
BLOCK_ARGS = ("g_prev", "s_prev", "a_prev", "x_block", "v_block")
#: an input changed in place, with an example in the names of 5.1 and 5.2
STEP_INPUT_MODIFIED = Mistake(
    INPUT_MODIFIED.name,
    N_(
        "your function wrote into an array it was given, for example with a_prev *= ... or a_prev += ...; "
        "leave the inputs unchanged and build a new array instead: an expression such as "
        "a_m = a_prev * ... + ... makes a new one"
    ),
)

NOT_A_TRIPLE = Mistake(N_("not a triple"), N_("return the three values (g_m, s_m, A'_m)"))
STEP_MISTAKES = (
    _a_mistakes(_step_model, RULE)
    + _state_mistakes(_with_state(_step_model))
    + _guard_mistakes(_step_model)
    + (NOT_A_TRIPLE, LOWER_PRECISION)
)


def _hint(exc) -> str | None:
    if isinstance(exc, ZeroDivisionError):
        return _("at the first key s_{m-1} = s_0 = 0: divide by s_m, which is never 0 once a key is seen")
    if isinstance(exc, ValueError) and "broadcast" in str(exc):
        return _(
            "the weighted value rows are summed over the keys: sum_i exp(x_i - g_m) V_i is p @ V or "
            "(p[:, None] * V).sum(axis=0), Dv numbers (axis=1 gives one number per key)"
        )
    if isinstance(exc, OverflowError):
        return _("math.exp overflowed: every exponent must be <= 0, x_m - g_m and g_{m-1} - g_m with the new max g_m")
    return None


class _StepDiagnosis:
    """Mistakes of ``(g, s)`` explain a wrong state; the others a wrong ``A'`` with the right state."""

    def __init__(self, mistakes, args_list, triples, reference):
        self._state = Diagnosis(args_list, triples, [m for m in mistakes if m.compare is same_state], same_triple)
        self._a = Diagnosis(args_list, triples, [m for m in mistakes if m.compare is not same_state], same_triple)
        self._wrong_state = []
        for args, triple in zip(args_list, triples, strict=False):
            with np.errstate(all="ignore"):
                ref = _triple(reference(*args))
            self._wrong_state.append(triple is not None and ref is not None and not _close_state(triple, ref))

    def for_case(self, i: int) -> Mistake | None:
        if self._wrong_state[i]:  # a mistake of A' whose model also gives the wrong state (whole triple) comes next
            return self._state.for_case(i) or self._a.for_case(i)
        return self._a.for_case(i)


def _describe_triple(triple, expected):
    (g, s, a), (g_ref, s_ref, a_ref) = triple, expected
    if not _close_state((g, s), (g_ref, s_ref)):
        return (
            _("expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})").format(
                g_ref=g_ref, s_ref=s_ref, g=g, s=s
            ),
            np.array([g, s]),
            np.array([g_ref, s_ref]),
        )
    if a.shape != a_ref.shape:
        return _("expected A' of shape {expected}, got {got}").format(expected=a_ref.shape, got=a.shape), a, a_ref
    return (
        _("expected {what}{expected}, got {got}").format(what="A' = ", expected=fmt(a_ref, a), got=fmt(a, a_ref)),
        a,
        a_ref,
    )


def _check_steps(title, fn, cases, reference, mistakes, properties, arg_names):
    """Run a step-like ``fn`` on ``cases`` ``[(name, args)]`` through the one harness, against ``reference``;
    ``arg_names`` name an argument changed in place."""

    def quiet_reference(*args):
        with np.errstate(all="ignore"):
            return reference(*args)

    def form(out):
        triple = _triple(out)
        return None if triple is None else triple

    return check_function(
        title,
        fn,
        cases,
        quiet_reference,
        mistakes,
        n_out=3,
        names=("g", "s", "A'"),
        not_answer=NOT_A_TRIPLE,
        hint=_hint,
        properties=properties,
        compare=same_triple,
        convert=form,
        describe=_describe_triple,
        check_form=False,
        diagnosis=lambda args, answers: _StepDiagnosis(mistakes, args, answers, quiet_reference),
        arg_names=arg_names,
        modified_mistake=STEP_INPUT_MODIFIED,
    )


def step_properties():
    """The property cases of exercise 5.1 (the battery of :mod:`~flashmath.exercises._cases`), named with the prompt's
    words: value rows of width one, NaN in the key's score gives NaN out (as in chapter 2), negative-only input.
    The edge cases that are not chapter 5's subject are not tested: the empty input, a key of -inf (masked keys come
    in chapter 8; the chapter's own loop has no guard for them), +inf, float16 and integer input.
    """
    v_m, a_prev = np.array([1.0, -2.0]), np.array([0.2, 0.4])
    return property_cases(
        [
            (_("value rows of width one"), (2.0, 1.5, np.array([0.3]), 5.0, np.array([-1.0]))),
            (_("NaN in the key's score gives NaN out"), (2.0, 1.5, a_prev, np.nan, v_m)),
            (_("negative-only input"), (-3.0, 1.5, -np.abs(a_prev), -5.0, -np.abs(v_m))),
        ]
    )


def block_properties():
    """The property cases of exercise 5.2: as :func:`step_properties`, for blocks."""
    v, a_prev = np.array([[1.0, -2.0], [0.5, 3.0]]), np.array([0.2, 0.4])
    return property_cases(
        [
            (
                _("a block of one key, value rows of width one"),
                (2.0, 1.5, np.array([0.3]), np.array([5.0]), np.array([[-1.0]])),
            ),
            (_("NaN in a key's score gives NaN out"), (2.0, 1.5, a_prev, np.array([np.nan, 1.0]), v)),
            (_("negative-only input"), (-3.0, 1.5, -np.abs(a_prev), np.array([-5.0, -1.0]), -np.abs(v))),
        ]
    )


def _fold(report, name, step, x, v, expected, block=1, first=0):
    """Fold ``step`` over a whole row in blocks of ``block`` keys, from key ``first`` (0-based) to the end of the row,
    then from key 0 to key ``first``; report whether the final ``A'`` equals ``expected``."""
    state = (-np.inf, 0.0, np.zeros(v.shape[1]))
    spans = [(start, min(start + block, x.size)) for start in range(first, x.size, block)]
    spans += [(start, min(start + block, first)) for start in range(0, first, block)]
    for start, stop in spans:
        chunk = (float(x[start]), v[start].copy()) if block == 1 else (x[start:stop].copy(), v[start:stop].copy())
        out, ok = run(report, name, step, *state, *chunk, hint=_hint)
        if not ok:
            return
        state = _triple(out)
        if state is None:
            report.add(
                name,
                False,
                joined(_("expected a triple (g, s, A') after key {m}").format(m=start + 1), NOT_A_TRIPLE.message()),
            )
            return
    earlier = _(" (the cases above say what went wrong)") if not report.passed and report.cases else ""
    if same_array(state[2], expected):
        report.add(name, True)
    else:
        report.add(
            name,
            False,
            _("after all keys expected A = {expected}, got {got}").format(
                expected=fmt(expected, state[2]), got=fmt(state[2], expected)
            )
            + f"{error_note(state[2], expected)}{earlier}",
        )


def _real_row():
    from flashmath.attention import attention
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    q, k, v = (arr[layer, head].astype(np.float64) for arr in (heads.q, heads.k, heads.v))
    return heads.score_row(layer, head, n), v, attention(q[n : n + 1], k, v)[0]


@exercise("5.1", STEP_MISTAKES, solution="one_loop_step")
def check_one_loop_step(fn) -> CheckReport:
    """Check a learner's ``fn(g_prev, s_prev, a_prev, x_m, v_m) -> (g_m, s_m, a_m)``, one step of chapter 5 (5.1).

    ``A'_m = A'_{m-1} s_{m-1} e^{g_{m-1} - g_m} / s_m + e^{x_m - g_m} / s_m V_m`` with ``g_m``, ``s_m`` of online
    softmax. Cases: the first key from the empty state ``(-inf, 0, 0)``, a max that holds, a max that jumps by
    3 and by 1000 (no overflow), a key far below the max, and a whole real score row folded key by key (it must
    give the attention output). Named mistakes: :data:`STEP_MISTAKES`.
    """
    v_m = np.array([1.0, -2.0, 0.5])
    a_prev = np.array([0.2, 0.4, -0.6])
    cases = [
        (
            _("the first key, from the empty state (g, s, A') = (-inf, 0, 0): expected (x_1, 1, V_1)"),
            (-np.inf, 0.0, np.zeros(3), 0.7, v_m),
        ),
        (_("the max holds (x_m = 0.5 < g_{m-1} = 2)"), (2.0, 1.5, a_prev, 0.5, v_m)),
        (_("the max jumps by 3 (x_m = 5 > g_{m-1} = 2)"), (2.0, 1.5, a_prev, 5.0, v_m)),
        (_("the max jumps by 1000 (no overflow: never take exp of a score alone)"), (0.0, 2.0, a_prev, 1000.0, v_m)),
        (_("a key far below the max (x_m = g_{m-1} - 1000: weight 0)"), (3.0, 2.0, a_prev, -997.0, v_m)),
    ]
    report = _check_steps("check_one_loop_step", fn, cases, step_reference, STEP_MISTAKES, step_properties(), STEP_ARGS)
    x, v, expected = _real_row()
    _fold(report, _("a real score row folded key by key (46 keys) gives the attention output"), fn, x, v, expected)
    return report


def _block_local(g_prev, s_prev, a_prev, x_block, v_block, move_sum=False):
    """Algorithm 1 of FlashAttention: the block's own max m~ = max(x_block), its sum l~ = sum exp(x - m~) and
    P~ V = exp(x - m~) V, merged without moving the block's part from m~ to the new max g (``move_sum``: l~ moved by
    exp(m~ - g), P~ V not)."""
    x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
    V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
    a_prev = np.asarray(a_prev, dtype=np.float64)
    m_block = float(x.max())
    g = _max_of(g_prev, x)
    if g == -np.inf:
        return g, 0.0, np.zeros_like(a_prev)
    e = np.exp(x - m_block)  # relative to the block's max: right only when m~ = g
    s = s_prev * np.exp(g_prev - g) + e.sum() * (np.exp(m_block - g) if move_sum else 1.0)
    a = a_prev * s_prev * np.exp(g_prev - g) / s + (e @ V) / s
    return g, s, a


def block_sum_moved(g_prev, s_prev, a_prev, x_block, v_block):
    """:func:`_block_local` with l~ moved to the new max by exp(m~ - g) and P~ V not (5.2; 6.1 row by row)."""
    return _block_local(g_prev, s_prev, a_prev, x_block, v_block, move_sum=True)


def _one_key_max(which):
    """The block's ``(g, s)`` with the max taken over the old max and key ``which`` of the block only."""

    def model(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        g = _max_of(g_prev, x[which : which + 1] if which >= 0 else x[which:])
        if g == -np.inf:
            return g, 0.0, np.asarray(a_prev, dtype=np.float64)
        return g, s_prev * np.exp(g_prev - g) + np.exp(x - g).sum(), np.asarray(a_prev, dtype=np.float64)

    return model


def _block_max_only(g_prev, s_prev, a_prev, x_block, v_block):
    """The block's ``(g, s)`` with the new max over the block alone, ``g = max(x_block)``."""
    x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
    g = float(x.max())
    if g == -np.inf:
        return g_prev, s_prev, np.asarray(a_prev, dtype=np.float64)
    return g, s_prev * np.exp(g_prev - g) + np.exp(x - g).sum(), np.asarray(a_prev, dtype=np.float64)


def _block_as_one_key(g_prev, s_prev, a_prev, x_block, v_block):
    """One step of chapter 5 with the block's max score and the mean of its value rows."""
    x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
    V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
    return _block_model(_right_update)(g_prev, s_prev, a_prev, [x.max()], [V.mean(axis=0)])


def _block_one_of_its_keys(which):
    """One step of chapter 5 with key ``which`` of the block alone (its score and its value row)."""

    def model(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
        return _block_model(_right_update)(g_prev, s_prev, a_prev, [x[which]], [V[which]])

    return model


BLOCK_RULE = "A'_m = A'_{m-b} s_{m-b} exp(g_{m-b} - g_m) / s_m + sum_{i = m-b+1..m} exp(x_i - g_m) / s_m V_i"
BLOCK_MISTAKES = (
    _a_mistakes(_block_model, BLOCK_RULE, "m-b")
    + _state_mistakes(_with_state(_block_model), "m-b")
    + _guard_mistakes(_block_model, "m-b")
    + (
        Mistake(
            N_("the max of one key of the block only"),
            N_("the new max is over the old max and every key of the block, g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m)"),
            (_one_key_max(0), _one_key_max(-1)),
            same_state,
        ),
        Mistake(
            N_("the old max left out of g_m"),
            N_(
                "the new max is over the old max too, g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m): a block whose keys "
                "are all below g_{m-b} keeps g_{m-b}"
            ),
            (_block_max_only,),
            same_state,
        ),
        Mistake(
            N_("the block taken as one key"),
            N_(
                "each key of the block has its own weight exp(x_i - g_m): s_m adds all b of them, and A' their "
                "weighted value rows sum_i exp(x_i - g_m) V_i / s_m, not one term for the whole block (its max, "
                "or its first or last key alone)"
            ),
            (_block_as_one_key, _block_one_of_its_keys(-1), _block_one_of_its_keys(0)),
            same_state,
        ),
        Mistake(
            N_("the block's terms averaged instead of summed"),
            N_(
                "s_m adds every key's term, s_m = s_{m-b} exp(g_{m-b} - g_m) + sum_i exp(x_i - g_m): a sum, not a "
                "mean (np.sum, not np.mean)"
            ),
            (
                _block_model(_right_update, state=lambda sp, gp, g, x: sp * np.exp(gp - g) + np.exp(x - g).mean()),
                _block_model(
                    lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V / (len(e) * s),
                    state=lambda sp, gp, g, x: sp * np.exp(gp - g) + np.exp(x - g).mean(),
                ),
            ),
        ),
        Mistake(
            N_("the block's part divided by its own sum"),
            N_(
                "both parts of A'_m share one denominator, the new total s_m: the block brings sum_i exp(x_i - g_m) "
                "V_i / s_m, not its rows averaged by the block's own sum sum_i exp(x_i - g_m) (then the weights no "
                "longer add up to 1)"
            ),
            (
                _block_model(lambda a, sp, r, e, V, s, *_: a * sp * r / s + e @ V / e.sum()),
                _block_model(lambda a, sp, r, e, V, s, *_: (a * sp * r + e @ V / e.sum()) / s),
            ),
        ),
        Mistake(
            N_("the weighted value rows summed over the wrong axis"),
            N_(
                "sum_i exp(x_i - g_m) V_i adds the block's rows, over the keys: (p[:, None] * V).sum(axis=0) or "
                "p @ V, Dv numbers; axis=1 adds within each row and gives b numbers"
            ),
            (_block_model(lambda a, sp, r, e, V, s, *_: (a * sp * r + (e[:, None] * V).sum(axis=1)) / s),),
        ),
        Mistake(
            N_("the block's own max not moved to the new max"),
            N_(
                "Algorithm 1 of FlashAttention computes the block's max m~ = max(x_block), its sum l~ = sum exp(x_i - "
                "m~) and exp(x_i - m~) V; both must then be moved to the new max g_m = max(g_{m-b}, m~) by exp(m~ - "
                "g_m), like the old state by exp(g_{m-b} - g_m)"
            ),
            (_block_local,),
            same_state,
        ),
        Mistake(
            N_("the block's numerator not moved to the new max"),
            N_(
                "the block's sum l~ = sum exp(x_i - m~) was moved to the new max by exp(m~ - g_m), but not its "
                "numerator sum exp(x_i - m~) V_i: multiply it by exp(m~ - g_m) too (or take exp(x_i - g_m) at once); "
                "it matters for a block whose max m~ stays below g_m"
            ),
            (block_sum_moved,),
        ),
        NOT_A_TRIPLE,
        LOWER_PRECISION,
    )
)


@exercise("5.2", BLOCK_MISTAKES, solution="block_step")
def check_block_step(fn) -> CheckReport:
    """Check a learner's ``fn(g_prev, s_prev, a_prev, x_block, v_block) -> (g, s, A')`` for a block of keys (5.2).

    The derivation exercise: from the definition of ``A'``, the state after a block of ``b`` keys ``m-b+1 .. m`` is
    ``g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m)``, ``s_m = s_{m-b} e^{g_{m-b} - g_m} + sum_i e^{x_i - g_m}`` and
    ``A'_m = A'_{m-b} s_{m-b} e^{g_{m-b} - g_m} / s_m + sum_i e^{x_i - g_m} / s_m V_i``; with ``b = 1`` it is the
    recurrence of the chapter. Cases: one key, a block under the old max, a block whose max jumps, the first
    block from the empty state, a key 1000 above the old max, and a real row of 46 keys folded in blocks of 8 keys
    from key 25 on (keys 25-32, 33-40, 41-46, then 1-8, 9-16, 17-24: the max rises in the first three blocks and
    holds in the last three, which catches a block not moved to the new max). Named mistakes: :data:`BLOCK_MISTAKES`.
    """
    rng = np.random.default_rng(5)
    a_prev = np.array([0.2, 0.4, -0.6])
    V = rng.standard_normal((4, 3))
    cases = [
        (_("a block of one key (b = 1: the recurrence of this chapter)"), (2.0, 1.5, a_prev, np.array([5.0]), V[:1])),
        (_("a block of 3 keys below the old max"), (2.0, 1.5, a_prev, np.array([0.5, 1.0, -1.0]), V[:3])),
        (
            _("a block of 4 keys whose max is 2 above the old one"),
            (2.0, 1.5, a_prev, np.array([1.0, 4.0, 3.0, 0.0]), V),
        ),
        (
            _("the first block, from the empty state (-inf, 0, 0)"),
            (-np.inf, 0.0, np.zeros(3), np.array([0.3, -0.2]), V[:2]),
        ),
        (_("a block with a key 1000 above the old max"), (0.0, 2.0, a_prev, np.array([1000.0, 999.0]), V[:2])),
    ]
    report = _check_steps(
        "check_block_step", fn, cases, block_reference, BLOCK_MISTAKES, block_properties(), BLOCK_ARGS
    )
    x, v, expected = _real_row()
    name = _(
        "a real score row folded in blocks of 8 keys from key 25 on (keys 25-46, then 1-24) gives the attention output"
    )
    _fold(report, name, fn, x, v, expected, block=8, first=24)
    return report
