"""Attention inputs: the checks every attention function runs, and the conventions they all keep.

:func:`prepare_attention_inputs` checks ``q``, ``k``, ``v``, ``scale``, ``causal`` and ``mask`` once and returns
them as :class:`AttentionInputs`: float arrays, the scale as a Python float, one boolean ``keep`` mask (True =
attend) combining ``mask`` and ``causal``, and the sizes. :func:`compute_operands` then folds the scale into ``Q``
and casts to the compute dtype. Every algorithm of the package (reference, loops, tiles, split-KV, backward,
kernel wrapper) starts here, so an argument is checked, and a message worded, in one place.

Conventions kept by every attention function of the package (this docstring is their one home):

* Shapes ``q (..., N, D)``, ``k (..., M, D)``, ``v (..., M, Dv)``, output ``(..., N, Dv)``, logsumexp
  ``(..., N)``; the leading (batch, head) dimensions of ``q``, ``k`` and ``v`` broadcast together and set the
  output's. A ``mask`` broadcasts against the scores ``(..., N, M)`` but never widens the output: a mask whose
  leading dimensions go beyond the inputs' is refused (ValueError), except axes of size 1, which are dropped.
* ``scale=None`` means ``1 / sqrt(D)``. ``mask`` is boolean, True = attend, broadcastable to ``(..., N, M)``;
  ``causal=True`` is the bottom-right aligned mask of :func:`flashmath.masks.causal_mask` (query ``n`` sees
  keys ``m <= n + M - N``), and is combined with ``mask`` by logical and.
* A row with no key to attend to (fully masked, or ``M == 0``) outputs 0 and has logsumexp ``-inf`` (natural
  log of 0). A row with a ``+inf`` score has logsumexp ``+inf`` and a NaN output (``inf / inf``).
* A masked key is absent: the output equals attention with that key removed, whatever its ``k`` and ``v`` rows
  hold (NaN or inf included), in every numpy function, variant, tile size and loop order. Masked scores and their
  value terms are selected away (``np.where``), never multiplied by 0, since ``0 * NaN`` is NaN. One exception, in
  the Triton kernels (:mod:`flashmath.triton_kernel`, :mod:`flashmath.triton_backward`), as in FlashAttention's: a
  key that some rows of a query tile attend and others mask (a general mask, the causal diagonal, a window's edge)
  enters the tile's ``P V`` product (``tl.dot``) with weight 0 for the rows that mask it, and ``0 x NaN`` is NaN, so
  a NaN or inf in its ``v`` row makes those rows NaN (its ``k`` row stays absent in the forward, whose score is
  selected away, but enters the backward's ``dX K`` with weight 0: a NaN there makes those rows' ``dQ`` NaN, as a
  NaN in the ``q`` or ``dA`` row of a query does the ``dK`` or ``dV`` of the keys it masks in each key tile where it
  attends some key, through ``dX^T Q`` and ``Y^T dA``; in the other key tiles its rows are not read). A key that
  every row of the tile masks (key padding, the keys past a causal or window tile, the keys past ``M``) is
  not even loaded, and is absent in the kernels too (FlashAttention-2 does the same only for the tiles it skips
  and the keys past ``seqlen_k``, whose rows of ``V`` it fills with zeros; FlashAttention-3 and -4 load whole
  tiles by TMA, so a NaN in a padding slot of ``V`` reaches their output: flash-attention issues #1745 and #2374).
  Finite values are exact either way.
  NaN in a row of ``q`` or in an attended row of ``k`` or ``v`` makes the output rows that see it NaN; nothing is
  ever silently turned into 0 except what is masked.
* A learnable sink (``learnable_sink``, chapter 13; flash-attention's name, GPT-OSS's per-head ``sinks``) is one
  more score per row, the same logit for every row of a head, with no value: the softmax of the row and the
  sink column together, the sink column dropped before ``P V``. So a row's state starts at ``(g, s, A) = (sink,
  1, 0)`` instead of ``(-inf, 0, 0)``, and the logsumexp returned *includes* the sink term (as flash-attention's:
  ``flash_attn/cute/testing.py``, ``attention_ref``, "LSE with sink"). A row with no key then outputs 0 with
  logsumexp = the sink logit (flash-attention's ``_flash_attn_fwd`` fills ``lse`` with ``learnable_sink`` when
  ``seqlen_k == 0``); a sink of ``-inf`` is no sink (bitwise the same result as None). Every row sees its sink, so
  a NaN sink makes every row of its head NaN (output and logsumexp, rows with no key included) and a ``+inf`` sink
  acts as a ``+inf`` score (NaN output, logsumexp ``+inf``).
* dtypes: ``q``, ``k``, ``v`` must be floating point (integers are refused: convert them first).
  :func:`flashmath.attention.attention` computes in float64 and returns float64. The variants compute in
  ``compute_dtype`` of the promoted input dtype (float32 for float16, else the dtype itself), return the output in
  the promoted input dtype (float16 in, float16 out, like FlashAttention) and the logsumexp in the compute dtype.
* Errors: :class:`flashmath.softmax.NonFloatInputError` (a ValueError and a TypeError) for ``q``, ``k``, ``v`` that
  are not floating point; ``TypeError`` for a non-boolean mask, a non-bool ``causal``, a non-numeric ``scale``;
  ``ValueError`` for wrong shapes (fewer than 2 dimensions, ``D`` of ``q`` and ``k`` differing, ``k`` and ``v``
  with different ``M``, leading dimensions or a mask that do not broadcast, ``D == 0``) and for a non-finite
  ``scale``. Any finite scale is taken: it is folded into ``Q`` in float64, so a scale beyond
  the compute dtype's range (``1e39`` with float32 inputs) still gives the right answer wherever the scores
  themselves fit. Empty ``N`` gives an empty output, empty ``M`` fully masked rows. Inputs are never modified,
  read-only and non-contiguous arrays included.

Sources: A. Vaswani et al., "Attention Is All You Need" (2017), section 3.2.1 (scaled dot-product attention and
the ``1 / sqrt(D)`` scale); the flash-attn repository (Dao-AILab/flash-attention), README, change log of
version 2.1 (the bottom-right causal alignment).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array, compute_dtype
from flashmath.masks import causal_mask

__all__ = [
    "AttentionInputs",
    "check_causal",
    "check_sink",
    "check_scale",
    "compute_operands",
    "prepare_attention_inputs",
    "require_keys",
]


class AttentionInputs(NamedTuple):
    """Checked attention inputs, as returned by :func:`prepare_attention_inputs`.

    Attributes:
        q, k, v: the inputs as float arrays ``(..., N, D)``, ``(..., M, D)``, ``(..., M, Dv)`` (not copied when
            they already were float arrays: never write to them).
        scale: the score scale as a Python float (``1 / sqrt(D)`` unless given).
        keep: boolean ``(..., N, M)`` (leading dimensions possibly of size 1), True = attend, the combination of
            ``mask`` and ``causal``; ``None`` when every key is attended.
        batch_shape: the broadcast leading dimensions of ``q``, ``k``, ``v`` and ``mask``.
        N, M, D, Dv: the sizes.
        dtype: the promoted dtype of ``q``, ``k``, ``v`` (the variants' output dtype).
        causal: whether the bottom-right causal mask applies. It is already part of ``keep`` unless
            :func:`prepare_attention_inputs` was called with ``fold_causal=False`` (the tiled loops of
            :mod:`flashmath.flash` build it tile by tile instead of as a whole ``(N, M)`` array).
        variant: None, or a :class:`flashmath.variants.Variant` (chapter 13: window, softcap, ALiBi, score_mod,
            mask_mod, documents) that :mod:`flashmath.tiling` consults for each tile.
        sink: None, or the learnable sink logit of every leading (batch, head) element, float64 of shape
            ``batch_shape`` (:func:`check_sink`): the initial row state of the loops (chapter 13).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    keep: np.ndarray | None
    batch_shape: tuple
    N: int
    M: int
    D: int
    Dv: int
    dtype: np.dtype
    causal: bool = False
    variant: Any = None
    sink: np.ndarray | None = None


def prepare_attention_inputs(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    fold_causal: bool = True,
    learnable_sink: ArrayLike | None = None,
) -> AttentionInputs:
    """Check and normalise the arguments of an attention function (see the module docstring for conventions).

    With ``fold_causal=False`` the causal mask is not built into ``keep`` (only recorded in ``causal``), so a
    tiled loop never materialises an ``(N, M)`` array. ``learnable_sink``: checked by :func:`check_sink` against
    the leading dimensions, kept in ``sink``.

    Raises:
        NonFloatInputError: ``q``/``k``/``v`` not floating-point (integers, bools, complex, strings); it is both
            a ValueError and a TypeError.
        TypeError: a non-boolean ``mask``, a ``causal`` that is not a bool, a ``scale`` that is not a real number.
        ValueError: ``q``/``k``/``v`` with fewer than 2 dimensions, ``D`` of ``q`` and ``k`` differing or 0,
            ``k`` and ``v`` with different numbers of keys, leading dimensions or ``mask`` that do not broadcast
            to ``(..., N, M)``, a non-finite ``scale``; and as :func:`check_sink`.
    """
    q, k, v = (as_float_array(a, name, allow_int=False) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    for arr, name, shape in ((q, "q", "(..., N, D)"), (k, "k", "(..., M, D)"), (v, "v", "(..., M, Dv)")):
        if arr.ndim < 2:
            raise ValueError(f"{name} must have shape {shape} with at least 2 dimensions, got shape {arr.shape}")
    N, D = q.shape[-2:]
    M, Dk = k.shape[-2:]
    Mv, Dv = v.shape[-2:]
    if Dk != D:
        raise ValueError(
            f"q and k must have the same head dimension D, got D = {D} for q {q.shape} and {Dk} for k {k.shape}"
        )
    if D == 0:
        raise ValueError(f"the head dimension D must be at least 1, got q of shape {q.shape}")
    if Mv != M:
        raise ValueError(
            f"k and v must have the same number of keys M, got {M} for k {k.shape} and {Mv} for v {v.shape}"
        )
    try:
        batch_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading (batch, head) dimensions of q {q.shape[:-2]}, k {k.shape[:-2]} and v {v.shape[:-2]} "
            "do not broadcast"
        ) from None

    scale = check_scale(scale, D)
    check_causal(causal)
    keep = None
    if mask is not None:
        mask_arr: np.ndarray = np.asarray(mask)
        if mask_arr.dtype != np.bool_:
            raise TypeError(
                f"mask must be a boolean array (True = attend), got dtype {mask_arr.dtype}; "
                "for an additive mask of 0 and -inf use mask = (bias == 0)"
            )
        while mask_arr.ndim > len(batch_shape) + 2 and mask_arr.shape[0] == 1:
            mask_arr = mask_arr[0]  # leading axes of size 1 beyond the inputs' add nothing: dropped (output unchanged)
        target = batch_shape + (N, M)
        try:
            full = np.broadcast_shapes(mask_arr.shape, target)
        except ValueError:
            full = None
        if full is None or full[-2:] != (N, M):
            raise ValueError(f"mask of shape {mask_arr.shape} does not broadcast to (..., N, M) = (..., {N}, {M})")
        if full[:-2] != batch_shape:
            # a mask broadcasts against the scores, but never adds (batch, head) dimensions to the output
            raise ValueError(
                f"mask of shape {mask_arr.shape} would widen the output: q, k and v's leading dimensions broadcast to "
                f"{batch_shape}, with the mask's to {full[:-2]}, so the rows of each (batch, head) element of q, "
                f"k, v would be computed under every element's mask, giving an output of shape "
                f"{full[:-2] + (N, Dv)} instead of {batch_shape + (N, Dv)}. Give the mask at most the inputs' "
                f"leading dimensions, (..., N, M) = {batch_shape + (N, M)} (any of them may be 1): e.g. for q, k, v "
                "of shape (B, N, D) and padding_mask(lengths, M), which is (B, 1, 1, M) for (B, H, N, M) scores, "
                "pass padding_mask(lengths, M)[:, 0] (B, 1, M), or give q, k, v a head axis (q[:, None])"
            )
        mask_arr = mask_arr.reshape((1,) * (2 - mask_arr.ndim) + mask_arr.shape)  # at least 2-D: (..., N | 1, M | 1)
        keep = np.broadcast_to(mask_arr, mask_arr.shape[:-2] + (N, M))  # (..., N, M), a read-only view
    if causal and fold_causal:
        tri = causal_mask(N, M)  # (N, M), bottom-right aligned
        keep = tri if keep is None else keep & tri
    try:
        dtype = np.result_type(q, k, v)
    except TypeError:  # e.g. bfloat16 with float16: numpy has no common type
        raise TypeError(
            f"q, k and v have no common floating-point type: {q.dtype}, {k.dtype}, {v.dtype}; "
            "convert them to one dtype first"
        ) from None
    sink = check_sink(learnable_sink, batch_shape)
    return AttentionInputs(q, k, v, scale, keep, batch_shape, N, M, D, Dv, dtype, bool(causal), sink=sink)


def check_sink(learnable_sink: ArrayLike | None, batch_shape: tuple) -> np.ndarray | None:
    """The learnable sink logits as float64 of shape ``batch_shape`` (the leading dimensions ``(..., B, H)``), or
    None for None.

    flash-attention's ``learnable_sink`` is one logit per query head, shape ``(nheads,)`` (PR #1819's description;
    ``flash_attn/cute/interface.py`` asserts ``learnable_sink.shape == (num_head,)``); here it broadcasts over the
    leading dimensions as ``alibi_slopes`` does: ``(H,)`` (the usual one), ``(B, H)``, or a scalar (one sink for
    every head), any size possibly 1. Leading axes of size 1 beyond the inputs' are dropped (``(1,)`` for inputs
    without a heads axis). The logit is added to the *scaled* scores as it is, in natural-log units (not
    multiplied by ``scale``), as GPT-OSS's reference does (``openai/gpt-oss``, ``gpt_oss/torch/model.py``,
    ``sdpa``). NaN and infinities are kept (a NaN sink makes every row of its head NaN; ``-inf`` is no sink).

    Raises:
        TypeError: not real numbers (a bool is not). ValueError: a shape that does not broadcast to
        ``batch_shape``; the message names the expected ``(H,)``.
    """
    if learnable_sink is None:
        return None
    sink = np.asarray(learnable_sink)
    if sink.dtype.kind not in "iuf":
        raise TypeError(f"learnable_sink must be real numbers (one sink logit per query head), got dtype {sink.dtype}")
    while sink.ndim > len(batch_shape) and sink.shape[0] == 1:  # (1,) for inputs without a heads axis
        sink = sink[0]
    try:
        return np.broadcast_to(sink.astype(np.float64), batch_shape).copy()
    except ValueError:
        heads = batch_shape[-1] if batch_shape else 1
        raise ValueError(
            f"learnable_sink of shape {np.shape(learnable_sink)} must be (H,) = ({heads},): one logit per query "
            f"head (flash-attention's (nheads,)), or (B, H), broadcast like alibi_slopes over the leading "
            f"dimensions (..., B, H) = {batch_shape}"
        ) from None


def check_scale(scale: Any, D: int) -> float:
    """``scale`` as a Python float, ``1 / sqrt(D)`` for None. TypeError for anything but a real number (a bool is
    not), ValueError for a non-finite one."""
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, (bool, np.bool_)) or np.ndim(scale) != 0 or np.asarray(scale).dtype.kind not in "iuf":
        raise TypeError(f"scale must be a real number (or None for 1/sqrt(D)), got {scale!r}")
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite, got {value}")
    return value


