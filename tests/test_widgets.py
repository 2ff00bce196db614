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
