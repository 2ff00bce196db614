"""environment.yml (Binder) stays in step with pyproject.toml; every Colab URL matches [project.urls]."""

import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO_URL = PYPROJECT["project"]["urls"]["Repository"]
GITHUB_PATH = REPO_URL.removeprefix("https://github.com/")


def normalise(requirement: str) -> str:
    """'ipywidgets >=7.7, <9' -> 'ipywidgets>=7.7,<9' (conda and pip spell the same ranges)."""
    name, spec = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*(.*)$", requirement).groups()
    parts = sorted(p.strip() for p in spec.split(",") if p.strip())
    return name.lower().replace("_", "-") + ",".join(parts)


def conda_dependencies():
    """The conda package specs of environment.yml (a plain-YAML subset: '  - spec' lines before 'pip:')."""
    specs = []
    text = (ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():
        item = re.match(r"^  - (\S.*)$", line)
        if item and not item.group(1).startswith("pip"):
            specs.append(item.group(1).split("#")[0].strip())
    return specs


def test_environment_yml_has_the_runtime_and_lab_dependencies():
    expected = {normalise(r) for r in PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["lab"]}
    conda = {normalise(s) for s in conda_dependencies() if not s.startswith("python")}
    assert conda == expected


def test_environment_yml_pins_python_and_installs_the_package():
    text = (ROOT / "environment.yml").read_text()
    assert "conda-forge" in text
    python = next(s for s in conda_dependencies() if s.startswith("python"))
    assert re.fullmatch(r"python=3\.\d+", python), "pin one Python minor version for Binder"
    minimum = tuple(int(p) for p in PYPROJECT["project"]["requires-python"].removeprefix(">=").split("."))
    assert tuple(int(p) for p in python.removeprefix("python=").split(".")) >= minimum
    assert re.search(r"^\s+- -e \.\s*$", text, re.MULTILINE)


def test_colab_keeps_its_ipywidgets_7_7():
    spec = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("ipywidgets"))
    assert ">=7.7" in spec.replace(" ", "")
    assert "jupyterlab" not in " ".join(PYPROJECT["project"]["dependencies"]), "JupyterLab belongs in the lab extra"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_urls_match_pyproject(path):
    nb = json.loads(path.read_text())
    badge = "".join(nb["cells"][0]["source"])
    assert f"https://colab.research.google.com/github/{GITHUB_PATH}/blob/main/notebooks/{path.name}" in badge
    assert f"https://mybinder.org/v2/gh/{GITHUB_PATH}/main?urlpath=lab/tree/notebooks/{path.name}" in badge
    install = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert '"google.colab" in sys.modules' in install, "the first code cell must install only on Colab"
    urls = re.findall(r"git\+(https://\S+?)[\"']", install)
    assert urls == [REPO_URL]


def test_readme_urls_match_pyproject():
    readme = (ROOT / "README.md").read_text()
    colab = re.findall(r"https://colab\.research\.google\.com/github/([^/]+/[^/]+)/", readme)
    binder = re.findall(r"https://mybinder\.org/v2/gh/([^/]+/[^/]+)/", readme)
    assert colab and binder
    assert set(colab) == set(binder) == {GITHUB_PATH}
    for path in NOTEBOOKS:  # every chapter has its row and badge
        assert f"notebooks/{path.name}" in readme
