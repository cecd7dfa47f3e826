"""Errors and warnings raised by npu-mempool.

Every error derives from :class:`NpuMempoolError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.

Deprecated names:
    OptionsError: The old name of :class:`ConfigError` (the name the other npu packages use for
        option errors), kept as an alias: the same class, so ``except OptionsError`` and
        ``isinstance(error, OptionsError)`` keep working. Use ``ConfigError`` in new code.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "NpuMempoolError",
    "CaptureError",
    "StaleOutputError",
    "ConfigError",
    "OptionsError",  # deprecated alias of ConfigError
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


class ConfigError(NpuMempoolError, ValueError):
    """Options or a pool handle that cannot work together."""

    # The code every npu package gives its ConfigError (npu-mempool's was "options").
    code: ClassVar[str] = "config"


#: Deprecated alias of :class:`ConfigError` (the same class object), kept for existing callers.
OptionsError = ConfigError


class InputLayoutError(NpuMempoolError, TypeError):
    """A call whose arguments do not match the layout the runner was built for."""

    code: ClassVar[str] = "input-layout"


class CaptureLimitWarning(UserWarning):
    """A runner reached its capture limit and now runs eagerly."""

    code: ClassVar[str] = "capture-limit"


class CaptureChurnWarning(UserWarning):
    """A runner captured a new graph on every call for a changing non-tensor value and gave up."""

    code: ClassVar[str] = "capture-churn"
