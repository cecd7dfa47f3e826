"""TorchAir-compatible ``scope`` module: ``npu_compile.scope.npu_stream_switch``.

Re-exported from npu-streams so ``torchair.scope.npu_stream_switch`` ports by renaming the import.
"""

from __future__ import annotations

from npu_streams import npu_stream_switch

__all__ = ["npu_stream_switch"]
