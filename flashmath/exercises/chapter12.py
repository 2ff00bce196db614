"""Checkers for the exercises of chapter 12 (the backward pass), mistakes named.

* :func:`check_backward_tiles` (12.1, optional): ``fn(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv)``,
  the backward with key tiles outside, in numpy, from the saved logsumexp, against
  :func:`flashmath.attention_backward`.
* :func:`check_dq_kernel` (12.2): ``fn(q, k, v, a, lse, grad_a, keep) -> dq``, a wrapper around the learner's
  Triton kernel for ``dQ`` (one program per query tile, the key tiles streamed past), run compiled on a GPU or in
  Triton's interpreter; its mistakes are :data:`DQ_MISTAKES`, each modelled by a float32 numpy emulation of the
  kernel's tiles with one slip switched on (:func:`_dq_model`).

12.1's mistake models (:data:`BACKWARD_MISTAKES`) are the classic ones: ``Delta`` forgotten, from the wrong arrays,
with the wrong sign or per key tile; ``Y`` not recomputed from the logsumexp, or as ``exp(X) / exp(L)`` (overflows
above 709); NaN on a fully masked row; a transpose wrong; a wrong scale in ``X``, ``dV``, ``dQ`` or ``dK``; ``dQ``
not accumulated across key tiles; tile bounds one off; the last, shorter tile skipped; gradients leaking into masked
keys. Each model is the whole tiled backward with one switch, so that it gives what a learner's code gives on every
case.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import PropertyFailure, Said, check_function, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake, fmt
from flashmath.exercises._tiles import inputs_unchanged, shape_hint, shape_mistake
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = ["BACKWARD_MISTAKES", "DQ_MISTAKES", "check_backward_tiles", "check_dq_kernel"]


def _model(
    q,
    k,
    v,
    a,
    lse,
    grad_a,
    keep,
    block_k,
    *,
    delta=True,
    y="lse",
    transpose=False,
    scale_dq=True,
    scale_dk=True,
    accumulate_dq=True,
    mask=True,
    scale_x=None,
    scale_dv=False,
    d_from="a",
    d_sign=1,
    d_per_tile=False,
    ends=0,
    partial=True,
    dx_scaled=False,
    dq_power=1,
    dk_power=1,
    untouched=False,
    ends_after_min=0,
    safe_lse=False,
    select_dx=None,
    dq_keys_used=False,
    parens=True,
    dq_from_v=False,
):
    """The tiled backward with one mistake switched on (the defaults are right).

    ``y``: ``"lse"`` (right), ``"tile softmax"``, ``"exp"`` (exp(X) without L), ``"exp / exp"`` (exp(X) / exp(L),
    inf / inf above 709), ``"times keep"`` (exp(X - L) * keep: inf * 0 = NaN on a fully masked row). ``scale_x``: the
    factor of ``X`` (None: 1/sqrt(D)). ``d_from``: the second array of ``Delta = rowsum(grad_a * ...)``, ``"a"``,
    ``"q"`` or ``"one"`` (rowsum(grad_a)), or ``"a alone"`` (rowsum(a)). ``ends``: the tile's end moved by this many
    keys (``-1``: the last key of each tile skipped; ``+1``: one key shared with the next tile). ``partial=False``: the
    last, shorter tile skipped. ``d_from="all"``: Delta one number, summed over the whole array. ``y="everywhere"``:
    exp(X - L) at every pair, masked or not, nothing selected. ``dx_scaled``: dX multiplied by the scale as well;
    ``dq_power``, ``dk_power``: dQ, dK multiplied by scale ** power (0: no scale, -1: sqrt(D)). ``untouched``: the
    keys and values no row attends read as 0 (a learner's guard against padding that may hold anything).
    ``ends_after_min``: the tile's end moved after the clip to M, ``c1 = min(c0 + block_k, M) - 1``. ``safe_lse``:
    L read as 0 on a fully masked row before exp(X - L) (a guard, then the mask ignored). ``y="masked x"``: X set to
    -inf at the masked pairs, then exp(X - L) unselected (NaN on a fully masked row). ``select_dx``: whether dX is
    selected with the mask (None: where Y is). ``dq_keys_used``: dQ from the keys with those no row attends read as 0.
    ``parens=False``: dX = Y * dY - Delta, the parentheses missing. ``dq_from_v``: dQ from the values, dX V_j.
    """
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D)
    live = keep & ~np.isneginf(lse)[:, None]  # attended pairs; a fully masked row attends none
    if untouched:
        used = live.any(axis=0)[:, None]
        k, v = np.where(used, k, 0.0), np.where(used, v, 0.0)
    second = {"a": a, "q": q, "one": 1.0}.get(d_from)
    d_row = (np.sum(a, axis=1) if second is None else np.sum(grad_a * second, axis=1)) if delta else np.zeros(N)
    if d_from == "all":
        d_row = np.full(N, np.sum(grad_a * a))
    d_row = d_sign * d_row
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    last = M if partial else M - M % block_k
    for c0 in range(0, last, block_k):
        c1 = min(c0 + block_k + ends, M) + ends_after_min
        x = (scale if scale_x is None else scale_x) * q @ k[c0:c1].T  # (N, B_c)
        keep_t = live[:, c0:c1] if mask else np.broadcast_to(~np.isneginf(lse)[:, None], x.shape)
        if y == "lse":
            y_t = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0)), 0)
        elif y == "tile softmax":  # the softmax of the tile alone, as if the tile were the whole row
            e = np.where(keep_t, np.exp(x - x.max(axis=1, keepdims=True)), 0)
            y_t = e / np.where(e.sum(axis=1, keepdims=True) > 0, e.sum(axis=1, keepdims=True), 1)
        elif y == "exp / exp":  # exp(X) / exp(L): inf / inf where a score passes 709
            y_t = np.where(keep_t, np.exp(x) / np.exp(np.where(keep_t, lse[:, None], 0)), 0)
        elif y == "times keep":  # masked by a product: exp(x + inf) * 0 is NaN on a fully masked row
            y_t = np.exp(x - lse[:, None]) * keep_t
        elif y == "everywhere":  # the mask ignored: exp(X - L) at every pair, inf on a fully masked row
            y_t = np.exp(x - (np.where(np.isneginf(lse), 0.0, lse) if safe_lse else lse)[:, None])
        elif y == "masked x":  # X set to -inf where masked: exp(-inf - (-inf)) is NaN on a fully masked row
            with np.errstate(invalid="ignore"):
                y_t = np.exp(np.where(live[:, c0:c1], x, -np.inf) - lse[:, None])
        else:  # exp(X) without the logsumexp: unnormalised
            y_t = np.where(keep_t, np.exp(x), 0)
        dy = grad_a @ v[c0:c1].T
        d_t = np.sum(y_t * dy, axis=1) if d_per_tile else d_row
        unselected = y in ("times keep", "everywhere", "masked x") if select_dx is None else not select_dx
        raw_dx = y_t * (dy - d_t[:, None]) if parens else y_t * dy - d_t[:, None]
        dx = raw_dx if unselected else np.where(keep_t, raw_dx, 0)
        dx = scale * dx if dx_scaled else dx
        dv[c0:c1] = (scale if scale_dv else 1) * ((y_t @ grad_a) if transpose else (y_t.T @ grad_a))
        dk[c0:c1] = (scale**dk_power if scale_dk else 1) * ((dx @ q) if transpose else (dx.T @ q))
        k_dq = np.where(live.any(axis=0)[c0:c1, None], k[c0:c1], 0.0) if dq_keys_used else k[c0:c1]
        k_dq = v[c0:c1] if dq_from_v else k_dq
        part = (scale**dq_power if scale_dq else 1) * (dx @ k_dq)
        if accumulate_dq:
            dq += part
        else:
            dq = part
    return dq, dk, dv


def _mistake(**switch):
    return lambda *args: _model(*args, **switch)


BACKWARD_MISTAKES = (
    Mistake(
        N_("Delta forgotten"),
        N_(
            "the softmax Jacobian gives dX = Y * (dY - Delta) with Delta_n = rowsum(dA * A), not Y * dY: subtract each "
            "row's Delta (computed once, before the key tiles)"
        ),
        (_mistake(delta=False),),
    ),
    Mistake(
        N_("Y not recomputed from the logsumexp"),
        N_(
            "Y_ij = exp(X_ij - L_i) with the saved L of the whole row; a softmax of the tile alone, or exp(X) "
            "without L, is not the forward's Y"
        ),
        (_mistake(y="tile softmax"), _mistake(y="exp")),
    ),
    Mistake(
        N_("Delta from the wrong arrays"),
        N_("Delta_n = rowsum(dA * A): the output's gradient times the forward's output a, row by row"),
        (_mistake(d_from="q"), _mistake(d_from="one"), _mistake(d_from="a alone")),
    ),
    Mistake(
        N_("Delta summed over the whole array"),
        N_("Delta is one number per row: Delta_n = rowsum(dA * A), np.sum(grad_a * a, axis=1), not np.sum(grad_a * a)"),
        (_mistake(d_from="all"),),
    ),
    Mistake(
        N_("Delta with the wrong sign"),
        N_("dX = Y * (dY - Delta), Delta subtracted: the softmax Jacobian is diag(y) - y y^T"),
        (_mistake(d_sign=-1),),
    ),
    Mistake(
        N_("dX = Y * dY - Delta (the parentheses missing)"),
        N_("Delta is subtracted from dY before the product: dX = Y * (dY - Delta), not Y * dY - Delta"),
        (_mistake(parens=False), _mistake(parens=False, select_dx=False)),
    ),
    Mistake(
        N_("dQ from the values"),
        N_("X = scale Q K^T, so dQ = scale dX K: the keys of the tile, K_j, not its values V_j"),
        (_mistake(dq_from_v=True),),
    ),
    Mistake(
        N_("Delta computed per key tile"),
        N_(
            "Delta_n = rowsum(dA * A) is a sum over every key of the row; rowsum(dY * Y) over one key tile is only "
            "that tile's part: compute Delta once, from dA and A, before the key tiles"
        ),
        (_mistake(d_per_tile=True),),
    ),
    Mistake(
        N_("exp(X) / exp(L) instead of exp(X - L)"),
        N_("exp(X) overflows float64 for a score above 709 and inf / inf is NaN: compute Y = exp(X - L)"),
        (_mistake(y="exp / exp"),),
    ),
    Mistake(
        N_("NaN on a fully masked row"),
        N_(
            "a fully masked row has L = -inf, so exp(X - L) = inf, and inf * 0 is NaN: select with np.where(keep, "
            "..., 0), and subtract 0 instead of L where the row has no key"
        ),
        (_mistake(y="times keep"), _mistake(y="masked x", select_dx=True), _mistake(y="masked x")),
    ),
    Mistake(
        N_("a transpose wrong"),
        N_("dV_j = Y_ij^T dA_i and dK_j = dX_ij^T Q_i: the key index must come first (shape (B_c, Dv) and (B_c, D))"),
        (_mistake(transpose=True),),
    ),
    Mistake(
        N_("a wrong scale in X"),
        N_("the scores are X = Q K^T / sqrt(D), scale 1/sqrt(D), the forward's: not Q K^T, not Q K^T * sqrt(D)"),
        (_mistake(scale_x=1.0), lambda *args: _model(*args, scale_x=np.sqrt(args[0].shape[1]))),
    ),
    Mistake(
        N_("the scale 1/D instead of 1/sqrt(D)"),
        N_("the scale is 1/sqrt(D), the forward's, in X, dQ and dK: not 1/D"),
        (
            lambda *args: _model(*args, scale_x=1 / args[0].shape[1], dq_power=2, dk_power=2),
            lambda *args: _model(*args, scale_x=1 / args[0].shape[1]),
        ),
    ),
    Mistake(
        N_("the scale in dV"),
        N_("A = Y V has no scale, so dV = Y^T dA: the scale belongs to dQ and dK only"),
        (_mistake(scale_dv=True),),
    ),
    Mistake(
        N_("the scale applied twice"),
        N_(
            "dX = Y * (dY - Delta) has no scale: the scale enters once, in dQ = scale dX K and dK = scale dX^T Q (it "
            "comes from X = scale Q K^T)"
        ),
        (_mistake(dx_scaled=True), _mistake(dq_power=2, dk_power=2)),
    ),
    Mistake(
        N_("sqrt(D) instead of 1/sqrt(D)"),
        N_("the scale is 1/sqrt(D), the forward's: dQ = dX K / sqrt(D) and dK = dX^T Q / sqrt(D)"),
        (_mistake(dq_power=-1), _mistake(dk_power=-1), _mistake(dq_power=-1, dk_power=-1)),
    ),
    Mistake(
        N_("the scale missing from both dQ and dK"),
        N_("X = scale Q K^T, so dQ = scale dX K and dK = scale dX^T Q"),
        (_mistake(scale_dq=False, scale_dk=False),),
    ),
    Mistake(N_("the scale missing from dQ"), N_("X = scale Q K^T, so dQ = scale dX K"), (_mistake(scale_dq=False),)),
    Mistake(N_("the scale missing from dK"), N_("X = scale Q K^T, so dK = scale dX^T Q"), (_mistake(scale_dk=False),)),
    Mistake(
        N_("dQ not accumulated across key tiles"),
        N_("every key tile adds to dQ: dQ += scale dX_ij K_j, not dQ = (the result was the last key tile's part only)"),
        (_mistake(accumulate_dq=False),),
    ),
    Mistake(
        N_("tile bounds one off"),
        N_(
            "key tile j holds keys c0 .. c1 - 1 with c1 = min(c0 + block_k, M): k[c0:c1], no key skipped and none "
            "in two tiles"
        ),
        (_mistake(ends=-1), _mistake(ends=1), _mistake(ends_after_min=-1)),
    ),
    Mistake(
        N_("the last, shorter tile skipped"),
        N_(
            "when block_k does not divide M the last tile is shorter, and it counts: range(0, M, block_k) with "
            "c1 = min(c0 + block_k, M)"
        ),
        (_mistake(partial=False),),
    ),
    Mistake(
        N_("gradients leaking into masked keys"),
        N_(
            "a masked pair is absent: select Y and dX to 0 where keep is False (np.where), so that a masked key "
            "gets dK = dV = 0"
        ),
        (
            _mistake(mask=False),
            _mistake(y="everywhere"),
            _mistake(y="everywhere", untouched=True),
            _mistake(y="everywhere", safe_lse=True),
            _mistake(y="everywhere", safe_lse=True, dq_keys_used=True),
        ),
    ),
    INPUT_MODIFIED,
    shape_mistake(lambda *args: _reference(*args)),
    Mistake(N_("not (dq, dk, dv)"), N_("return the three gradients as a tuple (dq, dk, dv)")),
)


def _reference(q, k, v, a, lse, grad_a, keep, block_k):
    from flashmath.backward import attention_backward

    q, k, v, a, lse, grad_a = (np.asarray(x, np.float64) for x in (q, k, v, a, lse, grad_a))  # integers: floats
    return attention_backward(q, k, v, a, lse, grad_a, mask=keep, block_k=block_k)


def _case(rng, N, M, D, keep=None):
    from flashmath.attention import attention

    q, k, v = (rng.standard_normal(shape) for shape in ((N, D), (M, D), (M, D)))
    keep = np.ones((N, M), bool) if keep is None else keep
    a, lse = attention(q, k, v, mask=keep, return_lse=True)
    return q, k, v, a, lse, rng.standard_normal((N, D)), keep


def _large_scores(rng):
    """Queries and keys whose scores pass 709: exp(X) overflows float64, exp(X - L) does not."""
    from flashmath.attention import attention

    q, k, v = 20.0 * rng.standard_normal((4, 4)), 20.0 * rng.standard_normal((7, 4)), rng.standard_normal((7, 4))
    q[0] = 3.0 * k[2]  # row 0's score with key 2 is 3 |k_2|^2 / 2, far above 709
    keep = np.ones((4, 7), bool)
    a, lse = attention(q, k, v, mask=keep, return_lse=True)
    return q, k, v, a, lse, rng.standard_normal((4, 4)), keep


def _properties(rng):
    """The edge cases of the backward (12.1), those its prompt states: one query, one key, ``D = 1``; every row fully
    masked (every gradient 0). The inputs are float64 (the prompt says so): no integer, float16, NaN or +inf case."""
    return property_cases(
        [
            (_("one element: one query, one key, D = 1"), _case(rng, 1, 1, 1) + (1,)),
            (
                _("every row fully masked: every gradient 0"),
                _case(rng, 3, 5, 2, np.zeros((3, 5), bool)) + (2,),
            ),
        ]
    )


@exercise(
    "12.1", BACKWARD_MISTAKES, solution="backward_tiles", solutions="flashmath.solutions_triton", property_cases=2
)
def check_backward_tiles(fn) -> CheckReport:
    """Check ``fn(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv)`` (12.1): float64 arrays ``q (N, D)``,
    ``k``, ``v (M, D)``, the forward's ``a (N, D)`` and ``lse (N,)``, ``grad_a (N, D)``, ``keep (N, M)`` boolean
    (True = attend), key tiles of ``block_k``; the scale is ``1 / sqrt(D)``. Cases: several key tiles, the last one
    shorter; one key tile with ``N = M``; padded keys; a fully masked row; scores above 709; the inputs left
    unchanged, after the property cases (:func:`_properties`). Named mistakes: :data:`BACKWARD_MISTAKES`."""
    rng = np.random.default_rng(12)
    pad = np.ones((5, 9), bool)
    pad[:, 6:] = False
    empty = np.ones((6, 7), bool)
    empty[2] = False
    cases = [
        (_("N = 6, M = 10, D = 4, key tiles of 4 (the last has 2 keys)"), _case(rng, 6, 10, 4) + (4,)),
        (_("N = M = 5, D = 9, one key tile of 5"), _case(rng, 5, 5, 9) + (5,)),
        (_("the last 3 of 9 keys are padding (keep False)"), _case(rng, 5, 9, 4, pad) + (3,)),
        (_("row 3 attends no key (L = -inf)"), _case(rng, 6, 7, 4, empty) + (3,)),
        (_("scores above 709 (exp(X) overflows; exp(X - L) does not)"), _large_scores(rng) + (3,)),
    ]

    report = check_function(
        "check_backward_tiles",
        fn,
        cases,
        _reference,
        BACKWARD_MISTAKES,
        n_out=3,
        names=("dq", "dk", "dv"),
        not_answer=BACKWARD_MISTAKES[-1],
        hint=shape_hint,
        properties=_properties(np.random.default_rng(121)),
    )
    inputs_unchanged(
        report,
        fn,
        _("the inputs (q, k, v, a, lse, grad_a, keep) are left unchanged"),
        cases[3][1],
        which=range(7),
        always=True,
    )
    return report


# ------------------------------------------------------------------------------------------------------------------
# 12.2: the dQ kernel, in Triton
# ------------------------------------------------------------------------------------------------------------------

DQ_BLOCK = 16
"""``BLOCK_M = BLOCK_N`` of the exercise's wrapper (the least tile a GPU's ``tl.dot`` takes for 16-bit inputs)."""
DQ_RTOL = 1e-4
"""The tolerance, relative and absolute, of the float32 kernel against the float64 reference (its rounding is near
1e-6 on these cases)."""


def _padded(x: np.ndarray, rows: int, cols: int, fill: float = 0.0) -> np.ndarray:
    """``x`` (2-D) in a ``(rows, cols)`` float32 array, the rest ``fill``: what a masked load reads."""
    out = np.full((rows, cols), fill, np.float32)
    out[: x.shape[0], : x.shape[1]] = x
    return out


def _dq_model(
    q,
    k,
    v,
    a,
    lse,
    grad_a,
    keep,
    *,
    y="lse",
    select=True,
    select_dx=False,
    lse_axis="rows",
    d_sign=1,
    parens=True,
    d_axis="rows",
    d_per_tile=False,
    operand="k",
    scale_power=1,
    starts="right",
):
    """The exercise's kernel emulated in float32 numpy, tile for tile (padded rows, keys and features read as the
    masked loads read them), with one slip switched on; the defaults are right.

    ``y``: ``"lse"`` (``exp(X - L)``), ``"exp"`` (``exp(X)``, no ``L``), ``"exp / exp"`` (``exp(X) / exp(L)``),
    ``"exp2"`` (``2 ** (X - L)``), ``"exp2 of X"`` (``2 ** (X log2 e - L)``, ``L`` left in base e), ``"times keep"``
    (``exp(X - L) * keep``: ``inf * 0``), ``"masked x"`` (``X`` set to -inf at the masked pairs, then ``exp(X - L)``).
    ``select``: ``Y`` selected with ``keep`` (False: the mask forgotten); ``select_dx``: ``dX`` selected too (the
    right kernel needs not: ``Y`` is 0 there). ``lse_axis``, ``d_axis``: ``"keys"`` for a row vector without
    ``[:, None]``, which broadcasts along the keys. ``d_sign``: ``-1`` for ``dY + Delta``; ``parens=False``:
    ``Y * dY - Delta``; ``d_per_tile``: ``Delta`` as the tile's
    ``rowsum(Y * dY)``. ``operand``: ``"k"`` (right), ``"v"`` (``dX V_j``), ``"k^T"`` (``dX K_j^T``, only when
    ``BLOCK_D == B_c``). ``scale_power``: ``dQ`` times ``scale ** power``. ``starts``: the key tiles' first keys,
    ``"right"`` (``range(0, M, B_c)``), ``"whole tiles"`` (``range(0, M - M % B_c, B_c)``), ``"M - B_c"``
    (``range(0, M - B_c, B_c)``), ``"tile index"`` (``range(0, cdiv(M, B_c))``: 0, 1, 2, ...)."""
    B = DQ_BLOCK
    q, k, v, a, lse, grad_a = (np.asarray(x, np.float32) for x in (q, k, v, a, lse, grad_a))
    keep = np.asarray(keep, bool)
    N, D = q.shape
    M = k.shape[0]
    width = max(16, 1 << (D - 1).bit_length())  # BLOCK_D: D padded to a power of two, at least 16
    scale = np.float32(D**-0.5)
    delta = np.asarray(np.sum(grad_a * a, axis=1, dtype=np.float32))
    if operand == "k^T" and width != B:
        return None  # tl.dot of (B_r, B_c) and (BLOCK_D, B_c) raises: no answer to compare
    starts_of = {
        "right": range(0, M, B),
        "whole tiles": range(0, M - M % B, B),
        "M - B_c": range(0, M - B, B),
        "tile index": range(0, -(-M // B)),
        "first skipped": range(B, M, B),  # range(BLOCK_N, M + BLOCK_N, ...) too: the tile past M is all masked
    }
    dq = np.zeros((N, D), np.float32)
    for r0 in range(0, N, B):
        rows = min(B, N - r0)
        q_tile, da_tile = _padded(q[r0 : r0 + B], B, width), _padded(grad_a[r0 : r0 + B], B, width)
        lse_tile = _padded(lse[r0 : r0 + B, None], B, 1, -np.inf)[:, 0]
        delta_tile = _padded(delta[r0 : r0 + B, None], B, 1)[:, 0]
        acc = np.zeros((B, width), np.float32)
        for c0 in starts_of[starts]:
            k_tile, v_tile = _padded(k[c0 : c0 + B], B, width), _padded(v[c0 : c0 + B], B, width)
            keep_tile = _padded(keep[r0 : r0 + B, c0 : c0 + B], B, B).astype(bool)
            x = (q_tile @ k_tile.T) * scale
            lse_b = lse_tile[None, :] if lse_axis == "keys" else lse_tile[:, None]
            if y == "lse" or y == "times keep":
                e = np.exp(x - lse_b)
            elif y == "exp":
                e = np.exp(x)
            elif y == "exp / exp":
                e = np.exp(x) / np.exp(lse_b)
            elif y == "exp2":
                e = np.exp2(x - lse_b)
            elif y == "exp2 of x":
                e = np.exp2(x * np.float32(np.log2(np.e)) - lse_b)
            else:  # "masked x"
                e = np.exp(np.where(keep_tile, x, -np.inf) - lse_b)
            if y == "times keep":
                y_tile = e * keep_tile
            elif y == "masked x" or not select:
                y_tile = e
            else:
                y_tile = np.where(keep_tile, e, np.float32(0))
            dy = da_tile @ v_tile.T
            d_b = delta_tile[None, :] if d_axis == "keys" else delta_tile[:, None]
            if d_per_tile:
                d_b = np.asarray(np.sum(y_tile * dy, axis=1, dtype=np.float32))[:, None]
            dx = y_tile * (dy - d_sign * d_b) if parens else y_tile * dy - d_b
            dx = np.where(keep_tile, dx, np.float32(0)) if select_dx else dx
            second = {"k": k_tile, "v": v_tile, "k^T": k_tile.T}[operand]
            acc = acc + dx @ second
        dq[r0 : r0 + rows] = (acc * scale ** np.float32(scale_power))[:rows, :D]
    return dq


def _dq_mistake(**switch):
    return lambda *args: _dq_model(*args, **switch)


DQ_MISTAKES = (
    Mistake(
        N_("Y not from the logsumexp"),
        N_(
            "Y_ij = exp(X_ij - L_i): the forward's probabilities come back only with the saved L of the row, "
            "tl.exp(x_tile - lse[:, None])"
        ),
        (_dq_mistake(y="exp"),),
    ),
    Mistake(
        N_("exp(X) / exp(L) instead of exp(X - L)"),
        N_(
            "exp(X) overflows float32 for a score above 88.7 and inf / inf is NaN: compute "
            "tl.exp(x_tile - lse[:, None])"
        ),
        (_dq_mistake(y="exp / exp"),),
    ),
    Mistake(
        N_("base 2 instead of e"),
        N_(
            "the saved L is a natural logarithm and the scores are not multiplied by log2(e): use tl.exp, or "
            "tl.exp2((x_tile - lse[:, None]) * 1.4426950408889634) (the tutorial's base 2 needs both in base 2)"
        ),
        (_dq_mistake(y="exp2"), _dq_mistake(y="exp2 of x")),
    ),
    Mistake(
        N_("NaN on a fully masked row"),
        N_(
            "a row that attends no key has L = -inf, so exp(X - L) = inf, and inf * 0 (or exp(-inf - (-inf))) is "
            "NaN: select with tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0), which never multiplies"
        ),
        (_dq_mistake(y="times keep"), _dq_mistake(y="masked x")),
    ),
    Mistake(
        N_("the mask forgotten"),
        N_(
            "a masked pair is absent: select it away, y_tile = tl.where(keep, tl.exp(x_tile - lse[:, None]), 0.0); "
            "unselected, a padded or causal key adds to dQ, and a row with L = -inf gets exp(+inf) = inf"
        ),
        (_dq_mistake(select=False),),
    ),
    Mistake(
        N_("a row's L or Delta broadcast along the keys"),
        N_(
            "lse and delta hold one number per row, shape (B_r,); against a (B_r, B_c) tile Triton lines up the last "
            "axes, so lse alone is read along the keys: write lse[:, None] and delta[:, None]"
        ),
        (_dq_mistake(lse_axis="keys"), _dq_mistake(d_axis="keys"), _dq_mistake(lse_axis="keys", d_axis="keys")),
    ),
    Mistake(
        N_("Delta with the wrong sign"),
        N_("dX = Y * (dY - Delta), Delta subtracted: the softmax Jacobian is diag(y) - y y^T"),
        (_dq_mistake(d_sign=-1),),
    ),
    Mistake(
        N_("dX = Y * dY - Delta (the parentheses missing)"),
        N_("Delta is subtracted from dY before the product: dx_tile = y_tile * (dy_tile - delta[:, None])"),
        (_dq_mistake(parens=False), _dq_mistake(parens=False, select_dx=True)),
    ),
    Mistake(
        N_("Delta computed per key tile"),
        N_(
            "Delta_n = rowsum(dA * A) is a sum over every key of the row, computed once by the wrapper (delta); "
            "tl.sum(y_tile * dy_tile, 1) is only this tile's part: use delta[:, None]"
        ),
        (_dq_mistake(d_per_tile=True),),
    ),
    Mistake(
        N_("dQ from the values"),
        N_("X = scale Q K^T, so dQ = scale dX K: tl.dot(dx_tile, k_tile), the keys of the tile, not v_tile"),
        (_dq_mistake(operand="v"),),
    ),
    Mistake(
        N_("K transposed in dX K"),
        N_(
            "dQ_i += dX_ij K_j is (B_r, B_c) times (B_c, D): tl.dot(dx_tile, k_tile), without tl.trans (X = Q K^T "
            "needs the transpose, dX K does not)"
        ),
        (_dq_mistake(operand="k^T"),),
    ),
    Mistake(
        N_("the scale missing from dQ"),
        N_("X = scale Q K^T, so dQ = scale dX K: multiply the accumulated dq by scale once, after the loop"),
        (_dq_mistake(scale_power=0),),
    ),
    Mistake(
        N_("the scale applied twice"),
        N_(
            "the scale enters once: dq = dq * scale after the loop, and not again in dq += ... (x_tile already has "
            "its own factor, which dX does not carry)"
        ),
        (_dq_mistake(scale_power=2),),
    ),
    Mistake(
        N_("sqrt(D) instead of 1/sqrt(D)"),
        N_("scale is 1/sqrt(D), the wrapper's D ** -0.5: dq * scale, not dq / scale"),
        (_dq_mistake(scale_power=-1),),
    ),
    Mistake(
        N_("the key tiles' bounds wrong"),
        N_(
            "key tile j starts at key c0 = j * BLOCK_N: for c0 in range(0, M, BLOCK_N), the first tile starting at "
            "key 0 and the last counting even when it is shorter (its keys past M are masked by the loads); not "
            "range(BLOCK_N, ...), not range(0, M - BLOCK_N, ...), not range(0, tl.cdiv(M, BLOCK_N)) (tile numbers, "
            "not keys)"
        ),
        (
            _dq_mistake(starts="whole tiles"),
            _dq_mistake(starts="M - B_c"),
            _dq_mistake(starts="tile index"),
            _dq_mistake(starts="first skipped"),
        ),
    ),
    INPUT_MODIFIED,
)


def _dq_reference(q, k, v, a, lse, grad_a, keep):
    from flashmath.backward import attention_backward

    q, k, v, a, lse, grad_a = (np.asarray(x, np.float64) for x in (q, k, v, a, lse, grad_a))
    return attention_backward(q, k, v, a, lse, grad_a, mask=keep)[0]


def _dq_case(rng, N, M, D, keep=None, q=None, k=None):
    """Float32 inputs ``(q, k, v, a, lse, grad_a, keep)`` and the forward's ``a`` and ``lse`` (float64, rounded)."""
    from flashmath.attention import attention

    q = rng.standard_normal((N, D)) if q is None else q
    k = rng.standard_normal((M, D)) if k is None else k
    q, k, v = (x.astype(np.float32) for x in (q, k, rng.standard_normal((M, D))))
    keep = np.ones((N, M), bool) if keep is None else keep
    a, lse = attention(*(x.astype(np.float64) for x in (q, k, v)), mask=keep, return_lse=True)
    grad_a = rng.standard_normal((N, D)).astype(np.float32)
    return q, k, v, a.astype(np.float32), lse.astype(np.float32), grad_a, keep


