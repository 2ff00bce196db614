"""Checkers for the exercises of chapter 14 (ring attention).

Like every checker of :mod:`flashmath.exercises`, each runs the learner's answer on cases where the classic mistakes
make a difference, through the one harness (:func:`~flashmath.exercises._cases.check_function`), never raises, and
names a mistake only when its model gives the learner's answer on every failing case.

* :func:`check_zigzag_chunks` (14.1): the two chunks a device holds under zig-zag sharding
  (:data:`ZIGZAG_MISTAKES`).
* :func:`check_ring_step` (14.2): one ring step of one device, the attention over the held shard merged into the
  running state, rows that see none of the shard's keys included (:data:`RING_STEP_MISTAKES`).
* :func:`check_step_bytes` (14.3): the bytes a device sends after a step of the forward ring
  (:data:`STEP_BYTES_MISTAKES`).

Solutions: :mod:`flashmath.solutions`.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import as_arrays, check_function, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import CheckReport, Diagnosis, Mistake
from flashmath.exercises._tiles import inputs_unchanged, shape_hint
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = [
    "RING_STEP_MISTAKES",
    "STEP_BYTES_MISTAKES",
    "ZIGZAG_MISTAKES",
    "check_ring_step",
    "check_step_bytes",
    "check_zigzag_chunks",
]


# ------------------------------------------------------------------------------------------------------------------
# 14.1 the zig-zag chunks of a device
# ------------------------------------------------------------------------------------------------------------------


def _zigzag_reference(P, r):
    from flashmath.ring import zigzag_chunks

    return zigzag_chunks(int(P), int(r))


def _sorted_pair(first, second):
    return (min(first, second), max(first, second))


ZIGZAG_MISTAKES = (
    Mistake(
        N_("the second chunk off by one (2P - r)"),
        N_("chunks are numbered 0 .. 2P - 1, so the mirror of chunk r is 2P - 1 - r"),
        (lambda P, r: (r, 2 * P - r),),
    ),
    Mistake(
        N_("the second half in order (P + r)"),
        N_(
            "chunk P + r gives device r one early and one late chunk, but the late ones in the same order: a higher "
            "device holds later chunks in both halves (the last device the latest of each), so the work is still "
            "unbalanced; mirror it, 2P - 1 - r, so that early pairs with late"
        ),
        (lambda P, r: (r, P + r),),
    ),
    Mistake(
        N_("the mirror among P chunks (P - 1 - r)"),
        N_("the sequence is cut into 2P chunks, not P: the mirror of chunk r is 2P - 1 - r"),
        (lambda P, r: _sorted_pair(r, P - 1 - r),),
    ),
    Mistake(
        N_("the larger chunk first"),
        N_("return the pair with the smaller index first: (r, 2P - 1 - r)"),
        (lambda P, r: (2 * P - 1 - r, r),),
    ),
)


def _pair(out):
    """The learner's answer as a pair of float64 scalars (a tuple, a list or an array of two numbers), or None."""
    try:
        values = np.asarray(out, dtype=np.float64).reshape(-1)
    except Exception:
        return None
    return (values[0], values[1]) if values.size == 2 else None


@exercise("14.1", ZIGZAG_MISTAKES, solution="zigzag_pair")
def check_zigzag_chunks(fn) -> CheckReport:
    """Check ``fn(P, r) -> (first, second)``: the two chunks of ``2 P`` that device ``r`` holds under zig-zag
    sharding, ``(r, 2 P - 1 - r)``, the smaller first (exercise 14.1). Named mistakes: :data:`ZIGZAG_MISTAKES`."""
    cases = [
        (_("device {r} of P = {P}").format(r=r, P=P), (P, r))
        for P, r in ((2, 0), (2, 1), (4, 0), (4, 2), (4, 3), (8, 5))
    ]
    properties = property_cases(
        [
            (_("one device: P = 1, r = 0"), (1, 0)),
            (_("the last device: r = P - 1"), (3, 2)),
            (_("numpy integers: P and r given as np.int64"), (np.int64(4), np.int64(1))),
        ]
    )
    return check_function(
        "check_zigzag_chunks",
        fn,
        cases,
        _zigzag_reference,
        ZIGZAG_MISTAKES,
        n_out=2,
        names=(_("first chunk"), _("second chunk")),
        convert=_pair,
        check_form=False,
        not_answer=Mistake(N_("not a pair"), N_("return the two chunk indices as a pair, (first, second)")),
        properties=properties,
    )


