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

__all__ = ["CheckReport", "check_score_row", "check_safe_softmax", "check_online_normalizer", "check_merge", "OnePassVector"]

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
    return np.array2string(np.asarray(a, dtype=np.float64), precision=4, separator=", ", threshold=8)


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
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(x)}")
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
        elif x.dtype == np.float16 and y.dtype != np.float16:
            report.add(name, False, f"float16 in should give float16 out, got {y.dtype}")
        elif not np.allclose(y.astype(np.float64), expected.astype(np.float64), rtol=2e-3 if x.dtype == np.float16
                             else 1e-9, atol=1e-12, equal_nan=True):
            hint = ""
            if np.isnan(y).any() and not np.isnan(expected).any():
                hint = " (NaN: did exp overflow, or -inf - (-inf) happen?)"
            report.add(name, False, f"expected {_fmt(expected)}, got {_fmt(y)}{hint}")
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
    cases = [(("a fully masked row (all -inf): expected (g, s) = (-inf, 0)" if np.all(x == -np.inf) else name), x)
             for name, x in cases]
    for name, x in cases:
        vec = OnePassVector(x)
        out, ok = _run(report, name, fn, vec)
        if not ok:
            continue
        try:
            g, s = (float(v) for v in out)
        except Exception:
            report.add(name, False, f"expected a pair (g, s), got {out!r}")
            continue
        g_ref, s_ref = (float(v) for v in online_normalizer(x))
        if vec.reads > len(x) or vec.passes > 1:
            report.add(name, False, f"read the input {vec.reads} times for a vector of length {len(x)} "
                                    f"({vec.passes} passes); one pass reads each element once")
        elif not (_close(g, g_ref) and _close(s, s_ref)):
            report.add(name, False, f"expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})")
        else:
            report.add(name, True)
    return report


def check_merge(fn) -> CheckReport:
    """Check a learner's ``fn(g1, s1, g2, s2) -> (g, s)`` against :func:`flashmath.merge`.

    Cases: two halves of a vector give the state of the whole; the identity ``(-inf, 0)`` on either side;
    both parts empty; order does not matter; parts whose maxima differ by 1e4.
    """
    report = CheckReport("check_merge")
    rng = np.random.default_rng(0)
    x = rng.normal(size=10)
    left, right = online_normalizer(x[:4]), online_normalizer(x[4:])
    cases = [
        ("two halves give the whole vector's state", (*left, *right)),
        ("the identity (-inf, 0) on the left", (-np.inf, 0.0, *right)),
        ("the identity (-inf, 0) on the right", (*left, -np.inf, 0.0)),
        ("both parts fully masked: expected (-inf, 0), not NaN", (-np.inf, 0.0, -np.inf, 0.0)),
        ("the other order", (*right, *left)),
        ("maxima 1e4 apart (no overflow)", (1e4, 2.0, 0.0, 3.0)),
        ("NaN propagates", (np.nan, 1.0, 0.0, 1.0)),
    ]
    for name, args in cases:
        out, ok = _run(report, name, fn, *(float(a) for a in args))
        if not ok:
            continue
        try:
            g, s = (float(v) for v in out)
        except Exception:
            report.add(name, False, f"expected a pair (g, s), got {out!r}")
            continue
        g_ref, s_ref = (float(v) for v in merge(*args))
        if _close(g, g_ref) and _close(s, s_ref):
            report.add(name, True)
        else:
            report.add(name, False, f"expected (g, s) = ({g_ref:.6g}, {s_ref:.6g}), got ({g:.6g}, {s:.6g})")
    return report


def _close(a: float, b: float) -> bool:
    if np.isnan(b):
        return bool(np.isnan(a))
    if np.isinf(b):
        return a == b
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-12))
