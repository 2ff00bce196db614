"""Chapter 3: exercise 3.1, attention ``softmax(Q K^T / sqrt(D)) V`` with batch and head dimensions."""

from __future__ import annotations

import math

import numpy as np

from flashmath.exercises._cases import check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import INPUT_MODIFIED, LOWER_PRECISION, CheckReport, Mistake, fmt, pick
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.i18n import joined


def variant(q, k, v, *, scale=lambda D, M, Dv, q: 1 / np.sqrt(D), shift="row", norm=-1, after=1.0):
    """``softmax(Q K^T * scale) V`` in float64, right by default; the keywords give the classic wrong variants.

    Args:
        scale: ``scale(D, M, Dv, q)``, the factor applied to the scores.
        shift: what is subtracted before ``exp``: "row" (each row's max), "column" (the max over the queries),
            "global" (the max of the whole array), "none", or "flat" (``x.max(axis=-1)`` without keepdims).
        norm: the axis of the sum that divides (-1 right, -2 the queries), "all" for the whole array, or "flat"
            (``e.sum(axis=-1)`` without keepdims).
        after: a factor applied to the output.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., N, M)
    x = x * scale(q.shape[-1], k.shape[-2], v.shape[-1], q)
    shifts = {
        "row": lambda: x.max(axis=-1, keepdims=True),
        "column": lambda: x.max(axis=-2, keepdims=True),
        "global": lambda: x.max(),
        "none": lambda: 0.0,
        "flat": lambda: x.max(axis=-1),
    }
    e = np.exp(x - shifts[shift]())
    sums = {
        -1: lambda: e.sum(axis=-1, keepdims=True),
        -2: lambda: e.sum(axis=-2, keepdims=True),
        "all": lambda: e.sum(),
        "flat": lambda: e.sum(axis=-1),
    }
    return np.matmul(e / sums[norm](), v) * after  # (..., N, Dv)


def _v_transposed(q, k, v):
    """``Y V^T``: runs only when V is square (M = Dv)."""
    v = np.asarray(v, dtype=np.float64)
    return variant(q, k, np.swapaxes(v, -1, -2))


def _first_key_skipped(q, k, v):
    """The keys from the second on (a loop over range(1, M))."""
    return variant(np.asarray(q)[..., :, :], np.asarray(k)[..., 1:, :], np.asarray(v)[..., 1:, :])


def _scaled(scale):
    return lambda q, k, v: variant(q, k, v, scale=scale)


def _one_query_cause(q) -> str | None:
    """The softmax over the queries on a case with one query (N = 1): what it turns the output into; other cases
    get the mistake's general fix."""
    if np.ndim(q) < 2 or np.shape(q)[-2] != 1:
        return None
    return _(
        "each row of X (one query, all keys) must sum to 1, so normalise along the last axis (axis=-1). With "
        "one query (N = 1) a softmax over the queries makes every weight 1, and A becomes the sum of the rows "
        "of V"
    )


