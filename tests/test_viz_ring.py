"""Chapter 14's figures (flashmath.viz.ring) and its widget (widgets.ring_player): a move redraws the picture, the
pictures draw the trace they are given, and bad states are refused."""

import io
from contextlib import redirect_stdout

import matplotlib
import numpy as np
import pytest

from flashmath import widgets
from flashmath.ring import ring_trace
from flashmath.viz import figure_signature
from flashmath.viz.ring import RingPlot, pair_steps, plot_context_parallel, plot_ring_balance, plot_ring_timeline

matplotlib.use("Agg")

rng = np.random.default_rng(14)
q, k, v = (rng.standard_normal((16, 4)) for _ in range(3))


def test_ring_player_redraws_for_every_step_and_plays():
    ui = widgets.ring_player(q, k, v, 4, causal=True, zigzag=True)
    slider = ui.kwargs_widgets[0]
    assert (slider.min, slider.max, slider.value) == (0, 3, 0)
    play = ui.children[0].children[0]
    assert type(play).__name__ == "Play" and play.max == 3
    for step in (1, 2, 3, 0):
        before = ui.image.value
        with redirect_stdout(io.StringIO()):
            slider.value = step
        assert ui.image.value != before, f"step {step} left the picture unchanged"
        assert ui.result.state == {"step": step}


def test_ring_player_refuses_bad_arguments():
    with pytest.raises(ValueError, match="num_devices"):
        widgets.ring_player(q, k, v, 1)
    with pytest.raises(ValueError, match="value"):
        widgets.ring_player(q, k, v, 4, value=4)
    with pytest.raises(ValueError, match="N = M"):
        widgets.ring_player(q[:8], k, v, 4, causal=True)


def test_ring_plot_colours_each_pair_by_its_step_and_device():
    trace = ring_trace(q, k, v, 4, causal=True, zigzag=True)
    steps, devices = pair_steps(trace)
    n, m = np.indices(steps.shape)
    assert ((steps >= 0) == (m <= n)).all()  # every visible pair merged once, the masked ones never
    for r in range(4):
        assert set(np.unique(n[devices == r])) == set(trace.layout.q_positions(r).tolist())
    plot = RingPlot(trace, step=0)
    pictures = {figure_signature(plot.update(step=t).fig) for t in range(4)}
    assert len(pictures) == 4
    assert plot.holding[1].get_text().startswith("holds shard 2")  # step 3: the shard of (1 - 3) mod 4
    assert plot.errors[-1].max() == 0  # the last step is the final state
    with pytest.raises(ValueError, match="step"):
        plot.update(step=4)
    with pytest.raises(ValueError, match="at least 2"):
        RingPlot(ring_trace(q, k, v, 1))


def test_ring_plot_pairs_take_the_colour_of_their_device_and_step():
    """Each pair's colour at step t: its device's colour where merged at t, pale where merged before, white where
    not yet, grey where the causal mask hides it."""
    from matplotlib.colors import to_rgb

    from flashmath.viz.ring import MASKED, _color

    trace = ring_trace(q, k, v, 4, causal=True, zigzag=True)
    steps, devices = pair_steps(trace)
    plot = RingPlot(trace)
    for t in range(4):
        plot.update(step=t)
        got = plot.pairs.to_rgba(plot.pairs.get_array())[..., :3]
        assert got.shape == (*steps.shape, 3)
        for (n, m), step in np.ndenumerate(steps):
            colour = np.array(to_rgb(_color(devices[n, m])))
            if step < 0:
                expected = np.array(to_rgb(MASKED))
            elif step > t:
                expected = np.ones(3)
            else:
                expected = colour if step == t else 0.3 * colour + 0.7
            np.testing.assert_allclose(got[n, m], expected, err_msg=f"step {t}, pair {(n, m)}")


def test_a_ring_moved_through_its_steps_shows_what_a_fresh_one_shows():
    """Blitting leaves nothing of an earlier step behind, and the bytes labels, drawn once for each set of them in
    a layer over a kept base (nothing is sent after the last step), give a full draw's pixels."""
    trace = ring_trace(q, k, v, 4, causal=True, zigzag=True)
    layered, full = RingPlot(trace), RingPlot(trace)
    for t in (1, 2, 3, 2, 0, 3, 1):
        layered.update(step=t)
        full.update(step=t)
        full._changed = ()  # the whole figure drawn for each new background
        np.testing.assert_array_equal(layered.rgb(), full.rgb(), err_msg=f"step {t}")
        np.testing.assert_array_equal(layered.rgb(), RingPlot(trace, step=t).rgb(), err_msg=f"step {t}, fresh")
        sent = [text.get_text() for text in layered.sending]
        assert all(s.endswith(" bytes") for s in sent) if t < 3 else not any(s.strip() for s in sent), (t, sent)
        assert layered.step_label.get_text() == f"step {t} of 4"
    assert layered._base is not None and len(layered._backgrounds) == 2  # the layers were used, one per set


