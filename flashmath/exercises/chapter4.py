"""Chapter 4: exercise 4.1, ``A = Y V`` with the loops in the order ``n, m, d`` (the loop swap).

Two things are checked. The bits: every ``A[n, d]`` must receive its terms in the order ``m = 0, 1, ..., M - 1``
(code indices), so the result is bitwise equal to the textbook order ``n, d, m`` (:func:`flashmath.matmul_ndm`).
The order: that alone cannot tell the two loop orders apart (they are bitwise equal by design), so one case
passes ``y`` and ``v`` as arrays of :class:`Traced` numbers, which record every product ``Y[n, m] * V[m, d]`` in
the order it is computed, as chapter 2's :class:`~flashmath.exercises.OnePassVector` counts reads. What counts
is that, within each row ``n``, all the products of one key come before those of the next: the key loop is
outside the output-dimension loop. A vectorised row update ``acc += y[n, m] * v[m, :]`` and ``np.asarray`` on
the inputs keep the record.
"""

from __future__ import annotations

import re

import numpy as np

from flashmath.exercises._cases import PropertyFailure, check_function, property_cases
from flashmath.exercises._registry import exercise
from flashmath.exercises._report import (
    INPUT_MODIFIED,
    LOWER_PRECISION,
    CheckReport,
    Diagnosis,
    Mistake,
    fmt,
    pick,
    same,
)
from flashmath.i18n import gettext as _
from flashmath.i18n import gettext_noop as N_
from flashmath.i18n import joined
from flashmath.softmax import safe_softmax


class Traced:
    """A number that records the products it takes part in, for exercise 4.1.

    ``value`` is the number, ``source`` "y" or "v" and ``index`` its position ``(n, m)`` or ``(m, d)``. A product
    with another traced number (``*``, also element by element against a numpy array) appends ``(y index, v
    index)`` to ``log`` and returns a plain float; ``float(t)`` appends ``("float", source, index)``. Other
    arithmetic works on the value.
    """

    __slots__ = ("value", "source", "index", "log")

    def __init__(self, value: float, source: str, index: tuple, log: list):
        self.value, self.source, self.index, self.log = float(value), source, index, log

    def __float__(self) -> float:
        self.log.append(("float", self.source, self.index))
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __mul__(self, other):
        return _product(self, other)

    __rmul__ = __mul__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.multiply and method == "__call__" and len(inputs) == 2 and not kwargs:
            return _product(*inputs)  # array * traced: numpy hands the product to us
        return NotImplemented

    def __add__(self, other):
        return self.value + other

    __radd__ = __add__

    def __sub__(self, other):
        return self.value - other

    def __rsub__(self, other):
        return other - self.value

    def __truediv__(self, other):
        return self.value / other

    def __neg__(self):
        return -self.value


def _product(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        arr, scalar, arr_first = (a, b, True) if isinstance(a, np.ndarray) else (b, a, False)
        flat = [(_product(e, scalar) if arr_first else _product(scalar, e)) for e in arr.ravel()]
        return np.array(flat, dtype=np.float64).reshape(arr.shape)
    if isinstance(a, Traced) and isinstance(b, Traced):
        y, v = (a, b) if a.source == "y" else (b, a)
        a.log.append((y.source + v.source, y.index, v.index))
        return a.value * b.value
    if isinstance(a, Traced):
        return a.value * b
    if isinstance(b, Traced):
        return a * b.value
    return a * b


def traced(y, v):
    """``(y_traced, v_traced, log)``: object arrays of :class:`Traced` numbers holding ``y`` and ``v``, and their
    log."""
    log: list = []
    y_t, v_t = np.empty(np.shape(y), dtype=object), np.empty(np.shape(v), dtype=object)
    for arr, out, source in ((y, y_t, "y"), (v, v_t, "v")):
        for index in np.ndindex(out.shape):
            out[index] = Traced(arr[index], source, index, log)
    return y_t, v_t, log


def products(log) -> list | None:
    """The products ``((n, m), (m', d))`` of a log, in order; None when the inputs were turned into floats in bulk.

    Products of two traced numbers are logged as they happen. A learner who writes ``float(y[n, m]) * float(v[m,
    d])`` instead leaves ``float`` records, alternating between ``y`` and ``v``: each ``v`` read then pairs with
    the latest ``y`` read. Conversions of a whole array at once (``np.asarray(y, dtype=float)``) do not alternate.
    """
    direct = [(i, j) for kind, i, j in log if kind == "yv"]
    if direct:
        return direct
    reads = [(source, index) for kind, source, index in log if kind == "float"]
    switches = sum(1 for a, b in zip(reads, reads[1:], strict=False) if a[0] != b[0])
    if switches < len(reads) // 2:
        return None
    pairs, last_y = [], None
    for source, index in reads:
        if source == "y":
            last_y = index
        elif last_y is not None:
            pairs.append((last_y, index))
    return pairs


def _matmul_products(y, v) -> list:
    """The products ``((n, m), (m, d))`` in the order ``@`` computes them on arrays of :class:`Traced` numbers."""
    y_t, v_t, log = traced(np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64))
    y_t @ v_t
    return products(log) or []


