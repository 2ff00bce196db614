"""``python -m flashmath.bench <name> [options]``: run one benchmark; ``python -m flashmath.bench <name> --help``
lists that benchmark's options."""

from __future__ import annotations

import argparse
import importlib
import sys

from flashmath.bench import plain_text

BENCHMARKS = {
    "sliders": ("flashmath.bench.sliders", "milliseconds per update of every widget, against Jupyter's inline PNG"),
    "speed": ("flashmath.bench.speed", "time and peak memory of flash_attention against naive numpy and PyTorch"),
    "gpu": (
        "flashmath.bench.gpu",
        "check and time the Triton kernels (chapters 11-12) on a CUDA GPU; says so without one",
    ),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # -h belongs to the benchmark once one is named (`speed --help` lists the speed benchmark's options), so the
    # top-level parser does not take it: it only picks the benchmark.
    parser = argparse.ArgumentParser(
        prog="python -m flashmath.bench",
        description=plain_text(__doc__),
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help (or, after a name, its options)")
    parser.add_argument(
        "name", nargs="?", choices=sorted(BENCHMARKS), help="; ".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items())
    )
    args, rest = parser.parse_known_args(argv)
    if args.name is None:
        if args.help:
            parser.print_help()
            return 0
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: name a benchmark: {', '.join(sorted(BENCHMARKS))}", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[args.name][0])
    return module.main(["--help", *rest] if args.help else rest)


if __name__ == "__main__":
    sys.exit(main())
