"""Drawing functions: animations redraw one figure per step; step plots draw into a given figure."""

import io
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Text
from PIL import Image

import flashmath as fm
from flashmath import viz
from flashmath.viz import live, png

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


PLOT_IDS = ["splitkv", "online", "tiles", "overflow", "scale", "swap", "one_loop"]


def small_plots():
    """One instance of every live plot of the course, on small inputs, with its step keyword and steps."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    sweep = fm.scale_sweep([1, 4, 16], rng=rng, n_queries=5, n_keys=6)
    x = rng.standard_normal(6) * 3
    from flashmath.widgets import tile_sweep_traces

    traces, scores, standard = tile_sweep_traces(q, k, v, block_q=1, block_k=2, causal=True)
    splits = {p: fm.split_kv_trace(q[:1], k, v, p) for p in (1, 2, 3, 7)}
    return [
        (lambda **s: viz.SplitKVPlot(splits, (q[:1] @ k.T)[0] / np.sqrt(3), **s), "splits", [1, 3, 7, 2]),
        (lambda **s: viz.OnlineSoftmaxPlot(fm.online_softmax_trace(x), **s), "step", [0, 3, 6, 2]),
        (
            lambda **s: viz.TileSweepPlot(traces, scores=scores, standard_bytes=standard, **s),
            ("step", "order"),
            [(0, "fa2"), (4, "fa2"), (4, "fa1"), (6, "fa1"), (2, "fa2")],
        ),
        (
            lambda **s: viz.OverflowPlot(x, **s),
            ("scale", "dtype"),
            [(1.0, "float16"), (40.0, "float16"), (40.0, "float64"), (3.0, "float32")],
        ),
        (lambda **s: viz.ScalePlot(sweep, **s), "D", [1, 16, 4]),
        (lambda **s: viz.LoopSwapPlot(fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v), row=1, **s), "step", [0, 5, 2]),
        (lambda **s: viz.OneLoopPlot(fm.one_loop_trace(q, k, v), row=1, dims=(0, 3), **s), "step", [0, 5, 2]),
    ]


def state(key, value):
    return dict(zip(key, value, strict=False)) if isinstance(key, tuple) else {key: value}


@pytest.mark.parametrize("make, key, steps", small_plots(), ids=PLOT_IDS)
def test_a_plot_moved_through_steps_shows_what_a_fresh_one_shows(make, key, steps):
    """Blitting leaves nothing of an earlier step behind, and each step has its own picture."""
    plot = make(**state(key, steps[0]))
    figure, pictures = plot.fig, set()
    for value in steps[1:]:
        pictures.add(plot.update(**state(key, value)).rgb().tobytes())
    assert plot.fig is figure  # updated in place
    assert len(pictures) == len(steps) - 1
    fresh = make(**state(key, steps[0])).update(**state(key, steps[-1]))  # same layout, no history
    assert plot.rgb().tobytes() == fresh.rgb().tobytes()
    assert plot.png()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("make, key, steps", small_plots(), ids=PLOT_IDS)
def test_the_layout_is_frozen_after_the_first_draw(make, key, steps):
    plot = make(**state(key, steps[0]))
    positions = [ax.get_position().bounds for ax in plot.fig.axes]
    for value in steps[1:]:
        plot.update(**state(key, value)).rgb()
    assert [ax.get_position().bounds for ax in plot.fig.axes] == positions


def test_live_plots_stay_out_of_pyplot_and_static_pictures_go_through_it():
    before = set(plt.get_fignums())
    trace = fm.online_softmax_trace(np.array([0.5, 2.0, 1.0]))
    viz.OnlineSoftmaxPlot(trace, step=2)
    assert set(plt.get_fignums()) == before
    fig = viz.plot_online_softmax_step(trace, 2)  # shown by Jupyter's inline backend at the end of a cell
    assert fig.number in plt.get_fignums()
    with pytest.raises(ValueError, match="step i must be in 0..3"):
        viz.plot_online_softmax_step(trace, 4)
    assert set(plt.get_fignums()) == before | {fig.number}  # a bad step leaves no half-built figure open


def test_animation_has_one_distinct_frame_per_step():
    trace = fm.online_softmax_trace(np.array([0.5, 2.0, 1.0]))
    plot = viz.OnlineSoftmaxPlot(trace, dpi=30)
    plot.png()  # a plot used for a widget first is still drawn whole by the animation
    anim = viz.animate_steps(plot)
    frames = []
    for step in range(len(trace) + 1):
        anim._func(step)  # what the animation draws for that frame
        frames.append(viz.figure_signature(plot.fig))
    assert len(set(frames)) == len(trace) + 1
    html = anim.to_jshtml(fps=2)
    assert html.count("data:image/png;base64") == len(trace) + 1
    with pytest.raises(TypeError, match="LivePlot"):
        viz.animate_steps(viz.plot_online_softmax_step)


def test_animation_over_named_states():
    sweep = fm.scale_sweep([1, 4, 16], rng=np.random.default_rng(0), n_queries=5, n_keys=6)
    anim = viz.animate_steps(viz.ScalePlot(sweep, dpi=30), steps=[1, 4, 16], name="D")
    assert anim.to_jshtml().count("data:image/png;base64") == 3


def one_loop_trace_of(N=2, M=6, D=4, Dv=4, seed=0):
    rng = np.random.default_rng(seed)
    return fm.one_loop_trace(rng.standard_normal((N, D)), rng.standard_normal((M, D)), rng.standard_normal((M, Dv)))


def test_nan_traces_draw_every_step():
    """NaN in, NaN out, and the figure still draws: the axis limits ignore what is not finite."""
    x = np.array([0.5, np.nan, 1.0])
    q, k, v = np.ones((1, 2)), np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 2.0]]), np.arange(6.0).reshape(3, 2)
    traces = [
        (viz.plot_online_softmax_step, fm.online_softmax_trace(x)),
        (viz.plot_loop_swap_step, fm.loop_swap_trace(fm.safe_softmax(q @ k.T), v)),
        (viz.plot_one_loop_step, fm.one_loop_trace(q, k, v)),
    ]
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
        return [
            (text.get_text(), to_hex(handle.get_color() if isinstance(handle, Line2D) else handle.get_facecolor()))
            for ax in fig.axes
            if ax.get_legend() is not None
            for text, handle in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles, strict=False)
        ]

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
    assert numbers == [
        f"{float(trace.x[3, 0]):.3g}",
        f"{float(trace.g[3, 0]):.3g}",
        f"{float(trace.s[3, 0]):.3g}",
        f"{float(trace.correction[3, 0]):.3g}",
    ]
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


def test_split_kv_title_says_how_many_keys_the_ranges_really_hold():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 3)), rng.standard_normal((46, 3)), rng.standard_normal((46, 2))
    traces = {p: fm.split_kv_trace(q, k, v, p) for p in (1, 2, 3, 16, 50)}
    plot = viz.SplitKVPlot(traces, (q @ k.T)[0])
    titles = {p: plot.update(splits=p).title.get_text().split(",")[0] for p in traces}
    assert titles == {
        1: "1 key range of 46 keys",
        2: "2 key ranges of 23 keys each",
        3: "3 key ranges of 15 or 16 keys",  # 15, 15, 16
        16: "16 key ranges of 2 or 3 keys",  # fourteen of 3, two of 2: not "about 2" (46 // 16)
        50: "50 key ranges of 0 or 1 keys",  # more ranges than keys: some are empty
    }


def test_split_kv_tree_shows_only_its_own_levels_and_its_leaf_labels_clear_the_edges():
    """Issue 35 (review rev-c): 3 ranges merge in 2 levels, so the tree shows 3 rows, not the 5 of 16 ranges (no empty
    "merge 3" and "merge 4" rows); no leaf label touches an edge, at the notebook's size."""
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 3)), rng.standard_normal((46, 3)), rng.standard_normal((46, 2))
    traces = {p: fm.split_kv_trace(q, k, v, p) for p in (3, 16)}
    plot = viz.SplitKVPlot(traces, (q @ k.T)[0], dpi=100)
    for p, rows in ((16, 5), (3, 3), (16, 5)):
        plot.update(splits=p)
        plot.rgb()
        labels = [t.get_text() for t in plot.ax_t.get_yticklabels()]
        assert labels == ["ranges"] + [f"merge {j}" for j in range(1, rows)], (p, labels)
        assert plot.ax_t.get_ylim()[0] < rows  # no room for a row below the root
    renderer = plot.fig.canvas.get_renderer()
    to_pixels = plot.ax_t.transData.transform
    points = np.concatenate([np.linspace(a, b, 200) for a, b in map(np.asarray, plot.edges.get_segments())])
    pixels = to_pixels(points)
    leaves = [t for t in plot.nodes if t.get_visible()][:16]
    for label in leaves:
        box = label.get_window_extent(renderer)
        inside = (pixels[:, 0] > box.x0) & (pixels[:, 0] < box.x1) & (pixels[:, 1] > box.y0) & (pixels[:, 1] < box.y1)
        assert not inside.any(), label.get_text()
    # review rev20-d: the first leaf label clears the y-axis spine, and every text is at least 12.5 px to the em
    # (its digits and capitals 9 px high) at the notebook's dpi=100
    assert leaves[0].get_window_extent(renderer).x0 > plot.ax_t.get_window_extent(renderer).x0 + 10
    texts = [t for t in plot.fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(t.get_fontsize() for t in texts) * 100 / 72 >= 12.5


def test_scale_figure_entropy_legend_is_above_its_axes():
    sweep = fm.scale_sweep([1, 4, 16, 64], rng=np.random.default_rng(0), n_queries=20, n_keys=16)
    fig = viz.plot_scale_step(sweep, 2)
    fig.canvas.draw()
    ax_e = fig.axes[3]
    assert ax_e.get_ylabel() == "mean entropy (nats)"
    legend_box = ax_e.get_legend().get_window_extent()
    assert legend_box.y0 >= ax_e.get_window_extent().y1 - 1  # outside the axes: it covers no curve
    assert {ax.get_xlabel() for ax in fig.axes[1:]} == {"head dimension D"}


def test_the_pattern_example_in_the_live_module_runs():
    """The example in flashmath/viz/live.py's docstring is the template for new chapters: it must work."""
    import re

    example = re.search(r"Example, a new plot for a later chapter::\n\n(.*?)\n\n(?=\S)", live.__doc__, re.S).group(1)
    namespace: dict = {}  # the example imports what it uses
    exec(compile("\n".join(line[4:] for line in example.splitlines()), "live.py example", "exec"), namespace)
    ui, picture, animation = namespace["ui"], namespace["picture"], namespace["animation"]
    assert ui.image.value[:4] == b"\x89PNG" and picture._repr_png_()[:4] == b"\x89PNG"
    assert animation.to_jshtml().count("data:image/png;base64") == 11


@pytest.mark.parametrize("shape", [(1, 1, 3), (3, 5, 3), (48, 64, 3), (48, 64, 4), (2, 7, 4)])
def test_encode_png_is_read_back_exactly(shape):
    import io

    from PIL import Image

    rng = np.random.default_rng(sum(shape))
    rgb = rng.integers(0, 256, shape, dtype=np.uint8)
    rgb[1:2] = rgb[0:1]  # a row equal to the row above, as in most of a plot
    with Image.open(io.BytesIO(png.encode_png(rgb))) as image:
        assert image.mode == ("RGB" if shape[2] == 3 else "RGBA") and image.size == (shape[1], shape[0])
        np.testing.assert_array_equal(np.asarray(image), rgb)


def _idat(png: bytes) -> bytes:
    """The concatenated IDAT data of a PNG (a zlib stream)."""
    import struct

    data, at = b"", 8
    while at < len(png):
        (length,), kind = struct.unpack(">I", png[at : at + 4]), png[at + 4 : at + 8]
        if kind == b"IDAT":
            data += png[at + 8 : at + 8 + length]
        at += 12 + length
    return data


def test_banded_png_encoding_follows_each_change_and_reuses_the_rest():
    import io
    import zlib

    from PIL import Image

    rows = png.PNG_BAND_ROWS
    rng = np.random.default_rng(5)
    height = 4 * rows + rows // 2  # 5 bands, the last one short
    rgb = np.full((height, 40, 4), 255, np.uint8)
    rgb[:, :, :3] = rng.integers(0, 256, (height, 40, 3), dtype=np.uint8)
    bands: dict = {}
    for change in [None, (0, 1), (2 * rows + 3, 2 * rows + 4), (height - 1, height), (rows - 1, rows + 1)]:
        if change is not None:
            rgb[change[0] : change[1], 3:9, 1] += 17
        data = png.encode_png(rgb, bands=bands)
        with Image.open(io.BytesIO(data)) as image:
            np.testing.assert_array_equal(np.asarray(image), rgb)
        whole = zlib.decompress(_idat(data))  # checks zlib's header and the Adler-32 of the rows too
        assert zlib.decompress(_idat(png.encode_png(rgb))) == whole  # the same filtered rows, fresh
    kept = {start: band[1] for start, band in bands.items() if isinstance(start, int)}
    rgb[3 * rows + 2, 0, 0] += 1  # one band (the fourth) changes: the others keep their compressed bytes
    png.encode_png(rgb, bands=bands)
    again = {start: band[1] for start, band in bands.items() if isinstance(start, int)}
    assert sorted(again) == [0, rows, 2 * rows, 3 * rows, 4 * rows]
    assert [again[s] is kept[s] for s in sorted(again)] == [True, True, True, False, True]
    rgb[4 * rows - 1, 5, 2] += 1  # the last row of a band: the next band's first row is filtered against it
    png.encode_png(rgb, bands=bands)
    assert [bands[s][1] is again[s] for s in sorted(again)] == [True, True, True, False, False]
    with Image.open(io.BytesIO(png.encode_png(rgb, bands=bands))) as image:
        np.testing.assert_array_equal(np.asarray(image), rgb)


def test_a_plots_png_is_its_pixels():
    import io

    from PIL import Image

    plot = viz.OnlineSoftmaxPlot(fm.online_softmax_trace(np.array([0.5, -1.0, 2.0])), step=2, dpi=30)
    with Image.open(io.BytesIO(plot.png())) as image:
        pixels = np.asarray(image)
    np.testing.assert_array_equal(pixels[..., :3], plot.rgb())
    assert (pixels[..., 3] == 255).all(), "opaque"


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((4, 4, 3), np.float32),
        np.zeros((4, 4), np.uint8),
        np.zeros((0, 4, 3), np.uint8),
        np.zeros((4, 4, 2), np.uint8),
    ],
)
def test_encode_png_refuses_what_is_not_an_rgb_picture(bad):
    with pytest.raises(ValueError, match=r"\(height, width, 3 or 4\) uint8"):
        png.encode_png(bad)


