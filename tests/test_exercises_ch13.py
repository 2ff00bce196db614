"""Chapter 13's checkers: the solution passes, and each classic mistake, written as a learner would, is caught and
named."""

import math

import numpy as np
import pytest
from helpers import assert_prediction_feedback, checker_tests, prediction_cell

import flashmath as fm
from flashmath import exercises, solutions
from flashmath.exercises._report import SAME_AS_ABOVE
from flashmath.variants import document_mask_mod, make_variant


def window_on_the_whole_grid(N, M, left, right):
    # "q_idx is just np.arange(N)": the grid rebuilt from the sizes
    n, m = np.arange(N).reshape(-1, 1), np.arange(M).reshape(1, -1)
    keep = np.ones((N, M), dtype=bool)
    if left is not None:
        keep &= m >= n + M - N - left
    if right is not None:
        keep &= m <= n + M - N + right
    return keep


def window_if_truthy(q, kv, N, M, left, right):
    # "if left:" meant "if left is given"
    p = q + M - N
    keep = np.ones(np.broadcast_shapes(np.shape(q), np.shape(kv)), dtype=bool)
    if left:
        keep = keep & (kv >= p - left)
    if right:
        keep = keep & (kv <= p + right)
    return keep


def window_none_as_zero(q, kv, N, M, left, right):
    left = left or 0
    right = right or 0
    return (kv >= q + M - N - left) & (kv <= q + M - N + right)


WINDOW = {
    "the top-left alignment when N != M": lambda q, kv, N, M, left, right: (kv >= q - left) & (kv <= q + right),
    "the offset N - M instead of M - N": lambda q, kv, N, M, left, right: (
        (kv >= q + N - M - left) & (kv <= q + N - M + right)
    ),
    "an edge off by one (a strict < or > where the edge needs <= or >=)": lambda q, kv, N, M, left, right: (
        (kv > q + M - N - left) & (kv <= q + M - N + right)
    ),
    "left and right swapped": lambda q, kv, N, M, left, right: (kv >= q + M - N - right) & (kv <= q + M - N + left),
    "the right extent ignored": lambda q, kv, N, M, left, right: (  # a learner's causal window
        (kv >= q + M - N - left) & (kv <= q + M - N)
    ),
    "a symmetric window": lambda q, kv, N, M, left, right: np.abs(kv - (q + M - N)) <= left,
    "the mask built from N and M instead of q_idx and kv_idx": lambda q, kv, N, M, left, right: (
        window_on_the_whole_grid(N, M, left, right)
    ),
    "an extent of 0 taken as no limit": lambda q, kv, N, M, left, right: window_if_truthy(q, kv, N, M, left, right),
    "None read as 0": lambda q, kv, N, M, left, right: window_none_as_zero(q, kv, N, M, left, right),
}


def document_from_boundaries(q, kv, doc):
    # doc taken for cu_seqlens: the document of token n is the number of boundaries <= n
    ids = np.searchsorted(doc, np.arange(len(doc)), side="right")
    return (ids[q] == ids[kv]) & (kv <= q)


def document_from_counts(q, kv, doc):
    # each document's first token from the running count of the ids 0, 1, 2 ...
    first = np.cumsum(np.bincount(doc)) - np.bincount(doc)
    return (kv >= first[doc[q]]) & (kv <= q)


DOCUMENT = {
    "the causal part forgotten": lambda q, kv, doc: doc[q] == doc[kv],
    "the document part forgotten": lambda q, kv, doc: kv <= q,
    "the diagonal excluded (< instead of <=)": lambda q, kv, doc: (doc[q] == doc[kv]) & (kv < q),
    "or (|) instead of and (&)": lambda q, kv, doc: (doc[q] == doc[kv]) | (kv <= q),
    "the causal direction reversed": lambda q, kv, doc: (doc[q] == doc[kv]) & (q <= kv),
    "doc read as cu_seqlens": lambda q, kv, doc: document_from_boundaries(q, kv, doc),
    "the documents found as if the ids were sorted": lambda q, kv, doc: document_from_counts(q, kv, doc),
    "the keys of earlier documents kept": lambda q, kv, doc: (doc[kv] <= doc[q]) & (kv <= q),
}


