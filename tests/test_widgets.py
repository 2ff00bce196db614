"""Every widget callback redraws its figure when a control moves.

``ipywidgets.interactive`` swallows exceptions raised in a callback (it shows them in its output area), so
each test asserts that the figure changed after a move: a callback that raised would leave ``result``
unchanged (or None) and fail the test.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from flashmath import viz, widgets


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def rendered(ui):
    if ui.result is None and not getattr(ui, "_drawn_once", False):
        # ipywidgets 7 draws for the first time when the widget is displayed, ipywidgets 8 on construction
        ui._drawn_once = True
        ui.update()
    assert ui.result is not None, "the callback returned no figure (did it raise?)"
    return viz.figure_signature(ui.result)


def control(ui, name):
    return next(w for w in ui.kwargs_widgets if w.description.startswith(name))


def test_online_softmax_player_redraws_on_every_step():
    x = np.random.default_rng(0).normal(size=9)
    ui = widgets.online_softmax_player(x)
    slider = control(ui, "step")
    assert (slider.min, slider.max, slider.value) == (0, 9, 0)
    seen = {rendered(ui)}
    for step in (1, 4, 9):
        slider.value = step
        seen.add(rendered(ui))
    assert len(seen) == 4


def test_online_softmax_player_has_a_play_button_over_the_same_range():
    import ipywidgets as ipw

    ui = widgets.online_softmax_player(np.arange(5.0), value=2)
    play = next(w for w in ui.children[0].children if isinstance(w, ipw.Play))
    assert (play.min, play.max, play.value) == (0, 5, 2)


def test_online_softmax_player_on_a_row_with_masked_entries_and_labels():
    x = np.array([-np.inf, 0.3, -np.inf, 2.0])
    ui = widgets.online_softmax_player(x, labels=list("abcd"))
    before = rendered(ui)
    control(ui, "step").value = 4
    assert rendered(ui) != before


def test_overflow_explorer_redraws_for_scale_and_dtype():
    x = np.linspace(-1, 1, 8)
    ui = widgets.overflow_explorer(x, scale=1.0, dtype="float16")
    first = rendered(ui)
    control(ui, "scale").value = 100.0
    scaled = rendered(ui)
    assert scaled != first
    control(ui, "dtype").value = "float64"
    assert rendered(ui) != scaled


def test_bad_arguments_raise_before_any_widget_is_built():
    with pytest.raises(ValueError, match="dtype must be one of"):
        widgets.overflow_explorer([1.0, 2.0], dtype="int8")
    with pytest.raises(ValueError, match="scale must be between 1 and 1000"):
        widgets.overflow_explorer([1.0, 2.0], scale=0)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        widgets.overflow_explorer([])
    with pytest.raises(TypeError, match="floating-point"):
        widgets.overflow_explorer([1j, 2.0])
    with pytest.raises(ValueError, match="labels must have one entry per element"):
        widgets.online_softmax_player([1.0, 2.0, 3.0], labels=["a", "b"])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        widgets.online_softmax_player(np.ones((2, 2)))
    with pytest.raises(ValueError, match="step i must be in 0..3"):
        viz.plot_online_softmax_step(__import__("flashmath").online_softmax_trace([1.0, 2.0, 3.0]), 4)


def test_widget_does_not_modify_its_input():
    x = np.array([1.0, 5.0, 2.0])
    before = x.copy()
    ui = widgets.online_softmax_player(x)
    control(ui, "step").value = 3
    widgets.overflow_explorer(x)
    np.testing.assert_array_equal(x, before)


# ----------------------------------------------------------------------------------------------------------------
# Chapters 3-5
# ----------------------------------------------------------------------------------------------------------------


def small_head(N=3, M=6, D=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, D)), rng.standard_normal((M, D)), rng.standard_normal((M, D))


def test_scale_explorer_redraws_for_every_d_and_has_a_linked_play_button():
    import ipywidgets as ipw

    import flashmath as fm

    sweep = fm.scale_sweep([1, 4, 16, 64], rng=np.random.default_rng(0), n_queries=10, n_keys=8)
    ui = widgets.scale_explorer(sweep, D=4)
    slider = control(ui, "D")
    assert list(slider.options) == [1, 4, 16, 64] and slider.value == 4
    play = next(w for w in ui.children[0].children if isinstance(w, ipw.Play))
    assert (play.min, play.max, play.value) == (0, 3, 1)
    seen = {rendered(ui)}
    for D in (1, 16, 64):
        slider.value = D
        seen.add(rendered(ui))
    assert len(seen) == 4
    with pytest.raises(ValueError, match="D must be one of"):
        widgets.scale_explorer(sweep, D=5)


def test_loop_swap_player_redraws_as_keys_are_added():
    import flashmath as fm

    q, k, v = small_head()
    y = fm.safe_softmax(q @ k.T)
    ui = widgets.loop_swap_player(y, v, row=1, labels=list("abcdef"))
    slider = control(ui, "keys m")
    assert (slider.min, slider.max, slider.value) == (0, 6, 0)
    seen = {rendered(ui)}
    for m in (1, 3, 6):
        slider.value = m
        seen.add(rendered(ui))
    assert len(seen) == 4
    with pytest.raises(ValueError, match="row must be in 0..2"):
        widgets.loop_swap_player(y, v, row=3)


def test_one_loop_player_redraws_as_keys_are_seen():
    q, k, v = small_head(M=7)
    ui = widgets.one_loop_player(q, k, v, row=2, dims=(0, 3), labels=list("abcdefg"), value=2)
    slider = control(ui, "keys m")
    assert (slider.min, slider.max, slider.value) == (0, 7, 2)
    seen = {rendered(ui)}
    for m in (0, 5, 7):
        slider.value = m
        seen.add(rendered(ui))
    assert len(seen) == 4
    with pytest.raises(ValueError, match="2-D"):
        widgets.one_loop_player(q[None], k[None], v[None])


def test_new_plots_reject_bad_steps_and_keep_fixed_axes():
    import flashmath as fm

    q, k, v = small_head()
    trace = fm.one_loop_trace(q, k, v)
    with pytest.raises(ValueError, match="m must be in 0..6"):
        viz.plot_one_loop_step(trace, 7)
    with pytest.raises(ValueError, match="dims must list"):
        viz.plot_one_loop_step(trace, 1, dims=(4,))
    with pytest.raises(ValueError, match="2-D inputs"):
        viz.plot_one_loop_step(fm.one_loop_trace(q[None], k[None], v[None]), 1)
    swap = fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v)
    with pytest.raises(ValueError, match="m must be in 0..6"):
        viz.plot_loop_swap_step(swap, 7)
    sweep = fm.scale_sweep([1, 2], rng=np.random.default_rng(0), n_queries=3, n_keys=4)
    with pytest.raises(ValueError, match="i must index"):
        viz.plot_scale_step(sweep, 2)
    # the axes do not move between steps (so that Play does not make them jump)
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_one_loop_step(trace, m).axes] for m in (1, 6)]
    assert limits[0] == limits[1]
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_loop_swap_step(swap, m).axes] for m in (0, 6)]
    assert limits[0] == limits[1]
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_scale_step(sweep, i).axes] for i in (0, 1)]
    assert limits[0] == limits[1]
