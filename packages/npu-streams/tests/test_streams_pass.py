"""prepare_for_capture: fork/join structure, stream labels, validation, and runtime behaviour."""

from __future__ import annotations

import logging
import re
from typing import Any

import npu_streams
import pytest
import torch
import torch.fx
from npu_streams import (
    STREAM_META_KEY,
    EventTagError,
    StreamScopeError,
    npu_stream_switch,
    prepare_for_capture,
)
from torch._functorch.aot_autograd import aot_module_simplified

# Each test compiles from scratch (the root conftest resets Dynamo before and after it).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _compile_prepared(
    fn: Any, inputs: list[torch.Tensor], *, aot: bool = True
) -> tuple[torch.fx.GraphModule, Any]:
    """Compile ``fn`` with a test backend that runs the pass output; return (graph, outputs)."""
    graphs: list[torch.fx.GraphModule] = []

    def prepared(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(prepare_for_capture(gm))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        if not aot:
            return prepared(gm, example_inputs)
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=prepared, keep_inference_input_mutations=True
        )

    with torch.no_grad():
        outputs = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    assert len(graphs) == 1
    return graphs[0], outputs


def _stream_calls(gm: torch.fx.GraphModule) -> list[tuple[str, ...]]:
    """The npu_streams calls in order, with per-graph internal tags made stable."""
    calls = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "npu_streams" in str(node.target):
            name = str(node.target).split(".")[1]
            tag = next((a for a in node.args if isinstance(a, str)), None)
            if tag is None:  # a record() marker: no tag, its device in kwargs
                continue
            calls.append((name, re.sub(r"^graph\d+\.", "", tag), node.meta[STREAM_META_KEY]))
    return calls


def _labels_by_target(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    return [
        (str(node.target), node.meta[STREAM_META_KEY])
        for node in gm.graph.nodes
        if node.op == "call_function" and str(node.target).startswith("aten.")
    ]


SEED_PREPARED = [
    ("internal_event_record", "fork", "default"),
    ("tagged_event_record", "66", "default"),
    ("stream_enter", "1", "1"),
    ("internal_event_wait", "fork", "1"),
    ("tagged_event_wait", "66", "1"),
    ("tagged_event_record", "77", "1"),
    ("internal_event_record", "join0", "1"),
    ("stream_exit", "1", "1"),
    ("record_tagged_stream", "1", "default"),
    ("stream_enter", "2", "2"),
    ("internal_event_wait", "fork", "2"),
    ("tagged_event_wait", "77", "2"),
    ("internal_event_record", "join1", "2"),
    ("stream_exit", "2", "2"),
    ("internal_event_wait", "join0", "default"),
    ("internal_event_wait", "join1", "default"),
]


def _seed_inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(8, 8) for _ in range(4)]


@pytest.mark.parametrize("aot", [True, False], ids=["aot", "dynamo"])
def test_seed_graph_gets_fork_join_pairs_and_labels(seed_model: Any, aot: bool) -> None:
    gm, _ = _compile_prepared(seed_model(), _seed_inputs(), aot=aot)
    assert _stream_calls(gm) == SEED_PREPARED
    assert all(STREAM_META_KEY in node.meta for node in gm.graph.nodes)
    if aot:
        assert _labels_by_target(gm) == [
            ("aten.add.Tensor", "default"),  # add_result
            ("aten.mm.default", "1"),  # mm_result
            ("aten.add.Tensor", "default"),  # B
            ("aten.mm.default", "default"),  # mm1
            ("aten.ones.default", "default"),  # C
            ("aten.add.Tensor", "default"),  # C.add_(2), functionalized
            ("aten.add.Tensor", "2"),  # add2
        ]
    placeholders = [n for n in gm.graph.nodes if n.op in ("placeholder", "output")]
    assert {n.meta[STREAM_META_KEY] for n in placeholders} == {"default"}


