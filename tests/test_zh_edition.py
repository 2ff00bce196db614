"""The Chinese edition (notebooks/zh/) is kept equal to the English one, and everything it prints is translated.

- Each Chinese chapter pairs with its English chapter cell for cell: the same code byte for byte (so nbval checks
  the same numbers in both), one more code cell that selects the language, the Markdown cells in the same order
  with the same heading levels and the same display equations, written in Chinese.
- The catalog (flashmath/locale/zh_CN/LC_MESSAGES/flashmath.po) holds every message the package marks, each one
  translated (no empty msgstr, no fuzzy entry); the committed .mo says the same as the .po.
- The Chinese font subset (flashmath/fonts/) covers every character of the catalog, and a figure drawn in Chinese
  warns about no missing glyph.

tests/test_notebooks.py applies its stored-notebook hygiene to the Chinese chapters too (executed in order, no
errors, no local paths, widgets with a static picture, the stored form, the title of README.zh-CN.md's chapter
table), and nbval runs them, as it runs notebooks/ (pyproject.toml's testpaths).
"""

import gettext
import io
import json
import re
import warnings

import matplotlib
import nbformat
import numpy as np
import pytest
import zh_notebook  # scripts/zh_notebook.py (tests/conftest.py puts scripts/ on sys.path)
from helpers import ROOT

from flashmath import fonts, i18n

ZH_DIR = ROOT / "notebooks" / "zh"
ZH_NOTEBOOKS = sorted(ZH_DIR.glob("*.ipynb"))
PO = ROOT / "flashmath" / "locale" / "zh_CN" / "LC_MESSAGES" / "flashmath.po"
MO = PO.with_suffix(".mo")
POT = ROOT / "flashmath" / "locale" / "flashmath.pot"
_MPL = tuple(int(p) for p in matplotlib.__version__.split(".")[:2])
LANGUAGE_CELL = 'import flashmath\n\nflashmath.set_language("zh_CN")'  # then a comment, scripts/zh_notebook.py
CJK = re.compile(r"[\u4e00-\u9fff]")
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.DOTALL)
TEXT_IN_MATH = re.compile(r"\\text\{[^{}]*\}|\s+")  # words inside \text{} are translated (review 01-1)


def display_math(markdown: str) -> list[str]:
    """The display equations of a Markdown cell, their \\text{} words and spaces left out."""
    return [TEXT_IN_MATH.sub("", m) for m in DISPLAY_MATH.findall(markdown)]


FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def cells(path):
    return json.loads(path.read_text())["cells"]


def source(cell) -> str:
    return "".join(cell["source"])


def is_language_cell(cell) -> bool:
    return cell["cell_type"] == "code" and source(cell).startswith(LANGUAGE_CELL)


def headings(markdown: str) -> list[int]:
    """The levels of a Markdown cell's headings, in order (lines inside code fences are not headings)."""
    return [len(m.group(1)) for m in re.finditer(r"^(#{1,6}) ", FENCE.sub("", markdown), re.MULTILINE)]


def text_outputs(cell) -> str:
    """The text of a code cell's outputs: streams and text/plain results."""
    return "".join(
        "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
        for out in cell.get("outputs", [])
    )


def parse_cell(code: str):
    """A code cell's syntax tree, its IPython magics and shell lines (``%pip``, ``!ls``) left out."""
    import ast

    return ast.parse(re.sub(r"^\s*[%!].*$", "", code, flags=re.MULTILINE))


def untranslated(markdown: list[str]) -> list[str]:
    """The Markdown cells (after the badges) still to translate: without Chinese, or marked by
    ``scripts/zh_notebook.py sync`` as new in English."""
    return [text[:80] for text in markdown[1:] if not CJK.search(text) or zh_notebook.TO_TRANSLATE in text]


def read_catalog():
    from babel.messages.pofile import read_po

    with PO.open("rb") as f:
        return read_po(f)


def test_there_is_a_chinese_edition():
    assert ZH_NOTEBOOKS, "notebooks/zh/ holds no chapter"
    english = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert not [p.name for p in ZH_NOTEBOOKS if p.name not in english], (
        "each Chinese chapter has the name of an English chapter (a chapter may be translated before an earlier one"
        " that is still being edited; README.zh-CN.md's table marks the others 即将推出)"
    )


