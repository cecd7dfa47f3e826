"""The device tests, file by file, each in a pytest process of its own; results as one JUnit file.

The files are listed below rather than collected from the whole tree: collecting 1,400 tests to
run 19 costs minutes, and with ``filterwarnings = error`` an import-time warning of any unrelated
module would stop the session. One process per file means that a file whose import fails, or
whose test aborts the process (a failed C++ assertion, a segfault) or hangs, costs that file
only. Each test has a time limit (``--test-timeout``, see ``_pytest_deadline.py``); each file the
time left (``--budget``).

pytest runs with plugin autoloading off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``) and the plugins
the device tests need named with ``-p`` (``PLUGINS``): a device image comes with plugins of its
own (pytest-timeout, xdist, benchmark, cov, mock, anyio, ...) that would otherwise load
themselves, and with ``filterwarnings = error`` a warning one of them raises becomes an error of
the tests; their options and fixtures are not what the tests were written against either.

    python benchmarks/device_tests.py --out DIR [--test-timeout 90] [--budget 170] [--jobs 2]
        [--dry-run]

Writes DIR/device_tests.xml (JUnit: one test suite per file; a file whose process ended early
gets the results it recorded, and an error naming the test that was running, with the process's
stderr). Exits 1 when a test failed or a file did not finish, and when tests that should have run
on the device were skipped: a test skipped because pytest saw no accelerator, or a run in which
no test passed. A skipped test passes for nothing, so the counts per skip reason are printed.
With ``--dry-run`` (the suite's CPU check) no device is expected, and those skips are counted
only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Every file with ``@pytest.mark.device`` tests that can run on a GPU or NPU machine, in the
#: order they run (the core first). ``integration_tests/test_device_suite.py`` checks this list
#: against the tree, so a new device test file cannot be forgotten here.
DEVICE_TEST_FILES = (
    "packages/npu-mempool/tests/test_mempool_on_device.py",
    "packages/npu-streams/tests/test_streams_device.py",
    "packages/npu-compile/tests/test_compile_backend.py",
    "packages/npu-compile/tests/test_compile_diagnose.py",
    "packages/npu-compile/tests/test_compile_stream_markers.py",
    "packages/npu-graph-export/tests/test_export_device.py",
)
#: Device test files left out, and why.
LEFT_OUT = {
    "integration_tests/vllm/test_vllm_device.py": "needs vLLM built for the device (not installed)",
}
#: Processes per file at most: the first, and one after each test that ended its process.
MAX_ATTEMPTS = 3
#: The pytest plugins the device tests run with, and no other (autoloading is off): the time
#: limit and per-test record of this folder. None of the device test files uses a fixture or
#: option of an installed plugin (hypothesis, mock, timeout, ...); one that starts to must be
#: added here, by module name, and be installed where CI runs the dry run.
PLUGINS = ("_pytest_deadline",)
#: The skip reason of the root conftest.py for a device test when pytest sees no accelerator.
#: On a device run it means the device was not visible to the tests (CUDA_VISIBLE_DEVICES, a
#: driver the test process cannot open): every device test then passes for nothing.
NO_DEVICE_SKIP = "needs an accelerator (CUDA or NPU); none is available"


@dataclass
class FileRun:
    path: str
    timeout: float  # the per-test limit it runs with
    attempts: int = 0
    returncode: int | None = None  # of the last attempt; None: not started (no time left)
    seconds: float = 0.0
    output: str = ""
    #: The JUnit file of a first attempt that finished: the file's whole result.
    xml: Path | None = None
    record: Path | None = None
    #: Tests whose process ended while they ran: why, and what the process said about it.
    ended: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The process ended with no test running (import, collection, exit): why, and its words.
    problem: tuple[str, str] | None = None


def _pytest(command: list[str], seconds: float) -> tuple[int, str, bool]:
    """Run pytest for at most ``seconds``: (exit code, output, whether the time ran out)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the checkout
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the plugins named in PLUGINS
    # A session of its own: a file that runs out of time is ended with everything it started.
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        _RUNNING.add(process.pid)
        try:
            output, _ = process.communicate(timeout=seconds)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            timed_out = True
        finally:
            _RUNNING.discard(process.pid)
    return process.returncode, output, timed_out


def _events(record: Path) -> list[dict[str, Any]]:
    events = []
    if record.exists():
        for line in record.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a last line cut off by the end of the process
    return events


