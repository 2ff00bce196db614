"""A checker for exercises whose answer is a tuple of arrays (chapters 6-10): run, compare, name the mistake."""

from __future__ import annotations

import numpy as np

from flashmath.exercises._report import CheckReport, Diagnosis, Mistake, error_note, fmt, run


def as_arrays(out, n: int):
    """``out`` as a tuple of ``n`` float64 arrays (a single array when ``n == 1``), or None."""
    if n > 1 and isinstance(out, np.ndarray):  # one array where a tuple of n was asked for
        return None
    try:
        parts = (out,) if n == 1 else tuple(out)
        if len(parts) != n:
            return None
        arrays = tuple(np.asarray(p, dtype=np.float64) for p in parts)
    except Exception:
        return None
    return arrays[0] if n == 1 else arrays


def same_arrays(a, b, rtol: float = 1e-9) -> bool:
    """Two answers (arrays or tuples of arrays) agree: same shapes, equal to ``rtol``, NaN with NaN."""
    a, b = (x if isinstance(x, tuple) else (x,) for x in (a, b))
    if len(a) != len(b):
        return False
    try:
        return all(np.shape(x) == np.shape(y) and bool(np.allclose(np.asarray(x, dtype=np.float64),
                                                                   np.asarray(y, dtype=np.float64), rtol=rtol,
                                                                   atol=1e-12, equal_nan=True))
                   for x, y in zip(a, b, strict=False))
    except (TypeError, ValueError):
        return False


def check_function(title: str, fn, cases, reference, mistakes, *, n_out: int, names=None,
                   not_answer: Mistake | None = None, hint=None) -> CheckReport:
    """Run ``fn`` on every case ``(name, args)``, compare with ``reference(*args)`` and name the mistake.

    Args:
        n_out: how many arrays ``fn`` returns (1: a single array).
        names: the names of the returned parts, for the messages (e.g. ``("g", "s", "U")``).
        not_answer: the mistake to name when the answer does not have that form.
    """
    report = CheckReport(title)
    answers = []
    for name, args in cases:
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        out, ok = run(report, name, fn, *copies, hint=hint)
        answers.append((ok, as_arrays(out, n_out) if ok else None))
    diagnosis = Diagnosis([args for _, args in cases], [answer for _, answer in answers], mistakes, same_arrays)
    names = names or tuple(f"part {i + 1}" for i in range(n_out))
    for i, ((name, args), (ok, answer)) in enumerate(zip(cases, answers, strict=False)):
        if not ok:
            continue
        if answer is None:
            form = ", ".join(names)
            report.add(name, False, f"expected ({form})" + (f": {not_answer.message()}" if not_answer else ""))
            continue
        expected = as_arrays(reference(*args), n_out)
        if same_arrays(answer, expected):
            report.add(name, True)
            continue
        got = answer if n_out > 1 else (answer,)
        want = expected if n_out > 1 else (expected,)
        wrong = [k for k in range(n_out) if not same_arrays(got[k], want[k])]
        k = wrong[0]
        text = f"expected {names[k]} = {fmt(want[k])}, got {fmt(got[k])}"
        mistake = diagnosis.for_case(i)
        report.add(name, False, f"{text}: {mistake.message()}" if mistake else text + error_note(got[k], want[k]))
    return report.in_order([name for name, _ in cases])
