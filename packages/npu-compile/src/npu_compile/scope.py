"""TorchAir-compatible ``scope`` module: ``npu_compile.scope.npu_stream_switch``.

Re-exported from npu-streams so ``torchair.scope.npu_stream_switch`` ports by renaming the import.
TorchAir's other scopes (``limit_core_num``, ``super_kernel``, ``op_never_timeout``,
``data_dump``, ``npu_wait_tensor``) raise :class:`~npu_compile.errors.UnsupportedApiError` naming
why.
"""

from __future__ import annotations

from npu_streams import npu_stream_switch

from npu_compile._unsupported import unsupported

__all__ = ["npu_stream_switch"]


def __getattr__(name: str) -> object:
    raise unsupported(__name__, name)
