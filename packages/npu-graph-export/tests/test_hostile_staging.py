"""Staging directories that a killed export left behind are removed by the next export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from npu_graph_export import _paths, dynamo_export


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _staging(parent: Path, host: str, pid: int, suffix: str = "abc123_x") -> Path:
    directory = parent / f".npu-graph-export-{host}-{pid}-{suffix}"
    directory.mkdir()
    (directory / "weight").write_bytes(b"\0" * 1024)
    return directory


def _export(target: Path) -> None:
    torch.manual_seed(0)
    dynamo_export(torch.randn(2, 4), model=torch.nn.Linear(4, 2).eval(), export_path=target)


def test_the_next_export_removes_only_the_staging_of_dead_processes_on_this_host(
    tmp_path: Path,
) -> None:
    host = _paths._host()
    dead = _staging(tmp_path, host, _dead_pid())
    live = _staging(tmp_path, host, os.getppid())
    elsewhere = _staging(tmp_path, "another-host", _dead_pid())
    legacy = tmp_path / ".npu-graph-export-k2j4l0q1"  # no owner recorded: left alone
    legacy.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("data")
    link = tmp_path / f".npu-graph-export-{host}-{_dead_pid()}-link1234"
    link.symlink_to(outside, target_is_directory=True)

    _export(tmp_path / "out")

    assert not dead.exists()
    assert live.exists()
    assert elsewhere.exists()
    assert legacy.exists()
    assert link.is_symlink()
    assert (outside / "keep").read_text() == "data"
    assert (tmp_path / "out" / "export.air").is_file()
    leftovers = {p.name for p in tmp_path.iterdir() if p.name.startswith(".npu-graph-export-")}
    assert leftovers == {live.name, elsewhere.name, legacy.name, link.name}


def test_remove_stale_staging_tolerates_a_missing_parent(tmp_path: Path) -> None:
    assert _paths.remove_stale_staging(tmp_path / "missing") == []


def test_a_staging_directory_left_by_kill_9_is_cleaned_on_the_next_export(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import time, torch
        from pathlib import Path
        from npu_graph_export import _paths, dynamo_export

        def stall(fd):
            Path({str(ready)!r}).write_text("staged")
            time.sleep(600)

        _paths.os.fsync = stall  # stop with a file half-way into the staging directory
        dynamo_export(torch.randn(2, 4), model=torch.nn.Linear(4, 2).eval(),
                      export_path={str(tmp_path / "out")!r})
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, "the exporting process ended before staging"
            assert time.monotonic() < deadline, "the exporting process never staged a file"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".npu-graph-export-")]
    assert len(left) == 1
    assert f"-{child.pid}-" in left[0].name
    assert any(left[0].iterdir())

    _export(tmp_path / "out")

    assert not left[0].exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".npu-graph-export-")]