# ------------------------------------------------------------------------------------------------------------------
# 14.2 one ring step: the held shard's attention merged into the running state
# ------------------------------------------------------------------------------------------------------------------


def _step_state(q, k, v, keep, *, scale=True, use_mask=True, guard=True):
    """The attention of the rows of ``q`` over ``k, v`` alone, where ``keep``: ``(A_s, L_s)``, a hidden row ``(0,
    -inf)``; with mistakes as switches (no scale, the mask ignored, no guard for a row that sees nothing)."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    x = q @ k.T / (np.sqrt(q.shape[-1]) if scale else 1.0)
    if use_mask:
        x = np.where(keep, x, -np.inf)
    g = x.max(axis=-1, keepdims=True)
    g_ref = np.where(np.isneginf(g), 0.0, g) if guard else g
    p = np.exp(x - g_ref)
    s = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (p @ v) / s if not guard else np.where(s > 0, (p @ v) / np.where(s > 0, s, 1.0), 0.0)
        lse = (g_ref + np.log(s))[..., 0]
    return a, lse


def _merge(a1, l1, a2, l2, *, how="logaddexp"):
    """Chapter 10's merge of two states, with mistakes as switches."""
    a1, l1, a2, l2 = (np.asarray(t, dtype=np.float64) for t in (a1, l1, a2, l2))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if how == "plain":  # the merge written out, no guard: e^{-inf - (-inf)} is NaN when both are empty
            L = np.logaddexp(l1, l2)
            return np.exp(l1 - L)[:, None] * a1 + np.exp(l2 - L)[:, None] * a2, L
        if how == "max":
            L = np.maximum(l1, l2)
        elif how == "exp":  # e^L without a reference point
            e1, e2 = np.exp(l1), np.exp(l2)
            total = e1 + e2
            return (e1[:, None] * a1 + e2[:, None] * a2) / total[:, None], np.log(total)
        else:
            L = np.logaddexp(l1, l2)
        ref = np.where(np.isneginf(L), 0.0, L)
        w1 = np.where(np.isneginf(l1), 0.0, np.exp(l1 - ref))[:, None]
        w2 = np.where(np.isneginf(l2), 0.0, np.exp(l2 - ref))[:, None]
        return np.where(w1 > 0, w1 * a1, 0.0) + np.where(w2 > 0, w2 * a2, 0.0), L


def _ring_step_reference(a, lse, q, k, v, keep):
    from flashmath.attention import attention
    from flashmath.rowstate import merge_states

    a_s, lse_s = attention(q, k, v, mask=keep, return_lse=True)
    return merge_states(a, lse, a_s, lse_s)


def _step_model(merge="logaddexp", **state):
    def model(a, lse, q, k, v, keep):
        a_s, lse_s = _step_state(q, k, v, keep, **state)
        if merge == "replace":
            seen = ~np.isneginf(lse_s)
            return np.where(seen[:, None], a_s, a), np.where(seen, lse_s, lse)
        if merge == "add":
            return np.asarray(a, float) + a_s, np.logaddexp(lse, lse_s)
        return _merge(a, lse, a_s, lse_s, how=merge)

    return model


def _exp_everywhere_model(a, lse, q, k, v, keep):
    """The step's softmax without its max, e^x, and the merge on the same scale, e^L: ``(e^L A + s A_s) / (e^L +
    s)`` with ``s`` the sum of the step's e^x."""
    q, k, v, a, lse = (np.asarray(t, dtype=np.float64) for t in (q, k, v, a, lse))
    with np.errstate(all="ignore"):
        e = np.exp(np.where(keep, q @ k.T / np.sqrt(q.shape[-1]), -np.inf))
        s = e.sum(axis=-1)
        a_s = (e @ v) / s[:, None]
        total = np.exp(lse) + s
        return (np.exp(lse)[:, None] * a + s[:, None] * a_s) / total[:, None], np.log(total)


def _exp_everywhere_cause(a, lse, q, k, v, keep):
    """The cause of "no max in the step, e^L in the merge" on a case with a row that sees no key of the shard: its
    sum of e^x is 0 and A_s is 0/0, not an overflow (None elsewhere)."""
    if np.asarray(keep).any(axis=-1).all():
        return None
    return _(
        "a row that sees no key of the shard has a sum of e^x of 0, so its A_s = 0/0 = NaN, not an overflow: such a "
        "row gets nothing from this step, (A_s, L_s) = (0, -inf), and keeps its state: guard it"
    )


