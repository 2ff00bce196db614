"""Chapters 11 and 12 need the optional ``triton`` extra (PyTorch and Triton); chapter 14 and two cells of chapter 13
need PyTorch (chapter 14: the ``distributed`` extra, or the triton extra, which installs PyTorch too; one cell of
chapter 13 needs Triton too).

Where it is not installed, the notebook's nbval items and its browser test are skipped with the reason, and the
summary says so once, so that README's test command passes on a fresh machine without the extra. The notebook's
stored outputs come from a run in Triton's interpreter (``TRITON_INTERPRET=1``, set by flashmath.triton_kernel on
a machine without a GPU). A code cell tagged ``needs-torch`` (chapter 13's comparison with PyTorch's FlexAttention,
in both editions) is stored as it runs with PyTorch; without PyTorch it prints that it skips, so nbval skips that
cell's item (the rest of the notebook runs and is compared). A cell tagged ``needs-triton`` (chapter 13's run of
chapter 11's kernel with its variants) is treated the same way where PyTorch or Triton is missing. Chapter 14
(``NEEDS_TORCH``) is skipped whole where PyTorch is missing, as chapters 11 and 12 are without the triton extra.
"""

import importlib.util

import pytest

NEEDS_TRITON = ("11_triton.ipynb", "12_backward.ipynb")
NEEDS_TORCH = ("14_ring_attention.ipynb",)
SKIP_REASON = "needs the triton extra"
NEEDS_TORCH_TAG = "needs-torch"  # a cell's tag: nbval skips the cell where PyTorch is missing
NEEDS_TRITON_TAG = "needs-triton"  # a cell's tag: nbval skips the cell where PyTorch or Triton is missing
TORCH_SKIP_REASON = "needs PyTorch"
collect_ignore_glob = [  # a learner's own copies of the chapters (README, "Keeping your work", and README.zh-CN)
    "notebooks/mine/*",
    "notebooks/zh/mine/*",  # JupyterLab started on a Chinese chapter opens its file browser in notebooks/zh
]


def _missing() -> list[str]:
    return [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]


def _notebook_of(item) -> str | None:
    """The notebook an item runs: nbval's cells are items of the notebook's file; the browser test takes it as its
    ``notebook`` parameter."""
    if item.path.suffix == ".ipynb":
        return item.path.name
    notebook = getattr(item, "callspec", None) and item.callspec.params.get("notebook")
    return getattr(notebook, "name", None)


def _tagged(item, tag: str) -> bool:
    """An nbval item (a notebook cell) tagged ``tag``."""
    cell = getattr(item, "cell", None)
    return isinstance(cell, dict) and tag in cell.get("metadata", {}).get("tags", [])


def _needs_torch(item) -> bool:
    """An nbval item (a notebook cell) tagged ``needs-torch``."""
    return _tagged(item, NEEDS_TORCH_TAG)


def pytest_collection_modifyitems(config, items):
    missing = _missing()
    if not missing:
        return
    from flashmath.triton_kernel import INSTALL_HINT  # cheap here: torch or triton is missing

    reason = f"{SKIP_REASON} ({' and '.join(missing)} not installed): install it {INSTALL_HINT}"
    torch_reason = f"{TORCH_SKIP_REASON} (torch not installed): install the triton extra {INSTALL_HINT}"
    for item in items:
        if _notebook_of(item) in NEEDS_TRITON:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif "torch" in missing and (_needs_torch(item) or _notebook_of(item) in NEEDS_TORCH):
            item.add_marker(pytest.mark.skip(reason=torch_reason))
        elif _tagged(item, NEEDS_TRITON_TAG):  # torch or triton missing: the kernel cannot run
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # From the skip reports, not from the collection: under pytest-xdist (addopts' -n) the workers collect, and
    # only their reports reach the process that prints the summary.
    skipped, reason, cells, torch_reason, triton_cells = set(), "", [], "", []
    for report in terminalreporter.stats.get("skipped", []):
        text = report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
        text = text.removeprefix("Skipped: ")
        if text.startswith(SKIP_REASON):
            reason = text
            chapters = {name for name in NEEDS_TRITON if name in report.nodeid}
            skipped.update(chapters)
            if not chapters:  # a cell tagged needs-triton in another chapter
                triton_cells.append(report.nodeid)
        elif text.startswith(TORCH_SKIP_REASON):
            torch_reason = text
            cells.append(report.nodeid)
    if skipped or cells or triton_cells:
        terminalreporter.section("optional chapters skipped")
    if skipped:
        terminalreporter.write_line(f"{', '.join(sorted(skipped))}: {reason}")
    if triton_cells:
        terminalreporter.write_line(f"{', '.join(sorted(triton_cells))}: {reason}")
    if cells:
        terminalreporter.write_line(f"{', '.join(sorted(cells))}: {torch_reason}")
