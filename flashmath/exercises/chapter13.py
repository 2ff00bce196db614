"""Chapter 13 exercises: a window ``mask_mod``, a document ``mask_mod``, softcap and ALiBi ``score_mod``s, a tile
classified, a key gathered from a paged cache, one row of attention with a learnable sink. Each checker names the
classic mistakes of its exercise.

The learner's functions receive index *arrays*, as the package's ``mask_mod`` and ``score_mod`` do
(:mod:`flashmath.variants`): ``q_idx`` of shape ``(N, 1)`` and ``kv_idx`` of shape ``(1, M)``, so one call answers
for the whole grid by broadcasting.

Each checker runs its property cases first (the battery of :mod:`~flashmath.exercises._cases`), only those its prompt
states, in the prompt's words: for the window, one element, ``None`` for an unbounded side and a window wider than the
sequence; for the document mask, one token and ids that are not ``0, 1, 2 ...``; for softcap, one score and
``+-inf`` capped at ``+-cap``; for ALiBi, one score and a masked ``-inf`` kept; for the tile kind, tiles of one
element and numpy integer bounds; for the page gather, pages of one token; for the sink row, one key, an empty row,
an all ``-inf`` row and a sink far above every score. NaN, float16 and integer scores are not
this chapter's subject and are not tested. A raised exception is explained where a learner's numpy slip explains it
(``and`` on arrays, ``math.tanh`` on an array, ``None`` in arithmetic: :func:`_array_hint`).
"""

from __future__ import annotations

import numpy as np

from flashmath.exercises._cases import Said, check_function, property_cases, same_arrays
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import CheckReport, Diagnosis, Mistake
from flashmath.i18n import Filled
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_

__all__ = [
    "check_window_mask",
    "check_document_mask",
    "check_softcap",
    "check_alibi",
    "check_tile_kind",
    "check_page_gather",
    "check_sink_row",
    "EMPTY",
    "PARTIAL",
    "FULL",
]

EMPTY, PARTIAL, FULL = 0, 1, 2

_MASK_NOT_ANSWER = Said(N_("return one boolean array (True = attend), of the shape of q_idx and kv_idx broadcast"))
_SCORES_NOT_ANSWER = Said(N_("return one array of scores, of the shape of the scores given"))