@pytest.mark.parametrize("path", ZH_NOTEBOOKS, ids=lambda p: p.name)
class TestPairedWithEnglish:
    def pair(self, path):
        zh, en = cells(path), cells(ROOT / "notebooks" / path.name)
        return [c for c in zh if not is_language_cell(c)], en, zh

    def test_one_language_cell_right_before_the_first_flashmath_import(self, path):
        zh_cells, en, zh = self.pair(path)
        where = [k for k, c in enumerate(zh) if is_language_cell(c)]
        assert len(where) == 1, "exactly one cell calls flashmath.set_language('zh_CN')"
        first_import = next(
            k
            for k, c in enumerate(en)
            if c["cell_type"] == "code" and re.search(r"^(import flashmath|from flashmath)", source(c), re.MULTILINE)
        )
        assert where[0] == first_import, "the language cell comes right before the first cell that imports flashmath"

    def test_same_cells_in_the_same_order(self, path):
        zh_cells, en, _ = self.pair(path)
        assert [c["cell_type"] for c in zh_cells] == [c["cell_type"] for c in en]

    def test_code_cells_are_byte_for_byte_the_english_ones(self, path):
        zh_cells, en, _ = self.pair(path)
        for k, (mine, theirs) in enumerate(zip(zh_cells, en, strict=True)):
            if theirs["cell_type"] == "code":
                assert source(mine) == source(theirs), f"code cell {k} differs: python scripts/zh_notebook.py sync"
                assert mine["metadata"].get("tags") == theirs["metadata"].get("tags"), f"cell {k}: nbval tags"

    def test_markdown_has_the_same_headings_and_display_equations(self, path):
        zh_cells, en, _ = self.pair(path)
        for k, (mine, theirs) in enumerate(zip(zh_cells, en, strict=True)):
            if theirs["cell_type"] == "markdown":
                assert headings(source(mine)) == headings(source(theirs)), f"markdown cell {k}: heading levels"
                assert display_math(source(mine)) == display_math(source(theirs)), (
                    f"markdown cell {k}: the display equations ($$...$$) must be the English ones"
                )

    def test_markdown_is_written_in_chinese(self, path):
        zh_cells, _, _ = self.pair(path)
        markdown = [source(c) for c in zh_cells if c["cell_type"] == "markdown"]
        badges = markdown[0]
        assert f"notebooks/zh/{path.name}" in badges and f"notebooks/{path.name}" not in badges, "Chinese badges"
        assert not untranslated(markdown), f"Markdown cells to translate: {untranslated(markdown)}"

    def test_outputs_are_chinese_where_the_package_speaks(self, path):
        """The checker's report and the 'predict, then check' placeholder come out in Chinese."""
        zh_cells, _, _ = self.pair(path)
        text = "\n".join(text_outputs(c) for c in zh_cells if c["cell_type"] == "code")
        assert "cases passed" not in text and "No prediction yet" not in text, "English output in the Chinese edition"
        if "check_" in "".join(source(c) for c in zh_cells if c["cell_type"] == "code"):
            assert "个用例中通过" in text, "the checker's report is stored in Chinese"


