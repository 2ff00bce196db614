"""Chapter 12: the backward kernels' sweep over the tiles.

:class:`BackwardSweepPlot` draws the grid of (query tile, key tile) pairs, the pairs visited so far and the one of
the current step, with a strip above for the key tiles (``dK_j``, ``dV_j``: not started, on chip, written to HBM)
and a strip on the left for the query tiles (``dQ_i``: 0, on chip or partial sums in HBM, final), both keyed above
the grid. The steps are :func:`flashmath.triton_backward.backward_schedule` (pure Python: no Triton needed to draw).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from flashmath.backward import DQ_MODES, check_dq_mode
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.axes import index
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI

__all__ = ["BackwardSweepPlot", "plot_loss_curves"]

PAIR_COLORS = ListedColormap(["#f2f2f2", "#9ecae1", "#d62728", "#ffffff"])  # not yet, visited, now, never (causal)
#: the legend of the main grid, one entry per colour of PAIR_COLORS (msgids: gettext at draw time)
PAIR_LABELS = (N_("to do"), N_("done by this kernel"), N_("current tile"), N_("never visited (causal)"))
STATE_COLORS = ListedColormap(["#f2f2f2", "#fdae6b", "#2ca02c"])  # 0 / on chip or partial / final in HBM


class BackwardSweepPlot(LivePlot):
    """The backward's tile sweep, one step per (kernel, query tile, key tile) visit.

    Args:
        N, M: queries and keys (at least 1 each). block_q, block_k: ``B_r``, ``B_c``. causal: bottom-right causal
            (hidden tile pairs are never visited). dq_mode, step: the first state shown; ``update(step=...,
            dq_mode=...)`` shows another (a step past the shorter atomic sweep shows its last step).

    Raises:
        ValueError: as :func:`flashmath.triton_backward.backward_schedule`; a step outside ``0..len(plot) - 1``.
    """

    def __init__(
        self,
        N: int,
        M: int,
        *,
        block_q: int = 16,
        block_k: int = 16,
        causal: bool = False,
        dq_mode: str = "separate",
        step: int = 0,
        figsize=(6.4, 5.0),
        dpi: int = DPI,
        pyplot: bool = False,
    ):
        from flashmath.triton_backward import backward_schedule

        self.schedules = {
            mode: backward_schedule(N, M, block_q, block_k, causal=causal, dq_mode=mode) for mode in DQ_MODES
        }
        check_dq_mode(dq_mode)
        self.n_q, self.n_k = -(-N // block_q), -(-M // block_k)
        visited = np.zeros((self.n_q, self.n_k), bool)
        for _kernel, i, j in self.schedules["separate"]:
            visited[i, j] = True
        self.never = ~visited  # tile pairs no kernel visits (causal)
        self.steps = self.schedules[dq_mode]
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step, dq_mode=dq_mode)

    def __len__(self) -> int:
        """The steps of the longer schedule (the separate dQ pass)."""
        return len(self.schedules["separate"])

    def _build(self) -> None:
        grid = self.fig.add_gridspec(2, 2, width_ratios=(1, 12), height_ratios=(1, 10))
        ax_k = self.fig.add_subplot(grid[0, 1])
        ax_q = self.fig.add_subplot(grid[1, 0])
        ax = self.fig.add_subplot(grid[1, 1], sharex=ax_k, sharey=ax_q)
        kw: dict[str, Any] = dict(aspect="auto", interpolation="nearest", vmin=0)
        self.pairs = ax.imshow(np.zeros((self.n_q, self.n_k)), cmap=PAIR_COLORS, vmax=3, **kw)
        self.keys = ax_k.imshow(np.zeros((1, self.n_k)), cmap=STATE_COLORS, vmax=2, **kw)
        self.queries = ax_q.imshow(np.zeros((self.n_q, 1)), cmap=STATE_COLORS, vmax=2, **kw)
        ax.set_xlabel(_("key tile $j$"), fontsize=10)
        ax_q.set_ylabel(_("query tile $i$"), fontsize=10)
        self.key = ax_k.set_title("\n", fontsize=10, loc="left")  # the strips' colours, dQ_i's by dq_mode (_update)
        ax_q.set_xticks([])
        ax_k.set_yticks([])
        ax_q.set_xlabel("$dQ_i$", fontsize=10)
        for a in (ax, ax_k, ax_q):
            a.tick_params(labelsize=10)
        handles = [
            Patch(facecolor=PAIR_COLORS(k), edgecolor="#999999", label=_(label)) for k, label in enumerate(PAIR_LABELS)
        ]
        self.fig.legend(
            handles=handles, loc="outside lower center", ncols=2, fontsize=10, frameon=False, handlelength=1.2
        )
        ax.set_xticks(range(self.n_k), [str(j) for j in range(self.n_k)])
        ax_q.set_yticks(range(self.n_q), [str(i) for i in range(self.n_q)])
        ax.tick_params(labelleft=False)
        ax_k.tick_params(labelbottom=False)
        self.title = self.fig.suptitle("", fontsize=11)
        self.live(self.pairs, self.keys, self.queries, self.title, self.key)

    def _update(self, step, dq_mode="separate") -> None:
        check_dq_mode(dq_mode)
        self.dq_mode, self.steps = dq_mode, self.schedules[dq_mode]
        step = min(index(step, "step", len(self)), len(self.steps) - 1)  # the atomic sweep is shorter: its last step
        kernel, i, j = self.steps[step]
        pairs = np.where(self.never, 3, 0)
        for kernel2, i2, j2 in self.steps[:step]:
            if kernel2 == kernel:  # the pairs this kernel has visited so far
                pairs[i2, j2] = 1
        pairs[i, j] = 2
        keys = np.zeros(self.n_k)
        queries = np.zeros(self.n_q)
        if kernel == "dkdv":
            keys[:j] = 2  # earlier key tiles: dK_j, dV_j written to HBM
            keys[j] = 1  # this program's dK_j, dV_j: on chip
            if self.dq_mode == "atomic":
                last = {i2: k for k, (_kernel, i2, _j) in enumerate(self.steps)}  # not "_": this module's gettext
                for _kernel, i2, _j in self.steps[: step + 1]:
                    queries[i2] = 2 if last[i2] < step else 1  # every add done: complete; else partial sums
            rule = _("dK_{j}, dV_{j} += ... (on chip)").format(j=j) + (
                _(";  dQ_{i} += atomically in HBM").format(i=i) if self.dq_mode == "atomic" else ""
            )
        else:
            keys[:] = 2
            queries[:i] = 2  # earlier query tiles: dQ_i written
            queries[i] = 1  # this program's dQ_i, on chip
            rule = _("dQ_{i} += dX K_{j} (on chip)").format(i=i, j=j)
        dq_key = (
            _("dQ_i (left): grey 0, orange partial sums in HBM, green complete")
            if self.dq_mode == "atomic"
            else _("dQ_i (left): grey 0, orange on chip, green written")
        )
        self.key.set_text(_("dK_j, dV_j: grey 0, orange on chip, green written") + "\n" + dq_key)
        self.pairs.set_data(pairs)
        self.keys.set_data(keys[None, :])
        self.queries.set_data(queries[:, None])
        name = "_bwd_dkdv" if kernel == "dkdv" else "_bwd_dq"
        self.title.set_text(
            _("step {step} of {steps}: {name}, query tile {i}, key tile {j}").format(
                step=step + 1, steps=len(self.steps), name=name, i=i, j=j
            )
            + "\n"
            + rule
        )


def plot_loss_curves(curves: dict, *, figsize=(6.0, 3.0)):
    """Training losses per step, one line per run (``{label: losses}``), and below them the difference of each
    run from the first: the figure of chapter 12's training run. Returns the pyplot figure."""
    import matplotlib.pyplot as plt

    fig, (ax, ax_d) = plt.subplots(1, 2, figsize=figsize, layout="constrained")
    labels = list(curves)
    base = np.asarray(curves[labels[0]], dtype=np.float64)
    for k, label in enumerate(labels):
        losses = np.asarray(curves[label], dtype=np.float64)
        ax.plot(
            np.arange(1, len(losses) + 1), losses, lw=2.5 if k == 0 else 1.2, ls="-" if k == 0 else "--", label=label
        )
        if k:
            ax_d.plot(np.arange(1, len(losses) + 1), np.abs(losses - base), marker=".", label=label)
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("loss"))
    ax.legend(fontsize=8)
    ax_d.set_xlabel(_("step"))
    if len(labels) > 1:  # each difference named in full: |loss(first run) - loss(other run)|
        others = ", ".join(labels[1:])
        ax_d.set_title(_("|loss({first})\n- loss({other})|").format(first=labels[0], other=others), fontsize=9)
    ax_d.set_yscale("symlog", linthresh=1e-8)
    return fig
