"""Checker for the exercise of chapter 12 (the backward pass): the tiled backward in numpy, mistakes named.

* :func:`check_backward_tiles` (12.1): ``fn(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv)``, the
  backward with key tiles outside, from the saved logsumexp, against :func:`flashmath.attention_backward`.

The mistake models (:data:`BACKWARD_MISTAKES`) are the classic ones: ``D`` forgotten, ``Y`` not recomputed from the
logsumexp, a transpose wrong, the scale missing from ``dQ`` or ``dK``, ``dQ`` not accumulated across key tiles,
gradients leaking into masked keys.
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
):
    """The tiled backward with one mistake switched on (the defaults are right)."""
    N, D = q.shape
    M = k.shape[0]
    scale = 1 / np.sqrt(D)
    live = keep & ~np.isneginf(lse)[:, None]  # attended pairs; a fully masked row attends none
    d_row = np.sum(grad_a * a, axis=1) if delta else np.zeros(N)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, M, block_k):
        c1 = min(c0 + block_k, M)
        x = scale * q @ k[c0:c1].T  # (N, B_c)
        keep_t = live[:, c0:c1] if mask else np.broadcast_to(~np.isneginf(lse)[:, None], x.shape)
        if y == "lse":
            y_t = np.where(keep_t, np.exp(x - np.where(keep_t, lse[:, None], 0)), 0)
        elif y == "tile softmax":  # the softmax of the tile alone, as if the tile were the whole row
            e = np.where(keep_t, np.exp(x - x.max(axis=1, keepdims=True)), 0)
            y_t = e / np.where(e.sum(axis=1, keepdims=True) > 0, e.sum(axis=1, keepdims=True), 1)
        else:  # exp(X) without the logsumexp: unnormalised
            y_t = np.where(keep_t, np.exp(x), 0)
        dy = grad_a @ v[c0:c1].T
        dx = np.where(keep_t, y_t * (dy - d_row[:, None]), 0)
        dv[c0:c1] = (y_t @ grad_a) if transpose else (y_t.T @ grad_a)
        dk[c0:c1] = (scale if scale_dk else 1) * ((dx @ q) if transpose else (dx.T @ q))
        part = (scale if scale_dq else 1) * (dx @ k[c0:c1])
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
        N_("a transpose wrong"),
        N_("dV_j = Y_ij^T dA_i and dK_j = dX_ij^T Q_i: the key index must come first (shape (B_c, Dv) and (B_c, D))"),
        (_mistake(transpose=True),),
    ),
    Mistake(N_("the scale missing from dQ"), N_("X = scale Q K^T, so dQ = scale dX K"), (_mistake(scale_dq=False),)),
    Mistake(N_("the scale missing from dK"), N_("X = scale Q K^T, so dK = scale dX^T Q"), (_mistake(scale_dk=False),)),
    Mistake(
        N_("dQ not accumulated across key tiles"),
        N_("every key tile adds to dQ: dQ += scale dX_ij K_j, not dQ = (the result was the last key tile's part only)"),
        (_mistake(accumulate_dq=False),),
    ),
    Mistake(
        N_("gradients leaking into masked keys"),
        N_(
            "a masked pair is absent: select Y and dX to 0 where keep is False (np.where), so that a masked key "
            "gets dK = dV = 0"
        ),
        (_mistake(mask=False),),
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


def _properties(rng):
    """The edge cases of the backward (12.1): no queries; one query, one key, D = 1; every row fully masked (every
    gradient 0); a NaN and a +inf in the output gradient (NaN out, never silently 0); integer inputs (float
    gradients out, not integer ones from ``np.zeros_like(q)``)."""
    from flashmath.attention import attention

    nan, inf = _case(rng, 4, 6, 3), _case(rng, 4, 6, 3)
    nan[5][1, 2], inf[5][2, 0] = np.nan, np.inf
    qi, ki, vi = (
        np.array([[1, 0], [0, 2], [1, 1]]),
        np.array([[2, 1], [0, 1], [1, -1], [1, 0]]),
        np.array([[1, 2], [0, -1], [3, 1], [2, 2]]),
    )
    keep = np.ones((3, 4), bool)
    ai, lsei = attention(
        qi.astype(np.float64), ki.astype(np.float64), vi.astype(np.float64), mask=keep, return_lse=True
    )
    return property_cases(
        [
            (
                _("the empty input: no queries (N = 0) give dq of shape (0, D) and zero dk, dv"),
                _case(rng, 0, 5, 3) + (2,),
            ),
            (_("one element: one query, one key, D = 1"), _case(rng, 1, 1, 1) + (1,)),
            (
                _("an all -inf row: every row attends no key (every gradient 0)"),
                _case(rng, 3, 5, 2, np.zeros((3, 5), bool)) + (2,),
            ),
            (_("NaN propagates: a NaN in grad_a gives NaN (never silently 0)"), nan + (4,)),
            (_("+inf: a +inf in grad_a gives inf or NaN, never a finite number"), inf + (4,)),
            (
                _("integer input: integer q, k, v and grad_a give float gradients"),
                (qi, ki, vi, ai, lsei, np.array([[1, 0], [2, 1], [0, -1]]), keep, 2),
            ),
        ]
    )


@exercise("12.1", BACKWARD_MISTAKES, solution="backward_tiles", solutions="flashmath.solutions_triton")
def check_backward_tiles(fn) -> CheckReport:
    """Check ``fn(q, k, v, a, lse, grad_a, keep, block_k) -> (dq, dk, dv)`` (12.1): float64 arrays ``q (N, D)``,
    ``k``, ``v (M, D)``, the forward's ``a (N, D)`` and ``lse (N,)``, ``grad_a (N, D)``, ``keep (N, M)`` boolean
    (True = attend), key tiles of ``block_k``; the scale is ``1 / sqrt(D)``. Cases: several key tiles, the last one
    shorter; one key tile with ``N = M``; padded keys; a fully masked row, after the property cases
    (:func:`_properties`). Named mistakes:
    :data:`BACKWARD_MISTAKES`."""
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
