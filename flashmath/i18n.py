"""The language of what the learner reads: checker verdicts, mistake names, printed tables (Python's ``gettext``).

English is the default and needs nothing. A Chinese notebook selects its language once, in its own cell right before
the first cell that imports flashmath (so that everything the chapter's code prints comes after it)::

    fm.set_language("zh_CN")

From then on every learner-facing string of the package that is marked for translation comes from the catalog
``flashmath/locale/zh_CN/LC_MESSAGES/flashmath.mo`` (compiled from ``flashmath.po``; CONTRIBUTING.md, "Translations",
has the Babel commands that extract, update and compile it), and matplotlib gets a font with the Chinese glyphs the
catalogs use (:mod:`flashmath.fonts`), as a fallback after DejaVu Sans so Latin letters and math look the same in
both editions. A string missing from the catalog falls back to English (tests/test_zh_edition.py checks that none
is missing).

How the package marks a string (Babel extracts both keywords; see ``babel.cfg``):

- ``_("...")`` (``from flashmath.i18n import gettext as _``) translates when it runs: for text built when a checker
  runs, a table is printed, a figure is drawn;
- ``N_("...")`` (``from flashmath.i18n import gettext_noop as N_``) only marks a string defined at import time (a
  mistake's name in a module-level catalogue), which is then translated where it is shown, with ``_(name)``: the
  language may be chosen after the module was imported.

Placeholders stay outside the message: ``_("expected {what}, got {got}").format(...)``, never an f-string inside
``_()`` (the catalog would hold one message per value).

A chapter's own code cells are the same in both editions, so what they print is marked with :func:`tr`
(``fm.tr("key tile j")``, ``fm.tr("after {n} keys").format(n=n)``); Babel reads the code cells of
``notebooks/*.ipynb`` with :func:`extract_notebook`. ``tr`` returns a :class:`Text`, whose padding in an f-string
(``f"{fm.tr('keys'):>8}"``) counts a Chinese character as two columns, so printed tables stay aligned in a terminal.
JupyterLab's output area is not a grid: its monospaced font has no Chinese glyphs, and the fallback font draws one
about 1.6 to 1.8 Latin columns wide (the ratio depends on the fonts), so a column after a Chinese header drifts.
:func:`table` aligns in both: it pads every cell of a column to the same number of narrow *and* of wide glyphs,
filling the wide part with the ideographic space U+3000, which the fallback font draws as wide as a Chinese
character.
"""

from __future__ import annotations

import gettext as _gettext
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "DOMAIN",
    "LANGUAGES",
    "LOCALE_DIR",
    "Filled",
    "Text",
    "aside",
    "display_width",
    "extract_notebook",
    "get_language",
    "gettext",
    "gettext_noop",
    "joined",
    "set_language",
    "table",
    "then",
    "tr",
]

DOMAIN = "flashmath"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The languages a notebook may select: English (the source language, no catalog) and simplified Chinese.
LANGUAGES = ("en", "zh_CN")

_state: dict = {"language": "en", "translation": _gettext.NullTranslations()}


def set_language(language: str, *, font: bool = True) -> None:
    """Select the language of the package's learner-facing text for the rest of the session.

    Args:
        language: ``"en"`` (the default) or ``"zh_CN"`` (simplified Chinese). Selecting ``"zh_CN"`` also registers
            the package's Chinese font with matplotlib (:func:`flashmath.fonts.use_chinese_font`); ``"en"`` undoes it.
        font: False: the text only, matplotlib untouched (a process that draws nothing, such as a ring's rank).

    Raises:
        ValueError: ``language`` is not one of :data:`LANGUAGES`.
        FileNotFoundError: the compiled catalog of ``language`` is missing (a broken install).
    """
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(map(repr, LANGUAGES))}, got {language!r}")
    if language == "en":
        translation: _gettext.NullTranslations = _gettext.NullTranslations()
    else:
        translation = _gettext.translation(DOMAIN, localedir=LOCALE_DIR, languages=[language])
    if font:
        from flashmath import fonts  # only now: importing the package must not import matplotlib

        if language == "en":
            fonts.stop_chinese_font()
        else:
            fonts.use_chinese_font()
    _state.update(language=language, translation=translation)


