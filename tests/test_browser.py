"""Every notebook, English and Chinese, run in a real JupyterLab in headless Chromium.

For each ``notebooks/*.ipynb`` (here) and ``notebooks/zh/*.ipynb`` (tests/test_browser_zh.py, the same checks in a
module of its own, so that pytest-xdist's ``--dist loadfile`` runs the two editions on two workers at once): open it
in JupyterLab, Run All, fail on any error output; then move every ipywidgets slider with the keyboard and press every
Play button, checking that the plotted image changes and that no traceback appears (``ipywidgets.interactive`` shows
a callback's exception inside its output widget instead of raising it).

JupyterLab runs with the learner's settings: the course's ``jupyter-config/`` (what README's set-up copies into the
environment) and nothing test-only that changes the page (tests/browser_support.py), the notebooks trusted as README's
``jupyter trust`` does. Before Run All, as the notebook opens and before any click: every stored jshtml animation
(chapter 2's, ``flashmath.viz.offline_jshtml``) shows its picture (a laid-out size, not blank in a screenshot), and
the first click on its Play plays without moving its buttons. (With JupyterLab's default notebook windowing, the
stored animation once had a 0 x 0 px picture until its cell was clicked, and lost that first click.)

Measured on the way: for every slider, the milliseconds from a key press to the new picture decoded on the page
(several presses each), and, for every Play button, 3 s of play sampled every 50 ms in the page and by screenshots
meanwhile: a picture must be present in every sample and no screenshot may be blank (no blank flash). The latencies
go to ``artifacts/slider_latency.json`` and pytest's summary; a screenshot per notebook goes to
``artifacts/screenshots/<stem>.png`` (``artifacts/screenshots/zh/<stem>.png`` for a Chinese chapter).

The Chinese chapters: every one whose stored outputs hold a slider or a Play button (today all 15). Their code cells
are byte for byte the English ones but for the ``flashmath.set_language("zh_CN")`` cell, so what the language can
break is what they are checked for: Run All without error output, every slider moved to a new picture and to both
ends without a traceback, every Play button started and changing the picture; and their slider labels in the page
are Chinese (no label the catalog translates left in English, and Chinese characters where the stored chapter has
them), so that the test fails if the language cell stops working. The timings are the English chapters' business
(the same callbacks and pictures): a Chinese slider is timed on one key press instead of four and a Chinese Play
button sampled for 1 s instead of 3. Measured on 1 December 2026 (2 shared cores, load average 3-7): the 15 English
chapters about 190 s of CPU time, the 15 Chinese ones about 145 s more (their Run All is most of it).

All notebooks run one after the other in one JupyterLab page: each is opened with JupyterLab's ``docmanager:open``
command, checked, then closed unsaved with its kernel shut down; the page is loaded afresh only after a failure (so
one notebook's failure cannot leave a dialog or a kernel behind for the next).

Run only these:  python -m pytest -m browser -p no:nbval -o addopts=""
Set FLASHMATH_BROWSER_NOTEBOOKS=<dir> to run the test on the notebooks in another directory (and its ``zh/``).
"""

from __future__ import annotations

import gettext
import json
import os
import re
import time
from pathlib import Path

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, JupyterLabServer, NotebookCheckFailure, NotebookDriver

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = Path(os.environ.get("FLASHMATH_BROWSER_NOTEBOOKS", REPO / "notebooks"))
SCREENSHOTS = REPO / "artifacts" / "screenshots"
ZH = "zh"  # the Chinese edition's folder under NOTEBOOK_DIR
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _stored_widgets(notebook: Path) -> int:
    """How many widgets the notebook's cells showed when it was stored: the stored form keeps only a widget's text,
    ``interactive(...)`` (flashmath/_notebook_format.py keeps no widget state or view)."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(
        "".join(o.get("data", {}).get("text/plain", "")).startswith("interactive(")
        for c in nb["cells"]
        for o in c.get("outputs", [])
    )


def _stored_animations(notebook: Path) -> int:
    """How many jshtml animations (matplotlib's player, through flashmath.viz.offline_jshtml) the notebook's stored
    outputs hold."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    html = ["".join(o.get("data", {}).get("text/html", "")) for c in nb["cells"] for o in c.get("outputs", [])]
    return sum(len(re.findall(r'<img id="_anim_img\w+"', h)) for h in html)


def _has_sliders_or_play(notebook: Path) -> bool:
    return _stored_widgets(notebook) > 0  # every widget of the course has a slider (flashmath.widgets)


NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))  # a module's notebooks: the jupyterlab fixture serves them
CHINESE = [nb for nb in sorted((NOTEBOOK_DIR / ZH).glob("*.ipynb")) if _has_sliders_or_play(nb)]


def ids(notebooks: list[Path]) -> list[str]:
    return [nb.relative_to(NOTEBOOK_DIR).as_posix() for nb in notebooks]


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
def jupyterlab(browser, request):
    # Depends on ``browser`` so that a missing Chromium/Playwright skips before the server starts.
    server = JupyterLabServer(request.module.NOTEBOOKS, base=NOTEBOOK_DIR)
    try:
        server.start()
        yield server
    finally:
        server.stop()


