"""Ring attention: one sequence split over ``P`` devices (context parallelism), simulated in one process (chapter 14).

Each device ``r`` holds one shard of the queries, ``Q_r``, and one shard of the keys and values, ``K_r, V_r``
(the rows of one stretch of the sequence, or two under zig-zag sharding). The query shard stays; the key/value
shards travel around a ring. At step ``t = 0 .. P - 1`` device ``r`` holds the key/value shard of device
``s = (r - t) mod P``: it computes the attention of its queries over those keys alone, an output ``A`` and a
logsumexp ``L`` (:func:`flashmath.flash_attention`), merges that state into its running ``(A, L)`` with chapter 10's
merge (:func:`flashmath.splitkv.merge_states`, the same function, not a copy), and passes the shard on to device
``r + 1`` while it receives the next one from device ``r - 1``. After ``P`` steps and ``P - 1`` transfers every device
has seen every key shard once, and its ``(A, L)`` is attention over all the keys. Nothing of size ``N x M`` exists,
and no device ever holds more than two key/value shards (the one it computes with and the one arriving): memory
``O(N / P x D)`` per device instead of ``O(N x D)``.

**Causal masking** (``causal=True``, self-attention: ``N = M``, query ``n`` sees keys ``m <= n``). Under the plain
(contiguous) sharding, device ``r`` holds rows ``[r S, (r + 1) S)``: the shards of devices ``s < r`` are entirely
visible, its own is visible below the diagonal, and those of ``s > r`` not at all, so device ``r`` skips ``P - 1 - r``
of its ``P`` steps. Device 0 computes one step, device ``P - 1`` all ``P``, and the ring waits for its slowest
device. How unequal the work is depends on how the diagonal block (the own shard, causal inside) is counted: a kernel
that skips the masked tiles (FlashAttention-2, section 3.1.1, "causal masking"; ring-flash-attention calls its kernel
with ``causal=True`` at step 0) computes about half of it, its ``S (S + 1) / 2`` visible pairs, so device ``r`` does
about ``r + 1/2`` blocks' work and the last device about ``2 P - 1`` times the first (``(2 P - 1) S + 1`` to ``S + 1``
exactly); a kernel that computes the diagonal block whole does ``r + 1`` blocks, ``P`` times. :func:`ring_work`
counts both: ``visible_pairs`` (the model of the work, a tile-skipping kernel's count up to the tiles that straddle
the diagonal) and ``score_entries`` (every block whole). **Zig-zag sharding** cuts the sequence into ``2P`` chunks
and gives device ``r`` chunks ``r`` and ``2P - 1 - r`` (one early, one late). Then every step is about half a block
of work: for a shard of ``s < r`` all of the device's queries see the shard's first chunk only; for ``s > r`` only
the device's second chunk sees anything, and it sees the whole shard; the own shard is causal, half a block of
visible pairs plus its diagonal (``n (n + 1) / 2`` for ``n`` rows). Every device computes the same work
(:func:`ring_work`).

**The backward ring** (:func:`ring_attention_backward`): each device keeps ``Q_r``, its output ``A_r``, logsumexp
``L_r`` and ``dA_r``; the key/value shards travel as in the forward, and beside each travel its gradients ``dK_s``,
``dV_s``, to which every device adds the contribution of its queries (:func:`flashmath.attention_backward` on the
step's block, which recomputes the probabilities from the final ``L``). After the ``P``-th step one more hop brings
``dK_s, dV_s`` back to their owner: the gradients travel ``P`` times, the keys and values ``P - 1`` times.

**Bitwise.** With one device (``P = 1``) the ring is one call of :func:`flashmath.flash_attention` with the same tiles,
and the merge with the empty state is exact, so the ring equals it bit for bit. With ``P >= 2`` a row that sees keys
in two or more shards is not bitwise equal to ``flash_attention`` with any tiles: the ring combines normalised
``(A, L)`` states (``L = logaddexp(L_1, L_2)``, ``A = exp(L_1 - L) A_1 + exp(L_2 - L) A_2``) where the tile loop
rescales an unnormalised accumulator by ``exp(g - g_new)`` and divides once at the end, and it visits the shards in
the rotated order ``r, r - 1, ...`` where the tile loop goes left to right; different roundings of the same sum.
The difference is a few units in the last place of the row's largest output (an output near 0 may differ in
many of its own last places): in float64, on standard normal inputs with outputs up to about 2, at most ``1.8e-15``
(measured for ``N`` up to 256 and ``P`` up to 8), the same size as either one's difference from the exact result
(``flashmath.attention``). A row whose keys all lie in one shard (device 0 of a contiguous causal ring) is bitwise
equal when ``block_k`` divides the shard boundaries: its only nonempty state comes from the same tile loop over the
same key tiles.

Conventions (scale, dtypes, fully masked rows) are those of :mod:`flashmath.inputs`; grouped-query heads as
:func:`flashmath.flash_attention`'s ``enable_gqa`` (a key/value shard carries ``H_kv`` heads, not ``H``).

Sources: H. Liu, M. Zaharia, P. Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context"
(2023, arXiv:2310.01889), section 3 (query blocks stay, key/value blocks rotate, communication overlapped with the
blockwise computation); Llama Team, "The Llama 3 Herd of Models" (2024, arXiv:2407.21783), section 3.3.2, context
parallelism: the sequence in ``2 x CP`` chunks, rank ``i`` holding chunks ``i`` and ``2 x CP - 1 - i`` for load
balance (Llama 3 all-gathers K and V instead of passing them round a ring); Z. Zhu, ring-flash-attention
(``zigzag_ring_flash_attn.py``): the zig-zag ring's three kinds of step and the backward's ``dK, dV`` passed with
``K, V``; T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding" (2023): the merge of ``(A, L)`` states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from flashmath._checks import as_float_array, compute_dtype, size
from flashmath.backward import attention_backward
from flashmath.flash import flash_attention
from flashmath.inputs import AttentionInputs, prepare_attention_inputs
from flashmath.rowstate import merge_states
from flashmath.splitkv import split_ranges
from flashmath.variants import GroupedHeads, group_heads

__all__ = [
    "RingFrame",
    "RingLayout",
    "RingStep",
    "RingTrace",
    "ring_attention",
    "ring_attention_backward",
    "group_rows",
    "ring_backward_step",
    "ring_forward_step",
    "ring_inputs",
    "ring_layout",
    "ring_schedule",
    "ring_step",
    "ring_trace",
    "ring_work",
    "ungroup_kv",
    "zigzag_chunks",
]


# ----------------------------------------------------------------------------------------------------------------
# Who holds what: the layout of the shards
# ----------------------------------------------------------------------------------------------------------------


def zigzag_chunks(num_devices: int, device: int) -> tuple[int, int]:
    """The two chunks (of ``2 P``) that device ``r`` holds under zig-zag sharding: ``(r, 2 P - 1 - r)``.

    Raises:
        TypeError: non-integers. ValueError: ``num_devices < 1`` or ``device`` outside ``0 .. P - 1``.

    Source: Llama 3 (arXiv:2407.21783), section 3.3.2: "The i-th CP rank received both the i-th and the
    (2 x CP - 1 - i)-th chunks".
    """
    P = size(num_devices, "num_devices", 1)
    r = size(device, "device")
    if r >= P:
        raise ValueError(f"device must be in 0 .. {P - 1} (num_devices = {P}), got {r}")
    return r, 2 * P - 1 - r


Chunks = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class RingLayout:
    """Which rows of the sequence each device holds.

    Attributes:
        num_devices: ``P``. N, M: the numbers of queries and keys. zigzag: zig-zag sharding (else contiguous).
        q_chunks: per device, its query rows as ranges ``[start, stop)`` of the sequence, in increasing order; a
            device's shard is these rows one after another (its *local* rows ``0 .. n_r - 1``).
        kv_chunks: the same for the keys and values.
    """

    num_devices: int
    N: int
    M: int
    zigzag: bool
    q_chunks: tuple[Chunks, ...]
    kv_chunks: tuple[Chunks, ...]

    def q_size(self, device: int) -> int:
        """``n_r``, the number of query rows of device ``r``."""
        return sum(b - a for a, b in self.q_chunks[device])

    def kv_size(self, device: int) -> int:
        """``m_r``, the number of key/value rows of device ``r``."""
        return sum(b - a for a, b in self.kv_chunks[device])

    def q_positions(self, device: int) -> np.ndarray:
        """The sequence positions of device ``r``'s query rows, in local order."""
        return np.concatenate([np.arange(a, b) for a, b in self.q_chunks[device]])

    def kv_positions(self, device: int) -> np.ndarray:
        """The sequence positions of device ``r``'s key/value rows, in local order."""
        return np.concatenate([np.arange(a, b) for a, b in self.kv_chunks[device]])

    def take(self, x: np.ndarray, device: int, which: str = "q", axis: int = -2) -> np.ndarray:
        """Device ``r``'s shard of ``x`` (its rows along ``axis``; ``which`` is ``"q"`` or ``"kv"``), a new array."""
        chunks = self.q_chunks[device] if which == "q" else self.kv_chunks[device]
        return np.concatenate([np.take(x, np.arange(a, b), axis=axis) for a, b in chunks], axis=axis)

    def gather(self, parts: list, which: str = "q", axis: int = -2) -> np.ndarray:
        """The whole array from every device's shard (``parts[r]``), rows back in sequence order."""
        positions = np.concatenate(
            [self.q_positions(r) if which == "q" else self.kv_positions(r) for r in range(self.num_devices)]
        )
        stacked = np.concatenate(parts, axis=axis)
        return np.take(stacked, np.argsort(positions, kind="stable"), axis=axis)