def _exp_weights_cause(lse, keep):
    """The cause of "e^L without a reference point" on a case with a row that has seen nothing yet and sees no key
    of the shard: there e^L and e^{L_s} are both 0 and the weights 0/0, not an overflow (None elsewhere)."""
    if not (np.isneginf(np.asarray(lse)) & ~np.asarray(keep).any(axis=-1)).any():
        return None
    return _(
        "a row that has seen nothing yet (L = -inf) and sees no key of the shard (L_s = -inf) has e^L = e^{L_s} = 0, "
        "so its weights are 0/0 = NaN, not an overflow: guard that row, which keeps (0, -inf)"
    )


RING_STEP_MISTAKES = (
    Mistake(
        N_("merged without rescaling"),
        N_(
            "the running output and the step's output are averages over different keys: weight each by its share "
            "of the sum, e^{L - L_new} and e^{L_s - L_new}, with L_new = np.logaddexp(L, L_s)"
        ),
        (_step_model("add"),),
    ),
    Mistake(
        N_("the step's output replaces the running one"),
        N_("the state after the step covers every shard seen so far: merge the step's (A_s, L_s) into (A, L)"),
        (_step_model("replace"),),
    ),
    Mistake(
        N_("the logsumexp as the max of the two"),
        N_("the sums add: L_new = np.logaddexp(L, L_s), which is more than the larger one"),
        (_step_model("max"),),
    ),
    # before "e^L without a reference point": on a run whose only failing case is the row with no key yet and none
    # in the shard, both models give NaN there, and the unguarded -inf - (-inf) is the cause the code shows
    Mistake(
        N_("a row that sees no key: -inf - (-inf)"),
        N_(
            "a row whose keep is False for every key of the shard gets no contribution from this step: its "
            "(A_s, L_s) is (0, -inf) (its max is -inf, and x - max is -inf - (-inf) = NaN: guard it), and the merge "
            "leaves its running state as it was (where both L and L_s are -inf, e^{L - L_new} is NaN too: guard "
            "it), never NaN"
        ),
        (
            _step_model(guard=False),  # the step unguarded, the merge guarded
            _step_model(merge="plain", guard=False),  # both unguarded: NaN in A and L
            _step_model(merge="plain"),  # the step guarded (or the package's), the merge unguarded
        ),
    ),
    Mistake(
        N_("e^L without a reference point"),
        N_(
            "e^L overflows for L near 710: measure both weights against L_new, e^{L - L_new} and e^{L_s - L_new} "
            "(np.logaddexp computes L_new safely)"
        ),
        (_step_model("exp"),),
        cause=lambda a, lse, q, k, v, keep: _exp_weights_cause(lse, keep),
    ),
    # after "e^L without a reference point", which names a step with its max and a merge on e^L
    Mistake(
        N_("no max in the step, e^L in the merge"),
        N_(
            "the step sums e^x with no max subtracted and the merge adds e^L: both overflow for a score or an L "
            "near 710; subtract the row's max in the step's softmax (chapter 2), then weight the two states by "
            "e^{L - L_new} and e^{L_s - L_new}, with L_new = np.logaddexp(L, L_s)"
        ),
        (_exp_everywhere_model,),
        cause=_exp_everywhere_cause,
    ),
    Mistake(
        N_("the scale 1/sqrt(D) forgotten"),
        N_("the scores are q . k / sqrt(D), as everywhere in the course"),
        (_step_model(scale=False),),
    ),
    Mistake(
        N_("the mask ignored"),
        N_("a key where keep is False is absent for that row: set its score to -inf before the softmax"),
        (_step_model(use_mask=False),),
    ),
)


