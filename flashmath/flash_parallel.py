"""FlashAttention-2's query tiles on a thread pool, numpy's BLAS on one thread (``flash_attention``'s ``workers``).

The loop a learner reads is :func:`flashmath.flash.fa2_loop`; this module only runs its query tiles
(:func:`flashmath.flash.fa2_query_tile`, one task each) on several threads at once: FlashAttention-2's
parallelism over the sequence (Dao 2023, section 3.2), where each query tile reads ``Q``, ``K``, ``V`` and writes
only its own rows of ``A`` and ``lse``. numpy's matrix products and ufuncs release the GIL, so the threads compute
at the same time.

numpy's BLAS is limited to one thread for the duration of every run (threadpoolctl; the limit is process-wide),
whatever the number of workers, 1 included: workers and BLAS threads would otherwise oversubscribe the cores, and
OpenBLAS's multi-threaded products round differently from its one-thread ones (measured). So the result is bitwise
the same for every number of workers: each row sees the same tiles in the same order, each product is computed
alike.

Source: T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (2023),
section 3.2.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["run_query_tiles"]


@functools.cache
def _blas_controller() -> Any:
    """threadpoolctl's view of the BLAS and OpenMP libraries loaded now (numpy's BLAS is loaded with numpy),
    made once: looking them up costs milliseconds, a limit through it a fraction of one."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


class _OneBlasThread:
    """numpy's BLAS on one thread while any :func:`flashmath.flash.flash_attention` call runs, from any thread,
    however many overlap.

    The BLAS thread count is one setting for the whole process, so a limit entered and left by each call would let
    the first call to return restore it while another still runs, and the last to return leave the process at one
    thread. Instead the calls are counted (under a lock): the first to enter sets the limit, the last to leave
    restores the process's setting. Both are done by one keeper thread of this module, because threadpoolctl
    (3.8) lets only one thread at a time change OpenBLAS's pool (the thread that set a limit, until it has left its
    limits): the keeper takes that role while calls run and gives it back when the last one leaves.

    While another thread holds a threadpoolctl limit, the keeper cannot change the pool: a call then limits it from
    its own thread, which works when that thread is the one holding the limit (``with threadpool_limits(4):
    flash_attention(...)``), and otherwise warns (RuntimeWarning): the result is right but may differ in the last
    bits from a call with BLAS on one thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._keeper: ThreadPoolExecutor | None = None
        self._limit = contextlib.ExitStack()
        self._kept = False  # whether the keeper's limit took effect

    @staticmethod
    def _blas_threads() -> list[int]:
        return [info["num_threads"] for info in _blas_controller().select(user_api="blas").info()]

    def _enter_limit(self) -> bool:  # in the keeper thread
        self._limit.enter_context(_blas_controller().limit(limits=1, user_api="blas"))
        return all(n == 1 for n in self._blas_threads())

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                if self._keeper is None:
                    self._keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flashmath-blas")
                self._kept = self._keeper.submit(self._enter_limit).result()
            self._users += 1
            kept = self._kept
        try:
            with contextlib.ExitStack() as own:
                if not kept:  # another thread holds a threadpoolctl limit: perhaps this one
                    own.enter_context(_blas_controller().limit(limits=1, user_api="blas"))
                    threads = self._blas_threads()
                    if any(n != 1 for n in threads):
                        warnings.warn(
                            f"flash_attention could not limit numpy's BLAS to one thread (it runs {threads}): another "
                            "thread holds a threadpoolctl limit, and threadpoolctl lets only that thread change "
                            "OpenBLAS's threads. The result is right, but may differ in the last bits from a call "
                            "with BLAS on one thread; call it from that thread, or leave that limit first",
                            # the caller of flash_attention (this generator, contextlib's __enter__,
                            # run_query_tiles, flash_attention, its caller)
                            RuntimeWarning,
                            stacklevel=5,
                        )
                yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._keeper is not None:
                    self._keeper.submit(self._limit.close).result()  # the process's setting back, the role given up


_one_blas_thread = _OneBlasThread()


def run_query_tiles(run: Callable[[int], object], n_query_tiles: int, workers: int, *, causal: bool) -> None:
    """Call ``run(i)`` for every query tile ``i`` in ``range(n_query_tiles)``, on ``workers`` threads (at most one
    per query tile; 1: in this thread, in order), numpy's BLAS on one thread (:class:`_OneBlasThread`).

    ``run(i)`` must write only query tile ``i``'s own rows (no two tasks write the same element). ``causal``: the
    later query tiles see more keys, so they are started first, and none is left to run alone at the end. A
    worker's exception is raised here."""
    workers = min(workers, n_query_tiles)
    with _one_blas_thread():
        if workers <= 1:
            for i in range(n_query_tiles):  # the plain loop, in this thread
                run(i)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            tile_order = range(n_query_tiles - 1, -1, -1) if causal else range(n_query_tiles)
            for _ in pool.map(run, tile_order):  # re-raises a worker's exception here
                pass
