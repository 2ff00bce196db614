"""Chapters 6-10's checkers: the solutions pass, and every named mistake, written as a learner would, is caught and
named (and no other mistake of the catalogue is named)."""

import math

import numpy as np
import pytest
from helpers import assert_prediction_feedback, checker_tests, named, prediction_cell

import flashmath as fm
from flashmath import exercises, solutions
from flashmath.flash import fa1_tile_step, fa2_tile_step
from flashmath.rowstate import finish as rowstate_finish
from flashmath.rowstate import logsumexp_of


def rows_max(g, x):
    return np.maximum(g, x.max(axis=1))


def tile_step(g_of=rows_max, base=np.exp, s_rescaled=True, a_rule="right"):
    """A learner's tile step with one thing changed."""

    def step(g, s, a, x_tile, v_tile):
        g_new = g_of(g, x_tile)
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        r = base(g - ref)
        p = base(x_tile - ref[:, None])
        s_new = (s * r if s_rescaled else s) + p.sum(axis=1)
        pv = p @ v_tile
        rules = {
            "right": lambda: (a * (s * r)[:, None] + pv) / s_new[:, None],
            "not corrected": lambda: a + pv / s_new[:, None],
            "no rescale": lambda: (a * s[:, None] + pv) / s_new[:, None],
            "old sum": lambda: a * r[:, None] + pv / s[:, None],
            "not divided": lambda: a * r[:, None] + pv,
            "numerator": lambda: a * (s * r)[:, None] + pv,  # s_new A'_new: only the division missing
            "twice": lambda: (a * (s * r)[:, None] + pv) / s_new[:, None] / s_new[:, None],
        }
        return g_new, s_new, rules[a_rule]()

    return step


def tile_step_no_column_axis(g, s, a, x_tile, v_tile):
    """A learner's tile step with the row max subtracted without [:, None]: silent only on a square tile."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r = np.exp(g - ref)
    p = np.exp(x_tile - ref)
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]


TILE = {
    "the old output not corrected": tile_step(a_rule="not corrected"),
    "no rescale when the max changes": tile_step(a_rule="no rescale", s_rescaled=False),
    "the row max not given a column axis ([:, None] missing)": tile_step_no_column_axis,
    "the rescale of s missing": tile_step(s_rescaled=False),
    "divided by the old sum": tile_step(a_rule="old sum"),
    "FlashAttention-2's update (not divided)": tile_step(a_rule="not divided"),
    "the numerator returned (not divided by s_new)": tile_step(a_rule="numerator"),
    "divided twice": tile_step(a_rule="twice"),
    "the max over the whole tile": tile_step(g_of=lambda g, x: np.maximum(g, np.max(x))),
    "the max over the wrong axis": tile_step(g_of=lambda g, x: np.maximum(g, x.max(axis=0))),
    "the tile's max only (the old max forgotten)": tile_step(g_of=lambda g, x: x.max(axis=1)),
    "a wrong base (2) instead of e": tile_step(base=lambda t: 2.0**t),
    "not a triple": lambda g, s, a, x, v: solutions.tile_step(g, s, a, x, v)[2],
}


def inverted_rescale_step(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    r = np.exp(g_new - g)  # the factor upside down
    p = np.exp(x_tile - np.where(g_new == -np.inf, 0.0, g_new)[:, None])
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]


def max_from_zero_step(g, s, a, x_tile, v_tile):
    g = np.where(g == -np.inf, 0.0, g)  # "no -inf please": the max starts at 0
    return solutions.tile_step(g, s, a, x_tile, v_tile)


def in_place_step(g, s, a, x_tile, v_tile):
    g_new, s_new, a_new = solutions.tile_step(g, s, a, x_tile, v_tile)
    a *= 0  # reuses the caller's array
    a += a_new
    return g_new, s_new, a


def old_max_step(g, s, a, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    r = np.exp(g - np.where(g_new == -np.inf, 0.0, g_new))
    p = np.exp(x_tile - g[:, None])  # the weights against the old max
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]


def keepdims_step(g, s, a, x_tile, v_tile):
    g_new, s_new, a_new = solutions.tile_step(g, s, a, x_tile, v_tile)
    return g_new[:, None], s_new, a_new


def numerator_not_moved_step(g, s, a, x_tile, v_tile):
    """rev-c-06-6 (review 23): Algorithm 1's form with the tile's sum moved to the new max, its numerator not."""
    m = x_tile.max(axis=1)
    g_new = np.maximum(g, m)
    alpha = np.exp(g - g_new)
    p = np.exp(x_tile - m[:, None])
    s_new = s * alpha + p.sum(axis=1) * np.exp(m - g_new)
    return g_new, s_new, (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]  # P V still against m


TILE.update(
    {
        "the tile's numerator not moved to the new max": numerator_not_moved_step,
        "the rescale inverted (e^{g_new - g})": inverted_rescale_step,
        "the max started at 0": max_from_zero_step,
        "the input modified in place": in_place_step,
        "an answer of the wrong shape": keepdims_step,
        "P measured against the old max (e^{X - g})": old_max_step,
    }
)


def test_tile_step_counts_every_case_whatever_the_answer():
    def not_yet(g, s, a, x_tile, v_tile):
        raise NotImplementedError

    def broken(g, s, a, x_tile, v_tile):
        raise ValueError("a learner's bug")

    right = exercises.check_tile_step(solutions.tile_step)
    assert right.passed
    for fn in (not_yet, broken):
        report = exercises.check_tile_step(fn)
        assert len(report.cases) == len(right.cases), report
        in_place = [text for name, ok, text in report.cases if "left unchanged" in name]
        assert in_place and not report.passed, report


@pytest.mark.parametrize("checker, solution", [("check_numerator_step", "numerator_step"), ("check_finish", "finish")])
def test_numerator_step_and_finish_count_every_case_whatever_the_answer(checker, solution):
    """Issue 35 (reviews rev2-b, rev3-b): the stub of 7.1 and 7.2 lists the case "the state given (g, s, U) is left
    unchanged" too, as 6.1's does, so the count of cases does not grow once the function runs."""

    def not_yet(*args):
        raise NotImplementedError

    def broken(*args):
        raise ValueError("a learner's bug")

    check = getattr(exercises, checker)
    right = check(getattr(solutions, solution))
    assert right.passed
    for fn in (not_yet, broken):
        report = check(fn)
        assert [name for name, _, _ in report.cases] == [name for name, _, _ in right.cases], report
        assert ("the state given (g, s, U) is left unchanged", False) in [(n, ok) for n, ok, _ in report.cases]


def numerator_step(rescale=True, divide=False, invert=False, s_rescaled=True, base=np.exp):
    def step(g, s, u, x_tile, v_tile):
        g_new = np.maximum(g, x_tile.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        r = base(g - ref)
        p = base(x_tile - ref[:, None])
        s_new = (s * r if s_rescaled else s) + p.sum(axis=1)
        factor = (1 / r if invert else r) if rescale else np.ones_like(r)
        u_new = u * factor[:, None] + p @ v_tile
        return g_new, s_new, (u_new / s_new[:, None] if divide else u_new)

    return step


NUMERATOR = {
    "divided every step": numerator_step(divide=True),
    "no rescale when the max changes": numerator_step(rescale=False),
    "the rescale inverted": numerator_step(invert=True),
    "the rescale of s missing": numerator_step(s_rescaled=False),
    "a wrong base (2) instead of e": numerator_step(base=np.exp2),
    "not a triple": lambda *args: numerator_step()(*args)[2],
}


def numerator_inverted_raw(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    p = np.exp(x_tile - ref[:, None])
    r = np.exp(g_new - g)
    return g_new, s * r + p.sum(axis=1), u * r[:, None] + p @ v_tile


def numerator_in_place(g, s, u, x_tile, v_tile):
    g_new, s_new, u_new = solutions.numerator_step(g, s, u, x_tile, v_tile)
    s[:] = s_new  # the caller's state overwritten
    return g_new, s, u_new


NUMERATOR.update(
    {
        "the rescale inverted": numerator_inverted_raw,
        "the max started at 0": lambda g, s, u, x, v: solutions.numerator_step(np.maximum(g, 0.0), s, u, x, v),
        "the input modified in place": numerator_in_place,
        "an answer of the wrong shape": lambda *args: tuple(
            part.reshape(part.shape[0], -1) for part in solutions.numerator_step(*args)
        ),
    }
)


def finish_with(a_rule=None, lse_rule=None):
    def fin(g, s, u):
        a, lse = solutions.finish(g, s, u)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (a if a_rule is None else a_rule(g, s, u)), (lse if lse_rule is None else lse_rule(g, s, u))

    return fin


def finish_in_place(g, s, u):
    empty = s == 0
    u /= np.where(empty, 1.0, s)[:, None]  # divides the caller's U
    with np.errstate(divide="ignore"):
        return u, np.where(empty, -np.inf, g + np.log(np.where(empty, 1.0, s)))


FINISH = {
    "a base-2 logsumexp": finish_with(lse_rule=lambda g, s, u: g + np.log2(s)),
    "log(s) without g": finish_with(lse_rule=lambda g, s, u: np.log(s)),
    "divided again": finish_with(a_rule=lambda g, s, u: (u / s[:, None]) / s[:, None]),
    "not divided": finish_with(a_rule=lambda g, s, u: u),
    "0 / 0 on a row with no key": finish_with(a_rule=lambda g, s, u: u / s[:, None]),
    "not a pair": lambda g, s, u: solutions.finish(g, s, u)[0],
    "the logsumexp without the shift": finish_with(lse_rule=lambda g, s, u: np.log(np.exp(g) * s)),
    "FlashAttention-2's +inf convention": finish_with(
        lse_rule=lambda g, s, u: np.where(s == 0, np.inf, g + np.log(np.where(s == 0, 1.0, s)))
    ),
    "the input modified in place": lambda g, s, u: finish_in_place(g, s, u),
    "an answer of the wrong shape": lambda g, s, u: (
        solutions.finish(g, s, u)[0],
        solutions.finish(g, s, u)[1][:, None],
    ),
}

CAUSAL = {
    "the top-left alignment (off by M - N)": lambda N, M: np.arange(M)[None, :] <= np.arange(N)[:, None],
    "the offset N - M instead of M - N": lambda N, M: np.arange(M)[None, :] <= np.arange(N)[:, None] + N - M,
    "the diagonal excluded (< instead of <=)": lambda N, M: np.arange(M)[None, :] < np.arange(N)[:, None] + M - N,
    "transposed": lambda N, M: np.tril(np.ones((N, M), bool), k=M - N)[::-1, ::-1],
    "the diagonal shifted by one (m <= n + M - N + 1)": lambda N, M: np.tril(np.ones((N, M), bool), k=M - N + 1),
    "an inverted mask (True = masked)": lambda N, M: np.arange(M)[None, :] > np.arange(N)[:, None] + M - N,
    "a 0/-inf additive mask": lambda N, M: np.where(np.tril(np.ones((N, M), bool), k=M - N), 0.0, -np.inf),
    "an integer 0/1 mask": lambda N, M: np.tril(np.ones((N, M), dtype=int), k=M - N),
}


def masked_step(multiply=True, guard=True, fill=None):
    def step(g, s, a, x_tile, v_tile, keep):
        x = np.where(keep, x_tile, -np.inf if fill is None else fill)
        g_new = np.maximum(g, x.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new) if guard else g_new
        r, p = np.exp(g - ref), np.exp(x - ref[:, None])
        s_new = s * r + p.sum(axis=1)
        if multiply:
            pv = (p * keep) @ v_tile
        else:
            pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0).sum(axis=1)
        return g_new, s_new, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]

    return step