def _ndm(y, v):
    """``Y V`` summed in the order of the keys (float64), as a learner's loop sums it; zeros when there is no key."""
    from flashmath.attention import matmul_ndm

    y, v = np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64)
    return matmul_ndm(y, v) if y.shape[1] else np.zeros((y.shape[0], v.shape[1]))


NOT_SWAPPED = Mistake(
    N_("the loops not swapped (order n, d, m)"),
    N_(
        "for each row the products came output element by output element, all keys for d = 0, then "
        "all keys for d = 1: that is the textbook order. Swap the m and d loops, so that each key m "
        "updates the whole row of partial sums before the next key"
    ),
)
MISTAKES = (
    Mistake(
        N_("summed in another order"),
        N_(
            "a sum matches bit for bit only when it adds the terms of each A[n, d] strictly in the order m = 0, 1, "
            "..., M-1 (code indices), one multiply and one add each; @, np.dot and np.einsum (BLAS or SIMD "
            "kernels: blocks, fused multiply-adds), np.sum (pairwise), math.fsum and a reversed loop round "
            "differently"
        ),
        show_difference=True,
    ),
    NOT_SWAPPED,
    Mistake(
        N_("@, np.dot, np.sum or math.fsum over the keys (order n, d, m)"),
        N_(
            "on the traced arrays the products came output element by output element (all keys for d = 0, then "
            "for d = 1), as @ and np.dot take them, and as np.sum or math.fsum of y[n, :] * v[:, d] do; on arrays "
            "of floats these also round differently (the other failed cases: BLAS blocks or fused multiply-adds, "
            "np.sum's pairwise sums, math.fsum's exact sum): write the three loops, the key loop m outside the d "
            "loop, adding one term at a time"
        ),
    ),
    Mistake(
        N_("keys out of order"),
        N_(
            "within each row, take the keys one after the other, m = 0, 1, ..., M-1, and finish all the products "
            "of a key before the next"
        ),
    ),
    Mistake(N_("products missing or repeated"), N_("each product Y[n, m] V[m, d] is computed exactly once")),
    Mistake(
        N_("Y[n, m] paired with another key's values"),
        N_("key m's weight Y[n, m] multiplies key m's value row, V[m, :]"),
    ),
    Mistake(
        N_("the inputs converted before the loops"),
        N_(
            "y and v arrived as arrays of traced numbers that record the order of your products, and your function "
            "turned them into floats first (np.asarray(..., dtype=float), .astype, np.array(..., dtype=...)). Use "
            "them as they are: indexing, np.asarray(y) without a dtype and np.zeros for the result all keep the "
            "record"
        ),
    ),
    Mistake(
        N_("the row of partial sums not reset for each row"),
        N_(
            "create the row of partial sums (acc = np.zeros(Dv)) inside the loop over n: as it is, row n also "
            "holds the sums of rows 0..n-1"
        ),
        (lambda y, v: np.cumsum(np.asarray(y) @ np.asarray(v), axis=0),),
    ),
    Mistake(
        N_("= instead of +="),
        N_(
            "each key must add Y[n, m] V[m, d] to the partial sum (acc[d] = acc[d] + ...); assigning it keeps only "
            "the last key's term"
        ),
        (lambda y, v: np.asarray(y)[:, -1:] * np.asarray(v)[-1],),
    ),
    Mistake(
        N_("a key skipped (off by one)"),
        N_(
            "the loop over keys must run over all of range(M), 0 to M-1 in code; range(1, M) or range(M - 1) "
            "leaves one out (the math counts keys 1..M, the code 0..M-1)"
        ),
        (  # the loop's own order of additions (the order cases tell @ from a loop)
            lambda y, v: _ndm(np.asarray(y)[:, 1:], np.asarray(v)[1:]),
            lambda y, v: _ndm(np.asarray(y)[:, :-1], np.asarray(v)[:-1]),
        ),
    ),
    Mistake(N_("the result transposed"), N_("A has one row per query: shape (N, Dv), A[n, d]")),
    Mistake(
        N_("zeros returned"),
        N_("did the loop run, and did you return the array you accumulated into?"),
        (lambda y, v: np.zeros((np.shape(y)[0], np.shape(v)[1])),),
    ),
    INPUT_MODIFIED,
    Mistake(N_("a wrong shape"), N_("A = Y V has shape (N, Dv)")),
    LOWER_PRECISION,
)
OTHER_ORDER, MATMUL, CONVERTED, TRANSPOSED, WRONG_SHAPE, PAIRED, MISSING, OUT_OF_ORDER = pick(
    MISTAKES,
    "summed in another order",
    "@, np.dot, np.sum or math.fsum over the keys (order n, d, m)",
    "the inputs converted before the loops",
    "the result transposed",
    "a wrong shape",
    "Y[n, m] paired with another key's values",
    "products missing or repeated",
    "keys out of order",
)


