"""``python -m flashmath.bench gpu`` on a machine without a CUDA GPU: it says so and exits with status 0."""

import importlib.util
import subprocess
import sys

import pytest

from flashmath.bench import gpu

HAVE_GPU = (
    importlib.util.find_spec("torch") is not None
    and importlib.util.find_spec("triton") is not None
    and __import__("torch").cuda.is_available()
)


@pytest.mark.skipif(HAVE_GPU, reason="a CUDA GPU is here: the command would check and time the kernels")
def test_without_a_gpu_it_says_so_and_exits_cleanly():
    done = subprocess.run([sys.executable, "-m", "flashmath.bench", "gpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU" in done.stdout or "triton extra is not installed" in done.stdout
    assert "Traceback" not in done.stderr


def test_the_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "torch and triton missing" in gpu._available()
    assert gpu.main([]) == 0


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason='the triton extra is not installed: see README, "The triton extra"',
)
def test_the_gpu_checks_pass_in_the_interpreter_at_a_small_size():
    lines = []
    assert gpu.check(lines.append, device="cpu", size=32, heads=(1,))
    assert len(lines) == 3 * 2 * 4 and all(line.startswith("ok") for line in lines)
