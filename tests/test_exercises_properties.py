"""The property battery of chapters 6-13's checkers: for each chapter, a learner-style wrong solution that only a
property catches. Each passes the checker's ordinary cases and its mistake models (the run without the property
cases and the form check says so), and fails the property case named here.

The wrong solutions are written as a learner would (an output buffer made with ``zeros_like``, ``np.fmax`` or
``np.nanmax`` where ``np.maximum`` or ``np.max`` belongs, a guard that turns NaN into 0 or -inf, tanh written with
``exp``, ``D`` squeezed), independently of the checkers' models.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import HAVE_TRITON

from flashmath import exercises
from flashmath.exercises import chapter6, chapter7, chapter8, chapter9, chapter10, chapter11, chapter12, chapter13


def tile_step_squeezed(g, s, a, x_tile, v_tile):
    """6.1 with the row max taken with keepdims and squeezed back: one row loses its axis (g_new of shape ())."""
    g_new = np.maximum(g[:, None], x_tile.max(axis=1, keepdims=True)).squeeze()
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x_tile - ref.reshape(-1, 1))
    s_new = s * r + p.sum(axis=1)
    return g_new, s_new, (a * (s * r)[:, None] + p @ v_tile) / s_new[:, None]


def numerator_step_squeezed(g, s, u, x_tile, v_tile):
    """7.1 with the row max taken with keepdims and squeezed back: one row loses its axis (g_new of shape ())."""
    g_new = np.maximum(g[:, None], x_tile.max(axis=1, keepdims=True)).squeeze()
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    r, p = np.exp(g - ref), np.exp(x_tile - ref.reshape(-1, 1))
    return g_new, s * r + p.sum(axis=1), u * r[:, None] + p @ v_tile


def masked_step_tile_max_guarded_by_keep(g, s, a, x_tile, v_tile, keep):
    """8.2 as Algorithm 1 writes it (the tile's own max, two rescales), guarded by the mask: a row with no kept key
    measures against 0, but a row whose kept scores are all -inf subtracts -inf from -inf."""
    x = np.where(keep, x_tile, -np.inf)
    m_tile = np.where(keep.any(axis=1), x.max(axis=1), 0.0)
    p = np.exp(x - m_tile[:, None])
    g_new = np.maximum(g, m_tile)
    g_new = np.where(keep.any(axis=1), g_new, g)
    ref = np.where(g_new == -np.inf, 0.0, g_new)
    alpha, beta = np.exp(g - ref), np.exp(m_tile - ref)
    s_new = s * alpha + p.sum(axis=1) * beta
    pv = np.where(keep[:, :, None], p[:, :, None] * v_tile[None, :, :], 0.0).sum(axis=1)
    a_new = (a * (s * alpha)[:, None] + beta[:, None] * pv) / np.where(s_new == 0, 1, s_new)[:, None]
    return g_new, s_new, a_new


def ratio_with_nanmax(out, q, k, v):
    """9 with ``np.nanmax`` for the largest errors: an output holding NaN still gets a finite ratio."""
    q, k, v = (np.asarray(t) for t in (q, k, v))
    dtype, D = q.dtype, q.shape[-1]
    x = q.astype(np.float64) @ k.astype(np.float64).T / math.sqrt(D)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    reference = (e / e.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    x32 = (q32 @ k32.T / np.float32(math.sqrt(D))).astype(dtype).astype(np.float32)
    e32 = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    y = (e32 / e32.sum(axis=-1, keepdims=True)).astype(dtype).astype(np.float32)
    naive = (y @ v32).astype(dtype)
    error_out = np.nanmax(np.abs(np.asarray(out).astype(np.float64) - reference))
    return float(error_out / np.nanmax(np.abs(naive.astype(np.float64) - reference)))


def merge_with_one_shift(a1, l1, a2, l2):
    """10.1 with one shift for every row, the largest logsumexp of the batch: when every range of every row is empty
    the shift is -inf, and -inf - (-inf) is NaN."""
    m = max(l1.max(), l2.max())
    e1, e2 = np.exp(l1 - m), np.exp(l2 - m)
    total = e1 + e2
    with np.errstate(divide="ignore"):
        lse = m + np.log(total)
    a = np.where(e1[:, None] > 0, e1[:, None] * a1, 0.0) + np.where(e2[:, None] > 0, e2[:, None] * a2, 0.0)
    return a / np.where(total == 0, 1.0, total)[:, None], lse


def row_lse_guarded_by_s_positive(x):
    """11.1 emulated in float32, row by row, with the end guard ``s > 0 ? g + log(s) : -inf``: NaN gives -inf."""
    import torch

    out = []
    for row in x.numpy().astype(np.float32):
        g, s = np.float32(-np.inf), np.float32(0)
        for c0 in range(0, len(row), 32):
            blk = row[c0 : c0 + 32]
            g_new = max(g, blk.max())
            ref = 0.0 if g_new == -np.inf else g_new
            s = s * np.exp(g - ref) + np.exp(blk - ref).sum()
            g = g_new
        out.append(g + np.log(s) if s > 0 else -np.inf)
    return torch.tensor(np.array(out, np.float32))


def backward_with_squeezed_d(q, k, v, a, lse, grad_a, keep, block_k):
    """12.1 with ``D`` squeezed: with one query ``.squeeze()`` leaves a 0-d array, and ``d[:, None]`` raises."""
    scale = 1 / math.sqrt(q.shape[1])
    live = keep & ~np.isneginf(lse)[:, None]
    d_row = np.sum(grad_a * a, axis=1, keepdims=True).squeeze()
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, k.shape[0], block_k):
        c1 = min(c0 + block_k, k.shape[0])
        keep_t = live[:, c0:c1]
        x = scale * q @ k[c0:c1].T
        y = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0)), 0)
        dv[c0:c1] = y.T @ grad_a
        dx = np.where(keep_t, y * (grad_a @ v[c0:c1].T - d_row[:, None]), 0)
        dk[c0:c1] = scale * dx.T @ q
        dq += scale * dx @ k[c0:c1]
    return dq, dk, dv


def softcap_with_hand_written_tanh(qk, scale, cap):
    """13.3 with tanh written as (e^{2x} - 1) / (e^{2x} + 1): inf / inf is NaN for a score of +inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.exp(2 * (qk * scale / cap))
        return cap * (t - 1) / (t + 1)


PROPERTY_CATCHES = {
    # chapter: (checker, wrong solution, the property case that catches it)
    "6: np.squeeze drops the one row's axis": ("check_tile_step", tile_step_squeezed, "property: one row and one key"),
    "7: np.squeeze drops the one row's axis": (
        "check_numerator_step",
        numerator_step_squeezed,
        "property: one row and one key",
    ),
    "8: the tile's own max guarded by the mask alone": (
        "check_masked_tile_step",
        masked_step_tile_max_guarded_by_keep,
        "property: a row whose kept scores are all -inf",
    ),
    "9: np.nanmax hides a NaN output": (
        "check_flash_test_ratio",
        ratio_with_nanmax,
        "property: an output holding NaN gives a NaN ratio",
    ),
    "10: one shift for every row": (
        "check_merge_states",
        merge_with_one_shift,
        "property: both ranges empty in every row",
    ),
    "11: NaN turned into -inf by s > 0": ("check_row_lse", row_lse_guarded_by_s_positive, "property: NaN"),
    "12: D squeezed to a 0-d array for one query": (
        "check_backward_tiles",
        backward_with_squeezed_d,
        "property: one element",
    ),
    "13: tanh by hand gives NaN at +inf": ("check_softcap", softcap_with_hand_written_tanh, "property: +inf"),
}
NEEDS_TORCH = {"11: NaN turned into -inf by s > 0"}


def checker(name):
    return getattr(exercises, name)


def models_only(name, fn):
    """The checker run without its property cases and its form check: the ordinary cases and the mistake models
    alone, as before the battery."""
    from flashmath.exercises import _cases

    original = _cases.check_function

    def without_properties(*args, **kw):
        kw["properties"], kw["check_form"] = (), False
        return original(*args, **kw)

    modules = [chapter6, chapter7, chapter8, chapter9, chapter10, chapter11, chapter12, chapter13]
    try:
        for module in modules:
            module.check_function = without_properties
        return checker(name)(fn)
    finally:
        for module in modules:
            module.check_function = original


def skip_without_torch(prop):
    if prop in NEEDS_TORCH and not HAVE_TRITON:
        pytest.skip("the triton extra is not installed")


@pytest.mark.parametrize("prop", list(PROPERTY_CATCHES))
def test_each_chapter_has_a_property_that_catches_a_wrong_solution(prop):
    skip_without_torch(prop)
    name, fn, case = PROPERTY_CATCHES[prop]
    report = checker(name)(fn)
    failed = [case_name for case_name, ok, _ in report.cases if not ok]
    assert any(case_name.startswith(case) for case_name in failed), repr(report)
    assert all(case_name.startswith("property: ") for case_name in failed), repr(report)  # only properties fail


@pytest.mark.parametrize("prop", list(PROPERTY_CATCHES))
def test_the_mistake_models_alone_miss_it(prop):
    skip_without_torch(prop)
    name, fn, _ = PROPERTY_CATCHES[prop]
    assert models_only(name, fn).passed, repr(models_only(name, fn))


def test_each_chapter_of_6_to_13_has_a_property_catch():
    """Derived from the declarations: a chapter that gets an exercise gets an entry here too. (That every checker runs
    at least the property cases it declares, all passed by the solution, is in tests/test_exercises_registry.py.)"""
    chapters = {e.chapter for e in exercises.EXERCISES if 6 <= e.chapter <= 13}
    assert chapters == {int(prop.split(":")[0]) for prop in PROPERTY_CATCHES}