def order_case(M: int = 64):
    """``(y (4, M), v (M, 1))`` whose sums give their bits only when added strictly in the order ``m = 0, 1, ...``.

    Rows 0-2 add ``2^53``, then ``M - 4`` terms in ``(0.5, 1)``, then ``-2^53``, then ``-r`` and ``p``, where ``p`` is
    an inexact product and ``r`` its rounded value. In order, each small term alone is below half a unit in the last
    place of ``2^53`` and vanishes, ``-2^53`` brings the sum back to exactly 0, and ``-r + r = 0``: the answer is 0.
    Any other grouping (BLAS or SIMD blocks, pairwise sums, ``math.fsum``, a reversed loop) adds two or more small
    terms together first and keeps them; a fused multiply-add keeps the exact ``p`` and leaves ``p - r != 0``. Row 3
    holds ordinary weights in ``[0, 1)`` and skips the ``2^53`` terms, so that the answer is not all zeros.
    """
    big = 2.0**53
    w = 1 + 2.0**-30
    small = 0.5 + (np.arange(M - 4) % 31 + 1) / 64  # each in (0.5, 1): one alone vanishes into 2^53, two do not
    v = np.concatenate([[big], small, [-big, -1.0, w]])[:, None]  # (M, 1)
    rows = []
    for j in (1, 3, 5):
        y_last = 1 + j * 2.0**-30
        r = y_last * w  # rounded: the exact product has j * 2^-60 more, which only a fused multiply-add keeps
        rows.append(np.concatenate([np.ones(M - 2), [r, y_last]]))  # Y[n, M-2] V[M-2] = -r exactly
    weights = np.random.default_rng(4).random(M)
    weights[[0, M - 3]] = 0.0  # row 3 skips the 2^53 terms
    return np.array(rows + [weights]), v


TRACED_CASE = N_("the order of your loops (y and v record each product Y[n, m] * V[m, d]): N = 2, M = 4, Dv = 3")


