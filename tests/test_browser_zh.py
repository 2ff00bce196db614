"""The Chinese chapters (``notebooks/zh/``) in a real JupyterLab in headless Chromium: tests/test_browser.py's checks
(its docstring says which, and why a Chinese chapter's sliders are timed on one press), in a module of their own so
that pytest-xdist (``--dist loadfile``) runs them on another worker than the English chapters: each module starts
its own JupyterLab and Chromium.

Run only these:  python -m pytest tests/test_browser_zh.py -p no:nbval -o addopts=""
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_support import JupyterLabServer

# The fixtures are test_browser.py's (module-scoped: this module gets its own browser, server and page).
from test_browser import (
    CHINESE,
    LabPage,
    browser,
    check_notebook,
    ids,
    jupyterlab,
    lab_page,
    latency_log,
    zh_translation,
)

__all__ = ["browser", "jupyterlab", "lab_page", "latency_log", "zh_translation"]  # used as fixtures

NOTEBOOKS = CHINESE  # what this module's jupyterlab fixture serves
pytestmark = pytest.mark.browser


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_chinese_notebook_in_jupyterlab(
    notebook: Path, jupyterlab: JupyterLabServer, lab_page: LabPage, record_property, latency_log, zh_translation
):
    check_notebook(notebook, jupyterlab, lab_page, record_property, latency_log, zh_translation)
