"""Drawing functions: animations redraw one figure per step; step plots draw into a given figure."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

import flashmath as fm
from flashmath import viz


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_animation_has_one_distinct_frame_per_step():
    trace = fm.online_softmax_trace(np.array([0.5, 2.0, 1.0]))
    anim, fig = viz.animate_steps(viz.plot_online_softmax_step, trace, dpi=30)
    frames = []
    for step in range(len(trace) + 1):
        anim._func(step)  # what the animation draws for that frame
        frames.append(viz.figure_signature(fig))
    assert len(set(frames)) == len(trace) + 1
    html = anim.to_jshtml(fps=2)
    assert html.count("data:image/png;base64") == len(trace) + 1


@pytest.mark.parametrize("plot_step, make_trace", [
    (viz.plot_loop_swap_step, lambda: fm.loop_swap_trace(np.full((1, 3), 1 / 3), np.eye(3))),
    (viz.plot_one_loop_step, lambda: fm.one_loop_trace(np.ones((1, 3)), np.eye(3), np.eye(3))),
])
def test_step_plots_draw_into_a_given_figure(plot_step, make_trace):
    trace = make_trace()
    fig = plt.figure()
    assert plot_step(trace, 2, fig=fig) is fig
    again = viz.figure_signature(plot_step(trace, 2, fig=fig))
    assert again == viz.figure_signature(plot_step(trace, 2, fig=plt.figure(figsize=fig.get_size_inches())))
    steps = [0, len(trace)]
    anim, anim_fig = viz.animate_steps(plot_step, trace, steps=steps, dpi=30)
    assert anim.to_jshtml().count("data:image/png;base64") == 2


def one_loop_trace_of(N=2, M=6, D=4, Dv=4, seed=0):
    rng = np.random.default_rng(seed)
    return fm.one_loop_trace(rng.standard_normal((N, D)), rng.standard_normal((M, D)), rng.standard_normal((M, Dv)))


def test_nan_traces_draw_every_step():
    """NaN in, NaN out, and the figure still draws: the axis limits ignore what is not finite."""
    x = np.array([0.5, np.nan, 1.0])
    q, k, v = np.ones((1, 2)), np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 2.0]]), np.arange(6.0).reshape(3, 2)
    traces = [(viz.plot_online_softmax_step, fm.online_softmax_trace(x)),
              (viz.plot_loop_swap_step, fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v)),
              (viz.plot_one_loop_step, fm.one_loop_trace(q, k, v))]
    assert np.isnan(traces[2][1].a[-1]).all() and np.isnan(traces[1][1].a).all()
    for plot_step, trace in traces:
        for step in range(len(trace) + 1):
            viz.figure_signature(plot_step(trace, step))


def test_one_loop_legends_are_the_same_at_every_step_and_name_the_jumps():
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D

    trace = one_loop_trace_of()

    def legends(m):
        """Every legend entry of the figure at step m: (text, colour of its swatch)."""
        fig = viz.plot_one_loop_step(trace, m)
        return [(text.get_text(), to_hex(handle.get_color() if isinstance(handle, Line2D) else handle.get_facecolor()))
                for ax in fig.axes if ax.get_legend() is not None
                for text, handle in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)]

    first = legends(0)
    assert first == legends(3) == legends(6)  # m = 0 used to give the correction swatch the weight's blue
    entries = dict(first)
    assert entries["max jumped"] == viz.JUMP
    assert entries["correction of $A'_{m-1}$, max held"] == viz.HOLD


def test_one_loop_columns_share_the_x_axis_and_say_what_m_counts():
    fig = viz.plot_one_loop_step(one_loop_trace_of(M=6), 2)
    assert len({ax.get_xlim() for ax in fig.axes}) == 1
    labels = {ax.get_label(): ax.get_xlabel() for ax in fig.axes}
    assert labels["s"] == "key m (1..M)" and labels["dist"] == "keys seen m (0 = none)"


def test_one_loop_title_numbers_in_one_format():
    import re

    trace = one_loop_trace_of()
    title = viz.plot_one_loop_step(trace, 4)._suptitle.get_text()
    head, dist = title.split("\\|A'_m - A\\|$ = ")
    numbers = re.findall(r"= (-?[0-9.e+-]+)", head)[1:]  # after "m = 4"
    assert numbers == [f"{float(trace.x[3, 0]):.3g}", f"{float(trace.g[3, 0]):.3g}", f"{float(trace.s[3, 0]):.3g}",
                       f"{float(trace.correction[3, 0]):.3g}"]
    assert re.fullmatch(r"\d\.\d\de[+-]\d\d", dist)


def test_one_loop_default_dims_and_bad_indices():
    trace = one_loop_trace_of(Dv=2)
    fig = viz.plot_one_loop_step(trace, 6)
    ax_a = next(ax for ax in fig.axes if ax.get_label() == "a")
    assert [t.get_text() for t in ax_a.get_legend().get_texts()] == ["$A'_m$[0]", "$A'_m$[1]"]
    with pytest.raises(TypeError, match="row must be an integer"):
        viz.plot_one_loop_step(trace, 1, row=1.0)
    with pytest.raises(TypeError, match="m must be an integer"):
        viz.plot_one_loop_step(trace, np.float64(1))
    with pytest.raises(TypeError, match="row must be an integer"):
        viz.plot_loop_swap_step(fm.loop_swap_trace(np.full((1, 2), 0.5), np.eye(2)), 1, row=0.0)


def test_scale_figure_entropy_legend_is_above_its_axes():
    sweep = fm.scale_sweep([1, 4, 16, 64], rng=np.random.default_rng(0), n_queries=20, n_keys=16)
    fig = viz.plot_scale_step(sweep, 2)
    fig.canvas.draw()
    ax_e = fig.axes[3]
    assert ax_e.get_ylabel() == "mean entropy (nats)"
    legend_box = ax_e.get_legend().get_window_extent()
    assert legend_box.y0 >= ax_e.get_window_extent().y1 - 1  # outside the axes: it covers no curve
    assert {ax.get_xlabel() for ax in fig.axes[1:]} == {"head dimension D"}
