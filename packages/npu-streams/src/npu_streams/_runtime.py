"""Eager behaviour behind the custom ops: tag registries, the scope stack, real stream switching.

Two registries live here, both per process:

* streams: one ``tag -> torch.Stream`` map per device (keyed by ``torch.device`` with its index),
  shared by stream scopes and record-stream, so a tag always names the same stream on a device;
* tagged events: ``tag -> TaggedEvent``, holding the event objects weakly, so a tag is taken only
  while its event is alive (a second model that re-creates the tags works once the first is gone).

The scope stack is thread-local, like the current stream itself. On a machine without an
accelerator every call keeps the bookkeeping (stack, tags, errors) and touches no device, which is
what "no-op that keeps program order" means here.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import torch

from npu_streams import _device
from npu_streams._accel import current_device
from npu_streams.errors import EventTagError, StreamScopeError, StreamTagError

__all__ = [
    "DEFAULT_TAG",
    "TaggedEvent",
    "check_tag",
    "check_priority",
    "create_event",
    "lookup_event",
    "reset_events",
    "stream_enter",
    "stream_exit",
    "event_record",
    "event_wait",
    "internal_record",
    "internal_wait",
    "record_tagged_stream",
    "current_tag",
    "stream_for_tag",
    "check_cpu_priority",
    "wait_for_streams",
    "scope_depth",
    "close_scopes_above",
]

DEFAULT_TAG = "default"
"""The tag that names the main stream: the one current before the outermost scope was entered."""


def check_tag(tag: object, what: str, error: type[ValueError] = StreamTagError) -> str:
    """Return ``tag`` if it is a non-empty string, else raise ``error`` saying what to pass."""
    if not isinstance(tag, str) or not tag:
        raise error(
            f"{what} must be a non-empty string, got {tag!r}; "
            "pass a string tag such as '1' (the same tag always means the same stream or event)"
        )
    return tag


def check_priority(priority: object) -> int:
    """Return ``priority`` if it is an int (bools rejected), else raise ``StreamTagError``."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise StreamTagError(
            f"stream_priority must be an int, got {priority!r}; pass 0 (default) or a negative "
            "number for a higher priority"
        )
    return priority


