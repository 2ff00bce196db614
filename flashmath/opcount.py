"""Operation counting (chapter 7): the element operations a tile loop executes, by numpy ufunc name.

:func:`count_ops` runs the package's own tile loop (:mod:`flashmath.flash`) on a plain memory whose arrays carry a
tally: every numpy ufunc call on them, and on every array computed from them, is counted by name. So FlashAttention
and FlashAttention-2 are compared on what ran, not on a formula.

Source: T. Dao, "FlashAttention-2" (2023), section 3.1.1 (fewer non-matmul FLOPs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size
from flashmath.flash import LOOPS, tile_arrays
from flashmath.inputs import prepare_attention_inputs
from flashmath.memory import PlainMemory
from flashmath.tiling import check_tiling

__all__ = ["OPS", "OPS_BLOCKS", "OpCount", "count_ops", "op_count_table"]

OPS = ("exp", "multiply", "divide", "add", "subtract", "maximum")
"""The element operations besides the matrix products that chapter 7 compares (numpy ufunc names)."""
OPS_BLOCKS = (2, 4, 8, 16, 32, 64, 128)
"""``B = B_r = B_c`` of chapter 7's operations slider (:func:`op_count_table`)."""


@dataclass
class OpCount:
    """Element operations of one run of a tile loop, by numpy ufunc name (what :func:`count_ops` saw executed).

    Attributes:
        ops: ``{name: elements}``, e.g. ``{"exp": ..., "multiply": ..., "divide": ..., "maximum": ...}``; an
            element-wise call counts its output elements, a reduction (``x.max(axis=-1)``, ``x.sum(axis=-1)``) the
            elements it reduces. ``matmul`` counts multiply-adds (``B_r * B_c * D`` for a score tile).
        scores: ``N * M`` times the leading dimensions: the number of scores, to normalise by.
    """

    ops: dict = field(default_factory=dict)
    scores: int = 1

    def per_score(self, name: str) -> float:
        """Operations ``name`` per score ``x_nm``."""
        return self.ops.get(name, 0) / max(self.scores, 1)

    @property
    def non_matmul(self) -> int:
        """Every counted element operation except the matrix products' multiply-adds."""
        return sum(n for name, n in self.ops.items() if name != "matmul")


class _OpCounting(np.ndarray):
    """An array whose ufunc calls (and those of every array computed from it) are tallied in ``_ops``."""

    _ops: dict | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self._ops = getattr(obj, "_ops", None)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # numpy functions such as np.where return plain arrays: keep counting what is computed from them
        result = super().__array_function__(func, types, args, kwargs)
        if isinstance(result, np.ndarray) and not isinstance(result, _OpCounting):
            counting = cast(_OpCounting, result.view(_OpCounting))
            counting._ops = self._ops
            return counting
        return result

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, out: Any = None, **kwargs: Any) -> Any:
        ops: dict = next(x._ops for x in inputs + (out or ()) if isinstance(x, _OpCounting) and x._ops is not None)
        plain = [x.view(np.ndarray) if isinstance(x, _OpCounting) else x for x in inputs]
        if out is not None:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, _OpCounting) else x for x in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc is np.matmul:
            n = np.size(result) * np.shape(plain[0])[-1]  # one multiply-add per output element and inner index
        elif method == "reduce":
            n = np.size(plain[0])
        else:
            n = np.size(result)
        ops[ufunc.__name__] = ops.get(ufunc.__name__, 0) + int(n)
        if out is not None:
            return out[0] if len(out) == 1 else out
        if isinstance(result, np.ndarray):
            counting = cast(_OpCounting, result.view(_OpCounting))
            counting._ops = ops
            return counting
        return result


def count_ops(
    algorithm: str,
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
) -> OpCount:
    """Run a tile loop of :func:`flashmath.flash.flash_attention` and count every element operation it executes.

    The loop is the package's own (nothing re-implemented): its inputs are wrapped in an array type whose numpy
    ufunc calls are tallied by name, and every array computed from them carries the tally along. So the counts
    are of what ran: ``exp``, ``subtract``, ``maximum``, ``multiply``, ``divide``, ``add``, ``log``... and the
    matrix products (``matmul``, in multiply-adds). Selections (``np.where``) and memory traffic are not counted.

    Args:
        algorithm: ``"fa1"`` or ``"fa2"``.
        q, k, v, block_q, block_k, scale, causal, mask: as :func:`flashmath.flash.flash_attention`.

    Returns:
        :class:`OpCount`.

    Raises:
        ValueError: another algorithm; otherwise as :func:`flashmath.flash.flash_attention`.

    Source: T. Dao, "FlashAttention-2" (2023), section 3.1.1 (fewer non-matmul FLOPs: the output is rescaled
    but not divided at every step, and one logsumexp is stored instead of the max and the sum).
    """
    if algorithm not in ("fa1", "fa2"):
        raise ValueError(f"count_ops counts the tile loops, 'fa1' or 'fa2'; got {algorithm!r}")
    block_q, block_k = check_tiling(block_q, block_k, algorithm)
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask, fold_causal=False)
    ops: dict = {}
    arrays = {}
    for name, data in tile_arrays(inp, algorithm).items():  # every array the loop reads or writes, counting
        counting = cast(_OpCounting, data.view(_OpCounting))
        counting._ops = ops
        arrays[name] = counting
    for _ in LOOPS[algorithm](PlainMemory(arrays), inp, block_q, block_k):
        pass
    return OpCount(ops=ops, scores=int(np.prod(inp.batch_shape, dtype=np.int64)) * inp.N * inp.M)


def op_count_table(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, blocks: Sequence[int] = OPS_BLOCKS) -> dict:
    """Operations per score of the package's fa1 and fa2 tile loops, for square tiles (chapter 7; what
    :class:`flashmath.viz.traffic.OpsPerScorePlot` draws).

    Args:
        q: ``(N, D)``, k: ``(M, D)``, v: ``(M, Dv)``. blocks: tile sizes ``B = B_r = B_c``.

    Returns:
        ``{"N", "D", "blocks", "fa1", "fa2"}``: for each order a dict of operation name (:data:`OPS`, and
        ``"non_matmul"``, all of them but the matrix products) -> array over ``blocks`` of :func:`count_ops`
        counts per score.

    Raises:
        TypeError, ValueError: as :func:`count_ops`.
    """
    blocks = tuple(size(b, "each of blocks", 1) for b in blocks)
    table: dict = {"N": int(np.shape(q)[-2]), "D": int(np.shape(q)[-1]), "blocks": blocks}
    for order in ("fa1", "fa2"):
        counts = [count_ops(order, q, k, v, block_q=b, block_k=b) for b in blocks]
        table[order] = {name: np.array([c.per_score(name) for c in counts]) for name in OPS}
        table[order]["non_matmul"] = np.array([c.non_matmul / c.scores for c in counts])
    return table
