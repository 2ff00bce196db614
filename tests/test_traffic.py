"""Element load/store counts reproduce the memory-access table of Milakov and Gimelshein (2018)."""

import numpy as np
import pytest

import flashmath as fm
from flashmath.counting import SOFTMAX_VARIANTS, naive_softmax_counted, online_softmax_counted, safe_softmax_counted

MEMORY_ACCESS_TABLE = {  # variant: (loads, stores, accesses) per element
    "naive softmax": (2, 1, 3),
    "safe softmax": (3, 1, 4),
    "online softmax": (2, 1, 3),
}


@pytest.mark.parametrize("length", [1, 7, 100])
@pytest.mark.parametrize("name", list(MEMORY_ACCESS_TABLE))
def test_counts_match_table_1(name, length):
    x = np.random.default_rng(length).normal(size=length)
    y, count = SOFTMAX_VARIANTS[name](x)
    assert count.per_element() == MEMORY_ACCESS_TABLE[name]
    assert count.loads == MEMORY_ACCESS_TABLE[name][0] * length
    assert len(count.passes) == {"naive softmax": 2, "safe softmax": 3, "online softmax": 2}[name]
    np.testing.assert_allclose(y, fm.safe_softmax(x), rtol=1e-13)


def test_counted_variants_keep_the_conventions():
    masked = np.full(3, -np.inf)
    assert np.isnan(naive_softmax_counted(masked)[0]).all()
    assert safe_softmax_counted(masked)[0].tolist() == [0.0] * 3
    assert online_softmax_counted(masked)[0].tolist() == [0.0] * 3
    assert np.isnan(online_softmax_counted([1.0, np.nan])[0]).all()
    assert np.isnan(naive_softmax_counted([1e4, 0.0])[0][0])  # overflow, the lesson
    np.testing.assert_allclose(online_softmax_counted([1e4, 0.0])[0], [1.0, 0.0])


# --------------------------------------------------------------------------------------------------------------
# Attention algorithms: counted traffic equals the model, and the model is what the text says
# --------------------------------------------------------------------------------------------------------------

import math  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flashmath.counting import counted_attention  # noqa: E402
from flashmath.memory import CountedMemory  # noqa: E402
from flashmath.traffic import (  # noqa: E402
    ALGORITHMS,
    algorithm1_block_sizes,
    attention_traffic,
    block_sizes_for_sram,
    gpt2_medium_traffic,
    sram_sweep,
    tile_traffic_table,
)


def _inputs(rng, N, M, D, Dv, batch=(), dtype=np.float64):
    return tuple(rng.standard_normal(batch + shape).astype(dtype) for shape in ((N, D), (M, D), (M, Dv)))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    "N, M, D, Dv, block_q, block_k, batch",
    [
        (7, 13, 5, 3, 3, 4, ()),
        (13, 7, 4, 4, 5, 2, ()),
        (1, 9, 3, 3, 2, 2, ()),
        (8, 8, 4, 2, 8, 8, (2, 3)),
        (10, 11, 2, 2, 1, 1, (2,)),
        (6, 0, 3, 3, 4, 4, ()),
    ],
)
def test_counted_traffic_equals_the_model(algorithm, N, M, D, Dv, block_q, block_k, batch):
    rng = np.random.default_rng(N + M)
    q, k, v = _inputs(rng, N, M, D, Dv, batch)
    a, count = counted_attention(algorithm, q, k, v, block_q=block_q, block_k=block_k)
    np.testing.assert_allclose(a, fm.attention(q, k, v), atol=1e-12)
    model = attention_traffic(
        algorithm, N, M, D, Dv=Dv, block_q=block_q, block_k=block_k, batch=math.prod(batch), bytes_per_element=8
    )
    assert count.arrays == model.arrays
    assert count.bytes == model.bytes and count.bytes_per_element == 8


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["fa1", "fa2"]),
    st.integers(1, 20),
    st.integers(1, 20),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 25),
    st.integers(1, 25),
)
def test_property_tiled_counts_equal_the_model(order, N, M, D, Dv, block_q, block_k):
    rng = np.random.default_rng(N * 31 + M)
    q, k, v = _inputs(rng, N, M, D, Dv, dtype=np.float32)
    _, count = counted_attention(order, q, k, v, block_q=block_q, block_k=block_k)
    model = attention_traffic(order, N, M, D, Dv=Dv, block_q=block_q, block_k=block_k)
    assert count.arrays == model.arrays and count.bytes == model.bytes  # float32: 4 bytes, the model's default


