"""What context parallelism costs, from the sizes alone: bytes sent, memory held, work (chapter 14).

The models here are written from the sizes, independently of the runs: :mod:`flashmath.ring` (the simulation) and
:mod:`flashmath.ring_dist` (gloo) count what they send and hold, and the tests check that the counts equal these
models. Three ways to split one sequence of ``N`` queries and ``M`` keys over ``P`` devices, per layer:

* **ring** (Ring Attention): the key/value shards travel round the ring, ``P - 1`` hops; each device receives every
  other shard once, ``M - m_r`` key/value rows, and holds at most two shards at a time. The transfer of the next
  shard runs while the device computes with the one it holds.
* **all-gather of K and V** (Llama 3's context parallelism; what PyTorch 2.13's ``context_parallel`` ends up doing
  on a CPU, where it has no ring for the CPU attention kernel and DTensor all-gathers K and V before it, without the
  causal mask, and raises ``NotImplementedError`` with it: :func:`flashmath.ring_dist.context_parallel_probe`; on
  CUDA its default ``rotate_method`` is ``"allgather"`` too): each device receives the same ``M - m_r`` rows, in
  one collective before the attention, and then holds all ``M``.
* **DeepSpeed-Ulysses**: one all-to-all turns ``N / P`` tokens of all ``H`` heads into all ``N`` tokens of ``H / P``
  heads (queries, keys and values), each device computes whole heads, and a second all-to-all brings the output
  back to ``N / P`` tokens. Needs ``H`` and ``H_kv`` divisible by ``P`` (this module's model), unless it repeats
  key/value heads: verl repeats them up to ``P`` when ``P`` is a multiple of ``H_kv``, at more bytes, and still
  needs ``H`` divisible by ``P`` (verl PR #850, issue #1226). Each device receives ``(P - 1) / P^2`` of
  ``N (H D + H_kv (D + Dv) + H Dv)`` elements: volume per device falls as ``1 / P``, where the ring's stays
  ``(P - 1) / P`` of ``M H_kv (D + Dv)``. With ``N = M`` Ulysses receives fewer bytes than the ring exactly when
  ``P > G + 1`` (``G = H / H_kv`` query heads per key/value head; ``P > 2`` without grouping), for any ``D, Dv``.

The counts are exact, in bytes: ``row_bytes`` is the size of one sequence position of the arrays concerned, over all
batch elements and heads (:func:`kv_row_bytes` computes it for ``K`` and ``V``).

Memory held (:func:`context_parallel_costs`): the ring keeps its running output ``A`` and logsumexp ``L`` in float32
whatever the input width, as ring-flash-attention does (``ring_flash_attn/utils.py``, ``update_out_and_lse``:
``out = block_out.to(torch.float32)``; the logsumexp flash-attn returns is float32) and PyTorch 2.13's ring
(``_SDPAMerger.step`` converts each step's output and logsumexp to float32 while
``_ContextParallelOptions.convert_to_f32``, default True); and while it merges a step it also holds that step's own
output ``A_s`` (at the input width, as the kernel writes it) and ``L_s``. The all-gather and Ulysses run one
attention kernel, whose output has the input width and whose logsumexp is float32 (flash-attn's ``mha_fwd``:
``out = torch::empty_like(q)``, ``softmax_lse`` of ``at::kFloat``). Temporaries of the merge are not counted (both
rings above also make a float32 copy of ``A_s`` to merge it).

Sources: H. Liu et al., Ring Attention (arXiv:2310.01889), section 3; Llama Team, "The Llama 3 Herd of Models"
(arXiv:2407.21783), section 3.3.2 (all-gather based context parallelism, ``2 x CP`` chunks); S. A. Jacobs et al.,
"DeepSpeed Ulysses" (arXiv:2309.14509) and the DeepSpeed blog ``blogs/deepspeed-ulysses/README.md`` ("an aggregate
communication volume per link of 4Nh/P"; all-to-all over heads); PyTorch 2.13,
``torch/distributed/tensor/experimental/_context_parallel/_attention.py`` (``_ContextParallelOptions.rotate_method =
_RotateMethod.ALL_GATHER``, ``convert_to_f32 = True``, ``_SDPAMerger``; ring handlers only for the CUDA SDPA kernels);
ring-flash-attention (github.com/zhuzilin/ring-flash-attention), ``ring_flash_attn/utils.py``; flash-attn
``csrc/flash_attn/flash_api.cpp`` (``mha_fwd``) and
``torch/distributed/tensor/_sharding_prop.py`` (an operator without a sharding strategy goes through its
decomposition).
"""

from __future__ import annotations

import numpy as np

from flashmath._checks import size

