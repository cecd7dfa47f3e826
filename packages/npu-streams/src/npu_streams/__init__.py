"""Multi-stream expression inside captured device graphs.

Stream scopes (:class:`npu_stream_switch`), tagged events and record-stream, as ``torch.library``
custom ops that ``torch.compile`` traces with ``fullgraph=True``, plus the FX pass
(:func:`prepare_for_capture`) that inserts the fork/join pairs a device-graph capture needs. Names
follow TorchAir's ``torchair.scope`` / ``torchair.ops`` so scripts port by changing the import.
"""

from __future__ import annotations

from npu_streams._events import (
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_tagged_event_record,
    npu_tagged_event_wait,
    record,
    reset_tagged_events,
    wait,
)
from npu_streams._pass import (
    STREAM_META_KEY,
    has_stream_ops,
    prepare_for_capture,
    prepare_piece,
    unmatched_waits,
)
from npu_streams._reads import unordered_reads
from npu_streams._runtime import DEFAULT_TAG, TaggedEvent
from npu_streams._scope import current_stream_tag, npu_stream_switch, scopes_closed_on_error
from npu_streams._version import __version__
from npu_streams.errors import EventTagError, NpuStreamsError, StreamScopeError, StreamTagError

__all__ = [
    "__version__",
    # scopes
    "npu_stream_switch",
    "current_stream_tag",
    "scopes_closed_on_error",
    "DEFAULT_TAG",
    # events and record-stream
    "TaggedEvent",
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
    "reset_tagged_events",
    "record",
    "wait",
    # capture pass
    "prepare_for_capture",
    "prepare_piece",
    "unmatched_waits",
    "unordered_reads",
    "has_stream_ops",
    "STREAM_META_KEY",
    # errors
    "NpuStreamsError",
    "StreamScopeError",
    "EventTagError",
    "StreamTagError",
]
