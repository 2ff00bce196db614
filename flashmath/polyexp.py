"""FlashAttention-4's software ``exp2``: a polynomial on the FMA units instead of the special-function unit (chapter 9).

On Blackwell GPUs the tensor cores multiply so fast that the exponentials of the softmax, computed by the few
special-function units (MUFU, the PTX instruction ``ex2.approx``), become the bottleneck. FlashAttention-4 computes
part of its ``exp2`` on the far more numerous FMA units instead (``ex2_emulation`` in ``flash_attn/cute/utils.py``
of Dao-AILab/flash-attention, commit 0251105; the softmax calls its two-value twin ``ex2_emulation_2``):

1. clamp ``x`` to at least -127;
2. split it into ``n = floor(x)`` and ``f = x - n`` in ``[0, 1)``: adding ``1.5 * 2**23`` with rounding towards
   minus infinity (``add.rm.ftz.f32``) leaves ``n`` in the low bits, subtracting it back gives ``n`` as a float;
3. ``2**f`` by a polynomial of degree 3 in Horner form, three fused multiply-adds, coefficients ``POLY_EX2[3]``
   (a minimax fit of ``2**f`` on ``[0, 1]`` with relative error, from sollya's ``fpminimax``);
4. ``2**n`` by adding ``n << 23`` to the float32 bits of ``2**f``: an integer add to the exponent field.

:func:`exp2_poly` does the same in numpy, bit for bit except where noted, so that the chapter can measure what
the approximation costs: a relative error of about 1e-4 in float32 (:func:`exp2_poly_error`), below half a unit
in the last place of float16 (2**-11, about 4.9e-4) and of bfloat16 (2**-8, about 3.9e-3), so that after the
probabilities are rounded to 16 bits for the ``P V`` product, most come out the same as with an exact ``exp2`` and
the others one unit in the last place away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flashmath.precision import round_to

__all__ = ["POLY_EX2", "Exp2PolyError", "exp2_poly", "exp2_poly_error"]

# The coefficients of 2**f on [0, 1], lowest degree first (flash_attn/cute/utils.py, POLY_EX2), each a float32.
POLY_EX2: dict[int, tuple[float, ...]] = {
    1: (1.0, 0.922497093677520751953125),
    2: (1.0, 0.6657850742340087890625, 0.330107033252716064453125),
    3: (1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625),
    4: (
        1.0,
        0.693042695522308349609375,
        0.2412912547588348388671875,
        5.2225358784198760986328125e-2,
        1.3434938155114650726318359375e-2,
    ),
    5: (
        1.0,
        0.693151414394378662109375,
        0.24016360938549041748046875,
        5.5802188813686370849609375e-2,
        9.01452265679836273193359375e-3,
        1.86810153536498546600341796875e-3,
    ),
}
_ROUND_INT = np.float32(2**23 + 2**22)


def _fma32(a: np.ndarray, b: np.ndarray, c: float) -> np.ndarray:
    """``a * b + c`` in float32 with one rounding, as a GPU's ``fma.rn.f32``: the product of two float32 numbers is
    exact in float64, the sum is rounded to float64 and then to float32 (a double rounding, which can differ from the
    single one in the last bit in rare ties)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.float64(np.float32(c))).astype(np.float32)


def exp2_poly(x: ArrayLike, degree: int = 3) -> np.ndarray:
    """``2**x`` as FlashAttention-4 emulates it on the FMA units (``ex2_emulation``), in float32.

    Args:
        x: any shape, any real dtype; computed in float32 (the kernel's scores are float32). Values above 127 are
            outside the emulation's range (the kernel assumes ``x <= 127``, as a softmax's ``x - max <= 0`` is).
        degree: the polynomial's degree, a key of :data:`POLY_EX2` (1 to 5); FlashAttention-4 uses 3.

    Returns:
        float32 array of ``x``'s shape. Inputs below -127 give ``2**-127``'s emulation (the clamp), NaN gives NaN.
        Not bit for bit where the GPU flushes subnormal numbers to zero (``.ftz``): results below ``2**-126``.

    Raises:
        ValueError: a degree without coefficients, or an ``x`` above 127.

    Source: Dao-AILab/flash-attention, ``flash_attn/cute/utils.py`` (``POLY_EX2``, ``add_round_down``,
    ``combine_int_frac_ex2``, ``ex2_emulation``, ``ex2_emulation_2``), commit 0251105.
    """
    if degree not in POLY_EX2:
        raise ValueError(
            f"degree must be one of {sorted(POLY_EX2)} (the coefficients FlashAttention-4 has), got {degree!r}"
        )
    x32 = np.asarray(x, dtype=np.float32)
    if np.any(x32 > 127):
        raise ValueError(
            f"x must be at most 127 (the emulation's range, as in FlashAttention-4); got max {float(np.nanmax(x32))}"
        )
    clamped = np.fmax(x32, np.float32(-127.0))  # fmax: NaN stays NaN only if both are; put NaN back below
    clamped = np.where(np.isnan(x32), np.float32(np.nan), clamped)
    n = np.floor(clamped)  # what add.rm with 1.5 * 2**23 leaves in the low bits
    frac = (clamped - n).astype(np.float32)  # exact: both are float32 of the same binade or nearer
    coefficients = POLY_EX2[degree]
    out = np.full(x32.shape, np.float32(coefficients[-1]), dtype=np.float32)
    for c in reversed(coefficients[:-1]):
        out = _fma32(out, frac, c)
    with np.errstate(invalid="ignore"):
        n_int = np.where(np.isnan(n), 0, n).astype(np.int32)
    bits = out.view(np.int32) + (n_int << 23)  # an integer add to the exponent field
    result = bits.view(np.float32)
    return np.where(np.isnan(x32), np.float32(np.nan), result)