def _grid(N: int, M: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(N)[:, None], np.arange(M)[None, :]


def _array_hint(exc) -> str | None:
    """What an exception of a learner's index-array code probably means (``run``'s ``hint``)."""
    text = str(exc)
    if "truth value of an array" in text:
        return _(
            "and, or, not and if take one truth value, not an array: combine masks element by element with &, | "
            "and ~, each comparison in parentheses: (a <= b) & (c <= d)"
        )
    if "arrays can be converted" in text or "only size-1" in text or "only length-1" in text:
        return _("math.tanh, math.exp and math.fabs take one number: use np.tanh, np.exp and np.abs on arrays")
    if "NoneType" in text:
        return _("left or right is None: no limit on that side, so leave that side's condition out")
    return None


# ------------------------------------------------------------------------------------------------------------------
# 13.1 a sliding-window mask_mod (FlashAttention's window_size, bottom-right aligned)
# ------------------------------------------------------------------------------------------------------------------


def window_reference(q_idx, kv_idx, N, M, left, right):
    from flashmath.masks import sliding_window_mask

    return sliding_window_mask(N, M, left=left, right=right)[q_idx, kv_idx]


def _window_model(offset=lambda N, M: M - N, lo_strict=False, hi_strict=False, swap=False):
    def model(q_idx, kv_idx, N, M, left, right):
        if swap:
            left, right = right, left
        p = q_idx + offset(N, M)
        low = True if left is None else kv_idx > p - left if lo_strict else kv_idx >= p - left
        high = True if right is None else kv_idx < p + right if hi_strict else kv_idx <= p + right
        return np.asarray(low & high)

    return model


def _symmetric_model(extent):
    """One extent on both sides of the aligned key: ``|m - p| <= extent(left, right)``; an extent of ``None`` (no
    limit) keeps every key."""

    def model(q_idx, kv_idx, N, M, left, right):
        e = extent(left, right)
        distance = np.abs(kv_idx - (q_idx + M - N))
        return distance >= 0 if e is None else distance <= e

    return model


def _larger_extent(left, right):
    return None if left is None or right is None else max(left, right)


def _extents_as(read):
    """The right window with each extent first passed through ``read`` (a learner's handling of ``None``)."""

    def model(q_idx, kv_idx, N, M, left, right):
        return _window_model()(q_idx, kv_idx, N, M, read(left), read(right))

    return model


def _window_from_sizes(q_idx, kv_idx, N, M, left, right):
    """The right window, but built on the whole grid ``np.arange(N)``, ``np.arange(M)``: the index arrays ignored."""
    return _window_model()(*_grid(N, M), N, M, left, right)


def _window_counted_from_0(rows: bool, keys: bool):
    """The right window on indices counted from 0 (``np.arange`` of the index arrays' lengths, or a whole grid cut to
    their shape) in place of ``q_idx`` (``rows``) and ``kv_idx`` (``keys``): a tile's offsets lost."""

    def model(q_idx, kv_idx, N, M, left, right):
        q, kv = np.asarray(q_idx), np.asarray(kv_idx)
        q = np.arange(q.size).reshape(q.shape) if rows else q
        kv = np.arange(kv.size).reshape(kv.shape) if keys else kv
        return _window_model()(q, kv, N, M, left, right)

    return model


WINDOW_MISTAKES = (
    # first: its models differ from the right mask on a tile alone, where a run of other mistakes fails more
    Mistake(
        N_("the mask built from N and M instead of q_idx and kv_idx"),
        N_(
            "q_idx and kv_idx may be a tile's part of the grid (rows r0..r1 - 1, keys c0..c1 - 1): compute with them, "
            "p = q_idx + M - N, and return a mask of their broadcast shape, never np.arange(N) and np.arange(M)"
        ),
        (
            _window_from_sizes,
            _window_counted_from_0(True, True),
            _window_counted_from_0(True, False),
            _window_counted_from_0(False, True),
        ),
    ),
    Mistake(
        N_("the top-left alignment when N != M"),
        N_(
            "FlashAttention aligns the window bottom-right: query n sits at key p = n + M - N, and sees keys p - "
            "left .. p + right"
        ),
        (_window_model(offset=lambda N, M: 0),),
    ),
    Mistake(
        N_("the offset N - M instead of M - N"),
        N_("the key aligned with query n is n + M - N (the last query with the last key)"),
        (_window_model(offset=lambda N, M: N - M),),
    ),
    Mistake(
        N_("an edge off by one (a strict < or > where the edge needs <= or >=)"),
        N_("both extents are inclusive: p - left <= m <= p + right, so a window (left, 0) holds left + 1 keys"),
        (_window_model(lo_strict=True), _window_model(hi_strict=True), _window_model(lo_strict=True, hi_strict=True)),
    ),
    Mistake(
        N_("left and right swapped"),
        N_("left is how far back (keys before p), right how far ahead"),
        (_window_model(swap=True),),
    ),
    Mistake(
        N_("the right extent ignored"),
        N_("right is how far ahead query n may look: keys up to p + right, not only up to p"),
        (lambda q, kv, N, M, left, right: _window_model()(q, kv, N, M, left, 0),),
    ),
    Mistake(
        N_("a symmetric window"),
        N_(
            "the two extents differ: query n sees left keys before p and right keys after it, p - left <= m <= p + "
            "right, not |m - p| <= left"
        ),
        (
            _symmetric_model(lambda left, right: left),
            _symmetric_model(lambda left, right: right),
            _symmetric_model(_larger_extent),
        ),
    ),
    Mistake(
        N_("an extent of 0 taken as no limit"),
        N_(
            "0 is a limit (no key on that side), None is none: test `if left is not None:`, not `if left:` (0 is falsy)"
        ),
        (_extents_as(lambda e: e or None),),
    ),
    Mistake(
        N_("None read as 0"),
        N_(
            "None is no limit on that side (every key before, or after, p), not an extent of 0: leave that side's "
            "condition out"
        ),
        (_extents_as(lambda e: 0 if e is None else e),),
    ),
)


@exercise("13.1", WINDOW_MISTAKES, solution="window_mask", property_cases=4)
def check_window_mask(fn) -> CheckReport:
    """Check ``fn(q_idx, kv_idx, N, M, left, right) -> bool`` of the shape of ``q_idx`` and ``kv_idx`` broadcast:
    query ``n`` sees key ``m`` when ``p - left <= m <= p + right`` with ``p = n + M - N``; ``None`` for an extent is
    no limit on that side. The cases: square and rectangular grids, decoding, and a tile's part of the grid (index
    arrays that are not ``0 .. N - 1``); the property cases: one element, ``left = None``, ``right = None``, a window
    wider than the sequence. Named mistakes: :data:`WINDOW_MISTAKES`."""
    cases = [
        (title, (*_grid(N, M), N, M, left, right))
        for title, N, M, left, right in (
            (_("N = M = 6, window (2, 0)"), 6, 6, 2, 0),
            (_("N = M = 6, window (1, 2)"), 6, 6, 1, 2),
            (_("N = 3 < M = 8, window (2, 0)"), 3, 8, 2, 0),
            (_("N = 7 > M = 4, window (1, 1)"), 7, 4, 1, 1),
            (_("decoding: N = 1, M = 9, window (3, 0)"), 1, 9, 3, 0),
        )
    ]
    cases.append(
        (
            _("a tile: q_idx rows 2..4 and kv_idx keys 3..8 of N = 6, M = 9, window (2, 1)"),
            (np.arange(2, 5)[:, None], np.arange(3, 9)[None, :], 6, 9, 2, 1),
        )
    )
    properties = property_cases(
        [
            (title, (*_grid(N, M), N, M, left, right))
            for title, N, M, left, right in (
                (_("one element: N = M = 1, window (0, 0)"), 1, 1, 0, 0),
                (_("left = None: no limit on the left"), 6, 8, None, 1),
                (_("right = None: no limit on the right"), 7, 5, 2, None),
                (_("a window wider than the sequence (every key seen)"), 4, 4, 10, 10),
            )
        ]
    )
    return check_function(
        "check_window_mask",
        fn,
        cases,
        window_reference,
        WINDOW_MISTAKES,
        n_out=1,
        names=(_("the mask"),),
        properties=properties,
        hint=_array_hint,
        not_answer=_MASK_NOT_ANSWER,
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.2 a document mask_mod (packed sequences, causal inside each)
# ------------------------------------------------------------------------------------------------------------------


def document_reference(q_idx, kv_idx, doc):
    from flashmath.variants import document_mask_mod

    same = document_mask_mod(doc)(0, 0, q_idx, kv_idx)
    return same & (kv_idx <= q_idx)


def _document_from_boundaries(side: str):
    """``doc`` taken for ``cu_seqlens``: each token's document found by ``np.searchsorted`` in it."""

    def model(q, kv, doc):
        ids = np.searchsorted(np.asarray(doc), np.arange(len(doc)), side="right" if side == "right" else "left")
        return (ids[q] == ids[kv]) & (kv <= q)

    return model


def _document_start_model(starts):
    """Keys from the first token of the query's document up to the query, that first token found by
    ``starts(doc, q_idx)``, a rule that holds only for ids sorted (or numbered ``0, 1, 2 ...``)."""

    def model(q, kv, doc):
        return (kv >= starts(np.asarray(doc), q)) & (kv <= q)

    return model


def _start_by_searchsorted(doc, q):
    return np.searchsorted(doc, doc[q], side="left")


def _start_by_bincount(doc, q):
    starts = np.concatenate([[0], np.cumsum(np.bincount(doc))])
    return starts[doc[q]]


def _segments_by_counts(numbered: bool):
    """Each token's document rebuilt from the documents' sizes, as if the ids were sorted: ``np.repeat`` of the ids
    0, 1, 2 ... by ``np.bincount(doc)`` (``numbered``), or of ``np.unique(doc)`` by its counts."""

    def model(q, kv, doc):
        doc = np.asarray(doc)
        if numbered:
            counts = np.bincount(doc)
            seg = np.repeat(np.arange(len(counts)), counts)
        else:
            ids, counts = np.unique(doc, return_counts=True)
            seg = np.repeat(ids, counts)
        return (seg[q] == seg[kv]) & (kv <= q)

    return model


DOCUMENT_MISTAKES = (
    Mistake(
        N_("the causal part forgotten"),
        N_("inside a document the mask is still causal: and (&) kv_idx <= q_idx"),
        (lambda q, kv, doc: doc[q] == doc[kv],),
    ),
    Mistake(
        N_("the document part forgotten"),
        N_("a query sees only its own document: and (&) doc[q_idx] == doc[kv_idx]"),
        (lambda q, kv, doc: kv <= q,),
    ),
    Mistake(
        N_("the diagonal excluded (< instead of <=)"),
        N_("a query sees its own key: kv_idx <= q_idx"),
        (lambda q, kv, doc: (doc[q] == doc[kv]) & (kv < q),),
    ),
    Mistake(
        N_("or (|) instead of and (&)"),
        N_("both conditions must hold: (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)"),
        (lambda q, kv, doc: (doc[q] == doc[kv]) | (kv <= q),),
    ),
    Mistake(
        N_("the causal direction reversed"),
        N_("a query sees the keys before it and itself, kv_idx <= q_idx, not the keys after it"),
        (lambda q, kv, doc: (doc[q] == doc[kv]) & (kv >= q), lambda q, kv, doc: (doc[q] == doc[kv]) & (kv > q)),
    ),
    Mistake(
        N_("doc read as cu_seqlens"),
        N_(
            "doc holds the document id of every token (doc[q_idx] == doc[kv_idx]), not the documents' boundaries: "
            "no np.searchsorted is needed"
        ),
        (_document_from_boundaries("right"), _document_from_boundaries("left")),
    ),
    Mistake(
        N_("the documents found as if the ids were sorted"),
        N_(
            "the ids need not be sorted nor numbered 0, 1, 2 ... (np.searchsorted and np.bincount assume so): "
            "compare the ids themselves, doc[q_idx] == doc[kv_idx]"
        ),
        (
            _document_start_model(_start_by_searchsorted),
            _document_start_model(_start_by_bincount),
            _segments_by_counts(True),
            _segments_by_counts(False),
        ),
    ),
    Mistake(
        N_("the keys of earlier documents kept"),
        N_("a query sees its own document only: doc[kv_idx] == doc[q_idx], not <="),
        (
            lambda q, kv, doc: (doc[kv] <= doc[q]) & (kv <= q),
            lambda q, kv, doc: (doc[kv] >= doc[q]) & (kv <= q),
        ),
    ),
)


@exercise("13.2", DOCUMENT_MISTAKES, solution="document_mask", property_cases=2)
def check_document_mask(fn) -> CheckReport:
    """Check ``fn(q_idx, kv_idx, doc) -> bool (N, N)``: same document (``doc[n] == doc[m]``) and causal. The property
    cases: one token, and document ids that are not ``0, 1, 2 ...``. Named mistakes: :data:`DOCUMENT_MISTAKES`."""
    cases = [
        (title, (*_grid(len(doc), len(doc)), np.array(doc)))
        for title, doc in (
            (_("three documents of 3, 2, 3 tokens"), [0, 0, 0, 1, 1, 2, 2, 2]),
            (_("one document (plain causal)"), [0, 0, 0, 0]),
            (_("documents of one token each"), [0, 1, 2, 3]),
        )
    ]
    properties = property_cases(
        [
            (title, (*_grid(len(doc), len(doc)), np.array(doc, dtype=np.int64)))
            for title, doc in (
                (_("one element: one token"), [0]),
                (_("document ids that are not 0, 1, 2 ..."), [7, 7, 3, 3, 3, 12]),
            )
        ]
    )
    return check_function(
        "check_document_mask",
        fn,
        cases,
        document_reference,
        DOCUMENT_MISTAKES,
        n_out=1,
        names=(_("the mask"),),
        properties=properties,
        hint=_array_hint,
        not_answer=_MASK_NOT_ANSWER,
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.3 softcap on the scaled score (Gemma 2; FlashAttention's softcap)
# ------------------------------------------------------------------------------------------------------------------


def softcap_reference(qk, scale, cap):
    return cap * np.tanh(qk * scale / cap)


def _exp_ratio(a, b):
    with np.errstate(over="ignore", invalid="ignore"):
        return a / b


def _softcap_by_exp(tanh):
    """``c tanh(x / c)`` with ``tanh`` written with exponentials (overflow warnings silenced, as a learner's numpy
    warns)."""

    def model(qk, scale, cap):
        with np.errstate(over="ignore", invalid="ignore"):
            return cap * tanh(np.asarray(qk, dtype=float) * scale / cap)

    return model


SOFTCAP_MISTAKES = (
    Mistake(
        N_("the softcap applied before the scale"),
        N_("FlashAttention caps the scaled score: c tanh((q.k * scale) / c), not scale * c tanh(q.k / c)"),
        (lambda qk, scale, cap: scale * cap * np.tanh(qk / cap),),
    ),
    Mistake(
        N_("tanh without the factor c"),
        N_("tanh(x / c) lies in (-1, 1); multiply by c to cap the score at +-c"),
        (lambda qk, scale, cap: np.tanh(qk * scale / cap),),
    ),
    Mistake(
        N_("the scale left out"),
        N_("the score is scaled first: c tanh((q.k * scale) / c), not c tanh(q.k / c)"),
        (lambda qk, scale, cap: cap * np.tanh(qk / cap),),
    ),
    Mistake(
        N_("x not divided by c inside tanh"),
        N_("c tanh(x / c) is x for small x; c tanh(x) is not"),
        (lambda qk, scale, cap: cap * np.tanh(qk * scale),),
    ),
    Mistake(
        N_("the cap as a clip"),
        N_("softcapping is smooth: c tanh(x / c), not np.clip(x, -c, c)"),
        (lambda qk, scale, cap: np.clip(qk * scale, -cap, cap),),
        show_difference=True,  # on the +-inf case only 0.125 against 0.12497 differs, below the printed digits
    ),
    Mistake(
        N_("the score divided by the scale"),
        N_("scale is the factor itself (1/sqrt(D)): multiply, c tanh((q.k * scale) / c), not q.k / scale"),
        (lambda qk, scale, cap: cap * np.tanh(qk / scale / cap),),
    ),
    Mistake(
        N_("tanh written with exponentials"),
        N_(
            "(e^(2y) - 1) / (e^(2y) + 1) is inf / inf = NaN once e^(2y) overflows (a large or infinite score): use "
            "np.tanh, which gives +-1 there"
        ),
        (
            _softcap_by_exp(lambda y: _exp_ratio(np.exp(2 * y) - 1, np.exp(2 * y) + 1)),
            _softcap_by_exp(lambda y: _exp_ratio(np.exp(y) - np.exp(-y), np.exp(y) + np.exp(-y))),
        ),
    ),
    Mistake(
        N_("c inside out: tanh(x c) / c"),
        N_("divide inside and multiply outside: c tanh(x / c), which is x for small x and at most c"),
        (lambda qk, scale, cap: np.tanh(qk * scale * cap) / cap,),
    ),
)


@exercise("13.3", SOFTCAP_MISTAKES, solution="softcap", property_cases=2)
def check_softcap(fn) -> CheckReport:
    """Check ``fn(qk, scale, cap)``: the softcapped scaled score ``cap tanh(qk scale / cap)`` of raw dot products
    ``qk``, an array of any shape. The property cases: one score, and ``+inf``, ``1`` and ``-inf`` (``+cap``,
    ``cap tanh(scale / cap)`` and ``-cap``). Named mistakes: :data:`SOFTCAP_MISTAKES`."""
    qk = np.array([[-40.0, -3.0, 0.0, 0.5, 8.0, 120.0]])
    cases = [
        (_("scale 1/8, cap 5"), (qk, 0.125, 5.0)),
        (_("scale 1, cap 30"), (qk, 1.0, 30.0)),
        (_("scale 1/2, cap 1"), (qk, 0.5, 1.0)),
    ]
    properties = property_cases(
        [
            (_("one element: a single score"), (np.array([[3.0]]), 0.5, 2.0)),
            (
                _("+inf, 1 and -inf give +cap, c tanh(scale / c) and -cap"),
                (np.array([[np.inf, 1.0, -np.inf]]), 0.125, 5.0),
            ),
        ]
    )
    return check_function(
        "check_softcap",
        fn,
        cases,
        softcap_reference,
        SOFTCAP_MISTAKES,
        n_out=1,
        names=(_("the scores"),),
        properties=properties,
        hint=_array_hint,
        not_answer=_SCORES_NOT_ANSWER,
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.4 ALiBi as a score_mod (FlashAttention's alibi_slopes)
# ------------------------------------------------------------------------------------------------------------------


def alibi_reference(score, slope, q_idx, kv_idx, N, M):
    return score - slope * np.abs(q_idx + M - N - kv_idx)


def _alibi_product(factor):
    """The score multiplied by ``factor(|distance|, slope)`` instead of the penalty added."""

    def model(s, slope, q, kv, N, M):
        with np.errstate(invalid="ignore"):
            return s * factor(np.abs(q + M - N - kv), slope)

    return model


def _alibi_counted_from_0(rows: bool, keys: bool):
    """The right bias on indices counted from 0 (``np.arange`` of the index arrays' lengths) in place of ``q_idx``
    (``rows``) and ``kv_idx`` (``keys``): a tile's offsets lost."""

    def model(s, slope, q_idx, kv_idx, N, M):
        q, kv = np.asarray(q_idx), np.asarray(kv_idx)
        q = np.arange(q.size).reshape(q.shape) if rows else q
        kv = np.arange(kv.size).reshape(kv.shape) if keys else kv
        return s - slope * np.abs(q + M - N - kv)

    return model


def _alibi_grid_cut(s, slope, q_idx, kv_idx, N, M):
    """The bias of the whole grid (``np.arange(N)``, ``np.arange(M)``), cut to the shape of the scores given."""
    n, m = _grid(N, M)
    bias = slope * np.abs(n + M - N - m)
    return s - bias[: np.shape(s)[0], : np.shape(s)[1]]


ALIBI_FROM_SIZES = Mistake(
    N_("the bias built from N and M instead of q_idx and kv_idx"),
    N_(
        "score and the index arrays may be a tile's part of the grid (rows r0..r1 - 1, keys c0..c1 - 1): compute "
        "with q_idx and kv_idx, score - slope |q_idx + M - N - kv_idx|, never with np.arange(N) and np.arange(M)"
    ),
    (
        _alibi_grid_cut,
        _alibi_counted_from_0(True, True),
        _alibi_counted_from_0(True, False),
        _alibi_counted_from_0(False, True),
    ),
)

ALIBI_MISTAKES = (
    Mistake(
        N_("ALiBi's sign"),
        N_("the bias is a penalty: score - slope |distance| (farther keys score lower), not +"),
        (lambda s, slope, q, kv, N, M: s + slope * np.abs(q + M - N - kv),),
    ),
    Mistake(
        N_("the top-left alignment when N != M"),
        N_("FlashAttention measures the distance to the bottom-right aligned key: |n + M - N - m|"),
        (lambda s, slope, q, kv, N, M: s - slope * np.abs(q - kv),),
    ),
    Mistake(
        N_("the distance without its absolute value"),
        N_("keys on both sides are penalised: |n + M - N - m|"),
        (
            lambda s, slope, q, kv, N, M: s - slope * (q + M - N - kv),
            lambda s, slope, q, kv, N, M: s - slope * (kv - q - M + N),
        ),
    ),
    Mistake(
        N_("the slope divided instead of multiplied"),
        N_("the bias is slope times the distance"),
        (lambda s, slope, q, kv, N, M: s - np.abs(q + M - N - kv) / slope,),
    ),
    Mistake(
        N_("the slope left out"),
        N_("each head has its own slope: the bias is -slope |n + M - N - m|, not -|n + M - N - m|"),
        (lambda s, slope, q, kv, N, M: s - np.abs(q + M - N - kv),),
    ),
    Mistake(
        N_("the offset N - M instead of M - N"),
        N_("the key aligned with query n is n + M - N (the last query with the last key): |n + M - N - m|"),
        (lambda s, slope, q, kv, N, M: s - slope * np.abs(q + N - M - kv),),
    ),
    Mistake(
        N_("the slope read as an exponent"),
        N_(
            "slope is the head's factor itself (already 2^(-8h/H) for ALiBi's heads): the bias is -slope |n + M - N - "
            "m|, not -2^(-slope) |n + M - N - m|"
        ),
        (lambda s, slope, q, kv, N, M: s - 2.0 ** (-slope) * np.abs(q + M - N - kv),),
    ),
    Mistake(
        N_("the bias multiplied instead of added"),
        N_(
            "ALiBi adds a penalty to the score, score - slope |n + M - N - m|: it does not scale the score (a "
            "negative score would rise, and -inf times 0 is NaN)"
        ),
        (
            _alibi_product(lambda d, slope: 1 - slope * d),
            _alibi_product(lambda d, slope: slope * d),
            _alibi_product(lambda d, slope: np.exp(-slope * d)),
        ),
    ),
    ALIBI_FROM_SIZES,
)


def _alibi_hint(exc, args) -> str | None:
    """A broadcast error on the tile case (scores and index arrays that are not the whole grid): the bias was built
    on the whole grid, from N and M (review rev-j-13-7)."""
    score, _slope, _q, _kv, N, M = args
    if "could not be broadcast" in str(exc) and np.shape(score) != (N, M):
        return ALIBI_FROM_SIZES.message()
    return _array_hint(exc)


@exercise("13.4", ALIBI_MISTAKES, solution="alibi", property_cases=2)
def check_alibi(fn) -> CheckReport:
    """Check ``fn(score, slope, q_idx, kv_idx, N, M)``: ``score - slope |q_idx + M - N - kv_idx|``, on the whole
    grid and on a tile's part of it (index arrays that are not ``0 .. N - 1``). The property cases: one score, and a
    masked ``-inf`` kept. Named mistakes: :data:`ALIBI_MISTAKES`."""
    rng = np.random.default_rng(13)
    cases = []
    for title, N, M, slope in (
        (_("N = M = 5, slope 1/2"), 5, 5, 0.5),
        (_("N = 2 < M = 6, slope 1/4"), 2, 6, 0.25),
        (_("N = 6 > M = 3, slope 1/8"), 6, 3, 0.125),
        (_("decoding: N = 1, M = 7"), 1, 7, 0.5),
    ):
        cases.append((title, (rng.standard_normal((N, M)), slope, *_grid(N, M), N, M)))
    scores = rng.standard_normal((3, 3))  # N = M: a top-left-aligned bias is right here, its -inf handling alone tested
    # review rev-j-13-7: a tile's part of the grid, as 13.1 has, so that a bias built from np.arange(N) fails
    cases.append(
        (
            _("a tile: q_idx rows 1..3 and kv_idx keys 2..5 of N = 5, M = 7"),
            (rng.standard_normal((3, 4)), 0.25, np.arange(1, 4)[:, None], np.arange(2, 6)[None, :], 5, 7),
        )
    )
    properties = property_cases(
        [
            (title, (score, slope, *_grid(*score.shape), *score.shape))
            for title, score, slope in (
                (_("one element: N = M = 1"), np.array([[0.7]]), 0.5),
                (_("an all -inf row (masked) stays -inf"), np.where(np.arange(3)[:, None] == 1, -np.inf, scores), 0.5),
            )
        ]
    )
    return check_function(
        "check_alibi",
        fn,
        cases,
        alibi_reference,
        ALIBI_MISTAKES,
        n_out=1,
        names=(_("the scores"),),
        properties=properties,
        hint=_alibi_hint,
        not_answer=_SCORES_NOT_ANSWER,
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.5 classify a tile of the causal mask
# ------------------------------------------------------------------------------------------------------------------


def tile_kind_reference(r0, r1, c0, c1, N, M):
    from flashmath.variants import make_variant

    keep = make_variant(N, M, (), causal=True).tile_keep(r0, r1, c0, c1)
    return EMPTY if keep is False else FULL if keep is None else PARTIAL


def _kind_model(seen):
    """A classifier from ``seen(n, m, N, M) -> bool`` looking only at the tile's corners (a wrong rule)."""

    def model(r0, r1, c0, c1, N, M):
        corners = [seen(n, m, N, M) for n in (r0, r1 - 1) for m in (c0, c1 - 1)]
        return EMPTY if not any(corners) else FULL if all(corners) else PARTIAL

    return model


def _inclusive_end_model(rows: bool, keys: bool):
    """The right corners, but the tile's ends ``r1``, ``c1`` read as inclusive (they are one past the tile)."""

    def model(r0, r1, c0, c1, N, M):
        last_row, last_key = (r1 if rows else r1 - 1), (c1 if keys else c1 - 1)
        if c0 > last_row + M - N:
            return EMPTY
        return FULL if last_key <= r0 + M - N else PARTIAL

    return model


def _corner_model(which):
    """Partial tiles called full (or empty) by looking at one corner only."""

    def model(r0, r1, c0, c1, N, M):
        n, m = which(r0, r1, c0, c1)
        return FULL if m <= n + M - N else EMPTY

    return model


def _swapped_codes(r0, r1, c0, c1, N, M):
    """The right kind with the codes of empty and full exchanged (2 for empty, 0 for full)."""
    return {EMPTY: FULL, PARTIAL: PARTIAL, FULL: EMPTY}[tile_kind_reference(r0, r1, c0, c1, N, M)]


def _codes_exchanged(a: int, b: int):
    """The right kind with the codes ``a`` and ``b`` exchanged."""

    def model(r0, r1, c0, c1, N, M):
        kind = tile_kind_reference(r0, r1, c0, c1, N, M)
        return b if kind == a else a if kind == b else kind

    return model


def _empty_from_top_left(r0, r1, c0, c1, N, M):
    """Full from the top-right corner, but empty whenever the top-left corner (the first row, the first key) is not
    seen."""
    if c0 > r0 + M - N:
        return EMPTY
    return FULL if c1 - 1 <= r0 + M - N else PARTIAL


def _offset_swapped_kind(r0, r1, c0, c1, N, M):
    """The right rule with the offset's sign swapped: query n aligned with key n + N - M."""
    offset = N - M
    if c0 > r1 - 1 + offset:
        return EMPTY
    return FULL if c1 - 1 <= r0 + offset else PARTIAL


def _reversed_kind(r0, r1, c0, c1, N, M):
    """The kinds of the reversed mask, where query n sees the keys m >= n + M - N."""
    offset = M - N
    if (c1 - 1) < r0 + offset:
        return EMPTY
    return FULL if c0 >= (r1 - 1) + offset else PARTIAL


TILE_KIND_MISTAKES = (
    Mistake(
        N_("a partial tile called full"),
        N_(
            "a tile is full only when its top-right corner (the first row, the last key) is seen: c1 - 1 <= r0 + M "
            "- N; when only the bottom-left one is, it is partial"
        ),
        (_corner_model(lambda r0, r1, c0, c1: (r1 - 1, c0)),),
    ),
    # before the next: where this model is wrong, the next one's is wrong the same way
    Mistake(
        N_("a tile called empty from its top-left corner alone"),
        N_(
            "the top-left corner (the first row, the first key) can be masked while a later row of the tile sees "
            "that key: a tile is empty only when its bottom-left corner is masked, c0 > r1 - 1 + M - N"
        ),
        (_empty_from_top_left,),
    ),
    Mistake(
        N_("a partial tile called empty"),
        N_(
            "a tile is empty only when even its bottom-left corner (the last row, the first key) is not seen: c0 > "
            "r1 - 1 + M - N"
        ),
        (_corner_model(lambda r0, r1, c0, c1: (r0, c1 - 1)),),
    ),
    Mistake(
        N_("the top-left alignment when N != M"),
        N_("query n sees keys m <= n + M - N (bottom-right)"),
        (_kind_model(lambda n, m, N, M: m <= n),),
    ),
    Mistake(
        N_("the offset N - M instead of M - N"),
        N_("the key aligned with query n is n + M - N (the last query with the last key): query n sees m <= n + M - N"),
        (_offset_swapped_kind,),
    ),
    Mistake(
        N_("the diagonal excluded (< instead of <=)"),
        N_("query n sees its aligned key: m <= n + M - N"),
        (_kind_model(lambda n, m, N, M: m < n + M - N),),
    ),
    Mistake(
        N_("the tile's end read as inclusive (r1 for r1 - 1)"),
        N_("a tile [r0, r1) x [c0, c1) ends one before r1 and c1: its last row is r1 - 1 and its last key c1 - 1"),
        (_inclusive_end_model(True, True), _inclusive_end_model(True, False), _inclusive_end_model(False, True)),
    ),
    Mistake(
        N_("the codes of empty and full swapped"),
        N_("0 is empty (skipped), 1 partial, 2 full (no mask work): EMPTY, PARTIAL, FULL = 0, 1, 2"),
        (_swapped_codes,),
    ),
    Mistake(
        N_("the codes of partial and full swapped"),
        N_("0 is empty (skipped), 1 partial (masked), 2 full (no mask work): EMPTY, PARTIAL, FULL = 0, 1, 2"),
        (_codes_exchanged(PARTIAL, FULL),),
    ),
    Mistake(
        N_("the causal direction reversed"),
        N_("query n sees the keys m <= n + M - N, before its aligned key, not the keys after it"),
        (_reversed_kind,),
    ),
)


SAME_KIND_EVERYWHERE = N_(
    "your function returns {kind} for every tile: the kind depends on where the tile lies relative to the diagonal (0 "
    "empty, 1 partial, 2 full)"
)


class _TileKindDiagnosis(Diagnosis):
    """:class:`Diagnosis` over :data:`TILE_KIND_MISTAKES`, except for an answer that returns one kind for every tile
    (review zhrev-ah 13-3): every such answer is explained by two of the mistakes together (``return 1`` by the
    inclusive end where the right kind is 0 and by the swapped partial/full codes where it is 2), and neither says
    what the code does, so the report says that instead."""

    def __init__(self, cases, answers, mistakes, same):
        super().__init__(cases, answers, mistakes, same)
        kinds = {float(np.asarray(a).ravel()[0]) for a in answers if a is not None and np.asarray(a).size == 1}
        answered = [a for a in answers if a is not None]
        # one kind on every answered case (at least two, so that "every tile" is more than one)
        self.constant = kinds.pop() if len(kinds) == 1 and len(answered) > 1 else None

    def explaining(self, failing) -> Mistake | None:
        if self.constant is not None and list(failing):
            kind = int(self.constant) if self.constant.is_integer() else self.constant
            return Said(_(SAME_KIND_EVERYWHERE).format(kind=kind))
        return super().explaining(failing)

    def covering(self, failing) -> dict[int, Mistake]:
        return {} if self.constant is not None else super().covering(failing)


@exercise("13.5", TILE_KIND_MISTAKES, solution="tile_kind")
def check_tile_kind(fn) -> CheckReport:
    """Check ``fn(r0, r1, c0, c1, N, M) -> 0 | 1 | 2`` (EMPTY, PARTIAL, FULL) for tile ``[r0, r1) x [c0, c1)`` of
    the bottom-right causal mask. The property cases: tiles of one element or one row, and numpy integer bounds.
    Named mistakes: :data:`TILE_KIND_MISTAKES`; an answer that gives one kind for every tile is told so
    (:data:`SAME_KIND_EVERYWHERE`), with no mistake named; an answer that is not a number (``"empty"``) is told to
    return 0, 1 or 2."""
    cases = [
        (
            _("tile rows {r0}:{r1}, keys {c0}:{c1} of N = {N}, M = {M}").format(r0=r0, r1=r1, c0=c0, c1=c1, N=N, M=M),
            (r0, r1, c0, c1, N, M),
        )
        for r0, r1, c0, c1, N, M in (
            (0, 4, 0, 4, 8, 8),
            (4, 8, 0, 4, 8, 8),
            (0, 4, 4, 8, 8, 8),
            (0, 4, 8, 12, 4, 12),
            (0, 4, 4, 8, 4, 12),
            (4, 8, 0, 4, 8, 4),
            (0, 4, 0, 4, 8, 4),
            (0, 3, 0, 3, 8, 8),
            (6, 8, 0, 4, 8, 8),
            (4, 8, 1, 5, 8, 8),
            (0, 4, 2, 6, 8, 8),
        )
    ] + [
        # review rev10-e: the first key on the last row's aligned diagonal, so that c0 >= r1 - 1 + M - N (empty)
        # fails on a real tile, not only on the 1 x 1 property
        (
            _(
                "a tile whose first key is its last row's aligned key: rows 0:4, keys 3:7 of N = M = 8 (partial, one "
                "pair kept)"
            ),
            (0, 4, 3, 7, 8, 8),
        )
    ]
    properties = property_cases(
        [
            (_("one element: a 1 x 1 tile on the diagonal (full)"), (3, 4, 3, 4, 8, 8)),
            (_("one element: a 1 x 1 tile above the diagonal (empty)"), (3, 4, 4, 5, 8, 8)),
            (_("one element: a tile of one row crossing the diagonal (partial)"), (3, 4, 0, 8, 8, 8)),
            (_("integer input: numpy integer bounds"), tuple(np.int64(i) for i in (4, 8, 1, 5, 8, 8))),
        ]
    )
    return check_function(
        "check_tile_kind",
        fn,
        cases,
        tile_kind_reference,
        TILE_KIND_MISTAKES,
        n_out=1,
        names=(_("the kind"),),
        properties=properties,
        hint=_array_hint,
        diagnosis=lambda args, answers: _TileKindDiagnosis(args, answers, TILE_KIND_MISTAKES, same_arrays),
        not_answer=Mistake(
            N_("a word for the kind"),
            N_("return the number 0 (empty), 1 (partial) or 2 (full), not a word such as 'empty'"),
        ),
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.6 gather a key through a block table
# ------------------------------------------------------------------------------------------------------------------


def page_reference(pages, block_table, b, t):
    page_size = pages.shape[1]
    return pages[block_table[b, t // page_size], t % page_size]


PAGE_MISTAKES = (
    Mistake(
        N_("the block table ignored"),
        N_(
            "logical page j of sequence b is physical page block_table[b, j]: pages[block_table[b, t // "
            "page_size], t % page_size]"
        ),
        (lambda pages, table, b, t: pages[t // pages.shape[1], t % pages.shape[1]],),
    ),
    Mistake(
        N_("the token index used as a page index"),
        N_(
            "the block table lists pages, not tokens: look up block_table[b, t // page_size], then take row t % "
            "page_size of that page"
        ),
        (
            lambda pages, table, b, t: pages[table[b, t % table.shape[1]], t % pages.shape[1]],
            lambda pages, table, b, t: pages[table[b, t // pages.shape[1]], t // pages.shape[1]],
        ),
    ),
    Mistake(
        N_("the row inside the page taken as t"),
        N_("inside its page the token is row t % page_size"),
        (lambda pages, table, b, t: pages[table[b, t // pages.shape[1]], min(t, pages.shape[1] - 1)],),
    ),
    Mistake(
        N_("the sequence's row of the table not used"),
        N_("row b of the block table belongs to sequence b"),
        (lambda pages, table, b, t: pages[table[0, t // pages.shape[1]], t % pages.shape[1]],),
    ),
    Mistake(
        N_("the block table's axes swapped"),
        N_(
            "block_table is (B, max_pages): sequence b's pages are row b, so its logical page j is block_table[b, "
            "j], not block_table[j, b]"
        ),
        (lambda pages, table, b, t: pages[table[t // pages.shape[1], b], t % pages.shape[1]],),
    ),
    Mistake(
        N_("the page size read from the wrong axis"),
        N_(
            "pages is (P, page_size, D): page_size = pages.shape[1], not shape[0] (the number of pages) nor "
            "shape[2] (D)"
        ),
        (
            lambda pages, table, b, t: pages[table[b, t // pages.shape[0]], t % pages.shape[0]],
            lambda pages, table, b, t: pages[table[b, t // pages.shape[2]], t % pages.shape[2]],
        ),
    ),
    Mistake(
        Filled(N_("{floor} and {mod} swapped"), floor="//", mod="%"),
        N_("the page is t // page_size (which page) and the row inside it t % page_size"),
        (lambda pages, table, b, t: pages[table[b, t % pages.shape[1]], t // pages.shape[1]],),
    ),
    Mistake(
        N_("the tokens counted from 1"),
        N_("token t counts from 0: it is row t % page_size of logical page t // page_size, not (t - 1)"),
        (lambda pages, table, b, t: pages[table[b, (t - 1) // pages.shape[1]], (t - 1) % pages.shape[1]],),
    ),
)


def _page_hint(exc) -> str | None:
    if isinstance(exc, IndexError):
        return _(
            "an index past the end of an axis: pages is (P, page_size, D) and block_table (B, max_pages); token "
            "t of sequence b is row t % page_size of page block_table[b, t // page_size]"
        )
    return None


@exercise("13.6", PAGE_MISTAKES, solution="page_gather", property_cases=1)
def check_page_gather(fn) -> CheckReport:
    """Check ``fn(pages, block_table, b, t) -> (D,)``: token ``t`` of sequence ``b`` from pages ``(P, page_size,
    D)`` through ``block_table (B, max_pages)``. The property case: pages of one token. Named mistakes:
    :data:`PAGE_MISTAKES`."""
    rng = np.random.default_rng(7)
    pages = rng.standard_normal((9, 4, 3))  # 9 physical pages of 4 tokens, D = 3
    table = np.array([[5, 2, 7], [0, 8, 3]])
    cases = [
        (_("sequence {b}, token {t}").format(b=b, t=t), (pages, table, b, t))
        for b, t in ((0, 0), (0, 6), (1, 9), (1, 3), (0, 11), (1, 4))
    ]
    properties = property_cases(
        [
            (
                _("one element: pages of one token, D = 1"),
                (rng.standard_normal((5, 1, 1)), np.array([[3, 1, 4]]), 0, 2),
            ),
        ]
    )
    return check_function(
        "check_page_gather",
        fn,
        cases,
        page_reference,
        PAGE_MISTAKES,
        n_out=1,
        names=(_("the gathered vector"),),
        properties=properties,
        hint=_page_hint,
    )


# ------------------------------------------------------------------------------------------------------------------
# 13.7 one row of attention with a learnable sink: chapter 2's loop started at the sink
# ------------------------------------------------------------------------------------------------------------------


def sink_row_reference(x, v, sink):
    """``(a, L)`` for one query row with a learnable sink, by the package's GPT-OSS formula
    (:func:`flashmath.attention.attention` with ``learnable_sink``): scores ``x`` as the dot products of a query
    with the rows of an identity (a masked key, ``-inf``, through the mask)."""
    from flashmath.attention import attention

    x = np.asarray(x, dtype=np.float64)
    M = x.shape[0]
    keep = x > -np.inf
    q = np.zeros((1, max(M, 1)))  # (1, D), D >= 1 even without a key
    q[0, :M] = np.where(keep, x, 0.0)
    a, lse = attention(q, np.eye(M, q.shape[1]), v, scale=1.0, mask=keep[None, :], learnable_sink=sink, return_lse=True)
    return a[0], lse[0]


def _sink_loop(g0, s0, acc0, *, after=False, guard=True, finish_guard=False):
    """A learner's loop over one row: chapter 2's update of ``(g, s, acc)`` from the state ``(g0, s0(sink),
    acc0(sink, Dv))``; ``after`` adds ``exp(sink - g)`` to ``s`` once the keys are done (``"both"``: to every
    component of ``acc`` too); ``guard`` skips keys while the max is still -inf; ``finish_guard`` gives 0 where
    ``s = 0``."""

    def model(x, v, sink):
        with np.errstate(all="ignore"):
            g, s = float(g0(sink)), float(s0(sink))
            acc = np.array(acc0(sink, v.shape[1]), dtype=np.float64)
            for x_m, v_m in zip(np.asarray(x, dtype=np.float64), v, strict=True):
                g_new = max(g, x_m)
                if guard and g_new == -np.inf:
                    continue
                alpha, p = np.exp(g - g_new), np.exp(x_m - g_new)
                s, acc, g = s * alpha + p, acc * alpha + p * v_m, g_new
            if after:
                term = np.exp(sink - g)
                s = s + term
                if after == "both":
                    acc = acc + term
            a = np.zeros_like(acc) if finish_guard and s == 0 else acc / s
            return a, g + np.log(s)

    return model


def _nan_if_empty(nan_output: bool, nan_lse: bool):
    """The right row, but NaN (output, logsumexp or both) for a row with no key or every key masked."""

    def model(x, v, sink):
        a, lse = sink_row_reference(x, v, sink)
        if np.any(np.asarray(x) > -np.inf):
            return a, lse
        return (np.full_like(a, np.nan) if nan_output else a), (np.nan if nan_lse else lse)

    return model


def _zeros(sink, Dv):
    return np.zeros(Dv)


def _sink_valued(value):
    """The right row, but the sink given a value ``value(v)`` in the numerator: ``a + P_sink value(v)``, with
    ``P_sink = exp(sink - L)`` (the mistake a review bot asked for in sgl-kernel-npu PR #216)."""

    def model(x, v, sink):
        a, lse = sink_row_reference(x, v, sink)
        return a + np.exp(sink - lse) * value(np.asarray(v, dtype=np.float64)), lse

    return model


def _lse_of_the_keys(empty, masked):
    """The right output, but the logsumexp of the keys alone, ``log(sum_m e^x_m)``: ``empty`` for a row with no key
    and ``masked`` for a row whose keys are all masked (-inf, or NaN where ``x - max(x)`` was ``-inf - (-inf)``)."""

    def model(x, v, sink):
        a, _ = sink_row_reference(x, v, sink)
        x = np.asarray(x, dtype=np.float64)
        if x.size == 0:
            return a, empty
        return a, (np.logaddexp.reduce(x) if np.any(x > -np.inf) else masked)

    return model


SINK_MISTAKES = (
    # first: the models of the others that give NaN for a row with no key fail other cases too
    Mistake(
        N_("NaN for a row with no key"),
        N_(
            "a row with no key, or every key masked, still sees its sink: its state stays (sink, 1, 0), so the "
            "output is 0 / 1 = 0 and the logsumexp sink + log(1) = sink"
        ),
        (_nan_if_empty(True, True), _nan_if_empty(False, True), _nan_if_empty(True, False)),
    ),
    Mistake(
        N_("the sink lost: attention without it"),
        N_("the sink is a score already seen: start the state at (g, s, acc) = (sink, 1, 0)"),
        (
            _sink_loop(lambda sink: -np.inf, lambda sink: 1.0, _zeros),
            _sink_loop(lambda sink: -np.inf, lambda sink: 0.0, _zeros),
            _sink_loop(lambda sink: -np.inf, lambda sink: 0.0, _zeros, finish_guard=True),
        ),
    ),
    Mistake(
        N_("the sink's own term left out of s"),
        N_(
            "the sink counts once in the denominator: s starts at exp(sink - sink) = 1, not 0 (with s = 0 the sink "
            "only moves the reference point, and a row with no key divides 0 by 0)"
        ),
        (_sink_loop(lambda sink: sink, lambda sink: 0.0, _zeros),),
    ),
    Mistake(
        N_("the sink added to the numerator too"),
        N_(
            "a sink has no value: it adds exp(sink - g) to the denominator s only, and the accumulator starts at 0 "
            "(GPT-OSS drops the sink's column before multiplying by V)"
        ),
        (
            _sink_loop(lambda sink: sink, lambda sink: 1.0, lambda sink, Dv: np.ones(Dv)),
            _sink_loop(lambda sink: -np.inf, lambda sink: 0.0, _zeros, after="both"),
            # review rev-j-13-8: the sink given a value row, the mean of the values or the first or last of them
            _sink_valued(lambda v: v.mean(axis=0)),
            _sink_valued(lambda v: v[0]),
            _sink_valued(lambda v: v[-1]),
        ),
    ),
    # before the next: its models fail this one's case the same way, and more
    Mistake(
        N_("the sink left out of the max"),
        N_(
            "the sink is the first score of the row, so the running max starts at it: g = sink, s = exp(sink - sink) "
            "= 1. Measured against 0 instead, exp(sink - 0) overflows to inf for a sink far above every score"
        ),
        (_sink_loop(lambda sink: 0.0, lambda sink: np.exp(sink), _zeros),),
    ),
    Mistake(
        N_("the sink added after the loop, outside the max and the rescaling"),
        N_(
            "the sink must take part in the running max and in every rescale: start from (g, s) = (sink, 1). Added "
            "at the end as exp(sink - g), it overflows to inf for a sink far above every score, and, where no guard "
            "catches it, a row with no key gives g = -inf and L = -inf + inf = NaN: the two failures that "
            "flash-attention PR #2752's review measured"
        ),
        (
            _sink_loop(lambda sink: -np.inf, lambda sink: 0.0, _zeros, after=True),
            _sink_loop(lambda sink: -np.inf, lambda sink: 0.0, _zeros, after=True, guard=False),
        ),
    ),
    # review rev-j-13-8: the output right, the logsumexp of the keys alone
    Mistake(
        N_("the logsumexp without the sink"),
        N_(
            "L includes the sink: L = log(e^sink + sum_m e^x_m), that is g + log(s) of the state started at the sink "
            "(a row with no key has L = sink), not the logsumexp of the keys alone"
        ),
        (_lse_of_the_keys(-np.inf, -np.inf), _lse_of_the_keys(-np.inf, np.nan), _lse_of_the_keys(np.nan, np.nan)),
    ),
)


def _sink_hint(exc) -> str | None:
    text = str(exc)
    if "zero-size" in text or "empty" in text:
        return _(
            "an empty row has no max of its own: start from the state (g, s, acc) = (sink, 1, 0), which is already "
            "the state of a row with no key, and update it key by key"
        )
    return _array_hint(exc)


def _sink_case(x, sink, Dv=2, seed=0):
    x = np.asarray(x, dtype=np.float64)
    v = np.random.default_rng(seed).standard_normal((x.shape[0], Dv))
    return x, v, float(sink)


@exercise("13.7", SINK_MISTAKES, solution="sink_row", property_cases=4)
def check_sink_row(fn) -> CheckReport:
    """Check ``fn(x, v, sink) -> (a, L)``: one query row of attention with a learnable sink, the scores ``x (M,)``
    (``-inf`` for a masked key, ``M = 0`` allowed), the values ``v (M, Dv)`` and the sink logit (a finite float);
    ``a (Dv,)`` the output and ``L`` the logsumexp over the keys and the sink. The property cases: one key, an empty
    row, an all ``-inf`` row, a sink far above every score (1000, where ``exp(sink)`` overflows float64). Named
    mistakes: :data:`SINK_MISTAKES`."""
    cases = [
        (_("a sink below every score"), _sink_case([1.0, 2.0, 0.5], -1.0, seed=1)),
        (_("a sink between the scores"), _sink_case([-1.0, 3.0, 0.0, 1.5], 1.0, seed=2)),
        (_("a sink above every score"), _sink_case([0.0, 0.5, -1.0], 2.5, Dv=3, seed=3)),
        (_("a max that grows along the row"), _sink_case([-2.0, 0.0, 1.0, 4.0], 0.5, seed=4)),
        (_("a masked key first, [-inf, 1, 2]"), _sink_case([-np.inf, 1.0, 2.0], 0.0, seed=5)),
    ]
    properties = property_cases(
        [
            (_("one element: one key"), _sink_case([0.7], 0.3, seed=6)),
            (_("an empty row (no key): output 0, logsumexp = the sink"), _sink_case([], 0.5, seed=7)),
            (
                _("an all -inf row (every key masked): output 0, logsumexp = the sink"),
                _sink_case([-np.inf, -np.inf], -0.5, seed=8),
            ),
            (_("a sink far above every score (sink = 1000)"), _sink_case([0.0, 0.5, -1.0], 1000.0, seed=9)),
        ]
    )
    return check_function(
        "check_sink_row",
        fn,
        cases,
        sink_row_reference,
        SINK_MISTAKES,
        n_out=2,
        names=(_("the output a"), _("the logsumexp L")),
        properties=properties,
        hint=_sink_hint,
        not_answer=Said(N_("return two things: the output row a (Dv,) and the logsumexp L")),
    )
