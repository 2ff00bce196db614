"""Floating point (chapter 9): low-precision inputs, error measures, and the error of every attention variant.

Three input dtypes matter on accelerators: float16 (IEEE half precision: 5 exponent bits, 10 mantissa bits, largest
value 65504), bfloat16 (from the ``ml_dtypes`` package: float32's 8 exponent bits with 7 mantissa bits, so float32's
range with 3 bits less precision than float16) and float32. Every attention function of the package takes them and
computes in float32, as a GPU does (its matrix units multiply float16 or bfloat16 and accumulate in float32); the
output comes back in the input dtype.

How errors are measured here:

* The **reference** is :func:`flashmath.attention.attention` of the *same* low-precision inputs, computed in float64.
  Every variant starts from those inputs, so the rounding of the inputs is shared and left out; what remains is
  what each variant's own arithmetic adds.
* :func:`max_abs_error` is the largest absolute difference, the measure of FlashAttention's tests;
  :func:`max_rel_error` divides it by the largest absolute value of the reference (a normwise relative error, which
  stays meaningful where single reference entries are close to 0).
* Any output stored in a dtype is at least its rounding away from the reference: :func:`round_to` of the reference
  gives that floor (about half a unit in the last place of the largest entries).
* :func:`naive_attention` is standard attention as a framework runs it in low precision: the scores ``X``, the
  probabilities ``Y`` and the output ``A`` are each stored, so each is rounded to the input dtype. FlashAttention's
  test rule: the error of the kernel is at most twice the error of that naive attention, both against a high
  precision reference (:attr:`PrecisionStudy.ratio`).

Sources: IEEE 754-2008 (binary16); the bfloat16 format of Google Brain, as implemented by ``ml_dtypes``
(jax-ml/ml_dtypes); T. Dao et al., "FlashAttention" (2022), and its tests, ``tests/test_flash_attn.py`` of
Dao-AILab/flash-attention ("FlashAttention's numerical error is at most twice the numerical error of a Pytorch
implementation", with a float32 reference where this course uses float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from flashmath._checks import DTYPES, as_float_array, float_dtype, size
from flashmath.attention import attention, one_loop_attention, standard_attention, two_loop_attention
from flashmath.flash import flash_attention
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.inputs import compute_operands, prepare_attention_inputs
from flashmath.rowstate import weighted_values

LOG2E = 1 / math.log(2.0)  # log2(e): exp(y) = 2^(y log2 e)

__all__ = [
    "DTYPES",
    "VARIANTS",
    "round_to",
    "unit_roundoff",
    "max_abs_error",
    "max_rel_error",
    "naive_attention",
    "rounded_p_attention",
    "precision_study",
    "PrecisionStudy",
    "blas_description",
]

VARIANTS = (N_("rounded reference"), N_("naive"), "one_loop", "two_loop", "fa1", "fa2", N_("rounded P"))
"""The rows of a :class:`PrecisionStudy`: the float64 reference rounded to the dtype (the floor), naive
low-precision attention, :func:`flashmath.one_loop_attention`, :func:`flashmath.two_loop_attention`, and
:func:`flashmath.flash_attention` in both loop orders."""


def round_to(x: ArrayLike, dtype: DTypeLike) -> np.ndarray:
    """``x`` rounded to ``dtype`` (round to nearest, ties to even), as a new array.

    Args:
        x: array of real numbers (integers are taken as float64).
        dtype: a floating-point dtype, e.g. ``np.float16``, ``"bfloat16"``, ``np.float32``.

    Returns:
        A new array of ``dtype``. Values beyond the dtype's range become ``inf`` (float16 above 65504).

    Raises:
        TypeError: ``x`` is not real numbers, or ``dtype`` is not a floating-point dtype.
    """
    dtype = float_dtype(dtype)
    x = as_float_array(x)
    with np.errstate(over="ignore"):  # overflow to inf is what rounding to a narrow dtype does
        return x.astype(dtype)


def unit_roundoff(dtype: DTypeLike) -> float:
    """The largest relative error of rounding to ``dtype``: half its machine epsilon, ``2**-(p)`` with ``p`` bits of
    significand (float16 ``2**-11``, bfloat16 ``2**-8``, float32 ``2**-24``, float64 ``2**-53``).

    Raises:
        TypeError: ``dtype`` is not a floating-point dtype.
    """
    return float(ml_dtypes.finfo(float_dtype(dtype)).eps) / 2


def _error_operands(out: ArrayLike, ref: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    out, ref = as_float_array(out, "out"), as_float_array(ref, "ref")
    if out.shape != ref.shape:
        raise ValueError(f"out and ref must have the same shape, got {out.shape} and {ref.shape}")
    return out.astype(np.float64), ref.astype(np.float64)


def max_abs_error(out: ArrayLike, ref: ArrayLike) -> float:
    """``max |out - ref|`` over all elements, computed in float64: the error measure of FlashAttention's tests.

    Args:
        out: the result to judge, any shape, any float dtype (float16, bfloat16, ...).
        ref: the reference, same shape.

    Returns:
        A Python float; 0.0 for empty arrays; NaN where ``out`` or ``ref`` holds NaN (never silently ignored);
        ``inf`` where ``out`` overflowed and ``ref`` did not.

    Raises:
        ValueError: the shapes differ (no broadcasting: a broadcast comparison would hide a wrong shape).
        TypeError: not real floating-point numbers.
    """
    out, ref = _error_operands(out, ref)
    if out.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, on purpose
        return float(np.max(np.abs(out - ref)))


def max_rel_error(out: ArrayLike, ref: ArrayLike) -> float:
    """``max |out - ref| / max |ref|``: :func:`max_abs_error` relative to the size of the reference.

    A normwise relative error: entries of ``ref`` close to 0 do not blow it up, as an element-wise relative error
    would. Returns 0.0 when both are all zeros (or empty) and ``inf`` when only ``ref`` is. Shapes, errors: as
    :func:`max_abs_error`.
    """
    error = max_abs_error(out, ref)
    _, ref = _error_operands(out, ref)
    size = float(np.max(np.abs(ref))) if ref.size else 0.0
    if size == 0.0:
        return 0.0 if error == 0.0 else float("inf")
    return error / size


def naive_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
) -> np.ndarray:
    """Standard attention as a framework computes it in low precision: ``X``, ``Y`` and ``A`` each rounded.

    The three steps of the formula, each a kernel that writes its result to memory in the input dtype:

        X = round(Q K^T * scale)      matrix product accumulated in float32, stored in the input dtype
        Y = round(softmax(X))         safe softmax computed in float32 from the stored X, stored
        A = round(Y V)                matrix product accumulated in float32, stored

    This models the yardstick of FlashAttention's tests (``out_pt`` in ``tests/test_flash_attn.py``: PyTorch's
    attention run in float16 or bfloat16, ``attention_ref(..., upcast=False, reorder_ops=True)``) with one rounding
    fewer: that reference also rounds ``K / sqrt(D)`` to the input dtype before the product (``reorder_ops``
    scales ``k`` instead of ``q``), while here the scale is folded into ``Q`` in the compute dtype (float32 for
    16-bit inputs), with no rounding to the input dtype. Pass ``k`` already scaled and rounded, with ``scale=1.0``,
    for all four roundings (chapter 9 does). With float32 or float64 inputs nothing is rounded beyond the input
    dtype's own arithmetic.

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)``, floating point (float16, bfloat16, float32,
            float64). scale, causal, mask: as :func:`flashmath.attention.attention` (the scale is folded into ``Q``
            in float64, then ``Q`` is taken to the compute dtype, as in every variant of the package).

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype. Scores beyond the dtype's range become ``inf`` (float16:
        above 65504) and their rows NaN, as in a framework that stores them. A fully masked row gives 0.

    Raises:
        TypeError, ValueError: as :func:`flashmath.attention.attention`.
    """
    # Algorithm 0 with X, Y and A stored in the input dtype: the package's one standard attention
    return standard_attention(q, k, v, scale=scale, causal=causal, mask=mask)


def rounded_p_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
    exp2: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Attention with the rounding of a real kernel: the weights ``P`` rounded to the input dtype before ``P V``.

    A GPU kernel multiplies 16-bit operands on its matrix units, so after the exponentials it rounds the weight
    tile to the inputs' dtype (the Triton tutorial's ``p.to(tl.float16)``, chapter 11's
    ``p_tile.to(v_tile.dtype)``, FlashAttention-2's conversion of ``P`` before its second product). Everything
    else stays in the compute dtype (float32 for 16-bit inputs)::

        X = Q K^T * scale                 float32, never stored
        g = rowmax(X);  P = exp(X - g)    float32;  s = rowsum(P) from the unrounded P (as the tutorial's l_i)
        U = round(P) V                    P rounded to the input dtype, the product accumulated in float32
        A = round(U / s)                  rounded once, when stored

    This is one key tile (``B_c = M``): a kernel with several key tiles rounds ``exp(X - g_running)`` against
    its running max instead, which moves which weights round up or down but not the size of the error. With
    float32 or float64 inputs the rounding of ``P`` changes nothing and the result is plain attention in the
    input dtype's arithmetic.

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)``, floating point (float16, bfloat16, float32,
            float64). scale, causal, mask: as :func:`flashmath.attention.attention`.
        exp2: None (default): ``P = exp(X - g)`` by ``np.exp``. Else a function computing ``2**y`` elementwise,
            used as ``P = exp2((X - g) log2 e)`` in the compute dtype, as FlashAttention-4 computes its weights;
            e.g. :func:`flashmath.polyexp.exp2_poly` (chapter 9), whose result is float32.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype. A fully masked row gives 0; NaN in a row's inputs gives
        NaN in that row. Inputs are never modified.

    Raises:
        TypeError, ValueError: as :func:`flashmath.attention.attention`.

    Sources: T. Dao, "FlashAttention-2" (2023), section 3.1.1 and Algorithm 1; Triton's
    ``python/tutorials/06-fused-attention.py`` (``_attn_fwd_inner``: ``p = p.to(tl.float16)`` before
    ``tl.dot(p, v, acc)``, ``l_ij = tl.sum(p, 1)`` before the cast).
    """
    inp = prepare_attention_inputs(q, k, v, scale=scale, causal=causal, mask=mask)
    stored = inp.dtype  # the matrix unit's operand dtype, and the output's
    compute, q_scaled, k_c, v_c, _ = compute_operands(inp)
    with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the inputs: NaN out, on purpose
        # X = Q K^T * scale, in the compute dtype (float32 accumulation, never stored)
        x = np.matmul(q_scaled, np.swapaxes(k_c, -1, -2))  # (..., N, M)
        if inp.keep is not None:
            x = np.where(inp.keep, x, -np.inf)  # masked scores are -inf
        g = x.max(axis=-1, keepdims=True)  # (..., N, 1)
        g_ref = np.where(g == -np.inf, 0, g)  # a row with no key: measure against 0, never -inf - (-inf)
        # P = exp(X - g) in the compute dtype; s sums the unrounded weights
        if exp2 is None:
            p = np.exp(x - g_ref)  # (..., N, M)
        else:  # 2^((X - g) log2 e), FlashAttention-4's form (with exp2_poly: its polynomial on the FMA units)
            p = np.asarray(exp2((x - g_ref) * compute.type(LOG2E))).astype(compute)
        s = p.sum(axis=-1, keepdims=True)  # (..., N, 1)
        # U = round(P) V: the weights rounded to the operand dtype, the product accumulated in the compute dtype
        u = weighted_values(p.astype(stored).astype(compute), v_c, inp.keep)  # (..., N, Dv)
        a = (u / np.where(s == 0, 1, s)).astype(stored)  # divided once, rounded once when stored
    return np.broadcast_to(a, inp.batch_shape + (inp.N, inp.Dv)).copy()


