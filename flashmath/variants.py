"""Attention variants (chapter 13): one tiled loop, many attentions.

Every variant here changes either *one element-wise line* of the tile step or *which tiles are visited*; the
loops of :mod:`flashmath.flash` are unchanged. A :class:`Variant` is attached to the checked inputs
(:class:`flashmath.inputs.AttentionInputs`, field ``variant``) and read by :mod:`flashmath.tiling` in two places:

* :meth:`Variant.tile_keep` classifies a tile as *empty* (skipped: neither loaded nor computed), *full* (no mask
  work) or *partial* (a boolean keep mask for that tile alone). Causal and sliding-window masks are classified from
  the tile's corners, without looking at a single element; a ``mask_mod`` or a document mask is evaluated on the
  tile's index arrays at once (numpy broadcasting). No ``(N, M)`` array is ever built.
* :meth:`Variant.scores` changes the scaled scores of a tile, element-wise, before the mask selects them away:
  softcapping, the ALiBi bias, a ``score_mod``.

The conventions and their sources (each checked against the source):

* Sliding window ``window=(left, right)``: FlashAttention's ``window_size``: "query at position i will only attend
  to keys between [i + seqlen_k - seqlen_q - window_size[0], i + seqlen_k - seqlen_q + window_size[1]] inclusive"
  (flash-attn, ``flash_attn_interface.py``, docstring of ``flash_attn_func``), i.e. bottom-right aligned when
  ``N != M``, as the causal mask (:mod:`flashmath.masks`). FlashAttention writes an unbounded side as ``-1``; here
  ``None`` (``-1`` is accepted too). An integer ``w`` is the last ``w`` keys: ``(w - 1, 0)``
  (Mistral 7B's ``i - W .. i``, arXiv 2310.06825 section 2, is ``(W, 0)``).
  With ``causal=True`` the right extent is at most 0.
* ``softcap=c``: ``x -> c tanh(x / c)`` on the *scaled* score (flash-attn's reference ``attention_ref``:
  ``scores = q k^T / sqrt(d)``, then ``scores = tanh(scores / softcap) * softcap``; Gemma 2). Applied before ALiBi
  and before any mask.
* ``alibi_slopes`` ``(H,)`` or ``(B, H)``: "a bias of ``(-alibi_slope * |i + seqlen_k - seqlen_q - j|)`` is added to
  the attention score of query i and key j" (flash-attn, ``flash_attn_func``): the distance to the bottom-right
  aligned key, on the scaled (and softcapped) score. O. Press et al., "Train Short, Test Long" (ALiBi, 2022).
* ``score_mod(score, b, h, q_idx, kv_idx) -> score`` and ``mask_mod(b, h, q_idx, kv_idx) -> bool``: FlexAttention's
  signatures (``torch.nn.attention.flex_attention``); the score given to ``score_mod`` is the scaled one, after
  softcap and ALiBi. Here they receive *arrays*: ``b``, ``h`` of shape ``(..., 1, 1)`` (the batch and *query* head
  index of each leading element), ``q_idx`` ``(B_r, 1)`` and ``kv_idx`` ``(1, B_c)``, so one call covers a whole
  tile by broadcasting; write them with numpy operations (``&``, ``np.where``), not Python ``and``/``if``.
  Leading dimensions ``(..., B, H)``: ``h`` indexes the last one, ``b`` the one before (0 where absent).
* ``enable_gqa``: PyTorch SDPA's (``torch.nn.functional.scaled_dot_product_attention``): ``k``, ``v`` have
  ``H_kv`` heads, ``H = G H_kv``, and query head ``h`` reads kv head ``h // G`` (SDPA's ``repeat_interleave``). Here
  nothing is repeated: ``q`` is viewed as ``(..., H_kv, G, N, D)`` and ``k`` as ``(..., H_kv, 1, M, D)``, and
  broadcasting does the rest.
* Documents (:func:`document_ids`, packed sequences): query ``n`` sees key ``m`` only in the same document, and
  causal, window and ALiBi use positions *inside* the document, bottom-right aligned per document as
  FlashAttention's varlen functions (``flash_attn_varlen_func``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import integer
from flashmath.i18n import gettext as _
from flashmath.inputs import AttentionInputs, check_sink, prepare_attention_inputs

__all__ = [
    "MASK_KINDS",
    "BlockMask",
    "GroupedHeads",
    "MaskExample",
    "Variant",
    "alibi_slopes_for",
    "block_mask",
    "check_window",
    "document_ids",
    "document_mask_mod",
    "group_heads",
    "grouped_sink",
    "make_variant",
    "mask_example",
    "packed_documents",
    "prefix_lm_mask_mod",
    "streaming_mask_mod",
    "strided_mask_mod",
    "variant_inputs",
]

Window = tuple[int | None, int | None]
MaskMod = Callable[..., Any]
ScoreMod = Callable[..., Any]

EMPTY, PARTIAL, FULL = 0, 1, 2
"""The three kinds of tile in a :class:`BlockMask`."""


def check_window(window: object) -> Window | None:
    """``(left, right)`` from ``window``: None, an integer ``w >= 1`` (``(w - 1, 0)``), or a pair of extents, each
    ``>= 0``, or None / ``-1`` for unbounded. TypeError for another type, ValueError for a bad extent."""
    if window is None:
        return None
    if isinstance(window, (int, np.integer)) and not isinstance(window, (bool, np.bool_)):
        w = int(window)
        if w < 1:
            raise ValueError(f"window = {w}: an integer window is the number of keys a query sees (>= 1)")
        return (w - 1, 0)
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window must be None, an integer or a pair (left, right), got {window!r}")
    extents: list[int | None] = []
    for value, name in zip(window, ("left", "right"), strict=True):
        if value is None:
            extents.append(None)
            continue
        value = integer(value, f"window's {name} extent", "an integer >= 0, or None (-1) for unbounded")
        if value < -1:
            raise ValueError(f"window's {name} extent must be >= 0 (or None / -1 for unbounded), got {value}")
        extents.append(None if value == -1 else value)
    return extents[0], extents[1]


def document_ids(cu_seqlens: ArrayLike, name: str = "cu_seqlens") -> np.ndarray:
    """The document of every token of a packed batch: ``(total,)`` int from cumulative lengths ``(S + 1,)``
    (``cu_seqlens[0] = 0``, non-decreasing; FlashAttention's varlen layout). ValueError / TypeError otherwise."""
    cu = np.asarray(cu_seqlens)
    if cu.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers (cumulative sequence lengths), got dtype {cu.dtype}")
    if cu.ndim != 1 or cu.size < 1 or cu[0] != 0 or np.any(np.diff(cu) < 0):
        raise ValueError(f"{name} must be 1-D, start at 0 and never decrease (cumulative lengths), got {cu.tolist()}")
    return np.repeat(np.arange(cu.size - 1), np.diff(cu))


def document_mask_mod(doc_q: ArrayLike, doc_k: ArrayLike | None = None) -> MaskMod:
    """A ``mask_mod`` keeping pairs in the same document: ``doc_q[q_idx] == doc_k[kv_idx]`` (``doc_k`` defaults
    to ``doc_q``). ``doc_q``, ``doc_k``: ``(N,)``, ``(M,)`` integer document ids, e.g. from :func:`document_ids`."""
    dq = np.asarray(doc_q)
    dk = dq if doc_k is None else np.asarray(doc_k)

    def mask_mod(b: Any, h: Any, q_idx: np.ndarray, kv_idx: np.ndarray) -> np.ndarray:
        return dq[q_idx] == dk[kv_idx]

    return mask_mod


def prefix_lm_mask_mod(prefix: int) -> MaskMod:
    """A ``mask_mod`` for prefix-LM attention (N = M): every query sees the first ``prefix`` keys (bidirectional),
    and the keys up to its own position (causal)."""
    prefix = integer(prefix, "prefix")

    def mask_mod(b: Any, h: Any, q_idx: np.ndarray, kv_idx: np.ndarray) -> np.ndarray:
        return (kv_idx < prefix) | (kv_idx <= q_idx)

    return mask_mod


def streaming_mask_mod(sink_tokens: int, window: int) -> MaskMod:
    """A ``mask_mod`` for StreamingLLM's attention (N = M): every query sees the first ``sink_tokens`` keys (the
    *sink tokens*) and the last ``window`` keys up to its own position, causal throughout: ``kv_idx <= q_idx`` and
    (``kv_idx < sink_tokens`` or ``q_idx - kv_idx < window``). An *or* of two masks, which a window's band (an
    *and*) cannot say: a ``mask_mod`` can.

    Source: G. Xiao et al., "Efficient Streaming Language Models with Attention Sinks" (2023, arXiv:2309.17453);
    its reference code keeps the first ``start_size = 4`` tokens and the last ``recent_size`` of the KV cache
    (``mit-han-lab/streaming-llm``, ``streaming_llm/kv_cache.py``, ``StartRecentKVCache``). Not to be confused
    with a *learnable* sink (``learnable_sink``, GPT-OSS), a logit with no key and no value, which is no mask.

    Raises:
        TypeError: not integers. ValueError: ``sink_tokens < 0`` or ``window < 1``.
    """
    sink_tokens, window = integer(sink_tokens, "sink_tokens"), integer(window, "window")
    if sink_tokens < 0 or window < 1:
        raise ValueError(f"sink_tokens must be >= 0 and window >= 1, got {sink_tokens} and {window}")

    def mask_mod(b: Any, h: Any, q_idx: np.ndarray, kv_idx: np.ndarray) -> np.ndarray:
        # causal, and (a sink token or one of the last `window` keys)
        return (kv_idx <= q_idx) & ((kv_idx < sink_tokens) | (q_idx - kv_idx < window))

    return mask_mod


def alibi_slopes_for(H: int) -> np.ndarray:
    """ALiBi's geometric slopes for ``H`` heads, ``(H,)`` float64: ``2^(-8 (h + 1) / H)`` for a power of two, and for
    other ``H`` the closest power of two below followed by every other slope of the next one (Press et al. 2022,
    section 3 and its reference code)."""
    H = integer(H, "H")
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    p = 2 ** int(np.floor(np.log2(H)))
    slopes = power_of_two(p)
    if p < H:
        slopes += power_of_two(2 * p)[0::2][: H - p]
    return np.array(slopes)


@dataclass(frozen=True)
class GroupedHeads:
    """``q``, ``k``, ``v``, ``mask`` as the loop sees them, and how to give the output its heads back.

    Attributes:
        q, k, v, mask: with ``enable_gqa``, ``q (..., H_kv, G, N, D)``, ``k (..., H_kv, 1, M, D)``, ``v`` likewise,
            ``mask`` with its head axis split the same way; otherwise the arguments unchanged.
        groups: ``G`` (query heads per kv head), or None without ``enable_gqa``.
    """

    q: Any
    k: Any
    v: Any
    mask: Any
    groups: int | None

    def restore(self, result: Any) -> Any:
        """The loop's output ``(..., H_kv, G, N, Dv)`` (and lse ``(..., H_kv, G, N)``) as ``(..., H, N, Dv)``."""
        if self.groups is None:
            return result
        if isinstance(result, tuple):
            a, lse = result
            # (..., H_kv, G, N) -> (..., H_kv G, N); explicit sizes, never -1: any of them may be 0
            return self.restore(a), lse.reshape(lse.shape[:-3] + (lse.shape[-3] * lse.shape[-2],) + lse.shape[-1:])
        # (..., H_kv, G, N, Dv) -> (..., H_kv G, N, Dv)
        return result.reshape(result.shape[:-4] + (result.shape[-4] * result.shape[-3],) + result.shape[-2:])

    def original_batch(self, batch_shape: tuple) -> tuple:
        """The leading dimensions ``(..., H)`` of the original ``q`` from the loop's ``(..., H_kv, G)``."""
        if self.groups is None:
            return batch_shape
        return batch_shape[:-2] + (batch_shape[-2] * batch_shape[-1],)


def group_heads(q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None, enable_gqa: bool) -> GroupedHeads:
    """Grouped-query heads as PyTorch SDPA's ``enable_gqa``: query head ``h`` reads kv head ``h // G``.

    Raises:
        TypeError: ``enable_gqa`` not a bool. ValueError: fewer than 3 dimensions, or ``H`` not a multiple of
        ``H_kv`` (or ``k``, ``v`` with different head counts).
    """
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise TypeError(f"enable_gqa must be True or False, got {enable_gqa!r}")
    if not enable_gqa:
        return GroupedHeads(q, k, v, mask, None)
    qa, ka, va = np.asarray(q), np.asarray(k), np.asarray(v)
    for arr, name in ((qa, "q"), (ka, "k"), (va, "v")):
        if arr.ndim < 3:
            raise ValueError(f"enable_gqa needs a heads axis: {name} must be (..., H, L, D), got shape {arr.shape}")
    H, H_kv = qa.shape[-3], ka.shape[-3]
    if va.shape[-3] != H_kv or H_kv == 0 or H % H_kv:
        raise ValueError(
            f"enable_gqa: the query heads H = {H} must be a multiple of the key/value heads (k has {H_kv}, v has "
            f"{va.shape[-3]}); query head h reads kv head h // (H / H_kv)"
        )
    G = H // H_kv
    qg = qa.reshape(qa.shape[:-3] + (H_kv, G) + qa.shape[-2:])  # (..., H_kv, G, N, D), a view
    kg, vg = ka[..., None, :, :], va[..., None, :, :]  # (..., H_kv, 1, M, D): one kv head for G query heads
    mg: Any = mask
    if mask is not None:
        ma = np.asarray(mask)
        if ma.ndim >= 3 and ma.shape[-3] == H:
            mg = ma.reshape(ma.shape[:-3] + (H_kv, G) + ma.shape[-2:])
        elif ma.ndim >= 3 and ma.shape[-3] == 1:
            mg = ma[..., None, :, :]
        elif ma.ndim >= 3:
            raise ValueError(f"mask of shape {ma.shape}: its head axis must be 1 or H = {H} with enable_gqa")
    return GroupedHeads(qg, kg, vg, mg, G)


def grouped_sink(learnable_sink: ArrayLike | None, heads: GroupedHeads, batch_shape: tuple) -> np.ndarray | None:
    """The learnable sink of every leading element of the loop, float64 of shape ``batch_shape``, or None: checked
    against the leading dimensions ``(..., H)`` of ``q`` (one logit per *query* head,
    :func:`flashmath.inputs.check_sink`) and, with grouped heads, viewed as ``(..., H_kv, G)`` as ``q`` is, so that
    query head ``h`` keeps its own sink. Raises as :func:`flashmath.inputs.check_sink`."""
    sink = check_sink(learnable_sink, heads.original_batch(batch_shape))
    return None if sink is None else sink.reshape(batch_shape)


def _index_arrays(batch_shape: tuple, original: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(b, h)``: each leading element's batch and query-head index, ``batch_shape + (1, 1)``, from the original
    leading dimensions ``(..., B, H)`` (0 where absent)."""
    h = np.zeros(original, np.intp)
    b = np.zeros(original, np.intp)
    if len(original) >= 1:
        h = h + np.arange(original[-1])
    if len(original) >= 2:
        b = b + np.arange(original[-2])[:, None]
    shape = batch_shape + (1, 1)
    return b.reshape(shape), h.reshape(shape)


@dataclass(frozen=True)
class Variant:
    """What changes in the tile loop: the tiles it visits and the element-wise change of the scores.

    Built by :func:`make_variant`; read by :func:`flashmath.tiling.tile_keep` and
    :func:`flashmath.tiling.variant_tile_scores`. Sizes ``N``, ``M`` are those of the loop; ``b``, ``h`` and ``slopes``
    have shape ``batch_shape + (1, 1)``; ``docs`` (packed sequences) holds the document id, start and length of
    every query and key: ``(doc_q, start_q, len_q, doc_k, start_k, len_k)``.
    """

    N: int
    M: int
    causal: bool
    window: Window | None
    softcap: float | None
    slopes: np.ndarray | None
    score_mod: ScoreMod | None
    mask_mod: MaskMod | None
    b: np.ndarray
    h: np.ndarray
    docs: tuple | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        """``(lo, hi)``: a pair is kept when ``lo <= m - p <= hi``, ``p`` the key aligned with the query."""
        lo, hi = -np.inf, np.inf
        if self.window is not None:
            left, right = self.window
            lo = -np.inf if left is None else -left
            hi = np.inf if right is None else right
        if self.causal:
            hi = min(hi, 0)
        return lo, hi

    def relative(self, r0: int, r1: int, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray | None]:
        """``(m - p, same_document)`` for the tile: ``(B_r, B_c)`` int and bool (None without documents)."""
        n = np.arange(r0, r1)[:, None]  # (B_r, 1)
        m = np.arange(c0, c1)[None, :]  # (1, B_c)
        if self.docs is None:
            return m - (n + self.M - self.N), None
        doc_q, start_q, len_q, doc_k, start_k, _ = self.docs
        dq, dk = doc_q[n], doc_k[m]
        # positions inside the document, aligned bottom-right per document: p = n_local + len_k - len_q
        p = n - start_q[dq] + _len_k(self.docs, dq) - len_q[dq]
        return (m - start_k[dk]) - p, dq == dk

    def tile_keep(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray | Literal[False] | None:
        """The tile ``(r0:r1, c0:c1)`` classified: ``False`` empty, ``None`` full, or its keep mask (True = attend),
        ``(B_r, B_c)`` or ``(..., B_r, B_c)`` when ``mask_mod`` uses ``b`` or ``h``."""
        lo, hi = self.bounds
        if lo > hi:
            return False
        keep: Any = None
        if self.docs is None:
            # the tile holds every diagonal m - p from its bottom-left corner to its top-right corner
            offset = self.M - self.N
            rel_min, rel_max = c0 - (r1 - 1) - offset, (c1 - 1) - r0 - offset
            if rel_max < lo or rel_min > hi:
                return False  # no diagonal of the band crosses the tile: skipped, no element looked at
            if rel_min < lo or rel_max > hi:  # the band's edge crosses the tile
                rel, _ = self.relative(r0, r1, c0, c1)
                keep = (rel >= lo) & (rel <= hi)
        else:
            rel, same = self.relative(r0, r1, c0, c1)
            keep = (rel >= lo) & (rel <= hi) & np.asarray(same)
        if self.mask_mod is not None:
            q_idx, kv_idx = np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :]
            mod = np.asarray(self.mask_mod(self.b, self.h, q_idx, kv_idx))
            if mod.dtype != np.bool_:
                raise TypeError(f"mask_mod must return booleans (True = attend), got dtype {mod.dtype}")
            keep = mod if keep is None else keep & mod
        if keep is None:
            return None
        if not keep.any():
            return False
        if keep.all():
            return None
        return keep

    def scores(self, x_tile: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """The tile's scaled scores changed element-wise: softcap, then ALiBi, then ``score_mod``."""
        x = x_tile
        dtype = x_tile.dtype
        if self.softcap is not None:
            # softcap: x -> c tanh(x / c), on the scaled score
            x = self.softcap * np.tanh(x / self.softcap)
        if self.slopes is not None:
            # ALiBi: x -> x - slope |m - p|, p = the key aligned with the query (bottom-right)
            rel, _ = self.relative(r0, r1, c0, c1)
            x = x - self.slopes * np.abs(rel)
        if self.score_mod is not None:
            q_idx, kv_idx = np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :]
            x = self.score_mod(x, self.b, self.h, q_idx, kv_idx)
        x = np.asarray(x, dtype=dtype)
        if x.shape != np.broadcast_shapes(x.shape, x_tile.shape) or not x.flags.writeable:
            x = np.broadcast_to(x, np.broadcast_shapes(x.shape, x_tile.shape)).copy()
        return x


def _len_k(docs: tuple, d: np.ndarray) -> np.ndarray:
    return docs[5][d]


def make_variant(
    N: int,
    M: int,
    batch_shape: tuple,
    *,
    groups: GroupedHeads | None = None,
    causal: bool = False,
    window: object = None,
    softcap: object = None,
    alibi_slopes: ArrayLike | None = None,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    docs: tuple | None = None,
) -> Variant:
    """A checked :class:`Variant` for a loop of ``N`` queries, ``M`` keys and leading dimensions ``batch_shape``.

    Raises:
        TypeError: a window of the wrong type, a softcap that is not a real number, a score_mod or mask_mod that is
        not callable, slopes that are not real numbers. ValueError: a bad window extent, a softcap that is not
        finite and > 0, slopes that do not broadcast to the leading dimensions ``(..., B, H)``.
    """
    win = check_window(window)
    cap: float | None = None
    if softcap is not None:
        value = np.asarray(softcap, dtype=object if isinstance(softcap, str) else None)
        if isinstance(softcap, (bool, np.bool_)) or value.ndim != 0 or value.dtype.kind not in "iuf":
            raise TypeError(f"softcap must be a real number > 0 (or None), got {softcap!r}")
        cap = float(value)
        if not (np.isfinite(cap) and cap > 0):
            raise ValueError(f"softcap must be finite and > 0 (c in c tanh(x / c)), got {cap}")
    for fn, name in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a function (FlexAttention's signature) or None, got {fn!r}")
    original = batch_shape if groups is None else groups.original_batch(batch_shape)
    b, h = _index_arrays(batch_shape, original)
    slopes = None
    if alibi_slopes is not None:
        s = np.asarray(alibi_slopes)
        if s.dtype.kind not in "iuf":
            raise TypeError(f"alibi_slopes must be real numbers, got dtype {s.dtype}")
        while s.ndim > len(original) and s.shape[0] == 1:  # (1,) for inputs without a heads axis
            s = s[0]
        try:
            full = np.broadcast_to(s.astype(np.float64), original)
        except ValueError:
            raise ValueError(
                f"alibi_slopes of shape {s.shape} must be (H,) or (B, H) for leading dimensions (..., B, H) = "
                f"{original}"
            ) from None
        slopes = full.reshape(batch_shape + (1, 1))
    return Variant(N, M, bool(causal), win, cap, slopes, score_mod, mask_mod, b, h, docs)


def variant_inputs(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None,
    causal: bool,
    mask: ArrayLike | None,
    enable_gqa: bool = False,
    window: object = None,
    softcap: object = None,
    alibi_slopes: ArrayLike | None = None,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    learnable_sink: ArrayLike | None = None,
) -> tuple[GroupedHeads, AttentionInputs]:
    """The checked inputs of a tiled loop (:func:`flashmath.flash.flash_attention`'s arguments), with the variant
    these arguments ask for attached (``variant`` None when they ask for none), and the grouped heads whose
    :meth:`GroupedHeads.restore` gives the loop's output the heads of ``q`` back.

    The causal mask is not folded into the keep mask (``fold_causal=False``): the loops classify each tile
    themselves (:func:`flashmath.tiling.tile_keep`). ``learnable_sink``: one logit per *query* head, ``(H,)``,
    checked against the leading dimensions of ``q`` (:func:`flashmath.inputs.check_sink`) and, with grouped heads,
    viewed as ``(..., H_kv, G)`` as ``q`` is (query head ``h`` keeps its own sink); attached as ``inp.sink``.

    Raises:
        as :func:`group_heads`, :func:`flashmath.inputs.prepare_attention_inputs`,
        :func:`flashmath.inputs.check_sink` and :func:`make_variant`, in that order.
    """
    heads = group_heads(q, k, v, mask, enable_gqa)  # grouped-query heads: (..., H_kv, G, N, D), nothing copied
    inp = prepare_attention_inputs(
        heads.q, heads.k, heads.v, scale=scale, causal=causal, mask=heads.mask, fold_causal=False
    )
    inp = inp._replace(sink=grouped_sink(learnable_sink, heads, inp.batch_shape))
    if heads.groups or any(x is not None for x in (window, softcap, alibi_slopes, score_mod, mask_mod)):
        inp = inp._replace(
            variant=make_variant(
                inp.N,
                inp.M,
                inp.batch_shape,
                groups=heads,
                window=window,
                softcap=softcap,
                alibi_slopes=alibi_slopes,
                score_mod=score_mod,
                mask_mod=mask_mod,
            )
        )
    return heads, inp


@dataclass(frozen=True)
class BlockMask:
    """Every tile of an ``N x M`` score grid classified (FlexAttention's block mask, counted).

    Attributes:
        N, M, block_q, block_k: the grid and the tile sizes.
        kinds: ``(T_r, T_c)`` int: 0 empty (skipped), 1 partial (masked element-wise), 2 full (no mask work).
        areas: ``(T_r, T_c)`` int, the number of score elements of each tile.
    """

    N: int
    M: int
    block_q: int
    block_k: int
    kinds: np.ndarray
    areas: np.ndarray

    @property
    def counts(self) -> dict[str, int]:
        """``{"empty": ..., "partial": ..., "full": ...}`` tiles."""
        return {
            name: int((self.kinds == kind).sum())
            for name, kind in (("empty", EMPTY), ("partial", PARTIAL), ("full", FULL))
        }

    def counts_text(self) -> str:
        """:attr:`counts` in words, in the selected language (:mod:`flashmath.i18n`): ``"6 empty, 6 partial, 3 full"``
        (Chinese: ``"空块 6、部分块 6、满块 3"``)."""
        return _("{empty} empty, {partial} partial, {full} full").format(**self.counts)

    @property
    def computed_share(self) -> float:
        """The share of the ``N M`` score elements in tiles that are computed (partial or full)."""
        total = self.N * self.M
        return float(self.areas[self.kinds != EMPTY].sum() / total) if total else 0.0

    @property
    def masked_share(self) -> float:
        """The share of the ``N M`` score elements in partial tiles (the only ones with mask work)."""
        total = self.N * self.M
        return float(self.areas[self.kinds == PARTIAL].sum() / total) if total else 0.0


def block_mask(
    N: int,
    M: int,
    *,
    block_q: int = 128,
    block_k: int = 128,
    causal: bool = False,
    window: object = None,
    mask_mod: MaskMod | None = None,
    cu_seqlens_q: ArrayLike | None = None,
    cu_seqlens_k: ArrayLike | None = None,
    B: int = 1,
    H: int = 1,
) -> BlockMask:
    """Classify every tile of the ``N x M`` grid as empty, partial or full (FlexAttention's ``create_block_mask``).

    Causal and window masks are classified from each tile's corners (no element looked at); a ``mask_mod`` or
    documents (``cu_seqlens_q`` / ``cu_seqlens_k``, packed sequences) are evaluated one tile at a time, so memory
    stays at one tile, never ``N x M``. A tile counts as empty only when empty for every one of the ``B x H``
    (batch, head) elements. The default tiles, 128 x 128, are FlexAttention's ``BLOCK_SIZE``.

    Raises:
        TypeError / ValueError: as :func:`make_variant`, sizes that are not integers >= 0, blocks < 1.
        ValueError: ``cu_seqlens_k`` without ``cu_seqlens_q``; ``cu_seqlens`` as :func:`packed_documents`.
    """
    N, M = integer(N, "N"), integer(M, "M")
    B, H = integer(B, "B"), integer(H, "H")
    block_q, block_k = integer(block_q, "block_q"), integer(block_k, "block_k")
    if min(N, M, B, H) < 0 or min(block_q, block_k) < 1:
        raise ValueError(f"sizes must be >= 0 and blocks >= 1, got N={N}, M={M}, block_q={block_q}, block_k={block_k}")
    if cu_seqlens_k is not None and cu_seqlens_q is None:
        raise ValueError(
            "block_mask: cu_seqlens_k was given without cu_seqlens_q; pass cu_seqlens_q too (the "
            "queries' cumulative lengths; cu_seqlens_k alone would leave the queries without documents)"
        )
    docs = packed_documents(cu_seqlens_q, cu_seqlens_k, N, M) if cu_seqlens_q is not None else None
    variant = make_variant(N, M, (B, H), causal=causal, window=window, mask_mod=mask_mod, docs=docs)
    rows = [(r, min(r + block_q, N)) for r in range(0, N, block_q)]
    cols = [(c, min(c + block_k, M)) for c in range(0, M, block_k)]
    kinds = np.zeros((len(rows), len(cols)), np.int8)
    areas = np.zeros((len(rows), len(cols)), np.int64)
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(cols):
            keep = variant.tile_keep(r0, r1, c0, c1)
            kinds[i, j] = EMPTY if keep is False else FULL if keep is None else PARTIAL
            areas[i, j] = (r1 - r0) * (c1 - c0)
    return BlockMask(N, M, block_q, block_k, kinds, areas)


def packed_documents(cu_seqlens_q: ArrayLike, cu_seqlens_k: ArrayLike | None, N: int, M: int) -> tuple:
    """``(doc_q, start_q, len_q, doc_k, start_k, len_k)`` for packed sequences; ``cu_seqlens_k`` defaults to
    ``cu_seqlens_q``. ValueError when the totals are not ``N`` and ``M`` or the numbers of sequences differ."""
    cu_k_given: ArrayLike = cu_seqlens_q if cu_seqlens_k is None else cu_seqlens_k
    doc_q, doc_k = document_ids(cu_seqlens_q, "cu_seqlens_q"), document_ids(cu_k_given, "cu_seqlens_k")
    cu_q, cu_k = np.asarray(cu_seqlens_q).astype(np.intp), np.asarray(cu_k_given).astype(np.intp)
    if cu_q.size != cu_k.size:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must describe the same number of sequences, got "
            f"{cu_q.size - 1} and {cu_k.size - 1}"
        )
    if cu_q[-1] != N or cu_k[-1] != M:
        raise ValueError(
            f"the packed lengths must add up to the totals: cu_seqlens_q ends at {cu_q[-1]} for "
            f"{N} queries, cu_seqlens_k at {cu_k[-1]} for {M} keys"
        )
    return doc_q, cu_q[:-1], np.diff(cu_q), doc_k, cu_k[:-1], np.diff(cu_k)


MASK_KINDS = (
    "causal",
    "window",
    "sink tokens + window",
    "document",
    "prefix-LM",
    "ALiBi",
    "softcap",
    "learnable sink",
    "custom",
)
"""The kinds :func:`mask_example` knows (the mask explorer's choices)."""

STREAMING_SINK_TOKENS = 4
"""The sink tokens of the mask explorer's ``"sink tokens + window"``: StreamingLLM's default ``start_size``."""


def strided_mask_mod(stride: int) -> MaskMod:
    """A ``mask_mod`` for a custom example: causal, and only every ``stride``-th key beyond the last ``stride``
    (a dilated, "strided" sparse pattern)."""
    stride = integer(stride, "stride")

    def mask_mod(b: Any, h: Any, q_idx: np.ndarray, kv_idx: np.ndarray) -> np.ndarray:
        return (kv_idx <= q_idx) & ((q_idx - kv_idx < stride) | (kv_idx % stride == 0))

    return mask_mod


@dataclass(frozen=True)
class MaskExample:
    """One mask explorer state: what each score becomes, and the tiles it visits.

    Attributes:
        kind, param, block: the choice (``param``: window size, documents, prefix, ALiBi slope exponent, softcap,
            learnable sink, custom stride). keep: ``(N, N)`` bool, True = attend. change: ``(N, N)`` float, the
            element-wise change of the scores (ALiBi's bias ``-slope |n - m|``; softcap's ``c tanh(x / c) - x`` on
            sample scores; a learnable sink's ``log(1 - P_sink,n)``, on the log-probabilities), zero elsewhere.
            blocks: the :class:`BlockMask`. note: one line saying what the mask is.
    """

    kind: str
    param: int
    block: int
    keep: np.ndarray
    change: np.ndarray
    blocks: BlockMask
    note: str


def mask_example(kind: str, param: int, block: int, *, N: int = 64, mask_mod: MaskMod | None = None) -> MaskExample:
    """The keep grid, score change and block mask of one kind of mask on an ``N x N`` grid (causal throughout,
    except ``"window"``, a causal sliding window of the last ``param`` keys, ``"sink tokens + window"``, the same
    window plus StreamingLLM's first :data:`STREAMING_SINK_TOKENS` keys (:func:`streaming_mask_mod`), and
    ``"prefix-LM"``).

    ``"learnable sink"`` is not a mask: a sink logit has no key and no value, so it keeps the causal mask's scores
    and tiles; its change is drawn on the probabilities instead: every kept probability of row ``n`` is multiplied
    by ``1 - P_sink,n = 1 / (1 + exp(sink - L_n))`` (``L_n`` the row's logsumexp without the sink, on sample
    scores), and ``change`` holds its log, the same along the row.

    Args:
        kind: one of :data:`MASK_KINDS`. param: its parameter (``>= 1``): the window's keys (also with sink
            tokens), the number of equal documents, the prefix length, ALiBi's slope ``2^-param``, the softcap
            ``c = param / 4``, the learnable sink's logit ``param / 4``, or the custom mask's argument. block: the
            tile size (square tiles). N: the grid. mask_mod: for ``"custom"``, a function
            ``param -> mask_mod`` (default :func:`strided_mask_mod`).

    Raises:
        ValueError: an unknown kind, ``param`` or ``block`` below 1. TypeError: not integers.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    param, block, N = integer(param, "param"), integer(block, "block"), integer(N, "N")
    if param < 1 or block < 1 or N < 1:
        raise ValueError(f"param, block and N must be >= 1, got {param}, {block}, {N}")
    n, m = np.arange(N)[:, None], np.arange(N)[None, :]
    change = np.zeros((N, N))
    causal, window, mod, cu = True, None, None, None
    if kind == "causal":
        note = _("causal: query n sees keys m <= n (param unused)")
    elif kind == "window":
        causal, window = False, param
        note = _("sliding window: the last {param} keys (window=({before}, 0))").format(param=param, before=param - 1)
    elif kind == "sink tokens + window":
        causal, mod = False, streaming_mask_mod(STREAMING_SINK_TOKENS, param)
        note = _("StreamingLLM: the first {sinks} keys (sink tokens) and the last {param} keys").format(
            sinks=STREAMING_SINK_TOKENS, param=param
        )
    elif kind == "document":
        cu = np.linspace(0, N, min(param, N) + 1).astype(np.intp)
        note = _("{documents} documents packed, causal inside each").format(documents=len(cu) - 1)
    elif kind == "prefix-LM":
        causal, mod = False, prefix_lm_mask_mod(param)
        note = _("prefix-LM: the first {param} keys seen by every query, causal after").format(param=param)
    elif kind == "ALiBi":
        change = -(2.0**-param) * np.abs(n - m)
        note = _(
            "ALiBi: bias -mu |n - m| on the causal scores, slope mu = 2^-{param} = {slope:.3g} (same tiles as causal)"
        ).format(param=param, slope=2.0**-param)
    elif kind == "softcap":
        cap = param / 4
        x = np.random.default_rng(0).standard_normal((N, N)) * 3  # sample scaled scores
        change = cap * np.tanh(x / cap) - x
        note = _("softcap c = {cap:g}: c tanh(x / c) - x on sample scores (same tiles as causal)").format(cap=cap)
    elif kind == "learnable sink":
        sink = param / 4
        x = np.where(m <= n, np.random.default_rng(0).standard_normal((N, N)), -np.inf)  # sample causal scores
        row_lse = np.logaddexp.reduce(x, axis=1, keepdims=True)  # (N, 1), L_n without the sink
        # every kept probability of row n times 1 - P_sink,n = 1 / (1 + exp(sink - L_n)): its log, the same all along
        change = np.broadcast_to(-np.logaddexp(0.0, sink - row_lse), (N, N))
        note = _("learnable sink {sink:g} on causal scores (not a mask: the same tiles as causal)").format(sink=sink)
    else:
        mod = (mask_mod or strided_mask_mod)(param)
        if mask_mod is None:  # the default custom mask: its parameter is the stride
            note = _("custom mask_mod (stride = {param})").format(param=param)
        else:
            note = _("custom mask_mod (param = {param})").format(param=param)
    blocks = block_mask(N, N, block_q=block, block_k=block, causal=causal, window=window, mask_mod=mod, cu_seqlens_q=cu)
    docs = packed_documents(cu, cu, N, N) if cu is not None else None
    keep = make_variant(N, N, (), causal=causal, window=window, mask_mod=mod, docs=docs).tile_keep(0, N, 0, N)
    keep_grid = np.full((N, N), keep is None) if keep is None or keep is False else np.broadcast_to(keep, (N, N))
    return MaskExample(kind, param, block, np.array(keep_grid), np.where(keep_grid, change, 0.0), blocks, note)
