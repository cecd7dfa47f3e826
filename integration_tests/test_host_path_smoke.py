"""The host-path benchmark runs: every row of every workload measured, every replay check held.

``benchmarks/host_path.py --smoke`` (2 rounds of 5 calls) in a process of its own, since it
registers its null graph backend for the CPU while it runs. It checks that the rows exist and
that the script proved its graph rows replayed (it refuses to write times otherwise), not any
time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "host_path.py"

WORKLOADS = {"mlp", "decode", "padded", "held", "breaks"}
ROWS = {
    "floor",
    "floor_user",
    "runner",
    "bound",
    "bound_static",
    "dynamo_floor",
    "dynamo_trivial",
    "npu_compile",
    "npu_compile_unguarded",
    "eager",
    "npu_compile_emulated",
    "runner_emulated",
}
CHECKED = ROWS - {"floor", "floor_user", "eager"}
GRAPH_ROWS = {
    "runner",
    "bound",
    "bound_static",
    "npu_compile",
    "npu_compile_unguarded",
    "npu_compile_emulated",
    "runner_emulated",
}
GOALS = {
    "npu_compile_over_dynamo_trivial",
    "npu_compile_over_dynamo_floor",
    "runner_over_floor",
    "runner_py_calls_per_replay",
    "bound_static_over_floor",
    "bound_over_floor",
    "unguarded_over_floor",
}
#: Figures measured for comparison, with no goal (no verdict).
FIGURES = {"bound_over_floor", "unguarded_over_floor"}


def test_the_smoke_run_measures_every_row_and_proves_the_replays(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "host_path.json").read_text())
    assert results["smoke"] is True
    assert results["graph_implementation"]["emulated rows"] == "cpu-emulated"
    assert set(results["workloads"]) == WORKLOADS
    for name, workload in results["workloads"].items():
        rows = workload["rows"]
        assert set(rows) == ROWS, name
        for row, measured in rows.items():
            assert len(measured["samples_us"]) == results["rounds"] == 2, (name, row)
            assert measured["us"] > 0, (name, row)
            assert measured["py_calls_per_call"] >= 1, (name, row)
        checks = workload["replay_checks"]
        assert set(checks) == CHECKED, name
        for row, check in checks.items():
            assert check["held"], (name, row, check)
            assert check["compiled_again"] in (None, 0), (name, row, check)
        for row in GRAPH_ROWS:
            moved = checks[row]["runners"]
            assert len(moved) == workload["graphs"], (name, row)
            assert all(m["replays"] == checks[row]["calls"] > 0 for m in moved), (name, row)
            assert all(m["captures"] == m["eager_calls"] == 0 for m in moved), (name, row)
            assert rows[row]["py_calls_per_replay"] >= 1, (name, row)
        assert set(workload["goals"]) == GOALS, name
        for key, goal in workload["goals"].items():
            # A figure without a goal has no verdict; goals_met leaves it out.
            assert goal["met"] is None if key in FIGURES else isinstance(goal["met"], bool), (
                name,
                key,
            )
    assert results["goals_met"] == all(
        goal["met"]
        for workload in results["workloads"].values()
        for goal in workload["goals"].values()
        if goal["met"] is not None
    )
    assert results["workloads"]["breaks"]["graphs"] == 3
    # The Markdown tables went to stdout, one column per workload.
    assert "| row | mlp | decode | padded | held | breaks |" in done.stdout