def test_sync_follows_the_english_chapter_and_keeps_the_chinese(tmp_path, monkeypatch):
    """scripts/zh_notebook.py sync after an English change: a new code cell and a new Markdown cell are inserted at
    their positions (the Markdown one in English, flagged until translated), a changed code cell is copied and its
    outputs cleared, a removed cell is removed; the Chinese Markdown, the other outputs and the language cell's id
    stay; a second sync changes nothing, and so does a sync of an unchanged chapter."""
    name = "15_recap.ipynb"
    (tmp_path / "zh").mkdir()
    monkeypatch.setattr(zh_notebook, "EN_DIR", tmp_path)
    en = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    zh_path = tmp_path / "zh" / name
    zh_path.write_bytes((ROOT / "notebooks" / "zh" / name).read_bytes())
    (tmp_path / name).write_bytes((ROOT / "notebooks" / name).read_bytes())
    assert zh_notebook.sync(zh_path) == [] and zh_path.read_bytes() == (ROOT / "notebooks" / "zh" / name).read_bytes()

    before = nbformat.read(zh_path, as_version=4)
    language = next(c for c in before.cells if is_language_cell(c))
    code = [k for k, c in enumerate(en.cells) if c.cell_type == "code"]
    changed, removed = en.cells[code[-1]], en.cells[code[-2] + 1]  # the last code cell; a cell after another one
    assert removed.cell_type == "markdown"
    changed.source += "\nprint('one more line')"
    new_code = nbformat.v4.new_code_cell("x = 1 + 1\nassert x == 2")
    new_text = nbformat.v4.new_markdown_cell("### A new question\n\nWhy is $x = 2$?")
    en.cells.remove(removed)
    en.cells[code[2] : code[2]] = [new_text, new_code]
    nbformat.write(en, tmp_path / name)

    changes = zh_notebook.sync(zh_path)
    assert len(changes) == 4, changes  # two new cells, one changed, one removed
    after = nbformat.read(zh_path, as_version=4)
    ours = [c for c in after.cells if not is_language_cell(c)]
    assert [c.id for c in ours] == [c.id for c in en.cells]
    assert [c.cell_type for c in ours] == [c.cell_type for c in en.cells]
    assert all(
        mine.source == theirs.source for mine, theirs in zip(ours, en.cells, strict=True) if theirs.cell_type == "code"
    )
    where = [k for k, c in enumerate(after.cells) if is_language_cell(c)]
    assert where == [zh_notebook.language_cell_position(en.cells)] and after.cells[where[0]].id == language.id
    old = {c.id: c for c in before.cells}
    for cell in ours:
        if cell.id == new_text.id:
            assert cell.source.startswith(zh_notebook.TO_TRANSLATE) and new_text.source in cell.source
        elif cell.id in (new_code.id, changed.id):
            assert cell.outputs == [] and cell.execution_count is None
        else:
            assert cell == old[cell.id], "an untouched cell keeps its Chinese text, its outputs and its metadata"
    assert removed.id not in {c.id for c in after.cells}
    flagged = untranslated([source(c) for c in ours if c.cell_type == "markdown"])
    assert len(flagged) == 1 and flagged[0].startswith(zh_notebook.TO_TRANSLATE[:40]), flagged

    again = zh_path.read_bytes()
    assert zh_notebook.sync(zh_path) == [] and zh_path.read_bytes() == again


def test_nbval_collects_the_chinese_chapters(pytestconfig):
    """pyproject.toml's testpaths include notebooks/, and pytest walks into notebooks/zh/."""
    assert "notebooks" in pytestconfig.getini("testpaths")
    assert not any("zh" in str(p) for p in pytestconfig.getini("norecursedirs") if p != "*.egg")


# ---------------------------------------------------------------------------------------------------------------
# the catalog
# ---------------------------------------------------------------------------------------------------------------


def test_every_message_is_translated():
    catalog = read_catalog()
    messages = [m for m in catalog if m.id]
    assert messages
    assert not [m.id for m in messages if not m.string], "untranslated messages (empty msgstr)"
    assert not [m.id for m in messages if m.fuzzy], "fuzzy messages: check the translation, then remove the flag"
    assert str(catalog.locale) in ("zh_Hans_CN", "zh_CN")


def test_placeholders_survive_translation():
    """A translation keeps each {placeholder} of its message, or str.format would raise or drop a value."""
    # A doubled brace is a literal one, as str.format reads it (math such as $H_{{kv}}$ in a formatted message).
    # A translation may drop a string's padding (``{name:28s}`` aligned English columns; Chinese puts the name at the
    # end of the line), never a number's format.
    placeholder = re.compile(r"\{([a-z_]*)(?::([^}]*))?\}")
    padding = re.compile(r"[<>^]?\d*s?")

    def placeholders(text):
        found = placeholder.findall(text.replace("{{", "").replace("}}", ""))
        return sorted((name, "" if padding.fullmatch(spec) else spec) for name, spec in found)

    wrong = [m.id for m in read_catalog() if m.id and placeholders(m.id) != placeholders(m.string)]
    assert not wrong, wrong


