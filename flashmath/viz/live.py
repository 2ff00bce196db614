"""Live figures: built once, updated in place, sent as PNG bytes. The pattern every figure of the course follows.

A plot is a subclass of :class:`LivePlot`. Its ``_build`` creates the figure's axes and every artist once and
names the artists that steps change with ``self.live(...)``; its ``_update(**state)`` only changes those artists'
data (``set_data``, ``set_height``, ``set_text``, colours...). The first draw computes the constrained layout, which
is then frozen. A picture for a widget is blitted: the axes, ticks, labels and legends are drawn once into a
background, and a step restores it and draws only the live artists before a fast PNG encoding, instead of a new
figure, a new layout, every tick label and a tight-cropped export. An update that changes the background (axis
limits, say) calls ``self.redraw_background()`` (with a key naming that background, it is kept and restored when a
step comes back to it; quantised limits, :func:`nice_limits`, keep such changes rare; naming the few artists that
change, ``changed=[ax.yaxis]``, redraws only those over a kept base). More savings keep a step, even to a state
never shown before, within about 50 ms on two cores at two device pixels per CSS pixel: runs of live bars are
drawn as one collection; the canvas keeps the glyph bitmaps of texts it drew (a text is laid out and rendered
once) and of each glyph at each fraction of a pixel (a new title is mostly glyphs drawn before); mathtext is
parsed piece by piece, each ``$...$`` once (a title whose math stays the same, ``$x_i$ = 0.25``, parses no math
at a new step: write titles so); and the PNG is compressed in bands of rows, of which only those a step changed
are compressed again (:func:`encode_png`). Each of these draws the pixels matplotlib draws (tests/test_viz.py).
One class serves the three views of a plot, each with its own instance:

- the widget: :func:`flashmath.widgets.live_widget` puts ``plot.png()`` into an ``ipywidgets.Image`` after each
  move, so the old picture stays on the page until the new one is ready (no blank output); the plot is rendered
  at :data:`PIXEL_RATIO` device pixels per CSS pixel (:meth:`LivePlot.set_pixel_ratio`) and shown at its CSS
  size (:attr:`LivePlot.css_size`), so the picture is neither stretched nor blurred on a high-density screen;
- the static picture (GitHub, nbviewer): ``plot.update(step=...)``, then display ``plot`` (``_repr_png_``);
  the ``plot_*`` functions of :mod:`flashmath.viz` do this through pyplot, so Jupyter's inline backend shows it;
- the JavaScript animation: :func:`animate_steps` over the same ``update``.

Example, a new plot for a later chapter::

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

import base64
import io
import math
import re
import struct
import zlib
from collections.abc import Sized
from typing import Any, cast

import matplotlib
import numpy as np
from matplotlib import _mathtext, animation
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.mathtext import MathTextParser
from matplotlib.patches import Rectangle
from PIL import Image

from flashmath._checks import integer, size

__all__ = ["LivePlot", "Picture", "animate_steps", "offline_jshtml", "strip", "figure_signature", "encode_png", "DPI",
           "PIXEL_RATIO"]

DPI = 80  # dots per inch of live pictures: 8 inches are 640 (CSS) pixels, readable, and quick to draw and encode
PIXEL_RATIO = 2  # a widget's picture has 2 x 2 device pixels per CSS pixel: sharp on high-density screens too
PNG_COMPRESS_LEVEL = 1  # zlib level: 1 encodes several times faster than the default 6, for a slightly larger PNG
PNG_BAND_ROWS = 16  # rows per separately compressed band of a widget's PNG (encode_png's bands)

SEEN = "#1f77b4"
UNSEEN = "#c7c7c7"
JUMP = "#d62728"
HOLD = "#7f7f7f"
DIM_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]  # output dimensions drawn side by side
LEGEND_ABOVE: dict[str, Any] = dict(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, frameon=False)


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
            (_GlyphCachingCanvas if GLYPH_CACHE else FigureCanvasAgg)(self.fig)
        self.state: dict = {}
        self.dpi = dpi  # dots per inch of one CSS pixel per dot; the figure has dpi * pixel_ratio
        self.pixel_ratio = 1
        self._live: list = []  # the artists a step changes, drawn over the background in this order
        self._background = None  # the rest of the picture, rendered once (see rgb)
        self._background_key = None  # what the background shows (redraw_background's key), None: not kept
        self._backgrounds: dict = {}  # key -> a past background's pixels, zlib-compressed (see redraw_background)
        self._changed: tuple = ()  # redraw_background's ``changed``: the only artists a new background changes
        self._base = None  # (changed artists, the picture without them, what is drawn after them) (see _layered)
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
            elif (kept is not None and kept[0] != "layer" and getattr(canvas, "renderer", None) is not None
                  and kept[1] == self._rgba().shape):
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
                more = {id(artist) for artist in order[first + 1:] if id(artist) not in layer
                        and any(box.overlaps(other) for box in _extents(artist, renderer, 2) for other in boxes)}
                if not more:
                    break
                layer |= more
            layer_artists = [artist for artist in order if id(artist) in layer]
            if any(artist.axes is None for artist in layer_artists):
                return None  # a figure-level artist or an axes over it: not a layer
            after = [box for artist in order[first + 1:] if id(artist) not in layer
                     for box in _extents(artist, renderer, 2)]
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
            return sorted((c for c in children if c.get_visible() and not c.get_animated()),
                          key=lambda c: c.get_zorder())

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
                if (isinstance(last, list) and last[0].axes is artist.axes
                        and last[0].get_data_transform() is artist.get_data_transform()):
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


#: Whether live plots keep the glyph bitmaps of texts they drew (:class:`_GlyphCachingRenderer`): only on the
#: matplotlib it was checked on, pixel for pixel (3.11: each ``draw_text`` hands the renderer glyph images; older
#: releases hand it the font object, and their ``Text`` has no font features).
GLYPH_CACHE = tuple(int(part) for part in re.findall(r"\d+", matplotlib.__version__)[:2]) >= (3, 11)


class _GlyphRecorder:
    """Stands in for a RendererAgg's C++ renderer while one text is drawn: forwards every call, and keeps each
    glyph bitmap drawn (``draw_text_image``) with its place relative to the text's integer origin."""

    def __init__(self, renderer, x0: int, y0: int):
        self.renderer, self.x0, self.y0 = renderer, x0, y0
        self.glyphs: list | None = []  # None: something else than a glyph was drawn (a mathtext rule): not kept

    def draw_text_image(self, image, x, y, angle, gc):
        if self.glyphs is not None:
            self.glyphs.append((np.array(image), x - self.x0, y - self.y0, angle))
        return self.renderer.draw_text_image(image, x, y, angle, gc)

    def __getattr__(self, name):
        if self.glyphs is not None and name.startswith("draw"):
            self.glyphs = None
        return getattr(self.renderer, name)


