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


def test_naive_causal_case_is_causal_attention():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((600, 8), dtype=np.float32) for _ in range(3))  # more than one row block
    out = speed.inplace_attention(q, k, v, causal=True)
    keep = np.tril(np.ones((600, 600), bool))  # query n sees keys m <= n
    np.testing.assert_allclose(out, attention(q, k, v, mask=keep), atol=1e-5)


def test_measure_in_process_reports_time_memory_and_error():
    result = speed.measure("flash", 40, D=8, repeats=2, block_q=16, block_k=8)
    assert set(result) == {"ms", "ms_all", "peak_mib", "peak_exact", "error"}
    assert len(result["ms_all"]) == 3 and result["ms"] == min(result["ms_all"])  # the first call and 2 more
    assert result["peak_mib"] >= 0 and result["error"] < 1e-5
    causal = speed.measure("naive", 40, D=8, repeats=0, causal=True, threads=1)
    assert len(causal["ms_all"]) == 1 and causal["error"] < 1e-5  # checked against causal float64 rows


def test_sweep_times_every_block_pair():
    result = speed.sweep(48, 8, 1, (16, 32), (8,))
    assert set(result) == {"16x8", "32x8"} and all(ms > 0 for ms in result.values())


def test_breakdown_names_each_kind_of_work():
    result = speed.breakdown(64, 8, 16, 32)
    assert set(result) == {"Q K^T", "P V", "exp (and - max)", "row max, row sum", "rescale acc", "total"}
    assert all(ms > 0 for ms in result.values())


def test_main_runs_each_case_in_a_subprocess_and_prints_a_table(capsys):
    argv = [
        "--sizes",
        "32",
        "--dims",
        "8",
        "--repeats",
        "0",
        "--cases",
        "naive",
        "flash",
        "--masks",
        "none",
        "causal",
        "--threads",
        "default",
        "1",
    ]
    assert speed.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["32"]]
    # for each thread setting and mask: one row with both cases (8 processes in all)
    assert [row[:3] for row in rows] == [["32", "8", "none"], ["32", "8", "causal"]] * 2
    for row in rows:
        assert float(row[-1]) < 1e-5  # flash's rows checked against float64 attention
        flash, naive, ratio = float(row[3]), float(row[5]), float(row[7])
        assert row[4] == "-" and row[6] == "-"  # no torch case: no time, no ratio
        # the ratio printed is the ratio of the times (printed rounded to 0.1 ms)
        assert (flash - 0.05) / (naive + 0.05) - 0.005 <= ratio <= (flash + 0.05) / max(naive - 0.05, 1e-9) + 0.005
    assert "default threads:" in out and "1 thread(s) per case:" in out
    assert "numpy's BLAS: " in out and "available to this process" in out  # the header: BLAS and cores
    targets = out[out.index("targets (default threads):") :].splitlines()
    assert len(targets) > 1 and targets[1].strip()  # the targets line is never empty
    assert "flash / naive time, largest over 2 rows" in out
    assert "issue" not in out  # no words internal to the project


def test_main_refuses_bad_sizes(capsys):
    assert speed.main(["--sizes", "0"]) == 2
