"""Live figures of the tile-size trade-offs: memory traffic against the head dimension (chapter 6) and the
operations besides the matrix products against the tile size (chapter 7).

Both plots draw tables computed by :mod:`flashmath` (:func:`flashmath.traffic.tile_traffic_table` from
:func:`flashmath.traffic.attention_traffic`, :func:`flashmath.opcount.op_count_table` from
:func:`flashmath.opcount.count_ops`); nothing here computes attention.
"""

from __future__ import annotations

import numpy as np

from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.opcount import OPS
from flashmath.viz.axes import set_heights
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, HOLD, JUMP, SEEN, UNSEEN

#: The operations' names on an axis, translated where they are drawn ("exp" and "matmul" are code: kept as they are).
OP_LABELS = {
    "multiply": N_("multiply"),
    "divide": N_("divide"),
    "add": N_("add"),
    "subtract": N_("subtract"),
    "maximum": N_("maximum"),
    "equal": N_("equal"),
    "rest": N_("equal, log"),
}


def op_labels(names) -> list[str]:
    """The tick labels of the operations ``names`` (``flashmath.opcount.OPS``) in the selected language."""
    return [_(OP_LABELS[name]) if name in OP_LABELS else name for name in names]


__all__ = ["TileTrafficPlot", "OpsPerScorePlot"]

FA1_COLOR = "#9467bd"  # the fa1 colour of the tile sweep (viz.tiles.ORDER_COLORS)


def _pick(value, options, name: str):
    """``value`` if it is one of ``options``, else a ValueError that lists them."""
    options = list(options)
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


class TileTrafficPlot(LivePlot):
    """Chapter 6: HBM traffic per score of fa2, fa1 and standard attention against the tile size, for one ``D``.

    Left: elements moved per score ``N M`` (log scale) against ``B = B_r = B_c``: fa2 (about ``2 D / B``), fa1
    (about ``3 D / B``), standard attention (about 4, whatever ``B``), and a marker at the chosen ``B``. The
    dotted vertical line is ``B = D / 2``, where fa2's re-reads of ``K`` and ``V`` equal standard attention's
    passes over ``X`` and ``Y``. The title gives the ratio fa2 / standard at the chosen ``B``.

    Args:
        table: from :func:`flashmath.traffic.tile_traffic_table`: ``blocks``, ``dims``, ``N`` and, for each of
            ``"fa2"``, ``"fa1"``, ``"standard"``, an array ``(len(dims), len(blocks))`` of elements per score.
        block: the tile size shown first (one of ``table["blocks"]``). D: the head dimension shown first (one of
            ``table["dims"]``).

    Raises:
        ValueError: ``block`` or ``D`` not in the table.
    """

    def __init__(self, table, *, block=64, D=64, figsize=(7.2, 3.6), dpi=DPI, pyplot=False):
        self.table = table
        self.blocks = [int(b) for b in table["blocks"]]
        self.dims = [int(d) for d in table["dims"]]
        _pick(block, self.blocks, "block")
        _pick(D, self.dims, "D")
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, block=block, D=D)

    def _build(self):
        ax = self.fig.subplots()
        t = self.table
        values = np.concatenate([np.ravel(t[name]) for name in ("fa2", "fa1", "standard")])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(self.blocks, [str(b) for b in self.blocks])
        ax.set_xlim(self.blocks[0] / 1.3, self.blocks[-1] * 1.3)
        ax.set_ylim(values.min() / 1.6, values.max() * 1.6)
        ax.set_xlabel(_("tile size $B = B_r = B_c$"))
        ax.set_ylabel(_("elements moved per score (total / $NM$)"))
        ax.grid(True, which="major", alpha=0.3)
        (self.fa2,) = ax.plot([], [], "o-", color=SEEN, label=_("fa2 ($K$, $V$ re-read $N / B_r$ times)"))
        (self.fa1,) = ax.plot([], [], "s--", color=FA1_COLOR, label=_("fa1 ($Q$, $A$ re-read $M / B_c$ times)"))
        (self.standard,) = ax.plot([], [], "-", color=HOLD, lw=2, label=_("standard ($X$, $Y$ written and read)"))
        self.crossover = ax.axvline(1.0, color=UNSEEN, ls=":", lw=1.5, label="$B = D/2$")
        (self.marker,) = ax.plot([], [], "o", ms=12, mfc="none", mec=JUMP, mew=2, label=_("chosen tile size"))
        ax.legend(loc="upper right", fontsize=9)
        self.title = ax.set_title("", fontsize=11)
        self.live(self.fa2, self.fa1, self.standard, self.crossover, self.marker, self.title)

    def _update(self, block, D):
        _pick(block, self.blocks, "block")
        row = self.dims.index(_pick(D, self.dims, "D"))
        col = self.blocks.index(block)
        t = self.table
        self.fa2.set_data(self.blocks, t["fa2"][row])
        self.fa1.set_data(self.blocks, t["fa1"][row])
        self.standard.set_data(self.blocks, t["standard"][row])
        self.crossover.set_xdata([D / 2, D / 2])
        self.marker.set_data([block], [t["fa2"][row, col]])
        ratio = t["fa2"][row, col] / t["standard"][row, col]
        self.title.set_text(
            _("$N = M$ = {N}, $D$ = {D}, $B$ = {block}: fa2 moves {ratio:.2f}× standard's traffic").format(
                N=t["N"], D=D, block=block, ratio=ratio
            )
        )


