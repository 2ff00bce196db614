"""Chapter 14: ring attention, step by step (:class:`RingPlot`), the timeline of a gloo run and the causal balance.

:class:`RingPlot` draws a :class:`flashmath.ring.RingTrace` (computed once by :func:`flashmath.ring.ring_trace`):
the ``N x M`` grid of (query, key) pairs coloured by the device that merges them and the step at which it does,
the ring of devices with the key/value shard each holds and the bytes it passes on, and each device's running
state measured against its final one. :func:`plot_ring_timeline` draws the recorded timeline of a
:class:`flashmath.ring_dist.RingRun` (compute and transfers of every rank at every step), and
:func:`plot_ring_balance` the causal work of each device at each step, from the schedule alone, for the contiguous
and the zig-zag layouts; :func:`plot_context_parallel` the bytes each device receives and holds for the ring, the
all-gather and DeepSpeed-Ulysses (:func:`flashmath.ring_cost.context_parallel_table`). Nothing here computes
attention.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap, NoNorm, to_rgb
from matplotlib.patches import Circle, FancyArrowPatch, Patch

from flashmath.i18n import gettext as _
from flashmath.viz.axes import index
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, HOLD, UNSEEN

__all__ = [
    "DEVICE_COLORS",
    "RingPlot",
    "pair_steps",
    "plot_context_parallel",
    "plot_ring_balance",
    "plot_ring_timeline",
]

DEVICE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MASKED = "#e6e6e6"  # pairs no device ever merges (the causal mask)
FLOOR = 1e-17  # the log axis of the running error: an error of exactly 0 is drawn here


_DARK = {0, 2, 3, 4, 5}  # the indices of DEVICE_COLORS dark enough for white text on them


def _color(device: int) -> str:
    return DEVICE_COLORS[device % len(DEVICE_COLORS)]


def pair_steps(trace) -> tuple[np.ndarray, np.ndarray]:
    """For each (query, key) pair of the sequence: the step at which its device merges it (``-1``: never, a pair the
    causal mask hides) and that device, two ``(N, M)`` int arrays, from the trace's plan of every step."""
    layout = trace.layout
    step_of = np.full((layout.N, layout.M), -1, dtype=np.int64)
    device_of = np.full((layout.N, layout.M), -1, dtype=np.int64)
    for row in trace.frames:
        for frame in row:
            st = frame.step
            if st.skipped:
                continue
            q_pos = layout.q_positions(st.device)[st.rows[0] : st.rows[1]]
            k_pos = layout.kv_positions(st.shard)[st.cols[0] : st.cols[1]]
            seen = np.ones((len(q_pos), len(k_pos)), dtype=bool)
            if trace.causal:
                seen = k_pos[None, :] <= q_pos[:, None]
            rows, cols = np.nonzero(seen)
            step_of[q_pos[rows], k_pos[cols]] = st.step
            device_of[q_pos[rows], k_pos[cols]] = st.device
    return step_of, device_of