def test_a_pixel_ratio_renders_the_same_picture_with_more_pixels():
    trace = fm.online_softmax_trace(np.array([0.5, -1.0, 2.0, 0.0]))
    plot = viz.OnlineSoftmaxPlot(trace, step=2, dpi=30)
    one = plot.rgb().copy()
    assert plot.css_size == (one.shape[1], one.shape[0])
    two = plot.set_pixel_ratio(2).rgb()
    assert two.shape == (2 * one.shape[0], 2 * one.shape[1], 3) and plot.css_size == (one.shape[1], one.shape[0])
    # the same picture: averaged over 2 x 2 blocks, the sharp one is close to the small one (antialiasing differs)
    halved = two.reshape(one.shape[0], 2, one.shape[1], 2, 3).mean(axis=(1, 3))
    assert np.abs(halved - one).mean() < 8
    assert plot.update(step=3).rgb().shape == two.shape  # moves keep the ratio
    with pytest.raises(ValueError, match="1..4"):
        plot.set_pixel_ratio(0)


def test_the_offline_player_fetches_nothing_and_keeps_every_frame():
    sweep = fm.scale_sweep([1, 4, 16], rng=np.random.default_rng(0), n_queries=5, n_keys=6)
    plot = viz.ScalePlot(sweep, dpi=30)
    html = viz.offline_jshtml(viz.animate_steps(plot, steps=[1, 4, 16], name="D"))
    assert "font-awesome" not in html and "https://" not in html and 'class="fa ' not in html
    assert html.count("data:image/png;base64") == 3  # every frame, once


