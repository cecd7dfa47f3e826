"""Multi-stream expression inside captured device graphs."""

from __future__ import annotations

from npu_streams._version import __version__
from npu_streams.errors import EventTagError, NpuStreamsError, StreamScopeError

__all__ = [
    "__version__",
    "NpuStreamsError",
    "StreamScopeError",
    "EventTagError",
]