def _crash_report(output: str) -> str:
    """What the process said about its end: the tracebacks from where they start, else the tail."""
    starts = [output.find(m) for m in ("Timeout (", "Fatal Python error") if m in output]
    start = min(starts) if starts else max(0, len(output) - 6000)
    return output[start : start + 6000]


def run_file(path: str, work: Path, args: argparse.Namespace, deadline: float) -> FileRun:
    """Run one file's device tests; when its process ends early, run the tests it did not reach.

    A test that aborts or hangs ends its process; the tests after it then run in a new process
    (up to ``MAX_ATTEMPTS`` processes per file), as long as time is left.
    """
    run = FileRun(path, timeout=args.test_timeout)
    stem = path.strip("/").replace("/", "_")
    run.record = work / f"{stem}.jsonl"
    start = time.monotonic()
    deselect: list[str] = []
    while run.attempts < MAX_ATTEMPTS:
        left = deadline - time.monotonic()
        if left < 5:
            break
        xml = work / f"{stem}.{run.attempts}.xml"
        command = [sys.executable, "-m", "pytest", path, "-m", "device", "-q", "-rA"]
        command += ["-p", "no:cacheprovider", *(a for p in PLUGINS for a in ("-p", p))]
        command += [f"--test-timeout={args.test_timeout}", f"--test-record={run.record}"]
        command += [f"--junitxml={xml}", *(f"--deselect={nodeid}" for nodeid in deselect)]
        code, output, timed_out = _pytest(command, left)
        run.attempts += 1
        run.returncode = code
        run.output += output
        if xml.exists() and not timed_out:  # pytest finished
            if run.attempts == 1:
                run.xml = xml
            break
        if timed_out:
            why = f"the file's time ran out ({run.attempts} process(es), --budget)"
        elif "Timeout (" in output:  # faulthandler's header: the per-test limit ended it
            why = f"it ran past --test-timeout ({args.test_timeout} s)"
        else:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            why = f"the process ended with {how}"
        events = _events(run.record)
        started = [e["nodeid"] for e in events if e["event"] == "start"]
        finished = {
            e["nodeid"] for e in events if e["event"] == "report" and e["when"] == "teardown"
        }
        running = [n for n in started if n not in finished and n not in run.ended]
        if not running:
            run.problem = (why, _crash_report(output))
            break
        for nodeid in running:
            run.ended[nodeid] = (why, _crash_report(output))
        if timed_out:
            break
        deselect = started
    run.seconds = round(time.monotonic() - start, 1)
    return run


def _case(nodeid: str, seconds: float = 0.0) -> ET.Element:
    path, _, name = nodeid.partition("::")
    classname = path.removesuffix(".py").replace("/", ".")
    return ET.Element("testcase", classname=classname, name=name or path, time=f"{seconds:.3f}")


def _error(suite: ET.Element, nodeid: str, message: str, text: str = "") -> None:
    case = _case(nodeid)
    error = ET.SubElement(case, "error", message=message)
    error.text = text
    suite.append(case)


def file_suite(run: FileRun) -> ET.Element:
    """The test suite of one file: its JUnit results, or what its records say."""
    if run.xml is not None:
        root = ET.parse(run.xml).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        suite = suites[0] if suites else ET.Element("testsuite")
        suite.set("name", run.path)
        if run.returncode not in (0, 1):
            # 2: interrupted or a collection error (in the XML); 5: no device test in the file.
            _error(
                suite,
                f"{run.path}::<process>",
                f"pytest exit code {run.returncode}",
                run.output[-6000:],
            )
        return suite
    suite = ET.Element("testsuite", name=run.path)
    if run.attempts == 0:
        _error(suite, f"{run.path}::<not run>", "not run: no time left in --budget")
        return suite
    assert run.record is not None
    events = _events(run.record)
    reports: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["event"] == "report":
            reports.setdefault(event["nodeid"], []).append(event)
    for nodeid in dict.fromkeys(e["nodeid"] for e in events if e["event"] == "start"):
        phases = reports.get(nodeid, [])
        case = _case(nodeid, sum(float(p["duration"]) for p in phases))
        failed = [p for p in phases if p["outcome"] == "failed"]
        skipped = [p for p in phases if p["outcome"] == "skipped"]
        if nodeid in run.ended:
            why, text = run.ended[nodeid]
            error = ET.SubElement(case, "error", message=f"no result: {why} while this test ran")
            error.text = text
        elif failed:
            failure = ET.SubElement(case, "failure", message=f"failed in {failed[0]['when']}")
            failure.text = str(failed[0].get("message") or "")
        elif skipped:
            ET.SubElement(case, "skipped", message=str(skipped[0].get("message") or ""))
        suite.append(case)
    for event in events:
        if event["event"] == "collect-error":
            _error(suite, f"{run.path}::<collection>", "collection failed", event["message"])
    if run.problem is not None:
        _error(suite, f"{run.path}::<process>", run.problem[0], run.problem[1])
    return suite