def test_the_catalog_holds_every_message_the_package_marks():
    """Extract the marked strings from the source again (Babel, babel.cfg: the package and the English chapters'
    code cells): none may be missing from the template or the catalog (its msgstr would fall back to English), and
    none may be left over."""
    from babel.messages.extract import extract_from_dir
    from babel.messages.pofile import read_po

    method_map = [("flashmath/**.py", "python"), ("notebooks/*.ipynb", "flashmath.i18n:extract_notebook")]
    in_code = {message for _, _, message, _, _ in extract_from_dir(str(ROOT), method_map) if isinstance(message, str)}
    with POT.open("rb") as f:
        in_template = {m.id for m in read_po(f) if m.id}
    in_catalog = {m.id for m in read_catalog() if m.id}
    assert in_code == in_template, "re-extract the template (CONTRIBUTING.md, Translations)"
    assert in_template == in_catalog, "pybabel update the catalog (CONTRIBUTING.md, Translations)"


def test_every_sentence_a_chapter_passes_to_the_package_is_in_the_catalog():
    """A chapter's code is the same in both editions, so its prediction cell names a question of
    flashmath.exercises.predict.QUESTIONS (``question="P8"``), whose sentences, marked there, are translated when
    printed: each cell names a question, and every sentence of every question is in the catalog."""
    import ast

    from flashmath.exercises.predict import QUESTIONS

    ids = {m.id for m in read_catalog() if m.id}
    keys, calls = [], 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in cells(path):
            if cell["cell_type"] == "code" and "check_prediction(" in source(cell):
                calls += 1
                keys += [
                    k.value.value
                    for node in ast.walk(parse_cell(source(cell)))
                    if isinstance(node, ast.Call)
                    for k in node.keywords
                    if k.arg == "question" and isinstance(k.value, ast.Constant)
                ]
    assert calls and len(keys) == calls, "each cell that calls check_prediction names its question"
    assert set(keys) <= set(QUESTIONS)
    sentences = [text for q in QUESTIONS.values() for text in (q.why, *q.misconceptions.values())]
    assert not [s for s in sentences if s not in ids], "run the translations workflow (CONTRIBUTING, Translations)"


def test_the_compiled_catalog_matches_the_po():
    with MO.open("rb") as f:
        compiled = {k: v for k, v in gettext.GNUTranslations(f)._catalog.items() if k}
    written = {m.id: m.string for m in read_catalog() if m.id and m.string}
    assert compiled == written, "compile it again: pybabel compile -d flashmath/locale -D flashmath"


def test_the_font_covers_every_character_of_the_catalog():
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    charmap = FT2Font(str(fonts.FONT_PATH)).get_charmap()
    # DejaVu Sans, the first family, draws what it has (the subscripts of x_i, g_m written without mathtext)
    dejavu = FT2Font(font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"))).get_charmap()
    needed = {c for m in read_catalog() if m.id for c in m.string if ord(c) > 0x7F}
    missing = sorted(c for c in needed if ord(c) not in charmap and ord(c) not in dejavu)
    assert not missing, f"characters missing from the font subset: {''.join(missing)} (python scripts/build_font.py)"
    assert FT2Font(str(fonts.FONT_PATH)).family_name == fonts.FAMILY
    assert (fonts.FONT_PATH.parent / "OFL.txt").is_file(), "the font's licence ships with it"


# ---------------------------------------------------------------------------------------------------------------
# selecting the language
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def chinese():
    i18n.set_language("zh_CN")
    yield
    i18n.set_language("en")


def test_english_is_the_default_and_comes_back(capsys):
    from flashmath.exercises import check_prediction

    assert i18n.get_language() == "en"
    i18n.set_language("zh_CN")
    try:
        check_prediction(..., 1.0)
        assert "还没有预测" in capsys.readouterr().out
    finally:
        i18n.set_language("en")
    check_prediction(..., 1.0)
    assert capsys.readouterr().out.startswith("No prediction yet")


def test_an_aside_goes_before_the_chinese_full_stop():
    """zhrev-al 01-13: "……向量（Python 原始报错：……）", not "……向量。（……）"; English keeps its sentence whole."""
    assert i18n.aside("a sentence.", "a note") == "a sentence. (a note)"
    i18n.set_language("zh_CN")
    try:
        assert i18n.aside("请返回一个空的浮点向量。", "原始报错") == "请返回一个空的浮点向量（原始报错）"
    finally:
        i18n.set_language("en")


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="zh_CN"):
        i18n.set_language("fr")


