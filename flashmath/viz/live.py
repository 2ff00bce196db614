"""Live figures: built once, updated in place, sent as PNG bytes. The pattern every figure of the course follows.

A plot is a subclass of :class:`LivePlot`. Its ``_build`` creates the figure's axes and every artist once and
names the artists that steps change with ``self.live(...)``; its ``_update(**state)`` only changes those artists'
data (``set_data``, ``set_height``, ``set_text``, colours...). The first draw computes the constrained layout, which
is then frozen. A picture for a widget is blitted: the axes, ticks, labels and legends are drawn once into a
background, and a step restores it and draws only the live artists before a fast PNG encoding, instead of a new
figure, a new layout, every tick label and a tight-cropped export. An update that changes the background (axis
limits, say) calls ``self.redraw_background()`` (with a key naming that background, it is kept and restored when a
step comes back to it; quantised limits, :func:`flashmath.viz.axes.nice_limits`, keep such changes rare; naming
the few artists that change, ``changed=[ax.yaxis]``, redraws only those over a kept base). Two more savings keep a
step, even to a state never shown before, within about 50 ms on two cores at two device pixels per CSS pixel
(``python -m flashmath.bench sliders``): runs of live bars are drawn as one collection, and the PNG is compressed
in bands of rows, of which only those a step changed are compressed again (:func:`flashmath.viz.png.encode_png`).
Each draws the pixels matplotlib draws (tests/test_viz.py); texts are left to matplotlib's own Agg renderer.
One class serves the three views of a plot, each with its own instance:

- the widget: :func:`flashmath.widgets.live_widget` puts ``plot.png()`` into an ``ipywidgets.Image`` after each
  move, so the old picture stays on the page until the new one is ready (no blank output); the plot is rendered
  at :data:`PIXEL_RATIO` device pixels per CSS pixel (:meth:`LivePlot.set_pixel_ratio`) and shown at its CSS
  size (:attr:`LivePlot.css_size`), so the picture is neither stretched nor blurred on a high-density screen;
- the static picture (GitHub, nbviewer): ``plot.update(step=...)``, then display ``plot`` (``_repr_png_``);
  the ``plot_*`` functions of :mod:`flashmath.viz` do this through pyplot, so Jupyter's inline backend shows it;
- the JavaScript animation: :func:`flashmath.viz.frames.animate_steps` over the same ``update``.

Example, a new plot for a later chapter::

    import numpy as np

    from flashmath import widgets
    from flashmath.viz.axes import index
    from flashmath.viz.frames import animate_steps
    from flashmath.viz.live import LivePlot
    from flashmath.viz.style import DPI, SEEN, UNSEEN

    class SquarePlot(LivePlot):
        def __init__(self, xs, *, step=0, figsize=(4.0, 3.0), dpi=DPI, pyplot=False):
            self.xs = np.asarray(xs, dtype=np.float64)
            super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, step=step)

        def _build(self):
            ax = self.fig.subplots()
            ax.plot(self.xs, self.xs ** 2, color=UNSEEN)
            (self.dot,) = ax.plot([], [], "o", color=SEEN)
            self.title = self.fig.suptitle("")
            self.live(self.dot, self.title)

        def _update(self, step):
            step = index(step, "step", len(self.xs))
            self.dot.set_data([self.xs[step]], [self.xs[step] ** 2])
            self.title.set_text(f"step {step}")

    ui = widgets.live_widget(SquarePlot(np.linspace(0, 1, 11)), step=widgets.step_slider(10), interval=200)
    picture = SquarePlot(np.linspace(0, 1, 11), step=10)  # a cell ending in `picture` shows the last step
    animation = animate_steps(SquarePlot(np.linspace(0, 1, 11), dpi=60), steps=range(11))  # .to_jshtml()

Nothing here computes softmax or attention: the plots draw traces computed by :mod:`flashmath`.
"""

from __future__ import annotations