def loop_swap_cases():
    """The cases of exercise 4.1: ``[(name, y, v)]``; the one named :data:`TRACED_CASE` is passed traced."""
    from flashmath.data import load_heads

    rng = np.random.default_rng(4)
    heads = load_heads()
    x = heads.scores(0, 1)[:4]  # (4, T): four real score rows
    return [
        (_("a small product: N = 3, M = 5, Dv = 4"), rng.random((3, 5)), rng.standard_normal((5, 4))),
        (_(TRACED_CASE), rng.random((2, 4)), rng.standard_normal((4, 3))),
        (_("one row (N = 1)"), rng.random((1, 6)), rng.standard_normal((6, 3))),
        (_("one key (M = 1)"), rng.random((3, 1)), rng.standard_normal((1, 4))),
        (_("one output dimension (Dv = 1)"), rng.random((3, 5)), rng.standard_normal((5, 1))),
        (
            _("order-sensitive terms [1, 1e16, -1e16]: added in key order they give 0"),
            np.ones((1, 3)),
            np.array([[1.0, 2.0], [1e16, 1.0], [-1e16, 3.0]]),
        ),
        (
            _("order-sensitive sums of 64 terms: 2^53, 60 terms below 1 that vanish into it in order, -2^53, ..."),
            *order_case(),
        ),
        (
            _("real probabilities: 4 rows of Y and V of a head (M = 46, Dv = 32)"),
            safe_softmax(x),
            heads.v[0, 1].astype(np.float64),
        ),
    ]


def order_problem(pairs, N: int, M: int, Dv: int) -> Mistake | None:
    """What is wrong with the order of the products ``((n, m), (m', d))`` of an ``(N, M) x (M, Dv)`` product."""
    if pairs is None or not pairs:
        return CONVERTED
    if any(i[1] != j[0] for i, j in pairs):
        return PAIRED
    for n in range(N):
        row = [(i[1], j[1]) for i, j in pairs if i[0] == n]  # (m, d) in the order computed
        if sorted(row) != [(m, d) for m in range(M) for d in range(Dv)]:
            return MISSING
        if row == [(m, d) for d in range(Dv) for m in range(M)] and Dv > 1:
            return NOT_SWAPPED
        keys = [m for m, _ in row]
        if any(b < a for a, b in zip(keys, keys[1:], strict=False)):
            return OUT_OF_ORDER
    return None


def loop_swap_properties():
    """The property cases of exercise 4.1 (the battery of :mod:`~flashmath.exercises._cases`), named with the prompt's
    words.

    Only what the prompt states: one row, one key and one output dimension at once, and negative-only input. The
    edge cases that are not chapter 4's subject (the order of the additions) are not tested: the empty input, -inf,
    +inf, NaN, integer input, and float16, where the chapter's own ``matmul_n_m_d`` keeps float16 partial sums
    (``[0.0] * D`` plus float16 products stays float16) and a float32 accumulator would give other bits.
    """
    rng = np.random.default_rng(40)
    y, v = rng.random((2, 3)), rng.standard_normal((3, 2))
    return property_cases(
        [
            (_("one query, one key, one output dimension"), (np.array([[0.5]]), np.array([[-3.0]]))),
            (_("negative-only input"), (-y, -np.abs(v) - 1)),
        ]
    )


class _LoopDiagnosis:
    """ "summed in another order" when every answer is within rounding of the product; else the catalogue's models.

    (A case whose terms hold 2^53 has a rounding bound that would also cover some wrong answers, so the rounding
    rule is taken only when all the answers of the run are within it.)"""

    def __init__(self, args_list, answers, reference, skip: int):
        # the models take (y, v): the traced case's marker is not theirs (its answer is the product, as any other)
        self._models = Diagnosis([args[:2] for args in args_list], answers, MISTAKES, same)
        self._within = []
        for args, a in zip(args_list, answers, strict=False):
            y, v = np.asarray(args[0]), np.asarray(args[1])
            expected = np.asarray(reference(*args), dtype=np.float64)
            self._within.append(
                a is not None
                and a.shape == expected.shape
                and _within_rounding(a, expected, y.astype(np.float64), v.astype(np.float64))
            )
        shapes_right = [
            a is not None and a.shape == np.shape(reference(*args)) for args, a in zip(args_list, answers, strict=False)
        ]
        self._all_within = all(
            w or not right for w, right in zip(self._within[skip:], shapes_right[skip:], strict=False)
        )
        self._skip = skip

    def for_case(self, i: int) -> Mistake | None:
        if self._all_within and self._within[i]:
            return OTHER_ORDER
        return self._models.for_case(i)


