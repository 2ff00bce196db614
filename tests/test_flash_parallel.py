"""flash_attention's ``workers``: fa2's query tiles on threads (FlashAttention-2's parallelism over the sequence),
bitwise the same result for every number of workers, BLAS on one thread inside them, fa1 sequential, the errors."""

import os
import threading

import numpy as np
import pytest
from helpers import assert_close, make
from helpers import mask_kwargs as reference_mask_kwargs
from threadpoolctl import threadpool_info

import flashmath.flash as flash
from flashmath._checks import available_cores, thread_count
from flashmath.attention import attention
from flashmath.flash import flash_attention

WORKERS = [1, 2, 3, 7, None]
# (N, M, D, Dv, block_q, block_k): N and M multiples of no block, N != M both ways, more workers than tiles,
# a single query tile (nothing to share), and the default blocks with several query tiles
CASES = [
    (37, 53, 16, 8, 8, 16),
    (53, 37, 5, 3, 5, 7),
    (100, 100, 8, 8, 9, 33),
    (6, 40, 4, 4, 8, 8),
    (1100, 700, 16, 16, None, None),
]
MASKS = ["none", "causal", "top-left", "random", "padding"]


def mask_kwargs(kind, N, M, rng):
    if kind == "padding":  # the last three keys masked for every query
        return {"mask": np.broadcast_to(np.arange(M) < max(M - 3, 1), (N, M))}
    return reference_mask_kwargs(kind, N, M, rng)[0]


def blas_threads():
    return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("N, M, D, Dv, block_q, block_k", CASES)
def test_bitwise_the_same_for_every_workers(N, M, D, Dv, block_q, block_k, kind, dtype):
    rng = np.random.default_rng(N * 1000 + M)
    q, k, v = (a.astype(dtype) for a in make(rng, N, M, D, Dv))
    kwargs = mask_kwargs(kind, N, M, rng)
    results = [
        flash_attention(q, k, v, block_q=block_q, block_k=block_k, return_lse=True, workers=w, **kwargs)
        for w in WORKERS
    ]
    for a, lse in results[1:]:
        np.testing.assert_array_equal(a, results[0][0])
        np.testing.assert_array_equal(lse, results[0][1])
    a_ref, lse_ref = attention(q, k, v, return_lse=True, **kwargs)  # and right, not only the same
    assert_close(results[0][0], a_ref, 1e-5 if dtype == np.float32 else 1e-10)


def test_bitwise_the_same_with_batch_dimensions_nan_and_a_float16_accumulator():
    rng = np.random.default_rng(5)
    q, k, v = make(rng, 45, 30, 8, 4, batch=(2, 3))
    q[0, 1, 37, 2] = np.nan  # NaN in: NaN out, in the same rows whatever the workers
    keep = rng.random((3, 45, 30)) < 0.6
    for kwargs in ({"mask": keep}, {"causal": True, "acc_dtype": np.float16}):
        first = flash_attention(q, k, v, block_q=4, block_k=8, workers=1, return_lse=True, **kwargs)
        for w in (2, 4, None):
            again = flash_attention(q, k, v, block_q=4, block_k=8, workers=w, return_lse=True, **kwargs)
            np.testing.assert_array_equal(again[0], first[0])
            np.testing.assert_array_equal(again[1], first[1])
    assert np.isnan(first[0][0, 1, 37]).all() and not np.isnan(first[0][0, 1, 36]).any()


def test_empty_sizes_with_workers():
    q, k, v = np.ones((5, 3)), np.ones((0, 3)), np.ones((0, 2))
    a, lse = flash_attention(q, k, v, block_q=2, workers=3, return_lse=True)  # M = 0: every row has no key
    assert (a == 0).all() and (lse == -np.inf).all()
    assert flash_attention(np.ones((0, 3)), np.ones((4, 3)), np.ones((4, 2)), workers=3).shape == (0, 2)


def test_query_tiles_run_at_the_same_time_with_blas_on_one_thread(monkeypatch):
    rng = np.random.default_rng(1)
    q, k, v = make(rng, 40, 24, 6, 5)
    before = blas_threads()
    barrier = threading.Barrier(2, timeout=10)  # broken (an error) unless two tile steps wait here at once
    seen = {}
    step = flash.fa2_tile_step

    def spy(*args):
        ident = threading.get_ident()
        if ident not in seen:
            seen[ident] = blas_threads()
            barrier.wait()
        return step(*args)

    monkeypatch.setattr(flash, "fa2_tile_step", spy)
    a = flash_attention(q, k, v, block_q=5, block_k=8, workers=2)
    assert len(seen) == 2 and threading.get_ident() not in seen  # two workers, not the caller
    assert all(set(threads.values()) == {1} for threads in seen.values()) and seen  # BLAS on one thread
    assert blas_threads() == before  # and back as it was after the call
    assert_close(a, attention(q, k, v), 1e-10)


