"""The settings of a :class:`~npu_static_kernel.StaticKernelCompiler` beyond its arguments."""

from __future__ import annotations

import os
from pathlib import Path

from npu_static_kernel._interface import path_of

__all__ = ["FALLBACK_DIR_ENV", "default_fallback_dir"]

FALLBACK_DIR_ENV = "NPU_STATIC_KERNEL_FALLBACK_DIR"


def default_fallback_dir() -> Path:
    """Where to build when the build directory is read-only.

    Returns:
        ``$NPU_STATIC_KERNEL_FALLBACK_DIR`` if set, else ``$XDG_CACHE_HOME/npu_static_kernel``
        (``~/.cache/npu_static_kernel`` without ``XDG_CACHE_HOME``).
    """
    configured = os.environ.get(FALLBACK_DIR_ENV)
    if configured:
        return path_of(configured, FALLBACK_DIR_ENV).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return path_of(base).absolute() / "npu_static_kernel"
