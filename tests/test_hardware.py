"""The on-chip calculator of chapter 10: bytes per tile, and which query tiles fit a real SM."""

import pytest

from flashmath.hardware import FA2_FORWARD_TILES, GPUS, largest_query_tile, register_limit, tile_bytes


def test_tile_bytes_of_a_typical_flashattention2_configuration():
    # D = 64, B_r = 128, B_c = 64, float16 in memory, two key/value tiles in flight
    t = tile_bytes(64, 128, 64, dtype="float16", stages=2)
    assert t.q_tile == 128 * 64 * 2
    assert t.kv_tiles == 2 * (64 * 64 * 2 + 64 * 64 * 2)
    assert t.scores == 128 * 64 * 4 and t.accumulator == 128 * 64 * 4 and t.row_states == 2 * 128 * 4
    assert t.shared == 16384 + 32768 and t.registers == 32768 + 32768 + 1024


def test_a_larger_head_dimension_leaves_room_for_smaller_query_tiles():
    h100, a100, rtx = GPUS["H100"], GPUS["A100"], GPUS["RTX 4090"]
    fits = {D: largest_query_tile(a100, D, 64) for D in (64, 128, 256)}
    assert fits[64] >= fits[128] >= fits[256]
    assert largest_query_tile(h100, 128, 128) >= (largest_query_tile(rtx, 128, 128) or 0)
    # 2 stages x 64 keys x (256 + 256) x 2 bytes = 128 KiB of K, V > 99 KiB per block
    assert largest_query_tile(rtx, 256, 64) is None
    for gpu in (h100, a100, rtx):  # the largest tile fits both budgets, and twice its rows no longer fits one
        for D in (64, 128):
            rows = largest_query_tile(gpu, D, 64)
            if rows is None:
                continue
            fits = tile_bytes(D, rows, 64)
            assert fits.shared <= gpu.shared_per_block_bytes and fits.registers <= gpu.register_bytes
            over = tile_bytes(D, 2 * rows, 64)
            assert over.shared > gpu.shared_per_block_bytes or over.registers > gpu.register_bytes


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="block_q must be >= 1"):
        tile_bytes(64, 0, 64)
    with pytest.raises(TypeError, match="D must be an integer"):
        tile_bytes(64.0, 16, 16)
    with pytest.raises(ValueError, match="dtype must be"):
        tile_bytes(64, 16, 16, dtype="half-ish")


def test_255_registers_per_thread_cap_what_a_block_of_few_warps_can_hold():
    a100 = GPUS["A100"]
    assert register_limit(a100) == 256 * 1024  # the whole register file
    assert register_limit(a100, 4) == 128 * 255 * 4  # 4 warps x 32 threads x 255 registers x 4 bytes
    assert register_limit(a100, 16) == 256 * 1024  # 512 threads x 255 would exceed the file: the file caps it
    # D = 256 with 4 warps: the float32 accumulator alone is B_r x 256 x 4 bytes, 128 KiB at B_r = 128 > 127.5 KiB
    assert tile_bytes(256, 128, 64).accumulator == 128 * 1024
    assert largest_query_tile(a100, 256, 32, stages=1) == 128
    assert largest_query_tile(a100, 256, 32, stages=1, num_warps=4) == 64
    assert largest_query_tile(a100, 256, 32, stages=1, num_warps=8) == 128
    for bad, error in ((0, ValueError), (2.5, TypeError)):
        with pytest.raises(error):
            register_limit(a100, bad)


def test_with_flashattention2s_own_block_k_warps_and_one_stage_the_model_gives_its_query_tile():
    # the model is an upper bound: FlashAttention-2's launches (flash_fwd_launch_template.h) all fit it, and with its
    # B_c, warps and one K/V stage (kernel_traits.h) nothing larger does
    assert {gpu for gpu, _D in FA2_FORWARD_TILES} == set(GPUS)
    for (name, D), (block_q, block_k, warps) in FA2_FORWARD_TILES.items():
        assert largest_query_tile(GPUS[name], D, block_k, stages=1, num_warps=warps) == block_q, (name, D)
    # without the per-thread cap the model reports twice FlashAttention-2's 128 rows for D = 64 and 128
    assert largest_query_tile(GPUS["A100"], 64, 128, stages=1) == 256
    assert largest_query_tile(GPUS["H100"], 128, 64, stages=1) == 256