MISTAKES = (
    Mistake(
        N_("no scale"),
        N_("this is softmax(Q K^T) V: divide the scores by sqrt(D)"),
        (_scaled(lambda D, M, Dv, q: 1.0),),
    ),
    Mistake(
        N_("divided by sqrt(M)"),
        N_(
            "the scores were divided by the square root of the number of keys M: divide by sqrt(D), D = "
            "q.shape[-1] the width of q and k"
        ),
        (_scaled(lambda D, M, Dv, q: 1 / np.sqrt(M)),),
    ),
    Mistake(
        N_("D read from the wrong axis"),
        N_("q.shape[1] is D only for a 2-D q: on (B, H, N, D) input it is H. D is the last axis, q.shape[-1]"),
        (_scaled(lambda D, M, Dv, q: 1 / np.sqrt(np.shape(q)[1]) if np.ndim(q) > 2 else 1 / np.sqrt(D)),),
    ),
    Mistake(
        N_("divided by D"), N_("the scores were divided by D: divide by sqrt(D)"), (_scaled(lambda D, M, Dv, q: 1 / D),)
    ),
    Mistake(
        N_("divided by sqrt(Dv)"),
        N_(
            "the scores were divided by the square root of the width of V: divide by sqrt(D), D = q.shape[-1] the "
            "width of q and k"
        ),
        (_scaled(lambda D, M, Dv, q: 1 / np.sqrt(Dv)),),
    ),
    Mistake(
        N_("the scale from the wrong axis of q"),
        N_("D is the last axis, q.shape[-1]; len(q) and q.shape[0] are the number of queries (or the batch)"),
        (_scaled(lambda D, M, Dv, q: 1 / np.sqrt(q.shape[-2])), _scaled(lambda D, M, Dv, q: 1 / np.sqrt(q.shape[0]))),
    ),
    Mistake(
        N_("D**1/2 (precedence)"),
        N_(
            "x / D**1/2 is (x / D**1) / 2 = x / (2 D): ** binds tighter than /, and / goes left to right. Write "
            "D**0.5, D**(1/2) or math.sqrt(D)"
        ),
        (_scaled(lambda D, M, Dv, q: 1 / (2 * D)),),
    ),
    Mistake(
        N_("math.isqrt (an integer square root)"),
        N_("math.isqrt(D) rounds sqrt(D) down to an integer (isqrt(5) = 2, not 2.236): use math.sqrt(D) or np.sqrt(D)"),
        (_scaled(lambda D, M, Dv, q: 1 / math.isqrt(D)),),
    ),
    Mistake(
        N_("V transposed"),
        N_(
            "A = Y V with V of shape (..., M, Dv), one value row per key: v.T (or swapaxes) pairs the weights with "
            "the columns of V, and runs only when M = Dv"
        ),
        (_v_transposed,),
    ),
    Mistake(
        N_("the first key skipped"),
        N_("every key takes part, m = 0 .. M-1 in code: a loop over range(1, M) (or k[1:]) leaves out key 0"),
        (_first_key_skipped,),
    ),
    Mistake(
        N_("einsum written for 2-D inputs"),
        N_(
            "subscripts such as 'nd,md->nm' name two axes only: for (..., N, D) inputs write "
            "np.einsum('...nd,...md->...nm', q, k) (and '...nm,...mv->...nv' for the values)"
        ),
    ),
    Mistake(
        N_("multiplied by sqrt(D)"),
        N_("the scale went the wrong way: divide the scores by sqrt(D)"),
        (_scaled(lambda D, M, Dv, q: np.sqrt(D)),),
    ),
    Mistake(
        N_("the scale applied to the output"),
        N_(
            "1/sqrt(D) belongs inside the softmax, on the scores: softmax(Q K^T / sqrt(D)) V, not softmax(Q K^T) V "
            "/ sqrt(D)"
        ),
        (lambda q, k, v: variant(q, k, v, scale=lambda D, M, Dv, q: 1.0, after=1 / np.sqrt(q.shape[-1])),),
    ),
    Mistake(
        N_("softmax over the wrong axis (the queries)"),
        N_("each row of X (one query, all keys) must sum to 1, so normalise along the last axis (axis=-1)"),
        (lambda q, k, v: variant(q, k, v, shift="column", norm=-2), lambda q, k, v: variant(q, k, v, norm=-2)),
        cause=lambda q, k, v: _one_query_cause(q),
    ),
    Mistake(
        N_("the max over the wrong axis"),
        N_(
            "subtract each row's own max, x.max(axis=-1, keepdims=True): a max over the queries (axis=-2) "
            "subtracts a different number from each entry of a row, which changes its softmax"
        ),
        (lambda q, k, v: variant(q, k, v, shift="column"),),
    ),
    Mistake(
        N_("keepdims missing"),
        N_(
            "x.max(axis=-1) and e.sum(axis=-1) drop the axis, and broadcasting then lines them up with the "
            "columns: keep it, with keepdims=True (or [..., None])"
        ),
        (
            lambda q, k, v: variant(q, k, v, shift="flat"),
            lambda q, k, v: variant(q, k, v, norm="flat"),
            lambda q, k, v: variant(q, k, v, shift="flat", norm="flat"),
        ),
    ),
    Mistake(
        N_("the global max instead of each row's max"),
        N_(
            "one max for the whole array is far above the scores of some rows: their exp(x - max) all underflow to "
            "0, and 0 / 0 is NaN. Subtract each row's own max, x.max(axis=-1, keepdims=True)"
        ),
        (lambda q, k, v: variant(q, k, v, shift="global"),),
    ),
    Mistake(
        N_("the max not subtracted"),
        N_("exp of a large score overflows to inf and inf / inf is NaN: subtract each row's max before exp"),
        (lambda q, k, v: variant(q, k, v, shift="none"),),
    ),
    Mistake(
        N_("normalised over the whole matrix"),
        N_("divide each row by its own sum, e.sum(axis=-1, keepdims=True), not by the sum of every entry"),
        (lambda q, k, v: variant(q, k, v, norm="all"),),
    ),
    Mistake(
        N_("k.T on a batched array"),
        N_(
            "k.T reverses every axis of a (B, H, M, D) array: transpose only the last two, np.swapaxes(k, -1, -2) "
            "(or k.swapaxes(-1, -2))"
        ),
    ),
    Mistake(N_("the probabilities Y returned"), N_("this has the shape of Y (..., N, M): multiply it by v")),
    INPUT_MODIFIED,
    Mistake(N_("a wrong shape"), N_("A has shape (..., N, Dv): one output row per query")),
    LOWER_PRECISION,
)
K_T, KEEPDIMS, Y_RETURNED, WRONG_SHAPE, EINSUM_2D = pick(
    MISTAKES,
    "k.T on a batched array",
    "keepdims missing",
    "the probabilities Y returned",
    "a wrong shape",
    "einsum written for 2-D inputs",
)


