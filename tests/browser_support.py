"""Helpers for tests/test_browser.py: a throw-away JupyterLab server and a Playwright driver.

Nothing here imports Playwright at module level, so the test module can skip cleanly when the
package is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from helpers import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    # Without these Chromium keeps trying to reach Google services on a closed network.
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

# The course's Jupyter settings, the folder that README's set-up copies into the environment (`cp -R jupyter-config/etc
# .venv/`): the test server reads this one (JUPYTER_CONFIG_PATH), so that it runs JupyterLab with the learner's
# settings, whether or not this environment's copy is current. No test-only JupyterLab setting: the notebook's
# windowing (which once hid chapter 2's stored animation) and everything else that draws the page are the learner's.
COURSE_CONFIG = Path(__file__).resolve().parents[1] / "jupyter-config" / "etc" / "jupyter"


class JupyterLabServer:
    """JupyterLab on 127.0.0.1 with the course's settings (``COURSE_CONFIG``) and throw-away user folders (config,
    data, settings, workspaces: a learner's fresh ones), the notebooks trusted as README's set-up does.

    ``notebooks`` are copied into a fresh root dir, so the repository is never written to: to their path relative to
    ``base`` when given (``notebooks/zh/01_softmax.ipynb`` with base ``notebooks`` is ``zh/01_softmax.ipynb`` in
    JupyterLab), else to their file name.
    """

    def __init__(self, notebooks: list[Path], startup_timeout: float = 90.0, base: Path | None = None):
        self.notebooks = list(notebooks)
        self.base = base
        self.startup_timeout = startup_timeout
        self.tmp = Path(tempfile.mkdtemp(prefix="flashmath-browser-"))
        self.root = self.tmp / "root"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.tmp / "jupyterlab.log"
        self._log = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> JupyterLabServer:
        self.root.mkdir()
        for nb in self.notebooks:
            dest = self.root / self.lab_path(nb)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(nb, dest)
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.tmp / "config"),
            # the course's settings: first in Jupyter's config path, before this environment's copy
            # (sys.prefix/etc/jupyter) and the empty user folder above
            JUPYTER_CONFIG_PATH=str(COURSE_CONFIG),
            # A user-level kernelspec (~/.local/share/jupyter/kernels/python3) must not shadow
            # the one that ipykernel installed in sys.prefix.
            JUPYTER_DATA_DIR=str(self.tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(self.tmp / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(self.tmp / "user-settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(self.tmp / "workspaces"),
            IPYTHONDIR=str(self.tmp / "ipython"),
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_PATH", None)
        # README's `jupyter trust notebooks/*.ipynb` (its signatures go to JUPYTER_DATA_DIR): JupyterLab runs the
        # scripts stored in a trusted notebook's outputs when it opens, such as chapter 2's stored animation
        if self.notebooks:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "jupyter",
                    "trust",
                    *(str(self.root / self.lab_path(nb)) for nb in self.notebooks),
                ],
                cwd=self.root,
                env=env,
                check=True,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={self.root}",
            # Test-only, none of them changes what a notebook looks like. window.jupyterapp: lets the test run
            # JupyterLab commands and read kernel status.
            "--LabApp.expose_app_in_browser=True",
            # The server never tries the network, which the test machine may not have: the course's settings already
            # keep the page from asking for news and updates, and the extension manager lists only what is installed.
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_until_up()
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode} during start-up:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            # SIGTERM to the server only: it shuts its kernels down itself.
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # Server and any kernels it left: they share its session (start_new_session).
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> JupyterLabServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def lab_path(self, notebook: Path) -> str:
        """The notebook's path in JupyterLab (relative to the server's root, with "/")."""
        return notebook.relative_to(self.base).as_posix() if self.base is not None else notebook.name

    # -- inspection ------------------------------------------------------------------------
    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def get_json(self, path: str):
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as r:
            return json.load(r)


# ------------------------------------------------------------------------------------------
# Browser side.  ``page`` is a Playwright sync-API Page showing a JupyterLab notebook.

# JavaScript run in the page.  ``window.jupyterapp`` exists because of expose_app_in_browser.
JS_NOTEBOOK_READY = """(name) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return false;
  const w = app.shell.currentWidget;
  if (!w || !w.context || !w.context.isReady || w.context.path !== name || !w.sessionContext) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.status === 'idle' && w.content && w.content.isAttached);
}"""

# JupyterLab has started and restored its layout: its commands can open documents.
JS_APP_READY = """() => {
  const app = window.jupyterapp;
  return !!(app && app.shell && app.commands && app.commands.hasCommand('docmanager:open') &&
            app.commands.hasCommand('notebook:run-all-cells'));
}"""

# Open a notebook in the running JupyterLab (no page load), as File > Open does.
JS_OPEN = """async (name) => {
  const app = window.jupyterapp;
  await app.restored;
  await app.commands.execute('docmanager:open', {path: name});
  return true;
}"""

# The documents open in the main area, and the notebooks in the DOM: one each while a notebook is checked, so that
# every query of the page (cells, sliders, errors) sees that notebook only.
JS_OPEN_DOCUMENTS = """() => ({
  documents: Array.from(window.jupyterapp.shell.widgets('main')).filter(w => w.context).map(w => w.context.path),
  notebooks: document.querySelectorAll('.jp-Notebook').length,
})"""

# Close a notebook and shut its kernel down (and wait for both), unsaved: the next notebook opens in the same page.
JS_CLOSE = """async (name) => {
  const app = window.jupyterapp;
  const ws = Array.from(app.shell.widgets('main')).filter(w => w.context && w.context.path === name);
  for (const w of ws) {
    if (w.sessionContext && w.sessionContext.session) await w.sessionContext.shutdown();
    w.context.model.dirty = false;
    w.dispose();
  }
  return ws.length;
}"""

JS_KERNEL_STATUS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const running = Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'))
    .filter(e => e.textContent.includes('*')).length;
  return {status: k ? k.status : 'no-kernel', running: running};
}"""

