"""Ring attention on real processes: ``torch.distributed`` with the gloo backend, one process per device (chapter 14).

The ring of :mod:`flashmath.ring`, with its shards in ``P`` operating-system processes that talk over TCP on the
loopback interface. Each process runs the same step code as the simulation (:func:`flashmath.ring.ring_forward_step`,
:func:`flashmath.ring.ring_backward_step`: numpy, the package's ``flash_attention``, chapter 10's merge); PyTorch
only carries the messages. At each step a rank first posts the transfer of its key/value shard to rank ``r + 1``
and of the next shard from rank ``r - 1`` (``torch.distributed.batch_isend_irecv`` with ``P2POp``), then computes
with the shard it holds, then waits for the transfer: communication overlaps computation, as Ring Attention
prescribes. The bytes a rank sends are counted from the tensors of its ``isend`` operations and equal
:func:`flashmath.ring_cost.ring_bytes_model`.

Two ways to start it:

* from Python (a notebook, a test): :func:`run_ring` (or :func:`run_rings` for several problems in one launch)
  starts ``P`` processes with ``torch.multiprocessing`` (``spawn``), each running :func:`ring_worker`;
* from a terminal: ``torchrun --nproc-per-node=4 -m flashmath.ring_dist --causal --zigzag`` (:func:`main`; without
  ``torchrun``, ``python -m flashmath.ring_dist --world-size 4`` launches the processes itself).

Each process uses one thread (``torch.set_num_threads(1)``, numpy's BLAS limited to one thread), so that ``P``
processes on a small machine do not oversubscribe its cores. The processes meet through a ``TCPStore`` at
``127.0.0.1`` on a port the operating system picks (no race for a free port; the store's server is the launching
process and, like every ``TCPStore`` server of PyTorch's libuv backend, it binds that one port on all interfaces,
for the length of the run), and gloo's own connections use the loopback interface (``GLOO_SOCKET_IFNAME``).
Checked in a run on Linux: each rank's gloo socket listens on 127.0.0.1 and connects 127.0.0.1 to 127.0.0.1, and
its store connection goes to 127.0.0.1. Nothing else is reached.

Failures surface, never hang: every wait has a timeout (``init_process_group(timeout=...)`` and each transfer's
``wait(timeout=...)``), the launcher joins the processes with a deadline, and it raises :class:`RingError` naming
the rank that failed first (with its exception), or the ranks still running at the deadline.

PyTorch is needed (the ``distributed`` extra, or the ``triton`` extra, which also installs it); without it this
module imports, and the functions that need PyTorch raise ``ModuleNotFoundError`` saying what to install.

Sources: PyTorch 2.13 documentation, ``torch.distributed`` (``batch_isend_irecv``, ``P2POp``, ``TCPStore``,
``init_process_group``'s ``timeout``, the gloo backend and ``GLOO_SOCKET_IFNAME``), ``torch.multiprocessing``
(``start_processes``, ``ProcessContext.join``) and ``torchrun``; H. Liu et al., Ring Attention
(arXiv:2310.01889), section 3 (overlapping the key/value transfer with the blockwise computation); Z. Zhu,
ring-flash-attention (``ring_flash_attn/utils.py``, ``RingComm``: ``batch_isend_irecv`` to the next rank, from the
previous).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import size
from flashmath.i18n import LANGUAGES, aside, get_language, set_language
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.ring import (
    RingLayout,
    group_rows,
    ring_backward_step,
    ring_forward_step,
    ring_inputs,
    ring_step,
    ungroup_kv,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "DistributedExtraNotInstalled",
    "INSTALL_COMMANDS",
    "JOB_KEYS",
    "context_parallel_probe",
    "context_parallel_worker",
    "RingError",
    "RingRun",
    "loopback_interface",
    "main",
    "require_torch",
    "rank_ring_backward",
    "rank_ring_forward",
    "ring_worker",
    "run_ring",
    "run_rings",
]

DEFAULT_TIMEOUT = 120.0
"""Seconds a launch may take, start of the processes included (the deadline of :func:`run_rings`); each rank's
waits time out after half of it."""

INSTALL_COMMANDS = (
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    'pip install -e ".[distributed]" -c constraints.txt',
)
"""The distributed extra from the course's folder, in its activated environment: PyTorch's CPU build first, then the
extra, with the versions that made the stored outputs (``constraints.txt``; README, "Ring attention on several
processes")."""

INSTALL_HINT = N_(
    "the gloo ring needs PyTorch: install the CPU build, then the distributed extra (README, 'Ring attention on "
    "several processes'): pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
    "pip install -e '.[distributed]' -c constraints.txt"
)


def _torch() -> Any:
    """``torch`` and ``torch.distributed``, or ModuleNotFoundError with the install command."""
    try:
        import torch
        import torch.distributed as dist
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(_(INSTALL_HINT)) from error
    return torch, dist


class DistributedExtraNotInstalled(ModuleNotFoundError):
    """PyTorch is missing. In a notebook it shows as its message alone, without a traceback (IPython prints what
    ``_render_traceback_`` returns), and, being an error, it stops *Run All* at that cell."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


#: The chapters that check PyTorch in their first cell (``require_torch("Chapter 14")``), marked for the catalog.
CHAPTER_NAMES = (N_("This chapter"), N_("Chapter 14"))


def require_torch(chapter: str = "This chapter") -> None:
    """Stop with the install commands unless PyTorch is installed (the first code cell of chapter 14).

    Prints one line when it is, in the selected language (:mod:`flashmath.i18n`). Raises:
        DistributedExtraNotInstalled: (a ModuleNotFoundError) with the commands that install the distributed extra.
    """
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        print(_("{chapter} needs PyTorch (the distributed extra): it is installed.").format(chapter=_(chapter)))
        return
    commands = "\n".join(f"    {command}" for command in INSTALL_COMMANDS)
    raise DistributedExtraNotInstalled(
        _(
            "{chapter} needs PyTorch, the distributed extra (the triton extra installs it too).\n"
            "Install it in a terminal, in the course's folder, with its environment activated:\n"
            "{commands}\n"
            "then restart the kernel (Kernel > Restart Kernel...) and run the chapter again.\n"
            "Run All stops here. The stored outputs below were made with PyTorch: to read them,\n"
            "File > Reload Notebook from Disk (if it was saved since: git restore the notebook's file)."
        ).format(chapter=_(chapter), commands=commands)
    ) from None


class RingError(RuntimeError):
    """A rank of a gloo ring failed (raised, died) or missed the deadline; the message names it.

    Attributes:
        ranks: the failing ranks, the first failure first (for a deadline: the ranks still running).
    """

    def __init__(self, message: str, ranks: Sequence[int]):
        super().__init__(message)
        self.ranks = list(ranks)


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), or None where
    ``socket.if_nameindex`` is missing or lists none."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # pragma: no cover - platforms without if_nameindex
        return None
    for name in names:
        if name == "lo" or name.startswith("lo") and name[2:].isdigit():
            return name
    return None  # pragma: no cover


# ----------------------------------------------------------------------------------------------------------------
# One rank's loops: the same steps as flashmath.ring, messages through torch.distributed
# ----------------------------------------------------------------------------------------------------------------


def _tensor(torch: Any, x: np.ndarray) -> Any:
    """A contiguous, writable copy of ``x`` as a tensor (the buffer a message is sent from)."""
    return torch.from_numpy(np.array(x, copy=True, order="C"))


def _exchange(dist: Any, send: list, receive: list, rank: int, P: int, tag: int) -> tuple[list, int, int]:
    """Post the sends of ``send`` to rank ``r + 1`` and the receives into ``receive`` from rank ``r - 1`` as one
    ``batch_isend_irecv``. Message ``i`` of a step has tag ``tag + i`` on both sides.

    Returns:
        ``(requests, sent_bytes, received_bytes)``: the requests to wait on, and the bytes of the tensors of the
        ``isend`` and ``irecv`` operations posted (the count the tests compare with the model).
    """
    nxt, prev = (rank + 1) % P, (rank - 1) % P
    ops = [dist.P2POp(dist.isend, t, nxt, tag=tag + i) for i, t in enumerate(send)]
    ops += [dist.P2POp(dist.irecv, t, prev, tag=tag + i) for i, t in enumerate(receive)]
    sent = sum(op.tensor.nbytes for op in ops if op.op is dist.isend)
    received = sum(op.tensor.nbytes for op in ops if op.op is dist.irecv)
    return dist.batch_isend_irecv(ops), int(sent), int(received)


def _wait(requests: list, timeout: float, what: str) -> float:
    """Wait for every request, each at most ``timeout`` seconds; the seconds waited. RuntimeError naming ``what``."""
    start = time.perf_counter()
    for request in requests:
        try:
            request.wait(timeout=datetime.timedelta(seconds=timeout))
        except Exception as error:
            raise RuntimeError(
                _("{what}: {error}").format(what=what, error=f"{type(error).__name__}: {error}")
            ) from error
    return time.perf_counter() - start


class _Completion:
    """Waits for a step's requests on a helper thread and stamps the wall-clock time the last one completed.

    The rank computes meanwhile; :meth:`join` (after the computation) waits for the helper and re-raises what
    its ``wait`` raised. Only the helper thread calls ``wait`` on the requests. With no request the transfer is
    done at once (``done`` is the time of posting).
    """

    def __init__(self, requests: list, timeout: float, what: str, posted: float) -> None:
        self.requests, self.timeout, self.what = requests, timeout, what
        self.done = posted
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if requests:
            self.thread = threading.Thread(target=self._run, name="ring-transfer", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            for request in self.requests:
                request.wait(timeout=datetime.timedelta(seconds=self.timeout))
            self.done = time.time()
        except BaseException as error:  # re-raised on the rank's thread by join
            self.error = error

    def join(self) -> float:
        """Wait for the helper; the time the transfer completed. RuntimeError naming ``what`` on failure."""
        if self.thread is not None:
            self.thread.join(self.timeout * len(self.requests) + 5.0)
            if self.thread.is_alive():
                raise RuntimeError(
                    _("{what}: not completed after {seconds} s").format(
                        what=self.what, seconds=f"{self.timeout * len(self.requests):.0f}"
                    )
                )
        if self.error is not None:
            raise RuntimeError(
                _("{what}: {error}").format(what=self.what, error=f"{type(self.error).__name__}: {self.error}")
            ) from self.error
        return self.done


def rank_ring_forward(
    q_shard: np.ndarray,
    k_shard: np.ndarray,
    v_shard: np.ndarray,
    layout: RingLayout,
    rank: int,
    *,
    causal: bool,
    scale: float,
    block_q: int | None = None,
    block_k: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """One rank's forward ring, in an initialised gloo process group of ``layout.num_devices`` ranks.

    Args:
        q_shard ``(..., n_r, D)``, k_shard ``(..., m_r, D)``, v_shard ``(..., m_r, Dv)``: this rank's shards
            (:meth:`flashmath.ring.RingLayout.take`; grouped heads already split as ``flashmath.ring`` does).
        layout, rank: the shards of every rank (all ranks pass the same layout), and this rank.
        causal, scale, block_q, block_k: as :func:`flashmath.ring.ring_forward_step`.
        timeout: seconds each transfer may take before the rank raises.

    Returns:
        ``(a, lse, counts)``: the rank's output ``(..., n_r, Dv)`` and logsumexp ``(..., n_r)`` (the merged state), and
        ``counts = {"sent_bytes": [per step], "received_bytes": [...], "compute_s": [...], "wait_s": [...],
        "held_bytes": [...], "timeline": [...]}``, the sent bytes summed from the ``isend`` tensors; each timeline
        entry ``(posted, started, computed, done, waited)`` (wall clock): the transfer posted, the computation
        started and ended, the transfer completed (stamped by a helper thread blocked in the requests' ``wait``,
        so it is known while the rank computes) and the rank done waiting for it.

    Raises:
        RuntimeError: a transfer failed or timed out (the message names the step and the peer).
    """
    torch, dist = _torch()
    P = layout.num_devices
    state_dtype = np.result_type(q_shard.dtype, k_shard.dtype, v_shard.dtype, np.float32)
    a = np.zeros(
        np.broadcast_shapes(q_shard.shape[:-2], k_shard.shape[:-2]) + (q_shard.shape[-2], v_shard.shape[-1]),
        state_dtype,
    )
    lse = np.full(a.shape[:-1], -np.inf, state_dtype)
    k_t, v_t = _tensor(torch, k_shard), _tensor(torch, v_shard)
    names = ("sent_bytes", "received_bytes", "compute_s", "wait_s", "held_bytes", "timeline")
    counts: dict = {name: [] for name in names}
    for t in range(P):
        step = ring_step(layout, causal, rank, t)
        requests: list = []
        posted = time.time()
        what = _("rank {r}, step {t}: the key/value transfer (to rank {to}, from rank {source})").format(
            r=rank, t=t, to=(rank + 1) % P, source=(rank - 1) % P
        )
        if t < P - 1:
            # the next shard (that of rank (r - t - 1) mod P) is received while this one is used
            rows = layout.kv_size((rank - t - 1) % P)
            k_next = torch.empty(k_t.shape[:-2] + (rows, k_t.shape[-1]), dtype=k_t.dtype)
            v_next = torch.empty(v_t.shape[:-2] + (rows, v_t.shape[-1]), dtype=v_t.dtype)
            requests, sent, received = _exchange(dist, [k_t, v_t], [k_next, v_next], rank, P, tag=2 * t)
            counts["sent_bytes"].append(sent)
            counts["received_bytes"].append(received)
        transfer = _Completion(
            requests, timeout, what, posted
        )  # stamps the transfer's completion while the rank computes
        held = q_shard.nbytes + a.nbytes + lse.nbytes + k_t.nbytes + v_t.nbytes
        counts["held_bytes"].append(int(held + (k_next.nbytes + v_next.nbytes if t < P - 1 else 0)))
        started = time.time()
        ring_forward_step(
            a, lse, q_shard, k_t.numpy(), v_t.numpy(), step, scale=scale, block_q=block_q, block_k=block_k
        )
        computed = time.time()
        done = transfer.join()
        waited = time.time()
        counts["compute_s"].append(computed - started)
        counts["wait_s"].append(waited - computed)
        counts["timeline"].append((posted, started, computed, done, waited))
        if t < P - 1:
            k_t, v_t = k_next, v_next
    return a, lse, counts


def rank_ring_backward(
    q_shard: np.ndarray,
    k_shard: np.ndarray,
    v_shard: np.ndarray,
    a_shard: np.ndarray,
    lse_shard: np.ndarray,
    grad_a_shard: np.ndarray,
    layout: RingLayout,
    rank: int,
    *,
    causal: bool,
    scale: float,
    block_q: int = 64,
    block_k: int = 64,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """One rank's backward ring: ``dQ_r`` stays, ``K_s, V_s`` travel ``P - 1`` hops and ``dK_s, dV_s`` ``P`` hops
    (the last one home).

    At step ``t`` the rank posts the transfer of ``K, V`` (as the forward), computes its part of the gradients
    (:func:`flashmath.ring.ring_backward_step`), then waits for the ``dK, dV`` that the previous rank sent after
    its step ``t - 1`` (which travelled while this step computed), adds its part, and sends them on.

    Returns:
        ``(dq, dk, dv, counts)``: this rank's ``dQ_r`` ``(..., n_r, D)`` and the gradients of its own shard ``dK_r``,
        ``dV_r``; ``counts["sent_bytes"][t]`` the bytes of the step's ``isend`` tensors.
    """
    torch, dist = _torch()
    P = layout.num_devices
    dtype = np.result_type(
        q_shard.dtype, k_shard.dtype, v_shard.dtype, a_shard.dtype, lse_shard.dtype, grad_a_shard.dtype, np.float32
    )
    dq = np.zeros(q_shard.shape, dtype)
    k_t, v_t = _tensor(torch, k_shard), _tensor(torch, v_shard)
    # the gradients of the shard held, which travel with it (zeros on their owner at step 0)
    dk_t, dv_t = torch.from_numpy(np.zeros(k_t.shape, dtype)), torch.from_numpy(np.zeros(v_t.shape, dtype))
    arriving: tuple | None = None  # (requests, dk, dv) of the gradients on their way to this rank
    counts: dict = {name: [] for name in ("sent_bytes", "compute_s", "wait_s")}
    for t in range(P):
        step = ring_step(layout, causal, rank, t)
        kv_requests: list = []
        sent = 0
        if t < P - 1:
            rows = layout.kv_size((rank - t - 1) % P)
            k_next = torch.empty(k_t.shape[:-2] + (rows, k_t.shape[-1]), dtype=k_t.dtype)
            v_next = torch.empty(v_t.shape[:-2] + (rows, v_t.shape[-1]), dtype=v_t.dtype)
            kv_requests, sent_kv, _received = _exchange(dist, [k_t, v_t], [k_next, v_next], rank, P, tag=4 * t)
            sent += sent_kv
        start = time.perf_counter()
        grads = ring_backward_step(
            q_shard,
            a_shard,
            lse_shard,
            grad_a_shard,
            k_t.numpy(),
            v_t.numpy(),
            step,
            scale=scale,
            block_q=block_q,
            block_k=block_k,
        )
        counts["compute_s"].append(time.perf_counter() - start)
        waited = 0.0
        if arriving is not None:  # dK_s, dV_s of the shard now held, sent by rank r - 1 after its step t - 1
            waited += _wait(
                arriving[0],
                timeout,
                _("rank {r}, step {t}: the gradient transfer from rank {source}").format(
                    r=rank, t=t, source=(rank - 1) % P
                ),
            )
            dk_t, dv_t = arriving[1], arriving[2]
        if grads is not None:
            (r0, r1), (c0, c1) = step.rows, step.cols
            dq[..., r0:r1, :] += grads[0]
            dk_t.numpy()[..., c0:c1, :] += grads[1]
            dv_t.numpy()[..., c0:c1, :] += grads[2]
        # dK_s, dV_s go on with the shard (after step P - 1: home, to their owner; with one rank they are home)
        if P > 1:
            rows_d = layout.kv_size((rank - t - 1) % P)
            dk_next = torch.empty(dk_t.shape[:-2] + (rows_d, dk_t.shape[-1]), dtype=dk_t.dtype)
            dv_next = torch.empty(dv_t.shape[:-2] + (rows_d, dv_t.shape[-1]), dtype=dv_t.dtype)
            d_requests, sent_d, _received_d = _exchange(dist, [dk_t, dv_t], [dk_next, dv_next], rank, P, tag=4 * t + 2)
            arriving = (d_requests, dk_next, dv_next)
            sent += sent_d
        else:
            arriving = ([], dk_t, dv_t)
        counts["sent_bytes"].append(sent)
        waited += _wait(kv_requests, timeout, _("rank {r}, step {t}: the key/value transfer").format(r=rank, t=t))
        counts["wait_s"].append(waited)
        if t < P - 1:
            k_t, v_t = k_next, v_next
    assert arriving is not None
    _wait(
        arriving[0],
        timeout,
        _("rank {r}: the gradients' last hop home from rank {source}").format(r=rank, source=(rank - 1) % P),
    )
    return dq, arriving[1].numpy(), arriving[2].numpy(), counts


# ----------------------------------------------------------------------------------------------------------------
# The process: what torch.multiprocessing runs on each rank
# ----------------------------------------------------------------------------------------------------------------


def _write(path: Path, value: Any) -> None:
    """Write ``value`` (pickled) to ``path`` atomically: a reader never sees half a file."""
    part = path.with_suffix(".part")
    with open(part, "wb") as file:
        pickle.dump(value, file, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(part, path)


def _init_gloo(rank: int, world_size: int, port: int, timeout: float) -> Any:
    """Join the process group: a ``TCPStore`` client at 127.0.0.1:``port``, gloo on the loopback interface."""
    torch, dist = _torch()
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    interface = loopback_interface()
    if interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    seconds = datetime.timedelta(seconds=timeout)
    store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=seconds)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=seconds)
    return dist


def _run_jobs(rank: int, jobs: list, timeout: float, fault: tuple | None, workdir: Path) -> list:
    """This rank's part of every job (forward, then backward when the job has ``grad_a``)."""
    results = []
    progress = workdir / f"progress{rank}"
    for index, job in enumerate(jobs):
        if fault is not None and fault[0] == rank and index == 0:
            _note(progress, N_("fault injected ({fault})"), fault=fault[1])
            if fault[1] == "raise":
                raise ValueError(
                    _("fault injected on rank {r} ({call})").format(
                        r=rank, call=f"run_rings(..., inject_fault=({rank}, 'raise'))"
                    )
                )
            if fault[1] == "exit":
                os._exit(3)
            time.sleep(10 * timeout)  # "hang"
        layout, opts = job["layout"], job["options"]
        _note(progress, N_("in job {index}'s forward ring"), index=index)
        a, lse, counts = rank_ring_forward(job["q"], job["k"], job["v"], layout, rank, timeout=timeout, **opts)
        result = {"a": a, "lse": lse, "counts": counts}
        if job.get("grad_a") is not None:
            _note(progress, N_("in job {index}'s backward ring"), index=index)
            dq, dk, dv, bcounts = rank_ring_backward(
                job["q"],
                job["k"],
                job["v"],
                a,
                lse,
                job["grad_a"],
                layout,
                rank,
                timeout=timeout,
                **job["backward_options"],
            )
            result.update(dq=dq, dk=dk, dv=dv, backward_counts=bcounts)
        results.append(result)
        _note(progress, N_("job {index} done"), index=index)
    return results


def _record_error(path: Path, rank: int, error: BaseException) -> None:
    """Write ``error{rank}.pkl``: when, what, the traceback (the first one written for a rank stays)."""
    target = path / f"error{rank}.pkl"
    if not target.exists():
        report = {"time": time.time(), "type": type(error).__name__, "message": str(error)}
        _write(target, {**report, "traceback": traceback.format_exc()})


def _guarded(rank: int, world_size: int, workdir: str, port: int, timeout: float, body: Any) -> None:
    """Run ``body(jobs, dist, path)`` in this rank's process group; write its result or the error (see
    :func:`ring_worker`), then end the process."""
    path = Path(workdir)
    if (path / "language").exists():  # the launcher's language: the messages this rank composes are in it
        set_language((path / "language").read_text(), font=False)
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):  # numpy's BLAS on one thread too (flash_attention does it per call)
            with open(path / f"in{rank}.pkl", "rb") as file:
                jobs = pickle.load(file)
            dist = _init_gloo(rank, world_size, port, timeout)
            try:
                results = body(jobs, dist, path)
            except BaseException as error:
                # recorded before the process group is destroyed: its peers see their connections close (and fail)
                # only after this rank's failure is on record, so the launcher names this rank first
                _record_error(path, rank, error)
                raise
            finally:
                dist.destroy_process_group()
        _write(path / f"out{rank}.pkl", results)
    except BaseException as error:
        _record_error(path, rank, error)
        raise
    # Done: the results are on disk. Leave without the interpreter's shutdown, which with PyTorch loaded takes
    # seconds on a busy machine (measured: about 4 s for 4 processes on 2 shared cores) and has nothing to clean up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ring_worker(
    rank: int, world_size: int, workdir: str, port: int, timeout: float, fault: tuple | None = None
) -> None:
    """The function each spawned process runs (``torch.multiprocessing.start_processes(ring_worker, ...)``).

    Reads its jobs from ``workdir/in{rank}.pkl`` (its shards only), joins the gloo group (:func:`run_rings` hosts the
    ``TCPStore`` on ``port``), runs every job (:func:`rank_ring_forward`, then :func:`rank_ring_backward` for a job
    with ``grad_a``), writes ``workdir/out{rank}.pkl``. On any exception it writes ``workdir/error{rank}.pkl`` (the
    time, the exception's type, message and traceback) before re-raising, so that the launcher can tell the rank
    that failed first from those that failed after it. After success the process ends at once (``os._exit(0)``):
    call it in a process of its own, never in one you want to keep.
    """
    _guarded(
        rank, world_size, workdir, port, timeout, lambda jobs, dist, path: _run_jobs(rank, jobs, timeout, fault, path)
    )