def softcap_by_exp(qk, scale, cap):
    e = np.exp(2 * (qk * scale / cap))
    return cap * (e - 1) / (e + 1)


SOFTCAP = {
    "the softcap applied before the scale": lambda qk, scale, cap: cap * np.tanh(qk / cap) * scale,
    "tanh without the factor c": lambda qk, scale, cap: np.tanh(qk * scale / cap),
    "x not divided by c inside tanh": lambda qk, scale, cap: cap * np.tanh(qk * scale),
    "the cap as a clip": lambda qk, scale, cap: np.minimum(np.maximum(qk * scale, -cap), cap),
    "the scale left out": lambda qk, scale, cap: cap * np.tanh(qk / cap),
    "the score divided by the scale": lambda qk, scale, cap: cap * np.tanh(qk / scale / cap),  # scale read as sqrt(D)
    "tanh written with exponentials": lambda qk, scale, cap: softcap_by_exp(qk, scale, cap),
    "c inside out: tanh(x c) / c": lambda qk, scale, cap: np.tanh(cap * (qk * scale)) / cap,
}


def alibi_on_the_whole_grid(s, slope, N, M):
    # review rev-j-13-7: "q_idx is just np.arange(N)": the grid rebuilt from the sizes (a tile then fails to broadcast)
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    return s - slope * np.abs(n + M - N - m)


ALIBI = {
    "ALiBi's sign": lambda s, slope, q, kv, N, M: s + slope * abs(q + M - N - kv),
    "the top-left alignment when N != M": lambda s, slope, q, kv, N, M: s - slope * abs(q - kv),
    "the distance without its absolute value": lambda s, slope, q, kv, N, M: s - slope * (q - kv + M - N),
    "the slope divided instead of multiplied": lambda s, slope, q, kv, N, M: s - abs(q + M - N - kv) / slope,
    "the slope left out": lambda s, slope, q, kv, N, M: s - abs(kv - (q + M - N)),
    "the offset N - M instead of M - N": lambda s, slope, q, kv, N, M: s - slope * abs(kv - (q + N - M)),
    "the slope read as an exponent": lambda s, slope, q, kv, N, M: s - 2**-slope * abs(q + M - N - kv),
    "the bias multiplied instead of added": lambda s, slope, q, kv, N, M: s * np.exp(-slope * abs(q + M - N - kv)),
    "the bias built from N and M instead of q_idx and kv_idx": lambda s, slope, q, kv, N, M: alibi_on_the_whole_grid(
        s, slope, N, M
    ),
}


def kind_from_corner(r0, r1, c0, c1, N, M):
    # "if the bottom-left corner is seen, the tile is computed without a mask"
    return 2 if c0 <= r1 - 1 + M - N else 0


def kind_top_right(r0, r1, c0, c1, N, M):
    return 2 if c1 - 1 <= r0 + M - N else 0


def kind_top_left(r0, r1, c0, c1, N, M):
    if c0 > r1 - 1:
        return 0
    return 2 if c1 - 1 <= r0 else 1


def kind_strict(r0, r1, c0, c1, N, M):
    if c0 >= r1 - 1 + M - N:
        return 0
    return 2 if c1 - 1 < r0 + M - N else 1


def kind_inclusive_ends(r0, r1, c0, c1, N, M):
    # the bounds read as the last row and key themselves
    if c0 > r1 + M - N:
        return 0
    return 2 if c1 <= r0 + M - N else 1


def kind_codes_swapped(r0, r1, c0, c1, N, M):
    # "2 means nothing to compute"
    if c0 > r1 - 1 + M - N:
        return 2
    return 0 if c1 - 1 <= r0 + M - N else 1


def kind_partial_full_swapped(r0, r1, c0, c1, N, M):
    # "1 is the easy case, no mask; 2 the one that needs it"
    if c0 > r1 - 1 + M - N:
        return 0
    return 1 if c1 - 1 <= r0 + M - N else 2