# True-ish once the kernel has been idle with no [*] prompt for ``quiet`` ms on end ("settled"), or at once with the
# kernel's status when it is dead or gone. ``key`` names this wait's state in the page (a fresh one per wait).
JS_SETTLED = """([quiet, key]) => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const status = k ? k.status : 'no-kernel';
  if (['dead', 'no-kernel', 'unknown'].includes(status)) return status;
  const busy = status !== 'idle' || Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'))
    .some(e => e.textContent.includes('*'));
  const st = window.__fmSettled && window.__fmSettled.key === key ? window.__fmSettled
    : (window.__fmSettled = {key: key, since: null});
  const now = performance.now();
  if (busy) { st.since = null; return false; }
  if (st.since === null) st.since = now;
  return now - st.since >= quiet ? 'settled' : false;
}"""

JS_CELLS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cells = w.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    const tags = c.getMetadata('tags') || [];
    const rec = {index: i, type: c.type, tags: tags, source: c.sharedModel.getSource(), count: null, errors: []};
    if (c.type === 'code') {
      rec.count = c.executionCount;
      const outputs = c.outputs.toJSON();
      for (const o of outputs) {
        if (o.output_type === 'error') rec.errors.push(o.ename + ': ' + o.evalue);
      }
    }
    out.push(rec);
  }
  return out;
}"""

# Error-looking things anywhere in the rendered notebook, including inside widget Output areas
# (ipywidgets.interactive catches a callback's exception and shows its traceback there).
# JupyterLab renders an ``error`` output with the stderr mime type.
JS_DOM_ERRORS = """() => {
  const found = [];
  const cells = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'));
  const w = window.jupyterapp.shell.currentWidget;
  const model = w.content.model.cells;
  const cellOf = (el) => cells.indexOf(el.closest('.jp-Cell'));
  const tagged = (i) => {
    if (i < 0 || i >= model.length) return false;
    return (model.get(i).getMetadata('tags') || []).includes('raises-exception');
  };
  const sel = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  for (const el of document.querySelectorAll(sel)) {
    const text = el.innerText || el.textContent || '';
    if (!/Traceback|\\b[A-Za-z]*Error\\b/.test(text)) continue;
    const i = cellOf(el);
    if (tagged(i)) continue;
    const inWidget = !!el.closest('.widget-output');
    found.push({cell: i, where: inWidget ? 'widget output' : 'cell output', text: text.slice(0, 2000)});
  }
  for (const el of document.querySelectorAll('.jupyter-widgets-error-widget')) {
    found.push({cell: cellOf(el), where: 'widget', text: (el.innerText || el.title || 'widget failed to render').slice(0, 2000)});
  }
  for (const el of document.querySelectorAll('.jp-Dialog')) {
    found.push({cell: -1, where: 'dialog', text: (el.innerText || '').slice(0, 2000)});
  }
  return found;
}"""

# Tag every slider handle and Play widget with data-fm-* attributes and the element whose images
# they should change: the nearest enclosing widget that contains an Image widget (flashmath's live
# widgets) or a widget Output with an <img>, else the cell's output area, else the whole notebook.
JS_TAG_CONTROLS = """() => {
  const scopeOf = (el) => {
    let p = el.parentElement;
    while (p && !p.classList.contains('jp-Cell')) {
      if (p.classList.contains('jupyter-widgets') &&
          p.querySelector('img.widget-image, .widget-output img')) return p;
      p = p.parentElement;
    }
    if (p) {
      const area = p.querySelector('.jp-Cell-outputWrapper');
      if (area && area.querySelector('img')) return area;
    }
    return document.querySelector('.jp-Notebook');
  };
  let nScopes = 0;
  const scopeId = (el) => {
    const s = scopeOf(el);
    if (!s.dataset.fmScope) s.dataset.fmScope = String(nScopes++);
    return s.dataset.fmScope;
  };
  const cells = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'));
  const label = (w) => {
    const l = w && w.querySelector('.widget-label');
    return l ? (l.innerText || l.textContent || '').trim() : '';
  };
  const sliders = [];
  document.querySelectorAll('.jp-Notebook .widget-slider .noUi-handle').forEach((h, i) => {
    h.dataset.fmSlider = String(i);
    const w = h.closest('.widget-slider');
    const target = h.closest('.noUi-target');
    sliders.push({id: String(i), scope: scopeId(h), cell: cells.indexOf(h.closest('.jp-Cell')),
                  label: label(w), disabled: !!(target && target.hasAttribute('disabled'))});
  });
  const plays = [];
  document.querySelectorAll('.jp-Notebook .widget-play').forEach((p, i) => {
    p.dataset.fmPlay = String(i);
    plays.push({id: String(i), scope: scopeId(p), cell: cells.indexOf(p.closest('.jp-Cell')),
                disabled: !!p.querySelector('button[disabled]')});
  });
  return {sliders: sliders, plays: plays};
}"""

JS_DESCRIBE_SCOPE = """(scope) => {
  const s = document.querySelector(`[data-fm-scope="${scope}"]`);
  if (!s) return 'its output area is gone';
  const n = s.querySelectorAll('img').length;
  const text = Array.from(s.querySelectorAll('.widget-output, .jp-OutputArea-output'))
    .map(e => (e.innerText || '').trim()).filter(t => t).join(' / ').slice(0, 300);
  return `it now shows ${n} image(s)` + (text ? ` and the text: ${text}` : ' and no text');
}"""

JS_SNAPSHOT = """(scope) => {
  const s = document.querySelector(`[data-fm-scope="${scope}"]`);
  if (!s) return {imgs: null, error: false};
  const imgs = Array.from(s.querySelectorAll('img')).map(i => i.getAttribute('src') || '');
  const error = Array.from(s.querySelectorAll(
      '.widget-output .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
    .some(e => /Traceback/.test(e.textContent || ''));
  return {imgs: imgs.join('|'), error: error};
}"""


# Latency of one key press: armed before the press, it records when the key goes down on the handle
# and when the scope's picture has a new src that is decoded and ready to paint.
JS_ARM_LATENCY = """([scope, handleId]) => {
  const s = document.querySelector(`[data-fm-scope="${scope}"]`);
  const handle = document.querySelector(`[data-fm-slider="${handleId}"]`);
  const img = s && s.querySelector('img');
  const lat = {t0: null, t1: null, src: img ? img.getAttribute('src') : null};
  window.__fmLatency = lat;
  if (!img || !handle) return false;
  handle.addEventListener('keydown', () => { if (lat.t0 === null) lat.t0 = performance.now(); },
                          {capture: true, once: true});
  const obs = new MutationObserver(() => {
    if (img.getAttribute('src') === lat.src) return;
    obs.disconnect();
    img.decode().catch(() => null).then(() => { lat.t1 = performance.now(); });
  });
  obs.observe(img, {attributes: true, attributeFilter: ['src']});
  return true;
}"""

# Samples the scope every ``period`` ms in the page (setInterval, no round trips) until stopped: a sample is
# "missing" when the scope shows no <img> with a src, a laid-out box and pixels, and "loading" while the <img> is
# fetching its next picture (naturalWidth 0: Chrome keeps painting the previous picture meanwhile, which the
# screenshots taken alongside check); "changes" counts new pictures.
JS_START_SAMPLER = """([scope, period]) => {
  const s = document.querySelector(`[data-fm-scope="${scope}"]`);
  const out = {samples: 0, missing: 0, loading: 0, changes: 0, firstMissingAt: null, detail: null};
  let last = null;
  const t0 = performance.now();
  window.__fmSampler = {out: out, id: setInterval(() => {
    const imgs = s ? Array.from(s.querySelectorAll('img')) : [];
    // a broken picture (loaded, no pixels: complete with naturalWidth 0) counts as missing
    const present = imgs.filter(i => i.getAttribute('src') && i.offsetHeight > 0 && i.offsetWidth > 0 &&
                                     !(i.complete && i.naturalWidth === 0));
    out.samples += 1;
    if (!present.length) {
      out.missing += 1;
      if (out.firstMissingAt === null) out.firstMissingAt = Math.round(performance.now() - t0);
      out.detail = imgs.map(i => ({nw: i.naturalWidth, oh: i.offsetHeight, complete: i.complete,
                                   src: (i.getAttribute('src') || '').slice(0, 40)}));
    } else if (present.some(i => i.naturalWidth === 0)) {
      out.loading += 1;
    }
    const key = imgs.map(i => i.getAttribute('src') || '').join('|');
    if (last !== null && key !== last) out.changes += 1;
    last = key;
  }, period)};
}"""

JS_STOP_SAMPLER = """() => { clearInterval(window.__fmSampler.id); return window.__fmSampler.out; }"""

# A Play widget changes by itself (it stops at its last frame), so the test never checks its state and then acts on
# it in two steps: each of these looks and acts in one synchronous call inside the page.
# Arm a watcher on Play widget `id` before clicking it: it records whether the pause icon ever appeared (the Play
# started), even if the Play reaches its last frame and shows the play icon again before Playwright looks.
JS_ARM_PLAY_WATCH = """(id) => {
  const p = document.querySelector(`[data-fm-play="${id}"]`);
  const w = {started: !!p.querySelector('button i.fa-pause')};
  w.observer = new MutationObserver(() => { if (p.querySelector('button i.fa-pause')) w.started = true; });
  w.observer.observe(p, {subtree: true, childList: true, attributes: true});
  window.__fmPlayWatch = w;
}"""
JS_PLAY_STARTED = """() => window.__fmPlayWatch.started"""
# Stop Play widget `id` if it is still playing: the pause button is looked up and clicked in one step. Returns
# whether it was still playing.
JS_STOP_PLAY = """(id) => {
  window.__fmPlayWatch.observer.disconnect();
  const icon = document.querySelector(`[data-fm-play="${id}"] button i.fa-pause`);
  if (icon) icon.closest('button').click();
  return !!icon;
}"""
JS_PLAY_STOPPED = """(id) => !document.querySelector(`[data-fm-play="${id}"] button i.fa-pause`)"""


# The stored jshtml animations (flashmath.viz.offline_jshtml, matplotlib's player) as the page shows them: the
# picture's laid-out size and pixels, the frame its slider shows, and where its Play button is.
JS_STORED_ANIMATIONS = """() => Array.from(document.querySelectorAll('.jp-Notebook img[id^="_anim_img"]')).map(img => {
  const player = img.closest('.animation');
  const slider = player && player.querySelector('input[id^="_anim_slider"]');
  const play = player && player.querySelector('button[onclick$=".play_animation()"]');
  const r = img.getBoundingClientRect();
  const p = play ? play.getBoundingClientRect() : null;
  return {id: img.id, height: r.height, width: r.width, naturalWidth: img.naturalWidth, complete: img.complete,
          frame: slider ? slider.value : null, play: p ? {x: p.x, y: p.y, width: p.width, height: p.height} : null};
})"""
JS_ANIMATION = """(id) => {
  const img = document.getElementById(id);
  const player = img.closest('.animation');
  const play = player.querySelector('button[onclick$=".play_animation()"]').getBoundingClientRect();
  const top = document.querySelector('.jp-WindowedPanel-outer') || document.scrollingElement;
  return {frame: player.querySelector('input[id^="_anim_slider"]').value, playY: play.y + top.scrollTop,
          height: img.getBoundingClientRect().height};
}"""


_wait_counter = iter(range(1 << 62))


def _fresh_key() -> int:
    """A fresh key for one wait's state in the page."""
    return next(_wait_counter)


def dark_fraction(png: bytes) -> float:
    """The fraction of pixels of a screenshot darker than light grey: about 0 for a blank (white) picture."""
    import io

    import numpy as np
    from PIL import Image

    grey = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    return float((grey < 200).mean()) if grey.size else 0.0


class NotebookCheckFailure(AssertionError):
    pass


class NotebookDriver:
    """Runs one notebook in an open JupyterLab page and exercises its widgets."""

    def __init__(self, page, server: JupyterLabServer, name: str):
        self.page = page
        self.server = server
        self.name = name  # the notebook's path in JupyterLab
        self.timings: dict[str, float] = {}
        self.exercised = {"sliders": 0, "plays": 0, "play_frames": 0}
        self.latencies: dict[str, list[float]] = {}  # slider -> milliseconds from key press to new picture
        self.play_samples: dict[str, dict] = {}  # Play button -> what the pictures did while it played
        self.animations: list[dict] = []  # the stored jshtml animations checked: picture size, frames on first Play
        self.page_errors: list[str] = []
        self._on_page_error = lambda e: self.page_errors.append(str(e))
        page.on("pageerror", self._on_page_error)

    # -- opening and running -----------------------------------------------------------------
    def load_lab(self, timeout: float = 90.0) -> None:
        """Load JupyterLab in the page, with an empty workspace (``?reset``), and wait until it can open documents."""
        self.page.goto(f"{self.server.url}/lab?reset", wait_until="domcontentloaded")
        try:
            self.page.wait_for_function(JS_APP_READY, timeout=timeout * 1000, polling=100)
        except Exception as exc:  # Playwright's TimeoutError; say what was missing
            raise NotebookCheckFailure(
                f"JupyterLab did not start in the page within {timeout:.0f} s ({exc.__class__.__name__}).\n"
                f"Page errors: {self.page_errors[-5:]}\nJupyterLab log:\n{self.server.log_tail(20)}"
            ) from None

    def open(self, timeout: float = 90.0) -> None:
        """Open the notebook in the page's JupyterLab (loaded first if the page does not show it yet) and wait
        until it is rendered with an idle kernel. Several notebooks can be checked one after the other in one page:
        :meth:`close` each before opening the next."""
        t0 = time.monotonic()
        if not self.page.evaluate(JS_APP_READY):
            self.load_lab(timeout)
        before = self.page.evaluate(JS_OPEN_DOCUMENTS)
        if before["documents"] or before["notebooks"]:
            raise NotebookCheckFailure(f"{self.name}: the page still shows another document {before}")
        self.page.evaluate(JS_OPEN, self.name)
        try:
            self.page.wait_for_function(JS_NOTEBOOK_READY, arg=self.name, timeout=timeout * 1000, polling=100)
        except Exception as exc:  # Playwright's TimeoutError; say what was missing
            raise NotebookCheckFailure(
                f"{self.name}: notebook or its kernel not ready within {timeout:.0f} s ({exc.__class__.__name__}).\n"
                f"Page errors: {self.page_errors[-5:]}\nJupyterLab log:\n{self.server.log_tail(20)}"
            ) from None
        now = self.page.evaluate(JS_OPEN_DOCUMENTS)
        if now != {"documents": [self.name], "notebooks": 1}:
            raise NotebookCheckFailure(f"{self.name}: expected this notebook alone in the page, found {now}")
        self.timings["open"] = time.monotonic() - t0

    def close(self) -> None:
        """Close the notebook without saving and shut its kernel down (waiting for both); any kernel left over
        too. Best effort: after a failure the caller loads a fresh page anyway."""
        try:
            self.page.evaluate(JS_CLOSE, self.name)
        except Exception:  # noqa: BLE001
            pass
        self.shutdown_kernels()
        self.page.remove_listener("pageerror", self._on_page_error)

    def command(self, cmd: str, args: dict | None = None, wait: bool = True) -> None:
        """Execute a JupyterLab command; with ``wait=False`` do not await its promise."""
        js = (
            "([c, a]) => window.jupyterapp.commands.execute(c, a)"
            if wait
            else "([c, a]) => { window.jupyterapp.commands.execute(c, a).catch("
            "e => { window.__fmCommandError = String(e); }); }"
        )
        self.page.evaluate(js, [cmd, args or {}])

    def kernel_state(self) -> dict:
        return self.page.evaluate(JS_KERNEL_STATUS)

    def wait_settled(self, timeout: float, quiet: float = 1.0, label: str = "") -> None:
        """Wait until the kernel is idle and no cell shows [*], continuously for ``quiet`` s.

        The page checks every 100 ms itself (one call from here, not a round trip per look)."""
        try:
            result = self.page.wait_for_function(
                JS_SETTLED, arg=[quiet * 1000, _fresh_key()], timeout=timeout * 1000, polling=100
            ).json_value()
        except Exception:  # Playwright's TimeoutError: say what the kernel was doing
            st = self.kernel_state()
            raise NotebookCheckFailure(
                f"{self.name}: kernel still busy after {timeout:.0f} s {label} "
                f"(status {st['status']}, {st['running']} cell(s) showing [*])"
            ) from None
        if result != "settled":
            raise NotebookCheckFailure(f"{self.name}: kernel is {result} {label}")

    def run_all(self, timeout: float = 240.0) -> None:
        t0 = time.monotonic()
        # Clear stored outputs and execution counts first, so that "every cell has a fresh
        # execution count" means "executed now", and stale saved widget views disappear.
        self.command("notebook:clear-all-cell-outputs")
        todo = [c for c in self.page.evaluate(JS_CELLS) if c["type"] == "code" and c["source"].strip()]
        if any(c["count"] is not None for c in todo):
            raise NotebookCheckFailure(f"{self.name}: clearing outputs left execution counts behind")
        # Run All resolves only when every cell has finished, so do not await it here.
        self.command("notebook:run-all-cells", wait=False)
        if todo:
            # Wait for the run to start: a [*] prompt, a busy kernel, or (fast) first counts.
            self.page.wait_for_function(
                """() => {
                  const w = window.jupyterapp.shell.currentWidget;
                  const k = w.sessionContext.session.kernel;
                  const cells = w.content.model.cells;
                  for (let i = 0; i < cells.length; i++) {
                    if (cells.get(i).type === 'code' && cells.get(i).executionCount !== null) return true;
                  }
                  return (k && k.status !== 'idle') || window.__fmCommandError ||
                    Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'))
                      .some(e => e.textContent.includes('*'));
                }""",
                timeout=30_000,
                polling=50,
            )
            err = self.page.evaluate("() => window.__fmCommandError || null")
            if err:
                raise NotebookCheckFailure(f"{self.name}: Run All failed: {err}")
        self.wait_settled(timeout, quiet=1.0, label="after Run All")
        # On a loaded machine the kernel can sit idle for over a second between two cells of the run (the page
        # still rendering a widget, the next request not sent yet): while some code cell has no count, settle
        # again, for up to 30 s, before check_all_executed says that Run All stopped early.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and any(
            c["type"] == "code" and c["source"].strip() and c["count"] is None for c in self.page.evaluate(JS_CELLS)
        ):
            time.sleep(0.5)
            self.wait_settled(timeout, quiet=1.0, label="after Run All")
        self.timings["run_all"] = time.monotonic() - t0

    # -- checks ------------------------------------------------------------------------------
    def check_no_errors(self, when: str) -> None:
        problems = []
        raised = set()
        for c in self.page.evaluate(JS_CELLS):
            if c["errors"] and "raises-exception" not in c["tags"]:
                raised.add(c["index"])
                problems.append(f"cell {c['index']} raised {'; '.join(c['errors'])}")
        for e in self.page.evaluate(JS_DOM_ERRORS):
            if e["cell"] in raised and e["where"] == "cell output":
                problems.append(f"cell {e['cell']} traceback:\n{_indent(e['text'])}")
                continue
            where = f"cell {e['cell']} {e['where']}" if e["cell"] >= 0 else e["where"]
            problems.append(f"{where} shows an error:\n{_indent(e['text'])}")
        if problems:
            raise NotebookCheckFailure(f"{self.name}: error output {when}:\n" + "\n".join(dict.fromkeys(problems)))

    def check_all_executed(self) -> None:
        missing = [
            c["index"]
            for c in self.page.evaluate(JS_CELLS)
            if c["type"] == "code" and c["source"].strip() and c["count"] is None
        ]
        if missing:
            raise NotebookCheckFailure(
                f"{self.name}: code cell(s) {missing} have no execution count after Run All "
                "(Run All stopped early, or a cell was skipped)"
            )

    # -- widgets -----------------------------------------------------------------------------
    def controls(self) -> dict:
        return self.page.evaluate(JS_TAG_CONTROLS)

    def describe(self, scope: str) -> str:
        return self.page.evaluate(JS_DESCRIBE_SCOPE, scope)

    def snapshot(self, scope: str) -> str | None:
        """The ``src`` of every <img> in the scope, joined with "|"."""
        return self.page.evaluate(JS_SNAPSHOT, scope)["imgs"]

    def _wait_for_new_image(self, scope: str, before: str | None, timeout: float) -> str | None:
        """Poll until the scope shows images whose srcs differ from ``before``; return them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.page.evaluate(JS_SNAPSHOT, scope)
            snap = state["imgs"]
            if snap and snap != before and all(snap.split("|")):
                return snap
            if state["error"]:  # a traceback replaced the figure: the error check reports it
                return None
            self.page.wait_for_timeout(100)
        return None

    def _value(self, handle) -> str | None:
        return handle.get_attribute("aria-valuenow")

    def _press_and_settle(self, handle, scope: str, key: str, what: str) -> None:
        """Press ``key`` on a slider handle; if the value moved, wait for the redraw and check errors."""
        value0, before = self._value(handle), self.snapshot(scope)
        handle.press(key)
        if self._value(handle) != value0:
            self._wait_for_new_image(scope, before, 10.0)
            self.wait_settled(60, quiet=0.5, label=f"after {key} on {what}")
            self.check_no_errors(f"after pressing {key} on {what} (value {self._value(handle)})")

    def press_latency(self, handle, s: dict, key: str, timeout: float = 30.0) -> float | None:
        """Press ``key`` on a slider handle; milliseconds until a new picture is decoded (None: none came).

        Returns at once when the press did not move the handle (no new value: no new picture to wait for).
        """
        self.page.evaluate(JS_ARM_LATENCY, [s["scope"], s["id"]])
        before = self._value(handle)
        handle.press(key)
        if self._value(handle) == before:
            return None
        try:
            self.page.wait_for_function(
                "() => window.__fmLatency && window.__fmLatency.t1 !== null", timeout=timeout * 1000, polling="raf"
            )
        except Exception:  # Playwright's TimeoutError: no new picture
            return None
        lat = self.page.evaluate("() => window.__fmLatency")
        return lat["t1"] - lat["t0"] if lat["t0"] is not None else None

    def exercise_slider(self, s: dict, presses: int = 4, timeout: float = 30.0) -> None:
        """Each arrow key press must bring a new picture (timed); End and Home (the extremes) must not raise."""
        handle = self.page.locator(f'[data-fm-slider="{s["id"]}"]')
        what = f"slider {s['label'] or '#' + s['id']!r} (cell {s['cell']})"
        handle.scroll_into_view_if_needed()
        handle.focus()
        # move away from the end the handle sits at: ArrowLeft when it starts at its maximum (noUiSlider's
        # aria-valuenow and aria-valuemax say so; without them, a probing press to the right and back)
        try:
            at_max = float(handle.get_attribute("aria-valuenow")) >= float(handle.get_attribute("aria-valuemax"))
        except (TypeError, ValueError):
            at_max = None
        if at_max is not None:
            key = "ArrowLeft" if at_max else "ArrowRight"
        else:
            value0 = self._value(handle)
            key = "ArrowRight"
            handle.press("ArrowRight")
            if self._value(handle) == value0:
                key = "ArrowLeft"
            else:
                handle.press("ArrowLeft")  # back to the start: the timed presses begin from a settled picture
        self.wait_settled(60, quiet=0.5, label=f"before timing {what}")
        self._wait_for_picture_to_settle(s["scope"])
        times, stuck = [], 0
        while len(times) < presses and stuck < 3:
            before = self._value(handle)
            ms = self.press_latency(handle, s, key, timeout)
            if self._value(handle) == before:
                # the end of a short slider, or a press that ipywidgets rounded back (its FloatLogSlider does
                # that to every other arrow press): no new value, no new picture to wait for
                stuck += 1
                continue
            self.check_no_errors(f"after pressing {key} on {what} (value {self._value(handle)})")
            if ms is None:
                raise NotebookCheckFailure(
                    f"{self.name}: pressing {key} on {what} (to value {self._value(handle)}) did not change its "
                    f"picture within {timeout:.0f} s ({self.describe(s['scope'])})"
                )
            times.append(ms)
            self.wait_settled(60, quiet=0.3, label=f"after {key} on {what}")
        if not times:
            raise NotebookCheckFailure(f"{self.name}: {what} did not move on ArrowRight/ArrowLeft")
        self.latencies[f"{what}"] = times
        self._press_and_settle(handle, s["scope"], "End", what)
        self._press_and_settle(handle, s["scope"], "Home", what)
        self.exercised["sliders"] += 1

    def _wait_for_picture_to_settle(self, scope: str, quiet: float = 0.4, timeout: float = 30.0) -> None:
        """Wait until the scope's picture has not changed for ``quiet`` s (pending redraws have landed)."""
        deadline = time.monotonic() + timeout
        last, since = self.snapshot(scope), time.monotonic()
        while time.monotonic() < deadline:
            self.page.wait_for_timeout(100)
            now = self.snapshot(scope)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return

    def exercise_play(self, p: dict, sample_seconds: float = 3.0, period_ms: int = 50, timeout: float = 30.0) -> None:
        """Press Play: it must start, change the picture, and show a picture in every 50 ms sample for 3 s."""
        play = self.page.locator(f'[data-fm-play="{p["id"]}"]')
        what = f"Play button #{p['id']} (cell {p['cell']})"
        button = play.locator("button").first
        self.wait_settled(60, quiet=0.5, label=f"before pressing {what}")
        self._wait_for_picture_to_settle(p["scope"])
        snap = self.snapshot(p["scope"])
        button.scroll_into_view_if_needed()
        self.page.evaluate(JS_ARM_PLAY_WATCH, p["id"])
        button.click()
        try:  # the button turns into a pause button once the Play widget runs (however briefly: the watcher saw it)
            self.page.wait_for_function(JS_PLAY_STARTED, timeout=5_000, polling=50)
        except Exception:
            raise NotebookCheckFailure(
                f"{self.name}: pressing {what} did not start it (no pause button after 5 s; "
                f"{self.describe(p['scope'])})"
            ) from None
        # 3 s of play: the DOM sampled every 50 ms in the page, and screenshots of the picture meanwhile
        self.page.evaluate(JS_START_SAMPLER, [p["scope"], period_ms])
        picture = self.page.locator(f'[data-fm-scope="{p["scope"]}"] img').first
        shots, blank_shots, slow_shots, t_end = 0, 0, 0, time.monotonic() + sample_seconds
        while time.monotonic() < t_end:
            try:
                shot = picture.screenshot(timeout=2_000, animations="allow")
            except Exception:  # no screenshot within 2 s (a loaded machine): no evidence either way, the DOM
                slow_shots += 1  # samples still look every 50 ms
                continue
            shots += 1
            blank_shots += dark_fraction(shot) < 0.005
        samples = self.page.evaluate(JS_STOP_SAMPLER)
        samples.update(shots=shots, blank_shots=blank_shots, slow_shots=slow_shots, seconds=sample_seconds)
        if not shots:
            raise NotebookCheckFailure(
                f"{self.name}: no screenshot of the picture of {what} succeeded in "
                f"{sample_seconds:.0f} s ({slow_shots} timed out after 2 s)"
            )
        changed = self._wait_for_new_image(p["scope"], snap, timeout) if not samples["changes"] else "yes"
        # stop it if it still plays: looked up and clicked in one step in the page, since the Play may reach its
        # last frame at any moment (a count-then-click here once waited 30 s for a pause button that had gone)
        self.page.evaluate(JS_STOP_PLAY, p["id"])
        try:
            self.page.wait_for_function(JS_PLAY_STOPPED, arg=p["id"], timeout=10_000, polling=100)
        except Exception:
            raise NotebookCheckFailure(
                f"{self.name}: {what} still plays 10 s after its pause button was clicked ({self.describe(p['scope'])})"
            ) from None
        self.wait_settled(60, quiet=0.5, label=f"after pressing {what}")
        self.check_no_errors(f"while {what} was playing")
        self.play_samples[what] = samples
        if not changed:
            raise NotebookCheckFailure(
                f"{self.name}: pressing {what} did not change the plotted image within {timeout:.0f} s "
                f"({self.describe(p['scope'])})"
            )
        if samples["missing"] or samples["blank_shots"]:
            raise NotebookCheckFailure(
                f"{self.name}: while {what} played, {samples['missing']} of {samples['samples']} DOM samples "
                f"(every {period_ms} ms) had no picture (the first after {samples['firstMissingAt']} ms: "
                f"{samples.get('detail')}) and {samples['blank_shots']} of {samples['shots']} screenshots were blank"
            )
        self.exercised["play_frames"] += samples["changes"]
        self.exercised["plays"] += 1

    def check_stored_animations(self, expected: int, timeout: float = 30.0) -> None:
        """Right after opening, before any click: each of the notebook's ``expected`` stored jshtml animations shows
        its picture (laid out with a non-zero size, decoded, not blank in a screenshot), and its first click on Play
        plays (the frame advances) without its buttons moving."""
        deadline = time.monotonic() + timeout
        shown = self.page.evaluate(JS_STORED_ANIMATIONS)
        while time.monotonic() < deadline and (
            len(shown) != expected
            or not all(
                a["complete"] and a["naturalWidth"] > 0 and a["height"] > 0 and a["frame"] is not None for a in shown
            )
        ):
            self.page.wait_for_timeout(200)
            shown = self.page.evaluate(JS_STORED_ANIMATIONS)
        if len(shown) != expected:
            raise NotebookCheckFailure(
                f"{self.name}: the stored notebook has {expected} jshtml animation(s), the page shows {len(shown)}"
            )
        for a in shown:
            what = f"stored animation {a['id']}"
            if not (a["complete"] and a["naturalWidth"] > 0 and a["height"] > 0 and a["width"] > 0):
                raise NotebookCheckFailure(
                    f"{self.name}: {what} shows no picture {timeout:.0f} s after the notebook opened: laid out at "
                    f"{a['width']:.0f} x {a['height']:.0f} px, decoded width {a['naturalWidth']} px "
                    f"(complete: {a['complete']})"
                )
            picture = self.page.locator(f"#{a['id']}")
            picture.scroll_into_view_if_needed()  # the mouse wheel's doing, no click
            shot = picture.screenshot(timeout=10_000)
            if dark_fraction(shot) < 0.005:
                raise NotebookCheckFailure(f"{self.name}: {what} is blank in a screenshot")
            before = self.page.evaluate(JS_ANIMATION, a["id"])
            if before["frame"] is None:
                raise NotebookCheckFailure(f"{self.name}: {what} has no player (its script did not run: trusted?)")
            player = picture.locator("xpath=ancestor::div[contains(@class, 'animation')][1]")
            player.locator('button[onclick$=".play_animation()"]').click()
            try:
                self.page.wait_for_function(
                    f"() => ({JS_ANIMATION})({json.dumps(a['id'])}).frame !== {json.dumps(before['frame'])}",
                    timeout=timeout * 1000,
                    polling=100,
                )
            except Exception:  # Playwright's TimeoutError: the click did not play
                after = self.page.evaluate(JS_ANIMATION, a["id"])
                raise NotebookCheckFailure(
                    f"{self.name}: the first click on {what}'s Play did not play within {timeout:.0f} s (frame "
                    f"{before['frame']} -> {after['frame']}; its Play button moved by "
                    f"{after['playY'] - before['playY']:.0f} px, the picture is {after['height']:.0f} px high)"
                ) from None
            after = self.page.evaluate(JS_ANIMATION, a["id"])
            player.locator('button[onclick$=".pause_animation()"]').click()
            if abs(after["playY"] - before["playY"]) > 1:
                raise NotebookCheckFailure(
                    f"{self.name}: clicking {what}'s Play moved its buttons by "
                    f"{after['playY'] - before['playY']:.0f} px"
                )
            self.animations.append(
                {"id": a["id"], "height": a["height"], "width": a["width"], "frames": [before["frame"], after["frame"]]}
            )

    def shutdown_kernels(self) -> None:
        try:
            self.page.evaluate(
                "async () => { const m = window.jupyterapp.serviceManager; "
                "await m.sessions.shutdownAll(); await m.kernels.shutdownAll(); }"
            )
        except Exception:  # noqa: BLE001 - best effort; the server fixture stops everything anyway
            pass


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.strip().splitlines())
