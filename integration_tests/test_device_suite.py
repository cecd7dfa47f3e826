"""The device suite (benchmarks/device_suite.sh) works between device runs: its CPU dry run.

A device machine is available only now and then, for minutes; a suite that broke since the last
run would waste the next one. The dry run runs every step on the CPU with tiny sizes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SUITE = BENCHMARKS / "device_suite.sh"
STEPS = (
    "environment",
    "smoke",
    "device_tests",
    "decode_step",
    "replay_overhead",
    "pool_reuse",
    "streams_overlap",
    "static_kernel_warm_start",
)


def _suite(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The interpreter running these tests (its torch), whatever `python3` is on PATH.
    return subprocess.run(
        ["bash", str(SUITE), *args],
        capture_output=True,
        text=True,
        timeout=400,
        env={**(env if env is not None else os.environ), "PYTHON": sys.executable},
        check=False,
    )


def _checkout_files() -> str:
    """Every untracked file of the checkout, ignored ones included (what a run could leave)."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _device_tests_module() -> object:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import device_tests
    finally:
        sys.path.remove(str(BENCHMARKS))
    return device_tests


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_at_most_eight_files(tmp_path: Path) -> None:
    out = tmp_path / "results"
    before = _checkout_files()
    done = _suite("--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "benchmarks.json",
        "device_tests.xml",
        "smoke.json",
        "suite.log",
        "summary.json",
    ]
    assert len(files) <= 8  # all that comes back from a device machine
    summary = json.loads((out / "summary.json").read_text())
    steps = {step["name"]: step for step in summary["steps"]}
    assert list(steps) == list(STEPS)
    for name, step in steps.items():
        assert step["status"] in ("ok", "skipped"), (name, step)
        assert step["estimate_s"] > 0
    assert steps["static_kernel_warm_start"]["status"] == "skipped"  # too slow for a dry run
    assert summary["environment"]["dry_run"] is True
    assert summary["not ok"] == []
    smoke = json.loads((out / "smoke.json").read_text())
    assert smoke["finished"] is True
    assert smoke["failed"] == []
    assert {"decode_loop", "capture_error_python", "capture_stream_wait"} <= set(smoke["checks"])
    assert steps["smoke"]["digest"]["checks"]["decode_loop"] == "ok"
    tests = ET.parse(out / "device_tests.xml").getroot()
    assert int(tests.get("tests") or 0) >= 19  # every device test, skipped on CPU
    assert steps["device_tests"]["digest"]["failures"] == 0
    benchmarks = json.loads((out / "benchmarks.json").read_text())
    assert {"decode_step", "replay_overhead", "pool_reuse", "streams_overlap"} <= set(benchmarks)
    rows = benchmarks["decode_step"]["reports"][0]["rows"]
    assert rows[1]["matches_eager"] is True
    log = (out / "suite.log").read_text()
    assert all(f"== {name}" in log for name in STEPS)
    assert _checkout_files() == before  # nothing written into the checkout, not even ignored


def test_without_a_device_the_suite_stops_at_once_with_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", ASCEND_RT_VISIBLE_DEVICES="")
    done = _suite("--out", str(tmp_path), env=env)
    assert done.returncode == 3
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: no accelerator")
    assert "--dry-run" in line
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [step["name"] for step in summary["steps"]] == ["environment"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--out DIR is required"),
        (("--out", str(ROOT / "benchmarks" / "results" / "new")), "inside the repository"),
        (("--out", "/tmp/x", "--only", "nonsense"), "unknown step 'nonsense'"),
        (("--out", "/tmp/x", "--budget", "soon"), "--budget must be whole seconds"),
    ],
)
def test_bad_arguments_say_what_is_wrong(args: tuple[str, ...], message: str) -> None:
    done = _suite(*args)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert message in line


def test_every_device_test_file_is_run_or_left_out_with_a_reason() -> None:
    # Listed by file, so that the device run never collects the whole tree: a new file with
    # device tests must be added to the list (or left out, saying why).
    device_tests = _device_tests_module()
    marked = set()
    for path in [*ROOT.glob("packages/*/tests/**/*.py"), *ROOT.glob("integration_tests/**/*.py")]:
        if re.search(r"pytest\.mark\.device\b", path.read_text(encoding="utf-8")):
            marked.add(path.relative_to(ROOT).as_posix())
    marked.discard("integration_tests/test_device_suite.py")  # names the marker, marks nothing
    listed = set(device_tests.DEVICE_TEST_FILES)  # type: ignore[attr-defined]
    left_out = set(device_tests.LEFT_OUT)  # type: ignore[attr-defined]
    assert listed | left_out == marked
    assert not listed & left_out


def test_a_test_that_hangs_or_aborts_costs_only_itself(tmp_path: Path) -> None:
    (tmp_path / "test_hangs.py").write_text(
        "import os, time, pytest\n"
        "pytestmark = pytest.mark.device\n"
        "def test_before(): pass\n"
        "def test_fails(): assert 1 == 2\n"
        "def test_hangs(): time.sleep(60)\n"
        "def test_aborts(): os.abort()\n"
        "def test_after(): pass\n"
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "device_tests.py"),
            "--out",
            str(out),
            "--test-timeout",
            "3",
            "--files",
            str(tmp_path / "test_hangs.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    cases = {
        case.get("name"): [(kind.tag, kind.get("message") or "") for kind in case]
        for case in ET.parse(out / "device_tests.xml").getroot().iter("testcase")
    }
    assert cases["test_before"] == []
    assert cases["test_after"] == []  # run by a new process after the two that ended theirs
    assert cases["test_fails"][0][0] == "failure"
    ((kind, message),) = cases["test_hangs"]
    assert (kind, "--test-timeout (3.0 s)" in message) == ("error", True)
    ((kind, message),) = cases["test_aborts"]
    assert (kind, "signal 6" in message) == ("error", True)