def attention_cases():
    """The cases of exercise 3.1: ``[(name, (q, k, v))]``, each where some classic mistake shows."""
    from flashmath.data import load_heads

    rng = np.random.default_rng(3)
    heads = load_heads()

    def qkv(N, M, D, Dv=None, batch=()):
        Dv = D if Dv is None else Dv
        return tuple(rng.standard_normal(batch + shape) for shape in ((N, D), (M, D), (M, Dv)))

    large = qkv(3, 5, 4)
    large[0][:, 0], large[1][:, 0] = 40.0, 40.0  # every score gets 40 * 40 / sqrt(4) = 800, the spread stays ~1
    levels = qkv(3, 6, 4)
    levels[1][:, 0] = 1.0
    levels[0][0, 0], levels[0][1, 0], levels[0][2, 0] = 2000.0, 0.0, -2000.0  # rows near +1000, 0 and -1000
    return [
        (_("N != M: 5 queries, 7 keys, D = 4"), qkv(5, 7, 4)),
        (_("N = 1: one new token against a KV cache of 9 entries"), qkv(1, 9, 4)),
        (_("D = 1 (the scale is 1)"), qkv(4, 6, 1)),
        (_("values of another width (V is M x 3, D = 4)"), qkv(4, 6, 4, 3)),
        (_("batch and heads, shape (B, H, N, D) = (2, 3, 4, 5)"), qkv(4, 6, 5, batch=(2, 3))),
        (
            _("a real head (layer 0, head 0, N = M = 46, D = 32)"),
            tuple(a[0, 0].astype(np.float64) for a in (heads.q, heads.k, heads.v)),
        ),
        (_("large scores close together (about 800 each): subtract the row max"), large),
        (_("rows at very different levels (scores near +1000, 0 and -1000)"), levels),
        (_("square values (M = Dv = 5, where v.T also runs), D = 5"), qkv(3, 5, 5)),
    ]


def attention_properties():
    """The property cases of exercise 3.1: ``[(name, (q, k, v))]`` (the battery of :mod:`~flashmath.exercises._cases`),
    named with the prompt's words.

    Only what the prompt states: one query and one key of width one, and negative-only input. The edge cases that
    are not chapter 3's subject are not tested here: an all -inf score row (a row with no key, chapter 8 masks keys;
    the package gives it zeros, a plain softmax NaN), +inf, NaN, float16, integer input (``fm.attention`` refuses
    integers) and the empty input; every input is float64.
    """
    rng = np.random.default_rng(30)
    return property_cases(
        [
            (
                _("one query and one key of width one"),
                (np.array([[2.0]]), np.array([[0.5]]), np.array([[-3.0]])),
            ),
            (
                _("negative-only input"),
                tuple(-np.abs(rng.standard_normal(shape)) - 1 for shape in ((3, 2), (4, 2), (4, 3))),
            ),
        ]
    )


def _matmul_error(a, b) -> str | None:
    try:
        np.matmul(a, b)
    except ValueError as exc:
        return str(exc)
    return None