class _GlyphCachingRenderer(RendererAgg):
    """Matplotlib's Agg renderer that keeps the glyph bitmaps of every text it draws, keyed by the text, its font,
    its angle and the fraction of a pixel of its position, and redraws a text seen before from them.

    Matplotlib (3.11) lays out and renders every glyph of a text in Python each time it is drawn; a widget's step
    redraws its live texts (node labels, titles) and a new background its tick labels, mostly texts seen at a
    step before. A glyph's bitmap depends on the pixel fraction of its position, not on the whole pixels, so a
    text at the same fraction of a pixel is the same bitmaps shifted: pixel for pixel what matplotlib draws.
    """

    MAX_TEXTS = 4096  # texts kept; past this the cache starts again

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._texts: dict = {}
        self.mathtext_parser = _PieceMathTextParser("path")  # what RendererAgg uses, math pieces parsed once
        self._glyphs: dict = {}  # one glyph's bitmap at a fraction of a pixel (see _draw_text_glyphs_and_boxes)
        self._layouts: dict = {}  # a plain text's glyphs and their places (see _draw_plain_text)

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath == "TeX":  # pragma: no cover - the course does not use TeX
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        x0, y0 = math.floor(x), math.floor(y)
        features = (tuple(mtext.get_fontfeatures() or ()), mtext.get_language()) if mtext is not None else None
        key = (s, hash(prop), bool(ismath), angle, x - x0, y - y0, gc.get_antialiased(), features, self.dpi)
        glyphs = self._texts.get(key)
        if glyphs is not None:
            for image, dx, dy, image_angle in glyphs:
                self._renderer.draw_text_image(image, x0 + dx, y0 + dy, image_angle, gc)
            return None
        renderer, recorder = self._renderer, _GlyphRecorder(self._renderer, x0, y0)
        self._renderer = recorder
        try:
            if ismath:
                super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
            else:
                self._draw_plain_text(gc, x, y, s, prop, angle, mtext)
        finally:
            self._renderer = renderer
        if recorder.glyphs is not None:
            if len(self._texts) >= self.MAX_TEXTS:
                self._texts.clear()
            self._texts[key] = recorder.glyphs
        return None


    def _draw_plain_text(self, gc, x, y, s, prop, angle, mtext) -> None:
        """Matplotlib's (3.11) RendererAgg.draw_text of a text without math, its layout kept: which glyphs, and
        where relative to the text's origin, depends on the string, the font, its size, the dpi and the layout
        options, not on where the text is drawn (a tick label on new axis limits, a node label that moved)."""
        from matplotlib.backends.backend_agg import get_hinting_flag
        from matplotlib.font_manager import fontManager, get_font

        font = get_font(fontManager._find_fonts_by_props(prop))  # both cached by matplotlib
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        size = prop.get_size_in_points()
        flags = get_hinting_flag()
        key = (s, font, size, self.dpi, flags, tuple(features) if features else None, language)
        glyphs = self._layouts.get(key)
        if glyphs is None:
            font.clear()  # as RendererAgg._prepare_font
            font.set_size(size, self.dpi)
            glyphs = [(item.ft_object, size, item.glyph_index, 0, 1, item.x, item.y)
                      for item in font._layout(s, flags=flags, features=features, language=language)]
            if len(self._layouts) >= self.MAX_TEXTS:
                self._layouts.clear()
            self._layouts[key] = glyphs
        self._draw_text_glyphs_and_boxes(gc, x, y, angle, glyphs, [])

    MAX_GLYPHS = 65536  # glyph bitmaps kept (a few hundred bytes each); past this the cache starts again

    def _draw_text_glyphs_and_boxes(self, gc, x, y, angle, glyphs, boxes):
        """Matplotlib's (3.11) drawing of a text's glyphs, each glyph's bitmap kept for the next time the glyph is
        drawn at the same fraction of a pixel (most glyphs of a new text were drawn before: the title of the next
        step); the boxes (mathtext's rules) are matplotlib's own."""
        from matplotlib.backends.backend_agg import get_hinting_flag
        from matplotlib.ft2font import RenderMode

        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        load_flags = get_hinting_flag()
        antialiased = gc.get_antialiased()
        height = self.height
        transforms: dict = {}
        kept_glyphs = self._glyphs
        for font, points, glyph_index, slant, extend, dx, dy in glyphs:  # dy is upwards
            # the 26.6 fixed-point position matplotlib gives FreeType, in whole pixels and 64ths of a pixel
            x64 = round(0x40 * (x + dx * cos - dy * sin))
            y64 = round(0x40 * (height - y + dx * sin + dy * cos))
            key = (font, points, self.dpi, angle, slant, extend, glyph_index, load_flags, antialiased,
                   x64 & 63, y64 & 63)
            kept = kept_glyphs.get(key)
            if kept is None:
                matrix = transforms.get((slant, extend))
                if matrix is None:
                    matrix = transforms[slant, extend] = (
                        (0x10000 * np.array([[cos, -sin], [sin, cos]]) @ [[extend, extend * slant], [0, 1]])
                        .round().astype(int))
                font.set_size(points, self.dpi)
                font._set_transform(matrix, [x64, y64])
                bitmap = font._render_glyph(glyph_index, load_flags,
                                            RenderMode.NORMAL if antialiased else RenderMode.MONO)
                buffer = np.array(bitmap.buffer)  # a copy: FreeType reuses its bitmap
                if not antialiased:
                    buffer *= 0xff
                if len(kept_glyphs) >= self.MAX_GLYPHS:
                    kept_glyphs.clear()
                # the bitmap's corner relative to the whole pixels of the position: a whole-pixel shift of the
                # position shifts the bitmap by as many pixels, nothing else
                kept = kept_glyphs[key] = (buffer, bitmap.left - (x64 >> 6), bitmap.top - (y64 >> 6))
            buffer, left, top = kept
            # draw_text_image's y is downwards & the bitmap bottom side
            self._renderer.draw_text_image(buffer, left + (x64 >> 6), int(height) - (top + (y64 >> 6))
                                           + buffer.shape[0], 0, gc)
        if boxes:
            super()._draw_text_glyphs_and_boxes(gc, x, y, angle, (), boxes)