class TaggedEvent:
    """An event known by its tag, so that compiled graphs can refer to it by a constant string.

    Create it with :func:`npu_streams.npu_create_tagged_event`; record and wait on it with
    :func:`npu_streams.npu_tagged_event_record` / :func:`npu_streams.npu_tagged_event_wait`. The
    device event behind it is created lazily, one per device, on first use.
    """

    def __init__(self, tag: str) -> None:
        self._tag = tag
        self._device_events: dict[torch.device, torch.Event] = {}

    @property
    def tag(self) -> str:
        """The tag this event was created with."""
        return self._tag

    def device_event(self, device: torch.device) -> torch.Event:
        """The ``torch.Event`` behind this tag on ``device`` (created on first use)."""
        event = self._device_events.get(device)
        if event is None:
            event = self._device_events[device] = _device.new_event(device)
        return event

    # TorchAir hands out a torch.npu.Event, so scripts call these methods on it directly.

    def record(self, stream: torch.Stream | None = None) -> None:
        """Record the event on ``stream`` (default: the current stream), like ``torch.Event``.

        Without ``stream`` this is :func:`npu_streams.npu_tagged_event_record`, so it is
        graph-safe under ``torch.compile``; with an explicit stream it is eager only.
        """
        if stream is None:
            torch.ops.npu_streams.tagged_event_record(self._tag)
        else:
            self.device_event(stream.device).record(stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Make ``stream`` (default: current) wait for the last record, like ``torch.Event``.

        Without ``stream`` this is :func:`npu_streams.npu_tagged_event_wait` (graph-safe).
        """
        if stream is None:
            torch.ops.npu_streams.tagged_event_wait(self._tag)
        else:
            self.device_event(stream.device).wait(stream)

    def query(self) -> bool:
        """Whether the work recorded by this event has finished (``True`` on CPU or unrecorded)."""
        return all(event.query() for event in list(self._device_events.values()))

    def synchronize(self) -> None:
        """Block the host until the work recorded by this event has finished (no-op on CPU)."""
        for event in list(self._device_events.values()):
            event.synchronize()

    def __repr__(self) -> str:
        return f"TaggedEvent(tag={self._tag!r})"


@dataclass
class _Frame:
    tag: str
    # The stream current before this scope was entered; None when no accelerator is present.
    previous: torch.Stream | None


@dataclass
class _ThreadState(threading.local):
    frames: list[_Frame] = field(default_factory=list)


@dataclass
class _StreamEntry:
    stream: torch.Stream
    priority: int


_state = _ThreadState()
_lock = threading.Lock()
_streams: dict[torch.device, dict[str, _StreamEntry]] = {}
_events: weakref.WeakValueDictionary[str, TaggedEvent] = weakref.WeakValueDictionary()
_internal_events: dict[tuple[torch.device, str], torch.Event] = {}
# Without an accelerator no stream is created, but a tag still names one stream with one priority:
# the CPU keeps the tag -> priority map so the same scopes are refused as on a device.
_cpu_priorities: dict[str, int] = {}


# ---- events ----------------------------------------------------------------------------------


def create_event(tag: str) -> TaggedEvent:
    """Register and return a new :class:`TaggedEvent`; a live event with that tag is an error."""
    check_tag(tag, "the event tag", EventTagError)
    with _lock:
        if _events.get(tag) is not None:
            raise EventTagError(
                f"a tagged event with tag {tag!r} already exists and is still alive; each tag "
                "names one event per process: reuse that event object (e.g. pass it to the second "
                "module), pick another tag, or call npu_streams.reset_tagged_events() first "
                "(tests, notebooks)"
            )
        event = TaggedEvent(tag)
        _events[tag] = event
    return event


def lookup_event(tag: str, action: str) -> TaggedEvent:
    """The live event for ``tag``; ``EventTagError`` naming ``action`` when there is none."""
    event = _events.get(tag)
    if event is None:
        raise EventTagError(
            f"cannot {action} tagged event {tag!r}: no live event has this tag; create it with "
            f"npu_create_tagged_event({tag!r}) and keep a reference to it (events are forgotten "
            "when garbage-collected or after reset_tagged_events())"
        )
    return event


def reset_events() -> None:
    """Forget every tagged event, so their tags can be created again."""
    with _lock:
        _events.clear()


def event_record(tag: str) -> None:
    """Record the event tagged ``tag`` on the current stream."""
    event = lookup_event(tag, "record")
    device = current_device()
    if device is not None:
        event.device_event(device).record(_device.current_stream(device))


def event_wait(tag: str) -> None:
    """Make the current stream wait for the last record of the event tagged ``tag``."""
    event = lookup_event(tag, "wait on")
    device = current_device()
    if device is not None:
        event.device_event(device).wait(_device.current_stream(device))


def _internal_event(device: torch.device, tag: str) -> torch.Event:
    with _lock:
        event = _internal_events.get((device, tag))
        if event is None:
            event = _internal_events[(device, tag)] = _device.new_event(device)
    return event


def internal_record(tag: str) -> None:
    """Record the fork/join event ``tag`` (inserted by the capture pass) on the current stream."""
    device = current_device()
    if device is not None:
        _internal_event(device, tag).record(_device.current_stream(device))


def internal_wait(tag: str) -> None:
    """Make the current stream wait for the fork/join event ``tag``."""
    device = current_device()
    if device is not None:
        _internal_event(device, tag).wait(_device.current_stream(device))


# ---- streams ---------------------------------------------------------------------------------


def _main_stream(device: torch.device) -> torch.Stream:
    frames = _state.frames
    if frames and frames[0].previous is not None:
        return frames[0].previous
    return _device.current_stream(device)


def stream_for_tag(device: torch.device, tag: str, priority: int | None = None) -> torch.Stream:
    """The stream named ``tag`` on ``device``, created on first use.

    ``priority=None`` accepts whatever priority the stream has (record-stream); an int must match
    the priority the stream was created with.
    """
    if tag == DEFAULT_TAG:
        return _main_stream(device)
    with _lock:
        per_device = _streams.setdefault(device, {})
        entry = per_device.get(tag)
        if entry is None:
            created = 0 if priority is None else priority
            entry = per_device[tag] = _StreamEntry(_device.new_stream(device, created), created)
    if priority is not None and priority != entry.priority:
        raise _priority_conflict(tag, device, entry.priority, priority)
    return entry.stream


def _priority_conflict(tag: str, device: object, known: int, asked: int) -> StreamTagError:
    return StreamTagError(
        f"stream tag {tag!r} on {device} already exists with priority {known}, "
        f"but a scope asks for priority {asked}; a tag names one stream, so use the same "
        "stream_priority for every scope with this tag, or use another tag"
    )


def check_cpu_priority(tag: str, priority: int) -> None:
    """Without an accelerator: apply the one-priority-per-tag rule a device applies."""
    if tag == DEFAULT_TAG:
        return
    with _lock:
        known = _cpu_priorities.setdefault(tag, priority)
    if known != priority:
        raise _priority_conflict(tag, "cpu", known, priority)


def current_tag() -> str:
    """The tag of the innermost open scope on this thread, ``"default"`` outside every scope."""
    frames = _state.frames
    return frames[-1].tag if frames else DEFAULT_TAG


def stream_enter(tag: str, priority: int) -> None:
    """Open a scope: push it and, on an accelerator, make the tagged stream current."""
    device = current_device()
    if device is None:
        check_cpu_priority(tag, priority)
        _state.frames.append(_Frame(tag, None))
        return
    target = stream_for_tag(device, tag, priority)
    _state.frames.append(_Frame(tag, _device.current_stream(device)))
    _device.set_stream(target)


def stream_exit(tag: str) -> None:
    """Close the innermost scope, which must be ``tag``, and restore the stream it replaced."""
    frames = _state.frames
    if not frames or frames[-1].tag != tag:
        open_tag = frames[-1].tag if frames else None
        raise StreamScopeError(
            f"cannot leave stream scope {tag!r}: the innermost open scope on this thread is "
            f"{open_tag!r}; scopes must be closed in reverse order of opening, so use "
            "npu_stream_switch only as a `with` block"
        )
    frame = frames.pop()
    if frame.previous is not None:
        _device.set_stream(frame.previous)


def scope_depth() -> int:
    """How many scopes are open on this thread."""
    return len(_state.frames)


def close_scopes_above(depth: int) -> None:
    """Close the scopes this thread opened beyond ``depth``, innermost first, restoring streams.

    A compiled graph opens and closes scopes with ops; an exception between the two leaves the
    scope open and its stream current, which a device capture then refuses to end on.
    """
    frames = _state.frames
    while len(frames) > depth:
        frame = frames.pop()
        if frame.previous is not None:
            _device.set_stream(frame.previous)


def wait_for_streams() -> None:
    """Make the current stream wait for the work issued so far on every other known stream.

    The eager meaning of ``npu_streams.wait(tensors)``: outside a graph the stream that produced
    a tensor is not known, so every tagged stream of the device (and the main stream) is waited
    for. Inside a compiled graph the pass waits for the producers' streams only (and removes the
    ``wait`` itself). While the current stream is capturing a device graph, only the streams
    that are capturing too (the ones the capture forked) are waited for: a wait on an event
    recorded outside the capture would invalidate it.
    """
    device = current_device()
    if device is None:
        return
    current = _device.current_stream(device)
    with _lock:
        others = [entry.stream for entry in _streams.get(device, {}).values()]
    others.append(_main_stream(device))
    capturing = _device.is_capturing(current)
    for stream in others:
        if stream == current or (capturing and not _device.is_capturing(stream)):
            continue
        event = _device.new_event(device)
        event.record(stream)
        event.wait(current)


def record_tagged_stream(tensor: torch.Tensor, tag: str) -> None:
    """``tensor.record_stream`` with the stream named ``tag`` on the tensor's device."""
    device = _device.tensor_device(tensor)
    if device is not None:
        _device.record_stream(tensor, stream_for_tag(device, tag))
    elif current_device() is None and tag != DEFAULT_TAG:
        # On a device this creates the tagged stream with priority 0 if it does not exist yet;
        # the CPU keeps the same priority for the tag, so later scopes follow the same rule.
        with _lock:
            _cpu_priorities.setdefault(tag, 0)
