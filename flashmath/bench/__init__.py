"""Benchmarks named in the README; each prints ratios against a baseline measured in the same run.

    python -m flashmath.bench sliders    # milliseconds per slider update, every widget of the course
    python -m flashmath.bench speed      # flash_attention against naive numpy and PyTorch (the ``bench`` extra)
    python -m flashmath.bench gpu        # the Triton kernels checked and timed on a CUDA GPU (the ``triton`` extra)

Machines are noisy, so nothing here is a pass/fail test: each command measures its own baseline in the same
process and prints the ratio beside it.
"""

from __future__ import annotations

import re

__all__ = ["plain_text"]

_ROLE = re.compile(r":(?:func|mod|class|meth|data|attr|obj|exc):`~?([^`]+)`")  # :func:`name` -> name
_LITERAL = re.compile(r"``([^`]+)``")  # ``code`` -> code
_DEFAULT_ROLE = re.compile(r"`([^`]+)`")  # `name` -> name


def plain_text(doc: str) -> str:
    """A docstring as a terminal shows it: the reST markup of the docstrings (double backquotes, roles such as
    ``:func:``) taken off, the words kept. Used for the benchmarks' ``--help``."""
    return _DEFAULT_ROLE.sub(r"\1", _LITERAL.sub(r"\1", _ROLE.sub(r"\1", doc)))
