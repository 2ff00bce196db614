"""The font that draws the Chinese edition's figure text, the same on every platform (JupyterLab, Binder, Colab, CI).

``FlashmathNotoSansSC.otf`` is a subset of Noto Sans CJK SC Regular (SIL Open Font License 1.1, ``OFL.txt``) holding
only the characters of the Chinese catalog and of the Chinese figure text (about 1 % of the full font's size), built
by ``scripts/build_font.py``; tests/test_zh_edition.py checks that it covers every character of the catalog, so no
figure shows tofu boxes or warns "Glyph missing". Nothing depends on the system's fonts.

:func:`use_chinese_font` (called by ``flashmath.set_language("zh_CN")``) registers it with matplotlib and puts it
first in ``font.family``, DejaVu Sans after it. A text with ``$...$`` math is laid out by mathtext: the math in its
own fonts (DejaVu Sans, italic letters, the same as in the English edition), the text around it in the text's first
family alone, with no fallback to a second family (matplotlib issue #29173). So the subset comes first and holds
the Latin letters, digits and symbols as well as the Chinese (``scripts/build_font.py``): a Chinese title such as
``块大小 $B_r$ = 8`` draws its Chinese and its italic math alike. Plain text takes each glyph from the first family
that has it (matplotlib 3.6 and later), so a character the subset lacks comes from DejaVu Sans.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["FAMILY", "FONT_PATH", "stop_chinese_font", "use_chinese_font"]

FONT_PATH = Path(__file__).resolve().parent / "FlashmathNotoSansSC.otf"
#: The family name the subset carries (renamed by scripts/build_font.py, so a system's full Noto font never clashes).
FAMILY = "Flashmath Noto Sans SC"
_LATIN = "DejaVu Sans"  # matplotlib's default sans-serif font, shipped with matplotlib

_saved: dict = {}


def use_chinese_font() -> None:
    """Register the subset with matplotlib and make it the first family, DejaVu Sans the fallback (idempotent).

    Raises:
        FileNotFoundError: the font file is missing from the installed package.
    """
    import matplotlib as mpl
    from matplotlib import font_manager

    if not FONT_PATH.is_file():
        raise FileNotFoundError(f"the Chinese font {FONT_PATH} is missing: reinstall flashmath")
    manager = font_manager.fontManager
    if FAMILY not in {f.name for f in manager.ttflist}:
        manager.addfont(str(FONT_PATH))
        # The subset has one weight. Listed once more as bold, the same file draws bold figure text (a title with
        # fontweight="bold") in the regular weight, without matplotlib warning "Failed to find font weight bold"
        # into a notebook's stored output.
        regular = next(f for f in manager.ttflist if f.name == FAMILY)
        manager.ttflist.append(dataclasses.replace(regular, weight=700))
        cached = getattr(manager, "_findfont_cached", None)  # matplotlib's lookup cache (private; 3.6 and later)
        if cached is not None:
            cached.cache_clear()
    if "font.family" not in _saved:
        _saved["font.family"] = list(mpl.rcParams["font.family"])
    mpl.rcParams["font.family"] = [FAMILY, _LATIN]


def stop_chinese_font() -> None:
    """Give ``font.family`` back the value it had before :func:`use_chinese_font` (nothing when it was not used)."""
    if "font.family" in _saved:
        import matplotlib as mpl

        mpl.rcParams["font.family"] = _saved.pop("font.family")
