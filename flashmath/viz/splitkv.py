"""Chapter 10: split-KV decoding, the key ranges, their partial results and the tree that merges them."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

from flashmath._checks import integer
from flashmath.i18n import gettext as _
from flashmath.viz.axes import finite_or_nan, limits
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DIM_COLORS, DPI, LEGEND_ABOVE

__all__ = ["SplitKVPlot"]

RANGE_COLORS = ["#1f77b4", "#ff7f0e"]  # neighbouring key ranges alternate


class SplitKVPlot(LivePlot):
    """One query's keys split into ``p`` ranges, each range's own output, and the tree that merges them.

    Top: the scores ``x_m`` of the keys ``m = 1..M``, coloured by range (the range boundaries dotted). Middle: the
    merge tree, leaves first: each node sits over the keys it covers and shows its logsumexp ``L``; the root is
    the result. Bottom: a few output dimensions of each range's own output ``A_p`` (dots, one per range) and of the
    merged output (dashed), which equals attention over all the keys. ``update(splits=p)``.

    Args:
        traces: ``{p: SplitKVTrace}`` from :func:`flashmath.split_kv_trace` for one query (``N = 1``, 2-D inputs),
            the same inputs for every ``p``.
        scores: ``(M,)`` the query's scores, for the top panel.
        dims: the output dimensions to draw (default: the first ``min(3, Dv)``).
        splits: the number of ranges shown first (a key of ``traces``).
        figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: no traces, traces of more than one query, ``splits`` not among them, ``scores`` of the wrong
        length. TypeError: ``splits`` not an integer.
    """

    def __init__(
        self,
        traces: dict,
        scores,
        *,
        dims=None,
        splits: int | None = None,
        figsize=(9.0, 6.4),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        if not traces:
            raise ValueError("traces must map split counts to flashmath.split_kv_trace results")
        first = next(iter(traces.values()))
        if np.shape(first.output)[:-1] != (1,):
            raise ValueError(
                f"SplitKVPlot draws one query (N = 1, 2-D inputs); got outputs of shape {np.shape(first.output)}"
            )
        self.traces = dict(sorted(traces.items()))
        self.scores = np.asarray(scores, dtype=np.float64)
        self.M = first.ranges[-1][1]
        if self.scores.shape != (self.M,):
            raise ValueError(f"scores must have shape (M,) = ({self.M},), got {self.scores.shape}")
        Dv = np.shape(first.output)[-1]
        self.dims = list(range(min(3, Dv))) if dims is None else [int(d) for d in dims]
        self.max_nodes = max(sum(len(level) for level in t.levels) for t in self.traces.values())
        self.max_levels = max(len(t.levels) for t in self.traces.values())
        splits = next(iter(self.traces)) if splits is None else splits
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, splits=splits)

    def _build(self) -> None:
        M = self.M
        keys = np.arange(1, M + 1)
        self.ax_x, self.ax_t, self.ax_a = self.fig.subplots(3, 1, height_ratios=[1, 1.3, 1.2])
        ax_x, ax_t, ax_a = self.ax_x, self.ax_t, self.ax_a
        # half a range of the most split trace on each side: the first and last leaf labels clear the axes' edges
        pad = M / (2 * max(self.traces))
        self.xlim = (0.5 - pad, M + 0.5 + pad)
        for ax in (ax_x, ax_t):
            ax.set_xlim(*self.xlim)
        self.x_bars = ax_x.bar(keys, finite_or_nan(self.scores), color=RANGE_COLORS[0], width=0.8)
        self.boundaries = ax_x.vlines([], 0, 1, transform=ax_x.get_xaxis_transform(), colors="k", linestyles=":")
        ax_x.set_ylim(*limits(self.scores))
        ax_x.set_ylabel(_("score $x_m$"))
        ax_x.set_xlabel(_("key m"))

        self.tree_levels: int | None = None  # the levels the tree axis shows: set by _update, to the trace's own
        self._tree_axis(self.max_levels)
        ax_t.tick_params(axis="x", labelbottom=False, length=0)
        for side in ("top", "right", "bottom"):
            ax_t.spines[side].set_visible(False)
        self.edges = LineCollection([], colors="0.6", linewidths=1)
        ax_t.add_collection(self.edges)
        self.node_dots = ax_t.plot([], [], "o", color="0.3", ms=4)[0]
        self.nodes = [
            # the tree is drawn with elbows (a child's edge drops straight down to a bar halfway between the
            # levels, and the parent's stub rises straight up from it): no edge runs level with a dot or above a leaf
            ax_t.annotate(
                "", (0, 0), xytext=(5, 0), textcoords="offset points", va="center", fontsize=10, visible=False
            )
            for _node in range(self.max_nodes)
        ]
        ax_t.set_title(_("each node: the logsumexp $L$ of the keys below it"), fontsize=10, loc="right")

        parts_all = [a for t in self.traces.values() for a, _lse in t.parts]
        values = np.concatenate(
            [np.ravel(np.asarray(a)[..., self.dims]) for a in parts_all]
            + [np.ravel(next(iter(self.traces.values())).output[..., self.dims])]
        )
        ax_a.set_xlim(*self.xlim)
        ax_a.set_ylim(*limits(values))
        ax_a.set_xlabel(_("key m (each range's output drawn at the middle of its keys)"))
        # two lines in Chinese (review zhrev-aq-10-1: one was taller than its axes), spaced so that the first line's
        # subscript clears the second; one line in English, drawn as before
        label = _("$A_p$ (dots), merged (--)")
        ax_a.set_ylabel(label, **({"linespacing": 1.5} if "\n" in label else {}))
        self.part_dots, self.merged_lines = [], []
        for color, _d in zip(DIM_COLORS, self.dims, strict=False):  # not "_": the gettext of this module
            self.part_dots.append(ax_a.plot([], [], "o", color=color, ms=5)[0])
            self.merged_lines.append(ax_a.axhline(np.nan, color=color, ls="--", lw=1))
        ax_a.legend(
            handles=[
                Line2D([], [], color=c, marker="o", ls="--", label=_("dim {d}").format(d=d))
                for c, d in zip(DIM_COLORS, self.dims, strict=False)
            ],
            ncol=len(self.dims),
            **{**LEGEND_ABOVE, "fontsize": 9},  # 9 points: at the notebook's dpi=100 its letters are 9 px high
        )
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(
            self.x_bars,
            self.boundaries,
            self.edges,
            self.node_dots,
            *self.nodes,
            *self.part_dots,
            *self.merged_lines,
            self.title,
        )

    def _tree_axis(self, levels: int) -> bool:
        """Show ``levels`` rows in the tree axis (leaves on top, no empty merge rows below the root); True when that
        changed the axis."""
        if levels == self.tree_levels:
            return False
        self.tree_levels = levels
        self.ax_t.set_ylim(levels - 0.4, -0.6)
        self.ax_t.set_yticks(range(levels), [_("ranges")] + [_("merge {k}").format(k=k) for k in range(1, levels)])
        return True

    def _update(self, splits) -> None:
        splits = integer(splits, "splits")
        if splits not in self.traces:
            raise ValueError(f"splits must be one of {list(self.traces)}, got {splits}")
        trace = self.traces[splits]
        if self._tree_axis(len(trace.levels)):
            self.redraw_background(key=len(trace.levels), changed=[self.ax_t.yaxis])
        for p, (c0, c1) in enumerate(trace.ranges):
            for bar in self.x_bars.patches[c0:c1]:
                bar.set_facecolor(RANGE_COLORS[p % 2])
        self.boundaries.set_segments([[(c1 + 0.5, 0), (c1 + 0.5, 1)] for _c0, c1 in trace.ranges[:-1]])

        # the tree: a node covers a span of keys; its parent covers the union of its children's spans
        spans = [list(trace.ranges)]
        for _level in trace.levels[1:]:
            below = spans[-1]
            above = [(below[i][0], below[i + 1][1]) for i in range(0, len(below) - 1, 2)]
            if len(below) % 2:
                above.append(below[-1])
            spans.append(above)
        k, segments, points = 0, [], []
        for depth, (level, level_spans) in enumerate(zip(trace.levels, spans, strict=False)):
            crowded = len(level) > 6  # labels closer than about 7 keys: the value alone, without "$L$="
            for (_part, lse), (c0, c1) in zip(level, level_spans, strict=False):
                x = (c0 + c1) / 2 + 0.5
                node = self.nodes[k]
                points.append((x, depth))
                # a leaf's label sits above it (no edge there); a merged node's beside it, to the right unless it
                # is near the right edge
                left = depth > 0 and x > 0.9 * self.M
                node.xy = (x, depth)
                node.set_position((-5 if left else 5, 0) if depth else (0, 4))
                node.set_horizontalalignment("right" if left else "left" if depth else "center")
                node.set_verticalalignment("center" if depth else "bottom")  # a leaf's digits clear its dot
                lse = float(np.ravel(lse)[0])
                value = f"{lse:.2f}" if np.isfinite(lse) else f"{lse}"
                node.set_text(value if crowded else f"$L$={value}")
                node.set_visible(True)
                k += 1
                if depth:
                    children = [
                        (c_span[0] + c_span[1]) / 2 + 0.5
                        for c_span in spans[depth - 1]
                        if c_span[0] >= c0 and c_span[1] <= c1
                    ]
                    bar = depth - 0.5
                    segments += [[(cx, depth - 1), (cx, bar)] for cx in children]
                    segments += [[(min(children), bar), (max(children), bar)], [(x, bar), (x, depth)]]
        for node in self.nodes[k:]:
            node.set_visible(False)
        self.edges.set_segments(segments)
        self.node_dots.set_data(*zip(*points, strict=False))

        middles = [(c0 + c1) / 2 + 0.5 for c0, c1 in trace.ranges]
        for dot, line, d in zip(self.part_dots, self.merged_lines, self.dims, strict=False):
            values = [
                float(np.ravel(np.asarray(a)[..., d])[0]) if c1 > c0 else np.nan
                for (a, _lse), (c0, c1) in zip(trace.parts, trace.ranges, strict=False)
            ]
            dot.set_data(middles, values)
            merged = float(np.ravel(trace.output[..., d])[0])
            line.set_ydata([merged, merged])
        sizes = [c1 - c0 for c0, c1 in trace.ranges]  # split_ranges: sizes differ by at most 1
        small, large = min(sizes), max(sizes)
        if splits == 1:
            ranges = _("1 key range of {keys} keys").format(keys=large)
        elif small == large:
            ranges = _("{splits} key ranges of {keys} keys each").format(splits=splits, keys=large)
        else:
            ranges = _("{splits} key ranges of {small} or {large} keys").format(splits=splits, small=small, large=large)
        levels = len(trace.levels) - 1
        if levels == 0:  # one range: the slider's lowest setting
            merged_in = _("nothing to merge")
        else:
            merged_in = (_("merged in {levels} level") if levels == 1 else _("merged in {levels} levels")).format(
                levels=levels
            )
        self.title.set_text(
            _("{ranges}, {merged}: $L$ = {lse:.4f}").format(
                ranges=ranges, merged=merged_in, lse=float(np.ravel(trace.lse)[0])
            )
        )