class RingPlot(LivePlot):
    """One ring, step by step: ``update(step=t)`` for ``t = 0 .. P - 1``.

    Left: the ``N x M`` (query, key) pairs of the sequence; a pair takes the colour of the device that owns its
    query, full where the device merges it at step ``t``, pale where it did earlier, white where it has not yet,
    grey where the causal mask hides it for good. Top right: the ring, the step in its corner; each device shows the
    key/value shard it holds at step ``t`` and the arrow to the next device the bytes it sends after the step.
    Bottom right: each device's running output against its final one, ``max |A_r - A_r(final)|`` (log scale; 0
    drawn at the bottom): not the answer until the device has merged every shard it sees.

    Args:
        trace: from :func:`flashmath.ring.ring_trace` (at least 2 devices).
        step: the step shown first. figsize: inches. dpi: dots per inch. pyplot: see :class:`LivePlot`.

    Raises:
        ValueError: a trace of one device; ``step`` outside ``0 .. P - 1``. TypeError: ``step`` not an integer.
    """

    def __init__(self, trace, *, step: int = 0, figsize=(10.0, 6.0), dpi: int = DPI, pyplot: bool = False):
        self.trace = trace
        self.P = trace.layout.num_devices
        if self.P < 2:
            raise ValueError("RingPlot draws a ring of at least 2 devices")
        self.step_of, self.device_of = pair_steps(trace)
        final = [trace.frames[-1][r].a for r in range(self.P)]
        # max |A_r(t) - A_r(final)| of every device after every step
        self.errors = np.array(
            [[float(np.abs(trace.frames[t][r].a - final[r]).max()) for r in range(self.P)] for t in range(self.P)]
        )
        # each step's picture of the pairs, computed once (a step only picks its array), as places in the colour
        # table of _build: 0 masked, 1 not merged yet, 2 + r merged now by device r, 2 + P + r merged before by it
        t = np.arange(self.P)[:, None, None]
        merged, device = self.step_of >= 0, self.device_of
        now = np.where(self.step_of == t, 2 + device, 1)
        self.pair_index = np.where(merged, np.where(self.step_of < t, 2 + self.P + device, now), 0).astype(np.uint16)
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step)

    def __len__(self) -> int:
        return self.P

    def _build(self) -> None:
        P = self.P
        grid = self.fig.add_gridspec(2, 2, width_ratios=[1.0, 1.15], height_ratios=[1.35, 1.0])
        self.ax_pairs = self.fig.add_subplot(grid[:, 0])
        self.ax_ring = self.fig.add_subplot(grid[0, 1])
        self.ax_err = self.fig.add_subplot(grid[1, 1])

        ax = self.ax_pairs
        # a mesh of the pairs in the colours of pair_index (NoNorm: an index is a colour's place), drawn as imshow's
        # nearest-neighbour image of them would be (the same cells, to within 1 of 255 in a colour) in a seventh of
        # its time: no resampling of the whole panel at every step
        full = np.array([to_rgb(_color(r)) for r in range(P)])
        colours = ListedColormap(np.concatenate([[to_rgb(MASKED), (1.0, 1.0, 1.0)], full, 0.3 * full + 0.7]))
        N, M = self.step_of.shape
        self.pairs = ax.pcolormesh(
            np.arange(M + 1) - 0.5, np.arange(N + 1) - 0.5, self.pair_index[0], cmap=colours, norm=NoNorm()
        )
        ax.set_xlim(-0.5, M - 0.5)
        ax.set_ylim(N - 0.5, -0.5)  # query 0 at the top
        ax.set_xlabel(_("key position m"))
        ax.set_ylabel(_("query position n"))
        ax.set_title(
            _("(query, key) pairs: merged now (full), before (pale), not yet (white), masked (grey)"),
            fontsize=9,
            loc="left",
        )

        ax = self.ax_ring
        ax.set_xlim(-1.75, 1.75)
        ax.set_ylim(-1.45, 1.45)
        ax.set_aspect("equal")
        ax.axis("off")
        angles = np.pi / 2 - 2 * np.pi * np.arange(P) / P  # device 0 at the top, clockwise
        self.centres = np.stack([np.cos(angles), np.sin(angles)], axis=1)
        # large enough that "holds shard 3" and "(skipped)" under it fit inside the circle (both languages)
        radius = 0.42 if P <= 4 else 0.2
        self.holding, self.sending = [], []
        for r in range(P):
            x, y = self.centres[r]
            ax.add_patch(Circle((x, y), radius, facecolor=_color(r), alpha=0.25, edgecolor=_color(r), lw=1.5))
            ax.text(x, y + 0.04, _("device {r}").format(r=r), ha="center", va="bottom", fontsize=9, fontweight="bold")
            self.holding.append(ax.text(x, y + 0.02, "", ha="center", va="top", fontsize=8.5))
            nx, ny = self.centres[(r + 1) % P]
            ax.add_patch(
                FancyArrowPatch(
                    (x, y),
                    (nx, ny),
                    connectionstyle="arc3,rad=-0.25",
                    arrowstyle="-|>",
                    mutation_scale=12,
                    color=HOLD,
                    shrinkA=radius * 72 * 1.2,
                    shrinkB=radius * 72 * 1.2,
                )
            )
            mid = (self.centres[r] + self.centres[(r + 1) % P]) / 2
            out = mid / max(float(np.hypot(*mid)), 1e-9)
            where = mid + 0.7 * out if P > 2 else mid + np.array([0.55 if r == 0 else -0.55, 0.0])
            self.sending.append(
                ax.text(float(where[0]), float(where[1]), "", ha="center", va="center", fontsize=9, color="#333333")
            )

        ax = self.ax_err
        self.bars = ax.bar(range(P), np.full(P, FLOOR), color=[_color(r) for r in range(P)], width=0.6, bottom=FLOOR)
        ax.set_yscale("log")
        # three decades above the largest error: its value label (drawn at 1.5 x the error, about 9 px tall on a
        # 20-decade axis of about 130 px) stays clear of the top spine
        top = max(float(self.errors.max()), 1.0) * 1e3
        ax.set_ylim(FLOOR, top)
        ax.set_yticks([10.0**e for e in range(0, -17, -4)])  # 1 .. 1e-16, below the labels' headroom
        ax.set_xticks(range(P), [_("device {r}").format(r=r) for r in range(P)], fontsize=8.5)
        ax.set_ylabel(_(r"$\max\,|A - A_{\rm final}|$"), fontsize=9)
        self.bar_labels = [ax.text(r, FLOOR * 3, "", ha="center", va="bottom", fontsize=8.5) for r in range(P)]
        ax.set_title(_("each device's running output against its final one"), fontsize=9)
        # what a step changes is live; the rest is drawn once: the title says what t means, the ring panel's
        # corner which step this is; the bytes sent are the same at most steps (a background for each set of them)
        self.fig.suptitle(
            _("at step t (t = 0 .. P - 1), device r holds the key/value shard of device (r - t) mod P"), fontsize=10.5
        )
        self.step_label = self.ax_ring.text(
            0.0, 1.0, "", transform=self.ax_ring.transAxes, ha="left", va="top", fontsize=10.5, fontweight="bold"
        )
        self._sent: tuple | None = None  # the texts of self.sending in the background
        self.live(self.pairs, *self.holding, self.bars, *self.bar_labels, self.step_label)

    def _update(self, step) -> None:
        t = index(step, "step", self.P)
        P = self.P
        self.pairs.set_array(self.pair_index[t])
        frames = self.trace.frames[t]
        # nothing is sent after the last step: a space, which draws nothing but has a place (where the background's
        # layer of these texts is drawn: an empty text has none, and its background would be a full draw)
        sent = tuple(_("{b} bytes").format(b=frame.sent_bytes) if t < P - 1 else " " for frame in frames)
        for r in range(P):
            frame = frames[r]
            held = _("holds shard {s}").format(s=frame.step.shard)
            if frame.step.skipped:
                held += "\n" + _("(skipped)")
            self.holding[r].set_text(held)
            self.sending[r].set_text(sent[r])
            error = self.errors[t, r]
            self.bars.patches[r].set_height(max(error, FLOOR) - FLOOR)
            self.bar_labels[r].set_text(_error_label(error))
            self.bar_labels[r].set_y(max(error, FLOOR) * 1.5)
        self.step_label.set_text(_("step {t} of {P}").format(t=t, P=P))
        if sent != self._sent:  # a background of their own, drawn over the rest once (kept for the next visit)
            self._sent = sent
            self.redraw_background(key=sent, changed=self.sending)


