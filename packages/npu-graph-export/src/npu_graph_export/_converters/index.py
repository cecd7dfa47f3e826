"""Gathers and scatters: embedding lookup, index_select, gather, advanced indexing, index_put."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, positive_dim, register
from npu_graph_export._graph import Tensor
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
    if any(ctx.meta(positions[i]).dtype == torch.bool for i in used):
        raise UnsupportedOpError("index_put with a bool mask has no GE converter; use torch.where")
    if accumulate or len(used) != 1 or ctx.meta(positions[used[0]]).dim() != 1:
        return _scatter_at(ctx, x, [positions[i] for i in used], used, args[2], accumulate)
    dim = used[0]
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


def _scatter_at(
    ctx: Context, x: Tensor, indices: list[Any], used: list[int], values: Any, accumulate: bool
) -> Tensor:
    """``x[indices] = values`` (``+=`` with ``accumulate``) for any advanced index.

    The indexed dimensions are moved first and the index tensors stacked into the ``[..., k]``
    coordinates TensorScatterUpdate / TensorScatterAdd read; ``values`` take the shape of
    ``x[indices]`` (PyTorch's rule: the index dimensions replace adjacent indexed dimensions in
    place, and go first when others lie between them) and are moved to match. This is what
    ``F.fold`` traces to (an accumulating put of every patch).
    """
    shapes = [tuple(ctx.meta(i).shape) for i in indices]
    if any(d < 0 for d in x.shape) or not all(
        isinstance(d, int) for shape in shapes for d in shape
    ):
        raise UnsupportedOpError(
            "index_put with several or multi-dimensional indices needs sizes known when "
            "exporting; export with static shapes"
        )
    rank, count = len(x.shape), len(used)
    index_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    rest = [i for i in range(rank) if i not in used]
    perm = used + rest
    front = tuple(x.shape[i] for i in perm)
    moved = x
    if perm != list(range(rank)):
        moved = ctx.emit(
            "Transpose", [x, ctx.ints(perm, "perm")], shape=front, suffix="indexed_first"
        )
    coordinates = []
    for k, (index, axis) in enumerate(zip(indices, used, strict=True)):
        value = ctx.tensor(index, ge.DT_INT64)
        # PyTorch counts a negative index from the end.
        wrapped = ctx.emit(
            "FloorMod",
            [value, ctx.const(x.shape[axis], ge.DT_INT64, f"size{k}")],
            dtype=ge.DT_INT64,
            shape=value.shape,
            suffix=f"index{k}",
        )
        coordinates.append(
            ctx.emit(
                "BroadcastTo",
                [wrapped, ctx.ints(list(index_shape), f"index_shape{k}")],
                dtype=ge.DT_INT64,
                shape=index_shape,
                suffix=f"index{k}/broadcast",
            )
        )
    stacked = ctx.emit(
        "Pack",
        coordinates,
        {"axis": -1, "N": count},
        dtype=ge.DT_INT64,
        shape=(*index_shape, count),
        suffix="coordinates",
    )
    adjacent = used == list(range(used[0], used[0] + count))
    start = used[0] if adjacent else 0
    if adjacent:
        result = (*x.shape[: used[0]], *index_shape, *x.shape[used[-1] + 1 :])
    else:
        result = (*index_shape, *(x.shape[i] for i in rest))
    updates = ctx.emit(
        "BroadcastTo",
        [ctx.tensor(values, x.dtype), ctx.ints(list(result), "values_shape")],
        dtype=x.dtype,
        shape=result,
        suffix="values",
    )
    if start:
        width = len(index_shape)
        order = [*range(start, start + width), *range(start), *range(start + width, len(result))]
        updates = ctx.emit(
            "Transpose",
            [updates, ctx.ints(order, "values_perm")],
            dtype=x.dtype,
            shape=tuple(result[i] for i in order),
            suffix="values/indexed_first",
        )
    op_type = "TensorScatterAdd" if accumulate else "TensorScatterUpdate"
    scattered = ctx.emit(op_type, [moved, stacked, updates], shape=front, suffix="scatter")
    if perm == list(range(rank)):
        return ctx.emit("Identity", [scattered])
    inverse = [perm.index(i) for i in range(rank)]
    return ctx.emit("Transpose", [scattered, ctx.ints(inverse, "back_perm")])


@register(aten.scatter.src, aten.scatter.value, aten.scatter_add.default)
def _scatter(ctx: Context, node: fx.Node) -> Value:
    # x.scatter(dim, index, src): GE's ScatterElements (ONNX's), whose updates have the index's
    # shape; ATen reads only that corner of a larger src, and broadcasts a scalar value.
    x_arg, dim, index_arg, source = list(args_of(node))[:4]
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    index = ctx.tensor(index_arg, ge.DT_INT64)
    axis = positive_dim(int(dim), max(len(x.shape), 1))
    if any(d < 0 for d in index.shape):
        raise UnsupportedOpError("scatter with an index shape known only at run time")
    if node.target is aten.scatter.value:
        updates = ctx.emit(
            "BroadcastTo",
            [ctx.tensor(source, dtype), ctx.ints(list(index.shape), "updates_shape")],
            shape=index.shape,
            suffix="updates",
        )
    else:
        updates = ctx.tensor(source, dtype)
        if updates.shape != index.shape:
            rank = len(index.shape)
            updates = ctx.emit(
                "StridedSliceV2",
                [
                    updates,
                    ctx.ints([0] * rank, "begin"),
                    ctx.ints(list(index.shape), "end"),
                    ctx.ints(list(range(rank)), "axes"),
                    ctx.ints([1] * rank, "strides"),
                ],
                {
                    "begin_mask": 0,
                    "end_mask": 0,
                    "ellipsis_mask": 0,
                    "new_axis_mask": 0,
                    "shrink_axis_mask": 0,
                },
                shape=index.shape,
                suffix="updates",
            )
    reduction = "add" if node.target is aten.scatter_add.default else "none"
    return ctx.emit("ScatterElements", [x, index, updates], {"axis": axis, "reduction": reduction})