def test_compiled_seed_numbers_equal_eager(seed_model: Any) -> None:
    model = seed_model()
    inputs = _seed_inputs()
    _, outputs = _compile_prepared(model, inputs)
    for got, want in zip(outputs, model(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_prepared_seed_runs_the_fork_join_protocol(seed_model: Any, fake_device: Any) -> None:
    """At run time the prepared graph issues exactly the capture-safe stream sequence."""
    _compile_prepared(seed_model(), _seed_inputs())
    # ev0 = fork, ev1 = "66", ev2 = "77", ev3/ev4 = joins of scopes "1"/"2" (creation order);
    # side0 = stream "1", side1 = stream "2".
    assert fake_device.log == [
        ("record", "ev0", "main"),  # fork: main stream at graph start
        ("record", "ev1", "main"),  # user event 66
        ("set_stream", "side0"),
        ("wait", "ev0", "side0"),  # side stream "1" joins the capture
        ("wait", "ev1", "side0"),
        ("record", "ev2", "side0"),  # user event 77
        ("record", "ev3", "side0"),  # join record of scope "1"
        ("set_stream", "main"),
        ("record_stream", "side0"),  # B kept alive for stream "1"
        ("set_stream", "side1"),
        ("wait", "ev0", "side1"),  # side stream "2" joins the capture
        ("wait", "ev2", "side1"),
        ("record", "ev4", "side1"),  # join record of scope "2"
        ("set_stream", "main"),
        ("wait", "ev3", "main"),  # main rejoins both side streams before returning
        ("wait", "ev4", "main"),
    ]


def test_nested_scopes_fork_and_join_each_side_stream() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with npu_stream_switch("outer"):
            a = x + 1
            with npu_stream_switch("inner", stream_priority=-1):
                b = x * 3
            c = a - 1
        return a, b, c

    x = torch.randn(4)
    gm, outputs = _compile_prepared(fn, [x])
    assert _stream_calls(gm) == [
        ("internal_event_record", "fork", "default"),
        ("stream_enter", "outer", "outer"),
        ("internal_event_wait", "fork", "outer"),
        ("stream_enter", "inner", "inner"),
        ("internal_event_wait", "fork", "inner"),
        ("internal_event_record", "join0", "inner"),
        ("stream_exit", "inner", "inner"),
        ("internal_event_record", "join1", "outer"),
        ("stream_exit", "outer", "outer"),
        ("internal_event_wait", "join0", "default"),
        ("internal_event_wait", "join1", "default"),
    ]
    assert _labels_by_target(gm) == [
        ("aten.add.Tensor", "outer"),
        ("aten.mul.Tensor", "inner"),
        ("aten.sub.Tensor", "outer"),
    ]
    for got, want in zip(outputs, fn(x), strict=True):
        torch.testing.assert_close(got, want)


def test_graph_break_inside_a_scope_is_a_stream_scope_error() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_stream_switch("1"):
            y = x + 1
            torch._dynamo.graph_break()
            z = y * 2
        return z

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        return prepare_for_capture(gm)

    with pytest.raises(Exception, match="graph break") as info:
        torch.compile(fn, backend=backend)(torch.ones(2))
    assert "StreamScopeError" in str(info.value)
    assert "fullgraph=True" in str(info.value)


def _graph_with(*calls: tuple[str, tuple[str, ...]]) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    for name, args in calls:
        graph.call_function(getattr(torch.ops.npu_streams, name).default, args)
    graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([("stream_enter", ("1", "0"))], "'1'\\) is opened but never closed"),
        ([("stream_exit", ("1",))], "'1'\\) is closed but was not opened"),
        (
            [("stream_enter", ("1", "0")), ("stream_enter", ("2", "0")), ("stream_exit", ("1",))],
            "closed while scope '2' is the innermost",
        ),
    ],
)
def test_unbalanced_scopes_are_rejected(calls: Any, message: str) -> None:
    with pytest.raises(StreamScopeError, match=message):
        prepare_for_capture(_graph_with(*calls))


def test_pass_is_idempotent(seed_model: Any) -> None:
    model = seed_model()  # keeps the events alive: the graph refers to them by tag only
    gm, _ = _compile_prepared(model, _seed_inputs())
    code = gm.code
    assert prepare_for_capture(gm) is gm
    assert gm.code == code
    assert _stream_calls(gm) == SEED_PREPARED


