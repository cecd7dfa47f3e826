"""Real streams and events on an accelerator (CUDA or NPU); skipped where none is present."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import npu_streams
import pytest
import torch
import torch.fx
from npu_streams import (
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_stream_switch,
    npu_tagged_event_record,
    npu_tagged_event_wait,
    prepare_for_capture,
)
from torch._functorch.aot_autograd import aot_module_simplified

pytestmark = pytest.mark.device


def _device() -> torch.device:
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    return torch.device(accelerator.type, torch.accelerator.current_device_index())


def test_scope_runs_ops_on_the_tagged_stream() -> None:
    device = _device()
    main = torch.accelerator.current_stream(device)
    x = torch.randn(64, 64, device=device)
    with npu_stream_switch("dev-a"):
        inside = torch.accelerator.current_stream(device)
        y = x @ x
        with npu_stream_switch("dev-b", stream_priority=-1):
            nested = torch.accelerator.current_stream(device)
            with npu_stream_switch("default"):
                main_again = torch.accelerator.current_stream(device)
        with npu_stream_switch("dev-a"):
            same_tag = torch.accelerator.current_stream(device)
        done = torch.Event(device)
        done.record(inside)
    assert torch.accelerator.current_stream(device) == main
    assert inside != main
    assert nested not in (main, inside)
    assert main_again == main
    assert same_tag == inside
    done.synchronize()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)


def test_tagged_events_order_work_across_streams() -> None:
    device = _device()
    a = torch.randn(1024, 1024, device=device)
    event = npu_create_tagged_event("dev-ev")
    with npu_stream_switch("dev-side"):
        b = a @ a  # long enough that an unordered read on the main stream would see garbage
        npu_tagged_event_record(event)
    npu_tagged_event_wait(event)
    npu_record_tagged_stream(b, "default")  # b was allocated on the side stream, used on main
    c = b + 1
    torch.accelerator.synchronize()
    torch.testing.assert_close(c.cpu(), a.cpu() @ a.cpu() + 1, rtol=1e-3, atol=1e-2)


def _capture(fn: Callable[..., Any], args: Sequence[torch.Tensor]) -> tuple[Any, Any]:
    """Warm up ``fn`` on a side stream, then capture it; returns (graph, static outputs)."""
    device = args[0].device
    if device.type == "cuda":
        graph = torch.cuda.CUDAGraph()
        warmup = torch.cuda.Stream(device)
        warmup.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(warmup):
            fn(*args)
        torch.cuda.current_stream(device).wait_stream(warmup)
        with torch.cuda.graph(graph):
            outputs = fn(*args)
        return graph, outputs
    if not hasattr(torch.accelerator, "Graph"):
        pytest.skip(f"no generic graph API for {device.type} in torch {torch.__version__}")
    accelerator_graph = torch.accelerator.Graph()
    stream = torch.Stream(device)
    with stream:
        fn(*args)
    with stream, accelerator_graph:
        outputs = fn(*args)
    return accelerator_graph, outputs


def test_seed_example_inside_a_captured_graph_equals_eager(seed_model: Any) -> None:
    device = _device()
    size = 512
    model = seed_model(size=size, device=str(device))
    graphs: list[torch.fx.GraphModule] = []

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(prepare_for_capture(gm))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=fw_compiler, keep_inference_input_mutations=True
        )

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(size, size, device=device) for _ in range(4)]

    with torch.no_grad():
        torch.compile(model, backend=backend, fullgraph=True)(*inputs())
        prepared = graphs[0]
        assert npu_streams.has_stream_ops(prepared)
        static = inputs()
        graph, outputs = _capture(prepared, static)
        for _ in range(2):  # replay with fresh values twice: results follow the inputs
            fresh = inputs()
            for slot, value in zip(static, fresh, strict=True):
                slot.copy_(value)
            graph.replay()
            expected = model(*fresh)  # eager, on real streams
            torch.accelerator.synchronize()
            for got, want in zip(outputs, expected, strict=True):
                torch.testing.assert_close(got, want)
    assert npu_streams.current_stream_tag() == "default"


def test_reads_across_streams_in_a_captured_graph_see_their_producer() -> None:
    # No event of the user's orders the side stream after `y`, or the main stream after `z`:
    # the pass must. Without it the replay ran the reads beside their producers (seen on CUDA:
    # every element wrong).
    device = _device()
    size = 1024
    w = torch.randn(size, size, device=device) / size**0.5
    graphs: list[torch.fx.GraphModule] = []

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        with npu_stream_switch("dev-reads"):
            z = y
            for _ in range(8):
                z = torch.relu(z @ w)
        return z * 3 + 1

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(prepare_for_capture(gm, device))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler)

    with torch.no_grad():
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        compiled(torch.randn(size, size, device=device), w)
        prepared = graphs[0]
        assert npu_streams.unordered_reads(prepared) == []
        static = [torch.randn(size, size, device=device), w]
        graph, outputs = _capture(prepared, static)
        for _ in range(3):
            fresh = torch.randn(size, size, device=device)
            static[0].copy_(fresh)
            graph.replay()
            expected = fresh @ w
            for _ in range(8):
                expected = torch.relu(expected @ w)
            torch.accelerator.synchronize()
            torch.testing.assert_close(outputs[0], expected * 3 + 1, rtol=1e-3, atol=1e-3)
    assert npu_streams.current_stream_tag() == "default"