class LabPage:
    """One browser page that keeps JupyterLab loaded from one notebook to the next; :meth:`discard` after a failure
    drops it (and its browser context), and the next notebook gets a fresh one."""

    def __init__(self, browser):
        self.browser = browser
        self.context = None
        self.page = None

    def get(self):
        if self.page is None:
            self.context = self.browser.new_context(viewport={"width": 1280, "height": 900})
            self.context.set_default_timeout(30_000)
            self.page = self.context.new_page()
        return self.page

    def discard(self) -> None:
        context, self.context, self.page = self.context, None, None
        if context is not None:
            try:
                context.close()
            except Exception:  # noqa: BLE001 - a crashed page: nothing left to close
                pass


@pytest.fixture(scope="module")
def lab_page(browser):
    holder = LabPage(browser)
    try:
        yield holder
    finally:
        holder.discard()


@pytest.fixture(scope="module")
def latency_log():
    """Collects {notebook: {"sliders": {slider: [ms, ...]}, "plays": {...}}}. Each test records its entry as the
    property ``slider_latency``, from which tests/conftest.py writes pytest's summary and
    ``artifacts/slider_latency.json`` (under pytest-xdist the two modules run in two workers; only the reports reach
    the main process)."""
    return {}


@pytest.fixture(scope="module")
def zh_translation():
    """flashmath's Chinese message catalog (Python's gettext), to tell an English label the catalog translates."""
    from flashmath.i18n import DOMAIN, LOCALE_DIR

    return gettext.translation(DOMAIN, localedir=LOCALE_DIR, languages=["zh_CN"])


def check_chinese_labels(name: str, notebook: Path, sliders: list[dict], translation) -> None:
    """The slider labels on the page are Chinese: none is an English text that the catalog translates (a label that
    set_language('zh_CN') did not reach)."""
    labels = [s["label"] for s in sliders]
    english = [
        f"{label!r} (the catalog has {translation.gettext(label)!r})"
        for label in labels
        if label and translation.gettext(label) != label
    ]
    if english:
        raise NotebookCheckFailure(
            f"{name}: slider label(s) in English: {', '.join(english)}; set_language('zh_CN') did not take effect"
        )


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


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_in_jupyterlab(
    notebook: Path, jupyterlab: JupyterLabServer, lab_page: LabPage, record_property, latency_log, zh_translation
):
    check_notebook(notebook, jupyterlab, lab_page, record_property, latency_log, zh_translation)


def check_notebook(
    notebook: Path, jupyterlab: JupyterLabServer, lab_page: LabPage, record_property, latency_log, zh_translation
) -> None:
    """Open, Run All, exercise every control, close (the module's docstring); fail the test on any finding."""
    t0 = time.monotonic()
    name = jupyterlab.lab_path(notebook)
    chinese = name.startswith(ZH + "/")
    # the Chinese chapters: one timed key press per slider, 1 s of Play (the module's docstring says why)
    presses, play_seconds = (1, 1.0) if chinese else (4, 3.0)
    driver = NotebookDriver(lab_page.get(), jupyterlab, name)
    failure, done = None, False
    try:
        driver.open()
        # the stored animations as the notebook opens, before Run All replaces them (and before any other click)
        driver.check_stored_animations(_stored_animations(notebook))
        driver.run_all()
        driver.check_no_errors("after Run All")
        driver.check_all_executed()

        controls = driver.controls()
        if chinese:
            check_chinese_labels(name, notebook, controls["sliders"], zh_translation)
        for slider in controls["sliders"]:
            if not slider["disabled"]:
                driver.exercise_slider(slider, presses=presses)
        for play in controls["plays"]:
            if not play["disabled"]:
                driver.exercise_play(play, sample_seconds=play_seconds)
        driver.check_no_errors("after exercising the widgets")
        done = True
    except NotebookCheckFailure as exc:
        failure = str(exc)
    finally:
        try:
            _screenshot(driver, (SCREENSHOTS / name).with_suffix(".png"))
        finally:
            driver.close()
            if not done:  # a failure may leave a dialog, a busy kernel or a half-closed notebook: a fresh page next
                lab_page.discard()
        driver.timings["total"] = time.monotonic() - t0
        latency_log[name] = {"sliders": driver.latencies, "plays": driver.play_samples}
        record_property("slider_latency", json.dumps({name: latency_log[name]}))
        for k, v in driver.timings.items():
            record_property(f"seconds_{k}", round(v, 1))
        print(
            f"{name}: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in driver.timings.items())
            + f"; {driver.exercised['sliders']} slider(s), {driver.exercised['plays']} Play button(s) checked "
            f"({driver.exercised['play_frames']} new frames while playing)"
            + "".join(
                f"; stored animation {a['width']:.0f} x {a['height']:.0f} px at opening, frame "
                f"{a['frames'][0]} -> {a['frames'][1]} on the first Play"
                for a in driver.animations
            )
        )
    if failure:
        pytest.fail(failure, pytrace=False)