def ring_layout(N: int, num_devices: int, *, zigzag: bool = False, M: int | None = None) -> RingLayout:
    """The shards of ``N`` queries and ``M`` keys (default ``M = N``) over ``P`` devices.

    Contiguous: device ``r`` holds the ``r``-th of ``P`` ranges (:func:`flashmath.splitkv.split_ranges`: sizes differ by
    at most 1 when ``P`` does not divide ``N``). Zig-zag: the sequence in ``2 P`` such ranges, device ``r`` holding
    ranges ``r`` and ``2 P - 1 - r`` (:func:`zigzag_chunks`).

    Raises:
        TypeError: non-integers, a ``zigzag`` that is not a bool. ValueError: ``P < 1``, or fewer rows than shards
        (each device needs at least one query and one key: ``N, M >= P``, or ``>= 2 P`` with zig-zag).
    """
    P = size(num_devices, "num_devices", 1)
    N = size(N, "N")
    M = N if M is None else size(M, "M")
    if not isinstance(zigzag, (bool, np.bool_)):
        raise TypeError(f"zigzag must be True or False, got {zigzag!r}")
    pieces = 2 * P if zigzag else P
    for rows, name in ((N, "N"), (M, "M")):
        if rows < pieces:
            raise ValueError(
                f"{name} = {rows} rows cannot give each of {P} devices a nonempty shard: "
                f"{'zig-zag sharding cuts the sequence into 2 P = ' if zigzag else 'the ring needs '}"
                f"{pieces} pieces, so {name} must be at least {pieces}"
            )

    def shards(rows: int) -> tuple[Chunks, ...]:
        ranges = split_ranges(rows, pieces)
        if not zigzag:
            return tuple((ranges[r],) for r in range(P))
        return tuple(tuple(ranges[c] for c in zigzag_chunks(P, r)) for r in range(P))

    return RingLayout(P, N, M, bool(zigzag), shards(N), shards(M))


