"""Errors and warnings raised by npu-mempool.

Every error derives from :class:`NpuMempoolError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "NpuMempoolError",
    "CaptureError",
    "StaleOutputError",
    "OptionsError",
    "InputLayoutError",
    "CaptureLimitWarning",
    "CaptureChurnWarning",
]


class NpuMempoolError(Exception):
    """Root of every error raised by npu-mempool."""

    code: ClassVar[str] = "npu-mempool"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CaptureError(NpuMempoolError, RuntimeError):
    """A device graph could not be captured."""

    code: ClassVar[str] = "capture"


class StaleOutputError(NpuMempoolError, RuntimeError):
    """An output was read after a later replay overwrote it."""

    code: ClassVar[str] = "stale-output"


class OptionsError(NpuMempoolError, ValueError):
    """Options or a pool handle that cannot work together."""

    code: ClassVar[str] = "options"


class InputLayoutError(NpuMempoolError, TypeError):
    """A call whose arguments do not match the layout the runner was built for."""

    code: ClassVar[str] = "input-layout"


class CaptureLimitWarning(UserWarning):
    """A runner reached its capture limit and now runs eagerly."""

    code: ClassVar[str] = "capture-limit"


class CaptureChurnWarning(UserWarning):
    """A runner captured a new graph on every call for a changing non-tensor value and gave up."""

    code: ClassVar[str] = "capture-churn"