MASKED = {
    "masked terms multiplied by 0 (0 * NaN)": masked_step(),
    "-inf - (-inf) on a masked prefix": masked_step(multiply=False, guard=False),
    "a finite fill value instead of -inf": masked_step(fill=-1e9, multiply=False),
    "not a triple": lambda *args: solutions.masked_tile_step(*args)[1:],
    "the mask added to the scores (NaN + -inf)": lambda g, s, a, x, v, keep: biased_step(g, s, a, x, v, keep),
    "a per-column mask": lambda g, s, a, x, v, keep: solutions.masked_tile_step(
        g, s, a, x, v, np.broadcast_to(keep.all(axis=0), keep.shape)
    ),
    "the input modified in place": lambda g, s, a, x, v, keep: masked_in_place(g, s, a, x, v, keep),
    "an answer of the wrong shape": lambda *args: tuple(
        np.atleast_2d(part) for part in solutions.masked_tile_step(*args)
    ),
    "values zeroed only for keys that every row masks": lambda g, s, a, x, v, keep: tile_kernel_step(
        g, s, a, x, v, keep
    ),
}


def tile_kernel_step(g, s, a, x_tile, v_tile, keep):
    # as a GPU kernel would: the keys no row of the tile attends are never loaded (their values zeroed), the rest
    # enter one matrix product P V, masked pairs with weight 0
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * r + p.sum(axis=1)
    v_loaded = np.where(keep.any(axis=0)[:, None], v_tile, 0.0)
    a_new = (a * (s * r)[:, None] + p @ v_loaded) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


def biased_step(g, s, a, x_tile, v_tile, keep):
    x = x_tile + np.where(keep, 0.0, -np.inf)  # the mask as a bias, as in PyTorch's attn_mask
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * r + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0).sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]


def masked_in_place(g, s, a, x_tile, v_tile, keep):
    g_new, s_new, a_new = solutions.masked_tile_step(g, s, a, x_tile, v_tile, keep)
    g[...] = g_new  # the caller's g overwritten
    return g, s_new, a_new


def finite_fill_step(fill):
    def step(g, s, a, x_tile, v_tile, keep):
        x = np.where(keep, x_tile, fill)
        g_new = np.maximum(g, x.max(axis=1))
        r, p = np.exp(g - g_new), np.exp(x - g_new[:, None]) * keep
        s_new = s * r + p.sum(axis=1)
        pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0).sum(axis=1)
        return g_new, s_new, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None]

    return step


