"""Several processes: one build per node, the others load; a killed build leaves nothing behind."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
from npu_static_kernel import ArtifactCache, InductorBuilder, StaticKernelCompiler, compute_key

WORKER = Path(__file__).with_name("static_kernel_worker.py")


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("static_kernel_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_four_processes_build_once_and_all_load(tmp_path: Path) -> None:
    build_dir, out_dir = tmp_path / "build", tmp_path / "out"
    out_dir.mkdir()
    result = subprocess.run(
        [sys.executable, str(WORKER), "spawn", str(build_dir), str(out_dir), "4"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(4)]
    assert sum(r["counters"]["builds"] for r in reports) == 1
    assert reports[0]["counters"]["builds"] == 1  # local rank 0 is the builder
    assert sum(r["counters"]["loads"] for r in reports) == 4
    assert sum(r["counters"]["installs"] for r in reports) == 1
    assert all(r["counters"]["fallbacks"] == 0 for r in reports)
    assert all(r["compiled"] and r["matches_eager"] for r in reports)
    assert all(r["output"] == reports[0]["output"] for r in reports)
    assert all(r["buffer"] == reports[0]["buffer"] for r in reports)
    assert len(ArtifactCache(build_dir).entries()) == 1
    # Every rank recorded its own op statistics, in its own <timestamp>_<pid>_outputs directory.
    outputs = list((build_dir / "aclnn_static_shape_kernel_outputs").glob("*_outputs"))
    assert len(outputs) == 4


@pytest.mark.slow
def test_killed_build_leaves_no_artifact_and_no_stale_lock(tmp_path: Path) -> None:
    build_dir, ready = tmp_path / "build", tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "slow", str(build_dir), str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the slow build never started"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        if proc.stderr:
            proc.stderr.close()
    key = ready.read_text()
    cache = ArtifactCache(build_dir)
    assert cache.lookup(key) is None
    staging = list(cache.root.joinpath("entries").glob(f".tmp-{key}-*"))
    assert len(staging) == 1
    assert (staging[0] / "inductor_artifact.bin").exists()
    # The lock file is left behind, but a killed holder holds nothing: it is free at once.
    assert (cache.root / "locks" / f"{key}.lock").exists()
    with cache.key_lock(key, timeout=0):
        pass

    worker = _load_worker()
    gm, args = worker.make_case()
    assert compute_key(gm, args, InductorBuilder()) == key
    compiler = StaticKernelCompiler(build_dir)
    fn = compiler.compile_static(gm, args)
    assert compiler.counters.builds == 1
    assert compiler.counters.loads == 1
    assert not list(cache.root.joinpath("entries").glob(".tmp-*"))
    assert [e.key for e in cache.entries()] == [key]
    compiled_args, eager_args = worker.clone_args(args), worker.clone_args(args)
    torch.testing.assert_close(fn(*compiled_args), gm(*eager_args))
    torch.testing.assert_close(compiled_args[0], eager_args[0])
    assert compiled_args[0].abs().sum() > 0  # the copy_ into the buffer really happened


def test_worker_rejects_unknown_mode() -> None:
    with pytest.raises(SystemExit, match="unknown mode"):
        _load_worker().main(["nope"])
