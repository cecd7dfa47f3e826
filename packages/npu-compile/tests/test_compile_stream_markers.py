"""``record()``/``wait()`` inside a graph on a device: the markers live on the graph's device.

``npu_streams.record()`` returns an empty marker tensor. Traced, it is a CPU tensor, and the split
check reads a CPU tensor inside a device graph as CPU work: the graph was captured in pieces on
every accelerator, with the fork/join events of its stream scope in different pieces (and a wait
on an event recorded in another capture is refused). The CPU emulation splits nothing, so here
meta tensors stand in for a device's, with a graph backend for them that captures by running the
graph, as the emulation does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import npu_compile
import npu_streams
import pytest
import torch
from npu_compile import _pipeline
from npu_compile._piecewise import split_points
from npu_mempool import PoolHandle, _devices


class _MetaGraph:
    def __init__(self, rerun: Any) -> None:
        self._rerun = rerun

    def replay(self, args: tuple[Any, ...]) -> None:
        self._rerun(args)  # meta tensors carry no values: running the ops is all there is

    def reset(self) -> None:
        pass


class _MetaBackend:
    """Graphs of meta tensors: a capture runs the body, a replay runs it again."""

    name = "meta (test)"
    executes_on_capture = True
    default_warmup_runs = 0

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(device, native=("meta", 0))

    def capture(self, pool: PoolHandle, body: Any, error_mode: str = "thread_local") -> Any:
        with torch.no_grad():
            leaves, rerun, _ = body(lambda x: torch.empty_like(x))
        return _MetaGraph(rerun), leaves

    def checkpoint(self, pool: PoolHandle) -> bool:
        return False

    def rewind(self, pool: PoolHandle) -> bool:
        return False


@pytest.fixture
def meta_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[torch.device]:
    """The backend sees meta tensors as a device's, with a graph implementation for them."""
    device = torch.device("meta")
    monkeypatch.setattr(_pipeline, "accelerator_device", lambda inputs: device)
    _devices.register(_devices.DeviceType("meta", _MetaBackend), replace=True)
    yield device
    _devices.unregister("meta")


def _forked(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    marker = npu_streams.record()
    with npu_streams.npu_stream_switch("side"):
        npu_streams.wait([marker])
        z = y + 1
    return z * 3


def test_a_graph_using_record_and_wait_is_captured_whole_on_a_device(
    meta_device: torch.device, fresh_tagged_events: None
) -> None:
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_forked, backend=backend, fullgraph=True)
    with torch.no_grad():
        out = compiled(torch.ones(4, device=meta_device))
    assert out.device == meta_device
    assert out.shape == (4,)
    assert backend.stats.captured == 1
    assert backend.stats.piecewise == 0, backend.stats.splits
    assert backend.stats.fallbacks == []


def _aot_forward(fn: Any, *args: torch.Tensor) -> torch.fx.GraphModule:
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[torch.fx.GraphModule] = []

    def forward_compiler(gm: torch.fx.GraphModule, example: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler)

    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    (graph,) = graphs
    return graph


def test_prepare_for_capture_puts_the_markers_on_the_graph_s_device(
    fresh_tagged_events: None,
) -> None:
    device = torch.device("meta")
    graph = _aot_forward(_forked, torch.ones(4, device=device))
    markers = [n for n in graph.graph.nodes if "npu_streams.record" in str(n.target)]
    assert markers
    assert all(n.meta["val"].device.type == "cpu" for n in markers)  # as traced
    npu_streams.prepare_for_capture(graph, device)
    assert all(n.meta["val"].device == device for n in markers)
    assert split_points(graph, device, ()) == []
    # And the graph still runs (on the device the markers now name).
    (out,) = graph(torch.ones(4, device=device))
    assert out.device == device


@pytest.mark.device
def test_record_and_wait_under_the_backend_on_the_accelerator(fresh_tagged_events: None) -> None:
    from npu_compile._device import best_device

    device = best_device()
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_forked, backend=backend, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):  # warm-up (CUDA), capture, replay
            x = torch.randn(8, 8, device=device)
            torch.testing.assert_close(compiled(x), _forked(x))
    assert backend.stats.captured == 1
    assert backend.stats.piecewise == 0, backend.stats.splits
    assert backend.stats.fallbacks == []
