"""Speed and peak memory of ``flash_attention`` against naive numpy attention and PyTorch, in one run.

    python -m flashmath.bench speed                      # N = M in 1024, 4096, 16384; D = 64; float32
    python -m flashmath.bench speed --sizes 1024 4096    # fewer sizes
    python -m flashmath.bench speed --sweep              # time block sizes, to choose the defaults
    python -m flashmath.bench speed --threads 1          # every case on one thread (less sensitive to load)

Three cases, each measured in its own subprocess so that one case's allocations and libraries cannot affect
another's memory figure:

``naive``
    numpy attention as a careful user writes it: the scale folded into ``Q``, then ``X = Q K^T``
    materialised as one float32 ``(N, M)`` matrix, turned into ``Y = softmax(X)`` in place (max subtracted,
    ``exp``, divided by the row sums), then ``A = Y V``.
``flash``
    :func:`flashmath.flash.flash_attention` with its default block sizes (or ``--block-q``/``--block-k``).
``torch``
    ``torch.nn.functional.scaled_dot_product_attention`` on the CPU (the ``bench`` extra). Skipped, saying so,
    when PyTorch is not installed.

Time: the best of ``--repeats`` calls (after a first call), in milliseconds; the best is the least disturbed
by other processes. Extra peak memory: the peak resident set size during the first call minus the resident
size just before it (Linux resets the peak through ``/proc/self/clear_refs``; elsewhere the lifetime peak
from ``getrusage`` is used and marked ``~``). A small warm-up call first loads each library's code and buffers,
so the figure is the attention call's own. Inputs are float32 with D = 64, drawn from a seeded generator.
Each case also checks 8 output rows against a float64 computation of those rows.

Threads. By default every library picks its own (numpy's OpenBLAS and PyTorch use every core).
``--threads 1`` runs every case on one thread: the fairest comparison of the algorithms, and the steadiest on
a machine shared with other work. ``OPENBLAS_NUM_THREADS=1 python -m flashmath.bench speed`` keeps PyTorch's
default and makes only numpy's matrix products single-threaded: on a loaded machine OpenBLAS's two-thread
products, which synchronise at every call, can run several times slower than one thread (``flash`` makes
two such calls per tile, naive numpy two in all), while PyTorch splits its work once per call.

Ratios are printed against PyTorch (time) and naive numpy (time), from the same run. Nothing here asserts a
speed: machines differ and are shared. The course's targets (at N = 4096 ``flash`` at most 1.5 x
PyTorch's time and faster than naive; at N = 16384 at most 64 MiB of extra peak memory) are printed beside
the measured ratios, met or not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = ("naive", "flash", "torch")
SWEEP_BLOCKS_Q = (64, 128, 256, 512, 1024)
SWEEP_BLOCKS_K = (256, 512, 1024, 2048, 4096)
MIB = 2**20


# ----------------------------------------------------------------------------------------------------------------
# The cases (run inside the worker process)
# ----------------------------------------------------------------------------------------------------------------


def inplace_attention(q, k, v):
    """``softmax(Q K^T / sqrt(D)) V`` with ``X`` and ``Y`` materialised in float32, in place where possible.

    The benchmark's "naive" case: the fastest N x M way numpy has (one N x M array, overwritten in place), so the
    comparison with flash_attention is fair. The course's standard attention, whose X, Y and A are three arrays
    written to memory, is :func:`flashmath.attention.standard_attention`.
    """
    import numpy as np

    scale = q.dtype.type(1 / np.sqrt(q.shape[-1]))
    x = (q * scale) @ k.T  # X = Q K^T / sqrt(D): (N, M), the one N x M allocation
    x -= x.max(axis=1, keepdims=True)  # subtract each row's max
    np.exp(x, out=x)  # exp in place: X becomes the unnormalised Y
    x /= x.sum(axis=1, keepdims=True)  # Y = softmax(X)
    return x @ v  # A = Y V: (N, D)


def _make_case(case: str, q, k, v, block_q=None, block_k=None):
    """A function of no arguments running ``case`` on ``q, k, v`` and returning a numpy array."""
    if case == "naive":
        return lambda: inplace_attention(q, k, v)
    if case == "flash":
        from flashmath.flash import flash_attention

        return lambda: flash_attention(q, k, v, block_q=block_q, block_k=block_k)
    if case == "torch":
        import torch

        tq, tk, tv = (torch.from_numpy(a)[None, None] for a in (q, k, v))  # (1, 1, N, D): batch, heads
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(tq, tk, tv)[0, 0].numpy()
    raise ValueError(f"unknown case {case!r}; expected one of {CASES}")


def _inputs(N: int, D: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((N, D), dtype=np.float32) for _ in range(3))


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _max_rss_kib() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB on Linux


def _max_row_error(out, q, k, v, rows: int = 8) -> float:
    """Largest absolute error of ``rows`` evenly spaced output rows against float64 attention of those rows."""
    import numpy as np

    from flashmath.attention import attention

    picks = np.unique(np.linspace(0, len(q) - 1, rows).astype(int))
    ref = attention(q[picks].astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    return float(np.max(np.abs(np.asarray(out, np.float64)[picks] - ref)))


def measure(case: str, N: int, D: int = 64, repeats: int = 3, block_q=None, block_k=None, threads=None) -> dict:
    """Run one case in this process: ``{"ms": best time, "ms_all": [...], "peak_mib", "peak_exact", "error"}``.

    ``threads`` sets PyTorch's thread count for the torch case (numpy's BLAS threads are set by the caller,
    through the environment of this process, before numpy is imported).
    """
    if case == "torch" and threads:
        import torch

        torch.set_num_threads(threads)
    q, k, v = _inputs(N, D)
    q_small, k_small, v_small = _inputs(min(N, 256), D, seed=1)
    _make_case(case, q_small, k_small, v_small, block_q, block_k)()  # warm-up: load code, buffers
    run = _make_case(case, q, k, v, block_q, block_k)

    exact = _reset_peak()
    status = _status_kib("VmRSS") if exact else None
    if status is None:
        exact = False
    before = _max_rss_kib() if status is None else status
    out = run()
    peak = _status_kib("VmHWM") if exact else None
    after = _max_rss_kib() if peak is None else peak
    error = _max_row_error(out, q, k, v)
    del out

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return {
        "ms": min(times),
        "ms_all": times,
        "peak_mib": max(after - before, 0) / 1024,
        "peak_exact": exact,
        "error": error,
    }


def sweep(N: int, D: int, rounds: int, blocks_q, blocks_k) -> dict:
    """Best time of ``flash_attention`` for each ``(block_q, block_k)``, measured in interleaved rounds."""
    from flashmath.flash import flash_attention

    q, k, v = _inputs(N, D)
    pairs = [(bq, bk) for bq in blocks_q for bk in blocks_k]
    best = {pair: float("inf") for pair in pairs}
    flash_attention(q, k, v)  # warm-up
    for _ in range(rounds):  # every pair once per round, so a burst of load hits all of them alike
        for bq, bk in pairs:
            start = time.perf_counter()
            flash_attention(q, k, v, block_q=bq, block_k=bk)
            best[(bq, bk)] = min(best[(bq, bk)], (time.perf_counter() - start) * 1e3)
    return {f"{bq}x{bk}": ms for (bq, bk), ms in best.items()}


# ----------------------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------------------


def _torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _run_worker(args: list, timeout: float, threads=None) -> dict:
    """Run ``measure`` or ``sweep`` in a fresh Python process; return its JSON result or ``{"failed": why}``."""
    command = [sys.executable, "-m", "flashmath.bench.speed", "--worker", json.dumps(args)]
    env = dict(os.environ)
    if threads:  # BLAS and OpenMP read these when they start, so they must be set before the process starts
        env.update({name: str(threads) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"failed": f"exit status {done.returncode}: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flashmath.bench speed",
        description="Time and peak extra memory of flash_attention, naive numpy attention and PyTorch's "
        "scaled_dot_product_attention (CPU), N = M, float32, each case in its own process.",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384], help="values of N = M")
    parser.add_argument("--dim", type=int, default=64, help="head dimension D (default 64)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per case (default: 5, 3 from N = 16384)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="cases to run")
    parser.add_argument("--block-q", type=int, default=None, help="flash_attention's block_q (default: its own)")
    parser.add_argument("--block-k", type=int, default=None, help="flash_attention's block_k (default: its own)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per case (default 900)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for every case (numpy's BLAS and PyTorch alike); default: each library's own choice",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="time flash_attention's block sizes at the first size instead"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the sweep (default 5)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


def _fmt_ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _print_sweep(args) -> int:
    N = args.sizes[0]
    print(f"flash_attention block sizes, N = M = {N}, D = {args.dim}, float32: best of {args.rounds} rounds (ms)")
    job = ["sweep", N, args.dim, args.rounds, SWEEP_BLOCKS_Q, SWEEP_BLOCKS_K]
    result = _run_worker(job, args.timeout * 4, args.threads)
    if "failed" in result:
        print(f"  failed: {result['failed']}")
        return 1
    fastest = min(result.values())
    print("block_q \\ block_k " + "".join(f"{bk:>9}" for bk in SWEEP_BLOCKS_K))
    for bq in SWEEP_BLOCKS_Q:
        cells = "".join(f"{result[f'{bq}x{bk}']:9.1f}" for bk in SWEEP_BLOCKS_K)
        print(f"{bq:>17} {cells}")
    best = min(result, key=lambda name: result[name])
    print(f"fastest: {best} ({fastest:.1f} ms); each time relative to it:")
    for bq in SWEEP_BLOCKS_Q:
        print(f"{bq:>17} " + "".join(f"{result[f'{bq}x{bk}'] / fastest:9.2f}" for bk in SWEEP_BLOCKS_K))
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.worker:
        job = json.loads(args.worker)
        result = measure(*job[1:]) if job[0] == "measure" else sweep(*job[1:])
        print(json.dumps(result))
        return 0
    if any(n < 1 for n in args.sizes) or args.dim < 1:
        print("sizes and --dim must be positive", file=sys.stderr)
        return 2
    if args.sweep:
        return _print_sweep(args)

    cases = [c for c in CASES if c in args.cases]
    if "torch" in cases and not _torch_available():
        print("PyTorch is not installed: the torch case is skipped. For the CPU build:")
        print("  pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
              "pip install -e '.[bench]' -c constraints.txt   (in the course's folder; README, \"Benchmarks\")")
        cases.remove("torch")
    from flashmath.flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q

    bq, bk = args.block_q or DEFAULT_BLOCK_Q, args.block_k or DEFAULT_BLOCK_K
    threads = f"{args.threads} thread(s) per case" if args.threads else "each library's default threads"
    print(
        f"attention, N = M, D = {args.dim}, float32, {os.cpu_count()} CPUs, {threads}; "
        f"flash_attention blocks {bq} x {bk}; each case in its own process"
    )
    header = ("N = M", 6), ("case", 6), ("best ms", 9), ("vs torch", 9), ("vs naive", 9), ("extra peak MiB", 15)
    print(" ".join(f"{name:>{width}}" for name, width in header) + f" {'max err':>9}")
    results, failed = {}, False
    for N in args.sizes:
        repeats = args.repeats or (5 if N < 16384 else 3)
        row = {}
        for case in cases:
            job = ["measure", case, N, args.dim, repeats, bq, bk, args.threads]
            row[case] = _run_worker(job, args.timeout, args.threads)
        results[N] = row
        for case in cases:
            r = row[case]
            if "failed" in r:
                failed = True
                print(f"{N:>6} {case:>6}  failed: {r['failed']}")
                continue
            ms = r["ms"]
            t_torch = row.get("torch", {}).get("ms")
            t_naive = row.get("naive", {}).get("ms")
            peak = f"{'' if r['peak_exact'] else '~'}{r['peak_mib']:.1f}"
            print(
                f"{N:>6} {case:>6} {ms:9.1f} {_fmt_ratio(ms, t_torch):>9} {_fmt_ratio(ms, t_naive):>9} "
                f"{peak:>15} {r['error']:9.1e}"
            )
    _print_targets(results)
    return 1 if failed else 0


def _print_targets(results: dict) -> None:
    """The course's targets for flash_attention against this run's numbers (met or not)."""
    print("targets:")
    r = results.get(4096, {})
    flash, torch, naive = (r.get(c, {}).get("ms") for c in ("flash", "torch", "naive"))
    if flash and torch:
        verdict = "met" if flash <= 1.5 * torch else "NOT met"
        print(f"  N = 4096: flash / torch time = {flash / torch:.2f} (target <= 1.5): {verdict}")
    if flash and naive:
        verdict = "met" if flash < naive else "NOT met"
        print(f"  N = 4096: flash / naive time = {flash / naive:.2f} (target < 1): {verdict}")
    r = results.get(16384, {})
    if "peak_mib" in r.get("flash", {}):
        peak = r["flash"]["peak_mib"]
        print(f"  N = 16384: flash extra peak = {peak:.1f} MiB (target <= 64): {'met' if peak <= 64 else 'NOT met'}")
    if "peak_mib" in r.get("naive", {}):
        print(f"  N = 16384: naive extra peak = {r['naive']['peak_mib']:.1f} MiB (one N x M float32 matrix: 1024 MiB)")


if __name__ == "__main__":
    sys.exit(main())
