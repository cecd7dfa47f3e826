"""TorchAir-style reduce-overhead compilation for PyTorch on NPU, CUDA and CPU."""

from __future__ import annotations

from npu_compile._version import __version__
from npu_compile.errors import BackendError, ConfigError, NpuCompileError

__all__ = [
    "__version__",
    "NpuCompileError",
    "ConfigError",
    "BackendError",
]
