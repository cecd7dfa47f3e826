"""Device-graph capture and replay with memory pools shared between graphs."""

from __future__ import annotations

from npu_mempool._version import __version__
from npu_mempool.errors import CaptureError, NpuMempoolError, StaleOutputError

__all__ = [
    "__version__",
    "NpuMempoolError",
    "CaptureError",
    "StaleOutputError",
]
