"""The ``npu_streams`` custom ops: what Dynamo and AOT autograd see of scopes and events.

Every op takes strings only (plus the tensor for record-stream), returns nothing, has a fake
implementation that does nothing, and is registered with ``torch.fx.node.has_side_effect``: an op
that returns nothing would otherwise be dead code to AOT autograd, which drops it. Events and
streams never enter a graph; the public Python functions resolve them to tags first, so a graph
carries only constant strings (no extra inputs, no guards on objects).
"""

from __future__ import annotations

import warnings

import torch
from torch.fx.node import has_side_effect

from npu_streams import _runtime

__all__ = [
    "NAMESPACE",
    "stream_enter",
    "stream_exit",
    "tagged_event_record",
    "tagged_event_wait",
    "record_tagged_stream",
    "internal_event_record",
    "internal_event_wait",
    "record",
    "wait",
    "OVERLOADS",
]

NAMESPACE = "npu_streams"


_inner_parallel_warned = False


@torch.library.custom_op(f"{NAMESPACE}::stream_enter", mutates_args=())
def stream_enter(tag: str, priority: str, inner_parallel: str = "True") -> None:
    """Open a stream scope: ops issued after it run on the stream named ``tag``."""
    global _inner_parallel_warned
    if inner_parallel != "True" and not _inner_parallel_warned:
        # Here rather than in npu_stream_switch: a warning while Dynamo traces breaks the graph.
        _inner_parallel_warned = True
        warnings.warn(
            "npu_stream_switch(enable_inner_parallel=False) has no effect: it steers how CANN's "
            "Graph Engine splits the ops of one stream, and no Graph Engine runs here",
            UserWarning,
            stacklevel=2,
        )
    _runtime.stream_enter(tag, int(priority))


@torch.library.custom_op(f"{NAMESPACE}::stream_exit", mutates_args=())
def stream_exit(tag: str) -> None:
    """Close the stream scope ``tag`` and go back to the stream that was current before it."""
    _runtime.stream_exit(tag)


@torch.library.custom_op(f"{NAMESPACE}::tagged_event_record", mutates_args=())
def tagged_event_record(tag: str) -> None:
    """Record the user event ``tag`` on the current stream."""
    _runtime.event_record(tag)


@torch.library.custom_op(f"{NAMESPACE}::tagged_event_wait", mutates_args=())
def tagged_event_wait(tag: str) -> None:
    """Make the current stream wait for the user event ``tag``."""
    _runtime.event_wait(tag)


@torch.library.custom_op(f"{NAMESPACE}::record_tagged_stream", mutates_args=())
def record_tagged_stream(tensor: torch.Tensor, tag: str) -> None:
    """Keep ``tensor``'s memory from reuse until work on the stream ``tag`` is done."""
    _runtime.record_tagged_stream(tensor, tag)


@torch.library.custom_op(f"{NAMESPACE}::record", mutates_args=())
def record(device: torch.device | None = None) -> torch.Tensor:
    """A marker tensor for this point of the current stream (pass it to ``wait``).

    An empty tensor on ``device`` (default: the CPU). :func:`npu_streams.prepare_for_capture`
    puts the markers of a graph on the graph's device: one on another device would read as
    work for another device, which no device graph may contain.
    """
    return torch.empty(0, device=device)


@torch.library.custom_op(f"{NAMESPACE}::wait", mutates_args=())
def wait(tensors: list[torch.Tensor]) -> None:
    """Make the current stream wait until ``tensors`` are computed, whatever stream made them."""
    _runtime.wait_for_streams()


@torch.library.custom_op(f"{NAMESPACE}::internal_event_record", mutates_args=())
def internal_event_record(tag: str) -> None:
    """Record a fork/join event inserted by :func:`npu_streams.prepare_for_capture`."""
    _runtime.internal_record(tag)


@torch.library.custom_op(f"{NAMESPACE}::internal_event_wait", mutates_args=())
def internal_event_wait(tag: str) -> None:
    """Wait on a fork/join event inserted by :func:`npu_streams.prepare_for_capture`."""
    _runtime.internal_wait(tag)


def _fake_tags(*tags: str) -> None:
    return None


def _fake_record_stream(tensor: torch.Tensor, tag: str) -> None:
    return None


def _fake_stream_enter(tag: str, priority: str, inner_parallel: str = "True") -> None:
    return None


@record.register_fake
def _fake_record(device: torch.device | None = None) -> torch.Tensor:
    return torch.empty(0, device=device)


@wait.register_fake
def _fake_wait(tensors: list[torch.Tensor]) -> None:
    return None


stream_enter.register_fake(_fake_stream_enter)
for _op in (
    stream_exit,
    tagged_event_record,
    tagged_event_wait,
    internal_event_record,
    internal_event_wait,
):
    _op.register_fake(_fake_tags)
record_tagged_stream.register_fake(_fake_record_stream)

OVERLOADS: dict[str, torch._ops.OpOverload] = {
    name: getattr(getattr(torch.ops, NAMESPACE), name).default
    for name in (
        "stream_enter",
        "stream_exit",
        "tagged_event_record",
        "tagged_event_wait",
        "record_tagged_stream",
        "internal_event_record",
        "internal_event_wait",
        "record",
        "wait",
    )
}
"""Op name -> ``OpOverload``, as they appear in AOT graphs (Dynamo graphs hold the packets)."""

# Dynamo graphs call the packets, AOT graphs the overloads: both must survive dead-code elimination.
for _overload in OVERLOADS.values():
    has_side_effect(_overload)
    has_side_effect(_overload.overloadpacket)
