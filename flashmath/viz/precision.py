"""Chapter 9: the error of every attention variant by input dtype and tile size, and fa2's growing accumulator."""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.precision import unit_roundoff
from flashmath.viz.axes import finite_or_nan, index, set_heights
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, LEGEND_ABOVE, UNSEEN

__all__ = ["PrecisionPlot", "plot_precision_study", "plot_accumulator_growth"]

DTYPE_COLORS = {"float16": "#d62728", "bfloat16": "#ff7f0e", "float32": "#1f77b4", "float64": "#2ca02c"}
# the rounded reference differs from itself nowhere: no bar
BAR_VARIANTS = ("naive", "rounded P", "one_loop", "two_loop", "fa1", "fa2")
# no collisions; translated where they are drawn
BAR_LABELS = {"rounded P": N_("P\nrounded"), "one_loop": N_("one\nloop"), "two_loop": N_("two\nloop")}
DTYPE_MARKERS = {"float16": "o", "bfloat16": "^", "float32": "s", "float64": "D"}  # overlapping lines stay apart
SHARE_FLOOR = 1e-4  # percent: the bottom of the log axis (a share of 0 draws nothing)


def _block_label(block) -> str:
    block_q, block_k = block
    return str(block_q) if block_q == block_k else f"{block_q}x{block_k}"


class PrecisionPlot(LivePlot):
    """A :class:`flashmath.precision.PrecisionStudy` at one tile size: errors by dtype and variant.

    One code throughout: the colour (and marker) is the dtype. Left: the largest error of fa2 (solid, markers) at
    every tile size and of naive low-precision attention (dotted), relative to the size of the output and in units
    of the dtype's unit roundoff ``u`` (so that float16, bfloat16 and float32 share one axis; float16's and
    bfloat16's fa2 lines lie on top of each other, on the floor, and their markers tell them apart); a dotted
    vertical line marks the tile size shown. Right: for that tile size, the share of output elements that differ
    from the float64 reference rounded to the dtype, grouped by variant, one bar per dtype (log axis).
    ``update(block=i)``, an index into ``study.blocks``.

    Args:
        study: from :func:`flashmath.precision.precision_study`.
        block: the index of the tile size shown first.
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        TypeError: ``study`` not a PrecisionStudy; ``block`` not an integer. ValueError: ``block`` out of range.
    """

    def __init__(self, study, *, block: int = 0, figsize=(9.5, 4.0), dpi: int = DPI, pyplot: bool = False):
        if not all(hasattr(study, name) for name in ("dtypes", "blocks", "rel_error", "misrounded")):
            raise TypeError(f"study must come from flashmath.precision.precision_study, got {type(study).__name__}")
        self.study = study
        self.u = np.array([unit_roundoff(d) for d in study.dtypes])  # (n_dtypes,)
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, block=block)

    def __len__(self) -> int:
        return len(self.study.blocks)

    def _build(self) -> None:
        study = self.study
        xs = np.arange(len(study.blocks))
        ax_e, ax_m = self.fig.subplots(1, 2, width_ratios=(1.15, 1))

        for i, dtype in enumerate(study.dtypes):
            color = DTYPE_COLORS.get(dtype, UNSEEN)
            in_u = finite_or_nan(study.rel_error[i] / self.u[i])  # (n_variants, n_blocks)
            ax_e.plot(
                xs,
                in_u[study.variants.index("fa2")],
                "-",
                marker=DTYPE_MARKERS.get(dtype, "o"),
                color=color,
                ms=6,
                mfc="none",
                mew=1.5,
                lw=1.5,
            )
            ax_e.plot(xs, in_u[study.variants.index("naive")], ":", color=color, lw=1.8)
        self.cursor = ax_e.axvline(0, color="k", ls=":", lw=1)
        drawn = [study.variants.index(v) for v in ("fa2", "naive")]
        ax_e.set_ylim(0, 1.15 * np.nanmax(finite_or_nan(study.rel_error[:, drawn] / self.u[:, None, None])))
        ax_e.set_xticks(xs, [_block_label(b) for b in study.blocks])
        ax_e.set_xlim(-0.4, len(xs) - 0.6)
        ax_e.set_xlabel(_("tile size $B_r = B_c$"))
        ax_e.set_ylabel(_("largest error, in units of u max|A|"))
        handles = [
            Line2D(
                [], [], color=DTYPE_COLORS.get(d, UNSEEN), marker=DTYPE_MARKERS.get(d, "o"), mfc="none", lw=2, label=d
            )
            for d in study.dtypes
        ]
        handles += [
            Line2D([], [], color="k", ls="-", lw=1.5, label="fa2"),
            Line2D([], [], color="k", ls=":", lw=1.8, label=_("naive")),
        ]
        ax_e.legend(handles=handles, ncol=len(handles), handlelength=1.8, columnspacing=1.0, **LEGEND_ABOVE)

        width = 0.8 / len(study.dtypes)
        groups = np.arange(len(BAR_VARIANTS))
        offsets = (np.arange(len(study.dtypes)) - (len(study.dtypes) - 1) / 2) * width
        colors = [DTYPE_COLORS.get(d, UNSEEN) for d in study.dtypes]
        self.bars = {
            variant: ax_m.bar(
                v + offsets,
                np.full(len(study.dtypes), SHARE_FLOOR),
                width,
                bottom=0,
                color=colors,
                edgecolor="k",
                lw=0.5,
            )
            for v, variant in enumerate(BAR_VARIANTS)
        }
        ax_m.set_yscale("log")
        ax_m.set_ylim(SHARE_FLOOR, 200)
        # plain numbers (0.001, ..., 100), as large as every other label: the exponents of 10^-3 were 6 px tall
        ax_m.yaxis.set_major_formatter(FuncFormatter(lambda share, _pos: f"{share:g}"))
        ax_m.set_xticks(groups, [_(BAR_LABELS.get(v, v)) for v in BAR_VARIANTS])  # fa1, fa2: not in the catalog
        ax_m.set_ylabel(_("%% of outputs not correctly rounded") % ())  # a python-format message: "%%" is "%"
        ax_m.legend(
            handles=[
                Patch(facecolor=c, edgecolor="k", lw=0.5, label=d) for c, d in zip(colors, study.dtypes, strict=False)
            ],
            ncol=len(study.dtypes),
            **LEGEND_ABOVE,
        )
        self.title = self.fig.suptitle("", fontsize=10)
        self.live(self.cursor, self.bars["fa1"], self.bars["fa2"], self.title)
        for variant in BAR_VARIANTS[:4]:  # the same at every tile size: drawn once, in the background
            j = study.variants.index(variant)
            set_heights(self.bars[variant], np.maximum(100 * study.misrounded[:, j, 0], SHARE_FLOOR))

    def _update(self, block) -> None:
        study = self.study
        b = index(block, "block", len(study.blocks), f" (the study has {len(study.blocks)} tile sizes)")
        self.cursor.set_xdata([b, b])
        for variant in ("fa1", "fa2"):
            j = study.variants.index(variant)
            set_heights(self.bars[variant], np.maximum(100 * study.misrounded[:, j, b], SHARE_FLOOR))
        ratios = ", ".join(f"{dtype} {study.ratio(dtype)[b]:.2f}" for dtype in study.dtypes)
        block_q, block_k = study.blocks[b]
        self.title.set_text(
            _(
                "tiles {block_q} x {block_k}.  fa2 error / naive error vs float64 (FlashAttention's rule: at most "
                "2): {ratios}"
            ).format(block_q=block_q, block_k=block_k, ratios=ratios)
        )


