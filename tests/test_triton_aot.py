"""flashmath.triton_aot: chapter 11's kernel compiled for an A100 and an H100 on a machine without a GPU.

The compiles need the ``triton`` extra (its NVIDIA backend ships ``ptxas``) and are skipped, saying so, without
it. What the compiler decides changes with Triton's version, so these tests check what holds for any version:
the data-only counts of ``fm.hardware.tile_bytes`` are lower bounds, and the settings are checked before anything
compiles.
"""

import pytest
from helpers import needs_triton

from flashmath.hardware import tile_bytes
from flashmath.triton_aot import _report, compile_forward


@pytest.mark.parametrize(
    ("setting", "error", "words"),
    [
        ({"block": 64}, TypeError, "unknown setting 'block'"),
        ({"block_q": 48}, ValueError, "block_q must be a power of two from 16 to 256 .*, got 48"),
        ({"block_k": 512}, ValueError, "block_k must be a power of two"),
        ({"num_warps": 3}, ValueError, "num_warps must be one of 1, 2, 4, 8, got 3"),
        ({"num_stages": 0}, ValueError, "num_stages must be one of 1, 2, 3, 4"),
        ({"capability": 75}, ValueError, "capability must be one of 80, 86, 89, 90, got 75"),
        ({"head_dim": 256}, ValueError, "head_dim must be from 16 to 128, got 256"),
        ({"block_q": 64.0}, TypeError, "block_q"),
    ],
)
def test_bad_settings_are_refused_before_compiling(setting, error, words):
    with pytest.raises(error, match=words):
        compile_forward(dict(setting))


def test_a_failed_compile_is_reported_with_the_childs_last_line():
    setting = {"block_q": 64, "block_k": 64, "num_stages": 2, "num_warps": 4, "head_dim": 64, "capability": 80}
    with pytest.raises(RuntimeError, match="did not compile: CompilationError: at 12:4"):
        _report([setting], 1, "", "Traceback ...\nCompilationError: at 12:4")
    # a report without its ptxas lines (Triton no longer prints them) is an error, not a zero
    with pytest.raises(RuntimeError, match="did not compile"):
        _report([setting], 0, 'FLASHMATH_AOT {"shared_bytes": 1, "async_copies": true}\n', "")


def test_the_ptxas_report_is_read_per_compile():
    settings = [
        {"block_q": 64, "block_k": 64, "num_stages": 2, "num_warps": 4, "head_dim": 64, "capability": c}
        for c in (80, 90)
    ]
    stdout = "\n".join(
        [
            "ptxas info    : Function properties for _fa2_forward",
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
            "ptxas info    : Used 163 registers, used 1 barriers, 512 bytes cmem[0]",
            'FLASHMATH_AOT {"shared_bytes": 24640, "async_copies": true}',
            "    8 bytes stack frame, 352 bytes spill stores, 320 bytes spill loads",
            "ptxas-blackwell info    : Used 255 registers, used 1 barriers",
            'FLASHMATH_AOT {"shared_bytes": 41024, "async_copies": false}',
        ]
    )
    first, second = _report(settings, 0, stdout, "")
    assert (first.capability, first.registers, first.shared_bytes, first.local_bytes) == (80, 163, 24640, 0)
    assert (second.capability, second.registers, second.local_bytes) == (90, 255, 8)
    assert (second.spill_store_bytes, second.spill_load_bytes) == (352, 320)
    assert first.async_copies and not second.async_copies
    assert first.arch == "sm_80" and second.arch == "sm_90a" and first.warnings == second.warnings == ()


def test_ptxas_warnings_are_kept_per_compile():
    settings = [
        {"block_q": 128, "block_k": 128, "num_stages": 3, "num_warps": 4, "head_dim": 64, "capability": c}
        for c in (80, 90)
    ]
    note = (
        "(C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient "
        "register resources for the wgmma pipeline in the function '_fa2_forward' in line 1043"
    )
    stdout = "\n".join(
        [
            "ptxas info    : Compiling entry function '_fa2_forward' for 'sm_80'",
            "    288 bytes stack frame, 352 bytes spill stores, 320 bytes spill loads",
            "ptxas info    : Used 255 registers, used 1 barriers, 288 bytes cumulative stack size",
            'FLASHMATH_AOT {"shared_bytes": 82048, "async_copies": true}',
            f"ptxas-blackwell info    : {note}",
            "ptxas-blackwell info    : Compiling entry function '_fa2_forward' for 'sm_90a'",
            "ptxas-blackwell warning : Registers are spilled to local memory",
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
            "ptxas-blackwell info    : Used 255 registers, used 1 barriers",
            'FLASHMATH_AOT {"shared_bytes": 114816, "async_copies": true}',
        ]
    )
    first, second = _report(settings, 0, stdout, "")
    assert first.warnings == ()  # the "info" lines without a code are the report, not warnings
    assert second.warnings == (note, "Registers are spilled to local memory")


@needs_triton
def test_the_compiled_kernel_needs_at_least_the_data_it_holds():
    settings = [
        dict(block_q=64, block_k=64, num_stages=2, num_warps=4, capability=80),
        dict(block_q=64, block_k=64, num_stages=2, num_warps=4, capability=90),
        dict(block_q=128, block_k=64, num_stages=3, num_warps=8, capability=90),
    ]
    for setting, compiled in zip(settings, compile_forward(*settings), strict=True):
        need = tile_bytes(64, setting["block_q"], setting["block_k"], stages=1)
        threads = 32 * setting["num_warps"]
        data_registers = (need.scores + need.accumulator + need.row_states) / (4 * threads)
        assert compiled.capability == setting["capability"] and compiled.head_dim == 64
        # registers: the data is a lower bound, unless the compiler spilled to local memory; never above 255
        assert compiled.registers <= 255 and (compiled.registers >= data_registers or compiled.local_bytes > 0)
        # shared memory: at least one stage of K and V tiles
        assert compiled.shared_bytes >= need.kv_tiles
        assert compiled.async_copies  # aligned float16 loads become cp.async: the loop is pipelined
