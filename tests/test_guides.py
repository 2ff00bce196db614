"""The guides (README.md, README.zh-CN.md, CONTRIBUTING.md, docs/architecture.md) say nothing stale that a test can
see: every repository path they name exists, and they keep no count by hand (of tests, lines or notebooks) that
would go stale with the next change."""

import glob
import re

import pytest
from helpers import ROOT

GUIDES = ["README.md", "README.zh-CN.md", "CONTRIBUTING.md", "docs/architecture.md"]
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:flashmath|tests|scripts|notebooks|docs)/[^\s`)'\"\],;]*)")
# Folders the guides name that are not in the repository on purpose
NOT_STORED = {
    "notebooks/mine/": "a learner's own copies (README, 'Keeping your work'), ignored by git",
    "notebooks/zh/mine/": "the same in the Chinese edition's folder (README.zh-CN.md), ignored by git",
}
# Counts that go stale with the next test, line or chapter: say what, not how many
HAND_KEPT = re.compile(r"\b\d[\d,]* (?:tests|test functions|lines|notebooks)\b(?!/)|\|\s*lines (?:before|after)\s*\|")


def named_paths(text: str) -> set[str]:
    """The repository paths a guide names: in code blocks, in inline code and in link targets."""
    spans = FENCED.findall(text) + INLINE.findall(FENCED.sub("", text)) + LINK.findall(text)
    return {path for span in spans for path in PATH.findall(span)}


def as_pattern(path: str) -> str:
    """A path as a glob pattern: a test id after ``::`` dropped, placeholders (``NN``, ``<name>``, ``NN_name``)
    matching what they stand for."""
    path = path.split("::")[0].rstrip(".:")
    path = path.replace("NN_name", "NN_<name>").replace("NN", "[0-9][0-9]")
    return re.sub(r"<[^>]*>", "*", path)


@pytest.mark.parametrize("guide", GUIDES)
def test_every_path_a_guide_names_exists(guide):
    text = (ROOT / guide).read_text(encoding="utf-8")
    paths = named_paths(text)
    assert paths, f"{guide} names no repository path: is the extraction broken?"
    missing = sorted(
        p
        for p in paths
        if p not in NOT_STORED and not glob.glob(as_pattern(p), root_dir=ROOT) and not (ROOT / as_pattern(p)).exists()
    )
    assert not missing, f"{guide} names paths that do not exist: {missing}"


def test_the_count_check_can_fail():
    assert HAND_KEPT.findall("the fast tier (1,323 tests); | lines before | 784 lines; both editions, 30 notebooks")
    assert not HAND_KEPT.findall("python -m pytest -n 0 tests/test_exercises.py; chapters 0-14")


def test_the_path_check_can_fail():
    text = "see `flashmath/exercises/chapterN.py`, [x](docs/missing.md) and\n```bash\npython scripts/gone.py\n```"
    assert named_paths(text) == {"flashmath/exercises/chapterN.py", "docs/missing.md", "scripts/gone.py"}
    assert not any(glob.glob(as_pattern(p), root_dir=ROOT) for p in named_paths(text))
    assert glob.glob(as_pattern("notebooks/NN_<name>.ipynb"), root_dir=ROOT)
    assert glob.glob(as_pattern("tests/test_<module>.py::test_<name>"), root_dir=ROOT)


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_keep_no_count_by_hand(guide):
    text = (ROOT / guide).read_text(encoding="utf-8")
    assert not HAND_KEPT.findall(text), "a count kept by hand goes stale: say what, not how many"


# The chapter tables' minutes (README.md, README.zh-CN.md) against what each chapter states in its opening cell
STATED = re.compile(r"\*\*Time:\*\* about (\d+) minutes")
MINUTES_ROW = re.compile(r"^\| (\d+) \| \[[^\n]*?\| (\d+)(?: \((\d+)\)| \(\+(\d+)\))? \| \[!\[Colab\]", re.MULTILINE)
TOTALS = {
    "README.md": re.compile(
        r"The course in all: about ([\d,]+) minutes.*?([\d,]+) without the optional parts", re.DOTALL
    ),
    "README.zh-CN.md": re.compile(r"整个课程约 ([\d,]+) 分钟.*?不含选读部分约 ([\d,]+) 分钟", re.DOTALL),
}


def chapter_minutes(readme: str) -> dict[int, tuple[int, int]]:
    """Each chapter row's minutes: (the figure, without the optional parts)."""
    rows = {}
    for chapter, total, without, _extra in MINUTES_ROW.findall(readme):
        rows[int(chapter)] = (int(total), int(without or total))
    return rows


@pytest.mark.parametrize("guide", ["README.md", "README.zh-CN.md"])
def test_the_readme_minutes_are_the_chapters_and_add_up(guide):
    text = (ROOT / guide).read_text(encoding="utf-8")
    rows = chapter_minutes(text)
    chapters = sorted(glob.glob("notebooks/[0-9][0-9]_*.ipynb", root_dir=ROOT))
    assert sorted(rows) == list(range(len(chapters))), f"{guide}: a chapter row without its minutes"
    for number, path in enumerate(chapters):
        stated = STATED.findall((ROOT / path).read_text(encoding="utf-8"))
        assert stated, f"{path} states no time ('**Time:** about N minutes')"
        assert rows[number][0] == int(stated[0]), (
            f"{guide} gives chapter {number} {rows[number][0]} minutes, {path} {stated[0]}"
        )
    total, without = (int(n.replace(",", "")) for n in TOTALS[guide].search(text).groups())
    assert total == sum(t for t, _ in rows.values()), f"{guide}: the course's total is not the chapters' sum"
    assert without == sum(w for _, w in rows.values()), f"{guide}: the total without optional parts is not the sum"


def test_the_minutes_check_can_fail():
    row = "| 3 | [A](notebooks/03_attention.ipynb) | x | 55 (45) | [![Colab](c)](u) |\n"
    assert chapter_minutes(row) == {3: (55, 45)}
    assert chapter_minutes(row.replace("55 (45)", "105 (+20)")) == {3: (105, 105)}
    assert STATED.findall("**Time:** about 90 minutes in all") == ["90"]