# ----------------------------------------------------------------------------------------------------------------
# The schedule: what each device computes at each step
# ----------------------------------------------------------------------------------------------------------------


class RingStep(NamedTuple):
    """What device ``r`` computes at step ``t``, holding the key/value shard of device ``s = (r - t) mod P``.

    ``rows`` (local query rows of ``r``) and ``cols`` (local rows of shard ``s``) are ranges ``[start, stop)``;
    the step computes attention of those queries over those keys, with the causal mask inside the block when
    ``causal`` (the own shard: same positions on both sides), else every pair. ``rows == (0, 0)``: skipped (no query
    of ``r`` sees any key of ``s``). Its work: :attr:`visible_pairs` for a kernel that skips masked tiles,
    :attr:`score_entries` for one that computes the block whole (they differ only on the causal diagonal block).
    """

    step: int
    device: int
    shard: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    causal: bool

    @property
    def skipped(self) -> bool:
        return self.rows[1] <= self.rows[0]

    @property
    def score_entries(self) -> int:
        """Scores of the step's block per (batch, head) element, the block whole: ``rows x cols`` (0 when skipped)."""
        return 0 if self.skipped else (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])

    @property
    def visible_pairs(self) -> int:
        """(query, key) pairs that attend, per (batch, head) element: ``n (n + 1) / 2`` for a causal block of ``n``,
        else ``score_entries``; the work of a kernel that skips the masked tiles, up to the diagonal's tiles."""
        n = self.rows[1] - self.rows[0]
        return n * (n + 1) // 2 if self.causal and not self.skipped else self.score_entries


def _local_ranges(chunks: Chunks) -> list[tuple[int, int, int, int]]:
    """``[(global start, global stop, local start, local stop)]`` of a device's chunks."""
    out, at = [], 0
    for a, b in chunks:
        out.append((a, b, at, at + b - a))
        at += b - a
    return out


