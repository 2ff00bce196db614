"""Checker for the exercise of chapter 12 (the backward pass): the tiled backward in numpy, mistakes named.

* :func:`check_backward_tiles` (12.1): ``fn(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv)``, the
  backward with key tiles outside, from the saved logsumexp, against :func:`flashmath.attention_backward`.

The mistake models (:data:`BACKWARD_MISTAKES`) are the classic ones: ``D`` forgotten, from the wrong arrays, with the
wrong sign or per key tile; ``Y`` not recomputed from the logsumexp, or as ``exp(X) / exp(L)`` (overflows above 709);
NaN on a fully masked row; a transpose wrong; a wrong scale in ``X``, ``dV``, ``dQ`` or ``dK``; ``dQ`` not accumulated
across key tiles; tile bounds one off; the last, shorter tile skipped; gradients leaking into masked keys. Each model
is the whole tiled backward with one switch, so that it gives what a learner's code gives on every case.
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, CheckReport, Mistake
from flashmath.exercises._tiles import inputs_unchanged, shape_hint, shape_mistake
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = ["BACKWARD_MISTAKES", "check_backward_tiles"]


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
    factor of ``X`` (None: 1/sqrt(D)). ``d_from``: the second array of ``D = rowsum(grad_a * ...)``, ``"a"``, ``"q"``
    or ``"one"`` (rowsum(grad_a)), or ``"a alone"`` (rowsum(a)). ``ends``: the tile's end moved by this many keys
    (``-1``: the last key of each tile skipped; ``+1``: one key shared with the next tile). ``partial=False``: the
    last, shorter tile skipped. ``d_from="all"``: D one number, summed over the whole array. ``y="everywhere"``:
    exp(X - L) at every pair, masked or not, nothing selected. ``dx_scaled``: dX multiplied by the scale as well;
    ``dq_power``, ``dk_power``: dQ, dK multiplied by scale ** power (0: no scale, -1: sqrt(D)). ``untouched``: the
    keys and values no row attends read as 0 (a learner's guard against padding that may hold anything).
    ``ends_after_min``: the tile's end moved after the clip to M, ``c1 = min(c0 + block_k, M) - 1``. ``safe_lse``:
    L read as 0 on a fully masked row before exp(X - L) (a guard, then the mask ignored). ``y="masked x"``: X set to
    -inf at the masked pairs, then exp(X - L) unselected (NaN on a fully masked row). ``select_dx``: whether dX is
    selected with the mask (None: where Y is). ``dq_keys_used``: dQ from the keys with those no row attends read as 0.
    ``parens=False``: dX = Y * dY - D, the parentheses missing. ``dq_from_v``: dQ from the values, dX V_j.
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
        N_("D forgotten"),
        N_(
            "the softmax Jacobian gives dX = Y * (dY - D) with D_n = rowsum(dA * A), not Y * dY: subtract each "
            "row's D (computed once, before the key tiles)"
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
        N_("D from the wrong arrays"),
        N_("D_n = rowsum(dA * A): the output's gradient times the forward's output a, row by row"),
        (_mistake(d_from="q"), _mistake(d_from="one"), _mistake(d_from="a alone")),
    ),
    Mistake(
        N_("D summed over the whole array"),
        N_("D is one number per row: D_n = rowsum(dA * A), np.sum(grad_a * a, axis=1), not np.sum(grad_a * a)"),
        (_mistake(d_from="all"),),
    ),
    Mistake(
        N_("D with the wrong sign"),
        N_("dX = Y * (dY - D), D subtracted: the softmax Jacobian is diag(y) - y y^T"),
        (_mistake(d_sign=-1),),
    ),
    Mistake(
        N_("dX = Y * dY - D (the parentheses missing)"),
        N_("D is subtracted from dY before the product: dX = Y * (dY - D), not Y * dY - D"),
        (_mistake(parens=False), _mistake(parens=False, select_dx=False)),
    ),
    Mistake(
        N_("dQ from the values"),
        N_("X = scale Q K^T, so dQ = scale dX K: the keys of the tile, K_j, not its values V_j"),
        (_mistake(dq_from_v=True),),
    ),
    Mistake(
        N_("D computed per key tile"),
        N_(
            "D_n = rowsum(dA * A) is a sum over every key of the row; rowsum(dY * Y) over one key tile is only that "
            "tile's part: compute D once, from dA and A, before the key tiles"
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
            "dX = Y * (dY - D) has no scale: the scale enters once, in dQ = scale dX K and dK = scale dX^T Q (it "
            "comes from X = scale Q K^T)"
        ),
        (_mistake(dx_scaled=True), _mistake(dq_power=2, dk_power=2)),
    ),
    Mistake(
        N_("sqrt(D) instead of 1/sqrt(D)"),
        N_("the scale is 1/sqrt(D), the forward's: dQ = dX K / sqrt(D) and dK = dX^T Q / sqrt(D)"),
        (_mistake(dq_power=-1), _mistake(dk_power=-1), _mistake(dq_power=-1, dk_power=-1)),
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
        report, fn, _("the inputs (q, k, v, a, lse, grad_a, keep) are left unchanged"), cases[3][1], which=range(7)
    )
    return report


"""For each checker of this chapter, the mistakes it names."""
