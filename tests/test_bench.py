"""The slider benchmark covers every widget of the course and runs; it measures, it does not judge speed here."""

import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT

from flashmath import viz, widgets
from flashmath.bench import plain_text, sliders
from flashmath.bench.__main__ import main as bench_main
from flashmath.variants import mask_example

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BUILDERS = set(widgets.__all__) - {"live_widget", "step_slider"}


def widget_calls():
    """(notebook stem, builder) for every ``widgets.<builder>(`` call in the notebooks' code cells."""
    calls = set()
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for builder in re.findall(r"\bwidgets\.(\w+)\(", "".join(cell["source"])):
                    if builder in BUILDERS:  # not helpers such as widgets.tile_sweep_traces
                        calls.add((path.stem, builder))
    return calls


def test_every_widget_of_every_notebook_is_benchmarked():
    cases = {(c.notebook, c.builder) for c in sliders.course_cases()}
    missing = widget_calls() - cases
    assert not missing, f"add these widgets to flashmath/bench/sliders.py course_cases(): {sorted(missing)}"
    assert BUILDERS <= {b for _, b in cases}, "every widget builder of flashmath.widgets is benchmarked"


def test_the_benchmark_runs_and_prints_a_row_per_widget(capsys):
    # one chapter's widgets (the code path is the same for every widget; "0" matched chapters 00-10: minutes)
    assert bench_main(["sliders", "--only", "02_", "--max-moves", "2", "--baseline-samples", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\d\d_\w+ ", line)]
    expected = [c.notebook for c in sliders.course_cases() if "02_" in c.notebook]
    assert expected and [row.split()[0] for row in rows] == expected
    for row in rows:
        assert re.search(r"\|\s+[\d.]+\s+[\d.]+ \|\s+[\d.]+x \|", row), row  # baseline, max, speed-up
        # wall median, max, CPU median: numbers, and the CPU time of a move is never zero
        moves, median, slowest, cpu = row.split("|")[0].split()[-4:]
        assert int(moves) >= 1 and float(median) <= float(slowest) and float(cpu) > 0, row
    assert "targets: median <= 50 ms" in out
    # progress as it goes: one line per widget, printed before the table
    lines = out.splitlines()
    progress = [i for i, line in enumerate(lines) if re.match(r"\s+\[\d+/\d+\] \d\d_\w+ \w+: \d+ moves", line)]
    assert len(progress) == len(rows) and max(progress) < lines.index(rows[0])


def test_sweep_moves_cover_the_range_and_come_back():
    assert sliders.sweep_moves([0, 1, 2, 3], 1) == [2, 3, 2, 1, 0, 1]
    assert sliders.sweep_moves(["a", "b"], "a") == ["b", "a"]


def test_a_cut_sweep_comes_back_to_its_start_value():
    # --max-moves N: the first N moves, then back to the start, where the next control's sweep begins
    assert sliders.sweep_moves([0, 1, 2, 3], 1, max_moves=2) == [2, 3, 1]
    assert sliders.sweep_moves([0, 1, 2, 3], 1, max_moves=4) == [2, 3, 2, 1]  # the cut already ends at 1
    assert sliders.sweep_moves([0, 1, 2, 3], 1, max_moves=5) == [2, 3, 2, 1, 0, 1]  # ends at 0: back to 1
    assert sliders.sweep_moves([0, 1, 2, 3], 1, max_moves=100) == sliders.sweep_moves([0, 1, 2, 3], 1)
    for max_moves in range(1, 8):
        moves = sliders.sweep_moves(list(range(6)), 2, max_moves=max_moves)
        assert moves[-1] == 2 and len(moves) <= max_moves + 1
        assert all(a != b for a, b in zip([2, *moves], moves, strict=False)), moves  # every move moves


def test_a_cut_sweep_leaves_the_next_control_a_picture_to_change():
    # chapter 13's mask: cut after 10 kinds it stood at "causal", where 'param' changes nothing (issue 31)
    ui = {}

    def build():
        ui["widget"] = widgets.mask_explorer(kind="document", param=3, block=8)
        return ui["widget"]

    def fresh(kind, param, block):
        return viz.MaskExplorerPlot(mask_example, kind=kind, param=param, block=block)

    result = sliders.measure(
        sliders.Case("13_variants", "mask_explorer", build, fresh), baseline_samples=1, max_moves=10
    )
    controls = ui["widget"].kwargs_widgets
    assert [c.value for c in controls] == ["document", 3, 8]  # every control back at its start
    expected = sum(len(sliders.sweep_moves(sliders.control_values(c), c.value, max_moves=10)) for c in controls)
    assert len(result.live_ms) == expected


@pytest.mark.parametrize(
    "live, interval, expected",
    [
        ([20.0, 30.0], 200, []),
        ([60.0, 70.0], 200, ["median > 50 ms"]),
        ([20.0, 300.0, 25.0], 200, ["max > 250 ms"]),
        ([20.0, 30.0], 300, ["Play interval > 250 ms"]),
        ([40.0, 45.0], 60, ["Play interval < 1.5 x median"]),
        ([20.0, 30.0], None, []),
    ],
)
def test_the_verdict_names_each_missed_target(live, interval, expected):
    case = sliders.Case("99_x", "x", build=None, fresh=None)
    assert sliders.Result(case, live, [100.0], interval, 0).problems() == expected


@pytest.mark.parametrize("name, option", [("speed", "--threads"), ("sliders", "--only")])
def test_help_after_a_name_lists_that_benchmarks_options(name, option):
    # README: `python -m flashmath.bench speed --help` lists the options (the top-level parser must not take -h)
    out = subprocess.run(
        [sys.executable, "-m", "flashmath.bench", name, "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m flashmath.bench {name} ") and option in out.stdout


@pytest.mark.parametrize(
    "args",
    [["--help"], ["sliders", "--help"], ["gpu", "--help"], ["speed", "--help"]],
    ids=["top", "sliders", "gpu", "speed"],
)
def test_help_is_plain_text(args):
    # the descriptions come from docstrings: their reST markup (``code``, :func:`name`) must not reach the terminal
    out = subprocess.run([sys.executable, "-m", "flashmath.bench", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "`" not in out.stdout and not re.search(r":(func|mod|class|data|meth):", out.stdout), out.stdout
    assert len(out.stdout.splitlines()) > 3  # the description is still there


def test_plain_text_keeps_the_words():
    assert plain_text("run ``python -m x`` (:func:`flashmath.flash_attention`, `D`)") == (
        "run python -m x (flashmath.flash_attention, D)"
    )


def test_help_without_a_name_lists_the_benchmarks(capsys):
    assert bench_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "sliders" in out and "speed" in out and "--threads" not in out
    assert bench_main([]) == 2
