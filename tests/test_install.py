"""The course as Colab gets it: a built wheel, installed non-editable, beside Colab's own ipywidgets 7.7.

Colab installs the package from the repository URL (see each notebook's first code cell), which builds and
installs a wheel. This test builds that wheel, installs it into a fresh virtual environment that already holds
ipywidgets 7.7.1 (what Colab ships), and checks that

- the install leaves ipywidgets 7.7.1 in place (an upgrade to 8 breaks widgets on Colab);
- the shipped data file is inside the wheel and loads from site-packages;
- the widget callback tests pass with ipywidgets 7.7 (JupyterLab 4 cannot render 7.7 widgets, so 7.7 is
  tested through the callbacks only; the main environment runs the same tests with ipywidgets 8).

It needs the package registry (pip) and takes about a minute and a half of CPU time (install and tests).
"""

import re
import subprocess
import sys
import venv

import pins  # scripts/pins.py (tests/conftest.py puts scripts/ on sys.path)
import pytest
from helpers import ROOT
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.network  # pip installs from the package index (a local mirror in CI)

COLAB_IPYWIDGETS = "7.7.1"


def pinned(name: str) -> str:
    """``name==version`` as constraints.txt pins it for this Python, so the environment matches the stored outputs."""
    version = pins.pins_for().get(canonicalize_name(name))
    assert version, f"{name} is not pinned in constraints.txt for Python {sys.version.split()[0]}"
    return f"{name}=={version}"


def run(*cmd, cwd=None):
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    command = " ".join(map(str, cmd))
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def colab_like(tmp_path_factory):
    """(python of a fresh venv with the wheel installed over ipywidgets 7.7.1, a working dir outside the repo)."""
    work = tmp_path_factory.mktemp("colab")
    dist = work / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    (wheel,) = dist.glob("flashmath-*.whl")
    env = work / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    # Colab's pre-installed stack, then the course on top of it, as the notebooks' install cell does.
    # --no-compile: no .pyc for every module of every package up front (a quarter of the install's CPU time);
    # Python compiles the modules the tests import.
    run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-compile",
        f"ipywidgets=={COLAB_IPYWIDGETS}",
        pinned("numpy"),
        pinned("matplotlib"),
        pinned("pytest"),
    )
    run(python, "-m", "pip", "install", "-q", "--no-compile", wheel)
    return python, work


def test_colab_install_keeps_ipywidgets_7(colab_like):
    python, work = colab_like
    out = run(python, "-c", "import ipywidgets; print(ipywidgets.__version__)", cwd=work)
    assert out.strip() == COLAB_IPYWIDGETS


def test_wheel_ships_the_data_and_loads_it(colab_like):
    python, work = colab_like
    code = (
        "import flashmath, flashmath.data as d; h = d.load_heads(); "
        "print(flashmath.__file__); print(d.HEADS_PATH.stat().st_size); print(h.q.shape)"
    )
    where, size, shape = run(python, "-c", code, cwd=work).strip().splitlines()
    assert "site-packages" in where and str(ROOT) not in where  # the installed wheel, not the source tree
    assert 0 < int(size) < 1_000_000
    assert shape == "(3, 8, 46, 32)"


def test_widget_callbacks_pass_with_ipywidgets_7(colab_like):
    python, work = colab_like
    out = run(
        python,
        "-m",
        "pytest",
        ROOT / "tests" / "test_widgets.py",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--rootdir",
        work,
        cwd=work,
    )
    summary = out.strip().splitlines()[-1]  # e.g. "38 passed, 395 warnings in 22.53s"
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|error", summary), out[-3000:]
    print(summary)