# ----------------------------------------------------------------------------------------------------------------
# The study: every variant, dtype and tile size against float64
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionStudy:
    """The error of every attention variant for several input dtypes and tile sizes, from :func:`precision_study`.

    Attributes:
        dtypes: the input dtypes by name, e.g. ``("float16", "bfloat16", "float32")``.
        variants: :data:`VARIANTS`.
        blocks: the tile sizes ``((B_r, B_c), ...)`` of the flash variants.
        abs_error: ``(n_dtypes, n_variants, n_blocks)`` float64, :func:`max_abs_error` against the float64
            reference of the same rounded inputs. Variants without tiles repeat one value along the last axis.
        rel_error: the same with :func:`max_rel_error`.
        misrounded: the same shape, the fraction of output elements that differ from the float64 reference rounded
            to the dtype (0 for the rounded reference itself): how often the variant's arithmetic changed the
            stored result.
    """

    dtypes: tuple
    variants: tuple
    blocks: tuple
    abs_error: np.ndarray
    rel_error: np.ndarray
    misrounded: np.ndarray

    def __len__(self) -> int:
        return len(self.blocks)

    def _index(self, dtype: DTypeLike, variant: str) -> tuple[int, int]:
        name = float_dtype(dtype).name if not isinstance(dtype, str) else dtype
        if name not in self.dtypes:
            raise ValueError(f"dtype must be one of {list(self.dtypes)}, got {dtype!r}")
        if variant not in self.variants:
            raise ValueError(f"variant must be one of {list(self.variants)}, got {variant!r}")
        return self.dtypes.index(name), self.variants.index(variant)

    def error(self, dtype: DTypeLike, variant: str, *, relative: bool = False) -> np.ndarray:
        """The errors of ``variant`` for input ``dtype`` at every tile size, ``(n_blocks,)`` float64.

        Raises:
            ValueError: a dtype or variant that the study does not hold.
        """
        i, j = self._index(dtype, variant)
        return (self.rel_error if relative else self.abs_error)[i, j].copy()

    def misrounded_share(self, dtype: DTypeLike, variant: str) -> np.ndarray:
        """The share of elements that differ from the rounded reference, at every tile size ``(n_blocks,)``."""
        i, j = self._index(dtype, variant)
        return self.misrounded[i, j].copy()

    def ratio(self, dtype: DTypeLike, order: str = "fa2") -> np.ndarray:
        """FlashAttention's test quantity, the course's version: error of ``flash_attention`` over error of naive
        attention, both in ``dtype`` against the unrounded float64 reference (FlashAttention's ``out_ref`` is rounded
        to ``dtype``), at every tile size ``(n_blocks,)``. The test passes where it is at most 2.

        Raises:
            ValueError: ``order`` not ``"fa1"`` or ``"fa2"``; a dtype the study does not hold.
        """
        if order not in ("fa1", "fa2"):
            raise ValueError(f"order must be 'fa1' or 'fa2', got {order!r}")
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.error(dtype, order) / self.error(dtype, "naive")