# ----------------------------------------------------------------------------------------------------------------
# The launcher
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class RingRun:
    """The result of one problem on a gloo ring (:func:`run_ring`).

    Attributes:
        output ``(..., N, Dv)``, lse ``(..., N)``: in sequence order, heads restored (as
            :func:`flashmath.ring.ring_attention`).
        grads: ``(grad_q, grad_k, grad_v)`` when ``grad_a`` was given, else None.
        world_size: ``P``. layout: the shards.
        sent_bytes: ``(P - 1, P)`` ints, bytes rank ``r`` sent after step ``t`` (from its ``isend`` tensors);
            received_bytes likewise. backward_sent_bytes: ``(P, P)`` or None.
        compute_s, wait_s: ``(P, P)`` seconds each rank computed, then waited for the transfer, at each step ``[t, r]``.
        held_bytes: ``(P, P)`` bytes each rank held during each step.
        timeline: ``(P, P, 5)`` seconds ``[t, r]``: when rank ``r`` posted step ``t``'s transfer, started and ended
            its computation, saw the transfer complete (its send and its receive; stamped by a helper thread blocked
            in the requests' ``wait``, to within a thread switch), and was done waiting for it after the computation
            (wall clock, from the earliest post of the run). The transfer runs from the first to the fourth (at the
            last step, with no transfer, the fourth is the first), the computation from the second to the third,
            the wait from the third to the fifth.
        wall_s: seconds of the whole launch (processes started, joined, results read).
    """

    output: np.ndarray
    lse: np.ndarray
    grads: tuple | None
    world_size: int
    layout: RingLayout
    sent_bytes: np.ndarray
    received_bytes: np.ndarray
    backward_sent_bytes: np.ndarray | None
    compute_s: np.ndarray
    wait_s: np.ndarray
    held_bytes: np.ndarray
    timeline: np.ndarray
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)


