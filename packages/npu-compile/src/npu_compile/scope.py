"""TorchAir-compatible ``scope`` module (``torchair.scope`` -> ``npu_compile.scope``).

``npu_stream_switch`` is npu-streams' stream scope. ``npu_wait_tensor(self, dependency)`` orders
``self`` after ``dependency`` across streams (``npu_compile.ops.wait``). TorchAir's Ascend-only
scopes (``limit_core_num``, ``super_kernel``, ``op_never_timeout``, ``data_dump``) are accepted
and have no effect here: each warns once, the first time it runs.
"""

from __future__ import annotations

from npu_streams import npu_stream_switch

from npu_compile._scopes import (
    data_dump,
    limit_core_num,
    npu_wait_tensor,
    op_never_timeout,
    super_kernel,
)
from npu_compile._unsupported import unsupported

__all__ = [
    "npu_stream_switch",
    "npu_wait_tensor",
    "limit_core_num",
    "super_kernel",
    "op_never_timeout",
    "data_dump",
]


def __getattr__(name: str) -> object:
    raise unsupported(__name__, name)
