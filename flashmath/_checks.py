"""Argument checks shared by the package's modules (one home for each; messages name the argument).

Integers and sizes (:func:`integer`, :func:`size`), thread counts (:func:`thread_count`), floating-point
arrays and dtypes (:func:`as_float_array`, :func:`float_dtype`, :func:`compute_dtype`, :data:`DTYPES`). Every
module checks its arguments through these, so a message reads the same wherever the mistake is made.
"""

from __future__ import annotations

import operator
import os

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "DTYPES",
    "ML_DTYPES_FLOATS",
    "NonFloatInputError",
    "as_float_array",
    "available_cores",
    "compute_dtype",
    "float_dtype",
    "integer",
    "size",
    "thread_count",
]


def integer(value: object, name: str, kind: str = "an integer") -> int:
    """``value`` as a Python int; TypeError for anything else, bools and floats such as 1.0 included.

    ``operator.index(True)`` is 1, but a bool is never meant as a size or a position, so it is refused.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {kind}, got the bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]  # TypeError is caught below
    except TypeError:
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}") from None


def available_cores() -> int:
    """The CPU cores this process may run on: ``os.sched_getaffinity`` where it exists (Linux: it honours
    ``taskset`` and container CPU sets), else ``os.cpu_count()``, else 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def thread_count(value: object, name: str) -> int:
    """A number of threads: a positive int, or None for :func:`available_cores`. TypeError for a non-integer
    (a bool is not), ValueError below 1."""
    if value is None:
        return available_cores()
    number = integer(value, name, "a positive integer (threads) or None (the cores available)")
    if number < 1:
        raise ValueError(f"{name} must be a positive number of threads or None (the cores available), got {number}")
    return number


def size(value: object, name: str, minimum: int = 0, kind: str | None = None, why: str = "") -> int:
    """``value`` as a Python int ``>= minimum``: TypeError for a non-integer (:func:`integer`), ValueError below
    ``minimum`` (``why``, e.g. ``" (rows per tile)"``, follows the bound in its message). The one home of the
    "integer >= k" check (sizes, block sizes, counts, steps, intervals)."""
    number = integer(value, name, kind or "an integer")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}{why}, got {number}")
    return number


class NonFloatInputError(TypeError, ValueError):
    """Input that is not real floating-point numbers. Both a TypeError and a ValueError, so either catches it."""


# The real floating-point types of ml_dtypes (bfloat16, the float8 family...). numpy gives most of them kind 'V'
# (void), so they are recognised by name; ml_dtypes' complex and integer types are not among them.
ML_DTYPES_FLOATS = frozenset(
    np.dtype(getattr(ml_dtypes, name)) for name in dir(ml_dtypes) if name.startswith(("bfloat", "float"))
)


def as_float_array(x: ArrayLike, name: str = "x", *, allow_int: bool = True) -> np.ndarray:
    """Return ``x`` as a floating-point ndarray without copying float input.

    Floating point means numpy's float16/float32/float64 (kind ``'f'``) and the float types of ``ml_dtypes``
    (:data:`ML_DTYPES_FLOATS`: bfloat16, float8...), which :func:`compute_dtype` computes in float32. Integer and
    bool arrays become float64 when ``allow_int`` (the softmax functions), and are refused otherwise (the
    attention functions). Raises :class:`NonFloatInputError` (a TypeError and a ValueError) for
    complex, object or string data, and for integers when not allowed.
    """
    arr = np.asarray(x)
    if arr.dtype.kind in "biu" and allow_int:
        return arr.astype(np.float64)
    if arr.dtype.kind != "f" and arr.dtype not in ML_DTYPES_FLOATS:
        hint = f"; convert it first, e.g. {name}.astype(np.float64)" if arr.dtype.kind in "biu" else ""
        raise NonFloatInputError(
            f"{name} must hold real floating-point numbers (float16, bfloat16, float32 or float64), got dtype "
            f"{arr.dtype}" + hint
        )
    return arr


def float_dtype(dtype: DTypeLike, name: str = "dtype") -> np.dtype:
    """``dtype`` (a numpy dtype, a type such as ``np.float16`` or ``ml_dtypes.bfloat16``, or a name such as
    ``"bfloat16"``) as a floating-point ``np.dtype``; TypeError naming ``name`` for anything else."""
    try:
        dt = np.dtype(dtype) if dtype is not None else None
    except TypeError:
        dt = None
    if dt is None or not (dt.kind == "f" or dt in ML_DTYPES_FLOATS):
        raise TypeError(
            f"{name} must be a floating-point dtype such as np.float16, 'bfloat16' or np.float32, got {dtype!r}"
        )
    return dt


def compute_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype a safe computation runs in: float32 for float16 and bfloat16 (any ``ml_dtypes`` float) input, else
    the input's own dtype."""
    return np.promote_types(dtype, np.float32)


DTYPES = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}
"""The floating-point dtypes of the course by name (``np.dtype("bfloat16")`` works too once ``ml_dtypes`` is
imported). The float16 overflow explorer of chapter 1 offers the numpy ones among them."""