class _PieceParser(_mathtext.Parser):
    """Matplotlib's mathtext parser that parses each piece of a string once: a text piece and a ``$...$`` piece
    are laid out (as boxes of glyphs) the first time they are met, then reused in the strings that hold them.

    Matplotlib parses a string with math (``"step t = 3: $B_r$ = 8"``) as text and math pieces, each laid out on
    its own with a state that depends only on the fonts, the size and the dpi, then set side by side in one
    horizontal list; it parses the whole string anew for every new string, with pyparsing (milliseconds per math
    piece). A widget's title changes its numbers at each step, not its math: here only the new pieces are parsed.
    Kept: each piece's boxes (matplotlib never changes them after the parse), keyed by the piece and by what the
    state holds (fonts, size, dpi and the text and mathtext rcParams); the font set of a context is kept too, with
    the glyph metrics it loaded. The result is the parse matplotlib makes, box for box (tests/test_viz.py).
    """

    MAX_PIECES = 4096  # pieces kept; past this the cache starts again

    def __init__(self):
        super().__init__()  # binds the grammar's actions to this instance's non_math and math_string
        self._pieces: dict = {}
        self._fontsets: dict = {}
        self._context = None

    def parse(self, s, fonts_object, fontsize, dpi):
        rc = tuple(repr(matplotlib.rcParams[key]) for key in _RC_KEYS)
        fonts_key = (type(fonts_object), fonts_object.default_font_prop, fonts_object.load_glyph_flags, rc)
        fonts_object = self._fontsets.setdefault(fonts_key, fonts_object)
        self._context = (fonts_key, fontsize, dpi)
        try:
            return super().parse(s, fonts_object, fontsize, dpi)
        finally:
            self._context = None

    def _keep(self, key, hlist) -> None:
        if len(self._pieces) >= self.MAX_PIECES:
            self._pieces.clear()
        self._pieces[key] = hlist

    def non_math(self, toks):
        key = ("text", toks[0], self._context)
        hlist = self._pieces.get(key) if self._context is not None else None
        if hlist is not None:
            super().non_math([""])  # the state change that parsing a text piece ends with (into math)
            return [hlist]
        result = super().non_math(toks)
        if self._context is not None:
            self._keep(key, result[0])
        return result

    def math_string(self, toks):
        key = ("math", toks[0], self._context)
        hlist = self._pieces.get(key) if self._context is not None else None
        if hlist is not None:
            self.pop_state()  # the state change that parsing a math piece ends with (back out of math)
            return [hlist]
        before = (len(self._state_stack), self._needs_space_after_subsuper)
        result = super().math_string(toks)
        # kept only when the piece starts and ends in the state any math piece starts and ends in
        if self._context is not None and len(result) == 1 and before == (len(self._state_stack) + 1, False) \
                and not self._needs_space_after_subsuper:
            self._keep(key, result[0])
        return result