def _ring_step_cases():
    rng = np.random.default_rng(1414)
    n, m, D = 3, 4, 4
    q, k, v = rng.standard_normal((n, D)), rng.standard_normal((m, D)), rng.standard_normal((m, D))
    a0, l0 = rng.standard_normal((n, D)), np.array([0.4, -0.3, 1.1])
    empty = (np.zeros((n, D)), np.full(n, -np.inf))
    every = np.ones((n, m), dtype=bool)
    causal = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=bool)
    hidden_row = every.copy()
    hidden_row[1] = False
    # each row's largest score q . k / sqrt(D) set to 712, 690 and 705: e^712 overflows float64 (above about 709.8),
    # so a softmax without its max subtracted fails on row 0 alone; the running L near 720 overflow e^L on every row
    x = q @ k.T / np.sqrt(D)
    top = np.take_along_axis(x, np.abs(x).argmax(axis=-1, keepdims=True), axis=-1)[:, 0]
    big = q * (np.array([712.0, 690.0, 705.0]) / top)[:, None]
    state_big = (a0, np.array([720.0, 715.0, 730.0]))
    return [
        (_("the first step: the running state empty (A = 0, L = -inf)"), (*empty, q, k, v, every)),
        (_("a later step, every key visible"), (a0, l0, q, k, v, every)),
        (_("a causal step: some keys after some rows"), (a0, l0, q, k, v, causal)),
        (_("a row that sees no key of the shard keeps its state"), (a0, l0, q, k, v, hidden_row)),
        (_("a whole step hidden: every row keeps its state"), (a0, l0, q, k, v, ~every)),
        (_("large logsumexps (L near 720: e^L overflows)"), (*state_big, big, k, v, every)),
        (_("a row with no key yet and none in the shard stays (0, -inf)"), (*empty, q, k, v, hidden_row)),
    ]


@exercise("14.2", RING_STEP_MISTAKES, solution="ring_merge_step")
def check_ring_step(fn) -> CheckReport:
    """Check ``fn(a, lse, q, k, v, keep) -> (a_new, lse_new)``: one ring step of one device (exercise 14.2). The
    attention of the device's queries ``q (n, D)`` over the held shard ``k (m, D)``, ``v (m, Dv)`` alone, where the
    boolean ``keep (n, m)`` is True, scale ``1/sqrt(D)``, merged into the running state ``a (n, Dv)``, ``lse (n,)``
    with chapter 10's merge; a row that sees no key of the shard keeps its state. Compared with
    :func:`flashmath.attention` and :func:`flashmath.splitkv.merge_states` to 1e-9. Named mistakes:
    :data:`RING_STEP_MISTAKES`."""
    cases = _ring_step_cases()
    rng = np.random.default_rng(14)
    q1, k1, v1 = rng.standard_normal((1, 3)), rng.standard_normal((1, 3)), rng.standard_normal((1, 5))
    properties = property_cases(
        [
            (
                _("one row and one key"),
                (np.array([[0.5, -1.0, 2.0, 0.0, 1.0]]), np.array([0.2]), q1, k1, v1, np.ones((1, 1), dtype=bool)),
            ),
            (
                _("keys and values of other widths (D = 3, Dv = 5)"),
                (
                    np.zeros((2, 5)),
                    np.full(2, -np.inf),
                    rng.standard_normal((2, 3)),
                    rng.standard_normal((4, 3)),
                    rng.standard_normal((4, 5)),
                    np.ones((2, 4), dtype=bool),
                ),
            ),
            (
                _("one row that sees no key of the shard"),
                (np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]), np.array([0.7]), q1, k1, v1, np.zeros((1, 1), dtype=bool)),
            ),
        ]
    )
    report = check_function(
        "check_ring_step",
        fn,
        cases,
        _ring_step_reference,
        RING_STEP_MISTAKES,
        n_out=2,
        names=("A", "lse"),
        hint=shape_hint,
        properties=properties,
    )
    inputs_unchanged(report, fn, _("the running state given is left unchanged"), cases[1][1], which=(0, 1), always=True)
    return report


# ------------------------------------------------------------------------------------------------------------------
# 14.3 the bytes a device sends after a step
# ------------------------------------------------------------------------------------------------------------------


