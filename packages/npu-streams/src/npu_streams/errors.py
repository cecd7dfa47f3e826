"""Errors raised by npu-streams.

Every error derives from :class:`NpuStreamsError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "NpuStreamsError",
    "StreamScopeError",
    "EventTagError",
    "StreamTagError",
]


class NpuStreamsError(Exception):
    """Root of every error raised by npu-streams."""

    code: ClassVar[str] = "npu-streams"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StreamScopeError(NpuStreamsError, RuntimeError):
    """A stream scope is malformed (e.g. a graph break inside `npu_stream_switch`)."""

    code: ClassVar[str] = "stream-scope"


class EventTagError(NpuStreamsError, ValueError):
    """A tagged event was created twice or used before being created."""

    code: ClassVar[str] = "event-tag"


class StreamTagError(NpuStreamsError, ValueError):
    """A stream tag or priority is invalid, or one tag was asked for with two priorities."""

    code: ClassVar[str] = "stream-tag"