def test_graph_without_stream_ops_is_returned_unchanged() -> None:
    gm = _graph_with()
    code = gm.code
    assert prepare_for_capture(gm) is gm
    assert gm.code == code
    assert not any(STREAM_META_KEY in node.meta for node in gm.graph.nodes)


def test_events_without_side_scopes_get_labels_but_no_fork_join() -> None:
    event = npu_streams.npu_create_tagged_event("e")
    gm = _graph_with(
        ("tagged_event_record", ("e",)),
        ("stream_enter", ("default", "0")),
        ("tagged_event_wait", ("e",)),
        ("stream_exit", ("default",)),
    )
    prepare_for_capture(gm)
    assert [c[0] for c in _stream_calls(gm)] == [
        "tagged_event_record",
        "stream_enter",
        "tagged_event_wait",
        "stream_exit",
    ]
    assert {node.meta[STREAM_META_KEY] for node in gm.graph.nodes} == {"default"}
    del event


def test_forgotten_event_fails_at_prepare_time() -> None:
    npu_streams.npu_create_tagged_event("e")
    gm = _graph_with(("tagged_event_record", ("e",)))
    npu_streams.reset_tagged_events()
    with pytest.raises(EventTagError, match="cannot record tagged event 'e'"):
        prepare_for_capture(gm)


def test_wait_before_any_record_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    event = npu_streams.npu_create_tagged_event("late")
    gm = _graph_with(("tagged_event_wait", ("late",)), ("tagged_event_record", ("late",)))
    with caplog.at_level(logging.WARNING, logger="npu_streams"):
        prepare_for_capture(gm)
    assert "'late' is waited on before any record" in caplog.text
    del event


def test_join_precedes_input_mutation_copies() -> None:
    class Cache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("kv", torch.zeros(4, 3))

        def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            y = x * 2
            with npu_stream_switch("s"):
                self.kv.index_copy_(0, index, x + 1)
            return y

    module = Cache()
    gm, _ = _compile_prepared(module, [torch.ones(2, 3), torch.tensor([0, 2])])
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.index("npu_streams.internal_event_wait.default") < targets.index(
        "aten.copy_.default"
    )
    torch.testing.assert_close(module.kv[:, 0], torch.tensor([2.0, 0.0, 2.0, 0.0]))


def _split_in_two(gm: torch.fx.GraphModule, at: str) -> torch.fx.GraphModule:
    """``gm`` split before the first node whose target names ``at`` (pieces submod_0, submod_1)."""
    from torch.fx.passes.split_module import split_module

    part: dict[str, int] = {}
    current = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and at in str(node.target):
            current = 1
        part[node.name] = current
    return split_module(gm, gm, lambda node: part[node.name], keep_original_order=True)


def test_each_piece_of_a_split_graph_gets_its_own_fork_and_join() -> None:
    # The whole graph's fork is recorded in its first piece: a later piece that captures on its
    # own would wait on an event another capture recorded. prepare_piece gives it its own.
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        z = y.cos()  # the graph is split before this node
        with npu_stream_switch("side"):
            w = z + 1
        return w * 3

    x = torch.randn(4)
    gm, _ = _compile_prepared(fn, [x])
    split = _split_in_two(gm, "cos")
    first, second = split.submod_0, split.submod_1
    assert npu_streams.unmatched_waits(second)  # the fork's wait, its record in submod_0
    for piece in (first, second):
        npu_streams.prepare_piece(piece)
        assert npu_streams.unmatched_waits(piece) == []
    assert _stream_calls(first) == []
    # The fork is recorded at the piece's start, before `cos`: the side stream's read of `z`
    # and the main stream's read of `w` each wait for their producer (reads across streams).
    assert _stream_calls(second) == [
        ("internal_event_record", "fork", "default"),
        ("internal_event_record", "read0", "default"),
        ("stream_enter", "side", "side"),
        ("internal_event_wait", "fork", "side"),
        ("internal_event_wait", "read0", "side"),
        ("record_tagged_stream", "side", "side"),  # `z` is used on the side stream too
        ("internal_event_record", "read1", "side"),
        ("internal_event_record", "join0", "side"),
        ("stream_exit", "side", "side"),
        ("internal_event_wait", "read1", "default"),
        ("record_tagged_stream", "default", "default"),  # and `w` on the main stream
        ("internal_event_wait", "join0", "default"),
    ]
    assert npu_streams.unordered_reads(second) == []
    (out,) = split(x)
    torch.testing.assert_close(out, fn(x))