def _error_label(error: float) -> str:
    """A bar's value: plain decimals from 0.01 up (1.0, 2.0, 0.5, 0.03), e-notation below (4e-16), 0 as 0."""
    if error == 0:
        return "0"
    if error >= 0.095:
        return f"{error:.1f}"
    if error >= 0.01:
        return f"{error:.2f}"
    return f"{error:.0e}"


def plot_ring_timeline(run, *, figsize=(9.0, 3.2), dpi: int = DPI):
    """The recorded timeline of a gloo ring (:class:`flashmath.ring_dist.RingRun`): for each rank, its computation at
    each step (thick bars) and the transfer of the next shard (thin bars), from its posting, before the
    computation, to its completion as a helper thread saw it: a thin bar that ends under the thick one was a
    transfer done while the rank computed; a thin bar that sticks out at the right is the rank waiting for it.

    Returns:
        the matplotlib Figure (made through pyplot: Jupyter's inline backend shows it).
    """
    import matplotlib.pyplot as plt

    timeline = np.asarray(run.timeline) * 1e3  # (P, P, 5) [t, r]: posted, started, computed, done, waited; in ms
    P = timeline.shape[1]
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi, layout="constrained")
    for t in range(P):
        for r in range(P):
            posted, started, computed, done = timeline[t, r, :4]
            ax.barh(r - 0.12, computed - started, left=started, height=0.42, color=_color(t), edgecolor="k", lw=0.5)
            ax.text(
                (started + computed) / 2,
                r - 0.12,
                f"{t}",
                ha="center",
                va="center",
                fontsize=11,
                color="white" if t % len(DEVICE_COLORS) in _DARK else "black",
            )
            if t < P - 1:
                ax.barh(r + 0.27, done - posted, left=posted, height=0.14, color=HOLD)
    ax.set_yticks(range(P), [_("rank {r}").format(r=r) for r in range(P)])
    ax.invert_yaxis()
    ax.set_xlabel(_("milliseconds since the first transfer was posted"))
    ax.set_title(
        _("thick: compute of step t (its number); thin grey: the transfer of the next shard, from posted to done"),
        fontsize=9,
    )
    return fig


