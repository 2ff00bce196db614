"""The speed benchmark's code path on tiny sizes (no timing is asserted: speed is for the benchmark to print)."""

import numpy as np

from flashmath.attention import attention
from flashmath.bench import speed


def test_naive_case_is_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((37, 16), dtype=np.float32) for _ in range(3))
    out = speed.inplace_attention(q, k, v)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, attention(q, k, v), atol=1e-5)


def test_measure_in_process_reports_time_memory_and_error():
    result = speed.measure("flash", 40, D=8, repeats=2, block_q=16, block_k=8)
    assert set(result) == {"ms", "ms_all", "peak_mib", "peak_exact", "error"}
    assert len(result["ms_all"]) == 2 and result["ms"] == min(result["ms_all"])
    assert result["peak_mib"] >= 0 and result["error"] < 1e-5


def test_sweep_times_every_block_pair():
    result = speed.sweep(48, 8, 1, (16, 32), (8,))
    assert set(result) == {"16x8", "32x8"} and all(ms > 0 for ms in result.values())


def test_main_runs_each_case_in_a_subprocess_and_prints_a_table(capsys):
    assert speed.main(["--sizes", "32", "48", "--dim", "8", "--repeats", "1", "--cases", "naive", "flash"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["32"], ["48"])]
    assert [row[:2] for row in rows] == [["32", "naive"], ["32", "flash"], ["48", "naive"], ["48", "flash"]]
    for row in rows:
        assert float(row[-1]) < 1e-5  # the rows checked against float64 attention
    assert "targets:" in out and "issue" not in out  # no words internal to the project


def test_main_refuses_bad_sizes(capsys):
    assert speed.main(["--sizes", "0"]) == 2
