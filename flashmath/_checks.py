"""Argument checks shared by the package's modules (one home for each; messages name the argument)."""

from __future__ import annotations

import operator

import numpy as np


def integer(value, name: str, kind: str = "an integer") -> int:
    """``value`` as a Python int; TypeError for anything else, bools and floats such as 1.0 included.

    ``operator.index(True)`` is 1, but a bool is never meant as a size or a position, so it is refused.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {kind}, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}") from None