def kind_empty_from_top_left(r0, r1, c0, c1, N, M):
    # "the first row does not see the first key: nothing to do"
    if c0 > r0 + M - N:
        return 0
    return 2 if c1 - 1 <= r0 + M - N else 1


def kind_reversed(r0, r1, c0, c1, N, M):
    # the triangle above the diagonal taken for the one kept
    if c1 - 1 < r0 + M - N:
        return 0
    return 2 if c0 >= r1 - 1 + M - N else 1


def kind_offset_swapped(r0, r1, c0, c1, N, M):
    # "the shift is N - M"
    shift = N - M
    if c0 > r1 - 1 + shift:
        return 0
    if c1 - 1 <= r0 + shift:
        return 2
    return 1


TILE_KIND = {
    "a partial tile called full": kind_from_corner,
    "a partial tile called empty": kind_top_right,
    "the top-left alignment when N != M": kind_top_left,
    "the diagonal excluded (< instead of <=)": kind_strict,
    "the tile's end read as inclusive (r1 for r1 - 1)": kind_inclusive_ends,
    "the codes of empty and full swapped": kind_codes_swapped,
    "the codes of partial and full swapped": kind_partial_full_swapped,
    "a tile called empty from its top-left corner alone": kind_empty_from_top_left,
    "the causal direction reversed": kind_reversed,
    "the offset N - M instead of M - N": kind_offset_swapped,
}

