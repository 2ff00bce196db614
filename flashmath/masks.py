"""Boolean attention masks (chapter 8): causal (both alignments), sliding window, key padding.

Every mask here is a boolean array with True = attend, the convention of :func:`flashmath.attention.attention`
(and of ``torch.nn.functional.scaled_dot_product_attention``). A mask is element-wise: it replaces the scores
it excludes by ``-inf`` before the softmax, and changes nothing else in the derivation.

Causal alignment when ``N != M``. Query ``n`` (of ``N``) may see key ``m`` (of ``M``) when

* ``align="bottom-right"`` (the default): ``m <= n + M - N``. The last query is aligned with the last key, so
  decoding one token (``N = 1``) against a KV cache of ``M`` keys sees the whole cache. FlashAttention uses this
  alignment since version 2.1; with ``N > M`` the first ``N - M`` queries see no key at all (fully masked rows).
* ``align="top-left"``: ``m <= n``. The first query is aligned with the first key (FlashAttention 2.0 and
  ``torch.tril(torch.ones(N, M))``); with ``N = 1`` the query sees only key 0.

Both agree when ``N == M``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size

__all__ = ["causal_mask", "sliding_window_mask", "padding_mask"]

_ALIGNMENTS = ("bottom-right", "top-left")


def _offset(N: int, M: int, align: str) -> int:
    """The key index seen by query 0 as its last key: ``M - N`` (bottom-right) or ``0`` (top-left)."""
    if align not in _ALIGNMENTS:
        raise ValueError(f"align must be 'bottom-right' or 'top-left', got {align!r}")
    return M - N if align == "bottom-right" else 0


def causal_mask(N: int, M: int, *, align: str = "bottom-right") -> np.ndarray:
    """Causal mask for ``N`` queries and ``M`` keys: query ``n`` sees key ``m`` when ``m <= n + offset``.

    Args:
        N: number of queries (``>= 0``).
        M: number of keys (``>= 0``).
        align: ``"bottom-right"`` (default, ``offset = M - N``: the last query sees every key, FlashAttention
            2.1+) or ``"top-left"`` (``offset = 0``: query ``n`` sees keys ``0..n``).

    Returns:
        Boolean array ``(N, M)``, True = attend.

    Raises:
        TypeError: ``N`` or ``M`` is not an integer (a bool is not). ValueError: a negative size or an unknown
        ``align``.
    """
    N, M = size(N, "N"), size(M, "M")
    offset = _offset(N, M, align)
    n = np.arange(N)[:, None]  # (N, 1)
    m = np.arange(M)[None, :]  # (1, M)
    return m <= n + offset  # (N, M)


def sliding_window_mask(
    N: int,
    M: int,
    window: int | None = None,
    *,
    left: int | None = None,
    right: int | None = None,
    align: str = "bottom-right",
) -> np.ndarray:
    """Sliding-window (local) mask: query ``n`` sees the keys within ``left`` before and ``right`` after its own.

    With ``p = n + offset`` the key aligned with query ``n`` (``offset`` as in :func:`causal_mask`), query ``n`` sees
    key ``m`` when ``p - left <= m <= p + right``: both extents inclusive, as FlashAttention's
    ``window_size=(left, right)``, where ``None`` (FlashAttention's ``-1``) means unbounded on that side. An
    integer ``window=w`` is short for ``left=w - 1, right=0``: the last ``w`` keys, the aligned one included.
    (Mistral 7B's window, keys ``i - W`` to ``i`` with ``W = 4096``, arXiv 2310.06825 section 2, is
    ``left=W, right=0``: ``W + 1`` keys.) ``left=None, right=0`` is the plain causal mask.

    Args:
        N: number of queries (``>= 0``). M: number of keys (``>= 0``).
        window: keys each query sees, its aligned key included (``>= 1``); give either this or ``left``/``right``.
        left, right: the extents (``>= 0``, or None for unbounded on that side; at least one is needed).
        align: ``"bottom-right"`` (default) or ``"top-left"``, see :func:`causal_mask`.

    Returns:
        Boolean array ``(N, M)``, True = attend.

    Raises:
        TypeError: a size or extent is not an integer (a bool is not). ValueError: a negative size or extent,
        ``window < 1``, both ``window`` and an extent, neither, or an unknown ``align``.
    """
    N, M = size(N, "N"), size(M, "M")
    if window is not None:
        if left is not None or right is not None:
            raise ValueError("give either window or left/right, not both")
        window = size(window, "window", 1, why=" (each query sees at least its own key)")
        left, right = window - 1, 0
    elif left is None and right is None:
        raise ValueError("give window (the last keys each query sees) or the extents left and right")
    else:
        left = None if left is None else size(left, "left")
        right = None if right is None else size(right, "right")
    offset = _offset(N, M, align)
    p = np.arange(N)[:, None] + offset  # (N, 1): the key aligned with each query
    m = np.arange(M)[None, :]  # (1, M)
    keep = np.ones((N, M), dtype=bool)
    if left is not None:
        keep &= m >= p - left
    if right is not None:
        keep &= m <= p + right
    return keep  # (N, M)


def padding_mask(lengths: ArrayLike, M: int) -> np.ndarray:
    """Key-padding mask for a batch of sequences padded to ``M`` keys: sequence ``b`` has ``lengths[b]`` real keys.

    Args:
        lengths: 1-D integer array ``(B,)`` with ``0 <= lengths[b] <= M`` (empty: ``B = 0``).
        M: the padded number of keys.

    Returns:
        Boolean array ``(B, 1, 1, M)``: ``mask[b, 0, 0, m] = m < lengths[b]``. It broadcasts against scores
        ``(B, H, N, M)`` (batch, heads, queries, keys) as returned; for inputs without a heads axis,
        ``(B, N, D)``, use ``mask[:, 0]`` (shape ``(B, 1, M)``).

    Raises:
        TypeError: ``lengths`` is not integers (bools are not), or ``M`` is not an integer. ValueError:
        ``lengths`` is not 1-D or a length is outside ``[0, M]``.
    """
    M = size(M, "M")
    lengths = np.asarray(lengths)
    if lengths.size == 0 and lengths.dtype.kind == "f":  # an empty list is a batch of no sequences
        lengths = lengths.astype(np.intp)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"lengths must be integers, got dtype {lengths.dtype}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be a 1-D array (B,), got shape {lengths.shape}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > M):
        raise ValueError(f"every length must lie in [0, M] = [0, {M}], got {lengths.tolist()}")
    m = np.arange(M)  # (M,)
    return (m[None, :] < lengths[:, None])[:, None, None, :]  # (B, M) -> (B, 1, 1, M)
