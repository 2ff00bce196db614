"""Checkers for the chapter exercises: they run the learner's function on edge cases and say what failed.

A checker never raises: an exception in the learner's code is reported as a failed case with its message.
It returns a :class:`CheckReport`, whose text (one line per case) is what a notebook shows. The edge cases
are the classic mistakes: forgetting to subtract the max, a fully masked row, NaN turned into 0, float16
overflow, reading the input more than once.

Solutions live in :mod:`flashmath.solutions`, apart from the exercises.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from flashmath.softmax import merge, online_normalizer, safe_softmax

__all__ = ["CheckReport", "check_score_row", "check_safe_softmax", "check_online_normalizer", "check_merge",
           "OnePassVector", "check_attention", "check_loop_swap", "check_one_loop_step"]

PASS, FAIL = "PASS", "FAIL"


@dataclass
class CheckReport:
    """The outcome of a checker: one ``(name, ok, message)`` per case."""

    title: str
    cases: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every case passed (and there was at least one)."""
        return bool(self.cases) and all(ok for _, ok, _ in self.cases)

    def add(self, name: str, ok: bool, message: str = "") -> None:
        self.cases.append((name, bool(ok), message))

    def __repr__(self) -> str:
        n_ok = sum(ok for _, ok, _ in self.cases)
        lines = [f"{self.title}: {n_ok} of {len(self.cases)} cases passed"]
        for name, ok, message in self.cases:
            lines.append(f"  {PASS if ok else FAIL}  {name}" + ("" if ok or not message else f": {message}"))
        if self.passed:
            lines.append("All good.")
        return "\n".join(lines)


def _fmt(a) -> str:
    """An array for a message: in full when it has at most 8 numbers, else its shape and its first values."""
    a = np.asarray(a, dtype=np.float64)
    if a.size <= 8:
        return np.array2string(a, precision=4, separator=", ").replace("\n", "")  # one line
    first = np.array2string(a.ravel()[:4], precision=4, separator=", ")[:-1]  # "[a, b, c, d"
    return f"an array of shape {a.shape} starting {first}, ...]"