def unguarded_but_divided_safely(g, s, a, x_tile, v_tile, keep):
    # no max_or_zero guard, but the division guarded by s_new > 0: the NaN of e^{-inf + inf} shows in s_new only
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    with np.errstate(invalid="ignore"):
        r, p = np.exp(g - g_new), np.where(keep, np.exp(x - g_new[:, None]), 0.0)
    s_new = s * r + p.sum(axis=1)
    pv = np.einsum("ij,ijd->id", p, np.where(keep[:, :, None], v_tile[None], 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return g_new, s_new, np.where(s_new[:, None] > 0, (a * (s * r)[:, None] + pv) / s_new[:, None], 0.0)


def biased_divided_safely(fallback, score=None):
    # the mask as a bias (or log(keep)), the weights selected by keep, the division guarded by s_new > 0: a row with a
    # NaN or +inf masked score gets g_new = s_new = NaN, and A' the fallback (the old A', or 0) there
    def step(g, s, a, x_tile, v_tile, keep):
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x_tile + np.where(keep, 0.0, -np.inf) if score is None else score(x_tile, keep)
            g_new = np.maximum(g, x.max(axis=1))
            ref = np.where(np.isneginf(g_new), 0.0, g_new)
            r, p = np.exp(g - ref), np.where(keep, np.exp(x - ref[:, None]), 0.0)
            s_new = s * r + p.sum(axis=1)
            pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
            a_new = (a * (s * r)[:, None] + pv) / np.where(s_new > 0, s_new, 1)[:, None]
            return g_new, s_new, np.where(s_new[:, None] > 0, a_new, a if fallback == "old" else 0.0)

    return step


def selected_divided_safely(fallback):
    # right: the same step with the mask selected, np.where(keep, X, -inf)
    return biased_divided_safely(fallback, score=lambda x, keep: np.where(keep, x, -np.inf))


MASKED_MORE = {  # more learner-style variants of some mistakes above
    "-inf - (-inf) on a masked prefix": [unguarded_but_divided_safely],
    "the mask added to the scores (NaN + -inf)": [
        biased_divided_safely("old"),
        biased_divided_safely("zero"),
        biased_divided_safely("old", score=lambda x, keep: x + np.log(keep)),
    ],
    "a finite fill value instead of -inf": [finite_fill_step(-1e30), finite_fill_step(np.finfo(np.float64).min / 2)],
    "a per-column mask": [
        lambda g, s, a, x, v, keep: solutions.masked_tile_step(
            g, s, a, x, v, np.broadcast_to(keep.any(axis=0), keep.shape)
        )
    ],
}


def merge_with(a_rule, lse_rule=np.logaddexp):
    def merge(a1, l1, a2, l2):
        with np.errstate(all="ignore"):
            lse = lse_rule(l1, l2)
            return a_rule(a1, l1, a2, l2, lse), lse

    return merge


def shares(a1, l1, a2, l2, lse):
    return solutions.merge_states(a1, l1, a2, l2)[0]


MERGE = {
    "merged without rescaling": merge_with(lambda a1, l1, a2, l2, L: (a1 + a2) / 2),
    "the logsumexp as the max of the two": merge_with(shares, np.maximum),
    "the logsumexps added": merge_with(shares, lambda l1, l2: l1 + l2),
    "a base-2 logsumexp": merge_with(shares, np.logaddexp2),
    "e^{L_p} without a common reference": merge_with(
        lambda a1, l1, a2, l2, L: (
            (np.exp(l1)[:, None] * a1 + np.exp(l2)[:, None] * a2) / (np.exp(l1) + np.exp(l2))[:, None]
        )
    ),
    "an empty part's output read (0 * NaN)": lambda a1, l1, a2, l2: merge_reading_empty_outputs(a1, l1, a2, l2),
    "an empty part multiplied by its weight (0 * NaN, and -inf - (-inf))": merge_with(
        lambda a1, l1, a2, l2, L: np.exp(l1 - L)[:, None] * a1 + np.exp(l2 - L)[:, None] * a2
    ),
    "not a pair": lambda *args: solutions.merge_states(*args)[0],
    "both parts empty: -inf - (-inf)": merge_with(
        lambda a1, l1, a2, l2, L: (
            np.where(  # weight 0: skip the part
                np.exp(l1 - L)[:, None] == 0, 0, np.exp(l1 - L)[:, None] * a1
            )
            + np.where(np.exp(l2 - L)[:, None] == 0, 0, np.exp(l2 - L)[:, None] * a2)
        )
    ),
    "the weights swapped": merge_with(
        lambda a1, l1, a2, l2, L: np.exp(l2 - L)[:, None] * a1 + np.exp(l1 - L)[:, None] * a2
    ),
    "the weights inverted (e^{L - L_p})": merge_with(
        lambda a1, l1, a2, l2, L: np.exp(L - l1)[:, None] * a1 + np.exp(L - l2)[:, None] * a2
    ),
    "a base-2 merge": merge_with(
        lambda a1, l1, a2, l2, L: (
            np.where(np.isneginf(l1)[:, None], 0, 2.0 ** (l1 - L)[:, None] * a1)
            + np.where(np.isneginf(l2)[:, None], 0, 2.0 ** (l2 - L)[:, None] * a2)
        ),
        np.logaddexp2,
    ),
    "the logsumexp without the shift": merge_with(shares, lambda l1, l2: np.log(np.exp(l1) + np.exp(l2))),
    "the input modified in place": lambda a1, l1, a2, l2: merge_in_place(a1, l1, a2, l2),
    "an answer of the wrong shape": lambda *args: (
        solutions.merge_states(*args)[0],
        solutions.merge_states(*args)[1][:, None],
    ),
}


def merge_in_place(a1, l1, a2, l2):
    a, lse = solutions.merge_states(a1, l1, a2, l2)
    a1[...] = a  # the first state overwritten
    return a1, lse


def merge_scaling_in_place(a1, l1, a2, l2):
    """10.1 with the first output scaled by its share in place (a1 *= w1[:, None]): right values, a1 changed."""
    a, lse = solutions.merge_states(a1, l1, a2, l2)
    w1 = np.where(np.isneginf(l1), 0.0, np.exp(l1 - np.where(np.isneginf(lse), 0.0, lse)))
    with np.errstate(invalid="ignore"):
        a1 *= w1[:, None]
    return a, lse


def merge_lse_in_place(a1, l1, a2, l2):
    """10.1 with the merged logsumexp written into lse2 (lse2[...] = lse), which it returns."""
    a, lse = solutions.merge_states(a1, l1, a2, l2)
    l2[...] = lse
    return a, l2


@pytest.mark.parametrize(
    "fn, arg",
    [
        (merge_in_place, "a1 (argument 1)"),
        (merge_scaling_in_place, "a1 (argument 1)"),
        (merge_lse_in_place, "lse2 (argument 4)"),
    ],
)
def test_merge_in_place_names_the_argument_and_gives_examples_of_its_own(fn, arg):
    """Issue 35 (reviews rev4-c, rev5-d): an argument changed in place is named, and the message's examples are
    10.1's own (a1 *= w1[:, None], lse1[...] = lse), not another exercise's (x -= x.max(), q /= ...)."""
    report = exercises.check_merge_states(fn)
    failed = [(name, msg) for name, ok, msg in report.cases if not ok]
    assert failed and not report.passed, report
    assert "the two states given are left unchanged" in [name for name, _ in failed]
    for _name, msg in failed:
        assert msg.startswith(arg + " was changed: looks like the input modified in place"), msg
        assert "a1 *= w1[:, None]" in msg and "lse1[...] = lse" in msg, msg
        assert "x.max()" not in msg and "q /=" not in msg, msg


def test_merge_right_answers_are_not_called_in_place():
    """Copies made inside the function are fine: a right answer that scales its own copies passes."""

    def copies_then_scales(a1, l1, a2, l2):
        a1, a2 = a1.copy(), a2.copy()
        lse = np.logaddexp(l1, l2)
        ref = np.where(np.isneginf(lse), 0.0, lse)
        w1 = np.where(np.isneginf(l1), 0.0, np.exp(l1 - ref))
        w2 = np.where(np.isneginf(l2), 0.0, np.exp(l2 - ref))
        a1[np.isneginf(l1)] = 0.0
        a2[np.isneginf(l2)] = 0.0
        a1 *= w1[:, None]
        a2 *= w2[:, None]
        return a1 + a2, lse

    assert exercises.check_merge_states(copies_then_scales).passed


def merge_reading_empty_outputs(a1, l1, a2, l2):
    """10.1 as a reviewer wrote it (issue 35): the shares measured against 0 where both parts are empty, but an empty
    part's output multiplied by its weight 0, not selected away: NaN where that output holds NaN or inf."""
    lse = np.logaddexp(l1, l2)
    ref = np.where(np.isneginf(lse), 0.0, lse)
    with np.errstate(invalid="ignore"):
        return np.exp(l1 - ref)[:, None] * a1 + np.exp(l2 - ref)[:, None] * a2, lse


def merge_with_exp_of_lse(a1, l1, a2, l2):
    """10.1 as a reviewer wrote it (issue 35): e^{L_p} with no common reference, L = log(e^{L_1} + e^{L_2}). Where
    both parts are empty it divides 0 by 0, even with outputs of 0."""
    with np.errstate(all="ignore"):
        total = np.exp(l1) + np.exp(l2)
        return (np.exp(l1)[:, None] * a1 + np.exp(l2)[:, None] * a2) / total[:, None], np.log(total)


def test_a_zero_over_zero_is_not_named_as_an_output_read():
    """Issue 35 (review rev-c): e^{L} computed directly fails "both ranges empty in every row", whose outputs are
    zeros, by 0 / 0; the mistake that reads an empty part's output (0 * NaN) must not be named for it. The whole run
    is e^{L_p} without a common reference, whose message names 0 / 0."""
    report = exercises.check_merge_states(merge_with_exp_of_lse)
    assert named(report) == {"e^{L_p} without a common reference"}, report
    (both_empty,) = [msg for name, ok, msg in report.cases if name == "property: both ranges empty in every row"]
    assert "0 / 0" in both_empty and "output read" not in both_empty


def test_an_output_read_is_named_only_where_it_explains_the_failure():
    """Issue 35 (review rev-c): the guarded shares times an empty part's NaN or inf fail the three cases whose empty
    part holds NaN or inf, and pass "both ranges empty in every row"; the unguarded shares fail that one too, by
    -inf - (-inf), which the second mistake's message states."""
    guarded = exercises.check_merge_states(merge_reading_empty_outputs)
    assert named(guarded) == {"an empty part's output read (0 * NaN)"}, guarded
    assert [name for name, ok, _ in guarded.cases if not ok] == [
        "an empty range (L = -inf) whose output holds NaN",
        "the first range empty, its output +inf",
        "both ranges empty (row 0), then one (row 1)",
    ]
    unguarded = exercises.check_merge_states(
        MERGE["an empty part multiplied by its weight (0 * NaN, and -inf - (-inf))"]
    )
    assert named(unguarded) == {"an empty part multiplied by its weight (0 * NaN, and -inf - (-inf))"}, unguarded
    (both_empty,) = [msg for name, ok, msg in unguarded.cases if name == "property: both ranges empty in every row"]
    assert "-inf + inf" in both_empty


MERGE_MORE = {
    "an empty part's output read (0 * NaN)": [
        merge_with(
            lambda a1, l1, a2, l2, L: (
                np.exp(l1 - np.where(np.isneginf(L), 0.0, L))[:, None] * a1
                + np.where(np.isneginf(l2)[:, None], 0, np.exp(l2 - L)[:, None] * a2)
            )
        )
    ],
    "an empty part multiplied by its weight (0 * NaN, and -inf - (-inf))": [
        merge_with(
            lambda a1, l1, a2, l2, L: (
                np.exp(l1 - L)[:, None] * a1 + np.where(np.isneginf(l2)[:, None], 0, np.exp(l2 - L)[:, None] * a2)
            )
        ),
        lambda a1, l1, a2, l2: merge_against_the_max_unguarded(a1, l1, a2, l2),
    ],
    "the weights swapped": [merge_with(lambda a1, l1, a2, l2, L: solutions.merge_states(a1, l2, a2, l1)[0])],
}


def merge_against_the_max_unguarded(a1, l1, a2, l2):
    """10.1 as a reviewer wrote it (review rev-e, round 22), in the FlashAttention-2 style of chapter 2: the shares
    e^{L_p - m} / (e^{L_1 - m} + e^{L_2 - m}) against the larger logsumexp m, L = m + log(sum), no empty part
    selected away: NaN where an empty part's output holds NaN or inf (0 * NaN) and where both are empty (-inf + inf)."""
    with np.errstate(all="ignore"):
        m = np.maximum(l1, l2)
        w1, w2 = np.exp(l1 - m), np.exp(l2 - m)
        total = w1 + w2
        return (w1[:, None] * a1 + w2[:, None] * a2) / total[:, None], m + np.log(total)


# issue 34, second pass: the mistakes set 1 showed, each written as a learner would


def _tile_parts(g, s, x_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    return g_new, np.exp(g - ref), np.exp(x_tile - ref[:, None])


def pv_not_divided_step(g, s, a, x_tile, v_tile):
    g_new, alpha, p = _tile_parts(g, s, x_tile)
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, a * (s * alpha / s_new)[:, None] + p @ v_tile


def no_s_factor_step(g, s, a, x_tile, v_tile):
    g_new, alpha, p = _tile_parts(g, s, x_tile)
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * alpha[:, None] + p @ v_tile) / s_new[:, None]


def s_overwritten_step(g, s, a, x_tile, v_tile):
    g_new, alpha, p = _tile_parts(g, s, x_tile)
    s = s * alpha + p.sum(axis=1)
    return g_new, s, a * (s * alpha / s)[:, None] + (p @ v_tile) / s[:, None]


def own_max_step(g, s, a, x_tile, v_tile):
    m = x_tile.max(axis=1)
    p = np.exp(x_tile - m[:, None])
    g_new = np.maximum(g, m)
    alpha = np.exp(g - g_new)
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]


def column_sum_step(g, s, a, x_tile, v_tile):
    g_new, alpha, p = _tile_parts(g, s, x_tile)
    s_new = s * alpha + p.sum(axis=0)
    return g_new, s_new, a * (s * alpha / s_new)[:, None] + (p @ v_tile) / s_new[:, None]


TILE.update(
    {
        "P V not divided by s_new": pv_not_divided_step,
        "the factor s missing from the old term": no_s_factor_step,
        "the factor s / s_new missing from the old term": s_overwritten_step,
        "P measured against the tile's own max": own_max_step,
        "the row sum over the wrong axis": column_sum_step,
    }
)


def numerator_chapter6_factor(g, s, u, x_tile, v_tile):
    g_new, alpha, p = _tile_parts(g, s, x_tile)
    return g_new, s * alpha + p.sum(axis=1), u * (s * alpha)[:, None] + p @ v_tile


def numerator_tile_max_only(g, s, u, x_tile, v_tile):
    g_new = x_tile.max(axis=1)
    alpha, p = np.exp(g - g_new), np.exp(x_tile - g_new[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


def numerator_old_max_weights(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha, p = np.exp(g - g_new), np.exp(x_tile - g[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


NUMERATOR.update(
    {
        "chapter 6's factor s e^{g - g_new} on U": numerator_chapter6_factor,
        "the tile's max only (the old max forgotten)": numerator_tile_max_only,
        "P measured against the old max (e^{X - g})": numerator_old_max_weights,
    }
)


def finish_guarded_lse(g, s, u):
    g0, s1 = np.where(g == -np.inf, 0, g), np.where(s == 0, 1, s)
    return u / s1[:, None], g0 + np.log(s1)


def finish_without_column_axis(g, s, u):
    return u / np.where(s == 0, 1, s), g + np.log(s)


FINISH.update(
    {
        "the empty row's logsumexp guarded to 0": finish_guarded_lse,
        "s divided along the value columns (no [:, None])": finish_without_column_axis,
    }
)


def _select_terms(p, v_tile, keep):
    return np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0).sum(axis=1)


def masked_after_the_max(g, s, a, x_tile, v_tile, keep):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.where(keep, np.exp(x_tile - ref[:, None]), 0.0)
    s_new = s * alpha + p.sum(axis=1)
    return (
        g_new,
        s_new,
        (a * (s * alpha)[:, None] + _select_terms(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None],
    )


def masked_keep_inverted(g, s, a, x_tile, v_tile, keep):
    return solutions.masked_tile_step(g, s, a, x_tile, v_tile, ~keep)


def masked_scores_times_keep(g, s, a, x_tile, v_tile, keep):
    x = x_tile * keep
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    return (
        g_new,
        s_new,
        (a * (s * alpha)[:, None] + _select_terms(p, v_tile, keep)) / np.where(s_new == 0, 1, s_new)[:, None],
    )


def masked_division_unguarded(g, s, a, x_tile, v_tile, keep):
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * (s * alpha)[:, None] + _select_terms(p, v_tile, keep)) / s_new[:, None]


MASKED.update(
    {
        "the mask applied after the max": masked_after_the_max,
        "keep read the wrong way round": masked_keep_inverted,
        "the scores multiplied by the mask (a masked score 0)": masked_scores_times_keep,
        "0 / 0 on a row with no key yet": masked_division_unguarded,
    }
)


def merge_by_sums(a1, l1, a2, l2):
    lse = np.logaddexp(l1, l2)
    a = np.where(l1[:, None] == -np.inf, 0.0, np.exp(l1)[:, None] * a1) + np.where(
        l2[:, None] == -np.inf, 0.0, np.exp(l2)[:, None] * a2
    )
    return a, lse


def merge_shares_without_column_axis(a1, l1, a2, l2):
    lse = np.logaddexp(l1, l2)
    w1 = np.where(l1 == -np.inf, 0.0, np.exp(l1 - lse))
    w2 = np.where(l2 == -np.inf, 0.0, np.exp(l2 - lse))
    return np.where(l1[:, None] == -np.inf, 0.0, w1 * a1) + np.where(l2[:, None] == -np.inf, 0.0, w2 * a2), lse


def merge_shifted_unguarded(a1, l1, a2, l2):
    m = np.maximum(l1, l2)
    e1, e2 = np.exp(l1 - m), np.exp(l2 - m)
    num = np.where(l1[:, None] == -np.inf, 0.0, e1[:, None] * a1) + np.where(
        l2[:, None] == -np.inf, 0.0, e2[:, None] * a2
    )
    return num / (e1 + e2)[:, None], m + np.log(e1 + e2)


MERGE.update(
    {
        "the parts weighted by e^{L_p}, not by their shares": merge_by_sums,
        "the shares along the value columns (no [:, None])": merge_shares_without_column_axis,
        "0 / 0 where both ranges are empty": merge_shifted_unguarded,
    }
)

# Issue 34, set 2: the kinds of mistake a second learner set showed unnamed.


def clipped_tile_step(g, s, a, x_tile, v_tile):
    x = np.clip(x_tile, -100, 100)  # "to avoid overflow"
    g_new = np.maximum(g, x.max(axis=1))
    alpha = np.exp(g - g_new)
    p = np.exp(x - g_new[:, None])
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * (s * alpha)[:, None] + p @ v_tile) / s_new[:, None]


def clipped_numerator_step(g, s, u, x_tile, v_tile):
    x = np.minimum(x_tile, 88.0)  # float32's exp limit, above only
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha, p = np.exp(g - ref), np.exp(x - ref[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


def finish_log10(g, s, u):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(s[:, None] > 0, u / np.where(s > 0, s, 1.0)[:, None], 0.0)
        return a, g + np.log10(s)


def causal_every_row_sees_key_0(N, M):
    mask = np.tril(np.ones((N, M), dtype=bool), k=M - N)
    mask[:, 0] = True  # "every query sees at least the first key"
    return mask


def causal_offset_clamped(N, M):
    return np.arange(M)[None, :] <= np.arange(N)[:, None] + max(M - N, 0)


def causal_sizes_swapped(N, M):
    return np.tri(M, N, k=N - M, dtype=bool)


def masked_values_cleaned(g, s, a, x_tile, v_tile, keep):
    v = np.where(np.isfinite(v_tile), v_tile, 0.0)  # "sanitise" the values
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * (s * alpha)[:, None] + p @ v) / np.where(s_new == 0, 1, s_new)[:, None]


def masked_clipped(g, s, a, x_tile, v_tile, keep):
    return solutions.masked_tile_step(g, s, a, np.clip(x_tile, -50, 50), v_tile, keep)


def masked_scores_and_weights_times_keep(g, s, a, x_tile, v_tile, keep):
    x = x_tile * keep
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha = np.exp(g - ref)
    p = np.exp(x - ref[:, None]) * keep
    s_new = s * alpha + p.sum(axis=1)
    return g_new, s_new, (a * (s * alpha)[:, None] + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]


def merge_shares_against_the_max(a1, l1, a2, l2):
    lse = np.logaddexp(l1, l2)
    m = np.maximum(l1, l2)
    m = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(l1 - m), np.exp(l2 - m)  # never divided by w1 + w2
    a = np.where(l1[:, None] == -np.inf, 0.0, w1[:, None] * a1) + np.where(
        l2[:, None] == -np.inf, 0.0, w2[:, None] * a2
    )
    return a, lse


TILE["the scores clipped"] = clipped_tile_step
NUMERATOR["the scores clipped"] = clipped_numerator_step
FINISH["a base-10 logsumexp"] = finish_log10
CAUSAL["every query given a key (no empty row)"] = causal_every_row_sees_key_0
CAUSAL["N and M swapped (an (M, N) mask)"] = causal_sizes_swapped
MASKED["the values cleaned of NaN and inf"] = masked_values_cleaned
MASKED["the scores clipped"] = masked_clipped
MASKED_MORE.setdefault("the scores multiplied by the mask (a masked score 0)", []).append(
    masked_scores_and_weights_times_keep
)
MERGE["the shares not divided by their sum"] = merge_shares_against_the_max


def masked_numerator_step(g, s, a, x_tile, v_tile, keep, old_term=lambda a, s, r: a * r[:, None]):
    """Chapter 7's numerator step with the mask done right (review rev-d-08-5): U e^{g - g_new} + P V, with a as U,
    never divided by s_new."""
    x = np.where(keep, x_tile, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x - ref[:, None])
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None], 0.0).sum(axis=1)
    return g_new, s * r + p.sum(axis=1), old_term(a, s, r) + pv


NUMERATOR_KEPT = "chapter 7's numerator kept (not divided by s_new)"
MASKED[NUMERATOR_KEPT] = masked_numerator_step


def masked_numerator_s_new_a(g, s, a, x_tile, v_tile, keep):
    """s_new A'_new: 6.1's step with the mask, only the division by s_new missing."""
    return masked_numerator_step(g, s, a, x_tile, v_tile, keep, old_term=lambda a, s, r: a * (s * r)[:, None])


MASKED_MORE.setdefault(NUMERATOR_KEPT, []).append(masked_numerator_s_new_a)


def test_chapter_7s_numerator_is_named_for_that_answer_and_not_for_a_right_one():
    report = exercises.check_masked_tile_step(masked_numerator_step)
    assert not report.passed
    assert named(report) == {NUMERATOR_KEPT}, report
    assert "exercise 6.1's average A'" in repr(report), report
    right = exercises.check_masked_tile_step(solutions.masked_tile_step)
    assert right.passed and not named(right), right
    assert NUMERATOR_KEPT not in repr(right)


def masked_bias_then_matmul(g, s, a, x_tile, v_tile, keep):
    """Cell 10's two plain steps (review rev-k-08-5): a 0/-inf bias added to the scores, then P @ V."""
    x = x_tile + np.where(keep, 0.0, -np.inf)
    g_new = np.maximum(g, x.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]


def masked_weights_times_keep(g, s, a, x_tile, v_tile, keep):
    """The max over the kept scores, then P = e^{X - g_new} * keep and P @ V (review rev-k-08-6)."""
    g_new = np.maximum(g, np.where(keep, x_tile, -np.inf).max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x_tile - ref[:, None]) * keep
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]


def test_a_bias_then_p_v_is_named_as_its_two_mistakes():
    """Not "the scores multiplied by the mask" (its model fails the masked prefix this code passes): the bias on
    the case with NaN and +inf in masked scores, 0 * NaN on the three cases with NaN or inf in a masked value row."""
    with np.errstate(invalid="ignore"):
        report = exercises.check_masked_tile_step(masked_bias_then_matmul)
    assert named(report) == {"masked terms multiplied by 0 (0 * NaN)", "the mask added to the scores (NaN + -inf)"}
    failed = {name: msg for name, ok, msg in report.cases if not ok}
    assert "the mask added to the scores" in failed["NaN and +inf in masked scores"], report
    assert "0 * NaN" in failed["NaN in the value row of a key masked for some rows only"], report


def test_weights_multiplied_by_the_mask_are_named_as_0_times_nan():
    with np.errstate(invalid="ignore"):
        report = exercises.check_masked_tile_step(masked_weights_times_keep)
    assert not report.passed
    assert named(report) == {"masked terms multiplied by 0 (0 * NaN)"}, report


def test_a_clamped_causal_offset_is_named_as_no_empty_row():
    report = exercises.check_causal_mask(causal_offset_clamped)
    assert not report.passed
    assert named(report) == {"every query given a key (no empty row)"}, report


# set 3's kinds (issue 34, fourth pass): each mistake in more than one of the forms learners write


def tile_step_no_shift(g, s, a, x_tile, v_tile):
    """No max subtracted: P = e^X, s and A' summed against 0."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p = np.exp(x_tile)
        s_new = s + p.sum(axis=1)
        return g_new, s_new, (s[:, None] * a + p @ v_tile) / s_new[:, None]


def tile_step_old_g(g, s, a, x_tile, v_tile):
    g_new, s_new, a_new = solutions.tile_step(g, s, a, x_tile, v_tile)
    return g.copy(), s_new, a_new


def tile_step_against_old_max(g, s, a, x_tile, v_tile):
    """Everything measured against the old max (0 while empty): P = e^{X - g}, nothing rescaled."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(np.isneginf(g), 0.0, g)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_tile - ref[:, None])
        s_new = s + p.sum(axis=1)
        return g_new, s_new, (s[:, None] * a + p @ v_tile) / s_new[:, None]


def numerator_step_own_max(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - np.where(np.isneginf(g_new), 0.0, g_new))
    p = np.exp(x_tile - x_tile.max(axis=1)[:, None])
    return g_new, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


def numerator_step_no_shift(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(x_tile)
        return g_new, s + p.sum(axis=1), u + p @ v_tile


def numerator_step_old_g(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(np.isneginf(g_new), 0.0, g_new)
    alpha, p = np.exp(g - ref), np.exp(x_tile - ref[:, None])
    return g, s * alpha + p.sum(axis=1), u * alpha[:, None] + p @ v_tile


def finish_log1p(g, s, u):
    a = u / np.where(s == 0, 1, s)[:, None]
    return a, g + np.log1p(s)


def finish_times_exp_g(g, s, u):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a = u * np.exp(np.where(np.isneginf(g), 0.0, g))[:, None] / np.where(s == 0, 1, s)[:, None]
        return a, g + np.log(s)


TILE["no max subtracted (P = e^X)"] = tile_step_no_shift
TILE["the old max returned (g, not g_new)"] = tile_step_old_g
NUMERATOR["P measured against the tile's own max"] = numerator_step_own_max
NUMERATOR["no max subtracted (P = e^X)"] = numerator_step_no_shift
NUMERATOR["the old max returned (g, not g_new)"] = numerator_step_old_g
FINISH["log(1 + s) instead of log(s)"] = finish_log1p
FINISH["U multiplied by e^g (the shift undone in A)"] = finish_times_exp_g


def masked_step_scores_times_keep(g, s, a, x_tile, v_tile, keep):
    """Masked by X * keep, then the step of a tile with no mask at all."""
    with np.errstate(invalid="ignore"):
        return solutions.masked_tile_step(g, s, a, x_tile * keep, v_tile, np.ones_like(keep))


def merge_selected_average(a1, l1, a2, l2):
    ok1, ok2 = ~np.isneginf(l1), ~np.isneginf(l2)
    a = (np.where(ok1[:, None], a1, 0) + np.where(ok2[:, None], a2, 0)) / 2
    return a, np.logaddexp(l1, l2)


def merge_exp_direct(a1, l1, a2, l2):
    """L = log(e^{L_1} + e^{L_2}) and the parts weighted by e^{L_p} over their sum (guarded)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        e1, e2 = np.exp(l1), np.exp(l2)
        total = e1 + e2
        a = e1[:, None] * np.where(np.isneginf(l1)[:, None], 0, a1) + e2[:, None] * np.where(
            np.isneginf(l2)[:, None], 0, a2
        )
        return a / np.where(total == 0, 1, total)[:, None], np.log(total)


def merge_lse_shift_unguarded(a1, l1, a2, l2):
    """The logsumexp shifted by m = max(L_1, L_2), -inf when both are empty (NaN); the output's empty parts selected."""
    m = np.maximum(l1, l2)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = m + np.log(np.exp(l1 - m) + np.exp(l2 - m))
        w1 = np.where(np.isneginf(l1), 0.0, np.exp(l1 - lse))
        w2 = np.where(np.isneginf(l2), 0.0, np.exp(l2 - lse))
    a = np.where(np.isneginf(l1)[:, None], 0, w1[:, None] * a1) + np.where(
        np.isneginf(l2)[:, None], 0, w2[:, None] * a2
    )
    return a, lse


MASKED_MORE.setdefault("the scores multiplied by the mask (a masked score 0)", []).append(masked_step_scores_times_keep)
MERGE_MORE.setdefault("merged without rescaling", []).append(merge_selected_average)
MERGE_MORE.setdefault("e^{L_p} without a common reference", []).append(merge_exp_direct)
MERGE_MORE.setdefault("0 / 0 where both ranges are empty", []).append(merge_lse_shift_unguarded)
TILE_MORE = {"P measured against the old max (e^{X - g})": tile_step_against_old_max}


@pytest.mark.parametrize("mistake", list(TILE_MORE))
def test_more_tile_step_forms_are_named(mistake):
    report = exercises.check_tile_step(TILE_MORE[mistake])
    assert not report.passed
    assert named(report) == {mistake}, report


def _tile_step_with_max(row_max, column_axis=True, guarded=False):
    """A learner's tile step, right except for the tile max ``row_max(x_tile)``; without ``column_axis`` the new max
    is subtracted as ``x_tile - g_new`` (a learner who takes the tile max for one number); ``guarded`` divides by
    ``np.where(s_new == 0, 1, s_new)``, as the package's ``fa1_tile_step`` does."""

    def step(g, s, a, x_tile, v_tile):
        g_new = np.maximum(g, row_max(x_tile))
        r = np.exp(g - g_new)
        p = np.exp(x_tile - (g_new[:, None] if column_axis else g_new))
        s_new = s * r + p.sum(axis=1)
        if guarded:
            return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / np.where(s_new == 0, 1, s_new)[:, None]
        return g_new, s_new, a * (s * r / s_new)[:, None] + (p @ v_tile) / s_new[:, None]

    return step


def algorithm1_step_columns_max(g, s, a, x_tile, v_tile):
    """Algorithm 1's form (the tile max first) with the tile max over the columns: x_tile - m broadcasts."""
    m = x_tile.max(axis=0)
    p = np.exp(x_tile - m)
    g_new = np.maximum(g, m)
    s_new = np.exp(g - g_new) * s + np.exp(m - g_new) * p.sum(axis=1)
    return (
        g_new,
        s_new,
        (a * (s * np.exp(g - g_new))[:, None] + np.exp(m - g_new)[:, None] * (p @ v_tile)) / s_new[:, None],
    )


# Issue 35 (review rev12-b): the tile-wide max and the max over the wrong axis, in the forms a learner writes them,
# named on the square tile (where they run without an error) and wherever else they give numbers
TILE_MAX_FORMS = [
    ("the max over the whole tile", "x_tile.max(), g_new[:, None]", _tile_step_with_max(np.max)),
    ("the max over the whole tile", "x_tile.max(), x_tile - g_new", _tile_step_with_max(np.max, column_axis=False)),
    # review zhrev-an (round 23): a row far below the tile max has s_new = 0, and the guard gives it A' = 0, not NaN
    ("the max over the whole tile", "x_tile.max(), division guarded", _tile_step_with_max(np.max, guarded=True)),
    ("the max over the wrong axis", "axis=0, g_new[:, None]", _tile_step_with_max(lambda x: x.max(axis=0))),
    (
        "the max over the wrong axis",
        "axis=0, x_tile - g_new",
        _tile_step_with_max(lambda x: x.max(axis=0), column_axis=False),
    ),
    ("the max over the wrong axis", "axis=0, Algorithm 1's form", algorithm1_step_columns_max),
    (
        "the max over the wrong axis",
        "axis=0 cut to the number of rows",
        _tile_step_with_max(lambda x: x.max(axis=0)[: x.shape[0]]),
    ),
]


@pytest.mark.parametrize("mistake, form, fn", TILE_MAX_FORMS, ids=[f"{m}: {f}" for m, f, _ in TILE_MAX_FORMS])
def test_a_tile_wide_or_wrong_axis_max_is_named_in_each_form(mistake, form, fn):
    report = exercises.check_tile_step(fn)
    assert not report.passed
    assert named(report) == {mistake}, report
    square = next(text for name, _, text in report.cases if name == "a square tile (B_r = B_c = 4)")
    assert mistake in square and "x_tile.max(axis=1)" in square, square


WRONG = {
    "check_tile_step": TILE,
    "check_numerator_step": NUMERATOR,
    "check_finish": FINISH,
    "check_causal_mask": CAUSAL,
    "check_masked_tile_step": MASKED,
    "check_merge_states": MERGE,
}
MORE = [("check_masked_tile_step", name, k) for name, fns in MASKED_MORE.items() for k in range(len(fns))] + [
    ("check_merge_states", name, k) for name, fns in MERGE_MORE.items() for k in range(len(fns))
]
MORE_FNS = {"check_masked_tile_step": MASKED_MORE, "check_merge_states": MERGE_MORE}


test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


@pytest.mark.parametrize("checker, mistake, k", MORE, ids=[f"{c}: {m} ({k})" for c, m, k in MORE])
def test_other_forms_of_a_mistake_are_named_too(checker, mistake, k):
    report = getattr(exercises, checker)(MORE_FNS[checker][mistake][k])
    assert not report.passed, report
    assert named(report) == {mistake}, report


def tile_step_algorithm_1(g, s, a, x_tile, v_tile):
    """FlashAttention's Algorithm 1 as written: the tile's own (max, sum), then two exponentials per row."""
    m_tile = x_tile.max(axis=1)
    p = np.exp(x_tile - m_tile[:, None])
    l_tile = p.sum(axis=1)
    g_new = np.maximum(g, m_tile)
    alpha = np.exp(g - g_new)
    beta = np.exp(m_tile - g_new)
    s_new = alpha * s + beta * l_tile
    return g_new, s_new, ((alpha * s)[:, None] * a + beta[:, None] * (p @ v_tile)) / s_new[:, None]


def test_the_tile_numerator_not_moved_is_named_and_only_there():
    """rev-c-06-6 (review 23): the slip of a learner who follows Algorithm 1 (the tile's sum moved by e^{m - g_new},
    P V not) is named on every case it fails, the fold included, as 5.2's checker names it; the right Algorithm 1
    form passes and names nothing."""
    name = "the tile's numerator not moved to the new max"
    report = exercises.check_tile_step(numerator_not_moved_step)
    failed = [(case, text) for case, ok, text in report.cases if not ok]
    assert failed and named(report) == {name}, report
    assert all(name in text for case, text in failed if not case.startswith("a real query tile")), report
    right = exercises.check_tile_step(tile_step_algorithm_1)
    assert right.passed and name not in repr(right), right


def finish_with_divide_where(g, s, u):
    a = np.divide(u, s[:, None], out=np.zeros_like(u), where=s[:, None] != 0)
    lse = np.full_like(g, -np.inf)
    np.add(g, np.log(s, out=np.full_like(s, -np.inf), where=s != 0), out=lse, where=s != 0)
    return a, lse


def merge_with_max_shift(a1, l1, a2, l2):
    m = np.maximum(l1, l2)
    m = np.where(np.isneginf(m), 0.0, m)
    e1, e2 = np.exp(l1 - m), np.exp(l2 - m)
    total = e1 + e2
    with np.errstate(divide="ignore"):
        lse = m + np.log(total)
    w1 = np.divide(e1, total, out=np.zeros_like(total), where=total != 0)[:, None]
    w2 = np.divide(e2, total, out=np.zeros_like(total), where=total != 0)[:, None]
    return np.where(w1 == 0, 0.0, w1 * a1) + np.where(w2 == 0, 0.0, w2 * a2), lse  # NaN weights stay NaN


@pytest.mark.parametrize(
    "checker, fn",
    [
        ("check_tile_step", tile_step_algorithm_1),
        ("check_finish", finish_with_divide_where),
        ("check_merge_states", merge_with_max_shift),
        ("check_causal_mask", lambda N, M: np.tril(np.ones((N, M), dtype=bool), k=M - N)),
        ("check_masked_tile_step", selected_divided_safely("old")),
        ("check_masked_tile_step", selected_divided_safely("zero")),
    ],
)
def test_correct_solutions_written_differently_pass(checker, fn):
    report = getattr(exercises, checker)(fn)
    assert report.passed, report


def test_a_broadcast_error_is_explained():
    def step(g, s, a, x_tile, v_tile):  # the per-row factor without [:, None]
        g_new = np.maximum(g, x_tile.max(axis=1))
        r = np.exp(g - np.where(g_new == -np.inf, 0.0, g_new))
        p = np.exp(x_tile - np.where(g_new == -np.inf, 0.0, g_new)[:, None])
        s_new = s * r + p.sum(axis=1)
        return g_new, s_new, (a * (s * r) + p @ v_tile) / s_new

    text = repr(exercises.check_tile_step(step))
    assert "raised ValueError" in text and "[:, None]" in text, text


def test_a_matmul_shape_error_is_explained():
    def step(g, s, u, x_tile, v_tile):
        g_new = np.maximum(g, x_tile.max(axis=1))
        ref = np.where(g_new == -np.inf, 0.0, g_new)
        p = np.exp(x_tile - ref[:, None])
        return g_new, s * np.exp(g - ref) + p.sum(axis=1), u * np.exp(g - ref)[:, None] + p.T @ v_tile

    text = repr(exercises.check_numerator_step(step))
    assert "raised ValueError" in text and ".T" in text, text


# ------------------------------------------------------------------------------------------------------------------
# Right answers pass (issue 34): the package's own functions, the chapters' own code and equivalent forms
# ------------------------------------------------------------------------------------------------------------------


def chapter7_numerator_step(g, s, u_tile, x_tile, v_tile):
    """Chapter 7's query_tile_fa2, its loop body as a step (no guard: no row of 7.1 is all -inf)."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    alpha = np.exp(g - g_new)
    p_tile = np.exp(x_tile - g_new[:, None])
    s = s * alpha + p_tile.sum(axis=1)
    return g_new, s, u_tile * alpha[:, None] + p_tile @ v_tile


def log_domain_tile_step(g, s, a, x_tile, v_tile):
    """The logsumexps merged with np.logaddexp, the output as a convex combination of the old one and the tile's."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    with np.errstate(divide="ignore"):
        lse_old = g + np.log(s)
    lse_tile = ref + np.log(np.exp(x_tile - ref[:, None]).sum(axis=1))
    lse_new = np.logaddexp(lse_old, lse_tile)
    w_old = np.exp(lse_old - lse_new)
    a_new = w_old[:, None] * a + np.exp(x_tile - lse_new[:, None]) @ v_tile
    return g_new, np.exp(lse_new - ref), a_new


def loop_tile_step(g, s, a, x_tile, v_tile):
    """Row by row and key by key in Python floats, as a learner may write it."""
    B_r, Dv = a.shape
    g_new, s_new, a_new = np.empty(B_r), np.empty(B_r), np.empty((B_r, Dv))
    for i in range(B_r):
        m = max([float(g[i])] + [float(x) for x in x_tile[i]])
        ref = 0.0 if m == -math.inf else m
        r = math.exp(float(g[i]) - ref)
        weights = [math.exp(float(x) - ref) for x in x_tile[i]]
        total = float(s[i]) * r + math.fsum(weights)
        for d in range(Dv):
            num = float(a[i, d]) * float(s[i]) * r + math.fsum(w * float(v_tile[c, d]) for c, w in enumerate(weights))
            a_new[i, d] = num / total
        g_new[i], s_new[i] = m, total
    return g_new, s_new, a_new


def loop_numerator_step(g, s, u, x_tile, v_tile):
    """Row by row in Python floats: U rescaled and accumulated, never divided."""
    B_r, Dv = u.shape
    g_new, s_new, u_new = np.empty(B_r), np.empty(B_r), np.empty((B_r, Dv))
    for i in range(B_r):
        m = max([float(g[i])] + [float(x) for x in x_tile[i]])
        ref = 0.0 if m == -math.inf else m
        r = math.exp(float(g[i]) - ref)
        weights = [math.exp(float(x) - ref) for x in x_tile[i]]
        s_new[i], g_new[i] = float(s[i]) * r + math.fsum(weights), m
        for d in range(Dv):
            u_new[i, d] = float(u[i, d]) * r + math.fsum(w * float(v_tile[c, d]) for c, w in enumerate(weights))
    return g_new, s_new, u_new


def package_masked_step(g, s, a, x_tile, v_tile, keep):
    """The package's loops: tile_scores selects the masked scores away, then fa1_tile_step with the tile's mask."""
    return fa1_tile_step(g, s, a, np.where(keep, x_tile, -np.inf), v_tile, keep)


def loop_masked_step(g, s, a, x_tile, v_tile, keep):
    """Row by row over the kept keys only (a masked key is never read)."""
    B_r, Dv = a.shape
    g_new, s_new, a_new = np.array(g, float), np.array(s, float), np.array(a, float)
    for i in range(B_r):
        kept = [c for c in range(x_tile.shape[1]) if keep[i, c]]
        m = max([float(g[i])] + [float(x_tile[i, c]) for c in kept])
        ref = 0.0 if m == -math.inf else m
        r = math.exp(float(g[i]) - ref)
        w = {c: math.exp(float(x_tile[i, c]) - ref) for c in kept}
        total = float(s[i]) * r + math.fsum(w.values())
        num = a[i] * float(s[i]) * r + sum((w[c] * v_tile[c] for c in kept), np.zeros(Dv))
        g_new[i], s_new[i], a_new[i] = m, total, num / total if total else 0.0
    return g_new, s_new, a_new


def tile_step_into_a_buffer(g, s, a, x_tile, v_tile):
    """6.1 written like a kernel: the new output goes into a buffer shaped like ``a`` (right: the state is float)."""
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x_tile - ref[:, None])
    s_new = s * r + p.sum(axis=1)
    out = np.zeros_like(a)
    out[...] = (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]
    return g_new, s_new, out


def numerator_step_with_fmax(g, s, u, x_tile, v_tile):
    """7.1 with ``np.fmax`` (it ignores NaN, which 7.1 does not test: right for every finite input)."""
    g_new = np.fmax(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x_tile - ref[:, None])
    return g_new, s * r + p.sum(axis=1), u * r[:, None] + p @ v_tile


def finish_with_log_where_positive(g, s, u):
    """7.2 that takes the log only where s > 0 (-inf elsewhere): right for every finite input."""
    positive = s > 0
    a = np.where(positive[:, None], u / np.where(positive, s, 1.0)[:, None], 0.0)
    lse = np.where(positive, g + np.log(np.where(positive, s, 1.0)), -np.inf)
    return a, lse


def masked_step_with_nanmax(g, s, a, x_tile, v_tile, keep):
    """8.2 with ``np.nanmax`` for the row max ("masked scores may hold NaN"): right, a kept NaN score is not tested."""
    x = np.where(keep, x_tile, -np.inf)
    with np.errstate(all="ignore"):
        g_new = np.maximum(g, np.nanmax(x, axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x - ref[:, None])
    s_new = s * r + p.sum(axis=1)
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None, :, :], 0.0).sum(axis=1)
    a_new = np.where(s_new[:, None] == 0, 0.0, (a * (s * r)[:, None] + pv) / np.where(s_new == 0, 1, s_new)[:, None])
    return g_new, s_new, a_new


def merge_with_positive_weights(a1, l1, a2, l2):
    """10.1 that keeps a part only where its weight is > 0: right for every finite logsumexp."""
    m = np.where(np.isneginf(np.maximum(l1, l2)), 0.0, np.maximum(l1, l2))
    e1, e2 = np.exp(l1 - m), np.exp(l2 - m)
    total = e1 + e2
    with np.errstate(divide="ignore"):
        lse = m + np.log(total)
    w1 = np.divide(e1, total, out=np.zeros_like(total), where=total > 0)[:, None]
    w2 = np.divide(e2, total, out=np.zeros_like(total), where=total > 0)[:, None]
    return np.where(w1 > 0, w1 * a1, 0.0) + np.where(w2 > 0, w2 * a2, 0.0), lse


def package_finish(g, s, u):
    return rowstate_finish(u, s), logsumexp_of(g, s)


def merge_by_rows(a1, l1, a2, l2):
    """Row by row with math.fsum-free Python: an empty range is skipped, two empty ranges give (0, -inf)."""
    a, lse = np.zeros(np.shape(a1)), np.full(len(l1), -np.inf)
    for n in range(len(l1)):
        parts = [(float(lp[n]), ap[n]) for lp, ap in ((l1, a1), (l2, a2)) if lp[n] != -np.inf]
        if not parts:
            continue
        big = max(lp for lp, _ in parts)
        total = sum(math.exp(lp - big) for lp, _ in parts)
        lse[n] = big + math.log(total)
        a[n] = sum(math.exp(lp - lse[n]) * np.asarray(ap, float) for lp, ap in parts)
    return a, lse


def merge_with_logaddexp_where(a1, l1, a2, l2):
    lse = np.logaddexp(l1, l2)
    safe = np.where(np.isneginf(lse), 0.0, lse)
    part1 = np.where(np.isneginf(l1)[:, None], 0.0, np.exp(l1 - safe)[:, None] * a1)
    return part1 + np.where(np.isneginf(l2)[:, None], 0.0, np.exp(l2 - safe)[:, None] * a2), lse


def package_test_ratio(out, q, k, v):
    """Chapter 9's cell: the package's max_abs_error of out and of naive attention, against fm.attention."""
    reference = fm.attention(q, k, v)
    return fm.max_abs_error(out, reference) / fm.max_abs_error(fm.naive_attention(q, k, v), reference)


def algorithm1_tile_step(g, s, a, x_tile, v_tile):
    """Algorithm 1's lines 9-12: the tile's own max and sum first, then the merge with the row's state."""
    m = x_tile.max(axis=1)
    p = np.exp(x_tile - m[:, None])
    g_new = np.maximum(g, m)
    s_new = np.exp(g - g_new) * s + np.exp(m - g_new) * p.sum(axis=1)
    old = (s * np.exp(g - g_new))[:, None] * a
    return g_new, s_new, (old + np.exp(m - g_new)[:, None] * (p @ v_tile)) / s_new[:, None]


def tile_step_keepdims_max(g, s, a, x_tile, v_tile):
    """The row max kept as a column (B_r, 1), which broadcasts against x_tile without [:, None]."""
    g_col = np.maximum(g[:, None], np.max(x_tile, axis=1, keepdims=True))
    p = np.exp(x_tile - g_col)
    r = np.exp(g - g_col[:, 0])
    s_new = s * r + p.sum(axis=1)
    return g_col[:, 0], s_new, (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]


RIGHT = [
    ("check_tile_step", "the package's fa1_tile_step", lambda g, s, a, x, v: fa1_tile_step(g, s, a, x, v, None)),
    ("check_tile_step", "the solution", solutions.tile_step),
    ("check_tile_step", "log-domain, convex combination", log_domain_tile_step),
    ("check_tile_step", "Python loops, math.fsum", loop_tile_step),
    ("check_tile_step", "an output buffer zeros_like(a)", tile_step_into_a_buffer),
    ("check_tile_step", "Algorithm 1's form, the tile max first", algorithm1_tile_step),
    ("check_tile_step", "the row max with keepdims=True", tile_step_keepdims_max),
    (
        "check_numerator_step",
        "the package's fa2_tile_step on a copy of u",
        lambda g, s, u, x, v: fa2_tile_step(g, s, u.copy(), x, v, None),
    ),
    ("check_numerator_step", "chapter 7's loop body", chapter7_numerator_step),
    ("check_numerator_step", "Python loops", loop_numerator_step),
    ("check_numerator_step", "np.fmax for the max", numerator_step_with_fmax),
    ("check_finish", "the package's finish and logsumexp_of", package_finish),
    ("check_finish", "np.divide with where", finish_with_divide_where),
    ("check_finish", "the log only where s > 0", finish_with_log_where_positive),
    ("check_causal_mask", "fm.causal_mask", fm.causal_mask),
    ("check_causal_mask", "index comparison", lambda N, M: np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N),
    ("check_masked_tile_step", "the package's tile_scores then fa1_tile_step", package_masked_step),
    ("check_masked_tile_step", "Python loops over the kept keys", loop_masked_step),
    ("check_masked_tile_step", "np.nanmax for the row max", masked_step_with_nanmax),
    ("check_flash_test_ratio", "the package's max_abs_error and naive_attention (chapter 9)", package_test_ratio),
    ("check_merge_states", "fm.merge_states", fm.merge_states),
    ("check_merge_states", "np.logaddexp and np.where", merge_with_logaddexp_where),
    ("check_merge_states", "row by row in Python", merge_by_rows),
    ("check_merge_states", "a part kept where its weight is > 0", merge_with_positive_weights),
]


@pytest.mark.parametrize("checker, what, fn", RIGHT, ids=[f"{c}: {w}" for c, w, _ in RIGHT])
def test_the_package_the_chapters_code_and_equivalent_forms_pass(checker, what, fn):
    report = getattr(exercises, checker)(fn)
    assert report.passed, report


# ------------------------------------------------------------------------------------------------------------------
# The prediction cells of chapters 6, 7, 8, 9 and 10: whole-number answers exact, the common wrong answers explained
# ------------------------------------------------------------------------------------------------------------------

PREDICTIONS = {  # chapter: (the words of its prediction cell, the answer the cell computes)
    6: ("how many passes over Q", 12.0),
    7: ("divisions per score in the fa1 order", 2.0),
    8: ("skipped tiles of an 8 x 8 grid", 28),
    9: ("fa2's largest float16 error is nearest", 0),
    10: ("merge levels for 6 ranges", 3),
}


def prediction_call(chapter):
    """The ``why`` and ``misconceptions`` of the chapter's question (predict.QUESTIONS), the key its check_prediction
    call names in the English notebook's code cell."""
    import ast

    import nbformat
    from helpers import ROOT

    (path,) = sorted((ROOT / "notebooks").glob(f"{chapter:02d}_*.ipynb"))
    words = PREDICTIONS[chapter][0]
    (cell,) = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and words in c.source]
    (call,) = [
        node
        for node in ast.walk(ast.parse(cell.source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check_prediction"
    ]
    from flashmath.exercises.predict import QUESTIONS

    (key,) = [ast.literal_eval(kw.value) for kw in call.keywords if kw.arg == "question"]
    return {"why": QUESTIONS[key].why, "misconceptions": dict(QUESTIONS[key].misconceptions)}


def said(capsys, prediction, answer, **kw):
    exercises.check_prediction(prediction, answer, **kw)
    return capsys.readouterr().out


@pytest.mark.parametrize("chapter", list(PREDICTIONS))
def test_each_prediction_names_the_misconceptions_of_its_common_wrong_answers(chapter, capsys):
    from flashmath.exercises.predict import NOTEBOOK_MISCONCEPTIONS, NOTEBOOK_WHY

    kw = prediction_call(chapter)
    answer = PREDICTIONS[chapter][1]
    assert kw["why"] in NOTEBOOK_WHY
    assert len(kw["misconceptions"]) >= 2
    assert "right" in said(capsys, answer, answer, **kw)
    for wrong, text in kw["misconceptions"].items():
        assert text in NOTEBOOK_MISCONCEPTIONS, text
        out = said(capsys, wrong, answer, **kw)
        assert "not quite" in out and text in out, out


@pytest.mark.parametrize("chapter, near", [(6, 11.5), (6, 11), (7, 1.98), (8, 27), (8, 29), (10, 2.9)])
def test_a_whole_number_answer_is_exact(chapter, near, capsys):
    assert "not quite" in said(capsys, near, PREDICTIONS[chapter][1], **prediction_call(chapter))


def test_the_logsumexp_without_the_shift_names_the_overflow_and_the_underflow():
    """Review 35 (rev-b): log(e^g s) fails on the large maxima (e^800 = inf) and on the maxima near -1000, where e^g
    underflows to 0; the message names both ends, so it is fair on each failing case."""
    report = exercises.check_finish(FINISH["the logsumexp without the shift"])
    failing = {name: message for name, ok, message in report.cases if not ok}
    assert set(failing) == {"large maxima (g = 800: e^g overflows float64)", "property: maxima near -1000"}, failing
    for message in failing.values():
        assert "looks like the logsumexp without the shift" in message
        assert "overflows to inf once g > 709.8" in message and "underflows to 0 once g < -745.2" in message


def test_one_cause_that_fails_several_cases_is_explained_once(capsys):
    """Review 35 (rev3-b, rev5-b): a step that changes ``a`` in place fails nine cases for one reason; the report
    prints the explanation once and names, on every later case, the case that printed it."""
    from flashmath.exercises.chapter6 import TILE_INPUT_MODIFIED

    report = exercises.check_tile_step(in_place_step)
    failed = [name for name, ok, _ in report.cases if not ok]
    text = repr(report)
    assert len(failed) >= 3 and text.count(TILE_INPUT_MODIFIED.message()) == 1, text
    assert text.count(f'the same diagnosis as for the case "{failed[0]}" above') == len(failed) - 1, text


def test_tile_step_in_place_names_the_state_argument_and_gives_its_own_example():
    """Review 35 (rev6-b): a step that scales ``a`` in place is told, in its first message, that ``a`` was
    changed, with an example in 6.1's names (a *= ...), not another exercise's (x -= x.max()), and that x_tile
    may be overwritten."""
    report = exercises.check_tile_step(in_place_step)
    failed = [(name, msg) for name, ok, msg in report.cases if not ok]
    first = failed[0][1]
    assert first.startswith("a (argument 3) was changed: looks like the input modified in place"), first
    assert "a *= ..." in first and "x_tile you may overwrite" in first and "x.max()" not in first, first
    (unchanged,) = [msg for name, msg in failed if name == "the state given (g, s, A') is left unchanged"]
    assert unchanged.startswith("a (argument 3) was changed"), unchanged


def numerator_u_in_place(g, s, u, x_tile, v_tile):
    g_new = np.maximum(g, x_tile.max(axis=1))
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r = np.exp(g - ref)
    x_tile -= ref[:, None]  # allowed: the score tile may be overwritten
    p = np.exp(x_tile)
    u *= r[:, None]  # the caller's numerator rescaled in place
    u += p @ v_tile
    return g_new, s * r + p.sum(axis=1), u


def numerator_s_in_place(g, s, u, x_tile, v_tile):
    g_new, s_new, u_new = solutions.numerator_step(g, s, u, x_tile, v_tile)
    s *= 0  # reuses the caller's array
    s += s_new
    return g_new, s, u_new


@pytest.mark.parametrize(
    "step, arg", [(numerator_u_in_place, "u (argument 3)"), (numerator_s_in_place, "s (argument 2)")]
)
def test_numerator_step_in_place_names_the_state_argument_and_gives_its_own_example(step, arg):
    """Review 35 (rev20-c): a 7.1 step that updates ``s`` or ``u`` in place is told, in its first message and in
    the case of the state left unchanged, which argument it changed, with an example in 7.1's names (u *= ...,
    s += ...), not chapter 1's (x -= x.max()), and that x_tile may be overwritten, as 6.1's message says."""
    report = exercises.check_numerator_step(step)
    failed = [(name, msg) for name, ok, msg in report.cases if not ok]
    first = failed[0][1]
    assert first.startswith(f"{arg} was changed: looks like the input modified in place"), first
    assert "u *= ..." in first and "s += ..." in first and "x_tile you may overwrite" in first, first
    assert "x.max()" not in first, first
    (unchanged,) = [msg for name, msg in failed if name == "the state given (g, s, U) is left unchanged"]
    assert unchanged.startswith(f"{arg} was changed"), unchanged


def test_finish_in_place_names_the_state_argument_and_gives_its_own_example():
    """Review 35 (rev-d-07-5): a 7.2 finish that divides ``u`` in place is told which argument it changed, with an
    example in 7.2's names (u /= s[:, None]), not chapter 1's (x -= x.max(), q /= ...)."""
    report = exercises.check_finish(finish_in_place)
    failed = [(name, msg) for name, ok, msg in report.cases if not ok]
    first = failed[0][1]
    assert first.startswith("u (argument 3) was changed: looks like the input modified in place"), first
    assert "u /= s[:, None]" in first and "x.max()" not in first and "q /=" not in first, first
    (unchanged,) = [msg for name, msg in failed if name == "the state given (g, s, U) is left unchanged"]
    assert unchanged.startswith("u (argument 3) was changed"), unchanged


def test_tile_step_missing_old_weight_names_both_causes():
    """Review 35 (rev6-b): A' r + P V / s_new (the factor s / s_new missing) is explained as 5.1 explains it: the
    old average's weight, and s overwritten before the line as one possible cause."""
    report = exercises.check_tile_step(s_overwritten_step)
    messages = [msg for _name, ok, msg in report.cases if not ok]
    assert messages and "looks like the factor s / s_new missing from the old term" in messages[0], messages
    assert "old total weight s" in messages[0] and "if s was updated before this line" in messages[0], messages


def test_tile_step_that_raises_fails_the_unchanged_case_with_a_reason():
    """Review 35 (rev6-b): when the step raises, the in-place case fails and says why it cannot pass, instead of
    a FAIL marked "not checked"."""

    def broken(g, s, a, x_tile, v_tile):
        raise ValueError("a learner's bug")

    report = exercises.check_tile_step(broken)
    (msg,) = [msg for name, ok, msg in report.cases if name == "the state given (g, s, A') is left unchanged"]
    assert msg.startswith("fails until the function runs: it raised ValueError"), msg
    assert "not checked" not in msg, msg


def test_a_max_over_axis_0_gets_the_axis_hint_on_the_real_tile_too():
    """Review 35 (rev5-b): the real query tile (8 rows, 10 keys) raises the same broadcast error as the small
    cases, and gets the same hint on the axis."""

    def axis0(g, s, a, x_tile, v_tile):
        g_new = np.maximum(g, x_tile.max(axis=0))  # one value per key column: raises unless B_r = B_c
        g_zero = np.where(np.isinf(g_new), 0.0, g_new)
        rescale, p = np.exp(g - g_zero), np.exp(x_tile - g_zero[:, None])
        s_new = s * rescale + p.sum(axis=1)
        return g_new, s_new, (a * (s * rescale)[:, None] + p @ v_tile) / s_new[:, None]

    report = exercises.check_tile_step(axis0)
    (fold,) = [message for name, ok, message in report.cases if name.startswith("a real query tile") and not ok]
    assert "(8,) and (10,)" in fold and "axis=1" in fold, fold


def test_the_tile_rule_prediction_names_the_threshold_and_its_wrong_answers(capsys):
    """Review 35 (rev5-b): chapter 6 asks for fa2's threshold before deriving it (P6b): from B_r = 32 on for
    D = 64 and N = 16384; the cell prints the answer only after a prediction, and each common wrong answer its
    misconception."""
    from flashmath.exercises.predict import QUESTIONS

    run = prediction_cell("06_tiling.ipynb", "rule-check-06", {"fm": fm}, capsys)
    assert "32" not in run()  # the placeholder: no answer
    why = QUESTIONS["P6b"].why
    # zhrev-e 06-16: the tailored sentence already gives the general reason, which is not repeated after it
    assert_prediction_feedback(run, "P6b", 32, why_once=True)
    out = run(40)  # no sentence of its own
    assert "not quite" in out and why in out, out


def test_the_tile_rule_answer_holds_for_the_sequence_lengths_it_names():
    """rev-c-06-1 (review 23): P6b's answer says fa2 moves less from B_r = 32 (D = 64, square tiles), exactly 32
    for every N that is a multiple of 32 or over 1000, a little lower for some shorter N (24 for N = 48), where a
    smaller B_r gives as few query tiles as 32 does. The model's own thresholds, N by N."""
    from flashmath.exercises.predict import QUESTIONS

    def threshold(n):
        standard = fm.attention_traffic("standard", n, n, 64).bytes
        less = [b for b in range(1, 65) if fm.attention_traffic("fa2", n, n, 64, block_q=b, block_k=b).bytes < standard]
        assert less == list(range(less[0], 65))  # from there on every larger tile moves less too
        return less[0]

    assert "24 for N = 48" in QUESTIONS["P6b"].why and "over 1000" in QUESTIONS["P6b"].why
    for n in [*range(1, 1201, 7), *range(32, 1201, 32), 16384]:
        b = threshold(n)
        assert b <= 32 and math.ceil(n / b) == math.ceil(n / 32), n  # never above 32; as few query tiles as 32
        if n % 32 == 0 or n > 1000:
            assert b == 32, n
    assert threshold(48) == 24


def test_the_tile_cap_prediction_names_the_register_cap_and_its_wrong_answers(capsys):
    """Review 35 (rev8-d): chapter 10's hardware section asks for the largest B_r on the RTX 4090 at D = 128,
    B_c = 64, 4 warps (P10b) before the FlashAttention-2 table: 128, and a 256-row tile breaks the register cap
    (194 > 127.5 KiB), not the shared one (96 <= 99 KiB); the numbers of its sentences are the model's."""

    from flashmath import hardware

    gpu = hardware.GPUS["RTX 4090"]
    fits, twice = (hardware.tile_bytes(128, rows, 64, stages=1) for rows in (128, 256))
    assert (fits.shared, fits.registers, twice.shared, twice.registers) == (64 * 1024, 97 * 1024, 96 * 1024, 194 * 1024)
    assert twice.shared <= gpu.shared_per_block_bytes == 99 * 1024
    assert twice.registers > hardware.register_limit(gpu, 4) == 127.5 * 1024
    assert hardware.largest_query_tile(gpu, 128, 64, stages=1) == 256  # the whole register file
    per_row = [hardware.tile_bytes(d, 1, 64, stages=1).registers for d in (64, 128)]
    assert per_row == [520, 776]
    run = prediction_cell("10_beyond.ipynb", "tile-check-10", {"hardware": hardware}, capsys)
    assert "128" not in run()  # the placeholder: no answer
    assert_prediction_feedback(run, "P10b", 128)


def test_tile_step_numerator_is_named_and_differences_print_six_digits():
    """zhrev-e 06-14, 06-15: the answer that returns s_new A'_new (only the division by s_new missing) is named with
    its own hint, not given bare values; a difference prints its two numbers with 6 significant digits."""
    report = exercises.check_tile_step(TILE["the numerator returned (not divided by s_new)"])
    failed = [msg for _name, ok, msg in report.cases if not ok]
    assert failed and all("FlashAttention-2" not in msg for msg in failed), failed
    assert "looks like the numerator returned (not divided by s_new)" in failed[0], failed[0]
    assert "unnormalised numerator s_new A'_new" in failed[0], failed[0]
    from flashmath.exercises._report import largest_difference

    text = largest_difference(np.array([1.2745582673152831, 0.0]), np.array([3.3386518121243771, 0.0]))
    assert text == "; largest difference 2.06 at [0] (expected 3.33865, got 1.27456)", text
    close = largest_difference(np.array([0.1234567891]), np.array([0.1234567892]))
    assert "(expected 0.1234567892, got 0.1234567891)" in close, close  # as many digits as tell them apart


def test_the_window_traffic_prediction_names_fa1_above_standard_attention_and_its_wrong_answers(capsys):
    """Review 35 (rev10-c): chapter 8 asks, before the tile sweep and its bytes table, whether fa1's traffic ends
    above (1), level with (0) or below (-1) standard attention's with the window of 12 keys (P8b): above, 5 elements
    per score (15/36 x 12) against 4; the numbers of its sentences are the package's."""

    import flashmath as fm
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, _ = heads.demo_rows[0]
    q, k, v = (a[layer, head].astype(np.float64) for a in (heads.q, heads.k, heads.v))
    N, D = q.shape
    M = k.shape[0]
    window = fm.sliding_window_mask(N, M, 12)
    traces = {o: fm.flash_trace(q, k, v, block_q=8, block_k=8, order=o, mask=window) for o in ("fa1", "fa2")}
    standard = fm.attention_traffic("standard", N, M, D, bytes_per_element=traces["fa1"].traffic.bytes_per_element)
    assert D == 32 and len(traces["fa1"]) == 36 and traces["fa1"].n_skipped == 21  # 15 tiles computed
    assert 3 * D // 8 == 12 and 2 * D // 8 == 8 and 15 / 36 * 12 == 5 and round(15 / 36 * 8, 1) == 3.3
    assert traces["fa2"].hbm_bytes[-1] < standard.bytes < traces["fa1"].hbm_bytes[-1]
    for path in ("08_masking.ipynb", "zh/08_masking.ipynb"):
        env = {"fm": fm, "np": np, "q": q, "k": k, "v": v, "N": N, "M": M, "D": D}
        run = prediction_cell(path, "predict-window-check-08", env, capsys)
        assert "You predicted" not in run()  # the placeholder: no answer
        assert_prediction_feedback(run, "P8b", 1, why_once=True)
