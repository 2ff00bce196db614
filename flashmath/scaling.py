"""Why attention divides the scores by sqrt(D): the spread of dot products and the sharpness of softmax.

If the ``D`` components of a query ``q`` and a key ``k`` are independent with mean 0 and variance 1, the dot
product ``q . k`` has mean 0 and variance ``D`` (Vaswani et al., "Attention Is All You Need" (2017), section
3.2.1, footnote 4). Unscaled, the scores spread out as ``sqrt(D)`` grows and the softmax of a row becomes nearly
one-hot (its largest probability goes to 1, its entropy to 0); divided by ``sqrt(D)`` they keep variance 1 for
every ``D``. :func:`scale_sweep` measures both on random vectors, for the chapter 3 slider.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size
from flashmath.softmax import safe_softmax

__all__ = ["ScaleSweep", "scale_sweep", "softmax_entropy"]


def softmax_entropy(y: ArrayLike, axis: int = -1) -> np.ndarray:
    """Entropy ``-sum_m y_m log(y_m)`` (natural log) of probability rows, with ``0 log 0 = 0``.

    Args:
        y: probabilities, e.g. the output of :func:`flashmath.safe_softmax`, any shape.
        axis: the axis that sums to 1.

    Returns:
        float64 array of ``y``'s shape without ``axis``: 0 for a one-hot row, ``log M`` for a uniform row of
        ``M`` entries.
    """
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(y > 0, -y * np.log(y), 0.0)
    return terms.sum(axis=axis)


@dataclass(frozen=True)
class ScaleSweep:
    """Scores of random unit-variance queries and keys for several head dimensions ``D``, unscaled and scaled.

    Entry ``[i]`` of every array belongs to ``D = dims[i]``. All arrays float64.

    Attributes:
        dims: ``(S,)`` int, the head dimensions.
        raw: ``(S, N * M)`` the scores ``q_n . k_m`` (no scale), for ``N`` queries against ``M`` keys.
        scaled: ``(S, N * M)`` the same scores divided by ``sqrt(D)``.
        max_prob_raw, max_prob_scaled: ``(S, N)`` the largest softmax probability of each row of scores.
        entropy_raw, entropy_scaled: ``(S, N)`` the entropy of each row's softmax (nats; ``log M`` is uniform).
        n_keys: ``M``, the number of keys per row (the entropy of a uniform row is ``log M``).
    """

    dims: np.ndarray
    raw: np.ndarray
    scaled: np.ndarray
    max_prob_raw: np.ndarray
    max_prob_scaled: np.ndarray
    entropy_raw: np.ndarray
    entropy_scaled: np.ndarray
    n_keys: int

    def __len__(self) -> int:
        return len(self.dims)

    def std(self) -> tuple[np.ndarray, np.ndarray]:
        """The standard deviation of the scores for each ``D``: ``(raw, scaled)``, each ``(S,)``."""
        return self.raw.std(axis=1), self.scaled.std(axis=1)


def scale_sweep(dims: ArrayLike, *, rng: np.random.Generator, n_queries: int = 200, n_keys: int = 64) -> ScaleSweep:
    """Draw unit-variance queries and keys for each head dimension in ``dims`` and measure their scores.

    For each ``D``: ``Q (n_queries, D)`` and ``K (n_keys, D)`` with independent standard normal entries; the
    scores ``X = Q K^T`` unscaled and divided by ``sqrt(D)``; the largest probability and the entropy of each
    row's softmax.

    Args:
        dims: positive head dimensions, e.g. ``[1, 2, 4, ..., 512]``.
        rng: the random generator (pass the notebook's seeded one).
        n_queries: ``N``, rows per head dimension.
        n_keys: ``M``, keys per row (at least 2).

    Returns:
        :class:`ScaleSweep`.

    Raises:
        ValueError: ``dims`` not a non-empty list of positive integers, ``n_queries < 1`` or ``n_keys < 2``.
        TypeError: ``rng`` not a :class:`numpy.random.Generator`; ``n_queries`` or ``n_keys`` not an integer.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy Generator: pass np.random.default_rng(SEED), got {type(rng).__name__} {rng!r}"
        )
    n_queries = size(n_queries, "n_queries", 1)
    n_keys = size(n_keys, "n_keys", 2)
    given = dims
    try:
        dims = np.asarray(dims)
    except ValueError:  # ragged nested lists
        dims = np.asarray([None])
    if dims.ndim != 1 or dims.size == 0 or dims.dtype.kind not in "iu" or (dims < 1).any():
        raise ValueError(f"dims must be a non-empty 1-D list of positive integers (head dimensions), got {given!r}")
    raw: list = []
    scaled: list = []
    mp_raw: list = []
    mp_scaled: list = []
    h_raw: list = []
    h_scaled: list = []
    for D in dims.tolist():
        q = rng.standard_normal((n_queries, D))  # (N, D), mean 0, variance 1
        k = rng.standard_normal((n_keys, D))  # (M, D)
        x = q @ k.T  # (N, M), each score has variance D
        x_scaled = x / math.sqrt(D)  # (N, M), variance 1
        for scores, flat, max_prob, entropy in ((x, raw, mp_raw, h_raw), (x_scaled, scaled, mp_scaled, h_scaled)):
            y = safe_softmax(scores)  # (N, M)
            flat.append(scores.ravel())
            max_prob.append(y.max(axis=1))
            entropy.append(softmax_entropy(y))
    return ScaleSweep(
        dims=dims.astype(int),
        raw=np.array(raw),
        scaled=np.array(scaled),
        max_prob_raw=np.array(mp_raw),
        max_prob_scaled=np.array(mp_scaled),
        entropy_raw=np.array(h_raw),
        entropy_scaled=np.array(h_scaled),
        n_keys=int(n_keys),
    )
