"""A plot's states as frames: a JavaScript animation (:func:`animate_steps`, shown offline by
:func:`offline_jshtml`) and a strip of key frames in one PNG (:func:`strip`), the static views of a slider."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Sized
from typing import cast

import numpy as np
from matplotlib import animation
from PIL import Image

from flashmath._checks import integer, size
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.live import LivePlot, Picture

__all__ = ["animate_steps", "offline_jshtml", "strip"]


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
        raise TypeError(
            f"plot must be a flashmath.viz LivePlot (e.g. viz.OnlineSoftmaxPlot(trace)), got {type(plot).__name__}"
        )
    steps = list(range(len(cast(Sized, plot)) + 1)) if steps is None else list(steps)
    if not steps:
        raise ValueError("steps must list at least one step")
    interval = integer(interval, "interval (milliseconds between frames)")
    plot._unblit()

    def frame(step):
        plot.update(**{**plot.state, name: step})  # the other keywords (an order, a dtype) stay as they are
        return plot.fig.axes

    return animation.FuncAnimation(plot.fig, frame, frames=steps, interval=interval, blit=False, cache_frame_data=False)


def _icon(path: str) -> str:
    """A player button's icon as inline SVG in the button's text colour: drawn the same with any font."""
    return (
        f'<svg viewBox="0 0 16 16" width="12" height="12" fill="currentColor" aria-hidden="true" '
        f'focusable="false" style="vertical-align: middle"><path d="{path}"/></svg>'
    )


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

#: The words of matplotlib's player (its buttons' ``title`` and ``aria-label``, the repetition modes), translated where
#: the player is made: the Chinese edition's animations have Chinese controls.
_PLAYER_WORDS = (
    N_("Decrease speed"),
    N_("First frame"),
    N_("Previous frame"),
    N_("Play backwards"),
    N_("Pause"),
    N_("Play"),
    N_("Next frame"),
    N_("Last frame"),
    N_("Increase speed"),
    N_("Repetition mode"),
)
_PLAYER_MODES = (N_("Once"), N_("Loop"), N_("Reflect"))


def _translate_player(html: str) -> str:
    for word in _PLAYER_WORDS:
        html = html.replace(f'title="{word}" aria-label="{word}"', f'title="{_(word)}" aria-label="{_(word)}"')
    for mode in _PLAYER_MODES:
        html = re.sub(rf'(<label for="_anim_radio\d_\w+">){mode}</label>', rf"\g<1>{_(mode)}</label>", html)
    return html


# matplotlib's player: an <img> without a src, and a script that fills it with the first of its embedded frames
_PLAYER_IMG = re.compile(r'<img id="(_anim_img\w+)">')
_PLAYER_START = "setTimeout(function() {"
_FIRST_FRAME = re.compile(r'^( *)frames\[0\] = "(data:image/([\w+]+);base64,[A-Za-z0-9+/=\\\n]*)"\n', re.MULTILINE)


def offline_jshtml(anim: animation.Animation, **kwargs) -> str:
    """``anim.to_jshtml(**kwargs)`` that shows its picture wherever it is opened, with no web access.

    Changes to matplotlib's player:

    - its words (buttons' titles, the repetition modes) are in the selected language (:mod:`flashmath.i18n`);
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
    html = html[: first.start()] + html[first.end() :]
    read_back = '\n        frames[0] = document.getElementById(img_id).getAttribute("src");'
    html = html.replace(_PLAYER_START, _PLAYER_START + read_back)
    html = _PLAYER_IMG.sub(lambda m: f'<img id="{m.group(1)}" src="{src}"{size_attrs}>', html)
    return _translate_player(html)


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
