"""Helpers shared by the test modules (test modules never import each other: they import this)."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from flashmath.masks import causal_mask

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root."""
TOL = 1e-12
MASKS = ["none", "causal", "top-left", "random"]

HAVE_TRITON = all(importlib.util.find_spec(name) is not None for name in ("torch", "triton"))
"""Whether the triton extra (PyTorch and Triton) is installed."""
needs_triton = pytest.mark.skipif(
    not HAVE_TRITON, reason='the triton extra is not installed (PyTorch and Triton): see README, "The triton extra"'
)


def make(rng, N, M, D, Dv, batch=(), dtype=np.float64):
    """Random ``q (..., N, D)``, ``k (..., M, D)``, ``v (..., M, Dv)`` (standard normal, rounded to ``dtype``)."""
    shapes = (batch + (N, D), batch + (M, D), batch + (M, Dv))  # q, k, v
    return tuple(rng.standard_normal(shape).astype(dtype, copy=False) for shape in shapes)


def max_error(actual, expected) -> float:
    """The largest absolute difference where the reference is finite, after checking that the infinities
    (the logsumexp of fully masked rows) are in the same places."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    assert np.isfinite(actual[finite]).all()
    return float(np.abs(actual[finite] - expected[finite]).max(initial=0.0))


def named(report) -> set:
    """The names of the checker's catalogue of mistakes (``flashmath.exercises.MISTAKES``) that the report's failed
    cases name."""
    from flashmath import exercises

    texts = [msg for _, ok, msg in report.cases if not ok]
    return {m.name for m in exercises.MISTAKES[report.title] if any(m.name in text for text in texts)}


def checker_tests(wrong: dict, also: dict | None = None) -> tuple:
    """The two tests of a chapter's learner-style wrong solutions, for ``wrong = {checker name: {mistake name: a
    learner's wrong solution}}``: each wrong solution fails and is named by its mistake alone (plus, for
    ``also = {(checker, mistake): other names allowed}``, those); every mistake of the checker's catalogue (its
    declaration, ``flashmath.exercises.MISTAKES``) has a wrong solution. The solution, the property cases and an
    unfinished exercise are tested for every declared exercise in ``tests/test_exercises_registry.py``, which also
    finds each checker with a catalogue among the ``WRONG`` dicts of the ``tests/test_exercises*.py`` modules. A test
    module assigns them to names starting with ``test_``, which pytest collects::

        test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = (
            checker_tests(WRONG))
    """
    from flashmath import exercises

    also = also or {}
    cases = [(checker, mistake) for checker, fns in wrong.items() for mistake in fns]

    @pytest.mark.parametrize("checker, mistake", cases, ids=[f"{c}: {m}" for c, m in cases])
    def each_mistake_is_caught_and_named(checker, mistake):
        report = getattr(exercises, checker)(wrong[checker][mistake])
        assert not report.passed, report
        assert "All good." not in repr(report)
        found = named(report)
        assert mistake in found, report
        assert found <= {mistake} | also.get((checker, mistake), set()), (found, report)

    @pytest.mark.parametrize("checker", wrong)
    def every_mistake_in_the_catalogue_has_a_wrong_solution(checker):
        names = [m.name for m in exercises.MISTAKES[checker]]
        assert len(names) == len(set(names)), checker
        assert set(names) == set(wrong[checker])

    return each_mistake_is_caught_and_named, every_mistake_in_the_catalogue_has_a_wrong_solution


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mask_kwargs(kind, N, M, rng):
    """Keyword arguments for the attention functions, and the equivalent (N, M) boolean keep-matrix."""
    if kind == "none":
        return {}, np.ones((N, M), bool)
    if kind == "causal":
        return {"causal": True}, causal_mask(N, M)
    if kind == "top-left":
        keep = causal_mask(N, M, align="top-left")
        return {"mask": keep}, keep
    keep = rng.random((N, M)) < 0.6
    return {"mask": keep}, keep


def assert_close(actual, expected, tol=TOL):
    """Same shape, ``-inf`` at the same places, finite entries within ``tol * (1 + |expected|)``."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    err = np.abs(actual[finite] - expected[finite])
    assert np.all(err <= tol * (1 + np.abs(expected[finite]))), f"max error {err.max() if err.size else 0}"


sizes = st.integers(1, 9)


@st.composite
def problems(draw):
    """A random attention problem: ``(q, k, v, kwargs, keep)`` with a mask of every kind (sparse ones too)."""
    N, M, D, Dv = draw(sizes), draw(sizes), draw(sizes), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([0.1, 1.0, 10.0, 100.0]))
    rng = np.random.default_rng(seed)
    q, k, v = (a * spread for a in make(rng, N, M, D, Dv))
    kind = draw(st.sampled_from(MASKS + ["sparse"]))
    if kind == "sparse":
        keep = rng.random((N, M)) < 0.2
        kwargs = {"mask": keep}
    else:
        kwargs, keep = mask_kwargs(kind, N, M, rng)
    return q, k, v, kwargs, keep


def window_keep(N, M, left, right):
    """FlashAttention's window: key m is seen by query n when n + M - N - left <= m <= n + M - N + right."""
    n, m = np.arange(N)[:, None], np.arange(M)[None, :]
    p = n + M - N
    keep = np.ones((N, M), bool)
    if left is not None:
        keep &= m >= p - left
    if right is not None:
        keep &= m <= p + right
    return keep


def paged_case(rng, seqlens, page_size, H_kv, D, Dv, spare=3):
    """A random physical page pool, a shuffled block table, and the contiguous caches it stands for."""
    n_pages = [-(-n // page_size) for n in seqlens]
    P = sum(n_pages) + spare
    k_pages, v_pages = rng.standard_normal((P, H_kv, page_size, D)), rng.standard_normal((P, H_kv, page_size, Dv))
    order = rng.permutation(P)
    table = np.full((len(seqlens), max(n_pages + [1]) + 1), -1)
    used = 0
    for b, n in enumerate(n_pages):
        table[b, :n] = order[used : used + n]
        used += n
    return k_pages, v_pages, table, np.array(seqlens)


def prediction_cell(path: str, cell_id: str, env: dict, capsys):
    """A notebook's prediction cell (``my_prediction = ...``) as ``run(answer)``: runs it in ``env`` with that
    answer (``...``, the default, keeps the placeholder) and returns what it printed."""
    import nbformat

    cells = nbformat.read(ROOT / "notebooks" / path, as_version=4).cells
    (source,) = [c.source for c in cells if c.get("id") == cell_id]

    def run(answer=...):
        if answer is not ...:
            exec(source.replace("my_prediction = ...", f"my_prediction = {answer!r}"), env)
        else:
            exec(source, env)
        return capsys.readouterr().out

    return run


def assert_prediction_feedback(run, question: str, right, *, why_once: bool = False) -> None:
    """A prediction cell's feedback (``run`` from :func:`prediction_cell`): the right answer gets "right." and the
    question's explanation; each misconception's wrong answer gets "not quite" and its own sentence (and, with
    ``why_once``, not the general explanation after it)."""
    from flashmath.exercises.predict import QUESTIONS

    asked = QUESTIONS[question]
    out = run(right)
    assert ": right." in out and asked.why in out, out
    for wrong, text in asked.misconceptions.items():
        out = run(wrong)
        assert "not quite" in out and text in out, out
        assert not why_once or asked.why not in out, out