#: The rcParams a mathtext layout may depend on (fonts, sizes, hinting): part of :class:`_PieceParser`'s keys.
_RC_KEYS = tuple(key for key in matplotlib.rcParams if key.startswith(("mathtext.", "font.", "text.")))


class _PieceMathTextParser(MathTextParser):
    """Matplotlib's MathTextParser with a :class:`_PieceParser` (shared by all live plots, like matplotlib's)."""

    def __init__(self, output):
        super().__init__(output)
        # built at the first use, as matplotlib builds its own (which, once built, this class would inherit)
        if not isinstance(type(self).__dict__.get("_parser"), _PieceParser):
            type(self)._parser = _PieceParser()


class _GlyphCachingCanvas(FigureCanvasAgg):
    """An Agg canvas whose renderer is a :class:`_GlyphCachingRenderer` (a live plot's canvas)."""

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = _GlyphCachingRenderer(w, h, self.figure.dpi)
            self._lastKey = key
        return self.renderer


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
    return (type(artist) is Rectangle and artist.angle == 0 and artist.get_hatch() is None
            and artist.get_linestyle() in ("solid", "-") and not artist.get_path_effects()
            and artist.get_zorder() == Rectangle.zorder and artist.get_sketch_params() is None)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """The Adler-32 of ``a + b`` from those of ``a`` and ``b`` and ``len(b)`` (zlib's adler32_combine)."""
    base = 65521
    rem = length2 % base
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % base
    sum1 = (sum1 + (adler2 & 0xFFFF) + base - 1) % base
    sum2 = (sum2 + ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + base - rem) % base
    return sum1 | (sum2 << 16)


