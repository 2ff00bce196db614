"""flashmath: FlashAttention derived from first principles, in plain numpy.

The algorithms live in small modules named after the course's chapters (:mod:`flashmath.softmax`,
:mod:`flashmath.attention`, :mod:`flashmath.scaling`, :mod:`flashmath.masks`, :mod:`flashmath.flash`,
:mod:`flashmath.traffic`, :mod:`flashmath.precision`); the real attention heads in :mod:`flashmath.data`. Plotting
(:mod:`flashmath.viz`) and widgets (:mod:`flashmath.widgets`) are kept apart and are imported only when a notebook asks for them.
"""

from flashmath.attention import (
    LoopSwapTrace,
    OneLoopTrace,
    TwoLoopTrace,
    attention,
    loop_swap_trace,
    matmul_ndm,
    matmul_nmd,
    one_loop_attention,
    one_loop_trace,
    two_loop_attention,
    two_loop_trace,
)
from flashmath.backward import attention_backward
from flashmath.flash import FlashTrace, flash_attention, flash_trace
from flashmath.masks import causal_mask, padding_mask, sliding_window_mask
from flashmath.precision import (
    PrecisionStudy,
    max_abs_error,
    max_rel_error,
    naive_attention,
    rounded_p_attention,
    precision_study,
    round_to,
    unit_roundoff,
)
from flashmath.scaling import ScaleSweep, scale_sweep, softmax_entropy
from flashmath.splitkv import SplitKVTrace, merge_states, split_kv_attention, split_kv_trace
from flashmath.softmax import (
    OnlineSoftmaxTrace,
    merge,
    online_normalizer,
    online_softmax,
    online_softmax_trace,
    safe_softmax,
    softmax,
)
from flashmath.traffic import (
    SramSweep,
    algorithm1_block_sizes,
    attention_traffic,
    block_sizes_for_sram,
    count_ops,
    counted_attention,
    gpt2_medium_traffic,
    sram_sweep,
)

__version__ = "0.1.0"

__all__ = [
    "FlashTrace",
    "LoopSwapTrace",
    "OneLoopTrace",
    "OnlineSoftmaxTrace",
    "PrecisionStudy",
    "ScaleSweep",
    "SplitKVTrace",
    "SramSweep",
    "TwoLoopTrace",
    "algorithm1_block_sizes",
    "attention",
    "attention_backward",
    "attention_traffic",
    "block_sizes_for_sram",
    "causal_mask",
    "count_ops",
    "counted_attention",
    "flash_attention",
    "flash_trace",
    "gpt2_medium_traffic",
    "loop_swap_trace",
    "matmul_ndm",
    "matmul_nmd",
    "max_abs_error",
    "max_rel_error",
    "merge",
    "merge_states",
    "naive_attention",
    "rounded_p_attention",
    "one_loop_attention",
    "one_loop_trace",
    "online_normalizer",
    "online_softmax",
    "online_softmax_trace",
    "padding_mask",
    "precision_study",
    "round_to",
    "safe_softmax",
    "scale_sweep",
    "sliding_window_mask",
    "softmax",
    "softmax_entropy",
    "split_kv_attention",
    "split_kv_trace",
    "sram_sweep",
    "two_loop_attention",
    "two_loop_trace",
    "unit_roundoff",
]
