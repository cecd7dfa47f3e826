"""Builds and loads hold Dynamo's compile lock: torch traces and registers one graph at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import BuildRequest, StaticKernelBuilder, StaticKernelCompiler
from torch._dynamo.convert_frame import compile_lock


def _taken_elsewhere() -> bool:
    """Whether another thread holds Dynamo's compile lock right now (asked from a new thread)."""
    free: list[bool] = []

    def probe() -> None:
        got = compile_lock.acquire(blocking=False)
        if got:
            compile_lock.release()
        free.append(got)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return not free[0]


class LockProbeBuilder(StaticKernelBuilder):
    """Notes whether a Dynamo compile in another thread could run during its build and load."""

    name = "lock-probe"

    def __init__(self) -> None:
        self.locked: dict[str, bool] = {}

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        self.locked["build"] = _taken_elsewhere()
        (out_dir / "scale.txt").write_text(str(request.args[1]))

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        self.locked["load"] = _taken_elsewhere()
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x, n: (x * scale,)


def graph(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


def test_build_and_load_exclude_dynamo_compiles(tmp_path: Path) -> None:
    # Tracing keeps process-wide state (FX's patcher, Inductor's artifact registry): a build at
    # a graph's first call that traced or saved while another thread compiled failed.
    builder = LockProbeBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    fn = compiler.compile_static(torch.fx.symbolic_trace(graph), [torch.ones(2), 3])
    assert fn(torch.ones(2), 3)[0].tolist() == [3.0, 3.0]
    assert builder.locked == {"build": True, "load": True}
    assert not _taken_elsewhere()  # and released afterwards


def test_a_torch_without_dynamos_lock_gets_a_lock_of_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_static_kernel import _threads
    from torch._dynamo import convert_frame

    assert _threads.compile_lock() is compile_lock
    monkeypatch.delattr(convert_frame, "compile_lock")
    lock = _threads.compile_lock()
    assert lock is _threads._own_compile_lock
    with lock, lock:  # usable, and re-entrant: a load may rebuild while holding it
        assert _taken_elsewhere() is False  # a lock of ours, not Dynamo's
