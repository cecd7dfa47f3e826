"""``prepare_for_capture``: the FX pass that makes stream scopes capturable into a device graph.

A device graph captures work issued on the capture stream and on every stream that synchronises
with it *after* capture begins; work on a stream that never synchronises with it is not captured
(CUDA reports "operation not permitted when stream is capturing"), and a side stream that does not
rejoin before capture ends leaves "unjoined work". So the pass adds, around every side-stream
scope, the same fork/join pairs a hand-written multi-stream capture uses:

* fork: the main (capture) stream records an internal event at graph start; each side stream
  waits on it right after its scope is entered;
* join: each side stream records an internal event right before its scope is left; the main
  stream waits on all of them right before the graph returns.

* reads across streams: an op that reads a value another stream made waits for it, unless the
  program already orders the two (see [Note: reads across streams] in ``_reads``).

User events and record-stream calls are already graph-safe ops that record, wait and record the
stream at run time, during a capture too; the pass keeps them in place and checks their tags.
Every node gets ``node.meta["npu_stream"]``: the tag of the stream it runs on, ``"default"`` for
the main stream.
"""

from __future__ import annotations

import contextlib
import itertools
import logging

import torch
import torch.fx

from npu_streams._nodes import (
    INTERNAL,
    ROLE_KEY,
    STREAM_META_KEY,
    insert,
    op_name,
    record_after,
)
from npu_streams._reads import order_reads
from npu_streams._runtime import DEFAULT_TAG, lookup_event
from npu_streams.errors import StreamScopeError, StreamTagError

__all__ = [
    "prepare_for_capture",
    "prepare_piece",
    "has_stream_ops",
    "unmatched_waits",
    "STREAM_META_KEY",
]

_log = logging.getLogger("npu_streams")

_graph_ids = itertools.count()


def _tag_arg(node: torch.fx.Node, index: int, name: str) -> str:
    value = node.args[index] if len(node.args) > index else node.kwargs.get(name)
    if not isinstance(value, str):
        raise StreamScopeError(
            f"node {node.name} ({node.target}) has a non-constant {name} {value!r}; stream and "
            "event tags must be Python strings known at trace time, so do not compute them from "
            "tensors"
        )
    return value