def _exact(a, b) -> bool:
    """Bitwise equal (NaN with NaN); any empty result is the empty result (a list [] has shape (0,))."""
    if a is not None and b is not None and a.size == 0 and b.size == 0:
        return True
    return a is not None and b is not None and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def _form(out):
    try:
        return np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _index_hint(exc) -> str | None:
    if isinstance(exc, IndexError) and "out of bounds" in str(exc):
        return _(
            "an index past the end: y is (N, M) and v is (M, Dv), so Y[n, m] is y[n, m] and V[m, d] is v[m, d] "
            "(v[d, m] or y[m, n] swaps the axes), with n < N, m < M, d < Dv"
        )
    return None


@exercise("4.1", MISTAKES, solution="loop_swap", property_cases=2)
def check_loop_swap(fn) -> CheckReport:
    """Check a learner's ``fn(y, v) -> A = Y V`` written with loops in the order ``n, m, d`` (exercise 4.1).

    The result must be bitwise equal to the order ``n, d, m`` (:func:`flashmath.matmul_ndm`): every ``A[n, d]``
    receives its terms in the order ``m = 0, 1, ..., M - 1``, one multiply and one add each. A sum in another
    order, or BLAS (``@``, ``np.dot``, ``np.einsum``), rounds differently: a case with terms ``[1, 1e16, -1e16]``
    shows the order, and a case of 64 terms (:func:`order_case`) catches blocked, pairwise, exact (``math.fsum``)
    and fused multiply-add sums. A BLAS that sums strictly in order without fused multiply-adds would pass, and
    rightly: it then does the same additions. The loop order itself is checked on traced inputs (module
    docstring); the criterion is that within each row every product of key m comes before those of key m + 1
    (the key loop outside the output-dimension loop), so both n -> m -> d and m -> n -> d pass. The property
    battery runs first (:func:`loop_swap_properties`). Named mistakes: :data:`MISTAKES`.
    """
    from flashmath.attention import matmul_ndm

    def reference(y, v, *_):
        with np.errstate(all="ignore"):
            return matmul_ndm(y, v)

    seen_traced: dict = {}  # the traced case's order problem, and whether @ computes its products in that order

    def call(fn, args):
        if args[2:] != ("traced",):
            return fn(*args)
        y, v = args[0], args[1]
        y_in, v_in, log = traced(y, v)
        before = [id(e) for arr in (y_in, v_in) for e in arr.flat]
        out = fn(y_in, v_in)
        if before != [id(e) for arr in (y_in, v_in) for e in arr.flat]:
            return PropertyFailure(INPUT_MODIFIED.message(), out)
        N, M = y.shape
        pairs = products(list(log))
        order = order_problem(pairs, N, M, v.shape[1])
        if order is None:
            return out
        a, expected = _form(out), matmul_ndm(y, v)
        if a is not None and a.shape != expected.shape:
            return out  # the shape speaks first
        right = _exact(a, expected)
        values = (
            _("the right numbers,")
            if right
            else _("expected {expected}, got {got};").format(expected=fmt(expected, a), got=fmt(a, expected))
        )
        if order is CONVERTED:  # "the right numbers, but ..." or "expected ..., got ...; and ..."
            seen = (
                _("but the order of your loops could not be seen")
                if right
                else _("and the order of your loops could not be seen")
            )
        else:
            seen = _("in the wrong order") if right else _("and in the wrong order")
        seen_traced.update(values=values, seen=seen, like_matmul=pairs == _matmul_products(y, v))
        return PropertyFailure(_("{values} {seen}: {why}").format(values=values, seen=seen, why=order.message()), out)

    def describe(a, expected):
        text = _("expected {expected}, got {got}").format(expected=fmt(expected, a), got=fmt(a, expected))
        if a.shape == expected.shape and not _exact(a, expected):
            if np.array_equal(a, expected[::-1]) or (a.shape == expected.T.shape and np.array_equal(a, expected.T)):
                text = joined(text, TRANSPOSED.message())
        return text, a, expected

    def shape_mistake(a, expected):
        return TRANSPOSED if a.shape == expected.T.shape else WRONG_SHAPE

    cases = [(name, (y, v, "traced") if name == _(TRACED_CASE) else (y, v)) for name, y, v in loop_swap_cases()]
    report = check_function(
        "check_loop_swap",
        fn,
        cases,
        reference,
        (),
        n_out=1,
        names=("A",),
        not_answer=WRONG_SHAPE,
        properties=loop_swap_properties(),
        compare=_exact,
        convert=_form,
        describe=describe,
        call=call,
        hint=_index_hint,
        diagnosis=lambda args, answers: _LoopDiagnosis(args, answers, reference, len(loop_swap_properties())),
    )
    _name_matmul(report, seen_traced)
    # "looks like a wrong shape", in the selected language (the message of _cases's shape check ends with it)
    wrong_shape = _("looks like {name}: {fix}").split("{name}")[0] + _(WRONG_SHAPE.name)
    for j, (name, ok, message) in enumerate(report.cases):  # name the transposed result
        if not ok and wrong_shape in message:
            args = dict(cases + loop_swap_properties())[name]
            expected = reference(*args)
            text = message.split(joined("", wrong_shape))[0]
            shapes = re.findall(r"\(\d+(?:, \d+)*,?\)", text)  # the expected shape, then the shape got
            if shapes and shapes[-1] == str(expected.T.shape) and expected.T.shape != expected.shape:
                report.cases[j] = (name, False, joined(text, shape_mistake(expected.T, expected).message()))
    return report


