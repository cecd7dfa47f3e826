"""The device suite (benchmarks/device_suite.sh) works between device runs: its CPU dry run.

A device machine is available only now and then, for minutes; a suite that broke since the last
run would waste the next one. The dry run runs every step on the CPU with tiny sizes.

``nox -s device-suite`` runs this file in a venv holding only the device image's packages
(``DEVICE_IMAGE`` in noxfile.py), with the repository's packages on ``PYTHONPATH`` as the suite
runs them: whatever the suite or a device test needs beyond them fails here.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

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


def _benchmark_module(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def _device_tests_module() -> object:
    return _benchmark_module("device_tests")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _copy_without_git(destination: Path) -> None:
    """What a device machine gets: tracked and untracked-but-not-ignored files, no .git."""
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for path in filter(None, listed.split("\0")):
        source = ROOT / path
        if source.is_file():
            (destination / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / path)


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_at_most_eight_files(tmp_path: Path) -> None:
    out = tmp_path / "results"
    before = _checkout_files()
    done = _suite("--dry-run", "--out", str(out))
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
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
    for step in steps.values():
        assert step["estimate_s"] > 0
    assert steps["static_kernel_warm_start"]["status"] == "skipped"  # too slow for a dry run
    assert summary["environment"]["dry_run"] is True
    # The code measured, read before the run: this checkout's commit and uncommitted changes.
    code = summary["code"]
    assert code["commit"] == _git(ROOT, "rev-parse", "HEAD").strip()
    assert code == _benchmark_module("_code").identity(ROOT)
    smoke = json.loads((out / "smoke.json").read_text())
    assert smoke["finished"] is True
    checks = smoke["checks"]
    assert {
        "decode_loop",
        "capture_error_python",
        "capture_stream_wait",
        "held_output_new_shape",
        "force_recapture_held",
        "streams_record_wait",
        "dropout_masks",
        "train_step",
        "runner_autocast",
        "stream_scope_after_split",
        "force_recapture_memory",
    } <= set(checks)
    assert smoke["failed"] == [], {name: checks[name] for name in smoke["failed"]}
    assert summary["not ok"] == []
    assert done.returncode == 0, done.stdout[-3000:]
    for name, step in steps.items():
        if name != "smoke":
            assert step["status"] in ("ok", "skipped"), (name, step)
    assert steps["smoke"]["digest"]["checks"]["decode_loop"] == "ok"
    # The runner's timed calls were replays of the one graph it captured.
    assert checks["replay_overhead"]["result"]["runner counters"]["captures"] == 1
    tests = ET.parse(out / "device_tests.xml").getroot()
    count = int(tests.get("tests") or 0)
    assert count >= 19  # every device test, collected with the device image's packages
    digest = steps["device_tests"]["digest"]
    assert (digest["failures"], digest["errors"], digest["passed"]) == (0, 0, 0)
    # Skipped for want of a device, which only the dry run allows: the conftest's reason is the
    # one the device run fails on.
    no_device = _device_tests_module().NO_DEVICE_SKIP  # type: ignore[attr-defined]
    assert digest["skip reasons"] == {no_device: count}
    assert f"{count} of {count} tests skipped" in steps["device_tests"]["note"]
    variables = summary["environment"]["variables"]
    assert variables["CUDA_VISIBLE_DEVICES"] == ""  # the dry run hides the devices
    assert {"PYTORCH_CUDA_ALLOC_CONF", "TASK_QUEUE_ENABLE", "CUDA_LAUNCH_BLOCKING"} <= set(
        variables
    )
    benchmarks = json.loads((out / "benchmarks.json").read_text())
    assert {"decode_step", "replay_overhead", "pool_reuse", "streams_overlap"} <= set(benchmarks)
    rows = benchmarks["decode_step"]["reports"][0]["rows"]
    assert rows[1]["matches_eager"] is True
    # Both npu_compile rows are graph replays' times: their backends captured and replayed.
    replay_check = benchmarks["decode_step"]["replay_check"]
    assert [entry["refused"] for entry in replay_check.values()] == [None, None]
    # No device time on the CPU: no row passes for host- or device-bound, the target is unjudged.
    replay = benchmarks["replay_overhead"]
    assert {row["bound"] for row in replay["rows"].values()} == {"n/a on cpu"}
    assert all(row["raw_replay_device_us"] is None for row in replay["rows"].values())
    assert replay["target"]["met"] is None
    assert replay["target"]["judged_on"] == []
    ratios = summary["figures"]["decode_step"]
    assert set(ratios) == {
        "npu_compile / eager",
        "npu_compile / cudagraphs",
        "npu_compile / reduce-overhead",
    }
    assert ratios["npu_compile / eager"]["matches_eager"] is True
    assert ratios["npu_compile / eager"]["ratio"] > 0
    assert ratios["npu_compile / cudagraphs"]["ratio"] is None  # needs CUDA
    assert summary["figures"]["replay_overhead"]["target"] == replay["target"]
    log = (out / "suite.log").read_text()
    assert all(f"== {name}" in log for name in STEPS)
    assert f"code: commit {code['commit'][:12]}" in log
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


def _device_tests(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    test_file = tmp_path / "test_skips.py"
    test_file.write_text(source)
    return subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "device_tests.py"),
            "--out",
            str(tmp_path / "out"),
            "--files",
            str(test_file),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_device_tests_skipped_for_want_of_a_device_fail_off_the_dry_run(tmp_path: Path) -> None:
    # Every test skipped, as when pytest sees no device: nothing was checked.
    no_device = _device_tests_module().NO_DEVICE_SKIP  # type: ignore[attr-defined]
    source = (
        "import pytest\n"
        "pytestmark = pytest.mark.device\n"
        f"def test_one(): pytest.skip({no_device!r})\n"
        f"def test_two(): pytest.skip({no_device!r})\n"
    )
    done = _device_tests(tmp_path, source)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "error: 2 of 2 device tests were skipped because pytest saw no accelerator" in (
        done.stdout
    )
    assert f"skipped 2: {no_device}" in done.stdout
    dry = _device_tests(tmp_path, source, "--dry-run")
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert "dry run (no device expected)" in dry.stdout


def test_other_skips_are_counted_and_a_run_with_no_pass_fails(tmp_path: Path) -> None:
    other = "needs two devices; this machine has one"
    passing = (
        "import pytest\n"
        "pytestmark = pytest.mark.device\n"
        "def test_runs(): pass\n"
        f"def test_elsewhere(): pytest.skip({other!r})\n"
    )
    done = _device_tests(tmp_path, passing)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"skipped 1: {other}" in done.stdout
    nothing_passed = (
        "import pytest\n"
        "pytestmark = pytest.mark.device\n"
        f"def test_elsewhere(): pytest.skip({other!r})\n"
    )
    done = _device_tests(tmp_path, nothing_passed)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "error: no device test passed: 1 of 1 were skipped" in done.stdout


def _runner(name: str, **counts: int) -> SimpleNamespace:
    values = {"captures": 0, "replays": 0, "fallbacks": 0, "eager_calls": 0, **counts}
    return SimpleNamespace(name=name, counters=SimpleNamespace(**values))


def _bench_json(path: Path) -> None:
    def report(title: str, extra: dict[str, Any]) -> dict[str, Any]:
        rows = [
            {"name": name, "us_per_call": 10.0, "median_us": 11.0, "spread_us": 1.0, "note": ""}
            for name in ("eager", "npu_compile reduce-overhead")
        ]
        return {"title": title, "rows": rows, "extra": extra}

    ratios = {"npu_compile / eager": {"over": "eager", "ratio": 1.0, "matches_eager": True}}
    decode = report(
        "decode step (demo model)", {"speedup (eager / npu_compile)": 1.0, "ratios": ratios}
    )
    mlp = report("tiny MLP per-call overhead (1 thread)", {"within target": True})
    path.write_text(json.dumps({"reports": [decode, mlp]}))


def test_decode_step_refuses_a_time_whose_backend_did_not_capture_and_replay(
    tmp_path: Path,
) -> None:
    decode_step = _benchmark_module("decode_step")
    watched = decode_step.Watched
    path = tmp_path / "decode_step_cuda.json"
    _bench_json(path)
    failed_capture = watched(runners=[_runner("npu_compile_0", fallbacks=1, eager_calls=40)])
    replayed = watched(runners=[_runner("npu_compile_1", captures=1, replays=500)])
    assert decode_step.check(path, [failed_capture, replayed]) == 1
    document = json.loads(path.read_text())
    decode, mlp = document["reports"]
    ours = decode["rows"][1]
    assert (ours["us_per_call"], ours["median_us"]) == (None, None)
    assert "a capture failed" in ours["refused"]
    assert decode["rows"][0]["us_per_call"] == 10.0  # eager's time stays
    assert decode["extra"]["ratios"]["npu_compile / eager"]["ratio"] is None
    assert decode["extra"]["speedup (eager / npu_compile)"] is None
    assert mlp["rows"][1]["us_per_call"] == 10.0
    assert document["replay_check"]["tiny MLP"]["refused"] is None
    # Captured but never replayed, or a graph run eagerly: no replay's time either.
    _bench_json(path)
    never = watched(runners=[_runner("npu_compile_0", captures=1)])
    eager = watched(runners=[_runner("g", captures=1, replays=9)], fallbacks=["g (x): boom"])
    assert decode_step.check(path, [never, eager]) == 1
    refused = [entry["refused"] for entry in json.loads(path.read_text())["replay_check"].values()]
    assert "never replayed" in refused[0]
    assert "fell back to eager: g (x): boom" in refused[1]


def test_the_environment_records_allocator_and_launch_variables() -> None:
    suite = _benchmark_module("_suite")
    environ = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "2",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
        "ASCEND_HOME_PATH": "/usr/local/Ascend",
        "CUDA_API_KEY": "not recorded",
        "HOME": "/root",
    }
    found = suite.recorded_variables(environ)
    assert found["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert found["TASK_QUEUE_ENABLE"] == "2"
    assert found["CUDA_LAUNCH_BLOCKING"] is None  # named, and unset
    assert found["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/x"  # a family's, recorded when set
    assert found["ASCEND_HOME_PATH"] == "/usr/local/Ascend"
    assert "CUDA_API_KEY" not in found
    assert "HOME" not in found


def test_the_documentation_lists_the_device_image_packages() -> None:
    # noxfile.py is read, not imported: nox is not among the device image's packages.
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    (image,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "DEVICE_IMAGE" for t in node.targets)
    ]
    docs = (ROOT / "docs" / "device-suite.md").read_text(encoding="utf-8")
    needs = docs[docs.index("**What the machine needs.**") :].split("\n- ", 1)[0]
    for requirement in ("torch", *image):
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        assert f"**{name}**" in needs, f"docs/device-suite.md does not list {name}"


def test_a_copy_without_git_still_names_its_code(tmp_path: Path) -> None:
    # A device machine gets the working tree without .git, and with ignored paths carried along.
    copy = tmp_path / "copy"
    _copy_without_git(copy)
    for junk in (".venv/lib/site.py", "packages/npu-compile/src/__pycache__/x.pyc"):
        (copy / junk).parent.mkdir(parents=True, exist_ok=True)
        (copy / junk).write_text("ignored by .gitignore, as in the checkout\n")
    assert not (copy / ".git").exists()
    out = tmp_path / "out"
    only = ("--only", "environment")  # the code is read before any step
    done = subprocess.run(
        [
            "bash",
            str(copy / "benchmarks" / "device_suite.sh"),
            "--dry-run",
            "--out",
            str(out),
            *only,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    code = json.loads((out / "summary.json").read_text())["code"]
    here = _benchmark_module("_code").identity(ROOT)
    assert code["commit"] is None
    assert code["uncommitted"] is None
    assert "no git repository" in code["note"]
    # The same files as this checkout's, so the same hash: the copy's run is traced back here.
    assert (code["tree_sha256"], code["files"]) == (here["tree_sha256"], here["files"])
    found = subprocess.run(
        [sys.executable, str(BENCHMARKS / "_code.py"), "--find", str(out / "summary.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0, found.stdout + found.stderr
    assert "has it" in found.stdout
    if not here["uncommitted"]["files"]:  # a clean checkout: the commit itself has that hash
        assert here["commit"] in found.stdout


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg" / "build").mkdir(parents=True)
    (repo / "pkg" / "data").mkdir()
    (repo / ".gitignore").write_text("build/\n*.log\n/top.txt\n!keep.log\n")
    (repo / "pkg" / ".gitignore").write_text("data/*.bin\n")
    for path, text in {
        "pkg/a.py": "a = 1\n",
        "pkg/keep.log": "kept: negated\n",
        "pkg/top.txt": "anchored to the root only\n",
        "pkg/data/d.txt": "data\n",
    }.items():
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    for path in ("pkg/build/b.py", "pkg/x.log", "top.txt", "pkg/data/d.bin"):
        (repo / path).write_text("ignored\n")
    return repo


def test_the_tree_hash_is_the_same_with_and_without_git(repository: Path, tmp_path: Path) -> None:
    code = _benchmark_module("_code")
    (repository / "pkg" / "new.py").write_text("untracked, not ignored: travels\n")
    listed = code._git_files(repository)
    assert listed == sorted(code.walked_files(repository))
    assert "pkg/new.py" in listed
    assert "pkg/keep.log" in listed  # negated
    assert "pkg/top.txt" in listed  # the root's /top.txt only
    assert not {"pkg/build/b.py", "pkg/x.log", "top.txt", "pkg/data/d.bin"} & set(listed)
    with_git = code.identity(repository)
    shutil.rmtree(repository / ".git")
    without = code.identity(repository)
    assert without["commit"] is None
    assert (without["tree_sha256"], without["files"]) == (with_git["tree_sha256"], len(listed))


def test_uncommitted_changes_are_named_and_hashed(repository: Path) -> None:
    code = _benchmark_module("_code")
    clean = code.identity(repository)
    assert clean["commit"] == _git(repository, "rev-parse", "HEAD").strip()
    assert clean["uncommitted"] == {"files": 0, "sha256": None, "paths": []}
    # A clean tree has its commit's hash: the commit is found from the hash alone.
    assert code.find(repository, clean["tree_sha256"]) == [clean["commit"]]

    (repository / "pkg" / "a.py").write_text("a = 2\n")
    (repository / "pkg" / "new.py").write_text("b = 1\n")
    (repository / "pkg" / "data" / "d.txt").unlink()
    changed = code.identity(repository)
    assert changed["commit"] == clean["commit"]
    assert changed["uncommitted"]["files"] == 3
    assert changed["uncommitted"]["paths"] == [
        "pkg/a.py",
        "deleted pkg/data/d.txt",
        "added pkg/new.py",
    ]
    assert changed["tree_sha256"] != clean["tree_sha256"]
    assert code.find(repository, changed["tree_sha256"]) == []
    (repository / "pkg" / "a.py").write_text("a = 3\n")  # another change, another hash
    again = code.identity(repository)["uncommitted"]
    assert again["files"] == 3
    assert again["sha256"] != changed["uncommitted"]["sha256"]


def test_device_tests_load_no_plugin_they_do_not_name(tmp_path: Path) -> None:
    # An installed plugin that loads itself breaks every test process it enters, as a plugin
    # warning does under filterwarnings = error.
    site = tmp_path / "site"
    (site / "self_loading-1.0.dist-info").mkdir(parents=True)
    (site / "self_loading-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: self-loading\nVersion: 1.0\n"
    )
    (site / "self_loading-1.0.dist-info" / "entry_points.txt").write_text(
        "[pytest11]\nself_loading = self_loading_plugin\n"
    )
    (site / "self_loading_plugin.py").write_text("raise RuntimeError('loaded itself')\n")
    test_file = tmp_path / "test_plain.py"
    test_file.write_text(
        "import pytest\npytestmark = pytest.mark.device\ndef test_runs(): assert 1 + 1 == 2\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    # The plugin is found and breaks a pytest that loads plugins by itself ...
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert plain.returncode != 0
    assert "loaded itself" in plain.stdout + plain.stderr
    # ... and the device tests never load it.
    out = tmp_path / "out"
    files = ("--files", str(test_file))
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "device_tests.py"), "--out", str(out), *files],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    (case,) = ET.parse(out / "device_tests.xml").getroot().iter("testcase")
    assert (case.get("name"), list(case)) == ("test_runs", [])


def _row(raw: float, runner: float, raw_device: float | None) -> dict[str, Any]:
    replay_overhead = _benchmark_module("replay_overhead")
    device = torch.device("cuda")  # a label needs a device with device time; nothing runs on it
    samples = {"eager": [raw], "raw_replay": [raw], "runner": [runner]}
    device_us = {"raw_replay": raw_device, "runner": raw_device}
    row: dict[str, Any] = replay_overhead.summarize(samples, 7, device_us, device)
    return row


def test_the_replay_target_is_judged_on_host_bound_rows_only() -> None:
    replay_overhead = _benchmark_module("replay_overhead")
    cuda = torch.device("cuda")
    # 200 kernels: the device is busy all the time, and a slow runner hides behind it.
    chain = _row(raw=400.0, runner=404.0, raw_device=398.0)
    one = _row(raw=10.0, runner=11.5, raw_device=2.0)
    assert (chain["bound"], one["bound"]) == ("device-bound", "host-bound")
    target = replay_overhead.judge({"chain": chain, "one kernel": one}, cuda)
    assert (target["judged_on"], target["met"]) == (["one kernel"], True)
    slow = _row(raw=10.0, runner=13.0, raw_device=2.0)
    target = replay_overhead.judge({"chain": chain, "one kernel": slow}, cuda)
    assert (target["over_target"], target["met"]) == (["one kernel"], False)
    # Only device-bound rows: nothing can show the runner's cost, so nothing is claimed.
    assert replay_overhead.judge({"chain": chain}, cuda)["met"] is None
    unknown = _row(raw=10.0, runner=30.0, raw_device=None)
    assert unknown["bound"].startswith("unknown")
    assert replay_overhead.judge({"one kernel": unknown}, cuda)["met"] is None
