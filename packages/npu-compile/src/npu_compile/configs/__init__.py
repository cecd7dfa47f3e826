"""TorchAir-compatible configuration module path: ``npu_compile.configs.compiler_config``."""

from __future__ import annotations

from npu_compile.configs.compiler_config import CompilerConfig

__all__ = ["CompilerConfig"]