def encode_png(rgb: np.ndarray, level: int = PNG_COMPRESS_LEVEL, *, bands: dict | None = None) -> bytes:
    """A ``(height, width, 3)`` (RGB) or ``(height, width, 4)`` (RGBA) uint8 picture as PNG bytes, each row but
    the first with PNG's "Up" filter.

    Pillow chooses a filter for every row by trying all five (PNG specification, section 9), which takes most of
    its encoding time and cannot be turned off for RGB; a plot is mostly rows equal to the row above, which the Up
    filter turns into zeros for zlib. At 1280 x 960 pixels this is about three times faster than Pillow at zlib
    level 1, for a file of the same size. Any PNG reader decodes it (tests/test_viz.py reads it back with Pillow).
    (An opaque RGBA picture is not turned into RGB first: taking three bytes of four costs more than zlib saves.)

    ``bands``: a dict kept between calls for pictures that change a little at a time (a widget's steps). The
    rows are compressed in bands of :data:`PNG_BAND_ROWS` rows, each its own run of deflate blocks ended by a
    sync flush (RFC 1951 blocks may follow one another at any byte boundary), with its own Adler-32 (combined into
    the stream's), and a band whose pixels, and the row above them, are those of the previous call reuses its
    compressed bytes: only the bands a step changed are filtered and compressed again.

    Raises:
        ValueError: ``rgb`` is not a non-empty ``(height, width, 3 or 4)`` uint8 array.
    """
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] not in (3, 4) or 0 in rgb.shape:
        raise ValueError(f"rgb must be a non-empty (height, width, 3 or 4) uint8 array, got {rgb.dtype} {rgb.shape}")
    height, width, channels = rgb.shape
    if bands is None:
        bands = {}
    if bands.get("shape") != (rgb.shape, level):
        bands.clear()
        bands["shape"] = (rgb.shape, level)
    flat = rgb.reshape(height, width * channels)
    parts, adler = [], 1
    for start in range(0, height, PNG_BAND_ROWS):
        stop = min(start + PNG_BAND_ROWS, height)
        above = max(start - 1, 0)
        raw = flat[above:stop].tobytes()  # the band and the row above it (which its first row is filtered with)
        kept = bands.get(start)
        if kept is None or kept[0] != raw:
            filtered = np.empty((stop - start, 1 + width * channels), np.uint8)  # filter type, filtered bytes
            filtered[:, 0] = 2  # Up: each byte minus the byte above it, modulo 256
            if start == 0:
                filtered[0, 0], filtered[0, 1:] = 0, flat[0]  # None: the first row has no row above
                np.subtract(flat[1:stop], flat[:stop - 1], out=filtered[1:, 1:])
            else:
                np.subtract(flat[start:stop], flat[above:stop - 1], out=filtered[:, 1:])
            deflate = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw deflate: no header of its own
            kept = bands[start] = (raw, deflate.compress(filtered.data) + deflate.flush(zlib.Z_SYNC_FLUSH),
                                   zlib.adler32(filtered.data), filtered.size)
        parts.append(kept[1])
        adler = _adler32_combine(adler, kept[2], kept[3])
    parts.append(zlib.compressobj(level, zlib.DEFLATED, -15).flush())  # an empty final block
    # zlib's stream (RFC 1950): header 78 01 (deflate, 32 KiB window, fastest), blocks, Adler-32 of the rows
    data = b"\x78\x01" + b"".join(parts) + struct.pack(">I", adler)
    color_type = 2 if channels == 3 else 6  # RGB or RGBA
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)  # 8 bits, deflate, adaptive filters
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", data)
            + _png_chunk(b"IEND", b""))


