"""Errors raised by npu-graph-export.

Every error derives from :class:`NpuGraphExportError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "NpuGraphExportError",
    "ExportError",
    "UnsupportedOpError",
    "ModelFormatError",
    "ExportPathError",
    "ExportWriteError",
    "GraphBreakError",
    "DataDependentControlFlowError",
    "RuntimeInputError",
    "MemoryLimitError",
    "ConfigError",
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


class ExportPathError(ExportError):
    """The export target is unsafe: a symlink, a file in the way, or a path that escapes it."""

    code: ClassVar[str] = "export-path"


class ExportWriteError(NpuGraphExportError, OSError):
    """A file of the export (or a runtime output) could not be written.

    A full disk, a file size limit or a missing permission: the message names the file and what
    to do. Nothing partial is left, and files from an earlier export are unchanged.
    """

    code: ClassVar[str] = "export-write"


class GraphBreakError(ExportError):
    """Dynamo could not capture the model as one graph (``fullgraph=True`` failed)."""

    code: ClassVar[str] = "graph-break"


class DataDependentControlFlowError(GraphBreakError):
    """The model branches on tensor values, which an offline graph cannot do."""

    code: ClassVar[str] = "data-dependent-control-flow"


class UnsupportedOpError(NpuGraphExportError, NotImplementedError):
    """ATen operators that have no GE converter, or that their converter refuses.

    One error names every such op of the model at once, in the order they first occur: how many
    nodes use it and where the first comes from in the user's code.

    Attributes:
        op: The first such ATen operator (``aten.foo.default``), when known.
        module_path: Where in the model that first op came from, when known.
        ops: Every such operator, with the number of graph nodes that use it.
        locations: Where the first node of each operator came from (the user's source line and
            module).
    """

    code: ClassVar[str] = "unsupported-op"

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        module_path: str | None = None,
        ops: Mapping[str, int] | None = None,
        locations: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.op = op
        self.module_path = module_path
        self.ops: dict[str, int] = dict(ops) if ops is not None else ({op: 1} if op else {})
        self.locations: dict[str, str] = (
            dict(locations)
            if locations is not None
            else ({op: module_path} if op and module_path else {})
        )


class ModelFormatError(NpuGraphExportError, ValueError):
    """An exported model file is malformed."""

    code: ClassVar[str] = "model-format"


class RuntimeInputError(NpuGraphExportError, ValueError):
    """Inputs given to the reference runtime do not match the model's inputs."""

    code: ClassVar[str] = "runtime-input"


class MemoryLimitError(NpuGraphExportError, MemoryError):
    """Running a model would take more memory than the reference runtime's ``max_bytes`` budget.

    Raised before the allocation is made: a model or input file that declares a huge tensor
    (a large dimension, a big weight file, a broadcast or concatenation that multiplies sizes)
    fails with the number of bytes it needs instead of exhausting the machine's memory.
    """

    code: ClassVar[str] = "memory-limit"


class ConfigError(NpuGraphExportError, ValueError):
    """An export option has a wrong value or type (``ExportConfig``, ``config=``).

    A ``ValueError`` only, as in every npu package: an option of the wrong type is still a bad
    option value.
    """

    code: ClassVar[str] = "config"
