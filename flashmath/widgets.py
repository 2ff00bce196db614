"""Widget builders: ipywidgets controls wired to the drawing functions of :mod:`flashmath.viz`.

Each builder checks its arguments, computes what it needs once, outside the callback, and draws its first
figure once before building any control, so that a bad argument raises here, with a message, instead of
printing a traceback inside the widget at every move. It returns an :class:`ipywidgets.interactive`: its
``result`` is the figure drawn by the last callback (tests read it), its ``kwargs_widgets`` are the controls.
Step sliders get a Play button linked to them in the browser (``jslink``), so the animation runs without a round
trip per frame in the link itself. Each default Play interval is at least 1.5 times the slowest frame measured
under Jupyter's inline backend (figure and PNG, on a 2-core CPU: chapter 2 up to 0.42 s, chapter 3 0.56 s,
chapter 4 0.38 s, chapter 5 0.58 s); a shorter interval lets the slider run ahead of the figure.

Works with ipywidgets 7.7 (what Colab ships) and 8.x.
"""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np

from flashmath import viz
from flashmath._checks import integer
from flashmath.attention import loop_swap_trace, one_loop_trace
from flashmath.softmax import as_float_array, online_softmax_trace

__all__ = ["online_softmax_player", "overflow_explorer", "step_player", "scale_explorer", "loop_swap_player",
           "one_loop_player"]


def step_player(draw, n_steps: int, *, value: int = 0, description: str = "step", interval: int = 700,
                **fixed):
    """An ``interactive`` over ``draw(step=..., **fixed)`` with a step slider and a linked Play button.

    ``draw(step=value, **fixed)`` is called once before the widget is built, so an error raises here.

    Args:
        draw: callable ``draw(step, **fixed) -> Figure``.
        n_steps: the slider runs over ``0..n_steps``.
        value: initial step.
        description: the slider's label.
        interval: milliseconds between Play frames.
        fixed: extra keyword arguments passed unchanged to ``draw``.

    Returns:
        ``ipywidgets.interactive`` whose first control row is ``[Play, slider]``.

    Raises:
        ValueError: ``n_steps < 1``, ``value`` outside ``0..n_steps`` or ``interval < 1``. TypeError: one of them
        not an integer. Whatever ``draw`` raises for the first step.
    """
    n_steps = integer(n_steps, "n_steps")
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    value = _step(value, n_steps)
    interval = _interval(interval)
    _draw_once(draw, step=value, **fixed)
    slider = widgets.IntSlider(value=value, min=0, max=n_steps, step=1, description=description,
                               continuous_update=True)

    def callback(step):
        return draw(step=step, **fixed)

    return _with_play(callback, "step", slider, frames=n_steps, value=value, link_to="value", interval=interval)


def _with_play(callback, name: str, slider, *, frames: int, value: int, link_to: str, interval: int):
    """``interactive(callback, name=slider)`` with a Play button over ``0..frames`` linked to ``slider.link_to``.

    The link is made in the browser (``jslink``); the first control row becomes ``[Play, slider]``.
    """
    play = widgets.Play(value=value, min=0, max=frames, step=1, interval=interval, description="Play")
    widgets.jslink((play, "value"), (slider, link_to))
    ui = widgets.interactive(callback, **{name: slider})
    ui.children = (widgets.HBox([play, slider]),) + tuple(ui.children[1:])
    return ui


def _step(value, n_steps: int) -> int:
    """The first step shown: an integer in ``0..n_steps``."""
    value = integer(value, "value (the step shown first)")
    if not 0 <= value <= n_steps:
        raise ValueError(f"value (the step shown first) must be in 0..{n_steps}, got {value}")
    return value


def _interval(interval) -> int:
    """Milliseconds between Play frames: a positive integer."""
    interval = integer(interval, "interval (milliseconds between Play frames)")
    if interval < 1:
        raise ValueError(f"interval (milliseconds between Play frames) must be at least 1, got {interval}")
    return interval


def _draw_once(draw, **kwargs) -> None:
    """Draw and render one figure, then close it: an error raises now instead of inside the widget's output.

    Closing keeps Jupyter's inline backend from also showing this figure below the cell.
    """
    fig = draw(**kwargs)
    try:
        fig.canvas.draw()  # rendering finds what building the figure does not (e.g. bad mathtext)
    finally:
        plt.close(fig)


