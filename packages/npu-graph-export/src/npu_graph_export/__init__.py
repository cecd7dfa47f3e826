"""Export PyTorch models to offline GE IR graphs and run them with numpy.

``dynamo_export`` needs torch; it is imported on first use so that
``npu_graph_export.runtime`` (numpy + protobuf only) works where torch is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npu_graph_export._config import DEFAULT_EMBED_LIMIT_BYTES, ExportConfig
from npu_graph_export._version import __version__
from npu_graph_export.errors import (
    ConfigError,
    DataDependentControlFlowError,
    ExportError,
    ExportPathError,
    GraphBreakError,
    MemoryLimitError,
    ModelFormatError,
    NpuGraphExportError,
    RuntimeInputError,
    UnsupportedOpError,
)

if TYPE_CHECKING:
    from npu_graph_export._export import ExportResult, dynamo_export, supported_ops

__all__ = [
    "__version__",
    "dynamo_export",
    "supported_ops",
    "ExportConfig",
    "ExportResult",
    "DEFAULT_EMBED_LIMIT_BYTES",
    "NpuGraphExportError",
    "ExportError",
    "ExportPathError",
    "GraphBreakError",
    "DataDependentControlFlowError",
    "UnsupportedOpError",
    "ModelFormatError",
    "RuntimeInputError",
    "MemoryLimitError",
    "ConfigError",
]


def __getattr__(name: str) -> Any:
    if name in {"dynamo_export", "ExportResult", "supported_ops"}:
        from npu_graph_export import _export

        return getattr(_export, name)
    raise AttributeError(f"module 'npu_graph_export' has no attribute {name!r}")
