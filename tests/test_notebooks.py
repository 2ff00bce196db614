"""Notebook hygiene: every chapter is stored executed, clean, in order, and in the course's fixed shape."""

import ast
import configparser
import json
import re

import pytest
from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ZH_NOTEBOOKS = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))  # the Chinese edition, tests/test_zh_edition.py
README = (ROOT / "README.md").read_text()
README_ZH = (ROOT / "README.zh-CN.md").read_text()
SYLLABUS_CHAPTERS = 16  # chapters 0-15 of the syllabus, each a row of README.md's chapter table


def chapter_table(readme=README, heading="## Chapters", folder="notebooks") -> list[tuple[int, str, str | None, str]]:
    """(number, title, notebook path or None, 'open' cell) of each row of README.md's chapter table (or of
    README.zh-CN.md's, ``chapter_table(README_ZH, "## 章节", "notebooks/zh")``): number, title, what it shows,
    minutes (tests/test_guides.py checks them), open."""
    section = readme[readme.index(heading) :]
    section = section[: section.index("\n## ")]
    rows = []
    row = re.compile(r"^\| (\d+) \| ([^|]+?) \|[^|]*\|[^|]*\| ([^|]+?) \|$", re.MULTILINE)
    for number, title, opens in row.findall(section):
        link = re.fullmatch(rf"\[(.+)\]\(({folder}/\d\d_[a-z0-9_]+\.ipynb)\)", title)
        rows.append((int(number), link.group(1) if link else title, link.group(2) if link else None, opens))
    return rows


CHAPTERS = chapter_table()
CHAPTERS_ZH = chapter_table(README_ZH, "## 章节", "notebooks/zh")
LOCAL_PATH = re.compile(r"(/root\b|/home/|/tmp/|/work/|/Users/|[A-Z]:\\\\Users|/private/var/)")
DATA_URI = re.compile(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=\\n]+")


def sanitize_patterns() -> list[re.Pattern]:
    """The regexes of nbval_sanitize.cfg (pyproject.toml's --nbval-sanitize-with): what they match, nbval ignores."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "nbval_sanitize.cfg")
    return [re.compile(config[name]["regex"]) for name in config.sections()]


SANITIZE = sanitize_patterns()


def load(path):
    return json.loads(path.read_text())


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell):
    return "".join(cell["source"])


def text_outputs(cell):
    """The text a reader sees in a cell's outputs (embedded images removed)."""
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            yield "".join(out["text"])
        for mime in ("text/plain", "text/html", "text/markdown"):
            if mime in out.get("data", {}):
                yield DATA_URI.sub("", "".join(out["data"][mime]))


def shows_a_widget(cell) -> bool:
    """A widget cell: its stored output is the widget's text form, ``interactive(...)`` (the stored form keeps no
    widget view or state: flashmath/_notebook_format.py)."""
    return any(
        out.get("output_type") == "execute_result"
        and "".join(out.get("data", {}).get("text/plain", "")).startswith("interactive(")
        for out in cell.get("outputs", [])
    )


def output_ignored(cell) -> str | None:
    """Why nbval does not compare (all or part of) a code cell's stored output: its marker or tag, or a sanitize rule
    that matches it; None where nbval compares all of it."""
    if "NBVAL_IGNORE_OUTPUT" in source(cell) or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", []):
        return "marked nbval-ignore-output"
    # what nbval compares: streams, text/plain, text/html, SVG (not PNG/JPEG, whose base64 can spell "0xACFA2F")
    skipped = ("image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json")
    compared = [
        {**o, "data": {k: v for k, v in o.get("data", {}).items() if k not in skipped}} for o in cell.get("outputs", [])
    ]
    text = json.dumps(compared)
    for pattern in SANITIZE:
        if pattern.search(text):
            return f"the sanitize rule {pattern.pattern!r} matches its output"
    return None


def asserts_something(cell) -> bool:
    """An assert statement or an ``assert_*`` call (numpy.testing's) in the cell's code (IPython magics left out)."""
    code = "\n".join(line for line in source(cell).splitlines() if not line.lstrip().startswith(("%", "!")))
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name.startswith("assert"):
                return True
    return False


