"""What NPU graphs need from torch_npu, imported lazily: without CANN it breaks torch."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from npu_mempool._devices.base import GraphBackend
from npu_mempool._devices.native import DeviceBackend, has_accelerator_graph, recording
from npu_mempool._devices.registry import DeviceType

__all__ = ["DEVICE", "Npu"]


def _torch_npu() -> Any:
    return importlib.import_module("torch_npu")


class Npu:
    device_type = "npu"
    legacy_graph_name = "torch_npu.npu.NPUGraph"
    warmup_runs = 0  # TorchAir's num_warmup_iters default

    def pool_id(self) -> Any:
        return _torch_npu().npu.graph_pool_handle()

    def stream(self, device: torch.device) -> Any:
        return _torch_npu().npu.Stream(device=device)

    def reserved(self, device: torch.device) -> int:
        return int(_torch_npu().npu.memory_reserved(device))

    def snapshot(self) -> list[dict[str, Any]]:
        return list(_torch_npu().npu.memory_snapshot())

    def get_state(self, index: int, pool_id: Any) -> Any:
        return _torch_npu()._C._npu_getCheckpointState(index, pool_id)

    def set_state(self, index: int, state: Any, stale: list[int]) -> None:
        _torch_npu()._C._npu_setCheckpointPoolState(index, state, stale, [])

    def live_allocations_are(self, index: int, pool_id: Any, ptrs: set[int]) -> bool | None:
        check = getattr(_torch_npu()._C, "_npu_checkPoolLiveAllocations", None)
        return None if check is None else bool(check(index, pool_id, ptrs))

    def has_checkpoint_hooks(self) -> bool:
        c = getattr(_torch_npu(), "_C", None)
        return hasattr(c, "_npu_getCheckpointState") and hasattr(c, "_npu_setCheckpointPoolState")

    def drop_library_workspaces(self) -> None:
        return None  # torch_npu exposes no such cache to drop

    def legacy_graph(self) -> Any:
        return _torch_npu().npu.NPUGraph()

    def legacy_context(self, graph: Any, pool_id: Any, stream: Any, error_mode: str) -> Any:
        # Not torch_npu.npu.graph, which synchronises the device and empties its caches before
        # every capture (see [Note: what a capture pays] in native).
        return recording(graph, _torch_npu().npu.stream(stream), pool_id, error_mode)

    def current_stream(self, device: torch.device) -> Any:
        return _torch_npu().npu.current_stream(device)

    def set_stream(self, stream: Any) -> None:
        _torch_npu().npu.set_stream(stream)

    def end_allocate_to_pool(self, index: int, pool_id: Any) -> bool:
        # Refused once capture_end has stopped the routing itself (see native._abandon).
        c = getattr(_torch_npu(), "_C", None)
        # torch_npu 2.11 and 2.12 (the releases without torch.accelerator.Graph support) call the
        # hook by torch's old name, _npu_endAllocateCurrentStreamToPool: same arguments, same
        # allocator call. Without it the allocator keeps routing allocations to the pool.
        end = getattr(c, "_npu_endAllocateToPool", None) or getattr(
            c, "_npu_endAllocateCurrentStreamToPool", None
        )
        if end is None:
            return False
        try:
            end(index, pool_id)
        except RuntimeError:
            return False
        return True

    def release_pool(self, index: int, pool_id: Any) -> None:
        release = getattr(getattr(_torch_npu(), "_C", None), "_npu_releasePool", None)
        if release is not None:
            release(index, pool_id)

    def capture_refusal(self) -> str | None:
        # torch_npu refuses to capture with the task queue's level 2, which Ascend recommends
        # for host-bound eager models: every capture would fail, one warning per graph key,
        # none naming the cause.
        if os.environ.get("TASK_QUEUE_ENABLE", "").strip() == "2":
            return (
                "TASK_QUEUE_ENABLE=2 is set, and torch_npu refuses to capture graphs under it: "
                "every graph runs eagerly. Set TASK_QUEUE_ENABLE=1 (a replay queues one task "
                "per graph, so level 2's faster dispatch buys nothing there), or leave graph "
                "capture off"
            )
        return None


def _registers_accelerator_graph() -> bool:
    """Whether torch_npu registers ``torch.accelerator.Graph`` (and the NPU is the accelerator)."""
    if not has_accelerator_graph():
        return False
    try:
        current = torch.accelerator.current_accelerator()
        if current is None or current.type != "npu":
            return False
        torch.accelerator.Graph()
    except Exception:
        return False
    return True


def _backend() -> GraphBackend:
    return DeviceBackend(Npu(), accelerator_graph=_registers_accelerator_graph())


DEVICE = DeviceType("npu", _backend)