def get_language() -> str:
    """The language selected by :func:`set_language` (``"en"`` until then)."""
    return _state["language"]


class Filled(str):
    """An English text filled in from a marked template, that :func:`gettext` translates through its template.

    For a text built when a module is imported from parts that vary (chapter 5 names its mistakes after the state
    before the step, ``A'_{m-1}`` or ``A'_{m-b}``): ``Filled(N_("{a_old} not corrected"), a_old="A'_{m-1}")`` is the
    string ``"A'_{m-1} not corrected"`` everywhere (comparisons, tests), and ``gettext`` of it is the translated
    template filled with the same values.

    A value may itself be a ``Filled`` (one with no values is a marked text taken as it is, braces and all:
    ``Filled(N_("e^{X - g}"))``); ``gettext`` translates such a value too, so a formula sentence shared by several
    messages is translated where it is shown.
    """

    template: str
    values: dict

    def __new__(cls, template: str, **values: str) -> Filled:
        text = super().__new__(cls, template.format(**values) if values else template)
        text.template, text.values = template, values
        return text


def gettext(message: str) -> str:
    """``message`` in the selected language (itself in English, or when the catalog lacks it)."""
    if isinstance(message, Filled):
        translated = _state["translation"].gettext(message.template)
        if not message.values:
            return translated
        return translated.format(**{k: gettext(v) if isinstance(v, Filled) else v for k, v in message.values.items()})
    return _state["translation"].gettext(message)


def gettext_noop(message: str) -> str:
    """``message`` unchanged: marks a string for extraction whose translation happens later, where it is shown."""
    return message


def joined(text: str, detail: str) -> str:
    """``text`` and what explains it, ``"{text}: {detail}"`` in English; the separator is the language's own (Chinese
    ends the first sentence with a full-width full stop, no space)."""
    return gettext("{text}: {detail}").format(text=text, detail=detail)


def then(sentence: str, more: str) -> str:
    """Two sentences one after the other: a space between them in English, none in Chinese."""
    return gettext("{sentence} {more}").format(sentence=sentence, more=more)


def aside(text: str, note: str) -> str:
    """``text`` with a note in parentheses: ``"{text} ({note})"``, full-width parentheses in Chinese, where the note
    goes before the sentence's full stop: ``"……向量（……）"``, not ``"……向量。（……）"``."""
    if get_language().startswith("zh"):
        text = text.rstrip("\u3002")
    return gettext("{text} ({note})").format(text=text, note=note)


def display_width(text: str) -> int:
    """The columns ``text`` takes in a monospaced font: 2 for a wide or full-width character (Chinese, ``，``), else 1.

    Unicode's East Asian Width property (UAX #11), as a terminal lays text out. JupyterLab's output area draws a
    wide character narrower than two columns (:func:`table` aligns there too).
    """
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


# A string's format spec: [[fill]align][width][.precision] (format spec mini-language; no sign or "=" for strings).
_STR_SPEC = re.compile(r"(?P<align>(?:.?[<>^])?)(?P<width>\d*)(?P<rest>(?:\.\d+)?s?)", re.DOTALL)


class Text(str):
    """A translated string whose padding in a format spec counts display columns (:func:`display_width`).

    ``f"{Text('键'):>4}"`` is ``"  键"``: two spaces and a character two columns wide, so a table whose headers are
    translated keeps its columns under their headers in both editions. Anything else a ``str`` does is unchanged;
    for English text the padding is exactly ``str``'s.
    """

    def __format__(self, spec: str) -> str:
        match = _STR_SPEC.fullmatch(spec)
        if not match or not match["width"]:
            return str.__format__(self, spec)
        shown = str.__format__(self, match["rest"]) if match["rest"] else str(self)
        extra = display_width(shown) - len(shown)
        width = max(int(match["width"]) - extra, 0)
        return str.__format__(self, f"{match['align']}{width}{match['rest']}")

    def format(self, *args: object, **kwargs: object) -> Text:
        """``str.format``, still a :class:`Text`: a filled message (``fm.tr("{n} rows").format(n=n)``) pads by
        display columns too."""
        return Text(str.format(self, *args, **kwargs))


