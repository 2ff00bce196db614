"""Counting memory traffic: how many times each softmax variant loads and stores every element.

Chapters 1 and 2 run each softmax variant element by element on a :class:`CountedMemory`, an array in
off-chip memory (DRAM / HBM) that counts every element load and store, pass by pass. Scalars kept in
registers (the running max, the running sum) cost nothing. The counts reproduce the memory-access table of Milakov and
Gimelshein (2018):

================  =====  ======  ====================
variant           loads  stores  accesses per element
================  =====  ======  ====================
naive softmax       2      1      3
safe softmax        3      1      4
online softmax      2      1      3
================  =====  ======  ====================

The element-wise loops here are for counting and teaching; the vectorised versions in
:mod:`flashmath.softmax` are the ones to use, and the tests check both give the same probabilities.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from flashmath.softmax import as_float_array, merge

__all__ = [
    "CountedMemory",
    "TrafficCount",
    "naive_softmax_counted",
    "safe_softmax_counted",
    "online_softmax_counted",
    "SOFTMAX_VARIANTS",
]


@dataclass
class TrafficCount:
    """Element loads and stores of one run, per pass.

    Attributes:
        length: number of elements in the vector (L).
        passes: list of ``(name, loads, stores)`` in the order the passes ran.
    """

    length: int
    passes: list = field(default_factory=list)

    @property
    def loads(self) -> int:
        """Element loads from memory, all passes together."""
        return sum(p[1] for p in self.passes)

    @property
    def stores(self) -> int:
        """Element stores to memory, all passes together."""
        return sum(p[2] for p in self.passes)

    def per_element(self) -> tuple[float, float, float]:
        """``(loads, stores, loads + stores)`` per element of the vector."""
        n = max(self.length, 1)
        return self.loads / n, self.stores / n, (self.loads + self.stores) / n


class CountedMemory:
    """A 1-D input vector and an output vector in off-chip memory that count element accesses.

    Args:
        x: 1-D array ``(L,)`` of floats (copied; the caller's array is not touched).

    Use :meth:`pass_` to name the sweep in progress, :meth:`load` to read ``x[i]`` and :meth:`store` to write
    ``y[i]``. :attr:`count` holds the tally.
    """

    def __init__(self, x):
        x = as_float_array(x)
        if x.ndim != 1:
            raise ValueError(f"CountedMemory holds a 1-D vector, got shape {x.shape}")
        self._x = x.astype(np.float64)  # counting is about accesses, the values are float64
        self._y = np.zeros_like(self._x)
        self.count = TrafficCount(length=len(self._x))
        self._current = None

    def __len__(self) -> int:
        return len(self._x)

    @contextmanager
    def pass_(self, name: str):
        """Count the loads and stores made inside the ``with`` block as one pass called ``name``."""
        self._current = [name, 0, 0]
        try:
            yield self
        finally:
            self.count.passes.append(tuple(self._current))
            self._current = None

    def load(self, i: int) -> float:
        """Read ``x[i]`` from memory (one load)."""
        self._current[1] += 1
        return float(self._x[i])

    def store(self, i: int, value: float) -> None:
        """Write ``y[i]`` to memory (one store)."""
        self._current[2] += 1
        self._y[i] = value

    @property
    def result(self) -> np.ndarray:
        """A copy of the output vector ``y``."""
        return self._y.copy()


def naive_softmax_counted(x):
    """Direct softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`. Overflows like
    :func:`flashmath.softmax.softmax` (returns inf/NaN, no warning).
    """
    mem = CountedMemory(x)
    with mem.pass_("sum of exp"):
        d = 0.0
        for i in range(len(mem)):
            d += _exp(mem.load(i))  # d = sum_j exp(x_j)
    with mem.pass_("divide"):
        for i in range(len(mem)):
            mem.store(i, _div(_exp(mem.load(i)), d))  # y_i = exp(x_i) / d
    return mem.result, mem.count


def safe_softmax_counted(x):
    """Safe softmax on counted memory: 3 passes, 3 loads and 1 store per element.

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = CountedMemory(x)
    with mem.pass_("max"):
        g = -math.inf
        for i in range(len(mem)):
            g = _max(g, mem.load(i))  # g = max_j x_j
    with mem.pass_("sum"):
        s = 0.0
        for i in range(len(mem)):
            s += _exp_shifted(mem.load(i), g)  # s = sum_j exp(x_j - g)
    with mem.pass_("divide"):
        for i in range(len(mem)):
            e = _exp_shifted(mem.load(i), g)
            mem.store(i, e / s if s != 0 else 0.0)  # y_i = exp(x_i - g) / s; a fully masked row gives 0
    return mem.result, mem.count


def online_softmax_counted(x):
    """Online softmax on counted memory: 2 passes, 2 loads and 1 store per element.

    Pass 1 keeps ``(g, s)`` in registers and updates both from each loaded ``x_i``
    (:func:`flashmath.softmax.merge` with the one-element state ``(x_i, 1)``).

    Returns ``(y, count)``: probabilities ``(L,)`` float64 and a :class:`TrafficCount`.
    """
    mem = CountedMemory(x)
    with mem.pass_("max and sum (online)"):
        g, s = -math.inf, 0.0
        for i in range(len(mem)):
            # g_i = max(g_{i-1}, x_i);  s_i = s_{i-1} * exp(g_{i-1} - g_i) + exp(x_i - g_i)
            g, s = (float(v) for v in merge(g, s, mem.load(i), 1.0))
    with mem.pass_("divide"):
        for i in range(len(mem)):
            e = _exp_shifted(mem.load(i), g)
            mem.store(i, e / s if s != 0 else 0.0)  # y_i = exp(x_i - g_N) / s_N; a fully masked row gives 0
    return mem.result, mem.count


SOFTMAX_VARIANTS = {
    "naive softmax": naive_softmax_counted,
    "safe softmax": safe_softmax_counted,
    "online softmax": online_softmax_counted,
}
"""The counted variants by name, in the order of Milakov and Gimelshein's memory-access table."""


# Scalar helpers with numpy's IEEE semantics (inf, NaN) instead of Python's exceptions.
def _exp(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.exp(v))


def _exp_shifted(v: float, g: float) -> float:
    """``exp(v - g)``, with ``exp(-inf - (-inf))`` taken as 0 (a fully masked row)."""
    if g == -math.inf:
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.exp(v - g))


def _div(a: float, b: float) -> float:
    """IEEE division: inf / inf and 0 / 0 give NaN, as in the vectorised direct softmax."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.float64(a) / np.float64(b))


def _max(a: float, b: float) -> float:
    return float(np.maximum(a, b))  # NaN propagates, unlike Python's max