def plot_precision_study(study, *, block: int = 0, figsize=(9.5, 4.0)):
    """A static picture of :class:`PrecisionPlot` at tile size index ``block`` (a pyplot figure, shown by Jupyter)."""
    return PrecisionPlot(study, block=block, figsize=figsize, pyplot=True).fig


def plot_accumulator_growth(
    fa2_trace, fa1_trace, *, limit: float = float(np.finfo(np.float16).max), figsize=(7.5, 3.4)
):
    """The largest output state of each loop order after every key tile, against float16's largest value.

    fa2 keeps the unnormalised ``acc = s A'``, which grows with the running sum ``s`` (about the number of keys
    seen when the scores are alike); fa1 keeps the normalised ``A'``, an average of value rows. A static pyplot
    figure.

    Args:
        fa2_trace, fa1_trace: :func:`flashmath.flash_trace` of the same inputs with ``order="fa2"`` and
            ``"fa1"`` and one query tile (``block_q >= N``), so that each step is one key tile.
        limit: the largest finite value of the dtype the state would be kept in (default float16's, 65504).

    Returns:
        matplotlib Figure.

    Raises:
        ValueError: a trace with more than one query tile.
    """
    import matplotlib.pyplot as plt

    for trace in (fa2_trace, fa1_trace):
        if trace.grid[0] != 1:
            raise ValueError(
                f"plot_accumulator_growth needs traces with one query tile (block_q >= N), got "
                f"{trace.grid[0]} query tiles"
            )
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    for trace, state, label, color in (
        (fa2_trace, fa2_trace.acc, "fa2: max |U| = max |s A'|", "#1f77b4"),
        (fa1_trace, fa1_trace.a, "fa1: max |A'|", "#9467bd"),
    ):
        keys = trace.cols[:, 1]  # keys seen after each step
        biggest = np.abs(state.reshape(len(trace), -1)).max(axis=1)
        ax.plot(keys, biggest, "o-", ms=3, color=color, label=label)
    ax.axhline(
        limit, color=DTYPE_COLORS["float16"], ls="--", lw=1, label=_("largest float16 ({limit:g})").format(limit=limit)
    )
    ax.set_yscale("log")
    ax.set_xlabel(_("keys seen"))
    ax.set_ylabel(_("largest entry of the kept output state"))
    ax.legend(fontsize=8)
    return fig
