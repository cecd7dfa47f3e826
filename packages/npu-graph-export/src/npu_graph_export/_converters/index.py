"""Gathers: embedding lookup, index_select, gather and advanced indexing."""

from __future__ import annotations

import torch
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, positive_dim, register
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError


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


@register(aten.index.Tensor)
def _index(ctx: Context, node: fx.Node) -> Value:
    # x[i0, i1, ...] with some positions None (``x[:, idx]``): GE's IndexByTensor takes the
    # present index tensors (int64) and a mask saying which dimensions they index.
    x = ctx.tensor(args_of(node)[0])
    positions = list(args_of(node)[1])
    mask = [0 if index is None else 1 for index in positions]
    for index in positions:
        if index is not None and ctx.meta(index).dtype == torch.bool:
            raise UnsupportedOpError(
                "indexing with a bool mask (x[mask]) gives a data-dependent shape, which an "
                "offline graph cannot express; use torch.where(mask, x, other) instead"
            )
    indices = [ctx.tensor(index, ge.DT_INT64) for index in positions if index is not None]
    return ctx.emit("IndexByTensor", [x, *indices], {"indices_mask": mask})


@register(aten.gather.default)
def _gather(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dim = positive_dim(int(args_of(node)[1]), len(x.shape))
    index = ctx.tensor(args_of(node)[2], ge.DT_INT64)
    return ctx.emit("GatherElements", [x, index], {"dim": dim})
