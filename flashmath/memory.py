"""Off-chip memory for the algorithms: a plain memory that costs nothing, and a counted memory.

Every loop of the course that models memory traffic (chapters 4-7) reads its inputs from, and writes its outputs
to, a *memory* passed in by its caller: ``memory["K"]`` is an array, ``memory["K"][index]`` a load and
``memory["A"][index] = value`` a store; ``memory.array(name)`` returns an array's contents without touching it.

* :class:`PlainMemory` holds the arrays and nothing else: a load is numpy indexing. The public functions
  (:func:`flashmath.flash_attention`, :func:`flashmath.two_loop_attention`...) run on it, so a run that nobody
  counts costs nothing.
* :class:`CountedMemory` tallies every element loaded and stored, per array and per named pass, in a
  :class:`TrafficCount`. :mod:`flashmath.counting` (:func:`flashmath.flash_trace` included) passes one in; the
  algorithms never import this module's counters, so counting wraps them from outside.

Whatever an algorithm keeps between accesses (a running max, a query tile, a row of partial sums) is on chip
and costs nothing. Bytes are elements times ``bytes_per_element``.

Source: T. Dao et al., "FlashAttention" (2022), section 2 (the memory hierarchy: HBM and on-chip SRAM) and
Algorithms 0 and 1 (what is loaded from and written to HBM).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CountedArray", "CountedMemory", "Memory", "PlainMemory", "TrafficCount"]


class PlainMemory:
    """Named arrays in memory that count nothing: ``memory[name]`` is the array itself.

    Args:
        arrays: ``{name: array}``, held as given (not copied): inputs are only read, outputs written in place.

    The same interface as :class:`CountedMemory` (``memory[name]``, :meth:`array`, :meth:`named_pass`), so a loop
    runs unchanged on either.
    """

    def __init__(self, arrays: Mapping[str, Any]):
        self._data = {name: np.asarray(a) if not isinstance(a, np.ndarray) else a for name, a in arrays.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def array(self, name: str) -> np.ndarray:
        """The array ``name`` as it is now (not copied: do not modify it)."""
        return self._data[name]

    @contextmanager
    def named_pass(self, name: str) -> Iterator[PlainMemory]:
        """A named pass: nothing to count here."""
        yield self


@dataclass
class TrafficCount:
    """Element loads and stores of one run (or of the model), per array and per pass.

    Attributes:
        arrays: ``{name: (loads, stores)}`` in elements, for every array in memory (untouched ones are ``(0, 0)``).
        passes: ``[(name, loads, stores), ...]`` for the passes named with :meth:`CountedMemory.named_pass`, in order.
        length: the number of elements of the input vector, for :meth:`per_element` (softmax); 0 otherwise.
        bytes_per_element: the size of one element in memory, in bytes.
    """

    arrays: dict = field(default_factory=dict)
    passes: list = field(default_factory=list)
    length: int = 0
    bytes_per_element: int = 8

    @property
    def loads(self) -> int:
        """Element loads from memory, all arrays together."""
        return sum(loads for loads, _ in self.arrays.values())

    @property
    def stores(self) -> int:
        """Element stores to memory, all arrays together."""
        return sum(stores for _, stores in self.arrays.values())

    @property
    def bytes(self) -> int:
        """Bytes moved between memory and the chip: ``(loads + stores) * bytes_per_element``."""
        return (self.loads + self.stores) * self.bytes_per_element

    def bytes_of(self, name: str) -> tuple[int, int]:
        """``(bytes loaded, bytes stored)`` of one array (``(0, 0)`` for an array this run never had)."""
        loads, stores = self.arrays.get(name, (0, 0))
        return loads * self.bytes_per_element, stores * self.bytes_per_element

    def per_element(self) -> tuple[float, float, float]:
        """``(loads, stores, loads + stores)`` per element of the input vector (softmax counts)."""
        n = max(self.length, 1)
        return self.loads / n, self.stores / n, (self.loads + self.stores) / n


class CountedArray:
    """One array in counted memory: ``arr[index]`` is a load and ``arr[index] = value`` a store.

    Both count the elements that ``index`` selects (numpy basic indexing: integers, slices, ``...``, ``None``).
    A load returns what the index selects, a view where numpy gives one: treat it as read-only.
    """

    def __init__(self, memory: CountedMemory, name: str, data: np.ndarray) -> None:
        self._memory, self._name, self._data = memory, name, data

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, index: Any) -> Any:
        value = self._data[index]
        self._memory._tally(self._name, np.size(value), 0)
        return value

    def __setitem__(self, index: Any, value: Any) -> None:
        self._memory._tally(self._name, 0, np.size(self._data[index]))
        self._data[index] = value


class CountedMemory:
    """Named arrays in off-chip memory that count every element loaded and stored.

    Args:
        arrays: ``{name: array}``; the arrays are held as given (not copied), so pass arrays the caller may
            not see changed (inputs are only read; outputs are written in place).
        bytes_per_element: the element size used for :attr:`TrafficCount.bytes`; default: the largest
            itemsize among the arrays.
        length: stored in :attr:`TrafficCount.length` (the vector length of the softmax counts).

    ``memory["K"]`` is the :class:`CountedArray` of ``K``; :meth:`named_pass` names the sweep in progress;
    :attr:`count` holds the tally; :meth:`array` returns an array's current contents without counting.
    """

    def __init__(self, arrays: Mapping[str, Any], *, bytes_per_element: int | None = None, length: int = 0):
        self._data = {name: np.asarray(a) if not isinstance(a, np.ndarray) else a for name, a in arrays.items()}
        if bytes_per_element is None:
            bytes_per_element = max((a.itemsize for a in self._data.values()), default=8)
        self.count = TrafficCount(
            arrays={name: (0, 0) for name in self._data}, length=length, bytes_per_element=bytes_per_element
        )
        self._views = {name: CountedArray(self, name, a) for name, a in self._data.items()}
        self._current: list | None = None

    def __getitem__(self, name: str) -> CountedArray:
        return self._views[name]

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def _tally(self, name: str, loads: int, stores: int) -> None:
        old_loads, old_stores = self.count.arrays[name]
        self.count.arrays[name] = (old_loads + loads, old_stores + stores)
        if self._current is not None:
            self._current[1] += loads
            self._current[2] += stores

    @contextmanager
    def named_pass(self, name: str) -> Iterator[CountedMemory]:
        """Count the loads and stores made inside the ``with`` block as one pass called ``name``."""
        current: list = [name, 0, 0]
        self._current = current
        try:
            yield self
        finally:
            self.count.passes.append(tuple(current))
            self._current = None

    def array(self, name: str) -> np.ndarray:
        """The array ``name`` as it is now (not counted, not copied: do not modify it)."""
        return self._data[name]


Memory = PlainMemory | CountedMemory
"""What a loop accepts as its memory: either kind (they share ``memory[name]``, ``array``, ``named_pass``)."""
