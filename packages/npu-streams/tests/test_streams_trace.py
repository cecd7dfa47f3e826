"""Dynamo and AOT autograd keep the npu_streams ops, in program order, with fullgraph=True."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import npu_streams
import pytest
import torch
import torch.fx
from npu_streams import current_stream_tag
from torch._functorch.aot_autograd import aot_module_simplified

# Each test compiles from scratch (the root conftest resets Dynamo before and after it).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")

Backend = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]


def _stream_calls(gm: torch.fx.GraphModule) -> list[tuple[str, tuple[Any, ...]]]:
    calls = []
    for node in gm.graph.nodes:
        target = node.target
        if node.op == "call_function" and "npu_streams" in str(target):
            name = str(target).split(".")[1]
            consts = tuple(a for a in node.args if isinstance(a, str))
            calls.append((name, consts))
    return calls


SEED_CALLS = [
    ("tagged_event_record", ("66",)),
    ("stream_enter", ("1", "0")),
    ("tagged_event_wait", ("66",)),
    ("tagged_event_record", ("77",)),
    ("stream_exit", ("1",)),
    ("record_tagged_stream", ("1",)),
    ("stream_enter", ("2", "0")),
    ("tagged_event_wait", ("77",)),
    ("stream_exit", ("2",)),
]


def _capture_dynamo(graphs: list[torch.fx.GraphModule]) -> Backend:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend


def _capture_aot(graphs: list[torch.fx.GraphModule]) -> Backend:
    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(gm)
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=fw_compiler, keep_inference_input_mutations=True
        )

    return backend


@pytest.mark.parametrize("make_backend", [_capture_dynamo, _capture_aot], ids=["dynamo", "aot"])
def test_seed_ops_appear_in_program_order(seed_model: Any, make_backend: Any) -> None:
    graphs: list[torch.fx.GraphModule] = []
    model = seed_model()
    inputs = [torch.randn(8, 8) for _ in range(4)]
    with torch.no_grad():
        compiled = torch.compile(model, backend=make_backend(graphs), fullgraph=True)
        outputs = compiled(*inputs)
    assert len(graphs) == 1
    assert _stream_calls(graphs[0]) == SEED_CALLS
    assert npu_streams.has_stream_ops(graphs[0])
    for got, want in zip(outputs, model(*inputs), strict=True):
        torch.testing.assert_close(got, want)


def test_ops_sit_between_the_compute_they_order(seed_model: Any) -> None:
    graphs: list[torch.fx.GraphModule] = []
    with torch.no_grad():
        torch.compile(seed_model(), backend=_capture_aot(graphs), fullgraph=True)(
            *[torch.randn(8, 8) for _ in range(4)]
        )
    order = [
        str(node.target)
        for node in graphs[0].graph.nodes
        if node.op == "call_function" and "add" not in str(node.target)
    ]
    enter = order.index("npu_streams.stream_enter.default")
    exit_ = order.index("npu_streams.stream_exit.default")
    assert order.index("aten.mm.default") in range(enter, exit_)  # the side-stream mm


def test_ops_are_kept_with_grad_enabled_too() -> None:
    graphs: list[torch.fx.GraphModule] = []
    linear = torch.nn.Linear(4, 4)

    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_streams.npu_stream_switch("1"):
            y = linear(x)
        return y * 2

    out = torch.compile(fn, backend=_capture_aot(graphs), fullgraph=True)(torch.randn(2, 4))
    assert out.requires_grad
    names = [name for name, _ in _stream_calls(graphs[0])]
    assert names == ["stream_enter", "stream_exit"]


def test_tracing_does_not_touch_the_eager_scope_stack(seed_model: Any) -> None:
    graphs: list[torch.fx.GraphModule] = []
    model = seed_model()
    with npu_streams.npu_stream_switch("outer"):
        torch.compile(model, backend=_capture_aot(graphs), fullgraph=True)(
            *[torch.randn(8, 8) for _ in range(4)]
        )
        assert current_stream_tag() == "outer"
    assert current_stream_tag() == "default"


def test_priority_reaches_the_graph_as_a_string() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_streams.npu_stream_switch("hi", stream_priority=-1):
            return x + 1

    torch.compile(fn, backend=_capture_dynamo(graphs), fullgraph=True)(torch.ones(2))
    assert ("stream_enter", ("hi", "-1")) in _stream_calls(graphs[0])


def test_graph_without_stream_ops_reports_none() -> None:
    graphs: list[torch.fx.GraphModule] = []
    torch.compile(lambda x: x * 2, backend=_capture_dynamo(graphs), fullgraph=True)(torch.ones(2))
    assert not npu_streams.has_stream_ops(graphs[0])
