"""What CUDA graphs need beyond the generic calls: pool ids, streams, allocator hooks."""

from __future__ import annotations

from typing import Any

import torch

from npu_mempool._devices.base import GraphBackend
from npu_mempool._devices.native import DeviceBackend, has_accelerator_graph, recording
from npu_mempool._devices.registry import DeviceType

__all__ = ["DEVICE", "Cuda"]


class Cuda:
    device_type = "cuda"
    legacy_graph_name = "torch.cuda.CUDAGraph"
    # cuBLAS creates its handle and workspace on first use; inside a capture that allocation
    # would land in the graph pool for good (torch's own CUDA graph paths warm up too).
    warmup_runs = 1

    def pool_id(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def reserved(self, device: torch.device) -> int:
        return int(torch.cuda.memory_reserved(device))

    def snapshot(self) -> list[dict[str, Any]]:
        return list(torch.cuda.memory_snapshot())  # type: ignore[no-untyped-call]

    def get_state(self, index: int, pool_id: Any) -> Any:
        return torch._C._cuda_getCheckpointState(index, pool_id)

    def set_state(self, index: int, state: Any, stale: list[int]) -> None:
        torch._C._cuda_setCheckpointPoolState(index, state, stale, [])

    def live_allocations_are(self, index: int, pool_id: Any, ptrs: set[int]) -> bool | None:
        check = getattr(torch._C, "_cuda_checkPoolLiveAllocations", None)
        return None if check is None else bool(check(index, pool_id, ptrs))

    def has_checkpoint_hooks(self) -> bool:
        return hasattr(torch._C, "_cuda_getCheckpointState") and hasattr(
            torch._C, "_cuda_setCheckpointPoolState"
        )

    def drop_library_workspaces(self) -> None:
        # cuBLAS keeps one workspace per (handle, stream), allocated on first use: during a
        # capture it comes from the graph pool and stays allocated there for good, so the pool
        # holds memory no graph output owns and can never be rewound (mode 2 off). Dropping the
        # cache around captures, as CUDA Graph Trees do, makes the workspace an ordinary
        # intermediate of the graph that captured it.
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()

    def legacy_graph(self) -> Any:
        return torch.cuda.CUDAGraph()

    def legacy_context(self, graph: Any, pool_id: Any, stream: Any, error_mode: str) -> Any:
        return recording(graph, torch.cuda.stream(stream), pool_id, error_mode)

    def current_stream(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)

    def set_stream(self, stream: Any) -> None:
        torch.cuda.set_stream(stream)

    def end_allocate_to_pool(self, index: int, pool_id: Any) -> bool:
        # Refused ("not currently recording") once capture_end has stopped the routing itself.
        end = getattr(torch._C, "_cuda_endAllocateToPool", None)
        if end is None:
            return False
        try:
            end(index, pool_id)
        except RuntimeError:
            return False
        return True

    def release_pool(self, index: int, pool_id: Any) -> None:
        release = getattr(torch._C, "_cuda_releasePool", None)
        if release is not None:
            release(index, pool_id)

    def capture_refusal(self) -> str | None:
        return None


def _backend() -> GraphBackend:
    return DeviceBackend(Cuda(), accelerator_graph=has_accelerator_graph())


DEVICE = DeviceType("cuda", _backend)
