"""``python -m flashmath.bench <name> [options]``: run one benchmark (``--help`` lists them)."""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = {
    "sliders": ("flashmath.bench.sliders", "milliseconds per update of every widget, against Jupyter's inline PNG"),
    "speed": ("flashmath.bench.speed", "time and peak memory of flash_attention against naive numpy and PyTorch"),
    "gpu": ("flashmath.bench.gpu", "check and time the Triton kernels (chapters 11-12) on a CUDA GPU; says so without one"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m flashmath.bench", description=__doc__)
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="; ".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items()))
    args, rest = parser.parse_known_args(argv)
    module = importlib.import_module(BENCHMARKS[args.name][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