def _run(report: CheckReport, name: str, fn, *args):
    """Call ``fn(*args)``; on an exception record a failure and return None."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow warnings would print temporary paths
            return fn(*args), True
    except NotImplementedError:
        report.add(name, False, "not implemented yet")
    except Exception as exc:  # the learner's code may raise anything; report it, don't propagate
        report.add(name, False, f"raised {type(exc).__name__}: {exc}")
    return None, False


def check_score_row(fn) -> CheckReport:
    """Check a learner's ``fn(q_n, K) -> x`` with ``x_m = q_n . K[m] / sqrt(D)`` (chapter 0).

    Cases: a small query and keys, ``D = 1``, a single key, a real head from :func:`flashmath.data.load_heads`.
    """
    from flashmath.data import load_heads

    report = CheckReport("check_score_row")
    rng = np.random.default_rng(0)
    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    cases = [
        ("a small query (D = 3) against 4 keys", rng.normal(size=3), rng.normal(size=(4, 3))),
        ("D = 1 (the scale is 1)", np.array([2.0]), np.array([[1.0], [-3.0]])),
        ("a single key (M = 1)", rng.normal(size=5), rng.normal(size=(1, 5))),
        ("a real head (D = 32: did you divide by sqrt(D)?)", heads.q[layer, head, n].astype(np.float64),
         heads.k[layer, head].astype(np.float64)),
    ]
    for name, q_n, keys in cases:
        out, ok = _run(report, name, fn, q_n.copy(), keys.copy())
        if not ok:
            continue
        expected = keys @ q_n / np.sqrt(q_n.shape[0])
        x = np.asarray(out, dtype=np.float64) if out is not None else None
        if x is None or x.shape != expected.shape:
            report.add(name, False, f"expected shape {expected.shape} (one score per key), "
                                    f"got {None if x is None else x.shape}")
        elif np.allclose(x, expected * np.sqrt(q_n.shape[0]), rtol=1e-9) and q_n.shape[0] > 1:
            report.add(name, False, "the scores are sqrt(D) too large: divide by sqrt(D)")
        elif not np.allclose(x, expected, rtol=1e-9, atol=1e-12):
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(x)}{_error_note(x, expected)}")
        else:
            report.add(name, True)
    return report


def _softmax_cases():
    return [
        ("a small vector", np.array([1.0, 2.0, 3.0, 0.5])),
        ("a length-1 vector", np.array([3.0])),
        ("all-equal values", np.full(5, 7.0)),
        ("values of 1e4 (exp overflows unless you subtract the max)", np.array([1e4, 1e4 - 1.0, -1e4])),
        ("-inf entries (masked positions get probability 0)", np.array([0.5, -np.inf, 1.5, -np.inf])),
        ("a fully masked row (all -inf): expected zeros", np.full(3, -np.inf)),
        ("NaN propagates (never silently 0)", np.array([1.0, np.nan, 2.0])),
        ("float16 input of 20 (exp(20) overflows float16)", np.array([20.0, 19.0, 0.0], dtype=np.float16)),
    ]


def check_safe_softmax(fn) -> CheckReport:
    """Check a learner's ``fn(x) -> probabilities`` for 1-D ``x`` against :func:`flashmath.safe_softmax`.

    Cases: a small vector, length 1, all-equal values, values of 1e4, ``-inf`` entries, a fully masked row
    (zeros expected), NaN (NaN expected), float16 input (float16 output, no overflow).
    """
    report = CheckReport("check_safe_softmax")
    for name, x in _softmax_cases():
        x_before = x.copy()
        y, ok = _run(report, name, fn, x)
        if not ok:
            continue
        expected = safe_softmax(x)
        y = np.asarray(y)
        if not np.array_equal(x, x_before, equal_nan=True):
            report.add(name, False, "your function modified its input in place")
        elif y.shape != x.shape:
            report.add(name, False, f"expected shape {x.shape}, got {y.shape}")
        elif np.isnan(expected).all() and not np.isnan(y).all():
            report.add(name, False, f"expected NaN everywhere (NaN in, NaN out), got {_fmt(y)}")
        elif y.dtype != x.dtype:
            report.add(name, False, f"{x.dtype} in should give {x.dtype} out, got {y.dtype}")
        elif not np.allclose(y.astype(np.float64), expected.astype(np.float64), rtol=2e-3 if x.dtype == np.float16
                             else 1e-9, atol=1e-12, equal_nan=True):
            hint = ""
            if np.isnan(y).any() and not np.isnan(expected).any():
                hint = " (NaN: did exp overflow, or -inf - (-inf) happen?)"
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(y)}{hint}{_error_note(y, expected)}")
        else:
            report.add(name, True)
    return report


class OnePassVector:
    """A read-only 1-D sequence that counts how often it is swept and how many elements are read.

    Iterating over it (``for x_i in x``, and so ``max(x)`` or ``sum(x)``) is one pass; indexing counts single
    reads. Converting it to a numpy array raises TypeError: the exercise is to write the loop.
    """

    def __init__(self, values):
        self._values = [float(v) for v in values]
        self.passes = 0
        self.reads = 0

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self):
        self.passes += 1
        for v in self._values:
            self.reads += 1
            yield v

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise TypeError("OnePassVector does not slice: read it element by element in one loop")
        self.reads += 1
        return self._values[i]

    def __array__(self, dtype=None, copy=None):
        raise TypeError("this exercise reads x element by element (for x_i in x), not as a whole numpy array")


def check_online_normalizer(fn) -> CheckReport:
    """Check a learner's one-pass ``fn(x) -> (g, s)`` (running max and sum) for 1-D ``x``.

    ``x`` is passed as a :class:`OnePassVector`, so the checker also reports how many times the function
    read the input: the online normalizer reads every element exactly once.
    """
    report = CheckReport("check_online_normalizer")
    cases = [(name, x) for name, x in _softmax_cases() if x.dtype != np.float16]
    cases = [(("a fully masked row (all -inf)" if np.all(x == -np.inf) else name), x) for name, x in cases]
    for name, x in cases:
        vec = OnePassVector(x)
        out, ok = _run(report, name, fn, vec)
        if not ok:
            continue
        state = _pair(report, name, out)
        if state is None:
            continue
        g, s = state
        g_ref, s_ref = (float(v) for v in online_normalizer(x))
        if vec.reads > len(x) or vec.passes > 1:
            sweeps = f" in {vec.passes} passes" if vec.passes > 1 else ""
            report.add(name, False, f"read {vec.reads} elements of a vector of length {len(x)}{sweeps}; "
                                    f"one pass reads each element once")
        elif not (_close(g, g_ref) and _close(s, s_ref)):
            report.add(name, False, _state_message(g, s, g_ref, s_ref))
        else:
            report.add(name, True)
    return report


def _pair(report: CheckReport, name: str, out):
    """``out`` as a pair of floats ``(g, s)``, or None after recording a failure that says what came back."""
    try:
        g, s = (float(v) for v in out)
    except Exception:
        report.add(name, False, f"expected a pair (g, s), got {out!r}")
        return None
    return g, s


def _state_message(g, s, g_ref, s_ref) -> str:
    """What is wrong with a learner's ``(g, s)``, with a hint for the two classic traps."""
    message = f"expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})"
    if np.isnan(g_ref) and not np.isnan(g):
        message += (": a NaN went missing. Python's max(1.0, nan) returns 1.0 (every comparison with NaN is "
                    "False); test with math.isnan, or use np.maximum, which propagates NaN")
    elif g_ref == -np.inf and np.isnan(s) and not np.isnan(s_ref):
        message += (": -inf - (-inf) is NaN. While the max is still -inf nothing has been seen, so keep "
                    "s = 0 instead of computing exp(g_old - g_new)")
    return message