def has_stream_ops(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` contains any ``npu_streams`` op (scope, event, record-stream, fork/join).

    Args:
        gm: A Dynamo or AOT autograd graph module.

    Returns:
        True if at least one node calls an ``npu_streams`` op.
    """
    return any(op_name(node) is not None for node in gm.graph.nodes)


def _graph_break_error(tag: str, how: str) -> StreamScopeError:
    return StreamScopeError(
        f"stream scope npu_stream_switch({tag!r}) {how} in this graph: a graph break happened "
        "inside the scope, so its body was split across graphs and cannot be captured. Remove "
        "the graph break inside the `with npu_stream_switch(...)` block (compile with "
        "torch.compile(..., fullgraph=True) to see where it is)"
    )


def _label_and_validate(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, torch.fx.Node, str]]:
    """Label every node with its stream and return the (enter, exit, tag) of each scope."""
    open_scopes: list[tuple[str, torch.fx.Node]] = []
    scopes: list[tuple[torch.fx.Node, torch.fx.Node, str]] = []
    recorded: set[str] = set()
    priorities: dict[str, str] = {}
    for node in graph.nodes:
        name = op_name(node)
        if name == "stream_enter":
            tag = _tag_arg(node, 0, "tag")
            priority = _tag_arg(node, 1, "priority")
            if priorities.setdefault(tag, priority) != priority:
                raise StreamTagError(
                    f"stream tag {tag!r} is used with priority {priorities[tag]} and with "
                    f"priority {priority} in one graph; a tag names one stream, so use the same "
                    "stream_priority for every scope with this tag, or use another tag"
                )
            open_scopes.append((tag, node))
        elif name == "stream_exit":
            tag = _tag_arg(node, 0, "tag")
            if not open_scopes:
                raise _graph_break_error(tag, "is closed but was not opened")
            if open_scopes[-1][0] != tag:
                raise StreamScopeError(
                    f"stream scope {tag!r} is closed while scope {open_scopes[-1][0]!r} is the "
                    "innermost open one; nest npu_stream_switch blocks as `with` statements"
                )
        elif name in ("tagged_event_record", "tagged_event_wait"):
            tag = _tag_arg(node, 0, "tag")
            action = "record" if name == "tagged_event_record" else "wait on"
            lookup_event(tag, action)  # a forgotten event fails here, at compile time
            if name == "tagged_event_record":
                recorded.add(tag)
            elif tag not in recorded:
                _log.warning(
                    "tagged event %r is waited on before any record of it in this graph; inside a "
                    "captured graph the wait cannot depend on work recorded outside the capture",
                    tag,
                )
        elif name == "record_tagged_stream":
            _tag_arg(node, 1, "tag")
        node.meta[STREAM_META_KEY] = open_scopes[-1][0] if open_scopes else DEFAULT_TAG
        if name == "stream_exit":
            _tag, enter = open_scopes.pop()
            scopes.append((enter, node, _tag))
    if open_scopes:
        raise _graph_break_error(open_scopes[-1][0], "is opened but never closed")
    return scopes


def _join_point(graph: torch.fx.Graph) -> torch.fx.Node:
    """The node the main stream's join waits go before: the output, or the mutation epilogue.

    AOT autograd with ``keep_inference_input_mutations=True`` ends the graph with
    ``aten.copy_(input, new_value)`` nodes on the main stream; a value computed on a side stream
    must be joined before those copies read it, so the waits go before the trailing copies.
    """
    point: torch.fx.Node = next(node for node in reversed(graph.nodes) if node.op == "output")
    while True:
        previous: torch.fx.Node = point.prev
        if not (
            previous.op == "call_function"
            and previous.target is torch.ops.aten.copy_.default
            and previous.meta.get(STREAM_META_KEY) == DEFAULT_TAG
        ):
            return point
        point = previous


def prepare_for_capture(
    gm: torch.fx.GraphModule, device: torch.device | None = None
) -> torch.fx.GraphModule:
    """Prepare a graph with stream scopes for capture into a device graph (in place).

    Validates that scopes are balanced, inserts the fork/join event pairs that side streams need
    inside a capture and the events that order each read across streams after its producer
    (see [Note: reads across streams] in ``_reads``), and sets ``node.meta["npu_stream"]`` on
    every node (the stream tag, or ``"default"`` for the main stream). Works on Dynamo graphs
    and on AOT autograd graphs. The result runs correctly both inside a capture and eagerly.
    Idempotent: a prepared graph is only re-checked. A graph without ``npu_streams`` ops is
    returned unchanged.

    Args:
        gm: The graph module to prepare; it is modified in place and returned.
        device: The device the graph runs on. Where given, the :func:`~npu_streams.record`
            markers of the graph are made there (they are CPU tensors when traced), so that a
            check of the graph's devices sees no CPU work in it.

    Returns:
        ``gm``.

    Raises:
        StreamScopeError: A scope is opened and not closed (or the reverse) in this graph, which
            means a graph break inside ``npu_stream_switch``; or a tag is not a constant string.
        EventTagError: A user event in the graph no longer exists.
    """
    graph = gm.graph
    names = [op_name(node) for node in graph.nodes]
    if not any(names):
        return gm
    if device is not None and _place_markers(graph, torch.device(device)):
        gm.recompile()
    already_prepared = any(name in INTERNAL for name in names)
    scopes = _label_and_validate(graph)
    side_scopes = [(enter, exit_, tag) for enter, exit_, tag in scopes if tag != DEFAULT_TAG]
    if already_prepared or not side_scopes:
        return gm

    _fork_and_join(graph, side_scopes)
    gm.recompile()
    return gm


def prepare_piece(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Prepare one piece cut from a prepared graph for a capture of its own (in place).

    A graph split into pieces (captured one by one, with eager work between them) cannot keep
    the fork/join events of the whole graph: a side stream of a later piece would wait on an
    event recorded in an earlier piece's capture, which a device refuses (and which, eagerly, is
    not ordered after the eager work between them). Each piece gets its own instead: its main
    stream forks at the piece's start and joins every side stream before it returns, so each
    piece begins after everything before it and ends with its side work done. A ``wait()``
    dependency whose two ends lie in different pieces is dropped for the same reason; that
    fork and join order it.

    Args:
        gm: The piece, a submodule of a graph :func:`prepare_for_capture` prepared (its nodes
            keep their ``meta``).

    Returns:
        ``gm``.

    Raises:
        StreamScopeError: A stream scope of the piece is not closed in it (or the reverse): the
            graph was split inside the scope.
    """
    graph = gm.graph
    if not any(op_name(node) for node in graph.nodes):
        return gm
    internal = [node for node in graph.nodes if op_name(node) in INTERNAL]
    recorded = {n.args[0] for n in internal if op_name(n) == "internal_event_record"}
    waited = {n.args[0] for n in internal if op_name(n) == "internal_event_wait"}
    for node in internal:
        role = node.meta.get(ROLE_KEY)
        other_end = waited if op_name(node) == "internal_event_record" else recorded
        if role in ("fork", "join") or (role == "dep" and node.args[0] not in other_end):
            graph.erase_node(node)
    scopes = _label_and_validate(graph)
    _fork_and_join(
        graph, [(enter, exit_, tag) for enter, exit_, tag in scopes if tag != DEFAULT_TAG]
    )
    gm.recompile()
    return gm


def unmatched_waits(gm: torch.fx.GraphModule) -> list[str]:
    """The nodes of ``gm`` that wait on an internal event no earlier node of ``gm`` records.

    Inside a device capture such a wait is refused (the record belongs to another capture, or
    to none): a graph to capture must have none.
    """
    recorded: set[object] = set()
    unmatched: list[str] = []
    for node in gm.graph.nodes:
        name = op_name(node)
        if name == "internal_event_record":
            recorded.add(node.args[0])
        elif name == "internal_event_wait" and node.args[0] not in recorded:
            unmatched.append(node.name)
    return unmatched


def _fork_and_join(
    graph: torch.fx.Graph, side_scopes: list[tuple[torch.fx.Node, torch.fx.Node, str]]
) -> None:
    """Insert the fork/join pairs of ``side_scopes`` and order the ``wait()`` dependencies."""
    graph_id = next(_graph_ids)
    if side_scopes:
        fork_tag = f"graph{graph_id}.fork"
        first_op = next(node for node in graph.nodes if node.op != "placeholder")
        join_point = _join_point(graph)
        insert(graph, "internal_event_record", fork_tag, DEFAULT_TAG, before=first_op, role="fork")
        for index, (enter, exit_, tag) in enumerate(side_scopes):
            insert(graph, "internal_event_wait", fork_tag, tag, before=enter.next, role="fork")
            join_tag = f"graph{graph_id}.join{index}"
            insert(graph, "internal_event_record", join_tag, tag, before=exit_, role="join")
            insert(
                graph, "internal_event_wait", join_tag, DEFAULT_TAG, before=join_point, role="join"
            )
            _log.debug(
                "stream scope %r: fork after %s, join before %s (events %s, %s)",
                tag,
                first_op.name,
                join_point.name,
                fork_tag,
                join_tag,
            )
    _order_waits(graph, graph_id)
    ordered = order_reads(graph, graph_id)
    if ordered:
        _log.debug(
            "graph%d: %d read(s) across streams made to wait for their producer", graph_id, ordered
        )
    graph.lint()


def _place_markers(graph: torch.fx.Graph, device: torch.device) -> bool:
    """Make every ``record()`` marker of ``graph`` on ``device``; return whether one moved."""
    moved = False
    for node in graph.nodes:
        if op_name(node) != "record":
            continue
        old = node.meta.get("val")
        if isinstance(old, torch.Tensor) and old.device == device and node.kwargs:
            continue
        node.args = ()
        node.kwargs = {"device": device}
        # The marker's value as tracing would have made it: a fake tensor where the graph was
        # traced with fake tensors, else an empty tensor (no memory) on the device.
        mode = getattr(old, "fake_mode", None)
        with mode if mode is not None else contextlib.nullcontext():
            node.meta["val"] = torch.empty(0, device=device)
        moved = True
    return moved


def _order_waits(graph: torch.fx.Graph, graph_id: int) -> None:
    """``wait(tensors)``: the waiting stream waits for each producer on another stream.

    The producer (an op, or a ``record()`` marker) records an internal event on its own stream
    right after it runs, and the ``wait`` node's stream waits on that event, so the consumer
    side sees the tensor complete whichever stream made it.
    """
    count = 0
    for node in list(graph.nodes):
        if op_name(node) != "wait":
            continue
        stream = node.meta.get(STREAM_META_KEY, DEFAULT_TAG)
        tensors = node.args[0] if node.args else node.kwargs.get("tensors", ())
        assert isinstance(tensors, (list, tuple))
        for producer in tensors:
            if not isinstance(producer, torch.fx.Node):
                continue
            source = producer.meta.get(STREAM_META_KEY, DEFAULT_TAG)
            if source == stream or producer.op == "placeholder":
                continue
            tag = f"graph{graph_id}.dep{count}"
            count += 1
            record_after(graph, producer, tag)
            insert(graph, "internal_event_wait", tag, stream, before=node, role="dep")
        # The producers are joined above. The op itself would wait for every tagged stream of
        # the process, recorded outside the capture, which invalidates a device capture.
        graph.erase_node(node)
