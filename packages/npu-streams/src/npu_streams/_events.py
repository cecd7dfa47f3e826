"""Tagged events and record-stream: graph-safe forms of ``torch.Event`` and ``record_stream``."""

from __future__ import annotations

import torch

# Importing _ops registers the torch.ops.npu_streams.* ops called below.
from npu_streams import _ops, _runtime  # noqa: F401
from npu_streams._runtime import TaggedEvent
from npu_streams.errors import EventTagError

__all__ = [
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
    "reset_tagged_events",
]


def npu_create_tagged_event(tag: str) -> TaggedEvent:
    """Create the event named ``tag`` (usually in ``Module.__init__``).

    A tag is taken while its event is alive: creating a second live event with the same tag raises.
    Once the first event is garbage-collected (e.g. its module is deleted), or after
    :func:`reset_tagged_events`, the tag can be created again.

    Args:
        tag: Name of the event; graphs refer to the event by this string.

    Returns:
        The new event.

    Raises:
        EventTagError: ``tag`` is not a non-empty string, or a live event already has it.
    """
    return _runtime.create_event(tag)


def _tag_of(event: object, function: str) -> str:
    if not isinstance(event, TaggedEvent):
        raise EventTagError(
            f"{function} expects an event made by npu_create_tagged_event, got "
            f"{type(event).__name__}; create one with npu_create_tagged_event('<tag>')"
        )
    return event.tag


def npu_tagged_event_record(event: TaggedEvent) -> None:
    """Record ``event`` on the current stream (like ``torch.Event.record()``).

    Work issued after a :func:`npu_tagged_event_wait` on this event, on any stream, starts only
    after the work issued before this record has finished.

    Args:
        event: An event from :func:`npu_create_tagged_event`.

    Raises:
        EventTagError: ``event`` is not a tagged event, or it has been forgotten.
    """
    torch.ops.npu_streams.tagged_event_record(_tag_of(event, "npu_tagged_event_record"))


def npu_tagged_event_wait(event: TaggedEvent) -> None:
    """Make the current stream wait for the last record of ``event`` (like ``torch.Event.wait()``).

    Args:
        event: An event from :func:`npu_create_tagged_event`.

    Raises:
        EventTagError: ``event`` is not a tagged event, or it has been forgotten.
    """
    torch.ops.npu_streams.tagged_event_wait(_tag_of(event, "npu_tagged_event_wait"))


def npu_record_tagged_stream(tensor: torch.Tensor, tag: str) -> None:
    """Keep ``tensor``'s memory from reuse until the work on stream ``tag`` has finished.

    The graph-safe form of ``tensor.record_stream(stream)``: ``tag`` names a stream as in
    :class:`npu_stream_switch`, and ``"default"`` names the main stream. A no-op for CPU tensors.

    Args:
        tensor: The tensor used on the tagged stream.
        tag: The stream tag.

    Raises:
        StreamTagError: ``tag`` is not a non-empty string.
    """
    torch.ops.npu_streams.record_tagged_stream(tensor, _runtime.check_tag(tag, "the stream tag"))


def reset_tagged_events() -> None:
    """Forget every tagged event so their tags can be created again (tests, notebooks).

    Graphs that still refer to a forgotten tag raise ``EventTagError`` when they record or wait on
    it; create the events again (e.g. build the module again) before running them.
    """
    _runtime.reset_events()