def _rows(M, P, s, zigzag):
    """Rows of device ``s``'s shard of ``M`` rows: contiguous ``floor((s + 1) M / P) - floor(s M / P)``; zig-zag the
    same for chunks ``s`` and ``2P - 1 - s`` of ``2P``."""
    if not zigzag:
        return (s + 1) * M // P - s * M // P
    n = 2 * P
    return sum((c + 1) * M // n - c * M // n for c in (s, 2 * P - 1 - s))


def _step_bytes_reference(M, P, t, r, row_bytes, zigzag):
    from flashmath.ring_cost import ring_bytes_model

    M, P, t, r, row_bytes = (int(x) for x in (M, P, t, r, row_bytes))
    if t >= P - 1:
        return 0
    return int(ring_bytes_model(M, P, row_bytes=row_bytes, zigzag=bool(zigzag))[t, r])


def _split_rows(M, pieces, c):
    """Rows of piece ``c`` of ``M`` as ``np.array_split`` cuts them: the first ``M mod pieces`` get one more."""
    return M // pieces + (c < M % pieces)


def _bytes_model(shard, *, last=True, zigzag_read=True, sizes="floor"):
    def model(M, P, t, r, row_bytes, zigzag):
        M, P, t, r, row_bytes = (int(x) for x in (M, P, t, r, row_bytes))
        if last and t >= P - 1:
            return 0
        s = shard(P, t, r)
        if sizes == "equal_chunks" and zigzag:  # every chunk M // (2P) rows, the remainder dropped
            return 2 * (M // (2 * P)) * row_bytes
        if sizes == "array_split":
            pieces = (s, 2 * P - 1 - s) if zigzag and zigzag_read else (s,)
            return sum(_split_rows(M, len(pieces) * P, c) for c in pieces) * row_bytes
        return _rows(M, P, s, bool(zigzag) and zigzag_read) * row_bytes

    return model


SHARD_INDEX = "the shard index"  # the mistakes that write it another way: one code has only one of them
ONE_SIZE = "one size for every shard"  # M / P rounded down or up: one code rounds one way

# A wrong size can give, on some cases, the bytes of another device's shard, and a wrong index the bytes of a
# wrongly sized one: the cases tell them apart (M = 14 under zig-zag: both shards 7 rows, but chunks of
# M // (2P) = 3 give 6, so the shard received no longer explains that sizing mistake's failures)
STEP_BYTES_MISTAKES = (
    Mistake(
        N_("the device's own shard at every step"),
        N_("at step t device r holds, and passes on, the shard of device (r - t) mod P, its own only at step 0"),
        (_bytes_model(lambda P, t, r: r),),
        part=SHARD_INDEX,
    ),
    Mistake(
        N_("the ring turned the wrong way ((r + t) mod P)"),
        N_("device r receives from r - 1: at step t it holds the shard of device (r - t) mod P"),
        (_bytes_model(lambda P, t, r: (r + t) % P),),
        part=SHARD_INDEX,
    ),
    Mistake(
        N_("the shard received at this step (that of device (r - t - 1) mod P), not the one to send"),
        N_("after step t device r sends the shard it computed with, that of (r - t) mod P"),
        (_bytes_model(lambda P, t, r: (r - t - 1) % P),),
        part=SHARD_INDEX,
    ),
    Mistake(
        N_("something sent after the last step"),
        N_("after step P - 1 every device has seen every shard: nothing more is sent, 0 bytes"),
        (_bytes_model(lambda P, t, r: (r - t) % P, last=False),),
    ),
    Mistake(
        N_("M / P rows for every shard"),
        N_(
            "when P does not divide M the shards are not all M / P rows: shard s has floor((s + 1) M / P) - "
            "floor(s M / P) rows, so the shards differ by a row; under zig-zag the same formula with 2P in place of P "
            "gives the chunks, which differ by a row, and shard s is chunks s and 2P - 1 - s, so the shards may "
            "differ by two rows"
        ),
        (
            lambda M, P, t, r, row_bytes, zigzag: 0 if int(t) >= int(P) - 1 else int(M) // int(P) * int(row_bytes),
            lambda M, P, t, r, row_bytes, zigzag: 0 if int(t) >= int(P) - 1 else int(M) / int(P) * int(row_bytes),
        ),
        part=ONE_SIZE,
    ),
    Mistake(
        N_("ceil(M / P) rows for every shard"),
        N_(
            "rounding M / P up does not give the shards' sizes: when P does not divide M, shard s has "
            "floor((s + 1) M / P) - floor(s M / P) rows, so the shards differ by a row; under zig-zag the same formula "
            "with 2P in place of P gives the chunks, which differ by a row, and shard s is chunks s and 2P - 1 - s, so "
            "the shards may differ by two rows"
        ),
        (lambda M, P, t, r, row_bytes, zigzag: 0 if int(t) >= int(P) - 1 else -(-int(M) // int(P)) * int(row_bytes),),
        part=ONE_SIZE,
    ),
    Mistake(
        N_("zig-zag chunks of M // (2P) rows each"),
        N_(
            "when 2P does not divide M the chunks differ by a row, so a zig-zag shard can have more than "
            "2 (M // (2P)) rows: chunk c has floor((c + 1) M / (2P)) - floor(c M / (2P)) rows, and shard s is chunks "
            "s and 2P - 1 - s"
        ),
        (_bytes_model(lambda P, t, r: (r - t) % P, sizes="equal_chunks"),),
    ),
    Mistake(
        N_("np.array_split's sizes (the larger shards first)"),
        N_(
            "np.array_split gives the extra rows to the first pieces; the ring's shards take "
            "floor((s + 1) M / P) - floor(s M / P) rows (chunks of 2P under zig-zag), which puts them elsewhere"
        ),
        (_bytes_model(lambda P, t, r: (r - t) % P, sizes="array_split"),),
    ),
    Mistake(
        N_("contiguous shards under zig-zag"),
        N_("with zigzag=True shard s is chunks s and 2P - 1 - s of 2P, whose sizes may differ from the contiguous"),
        (_bytes_model(lambda P, t, r: (r - t) % P, zigzag_read=False),),
    ),
)


class _IndexAlone(Diagnosis):
    """The catalogue's diagnosis, except that a mistake of the shard index is named only when its model alone gives
    the learner's answer on every failing case, never as one of two that share the failing cases: an index model
    gives the bytes of a wrongly sized shard by coincidence on some cases (shard boundaries rounded up look like
    the shard received on four cases and like M / P rows on a fifth), and the two names would contradict each
    other. M / P rounded down and rounded up are one part (a code rounds one way); two sizing mistakes of other parts
    together (M // P rows and zig-zag chunks of M // (2P) rows) are still named."""

    def covering(self, failing) -> dict[int, Mistake]:
        every = self._rows
        self._rows = [(mistake, row) for mistake, row in every if mistake.part != SHARD_INDEX]
        try:
            return super().covering(failing)
        finally:
            self._rows = every


@exercise("14.3", STEP_BYTES_MISTAKES, solution="ring_step_bytes")
def check_step_bytes(fn) -> CheckReport:
    """Check ``fn(M, P, t, r, row_bytes, zigzag) -> int``: the bytes device ``r`` sends after step ``t`` of the
    forward ring (exercise 14.3), against :func:`flashmath.ring_cost.ring_bytes_model` (0 after the last step).
    Named mistakes: :data:`STEP_BYTES_MISTAKES`."""
    cases = [
        (
            _("M = {M}, P = {P}, step {t}, device {r}{zz}").format(M=M, P=P, t=t, r=r, zz=_(", zig-zag") if z else ""),
            (M, P, t, r, b, z),
        )
        for M, P, t, r, b, z in (
            (16, 4, 0, 1, 64, False),
            (16, 4, 2, 1, 64, False),
            (10, 4, 1, 2, 32, False),
            (10, 4, 2, 0, 32, False),
            (10, 4, 2, 3, 32, False),  # shard 1, 3 rows, as is its own: M // P rows is not the own shard's count
            (11, 3, 1, 0, 8, False),
            (13, 2, 0, 0, 16, True),
            (13, 2, 0, 1, 16, True),
            (14, 2, 0, 0, 16, True),  # both shards 7 rows, but not 2 (14 // 4) = 6
            (26, 3, 1, 0, 8, True),
            (19, 4, 1, 3, 16, True),
            (16, 4, 3, 2, 64, False),
        )
    ]
    properties = property_cases(
        [
            (_("one device: P = 1 sends nothing"), (8, 1, 0, 0, 64, False)),
            (_("the last step sends nothing"), (12, 3, 2, 1, 64, True)),
            (
                _("numpy integers: every size given as np.int64"),
                (np.int64(10), np.int64(4), np.int64(1), np.int64(2), np.int64(32), False),
            ),
        ]
    )
    return check_function(
        "check_step_bytes",
        fn,
        cases,
        _step_bytes_reference,
        STEP_BYTES_MISTAKES,
        n_out=1,
        names=(_("bytes"),),
        check_form=False,
        not_answer=Mistake(N_("not a number"), N_("return the number of bytes, an integer")),
        properties=properties,
        diagnosis=lambda args, answers: _IndexAlone(args, answers, STEP_BYTES_MISTAKES, same_arrays),
        convert=lambda out: None if out is None else as_arrays(out, 1),  # None is no number, not NaN
    )