def test_loops_of_chapters_4_and_5_read_k_twice_and_once_and_never_store_x_or_y():
    rng = np.random.default_rng(1)
    N, M, D, Dv = 6, 11, 4, 3
    q, k, v = _inputs(rng, N, M, D, Dv)
    _, two = counted_attention("two_loop", q, k, v)
    _, one = counted_attention("one_loop", q, k, v)
    _, standard = counted_attention("standard", q, k, v)
    # two loops: every element of K loaded twice (once per loop), V once; one loop: K once
    assert two.arrays["K"] == (2 * M * D, 0) and one.arrays["K"] == (M * D, 0)
    assert two.arrays["V"] == one.arrays["V"] == (M * Dv, 0)
    assert [name for name, _, _ in two.passes] == ["loop (1)", "loop (2)"]
    assert two.passes[0][1:] == (M * D, 0) and two.passes[1][1:] == (M * D + M * Dv, 0)
    # X and Y are never stored: the only store is the output, and nothing of size N x M is in memory
    for count in (two, one):
        assert "X" not in count.arrays and "Y" not in count.arrays
        assert count.stores == N * Dv
    # standard attention stores and reloads both N x M matrices
    assert standard.arrays["X"] == standard.arrays["Y"] == (N * M, N * M)
    # the one loop is the tiled fa2 loop with one query tile of all N rows and key tiles of one key
    _, tiled = counted_attention("fa2", q, k, v, block_q=N, block_k=1)
    assert {name: tiled.arrays[name] for name in one.arrays} == one.arrays


def test_counted_loops_keep_masks_and_give_the_reference():
    rng = np.random.default_rng(2)
    q, k, v = _inputs(rng, 5, 8, 3, 2)
    mask = rng.random((5, 8)) < 0.6
    for algorithm in ALGORITHMS:
        a, _ = counted_attention(algorithm, q, k, v, block_q=2, block_k=3, causal=True, mask=mask)
        np.testing.assert_allclose(a, fm.attention(q, k, v, causal=True, mask=mask), atol=1e-12)


def test_skipped_tiles_move_less():
    rng = np.random.default_rng(3)
    q, k, v = _inputs(rng, 32, 32, 4, 4)
    for order in ("fa1", "fa2"):
        _, full = counted_attention(order, q, k, v, block_q=8, block_k=8)
        _, causal = counted_attention(order, q, k, v, block_q=8, block_k=8, causal=True)
        assert causal.bytes < full.bytes


def test_model_in_closed_form():
    N, M, D, B_r, B_c = 1000, 700, 64, 128, 96
    T_r, T_c = math.ceil(N / B_r), math.ceil(M / B_c)
    std = attention_traffic("standard", N, M, D, bytes_per_element=2)
    assert std.bytes == 2 * (N * D + 2 * M * D + 4 * N * M + N * D)
    fa2 = attention_traffic("fa2", N, M, D, block_q=B_r, block_k=B_c)
    assert fa2.bytes == 4 * (N * D + 2 * T_r * M * D + N * D + N)
    fa1 = attention_traffic("fa1", N, M, D, block_q=B_r, block_k=B_c, batch=3)
    assert fa1.bytes == 3 * 4 * (T_c * N * D + 2 * M * D + (2 * T_c + 1) * N * D + 2 * (2 * T_c + 1) * N)


def test_block_sizes_from_sram():
    # Algorithm 1, line 1: B_c = ceil(S / 4d), B_r = min(B_c, d), S in elements
    assert algorithm1_block_sizes(192 * 1024, 64, bytes_per_element=2) == (64, 384)
    assert algorithm1_block_sizes(4096, 64, bytes_per_element=4) == (4, 4)
    assert algorithm1_block_sizes(100_000, 16, bytes_per_element=1) == (16, 1563)
    assert block_sizes_for_sram(192 * 1024, 64, order="fa2", bytes_per_element=2) == (384, 64)
    with pytest.raises(ValueError, match="holds no element"):
        algorithm1_block_sizes(1, 64, bytes_per_element=4)
    with pytest.raises(ValueError, match="order must be"):
        block_sizes_for_sram(1024, 64, order="fa3")


