"""flashmath: FlashAttention derived from first principles, in plain numpy.

The algorithms live in small modules named after the course's chapters; plotting (:mod:`flashmath.viz`) and
widgets (:mod:`flashmath.widgets`) are kept apart and are imported only when a notebook asks for them.
"""

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
    "OnlineSoftmaxTrace",
    "merge",
    "online_normalizer",
    "online_softmax",
    "online_softmax_trace",
    "safe_softmax",
    "softmax",
]