JOB_KEYS = ("q", "k", "v", "causal", "zigzag", "scale", "enable_gqa", "grad_a", "block_q", "block_k")
"""What a job of :func:`run_rings` may hold: the arguments of :func:`run_ring` for one problem."""


def _prepare_job(world_size: int, job: Mapping) -> tuple:
    """The checked job: ``(ring inputs, per-rank payloads, grad_a given)``."""
    unknown = set(job) - set(JOB_KEYS)
    if unknown:
        raise TypeError(f"run_rings: unknown job keys {sorted(unknown)}; a job takes {list(JOB_KEYS)}")
    ri = ring_inputs(
        job["q"],
        job["k"],
        job["v"],
        world_size,
        causal=job.get("causal", False),
        zigzag=job.get("zigzag", False),
        scale=job.get("scale"),
        enable_gqa=job.get("enable_gqa", False),
    )
    inp, layout = ri.inp, ri.layout
    grad_a = job.get("grad_a")
    if grad_a is not None:
        grad_a = group_rows(ri, grad_a, "grad_a", inp.batch_shape + (inp.N, inp.Dv))
    options = {"causal": ri.causal, "scale": inp.scale}
    payloads = []
    for r in range(world_size):
        payloads.append(
            {
                "layout": layout,
                "q": np.ascontiguousarray(layout.take(inp.q, r, "q")),
                "k": np.ascontiguousarray(layout.take(inp.k, r, "kv")),
                "v": np.ascontiguousarray(layout.take(inp.v, r, "kv")),
                "grad_a": None if grad_a is None else np.ascontiguousarray(layout.take(grad_a, r, "q")),
                "options": {**options, "block_q": job.get("block_q"), "block_k": job.get("block_k")},
                "backward_options": options,
            }
        )
    return ri, payloads, grad_a is not None