def _blocks(blocks: Any) -> tuple:
    """``(8, (16, 32))`` -> ``((8, 8), (16, 32))``: square tiles from integers, ``(B_r, B_c)`` pairs as given."""
    try:
        items = list(blocks)
    except TypeError:
        raise TypeError(f"blocks must be a list of tile sizes (B or (B_r, B_c)), got {blocks!r}") from None
    if not items:
        raise ValueError("blocks must list at least one tile size")
    out = []
    for item in items:
        pair = (item, item) if np.ndim(item) == 0 else tuple(item)
        if len(pair) != 2:
            raise ValueError(f"each tile size must be B or (B_r, B_c), got {item!r}")
        out.append(tuple(size(b, "each tile size", 1, "a positive integer", why=f" (in {item!r})") for b in pair))
    return tuple(out)


def precision_study(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    dtypes: Any = ("float16", "bfloat16", "float32"),
    blocks: Any = (8, 16, 32),
    scale: float | None = None,
    causal: bool = False,
    mask: ArrayLike | None = None,
) -> PrecisionStudy:
    """Round ``q``, ``k``, ``v`` to each dtype and measure every variant against the float64 reference.

    For each dtype: the inputs are rounded to it (:func:`round_to`), the reference is
    :func:`flashmath.attention.attention` of the rounded inputs (float64), and each of :data:`VARIANTS` runs on
    the rounded inputs: the reference rounded to the dtype (the floor), :func:`naive_attention`,
    :func:`flashmath.one_loop_attention`, :func:`flashmath.two_loop_attention`,
    :func:`flashmath.flash_attention` with ``order="fa1"`` and ``"fa2"`` at every tile size, and
    :func:`rounded_p_attention` (``"rounded P"``: the weights rounded to 16 bits before ``P V``, as real kernels do).

    Args:
        q: ``(..., N, D)``, k: ``(..., M, D)``, v: ``(..., M, Dv)`` in any float dtype (usually float32 or float64).
        dtypes: input dtypes, names or dtypes (``"float16"``, ``"bfloat16"``, ``np.float32``...).
        blocks: tile sizes, each an integer ``B`` (``B_r = B_c = B``) or a pair ``(B_r, B_c)``.
        scale, causal, mask: as :func:`flashmath.attention.attention`.

    Returns:
        :class:`PrecisionStudy`.

    Raises:
        TypeError: a dtype that is not floating point; a tile size that is not an integer. ValueError: no dtypes,
        no tile sizes, a tile size below 1. Otherwise as :func:`flashmath.attention.attention`.
    """
    names = tuple(float_dtype(d, "each of dtypes").name for d in (dtypes if not isinstance(dtypes, str) else [dtypes]))
    if not names:
        raise ValueError("dtypes must list at least one dtype")
    blocks = _blocks(blocks)
    kwargs: dict[str, Any] = dict(scale=scale, causal=causal, mask=mask)
    abs_error = np.empty((len(names), len(VARIANTS), len(blocks)))
    rel_error, misrounded = np.empty_like(abs_error), np.empty_like(abs_error)
    for i, name in enumerate(names):
        q_d, k_d, v_d = (round_to(a, name) for a in (q, k, v))
        ref = attention(q_d, k_d, v_d, **kwargs)  # float64, from the very numbers every variant gets
        rounded = round_to(ref, name)  # the best any output stored in this dtype can be
        untiled = {
            "rounded reference": rounded,
            "naive": naive_attention(q_d, k_d, v_d, **kwargs),
            "one_loop": one_loop_attention(q_d, k_d, v_d, **kwargs),
            "two_loop": two_loop_attention(q_d, k_d, v_d, **kwargs),
            "rounded P": rounded_p_attention(q_d, k_d, v_d, **kwargs),  # P rounded before P V, as real kernels do
        }
        for j, variant in enumerate(VARIANTS):
            for b, (block_q, block_k) in enumerate(blocks):
                if variant in untiled:
                    out = untiled[variant]  # the same at every tile size
                else:
                    out = flash_attention(q_d, k_d, v_d, block_q=block_q, block_k=block_k, order=variant, **kwargs)
                abs_error[i, j, b], rel_error[i, j, b] = max_abs_error(out, ref), max_rel_error(out, ref)
                misrounded[i, j, b] = _share_different(out, rounded)
    return PrecisionStudy(
        dtypes=names, variants=VARIANTS, blocks=blocks, abs_error=abs_error, rel_error=rel_error, misrounded=misrounded
    )


