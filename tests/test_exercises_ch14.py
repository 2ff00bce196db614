"""Chapter 14's checkers (ring attention): several right answers pass, and each classic mistake, written as a learner
would, is caught and named."""

import math

import numpy as np
import pytest
from helpers import checker_tests, named

import flashmath as fm
from flashmath import exercises, solutions
from flashmath.ring import zigzag_chunks
from flashmath.ring_cost import ring_bytes_model, shard_rows
from flashmath.splitkv import merge_states

# ---- 14.1 ----------------------------------------------------------------------------------------------------------

ZIGZAG = {
    "the second chunk off by one (2P - r)": lambda P, r: (r, 2 * P - r),
    "the second half in order (P + r)": lambda P, r: (r, P + r),
    "the mirror among P chunks (P - 1 - r)": lambda P, r: tuple(sorted((r, P - 1 - r))),
    "the larger chunk first": lambda P, r: (2 * P - 1 - r, r),
}

ZIGZAG_RIGHT = [
    solutions.zigzag_pair,
    zigzag_chunks,  # the package's own
    lambda P, r: [r, 2 * P - 1 - r],  # a list
    lambda P, r: np.array([r, 2 * P - 1 - r]),  # an array
    lambda P, r: tuple(c for c in range(2 * P) if c in (r, 2 * P - 1 - r)),  # searched
    lambda P, r: (float(r), float(2 * P - 1 - r)),  # floats that are whole numbers
]


@pytest.mark.parametrize("fn", ZIGZAG_RIGHT)
def test_zigzag_right_answers_pass(fn):
    report = exercises.check_zigzag_chunks(fn)
    assert report.passed, report


# ---- 14.2 ----------------------------------------------------------------------------------------------------------


def step_attention(q, k, v, keep, *, scale=None, mask=True, guard=True):
    """A learner's step: the attention of q over k, v alone (no package), with switches for the mistakes."""
    D = q.shape[-1]
    x = q @ k.T / (math.sqrt(D) if scale is None else scale)
    if mask:
        x = np.where(keep, x, -np.inf)
    g = x.max(axis=1, keepdims=True)
    if guard:
        g = np.where(np.isinf(g), 0.0, g)
    e = np.exp(x - g)
    s = e.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = (e @ v) / s
        lse = (g + np.log(s))[:, 0]
    if guard:
        a = np.where(s > 0, a, 0.0)
    return a, lse


def right_merge(a, lse, a_s, lse_s):
    new = np.logaddexp(lse, lse_s)
    ref = np.where(np.isneginf(new), 0.0, new)
    w = np.where(np.isneginf(lse), 0.0, np.exp(lse - ref))[:, None]
    w_s = np.where(np.isneginf(lse_s), 0.0, np.exp(lse_s - ref))[:, None]
    return np.where(w > 0, w * a, 0.0) + np.where(w_s > 0, w_s * a_s, 0.0), new


def learner_step(a, lse, q, k, v, keep, **wrong):
    return right_merge(a, lse, *step_attention(q, k, v, keep, **wrong))


def package_step(a, lse, q, k, v, keep):
    a_s, lse_s = fm.attention(q, k, v, mask=keep, return_lse=True)
    return merge_states(a, lse, a_s, lse_s)


def ring_forward_step_itself(a, lse, q, k, v, keep):
    """The package's ring step on a block, with the mask as one row at a time (any right form passes)."""
    a_new, lse_new = a.copy(), lse.copy()
    for n in range(q.shape[0]):
        cols = np.flatnonzero(keep[n])
        if cols.size:
            a_s, l_s = fm.flash_attention(q[n : n + 1], k[cols], v[cols], return_lse=True, block_k=2)
            a_new[n : n + 1], lse_new[n : n + 1] = merge_states(a[n : n + 1], lse[n : n + 1], a_s, l_s)
    return a_new, lse_new


def step_without_rescaling(a, lse, q, k, v, keep):
    a_s, lse_s = step_attention(q, k, v, keep)
    return a + a_s, np.logaddexp(lse, lse_s)


def step_replacing(a, lse, q, k, v, keep):
    a_s, lse_s = step_attention(q, k, v, keep)
    seen = ~np.isneginf(lse_s)
    return np.where(seen[:, None], a_s, a), np.where(seen, lse_s, lse)


def step_max_lse(a, lse, q, k, v, keep):
    a_s, lse_s = step_attention(q, k, v, keep)
    new = np.maximum(lse, lse_s)
    ref = np.where(np.isneginf(new), 0.0, new)
    w = np.where(np.isneginf(lse), 0.0, np.exp(lse - ref))[:, None]
    w_s = np.where(np.isneginf(lse_s), 0.0, np.exp(lse_s - ref))[:, None]
    return np.where(w > 0, w * a, 0.0) + np.where(w_s > 0, w_s * a_s, 0.0), new


