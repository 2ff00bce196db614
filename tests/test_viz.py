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
