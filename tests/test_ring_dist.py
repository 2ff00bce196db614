"""The ring on real processes (flashmath.ring_dist): torch.distributed with gloo on the loopback interface, 1, 2 and
4 processes started with torch.multiprocessing (spawn), against one-process flash_attention (float64, 1e-13) and
bit for bit against the simulated ring; bytes counted from the P2P operations against the model; a rank that raises
fails the launch with its name, within the deadline. Skipped without PyTorch.

Each launch starts its processes once (importing PyTorch in each takes most of the time) and runs several problems
(``run_rings``). Every launch has a deadline (``timeout``): past it the processes are terminated and the test fails,
so nothing here can hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import ROOT

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():  # pragma: no cover
    pytest.skip("this PyTorch has no torch.distributed with gloo", allow_module_level=True)

from threadpoolctl import threadpool_limits  # noqa: E402

from flashmath import ring_dist  # noqa: E402
from flashmath.backward import attention_backward  # noqa: E402
from flashmath.flash import flash_attention  # noqa: E402
from flashmath.ring import ring_attention, ring_attention_backward  # noqa: E402
from flashmath.ring_cost import (  # noqa: E402
    kv_row_bytes,
    ring_backward_bytes_model,
    ring_bytes_model,
    ring_held_bytes_model,
)
from flashmath.ring_dist import RingError, context_parallel_probe, run_ring, run_rings  # noqa: E402

DEADLINE = 90.0  # seconds per launch; measured on 2 shared cores: see the report in each test's assertion
TOL = 1e-13


def problem(seed, N, gqa, D=8, Dv=6):
    rng = np.random.default_rng(seed)
    H, H_kv = (4, 2) if gqa else (2, 2)
    q = rng.standard_normal((2, H, N, D))
    k = rng.standard_normal((2, H_kv, N, D))
    v = rng.standard_normal((2, H_kv, N, Dv))
    grad_a = rng.standard_normal((2, H, N, Dv))
    return {"q": q, "k": k, "v": v, "enable_gqa": gqa, "grad_a": grad_a}


def jobs_for(P):
    """Causal or not, zig-zag or not, grouped heads or not, N = 37 (divisible by no P > 1, nor by 2P), and one
    N = 8 P; the backward in every job."""
    jobs = []
    for index, (causal, zigzag, gqa) in enumerate(
        [(False, False, True), (True, False, False), (True, True, True), (False, True, False)]
    ):
        job = problem(index, 37, gqa)
        job.update(causal=causal, zigzag=zigzag, block_q=8, block_k=8)
        jobs.append(job)
    job = problem(9, 8 * P, True)
    job.update(causal=True, zigzag=True)
    jobs.append(job)
    return jobs


def check(job, run, P):
    """The run against one process, the simulated ring (bit for bit) and the byte and memory models."""
    q, k, v, grad_a = job["q"], job["k"], job["v"], job["grad_a"]
    opts = {"causal": job["causal"], "zigzag": job["zigzag"], "enable_gqa": job["enable_gqa"]}
    blocks = {"block_q": job.get("block_q"), "block_k": job.get("block_k")}
    want, want_lse = flash_attention(q, k, v, causal=job["causal"], enable_gqa=job["enable_gqa"], return_lse=True)
    assert run.output.shape == want.shape and np.abs(run.output - want).max() <= TOL
    assert np.abs(run.lse - want_lse).max() <= TOL
    with threadpool_limits(limits=1):  # as each rank: BLAS on one thread
        ring_a, ring_lse = ring_attention(q, k, v, P, return_lse=True, **opts, **blocks)
        ring_grads = ring_attention_backward(q, k, v, ring_a, ring_lse, grad_a, P, **opts)
    # the same steps in the same order: the processes compute what the simulation computes, bit for bit
    assert np.array_equal(run.output, ring_a) and np.array_equal(run.lse, ring_lse)
    assert all(np.array_equal(x, y) for x, y in zip(run.grads, ring_grads, strict=True))
    # and the gradients are those of one process (the numpy backward, grouped heads expanded then summed)
    G = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    gq, gk, gv = attention_backward(q, kk, vv, want, want_lse, grad_a, causal=job["causal"])
    gk = gk.reshape(k.shape[:2] + (G,) + k.shape[2:]).sum(axis=2)
    gv = gv.reshape(v.shape[:2] + (G,) + v.shape[2:]).sum(axis=2)
    for got, ref in zip(run.grads, (gq, gk, gv), strict=True):
        assert got.shape == ref.shape and np.abs(got - ref).max() <= TOL
    # bytes counted from the isend / irecv tensors of every step, against the models
    N, D, Dv, B, H, H_kv = q.shape[2], q.shape[3], v.shape[3], q.shape[0], q.shape[1], k.shape[1]
    row = kv_row_bytes(D, Dv, kv_heads=H_kv, batch=B)
    model = ring_bytes_model(N, P, row_bytes=row, zigzag=job["zigzag"])
    assert np.array_equal(run.sent_bytes, model)
    # what rank r receives at step t is what rank r - 1 sends
    assert np.array_equal(run.received_bytes, np.roll(model, 1, axis=1))
    assert np.array_equal(run.backward_sent_bytes, ring_backward_bytes_model(N, P, row_bytes=row, zigzag=job["zigzag"]))
    held = ring_held_bytes_model(N, N, P, q_row_bytes=B * H * D * 8, state_row_bytes=B * H * (Dv + 1) * 8,
                                 kv_row_bytes=row, zigzag=job["zigzag"])  # fmt: skip
    assert np.array_equal(run.held_bytes, held)
    # the transfer of each step was posted before its computation began, completed (as the helper thread saw it)
    # before the rank was done waiting, and the wait began when the computation ended
    posted, started, computed, done, waited = np.moveaxis(run.timeline, -1, 0)
    assert (posted <= started).all() and (started <= computed).all() and (computed <= waited).all()
    assert (posted <= done).all() and (done <= waited).all()
    assert (done[-1] == posted[-1]).all()  # the last step has no transfer
    assert np.allclose(run.wait_s, waited - computed) and np.allclose(run.compute_s, computed - started)
    return float(np.abs(run.output - want).max())


@pytest.mark.parametrize("P", [2, 4])
def test_gloo_ring_equals_one_process(P):
    jobs = jobs_for(P)
    start = time.perf_counter()
    runs = run_rings(jobs, world_size=P, timeout=DEADLINE)
    wall = time.perf_counter() - start
    assert wall < DEADLINE, f"the launch of {P} processes took {wall:.1f} s"
    for job, run in zip(jobs, runs, strict=True):
        check(job, run, P)


def test_run_ring_on_one_process():
    """One rank: no message at all (the shard it holds is the whole sequence), the same result."""
    job = jobs_for(2)[1]  # causal, N = 37, with the backward
    job["zigzag"] = False
    options = {name: job[name] for name in ("causal", "enable_gqa", "grad_a", "block_q", "block_k")}
    run = run_ring(job["q"], job["k"], job["v"], world_size=1, timeout=DEADLINE, **options)
    check(job, run, 1)
    assert run.sent_bytes.size == 0 and not run.backward_sent_bytes.any()


def test_the_timeline_stamps_each_transfer_between_its_post_and_the_end_of_the_wait():
    """Chapter 14's timeline on 2 ranks (the job cell 22 draws): each step-0 transfer is stamped complete after it
    was posted and no later than the rank was done waiting for it (whether it completed during the computation is a
    measurement, drawn by the chapter, not asserted here); the last step has no transfer."""
    q, k, v = (np.random.default_rng(14).standard_normal((4096, 64)) for _ in range(3))
    run = run_ring(q, k, v, world_size=2, causal=True, zigzag=True, timeout=DEADLINE)
    posted, started, computed, done, waited = np.moveaxis(run.timeline, -1, 0)  # [t, r]
    assert (posted[0] < done[0]).all() and (done[0] <= waited[0]).all() and (computed <= waited).all()
    assert (done[-1] == posted[-1]).all()


class _FakeRequest:
    """A request whose ``wait`` blocks until the test releases it, then records when it returned."""

    def __init__(self, error: Exception | None = None):
        self.release, self.error, self.returned = threading.Event(), error, None

    def wait(self, timeout=None):
        assert self.release.wait(5.0)
        self.returned = time.time()
        if self.error is not None:
            raise self.error
        return True


def test_the_completion_thread_stamps_the_last_request_and_reraises_with_the_step():
    """The stamp is taken on the helper thread when the last ``wait`` returns, not when the rank joins it."""
    from flashmath.ring_dist import _Completion

    posted = time.time()
    first, last = _FakeRequest(), _FakeRequest()
    completion = _Completion([first, last], 5.0, "rank 0, step 0", posted)
    first.release.set()
    last.release.set()
    completion.thread.join(5.0)  # the helper has finished; the rank is still "computing"
    before_join = time.time()
    time.sleep(0.01)
    done = completion.join()
    assert last.returned <= done <= before_join  # when the last wait returned, before the rank's join
    assert _Completion([], 5.0, "rank 0, step 1", posted).join() == posted  # no transfer: done when posted
    broken = _FakeRequest(RuntimeError("Connection closed by peer"))
    broken.release.set()
    failing = _Completion([broken], 5.0, "rank 1, step 0", posted)
    with pytest.raises(RuntimeError, match=r"^rank 1, step 0: RuntimeError: Connection closed by peer"):
        failing.join()


def test_a_rank_that_raises_fails_the_launch_with_its_name():
    """Its peer fails too (its connection closed): the message names the rank that failed first."""
    job = problem(0, 16, False)
    start = time.perf_counter()
    with pytest.raises(RingError, match=r"^first: rank 1 of 2 raised ValueError: fault injected on rank 1") as info:
        run_rings([job], world_size=2, timeout=DEADLINE, inject_fault=(1, "raise"))
    assert time.perf_counter() - start < DEADLINE
    assert info.value.ranks[0] == 1
    assert "Traceback" in str(info.value)


def test_arguments_are_checked_before_any_process_starts():
    job = problem(0, 5, False)
    with pytest.raises(ValueError, match="zig-zag sharding cuts the sequence into 2 P = 6 pieces"):
        run_rings([dict(job, zigzag=True)], world_size=3)
    with pytest.raises(TypeError, match="unknown job keys"):
        run_rings([dict(job, causual=True)], world_size=2)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        run_rings([job], world_size=2, timeout=0)
    with pytest.raises(ValueError, match="inject_fault"):
        run_rings([job], world_size=2, inject_fault=(2, "raise"))


def test_pytorch_context_parallel_raises_for_causal_attention_on_a_cpu():
    """PyTorch 2.13's own context parallelism has no CPU ring: with is_causal=True DTensor finds no sharding for the
    CPU attention kernel. (Without the mask it all-gathers K and V: the next test.)"""
    found = context_parallel_probe(2, causal=(True,), timeout=DEADLINE)[True]
    assert found["raised"].startswith("NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu")
    assert "does not have a sharding strategy registered" in found["raised"]
    assert found["collectives"] == {}


def test_pytorch_context_parallel_all_gathers_k_and_v_without_a_mask_on_a_cpu():
    """Without the mask it runs, with no ring: two all-gathers (K and V whole on every process), the output equal to
    one-process SDPA. About a minute (DTensor searches many placements), which is why chapter 14 runs it only on
    request (RUN_PLAIN_PROBE) and states this test's result."""
    found = context_parallel_probe(2, causal=(False,), timeout=300)[False]
    assert found["raised"] is None and found["max_error"] < 1e-13
    assert found["collectives"] == {"c10d_functional.all_gather_into_tensor": 2}


