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

from flashmath._checks import integer

__all__ = ["causal_mask", "sliding_window_mask", "padding_mask"]

_ALIGNMENTS = ("bottom-right", "top-left")


def _size(value, name: str) -> int:
    size = integer(value, name)
    if size < 0:
        raise ValueError(f"{name} must be >= 0, got {size}")
    return size


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
    N, M = _size(N, "N"), _size(M, "M")
    offset = _offset(N, M, align)
    n = np.arange(N)[:, None]  # (N, 1)
    m = np.arange(M)[None, :]  # (1, M)
    return m <= n + offset  # (N, M)


def sliding_window_mask(N: int, M: int, window: int, *, align: str = "bottom-right") -> np.ndarray:
    """Causal sliding-window (local) mask: query ``n`` sees its last ``window`` keys.

    Query ``n`` sees key ``m`` when ``n + offset - window < m <= n + offset``, with ``offset`` as in
    :func:`causal_mask`. ``window >= N + offset`` (``>= M`` bottom-right, ``>= N`` top-left) gives the plain causal
    mask. In FlashAttention's ``window_size=(left, right)`` terms this is ``(window - 1, 0)``; it is the window of
    Mistral-style local attention.

    Args:
        N: number of queries (``>= 0``).
        M: number of keys (``>= 0``).
        window: number of keys each query sees, its own diagonal key included (``>= 1``).
        align: ``"bottom-right"`` (default) or ``"top-left"``, see :func:`causal_mask`.

    Returns:
        Boolean array ``(N, M)``, True = attend.

    Raises:
        TypeError: a size is not an integer (a bool is not). ValueError: a negative size, ``window < 1`` or an
        unknown ``align``.
    """
    N, M = _size(N, "N"), _size(M, "M")
    window = _size(window, "window")
    if window < 1:
        raise ValueError(f"window must be >= 1 (each query sees at least its own key), got {window}")
    offset = _offset(N, M, align)
    n = np.arange(N)[:, None]  # (N, 1)
    m = np.arange(M)[None, :]  # (1, M)
    return (m <= n + offset) & (m > n + offset - window)  # (N, M)


def padding_mask(lengths, M: int) -> np.ndarray:
    """Key-padding mask for a batch of sequences padded to ``M`` keys: sequence ``b`` has ``lengths[b]`` real keys.

    Args:
        lengths: 1-D integer array ``(B,)`` with ``0 <= lengths[b] <= M`` (empty: ``B = 0``).
        M: the padded number of keys.

    Returns:
        Boolean array ``(B, 1, M)``: ``mask[b, 0, m] = m < lengths[b]``. It broadcasts against scores
        ``(B, N, M)``; for scores ``(B, H, N, M)`` use ``mask[:, None]`` (shape ``(B, 1, 1, M)``).

    Raises:
        TypeError: ``lengths`` is not integers (bools are not), or ``M`` is not an integer. ValueError:
        ``lengths`` is not 1-D or a length is outside ``[0, M]``.
    """
    M = _size(M, "M")
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
    return (m[None, :] < lengths[:, None])[:, None, :]  # (B, M) -> (B, 1, M)