def _assemble(ri: Any, results: list, with_grads: bool, wall: float) -> RingRun:
    """One job's :class:`RingRun` from every rank's result (``results[r]``)."""
    layout, P, inp = ri.layout, ri.layout.num_devices, ri.inp
    a = layout.gather([res["a"] for res in results], "q").astype(inp.dtype, copy=False)
    lse = layout.gather([res["lse"] for res in results], "q", axis=-1)
    output, lse = ri.heads.restore((a, lse))

    def table(name: str, counts: str = "counts") -> np.ndarray:
        return np.array([res[counts][name] for res in results], dtype=float).T  # [t, r]

    timeline = np.array([res["counts"]["timeline"] for res in results], dtype=float).transpose(1, 0, 2)  # [t, r, 5]
    grads = None
    backward_sent = None
    if with_grads:
        dq = layout.gather([res["dq"] for res in results], "q")
        dk = layout.gather([res["dk"] for res in results], "kv")
        dv = layout.gather([res["dv"] for res in results], "kv")
        grads = (ri.heads.restore(dq), ungroup_kv(ri, dk), ungroup_kv(ri, dv))
        backward_sent = table("sent_bytes", "backward_counts").astype(np.int64).reshape(P, P)
    return RingRun(
        output=output,
        lse=lse,
        grads=grads,
        world_size=P,
        layout=layout,
        sent_bytes=table("sent_bytes").astype(np.int64).reshape(P - 1, P),
        received_bytes=table("received_bytes").astype(np.int64).reshape(P - 1, P),
        backward_sent_bytes=backward_sent,
        compute_s=table("compute_s").reshape(P, P),
        wait_s=table("wait_s").reshape(P, P),
        held_bytes=table("held_bytes").astype(np.int64).reshape(P, P),
        timeline=timeline - timeline.min(),
        wall_s=wall,
    )


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return _("killed by signal {name}").format(name=signal.Signals(-code).name)
        except ValueError:  # pragma: no cover
            return _("killed by signal {name}").format(name=-code)
    return _("exit code {code}").format(code=code)


