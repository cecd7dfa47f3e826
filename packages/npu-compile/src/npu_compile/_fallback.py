"""Why an FX graph runs eagerly instead of captured: one code per cause, and the record kept.

A graph the backend cannot capture falls back to eager (or raises with
``debug.aclgraph.strict``); a captured graph whose static kernels could not be built runs
without them. Each fallback carries a :class:`FallbackReason`, for programs and tests, next to
the message written for people.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["Fallback", "FallbackReason"]


class FallbackReason(enum.StrEnum):
    """Why an FX graph fell back to eager (values of ``BackendStats.fallback_reasons``).

    Members are strings, so ``reason == "host_sync"`` keeps working. The logged warning and the
    strict-mode :class:`~npu_compile.BackendError` name the value too.

    Attributes:
        MIXED_DEVICES: The graph's inputs live on several device types; a device graph runs on
            one device.
        TRAINING: Autograd records the graph (an output requires grad) and it cannot be
            captured: torch's AOT compile is saving it (a saved artifact holds no backward
            graph). Other training graphs are captured, forward and backward.
        HOST_SYNC: An operator reads a tensor value on the host (``.item()``, ``nonzero``),
            which a device graph cannot record.
        AOT_TRACE_FAILED: AOT autograd could not trace the graph.
        EXTERNAL_STATE: An operator reads per-step state from outside the graph's inputs
            (vLLM's attention metadata on a device), or is tagged
            ``torch.Tag.cudagraph_unsafe``, which a replay would reuse stale.
        SPLITTING_OPS: Every operator worth capturing is named in
            ``aclgraph_config.splitting_ops``, so no piece is left to capture.
        STATIC_KERNEL_FAILED: Static kernels are on but could not be built, found or loaded for
            a shape of the graph (a compiler error, a link refused in the build directory, a
            full disk). The graph is still captured and replayed, without them; the message
            gives the cause (the compiler's first error line). Recorded once per graph.
    """

    MIXED_DEVICES = "mixed_devices"
    TRAINING = "training"
    HOST_SYNC = "host_sync"
    AOT_TRACE_FAILED = "aot_trace_failed"
    EXTERNAL_STATE = "external_state"
    SPLITTING_OPS = "splitting_ops"
    STATIC_KERNEL_FAILED = "static_kernel_failed"


class Fallback(NamedTuple):
    """One entry of ``BackendStats.fallbacks``: a plain ``(graph, message)`` pair.

    Its :class:`FallbackReason` is ``stats.fallback_reasons[entry.graph]``.

    Attributes:
        graph: The FX graph's name (as in the log lines, e.g. ``npu_compile_3``).
        message: Why it runs eagerly and what to do about it, for people.
    """

    graph: str
    message: str