def test_a_checker_speaks_chinese(chinese):
    import numpy as np

    from flashmath.exercises import check_safe_softmax

    checked = check_safe_softmax(lambda x: np.exp(x) / np.exp(x).sum())  # the max not subtracted
    report = repr(checked)
    assert report.startswith(f"check_safe_softmax：{len(checked.cases)} 个用例中通过")
    assert "未通过" in report and "看起来是“没有减去最大值”" in report and "looks like" not in report


def test_a_chinese_figure_draws_every_glyph(chinese):
    """Chinese text from the catalog, drawn with the subset as the fallback after DejaVu Sans, warns about no
    missing glyph; without the subset the same text does (so this test can fail)."""
    import matplotlib as mpl
    from matplotlib.figure import Figure

    text = [m.string for m in read_catalog() if m.id in ("PASS", "FAIL", "the max not subtracted", "All good.")]

    def draw():
        fig = Figure(figsize=(3, 2))
        ax = fig.add_subplot()
        ax.set_title(text[0])
        ax.set_xlabel(" / ".join(text[1:]) + " (x = 3.14)")
        fig.savefig(io.BytesIO(), format="png")

    assert mpl.rcParams["font.family"] == [fonts.FAMILY, "DejaVu Sans"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw()
    i18n.set_language("en")
    assert fonts.FAMILY not in mpl.rcParams["font.family"]
    with pytest.warns(UserWarning, match="missing from font"):
        draw()


def test_bold_chinese_text_draws_without_a_weight_warning(chinese, caplog):
    """The subset has one weight: bold figure text (chapter 11's memory figure) must not log matplotlib's "Failed to
    find font weight bold", which lands on stderr in a stored notebook. A family without a bold entry does."""
    import logging

    from matplotlib import font_manager

    def weight_warnings(family):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="matplotlib.font_manager"):
            font_manager.fontManager._findfont_cached.cache_clear()
            font_manager.findfont(font_manager.FontProperties(family=family, weight="bold"))
        return [r.getMessage() for r in caplog.records if "Failed to find font weight" in r.getMessage()]

    assert not weight_warnings(fonts.FAMILY)
    regular_only = [f for f in font_manager.fontManager.ttflist if f.name == fonts.FAMILY and f.weight != 700]
    saved = list(font_manager.fontManager.ttflist)
    font_manager.fontManager.ttflist[:] = [f for f in saved if f.name != fonts.FAMILY] + regular_only
    try:
        # The warning is matplotlib 3.11's (3.10, Python 3.10's pin, picks the nearest weight silently)
        assert weight_warnings(fonts.FAMILY) or _MPL < (3, 11)
    finally:
        font_manager.fontManager.ttflist[:] = saved
        font_manager.fontManager._findfont_cached.cache_clear()


def test_a_filled_template_is_english_text_and_translates_through_its_template(chinese):
    from flashmath.exercises import chapter5

    name = next(m.name for m in chapter5.STEP_MISTAKES if m.name.endswith(" not corrected"))
    assert name == "A'_{m-1} not corrected" and isinstance(name, i18n.Filled)  # the English text, as tests see it
    assert i18n.gettext(name) == "A'_{m-1} 没有修正"  # the translated template, filled with the same names


@pytest.mark.parametrize(
    ("checker", "wrong", "english", "chinese_name"),
    [
        # chapter 8: the square-case causal mask, top-left aligned when N != M
        (
            "check_causal_mask",
            lambda N, M: np.tril(np.ones((N, M), dtype=bool)),
            "the top-left alignment (off by M - N)",
            "左上对齐（差了 M - N）",
        ),
        # chapter 13: the softcap as a clip
        (
            "check_softcap",
            lambda qk, scale, cap: np.clip(qk * scale, -cap, cap),
            "the cap as a clip",
            "把上限做成了截断",
        ),
    ],
    ids=["chapter 8", "chapter 13"],
)
def test_later_checkers_name_their_mistakes_in_chinese(checker, wrong, english, chinese_name):
    """A wrong answer to a checker of chapter 8 and of chapter 13 names its mistake in Chinese once zh_CN is
    selected, with no English left in the verdict; English comes back with set_language("en")."""
    from flashmath import exercises

    check = getattr(exercises, checker)
    i18n.set_language("zh_CN")
    try:
        report = repr(check(wrong))
    finally:
        i18n.set_language("en")
    assert report.startswith(f"{checker}：") and "未通过" in report
    assert f"看起来是“{chinese_name}”" in report
    assert english not in report and "looks like" not in report and "expected" not in report
    english_report = repr(check(wrong))
    assert f"looks like {english}: " in english_report and not CJK.search(english_report)