def online_softmax_player(x, *, labels=None, value: int = 0, interval: int = 700):
    """Step through the online normalizer of a 1-D vector: x_i, g_i, the rescale factor, s_i, s_N.

    Args:
        x: 1-D array ``(N,)`` (any real row: random numbers, a real attention score row...).
        labels: optional tick labels (e.g. tokens), length ``N``.
        value: the step shown first (0 = nothing read yet).
        interval: milliseconds between Play frames.

    Returns:
        ``ipywidgets.interactive`` (slider ``step`` over ``0..N`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.online_softmax_trace` for a bad ``x``; ``labels`` of the
        wrong length; ``value`` or ``interval`` as :func:`step_player`.
    """
    trace = online_softmax_trace(x)  # computed once; the callback only draws
    viz._check_labels(labels, len(trace), "element of x")

    def draw(step, trace, labels):
        return viz.plot_online_softmax_step(trace, step, labels=labels)

    return step_player(draw, len(trace), value=value, description="step i", interval=interval,
                       trace=trace, labels=labels)


def overflow_explorer(x, *, scale: float = 1.0, dtype: str = "float16"):
    """Scale a vector and choose a dtype: where does the direct softmax overflow, and the safe one not?

    Args:
        x: 1-D array ``(L,)``.
        scale: initial scale, 1 to 1000 (a log slider).
        dtype: initial dtype, ``"float16"``, ``"float32"`` or ``"float64"`` (or the numpy dtype).

    Returns:
        ``ipywidgets.interactive`` with controls ``scale`` and ``dtype``.

    Raises:
        ValueError: ``dtype`` not one of the three, ``scale`` outside 1..1000, ``x`` not a non-empty 1-D vector.
        TypeError: ``x`` not real numbers, ``scale`` not a number.
    """
    x = as_float_array(x).astype(np.float64)  # a private copy
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be a non-empty 1-D vector, got shape {x.shape}")
    choices = ["float16", "float32", "float64"]
    try:
        dtype = np.dtype(dtype).name
    except TypeError:
        pass
    if dtype not in choices:
        raise ValueError(f"dtype must be one of {choices}, got {dtype!r}")
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a number between 1 and 1000, got {type(scale).__name__} {scale!r}")
    if not 1 <= scale <= 1000:
        raise ValueError(f"scale must be between 1 and 1000 (the slider's range), got {scale}")

    def callback(scale, dtype):
        return viz.plot_overflow(x, dtype=dtype, scale=scale)

    _draw_once(callback, scale=scale, dtype=dtype)
    scale_slider = widgets.FloatLogSlider(value=scale, base=10, min=0, max=3, step=0.05, description="scale",
                                          continuous_update=False)
    dtype_buttons = widgets.ToggleButtons(options=choices, value=dtype, description="dtype")

    return widgets.interactive(callback, scale=scale_slider, dtype=dtype_buttons)