def totals(suite: ET.Element) -> dict[str, int]:
    cases = list(suite.iter("testcase"))
    count = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        for kind, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            if case.find(kind) is not None:
                count[key] += 1
    return count


def skip_reasons(suite: ET.Element) -> dict[str, int]:
    """How many tests were skipped for each reason, most first."""
    reasons = Counter(
        (skipped.get("message") or "no reason given").strip() for skipped in suite.iter("skipped")
    )
    return dict(reasons.most_common())


def skipped_that_should_run(count: dict[str, int], reasons: dict[str, int]) -> str | None:
    """Why the device tests' skips make a device run fail, or ``None`` when they do not.

    A test skipped for want of a device never ran; a run with tests and no pass checked nothing.
    Other skips (a test for another device type, for more devices than the machine has) are
    reported with their reasons and do not fail the run.
    """
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    no_device = reasons.get(NO_DEVICE_SKIP, 0)
    if no_device:
        return (
            f"{no_device} of {count['tests']} device tests were skipped because pytest saw no "
            "accelerator: the device was not visible to the test processes (check "
            "CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES and the driver)"
        )
    if count["tests"] and not passed:
        return f"no device test passed: {count['skipped']} of {count['tests']} were skipped"
    return None


#: Process groups of the pytest processes running now, ended with this process.
_RUNNING: set[int] = set()


def _end_children(signum: int, frame: object) -> None:
    # The suite's time limit ends this process with SIGTERM; the pytest processes are in
    # sessions of their own (so that a file's time limit ends its whole tree), so end them here.
    for group in list(_RUNNING):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    sys.exit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _end_children)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for device_tests.xml")
    parser.add_argument(
        "--test-timeout", type=float, default=90.0, help="seconds one test may take (default 90)"
    )
    parser.add_argument(
        "--budget", type=float, default=170.0, help="seconds for all files (default 170)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="files run at once (default 2)")
    parser.add_argument(
        "--files", nargs="+", default=DEVICE_TEST_FILES, help="test files (default: the list above)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no device expected: tests skipped for want of one are counted, not failed",
    )
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget
    for path, why in LEFT_OUT.items():
        print(f"left out: {path}: {why}")
    with tempfile.TemporaryDirectory(prefix="device-tests-") as tmp:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            runs = list(pool.map(lambda p: run_file(p, Path(tmp), args, deadline), args.files))
        merged = ET.Element("testsuites", name="device tests")
        failed = False
        for run in runs:
            suite = file_suite(run)
            count = totals(suite)
            for key, value in count.items():
                suite.set(key, str(value))
            suite.set("time", f"{run.seconds:.1f}")
            merged.append(suite)
            failed |= bool(count["failures"] or count["errors"])
            print(
                f"\n===== {run.path}: {count}, {run.seconds} s, {run.attempts} process(es), "
                f"last exit code {run.returncode}"
            )
            print(run.output[-20000:])
    count = totals(merged)
    for key, value in count.items():
        merged.set(key, str(value))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "device_tests.xml"
    tmp_path = path.with_suffix(".xml.tmp")
    ET.ElementTree(merged).write(tmp_path, encoding="utf-8", xml_declaration=True)
    os.replace(tmp_path, path)
    print(f"device tests: {count}")
    reasons = skip_reasons(merged)
    for reason, skipped in reasons.items():
        print(f"  skipped {skipped}: {reason[:200]}")
    print(f"wrote {path}")
    should_have_run = skipped_that_should_run(count, reasons)
    if should_have_run is not None:
        if args.dry_run:
            print(f"dry run (no device expected): {should_have_run}")
        else:
            print(f"error: {should_have_run}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
