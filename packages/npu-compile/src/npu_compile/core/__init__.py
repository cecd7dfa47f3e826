"""TorchAir-compatible ``core`` package (``npu_compile.core.utils.logger``)."""

from __future__ import annotations

from npu_compile.core import utils

__all__ = ["utils"]