class OpsPerScorePlot(LivePlot):
    """Chapter 7: the operations besides the matrix products, per score, of fa1 and fa2 against the tile size.

    Left: non-matmul operations per score against ``B = B_r = B_c`` (fa1 dashed, fa2 solid), with a marker at the
    chosen ``B``. Right: for that ``B``, the operations per score by kind, fa1 and fa2 side by side; the last bar is
    what :data:`flashmath.opcount.OPS` leaves out of ``"non_matmul"`` (the guards' ``equal`` and fa2's ``log``), so
    that the bars add up to the non-matmul count in the title.

    Args:
        table: from :func:`flashmath.opcount.op_count_table`: ``blocks``, ``N``, ``D`` and, for ``"fa1"`` and
            ``"fa2"``, a dict of operation name -> array over ``blocks`` (per score), with ``"non_matmul"``.
        block: the tile size shown first (one of ``table["blocks"]``).
        fit: False (a widget) keeps one y range on the right for every tile size, that of the smallest tiles, so
            that the axis does not jump under the slider; True (a static picture of one size) fits it to the bars
            of the size shown.

    Raises:
        ValueError: ``block`` not in the table.
    """

    def __init__(self, table, *, block=8, fit=False, figsize=(8.0, 3.4), dpi=DPI, pyplot=False):
        self.table = table
        self.blocks = [int(b) for b in table["blocks"]]
        self.fit = bool(fit)
        _pick(block, self.blocks, "block")
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, block=block)

    def _build(self):
        left, right = self.fig.subplots(1, 2, width_ratios=[1.1, 1])
        t = self.table
        left.set_xscale("log", base=2)
        left.set_xticks(self.blocks, [str(b) for b in self.blocks])
        for order, style, color in (("fa1", "s--", FA1_COLOR), ("fa2", "o-", SEEN)):
            left.plot(self.blocks, t[order]["non_matmul"], style, color=color, label=order)
        left.set_ylim(0, 1.1 * max(t["fa1"]["non_matmul"].max(), t["fa2"]["non_matmul"].max()))
        left.set_xlabel(_("tile size $B = B_r = B_c$"))
        left.set_ylabel(_("non-matmul operations per score"))
        left.grid(True, alpha=0.3)
        left.legend(loc="upper right", fontsize=9)
        (self.marker,) = left.plot([], [], "o", ms=12, mfc="none", mec=JUMP, mew=2)
        self.kinds = {o: self._kinds(o) for o in ("fa1", "fa2")}
        x = np.arange(len(OPS) + 1)
        width = 0.38
        top = max(self.kinds[o].max() for o in ("fa1", "fa2"))
        self.bars = {}
        for shift, order, color in ((-width / 2, "fa1", FA1_COLOR), (width / 2, "fa2", SEEN)):
            self.bars[order] = right.bar(x + shift, np.zeros(len(x)), width, color=color, label=order)
        right.set_xticks(x, op_labels((*OPS, "rest")), rotation=30, ha="right")
        right.set_ylim(0, 1.15 * top)
        right.grid(True, axis="y", alpha=0.3)
        self.right = right
        right.set_ylabel(_("per score"))
        right.legend(loc="upper right", fontsize=9)
        self.title = self.fig.suptitle("", fontsize=10, wrap=True)  # wrapped where a translation is longer
        self.live(self.marker, self.bars["fa1"], self.bars["fa2"], self.title)

    def _kinds(self, order):
        """``(kinds + 1, blocks)``: the per-score counts of :data:`OPS`, then the rest of ``"non_matmul"``."""
        t = self.table[order]
        named = np.array([t[name] for name in OPS])
        return np.vstack([named, t["non_matmul"] - named.sum(axis=0)])

    def _update(self, block):
        col = self.blocks.index(_pick(block, self.blocks, "block"))
        t = self.table
        self.marker.set_data([block], [t["fa2"]["non_matmul"][col]])
        for order in ("fa1", "fa2"):
            set_heights(self.bars[order], self.kinds[order][:, col])
        if self.fit:  # the y range of this tile size's bars: a new background for each size
            top = max(self.kinds[o][:, col].max() for o in ("fa1", "fa2"))
            self.right.set_ylim(0, 1.15 * top)
            self.redraw_background(key=block, changed=[self.right.yaxis])
        self.title.set_text(
            _(
                "$N = M$ = {N}, $D$ = {D}, $B$ = {block}: exp per score fa1 {exp1:.3f}, fa2 {exp2:.3f}; "
                "non-matmul fa1 {other1:.2f}, fa2 {other2:.2f}"
            ).format(
                N=t["N"],
                D=t["D"],
                block=block,
                exp1=t["fa1"]["exp"][col],
                exp2=t["fa2"]["exp"][col],
                other1=t["fa1"]["non_matmul"][col],
                other2=t["fa2"]["non_matmul"][col],
            )
        )
