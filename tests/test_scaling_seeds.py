"""The ranges over the seeds 0 to 99 that chapter 3 states in its prose (cells 12 and 14), recomputed.

Each seed draws exactly what the chapter's cells draw with ``SEED`` set to it: cell 11's
``scale_sweep(DIMS, rng=np.random.default_rng(seed), n_queries=200, n_keys=64)``, and cell 15's generator, which
first draws the ``(1, 5)`` finite-difference check and then, for each ``D`` in turn, 200 queries and 64 keys. The
sizes ``|J|`` at ``D = 512`` come from the Jacobians themselves, as in cell 15; the sizes ``|J K|`` for every ``D``
from a closed form (``J K`` is ``(200, 64, D)``), which the first test checks against ``J @ K``.

About 4 s of CPU on one core, so in the fast tier (``tests/conftest.py``): a change to ``scale_sweep`` or to its
draws that moves these numbers fails before a commit.
"""

import math

import numpy as np
import pytest

from flashmath import safe_softmax, scale_sweep

SEEDS = range(100)
DIMS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # chapter 3, cell 11
JACOBIAN_DIMS = (16, 64, 128, 256, 512)  # chapter 3, cell 15


def jacobian_norms(y):
    """Frobenius norm of each row's softmax Jacobian ``J[n, i, j] = y_i (delta_ij - y_j)`` (cell 15's), from the
    probabilities ``y (N, M)``."""
    return np.linalg.norm(y[:, :, None] * (np.eye(y.shape[1]) - y[:, None, :]), axis=(1, 2))


def jk_norms(y, k):
    """Frobenius norm of each row's ``J K``, the derivative of the row's softmax with respect to ``q`` (scores
    ``q K^T``): row ``i`` of ``J K`` is ``y_i (k_i - kbar)`` with ``kbar = sum_j y_j k_j``, so
    ``|J K|^2 = sum_i y_i^2 |k_i - kbar|^2``, expanded into matrix products. The expansion loses digits in rows
    whose ``|J K|`` is below about ``1e-8 sqrt(D)``, far below every median used here."""
    kbar = y @ k  # (N, D)
    dist2 = (k * k).sum(axis=1) - 2 * (kbar @ k.T) + (kbar * kbar).sum(axis=1, keepdims=True)  # (N, M)
    return np.sqrt(np.maximum((y * y * dist2).sum(axis=1), 0.0))


def cell_15_draws(seed):
    """Cell 15's ``(q, k)`` for each ``D``, drawn in its order."""
    rng = np.random.default_rng(seed)
    rng.standard_normal((1, 5))  # the finite-difference check comes first
    return {D: (rng.standard_normal((200, D)), rng.standard_normal((64, D))) for D in JACOBIAN_DIMS}


def test_the_closed_form_is_the_norm_of_j_times_k():
    for D, (q, k) in cell_15_draws(3).items():
        for scale in (1.0, math.sqrt(D)):
            y = safe_softmax(q @ k.T / scale)
            J = y[:, :, None] * (np.eye(64) - y[:, None, :])  # cell 15's softmax_jacobian
            np.testing.assert_allclose(jk_norms(y, k), np.linalg.norm(J @ k, axis=(1, 2)), rtol=1e-8, atol=1e-6)


@pytest.fixture(scope="module")
def seeds():
    """Per seed: cell 11's rows above 0.9 at D = 512, and cell 15's medians for each D."""
    above, nearest_09 = [], np.inf
    ratio_j, flat_rows, nearest_001 = [], [], np.inf
    ratio_q = {D: [] for D in JACOBIAN_DIMS}
    for seed in SEEDS:
        sweep = scale_sweep(DIMS, rng=np.random.default_rng(seed), n_queries=200, n_keys=64)
        top = sweep.max_prob_raw[-1]
        above.append(int((top > 0.9).sum()))
        nearest_09 = min(nearest_09, np.abs(top - 0.9).min())
        for D, (q, k) in cell_15_draws(seed).items():
            y_raw, y_scaled = safe_softmax(q @ k.T), safe_softmax(q @ k.T / math.sqrt(D))
            # with respect to q: J K unscaled, J K / sqrt(D) scaled; unscaled over scaled, medians of the rows
            ratio_q[D].append(np.median(jk_norms(y_raw, k)) / (np.median(jk_norms(y_scaled, k)) / math.sqrt(D)))
            if D == 512:
                raw, scaled = jacobian_norms(y_raw), jacobian_norms(y_scaled)
                ratio_j.append(np.median(scaled) / np.median(raw))
                flat_rows.append(int((raw < 0.01).sum()))
                nearest_001 = min(nearest_001, np.abs(raw / 0.01 - 1).min())
    return {
        "above": above,
        "nearest_09": nearest_09,
        "ratio_j": np.array(ratio_j),
        "flat_rows": flat_rows,
        "nearest_001": nearest_001,
        "ratio_q": {D: np.array(r) for D, r in ratio_q.items()},
    }


def test_cell_12_rows_above_09_at_d_512(seeds):
    # no row lies within 1e-9 of the threshold, so a BLAS's last bits cannot move a row across it
    assert seeds["nearest_09"] > 1e-9
    assert (min(seeds["above"]), max(seeds["above"])) == (143, 171)  # "143 to 171 over the seeds 0 to 99"


def test_cell_14_gradient_with_respect_to_the_scores_at_d_512(seeds):
    ratio = seeds["ratio_j"]  # median |J| scaled over median |J| unscaled
    # "between 11 and 201 times, with a median of 51"
    assert (round(ratio.min()), round(float(np.median(ratio))), round(ratio.max())) == (11, 51, 201)
    # "46% to 64%" of the 200 rows have |J| < 0.01: 91 (45.5%) to 128 (64%); none within 1e-9 of 0.01
    assert seeds["nearest_001"] > 1e-9
    assert (min(seeds["flat_rows"]), max(seeds["flat_rows"])) == (91, 128)


def test_cell_14_gradient_with_respect_to_q(seeds):
    ratio = seeds["ratio_q"]  # median |J K| unscaled over median |J K| / sqrt(D) scaled
    for D in (16, 64, 128):  # "several times more up to D = 128", in every seed
        assert ratio[D].min() > 2, D
    assert np.mean(ratio[256] > 1) > 0.9  # "in most draws still more at D = 256" (98 of 100)
    assert round(1 / np.median(ratio[512])) == 2  # "at D = 512 typically about 2 times less" (median 0.44)
