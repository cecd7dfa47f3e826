"""Export PyTorch models to offline GE IR graphs and run them with numpy."""

from __future__ import annotations

from npu_graph_export._version import __version__
from npu_graph_export.errors import (
    ExportError,
    ModelFormatError,
    NpuGraphExportError,
    UnsupportedOpError,
)

__all__ = [
    "__version__",
    "NpuGraphExportError",
    "ExportError",
    "UnsupportedOpError",
    "ModelFormatError",
]