import io
import zlib
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from flashmath._checks import integer
from flashmath.viz.png import encode_png
from flashmath.viz.style import DPI

__all__ = ["LivePlot", "Picture", "figure_signature"]


class LivePlot:
    """A figure built once whose artists a step updates in place (see the module docstring for the pattern).

    Subclasses set their data, then call ``super().__init__(figsize=..., dpi=..., pyplot=..., **state)`` with the
    first state to show, and implement ``_build()`` and ``_update(**state)``.

    Args:
        figsize: inches. dpi: dots per inch of the figure (and of :meth:`png`).
        pyplot: make the figure through ``matplotlib.pyplot``, so that Jupyter's inline backend shows it at the
            end of the cell (static pictures); False (widgets, animations) keeps it out of pyplot's list of open
            figures, so a widget moved a thousand times holds one figure.
        state: the first state, passed to ``_update``.

    Attributes:
        fig: the matplotlib Figure. state: the keyword arguments of the last update.
    """

    def __init__(self, *, figsize, dpi: int = DPI, pyplot: bool = False, **state):
        if pyplot:
            import matplotlib.pyplot as plt

            self.fig = plt.figure(figsize=figsize, dpi=dpi, layout="constrained")
        else:
            self.fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
            FigureCanvasAgg(self.fig)
        self.state: dict = {}
        self.dpi = dpi  # dots per inch of one CSS pixel per dot; the figure has dpi * pixel_ratio
        self.pixel_ratio = 1
        self._live: list = []  # the artists a step changes, drawn over the background in this order
        self._background = None  # the rest of the picture, rendered once (see rgb)
        self._background_key = None  # what the background shows (redraw_background's key), None: not kept
        self._backgrounds: dict = {}  # key -> a past background's pixels, zlib-compressed (see redraw_background)
        self._changed: tuple = ()  # redraw_background's ``changed``: the only artists a new background changes
        # (changed artists, the picture without them, what is drawn after them) (see _layered)
        self._base: tuple | None = None
        try:
            self._build()
            self.update(**state)
            self.fig.canvas.draw()  # the constrained layout, computed once for the first state...
        except BaseException:
            if pyplot:  # a bad first state leaves no figure behind for Jupyter to show
                plt.close(self.fig)
            raise
        self.fig.set_layout_engine("none")  # ...then frozen: a step moves data, never axes

    def _build(self) -> None:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def _update(self, *args: Any, **state: Any) -> None:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def live(self, *artists) -> None:
        """Name artists (or lists of them, e.g. a bar container) that updates change; they are drawn last."""
        for artist in artists:
            if isinstance(artist, (list, tuple)) or hasattr(artist, "patches"):
                self._live.extend(getattr(artist, "patches", artist))
            else:
                self._live.append(artist)

    def set_pixel_ratio(self, ratio: int) -> LivePlot:
        """Render ``ratio`` device pixels per CSS pixel (2 for a high-density screen): the same picture, with
        ``ratio`` times the pixels in each direction (the figure's dpi is ``dpi * ratio``). Returns the plot.

        Raises:
            TypeError: ``ratio`` not an integer. ValueError: ``ratio`` outside 1..4.
        """
        ratio = integer(ratio, "ratio (device pixels per CSS pixel)")
        if not 1 <= ratio <= 4:
            raise ValueError(f"ratio (device pixels per CSS pixel) must be in 1..4, got {ratio}")
        if ratio != self.pixel_ratio:
            self.fig.set_dpi(self.dpi * ratio)  # the frozen layout is in figure fractions and points: it scales
            self.pixel_ratio = ratio
            self._background = None
            self._backgrounds.clear()
            self._base = None
        return self

    @property
    def css_size(self) -> tuple[int, int]:
        """(width, height) in CSS pixels: the size to show the picture at, whatever its pixel ratio."""
        width, height = self.fig.get_size_inches() * self.dpi
        return round(width), round(height)

    def redraw_background(self, key=None, changed=()) -> None:
        """Call from ``_update`` when a step changes what is not live (axis limits, ticks, a legend).

        ``key``: a hashable name of the new background (e.g. the axis limits). A background drawn under a key is
        kept (compressed, about a tenth of a megabyte) and restored, not drawn again, when a later step names the
        same key: a slider moved back over a range draws each background once. The key must capture everything
        the background shows; None draws it anew.

        ``changed``: the artists of the background that this change can change, when they are few (e.g.
        ``[ax.yaxis]`` for new y limits: the ticks, tick labels and axis label), children of axes of the figure.
        The rest of the background is then drawn once, without them, and a new background is that picture with
        them drawn over it: the same pixels as a full draw where nothing drawn after them overlaps them (checked
        at each new background, from their extents; else the whole figure is drawn).
        """
        self._background = None
        self._background_key = key
        self._changed = tuple(changed)

    def update(self, **state) -> LivePlot:
        """Show another state (e.g. ``step=3``): artists' data change, nothing is rebuilt. Returns the plot."""
        self._update(**state)
        self.state = dict(state)
        return self

    def rgb(self) -> np.ndarray:
        """The rendered picture, ``(height, width, 3)`` uint8 (a view of the canvas: copy it to keep it).

        Blitting: the first call (and the first after :meth:`redraw_background`) draws the figure without the
        live artists and keeps that background; every call restores it and draws the live artists over it.
        """
        canvas: Any = self.fig.canvas  # Agg: copy_from_bbox, restore_region, buffer_rgba
        if self._background is None:
            key = self._background_key
            kept = self._backgrounds.get(key) if key is not None else None
            if kept is not None and kept[0] == "layer" and self._base is not None and self._base[0] == kept[1]:
                canvas.restore_region(self._base[1])  # the base, and the changed artists' pixels over it
                canvas.restore_region(kept[2])
            elif (
                kept is not None
                and kept[0] != "layer"
                and getattr(canvas, "renderer", None) is not None
                and kept[1] == self._rgba().shape
            ):
                pixels = self._rgba()
                pixels[...] = np.frombuffer(zlib.decompress(kept[0]), np.uint8).reshape(pixels.shape)
            elif self._changed and (region := self._layered()) is not None:
                if key is not None:
                    self._backgrounds[key] = ("layer", self._base[0], region)
            else:
                for artist in self._live:
                    artist.set_animated(True)  # left out of a full draw
                canvas.draw()
                if key is not None:
                    pixels = self._rgba()
                    self._backgrounds[key] = (zlib.compress(pixels.tobytes(), 1), pixels.shape)
            self._background = canvas.copy_from_bbox(self.fig.bbox)
        else:
            canvas.restore_region(self._background)
        for group in self._draw_groups():
            if isinstance(group, list):
                self.fig.draw_artist(self._bars_collection(group))
            else:
                self.fig.draw_artist(group)
        return self._rgba()[..., :3]

    def _layered(self):
        """Draw the background as the kept base with the changed artists (:meth:`redraw_background`) drawn over
        it, with the artists a full draw draws after them over them (the spine over an axis's tick marks): the
        layer. Returns the pixels of the layer's extent (a BufferRegion), or None, having drawn nothing, where
        that would not be a full draw's picture: something drawn after the layer in a full draw, and not in it,
        overlaps it; or a changed artist is not a child of the figure's axes."""
        from matplotlib.transforms import Bbox

        canvas: Any = self.fig.canvas
        changed = self._changed
        if any(getattr(artist, "axes", None) not in self.fig.axes for artist in changed):
            return None
        renderer = canvas.get_renderer()
        for artist in self._live:
            artist.set_animated(True)  # drawn over the background, not part of it
        if self._base is None or self._base[0] != changed:
            order = self._draw_order()
            position = {id(artist): k for k, artist in enumerate(order)}
            if any(id(artist) not in position for artist in changed):
                return None
            layer = set(map(id, changed))
            while True:  # the changed artists, and what is drawn after them over them, until nothing more overlaps
                boxes = [box for artist in order if id(artist) in layer for box in _extents(artist, renderer, 2)]
                first = min(position[i] for i in layer)
                more = {
                    id(artist)
                    for artist in order[first + 1 :]
                    if id(artist) not in layer
                    and any(box.overlaps(other) for box in _extents(artist, renderer, 2) for other in boxes)
                }
                if not more:
                    break
                layer |= more
            layer_artists = [artist for artist in order if id(artist) in layer]
            if any(artist.axes is None for artist in layer_artists):
                return None  # a figure-level artist or an axes over it: not a layer
            after = [
                box for artist in order[first + 1 :] if id(artist) not in layer for box in _extents(artist, renderer, 2)
            ]
            # the layer's artists that do not change: where they draw is known once and for all
            fixed = [box for artist in layer_artists if artist not in changed for box in _extents(artist, renderer, 2)]
            for artist in layer_artists:
                artist.set_animated(True)  # left out of the base
            canvas.draw()
            for artist in layer_artists:
                artist.set_animated(False)
            self._base = (changed, canvas.copy_from_bbox(self.fig.bbox), layer_artists, after, fixed)
        else:
            canvas.restore_region(self._base[1])
        assert self._base is not None  # kept above, or just made
        layer_artists, after, fixed = self._base[2], self._base[3], self._base[4]
        for artist in layer_artists:
            self.fig.draw_artist(artist)
        boxes = [*fixed, *(box for artist in changed for box in _extents(artist, renderer, 2))]
        if not boxes or any(box.overlaps(other) for box in boxes for other in after):
            self._base = None  # the layer grew over something drawn after it: a full draw instead
            return None
        extent = Bbox.intersection(Bbox.union(boxes), self.fig.bbox)
        return canvas.copy_from_bbox(extent) if extent is not None else None

    def _draw_order(self) -> list:
        """The static artists in the order a full draw of the figure draws them: the figure's children by zorder
        (as Figure.draw sorts them), an axes as its children by zorder (as Axes.draw sorts them), its patch
        first; artists that are not axes or their children stand for themselves."""

        def drawn(children):
            return sorted(
                (c for c in children if c.get_visible() and not c.get_animated()), key=lambda c: c.get_zorder()
            )

        order: list = [self.fig.patch]
        for artist in drawn(c for c in self.fig.get_children() if c is not self.fig.patch):
            if artist in self.fig.axes:
                order += [artist.patch, *drawn(c for c in artist.get_children() if c is not artist.patch)]
            else:
                order.append(artist)
        return order

    def _draw_groups(self) -> list:
        """The live artists in drawing order, runs of plain bars (see :meth:`_bars_collection`) as lists."""
        groups: list = []
        for artist in self._live:
            if _plain_bar(artist):
                last = groups[-1] if groups else None
                if (
                    isinstance(last, list)
                    and last[0].axes is artist.axes
                    and last[0].get_data_transform() is artist.get_data_transform()
                ):
                    last.append(artist)
                    continue
                groups.append([artist])
            else:
                groups.append(artist)
        return groups

    def _bars_collection(self, bars: list) -> PolyCollection:
        """``bars`` (plain rectangles of one axes) as one PolyCollection, drawn in one renderer call.

        Drawing each ``Rectangle`` costs about a quarter of a millisecond of Python (transforms, a graphics context);
        a step of a plot with a hundred bars spent most of its time there. The collection has the bars' corners,
        colours and edges, in their order, with the same clipping, so the picture is the same.
        """
        cache = self.__dict__.setdefault("_collections", {})
        key = (id(bars[0]), len(bars))
        collection = cache.get(key)
        first = bars[0]
        if collection is None:
            collection = PolyCollection([], transform=first.get_data_transform())
            collection.set_figure(self.fig)
            collection.axes = first.axes
            collection.set_clip_on(first.get_clip_on())
            collection.set_clip_box(first.get_clip_box())
            collection.set_clip_path(first.get_clip_path())
            collection.set_joinstyle(first.get_joinstyle())
            collection.set_capstyle(first.get_capstyle())
            cache[key] = collection
        shown = [bar for bar in bars if bar.get_visible()]
        x0 = np.array([bar.get_x() for bar in shown], dtype=np.float64)
        y0 = np.array([bar.get_y() for bar in shown], dtype=np.float64)
        x1 = x0 + np.array([bar.get_width() for bar in shown], dtype=np.float64)
        y1 = y0 + np.array([bar.get_height() for bar in shown], dtype=np.float64)
        collection.set_verts(np.stack([np.stack([x0, x0, x1, x1], 1), np.stack([y0, y1, y1, y0], 1)], 2))
        collection.set_facecolor([bar.get_facecolor() for bar in shown])
        collection.set_edgecolor([bar.get_edgecolor() for bar in shown])
        collection.set_linewidth([bar.get_linewidth() for bar in shown])
        collection.set_antialiased([bar.get_antialiased() for bar in shown])
        return collection

    def _rgba(self) -> np.ndarray:
        """The canvas as it is, ``(height, width, 4)`` uint8 (a view: no copy)."""
        canvas: Any = self.fig.canvas  # Agg
        return np.asarray(canvas.buffer_rgba())

    def _unblit(self) -> None:
        """Back to ordinary drawing (savefig and animations leave animated artists out)."""
        for artist in self._live:
            artist.set_animated(False)
        self._background = None
        self._backgrounds.clear()
        self._base = None

    def png(self) -> bytes:
        """The picture as PNG bytes (what a widget sends to the browser), quickly encoded (:func:`encode_png`)."""
        self.rgb()
        # the canvas's own RGBA (opaque): no copy into RGB first; bands a step left alone are not compressed again
        return encode_png(self._rgba(), bands=self.__dict__.setdefault("_png_bands", {}))

    def _repr_png_(self) -> bytes:
        return self.png()


