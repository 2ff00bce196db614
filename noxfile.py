"""One command per contributor workflow (CONTRIBUTING.md, "One command per workflow").

Every session runs in the environment nox itself runs in (the README's `.venv` with the test tools): nothing is
created or installed (``venv_backend="none"``). From the repository root, with `.venv` active:

    nox -s fast                  # ruff, mypy and the fast tier: before every commit
    nox -s chapter -- 06         # one chapter's checks in both editions: nbval and the notebooks' hygiene tests
    nox -s execute -- 06         # re-execute a chapter in both editions (the Chinese code cells synced first)
    nox -s translations          # extract, update, [translate], compile the catalog, then check it and the font
    nox -s font                  # every character the translation uses is in the shipped font subset

Several chapters at once: ``nox -s chapter -- 06 07``. From the first argument that starts with ``-`` on, the
arguments go to pytest (``chapter``, ``fast``, ``font``): ``nox -s chapter -- 06 -n 0``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2024.3"
nox.options.default_venv_backend = "none"
nox.options.sessions = ["fast"]  # `nox` alone: the checks before every commit

ROOT = Path(__file__).resolve().parent
NOTEBOOKS = ROOT / "notebooks"
LOCALE = ROOT / "flashmath" / "locale"
POT = LOCALE / "flashmath.pot"
PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "flashmath.po"
DATE_LINE = re.compile(r'^"POT-Creation-Date: .*\\n"$', re.MULTILINE)

# CONTRIBUTING.md, "Translations": the template from the package and the English chapters' code cells (babel.cfg)
EXTRACT = [
    "extract",
    "-F",
    "babel.cfg",
    "--no-location",
    "--sort-output",
    "--project=flashmath",
    "--version=0.1.0",
    "--copyright-holder=The flashmath authors",
    "--msgid-bugs-address=https://github.com/flashmath-course/flashmath/issues",
    "-o",
    str(POT),
    ".",
]
UPDATE = ["update", "-i", str(POT), "-d", str(LOCALE), "-D", "flashmath", "--no-fuzzy-matching", "--ignore-obsolete"]
COMPILE = ["compile", "-d", str(LOCALE), "-D", "flashmath", "--statistics"]
# tests/test_zh_edition.py's checks of the catalog, in the order a translator meets them
CATALOG_TESTS = [
    "test_every_message_is_translated",
    "test_placeholders_survive_translation",
    "test_the_catalog_holds_every_message_the_package_marks",
    "test_the_compiled_catalog_matches_the_po",
    "test_the_font_covers_every_character_of_the_catalog",
]
FONT_TESTS = ["test_the_font_covers_every_character_of_the_catalog", "test_a_chinese_figure_draws_every_glyph"]


def tool(name: str) -> str:
    """A command of this environment (`.venv/bin/NAME`), found whether or not the environment is active."""
    return str(Path(sys.executable).parent / name)


def split_args(session: nox.Session) -> tuple[list[str], list[str]]:
    """The session's arguments after `--`: (the chapter numbers, then pytest's options from the first `-` on)."""
    args = list(session.posargs)
    first = next((k for k, a in enumerate(args) if a.startswith("-")), len(args))
    return args[:first], args[first:]


def chapter_notebooks(session: nox.Session, numbers: list[str]) -> list[tuple[Path, Path]]:
    """(English, Chinese) notebook of each chapter number (`6` or `06`); stops the session on a bad number."""
    if not numbers:
        session.error(f"name the chapter: nox -s {session.name} -- 06")
    pairs = []
    for number in numbers:
        if not number.isdigit():
            session.error(f"{number!r} is not a chapter number (nox -s {session.name} -- 06)")
        found = sorted(NOTEBOOKS.glob(f"{int(number):02d}_*.ipynb"))
        if len(found) != 1:
            session.error(f"no chapter {number} in notebooks/ ({len(found)} notebooks match)")
        pairs.append((found[0], NOTEBOOKS / "zh" / found[0].name))
    return pairs


def pytest(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "pytest", *args)


@nox.session
def fast(session: nox.Session) -> None:
    """ruff (check and format --check), mypy and the fast tier (CONTRIBUTING.md, "The fast and the full checks")."""
    _, options = split_args(session)
    session.run(tool("ruff"), "check", "flashmath", "tests", "scripts", "noxfile.py")
    session.run(tool("ruff"), "format", "--check", "flashmath", "tests", "scripts", "noxfile.py")
    session.run(tool("mypy"))
    pytest(session, "tests", "-m", "fast", *(options or ["-n", "0"]))


@nox.session
def chapter(session: nox.Session) -> None:
    """One chapter's checks, both editions: nbval reruns each notebook and compares its outputs; the hygiene tests
    of tests/test_notebooks.py and the pairing tests of tests/test_zh_edition.py run on those two files only."""
    numbers, options = split_args(session)
    paths, names = [], []
    for en, zh in chapter_notebooks(session, numbers):
        paths += [str(p.relative_to(ROOT)) for p in (en, zh) if p.exists()]
        names.append(en.stem)
    # -k: a notebook's nbval cells, and every test parametrized with the notebook, match its name
    pytest(session, *paths, "tests/test_notebooks.py", "tests/test_zh_edition.py", "-k", " or ".join(names), *options)


@nox.session
def execute(session: nox.Session) -> None:
    """Re-execute chapters in both editions from a clean kernel: the Chinese code cells are synced from the English
    ones first (new cells added, scripts/zh_notebook.py), and the catalog compiled, so the Chinese outputs are."""
    numbers, _ = split_args(session)
    pairs = chapter_notebooks(session, numbers)
    hook = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_nbconvert_config.py"
    if not hook.exists():
        session.error(
            f"{hook} is missing: run `cp -R jupyter-config/etc .venv/` (README, Start) so that nbconvert "
            "writes the stored form"
        )
    session.run(tool("pybabel"), *COMPILE)
    for en, zh in pairs:
        session.run(sys.executable, "scripts/zh_notebook.py", "sync", str(zh.relative_to(ROOT)))
        for path in (en, zh):
            session.run(
                tool("jupyter"), "nbconvert", "--to", "notebook", "--execute", "--inplace", str(path.relative_to(ROOT))
            )
    session.log(f"now check them: nox -s chapter -- {' '.join(numbers)}")


def keep_date_if_unchanged(path: Path, before: str) -> None:
    """`pybabel extract` stamps the template with the time: keep the old file when nothing else changed."""
    if DATE_LINE.sub("", path.read_text(encoding="utf-8")) == DATE_LINE.sub("", before):
        path.write_text(before, encoding="utf-8")


@nox.session
def translations(session: nox.Session) -> None:
    """The translation workflow in its order (CONTRIBUTING.md, "Translations"): extract the template, update the
    Chinese catalog, stop with the list of messages to translate while any is empty, then compile the catalog
    (before any Chinese notebook runs) and check it and the font."""
    pot_before = POT.read_text(encoding="utf-8")
    session.run(tool("pybabel"), *EXTRACT)
    keep_date_if_unchanged(POT, pot_before)
    session.run(tool("pybabel"), *UPDATE)
    from babel.messages.pofile import read_po

    with PO.open("rb") as f:
        todo = [m.id for m in read_po(f) if m.id and (not m.string or m.fuzzy)]
    if todo:
        listing = "\n".join(f"  {message!r}" for message in todo)
        session.error(
            f"{len(todo)} message(s) to translate in {PO.relative_to(ROOT)} (an empty msgstr, or fuzzy):\n"
            f"{listing}\ntranslate them (chapter 0's glossary fixes the terms), then run this again"
        )
    session.run(tool("pybabel"), *COMPILE)
    pytest(session, "tests/test_zh_edition.py", "-n", "0", "-k", " or ".join(CATALOG_TESTS))
    session.log("then re-execute the Chinese chapters whose outputs changed: nox -s execute -- NN")


@nox.session
def font(session: nox.Session) -> None:
    """Every character a translation uses is in the font subset (flashmath/fonts), and a Chinese figure draws
    without a missing glyph. A missing one: reword, or rebuild the subset (python scripts/build_font.py)."""
    _, options = split_args(session)
    pytest(session, "tests/test_zh_edition.py", "-k", " or ".join(FONT_TESTS), *(options or ["-n", "0"]))
