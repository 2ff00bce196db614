"""Chapter 13: the mask explorer (score grid, block mask, work saved), a paged KV cache, grouped-query heads.

Nothing here computes a mask: :class:`MaskExplorerPlot` draws :class:`flashmath.variants.MaskExample` objects made
by the function it is given (:func:`flashmath.variants.mask_example`), the pictures draw the arrays they are given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.axes import nice_limits
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI

__all__ = ["MaskExplorerPlot", "plot_gqa_heads", "plot_mask_example", "plot_paged_cache"]

# tile kinds: empty (skipped, light grey), partial (masked element-wise, orange), full (no mask work, blue)
KIND_CMAP = ListedColormap(["#eeeeee", "#ff7f0e", "#1f77b4"])
KIND_NAMES = (N_("empty: skipped"), N_("partial: masked"), N_("full: no mask work"))  # translated where drawn

# what the left panel's colour is, for the kinds that change something (the others keep every score as it is):
# (the panel's title, the colour bar's label), translated where drawn
CHANGE_NAMES = {
    "ALiBi": (N_("scores: kept (coloured by the change), masked (white)"), N_("change of the score")),
    "softcap": (N_("scores: kept (coloured by the change), masked (white)"), N_("change of the score")),
    "learnable sink": (
        N_("change of each log-probability (masked: white)"),
        N_("log(1 - P_sink): change of each log-probability"),
    ),
}
UNCHANGED_TITLE = N_("scores: kept (one colour: no change), masked (white)")


def _grid_segments(N: int, block: int) -> list:
    edges = np.arange(0, N + 1, block).tolist() + [N]
    return [[(e - 0.5, -0.5), (e - 0.5, N - 0.5)] for e in edges] + [
        [(-0.5, e - 0.5), (N - 0.5, e - 0.5)] for e in edges
    ]


class MaskExplorerPlot(LivePlot):
    """Left: the ``N x N`` scores, masked pairs white, kept ones coloured by what the kind changes (ALiBi's bias,
    softcap's change of the score, a learnable sink's change of the log-probabilities), with a colour bar whose
    label names that quantity and whose limits hold the state's values (no bar for a mask, which changes no
    score); the tile grid over it. Right: each tile's kind (empty / partial / full). Title: the work saved.

    Args:
        example: ``(kind, param, block) -> MaskExample`` (:func:`flashmath.variants.mask_example`).
        kind, param, block: the first state. N: the grid size the examples have.
    """

    def __init__(
        self,
        example: Callable,
        *,
        kind: str = "causal",
        param: int = 8,
        block: int = 8,
        N: int = 64,
        figsize=(7.2, 4.1),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        self.example, self.N = example, N
        self._view: tuple | None = None  # the panel's title, the bar's label and limits shown (see _update)
        example(kind, param, block)  # a bad first state raises before a figure exists
        # the layout is computed once, at the first state, then frozen: lay it out with the colour bar shown and
        # its widest tick labels (ALiBi 8: -0.30 ... 0.00), then show the first state
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, kind="ALiBi", param=8, block=block)
        self.update(kind=kind, param=param, block=block)

    def _build(self) -> None:
        self.ax_scores, self.ax_tiles = self.fig.subplots(1, 2)
        N = self.N
        extent = (-0.5, N - 0.5, N - 0.5, -0.5)
        blank = np.zeros((N, N))
        self.scores_image = self.ax_scores.imshow(
            np.ma.masked_all((N, N)), cmap="viridis", vmin=-1, vmax=1, extent=extent, interpolation="nearest"
        )
        self.ax_scores.set_facecolor("white")
        # the colours' scale: its limits hold every kept value of the state shown (rounded outward, so that a few
        # limits serve the whole param slider); hidden for the masks, which change no score
        self.colorbar = self.fig.colorbar(self.scores_image, ax=self.ax_scores, shrink=0.8, pad=0.03)
        self.colorbar.ax.tick_params(labelsize=8)
        self.colorbar.locator = MaxNLocator(nbins=5, steps=[1, 2, 5, 10])
        # below 0.1 (a small ALiBi slope's bias, down to 3e-18), ticks in units of 10^unit: short labels, the unit
        # in the bar's label (matplotlib's own "1e-5" above the bar ran into the panel's title)
        self.unit = 0
        self.colorbar.formatter = FuncFormatter(
            lambda x, _pos: f"{round(x / 10.0**self.unit, 6) + 0.0:g}".replace("-", "\u2212")  # no -0, no 1e-17
        )
        self.tiles_image = self.ax_tiles.imshow(
            blank, cmap=KIND_CMAP, vmin=0, vmax=2, extent=extent, interpolation="nearest"
        )
        self.grids = [LineCollection([], colors="k", linewidths=0.5) for _grid in range(2)]
        titles = (_(UNCHANGED_TITLE), _("tile kinds"))
        for ax, grid, title in zip((self.ax_scores, self.ax_tiles), self.grids, titles, strict=True):
            ax.add_collection(grid)
            ax.set_xlabel(_("key m"), fontsize=9)
            ax.set_ylabel(_("query n"), fontsize=9)
            ax.set_title(title, fontsize=9)
            ax.tick_params(labelsize=8)
        # below both panels, in one row: above the right panel it ran into the left panel's title
        self.fig.legend(
            handles=[Patch(color=KIND_CMAP(i), label=_(name)) for i, name in enumerate(KIND_NAMES)],
            loc="outside lower center",
            ncol=3,
            fontsize=9,
            frameon=False,
        )
        self.title = self.fig.suptitle("", fontsize=10)
        self.live(self.scores_image, self.tiles_image, *self.grids, self.title)

    def _update(self, kind, param, block) -> None:
        ex = self.example(kind, param, block)
        self.scores_image.set_data(np.ma.masked_where(~ex.keep, ex.change))
        names = CHANGE_NAMES.get(kind)
        kept = ex.change[ex.keep]
        # (panel title, bar label, limits): the background they draw, redrawn when one of them changes
        view: tuple[str, str | None, tuple[float, float]]
        if names is None:
            view = (_(UNCHANGED_TITLE), None, (-1.0, 1.0))  # no bar: kept scores at the scale's middle colour
        else:
            limits = nice_limits(float(kept.min()), float(kept.max())) if kept.size else (-1.0, 1.0)
            view = (_(names[0]), _(names[1]), limits)
        if view != self._view:
            self._view = view
            title, label, (lo, hi) = view
            size = max(abs(lo), abs(hi))
            self.unit = int(np.floor(np.log10(size))) if size < 0.1 else 0
            if label is not None and self.unit:
                label = _("{quantity}, in units of 1e{unit}").format(quantity=label, unit=self.unit)
            self.ax_scores.set_title(title, fontsize=9)
            self.scores_image.set_clim(lo, hi)
            self.colorbar.ax.set_visible(label is not None)
            self.colorbar.set_label(label or "", fontsize=8)
            self.redraw_background(key=view)
        kinds = np.repeat(np.repeat(ex.blocks.kinds, block, axis=0), block, axis=1)[: self.N, : self.N]
        self.tiles_image.set_data(kinds)
        for grid in self.grids:
            grid.set_segments(_grid_segments(self.N, block))
        counts = ex.blocks.counts
        self.title.set_text(
            ex.note
            + "\n"
            + _(
                "{empty} skipped, {partial} partial, {full} full; {computed:.0%} computed, {masked:.0%} with mask work"
            ).format(
                empty=counts["empty"],
                partial=counts["partial"],
                full=counts["full"],
                computed=ex.blocks.computed_share,
                masked=ex.blocks.masked_share,
            )
        )


def plot_mask_example(
    example: Callable, *, kind: str = "causal", param: int = 8, block: int = 8, N: int = 64, dpi: int = 100
):
    """A static picture of :class:`MaskExplorerPlot` (the figure), at ``dpi`` (100, as the chapter's other static
    figures: a tick label about 11 pixels high)."""
    return MaskExplorerPlot(example, kind=kind, param=param, block=block, N=N, dpi=dpi, pyplot=True).fig


def plot_paged_cache(block_table, seqlens, page_size: int, n_pages: int, *, figsize=(8.0, 3.4)):
    """Logical pages of each sequence (top row, one group per sequence, side by side) and where they lie in the pool
    of physical pages (bottom row), an arrow per page: the arrows run between the two rows only, so none crosses a
    page box. Every page, logical or physical, is coloured over the fraction of its ``page_size`` slots that hold a
    token (thin lines mark the slots), with its number centred in the coloured part.
    ``block_table (B, max_pages)``, ``seqlens (B,)``: as :func:`flashmath.packed.paged_attention`."""
    import matplotlib.pyplot as plt

    table, lengths = np.asarray(block_table), np.asarray(seqlens)
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    B = len(lengths)
    top = 2.0  # the logical row is at y = top; the physical pool is the row at y = 0
    owner = {}

    def page(x, y, filled, color, label):
        """One page box at (x, y): coloured over filled / page_size of its width, a thin line between token slots."""
        width = filled / page_size * 0.9
        ax.add_patch(plt.Rectangle((x, y), width, 0.8, color=color, alpha=0.8))
        ax.add_patch(plt.Rectangle((x, y), 0.9, 0.8, fill=False, ec="k", lw=0.6))
        for slot in range(1, page_size):
            ax.plot([x + slot * 0.9 / page_size] * 2, [y, y + 0.8], color="k", lw=0.3, alpha=0.4)
        ax.text(x + (width if filled else 0.9) / 2, y + 0.4, label, ha="center", va="center", fontsize=9)

    start = 0  # the x of the group of sequence b: the groups follow each other, one empty slot between them
    for b in range(B):
        pages = -(-int(lengths[b]) // page_size)
        for j in range(pages):
            filled = min(page_size, int(lengths[b]) - j * page_size)
            x = start + j
            page(x, top, filled, colors(b), f"{j}")
            owner[int(table[b, j])] = (b, x, filled)
        ax.text(
            start + (pages - 0.1) / 2,
            top + 0.95,
            _("seq {b}: {tokens} tokens").format(b=b, tokens=int(lengths[b])),
            ha="center",
            va="bottom",
            fontsize=9,
            color=colors(b),
        )
        start += pages + 1
    for p in range(n_pages):
        b_x = owner.get(p)
        if b_x:  # a page in use: coloured as much as its logical page
            page(p, 0, b_x[2], colors(b_x[0]), f"{p}")
        else:  # a free page: grey, no slot lines
            ax.add_patch(plt.Rectangle((p, 0), 0.9, 0.8, color="#dddddd", alpha=0.8))
            ax.text(p + 0.45, 0.4, f"{p}", ha="center", va="center", fontsize=9)
        if b_x:
            b, x, _filled = b_x
            ax.annotate(
                "",
                xy=(p + 0.45, 0.8),
                xytext=(x + 0.45, top),
                arrowprops=dict(arrowstyle="->", lw=0.8, color=colors(b), alpha=0.8),
            )
    ax.set_xlim(-0.3, max(n_pages, start - 1) + 0.2)
    ax.set_ylim(-0.2, top + 1.4)
    ax.set_yticks([top + 0.4, 0.4], [_("logical pages"), _("physical pages")], fontsize=9)
    ax.set_xticks([])
    ax.set_title(
        _(
            "logical pages -> physical pages, through the block table (pages of {page_size} tokens, shading = filled)"
        ).format(page_size=page_size),
        fontsize=9,
    )
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return fig


def plot_gqa_heads(H: int, H_kv: int, *, figsize=(7.0, 2.2)):
    """Query heads (top) and the key/value head each reads (bottom): query head ``h`` reads kv head ``h // G``."""
    import matplotlib.pyplot as plt

    G = H // H_kv
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    for h in range(H):
        ax.add_patch(plt.Rectangle((h, 1.5), 0.8, 0.6, color=colors(h // G), alpha=0.8))
        ax.text(h + 0.4, 1.8, f"q{h}", ha="center", va="center", fontsize=12, color="w")
    width = H / H_kv
    for g in range(H_kv):
        x = g * width + (width - 0.8) / 2
        ax.add_patch(plt.Rectangle((x, 0), 0.8, 0.6, color=colors(g), alpha=0.8))
        ax.text(x + 0.4, 0.3, f"kv{g}", ha="center", va="center", fontsize=12, color="w")
        for h in range(g * G, (g + 1) * G):
            ax.plot([h + 0.4, x + 0.4], [1.5, 0.6], color=colors(g), lw=0.8)
    ax.set_xlim(-0.2, H)
    ax.set_ylim(-0.2, 2.3)
    ax.axis("off")
    ax.set_title(
        _(
            "grouped-query attention: H = {H} query heads, H_kv = {H_kv} kv heads, G = {G}: "
            "query head h reads kv head h // G"
        ).format(H=H, H_kv=H_kv, G=G),
        fontsize=9,
    )
    return fig