def ring_step(layout: RingLayout, causal: bool, device: int, step: int) -> RingStep:
    """Device ``r``'s work at step ``t`` (see :class:`RingStep`); the held shard is ``s = (r - t) mod P``.

    Non-causal: every query of ``r`` against every key of ``s``. Causal (``N = M``): the own shard (``t = 0``) is a
    causal block; another shard is, chunk by chunk, entirely visible (its keys precede the queries) or entirely
    hidden, and the step computes the visible rectangle (for both layouts it is one block of local rows and
    columns), or nothing.
    """
    P = layout.num_devices
    s = (device - step) % P
    n, m = layout.q_size(device), layout.kv_size(s)
    if not causal:
        return RingStep(step, device, s, (0, n), (0, m), False)
    if s == device:
        return RingStep(step, device, s, (0, n), (0, m), True)
    q_parts, kv_parts = _local_ranges(layout.q_chunks[device]), _local_ranges(layout.kv_chunks[s])
    # chunks of one split never overlap: a key chunk is wholly before a query chunk (visible) or wholly after
    sees = [[kb <= qa for (ka, kb, _, _) in kv_parts] for (qa, qb, _, _) in q_parts]
    rows = [q_parts[i][2:] for i in range(len(q_parts)) if any(sees[i])]
    cols = [kv_parts[j][2:] for j in range(len(kv_parts)) if any(sees[i][j] for i in range(len(q_parts)))]
    if not rows:
        return RingStep(step, device, s, (0, 0), (0, 0), False)
    r0, r1, c0, c1 = rows[0][0], rows[-1][1], cols[0][0], cols[-1][1]
    # the visible pairs must be exactly one rectangle of local rows and columns (true for both layouts)
    for i, (_, _, la, lb) in enumerate(q_parts):
        for j, (_, _, ka, kb) in enumerate(kv_parts):
            inside = r0 <= la and lb <= r1 and c0 <= ka and kb <= c1
            if sees[i][j] != inside:  # pragma: no cover - a layout this module does not make
                raise AssertionError(f"step {step} of device {device}: the visible keys are not one block")
    return RingStep(step, device, s, (r0, r1), (c0, c1), False)


def ring_schedule(layout: RingLayout, causal: bool = False) -> list[list[RingStep]]:
    """Every device's work at every step: ``schedule[t][r]`` is :func:`ring_step` of device ``r`` at step ``t``.

    Raises:
        TypeError: a ``causal`` that is not a bool. ValueError: ``causal`` with ``N != M`` (ring attention's causal
        mask is self-attention's: queries and keys are the same positions).
    """
    causal = _check_causal_layout(layout, causal)
    return [[ring_step(layout, causal, r, t) for r in range(layout.num_devices)] for t in range(layout.num_devices)]


def _check_causal_layout(layout: RingLayout, causal: object) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if causal and layout.N != layout.M:
        raise ValueError(
            f"a causal ring needs N = M (self-attention: query n sees the keys m <= n of the same sequence), got "
            f"N = {layout.N} and M = {layout.M}"
        )
    return bool(causal)


def ring_work(layout: RingLayout, causal: bool = False) -> dict[str, np.ndarray]:
    """The work of each device, summed over the steps, per (batch, head) element.

    Returns:
        ``{"steps": computed steps, "score_entries": scores computed with every step's block whole (the causal
        diagonal block too, ``n x n``), "visible_pairs": the (query, key) pairs that attend}``, each an int array
        ``(P,)`` indexed by device. ``visible_pairs`` is the work of a causal kernel that skips masked tiles, as
        FlashAttention's does (up to the tiles that straddle the diagonal): the diagonal block costs its
        ``n (n + 1) / 2`` visible pairs, about half. Causal and contiguous with shards of ``S`` rows, device ``r``
        attends ``r S^2 + S (S + 1) / 2`` pairs, so the last device works ``((2 P - 1) S + 1) / (S + 1)`` times as
        long as the first, about ``2 P - 1`` (``score_entries`` grows as ``(r + 1) S^2``: ``P`` times); under
        zig-zag both are the same for every device (when ``2 P`` divides ``N``; otherwise within a few rows).
    """
    work = {name: np.zeros(layout.num_devices, dtype=np.int64) for name in ("steps", "score_entries", "visible_pairs")}
    for row in ring_schedule(layout, causal):
        for st in row:
            work["steps"][st.device] += not st.skipped
            work["score_entries"][st.device] += st.score_entries
            work["visible_pairs"][st.device] += st.visible_pairs
    return work


