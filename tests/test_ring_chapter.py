"""Chapter 14's check cell: ``ring_dist.require_torch`` says PyTorch is installed, or stops Run All with the commands
that install the distributed extra (which pyproject.toml declares and README shows)."""

import importlib.util
import re

import pytest
from helpers import ROOT

from flashmath import ring_dist

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_require_torch_says_so_when_installed(monkeypatch, capsys):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    ring_dist.require_torch("Chapter 14")
    assert capsys.readouterr().out == "Chapter 14 needs PyTorch (the distributed extra): it is installed.\n"


def test_require_torch_stops_with_the_commands(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ring_dist.DistributedExtraNotInstalled) as caught:
        ring_dist.require_torch("Chapter 14")
    lines = caught.value._render_traceback_()  # what IPython shows: the message alone, no traceback
    assert lines[0].startswith("Chapter 14 needs PyTorch, the distributed extra")
    assert all(f"    {command}" in lines for command in ring_dist.INSTALL_COMMANDS)
    assert isinstance(caught.value, ModuleNotFoundError)


def test_the_commands_are_pyproject_and_readme_and_the_chapter():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "distributed" in extras and any(r.startswith("torch") for r in extras["distributed"])
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Ring attention on several processes") :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1).splitlines()
    assert block[: len(ring_dist.INSTALL_COMMANDS)] == list(ring_dist.INSTALL_COMMANDS)
    assert ring_dist.INSTALL_COMMANDS[1].endswith(" -c constraints.txt")  # the versions of the stored outputs
    chapter = (ROOT / "notebooks" / "14_ring_attention.ipynb").read_text()
    assert all(command.replace('"', '\\"') in chapter for command in ring_dist.INSTALL_COMMANDS)
    assert 'ring_dist.require_torch(\\"Chapter 14\\")' in chapter
