"""The language of what the learner reads: checker verdicts, mistake names, printed tables (Python's ``gettext``).

English is the default and needs nothing. A Chinese notebook selects its language once, in its own cell right after
its first import cell::

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
"""

from __future__ import annotations

import gettext as _gettext
from pathlib import Path

__all__ = ["DOMAIN", "Filled", "LANGUAGES", "LOCALE_DIR", "get_language", "gettext", "gettext_noop", "set_language"]

DOMAIN = "flashmath"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The languages a notebook may select: English (the source language, no catalog) and simplified Chinese.
LANGUAGES = ("en", "zh_CN")

_state: dict = {"language": "en", "translation": _gettext.NullTranslations()}


def set_language(language: str) -> None:
    """Select the language of the package's learner-facing text for the rest of the session.

    Args:
        language: ``"en"`` (the default) or ``"zh_CN"`` (simplified Chinese). Selecting ``"zh_CN"`` also registers
            the package's Chinese font with matplotlib (:func:`flashmath.fonts.use_chinese_font`); ``"en"`` undoes it.

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
    """

    template: str
    values: dict

    def __new__(cls, template: str, **values: str) -> Filled:
        text = super().__new__(cls, template.format(**values))
        text.template, text.values = template, values
        return text


def gettext(message: str) -> str:
    """``message`` in the selected language (itself in English, or when the catalog lacks it)."""
    if isinstance(message, Filled):
        return _state["translation"].gettext(message.template).format(**message.values)
    return _state["translation"].gettext(message)


def gettext_noop(message: str) -> str:
    """``message`` unchanged: marks a string for extraction whose translation happens later, where it is shown."""
    return message
