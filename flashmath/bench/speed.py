"""Speed and peak memory of ``flash_attention`` against naive numpy attention and PyTorch, in one run.

    python -m flashmath.bench speed                      # N = M in 1024, 4096, 16384; D in 64, 128; causal and
                                                         # not; default threads, then one thread
    python -m flashmath.bench speed --threads 1          # one thread only (the steadiest on a loaded machine)
    python -m flashmath.bench speed --quick              # a smoke run: N = M = 512, 1024, D = 64 (seconds)
    python -m flashmath.bench speed --breakdown          # where flash_attention's time goes (exp, products...)
    python -m flashmath.bench speed --sweep              # time block sizes, to choose the defaults

Three cases, each measured in its own subprocess so that one case's allocations and libraries cannot affect
another's memory figure:

``naive``
    numpy attention as a careful user writes it: the scale folded into ``Q``, then ``X = Q K^T``
    materialised as one float32 ``(N, M)`` matrix, (causal: the masked pairs set to ``-inf`` a block of rows at a
    time), turned into ``Y = softmax(X)`` in place (max subtracted, ``exp``, divided by the row sums), then
    ``A = Y V``.
``flash``
    :func:`flashmath.flash.flash_attention` with its default block sizes (or ``--block-q``/``--block-k``) and
    ``workers`` = the thread count (default threads: the cores available).
``torch``
    ``torch.nn.functional.scaled_dot_product_attention`` on the CPU (the ``bench`` extra; ``is_causal`` for the
    causal rows, where N = M makes its top-left alignment the course's bottom-right one). Skipped, saying so,
    when PyTorch is not installed.

Time: the best of the first call and ``--repeats`` more, in milliseconds; the best is the least disturbed by
other processes. Extra peak memory: the peak resident set size during the first call minus the resident size
just before it (Linux resets the peak through ``/proc/self/clear_refs``; elsewhere the lifetime peak from
``getrusage`` is used and marked ``~``). A small warm-up call first loads each library's code and buffers, so
the figure is the attention call's own. Inputs are float32, drawn from a seeded generator. Each case also checks
8 output rows against a float64 computation of those rows.

Threads. "default": every library picks its own (numpy's OpenBLAS and PyTorch use every core;
``flash_attention`` runs its query tiles on every available core with BLAS on one thread each). "1": every case
on one thread (BLAS and OpenMP through their environment variables, PyTorch through ``set_num_threads``,
``flash_attention`` with ``workers=1``): the fairest comparison of the algorithms, and the steadiest on a machine
shared with other work. The header names the BLAS library, its version and the kernel it chose for this CPU
(threadpoolctl), and the cores.

Ratios are printed against PyTorch (time) and naive numpy (time), from the same run, then the course's targets,
met or not, for the default threads: flash / SDPA at most 0.8 at N = M = 4096 and 16384 with D = 64; flash faster
than naive numpy everywhere; flash's extra peak memory at most 64 MiB at 16384. Nothing here asserts a speed:
machines differ and are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

CASES = ("naive", "flash", "torch")
SWEEP_BLOCKS_Q = (64, 128, 256, 512, 1024)
SWEEP_BLOCKS_K = (256, 512, 1024, 2048, 4096)
MIB = 2**20


# ----------------------------------------------------------------------------------------------------------------
# The cases (run inside the worker process)
# ----------------------------------------------------------------------------------------------------------------


def inplace_attention(q, k, v, causal: bool = False):
    """``softmax(Q K^T / sqrt(D)) V`` with ``X`` and ``Y`` materialised in float32, in place where possible.

    The benchmark's "naive" case: the fastest N x M way numpy has (one N x M array, overwritten in place), so the
    comparison with flash_attention is fair. ``causal``: query ``n`` sees keys ``m <= n + M - N`` (bottom-right,
    the course's alignment), the other scores set to ``-inf`` a block of rows at a time (no N x M mask). The
    course's standard attention, whose X, Y and A are three arrays written to memory, is
    :func:`flashmath.attention.standard_attention`.
    """
    import numpy as np

    scale = q.dtype.type(1 / np.sqrt(q.shape[-1]))
    x = (q * scale) @ k.T  # X = Q K^T / sqrt(D): (N, M), the one N x M allocation
    if causal:
        N, M = x.shape
        keys = np.arange(M)
        for r0 in range(0, N, 256):  # a (256, M) boolean mask at a time
            rows = np.arange(r0, min(r0 + 256, N))
            np.copyto(x[r0 : r0 + 256], -np.inf, where=keys > rows[:, None] + (M - N))
    x -= x.max(axis=1, keepdims=True)  # subtract each row's max
    np.exp(x, out=x)  # exp in place: X becomes the unnormalised Y
    x /= x.sum(axis=1, keepdims=True)  # Y = softmax(X)
    return x @ v  # A = Y V: (N, D)


def _make_case(case: str, q, k, v, block_q=None, block_k=None, causal=False, threads=None):
    """A function of no arguments running ``case`` on ``q, k, v`` and returning a numpy array."""
    if case == "naive":
        return lambda: inplace_attention(q, k, v, causal)
    if case == "flash":
        from flashmath.flash import flash_attention

        return lambda: flash_attention(q, k, v, block_q=block_q, block_k=block_k, causal=causal, workers=threads)
    if case == "torch":
        import torch

        tq, tk, tv = (torch.from_numpy(a)[None, None] for a in (q, k, v))  # (1, 1, N, D): batch, heads
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(tq, tk, tv, is_causal=causal)[0, 0].numpy()
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


def _max_row_error(out, q, k, v, causal: bool = False, rows: int = 8) -> float:
    """Largest absolute error of ``rows`` evenly spaced output rows against float64 attention of those rows."""
    import numpy as np

    from flashmath.attention import attention

    picks = np.unique(np.linspace(0, len(q) - 1, rows).astype(int))
    mask = None
    if causal:  # row n sees keys m <= n + M - N
        mask = np.arange(len(k)) <= picks[:, None] + (len(k) - len(q))
    ref = attention(q[picks].astype(np.float64), k.astype(np.float64), v.astype(np.float64), mask=mask)
    return float(np.max(np.abs(np.asarray(out, np.float64)[picks] - ref)))


def default_repeats(N: int) -> int:
    """Timed calls after the first when ``--repeats`` is not given: 20 up to N = 2048, where one call takes a few
    milliseconds and the best of four was mostly warm-up and noise (measured on 2 December 2026, N = M = 1024,
    D = 64, no mask: flash/naive 1.70 from four calls, 0.92 from 21); 3 below N = 16384; 1 from 16384, where one
    call takes seconds."""
    return 20 if N <= 2048 else 3 if N < 16384 else 1


def measure(
    case: str, N: int, D: int = 64, repeats: int = 3, block_q=None, block_k=None, threads=None, causal: bool = False
) -> dict:
    """Run one case in this process: ``{"ms": best time, "ms_all": [...], "peak_mib", "peak_exact", "error"}``.

    ``threads`` sets PyTorch's thread count for the torch case and ``flash_attention``'s ``workers`` (numpy's
    BLAS threads are set by the caller, through the environment of this process, before numpy is imported);
    None: each library's default. ``ms_all`` holds the first call's time, then the ``repeats`` others.
    """
    if case == "torch" and threads:
        import torch

        torch.set_num_threads(threads)
    q, k, v = _inputs(N, D)
    q_small, k_small, v_small = _inputs(min(N, 256), D, seed=1)
    _make_case(case, q_small, k_small, v_small, block_q, block_k, causal, threads)()  # warm-up: code, buffers
    run = _make_case(case, q, k, v, block_q, block_k, causal, threads)

    exact = _reset_peak()
    status = _status_kib("VmRSS") if exact else None
    if status is None:
        exact = False
    before = _max_rss_kib() if status is None else status
    start = time.perf_counter()
    out = run()
    times = [(time.perf_counter() - start) * 1e3]
    peak = _status_kib("VmHWM") if exact else None
    after = _max_rss_kib() if peak is None else peak
    error = _max_row_error(out, q, k, v, causal)
    del out

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


def breakdown(N: int, D: int, block_q=None, block_k=None) -> dict:
    """Milliseconds per kind of work in ``flash_attention``'s fa2 loop at ``N = M``, on one thread.

    The loop's operations replayed one kind at a time on the same tiles (non-causal): the two matrix products
    ``Q_i K_j^T`` and ``P V_j``, ``exp`` (with its subtraction), the row max and sum, and the rescaling of the
    accumulator; ``total`` is one whole ``flash_attention(..., workers=1)`` call. Each figure is the best of 3.
    """
    import numpy as np
    from threadpoolctl import threadpool_limits

    from flashmath.flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, flash_attention

    bq, bk = block_q or DEFAULT_BLOCK_Q, block_k or DEFAULT_BLOCK_K
    q, k, v = _inputs(N, D)
    pairs = [(r0, c0) for r0 in range(0, N, bq) for c0 in range(0, N, bk)]
    qs = q * np.float32(1 / np.sqrt(D))  # the scaled Q, as flash_attention folds the scale in: scores of size 1
    x = qs[:bq] @ k[:bk].T  # (exp of unscaled scores would underflow, a slow path of numpy's exp)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    g = x.max(axis=1)
    acc = np.zeros((bq, D), np.float32)
    work = {
        "Q K^T": lambda r0, c0: qs[r0 : r0 + bq] @ k[c0 : c0 + bk].T,
        "P V": lambda r0, c0: p @ v[c0 : c0 + bk],
        "exp (and - max)": lambda r0, c0: np.exp(np.subtract(x, g[:, None], out=p), out=p),
        "row max, row sum": lambda r0, c0: (x.max(axis=-1), p.sum(axis=-1)),
        "rescale acc": lambda r0, c0: acc.__imul__(np.float32(0.5)),
    }
    result = {}
    with threadpool_limits(limits=1, user_api="blas"):
        for name, fn in work.items():
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                for r0, c0 in pairs:
                    fn(r0, c0)
                best = min(best, time.perf_counter() - start)
            result[name] = best * 1e3
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        flash_attention(q, k, v, block_q=bq, block_k=bk, workers=1)
        best = min(best, time.perf_counter() - start)
    result["total"] = best * 1e3
    return result


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


def _threads_setting(text: str) -> int | None:
    if text == "default":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a thread count is 'default' or a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a thread count must be positive, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flashmath.bench speed",
        description="Time and peak extra memory of flash_attention, naive numpy attention and PyTorch's "
        "scaled_dot_product_attention (CPU), N = M, float32, each case in its own process.",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384], help="values of N = M")
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128], help="head dimensions D (default 64 128)")
    parser.add_argument(
        "--masks",
        nargs="+",
        choices=("none", "causal"),
        default=["none", "causal"],
        help="no mask and/or causal (default both)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed calls per case after the first (default: 20 up to N = 2048, where a call takes "
        "milliseconds; 3 below N = 16384; 1 from N = 16384)",
    )
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="cases to run")
    parser.add_argument("--block-q", type=int, default=None, help="flash_attention's block_q (default: its own)")
    parser.add_argument("--block-k", type=int, default=None, help="flash_attention's block_k (default: its own)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per case (default 900)")
    parser.add_argument(
        "--threads",
        type=_threads_setting,
        nargs="+",
        default=[None, 1],
        help="thread settings to run, each a positive count or 'default' (each library's own choice); "
        "default: 'default 1'. --threads 1: one thread for every case only",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: N = M = 512 and 1024, D = 64, both masks, one repeat"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="milliseconds per kind of work in flash_attention at the first size and D, one thread",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="time flash_attention's block sizes at the first size instead"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the sweep (default 5)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=None, help=argparse.SUPPRESS)  # the old name of --dims
    return parser


def _fmt_ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _print_sweep(args) -> int:
    N, D = args.sizes[0], args.dims[0]
    print(f"flash_attention block sizes, N = M = {N}, D = {D}, float32: best of {args.rounds} rounds (ms)")
    job = ["sweep", N, D, args.rounds, SWEEP_BLOCKS_Q, SWEEP_BLOCKS_K]
    result = _run_worker(job, args.timeout * 4, args.threads[0])
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


def _print_breakdown(args) -> int:
    N, D = args.sizes[0], args.dims[0]
    result = _run_worker(["breakdown", N, D, args.block_q, args.block_k], args.timeout, 1)
    if "failed" in result:
        print(f"  failed: {result['failed']}")
        return 1
    total = result.pop("total")
    print(
        f"flash_attention, N = M = {N}, D = {D}, float32, no mask, one thread: {total:.0f} ms in all; "
        "its operations replayed one kind at a time (ms, share of the whole call):"
    )
    for name, ms in result.items():
        print(f"  {name:<18} {ms:8.1f} {ms / total:6.0%}")
    rest = total - sum(result.values())
    print(f"  {'the rest':<18} {rest:8.1f} {rest / total:6.0%}   (loop, tile masks, copies, the final division)")
    return 0


def _environment_lines() -> list[str]:
    import platform

    from flashmath._checks import available_cores
    from flashmath.precision import blas_description

    overrides = " ".join(
        f"{name}={os.environ[name]}"
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE")
        if name in os.environ
    )
    return [
        f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
        f"{available_cores()} available to this process; load average {os.getloadavg()[0]:.1f}"
        if hasattr(os, "getloadavg")
        else f"CPU: {os.cpu_count()} logical CPUs",
        f"numpy's BLAS: {blas_description()}" + (f"; environment: {overrides}" if overrides else ""),
    ]


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.worker:
        job = json.loads(args.worker)
        functions: dict[str, Callable[..., dict]] = {"measure": measure, "sweep": sweep, "breakdown": breakdown}
        print(json.dumps(functions[job[0]](*job[1:])))
        return 0
    if args.dim is not None:
        args.dims = [args.dim]
    if args.quick:
        args.sizes, args.dims, args.repeats = [512, 1024], [64], args.repeats or 1
    if any(n < 1 for n in args.sizes) or any(d < 1 for d in args.dims):
        print("sizes and dimensions must be positive", file=sys.stderr)
        return 2
    if args.sweep:
        return _print_sweep(args)
    if args.breakdown:
        return _print_breakdown(args)

    cases = [c for c in CASES if c in args.cases]
    if "torch" in cases and not _torch_available():
        print("PyTorch is not installed: the torch case is skipped. For the CPU build:")
        print(
            "  pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
            "pip install -e '.[bench]' -c constraints.txt   (in the course's folder; README, \"Benchmarks\")"
        )
        cases.remove("torch")
    from flashmath.flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q

    bq, bk = args.block_q or DEFAULT_BLOCK_Q, args.block_k or DEFAULT_BLOCK_K
    print(
        f"attention, N = M, float32; flash_attention blocks {bq} x {bk}; each case in its own process; "
        f"time: best of the first call and {args.repeats or '20 (to N = 2048; 3 below N = 16384; 1 from it)'} more"
    )
    for line in _environment_lines():
        print(line)
    results, failed = {}, False
    for threads in args.threads:
        label = "default threads" if threads is None else f"{threads} thread(s) per case"
        print()
        print(f"{label}: flash = flash_attention(workers={threads or 'None'}), torch = SDPA, naive = numpy N x M")
        header = [
            ("N = M", 6),
            ("D", 4),
            ("mask", 6),
            ("flash ms", 9),
            ("torch ms", 9),
            ("naive ms", 9),
            ("flash/SDPA", 10),
            ("flash/naive", 11),
            ("peak MiB flash", 14),
            ("torch", 7),
            ("naive", 7),
            ("flash err", 9),
        ]
        print(" ".join(f"{name:>{width}}" for name, width in header))
        for N in args.sizes:
            repeats = args.repeats if args.repeats is not None else default_repeats(N)
            for D in args.dims:
                for mask in args.masks:
                    row = {}
                    for case in cases:
                        job = ["measure", case, N, D, repeats, bq, bk, threads, mask == "causal"]
                        row[case] = _run_worker(job, args.timeout, threads)
                    results[threads, N, D, mask] = row
                    for case, r in row.items():
                        if "failed" in r:
                            failed = True
                            print(f"{N:>6} {D:>4} {mask:>6}  {case} failed: {r['failed']}")
                    ms = {case: r.get("ms") for case, r in row.items()}
                    peaks = {
                        case: (f"{'' if r['peak_exact'] else '~'}{r['peak_mib']:.1f}" if "peak_mib" in r else "-")
                        for case, r in row.items()
                    }
                    err = row.get("flash", {}).get("error")

                    def cell(value, width, fmt=".1f"):
                        return f"{value:>{width}{fmt}}" if value is not None else f"{'-':>{width}}"

                    print(
                        f"{N:>6} {D:>4} {mask:>6} {cell(ms.get('flash'), 9)} {cell(ms.get('torch'), 9)} "
                        f"{cell(ms.get('naive'), 9)} {_fmt_ratio(ms.get('flash'), ms.get('torch')):>10} "
                        f"{_fmt_ratio(ms.get('flash'), ms.get('naive')):>11} {peaks.get('flash', '-'):>14} "
                        f"{peaks.get('torch', '-'):>7} {peaks.get('naive', '-'):>7} {cell(err, 9, '.1e')}",
                        flush=True,
                    )
    _print_targets(results, args.threads[0])
    return 1 if failed else 0


def _print_targets(results: dict, threads) -> None:
    """The course's targets for flash_attention against this run's numbers (met or not), for the first thread
    setting run (the default threads unless ``--threads`` says otherwise)."""
    label = "default threads" if threads is None else f"{threads} thread(s)"
    print()
    print(f"targets ({label}):")
    rows = {key[1:]: row for key, row in results.items() if key[0] == threads}
    if not rows:
        print("  nothing measured")
        return
    lines = 0
    for (N, D, mask), row in rows.items():
        flash, torch = row.get("flash", {}).get("ms"), row.get("torch", {}).get("ms")
        if N in (4096, 16384) and D == 64 and flash and torch:
            verdict = "met" if flash <= 0.8 * torch else "NOT met"
            print(f"  N = {N}, D = {D}, {mask}: flash / SDPA time = {flash / torch:.2f} (target <= 0.8): {verdict}")
            lines += 1
    naive_ratios = [
        (row["flash"]["ms"] / row["naive"]["ms"], key)
        for key, row in rows.items()
        if row.get("flash", {}).get("ms") and row.get("naive", {}).get("ms")
    ]
    if naive_ratios:
        worst, (N, D, mask) = max(naive_ratios)
        verdict = "met" if worst < 1 else "NOT met"
        print(
            f"  flash / naive time, largest over {len(naive_ratios)} rows = {worst:.2f} at N = {N}, D = {D}, "
            f"{mask} (target < 1 everywhere): {verdict}"
        )
        lines += 1
    peaks = [
        (row["flash"]["peak_mib"], key)
        for key, row in rows.items()
        if key[0] == 16384 and "peak_mib" in row.get("flash", {})
    ]
    if peaks:
        peak, (N, D, mask) = max(peaks)
        verdict = "met" if peak <= 64 else "NOT met"
        print(f"  N = 16384: flash extra peak, largest = {peak:.1f} MiB (D = {D}, {mask}; target <= 64): {verdict}")
        lines += 1
    if not lines:
        print(
            "  none applies to these sizes (the targets are for N = M = 4096 and 16384 with D = 64, the "
            "ratio to naive numpy at every size)"
        )


if __name__ == "__main__":
    sys.exit(main())