def animate_steps(plot: LivePlot, steps=None, *, name: str = "step", interval: int = 500):
    """A :class:`matplotlib.animation.FuncAnimation` that shows ``plot.update(**{name: s})`` for ``s`` in ``steps``
    (the plot's other state keywords keep their values).

    ``.to_jshtml()`` gives a self-contained HTML player that works without a kernel (nbviewer, GitHub's static
    view); every frame is stored in it as a PNG, so keep the plot's ``dpi`` and the number of steps modest.

    Args:
        plot: a :class:`LivePlot` made for the animation (its own instance; ``pyplot=False``).
        steps: the states to show, in order (default ``0..len(plot)``, for plots that have a length).
        name: the keyword of ``plot.update`` that the steps feed.
        interval: milliseconds between frames.

    Returns:
        the animation (its figure is ``plot.fig``).

    Raises:
        TypeError: ``plot`` is not a LivePlot. ValueError: no steps.
    """
    if not isinstance(plot, LivePlot):
        raise TypeError(f"plot must be a flashmath.viz LivePlot (e.g. viz.OnlineSoftmaxPlot(trace)), "
                        f"got {type(plot).__name__}")
    steps = list(range(len(cast(Sized, plot)) + 1)) if steps is None else list(steps)
    if not steps:
        raise ValueError("steps must list at least one step")
    interval = integer(interval, "interval (milliseconds between frames)")
    plot._unblit()

    def frame(step):
        plot.update(**{**plot.state, name: step})  # the other keywords (an order, a dtype) stay as they are
        return plot.fig.axes

    return animation.FuncAnimation(plot.fig, frame, frames=steps, interval=interval, blit=False,
                                   cache_frame_data=False)


def _icon(path: str) -> str:
    """A player button's icon as inline SVG in the button's text colour: drawn the same with any font."""
    return (f'<svg viewBox="0 0 16 16" width="12" height="12" fill="currentColor" aria-hidden="true" '
            f'focusable="false" style="vertical-align: middle"><path d="{path}"/></svg>')


#: The buttons of matplotlib's JavaScript player as inline SVG: its ``to_jshtml`` draws them with Font Awesome icons
#: loaded from a CDN (``matplotlib/_animation_data.py``), which are blank without a network, and Unicode characters
#: instead (⏮ ⏸ ⏭) are empty boxes where the system fonts lack them (a Debian with only DejaVu and Liberation).
#: Each button keeps matplotlib's ``title`` and ``aria-label``, which name it.
_PLAYER_ICONS = {
    "fa-minus": _icon("M2 7h12v2H2z"),
    "fa-fast-backward": _icon("M1 2h2v12H1zM9 2 3 8l6 6zM15 2 9 8l6 6z"),
    "fa-step-backward": _icon("M2 2h3v12H2zM14 2 5 8l9 6z"),
    "fa-play fa-flip-horizontal": _icon("M13 2 3 8l10 6z"),
    "fa-pause": _icon("M3 2h4v12H3zM9 2h4v12H9z"),
    "fa-play": _icon("M3 2l10 6-10 6z"),
    "fa-step-forward": _icon("M2 2l9 6-9 6zM11 2h3v12h-3z"),
    "fa-fast-forward": _icon("M1 2l6 6-6 6zM7 2l6 6-6 6zM13 2h2v12h-2z"),
    "fa-plus": _icon("M7 2h2v5h5v2H9v5H7V9H2V7h5z"),
}

# matplotlib's player: an <img> without a src, and a script that fills it with the first of its embedded frames
_PLAYER_IMG = re.compile(r'<img id="(_anim_img\w+)">')
_PLAYER_START = "setTimeout(function() {"
_FIRST_FRAME = re.compile(r'^( *)frames\[0\] = "(data:image/([\w+]+);base64,[A-Za-z0-9+/=\\\n]*)"\n', re.MULTILINE)


