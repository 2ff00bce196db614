"""Build flashmath/fonts/FlashmathNotoSansSC.otf: Noto Sans CJK SC Regular cut down to the characters we draw.

The Chinese edition's figures need Chinese glyphs on every platform, and the full font is 19 MB (a .ttc of five
languages). This script keeps only the characters of the Chinese catalogs (every ``msgstr`` of
``flashmath/locale/*/LC_MESSAGES/flashmath.po``, where the figure titles and labels are translated too), the Chinese
punctuation and the Latin letters, digits and symbols of figure text (``LATIN``), with fontTools' subsetter, and
renames the family (``flashmath.fonts.FAMILY``) so that it never clashes with a full Noto font installed on the
system. The font is under the SIL Open Font License 1.1
(``flashmath/fonts/OFL.txt``; Noto CJK's only reserved font name is "Source", which the subset does not use).

Run it after changing a catalog (CONTRIBUTING.md, "Translations")::

    apt-get install fonts-noto-cjk   # or any copy of NotoSansCJK-Regular.ttc / NotoSansCJKsc-Regular.otf
    python scripts/build_font.py [--source PATH]

tests/test_zh_edition.py fails when a catalog character is missing from the subset. The output is reproducible
(the head table's timestamp is kept from the source).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.pofile import read_po
from fontTools import subset
from fontTools.ttLib import TTCollection, TTFont

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "flashmath" / "locale"
OUT = ROOT / "flashmath" / "fonts" / "FlashmathNotoSansSC.otf"
FAMILY = "Flashmath Noto Sans SC"  # flashmath.fonts.FAMILY (not imported: the script runs without the package)
POSTSCRIPT = "FlashmathNotoSansSC-Regular"
SOURCES = (
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
    Path("/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf"),
)
SOURCE_FAMILY = "Noto Sans CJK SC"
# Always kept, whether or not a catalog uses them today: Chinese punctuation and the full-width forms.
PUNCTUATION = "，。、：；！？（）“”‘’《》【】—…·～"
# Also kept: printable ASCII and the symbols a figure's text outside its $...$ math may hold (numbers on the axes,
# the minus sign, arrows). A text with $...$ is laid out by mathtext, which takes the text outside the math from the
# text's first family alone (no fallback, matplotlib issue #29173): in the Chinese edition that family is this font,
# so it must draw the Latin letters and digits between the Chinese words too.
LATIN = "".join(chr(c) for c in range(0x20, 0x7F)) + "\u00a0°±²³·×÷–—‘’“”…′″→←↑↓−≈≠≤≥∞√∝⌊⌋‖"


def catalog_text(locale_dir: Path = LOCALE) -> str:
    """Every character of every translation (``msgstr``) in the catalogs under ``locale_dir``."""
    text = []
    for po in sorted(locale_dir.glob("*/LC_MESSAGES/*.po")):
        with po.open("rb") as f:
            for message in read_po(f):
                strings = message.string if isinstance(message.string, tuple) else (message.string,)
                text.extend(s for s in strings if s)
    return "".join(text)


def characters(locale_dir: Path = LOCALE) -> list[int]:
    """The code points the subset must hold: those of the catalogs, the punctuation and ``LATIN`` (the subset
    keeps those the source font has; DejaVu Sans, the fallback family, draws the others in plain text)."""
    return sorted({ord(c) for c in catalog_text(locale_dir) + PUNCTUATION + LATIN if not c.isspace() or c == " "})


def load_source(path: Path) -> TTFont:
    """The Simplified Chinese font of ``path`` (a .ttc collection or a single .otf)."""
    if path.suffix.lower() == ".ttc":
        for font in TTCollection(str(path), recalcTimestamp=False).fonts:
            if font["name"].getDebugName(1) == SOURCE_FAMILY:
                return font
        raise SystemExit(f"{path} holds no font named {SOURCE_FAMILY!r}")
    return TTFont(str(path), recalcTimestamp=False)


def rename(font: TTFont) -> None:
    """Give the subset its own family name (every platform's records of name IDs 1, 3, 4, 6, 16, 17)."""
    names = {1: FAMILY, 2: "Regular", 3: f"{POSTSCRIPT};subset", 4: f"{FAMILY} Regular", 6: POSTSCRIPT}
    table = font["name"]
    table.names = [record for record in table.names if record.nameID not in (16, 17)]
    for name_id, value in names.items():
        table.setName(value, name_id, 3, 1, 0x409)
        table.setName(value, name_id, 1, 0, 0)
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = [POSTSCRIPT]
        top = cff.topDictIndex[0]
        top.FamilyName, top.FullName = FAMILY, f"{FAMILY} Regular"


def build(source: Path, out: Path = OUT) -> int:
    """Write the subset of ``source`` to ``out``; return its size in bytes."""
    font = load_source(source)
    options = subset.Options()
    options.name_IDs = ["*"]  # keep the copyright (0), licence (13) and licence URL (14) records
    options.name_languages = [0x409]
    options.hinting = False
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=characters())
    subsetter.subset(font)
    rename(font)
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out))
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="NotoSansCJK-Regular.ttc or NotoSansCJKsc-Regular.otf")
    args = parser.parse_args(argv)
    source = args.source or next((p for p in SOURCES if p.is_file()), None)
    if source is None:
        parser.error("no Noto Sans CJK SC found: install fonts-noto-cjk or pass --source")
    size = build(source)
    print(f"{OUT.relative_to(ROOT)}: {len(characters())} characters, {size} bytes (from {source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