# ----------------------------------------------------------------------------------------------------------------
# One step on one device: the same code in the simulation here and on gloo (flashmath.ring_dist)
# ----------------------------------------------------------------------------------------------------------------


def ring_forward_step(
    a: np.ndarray,
    lse: np.ndarray,
    q_shard: np.ndarray,
    k_shard: np.ndarray,
    v_shard: np.ndarray,
    step: RingStep,
    *,
    scale: float,
    block_q: int | None = None,
    block_k: int | None = None,
) -> None:
    """One ring step of one device: attention of the step's query rows over the held shard's key rows, merged into
    the device's running state.

    Args:
        a, lse: the device's running output ``(..., n_r, Dv)`` and logsumexp ``(..., n_r)`` (start: 0 and ``-inf``);
            **updated in place** on the step's rows.
        q_shard ``(..., n_r, D)``, k_shard ``(..., m_s, D)``, v_shard ``(..., m_s, Dv)``: the device's queries and
            the key/value shard it holds (leading dimensions broadcast). step: from :func:`ring_step`.
        scale: the score scale of the whole problem. block_q, block_k: the tiles of :func:`flashmath.flash_attention`.
    """
    if step.skipped:
        return
    (r0, r1), (c0, c1) = step.rows, step.cols
    # the held keys alone: A_s and L_s of the step's queries (FlashAttention-2 on the block)
    a_s, lse_s = flash_attention(
        q_shard[..., r0:r1, :],
        k_shard[..., c0:c1, :],
        v_shard[..., c0:c1, :],
        scale=scale,
        causal=step.causal,
        return_lse=True,
        block_q=block_q,
        block_k=block_k,
        workers=1,
    )
    # (A, L) <- merge((A, L), (A_s, L_s)): chapter 10's merge of two disjoint key ranges
    a[..., r0:r1, :], lse[..., r0:r1] = merge_states(a[..., r0:r1, :], lse[..., r0:r1], a_s, lse_s)


