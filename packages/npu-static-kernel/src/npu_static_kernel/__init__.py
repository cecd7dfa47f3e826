"""Shape-specialised (static) kernel builds, artifact cache and multi-process builds."""

from __future__ import annotations

from npu_static_kernel._version import __version__
from npu_static_kernel.errors import BuildError, CacheError, NpuStaticKernelError

__all__ = [
    "__version__",
    "NpuStaticKernelError",
    "BuildError",
    "CacheError",
]
