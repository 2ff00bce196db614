"""Chapter 15: the course on one page.

:class:`CourseMapPlot` draws the sixteen chapters as a path, each with the formula it adds; the chapters whose
intermediate result means something else than the final one (the one idea of the course) are outlined, and a
step highlights one chapter and says, below the map, what its intermediate result is and when it becomes right.
The chapter list is :data:`CHAPTERS` (the syllabus's order and titles). :func:`plot_one_idea` draws one row's
running state, key after key, with the steps where the max jumps marked.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import numpy as np
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from flashmath.i18n import display_width
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.viz.axes import index
from flashmath.viz.live import LivePlot
from flashmath.viz.style import DPI, HOLD, JUMP, SEEN

__all__ = ["Chapter", "CHAPTERS", "CourseMapPlot", "plot_one_idea"]


@dataclass(frozen=True)
class Chapter:
    """One chapter on the map: its ``title``, the ``formula`` it adds (matplotlib mathtext), and, where the
    chapter keeps an intermediate result that changes meaning, what that ``intermediate`` is (else empty)."""

    title: str
    formula: str
    intermediate: str = ""


# the titles, the formulas with words and the intermediates are translated where they are drawn (N_ marks them)
CHAPTERS = (
    Chapter(N_("Welcome and notation"), r"$N, M, D;\ g, s, A'$"),
    Chapter(N_("Softmax and safe softmax"), r"$\exp(x_i - g) / \sum_j \exp(x_j - g)$"),
    Chapter(
        N_("Online softmax"),
        r"$s_i = s_{i-1} \exp(g_{i-1} - g_i)$" "\n" r"$+ \exp(x_i - g_i)$",
        N_(
            "s_i is a sum measured against the running max g_i; only s_N, after the last element, is the "
            "softmax denominator"
        ),
    ),
    Chapter(N_("Attention"), r"$A = \mathrm{softmax}(Q K^T / \sqrt{D})\, V$"),
    Chapter(N_("Two loops and the loop swap"), r"$A_n \leftarrow A_n + y_{nm} V_m$"),
    Chapter(
        N_("Removing the data dependency; one loop"),
        r"$A'_m = c_m A'_{m-1} + w_m V_m$",
        N_(
            "A'_m is attention over the first m keys only, corrected whenever the max or the sum moves; only A'_M "
            "is the output"
        ),
    ),
    Chapter(
        N_("Tiling"),
        N_(r"$(g, s, A')$ per row, tile by tile"),
        N_("each row's (g, s, A') after a key tile covers the keys seen so far; the last tile makes it exact"),
    ),
    Chapter(
        N_("FlashAttention-2: divide once at the end"),
        N_(r"$U = s A'$; once: $A = U / s$"),
        N_("U = s A' is not an average at all (it grows with s); only U_M / s_M is the output"),
    ),
    Chapter(N_("Masking"), N_(r"no key: $A = 0$, $L = -\infty$")),
    Chapter(N_("Floating point"), N_("same math, different rounding")),
    Chapter(
        N_("Beyond the article"),
        N_(r"merge $(g, s, A')$ of key ranges"),
        N_("a key range's state is attention over that range alone; merged with the others it is exact"),
    ),
    Chapter(
        N_("A GPU kernel in Triton"),
        N_("m_i, l_i, acc on chip"),
        N_(
            "acc (in registers on an A100 or H100, in tensor memory on a B200) is s A', divided by l_i once, when "
            "the last key tile is done"
        ),
    ),
    Chapter(N_("The backward pass as Triton kernels"), r"$dX = Y \odot (dY - \Delta)$"),
    Chapter(
        N_("One loop, many attentions"),
        N_("score_mod, mask_mod per tile"),
        N_(
            "each row's (g, s, acc) starts at (sink, 1, 0): the sink is a score with no value; split-KV gives it "
            "to one part only"
        ),
    ),
    Chapter(
        N_("Across devices: ring attention"),
        N_(r"merge $(A, L)$ of key shards round a ring"),
        N_(
            "after t steps of the ring, a device's (A, L) is attention over the key shards it has received only; "
            "after P steps it is exact"
        ),
    ),
    Chapter(N_("Recap"), N_("the final result is right")),
)
"""The chapters in the syllabus's order (``shared/COURSE.md``)."""