def _failure(workdir: Path, world_size: int, died: dict, terminated: list) -> RingError:
    """The :class:`RingError` of a failed launch, in the selected language (:mod:`flashmath.i18n`). First the ranks
    that died without a Python exception (exited or were killed: ``died`` maps them to their exit codes), which
    their peers cannot have caused; then the ranks that raised, earliest first (each wrote ``error{rank}.pkl`` before
    its connections closed, so a peer that failed because of it comes later)."""
    errors = []
    for r in range(world_size):
        path = workdir / f"error{r}.pkl"
        if path.exists():
            with open(path, "rb") as file:
                errors.append((pickle.load(file), r))
    errors.sort(key=lambda item: item[0]["time"])
    parts = [
        _("rank {r} of {P} died without a Python exception ({how})").format(r=r, P=world_size, how=_exit_description(c))
        for r, c in died.items()
    ]
    parts += [
        _("rank {r} of {P} raised {error}").format(r=r, P=world_size, error=f"{e['type']}: {e['message']}")
        for e, r in errors
    ]
    ranks = list(died) + [r for _r, r in errors]
    if not parts:  # pragma: no cover - a failure always leaves one or the other
        return RingError(_("the ring of {P} ranks failed without a report").format(P=world_size), [])
    if parts[1:]:
        message = _("first: {first}; then {rest}").format(first=parts[0], rest=_("; ").join(p[:300] for p in parts[1:]))
    else:
        message = _("first: {first}").format(first=parts[0])
    if terminated:
        still = _(", ").join(aside(str(r), _progress(workdir, r)) for r in terminated)
        template = (
            _("; still running then, terminated: ranks {ranks}")
            if len(terminated) > 1
            else _("; still running then, terminated: rank {ranks}")
        )
        message += template.format(ranks=still)
    if errors and not died:
        message += "\n" + _("--- rank {r}'s traceback ---").format(r=errors[0][1]) + f"\n{errors[0][0]['traceback']}"
    return RingError(message, ranks)