@dataclass(frozen=True)
class Exp2PolyError:
    """What :func:`exp2_poly` costs on the inputs of :func:`exp2_poly_error`.

    Attributes:
        degree: the polynomial's degree.
        max_rel_error: largest ``|exp2_poly(x) - 2**x| / 2**x`` in float32 (``2**x`` from ``np.exp2`` in float64).
        same_after_rounding: per dtype name (``float16``, ``bfloat16``), the share of inputs whose result rounds to
            the same 16-bit number as the exact ``2**x`` does.
        max_ulps_after_rounding: per dtype name, the largest distance between the two rounded results, in units in
            the last place of the 16-bit type.
        points_after_rounding: per dtype name, how many inputs the two fields above count: those where ``2**x`` is
            a normal number of the type (``x >= -14`` for float16, ``x >= -126`` for bfloat16, whose smallest normal
            number is float32's); below that, float16's subnormal numbers have fewer significant bits and the
            comparison would measure them, not the polynomial.
    """

    degree: int
    max_rel_error: float
    same_after_rounding: dict[str, float]
    max_ulps_after_rounding: dict[str, float]
    points_after_rounding: dict[str, int]


MANTISSA_BITS = {"float16": 10, "bfloat16": 7}  # stored fraction bits (IEEE binary16; bfloat16)


def _ulps(a: np.ndarray, b: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """``|a - b|`` in units in the last place at ``b``'s binade of a type with ``mantissa_bits`` fraction bits."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exponent = np.floor(np.log2(np.abs(b64)))
    return np.abs(a64 - b64) / np.exp2(exponent - mantissa_bits)


def exp2_poly_error(x: ArrayLike, degree: int = 3) -> Exp2PolyError:
    """The error of :func:`exp2_poly` against ``np.exp2`` on ``x``, in float32 and after rounding to 16 bits.

    Args:
        x: the exponents, any shape; a softmax's ``x - max`` lies in ``[-126, 0]`` where it matters (results in
            float32's normal range); NaN and values outside ``[-126, 127]`` are left out.
        degree: as in :func:`exp2_poly`.

    Returns:
        :class:`Exp2PolyError`.

    Raises:
        ValueError: as :func:`exp2_poly`, or when no input is left (for float16: none with ``x >= -14``).
    """
    x32 = np.asarray(x, dtype=np.float32).ravel()
    x32 = x32[np.isfinite(x32) & (x32 >= -126) & (x32 <= 127)]
    if x32.size == 0:
        raise ValueError("no input in [-126, 127] to measure the error on")
    approx = exp2_poly(x32, degree)
    exact = np.exp2(x32.astype(np.float64))
    rel = float(np.max(np.abs(approx.astype(np.float64) - exact) / exact))
    same, ulps, points = {}, {}, {}
    for name in ("float16", "bfloat16"):
        # compare only where the exact result is a normal number of the type: float16's normal range ends at
        # 2**-14 (x >= -14), bfloat16's at float32's 2**-126
        tiny = float(np.finfo(np.float16).tiny) if name == "float16" else float(np.finfo(np.float32).tiny)
        keep = exact >= tiny
        if not keep.any():
            raise ValueError(f"no input x with 2**x a normal {name} number (x >= {int(np.log2(tiny))})")
        rounded_approx, rounded_exact = round_to(approx[keep], name), round_to(exact[keep], name)
        same[name] = float(np.mean(rounded_approx.astype(np.float64) == rounded_exact.astype(np.float64)))
        ulps[name] = float(np.max(_ulps(rounded_approx, rounded_exact, MANTISSA_BITS[name])))
        points[name] = int(np.count_nonzero(keep))
    return Exp2PolyError(degree, rel, same, ulps, points)
