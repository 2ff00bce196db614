"""Benchmarks named in the README; each prints ratios against a baseline measured in the same run.

    python -m flashmath.bench sliders    # milliseconds per slider update, every widget of the course
    python -m flashmath.bench speed      # flash_attention against naive numpy and PyTorch (the ``bench`` extra)
    python -m flashmath.bench gpu        # the Triton kernels checked and timed on a CUDA GPU (the ``triton`` extra)

Machines are noisy, so nothing here is a pass/fail test: each command measures its own baseline in the same
process and prints the ratio beside it.
"""
