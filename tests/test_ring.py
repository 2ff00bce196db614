"""Ring attention simulated in one process (flashmath.ring) and the cost models (flashmath.ring_cost): equal to
flash_attention (bit for bit with one device, to a few units in the last place otherwise), causal steps skipped,
zig-zag balance, the backward ring against the numpy backward and PyTorch's autograd, counted bytes against the
models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import make

from flashmath.backward import attention_backward
from flashmath.flash import flash_attention
from flashmath.ring import (
    ring_attention,
    ring_attention_backward,
    ring_layout,
    ring_schedule,
    ring_trace,
    ring_work,
    zigzag_chunks,
)
from flashmath.ring_cost import (
    allgather_bytes_model,
    context_parallel_costs,
    context_parallel_table,
    kv_row_bytes,
    ring_backward_bytes_model,
    ring_bytes_model,
    ring_held_bytes_model,
    shard_rows,
    single_device_bytes,
    ulysses_bytes_model,
)

# The ring merges normalised (A, L) states where flash_attention's tile loop rescales an unnormalised accumulator,
# and visits the shards in rotated order: a few units in the last place apart (flashmath.ring, "Bitwise"). Measured
# over the cases below: at most 1.6e-15 on outputs of size up to about 2.2 (1.8e-15 with P up to 8, N up to 256).
TOL_A = 4e-15


def gqa_inputs(rng, N, gqa, D=5, Dv=3, batch=2):
    """``q (B, H, N, D)``, ``k (B, H_kv, N, D)``, ``v (B, H_kv, N, Dv)``: 4 query heads on 2 kv heads with ``gqa``."""
    H, H_kv = (4, 2) if gqa else (2, 2)
    q = rng.standard_normal((batch, H, N, D))
    k = rng.standard_normal((batch, H_kv, N, D))
    v = rng.standard_normal((batch, H_kv, N, Dv))
    return q, k, v


def expanded(k, groups):
    """The kv heads repeated for each query head of their group (what enable_gqa reads)."""
    return np.repeat(k, groups, axis=-3)


def test_zigzag_chunks_pair_an_early_chunk_with_a_late_one():
    assert [zigzag_chunks(4, r) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert zigzag_chunks(1, 0) == (0, 1)
    with pytest.raises(ValueError, match="device must be in 0 .. 3"):
        zigzag_chunks(4, 4)
    with pytest.raises(TypeError):
        zigzag_chunks(2.0, 0)


@pytest.mark.parametrize("N, P, zigzag", [(8, 2, False), (13, 3, False), (13, 3, True), (16, 4, True), (9, 4, True)])
def test_layout_covers_each_row_once(N, P, zigzag):
    layout = ring_layout(N, P, zigzag=zigzag)
    positions = np.concatenate([layout.q_positions(r) for r in range(P)])
    assert sorted(positions.tolist()) == list(range(N))
    sizes = [layout.q_size(r) for r in range(P)]
    assert sizes == shard_rows(N, P, zigzag=zigzag).tolist()  # the cost model's shard sizes, derived separately
    assert max(sizes) - min(sizes) <= (2 if zigzag else 1)
    x = np.arange(N * 2.0).reshape(N, 2)
    assert np.array_equal(layout.gather([layout.take(x, r) for r in range(P)]), x)
    if zigzag:
        chunks = [(p * N // (2 * P), (p + 1) * N // (2 * P)) for p in range(2 * P)]
        for r in range(P):
            assert layout.q_chunks[r] == tuple(chunks[c] for c in zigzag_chunks(P, r))


def test_layout_and_ring_refuse_what_cannot_be_sharded():
    with pytest.raises(ValueError, match="N must be at least 6"):
        ring_layout(5, 3, zigzag=True)
    with pytest.raises(ValueError, match="num_devices must be"):
        ring_layout(5, 0)
    with pytest.raises(TypeError, match="zigzag must be True or False"):
        ring_layout(8, 2, zigzag=1)
    rng = np.random.default_rng(0)
    q, k, v = make(rng, 6, 8, 4, 4)
    with pytest.raises(ValueError, match="a causal ring needs N = M"):
        ring_attention(q, k, v, 2, causal=True)
    with pytest.raises(TypeError, match="causal must be True or False"):
        ring_attention(q, k, v, 2, causal="yes")
    with pytest.raises(ValueError, match="enable_gqa"):
        ring_attention(q[None].repeat(3, 0), k[None].repeat(2, 0), v[None].repeat(2, 0), 2, enable_gqa=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("blocks", [(4, 4), (3, 5), (None, None)])
def test_one_device_is_flash_attention_bit_for_bit(causal, gqa, blocks):
    rng = np.random.default_rng(1)
    q, k, v = gqa_inputs(rng, 13, gqa)
    bq, bk = blocks
    got = ring_attention(q, k, v, 1, causal=causal, enable_gqa=gqa, block_q=bq, block_k=bk, return_lse=True)
    want = flash_attention(q, k, v, causal=causal, enable_gqa=gqa, block_q=bq, block_k=bk, return_lse=True)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


CASES = [
    (N, P, causal, zigzag, gqa)
    for N, P, causal, zigzag, gqa in itertools.product([13, 24], [2, 3, 4], [False, True], [False, True], [False, True])
    if N >= (2 * P if zigzag else P)
]


@pytest.mark.parametrize("N, P, causal, zigzag, gqa", CASES)
def test_ring_equals_flash_attention(N, P, causal, zigzag, gqa):
    """N = 13 is divisible by none of P = 2, 3, 4 (nor 2P): shards of different sizes."""
    rng = np.random.default_rng(N * 100 + P)
    q, k, v = gqa_inputs(rng, N, gqa)
    a, lse = ring_attention(q, k, v, P, causal=causal, zigzag=zigzag, enable_gqa=gqa, block_q=4, block_k=4,
                            return_lse=True)  # fmt: skip
    want, want_lse = flash_attention(q, k, v, causal=causal, enable_gqa=gqa, block_q=4, block_k=4, return_lse=True)
    assert a.shape == want.shape and lse.shape == want_lse.shape
    assert np.abs(a - want).max() <= TOL_A
    assert np.abs(lse - want_lse).max() <= TOL_A * max(1.0, np.abs(want_lse).max())


def test_rows_that_see_one_shard_are_bitwise():
    """Device 0 of a contiguous causal ring sees its own shard only: no merge of two nonempty states, and with
    block_k dividing the shard its key tiles are flash_attention's."""
    rng = np.random.default_rng(2)
    q, k, v = make(rng, 32, 32, 8, 8, (3,))
    for P, bk in ((2, 8), (4, 4), (4, 8)):
        got = ring_attention(q, k, v, P, causal=True, block_q=4, block_k=bk)
        want = flash_attention(q, k, v, causal=True, block_q=4, block_k=bk)
        S = 32 // P
        assert np.array_equal(got[:, :S], want[:, :S])