def _name_matmul(report: CheckReport, seen_traced: dict) -> None:
    """Name @, np.dot, np.sum or math.fsum over the keys in the traced case when that explains the whole run: the
    traced products came in the order @ takes on arrays of objects (n, d, m, as the loops not swapped would, and as
    ``np.sum(y[n, :] * v[:, d])`` or ``math.fsum`` per element do), and every other case that failed was summed in
    another order, as BLAS, np.sum's pairwise sums and math.fsum's exact sums add floats (a learner's own n, d, m
    loops, adding one term at a time, fail the traced case alone)."""
    traced_name = _(TRACED_CASE)
    others = [message for name, ok, message in report.cases if not ok and name != traced_name]
    if not seen_traced.get("like_matmul") or not others or not all(OTHER_ORDER.message() in m for m in others):
        return
    for j, (name, ok, _message) in enumerate(report.cases):
        if name == traced_name and not ok:
            text = _("{values} {seen}: {why}").format(
                values=seen_traced["values"], seen=seen_traced["seen"], why=MATMUL.message()
            )
            report.cases[j] = (name, False, text)


def _within_rounding(a, expected, y, v) -> bool:
    """True when ``a`` differs from ``expected = Y V`` by no more than float64 rounding in some order of the sums.

    Any order of the ``M`` additions of ``A[n, d]`` is within ``M`` units of rounding of ``sum_m |Y[n, m] V[m, d]|``
    of the exact sum, so two orders are within twice that (with margin).
    """
    M = y.shape[1]
    bound = 4 * (M + 1) * np.finfo(np.float64).eps * (np.abs(y) @ np.abs(v))  # (N, Dv)
    with np.errstate(invalid="ignore"):
        return bool(np.all((np.abs(a - expected) <= bound) | (np.isnan(a) & np.isnan(expected))))
