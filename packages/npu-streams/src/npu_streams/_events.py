"""Tagged events and record-stream: graph-safe forms of ``torch.Event`` and ``record_stream``."""

from __future__ import annotations

import torch

# Importing _ops registers the torch.ops.npu_streams.* ops called below.
from npu_streams import _ops, _runtime  # noqa: F401
from npu_streams._runtime import TaggedEvent
from npu_streams.errors import EventTagError, StreamTagError

__all__ = [
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
    "reset_tagged_events",
    "record",
    "wait",
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


def npu_record_tagged_stream(input: torch.Tensor, tagged_stream: str) -> None:
    """Keep ``input``'s memory from reuse until the work on stream ``tagged_stream`` has finished.

    The graph-safe form of ``input.record_stream(stream)``: ``tagged_stream`` names a stream as in
    :class:`npu_stream_switch`, and ``"default"`` names the main stream. A no-op for CPU tensors.
    The parameter names are TorchAir's (``input``, ``tagged_stream``).

    Args:
        input: The tensor used on the tagged stream.
        tagged_stream: The stream tag.

    Raises:
        StreamTagError: ``tagged_stream`` is not a non-empty string.
    """
    if not isinstance(input, torch.Tensor):
        raise StreamTagError(
            f"npu_record_tagged_stream expects a tensor as input, got {type(input).__name__}"
        )
    torch.ops.npu_streams.record_tagged_stream(
        input, _runtime.check_tag(tagged_stream, "the stream tag")
    )


def record() -> torch.Tensor:
    """Mark this point of the current stream; returns an empty marker tensor for :func:`wait`.

    TorchAir's ``torchair.ops.record()``. Inside a compiled graph, ``wait([marker])`` on another
    stream waits until the work issued before this call on this stream is done.

    Returns:
        An empty tensor standing for this point of the stream.
    """
    marker: torch.Tensor = torch.ops.npu_streams.record()
    return marker


def wait(tensors: list[torch.Tensor]) -> None:
    """Make the current stream wait until ``tensors`` are computed, on whatever stream.

    TorchAir's ``torchair.ops.wait(tensors)``. Inside a compiled graph the current stream waits
    for the stream of each tensor's producer (or of a :func:`record` marker); in eager mode on
    an accelerator it waits for every tagged stream; on CPU it does nothing.

    Args:
        tensors: At least one tensor.

    Raises:
        StreamTagError: ``tensors`` is empty or holds something else than tensors.
    """
    given: object = tensors  # callers outside mypy pass anything
    if not isinstance(given, (list, tuple)) or not given:
        raise StreamTagError(
            f"wait() needs a non-empty list of tensors, got {given!r}; pass the tensors "
            "(or record() markers) the current stream must wait for"
        )
    for tensor in given:
        if not isinstance(tensor, torch.Tensor):
            raise StreamTagError(
                f"wait() arguments must be tensors, got {type(tensor).__name__}; pass the "
                "tensors (or record() markers) the current stream must wait for"
            )
    torch.ops.npu_streams.wait(list(given))


def reset_tagged_events() -> None:
    """Forget every tagged event so their tags can be created again (tests, notebooks).

    Graphs that still refer to a forgotten tag raise ``EventTagError`` when they record or wait on
    it; create the events again (e.g. build the module again) before running them.
    """
    _runtime.reset_events()