def scale_explorer(sweep, *, D: int | None = None, interval: int = 900):
    """Slide over the head dimension ``D``: spread of the scores and sharpness of softmax, with and without scale.

    Args:
        sweep: from :func:`flashmath.scale_sweep` (computed once, by the caller, with its seeded rng).
        D: the head dimension shown first, one of ``sweep.dims`` (default: the middle one).
        interval: milliseconds between Play frames.

    Returns:
        ``ipywidgets.interactive`` with a ``D`` selection slider (over ``sweep.dims``) and a linked Play button.

    Raises:
        ValueError: ``D`` not in ``sweep.dims``; ``interval < 1``. TypeError: ``D`` or ``interval`` not an integer,
        ``sweep`` not a :class:`flashmath.ScaleSweep`.
    """
    if not hasattr(sweep, "dims"):
        raise TypeError(f"sweep must come from flashmath.scale_sweep, got {type(sweep).__name__}")
    dims = [int(d) for d in sweep.dims]
    if D is None:
        D = dims[len(dims) // 2]
    D = integer(D, "D")
    if D not in dims:
        raise ValueError(f"D must be one of sweep.dims = {dims}, got {D}")
    interval = _interval(interval)

    def callback(D):
        return viz.plot_scale_step(sweep, dims.index(D))

    _draw_once(callback, D=D)
    slider = widgets.SelectionSlider(options=dims, value=D, description="D", continuous_update=True)
    return _with_play(callback, "D", slider, frames=len(dims) - 1, value=dims.index(D), link_to="index",
                      interval=interval)


def loop_swap_player(y, v, *, row: int = 0, labels=None, value: int = 0, interval: int = 700):
    """Step through the keys of ``A = Y V`` in the order ``for n: for m: for d``: a row of partial sums grows.

    Args:
        y: ``(N, M)`` probabilities (small: the trace runs scalar loops, ``N * M * Dv`` steps).
        v: ``(M, Dv)`` values.
        row: the query row ``n`` to show, an integer in ``0..N-1``.
        labels: optional key labels (tokens), length ``M``.
        value: the number of keys added at first (0 = none).
        interval: milliseconds between Play frames.

    Returns:
        ``ipywidgets.interactive`` (slider ``keys m`` over ``0..M`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.loop_swap_trace`; ``row`` not an integer or out of range;
        ``labels`` of the wrong length; ``value`` or ``interval`` as :func:`step_player`.
    """
    try:
        y_shape = np.shape(y)
    except ValueError:  # ragged nested lists: loop_swap_trace says what is wrong
        y_shape = ()
    if len(y_shape) == 2:  # checked before the trace, which runs N * M * Dv scalar steps
        viz._index(row, "row", y_shape[0], f" (y has N = {y_shape[0]} rows)")
        viz._check_labels(labels, y_shape[1], "key")
    trace = loop_swap_trace(y, v)  # computed once; the callback only draws
    row = viz._index(row, "row", trace.y.shape[0], f" (y has N = {trace.y.shape[0]} rows)")
    viz._check_labels(labels, len(trace), "key")

    def draw(step, trace, row, labels):
        return viz.plot_loop_swap_step(trace, step, row=row, labels=labels)

    return step_player(draw, len(trace), value=value, description="keys m", interval=interval, trace=trace,
                       row=row, labels=labels)


def one_loop_player(q, k, v, *, row: int = 0, dims=None, labels=None, value: int = 0, interval: int = 900):
    """Step through the merged loop of chapter 5 for one query row: ``x_m, g_m``, the correction, ``s_m``, ``A'_m``.

    Args:
        q: ``(N, D)``, k: ``(M, D)``, v: ``(M, Dv)`` (2-D; the default scale ``1 / sqrt(D)``).
        row: the query row ``n`` to follow, an integer in ``0..N-1``.
        dims: the output dimensions of ``A'_m`` to draw, 1 to 5 of ``0..Dv-1`` (default: the first ``min(3, Dv)``).
        labels: optional key labels (tokens), length ``M``.
        value: the number of keys seen at first (0 = none).
        interval: milliseconds between Play frames.

    Returns:
        ``ipywidgets.interactive`` (slider ``keys m`` over ``0..M`` and a Play button).

    Raises:
        ValueError / TypeError: as :func:`flashmath.one_loop_trace`; inputs that are not 2-D; ``row`` not an
        integer or out of range; ``dims`` not integers in ``0..Dv-1``; ``labels`` of the wrong length; ``value``
        or ``interval`` as :func:`step_player`.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"q, k, v must be 2-D (N, D), (M, D), (M, Dv); got {q.shape}, {k.shape}, {v.shape}")
    row = viz._index(row, "row", q.shape[0], f" (q has N = {q.shape[0]} rows)")
    dims = tuple(viz._dims(dims, v.shape[1]))
    viz._check_labels(labels, k.shape[0], "key")
    trace = one_loop_trace(q[row:row + 1], k, v)  # computed once, for the one row shown

    def draw(step, trace, dims, labels):
        return viz.plot_one_loop_step(trace, step, row=0, dims=dims, labels=labels)

    return step_player(draw, len(trace), value=value, description="keys m", interval=interval, trace=trace,
                       dims=dims, labels=labels)