def _player_buttons(html: str) -> dict[str, str]:
    return dict(re.findall(r'<button title="([^"]+)"[^>]*>(.*?)</button>', html, flags=re.S))


def test_the_offline_player_draws_its_buttons_without_fonts():
    # ⏮ ⏸ ⏭ were empty boxes where the fonts lack them (a Debian with DejaVu and Liberation only): every button's
    # content is one inline SVG, no character at all, and each button keeps matplotlib's title
    sweep = fm.scale_sweep([1, 4], rng=np.random.default_rng(0), n_queries=5, n_keys=6)
    html = viz.offline_jshtml(viz.animate_steps(viz.ScalePlot(sweep, dpi=30), steps=[1, 4], name="D"))
    buttons = _player_buttons(html)
    assert set(buttons) == {
        "Decrease speed",
        "First frame",
        "Previous frame",
        "Play backwards",
        "Pause",
        "Play",
        "Next frame",
        "Last frame",
        "Increase speed",
    }
    for title, content in buttons.items():
        svg = re.fullmatch(r'\s*<svg [^>]*viewBox="0 0 16 16"[^>]*><path d="[^"]+"/></svg>\s*', content)
        assert svg, (title, content)
        assert 'fill="currentColor"' in content and 'aria-hidden="true"' in content
    assert len(set(buttons.values())) == len(buttons)  # nine different icons
    assert all(ord(c) < 128 for c in html if not c.isspace()), "a character some fonts lack"


