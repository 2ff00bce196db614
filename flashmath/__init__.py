"""flashmath: FlashAttention derived from first principles, in plain numpy.

The algorithms live in small modules named after the course's chapters (:mod:`flashmath.softmax`,
:mod:`flashmath.attention`, :mod:`flashmath.scaling`, :mod:`flashmath.masks`, :mod:`flashmath.traffic`); the
real attention heads in :mod:`flashmath.data`. Plotting (:mod:`flashmath.viz`) and widgets
(:mod:`flashmath.widgets`) are kept apart and are imported only when a notebook asks for them.
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
from flashmath.masks import causal_mask, padding_mask, sliding_window_mask
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

__version__ = "0.1.0"

__all__ = [
    "LoopSwapTrace",
    "OneLoopTrace",
    "OnlineSoftmaxTrace",
    "ScaleSweep",
    "SplitKVTrace",
    "TwoLoopTrace",
    "attention",
    "attention_backward",
    "causal_mask",
    "loop_swap_trace",
    "matmul_ndm",
    "matmul_nmd",
    "merge",
    "merge_states",
    "one_loop_attention",
    "one_loop_trace",
    "online_normalizer",
    "online_softmax",
    "online_softmax_trace",
    "padding_mask",
    "safe_softmax",
    "scale_sweep",
    "sliding_window_mask",
    "softmax",
    "softmax_entropy",
    "split_kv_attention",
    "split_kv_trace",
    "two_loop_attention",
    "two_loop_trace",
]