def test_a_notebooks_tr_messages_are_extracted_and_its_magics_skipped(tmp_path):
    """The notebook extractor finds ``tr`` (and ``_``) in code cells only, past a ``%pip`` line, with line numbers
    counted through the cells."""
    import json

    from babel.messages.extract import extract

    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": 'fm.tr("not code")'},
            {"cell_type": "code", "source": ["%pip install x\n", 'print(fm.tr("key tile j"))']},
            {"cell_type": "code", "source": 'x = 1\ny = f"{fm.tr(\'keys\'):>8}" + _("a verdict") + other("no")'},
        ]
    }
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook))
    with path.open("rb") as f:
        found = [(line, message) for line, message, _, _ in extract("flashmath.i18n:extract_notebook", f)]
    assert found == [(2, "key tile j"), (4, "keys"), (4, "a verdict")]


def test_tr_pads_by_display_columns_so_translated_tables_stay_aligned():
    from flashmath.i18n import Text, display_width

    assert display_width("键块 j") == 6 and display_width("key") == 3 and display_width("，") == 2
    for text in ("key tile j", "键块 j", "最大误差", "u"):
        for spec in (">12", "<12", "^12", "12"):
            shown = format(Text(text), spec)
            assert display_width(shown) == max(12, display_width(text)), (text, spec, shown)
            assert shown.strip() == text
    assert format(Text("key tile j"), ">12") == format("key tile j", ">12")  # English: exactly str's
    assert format(Text("最大误差"), ">12.2") == "        最大"
    assert format(Text("最大误差"), "") == "最大误差"
    filled = Text("{n} 个 key").format(n=3)  # a label filled in, then padded: still by display columns
    assert isinstance(filled, Text) and format(filled, ">10") == "  3 个 key"


def test_a_filled_tr_message_still_pads_by_display_columns():
    """``fm.tr("{n} rows;").format(n=n)`` padded in an f-string: chapter 1's table header, aligned in Chinese."""
    from flashmath.i18n import Text, display_width

    filled = Text("{n} 行；").format(n=1104)
    assert isinstance(filled, Text) and filled == "1104 行；"
    assert display_width(f"{filled:>10}") == 10 and f"{filled:>10}" == " 1104 行；"
    assert f"{Text('{n} rows;').format(n=1104):>10}" == f"{'1104 rows;':>10}"  # English: exactly str's


def glyphs_before_each_edge(line: str, edges: list[int]) -> list[tuple[int, int]]:
    """How many narrow and how many wide glyphs come before each display column in ``edges``."""
    from flashmath.i18n import display_width

    counts, narrow, wide, column = [], 0, 0, 0
    for ch in line:
        while edges[len(counts) :] and column >= edges[len(counts)]:
            counts.append((narrow, wide))
        step = display_width(ch)
        narrow, wide, column = narrow + (step == 1), wide + (step == 2), column + step
    return counts + [(narrow, wide)] * (len(edges) - len(counts))


