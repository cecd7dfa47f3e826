"""Gathers: embedding lookup and index_select."""

from __future__ import annotations

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, positive_dim, register
from npu_graph_export._proto import ge_ir_pb2 as ge


@register(aten.embedding.default)
def _embedding(ctx: Context, node: fx.Node) -> Value:
    weight = ctx.tensor(args_of(node)[0])
    indices = ctx.tensor(args_of(node)[1])
    axis = ctx.const(0, ge.DT_INT64, "axis")
    return ctx.emit("GatherV2", [weight, indices, axis], {"batch_dims": 0})


@register(aten.index_select.default)
def _index_select(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dim = positive_dim(int(args_of(node)[1]), len(x.shape))
    indices = ctx.tensor(args_of(node)[2])
    axis = ctx.const(dim, ge.DT_INT64, "axis")
    return ctx.emit("GatherV2", [x, indices, axis], {"batch_dims": 0})