def step_plain_exp(a, lse, q, k, v, keep):
    a_s, lse_s = step_attention(q, k, v, keep)
    e, e_s = np.exp(lse), np.exp(lse_s)
    return (e[:, None] * a + e_s[:, None] * a_s) / (e + e_s)[:, None], np.log(e + e_s)


def step_exp_everywhere(a, lse, q, k, v, keep):
    """No reference point anywhere: the step's softmax as e^x over its sum, the merge on e^L (rev-g, round 22)."""
    e = np.exp(np.where(keep, q @ k.T / math.sqrt(q.shape[1]), -np.inf))
    s = e.sum(axis=1)
    a_s = e @ v / s[:, None]
    total = np.exp(lse) + s
    return (np.exp(lse)[:, None] * a + s[:, None] * a_s) / total[:, None], np.log(total)


RING_STEP = {
    "merged without rescaling": step_without_rescaling,
    "the step's output replaces the running one": step_replacing,
    "the logsumexp as the max of the two": step_max_lse,
    "e^L without a reference point": step_plain_exp,
    "no max in the step, e^L in the merge": step_exp_everywhere,
    "the scale 1/sqrt(D) forgotten": lambda a, lse, q, k, v, keep: learner_step(a, lse, q, k, v, keep, scale=1.0),
    "the mask ignored": lambda a, lse, q, k, v, keep: learner_step(a, lse, q, k, v, keep, mask=False),
    "a row that sees no key: -inf - (-inf)": lambda a, lse, q, k, v, keep: learner_step(
        a, lse, q, k, v, keep, guard=False
    ),
}

RING_STEP_RIGHT = [solutions.ring_merge_step, learner_step, package_step, ring_forward_step_itself]


@pytest.mark.parametrize("fn", RING_STEP_RIGHT)
def test_ring_step_right_answers_pass(fn):
    report = exercises.check_ring_step(fn)
    assert report.passed, report


def step_unguarded(a, lse, q, k, v, keep):
    """The natural code with no guard anywhere: a row that sees no key gets NaN in A and L."""
    x = np.where(keep, q @ k.T / math.sqrt(q.shape[1]), -np.inf)
    g = x.max(axis=1, keepdims=True)
    e = np.exp(x - g)
    s = e.sum(axis=1, keepdims=True)
    a_s, lse_s = e @ v / s, (g + np.log(s))[:, 0]
    new = np.logaddexp(lse, lse_s)
    return np.exp(lse - new)[:, None] * a + np.exp(lse_s - new)[:, None] * a_s, new


def step_merge_unguarded(a, lse, q, k, v, keep):
    """The package's step, the merge written out without a guard: NaN where both states are empty."""
    a_s, lse_s = fm.attention(q, k, v, mask=keep, return_lse=True)
    new = np.logaddexp(lse, lse_s)
    return np.exp(lse - new)[:, None] * a + np.exp(lse_s - new)[:, None] * a_s, new


@pytest.mark.parametrize("fn", [step_unguarded, step_merge_unguarded])
def test_ring_step_nan_of_an_unguarded_row_is_named(fn):
    with np.errstate(all="ignore"):
        report = exercises.check_ring_step(fn)
    assert not report.passed
    assert named(report) == {"a row that sees no key: -inf - (-inf)"}, report