def test_each_computed_step_is_one_merge_with_the_package_merge(monkeypatch):
    """The ring merges with chapter 10's function itself: once per step a device computes, never for a skipped one."""
    import flashmath.ring as ring
    from flashmath.splitkv import merge_states

    assert ring.merge_states is merge_states
    calls = []

    def counting(*args):
        calls.append(1)
        return merge_states(*args)

    monkeypatch.setattr(ring, "merge_states", counting)
    rng = np.random.default_rng(9)
    q, k, v = make(rng, 24, 24, 4, 4)
    for zigzag in (False, True):
        calls.clear()
        ring_attention(q, k, v, 4, causal=True, zigzag=zigzag)
        assert len(calls) == ring_work(ring_layout(24, 4, zigzag=zigzag), True)["steps"].sum() == (16 if zigzag else 10)


def test_cross_attention_ring_with_more_keys_than_queries():
    rng = np.random.default_rng(3)
    q, k, v = make(rng, 7, 19, 4, 6, (2,))
    for P, zigzag in ((2, False), (3, True), (7, False)):
        got = ring_attention(q, k, v, P, zigzag=zigzag, block_q=2, block_k=3)
        assert np.abs(got - flash_attention(q, k, v)).max() <= TOL_A


def test_float32_ring_stays_float32():
    rng = np.random.default_rng(4)
    q, k, v = make(rng, 16, 16, 8, 8, (2,), dtype=np.float32)
    got, lse = ring_attention(q, k, v, 4, causal=True, zigzag=True, return_lse=True)
    want = flash_attention(q, k, v, causal=True)
    assert got.dtype == np.float32 and lse.dtype == np.float32
    assert np.abs(got - want).max() <= 2e-6