IDEOGRAPHIC_SPACE = "\u3000"  # as wide as a Chinese character in every font that has both (UAX #11: wide)


def _glyphs(text: str) -> tuple[int, int]:
    """How many narrow and how many wide glyphs ``text`` has (:func:`display_width` counts a wide one as 2)."""
    wide = sum(unicodedata.east_asian_width(ch) in "WF" for ch in text)
    return len(text) - wide, wide


def table(rows: Sequence[Sequence[object]], widths: Sequence[int], *, align: str = "", sep: str = " ") -> list[str]:
    """The lines of a table whose columns line up wherever it is shown, Chinese headers or not.

    Every cell of column ``k`` is padded to the same number of narrow glyphs and the same number of wide ones (the
    most any of its cells has), the wide part with :data:`IDEOGRAPHIC_SPACE`. Each line then has, before every
    column edge, the same glyphs of each kind, so the edges line up in any font, also where a Chinese character is
    not two Latin columns wide (JupyterLab). A column with no wide glyph is padded with spaces only, to at least
    ``widths[k]`` columns: English lines are exactly ``f"{cell:>{width}}"`` joined by ``sep``.

    Args:
        rows: the cells, row by row (a header is a row); each is shown with ``str`` (format numbers first).
        widths: each column's width in display columns (:func:`display_width`), as ``f"{cell:>{width}}"`` would pad.
        align: one character per column, ``>`` (right, the default) or ``<`` (left).
        sep: what separates two cells.

    Returns:
        The lines, without trailing spaces.
    """
    align = align.ljust(len(widths), ">")
    cells = [[str(cell) for cell in row] for row in rows]
    if any(len(row) != len(widths) for row in cells):
        raise ValueError(f"every row needs {len(widths)} cells")
    wide = [max(_glyphs(row[k])[1] for row in cells) for k in range(len(widths))]
    narrow = [max([_glyphs(row[k])[0] for row in cells] + [widths[k] - 2 * wide[k]]) for k in range(len(widths))]
    lines = []
    for row in cells:
        padded = []
        for k, cell in enumerate(row):
            n, w = _glyphs(cell)
            pad = IDEOGRAPHIC_SPACE * (wide[k] - w) + " " * (narrow[k] - n)
            padded.append(cell + pad if align[k] == "<" else pad + cell)
        lines.append(sep.join(padded).rstrip())
    return lines


def tr(message: str) -> Text:
    """``message`` in the selected language, for what a chapter's own code prints (its tables, its sentences).

    Args:
        message: the English text, a literal (Babel extracts it from the notebooks' code cells); placeholders are
            filled after translation: ``fm.tr("{n} keys").format(n=M)``.

    Returns:
        A :class:`Text`: the translation, or ``message`` itself in English or when the catalog lacks it.
    """
    return Text(gettext(message))


def extract_notebook(
    fileobj: IO[bytes], keywords: Any, comment_tags: Any, options: dict
) -> Iterator[tuple[int, str, str, list[str]]]:
    """Babel's extraction method for a notebook (``babel.cfg``: ``[ipynb: notebooks/*.ipynb]``): the messages of its
    code cells' ``tr("...")`` calls, and those of Babel's keywords (``_``, ``N_``), as plain ``"_"`` messages.

    Each cell is read with :mod:`ast`, so a call inside an f-string (``f"{fm.tr('keys'):>8}"``) is found on every
    Python (Babel's own Python reader sees into f-strings only from Python 3.12). Lines that IPython runs as magics
    or shell commands (``%pip ...``, ``!ls``) are blanked first; line numbers count through the code cells, one
    after another.
    """
    import ast

    names = {"tr", *keywords}
    offset = 0
    for cell in json.load(fileobj)["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        source = re.sub(r"^\s*[%!].*$", "", source, flags=re.MULTILINE)
        calls = []
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in names and isinstance(node.args[0].value, str):
                calls.append((node.lineno, node.col_offset, node.args[0].value))
        for lineno, _col, message in sorted(calls):
            # Reported as ``_`` (one message, same signature): Babel looks the name up in its keywords, without tr.
            yield lineno + offset, "_", message, []
        offset += source.count("\n") + 1