def test_one_worker_runs_in_the_calling_thread_and_fa1_ignores_workers(monkeypatch):
    rng = np.random.default_rng(2)
    q, k, v = make(rng, 40, 24, 6, 5)
    threads = set()
    for name in ("fa2_tile_step", "fa1_tile_step"):
        step = getattr(flash, name)
        monkeypatch.setattr(flash, name, lambda *args, step=step: threads.add(threading.get_ident()) or step(*args))
    flash_attention(q, k, v, block_q=5, block_k=8, workers=1)
    fa1 = [flash_attention(q, k, v, block_q=5, block_k=8, order="fa1", workers=w) for w in (1, 4, None)]
    assert threads == {threading.get_ident()}
    for a in fa1[1:]:
        np.testing.assert_array_equal(a, fa1[0])


@pytest.mark.parametrize(
    "workers, error, match",
    [
        (0, ValueError, "workers must be a positive number of threads or None .*, got 0"),
        (-2, ValueError, "workers must be a positive number of threads"),
        (2.0, TypeError, "workers must be a positive integer \\(threads\\) or None"),
        (True, TypeError, "workers must be a positive integer .*got the bool True"),
        ("2", TypeError, "workers must be a positive integer"),
    ],
)
@pytest.mark.parametrize("order", ["fa1", "fa2"])
def test_bad_workers_are_refused(workers, error, match, order):
    q = np.ones((4, 3))
    with pytest.raises(error, match=match):
        flash_attention(q, q, q, order=order, workers=workers)


def test_default_is_the_cores_this_process_may_use(monkeypatch):
    assert thread_count(np.int64(3), "workers") == 3
    if hasattr(os, "sched_getaffinity"):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5})
        assert available_cores() == 3 and thread_count(None, "workers") == 3
        monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert available_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert available_cores() == 1


def test_overlapping_calls_from_threads_keep_blas_on_one_thread_and_restore_it_after_the_last(monkeypatch):
    """Issue 33, fault 10 (flash-attention #637): thread A calls, thread B calls while A runs, A returns first.
    Before, A's return restored the process's BLAS threads while B still ran, and B's return left the process at
    one thread. The overlap is forced by events: no sleeps, no timing."""
    rng = np.random.default_rng(7)
    q, k, v = make(rng, 40, 24, 6, 5)
    expected = flash_attention(q, k, v, block_q=5, block_k=8, workers=1, return_lse=True)  # sequential
    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
    seen, results = {}, {}
    step = flash.fa2_tile_step

    def spy(*args):
        name = threading.current_thread().name
        if name == "A" and "A" not in seen:
            seen["A"] = blas_threads()
            a_inside.set()
            assert b_inside.wait(10)  # B enters while A runs
        elif name == "B" and "B" not in seen:
            seen["B"] = blas_threads()
            b_inside.set()
            assert a_done.wait(10)  # A has returned, B still runs
            seen["B after A"] = blas_threads()
        return step(*args)

    def call(name, workers):
        results[name] = flash_attention(q, k, v, block_q=5, block_k=8, workers=workers, return_lse=True)
        if name == "A":
            a_done.set()

    # the process's own setting (a threadpoolctl limit held here would make this thread the only one that can
    # change OpenBLAS's threads: test_a_call_that_cannot_limit_blas_warns)
    before = blas_threads()
    if not any(n > 1 for n in before.values()):
        pytest.skip("BLAS runs one thread already: nothing to restore")
    monkeypatch.setattr(flash, "fa2_tile_step", spy)
    thread_a = threading.Thread(target=call, args=("A", 1), name="A")
    thread_a.start()
    assert a_inside.wait(10)
    thread_b = threading.Thread(target=call, args=("B", 1), name="B")
    thread_b.start()
    thread_a.join(10)
    thread_b.join(10)
    after = blas_threads()
    assert set(results) == {"A", "B"}  # both calls returned (a worker's exception would leave its name out)
    for key in ("A", "B", "B after A"):
        assert set(seen[key].values()) == {1}, key  # BLAS on one thread in every call, all the way through
    assert after == before  # and the process's setting back after the last call
    for name in ("A", "B"):  # bitwise the sequential results
        np.testing.assert_array_equal(results[name][0], expected[0])
        np.testing.assert_array_equal(results[name][1], expected[1])


def test_a_call_that_cannot_limit_blas_warns():
    """threadpoolctl lets only the thread holding a limit change OpenBLAS's threads: a call from another thread
    then cannot limit them, and says so; from the thread that holds the limit it can."""
    from threadpoolctl import threadpool_limits

    q = np.ones((6, 3))
    with threadpool_limits(limits=2, user_api="blas"):
        if set(blas_threads().values()) != {2} or not any(
            info["internal_api"] == "openblas" for info in threadpool_info()
        ):
            pytest.skip("needs an OpenBLAS that can run two threads")
        np.testing.assert_array_equal(flash_attention(q, q, q, workers=1), np.ones((6, 3)))  # no warning here
        caught = []

        def call():
            with pytest.warns(RuntimeWarning, match="could not limit numpy's BLAS to one thread"):
                flash_attention(q, q, q, workers=1)
            caught.append(True)

        thread = threading.Thread(target=call)
        thread.start()
        thread.join(10)
    assert caught == [True]
