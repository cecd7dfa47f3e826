"""Device-graph capture and replay with memory pools shared between graphs.

TorchAir's aclgraph memory modes on ``npu``, ``cuda`` and ``cpu`` (emulated): a
:class:`GraphRunner` captures a callable once per graph key and replays it; graphs of one runner
share one pool (mode 2), runners can share a pool (mode 1, :func:`graph_pool_handle`) and user
inputs are copied into pool buffers (mode 3).
"""

from __future__ import annotations

from npu_mempool._bound import BoundGraph
from npu_mempool._budget import GraphBudget, graph_budget
from npu_mempool._counters import Counters, RecaptureReason, counters
from npu_mempool._devices import graph_implementation, graph_pool_handle
from npu_mempool._options import CaptureOptions, InputKind
from npu_mempool._pool import PoolHandle
from npu_mempool._runner import GraphRunner
from npu_mempool._steps import hold_step, mark_step_begin, release_step, top_level_call
from npu_mempool._version import __version__
from npu_mempool.errors import (
    CaptureChurnWarning,
    CaptureError,
    CaptureLimitWarning,
    ConfigError,
    InputLayoutError,
    NpuMempoolError,
    OptionsError,
    StaleOutputError,
)

__all__ = [
    "__version__",
    "GraphRunner",
    "BoundGraph",
    "mark_step_begin",
    "top_level_call",
    "hold_step",
    "release_step",
    "CaptureOptions",
    "InputKind",
    "graph_pool_handle",
    "graph_implementation",
    "graph_budget",
    "GraphBudget",
    "PoolHandle",
    "Counters",
    "RecaptureReason",
    "counters",
    "NpuMempoolError",
    "CaptureError",
    "StaleOutputError",
    "ConfigError",
    "OptionsError",  # deprecated alias of ConfigError
    "InputLayoutError",
    "CaptureLimitWarning",
    "CaptureChurnWarning",
]