def test_chapters_are_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    written = [number for number, _, path, _ in CHAPTERS if path]  # a gap only for a chapter still 'coming'
    assert numbers == written, f"notebooks must be 00_, 01_, ... the README's linked chapters: {numbers}"
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name) for p in NOTEBOOKS)


def test_readme_lists_every_chapter_of_the_syllabus():
    assert [number for number, *_ in CHAPTERS] == list(range(SYLLABUS_CHAPTERS))
    written = [f"notebooks/{p.name}" for p in NOTEBOOKS]
    assert [path for _, _, path, _ in CHAPTERS if path] == written, "each notebook has its row, linked, in order"
    for number, title, path, opens in CHAPTERS:  # a chapter not written yet is named, unlinked, and 'coming'
        assert (path is None) == (opens == "coming"), f"chapter {number} ({title}): link it or mark it coming"


def test_readme_zh_lists_every_chapter_and_links_the_chinese_ones():
    assert [number for number, *_ in CHAPTERS_ZH] == list(range(SYLLABUS_CHAPTERS))
    written = [f"notebooks/zh/{p.name}" for p in ZH_NOTEBOOKS]
    assert [path for _, _, path, _ in CHAPTERS_ZH if path] == written, "each Chinese chapter has its row, linked"
    for number, title, path, opens in CHAPTERS_ZH:  # a chapter not translated yet is named, unlinked, '即将推出'
        assert (path is None) == (opens == "即将推出"), f"第 {number} 章（{title}）: link it or mark it 即将推出"


def test_readme_says_which_chapters_the_chinese_edition_has():
    # README.md's language line: "(the Chinese edition: chapters 0-15, in `notebooks/zh/`)" ("... so far" while
    # chapters are missing); it said "0-5 so far" long after all 15 were translated (issue 31)
    line = next(line for line in README.splitlines() if "(README.zh-CN.md)" in line)
    match = re.search(r"the Chinese edition: chapters (\d+)-(\d+)( so far)?, in `notebooks/zh/`", line)
    assert match, f"README.md's language line names the Chinese edition's chapters: {line!r}"
    numbers = [int(p.name[:2]) for p in ZH_NOTEBOOKS]
    assert numbers == list(range(int(match.group(1)), int(match.group(2)) + 1)), "the chapters in notebooks/zh/"
    assert bool(match.group(3)) == (len(numbers) < SYLLABUS_CHAPTERS), "'so far' only while chapters are missing"