def offline_jshtml(anim: animation.Animation, **kwargs) -> str:
    """``anim.to_jshtml(**kwargs)`` that shows its picture wherever it is opened, with no web access.

    Changes to matplotlib's player:

    - its buttons are drawn as inline SVG (``_PLAYER_ICONS``): no stylesheet or font fetched from the web
      (matplotlib's player takes its icons from Font Awesome on a CDN) and no character the fonts may lack;
    - its picture's ``<img>`` holds the first frame and its size in the HTML itself, where matplotlib's script sets
      the ``src`` later: with JupyterLab's default notebook windowing (``content-visibility: auto``), Chromium laid
      a picture out at 0 x 0 px when the script gave it its ``src`` while its cell was off-screen, and showed it only
      when the cell was clicked (the buttons then moved down by the picture's height, so that the first click on
      Play was lost). The first frame is stored once: the script takes it from the ``<img>``. Without the script
      (an untrusted notebook, a static viewer) the first frame still shows.

    Raises:
        ValueError: the player's markup is not the one expected (a matplotlib release changed it).
    """
    html = anim.to_jshtml(**kwargs)
    changed = "matplotlib's animation player changed: flashmath.viz.offline_jshtml expects "
    html, n_links = re.subn(r'<link rel="stylesheet"\s+href="https?://[^"]*font-awesome[^"]*">', "", html)
    n_icons = 0
    for css, icon in sorted(_PLAYER_ICONS.items(), key=lambda item: -len(item[0])):  # "fa-play fa-flip..." first
        html, n = re.subn(rf'<i class="fa {re.escape(css)}"></i>', icon, html)
        n_icons += n
    if n_links != 1 or n_icons != len(_PLAYER_ICONS) or 'class="fa ' in html:
        raise ValueError(changed + "Font Awesome icons and one stylesheet link")
    images, first = _PLAYER_IMG.findall(html), _FIRST_FRAME.search(html)
    starts = html.count(_PLAYER_START)
    if len(images) != 1 or first is None or starts != 1 or html.index(_PLAYER_START) < first.end():
        raise ValueError(changed + "one <img>, the embedded frames, then the player made in a setTimeout")
    src = first.group(2).replace("\\\n", "")
    size_attrs = ""
    if first.group(3) in ("png", "jpeg"):
        width, height = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).size
        size_attrs = f' width="{width}" height="{height}"'
    # the first frame's data once, in the <img>; the script reads it back where it makes the player (in matplotlib's
    # setTimeout, "to make sure all the above elements are created")
    html = html[:first.start()] + html[first.end():]
    read_back = '\n        frames[0] = document.getElementById(img_id).getAttribute("src");'
    html = html.replace(_PLAYER_START, _PLAYER_START + read_back)
    return _PLAYER_IMG.sub(lambda m: f'<img id="{m.group(1)}" src="{src}"{size_attrs}>', html)


