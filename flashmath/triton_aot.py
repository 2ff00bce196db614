"""Chapter 11's kernel compiled for an NVIDIA GPU on a machine that has none: what it needs per program.

Triton compiles for a GPU it does not run on: its code generator and the ``ptxas`` assembler it ships (in
``triton/backends/nvidia/bin``) need no device. :func:`compile_forward` compiles the kernel of
:func:`flashmath.triton_kernel.triton_flash_attention` as a launch on that GPU would
(:func:`flashmath.triton_kernel.compile_for_target`: the wrapper builds the launch's arguments from float16 tensors
``(1, 8, 1024, D)``, Triton's own launcher code specializes them, and ``triton.compile`` takes the result down to a
cubin for the chosen compute capability). Nothing runs: the report gives what the compiled program asks of the chip
(shared memory, registers and local memory per thread), not its speed or its results.

The compile runs in a child Python process with ``TRITON_INTERPRET=0``: a process that has imported
:mod:`flashmath.triton_kernel` on a machine without a GPU holds the kernel as an interpreted function, which
cannot be compiled. The child uses an empty cache directory so that ``ptxas`` runs and Triton prints its
report (``TRITON_DUMP_PTXAS_LOG=1``), whose register, stack-frame and spill lines are read back.

Requires the ``triton`` extra on Linux (Triton's NVIDIA backend and its ``ptxas``); written for Triton 3.9, whose
launcher internals (``create_function_from_signature``, ``JITFunction._pack_args``) it calls as a launch does.

Sources: Triton 3.9, ``runtime/jit.py`` (``JITFunction.run``: the binder, ``_pack_args``, ``compile``),
``backends/nvidia/compiler.py`` (``make_cubin`` runs ``ptxas -v``; ``knobs.nvidia.dump_ptxas_log``), and
``tools/compile.py`` (Triton's ahead-of-time compiler, which compiles for a ``--target`` such as ``cuda:80:32``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from flashmath._checks import integer
from flashmath.tiling import check_kernel_block

__all__ = ["CAPABILITIES", "CompiledForward", "compile_forward"]

CAPABILITIES = {80: "A100", 86: "RTX 30xx", 89: "L4, RTX 40xx", 90: "H100"}
"""The compute capabilities :func:`compile_forward` accepts, with GPUs of each (8.0 to 9.0: Triton 3.9's
``tl.dot`` on the matrix units these chips share; 10.0 and up compile to other instructions, chapter 11)."""

_MARK = "FLASHMATH_AOT "  # the child's result line


@dataclass(frozen=True)
class CompiledForward:
    """What one program of the compiled forward kernel needs on the chip (per thread block; nothing ran).

    Attributes:
        capability: the compute capability compiled for (80 = ``sm_80``).
        block_q, block_k, num_stages, num_warps, head_dim: the settings compiled.
        shared_bytes: dynamic shared memory per program, bytes (``metadata.shared`` of the compiled kernel).
        registers: 32-bit registers per thread (``ptxas``: "Used N registers"; at most 255).
        local_bytes: local memory per thread (off chip), bytes: the stack frame where a thread keeps what its
            registers cannot hold (``ptxas``: "bytes stack frame"); for this kernel, which has no local arrays, 0
            means no spill. On a GPU, the launched kernel's ``n_spills`` reports local memory per thread in 32-bit
            words (``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4``, Triton 3.9's ``backends/nvidia/driver.c``).
        spill_store_bytes, spill_load_bytes: bytes written and read by the spill instructions in the code, each
            counted once however often it runs (``ptxas``: "bytes spill stores", "bytes spill loads").
        async_copies: whether the key/value loads became asynchronous copies from HBM to shared memory
            (``cp.async`` in the PTX), which the compiler issues ahead of their use (how much they overlap the
            computation is its schedule, which this does not measure).
        warnings: what ``ptxas`` flagged in this compile besides its report, one message per line: its warning
            lines and its coded notes such as "(C7511) Potential Performance Loss: wgmma.mma_async instructions
            are serialized due to insufficient register resources ..." (``ptxas-blackwell``, sm_90a); empty if none.
    """

    capability: int
    block_q: int
    block_k: int
    num_stages: int
    num_warps: int
    head_dim: int
    shared_bytes: int
    registers: int
    local_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    async_copies: bool
    warnings: tuple[str, ...] = ()

    @property
    def arch(self) -> str:
        """The target Triton compiles for: ``sm_80``, and ``sm_90a`` from 9.0 up (the architecture-specific
        target, which has the ``wgmma`` instructions; ``sm_arch_from_capability`` in Triton 3.9's
        ``backends/nvidia/compiler.py``)."""
        return f"sm_{self.capability}{'a' if self.capability >= 90 else ''}"


_WARNING = re.compile(r"^ptxas[\w-]*\s+(?:warning\s*:\s*(.+)|info\s*:\s*(\(C\d+\).+))$")


def _warnings(stdout: str) -> list[tuple[str, ...]]:
    """``ptxas``'s warnings and coded notes, one tuple per compile: those printed before each result line."""
    found: list[tuple[str, ...]] = []
    current: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            found.append(tuple(current))
            current = []
        elif match := _WARNING.match(line.strip()):
            current.append((match.group(1) or match.group(2)).strip())
    return found


_DEFAULTS = {"block_q": 64, "block_k": 64, "num_stages": 2, "num_warps": 4, "head_dim": 64, "capability": 80}


def compile_forward(*settings: Mapping[str, int], timeout: float = 300.0) -> list[CompiledForward]:
    """Compile chapter 11's forward kernel (float16, no mask) for NVIDIA GPUs, here, without one.

    Args:
        settings: one mapping per compile, with any of these keys (the default in brackets): ``block_q`` and
            ``block_k`` (64), ``B_r`` and ``B_c``, powers of two from 16 to 256; ``num_stages`` (2), the
            software pipelining depth, 1 to 4; ``num_warps`` (4), warps per program, 1, 2, 4 or 8; ``head_dim``
            (64), ``D`` of ``q``, ``k`` and ``v``, 16 to 128; ``capability`` (80), the compute capability times 10,
            a key of :data:`CAPABILITIES` (80 for an A100, 90 for an H100). All compile in one child process.
        timeout: seconds all the compiles may take (``ptxas`` needs seconds when a setting spills).

    Returns:
        One :class:`CompiledForward` per mapping, in order.

    Raises:
        TypeError, ValueError: an unknown key, or a setting that is not an integer or is out of range (the message
        gives the range). flashmath.triton_kernel.ExtraNotInstalled: PyTorch or Triton missing. RuntimeError: a
        compile failed (the message carries Triton's error) or took longer than ``timeout``.
    """
    checked = [_checked(dict(setting)) for setting in settings]
    from flashmath.triton_setup import require_triton

    require_triton()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=cache, TRITON_DUMP_PTXAS_LOG="1")
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, set to keep its warning quiet
        try:
            child = subprocess.run(
                [sys.executable, "-m", "flashmath.triton_aot", json.dumps(checked)],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"compiling took longer than timeout={timeout} seconds") from None
    return _report(checked, child.returncode, child.stdout, child.stderr)