def ring_backward_step(
    q_shard: np.ndarray,
    a_shard: np.ndarray,
    lse_shard: np.ndarray,
    grad_a_shard: np.ndarray,
    k_shard: np.ndarray,
    v_shard: np.ndarray,
    step: RingStep,
    *,
    scale: float,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One backward ring step of one device: the gradients its queries give the held shard, and its own ``dQ`` part.

    Args:
        q_shard, a_shard, lse_shard, grad_a_shard: the device's ``Q_r``, final ``A_r``, ``L_r`` and ``dA_r``.
        k_shard, v_shard: the held shard. step: from :func:`ring_step`. scale, block_q, block_k: as
            :func:`flashmath.attention_backward`.

    Returns:
        None for a skipped step, else ``(dq_part, dk_part, dv_part)`` for ``step.rows`` of ``Q_r`` and ``step.cols``
        of the shard (the caller adds them: ``dQ_r`` stays on the device, ``dK_s, dV_s`` travel with the shard).
    """
    if step.skipped:
        return None
    (r0, r1), (c0, c1) = step.rows, step.cols
    grads = attention_backward(
        q_shard[..., r0:r1, :],
        k_shard[..., c0:c1, :],
        v_shard[..., c0:c1, :],
        a_shard[..., r0:r1, :],
        lse_shard[..., r0:r1],
        grad_a_shard[..., r0:r1, :],
        scale=scale,
        causal=step.causal,
        block_q=block_q,
        block_k=block_k,
    )
    dq_part, dk_part, dv_part = grads[:3]
    return dq_part, dk_part, dv_part


# ----------------------------------------------------------------------------------------------------------------
# The ring, P devices simulated in one process
# ----------------------------------------------------------------------------------------------------------------


class RingInputs(NamedTuple):
    """Checked ring inputs: the grouped heads, the checked arrays, the layout and the causal flag."""

    heads: GroupedHeads
    inp: AttentionInputs
    layout: RingLayout
    causal: bool


def ring_inputs(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    num_devices: int,
    *,
    causal: bool = False,
    zigzag: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> RingInputs:
    """Check the arguments of a ring (as :func:`ring_attention`) and lay out the shards.

    Raises:
        as :func:`flashmath.flash_attention` (the inputs), :func:`ring_layout` and :func:`ring_schedule`.
    """
    heads = group_heads(q, k, v, None, enable_gqa)  # (..., H_kv, G, N, D) and (..., H_kv, 1, M, D) with GQA
    inp = prepare_attention_inputs(heads.q, heads.k, heads.v, scale=scale, causal=causal, fold_causal=False)
    layout = ring_layout(inp.N, num_devices, zigzag=zigzag, M=inp.M)
    return RingInputs(heads, inp, layout, _check_causal_layout(layout, causal))


@dataclass(frozen=True)
class RingFrame:
    """One device after one step of :func:`ring_trace`.

    Attributes:
        step: the step's plan (:class:`RingStep`: step, device, the shard held, rows, cols, causal, skipped).
        a, lse: the device's running output ``(..., n_r, Dv)`` and logsumexp ``(..., n_r)`` after the step, heads
            restored (copies).
        sent_bytes: bytes the device sends after the step (the key/value shard it held; 0 after the last step).
        held_bytes: bytes of the arrays the device holds during the step: ``Q_r``, its ``(A, L)``, the key/value
            shard it computes with and, before the last step, the one arriving.
    """

    step: RingStep
    a: np.ndarray
    lse: np.ndarray
    sent_bytes: int
    held_bytes: int


@dataclass(frozen=True)
class RingTrace:
    """Every step of every device of a simulated ring (:func:`ring_trace`), for the chapter-14 widget.

    Attributes:
        layout: the shards. causal: whether causal. frames: ``frames[t][r]`` (:class:`RingFrame`).
        output, lse: the result ``(..., N, Dv)``, ``(..., N)`` in sequence order (heads restored).
        work: :func:`ring_work`. sent_bytes: ``(P - 1, P)`` int array, bytes device ``r`` sends after step ``t``.
    """

    layout: RingLayout
    causal: bool
    frames: list
    output: np.ndarray
    lse: np.ndarray
    work: dict
    sent_bytes: np.ndarray

    def __len__(self) -> int:
        return len(self.frames)


def _nbytes(*arrays: np.ndarray) -> int:
    return int(sum(x.nbytes for x in arrays))


def _run_forward(ri: RingInputs, block_q: int | None, block_k: int | None, record: bool) -> tuple:
    """The simulated ring: ``(a, lse, frames, sent)`` with ``a``, ``lse`` in the loop's (grouped) heads."""
    inp, layout, P = ri.inp, ri.layout, ri.layout.num_devices
    state_dtype = np.result_type(inp.dtype, np.float32)  # merge_states' dtype
    q_shards = [layout.take(inp.q, r, "q") for r in range(P)]
    # at step 0 each device holds its own key/value shard
    held = [(layout.take(inp.k, r, "kv"), layout.take(inp.v, r, "kv")) for r in range(P)]
    a = [np.zeros(inp.batch_shape + (layout.q_size(r), inp.Dv), state_dtype) for r in range(P)]
    lse = [np.full(inp.batch_shape + (layout.q_size(r),), -np.inf, state_dtype) for r in range(P)]
    frames: list = []
    sent = np.zeros((max(P - 1, 0), P), dtype=np.int64)
    for t in range(P):
        row = []
        for r in range(P):
            st = ring_step(layout, ri.causal, r, t)
            k_s, v_s = held[r]
            ring_forward_step(
                a[r], lse[r], q_shards[r], k_s, v_s, st, scale=inp.scale, block_q=block_q, block_k=block_k
            )
            if t < P - 1:
                sent[t, r] = _nbytes(k_s, v_s)  # K_s and V_s go on to device r + 1
            if record:
                arriving = _nbytes(*held[(r - 1) % P]) if t < P - 1 else 0
                held_bytes = _nbytes(q_shards[r], a[r], lse[r], k_s, v_s) + arriving
                out = ri.heads.restore((a[r].astype(inp.dtype, copy=False), lse[r].copy()))
                row.append(RingFrame(st, out[0].copy(), out[1], int(sent[t, r]) if t < P - 1 else 0, held_bytes))
        if record:
            frames.append(row)
        if t < P - 1:
            held = [held[(r - 1) % P] for r in range(P)]  # every shard moves one device on: r receives from r - 1
    return layout.gather(a, "q"), layout.gather(lse, "q", axis=-1), frames, sent


def ring_trace(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    num_devices: int,
    *,
    causal: bool = False,
    zigzag: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    block_q: int | None = None,
    block_k: int | None = None,
) -> RingTrace:
    """:func:`ring_attention`, recording every device's state after every step (:class:`RingTrace`).

    Raises:
        as :func:`ring_attention`.
    """
    ri = ring_inputs(q, k, v, num_devices, causal=causal, zigzag=zigzag, scale=scale, enable_gqa=enable_gqa)
    a, lse, frames, sent = _run_forward(ri, block_q, block_k, record=True)
    a, lse = ri.heads.restore((a.astype(ri.inp.dtype, copy=False), lse))
    return RingTrace(ri.layout, ri.causal, frames, a, lse, ring_work(ri.layout, ri.causal), sent)


def ring_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    num_devices: int,
    *,
    causal: bool = False,
    zigzag: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    block_q: int | None = None,
    block_k: int | None = None,
    return_lse: bool = False,
) -> Any:
    """Attention computed by a ring of ``num_devices`` simulated devices (the module docstring has the algorithm).

    Args:
        q: ``(..., N, D)`` (``(..., H, N, D)`` with ``enable_gqa``); k: ``(..., M, D)``; v: ``(..., M, Dv)``.
        num_devices: ``P >= 1``; each device needs at least one query and one key row (``N, M >= P``; ``>= 2 P``
            with ``zigzag``). Need not divide ``N``: shard sizes then differ by at most one row (per chunk).
        causal: self-attention's causal mask (``N = M``); the steps a device cannot see are skipped.
        zigzag: zig-zag sharding (device ``r`` holds chunks ``r`` and ``2 P - 1 - r`` of ``2 P``), which balances the
            causal work.
        scale, enable_gqa: as :func:`flashmath.flash_attention`.
        block_q, block_k: the tiles of each step's :func:`flashmath.flash_attention`.
        return_lse: also return the logsumexp ``(..., N)``.

    Returns:
        ``A (..., N, Dv)`` in the promoted input dtype (the states merged in at least float32), and the logsumexp
        if asked. Bitwise equal to ``flash_attention(q, k, v, block_q=..., block_k=...)`` for ``P = 1``; for
        ``P >= 2`` equal up to rounding (module docstring, "Bitwise").

    Raises:
        as :func:`flashmath.flash_attention` for the inputs; TypeError: non-integer ``num_devices``, non-bool
        ``causal`` or ``zigzag``; ValueError: ``num_devices < 1``, too few rows for the shards, ``causal`` with
        ``N != M``.
    """
    ri = ring_inputs(q, k, v, num_devices, causal=causal, zigzag=zigzag, scale=scale, enable_gqa=enable_gqa)
    a, lse, _, _ = _run_forward(ri, block_q, block_k, record=False)
    result = ri.heads.restore((a.astype(ri.inp.dtype, copy=False), lse))
    return result if return_lse else result[0]