def test_the_offline_player_holds_its_first_frame_in_the_html():
    # the <img> has the first frame and its size before any script runs (JupyterLab's content-visibility windowing
    # laid out an <img> whose src a script set off-screen at 0 x 0 px); the script reads the frame back from it
    import base64

    sweep = fm.scale_sweep([1, 4, 16], rng=np.random.default_rng(0), n_queries=5, n_keys=6)
    html = viz.offline_jshtml(viz.animate_steps(viz.ScalePlot(sweep, dpi=30), steps=[1, 4, 16], name="D"))
    ((img_id, src, width, height),) = re.findall(
        r'<img id="(_anim_img\w+)" src="(data:image/png;base64,[^"]+)" width="(\d+)" height="(\d+)">', html
    )
    png = base64.b64decode(src.split(",", 1)[1])
    assert Image.open(io.BytesIO(png)).size == (int(width), int(height)) != (0, 0)
    frames = {int(i): data.replace("\\\n", "") for i, data in re.findall(r'frames\[(\d)\] = "([^"]+)"', html)}
    assert set(frames) == {1, 2} and src not in frames.values()  # frame 0 is stored once, in the <img>
    timeout = html[html.index("setTimeout(function() {") :]
    assert timeout.index('frames[0] = document.getElementById(img_id).getAttribute("src");') < timeout.index(
        "new Animation(frames, img_id"
    )
    assert f'var img_id = "{img_id}";' in html