class Picture:
    """A PNG picture that Jupyter shows (the last expression of a cell). ``data``: the PNG bytes."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.width, self.height = Image.open(io.BytesIO(self.data)).size

    def _repr_png_(self) -> bytes:
        return self.data

    def __repr__(self) -> str:  # the text/plain beside the picture: short, and the same on every machine
        return f"<flashmath picture, {self.width} x {self.height} pixels>"


def figure_signature(fig) -> bytes:
    """The rendered pixels of a figure (or a :class:`LivePlot`), for tests that check a picture changed."""
    if isinstance(fig, LivePlot):
        return fig.rgb().tobytes()  # what the widget sends, blitted
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].tobytes()


def _extents(artist, renderer, pad: float) -> list:
    """Where ``artist`` draws, in pixels: its tight box padded by ``pad`` pixels (antialiasing, line widths); an
    axis's tick marks too (outside its tight box, which holds the labels). [] for an artist that draws nothing."""
    box = artist.get_tightbbox(renderer)
    if box is None or not np.isfinite(box.bounds).all():
        return []
    ticks = 0.0
    for name in ("majorTicks", "minorTicks"):
        kept = getattr(artist, name, None)
        if kept:
            ticks = max(ticks, kept[0].get_tick_padding() * renderer.points_to_pixels(1.0))
    return [box.padded(pad + ticks)]


def _plain_bar(artist) -> bool:
    """A Rectangle drawable as part of a PolyCollection: unrotated, solid edge, no hatch, no path effects."""
    return (
        type(artist) is Rectangle
        and artist.angle == 0
        and artist.get_hatch() is None
        and artist.get_linestyle() in ("solid", "-")
        and not artist.get_path_effects()
        and artist.get_zorder() == Rectangle.zorder
        and artist.get_sketch_params() is None
    )