def test_prepare_piece_refuses_a_piece_that_cuts_a_scope() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_stream_switch("side"):
            y = x.sin()
            z = y.cos()  # split here: the scope is cut in two
        return z

    gm, _ = _compile_prepared(fn, [torch.randn(4)])
    split = _split_in_two(gm, "cos")
    with pytest.raises(StreamScopeError, match="is opened but never closed"):
        npu_streams.prepare_piece(split.submod_0)


def _read_waits(gm: torch.fx.GraphModule) -> list[tuple[str, ...]]:
    """The internal events that order reads across streams, as ``_stream_calls`` lists them."""
    return [call for call in _stream_calls(gm) if call[1].startswith("read")]


def test_a_value_read_on_another_stream_waits_for_its_producer(fake_device: Any) -> None:
    # Without these waits a replayed device graph ran `z * 3` beside `y + 1` and read `z`'s
    # memory before it was written (CUDA: every element wrong, no error); the fork, recorded at
    # the graph's start, did not order the side stream after `sin` either.
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        with npu_stream_switch("side"):
            z = y + 1
        return z * 3

    x = torch.randn(4)
    gm, out = _compile_prepared(fn, [x])
    # The compiled call, as the device sees it: ev0 = fork, ev1 = after `sin`, ev2 = after
    # `y + 1`, ev3 = join; each value is also recorded on the stream that reads it.
    assert fake_device.log == [
        ("record", "ev0", "main"),
        ("record", "ev1", "main"),
        ("set_stream", "side0"),
        ("wait", "ev0", "side0"),
        ("wait", "ev1", "side0"),  # `y + 1` waits for `sin`
        ("record_stream", "side0"),  # `y` is used on the side stream
        ("record", "ev2", "side0"),
        ("record", "ev3", "side0"),
        ("set_stream", "main"),
        ("wait", "ev2", "main"),  # `z * 3` waits for `y + 1`
        ("record_stream", "main"),  # `z` is used on the main stream
        ("wait", "ev3", "main"),
    ]
    torch.testing.assert_close(out, fn(x))
    assert npu_streams.unordered_reads(gm) == []
    assert _read_waits(gm) == [
        ("internal_event_record", "read0", "default"),  # after sin
        ("internal_event_wait", "read0", "side"),  # before y + 1
        ("internal_event_record", "read1", "side"),  # after y + 1
        ("internal_event_wait", "read1", "default"),  # before z * 3
    ]
    # The same graph without them: the checker names both reads.
    for node in [n for n in gm.graph.nodes if ".read" in str(n.args[:1])]:
        gm.graph.erase_node(node)
    assert [line.split(" reads ")[1] for line in npu_streams.unordered_reads(gm)] == [
        "sin (stream 'default')",
        "add (stream 'side')",
    ]


def test_reads_across_streams_are_ordered_in_a_dynamo_graph_too() -> None:
    # A Dynamo graph (before AOT autograd) calls methods and keeps its values as example_value.
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        with npu_stream_switch("side"):
            z = y.add(1)
        return z.mul(3)

    x = torch.randn(4)
    gm, out = _compile_prepared(fn, [x], aot=False)
    torch.testing.assert_close(out, fn(x))
    assert npu_streams.unordered_reads(gm) == []
    assert [call[2] for call in _read_waits(gm)] == ["default", "side", "side", "default"]


def test_a_read_the_program_already_orders_gets_no_second_wait() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        marker = npu_streams.record()
        with npu_stream_switch("side"):
            npu_streams.wait([marker])  # orders the side stream after `y`
            z = y + 1
        return z * 3  # nothing orders this read

    x = torch.randn(4)
    gm, out = _compile_prepared(fn, [x])
    torch.testing.assert_close(out, fn(x))
    assert npu_streams.unordered_reads(gm) == []
    assert [call[2] for call in _read_waits(gm)] == ["side", "default"]  # z's record and wait
