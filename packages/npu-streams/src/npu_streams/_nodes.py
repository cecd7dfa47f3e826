"""What the capture passes know about a graph's nodes: which are ours, on which stream."""

from __future__ import annotations

import torch
import torch.fx

from npu_streams._ops import OVERLOADS

__all__ = ["INTERNAL", "ROLE_KEY", "STREAM_META_KEY", "insert", "op_name", "record_after"]

STREAM_META_KEY = "npu_stream"
"""``node.meta`` key holding the stream tag each node runs on (``"default"``: main stream)."""

#: ``node.meta`` key of an internal event node: ``"fork"``, ``"join"`` or ``"dep"`` (see
#: :func:`npu_streams.prepare_piece`).
ROLE_KEY = "npu_stream_event"
INTERNAL = frozenset({"internal_event_record", "internal_event_wait"})

_NAME_BY_TARGET: dict[object, str] = {}
for _name, _overload in OVERLOADS.items():
    _NAME_BY_TARGET[_overload] = _name
    _NAME_BY_TARGET[_overload.overloadpacket] = _name


def op_name(node: torch.fx.Node) -> str | None:
    """The name of the ``npu_streams`` op ``node`` calls, or ``None`` for any other node."""
    if node.op != "call_function":
        return None
    try:
        return _NAME_BY_TARGET.get(node.target)
    except TypeError:  # an unhashable target cannot be one of ours
        return None


def insert(
    graph: torch.fx.Graph, name: str, tag: str, stream: str, *, before: torch.fx.Node, role: str
) -> torch.fx.Node:
    """Insert the internal event op ``name`` on ``tag`` before ``before``, labelled ``stream``."""
    with graph.inserting_before(before):
        node = graph.call_function(OVERLOADS[name], (tag,))
    node.meta[STREAM_META_KEY] = stream
    node.meta[ROLE_KEY] = role
    return node


def record_after(graph: torch.fx.Graph, producer: torch.fx.Node, tag: str) -> torch.fx.Node:
    """Record the internal event ``tag`` right after ``producer``, on ``producer``'s stream.

    The other end of a ``"dep"``: a wait on ``tag`` orders its stream after ``producer``.
    """
    with graph.inserting_after(producer):
        node = graph.call_function(OVERLOADS["internal_event_record"], (tag,))
    node.meta[STREAM_META_KEY] = producer.meta.get(STREAM_META_KEY, "default")
    node.meta[ROLE_KEY] = "dep"
    return node