def test_the_offline_player_refuses_markup_it_does_not_know(monkeypatch):
    sweep = fm.scale_sweep([1, 4], rng=np.random.default_rng(0), n_queries=5, n_keys=6)
    anim = viz.animate_steps(viz.ScalePlot(sweep, dpi=30), steps=[1, 4], name="D")
    html = anim.to_jshtml()
    for changed in (
        html.replace('<img id="_anim_img', '<img class="x" id="_anim_img'),
        html.replace("setTimeout(function() {", "window.requestAnimationFrame(function() {"),
        html.replace('<i class="fa fa-pause"></i>', "||"),
    ):
        monkeypatch.setattr(anim, "to_jshtml", lambda changed=changed, **kwargs: changed)
        with pytest.raises(ValueError, match="matplotlib's animation player changed"):
            viz.offline_jshtml(anim)


def test_a_background_drawn_in_layers_is_the_full_draws_picture():
    # the overflow plot's new y limits redraw only the y axis (and the spine drawn over its ticks) over a kept
    # base: every picture must be pixel for pixel the one a full draw of the background gives
    rng = np.random.default_rng(11)
    x = rng.standard_normal(12) * 2
    layered, full = (viz.OverflowPlot(x, scale=1.0, dtype="float16") for _ in range(2))  # as the widget draws it
    states = [dict(scale=s, dtype=d) for d in ("float16", "float32") for s in (1.0, 3.0, 9.0, 30.0, 200.0, 3.0, 1.0)]
    drawn_in_layers = 0
    for state in states:
        layered.update(**state)
        new_background = layered._background is None and layered._background_key not in layered._backgrounds
        full.update(**state)
        full._changed = ()  # the whole figure drawn for each new background
        np.testing.assert_array_equal(layered.rgb(), full.rgb(), err_msg=str(state))
        drawn_in_layers += new_background and layered._base is not None
    assert drawn_in_layers >= 4, "the layers were used"