def _checked(setting: dict[str, int]) -> dict[str, int]:
    """One compile's settings, defaults filled in, each checked (see :func:`compile_forward`)."""
    unknown = sorted(set(setting) - set(_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown setting {unknown[0]!r}: the settings are {', '.join(_DEFAULTS)}")
    checked = {name: integer(setting.get(name, default), name) for name, default in _DEFAULTS.items()}
    for name in ("block_q", "block_k"):
        checked[name] = check_kernel_block(checked[name], name, _DEFAULTS[name])
    rules = {"num_stages": (1, 2, 3, 4), "num_warps": (1, 2, 4, 8), "capability": tuple(CAPABILITIES)}
    for name, allowed in rules.items():
        if checked[name] not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {checked[name]}")
    if not 16 <= checked["head_dim"] <= 128:
        raise ValueError(f"head_dim must be from 16 to 128, got {checked['head_dim']}")
    return checked


def _report(settings: list[dict[str, int]], returncode: int, stdout: str, stderr: str) -> list[CompiledForward]:
    """The child's output read back: one result line and one ``ptxas`` report per compile, in order."""
    results = [json.loads(line[len(_MARK) :]) for line in stdout.splitlines() if line.startswith(_MARK)]
    used = re.findall(r"Used (\d+) registers", stdout)
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", stdout)
    if returncode != 0 or not len(results) == len(used) == len(spills) == len(settings):
        detail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the kernel did not compile: {detail}")
    return [
        CompiledForward(
            **setting,
            shared_bytes=found["shared_bytes"],
            registers=int(registers),
            local_bytes=int(frame),
            spill_store_bytes=int(stores),
            spill_load_bytes=int(loads),
            async_copies=found["async_copies"],
            warnings=flagged,
        )
        for setting, found, registers, (frame, stores, loads), flagged in zip(
            settings, results, used, spills, _warnings(stdout), strict=True
        )
    ]


def _compile_here(settings: dict[str, int]) -> dict[str, object]:
    """The child's work: one compile, summed up as the parent reads it."""
    import torch

    from flashmath.triton_kernel import compile_for_target

    # N = M = 1024 as chapter 11's GPU cell: sizes and strides divisible by 16, as in any aligned launch
    q = torch.zeros(1, 8, 1024, settings["head_dim"], dtype=torch.float16)
    compiled = compile_for_target(
        q, q, q, capability=settings["capability"], block_q=settings["block_q"], block_k=settings["block_k"],
        num_warps=settings["num_warps"], num_stages=settings["num_stages"],
    )  # fmt: skip
    return {"shared_bytes": int(compiled.metadata.shared), "async_copies": "cp.async" in compiled.asm["ptx"]}


if __name__ == "__main__":  # the child process of compile_forward: each result line follows its ptxas report
    for setting in json.loads(sys.argv[1]):
        print(_MARK + json.dumps(_compile_here(setting)), flush=True)
