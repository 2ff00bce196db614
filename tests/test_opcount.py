"""Chapter 7's operation counts: what the tile loops execute besides the matrix products."""

import math

import numpy as np
import pytest

import flashmath as fm
from flashmath.opcount import OPS, count_ops, op_count_table


@pytest.mark.parametrize(
    "N, M, D, Dv, B_r, B_c", [(64, 64, 16, 16, 16, 16), (30, 47, 8, 5, 7, 10), (1, 20, 4, 4, 1, 6)]
)
def test_fa2_divides_once_per_output_element_and_fa1_once_per_key_tile(N, M, D, Dv, B_r, B_c):
    rng = np.random.default_rng(N + M)
    q, k, v = rng.standard_normal((N, D)), rng.standard_normal((M, D)), rng.standard_normal((M, Dv))
    T_c = math.ceil(M / B_c)
    fa2 = count_ops("fa2", q, k, v, block_q=B_r, block_k=B_c)
    fa1 = count_ops("fa1", q, k, v, block_q=B_r, block_k=B_c)
    assert fa2.ops["divide"] == N * Dv  # A = acc / s, once, at the end (FlashAttention-2, section 3.1.1)
    assert fa1.ops["divide"] == T_c * N * Dv  # A' normalised after every key tile (Algorithm 1, line 12)
    # exp: one per score, plus per row and key tile the rescale factor(s): 1 for fa2 (alpha); 2 for fa1
    # (alpha and beta of Algorithm 1, line 11), which merges the tile's own (max, sum) into the row's
    assert fa2.ops["exp"] == N * M + T_c * N
    assert fa1.ops["exp"] == N * M + 2 * T_c * N
    # the output rescale: fa2 multiplies acc once per key tile, fa1 both terms of its update
    assert fa2.ops["multiply"] == T_c * N * Dv + T_c * N
    # (and per row: s alpha and s~ beta, the two terms of s_new)
    assert fa1.ops["multiply"] == 2 * T_c * N * Dv + 2 * T_c * N
    for count in (fa1, fa2):  # the matrix products are the same: X = Q K^T and P V
        assert count.ops["matmul"] == N * M * (D + Dv)
        assert count.scores == N * M
    assert fa2.non_matmul < fa1.non_matmul
    assert fa2.ops.get("log", 0) == N  # the logsumexp g + log(s), written once per row


def test_skipped_tiles_cost_nothing():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((32, 8)) for _ in range(3))
    full = count_ops("fa2", q, k, v, block_q=8, block_k=8)
    causal = count_ops("fa2", q, k, v, block_q=8, block_k=8, causal=True)
    assert causal.ops["matmul"] == 10 * 8 * 8 * 16  # 10 of the 16 tiles are computed (4 x 4 grid, lower half)
    assert causal.ops["matmul"] < full.ops["matmul"]


def test_count_ops_only_counts_tile_loops():
    q = np.ones((2, 2))
    with pytest.raises(ValueError, match="'fa1' or 'fa2'"):
        count_ops("standard", q, q, q)
    # counting leaves the inputs as they were: same values, plain arrays, and later runs uncounted and unchanged
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((5, 3)) for _ in range(3))
    before = [a.copy() for a in (q, k, v)]
    count_ops("fa1", q, k, v, block_q=2, block_k=2)
    for a, b in zip((q, k, v), before, strict=False):
        assert type(a) is np.ndarray
        np.testing.assert_array_equal(a, b)
    assert type(fm.flash_attention(q, k, v, block_q=2, block_k=2)) is np.ndarray


def test_op_count_table_counts_per_score_for_each_tile_size():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((16, 4)), rng.standard_normal((16, 4)), rng.standard_normal((16, 3))
    table = op_count_table(q, k, v, blocks=(2, 4, 8, 16))
    assert (table["N"], table["D"], table["blocks"]) == (16, 4, (2, 4, 8, 16))
    # fa2: one exponential per score for P plus one rescale per row and key tile; fa1's loop: four rescales
    np.testing.assert_allclose(table["fa2"]["exp"], [1 + 1 / b for b in (2, 4, 8, 16)])
    assert np.all(table["fa1"]["non_matmul"] > table["fa2"]["non_matmul"])
    assert set(table["fa1"]) == set(OPS) | {"non_matmul"}