def test_balance_and_timeline_figures():
    import matplotlib.pyplot as plt

    fig = plot_ring_balance(32, 4)
    # work as a tile-skipping kernel counts it (shards of S = 8: device r attends 64 r + 36 pairs); the contiguous
    # ring's steps last 36, 64, 64, 64: busy (36 + 100 + 164 + 228) / (4 x 228) = 57.9 %; zig-zag: every step equal
    assert "busy 57.9%" in fig.axes[0].get_title() and "busy 100.0%" in fig.axes[1].get_title()
    assert "228 pairs" in fig.axes[0].get_title()
    plt.close(fig)

    class Run:  # a RingRun's timeline: [step, rank] -> posted, started, computed, done, waited
        timeline = np.array(
            [[[0, 0.001, 0.004, 0.003, 0.004], [0, 0.001, 0.002, 0.005, 0.005]], [[0.005] * 5, [0.005] * 5]]
        )

    fig = plot_ring_timeline(Run())
    patches = fig.axes[0].patches
    assert len(patches) == 2 * 2 + 2  # a compute bar per rank and step, a transfer bar per rank
    # the thin bars run from posted to done: rank 0's ends inside its computation, rank 1's after it
    thin = sorted((p for p in patches if p.get_height() < 0.2), key=lambda p: p.get_y())
    assert [round(p.get_x() + p.get_width(), 6) for p in thin] == [3.0, 5.0]
    plt.close(fig)


def test_error_labels_are_plain_decimals_from_one_hundredth_up():
    from flashmath.viz.ring import _error_label

    assert [_error_label(x) for x in (1.0, 2.0, 0.5, 0.03, 0.0, 4e-16, 0.004)] == [
        "1.0", "2.0", "0.5", "0.03", "0", "4e-16", "4e-03"
    ]  # fmt: skip


@pytest.mark.parametrize("P", [2, 4, 5])
def test_ring_plot_error_labels_stay_inside_their_panel(P):
    """The value labels of the running-error bars sit below the panel's top spine at every step (rev4-e, rev5-f: at
    step 0 they were struck through by it)."""
    plot = RingPlot(ring_trace(q, k, v, P, causal=True, zigzag=True))
    for t in range(P):
        plot.update(step=t)
        renderer = plot.fig.canvas.get_renderer()
        top = plot.ax_err.get_window_extent(renderer).y1
        for label in plot.bar_labels:
            assert label.get_window_extent(renderer).y1 < top - 1, (P, t, label.get_text())


def test_context_parallel_figure_draws_the_table():
    """Chapter 14's cost figure: one bar per feasible method and P, labelled with its MiB, the table's winners (and
    only they) outlined, "n/a" where Ulysses cannot split the heads."""
    import matplotlib.pyplot as plt

    from flashmath.ring_cost import METHODS, context_parallel_table

    table = context_parallel_table(131072, heads=32, kv_heads=8, D=128, itemsize=2, devices=(2, 4, 8, 16))
    fig = plot_context_parallel(table)
    for ax, value, best in zip(
        fig.axes[:2],
        (lambda row, m: row[m], lambda row, m: row["peak_bytes"][m]),
        ("fewest_bytes", "least_memory"),
        strict=True,
    ):
        expected = [(value(row, m), m in row[best]) for row in table for m in METHODS if value(row, m) is not None]
        bars = ax.patches
        assert len(bars) == len(expected) == 11
        for bar, (got, won) in zip(bars, expected, strict=True):
            assert bar.get_width() == pytest.approx(got / 2**20)
            assert (bar.get_linewidth() > 0) == won
        texts = [t.get_text() for t in ax.texts]
        assert texts.count("Ulysses: n/a") == 1
        assert [t for t in texts if t.isdigit()] == [f"{got / 2**20:.0f}" for got, _ in expected]
    plt.close(fig)
