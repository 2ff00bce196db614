import json
import os
import statistics
import sys
from pathlib import Path

import matplotlib

# Tests draw figures without a display. Select the backend in this process only: an MPLBACKEND
# environment variable would leak into the kernels that nbval starts and change the notebooks' outputs.
matplotlib.use("Agg")

# scripts/pins.py reads constraints.txt and environment.yml; the tests import it as `pins`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


# Under .ci/run: the file of the other Pythons' results. Taken out of the environment, so that the pytest runs
# these tests start (tests/test_install.py) do not print it too.
CI_RESULTS = os.environ.pop("FLASHMATH_CI_RESULTS", None)


LATENCY: dict = {}  # the browser test's slider latencies, {notebook: entry}, from its reports
LATENCY_FILE = Path(__file__).resolve().parents[1] / "artifacts" / "slider_latency.json"


def pytest_runtest_logreport(report):
    """Gathers the browser test's ``slider_latency`` properties (tests/test_browser.py) from its reports, which
    reach this process from pytest-xdist's workers too."""
    for name, value in getattr(report, "user_properties", ()):
        if name == "slider_latency":
            LATENCY.update(json.loads(value))


def latency_lines(log: dict) -> list[str]:
    lines = [f"{'notebook':<29} {'slider':<44} {'presses':>7} {'median ms':>9} {'max ms':>7}"]
    for notebook, entry in sorted(log.items()):
        for slider, times in entry["sliders"].items():
            lines.append(
                f"{notebook:<29} {slider[:44]:<44} {len(times):7d} {statistics.median(times):9.0f} {max(times):7.0f}"
            )
        for play, s in entry["plays"].items():
            lines.append(
                f"{notebook:<29} {play[:44]:<44} Play: {s['changes']} new pictures in "
                f"{s.get('seconds', 3):g} s; {s['samples']} DOM samples, {s['missing']} without a picture "
                f"({s['loading']} loading the next); {s['shots']} screenshots, {s['blank_shots']} blank"
            )
    lines.append("(key press to new picture decoded on the page; written to artifacts/slider_latency.json)")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The browser test's slider latencies (tests/test_browser.py and test_browser_zh.py), when it ran, also
    written to artifacts/slider_latency.json; under .ci/run, the results of the other Pythons, so that the log's
    last lines tell the whole story."""
    if LATENCY:
        LATENCY_FILE.parent.mkdir(parents=True, exist_ok=True)
        LATENCY_FILE.write_text(json.dumps(LATENCY, indent=1, sort_keys=True))
        terminalreporter.section("slider latency in JupyterLab (tests/test_browser.py)")
        for line in latency_lines(LATENCY):
            terminalreporter.write_line(line)
    if CI_RESULTS and os.path.exists(CI_RESULTS) and Path(CI_RESULTS).read_text().strip():
        terminalreporter.section(".ci/run: every Python")
        for line in Path(CI_RESULTS).read_text().splitlines():
            terminalreporter.write_line(line)


import pytest  # noqa: E402


@pytest.fixture
def close_figures():
    """Close every matplotlib figure after the test (modules that draw use it for all their tests:
    ``pytestmark = pytest.mark.usefixtures("close_figures")``)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# The fast tier (`python -m pytest tests -m fast`): the package's unit tests, without notebooks, kernels, installs,
# benchmarks, widgets or the browser. CONTRIBUTING.md: run it before every commit; the full suite before a merge.
FAST_MODULES = {
    "test_architecture",
    "test_softmax",
    "test_masks",
    "test_attention",
    "test_flash",
    "test_traffic",
    "test_opcount",
    "test_splitkv_backward",
    "test_hardware",
    "test_scaling",
    "test_scaling_seeds",
    "test_any_input",
    "test_exercises_6_10",
    "test_exercises_ch9",
    "test_data_model",
    "test_flash_parallel",
    "test_variants",
    "test_exercises_ch13",
    "test_guides",
}


# The longest files first (the browser test's two editions, then tests/test_install.py): with addopts' xdist options
# (--dist loadfile --no-loadscope-reorder) the files go to the workers in this order, and the other workers work
# through the rest meanwhile instead of waiting for them at the end.
FIRST = ("test_browser", "test_browser_zh", "test_install")


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if item.path.stem in FAST_MODULES:
            item.add_marker(pytest.mark.fast)
    # a stable sort: a notebook's nbval cells keep their order
    items.sort(key=lambda item: FIRST.index(item.path.stem) if item.path.stem in FIRST else len(FIRST))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: tests/test_install.py runs some tests without xdist
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (addopts): one pytest-xdist worker per core this process may use, plus one. The browser tests'
    two workers wait much of their time (JupyterLab to load a notebook, a Play button to be sampled), and the extra
    worker runs other files meanwhile."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1