# ----------------------------------------------------------------------------------------------------------------
# Issue 35: legible token labels (chapter 5), a fitted static y range (chapter 7), the warp partition (chapter 7)
# ----------------------------------------------------------------------------------------------------------------


def tick_boxes_overlap(fig, ax):
    """Whether two of the axis's drawn x tick labels overlap, in pixels."""
    fig.canvas.draw()
    boxes = sorted((t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()), key=lambda b: b.x0)
    return any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


def test_one_loop_token_labels_of_a_long_row_name_the_jumps_and_do_not_overlap():
    from flashmath.viz.attention import labelled_keys

    rng = np.random.default_rng(3)
    M = 46
    trace = fm.one_loop_trace(rng.standard_normal((1, 8)), 2 * rng.standard_normal((M, 8)), rng.standard_normal((M, 4)))
    tokens = [f"tok{m}" for m in range(1, M + 1)]
    fig = viz.plot_one_loop_step(trace, M, labels=tokens)
    ax_s = next(ax for ax in fig.axes if ax.get_label() == "s")
    shown = [t.get_text() for t in ax_s.get_xticklabels()]
    g = trace.g[:, 0]
    jumps = [1] + [m for m in range(2, M + 1) if g[m - 1] > g[m - 2]]
    keys = [int(text.split()[0]) for text in shown]
    assert set(keys) <= set(jumps) and keys[0] == 1 and len(keys) >= 4
    assert all(text == f"{m} tok{m}" for m, text in zip(keys, shown, strict=True))
    assert all(b - a >= 2 for a, b in zip(keys, keys[1:], strict=False))
    assert not tick_boxes_overlap(fig, ax_s)
    assert ax_s.get_xlabel() == "key m: the first token and the tokens where the max jumped"
    # a short row keeps a label under every key
    assert labelled_keys(g[:6], 60.0) == [1, 2, 3, 4, 5, 6]
    assert labelled_keys(np.array([0.0, 1.0, 2.0, 3.0, 2.0, 5.0]), 5.0) == [1, 4]  # 13 px: 3 keys apart
    assert labelled_keys(np.array([np.nan, 1.0, 2.0]), 5.0) == [1]


