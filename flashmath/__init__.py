"""flashmath: FlashAttention derived from first principles, in plain numpy.

Data flows one way (``docs/architecture.md`` has the module map): checked inputs (:mod:`flashmath.inputs`, the
conventions' one home) -> the row-state algebra and the tiles (:mod:`flashmath.rowstate`,
:mod:`flashmath.tiling`) -> the algorithms, in modules named after the course's chapters
(:mod:`flashmath.softmax`, :mod:`flashmath.attention`, :mod:`flashmath.flash`, :mod:`flashmath.splitkv`,
:mod:`flashmath.backward`...) -> counting, which wraps them from outside (:mod:`flashmath.memory`,
:mod:`flashmath.counting`, :mod:`flashmath.opcount`; the model in :mod:`flashmath.traffic`) -> drawing
(:mod:`flashmath.viz`) and widgets (:mod:`flashmath.widgets`), imported only when a notebook asks for them. The
real attention heads are in :mod:`flashmath.data`. :func:`set_language` selects the language of what the learner
reads (:mod:`flashmath.i18n`; the Chinese edition calls it once), and :func:`tr` marks what a chapter's own code
prints, so that it is translated too. The names below are the public API the notebooks
use.
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
    standard_attention,
    two_loop_attention,
    two_loop_trace,
)
from flashmath.backward import attention_backward
from flashmath.counting import FlashTrace, counted_attention, flash_trace
from flashmath.flash import flash_attention, reference_trace, rescale_trace
from flashmath.i18n import set_language, table, tr
from flashmath.masks import causal_mask, padding_mask, sliding_window_mask
from flashmath.opcount import count_ops
from flashmath.packed import flash_attention_varlen, gather_pages, paged_attention
from flashmath.precision import (
    PrecisionStudy,
    blas_description,
    max_abs_error,
    max_rel_error,
    naive_attention,
    precision_study,
    round_to,
    rounded_p_attention,
    unit_roundoff,
)
from flashmath.scaling import ScaleSweep, scale_sweep, softmax_entropy
from flashmath.softmax import (
    OnlineSoftmaxTrace,
    merge,
    online_normalizer,
    online_softmax,
    online_softmax_trace,
    safe_softmax,
    softmax,
)
from flashmath.splitkv import SplitKVTrace, merge_states, split_kv_attention, split_kv_trace
from flashmath.traffic import (
    SramSweep,
    algorithm1_block_sizes,
    attention_traffic,
    block_sizes_for_sram,
    gpt2_medium_traffic,
    sram_sweep,
)
from flashmath.variants import BlockMask, block_mask, document_mask_mod, prefix_lm_mask_mod, streaming_mask_mod

__version__ = "0.1.0"

__all__ = [
    "BlockMask",
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
    "blas_description",
    "block_sizes_for_sram",
    "causal_mask",
    "count_ops",
    "counted_attention",
    "block_mask",
    "document_mask_mod",
    "flash_attention",
    "flash_attention_varlen",
    "flash_trace",
    "gather_pages",
    "gpt2_medium_traffic",
    "loop_swap_trace",
    "matmul_ndm",
    "matmul_nmd",
    "max_abs_error",
    "max_rel_error",
    "merge",
    "merge_states",
    "naive_attention",
    "reference_trace",
    "rescale_trace",
    "rounded_p_attention",
    "one_loop_attention",
    "one_loop_trace",
    "online_normalizer",
    "online_softmax",
    "online_softmax_trace",
    "padding_mask",
    "paged_attention",
    "prefix_lm_mask_mod",
    "precision_study",
    "round_to",
    "safe_softmax",
    "scale_sweep",
    "set_language",
    "sliding_window_mask",
    "softmax",
    "softmax_entropy",
    "split_kv_attention",
    "split_kv_trace",
    "sram_sweep",
    "streaming_mask_mod",
    "standard_attention",
    "table",
    "two_loop_attention",
    "tr",
    "two_loop_trace",
    "unit_roundoff",
]