def _dq_cases(rng):
    pad = np.ones((20, 40), bool)
    pad[:, 30:] = False
    empty = np.ones((24, 20), bool)
    empty[5] = False
    k_big = rng.standard_normal((24, 8))
    q_big = rng.standard_normal((20, 8))
    # rows 0-3: scores near 98 with key 3 and 97.5 with key 5 (two keys share the row: dY - Delta does not cancel)
    pair = k_big[[3, 5]]
    q_big[:4] = np.linalg.solve(pair @ pair.T, [98.0 * np.sqrt(8), 97.5 * np.sqrt(8)]) @ pair
    return [
        (
            _("N = 20, M = 40, D = 8: two query tiles, three key tiles (the last has 8 keys)"),
            _dq_case(rng, 20, 40, 8),
        ),
        (_("N = M = 16, D = 32: one tile each"), _dq_case(rng, 16, 16, 32)),
        (_("the last 10 of 40 keys are padding (keep False)"), _dq_case(rng, 20, 40, 8, pad)),
        (_("a causal mask, N = M = 40"), _dq_case(rng, 40, 40, 8, np.tril(np.ones((40, 40), bool)))),
        (_("row 5 attends no key (L = -inf)"), _dq_case(rng, 24, 20, 8, empty)),
        (
            _("scores near 100 (exp(X) overflows float32; exp(X - L) does not)"),
            _dq_case(rng, 20, 24, 8, q=q_big, k=k_big),
        ),
    ]