def _error_note(actual, expected) -> str:
    """Where two arrays of one shape differ most, e.g. '; largest difference 2.1e-08 at [0, 3] (...)'.

    When they agree to 1e-3 relative (they print alike) it adds a hint: was part of it computed in float32?
    Empty when the shapes differ or nothing finite differs.
    """
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return ""
    note = ""
    nan_moved = np.argwhere(np.isnan(actual) != np.isnan(expected))
    if nan_moved.size:
        where = tuple(nan_moved[0])
        note = f"; got {actual[where]:.6g} at {_at(where)} where {expected[where]:.6g} was expected"
    finite = np.isfinite(actual) & np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(actual - expected), 0.0)
    if not finite.any() or diff.max() == 0 or not np.isfinite(diff.max()):
        return note
    where = np.unravel_index(np.argmax(diff), diff.shape)
    note += (f"; largest difference {diff[where]:.3g} at {_at(where)} "
             f"(expected {expected[where]:.17g}, got {actual[where]:.17g})")
    if np.allclose(actual[finite], expected[finite], rtol=1e-3, atol=1e-6):
        err = np.max(diff[finite] / np.maximum(np.abs(expected[finite]), 1e-300))
        note += (f": they agree to {err:.1e} relative. Was part of it computed in a lower precision than "
                 f"float64, such as float32 (about 1e-7 relative)? Compute in float64")
    return note


def _at(index) -> str:
    """An array index for a message: ``[1, 2]``."""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def check_merge(fn) -> CheckReport:
    """Check a learner's ``fn(g1, s1, g2, s2) -> (g, s)`` against :func:`flashmath.merge`.

    Cases: two halves of a vector give the state of the whole; the identity ``(-inf, 0)`` on either side;
    both parts empty; order does not matter; parts whose maxima differ by 1e4; NaN in either max or in a sum.
    """
    report = CheckReport("check_merge")
    rng = np.random.default_rng(0)
    x = rng.normal(size=10)
    left, right = online_normalizer(x[:4]), online_normalizer(x[4:])
    cases = [
        ("two halves give the whole vector's state", (*left, *right)),
        ("the identity (-inf, 0) on the left", (-np.inf, 0.0, *right)),
        ("the identity (-inf, 0) on the right", (*left, -np.inf, 0.0)),
        ("both parts fully masked, (-inf, 0) each", (-np.inf, 0.0, -np.inf, 0.0)),
        ("the other order", (*right, *left)),
        ("maxima 1e4 apart (no overflow)", (1e4, 2.0, 0.0, 3.0)),
        ("NaN in the first part's max propagates", (np.nan, 1.0, 0.0, 1.0)),
        ("NaN in the second part's max propagates", (0.0, 1.0, np.nan, 1.0)),
        ("NaN in a sum propagates", (0.0, np.nan, -1.0, 1.0)),
    ]
    for name, args in cases:
        out, ok = _run(report, name, fn, *(float(a) for a in args))
        if not ok:
            continue
        state = _pair(report, name, out)
        if state is None:
            continue
        g, s = state
        g_ref, s_ref = (float(v) for v in merge(*args))
        if _close(g, g_ref) and _close(s, s_ref):
            report.add(name, True)
        else:
            report.add(name, False, _state_message(g, s, g_ref, s_ref))
    return report


