"""Collective kernels (``Hcom*``) for one process: refused, or computed as if every rank agreed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    attr_int,
    attr_str,
    kernel,
)


def _group_size(op: ge.OpDef) -> int:
    # HcomAllReduce has no rank_size attribute: the group name written for non-HCCL process
    # groups lists the ranks (``tag=...;rank_list=0,1``); an HCCL communicator name does not.
    group = attr_str(op, "group", "")
    for part in group.split(";"):
        key, _, ranks = part.partition("=")
        if key.strip() == "rank_list" and ranks:
            return len(ranks.split(","))
    raise KernelError(
        f"the size of group {group!r} is unknown to the reference runtime (no rank_list in its "
        "name); run this .air with GE"
    )


@kernel("HcomAllReduce", "HcomAllGather", "HcomReduceScatter")
def _collective(op: ge.OpDef, xs: Sequence[Array], comm: Collectives) -> list[Array]:
    if comm.mode != "replicated":
        raise KernelError(
            f"{op.type} needs other ranks; load the model with collectives='replicated' to assume "
            "every rank holds the same input, or run the .air on devices with ATC/GE"
        )
    x = xs[0]
    size = attr_int(op, "rank_size") if "rank_size" in op.attr else _group_size(op)
    if size < 1 or size > 4096:
        raise KernelError(f"invalid group size {size}")
    if op.type == "HcomAllGather":
        return [np.concatenate([x] * size, axis=0)]
    reduction = attr_str(op, "reduction", "sum")
    if reduction == "sum":
        reduced = x * np.asarray(size, x.dtype)
    elif reduction == "prod":
        reduced = x**size
    elif reduction in {"max", "min"}:
        reduced = x
    else:
        raise KernelError(f"unknown reduction {reduction!r}")
    if op.type == "HcomAllReduce":
        return [reduced]
    if x.ndim == 0 or x.shape[0] % size:
        raise KernelError("reduce-scatter input's first dimension must divide by the group size")
    chunk = x.shape[0] // size
    rank = comm.rank if 0 <= comm.rank < size else 0
    return [reduced[rank * chunk : (rank + 1) * chunk]]