def _batched_matmul_errors(q, k, v) -> dict[str, set[str | None]]:
    """The error texts the two batched shape mistakes raise: ``q @ k.T`` (``k.T`` reverses every axis) and ``Y @ V``
    with V transposed (the scores right, ``v.T`` or ``np.swapaxes(v, -1, -2)``); ``None`` where a product runs."""
    q, k, v = (np.asarray(a) for a in (q, k, v))
    y = np.zeros(np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2]))
    return {"k.T": {_matmul_error(q, k.T)}, "v.T": {_matmul_error(y, v.T), _matmul_error(y, np.swapaxes(v, -1, -2))}}


def _hint(exc, args=()) -> str | None:
    """What an exception of the learner's code probably means; ``args`` are the case's ``(q, k, v)``: the hint on
    ``k.T`` only applies to batched input (more than 2 axes), where ``k.T`` reverses the batch axes too, and only
    when ``q @ k.T`` raises the same error as the learner's code (else ``Y @ v.T`` is named when it does)."""
    text = str(exc)
    if "einstein" in text or "subscripts" in text:
        return _("{name}? {fix}").format(name=_(EINSUM_2D.name), fix=_(EINSUM_2D.fix))
    if "matmul" in text:
        if any(np.ndim(a) > 2 for a in args):
            raised = _batched_matmul_errors(*args)
            if text in raised["k.T"]:
                return _("{name}? {fix}").format(name=_(K_T.name), fix=_(K_T.fix))
            if text in raised["v.T"]:
                return _("V transposed? A = Y V with V (..., M, Dv) as given, not transposed")
        return _(
            "the shapes of the two products? X = Q K^T is q @ np.swapaxes(k, -1, -2) (k.T for 2-D input), (N, D) @ "
            "(D, M); A = Y V is y @ v, (N, M) @ (M, Dv), with V as given, not transposed"
        )
    if "broadcast" in text:
        return _("{name}? {fix}").format(name=_(KEEPDIMS.name), fix=_(KEEPDIMS.fix))
    return None


def _reference(q, k, v):
    with np.errstate(invalid="ignore", over="ignore"):
        return variant(q, k, v)


def _form(out):
    try:
        return np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        return None


SHAPE_TEXT = N_("expected shape {expected} = (..., N, Dv), got {got}")


def _describe(a, expected):
    if a.shape != expected.shape:
        return _(SHAPE_TEXT).format(expected=expected.shape, got=a.shape), a, expected
    nan = np.isnan(a).any() and not np.isnan(expected).any()
    start = int(np.argmax(np.isnan(a).ravel())) if nan else None  # the preview shows the NaN it speaks of
    text = _("expected {expected}, got {got}").format(
        expected=fmt(expected, a, start=start), got=fmt(a, expected, start=start)
    )
    if nan:
        text += _(" (NaN: 0 / 0 or inf / inf? Subtract each row's own max before exp)")
    return text, a, expected


@exercise("3.1", MISTAKES, solution="attention", property_cases=2)
def check_attention(fn) -> CheckReport:
    """Check a learner's ``fn(q, k, v) -> A = softmax(Q K^T / sqrt(D)) V`` for ``q (..., N, D)`` (exercise 3.1).

    The property battery first (:func:`attention_properties`), then :func:`attention_cases`: ``N != M``, ``N = 1``
    (decoding with a KV cache), ``D = 1``, values of another width, batch and head dimensions ``(B, H, N, D)``, a
    real head, large scores close together (the softmax must be safe, and every scale gives a different answer),
    rows at very different levels (each row needs its own max), square values (where ``v.T`` runs). Named
    mistakes: :data:`MISTAKES`.
    """
    report = check_function(
        "check_attention",
        fn,
        attention_cases(),
        _reference,
        MISTAKES,
        n_out=1,
        names=("A",),
        not_answer=WRONG_SHAPE,
        hint=_hint,
        properties=attention_properties(),
        convert=_form,
        describe=_describe,
    )
    cases = dict(attention_properties() + attention_cases())
    for j, (name, ok, message) in enumerate(report.cases):  # the shape of Y: name that mistake
        q, k, v = cases[name]
        y_shape = _reference(q, k, v).shape[:-1] + (np.shape(k)[-2],)
        # the shape message, ours or _cases's (in English), ends with the shape got, before the colon
        shape_text = (_(SHAPE_TEXT).split("{")[0], "expected shape")
        if not ok and message.startswith(shape_text) and message.split(":")[0].endswith(f"{y_shape}"):
            looks_like = joined("", _("looks like {name}: {fix}").split("{")[0])
            report.cases[j] = (name, False, joined(message.split(looks_like)[0], Y_RETURNED.message()))
    return report