__all__ = [
    "METHODS",
    "allgather_bytes_model",
    "context_parallel_costs",
    "context_parallel_table",
    "kv_row_bytes",
    "ring_backward_bytes_model",
    "ring_bytes_model",
    "ring_held_bytes_model",
    "shard_rows",
    "single_device_bytes",
    "ulysses_bytes_model",
]

METHODS = ("ring", "all-gather", "ulysses")
"""The three ways to split the sequence that :func:`context_parallel_costs` compares."""


def shard_rows(rows: int, num_devices: int, *, zigzag: bool = False) -> np.ndarray:
    """Rows of each device's shard, ``(P,)`` ints: ``floor((r + 1) N / P) - floor(r N / P)``; under zig-zag the
    sum of chunks ``r`` and ``2P - 1 - r`` of ``2P`` such chunks.

    Raises:
        TypeError: non-integers. ValueError: ``rows < 0`` or ``num_devices < 1``.
    """
    N, P = size(rows, "rows"), size(num_devices, "num_devices", 1)
    if not zigzag:
        edges = np.array([(p * N) // P for p in range(P + 1)])
        return np.diff(edges)
    chunk = np.diff(np.array([(p * N) // (2 * P) for p in range(2 * P + 1)]))
    return np.array([chunk[r] + chunk[2 * P - 1 - r] for r in range(P)])


def kv_row_bytes(D: int, Dv: int | None = None, *, kv_heads: int = 1, batch: int = 1, itemsize: int = 8) -> int:
    """Bytes of one sequence position of ``K`` and ``V`` together: ``batch x H_kv x (D + Dv) x itemsize``.

    Raises:
        TypeError: non-integers. ValueError: negative sizes.
    """
    D = size(D, "D")
    Dv = D if Dv is None else size(Dv, "Dv")
    return size(batch, "batch") * size(kv_heads, "kv_heads") * (D + Dv) * size(itemsize, "itemsize")


def ring_bytes_model(M: int, num_devices: int, *, row_bytes: int, zigzag: bool = False) -> np.ndarray:
    """Bytes each device sends in the forward ring: ``(P - 1, P)`` ints, entry ``[t, r]`` the key/value shard device
    ``r`` holds at step ``t`` (that of device ``(r - t) mod P``), sent on to ``r + 1`` after the step.

    Per device over the ring: ``M - m_{r+1}`` rows (every shard but the next device's own); all devices together
    ``(P - 1) M`` rows: ``(P - 1) x M x row_bytes``.
    """
    P = size(num_devices, "num_devices", 1)
    rows = shard_rows(M, P, zigzag=zigzag)
    return np.array([[rows[(r - t) % P] * row_bytes for r in range(P)] for t in range(P - 1)], dtype=np.int64).reshape(
        P - 1, P
    )


def ring_backward_bytes_model(
    M: int, num_devices: int, *, row_bytes: int, grad_row_bytes: int | None = None, zigzag: bool = False
) -> np.ndarray:
    """Bytes each device sends in the backward ring: ``(P, P)`` ints, entry ``[t, r]``: the held shard's
    ``K, V`` (``row_bytes`` per row, steps ``0 .. P - 2`` only) and its gradients ``dK, dV`` (``grad_row_bytes`` per
    row, default ``row_bytes``; every step: the last hop returns them to their owner; with ``P = 1`` nothing moves)."""
    P = size(num_devices, "num_devices", 1)
    grad_row_bytes = row_bytes if grad_row_bytes is None else grad_row_bytes
    rows = shard_rows(M, P, zigzag=zigzag)
    return np.array(
        [
            [rows[(r - t) % P] * ((grad_row_bytes if P > 1 else 0) + (row_bytes if t < P - 1 else 0)) for r in range(P)]
            for t in range(P)
        ],
        dtype=np.int64,
    ).reshape(P, P)


def ring_held_bytes_model(
    N: int,
    M: int,
    num_devices: int,
    *,
    q_row_bytes: int,
    state_row_bytes: int,
    kv_row_bytes: int,
    step_row_bytes: int = 0,
    zigzag: bool = False,
) -> np.ndarray:
    """Bytes each device holds during each forward step, ``(P, P)`` ints ``[t, r]``: its queries and running state
    ``(A, L)`` (``n_r x (q_row_bytes + state_row_bytes)``), the step's own output ``(A_s, L_s)`` while it is merged
    (``n_r x step_row_bytes``; default 0: the simulations' ``held_bytes`` count only the arrays kept from step to
    step), the key/value shard it computes with, and before the last step the shard arriving. At most about
    ``3 / P`` of the ``N + M`` rows: ``O(N / P x D)``, against :func:`single_device_bytes` for one device."""
    P = size(num_devices, "num_devices", 1)
    n, m = shard_rows(N, P, zigzag=zigzag), shard_rows(M, P, zigzag=zigzag)
    step_row_bytes = size(step_row_bytes, "step_row_bytes")
    return np.array(
        [
            [
                n[r] * (q_row_bytes + state_row_bytes + step_row_bytes)
                + m[(r - t) % P] * kv_row_bytes
                + (m[(r - t - 1) % P] * kv_row_bytes if t < P - 1 else 0)
                for r in range(P)
            ]
            for t in range(P)
        ],
        dtype=np.int64,
    ).reshape(P, P)


def single_device_bytes(N: int, M: int, *, q_row_bytes: int, state_row_bytes: int, kv_row_bytes: int) -> int:
    """Bytes one device holds for the same attention without a ring: all ``N`` query rows with their state and all
    ``M`` key/value rows, ``O(N x D)``."""
    return size(N, "N") * (q_row_bytes + state_row_bytes) + size(M, "M") * kv_row_bytes


def allgather_bytes_model(M: int, num_devices: int, *, row_bytes: int, zigzag: bool = False) -> np.ndarray:
    """Bytes each device receives when K and V are all-gathered before the attention, ``(P,)``: every shard but its
    own, ``(M - m_r) x row_bytes`` (the same volume as the ring, in one collective; afterwards the device holds all
    ``M`` rows)."""
    P = size(num_devices, "num_devices", 1)
    return ((size(M, "M") - shard_rows(M, P, zigzag=zigzag)) * row_bytes).astype(np.int64)


def ulysses_bytes_model(
    N: int,
    num_devices: int,
    *,
    heads: int,
    kv_heads: int,
    D: int,
    Dv: int | None = None,
    batch: int = 1,
    itemsize: int = 8,
) -> np.ndarray | None:
    """Bytes each device receives in DeepSpeed-Ulysses, ``(P,)``, or None when the heads do not split
    (``H % P`` or ``H_kv % P`` nonzero).

    Device ``r`` holds ``n_r`` tokens and, for the attention, heads ``[r H / P, (r + 1) H / P)`` (``H_kv / P`` of the
    key/value heads). First all-to-all: it receives the other ``N - n_r`` tokens of its heads of ``Q``, ``K``, ``V``:
    ``(N - n_r)(H D + H_kv (D + Dv)) / P`` elements. Second: the output of its ``n_r`` tokens for the other
    devices' heads, ``n_r (P - 1) H Dv / P``. Times ``batch x itemsize``.
    """
    P = size(num_devices, "num_devices", 1)
    H, Hkv, D = size(heads, "heads", 1), size(kv_heads, "kv_heads", 1), size(D, "D")
    Dv = D if Dv is None else size(Dv, "Dv")
    if H % P or Hkv % P:
        return None
    n = shard_rows(N, P)
    first = (N - n) * (H * D + Hkv * (D + Dv)) // P
    second = n * (P - 1) * H * Dv // P
    return ((first + second) * batch * itemsize).astype(np.int64)


def context_parallel_costs(
    N: int,
    num_devices: int,
    *,
    heads: int,
    kv_heads: int,
    D: int,
    Dv: int | None = None,
    batch: int = 1,
    itemsize: int = 8,
    state_itemsize: int | None = None,
    ulysses_keeps_inputs: bool = True,
) -> dict[str, dict]:
    """The three methods side by side for self-attention (``M = N``), per device, forward of one layer.

    Args:
        itemsize: bytes of one element of ``Q``, ``K``, ``V`` and of an attention kernel's output.
        state_itemsize: bytes of one element of the ring's running ``(A, L)`` and of every logsumexp; default
            ``max(itemsize, 4)``: float32, as real rings keep them (module docstring), or the input width if wider.
        ulysses_keeps_inputs: charge Ulysses, during the attention, for its own ``n_r`` tokens of ``Q``, ``K``, ``V``
            of every head (the sequence-sharded inputs of its first all-to-all, kept beside the head-sharded
            copies); False counts the head-sharded arrays alone (its ``K, V`` are ``N`` rows of ``H_kv / P`` heads,
            half the ring's two shards).

    Returns:
        ``{method: {"received_bytes", "peak_bytes", "feasible", "overlapped"}}`` for each of :data:`METHODS`:
        the most bytes any device receives; the most bytes any device holds during the attention (its queries; for
        the ring its running ``(A, L)`` at ``state_itemsize`` and the step's own output ``A_s`` at ``itemsize`` with
        ``L_s``, for the others the kernel's output at ``itemsize`` and its logsumexp; and the keys and values it
        has: two shards for the ring, all ``N`` rows after the all-gather, ``N`` rows of its ``H / P`` heads for
        Ulysses, with its own inputs unless ``ulysses_keeps_inputs=False``); whether it can run (Ulysses without
        repeating key/value heads: ``H`` and ``H_kv`` divisible by ``P``); whether the transfers overlap the
        attention's computation (the ring's do, step by step; the all-gather and the all-to-alls come before and
        after it). Ulysses' bytes are None when not feasible.
    """
    P = size(num_devices, "num_devices", 1)
    Dv = D if Dv is None else Dv
    kv_row = kv_row_bytes(D, Dv, kv_heads=kv_heads, batch=batch, itemsize=itemsize)
    acc = max(itemsize, 4) if state_itemsize is None else size(state_itemsize, "state_itemsize", 1)
    q_row = batch * heads * D * itemsize
    state_row = batch * heads * (Dv + 1) * acc  # the ring's running A and L, float32
    out_row = batch * heads * (Dv * itemsize + acc)  # a kernel's output (input width) and its logsumexp
    n = shard_rows(N, P)
    ring_received = allgather_bytes_model(N, P, row_bytes=kv_row)  # every other shard, once
    ring_held = ring_held_bytes_model(
        N, N, P, q_row_bytes=q_row, state_row_bytes=state_row, kv_row_bytes=kv_row, step_row_bytes=out_row
    )
    uly = ulysses_bytes_model(N, P, heads=heads, kv_heads=kv_heads, D=D, Dv=Dv, batch=batch, itemsize=itemsize)
    uly_ok = uly is not None
    # Ulysses during the attention: all N tokens of H / P heads of Q, A, L and of H_kv / P heads of K, V, beside the
    # device's own n_r tokens of every head (which the layer keeps)
    kept = int(n.max()) * (q_row + kv_row) if ulysses_keeps_inputs else 0
    uly_peak = (N * (q_row + out_row + kv_row) // P + kept) if uly_ok else None
    return {
        "ring": {
            "received_bytes": int(ring_received.max()),
            "peak_bytes": int(ring_held.max()),
            "feasible": True,
            "overlapped": True,
        },
        "all-gather": {
            "received_bytes": int(ring_received.max()),
            "peak_bytes": int(n.max() * (q_row + out_row) + N * kv_row),
            "feasible": True,
            "overlapped": False,
        },
        "ulysses": {
            "received_bytes": int(uly.max()) if uly is not None else None,
            "peak_bytes": uly_peak,
            "feasible": uly_ok,
            "overlapped": False,
        },
    }


def context_parallel_table(
    N: int,
    *,
    heads: int,
    kv_heads: int,
    D: int,
    Dv: int | None = None,
    devices: tuple = (2, 4, 8, 16),
    batch: int = 1,
    itemsize: int = 8,
    state_itemsize: int | None = None,
    ulysses_keeps_inputs: bool = True,
) -> list[dict]:
    """When each method wins: one row per ``P`` in ``devices``.

    Returns:
        ``[{"P", "ring", "all-gather", "ulysses" (received bytes per device, None when Ulysses cannot split the
        heads), "peak_bytes" ({method: the most bytes a device holds, None when not feasible}), "fewest_bytes" (the
        feasible methods that receive the fewest, a tuple: the ring and the all-gather always tie), "least_memory"
        (likewise, by peak bytes)}]``. With ``N = M`` and ``G = H / H_kv``, Ulysses receives fewer bytes than the
        ring exactly when ``P > G + 1`` (module docstring); the ring and Ulysses hold ``O(N / P)``, the all-gather
        ``O(N)`` of keys and values, and Ulysses runs only while ``P`` divides ``H`` and ``H_kv``: the ring's
        memory halves with each doubling of ``P`` for any head count, but per query row it holds the most (its
        float32 running output beside the step's own output), so at small ``P`` it can hold the most of the three.
        ``state_itemsize``, ``ulysses_keeps_inputs``: as :func:`context_parallel_costs`.
    """
    table = []
    for P in devices:
        costs = context_parallel_costs(
            N,
            P,
            heads=heads,
            kv_heads=kv_heads,
            D=D,
            Dv=Dv,
            batch=batch,
            itemsize=itemsize,
            state_itemsize=state_itemsize,
            ulysses_keeps_inputs=ulysses_keeps_inputs,
        )
        feasible = {m: c for m, c in costs.items() if c["feasible"]}
        fewest = min(c["received_bytes"] for c in feasible.values())
        least = min(c["peak_bytes"] for c in feasible.values())
        table.append(
            {
                "P": P,
                **{m: costs[m]["received_bytes"] for m in METHODS},
                "peak_bytes": {m: costs[m]["peak_bytes"] for m in METHODS},
                "fewest_bytes": tuple(m for m in METHODS if m in feasible and feasible[m]["received_bytes"] == fewest),
                "least_memory": tuple(m for m in METHODS if m in feasible and feasible[m]["peak_bytes"] == least),
            }
        )
    return table
