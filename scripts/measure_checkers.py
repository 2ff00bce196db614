"""Measure the exercise checkers on a set of learner-style solutions written from the prompts alone.

    python scripts/measure_checkers.py measurements/issue34/set4 [--details] [--skip-predictions]

Each ``set*.py`` of the folder holds ``SOLUTIONS = [(exercise, "correct" | "wrong", description, answer)]`` and
``PREDICTIONS = [(cell, value, "correct" | "wrong", description)]`` (``cell`` is ``"P<chapter>"``), as the folder's
README says. Every solution goes through its exercise's checker; every prediction through its chapter's
'Predict, then check' cell, run in a kernel (nbclient) after the cells above it. The script prints, per exercise,
how many correct solutions were accepted and how many wrong ones were caught and named (a mistake named by a
"looks like ..." message, or for a prediction a misconception sentence), then with ``--details`` every
solution's verdict and what the checker said, for a person to judge whether the name fits the description.

The set is kept out of the tests: the checkers are tuned on the tests' own wrong solutions, and measured here.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_sets(folder: Path):
    solutions, predictions = [], []
    sys.path.insert(0, str(folder))
    for path in sorted(folder.glob("set*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        solutions += [(path.stem, *s) for s in module.SOLUTIONS]
        predictions += [(path.stem, *p) for p in getattr(module, "PREDICTIONS", [])]
    return solutions, predictions


RECIPE = "divide max |out - A| by max |naive - A|"  # chapter 9's message when no mistake explains the ratios


def diagnosed(message: str) -> bool:
    """Whether a failure message says what was done wrong, beyond the requirement and the numbers: a named
    mistake ("looks like ..."), a hint on a raised exception, a diagnosis of its own after the numbers (chapter 9's
    ratios, chapter 11's masked row), or the lower-precision hint."""
    if "looks like" in message or "they agree to" in message:
        return True
    if message.startswith("raised "):
        return message.rstrip().endswith(")") and " (" in message
    if RECIPE in message or ", got " not in message:
        return False
    tail = message.split(", got ", 1)[1]
    tail = re.sub(r"; largest difference .*?\)", "", tail)
    tail = re.sub(r"; got \S+ at \[[^\]]*\] where \S+ was expected", "", tail)
    return ": " in tail


def judge_solutions(solutions):
    from flashmath import exercises

    by_number = {e.number: e for e in exercises.EXERCISES}
    rows = []
    for source, number, kind, description, answer in solutions:
        e = by_number[number]
        with contextlib.redirect_stdout(io.StringIO()):
            report = e.checker(answer)
        failed = [(name, msg) for name, ok, msg in report.cases if not ok]
        names = sorted({m.name for m in e.mistakes for _, msg in failed if f"looks like {m.name}" in msg})
        said = [msg for _, msg in failed if e.quiz or diagnosed(msg)]
        rows.append((number, kind, description, report.passed, names, bool(said), failed, source))
    return rows


def prediction_cells():
    """``{"P<chapter>": (notebook, index of the cell)}``: the cells that call check_prediction."""
    import nbformat

    cells = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and "check_prediction(" in cell.source:
                cells[f"P{int(path.name[:2])}"] = (path, i)
    return cells


def judge_predictions(predictions):
    import nbformat
    from nbclient import NotebookClient

    by_cell = defaultdict(list)
    for row in predictions:
        by_cell[row[1]].append(row)
    cells, rows = prediction_cells(), []
    for key, items in sorted(by_cell.items()):
        path, index = cells[key]
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
            for i in range(index):
                if nb.cells[i].cell_type == "code":
                    client.execute_cell(nb.cells[i], i)
            original = nb.cells[index].source
            for source, _, value, kind, description in items:
                cell = nb.cells[index]  # nbclient writes a cell's outputs into the notebook's own cell
                cell.source = re.sub(
                    r"^my_prediction = \.\.\.", f"my_prediction = float({str(value)!r})", original, flags=re.M
                )
                cell.outputs = []
                client.execute_cell(cell, index)
                text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
                right = ": right." in text
                verdict = text.split(": not quite.", 1)[1].strip() if ": not quite." in text else ""
                why_line = re.search(r'why="([^"]*)', original)
                why = why_line.group(1).split(" ")[0] if why_line else ""
                named = bool(verdict) and not (why and verdict.startswith(why))
                rows.append((key, kind, f"{value!r}: {description}", right, [], named, [("", text.strip())], source))
    return rows


def summary(rows, title):
    table = defaultdict(lambda: [0, 0, 0, 0, 0])  # correct, accepted, wrong, caught, named
    for number, kind, _, passed, names, said, _, _ in rows:
        t = table[number]
        if kind == "correct":
            t[0] += 1
            t[1] += passed
        else:
            t[2] += 1
            t[3] += not passed
            t[4] += (not passed) and (bool(names) or said)
    print(f"\n{title}\n| exercise | correct accepted | wrong caught | wrong named |\n|---|---|---|---|")
    total = [0] * 5
    for number in sorted(table, key=lambda n: [int(x) for x in re.findall(r"\d+", n)]):
        t = table[number]
        total = [a + b for a, b in zip(total, t, strict=True)]
        print(f"| {number} | {t[1]} / {t[0]} | {t[3]} / {t[2]} | {t[4]} / {t[2]} |")
    print(f"| all | {total[1]} / {total[0]} | {total[3]} / {total[2]} | {total[4]} / {total[2]} |")
    return total


def details(rows):
    for number, kind, description, passed, names, _said, failed, source in rows:
        verdict = ("accepted" if passed else "REJECTED") if kind == "correct" else ("MISSED" if passed else "caught")
        print(f"\n[{number} {kind} {verdict}] ({source}) {description}")
        if names:
            print(f"    named: {'; '.join(names)}")
        for name, msg in failed[:4]:
            print(f"    {name}: {msg[:400]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--details", action="store_true", help="print every solution's verdict and messages")
    parser.add_argument("--skip-predictions", action="store_true", help="leave the prediction cells out")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_INTERPRET", "1")
    solutions, predictions = load_sets(args.folder.resolve())
    rows = judge_solutions(solutions)
    summary(rows, "Checkers")
    prediction_rows = [] if args.skip_predictions else judge_predictions(predictions)
    if prediction_rows:
        summary(prediction_rows, "Predictions")
    if args.details:
        details(rows + prediction_rows)


if __name__ == "__main__":
    main()
