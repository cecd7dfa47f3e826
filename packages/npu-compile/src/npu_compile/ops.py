"""TorchAir-compatible ``ops`` module: tagged events, record-stream, ``record`` / ``wait``.

Re-exported from npu-streams so ``torchair.ops.npu_*`` calls port by renaming the import.
TorchAir's Ascend kernels (``npu_fused_infer_attention_score*``) and ``npu_print`` raise
:class:`~npu_compile.errors.UnsupportedApiError` naming why.
"""

from __future__ import annotations

from npu_streams import (
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_tagged_event_record,
    npu_tagged_event_wait,
    record,
    wait,
)

from npu_compile._unsupported import unsupported

__all__ = [
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
    "record",
    "wait",
]


def __getattr__(name: str) -> object:
    raise unsupported(__name__, name)
