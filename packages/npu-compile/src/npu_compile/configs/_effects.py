"""Why an option has no effect here: the text the backend warns with once when it is set."""

from __future__ import annotations

__all__ = ["ASCEND", "EXPORT_INTERNAL", "GE", "INT64_MAX", "NPU_PATTERNS", "README_NOTES"]

#: The largest value an int option takes (an int64, as in TorchAir).
INT64_MAX = 2**63 - 1

# Why an option has no effect here (the backend warns once with this text when it is set).
GE = (
    "it configures CANN's Graph Engine (TorchAir's max-autotune mode), which npu-compile does "
    "not run"
)
ASCEND = "it drives an Ascend-only runtime feature (CANN), which this backend does not use"
NPU_PATTERNS = (
    "its passes rewrite Ascend (torch_npu) operator patterns, which graphs here do not contain"
)
EXPORT_INTERNAL = "dynamo_export sets it itself; set dynamo_export's arguments instead"

#: How the README's options table says each shared reason, in fewer words. An option with a
#: reason of its own shows that reason, or its ``note``.
README_NOTES = {
    GE: "Graph Engine (max-autotune) option; no GE runs here",
    ASCEND: "Ascend runtime (CANN) feature",
    NPU_PATTERNS: "rewrites Ascend (torch_npu) op patterns, absent here",
    EXPORT_INTERNAL: (
        "set by TorchAir's `dynamo_export` for itself; pass `dynamo_export` arguments instead"
    ),
}
