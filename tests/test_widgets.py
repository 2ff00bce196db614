"""Every widget redraws its picture when a control moves, in place, through one live figure.

A widget is ``flashmath.widgets.live_widget``: an ``ipywidgets.Image`` that receives the plot's PNG bytes after
each move. ``ipywidgets.interactive`` swallows exceptions raised in a callback (it shows them in its output area),
so every move here goes through :func:`move`, which fails with the callback's traceback when the picture did not
change. Runs under ipywidgets 8 here and 7.7 in tests/test_install.py (Colab's version).
"""

import io
import warnings
from contextlib import redirect_stdout

import matplotlib.pyplot as plt
import numpy as np
import pytest

from flashmath import viz, widgets
from flashmath.opcount import op_count_table
from flashmath.traffic import tile_traffic_table

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


def quiet(fn, *args, **kwargs):
    """Outside a kernel, interactive's clear_output writes terminal codes to stdout: keep them out of the log."""
    with redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def rendered(ui):
    """The picture the browser shows: the PNG bytes in the widget's Image."""
    assert ui.image.value[:8] == b"\x89PNG\r\n\x1a\n", "the Image holds no PNG"
    return ui.image.value


def plot_of(ui):
    if ui.result is None:  # ipywidgets 7 runs the callback for the first time when the widget is displayed
        quiet(ui.update)
    return ui.result


def move(ui, control, value):
    """Set a control as the browser would; fail with the callback's error if the picture did not change."""
    before = ui.image.value
    quiet(setattr, control, "value", value)
    if ui.image.value == before:
        raise AssertionError(
            f"moving {control.description!r} to {value!r} left the picture unchanged; the "
            f"widget's output area holds: {getattr(ui.out, 'outputs', ())}"
        )
    return rendered(ui)


def control(ui, name):
    return next(w for w in ui.kwargs_widgets if w.description.startswith(name))


def test_online_softmax_player_redraws_on_every_step():
    x = np.random.default_rng(0).normal(size=9)
    ui = widgets.online_softmax_player(x)
    slider = control(ui, "step")
    assert (slider.min, slider.max, slider.value) == (0, 9, 0)
    seen = {rendered(ui)}
    for step in (1, 4, 9):
        seen.add(move(ui, slider, step))
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
    move(ui, control(ui, "step"), 4)
    assert rendered(ui) != before


def test_overflow_explorer_redraws_for_scale_and_dtype():
    x = np.linspace(-1, 1, 8)
    ui = widgets.overflow_explorer(x, scale=1.0, dtype="float16")
    first = rendered(ui)
    move(ui, control(ui, "scale"), 100.0)
    scaled = rendered(ui)
    assert scaled != first
    move(ui, control(ui, "dtype"), "float64")
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
    move(ui, control(ui, "step"), 3)
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
        seen.add(move(ui, slider, D))
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
        seen.add(move(ui, slider, m))
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
        seen.add(move(ui, slider, m))
    assert len(seen) == 4
    with pytest.raises(ValueError, match="2-D"):
        widgets.one_loop_player(q[None], k[None], v[None])


def test_new_plots_reject_bad_steps_and_keep_fixed_axes():
    import flashmath as fm

    q, k, v = small_head()
    trace = fm.one_loop_trace(q, k, v)
    with pytest.raises(ValueError, match="m must be in 0..6"):
        viz.plot_one_loop_step(trace, 7)
    with pytest.raises(ValueError, match="each entry of dims must be in 0..3"):
        viz.plot_one_loop_step(trace, 1, dims=(4,))
    with pytest.raises(ValueError, match="2-D inputs"):
        viz.plot_one_loop_step(fm.one_loop_trace(q[None], k[None], v[None]), 1)
    swap = fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v)
    with pytest.raises(ValueError, match="m must be in 0..6"):
        viz.plot_loop_swap_step(swap, 7)
    sweep = fm.scale_sweep([1, 2], rng=np.random.default_rng(0), n_queries=3, n_keys=4)
    with pytest.raises(ValueError, match=r"i must be in 0..1 \(an index into sweep.dims\)"):
        viz.plot_scale_step(sweep, 2)
    # the axes do not move between steps (so that Play does not make them jump)
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_one_loop_step(trace, m).axes] for m in (1, 6)]
    assert limits[0] == limits[1]
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_loop_swap_step(swap, m).axes] for m in (0, 6)]
    assert limits[0] == limits[1]
    limits = [[(ax.get_xlim(), ax.get_ylim()) for ax in viz.plot_scale_step(sweep, i).axes] for i in (0, 1)]
    assert limits[0] == limits[1]