def plot_ring_balance(N: int, num_devices: int, *, figsize=(9.5, 3.6), dpi: int = DPI):
    """The causal ring's work per device and step, from the schedule alone (:func:`flashmath.ring.ring_schedule`):
    contiguous shards (left) against zig-zag (right). A step lasts as long as its busiest device (each waits for
    the next shard); a bar is a device's work at that step, the grey rest of the step its idle time. The work is
    the step's (query, key) pairs that attend (:attr:`flashmath.ring.RingStep.visible_pairs`): what a causal kernel
    that skips masked tiles computes, so the causal diagonal block costs about half a block.

    Returns:
        the matplotlib Figure (made through pyplot).
    """
    import matplotlib.pyplot as plt

    from flashmath.ring import ring_layout, ring_schedule

    fig, axes = plt.subplots(1, 2, figsize=figsize, dpi=dpi, layout="constrained", sharex=True, sharey=True)
    for ax, zigzag in zip(axes, (False, True), strict=True):
        layout = ring_layout(N, num_devices, zigzag=zigzag)
        schedule = ring_schedule(layout, causal=True)
        work = np.array([[st.visible_pairs for st in row] for row in schedule], dtype=float)  # [t, r]
        lengths = work.max(axis=1)
        starts = np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
        for t in range(num_devices):
            for r in range(num_devices):
                ax.barh(r, lengths[t], left=starts[t], height=0.6, color=UNSEEN, alpha=0.5)
                if work[t, r]:
                    ax.barh(r, work[t, r], left=starts[t], height=0.6, color=_color(r), edgecolor="k", lw=0.4)
            ax.axvline(starts[t], color="k", lw=0.6, ls=":")
        busy = work.sum() / (lengths.sum() * num_devices)
        name = _("zig-zag") if zigzag else _("contiguous")
        ax.set_title(
            _("{name}: time {total:,.0f} pairs, devices busy {busy:.1%}").format(
                name=name, total=lengths.sum(), busy=busy
            ),
            fontsize=9,
        )
        ax.set_xlabel(_("time, in attending pairs (steps separated by dotted lines)"))
    axes[0].set_yticks(range(num_devices), [_("device {r}").format(r=r) for r in range(num_devices)])
    axes[0].invert_yaxis()
    fig.suptitle(
        _("causal ring, N = {N}, P = {P}: each step lasts as long as its busiest device; grey: a device waits").format(
            N=N, P=num_devices
        ),
        fontsize=10,
    )
    return fig


def plot_context_parallel(table, *, figsize=(9.0, 3.9), dpi: int = DPI):
    """The costs of :func:`flashmath.ring_cost.context_parallel_table` as grouped bars, one group per ``P``: left the
    MiB each device receives, right the MiB it holds during the attention, for the ring, the all-gather and
    DeepSpeed-Ulysses, each bar labelled with its MiB (rounded), the cheapest of each group (ties included: the
    table's ``fewest_bytes`` and ``least_memory``) outlined in black, "n/a" where Ulysses
    cannot split the heads.

    Returns:
        the matplotlib Figure (made through pyplot).
    """
    import matplotlib.pyplot as plt

    from flashmath.ring_cost import METHODS

    MiB = 2**20
    names = {"ring": _("ring"), "all-gather": "all-gather", "ulysses": "Ulysses"}
    colours = {"ring": DEVICE_COLORS[0], "all-gather": DEVICE_COLORS[1], "ulysses": DEVICE_COLORS[2]}
    fig, axes = plt.subplots(1, 2, figsize=figsize, dpi=dpi, layout="constrained", sharey=True)
    panels = (
        (_("MiB each device receives"), lambda row, m: row[m], "fewest_bytes"),
        (_("MiB each device holds during the attention"), lambda row, m: row["peak_bytes"][m], "least_memory"),
    )
    height = 0.28
    for ax, (title, value, best) in zip(axes, panels, strict=True):
        top = max(value(row, m) or 0 for row in table for m in METHODS) / MiB
        for g, row in enumerate(table):
            for k, m in enumerate(METHODS):
                y = g + (k - 1) * height
                got = value(row, m)
                if got is None:
                    ax.text(top * 0.01, y, _("Ulysses: n/a"), ha="left", va="center", fontsize=9, color="#333333")
                    continue
                won = m in row[best]
                ax.barh(
                    y,
                    got / MiB,
                    height=height * 0.9,
                    color=colours[m],
                    edgecolor="k" if won else "none",
                    lw=1.5 if won else 0,
                )
                ax.text(
                    got / MiB + top * 0.015,
                    y,
                    f"{got / MiB:.0f}",
                    ha="left",
                    va="center",
                    fontsize=9,
                )
        ax.set_xlim(0, top * 1.15)  # room for the labels of the longest bars
        ax.set_xlabel("MiB")
        ax.set_title(title, fontsize=9.5)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_yticks(range(len(table)), [f"$P = {row['P']}$" for row in table])
    axes[0].set_ylim(len(table) - 0.45, -0.55)  # top to bottom, the last row's "n/a" clear of the axis
    handles = [Patch(color=colours[m], label=names[m]) for m in METHODS]
    axes[1].legend(handles=handles, loc="lower right", fontsize=9, frameon=False)  # beside the short bars of P = 16
    fig.suptitle(
        _("per device and layer; outlined in black: the fewest bytes (left) and the least memory (right) at each $P$"),
        fontsize=9.5,
    )
    return fig
