"""Views and data movement: reshape, permute, expand, slice, concat, split, squeeze."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from torch import fx

from npu_graph_export._converters._base import (
    INT32_MAX,
    Context,
    Unavailable,
    Value,
    args_of,
    aten,
    positive_dim,
    register,
)
from npu_graph_export._graph import Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def _reshape(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    sizes = list(args_of(node)[1])
    return ctx.emit("Reshape", [x, ctx.ints(sizes)], {"axis": 0, "num_axes": -1})


@register(aten.permute.default)
def _permute(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    perm = [positive_dim(int(d), len(x.shape)) for d in args_of(node)[1]]
    return ctx.emit("Transpose", [x, ctx.ints(perm, "perm")])


@register(aten.transpose.int)
def _transpose(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    rank = len(x.shape)
    a, b = (positive_dim(int(d), rank) for d in args_of(node)[1:3])
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("Transpose", [x, ctx.ints(perm, "perm")])


@register(aten.t.default)
def _t(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    if len(x.shape) < 2:
        return ctx.emit("Identity", [x])
    return ctx.emit("Transpose", [x, ctx.ints([1, 0], "perm")])


@register(aten.unsqueeze.default)
def _unsqueeze(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dim = positive_dim(int(args_of(node)[1]), len(x.shape) + 1)
    return ctx.emit("ExpandDims", [x, ctx.ints([dim], "axis")])


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    rank = len(x.shape)
    if len(args_of(node)) > 1:
        dims = args_of(node)[1]
        dims = [dims] if isinstance(dims, int) else list(dims)
        # ATen ignores dims that are not 1; GE's Squeeze would fail on them.
        axes = [
            positive_dim(int(d), rank) for d in dims if x.shape[positive_dim(int(d), rank)] == 1
        ]
    else:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return ctx.emit("Squeeze", [x], {"axis": axes})


@register(aten.expand.default, aten.broadcast_to.default)
def _expand(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    sizes = list(args_of(node)[1])
    offset = len(sizes) - len(x.shape)
    resolved: list[object] = []
    for i, size in enumerate(sizes):
        # -1 keeps the input's size; BroadcastTo wants the real size.
        if isinstance(size, int) and size == -1:
            resolved.append(ctx.dim(x, i - offset))
        else:
            resolved.append(size)
    return ctx.emit("BroadcastTo", [x, ctx.ints(resolved)])


@register(
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.dropout.default,
)
def _identity(ctx: Context, node: fx.Node) -> Value:
    return ctx.emit("Identity", [ctx.tensor(args_of(node)[0])])


def _bound(value: object) -> object:
    # GE's StridedSliceV2 takes int32-range bounds; ATen writes "to the end" as INT64_MAX.
    if isinstance(value, int):
        return max(min(value, INT32_MAX), -INT32_MAX)
    return value


@register(aten.slice.Tensor)
def _slice(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (5 - len(args_of(node)))
    x = ctx.tensor(args[0])
    dim = positive_dim(int(args[1] or 0), len(x.shape))
    start = 0 if args[2] is None else args[2]
    end = INT32_MAX if args[3] is None else args[3]
    step = 1 if args[4] is None else args[4]
    return ctx.emit(
        "StridedSliceV2",
        [
            x,
            ctx.ints([_bound(start)], "begin"),
            ctx.ints([_bound(end)], "end"),
            ctx.ints([dim], "axes"),
            ctx.ints([step], "strides"),
        ],
        {
            "begin_mask": 0,
            "end_mask": 0,
            "ellipsis_mask": 0,
            "new_axis_mask": 0,
            "shrink_axis_mask": 0,
        },
    )


@register(aten.select.int)
def _select(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dim = positive_dim(int(args_of(node)[1]), len(x.shape))
    index = ctx.tensor(args_of(node)[2], ge.DT_INT64)
    axis = ctx.const(dim, ge.DT_INT64, "axis")
    return ctx.emit("GatherV2", [x, index, axis], {"batch_dims": 0})


@register(aten.cat.default)
def _cat(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    parts = [ctx.tensor(a, dtype) for a in args_of(node)[0]]
    # ATen lets empty 1-D tensors join anything; GE does not, so drop them.
    parts = [p for p in parts if p.shape != (0,)] or parts
    rank = len(ctx.out_shape())
    dim = positive_dim(int(args_of(node)[1]) if len(args_of(node)) > 1 else 0, rank)
    concat_dim = ctx.const(np.int64(dim), ge.DT_INT64, "concat_dim")
    return ctx.emit("ConcatV2", [*parts, concat_dim], {"N": len(parts)})


def _split(ctx: Context, node: fx.Node, sizes: list[object], dim: int) -> list[Tensor]:
    x = ctx.tensor(args_of(node)[0])
    dim = positive_dim(dim, len(x.shape))
    outputs = [
        (ctx.out_dtype(), tuple(-1 if not isinstance(d, int) else d for d in _shape(v)))
        for v in ctx.meta()
    ]
    return ctx.builder.add(
        "SplitV",
        ctx.name(),
        [x, ctx.ints(sizes, "size_splits"), ctx.const(np.int32(dim), ge.DT_INT32, "split_dim")],
        outputs,
        {"num_split": len(sizes)},  # split_dim is int32 only in GE's SplitV
    )


def _shape(value: Any) -> tuple[object, ...]:
    from npu_graph_export._converters._base import static_shape

    return static_shape(value)


@register(aten.split_with_sizes.default)
def _split_with_sizes(ctx: Context, node: fx.Node) -> Value:
    dim = int(args_of(node)[2]) if len(args_of(node)) > 2 else 0
    return _split(ctx, node, list(args_of(node)[1]), dim)


@register(aten.split.Tensor)
def _split_tensor(ctx: Context, node: fx.Node) -> Value:
    dim = int(args_of(node)[2]) if len(args_of(node)) > 2 else 0
    sizes: list[object] = []
    for value in ctx.meta():
        size = value.shape[positive_dim(dim, value.dim())]
        sizes.append(int(size) if isinstance(size, int) else -1)
    if sizes.count(-1) > 1:
        from npu_graph_export.errors import UnsupportedOpError

        raise UnsupportedOpError(
            "aten.split on a dynamic dimension has no GE converter; use split_with_sizes"
        )
    return _split(ctx, node, sizes, dim)


@register(operator.getitem)
def _getitem(ctx: Context, node: fx.Node) -> Value:
    value = ctx.value(args_of(node)[0])[args_of(node)[1]]
    if isinstance(value, Unavailable):
        raise UnsupportedOpError(value.reason)
    return value


def _scatter_slice(ctx: Context, x: Tensor, src: Tensor, dim: int, start: Any, end: Any) -> Tensor:
    """``x`` with ``x[start:end]`` along ``dim`` replaced by ``src``: two slices and a concat.

    This is how TorchAir writes a static-step slice_scatter (a KV-cache update ``cache[..., p:q]
    = kv`` after functionalisation); ``start``/``end`` may be sizes known only at run time.
    """
    flags = {
        "begin_mask": 0,
        "end_mask": 0,
        "ellipsis_mask": 0,
        "new_axis_mask": 0,
        "shrink_axis_mask": 0,
    }

    def piece(begin: Any, stop: Any, suffix: str) -> Tensor:
        shape = list(x.shape)
        if all(isinstance(v, int) for v in (begin, stop)) and shape[dim] >= 0:
            shape[dim] = max(min(int(stop), shape[dim]) - int(begin), 0)
        else:
            shape[dim] = -1
        return ctx.emit(
            "StridedSliceV2",
            [
                x,
                ctx.ints([_bound(begin)], f"{suffix}_begin"),
                ctx.ints([_bound(stop)], f"{suffix}_end"),
                ctx.ints([dim], f"{suffix}_axes"),
                ctx.ints([1], f"{suffix}_strides"),
            ],
            flags,
            shape=tuple(shape),
            suffix=suffix,
        )

    head = piece(0, start, "head")
    tail = piece(end, INT32_MAX, "tail")
    axis = ctx.const(np.int64(dim), ge.DT_INT64, "concat_dim")
    return ctx.emit("ConcatV2", [head, src, tail, axis], {"N": 3})


def _static_bound(ctx: Context, value: Any, size: int, default: int) -> Any:
    # Negative and past-the-end bounds count from the end, as Python slices do.
    if value is None:
        return default
    converted = ctx.value(value)
    if isinstance(converted, int):
        if size < 0 and converted < 0:
            from npu_graph_export.errors import UnsupportedOpError

            raise UnsupportedOpError(
                "slice assignment with a negative bound on a dynamic dimension has no GE "
                "converter here; use a non-negative position"
            )
        if converted < 0:
            converted += size
        return max(min(converted, size if size >= 0 else INT32_MAX), 0)
    return value


@register(aten.slice_scatter.default)
def _slice_scatter(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (6 - len(args_of(node)))
    dtype = ctx.out_dtype()
    x, src = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    dim = positive_dim(int(args[2] or 0), len(x.shape))
    if args[5] not in (None, 1):
        from npu_graph_export.errors import UnsupportedOpError

        raise UnsupportedOpError("slice assignment with a step other than 1 has no GE converter")
    size = x.shape[dim]
    start = _static_bound(ctx, args[3], size, 0)
    end = _static_bound(ctx, args[4], size, INT32_MAX if size < 0 else size)
    if isinstance(start, int) and isinstance(end, int) and end < start:
        end = start
    return _scatter_slice(ctx, x, src, dim, start, end)


@register(aten.flip.default)
def _flip(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    axes = [positive_dim(int(d), len(x.shape)) for d in args_of(node)[1]]
    return ctx.emit("ReverseV2", [x, ctx.ints(axes, "axis")])