PAGE = {
    "the block table ignored": lambda pages, table, b, t: pages[t // 4, t % 4],
    "the token index used as a page index": lambda pages, table, b, t: pages[table[b, t % 3], t % 4],
    "the row inside the page taken as t": lambda pages, table, b, t: pages[table[b, t // 4]][min(t, 3)],
    "the sequence's row of the table not used": lambda pages, table, b, t: pages[table[0][t // 4], t % 4],
    "the block table's axes swapped": lambda pages, table, b, t: pages[
        table[t // pages.shape[1], b], t % pages.shape[1]
    ],
    "the page size read from the wrong axis": lambda pages, table, b, t: (  # P pages taken as the page size
        pages[table[b, t // len(pages)], t % len(pages)]
    ),
    "// and % swapped": lambda pages, table, b, t: pages[table[b][t % 4]][t // 4],
    "the tokens counted from 1": lambda pages, table, b, t: pages[table[b, (t - 1) // 4], (t - 1) % 4],
}


def sink_forgotten(x, v, sink):
    # chapter 2's loop, copied as it was: (-inf, 0, 0), the sink never used
    g, s, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    for x_m, v_m in zip(x, v, strict=True):
        g_new = max(g, x_m)
        if g_new == -np.inf:
            continue
        alpha, p = np.exp(g - g_new), np.exp(x_m - g_new)
        s, acc, g = s * alpha + p, acc * alpha + p * v_m, g_new
    if s == 0:
        return acc, -np.inf
    return acc / s, g + np.log(s)


def sink_not_in_the_sum(x, v, sink):
    # "the sink has no value, so it adds nothing": it only takes part in the max
    g = max(sink, np.max(x, initial=-np.inf))
    p = np.exp(x - g)
    s = p.sum()
    return p @ v / s, g + np.log(s)


def sink_in_the_numerator(x, v, sink):
    # the sink column kept in P V, with a value of 1
    combined = np.append(x, sink)
    lse = np.logaddexp.reduce(combined)
    y = np.exp(combined - lse)
    return y[:-1] @ v + y[-1], lse


def sink_against_zero(x, v, sink):
    # no max at all for the sink: exp(sink) overflows for a large sink
    s = np.exp(sink) + np.exp(x).sum()
    return np.exp(x) @ v / s, np.log(s)


def sink_nan_when_masked(x, v, sink):
    # the keys' logsumexp first, then the sink: x - max(x) is -inf - (-inf) = NaN for an all -inf row
    m = np.max(x, initial=-np.inf)
    lse = np.logaddexp(m + np.log(np.exp(x - m).sum()), sink)
    return np.exp(x - lse) @ v, lse


def sink_after_the_loop(x, v, sink):
    # the sink added in the epilogue, as the kernel under review in sgl-kernel-npu #216
    g, s, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    for x_m, v_m in zip(x, v, strict=True):
        g_new = max(g, x_m)
        if g_new == -np.inf:
            continue
        alpha, p = np.exp(g - g_new), np.exp(x_m - g_new)
        s, acc, g = s * alpha + p, acc * alpha + p * v_m, g_new
    s = s + np.exp(sink - g)
    return acc / s, g + np.log(s)


def sink_with_the_mean_value(x, v, sink):
    # review rev-j-13-8: the sink given a value in the numerator, the mean of the values (sgl-kernel-npu PR #216's bot)
    lse = np.logaddexp.reduce(np.append(x, sink))
    return np.exp(x - lse) @ v + np.exp(sink - lse) * v.mean(axis=0), lse


def sink_lse_of_the_keys(x, v, sink):
    # review rev-j-13-8: the output right, but L = log(sum e^x) over the keys alone, written with the keys' max
    lse = np.logaddexp.reduce(np.append(x, sink))
    g = np.max(x, initial=-np.inf)
    return np.exp(x - lse) @ v, g + np.log(np.sum(np.exp(x - g)))


SINK = {
    "the sink lost: attention without it": sink_forgotten,
    "the sink's own term left out of s": sink_not_in_the_sum,
    "the sink added to the numerator too": sink_in_the_numerator,
    "the sink left out of the max": sink_against_zero,
    "NaN for a row with no key": sink_nan_when_masked,
    "the sink added after the loop, outside the max and the rescaling": sink_after_the_loop,
    "the logsumexp without the sink": sink_lse_of_the_keys,
}

WRONG = {
    "check_window_mask": WINDOW,
    "check_document_mask": DOCUMENT,
    "check_softcap": SOFTCAP,
    "check_alibi": ALIBI,
    "check_tile_kind": TILE_KIND,
    "check_page_gather": PAGE,
    "check_sink_row": SINK,
}


test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


def test_the_solutions_can_be_shown():
    for name in ("window_mask", "document_mask", "softcap", "alibi", "tile_kind", "page_gather", "sink_row"):
        assert f"def {name}(" in solutions.source_of(name, vars(solutions), solutions.__all__, "solutions")


def test_a_wrong_shape_outside_the_catalogue_is_stated_without_a_mistake_name():
    """The shapes and the rule, not "looks like a wrong shape": no mistake of chapter 13 is named that."""
    report = exercises.check_softcap(lambda qk, scale, cap: (cap * np.tanh(qk * scale / cap))[..., None])
    failed = [message for _, ok, message in report.cases if not ok]
    assert failed and all("expected shape" in m and "looks like" not in m for m in failed), failed
    assert all(m.endswith("the result must have the shape of the reference's (see the expected shape)") for m in failed)


def test_an_integer_mask_is_caught_as_not_boolean():
    def window_as_ints(q, kv, N, M, left, right):  # 0/1 instead of False/True
        return ((kv >= q + M - N - left) & (kv <= q + M - N + right)).astype(int)

    report = exercises.check_window_mask(window_as_ints)
    assert not report.passed, report
    assert "expected a boolean mask, got int64" in repr(report), report


def test_a_mask_in_a_message_reads_as_booleans():
    report = exercises.check_window_mask(WINDOW["the top-left alignment when N != M"])
    text = repr(report)
    # review zhrev-f 13-18: True/False, not the numbers 0./1.
    assert "expected the mask = an array of shape (3, 8) starting [False, False, False, True, ...]" in text, text
    assert "[0., " not in text and "[1., " not in text, text


def test_a_wrong_scalar_answer_shows_both_numbers_without_an_index():
    report = exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: 1)
    assert not report.passed, report
    # a constant answer is no known mistake: both numbers, no index
    assert "expected the kind = 2, got 1" in repr(report) and "at []" not in repr(report), report


def test_an_index_past_an_axis_is_explained():
    report = exercises.check_page_gather(lambda pages, table, b, t: pages[table[b, t // 4], t])  # row t, not t % 4
    assert not report.passed and "raised IndexError" in repr(report), report
    assert "pages is (P, page_size, D) and block_table (B, max_pages)" in repr(report), report


# ------------------------------------------------------------------------------------------------------------------
# Right answers pass: the package's own functions (flashmath.variants, flashmath.masks) and equivalent forms
# ------------------------------------------------------------------------------------------------------------------


def window_from_the_package(q, kv, N, M, left, right):
    return fm.sliding_window_mask(N, M, left=left, right=right)[q, kv]


def window_from_a_variant(q, kv, N, M, left, right):
    keep = make_variant(N, M, (), window=(left, right)).tile_keep(q.min(), q.max() + 1, kv.min(), kv.max() + 1)
    return np.full((q.size, kv.size), keep is None) if keep is None or keep is False else keep


def window_with_np_where(q, kv, N, M, left, right):
    lo = -np.inf if left is None else -left
    hi = np.inf if right is None else right
    rel = kv - q - (M - N)
    return np.where(rel < lo, False, np.where(rel > hi, False, True))


def document_from_the_package(q, kv, doc):
    return document_mask_mod(doc)(0, 0, q, kv) & (kv <= q)


def document_from_a_variant(q, kv, doc):
    keep = make_variant(len(doc), len(doc), (), causal=True, mask_mod=document_mask_mod(doc)).tile_keep(
        0, len(doc), 0, len(doc)
    )
    return np.full((len(doc), len(doc)), keep is None) if keep is None or keep is False else keep


def softcap_from_a_variant(qk, scale, cap):
    return make_variant(*qk.shape, (), softcap=cap).scores(qk * scale, 0, qk.shape[0], 0, qk.shape[1])


def alibi_from_a_variant(score, slope, q, kv, N, M):
    # the tile's bounds from its index arrays (the whole grid or a tile of it)
    return make_variant(N, M, (), alibi_slopes=[slope]).scores(score, q.min(), q.max() + 1, kv.min(), kv.max() + 1)


def kind_from_the_mask(r0, r1, c0, c1, N, M):
    keep = fm.causal_mask(N, M)[r0:r1, c0:c1]
    return 0 if not keep.any() else 2 if keep.all() else 1


def kind_from_block_mask(r0, r1, c0, c1, N, M):
    keep = make_variant(N, M, (), causal=True).tile_keep(r0, r1, c0, c1)
    return 0 if keep is False else 2 if keep is None else 1


def sink_row_from_the_package(x, v, sink):
    # the tiled loop itself: scores x as a query against the rows of an identity, masked keys through the mask
    M = len(x)
    keep = x > -np.inf
    q = np.zeros((1, max(M, 1)))
    q[0, :M] = np.where(keep, x, 0)
    a, lse = fm.flash_attention(
        q, np.eye(M, q.shape[1]), v, scale=1.0, mask=keep[None], learnable_sink=sink, return_lse=True, block_k=2
    )
    return a[0], lse[0]


def sink_row_closed_form(x, v, sink):
    lse = np.logaddexp.reduce(np.append(x, sink))  # log(exp(sink) + sum_m exp(x_m))
    return np.exp(x - lse) @ v, lse


def sink_row_normalised(x, v, sink):
    # FlashAttention-1's form: the normalised output and the logsumexp, both started at the sink
    a, lse = np.zeros(v.shape[1]), sink
    for x_m, v_m in zip(x, v, strict=True):
        new = np.logaddexp(lse, x_m)
        a, lse = a * np.exp(lse - new) + np.exp(x_m - new) * v_m, new
    return a, lse


RIGHT = [
    ("check_window_mask", solutions.window_mask),
    ("check_window_mask", window_from_the_package),
    ("check_window_mask", window_from_a_variant),
    ("check_window_mask", window_with_np_where),
    ("check_document_mask", solutions.document_mask),
    ("check_document_mask", document_from_the_package),
    ("check_document_mask", document_from_a_variant),
    ("check_document_mask", lambda q, kv, doc: np.logical_and(np.equal(doc[q], doc[kv]), np.less_equal(kv, q))),
    ("check_softcap", solutions.softcap),
    ("check_softcap", softcap_from_a_variant),
    ("check_softcap", lambda qk, scale, cap: cap * np.tanh(np.multiply(qk, scale) / cap)),
    ("check_softcap", lambda qk, scale, cap: np.vectorize(lambda x: cap * math.tanh(x * scale / cap))(qk)),
    ("check_alibi", solutions.alibi),
    ("check_alibi", alibi_from_a_variant),
    ("check_alibi", lambda s, slope, q, kv, N, M: s + slope * -np.abs(kv - q - (M - N))),
    ("check_tile_kind", solutions.tile_kind),
    ("check_tile_kind", kind_from_the_mask),
    ("check_tile_kind", kind_from_block_mask),
    ("check_sink_row", solutions.sink_row),
    ("check_sink_row", sink_row_from_the_package),
    ("check_sink_row", sink_row_closed_form),
    ("check_sink_row", sink_row_normalised),
    ("check_page_gather", solutions.page_gather),
    ("check_page_gather", lambda pages, table, b, t: pages[table[b][divmod(t, pages.shape[1])[0]]][t % len(pages[0])]),
]


@pytest.mark.parametrize("checker, fn", RIGHT, ids=[f"{c}-{i}" for i, (c, _) in enumerate(RIGHT)])
def test_right_answers_pass(checker, fn):
    report = getattr(exercises, checker)(fn)
    assert report.passed, report


def test_numpy_slips_that_raise_are_explained():
    def with_and(q, kv, doc):
        return (doc[q] == doc[kv]) and (kv <= q)

    text = repr(exercises.check_document_mask(with_and))
    assert "raised ValueError" in text and "combine masks element by element with &" in text, text
    text = repr(exercises.check_softcap(lambda qk, scale, cap: cap * math.tanh(qk * scale / cap)))
    assert "raised TypeError" in text and "use np.tanh" in text, text
    text = repr(
        exercises.check_window_mask(
            lambda q, kv, N, M, left, right: (kv >= q + M - N - left) & (kv <= q + M - N + right)
        )
    )
    assert "left or right is None" in text, text


def _in(language, fn):
    """``fn()`` with the catalogue of ``language`` selected, then English again."""
    fm.set_language(language)
    try:
        return fn()
    finally:
        fm.set_language("en")


def test_a_hinted_error_repeats_only_the_same_reason():
    """Review zhrev-ah 13-2: a later case that raises the same hinted error says only "the same diagnosis as for
    the case ... above", not the hint's first clause followed by it (which read as if the rule were caused by the
    earlier case), in both languages."""

    def with_and(q, kv, doc):
        return (doc[q] == doc[kv]) and (kv <= q)

    for language, separator in (("en", ": "), ("zh_CN", "\u2014\u2014")):
        text = _in(language, lambda: repr(exercises.check_document_mask(with_and)))
        same = _in(language, lambda: fm.i18n.gettext(SAME_AS_ABOVE).split("{case}")[0])
        repeats = [line for line in text.splitlines() if same in line]
        assert len(repeats) >= 2, text
        for line in repeats:
            assert line.split(separator, 1)[1].startswith(same), line


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_a_tile_kind_that_never_changes_is_told_so_and_no_mistake_is_named(kind):
    """Review zhrev-ah 13-3: ``return 1`` for every tile was told two contradicting mistakes (each explains some of
    the failing cases, the pair all of them, and neither is what the code does); it is told that the function returns
    the same kind for every tile, with no mistake named, in both languages."""
    from flashmath.exercises.chapter13 import SAME_KIND_EVERYWHERE

    text = repr(exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: kind))
    assert f"your function returns {kind} for every tile" in text and "looks like" not in text, text
    for language in ("en", "zh_CN"):
        text = _in(language, lambda: repr(exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: kind)))
        plain = _in(language, lambda: fm.i18n.gettext(SAME_KIND_EVERYWHERE).format(kind=kind))
        looks_like = _in(language, lambda: fm.i18n.gettext("looks like {name}: {fix}").split("{name}")[0])
        assert plain in text and looks_like not in text, text


def test_a_word_for_the_tile_kind_is_told_to_be_a_number():
    text = repr(exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: "empty"))
    assert "return the number 0 (empty), 1 (partial) or 2 (full)" in text, text
    # review rev-j-13-9: the number expected and the word got
    text = repr(exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: "full"))
    assert "expected the kind = 0, got 'full': looks like a word for the kind" in text, text


def test_an_alibi_built_on_the_whole_grid_fails_the_tile_and_is_named():
    """Review rev-j-13-7: every case passed the whole N x M grid, so a bias rebuilt from np.arange(N) and
    np.arange(M) passed; the tile case catches it, named with 13.1's diagnosis, whether the learner's code fails to
    broadcast there or cuts the whole grid's bias to the tile's shape."""

    def cut_to_the_tile(s, slope, q, kv, N, M):
        return s - slope * np.abs(np.arange(N)[:, None] + M - N - np.arange(M)[None, :])[: s.shape[0], : s.shape[1]]

    name = "the bias built from N and M instead of q_idx and kv_idx"
    tile = "a tile: q_idx rows 1..3 and kv_idx keys 2..5 of N = 5, M = 7"
    for wrong in (ALIBI[name], cut_to_the_tile):
        report = exercises.check_alibi(wrong)
        failed = {case: message for case, ok, message in report.cases if not ok}
        assert list(failed) == [tile] and f"looks like {name}" in failed[tile], report
    assert exercises.check_alibi(solutions.alibi).passed


def test_a_sink_given_a_value_and_a_logsumexp_without_it_are_named_on_every_failing_case():
    """Review rev-j-13-8: both failed with numbers only; each is now named, on every case it fails."""
    for wrong, name in (
        (sink_with_the_mean_value, "the sink added to the numerator too"),
        (sink_lse_of_the_keys, "the logsumexp without the sink"),
    ):
        report = exercises.check_sink_row(wrong)
        failed = [message for _, ok, message in report.cases if not ok]
        assert len(failed) >= 8, report
        assert all(f"looks like {name}" in m or "the same diagnosis as for" in m for m in failed), report


def segments_from_unique(q, kv, doc):
    # "each document's tokens are together": the ids repeated by their counts
    ids, counts = np.unique(doc, return_counts=True)
    seg = np.repeat(ids, counts)
    return (seg[q] == seg[kv]) & (kv <= q)


def segments_from_bincount(q, kv, doc):
    seg = np.repeat(np.arange(doc.max() + 1), np.bincount(doc))
    return (seg[q] == seg[kv]) & (kv <= q)


def window_grid_cut(q, kv, N, M, left, right):
    # the whole grid from N and M, cut to the shape asked for
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    keep = np.ones((N, M), dtype=bool)
    if left is not None:
        keep &= m >= n + M - N - left
    if right is not None:
        keep &= m <= n + M - N + right
    return keep[: np.shape(q)[0], : np.shape(kv)[1]]


@pytest.mark.parametrize(
    "check, fn, name",
    [
        ("check_document_mask", segments_from_unique, "the documents found as if the ids were sorted"),
        ("check_document_mask", segments_from_bincount, "the documents found as if the ids were sorted"),
        ("check_window_mask", window_grid_cut, "the mask built from N and M instead of q_idx and kv_idx"),
    ],
)
def test_more_forms_of_a_mistake_are_named(check, fn, name):
    report = getattr(exercises, check)(fn)
    assert not report.passed and f"looks like {name}" in str(report), report


def test_alibi_property_cases_are_square_so_top_left_fails_only_where_named():
    """Review 35: the masked-row property case had N != M, so a top-left ALiBi with a right -inf handling failed a
    case named for -inf. Now every property case is square: top-left fails exactly the N != M cases, named."""
    from flashmath.exercises import check_alibi

    report = check_alibi(ALIBI["the top-left alignment when N != M"])
    failed = [line for line in str(report).splitlines() if line.strip().startswith("FAIL")]
    assert "PASS  property: an all -inf row (masked) stays -inf" in str(report)
    assert len(failed) == 4 and all("N = M" not in line.split(":")[0] for line in failed)  # the tile has N != M
    assert all("top-left alignment" in line for line in failed)


def test_a_tile_called_empty_when_its_first_key_is_on_the_last_rows_diagonal_fails():
    # review rev10-e: ">=" for ">" in the empty test (c0 >= r1 - 1 + M - N) failed only the 1 x 1 property before
    def empty_from_ge(r0, r1, c0, c1, N, M):
        if c0 >= r1 - 1 + M - N:
            return 0
        return 2 if c1 - 1 <= r0 + M - N else 1

    report = exercises.check_tile_kind(empty_from_ge)
    text = repr(report)
    assert not report.passed, report
    assert "FAIL  a tile whose first key is its last row's aligned key: rows 0:4, keys 3:7 of N = M = 8" in text, text
    assert "expected the kind = 1, got 0" in text, text
    for right in (solutions.tile_kind, kind_from_the_mask, kind_from_block_mask):
        assert exercises.check_tile_kind(right).passed


# ------------------------------------------------------------------------------------------------------------------
# The chapter's two predictions (review rev-j-13-5): the answer each cell computes, and its common wrong answers
# ------------------------------------------------------------------------------------------------------------------


def test_the_window_tiles_prediction_is_150_and_names_its_wrong_answers(capsys):
    """P13: window (511, 0) at N = M = 4096, 128 x 128 tiles: 28 query tiles compute 5 key tiles, the first four 1 to
    4, so 150 (60 partial, 90 full, 874 skipped); each misconception's number is the wrong count it explains."""
    from flashmath.exercises.predict import QUESTIONS
    from flashmath.variants import block_mask

    counts = block_mask(4096, 4096, window=(511, 0)).counts
    assert counts == {"empty": 874, "partial": 60, "full": 90} and 28 * 5 + 1 + 2 + 3 + 4 == 150
    assert set(QUESTIONS["P13"].misconceptions) == {32 * 4, 32 * 5, 32 * 33 // 2, counts["empty"], counts["full"]}
    for path in ("13_variants.ipynb", "zh/13_variants.ipynb"):
        run = prediction_cell(path, "predict-window-check-13", {"fm": fm, "np": np, "block_mask": block_mask}, capsys)
        assert "You predicted" not in run()  # the placeholder: no answer
        assert_prediction_feedback(run, "P13", 150)


def test_the_sink_in_every_part_prediction_is_ln_3_and_names_its_wrong_answers(capsys):
    """P13b: the sink counted in all three split-KV parts is one sink of value sink + ln 3; the cell computes it from
    the merged logsumexp, for every head."""

    rng = np.random.default_rng(0)
    H, N, M, D = 4, 1, 12, 8
    sink = np.array([-1.0, 0.0, 1.5, 3.0])
    q, k, v = rng.standard_normal((H, N, D)), rng.standard_normal((H, M, D)), rng.standard_normal((H, M, D))
    a, lse = np.zeros((H, N, D)), np.full((H, N), -np.inf)
    for c0 in (0, 4, 8):
        part = fm.flash_attention(q, k[:, c0 : c0 + 4], v[:, c0 : c0 + 4], learnable_sink=sink, return_lse=True)
        a, lse = fm.merge_states(a, lse, *part)
    env = {"fm": fm, "np": np, "q": q, "k": k, "v": v, "sink": sink, "every": a, "every_lse": lse}
    for path in ("13_variants.ipynb", "zh/13_variants.ipynb"):
        run = prediction_cell(path, "predict-sink-check-13", env, capsys)
        assert "You predicted" not in run()
        assert_prediction_feedback(run, "P13b", round(math.log(3), 2))
