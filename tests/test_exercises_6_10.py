"""Chapters 6-10's checkers: the solutions pass, and every named mistake, written as a learner would, is caught and
named (and no other mistake of the catalogue is named)."""

import numpy as np
import pytest
from helpers import named

from flashmath import exercises, solutions


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
            "twice": lambda: (a * (s * r)[:, None] + pv) / s_new[:, None] / s_new[:, None],
        }
        return g_new, s_new, rules[a_rule]()
    return step


TILE = {
    "the old output not corrected": tile_step(a_rule="not corrected"),
    "no rescale when the max changes": tile_step(a_rule="no rescale", s_rescaled=False),
    "the rescale of s missing": tile_step(s_rescaled=False),
    "divided by the old sum": tile_step(a_rule="old sum"),
    "FlashAttention-2's update (not divided)": tile_step(a_rule="not divided"),
    "divided twice": tile_step(a_rule="twice"),
    "the max over the whole tile": tile_step(g_of=lambda g, x: np.maximum(g, np.max(x))),
    "the max over the wrong axis": tile_step(g_of=lambda g, x: np.maximum(g, x.max(axis=0))),
    "the tile's max only (the old max forgotten)": tile_step(g_of=lambda g, x: x.max(axis=1)),
    "a wrong base (2) instead of e": tile_step(base=lambda t: 2.0 ** t),
    "not a triple": lambda g, s, a, x, v: solutions.tile_step(g, s, a, x, v)[2],
}


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


def finish_with(a_rule=None, lse_rule=None):
    def fin(g, s, u):
        a, lse = solutions.finish(g, s, u)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (a if a_rule is None else a_rule(g, s, u)), (lse if lse_rule is None else lse_rule(g, s, u))
    return fin


FINISH = {
    "a base-2 logsumexp": finish_with(lse_rule=lambda g, s, u: g + np.log2(s)),
    "log(s) without g": finish_with(lse_rule=lambda g, s, u: np.log(s)),
    "divided again": finish_with(a_rule=lambda g, s, u: (u / s[:, None]) / s[:, None]),
    "not divided": finish_with(a_rule=lambda g, s, u: u),
    "0 / 0 on a row with no key": finish_with(a_rule=lambda g, s, u: u / s[:, None]),
    "not a pair": lambda g, s, u: solutions.finish(g, s, u)[0],
}

CAUSAL = {
    "the top-left alignment (off by M - N)": lambda N, M: np.arange(M)[None, :] <= np.arange(N)[:, None],
    "the offset N - M instead of M - N": lambda N, M: np.arange(M)[None, :] <= np.arange(N)[:, None] + N - M,
    "the diagonal excluded (< instead of <=)": lambda N, M: np.arange(M)[None, :] < np.arange(N)[:, None] + M - N,
    "transposed": lambda N, M: np.tril(np.ones((N, M), bool), k=M - N)[::-1, ::-1],
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
        lambda a1, l1, a2, l2, L: ((np.exp(l1)[:, None] * a1 + np.exp(l2)[:, None] * a2)
                                   / (np.exp(l1) + np.exp(l2))[:, None])),
    "an empty part's output read (0 * NaN)": merge_with(
        lambda a1, l1, a2, l2, L: np.exp(l1 - L)[:, None] * a1 + np.exp(l2 - L)[:, None] * a2),
    "not a pair": lambda *args: solutions.merge_states(*args)[0],
}

CHECKERS = {
    "check_tile_step": (solutions.tile_step, TILE),
    "check_numerator_step": (solutions.numerator_step, NUMERATOR),
    "check_finish": (solutions.finish, FINISH),
    "check_causal_mask": (solutions.causal_mask, CAUSAL),
    "check_masked_tile_step": (solutions.masked_tile_step, MASKED),
    "check_merge_states": (solutions.merge_states, MERGE),
}
CASES = [(checker, mistake) for checker, (_, wrong) in CHECKERS.items() for mistake in wrong]


@pytest.mark.parametrize("checker", CHECKERS)
def test_the_solution_passes(checker):
    report = getattr(exercises, checker)(CHECKERS[checker][0])
    assert report.passed, report


@pytest.mark.parametrize("checker, mistake", CASES, ids=[f"{c}: {m}" for c, m in CASES])
def test_each_mistake_is_caught_and_named(checker, mistake):
    report = getattr(exercises, checker)(CHECKERS[checker][1][mistake])
    assert not report.passed, report
    assert named(report) == {mistake}, report


@pytest.mark.parametrize("checker", CHECKERS)
def test_every_mistake_in_the_catalogue_has_a_wrong_solution(checker):
    assert {m.name for m in exercises.MISTAKES[checker]} == set(CHECKERS[checker][1])


@pytest.mark.parametrize("checker", CHECKERS)
def test_an_unfinished_exercise_is_reported_not_raised(checker):
    def todo(*args):
        raise NotImplementedError

    report = getattr(exercises, checker)(todo)
    assert not report.passed and "not implemented yet" in repr(report)