# ----------------------------------------------------------------------------------------------------------------
# Review fixes: arguments checked before the widget is built, defaults that fit, NaN drawn, Play not too fast
# ----------------------------------------------------------------------------------------------------------------


def play_of(ui):
    import ipywidgets as ipw

    return next(w for w in ui.children[0].children if isinstance(w, ipw.Play))


@pytest.mark.parametrize("Dv", [1, 2])
def test_one_loop_player_default_dims_fit_a_narrow_v(Dv):
    q, k, v = small_head(M=5)
    ui = widgets.one_loop_player(q, k, v[:, :Dv])
    seen = {rendered(ui)}
    for m in (2, 5):
        seen.add(move(ui, control(ui, "keys m"), m))
    assert len(seen) == 3
    ax_a = next(ax for ax in plot_of(ui).fig.axes if ax.get_label() == "a")  # the panel of A'_m
    assert len(ax_a.get_lines()) == 2 * Dv  # A'_m of every dimension and its dashed final value


def one_loop(**kwargs):
    q, k, v = small_head()  # N = 3, M = 6, Dv = 4
    return lambda: widgets.one_loop_player(q, k, v, **kwargs)


def loop_swap(**kwargs):
    import flashmath as fm

    q, k, v = small_head()
    return lambda: widgets.loop_swap_player(fm.safe_softmax(q @ k.T), v, **kwargs)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (one_loop(labels=list("ab")), ValueError, r"labels must have one entry per key \(6\), got 2"),
        (loop_swap(labels=list("ab")), ValueError, r"labels must have one entry per key \(6\), got 2"),
        (one_loop(labels="abcdef"), TypeError, "labels must be a list"),
        (one_loop(dims=(0, 4)), ValueError, r"each entry of dims must be in 0..3 \(V has Dv = 4"),
        (one_loop(dims=(0.5,)), TypeError, "each entry of dims must be an integer"),
        (one_loop(dims=()), ValueError, "dims must list 1 to 5 output dimensions"),
        (one_loop(dims=3), TypeError, "dims must be a list"),
        (one_loop(row=1.0), TypeError, "row must be an integer"),
        (one_loop(row=True), TypeError, "row must be an integer, got the bool"),
        (one_loop(row=3), ValueError, r"row must be in 0..2 \(q has N = 3 rows\)"),
        (loop_swap(row=1.0), TypeError, "row must be an integer"),
        (loop_swap(row=-1), ValueError, "row must be in 0..2"),
        (one_loop(value=7), ValueError, r"value \(the step shown first\) must be in 0..6"),
        (loop_swap(value=1.5), TypeError, "value .* must be an integer"),
        (one_loop(interval=0), ValueError, "interval .* must be >= 1"),
        (one_loop(interval=0.5), TypeError, "interval .* must be an integer"),
        (lambda: widgets.online_softmax_player([1.0, 2.0], value=2.0), TypeError, "must be an integer"),
        (lambda: widgets.overflow_explorer([1.0, 2.0], scale="10"), TypeError, "scale must be a number"),
    ],
)
def test_every_argument_is_checked_before_a_widget_is_built(build, error, match):
    with pytest.raises(error, match=match):
        build()


