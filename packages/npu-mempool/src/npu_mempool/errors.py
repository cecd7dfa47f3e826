"""Errors raised by npu-mempool.

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