def _share_different(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of elements where ``a`` and ``b`` differ (NaN equals NaN); 0.0 for empty arrays."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    differ = (a != b) & ~(np.isnan(a) & np.isnan(b))
    return float(differ.mean()) if differ.size else 0.0


def blas_description() -> str:
    """numpy's BLAS library as threadpoolctl reports it: name, version, kernel (the ``architecture`` that OpenBLAS
    chose for this CPU, e.g. ``Haswell`` or ``SkylakeX``; ``OPENBLAS_CORETYPE`` overrides it) and threads, e.g.
    ``"OpenBLAS 0.3.31.188.0, SkylakeX kernel, 2 threads"`` (translated by :func:`flashmath.set_language`).

    The last bits of a float32 or float64 matrix product depend on that kernel (its blocking, vector width and
    fused multiply-adds decide the order of each dot product's additions), so chapter 9 prints it beside every
    number that depends on it. Returns ``"none found by threadpoolctl"`` (translated) where it finds no BLAS.
    """
    from threadpoolctl import threadpool_info

    names = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}
    found = [
        _("{library} {version}, {kernel} kernel, {threads} threads").format(
            library=names.get(info.get("internal_api"), info.get("internal_api")),
            version=info.get("version"),
            kernel=info.get("architecture") or "?",
            threads=info.get("num_threads"),
        )
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]
    return "; ".join(found) or _("none found by threadpoolctl")
