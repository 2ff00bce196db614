"""The package's shape: no import cycle among flashmath modules, no private name imported across modules, and
the algorithms import neither drawing, widgets nor the counters (docs/architecture.md)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "flashmath"

pytestmark = pytest.mark.fast


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache  # parsed once per run (the trees are only read): each test parsed the whole package before
def modules() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, tree: ast.Module, known: set[str]) -> list[tuple[str, str | None, int]]:
    """``[(module, imported name or None, line)]`` for every flashmath import in the module (top level or inside a
    function), relative imports resolved. ``from flashmath import viz`` is the module flashmath.viz."""
    package = name if name in known and any(m.startswith(name + ".") for m in known) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name.startswith("flashmath")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("flashmath"):
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.append((f"{base}.{alias.name}", None, node.lineno))
                else:
                    found.append((base, alias.name, node.lineno))
    return found


def graph() -> dict[str, set[str]]:
    trees = modules()
    known = set(trees)
    edges: dict[str, set[str]] = {name: set() for name in trees}
    for name, tree in trees.items():
        for target, _, _ in imports(name, tree, known):
            if target in known and target != name:
                edges[name].add(target)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph as a list of nodes, or None. Edges into a package's ``__init__`` from its own
    submodules count (they are real cycles at import time); the package ``flashmath`` itself re-exports, so the
    edges *into* ``flashmath`` (only ``from flashmath import x``, resolved to submodules above) do not occur."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_walker_sees_a_cycle_and_a_private_import():
    """The checks below can fail: a made-up package with a cycle and a private import is caught."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    tree = ast.parse("from flashmath.flash import _tile_loop, flash_attention\nfrom flashmath import flash")
    found = imports("flashmath.traffic", tree, {"flashmath", "flashmath.flash", "flashmath.traffic"})
    assert ("flashmath.flash", "_tile_loop", 1) in found and ("flashmath.flash", None, 2) in found


def test_no_import_cycle_among_flashmath_modules():
    edges = graph()
    edges.pop("flashmath", None)  # the package's __init__ only re-exports; nothing inside imports it
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges) or [])}"


def test_no_private_name_imported_across_modules():
    trees = modules()
    known = set(trees)
    crossing = [
        f"{name}:{line} imports {target}.{imported}"
        for name, tree in trees.items()
        for target, imported, line in imports(name, tree, known)
        if imported is not None and imported.startswith("_") and not imported.startswith("__") and target != name
    ]
    assert not crossing, "private names imported across modules:\n" + "\n".join(crossing)


def test_no_private_attribute_of_another_module_is_used():
    """``flash._tile_loop(...)`` after ``from flashmath import flash`` crosses a module boundary just the same."""
    trees = modules()
    known = set(trees)
    crossing = []
    for name, tree in trees.items():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashmath"):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in known:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                crossing.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not crossing, "\n".join(crossing)


ALGORITHMS = (
    "softmax",
    "attention",
    "flash",
    "flash_parallel",
    "splitkv",
    "backward",
    "precision",
    "scaling",
    "masks",
    "inputs",
    "rowstate",
    "tiling",
)


@pytest.mark.parametrize("module", ALGORITHMS)
def test_algorithms_import_neither_drawing_widgets_nor_counters(module):
    trees = modules()
    name = f"flashmath.{module}"
    targets = {target for target, _, _ in imports(name, trees[name], set(trees))}
    forbidden = {
        t
        for t in targets
        if t.startswith(
            ("flashmath.viz", "flashmath.widgets", "flashmath.counting", "flashmath.opcount", "flashmath.traffic")
        )
    }
    third_party = {
        alias.name.split(".")[0]
        for node in ast.walk(trees[name])
        if isinstance(node, (ast.Import,))
        for alias in node.names
    }
    third_party |= {
        (node.module or "").split(".")[0]
        for node in ast.walk(trees[name])
        if isinstance(node, ast.ImportFrom) and not node.level
    }
    assert not forbidden and not third_party & {"matplotlib", "ipywidgets"}, (forbidden, third_party)


@pytest.mark.parametrize("module", ALGORITHMS)
def test_algorithms_take_their_memory_from_outside(module):
    """Counting wraps the algorithms: an algorithm runs on the memory it is given and never builds a counted one
    (only flashmath.counting and flashmath.opcount do)."""
    trees = modules()
    name = f"flashmath.{module}"
    counters = {
        (target, imported)
        for target, imported, _ in imports(name, trees[name], set(trees))
        if target == "flashmath.memory" and imported in ("CountedMemory", "CountedArray", "TrafficCount")
    }
    assert not counters, f"{name} imports the counters of flashmath.memory: {sorted(counters)}"
