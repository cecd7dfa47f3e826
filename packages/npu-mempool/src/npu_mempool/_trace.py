"""What a runner reports: log lines, profiler ranges and structured trace events.

Profiler ranges cost an op dispatch each, so they are opened only while a profiler runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Hashable
from typing import Any

from torch._logging._internal import trace_structured
from torch.autograd import profiler

__all__ = ["profiled", "report_capture", "trace_capture"]

log = logging.getLogger("npu_mempool")


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


def report_capture(
    *,
    name: str,
    key: Hashable,
    reason: str | None,
    seconds: float,
    call_path: int,
    graphs_before: int,
    pool_bytes: Callable[[], int],
    calls: int,
    replays: int,
) -> None:
    """Log one capture (info: what and how long; debug: its key) and trace it.

    ``reason`` is ``None`` for a new key; ``graphs_before`` counts the graphs held before this
    one; ``pool_bytes`` reads the size of the pool it was captured into; ``calls`` and
    ``replays`` are the runner's before this one (a capture pays only when replays follow).
    """
    if log.isEnabledFor(logging.INFO):  # reading the pool's bytes asks the allocator
        log.info(
            "GraphRunner %r: captured a graph in %.3f s (%s), %d graph(s), pool %s; "
            "%d replay(s) in %d call(s) before it",
            name,
            seconds,
            reason or "new key",
            graphs_before + 1,
            _size(pool_bytes()),
            replays,
            calls,
        )
    log.debug("GraphRunner %r: key %r on call path %d", name, key, call_path)
    trace_capture(
        lambda: {
            "runner": name,
            "key": repr(key),
            "reason": reason or "new_key",
            "seconds": seconds,
            "call_path": call_path,
            "graphs": graphs_before,
            "pool_bytes": pool_bytes(),
        }
    )


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes:.2f} GiB"