def test_a_table_lines_up_also_where_a_chinese_character_is_not_two_columns():
    """JupyterLab draws a Chinese character about 1.6 to 1.8 Latin columns wide, so padding by display columns
    (``Text``) still lets a column drift after a Chinese header. ``fm.table`` gives every line the same narrow and
    wide glyphs before each column edge: the edges line up whatever a wide glyph's width."""
    from flashmath.i18n import IDEOGRAPHIC_SPACE, Text, display_width, table

    rows = [
        [Text("key 块 j"), "key", Text("块最大值"), "g"],
        [1, "1-10", "0.117", "0.117"],
        [5, "41-46", "2.034", "2.0"],
    ]
    lines = table(rows, [10, 7, 8, 7])
    assert len({display_width(line) for line in lines}) == 1  # a terminal: one width
    edges = [10, 18, 32, 40]  # the columns' right edges: 10, then 1 + 7, 1 + 13 (5 digits under 4 wide), 1 + 7
    assert len({tuple(glyphs_before_each_edge(line, edges)) for line in lines}) == 1, lines
    assert IDEOGRAPHIC_SPACE in lines[1] and lines[0].startswith("  key 块 j")
    for ratio in (1.6, 5 / 3, 1.8, 2.0):  # the right edge of each column, drawn with a wide glyph `ratio` columns
        drawn = {tuple(n + ratio * w for n, w in glyphs_before_each_edge(line, edges)) for line in lines}
        assert len(drawn) == 1, (ratio, drawn)
    # English: exactly f"{cell:>{width}}" joined by a space; a left-aligned column; a column wider than its width
    assert table([["key tile j", "s"], [1, "0.5"]], [10, 8]) == [f"{'key tile j':>10} {'s':>8}", f"{1:>10} {'0.5':>8}"]
    assert table([["a", "b"], ["ccc", "d"]], [2, 1], align="<") == ["a   b", "ccc d"]
    merged = table([["merged:", "g = 1"], ["合并：", "g = 2"]], [8, 0], align="<", sep="")
    assert merged == ["merged:" + IDEOGRAPHIC_SPACE * 3 + "g = 1", "合并：" + " " * 7 + "g = 2"]
    with pytest.raises(ValueError, match="2 cells"):
        table([["a"]], [1, 2])


# Words a Chinese chapter's printed text may keep in English: the glossary's terms kept as they are (chapter 0),
# names of libraries, units (kB ... PB), the memories of chapter 1's hierarchy (SRAM, HBM, DRAM) and the SM, Python's
# and numpy's own words (nan, True, float16, np), the notation's symbols (dQ, dq, lse, acc, tanh, Dv), names of
# products, platforms and methods (RTX, Mistral, CUDA, Colab, Flash-Decoding), and PyTorch's build tag (2.13.0+cpu).
KEPT_IN_ENGLISH = set(
    """
softmax logsumexp attention query queries key keys value values kernel kernels token tokens batch padding loss split
KV cache dtype SRAM HBM DRAM SM GPU CPU BLAS OpenBLAS PyTorch Triton numpy torch triton matplotlib ipywidgets flashmath
Python autograd FlashAttention FlexAttention SDPA nan inf NaN True False None ms KB MB GB MiB KiB float16 float32
float64 bfloat16 int32 int64 fa1 fa2 exp max min sum log ln argmax diag matmul QK MQA GQA MHA ALiBi np Dv
dQ dK dV dq dk dv lse LSE acc tanh cpu CUDA Colab RTX Mistral Flash Decoding kB TB PB warp warps
rank gloo distributed all gather Ulysses ring dA
""".split()
)
# chapter 13's attention sinks: the term kept as GPT-OSS's parameter names it, the model's and the method's names
KEPT_IN_ENGLISH |= {"sink", "sinks", "GPT", "OSS", "StreamingLLM"}


# An output with a picture, a widget or HTML (chapters 2 and 6's animations): its text/plain is a placeholder
# (<Figure size ...>, interactive(...), <IPython.core.display.HTML object>). A widget's is all that is stored of it
# (flashmath/_notebook_format.py keeps no widget view): WIDGET_TEXT.
PICTURES = {"image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json", "text/html"}
WIDGET_TEXT = "interactive("


