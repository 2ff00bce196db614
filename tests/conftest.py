import matplotlib

# Tests draw figures without a display. Select the backend in this process only: an MPLBACKEND
# environment variable would leak into the kernels that nbval starts and change the notebooks' outputs.
matplotlib.use("Agg")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The browser test's slider latencies (tests/test_browser.py), when it ran."""
    lines = getattr(config, "_flashmath_latency", None)
    if lines:
        terminalreporter.section("slider latency in JupyterLab (tests/test_browser.py)")
        for line in lines:
            terminalreporter.write_line(line)
