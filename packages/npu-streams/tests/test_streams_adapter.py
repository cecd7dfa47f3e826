"""The device adapter on CPU, and its NPU fallback against a fake torch_npu module."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from npu_streams import _accel, _device


@pytest.mark.skipif(torch.accelerator.is_available(), reason="checks the no-accelerator answers")
def test_cpu_has_no_active_device_and_cpu_tensors_no_stream_device() -> None:
    assert _accel.current_device() is None
    assert _device.tensor_device(torch.ones(1)) is None
    assert _device.tensor_device(torch.empty(1, device="meta")) is None


def test_priority_reaches_the_generic_stream_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, int]] = []

    def fake_stream(device: torch.device, *, priority: int) -> str:
        seen.append((device, priority))
        return "stream"

    monkeypatch.setattr(torch, "Stream", fake_stream)
    assert _device.new_stream(torch.device("cuda", 1), -1) == "stream"
    assert seen == [(torch.device("cuda", 1), -1)]


def test_npu_falls_back_to_torch_npu_stream_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    def generic_rejects(device: torch.device, *, priority: int) -> None:
        raise RuntimeError("priority not supported by the generic constructor")

    created: list[tuple[Any, int]] = []

    def npu_stream(device: torch.device, priority: int = 0) -> str:
        created.append((device, priority))
        return "npu-stream"

    fake = types.ModuleType("torch_npu")
    fake.npu = types.SimpleNamespace(Stream=npu_stream)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    monkeypatch.setattr(torch, "Stream", generic_rejects)
    # torch.device("npu") only parses once torch_npu has registered the device type.
    npu = types.SimpleNamespace(type="npu", index=0)
    assert _device.new_stream(npu, -1) == "npu-stream"  # type: ignore[arg-type]
    assert created == [(npu, -1)]


def test_non_npu_errors_are_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def generic_rejects(device: torch.device, *, priority: int) -> None:
        raise RuntimeError("no such device")

    monkeypatch.setattr(torch, "Stream", generic_rejects)
    with pytest.raises(RuntimeError, match="no such device"):
        _device.new_stream(torch.device("cuda", 0), 0)


def test_importing_the_package_does_not_import_torch_npu() -> None:
    import subprocess

    code = "import sys, npu_streams; print('torch_npu' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
