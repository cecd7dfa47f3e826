"""Reads across streams: a node that reads a tensor another stream made runs after it.

[Note: reads across streams] Inside a stream scope, ops run on the scope's stream; a value it
makes and an op outside the scope reads (or the reverse) is a read across streams. A device
orders work on one stream only: unless an event recorded after the producer is waited on before
the reader, the reader may run first. Eagerly the gap is usually hidden by the host's launch
time; a replayed device graph has no such gap, and the reader sees the memory's previous
contents (seen on CUDA: every element wrong, no error). TorchAir's Graph Engine orders data
dependencies itself; so do we, inside the graphs this package prepares. A read the user already
ordered (``wait()``, tagged events, the fork and join) gets nothing more.

Which reads are ordered is worked out on the graph's program order with one clock per stream
(vector clocks): a stream's clock holds, per stream, the last position it is known to come after;
an event carries its recording stream's clock, and a wait merges it into the waiting stream's.
A read is ordered when the reader's stream has passed the producer's position.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx

from npu_streams._nodes import STREAM_META_KEY, insert, op_name, record_after
from npu_streams._ops import OVERLOADS
from npu_streams._runtime import DEFAULT_TAG

__all__ = ["order_reads", "unordered_reads"]

Clock = dict[str, int]
_RECORDS = frozenset({"internal_event_record", "tagged_event_record"})
_WAITS = frozenset({"internal_event_wait", "tagged_event_wait"})
_OPS = frozenset({"call_function", "call_method", "call_module"})


def _stream(node: torch.fx.Node) -> str:
    tag = node.meta.get(STREAM_META_KEY, DEFAULT_TAG)
    return tag if isinstance(tag, str) else DEFAULT_TAG


def _value(node: torch.fx.Node) -> object:
    """The traced value of ``node``: ``val`` in an AOT graph, ``example_value`` in Dynamo's."""
    return node.meta.get("val", node.meta.get("example_value"))


def _makes_tensors(node: torch.fx.Node) -> bool:
    """Whether ``node`` is an op whose value holds a tensor (a view or an element included)."""
    if node.op not in _OPS or op_name(node) is not None:
        return False  # inputs and constants are ready before the graph starts; markers are ours
    value = _value(node)
    if isinstance(value, (list, tuple)):
        return any(isinstance(item, torch.Tensor) for item in value)
    return isinstance(value, torch.Tensor)


def _merge(into: Clock, other: Clock) -> None:
    for stream, position in other.items():
        if into.get(stream, -1) < position:
            into[stream] = position


def _walk(graph: torch.fx.Graph, unordered: Callable[[torch.fx.Node, torch.fx.Node], bool]) -> None:
    """Call ``unordered(producer, reader)`` for each read across streams nothing orders.

    ``graph`` is walked in program order. Where the call returns ``True`` (it ordered the read),
    the reader's stream is known to come after the producer from then on.
    """
    position: dict[torch.fx.Node, int] = {}
    after: dict[torch.fx.Node, Clock] = {}  # a producer's stream clock right after it
    clocks: dict[str, Clock] = {}
    events: dict[str, Clock] = {}
    for index, node in enumerate(list(graph.nodes)):
        stream = _stream(node)
        clock = clocks.setdefault(stream, {})
        name = op_name(node)
        if name is None and node.op != "output":
            for producer in node.all_input_nodes:
                source = _stream(producer)
                if source == stream or producer not in after:
                    continue
                if clock.get(source, -1) < position[producer] and unordered(producer, node):
                    _merge(clock, after[producer])
        elif name in _WAITS and node.args and isinstance(node.args[0], str):
            _merge(clock, events.get(node.args[0], {}))
        position[node] = index
        clock[stream] = index
        if name in _RECORDS and node.args and isinstance(node.args[0], str):
            events[node.args[0]] = dict(clock)
        if _makes_tensors(node):
            after[node] = dict(clock)


def order_reads(graph: torch.fx.Graph, graph_id: int) -> int:
    """Make every read across streams of ``graph`` wait for its producer (in place).

    See [Note: reads across streams]. The producer records an internal event on its stream right
    after it runs (one per producer), and the reader's stream waits on it right before the
    reader (once per producer and reading stream: later readers there are ordered by then). The
    tensor is recorded on the reader's stream as well (``npu_record_tagged_stream``): the
    allocator then reuses its memory only once that stream's work on it is done, also for the
    later allocations of the producer's stream, which nothing else orders after the read.
    Returns how many waits were added.

    Args:
        graph: A graph whose nodes carry their stream (``node.meta["npu_stream"]``).
        graph_id: Makes the event tags unique to this graph.
    """
    recorded: dict[torch.fx.Node, str] = {}
    waits = 0

    def order(producer: torch.fx.Node, reader: torch.fx.Node) -> bool:
        nonlocal waits
        tag = recorded.get(producer)
        if tag is None:
            tag = recorded[producer] = f"graph{graph_id}.read{len(recorded)}"
            record_after(graph, producer, tag)
        stream = _stream(reader)
        insert(graph, "internal_event_wait", tag, stream, before=reader, role="dep")
        if isinstance(_value(producer), torch.Tensor):
            # The memory is used on the reader's stream too: not reused until that work is
            # done (the allocator knows only the stream it was made on).
            with graph.inserting_before(reader):
                kept = graph.call_function(OVERLOADS["record_tagged_stream"], (producer, stream))
            kept.meta[STREAM_META_KEY] = stream
        waits += 1
        return True

    _walk(graph, order)
    return waits


def unordered_reads(gm: torch.fx.GraphModule) -> list[str]:
    """The reads across streams of ``gm`` that no event orders, as ``"reader reads producer"``.

    A graph :func:`~npu_streams.prepare_for_capture` prepared has none: a device may run such a
    reader before its producer (see [Note: reads across streams]). Nodes need their stream
    (``node.meta["npu_stream"]``, which the pass sets).

    Args:
        gm: The graph module to check.

    Returns:
        One line per unordered read, in program order; empty when every read is ordered.
    """
    found: list[str] = []

    def note(producer: torch.fx.Node, reader: torch.fx.Node) -> bool:
        found.append(
            f"{reader.name} (stream {_stream(reader)!r}) reads {producer.name} "
            f"(stream {_stream(producer)!r})"
        )
        return True  # reported once: the later reads on that stream are the same gap

    _walk(gm.graph, note)
    return found
