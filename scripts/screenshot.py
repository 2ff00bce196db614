"""Retake README.md's screenshot: chapter 2's first slider in JupyterLab, in headless Chromium.

    python scripts/screenshot.py                      # docs/screenshot.png
    python scripts/screenshot.py --step 20 --out /tmp/shot.png

Starts JupyterLab on 127.0.0.1 with throw-away settings and drives it as the browser test does
(tests/browser_support.py): opens the notebook, runs all cells, moves the first slider to ``--step`` and saves
the cell that holds it (code and output). The cell's source goes into the PNG as text chunks
(``flashmath:notebook``, ``flashmath:cell``), so that tests/test_environments.py can tell when the notebook
no longer has that cell. Needs the test tools (Playwright) and Debian's chromium; writes only ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser_support import CHROMIUM, CHROMIUM_ARGS, JupyterLabServer, NotebookDriver  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", type=Path, default=ROOT / "notebooks" / "02_online_softmax.ipynb")
    parser.add_argument("--step", type=int, default=12, help="slider value shown (ArrowRight presses from 0)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    args = parser.parse_args(argv)

    from PIL import Image, PngImagePlugin
    from playwright.sync_api import sync_playwright

    notebook = args.notebook.resolve()
    with JupyterLabServer([notebook]) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        driver = NotebookDriver(page, server, notebook.name)
        driver.open()
        driver.run_all()
        driver.check_no_errors("after Run All")
        sliders = driver.controls()["sliders"]
        if not sliders:
            sys.exit(f"{notebook.name} has no slider")
        handle = page.locator(f'[data-fm-slider="{sliders[0]["id"]}"]')
        handle.scroll_into_view_if_needed()
        handle.focus()
        handle.press("Home")
        for _ in range(args.step):
            handle.press("ArrowRight")
        if float(handle.get_attribute("aria-valuenow")) != args.step:
            sys.exit(f"the slider shows {handle.get_attribute('aria-valuenow')}, not {args.step}")
        driver.wait_settled(60, quiet=1.5, label="after moving the slider")
        page.wait_for_timeout(1000)  # the new picture replaces the old one after the kernel goes idle
        driver.check_no_errors("after moving the slider")
        page.mouse.move(0, 0)  # no hover highlight in the picture
        cell = handle.locator("xpath=ancestor::div[contains(@class, 'jp-Cell ')][1]")
        png = cell.screenshot()
        browser.close()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    source = "".join(json.loads(notebook.read_text())["cells"][sliders[0]["cell"]]["source"])
    info = PngImagePlugin.PngInfo()
    info.add_text("flashmath:notebook", notebook.relative_to(ROOT).as_posix())
    info.add_itxt("flashmath:cell", source)
    tmp = args.out.with_suffix(".tmp.png")
    tmp.write_bytes(png)
    with Image.open(tmp) as image:
        image.convert("RGB").save(args.out, pnginfo=info, optimize=True)
    tmp.unlink()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} kB): {notebook.name}, slider at {args.step}")


if __name__ == "__main__":
    main()
