"""``python -m flashmath.bench gpu``: check and time the Triton kernels of chapters 11-12 on a CUDA GPU.

1. Checks, in float16 on the GPU: the forward kernel's output and the backward kernels' gradients (both ways of
   accumulating ``dQ``) against float64 references, by FlashAttention's relative rule (the error at most twice that
   of naive attention computed and differentiated in float16), with and without a causal mask, for ``N = M`` and
   for ``N != M`` with key padding (cases without fully masked rows, where naive attention gives NaN).
2. Timings (``triton.testing.do_bench``, milliseconds): forward, and forward + backward, of the kernels against
   PyTorch's ``scaled_dot_product_attention`` and naive attention (``softmax(Q K^T) V``), one batch of 8 heads,
   ``D = 64``, for ``N = M`` from 1024 to 16384 (naive attention runs out of memory first: shown as ``oom``).

On a machine without a CUDA GPU (or without the ``triton`` extra) it says so and exits with status 0: the kernels
are checked there by the test suite, in Triton's interpreter. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import math

from flashmath.bench import plain_text


def _available() -> str | None:
    """None when a CUDA GPU, PyTorch and Triton are here; else why not."""
    missing = [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]
    if missing:
        from flashmath.triton_setup import INSTALL_HINT

        return (
            f"the triton extra is not installed ({' and '.join(missing)} missing): {INSTALL_HINT}; "
            "nothing to check or time here"
        )
    import torch

    if not torch.cuda.is_available():
        return (
            "no CUDA GPU here: the kernels run only in Triton's interpreter, which the test suite checks "
            "(python -m pytest tests/test_triton_kernel.py tests/test_triton_backward.py); nothing to time"
        )
    return None


def _naive(q, k, v, causal=False, keep=None):
    import torch

    x = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if keep is not None:
        x = x.masked_fill(~keep, float("-inf"))
    if causal:
        N, M = q.shape[-2], k.shape[-2]
        rows = torch.arange(N, device=q.device)[:, None]
        x = x.masked_fill(torch.arange(M, device=q.device)[None, :] > rows + (M - N), float("-inf"))
    return torch.softmax(x, dim=-1) @ v


def _grads(fn, q, k, v, grad_a):
    ts = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*ts)
    out.backward(grad_a.to(out.dtype))
    return out.detach(), [t.grad for t in ts]


def check(report=print, *, device="cuda", size: int = 1024, heads=(2, 4)) -> bool:
    """The checks of step 1 on ``device`` (the GPU; the tests run them small in the interpreter with ``"cpu"``);
    ``size`` is ``N = M`` of the square cases, ``heads`` the leading dimensions; ``report`` gets one line per check.
    True when all pass."""
    import torch

    from flashmath.triton_kernel import triton_flash_attention

    ok = True
    torch.manual_seed(0)
    short, long, cut = (3 * size) // 4 + 1, size, (2 * size) // 3  # N != M, keys past `cut` are padding
    cases = [
        (f"N = M = {size}", size, size, False, None),
        (f"N = M = {size}, causal", size, size, True, None),
        (f"N = {short}, M = {long}, causal, key padding", short, long, True, cut),
    ]  # no row fully masked
    for name, N, M, causal, valid in cases:
        q, k, v = (torch.randn(*heads, n, 64, device=device, dtype=torch.float64) for n in (N, M, M))
        grad_a = torch.randn(*heads, N, 64, device=device, dtype=torch.float64)
        keep = None
        if valid is not None:
            keep = torch.zeros(M, dtype=torch.bool, device=device)
            keep[:valid] = True
            keep = keep[None, :].expand(N, M)

        def naive(a, b, c, causal=causal, keep=keep):
            return _naive(a, b, c, causal, keep)

        ref_a, ref_grads = _grads(naive, q, k, v, grad_a)
        half = [t.half() for t in (q, k, v)]
        naive_a, naive_grads = _grads(naive, half[0], half[1], half[2], grad_a)
        for dq_mode in ("separate", "atomic"):

            def kernel(a, b, c, causal=causal, keep=keep, dq_mode=dq_mode):
                return triton_flash_attention(a, b, c, causal=causal, mask=keep, dq_mode=dq_mode)

            out, grads = _grads(kernel, half[0], half[1], half[2], grad_a)
            for what, got, naive_got, ref in zip(
                ("A", "dQ", "dK", "dV"), (out, *grads), (naive_a, *naive_grads), (ref_a, *ref_grads), strict=True
            ):
                err = (got.double() - ref).abs().max().item()
                err_naive = (naive_got.double() - ref).abs().max().item()
                passed = err <= 2 * err_naive and math.isfinite(err)
                ok &= passed
                report(
                    f"{'ok  ' if passed else 'FAIL'} {name}, dq_mode={dq_mode}, {what}: kernel error {err:.1e}, "
                    f"naive float16 {err_naive:.1e} (at most twice)"
                )
    return ok


def time_all(sizes, *, heads: int = 8, dim: int = 64, report=print) -> dict:
    """The timings of step 2: ``{(method, "forward" or "forward + backward"): [ms per size]}``."""
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from flashmath.triton_kernel import triton_flash_attention

    methods = {
        "Triton kernels": lambda q, k, v: triton_flash_attention(q, k, v),
        "PyTorch SDPA": F.scaled_dot_product_attention,
        "naive": _naive,
    }
    timings: dict = {}
    report(f"{'N = M':>7} " + " ".join(f"{m + ' ' + p:>30}" for m in methods for p in ("fwd", "fwd+bwd")) + "   (ms)")
    for size in sizes:
        q, k, v = (
            torch.randn(1, heads, size, dim, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3)
        )
        grad_a = torch.randn(1, heads, size, dim, device="cuda", dtype=torch.float16)
        row = []
        for name, method in methods.items():
            for part in ("forward", "forward + backward"):

                def run(method=method, part=part, q=q, k=k, v=v, grad_a=grad_a):
                    out = method(q, k, v)
                    if part != "forward":
                        torch.autograd.grad(out, (q, k, v), grad_a)

                try:
                    with torch.set_grad_enabled(part != "forward"):
                        ms = do_bench(run)
                except torch.cuda.OutOfMemoryError:
                    ms = float("nan")
                    torch.cuda.empty_cache()
                timings.setdefault((name, part), []).append(ms)
                row.append(ms)
        report(f"{size:7d} " + " ".join(f"{ms:30.3f}" if ms == ms else f"{'oom':>30}" for ms in row))
    return timings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flashmath.bench gpu", description=plain_text(__doc__.splitlines()[0])
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1024, 2048, 4096, 8192, 16384],
        help="sequence lengths N = M to time (default: 1024 ... 16384)",
    )
    parser.add_argument("--check-only", action="store_true", help="run the checks, not the timings")
    args = parser.parse_args(argv)
    why_not = _available()
    if why_not is not None:
        print(why_not)
        return 0
    import torch

    print(f"GPU: {torch.cuda.get_device_name()}")
    ok = check()
    if not args.check_only:
        time_all(args.sizes)
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1