class Picture:
    """A PNG picture that Jupyter shows (the last expression of a cell). ``data``: the PNG bytes."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.width, self.height = Image.open(io.BytesIO(self.data)).size

    def _repr_png_(self) -> bytes:
        return self.data

    def __repr__(self) -> str:  # the text/plain beside the picture: short, and the same on every machine
        return f"<flashmath picture, {self.width} x {self.height} pixels>"


def strip(plot: LivePlot, states, *, columns: int | None = None) -> Picture:
    """Key frames of a plot side by side, in one PNG: the static view of a slider for GitHub and nbviewer.

    Args:
        plot: a :class:`LivePlot` (its own instance; its ``dpi`` sets the frame size).
        states: the states to show, each a dict of ``update`` keywords, in reading order.
        columns: frames per row (default: all in one row).

    Returns:
        :class:`Picture`.

    Raises:
        ValueError: no states, or ``columns`` below 1.
    """
    states = list(states)
    if not states:
        raise ValueError("states must list at least one state")
    columns = len(states) if columns is None else size(columns, "columns", 1)
    frames = [Image.fromarray(np.ascontiguousarray(plot.update(**state).rgb())) for state in states]
    width, height = frames[0].size
    rows = -(-len(frames) // columns)
    sheet = Image.new("RGB", (columns * width, rows * height), "white")
    for k, frame in enumerate(frames):
        sheet.paste(frame, ((k % columns) * width, (k // columns) * height))
    buffer = io.BytesIO()
    # stored in a notebook: small beats fast here (a 128-colour palette keeps plots crisp at half the size)
    sheet.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(buffer, format="png", optimize=True)
    return Picture(buffer.getvalue())


def figure_signature(fig) -> bytes:
    """The rendered pixels of a figure (or a :class:`LivePlot`), for tests that check a picture changed."""
    if isinstance(fig, LivePlot):
        return fig.rgb().tobytes()  # what the widget sends, blitted
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].tobytes()


# ------------------------------------------------------------------------------------------------------------------
# Argument checks and axis limits shared by the plots
# ------------------------------------------------------------------------------------------------------------------


def index(value, name: str, stop: int, what: str = "") -> int:
    """``value`` as a Python int in ``0..stop-1``; TypeError for a non-integer (bools too), ValueError outside."""
    value = integer(value, name)
    if not 0 <= value < stop:
        raise ValueError(f"{name} must be in 0..{stop - 1}{what}, got {value}")
    return value


def check_labels(labels, n: int, what: str) -> list | None:
    """``labels`` as a list of ``n`` strings with ``$`` escaped (so that a token is drawn as written, never parsed
    as mathtext), or None."""
    if labels is None:
        return None
    if isinstance(labels, str) or not hasattr(labels, "__len__"):
        raise TypeError(f"labels must be a list of {n} labels (one per {what}), got {type(labels).__name__}")
    if len(labels) != n:
        raise ValueError(f"labels must have one entry per {what} ({n}), got {len(labels)}")
    return [str(t).replace("$", r"\$") for t in labels]


def check_dims(dims, Dv: int) -> list[int]:
    """The output dimensions to draw: ``dims`` checked against ``Dv``, or by default the first ``min(3, Dv)``."""
    if dims is None:
        return list(range(min(3, Dv)))
    try:
        dims = list(dims)
    except TypeError:
        raise TypeError(f"dims must be a list of output dimensions, e.g. (0, 1), got {dims!r}") from None
    if not 1 <= len(dims) <= len(DIM_COLORS):
        raise ValueError(f"dims must list 1 to {len(DIM_COLORS)} output dimensions in 0..{Dv - 1}, got {dims}")
    return [index(d, "each entry of dims", Dv, f" (V has Dv = {Dv} output dimensions)") for d in dims]


def limits(values, pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around the finite ``values`` (NaN and inf are ignored: they are not drawn either)."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


NICE_STEPS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # mantissas of :func:`nice_limits`: a limit at most 1.5 times the data


def nice_up(value: float) -> float:
    """The smallest number ``m * 10**k`` (``m`` in :data:`NICE_STEPS`) at or above ``value`` (> 0)."""
    exponent = np.floor(np.log10(value))
    for mantissa in (*NICE_STEPS, 10.0):
        nice = float(mantissa * 10.0 ** exponent)
        if nice >= value * (1 - 1e-12):
            return nice
    return float(10.0 ** (exponent + 1))  # pragma: no cover - 10.0 above always answers


def nice_limits(lo: float, hi: float) -> tuple[float, float]:
    """Axis limits ``lo, hi`` rounded outward to :func:`nice_up` numbers (a negative ``lo`` to minus one, a
    non-negative one to 0): limits that change only when the data pass a threshold, so that a slider moving the
    data a little does not redraw the axes, ticks and legends (the background of :meth:`LivePlot.rgb`)."""
    lo_nice = -nice_up(-lo) if lo < 0 else 0.0
    hi_nice = nice_up(hi) if hi > 0 else 0.0
    if hi_nice <= lo_nice:  # all values at or below 0 with hi == 0 (and lo == 0 too): a span above
        hi_nice = lo_nice + 1.0
    return lo_nice, hi_nice


def top(values, floor: float = 1e-12) -> float:
    """An upper axis limit for non-negative ``values`` drawn from 0: 1.1 times the largest finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return 1.1 * max(float(finite.max()) if finite.size else 1.0, floor)


def finite_or_nan(values) -> np.ndarray:
    """float64 copy of ``values`` with inf replaced by NaN (matplotlib leaves NaN undrawn)."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def keys_text(m: int) -> str:
    """'1 key', '5 keys'."""
    return f"{m} key" if m == 1 else f"{m} keys"


def recolor(patches, colors) -> None:
    """Set each bar's face colour (a step recolours the bars already seen)."""
    for patch, color in zip(patches, colors, strict=False):
        patch.set_facecolor(color)


def set_heights(patches, heights) -> None:
    """Set each bar's height; NaN draws nothing."""
    for patch, h in zip(patches, heights, strict=False):
        patch.set_height(h)