@pytest.mark.parametrize("order", ["fa1", "fa2"])
def test_traffic_falls_as_one_over_sram(order):
    N, D = 65536, 64
    sizes = 2 ** np.arange(16, 22)  # 64 KiB .. 2 MiB: blocks much smaller than N, so the N^2 term dominates
    sweep = sram_sweep(N, D, sizes, order=order, bytes_per_element=2)
    assert (np.diff(sweep.hbm_bytes) < 0).all()
    ratio = sweep.hbm_bytes / sweep.theta_bytes  # Theta(N^2 D^2 / S): a constant ratio
    assert ratio.max() / ratio.min() < 1.1
    doubled = sram_sweep(2 * N, D, sizes, order=order, bytes_per_element=2)
    np.testing.assert_allclose(doubled.hbm_bytes / sweep.hbm_bytes, 4, rtol=0.05)  # quadratic in N
    assert (sweep.hbm_bytes < sweep.standard_bytes).all()


def test_gpt2_medium_forward_numbers():
    got = gpt2_medium_traffic()
    N, D, problems, bpe = 1024, 64, 16 * 64, 2
    assert got["standard"] == pytest.approx(problems * bpe * (4 * N * D + 4 * N * N) / 1e9)
    B_r, B_c = got["blocks_fa1"]
    assert (B_r, B_c) == (64, 384)
    T_c = math.ceil(N / B_c)
    fa1 = problems * bpe * (T_c * N * D + 2 * N * D + (2 * T_c + 1) * N * D + 2 * (2 * T_c + 1) * N) / 1e9
    assert got["fa1"] == pytest.approx(fa1)
    assert got["fa1"] < got["standard"] / 4 and got["fa2"] < got["standard"] / 4
    # the paper's bars (forward + backward, arXiv version) are those docs/figure2.md quotes, and lie above the model's
    # forward-only counts
    table = (Path(__file__).resolve().parents[1] / "docs" / "figure2.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| paper, Figure 2"))
    assert [float(x) for x in row.split("|")[2:4]] == [got["paper_standard"], got["paper_flash"]]
    assert got["standard"] < got["paper_standard"] and min(got["fa1"], got["fa2"]) < got["paper_flash"]


def test_model_errors():
    with pytest.raises(ValueError, match="algorithm must be one of"):
        attention_traffic("flash", 4, 4, 4)
    with pytest.raises(ValueError, match="needs block_q"):
        attention_traffic("fa2", 4, 4, 4)
    with pytest.raises(ValueError, match="block_q must be >= 1"):
        attention_traffic("fa1", 4, 4, 4, block_q=0, block_k=2)
    with pytest.raises(TypeError, match="N must be an integer"):
        attention_traffic("standard", 4.0, 4, 4)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        counted_attention("fa3", np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))


def test_counted_memory_counts_slices_per_array_and_pass():
    mem = CountedMemory({"a": np.arange(12.0).reshape(3, 4), "b": np.zeros(5)})
    a, b = mem["a"], mem["b"]
    with mem.named_pass("read"):
        assert a[1:, ::2].shape == (2, 2)
        assert a[0, 3] == 3.0
    b[1:4] = 7.0
    assert mem.count.arrays == {"a": (5, 0), "b": (0, 3)}
    assert mem.count.passes == [("read", 5, 0)]
    assert mem.count.bytes == 8 * 8 and mem.count.bytes_of("b") == (0, 24) and mem.count.bytes_of("zz") == (0, 0)
    np.testing.assert_array_equal(mem.array("b"), [0, 7, 7, 7, 0])


def test_tile_traffic_table_is_the_model_per_score():
    table = tile_traffic_table(256, dims=(32, 64), blocks=(8, 16, 32, 64))
    assert (table["N"], table["dims"], table["blocks"]) == (256, (32, 64), (8, 16, 32, 64))
    # fa2 re-reads K and V N / B_r times: about 2 N M D / B_r elements against standard attention's 4 N M
    for row, D in enumerate((32, 64)):  # X and Y written and read once each, plus Q, K, V read and A written
        np.testing.assert_allclose(table["standard"][row], 4 + 4 * D / 256)
    for row, D in enumerate((32, 64)):
        for col, B in enumerate((8, 16, 32, 64)):
            assert abs(table["fa2"][row, col] - (2 * D / B + 2 * D / 256)) < 0.05
    assert np.all(table["fa1"] > table["fa2"])  # fa1 also reads and writes A, g, s once per key tile
    with pytest.raises(ValueError, match="each of blocks must be >= 1"):
        tile_traffic_table(256, blocks=(0,))