def ring_attention_backward(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    lse: ArrayLike,
    grad_a: ArrayLike,
    num_devices: int,
    *,
    causal: bool = False,
    zigzag: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    return_sent_bytes: bool = False,
) -> Any:
    """The backward ring: gradients of attention with respect to ``q``, ``k``, ``v``, on ``P`` simulated devices.

    Device ``r`` keeps ``Q_r``, ``A_r``, ``L_r``, ``dA_r`` and accumulates ``dQ_r``; the shards ``K_s, V_s`` travel as
    in the forward and with each its ``dK_s, dV_s``, to which every device adds its queries' part
    (:func:`ring_backward_step`); after the last step one more hop returns ``dK_s, dV_s`` to device ``s``.

    Args:
        q, k, v, num_devices, causal, zigzag, scale, enable_gqa: as given to :func:`ring_attention`.
        a, lse: the forward's output ``(..., N, Dv)`` and logsumexp ``(..., N)`` (``return_lse=True``).
        grad_a: ``dA`` ``(..., N, Dv)``. block_q, block_k: the tiles of each step's backward.
        return_sent_bytes: also return a ``(P, P)`` int array, bytes device ``r`` sends after step ``t``: ``K_s,
            V_s, dK_s, dV_s`` after steps ``0 .. P - 2``, ``dK_s, dV_s`` alone after step ``P - 1`` (nothing with one
            device).

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes of ``q``, ``k``, ``v`` (``k``, ``v`` with ``H_kv`` heads under
        ``enable_gqa``), in the compute dtype; with ``return_sent_bytes``, ``((grad_q, grad_k, grad_v), sent)``.
        Equal to :func:`flashmath.attention_backward` up to rounding.

    Raises:
        as :func:`ring_attention` and :func:`flashmath.attention_backward`.
    """
    ri = ring_inputs(q, k, v, num_devices, causal=causal, zigzag=zigzag, scale=scale, enable_gqa=enable_gqa)
    inp, layout, P = ri.inp, ri.layout, ri.layout.num_devices
    rows = inp.batch_shape + (inp.N,)
    a_g, lse_g, da_g = (
        group_rows(ri, x, name, shape)
        for x, name, shape in ((a, "a", rows + (inp.Dv,)), (lse, "lse", rows), (grad_a, "grad_a", rows + (inp.Dv,)))
    )
    dtype = compute_dtype(np.result_type(inp.dtype, a_g, lse_g, da_g))  # attention_backward's dtype
    # device r keeps Q_r, A_r, L_r, dA_r and accumulates dQ_r
    mine = [
        tuple(layout.take(x, r, "q", axis) for x, axis in ((inp.q, -2), (a_g, -2), (lse_g, -1), (da_g, -2)))
        for r in range(P)
    ]
    dq = [np.zeros(mine[r][0].shape, dtype) for r in range(P)]
    # what travels: [K_s, V_s, dK_s, dV_s], device r holding its own shard at step 0, its gradients zero
    held = []
    for r in range(P):
        k_r, v_r = layout.take(inp.k, r, "kv"), layout.take(inp.v, r, "kv")
        held.append((k_r, v_r, np.zeros(k_r.shape, dtype), np.zeros(v_r.shape, dtype)))
    sent = np.zeros((P, P), dtype=np.int64)
    for t in range(P):
        for r in range(P):
            st = ring_step(layout, ri.causal, r, t)
            k_s, v_s, dk_s, dv_s = held[r]
            q_r, a_r, lse_r, da_r = mine[r]
            grads = ring_backward_step(
                q_r, a_r, lse_r, da_r, k_s, v_s, st, scale=inp.scale, block_q=block_q, block_k=block_k
            )
            if grads is not None:
                (r0, r1), (c0, c1) = st.rows, st.cols
                dq[r][..., r0:r1, :] += grads[0]  # dQ_r stays
                dk_s[..., c0:c1, :] += grads[1]  # dK_s, dV_s travel with the shard
                dv_s[..., c0:c1, :] += grads[2]
            # after steps 0 .. P - 2: K_s, V_s, dK_s, dV_s go on to device r + 1; after step P - 1 only dK_s, dV_s
            # (with one device they are home already: nothing is sent)
            sent[t, r] = (_nbytes(dk_s, dv_s) if P > 1 else 0) + (_nbytes(k_s, v_s) if t < P - 1 else 0)
        held = [held[(r - 1) % P] for r in range(P)]  # after P hops every shard's gradients are back with its owner
    dq_full = layout.gather(dq, "q")
    dk_full = layout.gather([held[r][2] for r in range(P)], "kv")
    dv_full = layout.gather([held[r][3] for r in range(P)], "kv")
    grads_out = (ri.heads.restore(dq_full), ungroup_kv(ri, dk_full), ungroup_kv(ri, dv_full))
    return (grads_out, sent) if return_sent_bytes else grads_out


