"""Functional collectives as HCCL ops (``HcomAllReduce`` / ``HcomAllGather`` / ...)."""

from __future__ import annotations

import torch
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, register
from npu_graph_export._device import hccl_group_name
from npu_graph_export.errors import UnsupportedOpError

_c10d = torch.ops._c10d_functional


def _group(ctx: Context, group_name: str) -> tuple[str, list[int]]:
    """The GE group name for a traced process-group name, recorded on the context."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import (  # type: ignore[attr-defined]
        _resolve_process_group,
    )

    group = _resolve_process_group(group_name)  # type: ignore[arg-type]
    ranks = [int(r) for r in dist.get_process_group_ranks(group)]
    # On Ascend the HCCL communicator name identifies the group; other backends (gloo on the
    # CPU) have none, so a name listing the ranks stands in, as TorchAir does.
    name = hccl_group_name(group) or f"tag={group_name};rank_list={','.join(map(str, ranks))}"
    ctx.groups[name] = ranks
    return name, ranks


def _reduction(op: object) -> str:
    reduction = str(op).lower()
    # torch spells ReduceOp.PRODUCT "product"; HCCL calls it "prod".
    reduction = {"product": "prod"}.get(reduction, reduction)
    if reduction not in {"sum", "prod", "max", "min"}:
        raise UnsupportedOpError(
            f"collective reduction {op!r} has no HCCL equivalent; use sum, prod, max or min"
        )
    return reduction


# Hcom ops carry exactly the attributes of their GE IR definitions (hcom_ops.h), as TorchAir
# writes them: GE knows a group's ranks from its name, not from an attribute.


@register(_c10d.all_reduce.default)
def _all_reduce(ctx: Context, node: fx.Node) -> Value:
    x, op, group_name = args_of(node)[:3]
    group, _ = _group(ctx, str(group_name))
    return ctx.emit(
        "HcomAllReduce",
        [ctx.tensor(x)],
        {
            "reduction": _reduction(op),
            "group": group,
            "fusion": 0,
            "fusion_id": -1,
        },
    )


@register(_c10d.all_gather_into_tensor.default)
def _all_gather(ctx: Context, node: fx.Node) -> Value:
    x, group_size, group_name = args_of(node)[:3]
    group, _ = _group(ctx, str(group_name))
    return ctx.emit(
        "HcomAllGather",
        [ctx.tensor(x)],
        {"rank_size": int(group_size), "group": group, "fusion": 0, "fusion_id": -1},
    )


@register(_c10d.reduce_scatter_tensor.default)
def _reduce_scatter(ctx: Context, node: fx.Node) -> Value:
    x, op, group_size, group_name = args_of(node)[:4]
    group, _ = _group(ctx, str(group_name))
    return ctx.emit(
        "HcomReduceScatter",
        [ctx.tensor(x)],
        {
            "reduction": _reduction(op),
            "group": group,
            "rank_size": int(group_size),
            "fusion": 0,
            "fusion_id": -1,
        },
    )


@register(_c10d.wait_tensor.default)
def _wait(ctx: Context, node: fx.Node) -> Value:
    # GE orders collectives itself; waiting is a no-op data edge.
    return ctx.emit("Identity", [ctx.tensor(args_of(node)[0])])
