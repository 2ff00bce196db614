"""Chapter 7: how the warps of one thread block share a tile step, split-K (FlashAttention) against split-Q
(FlashAttention-2), as FlashAttention-2 describes it (T. Dao, 2023, section 3.3 and Figure 3).

One thread block holds a query tile ``Q_i`` and, for one step, a key tile ``K_j`` and a value tile ``V_j``; its
warps compute the score tile ``X_ij = Q_i K_j^T``, the weights ``P_ij`` and the products ``P_ij V_j``. The picture
colours each block by the warp that works on it (grey: read by every warp). Nothing here computes attention.
"""

from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from flashmath._checks import size
from flashmath.i18n import gettext as _

__all__ = ["plot_warp_partition"]

WARP_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
SHARED = "#d9d9d9"  # a block every warp reads
# block sizes in drawing units: the query tile and the key tile have the same number of rows here (B_r = B_c)
TILE, WIDTH = 2.0, 1.0  # rows of a tile, columns of D (head dimension)


def _block(ax, x, y, w, h, warps, split, label):
    """A ``w x h`` block at ``(x, y)`` (lower left), cut into ``warps`` bands along ``split`` ("rows" or
    "columns") coloured by warp, or grey when ``split`` is None; ``label`` (mathtext) above it."""
    if split is None:
        ax.add_patch(Rectangle((x, y), w, h, facecolor=SHARED, edgecolor="k", lw=1))
    for k in range(warps if split else 0):
        if split == "rows":  # band k from the top
            band = Rectangle((x, y + h - (k + 1) * h / warps), w, h / warps)
        else:
            band = Rectangle((x + k * w / warps, y), w / warps, h)
        band.set(facecolor=WARP_COLORS[k], edgecolor="white", lw=0.8, alpha=0.85)
        ax.add_patch(band)
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none", edgecolor="k", lw=1))
    ax.text(x + w / 2, y + h + 0.12, label, ha="center", va="bottom", fontsize=11)


def _arrow(ax, x0, x1, y):
    ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="->", mutation_scale=14, lw=1.2, color="k"))


def plot_warp_partition(warps: int = 4, *, figsize=(9.0, 4.6)):
    """The work of one thread block on one tile step, split between ``warps`` warps: split-K above (FlashAttention:
    each warp takes a slice of the keys and values, for every row), split-Q below (FlashAttention-2: each warp
    takes a slice of the query rows, against every key). A static pyplot figure.

    Args:
        warps: the number of warps of the thread block, 2 to 8 (FlashAttention-2 says 4 or 8).

    Returns:
        matplotlib Figure.

    Raises:
        TypeError: ``warps`` not an integer. ValueError: ``warps`` outside 2..8.

    Source: T. Dao, "FlashAttention-2" (2023), section 3.3 "Work Partitioning Between Warps" and its Figure 3.
    """
    import matplotlib.pyplot as plt

    warps = size(warps, "warps", 2)
    if warps > len(WARP_COLORS):
        raise ValueError(f"warps must be in 2..{len(WARP_COLORS)}, got {warps}")
    fig, axes = plt.subplots(2, 1, figsize=figsize, layout="constrained")
    schemes = (
        (
            _("split-K (FlashAttention): each warp takes {share} of the keys, for every query row"),
            None,
            "rows",
            "columns",
            _("each warp holds a partial\nproduct for every row:\nall write them to shared\nmemory, wait, add up"),
        ),
        (
            _("split-Q (FlashAttention-2): each warp takes {share} of the query rows, against every key"),
            "rows",
            None,
            "rows",
            _("each warp owns its rows\nof the product:\nnothing to exchange,\nno waiting"),
        ),
    )
    share = f"1/{warps}"
    for ax, (title, q_split, kv_split, x_split, note) in zip(axes, schemes, strict=True):
        x = 0.0
        _block(ax, x, 0, WIDTH, TILE, warps, q_split, "$Q_i$")
        x += WIDTH + 0.5
        _block(ax, x, 0, WIDTH, TILE, warps, kv_split, "$K_j$")
        x += WIDTH + 0.4
        _block(ax, x, 0, WIDTH, TILE, warps, kv_split, "$V_j$")
        _arrow(ax, x + WIDTH + 0.15, x + WIDTH + 0.75, TILE / 2)
        x += WIDTH + 0.9
        _block(ax, x, 0, TILE, TILE, warps, x_split, "$X_{ij} = Q_i K_j^T$,  $P_{ij}$")
        _arrow(ax, x + TILE + 0.15, x + TILE + 0.75, TILE / 2)
        x += TILE + 0.9
        if q_split is None:  # split-K: one partial numerator per warp, all of the tile's rows
            for k in reversed(range(warps)):
                shift = 0.12 * k
                ax.add_patch(
                    Rectangle((x + shift, -shift), WIDTH, TILE, facecolor=WARP_COLORS[k], edgecolor="k", lw=0.8)
                )
            ax.text(x + WIDTH / 2, TILE + 0.12, "$P_{ij} V_j$", ha="center", va="bottom", fontsize=11)
        else:
            _block(ax, x, 0, WIDTH, TILE, warps, "rows", "$P_{ij} V_j$")
        x += WIDTH + 0.12 * warps + 0.4
        ax.text(x, TILE / 2, note, ha="left", va="center", fontsize=10)
        ax.set_title(title.format(share=share), fontsize=10, loc="left")
        ax.set_xlim(-0.2, x + 3.9)
        ax.set_ylim(-0.25 - 0.12 * warps, TILE + 0.7)
        ax.set_aspect("equal")
        ax.axis("off")
    handles = [Patch(facecolor=WARP_COLORS[k], label=_("warp {k}").format(k=k + 1)) for k in range(warps)]
    handles.append(Patch(facecolor=SHARED, edgecolor="k", label=_("read by every warp")))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=9, frameon=False)
    return fig