class Broken(viz.LivePlot):
    """A plot that cannot draw step ``bad``."""

    def __init__(self, bad, step=0):
        self.bad = bad
        super().__init__(figsize=(2, 2), step=step)

    def __len__(self):
        return 5

    def _build(self):
        self.title = self.fig.suptitle("")
        self.fig.subplots()
        self.live(self.title)

    def _update(self, step):
        if step == self.bad:
            raise RuntimeError("cannot draw")
        self.title.set_text(f"step {step}")


def test_an_error_in_the_first_drawing_raises_at_build_time():
    with pytest.raises(RuntimeError, match="cannot draw"):  # not only printed in the widget's output area
        widgets.live_widget(Broken(bad=0), step=widgets.step_slider(4))


def test_an_error_in_a_callback_keeps_the_old_picture_and_is_surfaced_by_move():
    ui = quiet(widgets.live_widget, Broken(bad=2), step=widgets.step_slider(4), interval=200)
    slider = control(ui, "step")
    move(ui, slider, 1)
    before = rendered(ui)
    with pytest.raises(AssertionError, match="cannot draw|left the picture unchanged"):
        move(ui, slider, 2)
    assert rendered(ui) == before  # the last good picture stays on the page


def test_one_figure_per_widget_however_often_it_moves():
    q, k, v = small_head()
    before = set(plt.get_fignums())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "More than 20 figures have been opened" would fail here
        ui = quiet(widgets.one_loop_player, q, k, v)
        slider = control(ui, "keys m")
        figure = plot_of(ui).fig
        for m in [1, 2, 3, 4, 5, 6] * 5:
            if m != slider.value:
                move(ui, slider, m)
    assert plot_of(ui).fig is figure  # updated in place, never rebuilt
    assert set(plt.get_fignums()) == before  # the widget's figure is not in pyplot's list at all


def test_the_image_is_replaced_in_place_and_nothing_is_cleared():
    ui = quiet(widgets.online_softmax_player, np.arange(6.0))
    image = ui.image
    assert image in ui.children
    for step in (3, 6, 0):
        move(ui, control(ui, "step"), step)
    assert ui.image is image and image in ui.children  # the same Image widget receives every picture
    assert not getattr(ui.out, "outputs", ())  # the output area stays empty: no figure drawn there, no error


def test_labels_with_dollar_signs_draw_as_written():
    q, k, v = small_head()
    tokens = ["$^$", "a$b", "$x$", "c", "d", "e"]  # "$^$" is broken mathtext: it used to raise when drawn
    ui = widgets.one_loop_player(q, k, v, labels=tokens, value=6)
    rendered(ui)
    ax_s = next(ax for ax in plot_of(ui).fig.axes if ax.get_label() == "s")
    assert [t.get_text().replace("\\$", "$") for t in ax_s.get_xticklabels()] == tokens


def test_nan_and_inf_inputs_give_widgets_that_draw():
    import flashmath as fm

    q, k, v = small_head()
    q[0, 1] = np.nan
    k_inf, v_inf = k.copy(), v.copy()
    k_inf[2, 0], v_inf[2, 0] = np.inf, np.inf
    y = fm.safe_softmax(q @ k.T)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "invalid value" warning from the drawing code either
        uis = [
            widgets.one_loop_player(q, k, v),
            widgets.one_loop_player(q, k_inf, v_inf, row=1),
            widgets.loop_swap_player(y, v),
            widgets.online_softmax_player([1.0, np.nan, 2.0]),
        ]
        for ui in uis:
            slider = ui.children[0].children[1]
            for step in sorted({1, 3, slider.max}):  # step 0 is drawn on construction; key 3 (m = 2) is the inf one
                move(ui, slider, step)


