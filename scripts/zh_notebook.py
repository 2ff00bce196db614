"""Keep a chapter of the Chinese edition (notebooks/zh/) in step with its English chapter (notebooks/).

The two editions share their code cells byte for byte (tests/test_zh_edition.py); the Chinese one has one more
code cell, :data:`LANGUAGE_CELL`, right before the first code cell that imports flashmath (so that all the
chapter's code prints is in Chinese; Colab's install cell, which does not import it, comes before). The Markdown is
written in Chinese by us, cell for cell. Three commands (CONTRIBUTING.md, "Translations"):

    python scripts/zh_notebook.py new notebooks/04_loop_swap.ipynb          # a skeleton: English Markdown to rewrite
    python scripts/zh_notebook.py fill notebooks/zh/04_loop_swap.ipynb 04.md  # Markdown cells from a text file
    python scripts/zh_notebook.py sync notebooks/zh/04_loop_swap.ipynb      # the English chapter's cells again

``fill`` reads a UTF-8 file whose Markdown cells, in order, are separated by lines holding only ``%%``; ``new`` and
``fill`` write the notebook without outputs. ``sync`` follows the English chapter cell by cell, matching the cells
by their ids (the two editions share them): a code cell gets the English source and tags (its outputs kept where
the source did not change), a Markdown cell keeps its Chinese text, a cell new in English is inserted at its
position (a Markdown one with the English text under :data:`TO_TRANSLATE`, which tests/test_zh_edition.py flags
until it is translated), a cell gone from English is removed, and the language cell keeps its id. Execute the
chapter afterwards from a clean kernel (``nox -s execute -- 04`` syncs and executes both editions).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from flashmath._notebook_format import normalize  # the stored form (no machine-specific metadata)

ROOT = Path(__file__).resolve().parents[1]
EN_DIR = ROOT / "notebooks"
ZH_DIR = EN_DIR / "zh"
LANGUAGE = "zh_CN"
LANGUAGE_CELL = (
    "import flashmath\n\n"
    'flashmath.set_language("zh_CN")  '
    "# 中文版：此后代码打印的文字、检查器的反馈（提示信息）、图中文字和控件标签都用中文"
)
SEPARATOR = "%%"
#: The first line of a Markdown cell that ``sync`` copied from English: translate the text below it, then delete it.
TO_TRANSLATE = "<!-- TO TRANSLATE: new in the English chapter; write it in Chinese, then delete this line -->"


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


def sync(zh_path: Path) -> list[str]:
    """Follow the English chapter in ``zh_path``, cell by cell (the module docstring says how); returns what changed,
    one line per cell."""
    en = nbformat.read(EN_DIR / zh_path.name, as_version=4)
    zh = nbformat.read(zh_path, as_version=4)
    languages = [c for c in zh.cells if is_language_cell(c)]
    ours = [c for c in zh.cells if not is_language_cell(c)]
    by_id = {c.get("id"): c for c in ours if c.get("id")}
    if any(c.get("id") in by_id for c in en.cells):
        matched = [by_id.get(c.get("id")) for c in en.cells]
    elif [c.cell_type for c in ours] == [c.cell_type for c in en.cells]:  # no shared ids: cell for cell
        matched = list(ours)
    else:
        raise SystemExit("the editions share no cell id and differ in their cells: add or remove cells by hand first")
    changes, cells, followed = [], [], set()
    for k, (theirs, mine) in enumerate(zip(en.cells, matched, strict=True)):
        if mine is not None and mine.cell_type == theirs.cell_type:
            followed.add(id(mine))
        if mine is None or mine.cell_type != theirs.cell_type:
            cell = clean(theirs)
            if cell.cell_type == "markdown":
                cell.source = f"{TO_TRANSLATE}\n\n{theirs.source}"
            changes.append(
                f"cell {k}: new {theirs.cell_type} cell" + (" (to translate)" if cell.cell_type == "markdown" else "")
            )
        elif theirs.cell_type == "code" and mine.source != theirs.source:
            cell = clean(theirs)
            changes.append(f"cell {k}: code changed (outputs cleared)")
        else:
            cell = mine  # Chinese Markdown, or code unchanged with its outputs
            if theirs.cell_type == "code":
                cell.metadata = copy.deepcopy(theirs.metadata)  # the nbval tags
                cell.metadata.pop("execution", None)
        cells.append(cell)
    changes += [
        f"removed a {c.cell_type} cell gone from English: {c.source[:60]!r}" for c in ours if id(c) not in followed
    ]
    language = languages[0] if languages else nbformat.v4.new_code_cell(LANGUAGE_CELL)
    cells.insert(language_cell_position(en.cells), language)
    zh.cells = cells
    nbformat.write(normalize(zh), zh_path)
    return changes


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
        for change in sync(args.chinese):
            print(f"{args.chinese}: {change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
