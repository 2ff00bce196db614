"""Drawing: the course's figures, each a :class:`LivePlot` built once and updated in place.

:mod:`flashmath.viz.live` holds the pattern (read its docstring before adding a figure). Each plot class draws a
trace computed by :mod:`flashmath` (nothing here computes softmax or attention) and serves three views with one
instance each: a widget (:mod:`flashmath.widgets`), a static picture (the ``plot_*`` functions, shown by Jupyter's
inline backend) and a JavaScript animation (:func:`animate_steps`). Axis limits are fixed over all steps so that a
slider or an animation never makes the axes jump.

Beside the plots, one module per job: :mod:`~flashmath.viz.live` (the pattern: ``LivePlot``, ``Picture``),
:mod:`~flashmath.viz.frames` (animations and strips of key frames), :mod:`~flashmath.viz.png` (a widget's PNG
bytes), :mod:`~flashmath.viz.axes` (the argument checks and axis helpers the plots share) and
:mod:`~flashmath.viz.style` (size, density and colours). :mod:`~flashmath.viz.warps` draws one static schematic
(how the warps of a thread block share a tile step).

Index convention: in the math, steps and keys count from 1 (``x_1..x_N``, keys ``m = 1..M``; state 0 = nothing
seen); a bracketed index such as ``A[n, :]`` or ``Y[n, m-1]`` is a 0-based numpy index.
"""

from flashmath.viz.attention import (
    LoopSwapPlot,
    OneLoopPlot,
    ScalePlot,
    plot_loop_swap_step,
    plot_one_loop_step,
    plot_partial_and_prefix,
    plot_scale_step,
)
from flashmath.viz.frames import animate_steps, offline_jshtml, strip
from flashmath.viz.hierarchy import plot_memory_hierarchy
from flashmath.viz.live import LivePlot, Picture, figure_signature
from flashmath.viz.polyexp import plot_exp2_poly_error
from flashmath.viz.precision import PrecisionPlot, plot_accumulator_growth, plot_precision_study
from flashmath.viz.rescale import LazyRescalePlot, plot_lazy_rescale
from flashmath.viz.softmax import OnlineSoftmaxPlot, OverflowPlot, plot_online_softmax_step, plot_overflow
from flashmath.viz.splitkv import SplitKVPlot
from flashmath.viz.style import DPI, HOLD, JUMP, PIXEL_RATIO, SEEN, UNSEEN
from flashmath.viz.tiles import TileSweepPlot, plot_masks, plot_op_counts, plot_sram_sweep, plot_tile_sweep_step
from flashmath.viz.traffic import OpsPerScorePlot, TileTrafficPlot
from flashmath.viz.variants import MaskExplorerPlot, plot_gqa_heads, plot_mask_example, plot_paged_cache
from flashmath.viz.warps import plot_warp_partition

__all__ = [
    "DPI",
    "HOLD",
    "JUMP",
    "PIXEL_RATIO",
    "SEEN",
    "UNSEEN",
    "LazyRescalePlot",
    "LivePlot",
    "LoopSwapPlot",
    "MaskExplorerPlot",
    "OneLoopPlot",
    "OpsPerScorePlot",
    "OnlineSoftmaxPlot",
    "OverflowPlot",
    "Picture",
    "PrecisionPlot",
    "ScalePlot",
    "SplitKVPlot",
    "TileSweepPlot",
    "TileTrafficPlot",
    "animate_steps",
    "offline_jshtml",
    "figure_signature",
    "plot_exp2_poly_error",
    "plot_gqa_heads",
    "plot_mask_example",
    "plot_paged_cache",
    "plot_accumulator_growth",
    "plot_lazy_rescale",
    "plot_loop_swap_step",
    "plot_masks",
    "plot_memory_hierarchy",
    "plot_one_loop_step",
    "plot_partial_and_prefix",
    "plot_op_counts",
    "plot_online_softmax_step",
    "plot_overflow",
    "plot_precision_study",
    "plot_scale_step",
    "plot_tile_sweep_step",
    "plot_sram_sweep",
    "plot_warp_partition",
    "strip",
]
