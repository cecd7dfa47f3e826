"""TorchAir-compatible ``ops`` module: tagged events and record-stream.

Re-exported from npu-streams so ``torchair.ops.npu_*`` calls port by renaming the import.
"""

from __future__ import annotations

from npu_streams import (
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_tagged_event_record,
    npu_tagged_event_wait,
)

__all__ = [
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
]