def step_logaddexp_unguarded(a, lse, q, k, v, keep):
    """No max in the step's softmax and no guard: NaN on a row that sees no key; elsewhere right to 1e-16."""
    x = np.where(keep, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    lse_s = np.log(np.exp(x).sum(axis=1))
    a_s = np.exp(x - lse_s[:, None]) @ v
    new = np.logaddexp(lse, lse_s)
    return np.exp(lse - new)[:, None] * a + np.exp(lse_s - new)[:, None] * a_s, new


def test_ring_step_nan_failure_shows_no_rounding_difference_beside_it():
    """Review zhrev-aq (note on check_ring_step): after "got nan at [1, 0] where 0.361937 was expected" the message
    went on with "largest difference 1.11e-16 at [0, 3]", a rounding difference that read like a second mistake."""
    with np.errstate(all="ignore"):
        report = exercises.check_ring_step(step_logaddexp_unguarded)
    failed = {name: message for name, ok, message in report.cases if not ok}
    assert "a row that sees no key of the shard keeps its state" in failed, report
    assert all("got nan at" in message for message in failed.values()), report
    assert not any("largest difference" in message for message in failed.values()), report


def test_ring_step_plain_exp_names_0_over_0_not_overflow_for_an_empty_row():
    """e^L without a reference point fails two cases for two reasons (rev5-f): overflow at L near 720, and 0/0 for a
    row with nothing seen and no key in the shard; each case's message gives its own reason."""
    with np.errstate(all="ignore"):
        report = exercises.check_ring_step(step_plain_exp)
    failed = {name: message for name, ok, message in report.cases if not ok}
    assert set(failed) == {
        "large logsumexps (L near 720: e^L overflows)",
        "a row with no key yet and none in the shard stays (0, -inf)",
    }, report
    assert all("e^L without a reference point" in message for message in failed.values()), report
    assert "overflows for L near 710" in failed["large logsumexps (L near 720: e^L overflows)"], report
    empty = failed["a row with no key yet and none in the shard stays (0, -inf)"]
    assert "0/0" in empty and "overflows" not in empty, report


def test_ring_step_exp_everywhere_names_each_failing_case_with_its_cause():
    """A step with no max and a merge on e^L (rev-g, round 22) failed five cases with numbers only; it is named on
    every one: overflow where the scores and L are near 710, 0/0 where a row sees no key of the shard."""
    with np.errstate(all="ignore"):
        report = exercises.check_ring_step(step_exp_everywhere)
    failed = {name: message for name, ok, message in report.cases if not ok}
    assert len(failed) == 5, report
    assert all("no max in the step, e^L in the merge" in message for message in failed.values()), report
    for name, message in failed.items():
        if name.startswith("large logsumexps"):
            assert "overflow" in message and "0/0" not in message, report
        else:
            assert "0/0" in message and "not an overflow" in message, report


def test_ring_step_that_overwrites_the_state_is_caught():
    def in_place(a, lse, q, k, v, keep):
        out = learner_step(a, lse, q, k, v, keep)
        a[...], lse[...] = out
        return a, lse

    report = exercises.check_ring_step(in_place)
    assert not report.passed and "left unchanged" in repr(report), report


def test_ring_step_softmax_without_its_max_fails():
    """A step whose softmax takes e^x without subtracting the row's max passed every case while the "large
    logsumexps" case held scores of at most about 32 (rev21-d): that case's largest scores are now 712, 690 and 705,
    and e^712 overflows float64. It fails there alone, and no mistake of the catalogue is named for it (not
    "e^L without a reference point", whose model overflows on every row of that case)."""

    def no_max(a, lse, q, k, v, keep):
        x = q @ k.T / np.sqrt(q.shape[1])
        p = np.where(keep, np.exp(x), 0.0)  # no max subtracted
        s = p.sum(axis=1)
        seen = s > 0
        a_s = np.zeros((q.shape[0], v.shape[1]))
        a_s[seen] = (p @ v)[seen] / s[seen, None]
        with np.errstate(divide="ignore"):
            lse_s = np.log(s)
        return right_merge(a, lse, a_s, lse_s)

    case = exercises.chapter14._ring_step_cases()[5]
    assert case[0].startswith("large logsumexps")
    q, k = case[1][2], case[1][3]
    assert np.allclose((q @ k.T / np.sqrt(q.shape[1])).max(axis=1), [712.0, 690.0, 705.0])
    report = exercises.check_ring_step(no_max)
    failed = [name for name, ok, _ in report.cases if not ok]
    assert failed == [case[0]], report
    assert named(report) == set(), report


def test_ring_step_that_ignores_the_step_fails_on_large_scores():
    """Returning the running state unchanged passed the "large logsumexps" case while its step added e^-690 or so
    (rev21-d); with scores near 710 the step weighs e^(L_s - L) of about e^-8 or more there."""
    report = exercises.check_ring_step(lambda a, lse, q, k, v, keep: (a.copy(), lse.copy()))
    assert any(name.startswith("large logsumexps") and not ok for name, ok, _ in report.cases), report


# ---- 14.3 ----------------------------------------------------------------------------------------------------------


def rows_of(M, P, s, zigzag):
    return int(shard_rows(M, P, zigzag=zigzag)[s])


STEP_BYTES = {
    "the device's own shard at every step": lambda M, P, t, r, b, z: 0 if t >= P - 1 else rows_of(M, P, r, z) * b,
    "the ring turned the wrong way ((r + t) mod P)": lambda M, P, t, r, b, z: (
        0 if t >= P - 1 else rows_of(M, P, (r + t) % P, z) * b
    ),
    "the shard received at this step (that of device (r - t - 1) mod P), not the one to send": (
        lambda M, P, t, r, b, z: 0 if t >= P - 1 else rows_of(M, P, (r - t - 1) % P, z) * b
    ),
    "something sent after the last step": lambda M, P, t, r, b, z: rows_of(M, P, (r - t) % P, z) * b,
    "M / P rows for every shard": lambda M, P, t, r, b, z: 0 if t >= P - 1 else M // P * b,
    "ceil(M / P) rows for every shard": lambda M, P, t, r, b, z: 0 if t >= P - 1 else math.ceil(M / P) * b,
    "zig-zag chunks of M // (2P) rows each": lambda M, P, t, r, b, z: (
        0 if t >= P - 1 else (2 * (M // (2 * P)) if z else rows_of(M, P, (r - t) % P, False)) * b
    ),
    "contiguous shards under zig-zag": lambda M, P, t, r, b, z: (
        0 if t >= P - 1 else rows_of(M, P, (r - t) % P, False) * b
    ),
    "np.array_split's sizes (the larger shards first)": lambda M, P, t, r, b, z: (
        0 if t >= P - 1 else array_split_rows(M, P, (r - t) % P, z) * b
    ),
}


def array_split_rows(M, P, s, zigzag):
    """A learner's shard sizes from np.array_split (the first pieces one row larger), chunks of 2P under zig-zag."""
    if not zigzag:
        return len(np.array_split(np.arange(M), P)[s])
    chunks = np.array_split(np.arange(M), 2 * P)
    return len(chunks[s]) + len(chunks[2 * P - 1 - s])


STEP_BYTES_RIGHT = [
    solutions.ring_step_bytes,
    lambda M, P, t, r, b, z: 0 if t == P - 1 else int(ring_bytes_model(M, P, row_bytes=b, zigzag=z)[t, r]),
    lambda M, P, t, r, b, z: 0 if t + 1 >= P else float(rows_of(M, P, (r - t) % P, z) * b),  # a float count
    lambda M, P, t, r, b, z: np.int64(0 if t >= P - 1 else rows_of(M, P, (r - t + P) % P, z) * b),
]


@pytest.mark.parametrize("fn", STEP_BYTES_RIGHT)
def test_step_bytes_right_answers_pass(fn):
    report = exercises.check_step_bytes(fn)
    assert report.passed, report


WRONG = {
    "check_zigzag_chunks": ZIGZAG,
    "check_ring_step": RING_STEP,
    "check_step_bytes": STEP_BYTES,
}

test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


def test_the_solutions_can_be_shown():
    for name in ("zigzag_pair", "ring_merge_step", "ring_step_bytes"):
        assert f"def {name}(" in solutions.source_of(name, vars(solutions), solutions.__all__, "solutions")


def test_step_bytes_floor_chunks_are_named_as_a_sizing_mistake():
    """Zig-zag chunks of M // (2P) rows each (the rest right) was named "the shard received" (rev4-e, rev5-f): on the
    cases it fails, that index mistake gave the same bytes by chance. Named now by its own model, never by an index
    mistake; with M // P rows for the contiguous shards too, by the two sizing mistakes together."""
    floor_chunks = WRONG["check_step_bytes"]["zig-zag chunks of M // (2P) rows each"]
    report = exercises.check_step_bytes(floor_chunks)
    assert named(report) == {"zig-zag chunks of M // (2P) rows each"}, report
    assert "(r - t - 1)" not in repr(report), report

    def floor_everywhere(M, P, t, r, b, z):
        return 0 if t >= P - 1 else (2 * (M // (2 * P)) if z else M // P) * b

    report = exercises.check_step_bytes(floor_everywhere)
    assert named(report) == {"zig-zag chunks of M // (2P) rows each", "M / P rows for every shard"}, report


def test_step_bytes_ceil_shards_are_not_named_as_two_index_mistakes():
    """The right shard index with every shard ceil(M / P) rows failed 3 cases, and the report named "the shard
    received" on two and "the ring turned the wrong way" on the third (rev14-f): each index model matched its cases'
    bytes by coincidence, and a code writes the shard index one way only. Named now by its own model on all three;
    without that model, the two index mistakes are never named together (two mistakes of one part)."""
    from flashmath.exercises._report import Diagnosis, explaining

    def ceil_shards(M, P, t, r, row_bytes, zigzag):
        if t >= P - 1:
            return 0
        return math.ceil(M / P) * row_bytes  # the shard of (r - t) mod P, every one ceil(M / P) rows

    report = exercises.check_step_bytes(ceil_shards)
    failed = [message for _, ok, message in report.cases if not ok]
    assert len(failed) == 3, report
    assert named(report) == {"ceil(M / P) rows for every shard"}, report
    assert all("ceil(M / P) rows for every shard" in message for message in failed), report
    assert "mod P)" not in repr(report), report

    checker = exercises.check_step_bytes
    cases = [args for _, args in checker_cases(checker)]
    answers = [ceil_shards(*args) for args in cases]
    failing = [i for i, args in enumerate(cases) if answers[i] != exercises.chapter14._step_bytes_reference(*args)]
    assert len(failing) == 3
    without = tuple(m for m in exercises.chapter14.STEP_BYTES_MISTAKES if m.name != "ceil(M / P) rows for every shard")
    diagnosis = Diagnosis(cases, answers, without, lambda a, b: float(a) == float(b))
    index_mistakes = {m.name for m in without if m.part == "the shard index"}
    assert len(index_mistakes) == 3
    assert len({m.name for m in explaining(diagnosis, failing).values()} & index_mistakes) <= 1


def checker_cases(checker):
    """The cases ``(name, args)`` a checker runs, in order, read from the calls it makes to a recording function."""
    seen = []

    def record(*args):
        seen.append(args)
        return 0

    report = checker(record)
    return [(name, args) for (name, _, _), args in zip(report.cases, seen, strict=True)]


def test_step_bytes_sizing_messages_hold_on_every_case_they_can_be_shown_on():
    """The "M / P rows" and "ceil(M / P) rows" explanations say: when P does not divide M, the shards differ by a row
    and, under zig-zag, the chunks differ by a row and the shards (two chunks) may differ by two (rev18-b: on "M = 19,
    P = 4, step 1, device 3, zig-zag" the shards have 5, 4, 6 and 4 rows). Each model fails only where P does not
    divide M, and there every clause holds; the checker's cases include shards two rows apart."""
    from flashmath.ring_cost import shard_rows

    by_name = {m.name: m for m in exercises.chapter14.STEP_BYTES_MISTAKES}
    sizing = [by_name["M / P rows for every shard"], by_name["ceil(M / P) rows for every shard"]]
    for mistake in sizing:
        assert "differ by a row" in mistake.fix and "may differ by two rows" in mistake.fix
    cases = [args for _, args in checker_cases(exercises.check_step_bytes)]
    spreads = set()
    for args in cases:
        M, P, z = int(args[0]), int(args[1]), bool(args[5])
        for mistake in sizing:
            wrong = any(
                float(model(*args)) != exercises.chapter14._step_bytes_reference(*args) for model in mistake.models
            )
            if not wrong:
                continue
            assert M % P, (mistake.name, args)  # shown only where P does not divide M
            contiguous = shard_rows(M, P)
            assert contiguous.max() - contiguous.min() == 1
            if z:
                chunks = shard_rows(M, 2 * P)
                assert chunks.max() - chunks.min() == 1
                shards = shard_rows(M, P, zigzag=True)
                assert 1 <= shards.max() - shards.min() <= 2
                spreads.add(int(shards.max() - shards.min()))
    assert 2 in spreads  # the message's "may differ by two" is shown on such a case
    for M in range(1, 60):
        for P in range(1, 9):
            shards = shard_rows(M, P, zigzag=True)
            if M % P == 0:  # both models are right here: every shard M / P rows, zig-zag or not
                assert (shards == M // P).all() and (shard_rows(M, P) == M // P).all()
            else:
                assert np.ptp(shard_rows(M, P)) == 1 and np.ptp(shard_rows(M, 2 * P)) == 1 and np.ptp(shards) <= 2


def test_step_bytes_rounded_up_boundaries_get_no_two_contradicting_names():
    """Shard sizes from boundaries rounded up, ceil((s + 1) M / P) - ceil(s M / P), with the right index: the report
    named "the shard received" on four cases and "M / P rows for every shard" on a fifth (rev21-d), two models
    that each explained some failing cases and together all of them. A mistake is named now only when its one model
    gives the learner's answer on every failing case: here none does, so none is named."""

    def ceil_boundaries(M, P, t, r, row_bytes, zigzag):
        if t >= P - 1:
            return 0
        s = (r - t) % P

        def rows(n, c):
            return math.ceil((c + 1) * M / n) - math.ceil(c * M / n)

        return (rows(2 * P, s) + rows(2 * P, 2 * P - 1 - s) if zigzag else rows(P, s)) * row_bytes

    report = exercises.check_step_bytes(ceil_boundaries)
    assert not report.passed, report
    assert named(report) == set(), report
    assert "looks like" not in repr(report), report