def group_rows(ri: RingInputs, x: ArrayLike, name: str, shape: tuple) -> np.ndarray:
    """The caller's ``a``, ``lse`` or ``grad_a`` (``(..., N, Dv)`` or ``(..., N)``, heads ``H``) with its heads split
    as the loop sees them (``(..., H_kv, G, ...)`` under ``enable_gqa``), broadcast to ``shape``; ValueError naming it
    otherwise."""
    arr = as_float_array(x, name)
    trailing = len(shape) - len(ri.inp.batch_shape)  # 2 for (N, Dv), 1 for (N,)
    G = ri.heads.groups
    want = ri.heads.original_batch(ri.inp.batch_shape) + shape[-trailing:]
    try:
        if G is not None:
            if arr.ndim < trailing + 1 or arr.shape[-trailing - 1] % G:
                raise ValueError
            head = arr.shape[-trailing - 1]
            # (..., H, N[, Dv]) -> (..., H_kv, G, N[, Dv])
            arr = arr.reshape(arr.shape[: -trailing - 1] + (head // G, G) + arr.shape[-trailing:])
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(f"{name} must have shape {want} (from q, k, v), got {np.shape(x)}") from None


def ungroup_kv(ri: RingInputs, g: np.ndarray) -> np.ndarray:
    """``dK``/``dV`` of the loop's ``(..., H_kv, 1, M, D)`` as ``(..., H_kv, M, D)``."""
    return g[..., 0, :, :] if ri.heads.groups is not None else g