def check_causal(causal: object) -> bool:
    """``causal`` as a bool (``np.True_`` and ``np.False_`` accepted); TypeError for anything else."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(
            f"causal must be True or False, got {causal!r}; for the top-left alignment pass "
            "mask=flashmath.masks.causal_mask(N, M, align='top-left')"
        )
    return bool(causal)


def compute_operands(inp: AttentionInputs) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray, tuple]:
    """``(dtype, q_scaled, k, v, rows)``: the compute dtype, ``Q`` with the scale folded in (simplification 1 of
    chapter 3, a new array), ``K`` and ``V`` in the compute dtype (not copied when already in it: never write to
    them), and ``rows``, the shape ``(..., N)`` of one per-row state."""
    dtype = compute_dtype(inp.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 (scale 0) is NaN, on purpose
        # Q * scale in float64, then the compute dtype: a scale such as 1e39 has no float32, but q * scale may
        q_scaled = (inp.q.astype(np.float64) * inp.scale).astype(dtype)  # (..., N, D), a new array
    k = inp.k.astype(dtype, copy=False)  # (..., M, D)
    v = inp.v.astype(dtype, copy=False)  # (..., M, Dv)
    rows = inp.batch_shape + (inp.N,)  # the shape of one per-row state (g, s, x_m, ...)
    return dtype, q_scaled, k, v, rows


def require_keys(inp: AttentionInputs, name: str) -> None:
    """ValueError naming ``name`` when there is no key (``M == 0``): a trace needs at least one step."""
    if inp.M == 0:
        raise ValueError(f"{name} needs at least one key (M >= 1) to have steps to trace, got M = 0")