def test_torchrun_runs_the_ring_from_a_terminal():
    """README's command, `torchrun --nproc-per-node=... -m flashmath.ring_dist`, on 2 processes (torchrun's agent
    serves the rendezvous on localhost, at a port it picks)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "-m", "flashmath.ring_dist",
               "--causal", "--zigzag", "--backward", "--length", "50", "--dim", "8"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ring attention on 2 gloo processes: N = 50" in done.stdout
    assert "equal: True" in done.stdout and done.stdout.rstrip().endswith("OK")
    # the forward's bytes and, with --backward, the backward's, each against its model
    assert "forward bytes sent per rank" in done.stdout and "backward bytes sent per rank" in done.stdout
    assert "equal: False" not in done.stdout


def test_the_report_is_in_the_language_given_with_lang(capsys):
    """`--lang zh_CN` prints rank 0's report through the catalog in Chinese (zhrev-ah 14-2); English by default."""
    from flashmath.i18n import get_language, set_language

    before = get_language()
    try:
        argv = ["--world-size", "2", "--length", "20", "--dim", "4", "--heads", "2", "--kv-heads", "1", "--causal"]
        assert ring_dist.main([*argv, "--lang", "zh_CN"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("在 2 个 gloo 进程上运行环形注意力：N = 20") and out.rstrip().endswith("通过"), out
        assert "ring attention" not in out and "bytes sent" not in out, out
        assert ring_dist.main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith("ring attention on 2 gloo processes: N = 20") and out.rstrip().endswith("OK"), out
    finally:
        set_language(before, font=False)
