"""Keep a chapter of the Chinese edition (notebooks/zh/) in step with its English chapter (notebooks/).

The two editions share their code cells byte for byte (tests/test_zh_edition.py); the Chinese one has one more
code cell, :data:`LANGUAGE_CELL`, right before the first code cell that imports flashmath (so that all the
chapter's code prints is in Chinese; Colab's install cell, which does not import it, comes before). The Markdown is
written in Chinese by us, cell for cell. Three commands (CONTRIBUTING.md, "Translations"):

    python scripts/zh_notebook.py new notebooks/04_loop_swap.ipynb          # a skeleton: English Markdown to rewrite
    python scripts/zh_notebook.py fill notebooks/zh/04_loop_swap.ipynb 04.md  # Markdown cells from a text file
    python scripts/zh_notebook.py sync notebooks/zh/04_loop_swap.ipynb      # code cells again from the English one

``fill`` reads a UTF-8 file whose Markdown cells, in order, are separated by lines holding only ``%%``. Every
command writes the notebook without outputs; execute it afterwards from a clean kernel:
``jupyter nbconvert --to notebook --execute --inplace notebooks/zh/04_loop_swap.ipynb``.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
EN_DIR = ROOT / "notebooks"
ZH_DIR = EN_DIR / "zh"
LANGUAGE = "zh_CN"
LANGUAGE_CELL = ('import flashmath\n\n'
                 'flashmath.set_language("zh_CN")  '
                 '# 中文版：此后代码打印的文字、检查器的判语、图中文字和控件标签都用中文')
SEPARATOR = "%%"


def is_language_cell(cell) -> bool:
    """The one code cell that only the Chinese edition has."""
    return cell.cell_type == "code" and cell.source.startswith(LANGUAGE_CELL.split("  #")[0])


def language_cell_position(en_cells) -> int:
    """Where the language cell goes: right before the first code cell that imports flashmath."""
    for i, cell in enumerate(en_cells):
        if cell.cell_type == "code" and re.search(r"^(import flashmath|from flashmath)", cell.source, re.MULTILINE):
            return i
    raise SystemExit("the English chapter never imports flashmath: where should the language be selected?")


def badge(source: str, name: str) -> str:
    """The Colab and Binder badges of the Chinese chapter (the English ones, pointed at notebooks/zh/)."""
    return source.replace(f"notebooks/{name}", f"notebooks/zh/{name}")


def clean(cell):
    cell = copy.deepcopy(cell)
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    cell.metadata.pop("execution", None)
    return cell


def new(en_path: Path) -> Path:
    """Write notebooks/zh/<name> from the English chapter: its cells, the language cell, Chinese badges."""
    en = nbformat.read(en_path, as_version=4)
    zh = copy.deepcopy(en)
    zh.cells = [clean(c) for c in en.cells]
    zh.cells[0].source = badge(zh.cells[0].source, en_path.name)
    zh.cells.insert(language_cell_position(en.cells), nbformat.v4.new_code_cell(LANGUAGE_CELL))
    out = ZH_DIR / en_path.name
    ZH_DIR.mkdir(exist_ok=True)
    nbformat.write(zh, out)
    return out


def fill(zh_path: Path, text: Path) -> None:
    """Replace the Markdown cells of ``zh_path`` (the badge cell included), in order, by the parts of ``text``."""
    zh = nbformat.read(zh_path, as_version=4)
    parts = [p.strip("\n") for p in text.read_text(encoding="utf-8").split(f"\n{SEPARATOR}\n")]
    markdown = [c for c in zh.cells if c.cell_type == "markdown"]
    if len(parts) != len(markdown):
        raise SystemExit(f"{text} has {len(parts)} parts, {zh_path} {len(markdown)} Markdown cells")
    for cell, part in zip(markdown, parts, strict=True):
        cell.source = part
    zh.cells = [clean(c) for c in zh.cells]
    nbformat.write(zh, zh_path)


def sync(zh_path: Path) -> None:
    """Copy the English chapter's code cells into ``zh_path`` again (same count and order of cells required)."""
    en = nbformat.read(EN_DIR / zh_path.name, as_version=4)
    zh = nbformat.read(zh_path, as_version=4)
    cells = [c for c in zh.cells if not is_language_cell(c)]
    if [c.cell_type for c in cells] != [c.cell_type for c in en.cells]:
        raise SystemExit("the cells differ in number or kind: add or remove the Markdown cells by hand first")
    for k, theirs in enumerate(en.cells):
        if theirs.cell_type == "code":
            cells[k] = clean(theirs)
    cells.insert(language_cell_position(en.cells), nbformat.v4.new_code_cell(LANGUAGE_CELL))
    zh.cells = [clean(c) for c in cells]
    nbformat.write(zh, zh_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("new").add_argument("english", type=Path)
    p = sub.add_parser("fill")
    p.add_argument("chinese", type=Path)
    p.add_argument("text", type=Path)
    sub.add_parser("sync").add_argument("chinese", type=Path)
    args = parser.parse_args(argv)
    if args.command == "new":
        print(new(args.english))
    elif args.command == "fill":
        fill(args.chinese, args.text)
    else:
        sync(args.chinese)
    return 0


if __name__ == "__main__":
    sys.exit(main())
