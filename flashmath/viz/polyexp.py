"""Chapter 9: the relative error of FlashAttention-4's polynomial ``exp2`` over the fraction ``f`` in ``[0, 1)``.

The errors come from :func:`flashmath.polyexp.exp2_poly`; nothing here computes them.
"""

from __future__ import annotations

import numpy as np

from flashmath.i18n import gettext as _
from flashmath.viz.precision import DTYPE_COLORS

__all__ = ["plot_exp2_poly_error"]


def plot_exp2_poly_error(frac, rel_error, *, figsize=(7.5, 3.2)):
    """``(exp2_poly(f) - 2^f) / 2^f`` against ``f``, beside float16's unit roundoff ``u = 2^-11`` (half a unit in
    the last place at 1): the polynomial's error is the same for ``x = n + f`` at every integer ``n`` (the exponent
    is added exactly), so this is its error everywhere. A static pyplot figure.

    Args:
        frac: ``(K,)`` fractions in ``[0, 1)``, increasing. rel_error: ``(K,)`` the signed relative errors there.

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: arrays of different shapes, or not 1-D.
    """
    import matplotlib.pyplot as plt

    frac, rel_error = np.asarray(frac, dtype=np.float64), np.asarray(rel_error, dtype=np.float64)
    if frac.ndim != 1 or frac.shape != rel_error.shape:
        raise ValueError(f"frac and rel_error must be 1-D of the same length, got {frac.shape} and {rel_error.shape}")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.plot(frac, 1e4 * rel_error, color="black", lw=1.2, label=_("exp2_poly, degree 3: relative error"))
    worst = float(np.abs(rel_error).max())
    ax.axhspan(
        -1e4 * worst,
        1e4 * worst,
        color="#bbbbbb",
        alpha=0.35,
        lw=0,
        label=_("largest error: 2^{e:.1f}").format(e=float(np.log2(worst))),
    )
    u16 = 2.0**-11
    for sign in (1, -1):
        ax.axhline(
            1e4 * sign * u16,
            color=DTYPE_COLORS["float16"],
            ls="--",
            lw=1.2,
            label=_("float16's u = 2^-11 (bfloat16's, 2^-8, is 8 times higher)") if sign > 0 else None,
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(-1.25e4 * u16, 1.25e4 * u16)
    ax.set_xlabel(_("fraction f of x = n + f"))
    ax.set_ylabel(_("relative error (x 1e-4)"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=9, frameon=False)  # above the axes
    return fig
