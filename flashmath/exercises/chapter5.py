"""Chapter 5: exercises 5.1 (one step of the one-loop recurrence) and 5.2 (derivation: a block of keys at once)."""

from __future__ import annotations

import numpy as np

from flashmath.exercises._report import (
    LOWER_PRECISION,
    CheckReport,
    Diagnosis,
    Mistake,
    close,
    error_note,
    fmt,
    report_value,
    run,
)
from flashmath.exercises._report import same as same_array
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


def same_triple(a, b) -> bool:
    a, b = _triple(a), _triple(b)
    return (a is not None and b is not None and close(a[0], b[0]) and close(a[1], b[1])
            and same_array(a[2], b[2]))


def same_state(a, b) -> bool:
    """Only ``(g, s)`` of two triples agree (for the mistakes in the running max and sum)."""
    a, b = _triple(a), _triple(b)
    return a is not None and b is not None and close(a[0], b[0]) and close(a[1], b[1])


def _block_model(update, state=None):
    """A variant of the block step: right ``(g, s)`` unless ``state`` is given, and ``A' = update(...)``.

    ``update(a_prev, s_prev, rescale, e, V, s, x, g_prev, g)`` gets ``rescale = exp(g_prev - g)``, the weights
    ``e = exp(x_i - g)`` of the block's keys ``(b,)`` and their value rows ``V (b, Dv)``.
    """
    def model(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        V = np.atleast_2d(np.asarray(v_block, dtype=np.float64))
        a_prev = np.asarray(a_prev, dtype=np.float64)
        g = max(g_prev, float(x.max()))
        rescale, e = np.exp(g_prev - g), np.exp(x - g)
        s = s_prev * rescale + e.sum() if state is None else state(s_prev, g_prev, g, x)
        return g, s, update(a_prev, s_prev, rescale, e, V, s, x, g_prev, g)
    return model


def _step_model(update, state=None):
    """:func:`_block_model` with the signature of one step, ``(g_prev, s_prev, a_prev, x_m, v_m)``."""
    block = _block_model(update, state)
    return lambda g_prev, s_prev, a_prev, x_m, v_m: block(g_prev, s_prev, a_prev, [x_m], [v_m])


def _a_mistakes(model, rule, old="m-1"):
    """The classic wrong ``A'`` of chapter 5; ``model`` turns an update into a model with the exercise's signature.

    ``old`` is the index of the state before the step: "m-1" for one key, "m-b" for a block of ``b`` keys.
    """
    a_old, s_old, g_old = f"A'_{{{old}}}", f"s_{{{old}}}", f"g_{{{old}}}"
    correction = f"{s_old} exp({g_old} - g_m) / s_m"
    return (
        Mistake("s_m A'_m returned (not divided)",
                "that is the unnormalised numerator of FlashAttention-2 (chapter 7): divide by s_m",
                (model(lambda a, sp, r, e, V, s, *_: a * sp * r + e @ V),)),
        Mistake("divided by s_m twice", f"{rule} divides each term by s_m once",
                (model(lambda a, sp, r, e, V, s, *_: (a * sp * r / s + e @ V / s) / s),)),
        Mistake(f"{a_old} not corrected", f"the old output must be multiplied by {correction}, which is below 1 even "
                f"when the max holds ({s_old} < s_m): the old average gives up the weight the new keys take",
                (model(lambda a, sp, r, e, V, s, *_: a + e @ V / s),)),
        Mistake("FlashAttention-2's update", f"{a_old} exp({g_old} - g_m) + exp(x - g_m) V updates the unnormalised "
                f"numerator s A' of FlashAttention-2 (chapter 7); here A' is normalised at every step: {rule}",
                (model(lambda a, sp, r, e, V, s, *_: a * r + e @ V),)),
        Mistake(f"exp({g_old} - g_m) missing", f"when the max jumps, {a_old} must be multiplied by {correction} (did "
                f"you overwrite g with the new max before computing exp({g_old} - g_m)?)",
                (model(lambda a, sp, r, e, V, s, *_: (a * sp + e @ V) / s),)),
        Mistake(f"{s_old} missing", f"{a_old} is an average over a total weight of {s_old}, so it must be multiplied "
                f"by {correction}", (model(lambda a, sp, r, e, V, s, *_: (a * r + e @ V) / s),)),
        Mistake(f"divided by {s_old} instead of s_m", f"both terms are divided by the new sum s_m, which includes the "
                f"new keys: {rule}", (model(lambda a, sp, r, e, V, s, *_: a * r + e @ V / sp),
                                      model(lambda a, sp, r, e, V, s, *_: (a * sp * r + e @ V) / sp))),
        Mistake(f"s_m used where {s_old} belongs", f"the correction is {correction}, with the old sum on top: keep "
                f"{s_old} before updating s", (model(lambda a, sp, r, e, V, s, *_: a * r + e @ V / s),)),
        Mistake("the correction inverted", f"the factor is {correction} <= 1: the old output shrinks",
                (model(lambda a, sp, r, e, V, s, *_: a * s / (sp * r) + e @ V / s),)),
        Mistake("the new weight relative to the old max", "a new value row's weight is exp(x - g_m) / s_m, with the "
                "new max g_m", (model(lambda a, sp, r, e, V, s, x, gp, g: a * sp * r / s + np.exp(x - gp) @ V / s),)),
        Mistake(f"{a_old} returned unchanged", f"the output must take in the new keys: {rule}",
                (model(lambda a, *_: a),)),
    )


def _state_mistakes(model, old="m-1"):
    """The classic wrong ``(g, s)`` of a step (compared on ``(g, s)`` only)."""
    s_old, g_old = f"s_{{{old}}}", f"g_{{{old}}}"
    return (
        Mistake("the rescale of s missing", f"s_m = {s_old} exp({g_old} - g_m) + the new terms exp(x - g_m): the old "
                "sum is relative to the old max", (model(None, lambda sp, gp, g, x: sp + np.exp(x - g).sum()),),
                same_state),
        Mistake("the rescale of s inverted", f"the factor on {s_old} is exp({g_old} - g_m) <= 1",
                (model(None, lambda sp, gp, g, x: sp * np.exp(g - gp) + np.exp(x - g).sum()),), same_state),
        Mistake("the new term of s relative to the old max", "a new term is exp(x - g_m), with the new max",
                (model(None, lambda sp, gp, g, x: sp * np.exp(gp - g) + np.exp(x - gp).sum()),), same_state),
        Mistake("a wrong base (2 or 10) instead of e", "use the natural exponential, np.exp or math.exp",
                (model(None, lambda sp, gp, g, x: sp * np.exp2(gp - g) + np.exp2(x - g).sum()),), same_state),
    )


def _with_state(make):
    """``make(update, state)`` adapted so that ``update=None`` keeps the right ``A'`` (for the state mistakes)."""
    def model(update, state=None):
        def right(a, sp, r, e, V, s, *_):
            return a * sp * r / s + e @ V / s

        return make(right if update is None else update, state)
    return model


NOT_A_TRIPLE = Mistake("not a triple", "return the three values (g_m, s_m, A'_m)")
STEP_MISTAKES = (_a_mistakes(_step_model, RULE) + _state_mistakes(_with_state(_step_model))
                 + (NOT_A_TRIPLE, LOWER_PRECISION))


def _hint(exc) -> str | None:
    if isinstance(exc, ZeroDivisionError):
        return "at the first key s_{m-1} = s_0 = 0: divide by s_m, which is never 0 once a key is seen"
    if isinstance(exc, OverflowError):
        return "math.exp overflowed: every exponent must be <= 0, x_m - g_m and g_{m-1} - g_m with the new max g_m"
    return None


def _check_steps(report, fn, cases, reference, mistakes):
    """Run a step-like ``fn`` on ``cases`` ``[(name, args)]`` and report each against ``reference``."""
    answers = []
    for name, args in cases:
        out, ok = run(report, name, fn, *(a.copy() if isinstance(a, np.ndarray) else a for a in args), hint=_hint)
        answers.append((ok, _triple(out) if ok else None))
    args_list, triples = [args for _, args in cases], [t for _, t in answers]
    # mistakes of (g, s) explain a wrong state; the others a wrong A' with the right state
    state_diagnosis = Diagnosis(args_list, triples, [m for m in mistakes if m.compare is same_state], same_triple)
    diagnosis = Diagnosis(args_list, triples, [m for m in mistakes if m.compare is not same_state], same_triple)
    for i, ((name, args), (ok, triple)) in enumerate(zip(cases, answers, strict=False)):
        if not ok:
            continue
        if triple is None:
            report.add(name, False, f"expected a triple: {NOT_A_TRIPLE.message()}")
            continue
        g, s, a = triple
        g_ref, s_ref, a_ref = reference(*args)
        if not (close(g, g_ref) and close(s, s_ref)):
            mistake = state_diagnosis.for_case(i)
            report.add(name, False, f"expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})"
                                    + (f": {mistake.message()}" if mistake else error_note([g, s], [g_ref, s_ref])))
        elif a.shape != a_ref.shape:
            report.add(name, False, f"expected A' of shape {a_ref.shape}, got {a.shape}")
        else:
            report_value(report, name, a, a_ref, same_array(a, a_ref), diagnosis.for_case(i), what="A' = ")
    return report.in_order([name for name, _ in cases])


def _fold(report, name, step, x, v, expected, block=1):
    """Fold ``step`` over a whole row in blocks; report whether the final ``A'`` equals ``expected``."""
    state = (-np.inf, 0.0, np.zeros(v.shape[1]))
    for start in range(0, x.size, block):
        chunk = (float(x[start]), v[start].copy()) if block == 1 else (x[start:start + block].copy(),
                                                                        v[start:start + block].copy())
        out, ok = run(report, name, step, *state, *chunk, hint=_hint)
        if not ok:
            return
        state = _triple(out)
        if state is None:
            report.add(name, False, f"expected a triple (g, s, A') after key {start + 1}: {NOT_A_TRIPLE.message()}")
            return
    earlier = " (the cases above say what went wrong)" if not report.passed and report.cases else ""
    if same_array(state[2], expected):
        report.add(name, True)
    else:
        report.add(name, False, f"after all keys expected A = {fmt(expected)}, got {fmt(state[2])}"
                                f"{error_note(state[2], expected)}{earlier}")


def _real_row():
    from flashmath.attention import attention
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    q, k, v = (arr[layer, head].astype(np.float64) for arr in (heads.q, heads.k, heads.v))
    return heads.score_row(layer, head, n), v, attention(q[n:n + 1], k, v)[0]


def check_one_loop_step(fn) -> CheckReport:
    """Check a learner's ``fn(g_prev, s_prev, a_prev, x_m, v_m) -> (g_m, s_m, a_m)``, one step of chapter 5 (5.1).

    ``A'_m = A'_{m-1} s_{m-1} e^{g_{m-1} - g_m} / s_m + e^{x_m - g_m} / s_m V_m`` with ``g_m``, ``s_m`` of online
    softmax. Cases: the first key from the empty state ``(-inf, 0, 0)``, a max that holds, a max that jumps by
    3 and by 1000 (no overflow), a key far below the max, and a whole real score row folded key by key (it must
    give the attention output). Named mistakes: :data:`STEP_MISTAKES`.
    """
    report = CheckReport("check_one_loop_step")
    v_m = np.array([1.0, -2.0, 0.5])
    a_prev = np.array([0.2, 0.4, -0.6])
    cases = [
        ("the first key, from the empty state (g, s, A') = (-inf, 0, 0): expected (x_1, 1, V_1)",
         (-np.inf, 0.0, np.zeros(3), 0.7, v_m)),
        ("the max holds (x_m = 0.5 < g_{m-1} = 2)", (2.0, 1.5, a_prev, 0.5, v_m)),
        ("the max jumps by 3 (x_m = 5 > g_{m-1} = 2)", (2.0, 1.5, a_prev, 5.0, v_m)),
        ("the max jumps by 1000 (no overflow: never take exp of a score alone)", (0.0, 2.0, a_prev, 1000.0, v_m)),
        ("a key far below the max (x_m = g_{m-1} - 1000: weight 0)", (3.0, 2.0, a_prev, -997.0, v_m)),
    ]
    _check_steps(report, fn, cases, step_reference, STEP_MISTAKES)
    x, v, expected = _real_row()
    _fold(report, "a real score row folded key by key (46 keys) gives the attention output", fn, x, v, expected)
    return report


def _one_key_max(which):
    """The block's ``(g, s)`` with the max taken over the old max and key ``which`` of the block only."""
    def model(g_prev, s_prev, a_prev, x_block, v_block):
        x = np.atleast_1d(np.asarray(x_block, dtype=np.float64))
        g = max(g_prev, float(x[which]))
        return g, s_prev * np.exp(g_prev - g) + np.exp(x - g).sum(), np.asarray(a_prev, dtype=np.float64)
    return model


BLOCK_RULE = "A'_m = A'_{m-b} s_{m-b} exp(g_{m-b} - g_m) / s_m + sum_{i = m-b+1..m} exp(x_i - g_m) / s_m V_i"
BLOCK_MISTAKES = (_a_mistakes(_block_model, BLOCK_RULE, "m-b") + _state_mistakes(_with_state(_block_model), "m-b") + (
    Mistake("the max of one key of the block only", "the new max is over the old max and every key of the block, "
            "g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m)", (_one_key_max(0), _one_key_max(-1)), same_state),
    NOT_A_TRIPLE, LOWER_PRECISION))


def check_block_step(fn) -> CheckReport:
    """Check a learner's ``fn(g_prev, s_prev, a_prev, x_block, v_block) -> (g, s, A')`` for a block of keys (5.2).

    The derivation exercise: from the definition of ``A'``, the state after a block of ``b`` keys ``m-b+1 .. m`` is
    ``g_m = max(g_{m-b}, x_{m-b+1}, ..., x_m)``, ``s_m = s_{m-b} e^{g_{m-b} - g_m} + sum_i e^{x_i - g_m}`` and
    ``A'_m = A'_{m-b} s_{m-b} e^{g_{m-b} - g_m} / s_m + sum_i e^{x_i - g_m} / s_m V_i``; with ``b = 1`` it is the
    recurrence of the chapter. Cases: one key, a block under the old max, a block whose max jumps, the first
    block from the empty state, a key 1000 above the old max, and a real row folded in blocks of 8 keys (46 = 5 x 8
    + 6). Named mistakes: :data:`BLOCK_MISTAKES`.
    """
    report = CheckReport("check_block_step")
    rng = np.random.default_rng(5)
    a_prev = np.array([0.2, 0.4, -0.6])
    V = rng.standard_normal((4, 3))
    cases = [
        ("a block of one key (b = 1: the recurrence of this chapter)", (2.0, 1.5, a_prev, np.array([5.0]), V[:1])),
        ("a block of 3 keys below the old max", (2.0, 1.5, a_prev, np.array([0.5, 1.0, -1.0]), V[:3])),
        ("a block of 4 keys whose max is 2 above the old one", (2.0, 1.5, a_prev, np.array([1.0, 4.0, 3.0, 0.0]), V)),
        ("the first block, from the empty state (-inf, 0, 0)", (-np.inf, 0.0, np.zeros(3), np.array([0.3, -0.2]),
                                                                V[:2])),
        ("a block with a key 1000 above the old max", (0.0, 2.0, a_prev, np.array([1000.0, 999.0]), V[:2])),
    ]
    _check_steps(report, fn, cases, block_reference, BLOCK_MISTAKES)
    x, v, expected = _real_row()
    _fold(report, "a real score row folded in blocks of 8 keys gives the attention output", fn, x, v, expected, 8)
    return report
