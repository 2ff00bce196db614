"""Every notebook, run in a real JupyterLab in headless Chromium.

For each ``notebooks/*.ipynb``: open it in JupyterLab, Run All, fail on any error output; then
move every ipywidgets slider with the keyboard and press every Play button, checking that the
plotted image changes and that no traceback appears (``ipywidgets.interactive`` shows a
callback's exception inside its output widget instead of raising it).

Measured on the way: for every slider, the milliseconds from a key press to the new picture
decoded on the page (several presses each), and, for every Play button, 3 s of play sampled every
50 ms in the page and by screenshots meanwhile: a picture must be present in every sample and no
screenshot may be blank (no blank flash). The latencies go to
``artifacts/slider_latency.json`` and pytest's summary; a screenshot per notebook goes to
``artifacts/screenshots/<stem>.png``.

Run only these:  python -m pytest -m browser -p no:nbval -o addopts=""
Set FLASHMATH_BROWSER_NOTEBOOKS=<dir> to run the test on the notebooks in another directory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, JupyterLabServer, NotebookCheckFailure, NotebookDriver

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = Path(os.environ.get("FLASHMATH_BROWSER_NOTEBOOKS", REPO / "notebooks"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SCREENSHOTS = REPO / "artifacts" / "screenshots"
LATENCY_FILE = REPO / "artifacts" / "slider_latency.json"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian package chromium not installed: apt-get install -y chromium")
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="Python package playwright not installed: pip install playwright "
        "(the test uses Debian's /usr/bin/chromium, never `playwright install`)",
    )
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def jupyterlab(browser):
    # Depends on ``browser`` so that a missing Chromium/Playwright skips before the server starts.
    server = JupyterLabServer(NOTEBOOKS)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def latency_log():
    """Collects {notebook: {"sliders": {slider: [ms, ...]}, "plays": {...}}}; written to artifacts/ at the end. Each
    test also records its entry as the property ``slider_latency``, from which tests/conftest.py writes pytest's
    summary (under pytest-xdist this module runs in a worker; only the reports reach the summary)."""
    log: dict = {}
    yield log
    if log:
        LATENCY_FILE.parent.mkdir(parents=True, exist_ok=True)
        LATENCY_FILE.write_text(json.dumps(log, indent=1))


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def _screenshot(driver: NotebookDriver, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    page = driver.page
    try:
        first = page.locator("[data-fm-slider]").first
        if first.count():
            # The whole cell (code and output) that holds the first slider.
            first.locator("xpath=ancestor::div[contains(@class, 'jp-Cell ')][1]").screenshot(
                path=str(path), timeout=10_000
            )
            return
    except Exception:  # noqa: BLE001 - fall back to the viewport
        pass
    page.screenshot(path=str(path))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_notebook_in_jupyterlab(notebook: Path, jupyterlab: JupyterLabServer, page, record_property, latency_log):
    t0 = time.monotonic()
    driver = NotebookDriver(page, jupyterlab, notebook.name)
    failure = None
    try:
        driver.open()
        driver.run_all()
        driver.check_no_errors("after Run All")
        driver.check_all_executed()

        controls = driver.controls()
        for slider in controls["sliders"]:
            if not slider["disabled"]:
                driver.exercise_slider(slider)
        for play in controls["plays"]:
            if not play["disabled"]:
                driver.exercise_play(play)
        driver.check_no_errors("after exercising the widgets")
    except NotebookCheckFailure as exc:
        failure = str(exc)
    finally:
        try:
            _screenshot(driver, SCREENSHOTS / f"{notebook.stem}.png")
        finally:
            driver.shutdown_kernels()
        driver.timings["total"] = time.monotonic() - t0
        latency_log[notebook.name] = {"sliders": driver.latencies, "plays": driver.play_samples}
        record_property("slider_latency", json.dumps({notebook.name: latency_log[notebook.name]}))
        for k, v in driver.timings.items():
            record_property(f"seconds_{k}", round(v, 1))
        print(
            f"{notebook.name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in driver.timings.items())
            + f"; {driver.exercised['sliders']} slider(s), {driver.exercised['plays']} Play button(s) checked "
            f"({driver.exercised['play_frames']} new frames while playing)"
        )
    if failure:
        pytest.fail(failure, pytrace=False)