def _code_names(code: str) -> set[str]:
    """The names a code cell uses: variables, functions, attributes, keyword arguments, parameters (not its strings:
    a header left as a plain string is English in both editions)."""
    import ast

    names: set[str] = set()
    tree = parse_cell(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
            names.add(node.arg)  # a keyword argument, or a parameter of a function the cell defines
    return names


@pytest.mark.parametrize("path", ZH_NOTEBOOKS, ids=lambda p: p.name)
def test_what_a_chinese_chapter_prints_is_chinese(path):
    """No English word in a Chinese chapter's stored text outputs, except the words above, the names its own code
    uses, lines of the package's source that a chapter prints (chapter 11 shows its kernel; its line-for-line tables
    show them after a label and " | "), the attention heads' tokens (data), and identifiers (a word with a digit or
    an underscore: q_n, s_M, fa2)."""
    from flashmath.data import load_heads

    package_source = "\n".join(p.read_text() for p in (ROOT / "flashmath").rglob("*.py"))
    heads = load_heads()
    # the tokens' words too: a table shows "[CLS]" and "##cal", which the check below reads as the words CLS and cal
    tokens = set(heads.tokens) | set(re.findall(r"\w+", " ".join([*heads.tokens, heads.text, heads.model])))
    english = []
    for index, cell in enumerate(cells(path)):
        if cell["cell_type"] != "code":
            continue
        allowed = KEPT_IN_ENGLISH | _code_names(source(cell)) | tokens
        shown = "".join(
            "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            for out in cell.get("outputs", [])
            if not {*out.get("data", {})} & PICTURES
            and not "".join(out.get("data", {}).get("text/plain", "")).startswith(WIDGET_TEXT)
        )
        for line in shown.splitlines():
            code = line.split(" | ", 1)[-1].strip()  # a line-for-line table: "numpy  | <a line of the package>"
            if line.strip() and (line.strip() in package_source or code and code in package_source):
                continue
            # a quoted string is data (a token, a repr, an answer to type); a prime (A'_m ... A'_M) starts none
            line = re.sub(r"(?<![\w'])'[^']*'", "", line)
            line = re.sub(r"“[ -~]*”", "", line)  # an answer to type, in Chinese quotes: “registers”
            line = re.sub(r"BLAS：.*", "", line)  # fm.blas_description(): the library's and kernel's own names
            words = {w for w in re.findall(r"(?<![\w.])[A-Za-z][A-Za-z]+(?![\w(])", line) if w not in allowed}
            if words:
                english.append(f"cell {index}: {sorted(words)} in {line.strip()[:100]!r}")
    assert not english, f"{len(english)} line(s) with English words:\n" + "\n".join(english[:40])


def test_the_missing_extras_are_explained_in_chinese(monkeypatch):
    """The error a Chinese chapter shows when the triton or distributed extra is missing is Chinese, names the extra
    as 可选依赖 and keeps the install commands (issue 38 item 4)."""
    import importlib.util

    import flashmath
    from flashmath import ring_dist, triton_setup

    monkeypatch.setattr(triton_setup, "_IMPORT_ERROR", ModuleNotFoundError("No module named 'triton'"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    flashmath.set_language("zh_CN")
    try:
        with pytest.raises(triton_setup.ExtraNotInstalled) as triton_error:
            triton_setup.require_extra("Chapter 11")
        with pytest.raises(ring_dist.DistributedExtraNotInstalled) as torch_error:
            ring_dist.require_torch("Chapter 14")
        with pytest.raises(triton_setup.ExtraNotInstalled) as kernel_error:
            triton_setup.require_triton()
    finally:
        flashmath.set_language("en")
    assert str(triton_error.value).startswith("第 11 章需要可选依赖 triton")
    assert str(torch_error.value).startswith("第 14 章需要 PyTorch，也就是可选依赖 distributed")
    assert str(kernel_error.value).startswith("Triton kernel 需要 PyTorch 和 Triton")
    for command in triton_setup.INSTALL_COMMANDS:
        assert f"    {command}" in str(triton_error.value) and command in str(kernel_error.value)
    for command in ring_dist.INSTALL_COMMANDS:
        assert f"    {command}" in str(torch_error.value)


# a closing ** right after full-width punctuation closes only before whitespace or punctuation (CommonMark's
# right-flanking rule): "**出处：**flash-attn" shows its asterisks in JupyterLab, GitHub and nbviewer
_UNCLOSED_BOLD = re.compile(r"\*\*[^*\n]*?[\u3000-\u303f\uff00-\uffef]\*\*(?=[^\s\W])")


@pytest.mark.parametrize("path", ZH_NOTEBOOKS, ids=lambda p: p.name)
def test_bold_after_full_width_punctuation_is_closed(path):
    nb = nbformat.read(path, as_version=4)
    bad = [
        f"cell {i} ({cell.id}): {match.group(0)!r}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for match in _UNCLOSED_BOLD.finditer(cell.source)
    ]
    assert not bad, "bold that Markdown leaves open (add a space after the closing **):\n" + "\n".join(bad)