def test_play_runs_at_four_frames_a_second_or_more_by_default():
    # How long a frame takes is measured by `python -m flashmath.bench sliders`, which also checks that each
    # interval is at least 1.5 times the measured median; here only the defaults themselves.
    import flashmath as fm

    q, k, v = small_head()
    sweep = fm.scale_sweep([1, 4], rng=np.random.default_rng(0), n_queries=3, n_keys=4)
    players = {
        "online softmax": lambda **kw: widgets.online_softmax_player([1.0, 2.0], **kw),
        "scale": lambda **kw: widgets.scale_explorer(sweep, **kw),
        "loop swap": lambda **kw: widgets.loop_swap_player(fm.safe_softmax(q @ k.T), v, **kw),
        "one loop": lambda **kw: widgets.one_loop_player(q, k, v, **kw),
        "ring": lambda **kw: widgets.ring_player(*small_head(N=4, M=4), 2, **kw),
    }
    for name, player in players.items():
        assert play_of(player()).interval <= 250, name  # four frames a second or more by default
        assert play_of(player(interval=137)).interval == 137, name  # the interval asked for reaches the Play


def test_tile_sweep_player_steps_through_tiles_and_switches_order():
    q, k, v = small_head(N=5, M=7)
    ui = quiet(widgets.tile_sweep_player, q, k, v, block_q=2, block_k=3, causal=True)
    step, order = control(ui, "tile step"), control(ui, "order")
    assert (step.min, step.max, order.value) == (0, 3 * 3, "fa2")
    assert play_of(ui).max == step.max
    seen = {rendered(ui)}
    for t in (1, 5, 9):
        seen.add(move(ui, step, t))
    seen.add(move(ui, order, "fa1"))
    assert len(seen) == 5
    plot = plot_of(ui)
    assert plot.traces["fa2"].n_skipped > 0  # causal: the tiles above the diagonal are skipped
    with pytest.raises(ValueError, match="order must be 'fa1' or 'fa2'"):
        widgets.tile_sweep_player(q, k, v, order="fa3")
    with pytest.raises(ValueError, match="2-D"):
        widgets.tile_sweep_player(q[None], k[None], v[None])


def test_split_kv_player_redraws_for_every_split_count():
    q, k, v = small_head(N=1, M=9)
    ui = quiet(widgets.split_kv_player, q, k, v, max_splits=12, value=2)
    slider = control(ui, "splits")
    assert (slider.min, slider.max, slider.value) == (1, 12, 2)
    seen = {rendered(ui)}
    for p in (1, 3, 9, 12):  # 12 > M: empty ranges too
        seen.add(move(ui, slider, p))
    assert len(seen) == 5
    with pytest.raises(ValueError, match="one query"):
        widgets.split_kv_player(np.ones((2, 4)), k, v)
    with pytest.raises(ValueError, match=r"must be in 1..12"):
        widgets.split_kv_player(q, k, v, max_splits=12, value=13)


def test_precision_explorer_redraws_for_every_tile_size():
    from flashmath.precision import precision_study

    q, k, v = small_head(N=5, M=7)
    study = precision_study(q, k, v, blocks=(1, 3, 7))
    ui = quiet(widgets.precision_explorer, study, block=0)
    tile = control(ui, "tile size")
    seen = {rendered(ui)}
    for b in (1, 2):
        seen.add(move(ui, tile, b))
    assert len(seen) == 3
    assert plot_of(ui).state == {"block": 2}


def test_the_picture_is_shown_at_its_css_size_with_two_pixels_per_css_pixel():
    # stretched by the page's flex box, a 640 x 480 picture was blurred to about 964 x 723 (issue: widget pictures)
    from PIL import Image

    from flashmath.softmax import online_softmax_trace

    x = np.random.default_rng(1).normal(size=6)
    ui = widgets.online_softmax_player(x)
    width, height = viz.OnlineSoftmaxPlot(online_softmax_trace(x)).css_size  # the plot the widget shows
    assert ui.image.layout.width == f"{width}px" and ui.image.layout.height == "auto"
    assert ui.image.layout.max_width == "100%"
    with Image.open(io.BytesIO(ui.image.value)) as image:
        assert image.size == (viz.PIXEL_RATIO * width, viz.PIXEL_RATIO * height)
    move(ui, control(ui, "step"), 3)
    with Image.open(io.BytesIO(ui.image.value)) as image:
        assert image.size == (viz.PIXEL_RATIO * width, viz.PIXEL_RATIO * height)


