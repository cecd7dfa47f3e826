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


@register(aten.index_put.default)
def _index_put(ctx: Context, node: fx.Node) -> Value:
    # x[..., idx, ...] = values along one dimension (a static KV cache written at
    # cache_position): move that dimension first, TensorScatterUpdate rows, move it back.
    args = list(args_of(node))
    dtype = ctx.out_dtype()
    x = ctx.tensor(args[0], dtype)
    positions = list(args[1])
    accumulate = bool(args[3]) if len(args) > 3 else False
    used = [i for i, index in enumerate(positions) if index is not None]
    if accumulate or len(used) != 1 or ctx.meta(positions[used[0]]).dim() != 1:
        raise UnsupportedOpError(
            "index_put converts only as x[..., idx, ...] = values with one 1-D integer index "
            "and accumulate=False (a cache update at cache_position)"
        )
    dim = used[0]
    if ctx.meta(positions[dim]).dtype == torch.bool:
        raise UnsupportedOpError("index_put with a bool mask has no GE converter; use torch.where")
    index = ctx.tensor(positions[dim], ge.DT_INT64)
    rank = len(x.shape)
    perm = [dim, *(i for i in range(rank) if i != dim)]
    inverse = [perm.index(i) for i in range(rank)]
    front = tuple(x.shape[i] for i in perm)
    rows_shape = (index.shape[0], *front[1:])
    rows = ctx.emit(
        "BroadcastTo",
        [
            ctx.tensor(args[2], dtype),
            ctx.ints(
                [ctx.dim(index, 0) if i == dim else ctx.dim(x, i) for i in range(rank)],
                "values_shape",
            ),
        ],
        shape=tuple(rows_shape[perm.index(i)] for i in range(rank)),
        suffix="values",
    )
    moved = ctx.emit("Transpose", [x, ctx.ints(perm, "perm")], shape=front, suffix="front")
    moved_rows = ctx.emit(
        "Transpose", [rows, ctx.ints(perm, "rows_perm")], shape=rows_shape, suffix="rows"
    )
    column = ctx.emit(
        "ExpandDims",
        [index, ctx.ints([1], "column")],
        dtype=ge.DT_INT64,
        shape=(index.shape[0], 1),
        suffix="indices",
    )
    updated = ctx.emit(
        "TensorScatterUpdate", [moved, column, moved_rows], shape=front, suffix="scatter"
    )
    return ctx.emit("Transpose", [updated, ctx.ints(inverse, "back_perm")])