def _close(a: float, b: float) -> bool:
    if np.isnan(b):
        return bool(np.isnan(a))
    if np.isinf(b):
        return a == b
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-12))


# ----------------------------------------------------------------------------------------------------------------
# Chapters 3-5
# ----------------------------------------------------------------------------------------------------------------


def _attention_direct(q, k, v, axis=-1, scale=None):
    """softmax(Q K^T * scale) V in float64 (``scale`` None: ``1 / sqrt(D)``); other ``axis`` or ``scale`` values give
    the classic wrong variants."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    x = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., N, M)
    x = x * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    return np.matmul(safe_softmax(x, axis=axis), v)  # (..., N, Dv)


def _named_mistake(a, mistakes) -> str | None:
    """The message of the first ``(wrong answer, message)`` in ``mistakes`` that ``a`` matches, or None."""
    return next((message for wrong, message in mistakes if np.allclose(a, wrong, rtol=1e-9, atol=1e-12)), None)


def _attention_mistakes(q, k, v):
    """The classic wrong answers of chapter 3, each with what went wrong: ``[(wrong A, message)]``."""
    N, D, M, Dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    right = 1 / np.sqrt(D)
    scales = [
        (1.0, "this is softmax(Q K^T) V: divide the scores by sqrt(D)"),
        (1 / np.sqrt(M), f"the scores were divided by sqrt(M) = sqrt({M}), M the number of keys: divide by sqrt(D), "
                         f"D = {D} the width of q and k"),
        (1 / D, f"the scores were divided by D = {D}: divide by sqrt(D)"),
        (1 / np.sqrt(Dv), f"the scores were divided by sqrt({Dv}), the width of V: divide by sqrt(D), D = {D} the "
                          f"width of q and k"),
    ]
    mistakes = [(_attention_direct(q, k, v, scale=scale), message) for scale, message in scales
                if not np.isclose(scale, right, rtol=1e-12)]
    if N > 1:
        mistakes.append((_attention_direct(q, k, v, axis=-2), "the softmax normalised over the queries: each row of X "
                         "(one query, all keys) must sum to 1, so normalise along the last axis"))
    else:  # over one query every weight is exp(0) / 1 = 1
        mistakes.append((_attention_direct(q, k, v, axis=-2), "the softmax normalised over the queries: with one query "
                         "(N = 1) every weight is then 1 and A is the sum of the rows of V. Each row of X (one query, "
                         "all keys) must sum to 1, so normalise along the last axis"))
    return mistakes


def check_attention(fn) -> CheckReport:
    """Check a learner's ``fn(q, k, v) -> A = softmax(Q K^T / sqrt(D)) V`` for ``q (..., N, D)`` (chapter 3).

    Cases: ``N != M``, ``N = 1`` (decoding with a KV cache), ``D = 1``, values of another width, batch and head
    dimensions ``(B, H, N, D)``, a real head (the scale matters), large scores (the softmax must be safe). Named
    mistakes: no scale or the scale ``1 / sqrt(M)``, ``1 / D`` or ``1 / sqrt(Dv)`` instead of ``1 / sqrt(D)``;
    softmax over the queries instead of the keys (with ``N = 1``: all weights 1); ``k.T`` on a 4-D array; an
    answer computed in float32 (its largest difference is reported).
    """
    from flashmath.data import load_heads

    report = CheckReport("check_attention")
    rng = np.random.default_rng(3)
    heads = load_heads()

    def qkv(N, M, D, Dv=None, batch=(), size=1.0):
        Dv = D if Dv is None else Dv
        return tuple(size * rng.standard_normal(batch + shape) for shape in ((N, D), (M, D), (M, Dv)))

    cases = [
        ("N != M: 5 queries, 7 keys, D = 4", qkv(5, 7, 4)),
        ("N = 1: one new token against a KV cache of 9 entries", qkv(1, 9, 4)),
        ("D = 1 (the scale is 1)", qkv(4, 6, 1)),
        ("values of another width (V is M x 3, D = 4)", qkv(4, 6, 4, 3)),
        ("batch and heads, shape (B, H, N, D) = (2, 3, 4, 5): transpose only the last two axes of k",
         qkv(4, 6, 5, batch=(2, 3))),
        ("a real head (layer 0, head 0, D = 32)",
         tuple(a[0, 0].astype(np.float64) for a in (heads.q, heads.k, heads.v))),
        ("large scores (entries of size 30): the softmax must subtract the row max", qkv(3, 5, 4, size=30.0)),
    ]
    for name, (q, k, v) in cases:
        before = [a.copy() for a in (q, k, v)]
        out, ok = _run(report, name, fn, q, k, v)
        if not ok:
            continue
        expected = _attention_direct(q, k, v)
        a = None if out is None else np.asarray(out, dtype=np.float64)
        if any(not np.array_equal(x, b) for x, b in zip((q, k, v), before)):
            report.add(name, False, "your function modified its input in place")
        elif a is None or a.shape != expected.shape:
            report.add(name, False, f"expected shape {expected.shape} = (..., N, Dv), "
                                    f"got {None if a is None else a.shape}")
        elif np.allclose(a, expected, rtol=1e-9, atol=1e-12):
            report.add(name, True)
        elif named := _named_mistake(a, _attention_mistakes(q, k, v)):
            report.add(name, False, named)
        elif np.isnan(a).any():
            report.add(name, False, "got NaN: did exp overflow? subtract each row's max before exp")
        else:
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(a)}{_error_note(a, expected)}")
    return report


def _order_case(M: int = 64):
    """``(y (4, M), v (M, 1))`` whose sums give their bits only when added strictly in the order ``m = 0, 1, ...``.

    Rows 0-2 add ``2^53``, then ``M - 4`` terms in ``(0.5, 1)``, then ``-2^53``, then ``-r`` and ``p``, where ``p`` is
    an inexact product and ``r`` its rounded value. In order, each small term alone is below half a unit in the last
    place of ``2^53`` and vanishes, ``-2^53`` brings the sum back to exactly 0, and ``-r + r = 0``: the answer is 0.
    Any other grouping (BLAS or SIMD blocks, pairwise sums, ``math.fsum``, a reversed loop) adds two or more small
    terms together first and keeps them; a fused multiply-add keeps the exact ``p`` and leaves ``p - r != 0``. Row 3
    holds ordinary weights in ``[0, 1)`` and skips the ``2^53`` terms, so that the answer is not all zeros.
    """
    big = 2.0 ** 53
    w = 1 + 2.0 ** -30
    small = 0.5 + (np.arange(M - 4) % 31 + 1) / 64  # each in (0.5, 1): one alone vanishes into 2^53, two do not
    v = np.concatenate([[big], small, [-big, -1.0, w]])[:, None]  # (M, 1)
    rows = []
    for j in (1, 3, 5):
        y_last = 1 + j * 2.0 ** -30
        r = y_last * w  # rounded: the exact product has j * 2^-60 more, which only a fused multiply-add keeps
        rows.append(np.concatenate([np.ones(M - 2), [r, y_last]]))  # Y[n, M-2] V[M-2] = -r exactly
    weights = np.random.default_rng(4).random(M)
    weights[[0, M - 3]] = 0.0  # row 3 skips the 2^53 terms
    return np.array(rows + [weights]), v


def check_loop_swap(fn) -> CheckReport:
    """Check a learner's ``fn(y, v) -> A = Y V`` written with loops in the order ``n, m, d`` (chapter 4).

    The result must be bitwise equal to the order ``n, d, m`` (:func:`flashmath.matmul_ndm`): every ``A[n, d]``
    receives its terms in the order ``m = 0, 1, ..., M - 1``, one multiply and one add each. A sum in another
    order, or BLAS (``@``, ``np.dot``, ``np.einsum``), rounds differently: a case with terms ``[1, 1e16, -1e16]``
    shows the order, and a case of 64 terms (:func:`_order_case`) catches blocked, pairwise, exact (``math.fsum``)
    and fused multiply-add sums. A BLAS that sums strictly in order without fused multiply-adds would pass, and
    rightly: it then does the same additions.
    """
    from flashmath.attention import matmul_ndm
    from flashmath.data import load_heads

    report = CheckReport("check_loop_swap")
    rng = np.random.default_rng(4)
    heads = load_heads()
    x = heads.scores(0, 1)[:4]  # (4, T): four real score rows
    cases = [
        ("a small product: N = 3, M = 5, Dv = 4", rng.random((3, 5)), rng.standard_normal((5, 4))),
        ("one row (N = 1)", rng.random((1, 6)), rng.standard_normal((6, 3))),
        ("one key (M = 1)", rng.random((3, 1)), rng.standard_normal((1, 4))),
        ("one output dimension (Dv = 1)", rng.random((3, 5)), rng.standard_normal((5, 1))),
        ("order-sensitive terms [1, 1e16, -1e16]: added from m = 0 they give 0", np.ones((1, 3)),
         np.array([[1.0, 2.0], [1e16, 1.0], [-1e16, 3.0]])),
        ("order-sensitive sums of 64 terms: 2^53, 60 terms below 1 that vanish into it in order, -2^53, ...",
         *_order_case()),
        ("real probabilities: 4 rows of Y and V of a head (M = 46, Dv = 32)", safe_softmax(x),
         heads.v[0, 1].astype(np.float64)),
    ]
    for name, y, v in cases:
        before = (y.copy(), v.copy())
        out, ok = _run(report, name, fn, y, v)
        if not ok:
            continue
        expected = matmul_ndm(y, v)
        try:
            a = np.asarray(out, dtype=np.float64)
        except Exception:
            report.add(name, False, f"expected an (N, Dv) array or nested list of numbers, got {type(out).__name__}")
            continue
        if not (np.array_equal(y, before[0]) and np.array_equal(v, before[1])):
            report.add(name, False, "your function modified its input in place")
        elif a.shape != expected.shape:
            report.add(name, False, f"expected shape {expected.shape} = (N, Dv), got {a.shape}")
        elif np.array_equal(a, expected):
            report.add(name, True)
        elif _within_rounding(a, expected, y, v):
            diff = float(np.max(np.abs(a - expected)))
            report.add(name, False, f"equal to within rounding (largest difference {diff:.3g}) but not bit for bit: "
                                    "a sum matches bit for bit only when it adds the terms of each A[n, d] strictly "
                                    "in the order m = 0, 1, ..., M-1, one multiply and one add each; @, np.dot and "
                                    "np.einsum (BLAS or SIMD kernels: blocks, fused multiply-adds), math.fsum and a "
                                    "reversed loop round differently")
        else:
            hint = ""
            if np.array_equal(a, expected[::-1]) or a.shape == expected.T.shape:
                hint = " (rows or axes swapped?)"
            elif np.array_equal(a, np.zeros_like(a)) and not np.array_equal(expected, np.zeros_like(expected)):
                hint = " (all zeros: did the loop run, and did you return the accumulated array?)"
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(a)}{hint}{_error_note(a, expected)}")
    return report


def _within_rounding(a, expected, y, v) -> bool:
    """True when ``a`` differs from ``expected = Y V`` by no more than float64 rounding in some order of the sums.

    Any order of the ``M`` additions of ``A[n, d]`` is within ``M`` units of rounding of ``sum_m |Y[n, m] V[m, d]|``
    of the exact sum, so two orders are within twice that (with margin).
    """
    M = y.shape[1]
    bound = 4 * (M + 1) * np.finfo(np.float64).eps * (np.abs(y) @ np.abs(v))  # (N, Dv)
    with np.errstate(invalid="ignore"):
        return bool(np.all((np.abs(a - expected) <= bound) | (np.isnan(a) & np.isnan(expected))))


def _one_loop_step_reference(g_prev, s_prev, a_prev, x_m, v_m):
    """One step of the chapter 5 recurrence, for the checker: (g_m, s_m, A'_m)."""
    g, s = (float(t) for t in merge(g_prev, s_prev, x_m, 1.0))
    if g == -np.inf:  # nothing seen yet (only masked keys): the empty state
        return g, 0.0, np.zeros_like(np.asarray(a_prev, dtype=np.float64))
    correction = s_prev * np.exp(g_prev - g) / s  # s_{m-1} exp(g_{m-1} - g_m) / s_m
    weight = np.exp(x_m - g) / s  # exp(x_m - g_m) / s_m
    return g, s, np.asarray(a_prev, dtype=np.float64) * correction + weight * np.asarray(v_m, dtype=np.float64)


def _one_loop_step_mistakes(g_prev, s_prev, a_prev, x_m, v_m):
    """The classic wrong ``A'_m`` of chapter 5, each with what went wrong: ``[(wrong A'_m, message)]``.

    Checked in this order, after the right answer; the first match names the mistake.
    """
    g, s, a_ref = _one_loop_step_reference(g_prev, s_prev, a_prev, x_m, v_m)
    if not np.isfinite(g) or s == 0:
        return []
    a_prev, v_m = np.asarray(a_prev, dtype=np.float64), np.asarray(v_m, dtype=np.float64)
    rescale = np.exp(g_prev - g)  # exp(g_{m-1} - g_m)
    e = np.exp(x_m - g)  # exp(x_m - g_m)
    rule = "A'_m = A'_{m-1} s_{m-1} exp(g_{m-1} - g_m) / s_m + exp(x_m - g_m) / s_m V_m"
    return [
        (s * a_ref, "this is s_m A'_m, the unnormalised numerator (chapter 7): divide by s_m"),
        (a_ref / s, f"divided by s_m twice: {rule} divides each term by s_m once"),
        (a_prev + e / s * v_m, "A'_{m-1} was not corrected: it must be multiplied by s_{m-1} exp(g_{m-1} - g_m) / s_m, "
                               "which is below 1 even when the max holds (s_{m-1} < s_m): the old average gives up "
                               "the weight the new key takes"),
        (a_prev * rescale + e * v_m, "A'_{m-1} exp(g_{m-1} - g_m) + exp(x_m - g_m) V_m is the update of the "
                                     "unnormalised numerator s A' of FlashAttention-2 (chapter 7); here A' is "
                                     f"normalised at every step: {rule}"),
        ((a_prev * s_prev + e * v_m) / s, "exp(g_{m-1} - g_m) is missing: when the max jumps, A'_{m-1} must be "
                                          "multiplied by s_{m-1} exp(g_{m-1} - g_m) / s_m"),
        ((a_prev * rescale + e * v_m) / s, "s_{m-1} is missing: A'_{m-1} is an average over a weight of s_{m-1}, so it "
                                           "must be multiplied by s_{m-1} exp(g_{m-1} - g_m) / s_m"),
    ]


def check_one_loop_step(fn) -> CheckReport:
    """Check a learner's ``fn(g_prev, s_prev, a_prev, x_m, v_m) -> (g_m, s_m, a_m)``, one step of chapter 5.

    ``A'_m = A'_{m-1} s_{m-1} e^{g_{m-1} - g_m} / s_m + e^{x_m - g_m} / s_m V_m`` with ``g_m``, ``s_m`` of online
    softmax. Cases: the first key from the empty state ``(-inf, 0, 0)``, a max that holds, a max that jumps by
    3 and by 1000 (no overflow), and a whole real score row folded key by key (it must give the attention
    output). Named mistakes: returning ``s_m A'_m`` (not divided); dividing by ``s_m`` twice; no correction of
    ``A'_{m-1}`` at all; FlashAttention-2's update of the unnormalised ``s A'``; a correction without
    ``exp(g_{m-1} - g_m)`` or without ``s_{m-1}``; else, in a case where the max jumps, the correction in general.
    """
    from flashmath.attention import attention
    from flashmath.data import load_heads

    report = CheckReport("check_one_loop_step")
    v_m = np.array([1.0, -2.0, 0.5])
    a_prev = np.array([0.2, 0.4, -0.6])
    cases = [
        ("the first key, from the empty state (g, s, A') = (-inf, 0, 0): expected (x_1, 1, V_1)",
         (-np.inf, 0.0, np.zeros(3), 0.7, v_m)),
        ("the max holds (x_m = 0.5 < g_{m-1} = 2)", (2.0, 1.5, a_prev, 0.5, v_m)),
        ("the max jumps by 3 (x_m = 5 > g_{m-1} = 2)", (2.0, 1.5, a_prev, 5.0, v_m)),
        ("the max jumps by 1000 (no overflow: never take exp of a score alone)", (0.0, 2.0, a_prev, 1000.0, v_m)),
        ("a key far below the max (x_m = g_{m-1} - 1000: weight 0)", (3.0, 2.0, a_prev, -997.0, v_m)),
    ]
    for name, args in cases:
        out, ok = _run(report, name, fn, *(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        if not ok:
            continue
        try:
            g, s, a = out
            g, s, a = float(g), float(s), np.asarray(a, dtype=np.float64)
        except Exception:
            report.add(name, False, f"expected a triple (g_m, s_m, A'_m), got {out!r}")
            continue
        g_ref, s_ref, a_ref = _one_loop_step_reference(*args)
        if not (_close(g, g_ref) and _close(s, s_ref)):
            report.add(name, False, f"expected (g_m, s_m) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})")
        elif a.shape != a_ref.shape:
            report.add(name, False, f"expected A'_m of shape {a_ref.shape}, got {a.shape}")
        elif np.allclose(a, a_ref, rtol=1e-9, atol=1e-12):
            report.add(name, True)
        elif named := _named_mistake(a, _one_loop_step_mistakes(*args)):
            report.add(name, False, f"expected A'_m = {_fmt(a_ref)}, got {_fmt(a)}: {named}")
        elif "jumps" in name:
            report.add(name, False, f"expected A'_m = {_fmt(a_ref)}, got {_fmt(a)}{_error_note(a, a_ref)}: when the "
                                    "max jumps, A'_{m-1} must be multiplied by s_{m-1} exp(g_{m-1} - g_m) / s_m")
        else:
            report.add(name, False, f"expected A'_m = {_fmt(a_ref)}, got {_fmt(a)}{_error_note(a, a_ref)}")

    name = "a real score row folded key by key (46 keys) gives the attention output"
    heads = load_heads()
    layer, head, n = heads.demo_rows[0]
    q, k, v = (arr[layer, head].astype(np.float64) for arr in (heads.q, heads.k, heads.v))
    x = heads.score_row(layer, head, n)  # (M,)
    state = (-np.inf, 0.0, np.zeros(v.shape[1]))
    for m in range(x.size):
        state, ok = _run(report, name, fn, *state, float(x[m]), v[m].copy())
        if not ok:
            break
        try:
            g, s, a = state
            state = (float(g), float(s), np.asarray(a, dtype=np.float64))
        except Exception:
            report.add(name, False, f"expected a triple (g_m, s_m, A'_m) at key {m}, got {state!r}")
            ok = False
            break
    if ok:
        expected = attention(q[n:n + 1], k, v)[0]  # (Dv,)
        if np.allclose(state[2], expected, rtol=1e-9, atol=1e-12):
            report.add(name, True)
        else:
            report.add(name, False, f"after all keys expected A = {_fmt(expected)}, got {_fmt(state[2])}"
                                    f"{_error_note(state[2], expected)}")
    return report
