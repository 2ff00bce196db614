"""Chapter 13's checkers: the solution passes, and each classic mistake, written as a learner would, is caught and
named."""

import numpy as np
from helpers import checker_tests

from flashmath import exercises, solutions

WINDOW = {
    "the top-left alignment when N != M": lambda q, kv, N, M, left, right: (kv >= q - left) & (kv <= q + right),
    "the offset N - M instead of M - N": lambda q, kv, N, M, left, right: (
        (kv >= q + N - M - left) & (kv <= q + N - M + right)
    ),
    "an edge off by one (< instead of <=)": lambda q, kv, N, M, left, right: (
        (kv > q + M - N - left) & (kv <= q + M - N + right)
    ),
    "left and right swapped": lambda q, kv, N, M, left, right: (kv >= q + M - N - right) & (kv <= q + M - N + left),
    "the right extent ignored": lambda q, kv, N, M, left, right: (  # a learner's causal window
        (kv >= q + M - N - left) & (kv <= q + M - N)
    ),
}

DOCUMENT = {
    "the causal part forgotten": lambda q, kv, doc: doc[q] == doc[kv],
    "the document part forgotten": lambda q, kv, doc: kv <= q,
    "the diagonal excluded (< instead of <=)": lambda q, kv, doc: (doc[q] == doc[kv]) & (kv < q),
    "or (|) instead of and (&)": lambda q, kv, doc: (doc[q] == doc[kv]) | (kv <= q),
}

SOFTCAP = {
    "the softcap applied before the scale": lambda qk, scale, cap: cap * np.tanh(qk / cap) * scale,
    "tanh without the factor c": lambda qk, scale, cap: np.tanh(qk * scale / cap),
    "x not divided by c inside tanh": lambda qk, scale, cap: cap * np.tanh(qk * scale),
    "the cap as a clip": lambda qk, scale, cap: np.minimum(np.maximum(qk * scale, -cap), cap),
}

ALIBI = {
    "ALiBi's sign": lambda s, slope, q, kv, N, M: s + slope * abs(q + M - N - kv),
    "the top-left alignment when N != M": lambda s, slope, q, kv, N, M: s - slope * abs(q - kv),
    "the distance without its absolute value": lambda s, slope, q, kv, N, M: s - slope * (q - kv + M - N),
    "the slope divided instead of multiplied": lambda s, slope, q, kv, N, M: s - abs(q + M - N - kv) / slope,
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


TILE_KIND = {
    "a partial tile called full": kind_from_corner,
    "a partial tile called empty": kind_top_right,
    "the top-left alignment when N != M": kind_top_left,
    "the diagonal excluded (< instead of <=)": kind_strict,
    "the tile's end read as inclusive (r1 for r1 - 1)": kind_inclusive_ends,
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
}

WRONG = {
    "check_window_mask": WINDOW,
    "check_document_mask": DOCUMENT,
    "check_softcap": SOFTCAP,
    "check_alibi": ALIBI,
    "check_tile_kind": TILE_KIND,
    "check_page_gather": PAGE,
}


test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


def test_the_solutions_can_be_shown():
    for name in ("window_mask", "document_mask", "softcap", "alibi", "tile_kind", "page_gather"):
        assert f"def {name}(" in solutions.source_of(name, vars(solutions), solutions.__all__, "solutions")


def test_an_integer_mask_is_caught_as_not_boolean():
    def window_as_ints(q, kv, N, M, left, right):  # 0/1 instead of False/True
        return ((kv >= q + M - N - left) & (kv <= q + M - N + right)).astype(int)

    report = exercises.check_window_mask(window_as_ints)
    assert not report.passed, report
    assert "expected a boolean mask, got int64" in repr(report), report


def test_a_wrong_scalar_answer_shows_both_numbers_without_an_index():
    report = exercises.check_tile_kind(lambda r0, r1, c0, c1, N, M: 1)
    assert not report.passed, report
    assert "expected the kind = 2, got 1:" in repr(report) and "at []" not in repr(report), report


def test_an_index_past_an_axis_is_explained():
    report = exercises.check_page_gather(lambda pages, table, b, t: pages[table[b, t // 4], t])  # row t, not t % 4
    assert not report.passed and "raised IndexError" in repr(report), report
    assert "pages is (P, page_size, D) and block_table (B, max_pages)" in repr(report), report
