"""What a runner reports: log lines, profiler ranges and structured trace events.

Profiler ranges cost an op dispatch each, so they are opened only while a profiler runs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from torch._logging._internal import trace_structured
from torch.autograd import profiler

__all__ = ["profiled", "profiling", "trace_capture"]


def profiling() -> bool:
    """Whether a ``torch.profiler`` session is recording (a plain flag read)."""
    return profiler._is_profiler_enabled


def profiled(name: str) -> contextlib.AbstractContextManager[Any]:
    """A ``torch.profiler`` range named ``name`` while a profiler runs; else nothing."""
    if profiler._is_profiler_enabled:
        return profiler.record_function(name)
    return contextlib.nullcontext()


def trace_capture(record: Callable[[], dict[str, Any]]) -> None:
    """One structured trace event per capture (``TORCH_TRACE`` / tlparse; free otherwise)."""
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": "npu_mempool_capture", "encoding": "json"},
        payload_fn=lambda: json.dumps(record(), default=str),
    )