# (column, row) of each chapter's box: a path of four boxes a row that reads left to right, back, and so on
COLUMNS = 4
GRID = {n: (n % COLUMNS if (n // COLUMNS) % 2 == 0 else COLUMNS - 1 - n % COLUMNS, n // COLUMNS) for n in range(16)}
ROWS = max(row for _column, row in GRID.values()) + 1
BOX_W, BOX_H = 1.9, 0.9
IDEA = "#ff7f0e"  # the outline of a chapter whose intermediate result changes meaning


def _position(chapter: int) -> tuple[float, float]:
    """The lower-left corner of a chapter's box."""
    column, row = GRID[chapter]
    return column * 2.1, -row * 1.55


class CourseMapPlot(LivePlot):
    """The course on one page: ``update(chapter=k)`` highlights chapter ``k`` (0-15) and explains it below.

    Boxes hold each chapter's number, title and formula; orange outlines mark the chapters that keep an
    intermediate result with another meaning than the final one (online softmax's ``s_i``, the one-loop ``A'_m``,
    the tiles' row states, FlashAttention-2's ``U = s A'``, split-KV's partial states, the kernel's ``acc``, the
    backward's ``dQ``, the state started at a sink, the ring's partial ``(A, L)``).

    Raises:
        ValueError: ``chapter`` outside 0-15. TypeError: not an integer.
    """

    def __init__(self, *, chapter: int = 15, figsize=(12.5, 8.6), dpi: int = DPI, pyplot: bool = False):
        super().__init__(figsize=figsize, dpi=dpi, pyplot=pyplot, chapter=chapter)

    def __len__(self) -> int:
        return len(CHAPTERS) - 1  # steps 0..15

    def _build(self) -> None:
        self.fig.set_layout_engine("none")  # boxes at fixed places: no layout to compute
        ax = self.fig.add_axes((0, 0.16, 1, 0.84))
        ax.set_xlim(-0.15, (COLUMNS - 1) * 2.1 + BOX_W + 0.15)
        ax.set_ylim(-(ROWS - 1) * 1.55 - 0.2, BOX_H + 0.25)
        ax.axis("off")
        for number, chapter in enumerate(CHAPTERS):
            x, y = _position(number)
            ax.add_patch(
                FancyBboxPatch(
                    (x, y),
                    BOX_W,
                    BOX_H,
                    boxstyle="round,pad=0.02,rounding_size=0.08",
                    facecolor="#f2f2f2",
                    edgecolor=IDEA if chapter.intermediate else "#bbbbbb",
                    linewidth=2.2 if chapter.intermediate else 1.0,
                )
            )
            ax.text(x + 0.08, y + BOX_H - 0.08, f"{number}", fontsize=11, fontweight="bold", va="top", color=SEEN)
            ax.text(x + 0.4, y + BOX_H - 0.08, _wrap(_(chapter.title)), fontsize=9.5, va="top", linespacing=1.1)
            # a formula alone gets 12 points, so that its sub- and superscripts (0.7 of that) are about 9 pixels
            # high at 80 dpi; one with words is wider and has no scripts: 10 points
            formula = _(chapter.formula)
            alone = all(line[:1] == line[-1:] == "$" and line.count("$") == 2 for line in formula.split("\n"))
            ax.text(x + BOX_W / 2, y + 0.27, formula, fontsize=12 if alone else 10, ha="center", va="center")
            if number + 1 < len(CHAPTERS):
                x2, y2 = _position(number + 1)
                if y2 == y:  # same row: an arrow between the boxes
                    start, end = (
                        ((x + BOX_W, y + BOX_H / 2), (x2, y2 + BOX_H / 2))
                        if x2 > x
                        else ((x, y + BOX_H / 2), (x2 + BOX_W, y2 + BOX_H / 2))
                    )
                else:  # down to the next row
                    start, end = (x + BOX_W / 2, y), (x2 + BOX_W / 2, y2 + BOX_H)
                ax.add_patch(
                    FancyArrowPatch(
                        start, end, arrowstyle="-|>", mutation_scale=10, color="#7f7f7f", shrinkA=2, shrinkB=2
                    )
                )
        self.highlight = FancyBboxPatch(
            (0, 0),
            BOX_W,
            BOX_H,
            boxstyle="round,pad=0.06,rounding_size=0.1",
            facecolor="none",
            edgecolor=JUMP,
            linewidth=3,
        )
        ax.add_patch(self.highlight)
        self.fig.text(
            0.01,
            0.125,
            _(
                "orange outline: the chapter keeps an intermediate result that means something "
                "else than the final one (the one idea of the course)"
            ),
            fontsize=9,
            color="#a04d00",  # the outline's orange, darker: legible as 9-point text on white
        )
        self.caption = self.fig.text(0.01, 0.072, "", fontsize=10.5, fontweight="bold")
        self.detail = self.fig.text(0.01, 0.018, "", fontsize=10)
        self.live(self.highlight, self.caption, self.detail)

    def _update(self, chapter: int) -> None:
        chapter = index(chapter, "chapter", len(CHAPTERS))
        x, y = _position(chapter)
        self.highlight.set_bounds(x, y, BOX_W, BOX_H)
        entry = CHAPTERS[chapter]
        self.caption.set_text(_("Chapter {number} · {title}").format(number=chapter, title=_(entry.title)))
        if chapter == len(CHAPTERS) - 1:
            self.detail.set_text(
                _(
                    "Intermediate results may change meaning, as long as the final one is right: "
                    "online softmax applies it to the denominator, FlashAttention to the output."
                )
            )
        elif entry.intermediate:
            self.detail.set_text(_("Intermediate result: {what}.").format(what=_(entry.intermediate)))
        else:
            self.detail.set_text(_("No intermediate result changes meaning here: {what}.").format(what=_plain(entry)))


def _plain(entry: Chapter) -> str:
    """What a chapter without an intermediate result contributes, in words (in the selected language)."""
    return _(
        {
            "Welcome and notation": N_("the names every later chapter uses"),
            "Softmax and safe softmax": N_("subtracting the max changes nothing and keeps every exponent <= 0"),
            "Attention": N_("the formula every variant must reproduce, computed directly in float64"),
            "Two loops and the loop swap": N_(
                "swapping loops keeps each element's order of summation, so the result is identical"
            ),
            "Masking": N_("a convention for rows with no key to attend to, and masked keys that are absent"),
            "The backward pass as Triton kernels": N_(
                "dQ_i is a plain sum over the key tiles, like chapter 4's A_n over the keys; Y is recomputed from L"
            ),
            "Floating point": N_("equal in exact arithmetic is not bitwise equal; the error is measured, not assumed"),
        }.get(entry.title, entry.title)
    )


def _wrap(title: str, width: int = 22, last_word: int = 28) -> str:
    """A box's title on lines of about ``width`` Latin characters; a Chinese character counts twice (it is about
    twice as wide) and a line may break after it, as between words. A Latin word that ends the title stays on its
    line when the line then holds at most ``last_word`` (the box has room for about 32), rather than standing alone
    on the next one. A title that wraps and has a full-width colon early enough breaks after the colon."""
    if title.isascii():
        return textwrap.fill(title, width)
    head, colon, rest = title.partition("：")
    # break after the colon, not mid-phrase
    if colon and rest and display_width(title) > width and display_width(head) < width:
        return head + colon + "\n" + _wrap(rest, width, last_word)
    pieces = re.findall(r"[\u2e80-\uffff]|[^\s\u2e80-\uffff]+|\s+", title)  # one CJK character, a word, spaces
    lines, line, used = [], "", 0
    for i, piece in enumerate(pieces):
        size = 2 if len(piece) == 1 and ord(piece) >= 0x2E80 else len(piece)
        limit = last_word if i == len(pieces) - 1 and size > 1 else width
        if line and used + size > limit and not piece.isspace():
            lines.append(line.rstrip())
            line, used = "", 0
        if line or not piece.isspace():
            line, used = line + piece, used + size
    return "\n".join([*lines, line.rstrip()])


def plot_one_idea(g, s, a, u, jumps, *, figsize=(9.0, 7.0), dpi: int = DPI):
    """One query row's running state after each key ``m = 1..M``, in four panels that share the ``m`` axis: the
    running max ``g_m``, the running sum ``s_m``, ``A'_m[0]`` (attention over the first ``m`` keys, chapter 5) and
    ``U_m[0] = s_m A'_m[0]`` (chapter 7). Red dotted lines and red dots mark the keys where the max jumps; dashed
    lines mark the final answers (the denominator ``s_M``, the output ``A[0] = A'_M[0] = U_M[0] / s_M``), which the
    running values reach only at ``m = M``.

    Args:
        g, s, a, u: 1-D arrays of length ``M``, the values after ``m = 1..M`` keys (index ``m - 1``), as computed by
            :func:`flashmath.one_loop_trace` (nothing is computed here).
        jumps: boolean, length ``M``: True where the max jumped (:attr:`flashmath.OnlineSoftmaxTrace.jumps`).

    Returns:
        the matplotlib Figure (made through pyplot: Jupyter's inline backend shows it).
    """
    import matplotlib.pyplot as plt

    values = [np.asarray(x, dtype=float) for x in (g, s, a, u)]
    jumped = np.asarray(jumps, dtype=bool)
    M = len(values[0])
    if any(x.ndim != 1 or len(x) != M for x in values) or jumped.shape != (M,):
        raise ValueError(
            f"g, s, a, u and jumps must be 1-D of one length, got {[np.shape(x) for x in (g, s, a, u, jumps)]}"
        )
    m = np.arange(1, M + 1)
    at = m[jumped]
    finals = [None, values[1][-1], values[2][-1], values[3][-1] / values[1][-1]]
    titles = [
        _("running max $g_m$: red, the {n} keys where it jumps").format(n=len(at)),
        _("running sum $s_m$: dashed, the denominator $s_M$ it becomes at the last key"),
        _("$A'_m[0]$, attention over the first $m$ keys: dashed, the output $A[0]$"),
        _("$U_m[0] = s_m A'_m[0]$, not an average: only $U_M[0] / s_M$ is the output $A[0]$ (dashed)"),
    ]
    fig, axes = plt.subplots(4, 1, figsize=figsize, dpi=dpi, layout="constrained", sharex=True)
    for ax, y, final, title, name in zip(
        axes, values, finals, titles, ("g_m", "s_m", "A'_m[0]", "U_m[0]"), strict=True
    ):
        for x in at:
            ax.axvline(x, color=JUMP, lw=0.8, ls=":", zorder=1)
        ax.plot(m, y, color=SEEN, lw=1.4, marker="o", ms=2.5, zorder=2)
        ax.plot(at, y[jumped], "o", color=JUMP, ms=4.5, zorder=3)
        if final is not None:
            ax.axhline(final, color=HOLD, lw=1.0, ls="--", zorder=1)
        ax.set_ylabel(f"${name}$", fontsize=10)
        ax.set_title(title, fontsize=9, loc="left")
    axes[-1].set_xlabel(_("$m$: keys read"))
    axes[-1].set_xlim(0.5, M + 0.5)
    return fig
