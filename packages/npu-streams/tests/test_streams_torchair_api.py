"""TorchAir's call forms: parameter names, enable_inner_parallel, record/wait, Event methods."""

from __future__ import annotations

import warnings
from typing import Any

import npu_streams
import pytest
import torch
import torch.fx
from npu_streams import (
    STREAM_META_KEY,
    StreamTagError,
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_stream_switch,
    prepare_for_capture,
)
from npu_streams import _ops as ops_module
from torch._functorch.aot_autograd import aot_module_simplified

# Each test compiles from scratch (the root conftest resets Dynamo before and after it).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _prepared_graph(fn: Any, inputs: list[torch.Tensor]) -> tuple[torch.fx.GraphModule, Any]:
    graphs: list[torch.fx.GraphModule] = []

    def fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(prepare_for_capture(gm))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

    with torch.no_grad():
        out = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return graphs[0], out


# ---- priorities: the CPU applies the device's rule ---------------------------------------------


def test_one_tag_with_two_priorities_is_refused_on_cpu() -> None:
    with npu_stream_switch("cpu-prio", stream_priority=-1):
        pass
    with pytest.raises(StreamTagError, match="already exists with priority -1"):  # noqa: SIM117
        with npu_stream_switch("cpu-prio", stream_priority=0):
            pass
    assert npu_streams.current_stream_tag() == "default"
    with npu_stream_switch("cpu-prio", stream_priority=-1):  # the same priority is fine
        pass


def test_record_stream_fixes_the_tag_priority_on_cpu_as_on_a_device() -> None:
    # On a device, record-stream creates the tagged stream (priority 0) when it does not exist.
    npu_record_tagged_stream(torch.ones(1), "cpu-rs")
    with pytest.raises(StreamTagError, match="already exists with priority 0"):  # noqa: SIM117
        with npu_stream_switch("cpu-rs", stream_priority=-1):
            pass


def test_two_priorities_for_one_tag_in_one_graph_fail_at_compile() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_stream_switch("g-prio", stream_priority=-1):
            y = x + 1
        with npu_stream_switch("g-prio", stream_priority=0):
            z = y * 2
        return z

    with pytest.raises(Exception, match=r"stream tag 'g-prio' is used with priority -1"):
        _prepared_graph(fn, [torch.ones(2)])


# ---- TorchAir signatures ------------------------------------------------------------------------


def test_record_tagged_stream_takes_torchair_keyword_names() -> None:
    tensor = torch.ones(2)
    npu_record_tagged_stream(input=tensor, tagged_stream="1")
    npu_record_tagged_stream(tensor, tagged_stream="default")
    with pytest.raises(StreamTagError, match="expects a tensor"):
        npu_record_tagged_stream("not a tensor", "1")  # type: ignore[arg-type]


def test_enable_inner_parallel_is_accepted_and_false_warns_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ops_module, "_inner_parallel_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with npu_stream_switch("ip", 0, enable_inner_parallel=True):
            pass
    with pytest.warns(UserWarning, match=r"enable_inner_parallel=False\) has no effect"):  # noqa: SIM117
        with npu_stream_switch("ip", stream_priority=0, enable_inner_parallel=False):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        with npu_stream_switch("ip", enable_inner_parallel=False):
            pass
    with pytest.raises(StreamTagError, match="enable_inner_parallel must be True or False"):
        npu_stream_switch("ip", enable_inner_parallel="no")  # type: ignore[arg-type]


def test_enable_inner_parallel_false_compiles_with_fullgraph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_stream_switch("ip2", enable_inner_parallel=False):
            return x + 1

    monkeypatch.setattr(ops_module, "_inner_parallel_warned", False)
    with pytest.warns(UserWarning, match="enable_inner_parallel"):
        _, out = _prepared_graph(fn, [torch.ones(2)])
    assert out.tolist() == [2.0, 2.0]


# ---- record / wait ------------------------------------------------------------------------------


def test_record_and_wait_validate_like_torchair() -> None:
    marker = npu_streams.record()
    assert isinstance(marker, torch.Tensor)
    assert marker.numel() == 0
    npu_streams.wait([marker, torch.ones(1)])
    with pytest.raises(StreamTagError, match="non-empty list"):
        npu_streams.wait([])
    with pytest.raises(StreamTagError, match="must be tensors"):
        npu_streams.wait([1])  # type: ignore[list-item]


def test_wait_orders_the_waiting_stream_after_the_producer_stream() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_stream_switch("producer"):
            y = x * 3
            done = npu_streams.record()
        npu_streams.wait([y, done])
        return y + 1

    gm, out = _prepared_graph(fn, [torch.ones(2)])
    assert out.tolist() == [4.0, 4.0]
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    names = [str(n.target) for n in nodes]
    # The op itself is gone: inside a capture it would wait on every tagged stream of the
    # process, recorded outside the capture. The producers' events stand in for it.
    assert "npu_streams.wait.default" not in names
    wait_index = names.index("aten.add.Tensor")
    records = [
        n
        for n in nodes
        if str(n.target) == "npu_streams.internal_event_record.default" and ".dep" in n.args[0]
    ]
    waits = [
        n
        for n in nodes
        if str(n.target) == "npu_streams.internal_event_wait.default" and ".dep" in n.args[0]
    ]
    assert len(records) == 2
    assert len(waits) == 2
    for record in records:
        assert record.meta[STREAM_META_KEY] == "producer"
        assert record.args[0] in {w.args[0] for w in waits}
    for wait in waits:
        assert wait.meta[STREAM_META_KEY] == "default"
        assert nodes.index(wait) < wait_index


def test_wait_waits_for_every_other_stream_eagerly(fake_device: Any) -> None:
    with npu_stream_switch("s1"):
        pass
    npu_streams.wait([torch.ones(1)])
    assert ("record", "ev0", "side0") in fake_device.log
    assert ("wait", "ev0", "main") in fake_device.log


def test_wait_during_a_capture_joins_only_the_capturing_streams(fake_device: Any) -> None:
    # A wait on an event recorded outside the capture invalidates a device capture: of the
    # tagged streams, only those the capture forked (capturing too) are joined.
    with npu_stream_switch("outside"):
        pass
    with npu_stream_switch("forked"):
        pass
    fake_device.capturing = {"main", "side1"}
    npu_streams.wait([torch.ones(1)])
    recorded = [entry[2] for entry in fake_device.log if entry[0] == "record"]
    assert recorded == ["side1"]


# ---- tagged events act like torch.Event ---------------------------------------------------------


def test_tagged_event_has_torch_event_methods_on_cpu() -> None:
    event = npu_create_tagged_event("ev-methods")
    event.record()
    event.wait()
    assert event.query() is True
    event.synchronize()


def test_tagged_event_methods_reach_the_device_event(fake_device: Any) -> None:
    event = npu_create_tagged_event("ev-dev")
    event.record()
    with npu_stream_switch("w"):
        event.wait()
    assert fake_device.log[:2] == [("record", "ev0", "main"), ("set_stream", "side0")]
    assert ("wait", "ev0", "side0") in fake_device.log


def test_tagged_event_methods_trace_into_the_graph() -> None:
    event = npu_create_tagged_event("ev-graph")

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        event.record()
        with npu_stream_switch("m"):
            event.wait()
            z = y * 2
        return z

    gm, out = _prepared_graph(fn, [torch.ones(2)])
    assert out.tolist() == [4.0, 4.0]
    targets = [str(n.target) for n in gm.graph.nodes]
    assert "npu_streams.tagged_event_record.default" in targets
    assert "npu_streams.tagged_event_wait.default" in targets