def test_tile_traffic_explorer_redraws_for_tile_size_and_head_dimension():
    table = tile_traffic_table(256, dims=(32, 64), blocks=(8, 16, 32, 64))  # its numbers: tests/test_traffic.py
    ui = quiet(widgets.tile_traffic_explorer, table, block=16, D=32)
    seen = {rendered(ui)}
    seen.add(move(ui, control(ui, "B_r"), 64))
    seen.add(move(ui, control(ui, "D"), 64))
    assert len(seen) == 3
    assert plot_of(ui).state == {"block": 64, "D": 64}
    with pytest.raises(ValueError, match="block must be one of"):
        widgets.tile_traffic_explorer(table, block=12)
    with pytest.raises(ValueError, match="D must be one of"):
        widgets.tile_traffic_explorer(table, D=128)


def test_ops_explorer_redraws_for_every_tile_size():
    q, k, v = small_head(N=16, M=16)
    table = op_count_table(q, k, v, blocks=(2, 4, 8, 16))  # its numbers: tests/test_opcount.py
    ui = quiet(widgets.ops_explorer, table, block=4)
    seen = {rendered(ui)}
    for b in (2, 8, 16):
        seen.add(move(ui, control(ui, "B_r"), b))
    assert len(seen) == 4
    assert plot_of(ui).state == {"block": 16}
    with pytest.raises(ValueError, match="block must be one of"):
        widgets.ops_explorer(table, block=3)


def test_mask_explorer_redraws_for_every_kind_parameter_and_tile():
    from flashmath.variants import MASK_KINDS

    ui = quiet(widgets.mask_explorer, kind="causal", param=8, block=8, N=32)
    seen = {rendered(ui)}
    for kind in MASK_KINDS[1:]:
        seen.add(move(ui, control(ui, "mask or variant"), kind))
    move(ui, control(ui, "mask or variant"), "window")
    seen.add(move(ui, control(ui, "param"), 3))
    seen.add(move(ui, control(ui, "tile"), 4))
    assert len(seen) == len(MASK_KINDS) + 2
    title = plot_of(ui).title.get_text()
    assert "skipped" in title and "window" in title


def test_mask_explorer_checks_its_arguments_first():
    for kwargs, error in (
        ({"kind": "diagonal"}, ValueError),
        ({"block": 5}, ValueError),
        ({"param": 0}, ValueError),
        ({"param": 1.5}, TypeError),
    ):
        with pytest.raises(error):
            widgets.mask_explorer(**kwargs)


def test_rescale_explorer_redraws_for_every_threshold():
    from flashmath.data import load_heads

    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    q, k, v = (a[layer, head].astype(np.float64) for a in (heads.q, heads.k, heads.v))
    ui = widgets.rescale_explorer(q, k, v, row=n, threshold=2)
    slider = control(ui, "t")
    assert [value for _, value in slider.options] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0] and slider.value == 2.0
    seen = {rendered(ui)}
    for t in (0.0, 8.0, 1.0):
        seen.add(move(ui, slider, t))
    assert len(seen) == 4  # every threshold its own picture: the kept reference and its rescales move
    plot = plot_of(ui)
    assert plot.rescaled[0.0].sum() == 10 and plot.rescaled[2.0].sum() == 1  # the chapter's row, key by key


def test_rescale_explorer_checks_its_arguments_first():
    q = np.random.default_rng(0).standard_normal((6, 4))
    with pytest.raises(ValueError, match="threshold must be one of"):
        widgets.rescale_explorer(q, q, q, row=0, threshold=3)
    with pytest.raises(ValueError, match="row must be in 0..5"):
        widgets.rescale_explorer(q, q, q, row=6)
    with pytest.raises(ValueError, match="q must be 2-D"):
        widgets.rescale_explorer(q[None], q[None], q[None], row=0)