@pytest.mark.parametrize("P", [2, 4, 8])
def test_causal_steps_skipped_and_zigzag_balances_the_work(P):
    N = 16 * P  # 2P divides N
    plain, zz = ring_work(ring_layout(N, P), True), ring_work(ring_layout(N, P, zigzag=True), True)
    S = N // P
    # contiguous: device r computes r + 1 blocks of S x S and skips the P - 1 - r shards after its own
    assert plain["steps"].tolist() == list(range(1, P + 1))
    assert plain["score_entries"].tolist() == [(r + 1) * S * S for r in range(P)]
    assert plain["score_entries"][-1] == P * plain["score_entries"][0]  # the diagonal block whole: P-fold
    # a kernel that skips masked tiles: r blocks and the diagonal's S (S + 1) / 2 pairs, about 2P - 1 fold
    assert plain["visible_pairs"].tolist() == [r * S * S + S * (S + 1) // 2 for r in range(P)]
    ratio = plain["visible_pairs"][-1] / plain["visible_pairs"][0]
    assert ratio == pytest.approx(((2 * P - 1) * S + 1) / (S + 1)) and 2 * P - 1 - 1 < ratio < 2 * P - 1
    # zig-zag: every device computes every step, the same work in all
    assert zz["steps"].tolist() == [P] * P
    assert len(set(zz["score_entries"].tolist())) == 1 and len(set(zz["visible_pairs"].tolist())) == 1
    c = N // (2 * P)  # chunk size: own step (2c)^2 causal block, the others 2 c^2 each
    assert zz["score_entries"][0] == 4 * c * c + (P - 1) * 2 * c * c
    # counted as a tile-skipping kernel does, every step is about half a block: the own step 2c (2c + 1) / 2 pairs
    steps = np.array([[st.visible_pairs for st in row] for row in ring_schedule(ring_layout(N, P, zigzag=True), True)])
    assert (steps[0] == c * (2 * c + 1)).all() and (steps[1:] == 2 * c * c).all()
    # both count every attended pair once
    assert plain["visible_pairs"].sum() == zz["visible_pairs"].sum() == N * (N + 1) // 2
    assert ring_work(ring_layout(N, P), False)["score_entries"].tolist() == [S * N] * P


def test_schedule_holds_the_shard_of_r_minus_t():
    layout = ring_layout(24, 4, zigzag=True)
    for t, row in enumerate(ring_schedule(layout, True)):
        for r, st in enumerate(row):
            assert (st.step, st.device, st.shard) == (t, r, (r - t) % 4)
            # zig-zag: own shard causal; earlier shards seen by all queries on their first chunk; later ones by the
            # device's second chunk on the whole shard
            n, m = layout.q_size(r), layout.kv_size(st.shard)
            if st.shard == r:
                assert st.causal and st.rows == (0, n) and st.cols == (0, m)
            elif st.shard < r:
                assert st.rows == (0, n) and st.cols == (
                    0,
                    layout.kv_chunks[st.shard][0][1] - layout.kv_chunks[st.shard][0][0],
                )
            else:
                first = layout.q_chunks[r][0][1] - layout.q_chunks[r][0][0]
                assert st.rows == (first, n) and st.cols == (0, m)


def test_trace_records_each_device_and_counts_bytes_and_memory():
    rng = np.random.default_rng(5)
    N, P, D, Dv, B, H = 22, 4, 6, 5, 2, 3
    q = rng.standard_normal((B, H, N, D))
    k = rng.standard_normal((B, H, N, D))
    v = rng.standard_normal((B, H, N, Dv))
    for zigzag in (False, True):
        tr = ring_trace(q, k, v, P, causal=True, zigzag=zigzag, block_q=4, block_k=4)
        assert len(tr) == P and all(len(row) == P for row in tr.frames)
        assert np.array_equal(tr.output, ring_attention(q, k, v, P, causal=True, zigzag=zigzag, block_q=4, block_k=4))
        for t, row in enumerate(tr.frames):
            for r, frame in enumerate(row):
                assert frame.step.shard == (r - t) % P
                if frame.step.skipped:  # a skipped step leaves the state as it was
                    assert np.array_equal(frame.a, tr.frames[t - 1][r].a)
        last = [tr.layout.take(tr.output, r) for r in range(P)]
        assert all(np.array_equal(tr.frames[-1][r].a, last[r]) for r in range(P))
        row_bytes = kv_row_bytes(D, Dv, kv_heads=H, batch=B)
        assert np.array_equal(tr.sent_bytes, ring_bytes_model(N, P, row_bytes=row_bytes, zigzag=zigzag))
        held = np.array([[frame.held_bytes for frame in row] for row in tr.frames])
        q_row, state_row = B * H * D * 8, B * H * (Dv + 1) * 8
        model = ring_held_bytes_model(N, N, P, q_row_bytes=q_row, state_row_bytes=state_row, kv_row_bytes=row_bytes,
                                      zigzag=zigzag)  # fmt: skip
        assert np.array_equal(held, model)
        one = single_device_bytes(N, N, q_row_bytes=q_row, state_row_bytes=state_row, kv_row_bytes=row_bytes)
        assert held.max() < 0.6 * one  # O(N / P): three shards' worth of rows, not N


BACKWARD_CASES = [(13, 2, False, False, True), (13, 3, True, False, False), (24, 4, True, True, True),
                  (13, 2, True, True, False), (16, 4, False, True, True)]  # fmt: skip


@pytest.mark.parametrize("N, P, causal, zigzag, gqa", BACKWARD_CASES)
def test_backward_ring_equals_the_numpy_backward(N, P, causal, zigzag, gqa):
    rng = np.random.default_rng(N + P)
    q, k, v = gqa_inputs(rng, N, gqa)
    G = q.shape[1] // k.shape[1]
    a, lse = flash_attention(q, k, v, causal=causal, enable_gqa=gqa, return_lse=True)
    grad_a = rng.standard_normal(a.shape)
    options = {"causal": causal, "zigzag": zigzag, "enable_gqa": gqa, "block_q": 4, "block_k": 4}
    (dq, dk, dv), sent = ring_attention_backward(q, k, v, a, lse, grad_a, P, return_sent_bytes=True, **options)
    gq, gk, gv = attention_backward(q, expanded(k, G), expanded(v, G), a, lse, grad_a, causal=causal)
    gk = gk.reshape(k.shape[:2] + (G,) + k.shape[2:]).sum(axis=2)  # the query heads of a group summed
    gv = gv.reshape(v.shape[:2] + (G,) + v.shape[2:]).sum(axis=2)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    for got, want in ((dq, gq), (dk, gk), (dv, gv)):
        assert np.abs(got - want).max() <= 1e-13
    row_bytes = kv_row_bytes(5, 3, kv_heads=k.shape[1], batch=2)
    assert np.array_equal(sent, ring_backward_bytes_model(N, P, row_bytes=row_bytes, zigzag=zigzag))


@pytest.mark.parametrize("causal, zigzag", [(False, False), (True, False), (True, True)])
def test_backward_ring_matches_torch_autograd(causal, zigzag):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    q, k, v = gqa_inputs(rng, 13, True)
    grad_a = rng.standard_normal((2, 4, 13, 3))
    a, lse = ring_attention(q, k, v, 3, causal=causal, zigzag=zigzag, enable_gqa=True, return_lse=True)
    dq, dk, dv = ring_attention_backward(q, k, v, a, lse, grad_a, 3, causal=causal, zigzag=zigzag, enable_gqa=True)
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
    out.backward(torch.from_numpy(grad_a))
    assert np.abs(a - out.detach().numpy()).max() <= 1e-13
    for got, want in ((dq, qt.grad), (dk, kt.grad), (dv, vt.grad)):
        assert np.abs(got - want.numpy()).max() <= 1e-13


def test_backward_checks_the_forward_arrays():
    rng = np.random.default_rng(8)
    q, k, v = gqa_inputs(rng, 8, True)
    a, lse = ring_attention(q, k, v, 2, enable_gqa=True, return_lse=True)
    with pytest.raises(ValueError, match="lse must have shape"):
        ring_attention_backward(q, k, v, a, lse[..., :-1], a, 2, enable_gqa=True)
    with pytest.raises(ValueError, match="grad_a must have shape"):
        ring_attention_backward(q, k, v, a, lse, a[:, :3], 2, enable_gqa=True)


def test_cost_models():
    row = kv_row_bytes(64, kv_heads=8, batch=1, itemsize=2)
    assert row == 8 * 128 * 2
    fwd = ring_bytes_model(1000, 4, row_bytes=row)
    assert fwd.shape == (3, 4) and fwd.sum() == 3 * 1000 * row  # (P - 1) M rows in all
    # what a device receives over the ring is every other shard: the all-gather's volume
    received = np.array([sum(fwd[t, (r - 1) % 4] for t in range(3)) for r in range(4)])
    assert np.array_equal(received, allgather_bytes_model(1000, 4, row_bytes=row))
    bwd = ring_backward_bytes_model(1000, 4, row_bytes=row)
    assert bwd.shape == (4, 4) and bwd.sum() == 3 * 1000 * row + 4 * 1000 * row  # K, V 3 hops; dK, dV 4
    assert ulysses_bytes_model(1000, 3, heads=8, kv_heads=8, D=64) is None  # 8 heads do not split over 3
    assert ulysses_bytes_model(1000, 4, heads=8, kv_heads=2, D=64) is None  # nor 2 kv heads over 4
    assert ulysses_bytes_model(1000, 4, heads=8, kv_heads=4, D=64) is not None


@pytest.mark.parametrize("groups", [1, 2, 4, 8])
def test_ulysses_receives_fewer_bytes_than_the_ring_exactly_when_p_exceeds_g_plus_1(groups):
    H_kv = 8 // groups
    N = 4096  # divisible by every P below
    for row in context_parallel_table(N, heads=8, kv_heads=H_kv, D=64, devices=(2, 4, 8)):
        P = row["P"]
        assert row["ring"] == row["all-gather"]
        if H_kv % P:
            assert row["ulysses"] is None and row["fewest_bytes"] == ("ring", "all-gather")
        elif P > groups + 1:
            assert row["ulysses"] < row["ring"] and row["fewest_bytes"] == ("ulysses",)
        elif P == groups + 1:
            assert row["ulysses"] == row["ring"]
        else:
            assert row["ulysses"] > row["ring"] and row["fewest_bytes"] == ("ring", "all-gather")
        # all-gather holds all N keys and values; the ring two shards of N / P rows
        assert row["peak_bytes"]["all-gather"] >= N * kv_row_bytes(64, kv_heads=H_kv)
        assert row["peak_bytes"]["ulysses"] is None if H_kv % P else row["peak_bytes"]["ulysses"] > 0


def test_memory_model_counts_the_rings_float32_state_and_the_steps_output():
    # chapter 14's layer: H = 32, H_kv = 8, D = 128, bfloat16 inputs, N = 128K tokens; MiB held per device
    MiB, N, H, H_kv, D = 2**20, 131072, 32, 8, 128
    table = context_parallel_table(N, heads=H, kv_heads=H_kv, D=D, itemsize=2, devices=(2, 4, 8, 16))
    held = {row["P"]: {m: (b // MiB if b is not None else None) for m, b in row["peak_bytes"].items()} for row in table}
    assert held == {
        2: {"ring": 2576, "all-gather": 1544, "ulysses": 2056},
        4: {"ring": 1288, "all-gather": 1028, "ulysses": 1028},
        8: {"ring": 644, "all-gather": 770, "ulysses": 514},
        16: {"ring": 322, "all-gather": 641, "ulysses": None},
    }
    assert [row["least_memory"] for row in table] == [
        ("all-gather",),
        ("all-gather", "ulysses"),
        ("ulysses",),
        ("ring",),
    ]
    # the ring at P = 4, term by term: Q (bfloat16), running A and L (float32), the step's A_s (bfloat16) and L_s
    # (float32), two key/value shards (bfloat16)
    n = N // 4
    ring = n * (H * D * 2 + H * (D + 1) * 4 + H * (D * 2 + 4)) + 2 * n * kv_row_bytes(D, kv_heads=H_kv, itemsize=2)
    assert context_parallel_costs(N, 4, heads=H, kv_heads=H_kv, D=D, itemsize=2)["ring"]["peak_bytes"] == ring
    # a bfloat16 running state and logsumexps save 2 bytes per element of A, L and L_s on the ring
    narrow = context_parallel_costs(N, 4, heads=H, kv_heads=H_kv, D=D, itemsize=2, state_itemsize=2)
    assert narrow["ring"]["peak_bytes"] == ring - n * H * (D + 2) * 2
    wide = context_parallel_costs(N, 4, heads=H, kv_heads=H_kv, D=D, itemsize=2)
    assert all(narrow[m]["peak_bytes"] < wide[m]["peak_bytes"] for m in ("all-gather", "ulysses"))  # their L
    # float64 inputs: the state is never narrower than the inputs
    assert context_parallel_costs(1024, 4, heads=2, kv_heads=2, D=8) == context_parallel_costs(
        1024, 4, heads=2, kv_heads=2, D=8, state_itemsize=8
    )
    # the step's own output is held at every step, beside the running state
    base = dict(q_row_bytes=3, state_row_bytes=5, kv_row_bytes=7)
    with_step = ring_held_bytes_model(13, 13, 3, step_row_bytes=11, **base)
    assert np.array_equal(with_step - ring_held_bytes_model(13, 13, 3, **base), np.tile(shard_rows(13, 3) * 11, (3, 1)))


@pytest.mark.parametrize("kv_heads", [1, 2, 8])
def test_the_rings_memory_halves_with_each_doubling_of_p_for_any_head_count(kv_heads):
    N = 1 << 14
    costs = {P: context_parallel_costs(N, P, heads=8, kv_heads=kv_heads, D=64, itemsize=2) for P in (2, 4, 8, 16)}
    ring = [costs[P]["ring"]["peak_bytes"] for P in (2, 4, 8, 16)]
    assert all(a == 2 * b for a, b in zip(ring, ring[1:], strict=False))
    assert all(costs[P]["ulysses"]["feasible"] == (kv_heads % P == 0) for P in costs)  # Ulysses stops at P = H_kv
    assert all(
        costs[P]["all-gather"]["peak_bytes"] > N * kv_row_bytes(64, kv_heads=kv_heads, itemsize=2) for P in costs
    )


def test_ring_memory_is_of_order_n_over_p():
    costs = [context_parallel_costs(1 << 16, P, heads=8, kv_heads=8, D=64) for P in (2, 4, 8, 16)]
    ring = [c["ring"]["peak_bytes"] for c in costs]
    gather = [c["all-gather"]["peak_bytes"] for c in costs]
    assert all(a / b > 1.9 for a, b in zip(ring, ring[1:], strict=False))  # halves with each doubling of P
    assert all(a / b < 1.5 for a, b in zip(gather, gather[1:], strict=False))  # dominated by all N keys and values


def test_the_gloo_ring_without_pytorch_says_what_to_install(monkeypatch):
    import sys

    from flashmath.ring_dist import run_ring

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails as if it were not installed
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    q, k, v = make(np.random.default_rng(0), 8, 8, 4, 4)
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[distributed\]'"):
        run_ring(q, k, v, world_size=2)


def test_a_failed_launchs_message_is_in_the_selected_language(tmp_path):
    """The RingError of a failed gloo launch (chapter 14 promises it names the rank) is composed in the parent process
    from catalog messages, the ranks' progress notes included: English by default, Chinese once zh_CN is selected
    (zhrev-o 14-7). Needs no PyTorch: the message is built from the files the ranks leave in the launch's folder."""
    from flashmath import i18n
    from flashmath.ring_dist import _failure, _note

    _note(tmp_path / "progress0", "in job {index}'s forward ring", index=2)
    english = str(_failure(tmp_path, 2, {1: 3}, [0]))
    assert english == (
        "first: rank 1 of 2 died without a Python exception (exit code 3); "
        "still running then, terminated: rank 0 (in job 2's forward ring)"
    )
    i18n.set_language("zh_CN")
    try:
        chinese = str(_failure(tmp_path, 2, {1: 3}, [0]))
        not_started = str(_failure(tmp_path, 3, {2: -9}, [1]))
    finally:
        i18n.set_language("en")
    assert chinese == (
        "最先出错的是：rank 1（共 2 个）没有抛出 Python 异常就退出了（退出码 3）；"
        "当时仍在运行、随即被终止的 rank：0（正在算例 2 的前向环中）"
    )
    assert not_started == (
        "最先出错的是：rank 2（共 3 个）没有抛出 Python 异常就退出了（被信号 SIGKILL 终止）；"
        "当时仍在运行、随即被终止的 rank：1（尚未开始）"
    )
