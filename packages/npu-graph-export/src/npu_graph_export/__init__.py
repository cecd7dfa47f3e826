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
    ExportWriteError,
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
    "ExportWriteError",
    "GraphBreakError",
    "DataDependentControlFlowError",
    "UnsupportedOpError",
    "ModelFormatError",
    "RuntimeInputError",
    "MemoryLimitError",
    "ConfigError",
]


_LAZY = frozenset({"dynamo_export", "ExportResult", "supported_ops"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from npu_graph_export import _export

        value = getattr(_export, name)
        # Cached as a module global: later lookups skip this hook, and documentation tools that
        # read the module's namespace see the real object.
        globals()[name] = value
        return value
    raise AttributeError(f"module 'npu_graph_export' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names are public API: dir(), completion and pdoc must list them before first use.
    return sorted(set(globals()) | _LAZY)