def test_a_static_ops_picture_fits_its_y_range_and_the_widget_keeps_one():
    from flashmath.opcount import op_count_table
    from flashmath.viz.traffic import OpsPerScorePlot

    q, k, v = np.random.default_rng(7).standard_normal((3, 16, 8))
    table = op_count_table(q, k, v, blocks=(2, 4, 8, 16))
    fixed = [OpsPerScorePlot(table, block=b).right.get_ylim() for b in (2, 16)]
    assert fixed[0] == fixed[1]
    plot = OpsPerScorePlot(table, block=16, fit=True)
    tallest = max(bar.get_height() for order in ("fa1", "fa2") for bar in plot.bars[order])
    low, high = plot.right.get_ylim()
    assert low == 0 and tallest < high <= 1.2 * tallest < fixed[0][1]
    plot.update(block=2)  # the range follows the size shown
    assert plot.right.get_ylim()[1] == pytest.approx(fixed[0][1])
    for order in ("fa1", "fa2"):  # the bars add up to the non-matmul count the title prints
        heights = [bar.get_height() for bar in plot.bars[order]]
        assert sum(heights) == pytest.approx(table[order]["non_matmul"][0]) and heights[-1] > 0
    viz.strip(plot, [dict(block=b) for b in (2, 16)])


def test_the_warp_partition_colours_what_each_warp_owns():
    from matplotlib.patches import Rectangle

    fig = viz.plot_warp_partition(4)
    split_k, split_q = fig.axes
    assert "split-K" in split_k.get_title(loc="left") and "split-Q" in split_q.get_title(loc="left")
    colours = [{p.get_facecolor() for p in ax.patches if isinstance(p, Rectangle)} for ax in fig.axes]
    assert all(len(c) >= 5 for c in colours)  # 4 warps, grey, the outlines
    viz.figure_signature(fig)
    for bad, error in ((1, ValueError), (9, ValueError), (2.5, TypeError)):
        with pytest.raises(error):
            viz.plot_warp_partition(bad)


def test_partial_and_prefix_draws_chapter_4s_partial_sum_beside_the_prefix_output():
    """Review 35 (rev5-b): chapter 5 plots A_m beside A'_m for one output dimension; A'_m = c_m A_m, equal at M."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 3))
    trace = fm.one_loop_trace(q, k, v)
    fig = viz.plot_partial_and_prefix(trace, v, 2)
    left = fig.axes[0]
    partial, prefix = (line.get_ydata() for line in left.lines[:2])
    y = fm.attention(q, k, np.eye(9))[0]  # the final weights
    np.testing.assert_allclose(partial, np.cumsum(y * v[:, 2]), rtol=1e-12)
    np.testing.assert_allclose(prefix, trace.a[:, 0, 2], rtol=1e-12)
    assert abs(partial[-1] - prefix[-1]) < 1e-12 and np.all(np.abs(prefix) >= np.abs(partial) - 1e-15)
    with pytest.raises(ValueError):
        viz.plot_partial_and_prefix(trace, v[:5], 0)
    with pytest.raises(ValueError):
        viz.plot_partial_and_prefix(trace, v, 3)
    plt.close(fig)


def test_the_paged_cache_colours_each_physical_page_as_full_as_its_logical_page():
    """Issue 38 (rev11-e, zhrev-l 13-1): pages 7 and 3 hold 2 of their 4 tokens, so only half of each is coloured."""
    fig = viz.plot_paged_cache(np.array([[5, 2, 7], [0, 3, 0]]), np.array([10, 6]), 4, 9)
    try:
        ax = fig.axes[0]
        coloured = {}  # (x, y) -> the width of the filled rectangle there
        for patch in ax.patches:
            if isinstance(patch, plt.Rectangle) and patch.get_fill():
                coloured[patch.get_xy()] = patch.get_width()
        physical = {p: coloured[(p, 0)] for p in range(9)}
        assert physical[7] == pytest.approx(0.45) and physical[3] == pytest.approx(0.45)  # 2 of 4 tokens
        assert all(physical[p] == pytest.approx(0.9) for p in (0, 2, 5))  # full pages
        assert all(physical[p] == pytest.approx(0.9) for p in (1, 4, 6, 8))  # free pages: grey, whole
        logical = sorted(w for (x, y), w in coloured.items() if y == 2.0)
        assert logical == pytest.approx(sorted(physical[p] for p in (0, 2, 3, 5, 7)))  # the same fractions
        labels = {t.get_text(): t.get_position() for t in ax.texts if t.get_position()[1] == 0.4}
        assert labels["7"][0] == pytest.approx(7 + 0.225)  # the number centred in the coloured part
    finally:
        plt.close(fig)