def run_rings(
    jobs: Sequence[Mapping],
    *,
    world_size: int,
    timeout: float = DEFAULT_TIMEOUT,
    inject_fault: tuple[int, str] | None = None,
) -> list[RingRun]:
    """Several problems on one gloo ring of ``world_size`` processes, started once (the processes' start, a few
    seconds each for importing PyTorch, is paid once).

    The processes are started with ``spawn``: each imports ``flashmath.ring_dist`` afresh (and, from a script, the
    script itself, as Python's ``multiprocessing`` does), so call this under ``if __name__ == "__main__":`` in a
    script; a notebook needs nothing.

    Args:
        jobs: each a mapping with the arguments of :func:`run_ring` for one problem (:data:`JOB_KEYS`).
        world_size: ``P``, the number of processes (ranks); each gets one shard of every job.
        timeout: the deadline in seconds for the whole launch, from the processes' start to the last result; each
            rank's rendezvous and transfers time out after half of it (so that a rank whose peer hangs raises first,
            naming the peer).
        inject_fault: ``(rank, kind)`` to see how a failure surfaces: that rank raises (``"raise"``), exits
            (``"exit"``) or hangs (``"hang"``) before its first step.

    Returns:
        one :class:`RingRun` per job, in order.

    Raises:
        RingError: a rank raised or died (the message names the rank that failed first, its exception and
            traceback, then the ranks that failed after it, typically because their peer was gone), or the deadline
            passed (the message names the ranks still running; they are terminated). ModuleNotFoundError: no
            PyTorch. As :func:`flashmath.ring.ring_attention` for the jobs' arguments (checked before any process
            starts).
    """
    P = size(world_size, "world_size", 1)
    if inject_fault is not None and (inject_fault[1] not in ("raise", "exit", "hang") or not 0 <= inject_fault[0] < P):
        raise ValueError(f"inject_fault must be (rank in 0..{P - 1}, 'raise' | 'exit' | 'hang'), got {inject_fault!r}")
    prepared = [_prepare_job(P, job) for job in jobs]
    start = time.perf_counter()
    results = _launch(
        ring_worker, [[payloads[r] for _, payloads, _ in prepared] for r in range(P)], timeout, (inject_fault,)
    )
    wall = time.perf_counter() - start
    return [
        _assemble(ri, [results[r][j] for r in range(P)], with_grads, wall)
        for j, (ri, _, with_grads) in enumerate(prepared)
    ]


def _launch(target: Any, inputs: list, timeout: float, extra: tuple = ()) -> list:
    """Start ``len(inputs)`` processes running ``target(rank, P, workdir, port, timeout, *extra)`` with
    ``torch.multiprocessing`` (``spawn``), rank ``r`` reading ``inputs[r]``; join them with a deadline; every rank's
    result, or :class:`RingError`."""
    torch, dist = _torch()
    import torch.multiprocessing as mp

    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    P = len(inputs)
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="flashmath-ring-"))
    try:
        for r in range(P):
            _write(workdir / f"in{r}.pkl", inputs[r])
        (workdir / "language").write_text(get_language())
        # the rendezvous: a TCPStore served by this process on a port the system picks (no race for a free port)
        store = dist.TCPStore(
            "127.0.0.1", 0, P + 1, True, timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False
        )
        context = mp.start_processes(
            target,
            # each rank's waits time out at half the deadline: a rank whose peer hangs raises, naming the peer,
            # before the launcher's deadline terminates everything
            args=(P, str(workdir), store.port, float(timeout) / 2, *extra),
            nprocs=P,
            join=False,
            start_method="spawn",
        )
        try:
            _join(context.processes, workdir, start + timeout, timeout)
        finally:
            for name in context.error_files:  # PyTorch's own record of a raised exception (we keep ours)
                if name and os.path.exists(name):
                    os.unlink(name)
        results = []
        for r in range(P):
            with open(workdir / f"out{r}.pkl", "rb") as file:
                results.append(pickle.load(file))
        del store
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _join(processes: list, workdir: Path, deadline: float, timeout: float, grace: float = 1.0) -> None:
    """Wait for every process; RingError when one fails or the deadline passes (the others are terminated).

    After the first failure the others get ``grace`` seconds to fail in turn and record why (a peer of a dead rank
    fails as soon as its connection closes), then the survivors are terminated."""
    from multiprocessing.connection import wait

    P = len(processes)
    failed_since = None
    while True:
        alive = [p for p in processes if p.exitcode is None]
        failed = [r for r, p in enumerate(processes) if p.exitcode not in (None, 0)]
        now = time.perf_counter()
        if failed and failed_since is None:
            failed_since = now
        if not alive or (failed_since is not None and now - failed_since > grace) or now > deadline:
            break
        wait([p.sentinel for p in alive], timeout=0.05)
    running = [r for r, p in enumerate(processes) if p.exitcode is None]
    for r in running:
        processes[r].terminate()
    for p in processes:
        p.join(5)
        if p.exitcode is None:  # pragma: no cover - ignored SIGTERM
            p.kill()
            p.join()
    if failed:
        died = {r: processes[r].exitcode for r in failed if not (workdir / f"error{r}.pkl").exists()}
        raise _failure(workdir, P, died, running)
    if running:
        progress = _("; ").join(_("rank {r}: {progress}").format(r=r, progress=_progress(workdir, r)) for r in running)
        template = (
            _(
                "ranks {ranks} of {P} still running after the deadline of {timeout} s (terminated); "
                "last progress: {progress}"
            )
            if len(running) > 1
            else _(
                "rank {ranks} of {P} still running after the deadline of {timeout} s (terminated); "
                "last progress: {progress}"
            )
        )
        raise RingError(
            template.format(ranks=_(", ").join(map(str, running)), P=P, timeout=f"{timeout:g}", progress=progress),
            running,
        )


def _note(path: Path, template: str, **values: object) -> None:
    """Write a rank's progress: the English template and its values (the parent translates it, :func:`_progress`)."""
    path.write_text(json.dumps([template, values]))


def _progress(workdir: Path, rank: int) -> str:
    """A rank's last progress note, in the selected language: "not started" when it wrote none."""
    path = workdir / f"progress{rank}"
    if not path.exists():
        return _("not started")
    try:
        template, values = json.loads(path.read_text())
    except ValueError:  # pragma: no cover - a note cut short by the rank's death
        return path.read_text()
    return _(template).format(**values)