@pytest.mark.parametrize("path", NOTEBOOKS + ZH_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
class TestNotebook:
    def test_stored_executed_in_order(self, path):
        counts = [c["execution_count"] for c in code_cells(load(path)) if source(c).strip()]
        assert counts == list(range(1, len(counts) + 1)), "re-execute from a clean kernel (nbconvert --execute)"

    def test_no_errors_or_warnings_stored(self, path):
        for cell in code_cells(load(path)):
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error", f"error output in cell:\n{source(cell)[:200]}"
                assert out.get("name") != "stderr", f"stderr output in cell:\n{source(cell)[:200]}"

    def test_no_local_paths_in_outputs(self, path):
        for cell in code_cells(load(path)):
            for text in text_outputs(cell):
                match = LOCAL_PATH.search(text)
                assert not match, f"a local path {match.group(0)!r} is stored in an output of:\n{source(cell)[:200]}"

    def test_python3_kernel(self, path):
        assert load(path)["metadata"]["kernelspec"]["name"] == "python3"

    def test_title_badges_and_colab_cell(self, path):
        nb = load(path)
        assert "colab-badge.svg" in source(nb["cells"][0]) and "mybinder.org" in source(nb["cells"][0])
        assert '"google.colab" in sys.modules' in source(code_cells(nb)[0])
        number = int(path.name[:2])
        title = next(source(c) for c in nb["cells"] if c["cell_type"] == "markdown" and source(c).startswith("# "))
        if path.parent.name == "zh":  # the Chinese edition: README.zh-CN.md's table
            assert title.splitlines()[0] == f"# 第 {number} 章 · {CHAPTERS_ZH[number][1]}", "README.zh-CN's title"
            assert "本章你将学到" in title
            return
        assert title.splitlines()[0] == f"# Chapter {number} · {CHAPTERS[number][1]}", "the title of README's table"
        assert "What you will learn" in title

    def test_checks_itself_and_ends_with_exercises(self, path):
        nb = load(path)
        assert any("assert" in source(c) for c in code_cells(nb)), "assert results against a direct computation"
        headings = [source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]
        assert any(re.match(r"## (Exercises?\b|练习)", h) for h in headings), "end with an Exercise section"
        assert any("check_" in source(c) for c in code_cells(nb)), "exercises come with a checker"

    def test_every_slider_has_a_static_picture(self, path):
        cells = code_cells(load(path))
        assert any(shows_a_widget(cell) for cell in cells) == ("widgets." in "".join(map(source, cells)))
        for i, cell in enumerate(cells):
            if shows_a_widget(cell):
                following = cells[i + 1 : i + 3]
                assert any("image/png" in o.get("data", {}) for c in following for o in c.get("outputs", [])), (
                    f"the slider in\n{source(cell)[:200]}\nneeds a static picture in one of the next cells"
                )

    def test_widget_cells_are_not_compared_by_nbval(self, path):
        # a widget's text/plain repr starts with its first PNG bytes, which differ between library versions
        for cell in code_cells(load(path)):
            if shows_a_widget(cell):
                tags = cell.get("metadata", {}).get("tags", [])
                assert "nbval-ignore-output" in tags or "NBVAL_IGNORE_OUTPUT" in source(cell), (
                    f"tag the widget cell nbval-ignore-output:\n{source(cell)[:200]}"
                )

    def test_an_output_nbval_ignores_is_still_asserted(self, path):
        # the stored output of such a cell is never compared, so the cell itself must check what it shows
        for cell in code_cells(load(path)):
            why = output_ignored(cell)
            if why:
                assert asserts_something(cell), (
                    f"nbval ignores this cell's output ({why}); assert what it shows:\n{source(cell)[:300]}"
                )

    def test_stored_without_machine_specific_metadata(self, path):
        # flashmath/_notebook_format.py: what JupyterLab would rewrite on save (the kernel's Python version, whole
        # numbers stored as floats) and nbconvert's run timestamps; the bytes are those nbformat writes
        import nbformat

        from flashmath._notebook_format import normalize

        text = path.read_text()
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        assert "version" not in nb.metadata.get("language_info", {}), "run `python -m flashmath._notebook_format`"
        assert nbformat.writes(normalize(nb)) + "\n" == text, (
            f"store it normalized: python -m flashmath._notebook_format {path.relative_to(ROOT)}"
        )

    def test_small(self, path):
        assert path.stat().st_size < 700_000, "keep notebooks under 700 KB: smaller figures, fewer frames"


def test_the_ignored_output_check_can_fail():
    marked = {"cell_type": "code", "source": "# NBVAL_IGNORE_OUTPUT\nprint(time.time())", "metadata": {}, "outputs": []}
    assert output_ignored(marked) == "marked nbval-ignore-output" and not asserts_something(marked)
    tagged = {
        "cell_type": "code",
        "source": "w = make()\nnp.testing.assert_allclose(w.x, 1)\nw",
        "metadata": {"tags": ["nbval-ignore-output"]},
        "outputs": [],
    }
    assert output_ignored(tagged) and asserts_something(tagged)
    sanitized = {
        "cell_type": "code",
        "source": "%matplotlib inline\nobject()",
        "metadata": {},
        "outputs": [{"output_type": "execute_result", "data": {"text/plain": "<object at 0x7f0a1b2c3d4e>"}}],
    }
    assert "sanitize rule" in output_ignored(sanitized) and not asserts_something(sanitized)
    compared = {"cell_type": "code", "source": "print(1)", "metadata": {}, "outputs": []}
    assert output_ignored(compared) is None
