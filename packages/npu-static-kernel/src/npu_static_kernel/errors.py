"""Errors and warnings raised by npu-static-kernel.

Every error derives from :class:`NpuStaticKernelError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "NpuStaticKernelError",
    "BuildError",
    "CacheError",
    "ConfigError",
    "StaticKernelDisabledWarning",
    "CacheFallbackWarning",
    "StaticKernelFallbackWarning",
]


class NpuStaticKernelError(Exception):
    """Root of every error raised by npu-static-kernel."""

    code: ClassVar[str] = "npu-static-kernel"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BuildError(NpuStaticKernelError, RuntimeError):
    """A static kernel build failed or its toolchain is missing."""

    code: ClassVar[str] = "build"


class CacheError(NpuStaticKernelError, OSError):
    """The artifact cache is unreadable or an artifact is corrupted."""

    code: ClassVar[str] = "cache"


class ConfigError(NpuStaticKernelError, ValueError):
    """A setting (argument or environment variable) has a value that cannot be used."""

    code: ClassVar[str] = "config"


class StaticKernelDisabledWarning(UserWarning):
    """Static kernels were switched off for this process; graphs still run, without them."""

    code: ClassVar[str] = "static-kernel-disabled"


class CacheFallbackWarning(UserWarning):
    """The build directory is read-only: its artifacts are used, new ones go to a fallback."""

    code: ClassVar[str] = "cache-fallback"


class StaticKernelFallbackWarning(UserWarning):
    """A graph runs without its static kernels: they could not be built, found or loaded.

    Issued once per build directory and process, with the cause (a compiler's first error
    line, a link refused in the cache); ``StaticKernelCompiler(strict=True)`` raises instead.
    """

    code: ClassVar[str] = "static-kernel-fallback"
