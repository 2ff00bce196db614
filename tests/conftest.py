import os
import sys
from pathlib import Path

import matplotlib

# Tests draw figures without a display. Select the backend in this process only: an MPLBACKEND
# environment variable would leak into the kernels that nbval starts and change the notebooks' outputs.
matplotlib.use("Agg")

# scripts/pins.py reads constraints.txt and environment.yml; the tests import it as `pins`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The browser test's slider latencies (tests/test_browser.py), when it ran; under .ci/run, the results of
    the other Pythons, so that the log's last lines tell the whole story."""
    lines = getattr(config, "_flashmath_latency", None)
    if lines:
        terminalreporter.section("slider latency in JupyterLab (tests/test_browser.py)")
        for line in lines:
            terminalreporter.write_line(line)
    results = os.environ.get("FLASHMATH_CI_RESULTS")
    if results and os.path.exists(results) and Path(results).read_text().strip():
        terminalreporter.section(".ci/run: every Python")
        for line in Path(results).read_text().splitlines():
            terminalreporter.write_line(line)
