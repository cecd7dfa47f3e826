"""Errors raised by npu-graph-export.

Every error derives from :class:`NpuGraphExportError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "NpuGraphExportError",
    "ExportError",
    "UnsupportedOpError",
    "ModelFormatError",
]


class NpuGraphExportError(Exception):
    """Root of every error raised by npu-graph-export."""

    code: ClassVar[str] = "npu-graph-export"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ExportError(NpuGraphExportError, ValueError):
    """The model cannot be exported as asked."""

    code: ClassVar[str] = "export"


class UnsupportedOpError(NpuGraphExportError, NotImplementedError):
    """An ATen operator has no GE converter."""

    code: ClassVar[str] = "unsupported-op"


class ModelFormatError(NpuGraphExportError, ValueError):
    """An exported model file is malformed."""

    code: ClassVar[str] = "model-format"
