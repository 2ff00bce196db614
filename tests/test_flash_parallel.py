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
    results = [flash_attention(q, k, v, block_q=block_q, block_k=block_k, return_lse=True, workers=w, **kwargs)
               for w in WORKERS]
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
