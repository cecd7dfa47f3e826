"""The only module that may touch torch_npu (lazily): HCCL communicator names for collectives."""

from __future__ import annotations

from typing import Any


def hccl_group_name(group: Any) -> str | None:
    """The HCCL communicator name of a process group, or None off Ascend (gloo, nccl).

    GE identifies a collective's group by this name; TorchAir asks the npu backend of the
    process group for it. torch_npu is imported here, lazily, because importing it without CANN
    breaks ``import torch``.
    """
    try:
        import torch
        import torch_npu  # noqa: F401  (registers the npu backend on process groups)
    except ImportError:
        return None
    try:
        import torch.distributed as dist

        backend = group._get_backend(torch.device("npu"))
        return str(backend.get_hccl_comm_name(dist.get_rank()))
    except (RuntimeError, AttributeError, ValueError):
        return None