def _dq_properties(rng):
    """The edge cases the prompt states: one query, one key, ``D = 1``; every row fully masked (``dQ`` 0). The
    inputs are float32 tensors (the prompt says so): no float16, NaN or +inf case."""
    return property_cases(
        [
            (_("one element: one query, one key, D = 1"), _dq_case(rng, 1, 1, 1)),
            (_("every row fully masked: dQ is 0"), _dq_case(rng, 3, 5, 4, np.zeros((3, 5), bool))),
        ]
    )


def _dq_hint(exc) -> str | None:
    """What a shape error raised by the learner's kernel probably means."""
    text = str(exc)
    if any(word in text for word in ("dot", "shape", "broadcast", "dimension", "incompatible")):
        return _(
            "two blocks whose shapes do not fit: x_tile, y_tile, dy_tile and dx_tile are (B_r, B_c); k_tile and "
            "v_tile are (B_c, BLOCK_D); dQ_i += tl.dot(dx_tile, k_tile) is (B_r, B_c) times (B_c, BLOCK_D); a row's "
            "lse or delta is (B_r,) and needs [:, None]"
        )
    return None


def _same_dq(a, b) -> bool:
    return same_arrays(a, b, rtol=DQ_RTOL, atol=DQ_RTOL)


@exercise("12.2", DQ_MISTAKES, solution="backward_dq", solutions="flashmath.solutions_triton", property_cases=2)
def check_dq_kernel(fn) -> CheckReport:
    """Check ``fn(q, k, v, a, lse, grad_a, keep) -> dq`` (12.2): float32 PyTorch tensors ``q``, ``a``, ``grad_a``
    ``(N, D)``, ``k``, ``v`` ``(M, D)``, ``lse (N,)`` and a boolean ``keep (N, M)`` (on the GPU where the kernels
    are compiled, on the CPU in Triton's interpreter); ``dq`` a float32 tensor ``(N, D)`` on ``q``'s device, the
    gradient of the loss with respect to ``q`` computed by the learner's Triton kernel, one program per query tile
    of 16 rows, key tiles of 16 keys; the scale is ``1 / sqrt(D)``.

    The property cases first (:func:`_dq_properties`: one element, every row fully masked), then several query and
    key tiles with the last key tile shorter, one tile with ``D = 32``, padded keys, a causal mask, a row with no key
    and scores near 100; the inputs left unchanged and a float32 tensor on ``q``'s device on every case. Named
    mistakes: :data:`DQ_MISTAKES`. Compared to :data:`DQ_RTOL`.
    """
    try:
        import torch
    except ImportError:
        from flashmath.triton_setup import install_hint  # here: importing it tries to import torch

        report = CheckReport("check_dq_kernel")
        report.add(
            "PyTorch",
            False,
            _("this exercise needs PyTorch and Triton (the triton extra): {how}").format(how=install_hint()),
        )
        return report
    from flashmath.triton_setup import interpreted

    device = torch.device("cuda" if torch.cuda.is_available() and not interpreted() else "cpu")

    def call(fn, args):
        # on the CPU the tensors share the memory of the harness's copies, so that a change in place is seen
        tensors = [torch.from_numpy(x).to(device) for x in args]
        out = fn(*tensors)
        if device.type != "cpu":  # copy back what the learner's code left in its inputs, for the harness to compare
            for x, t in zip(args, tensors, strict=True):
                x[...] = t.cpu().numpy()
        if out is None:
            return PropertyFailure(_("returned None: return the tensor dq"))
        if not isinstance(out, torch.Tensor):
            return PropertyFailure(
                _("returned {type}, not a torch tensor: return dq = torch.empty_like(q), filled by the kernel").format(
                    type=type(out).__name__
                )
            )
        values = np.asarray(out.detach().cpu().numpy())
        if out.dtype != torch.float32 or out.device != tensors[0].device:
            return PropertyFailure(
                _(
                    "expected a float32 tensor on {device} (q's device), got {dtype} on {out_device}: "
                    "dq = torch.empty_like(q)"
                ).format(device=tensors[0].device, dtype=out.dtype, out_device=out.device),
                values,
            )
        return values

    def describe(got, expected):
        got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
        if got.shape != expected.shape or got.ndim != 2:
            return (
                _("expected dq = {expected}, got {got}").format(expected=fmt(expected, got), got=fmt(got, expected)),
                got,
                expected,
            )
        with np.errstate(all="ignore"):
            wrong = ~np.isclose(got, expected, rtol=DQ_RTOL, atol=DQ_RTOL).all(axis=1)
        n = int(np.argmax(wrong))  # the first row that differs
        text = _("dq[{n}] (the first row that differs): expected {expected}, got {got}").format(
            n=n, expected=fmt(expected[n], got[n]), got=fmt(got[n], expected[n])
        )
        return text, got[n], expected[n]

    rng = np.random.default_rng(122)
    return check_function(
        "check_dq_kernel",
        fn,
        _dq_cases(rng),
        _dq_reference,
        DQ_MISTAKES,
        n_out=1,
        names=("dq",),
        properties=_dq_properties(np.random.default_rng(1221)),
        compare=_same_dq,
        describe=describe,
        call=call,
        hint=_dq_hint,
        not_answer=Said(_("expected dq, a tensor of shape (N, D)")),
    )