def run_ring(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    world_size: int,
    causal: bool = False,
    zigzag: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    grad_a: ArrayLike | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> RingRun:
    """Ring attention on ``world_size`` processes over gloo (loopback only), started with ``torch.multiprocessing``.

    Args:
        q, k, v, causal, zigzag, scale, enable_gqa, block_q, block_k: as :func:`flashmath.ring.ring_attention`
            (``q (..., N, D)``, ``k (..., M, D)``, ``v (..., M, Dv)``, any float dtype; each rank gets only its
            shards).
        world_size: ``P``, the number of processes.
        grad_a: ``dA (..., N, Dv)``: also run the backward ring (``RingRun.grads``).
        timeout: the deadline of the launch, in seconds (:func:`run_rings`).

    Returns:
        :class:`RingRun`: the output and logsumexp (equal to :func:`flashmath.ring.ring_attention`'s bit for bit: the
        same steps in the same order, each process on one thread), the gradients if asked, the bytes each rank sent
        at each step (equal to :func:`flashmath.ring_cost.ring_bytes_model`), the time each step computed and
        waited, the bytes each rank held.

    Raises:
        as :func:`run_rings`.
    """
    job: dict = {
        "q": q,
        "k": k,
        "v": v,
        "causal": causal,
        "zigzag": zigzag,
        "scale": scale,
        "enable_gqa": enable_gqa,
        "grad_a": grad_a,
        "block_q": block_q,
        "block_k": block_k,
    }
    return run_rings([job], world_size=world_size, timeout=timeout)[0]


# ----------------------------------------------------------------------------------------------------------------
# What PyTorch's own context_parallel does on a CPU
# ----------------------------------------------------------------------------------------------------------------


def _probe_cases(P: int, cases: list) -> list:
    """Run each case through ``torch.distributed.tensor.experimental.context_parallel`` on this rank."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (P,))
    records = []
    for case in cases:
        buffers = [torch.from_numpy(np.array(x, copy=True)) for x in case["qkv"]]
        comm = CommDebugMode()
        record: dict = {"causal": case["causal"], "raised": None, "output": None}
        try:
            with comm, context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2]):
                out = F.scaled_dot_product_attention(buffers[0], buffers[1], buffers[2], is_causal=case["causal"])
            record["output"] = out.numpy().copy()
        except Exception as error:  # what PyTorch raises is the finding
            record["raised"] = f"{type(error).__name__}: {error}"
        record["collectives"] = {str(op): int(n) for op, n in comm.get_comm_counts().items()}
        records.append(record)
    return records


def context_parallel_worker(rank: int, world_size: int, workdir: str, port: int, timeout: float) -> None:
    """The process of :func:`context_parallel_probe`: PyTorch's ``context_parallel`` on each case (as
    :func:`ring_worker`: reads ``in{rank}.pkl``, writes ``out{rank}.pkl`` or ``error{rank}.pkl``, then ends)."""
    _guarded(rank, world_size, workdir, port, timeout, lambda cases, dist, path: _probe_cases(world_size, cases))


def context_parallel_probe(
    world_size: int = 2,
    *,
    causal: Sequence[bool] = (False, True),
    N: int = 8,
    heads: int = 2,
    D: int = 4,
    seed: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict:
    """Run PyTorch's own context parallelism (``torch.distributed.tensor.experimental.context_parallel``, the
    legacy context-manager API) on gloo processes, without and with the causal mask, and record what happens.

    Each rank calls ``F.scaled_dot_product_attention`` on float64 ``q, k, v`` ``(1, heads, N, D)`` inside
    ``context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2])`` under DTensor's ``CommDebugMode``.

    Takes long: without the causal mask DTensor tries thousands of placements of the decomposition's inputs (on a
    shared 2-core machine the non-causal case took about a minute for ``P = 2``; the causal one a few seconds).

    Returns:
        ``{causal: record}`` for each value in ``causal``: ``raised`` (``"Type: message"`` or None),
        ``collectives`` (per rank, the collective operations counted, e.g. ``{"c10d_functional.all_gather_into_tensor":
        2}``), ``max_error`` (the output against one-process SDPA, or None) and ``layout`` (the sharding the output
        came in: ``"zig-zag"`` when ``2 P`` divides ``N``, PyTorch's head-tail load balancer, else ``"contiguous"``).

    What it shows with PyTorch 2.13 (read in ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``
    and ``torch/distributed/tensor/_sharding_prop.py``, and run): on a CPU, SDPA dispatches to
    ``aten._scaled_dot_product_flash_attention_for_cpu``, which has no ring handler (those exist for the CUDA flash,
    efficient and cuDNN kernels only) and no DTensor sharding strategy. DTensor then traces its decomposition: for
    ``is_causal=False`` it finds a strategy that replicates K and V, two ``all_gather_into_tensor`` collectives and
    no ring; for ``is_causal=True`` the decomposition builds its mask with ``aten.ones``, which has no DTensor input,
    the trace fails, and the call raises ``NotImplementedError: Operator
    aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy registered.``

    Raises:
        RingError, ModuleNotFoundError: as :func:`run_rings`.
    """
    from flashmath.ring import ring_layout

    P = size(world_size, "world_size", 1)
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, heads, N, D)) for _ in range(3))
    flags = [bool(c) for c in causal]
    cases = [{"causal": c, "qkv": (q, k, v)} for c in flags]
    results = _launch(context_parallel_worker, [cases] * P, timeout)
    torch, _ = _torch()
    found: dict = {}
    for index, flag in enumerate(flags):
        want = torch.nn.functional.scaled_dot_product_attention(
            torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), is_causal=flag
        ).numpy()
        records = [results[r][index] for r in range(P)]
        record = {
            "raised": records[0]["raised"],
            "collectives": records[0]["collectives"],
            "max_error": None,
            "layout": None,
        }
        if all(rec["output"] is not None for rec in records):
            for name, zigzag in (("zig-zag", True), ("contiguous", False)):
                if N % (2 * P if zigzag else P):
                    continue
                layout = ring_layout(N, P, zigzag=zigzag)
                err = max(float(np.abs(records[r]["output"] - layout.take(want, r)).max()) for r in range(P))
                if record["max_error"] is None or err < record["max_error"]:
                    record["max_error"], record["layout"] = err, name
        found[flag] = record
    return found


# ----------------------------------------------------------------------------------------------------------------
# From a terminal: torchrun, or python -m flashmath.ring_dist
# ----------------------------------------------------------------------------------------------------------------


def _problem(args: argparse.Namespace) -> tuple:
    """The demo problem every rank builds alike from the seed: ``q (B, H, N, D)``, ``k, v (B, H_kv, N, D)``."""
    rng = np.random.default_rng(args.seed)
    q = rng.standard_normal((args.batch, args.heads, args.length, args.dim))
    k = rng.standard_normal((args.batch, args.kv_heads, args.length, args.dim))
    v = rng.standard_normal((args.batch, args.kv_heads, args.length, args.dim))
    grad_a = rng.standard_normal((args.batch, args.heads, args.length, args.dim)) if args.backward else None
    return q, k, v, grad_a


def _report(args: argparse.Namespace, q: Any, k: Any, v: Any, grad_a: Any, run: RingRun) -> int:
    """Print the check against one process and the counts; 0 when the error is within 1e-13, else 1."""
    from flashmath.backward import attention_backward
    from flashmath.flash import flash_attention
    from flashmath.ring import ring_work
    from flashmath.ring_cost import kv_row_bytes, ring_backward_bytes_model, ring_bytes_model

    gqa = args.heads != args.kv_heads
    want, want_lse = flash_attention(q, k, v, causal=args.causal, enable_gqa=gqa, return_lse=True)
    errors = {"output": float(np.abs(run.output - want).max())}
    if grad_a is not None and run.grads is not None:
        G = args.heads // args.kv_heads
        kk, vv = np.repeat(k, G, axis=-3), np.repeat(v, G, axis=-3)
        gq, gk, gv = attention_backward(q, kk, vv, want, want_lse, grad_a, causal=args.causal)
        shape = gk.shape[:-3] + (args.kv_heads, G) + gk.shape[-2:]
        gk, gv = gk.reshape(shape).sum(-3), gv.reshape(shape).sum(-3)
        for name, got, ref in zip(("dq", "dk", "dv"), run.grads, (gq, gk, gv), strict=True):
            errors[name] = float(np.abs(got - ref).max())
    P = run.world_size
    row = kv_row_bytes(args.dim, kv_heads=args.kv_heads, batch=args.batch)
    model = ring_bytes_model(args.length, P, row_bytes=row, zigzag=args.zigzag)
    bytes_ok = np.array_equal(run.sent_bytes, model)
    work = ring_work(run.layout, args.causal)
    # the report in the language chosen with --lang (main sets it), through the catalog like every other message
    head = (
        _("ring attention on {P} gloo processes: {sizes}")
        if P > 1
        else _("ring attention on {P} gloo process: {sizes}")
    )
    print(
        head.format(
            P=P,
            sizes=f"N = {args.length}, B = {args.batch}, H = {args.heads}, H_kv = {args.kv_heads}, D = {args.dim}, "
            f"causal = {args.causal}, zigzag = {args.zigzag}",
        )
    )
    for name, err in errors.items():
        print("  " + _("max |{name} - one process| = {err}").format(name=name, err=f"{err:.1e}"))
    print(
        "  "
        + _("forward bytes sent per rank (all steps): {sent}; model: {model}; equal: {equal}").format(
            sent=run.sent_bytes.sum(axis=0).tolist(), model=model.sum(axis=0).tolist(), equal=bytes_ok
        )
    )
    if run.backward_sent_bytes is not None:
        back = ring_backward_bytes_model(args.length, P, row_bytes=row, zigzag=args.zigzag)
        back_ok = np.array_equal(run.backward_sent_bytes, back)
        bytes_ok = bytes_ok and back_ok
        print(
            "  "
            + _("backward bytes sent per rank (K, V and dK, dV): {sent}; model: {model}; equal: {equal}").format(
                sent=run.backward_sent_bytes.sum(axis=0).tolist(), model=back.sum(axis=0).tolist(), equal=back_ok
            )
        )
    print(
        "  "
        + _(
            "pairs that attend per rank (a tile-skipping kernel's work): {pairs}; score entries with every block "
            "whole: {entries}"
        ).format(pairs=work["visible_pairs"].tolist(), entries=work["score_entries"].tolist())
    )
    print(
        "  "
        + _("compute s per rank: {compute}; waiting s: {wait}").format(
            compute=np.round(run.compute_s.sum(axis=0), 4).tolist(), wait=np.round(run.wait_s.sum(axis=0), 4).tolist()
        )
    )
    ok = max(errors.values()) <= 1e-13 and bytes_ok
    print("  " + (_("OK") if ok else _("MISMATCH")))
    return 0 if ok else 1


def _torchrun_rank(args: argparse.Namespace) -> int:
    """Under torchrun: this process is one rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` from the
    environment); rank 0 gathers the shards and prints the report. Meant for one machine: gloo uses the loopback
    interface unless ``GLOO_SOCKET_IFNAME`` names another."""
    torch, dist = _torch()
    torch.set_num_threads(1)
    rank, P = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    try:
        q, k, v, grad_a = _problem(args)
        job = {
            "q": q,
            "k": k,
            "v": v,
            "causal": args.causal,
            "zigzag": args.zigzag,
            "enable_gqa": args.heads != args.kv_heads,
            "grad_a": grad_a,
        }
        ri, payloads, with_grads = _prepare_job(P, job)
        mine = payloads[rank]
        start = time.perf_counter()
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1), tempfile.TemporaryDirectory(prefix="flashmath-ring-") as progress:
            result = _run_jobs(rank, [mine], args.timeout, None, Path(progress))[0]
        wall = time.perf_counter() - start
        gathered: list | None = [None] * P if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if rank != 0:
            return 0
        assert gathered is not None
        run = _assemble(ri, gathered, with_grads, wall)
        return _report(args, q, k, v, grad_a, run)
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flashmath.ring_dist``: a ring on random inputs, checked against one process.

    Under ``torchrun`` (``RANK`` in the environment) this process is one rank; otherwise it launches
    ``--world-size`` processes itself (:func:`run_ring`). Prints the largest error against one process (and the
    package's numpy backward with ``--backward``), the bytes each rank sent against the model, the work per rank and
    the time computing and waiting; returns 0 when the errors are within 1e-13 and the bytes equal the model.
    """
    parser = argparse.ArgumentParser(prog="python -m flashmath.ring_dist", description=main.__doc__)
    parser.add_argument("--length", type=int, default=1000, help="sequence length N (default 1000)")
    parser.add_argument("--batch", type=int, default=1, help="batch size B (default 1)")
    parser.add_argument("--heads", type=int, default=4, help="query heads H (default 4)")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads H_kv, dividing H (default 2)")
    parser.add_argument("--dim", type=int, default=64, help="head dimension D (default 64)")
    parser.add_argument("--causal", action="store_true", help="causal mask")
    parser.add_argument("--zigzag", action="store_true", help="zig-zag sharding")
    parser.add_argument("--backward", action="store_true", help="also the backward ring")
    parser.add_argument("--seed", type=int, default=0, help="random seed (every rank builds the same inputs)")
    parser.add_argument("--world-size", type=int, default=2, help="processes to launch without torchrun (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="deadline in seconds")
    parser.add_argument(
        "--lang",
        choices=LANGUAGES,
        default="en",
        help="language of the report: en (default) or zh_CN, as flashmath.set_language",
    )
    args = parser.parse_args(argv)
    set_language(args.lang, font=False)  # as each launched rank does with the launcher's language
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _torchrun_rank(args)
    q, k, v, grad_a = _problem(args)
    run = run_ring(
        q,
        k,
        v,
        world_size=args.world_size,
        causal=args.causal,
        zigzag=args.zigzag,
        enable_gqa=args.heads != args.kv_heads,
        grad_a=grad_a,
        timeout=args.timeout,
    )
    return _report(args, q, k, v, grad_a, run)


if __name__ == "__main__":
    sys.exit(main())
