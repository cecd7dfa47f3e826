"""Tensors made inside the graph (arange, full, *_like, masks) and dtype conversions."""

from __future__ import annotations

from typing import Any

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._graph import DType


@register(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node))
    if node.target is aten.arange.default:
        args = [0, args[0], 1]
    elif len(args) < 3:
        args = [args[0], args[1], kwargs_of(node).get("step", 1)]
    dtype = ctx.out_dtype()
    start, limit, delta = (ctx.tensor(a, dtype) for a in args[:3])
    return ctx.emit("Range", [start, limit, delta])


def _fill(ctx: Context, sizes: list[Any], value: Any) -> Value:
    dtype = ctx.out_dtype()
    return ctx.emit("Fill", [ctx.ints(sizes, "dims"), ctx.tensor(value, dtype)])


@register(aten.full.default)
def _full(ctx: Context, node: fx.Node) -> Value:
    return _fill(ctx, list(args_of(node)[0]), args_of(node)[1])


@register(aten.zeros.default, aten.new_zeros.default)
def _zeros(ctx: Context, node: fx.Node) -> Value:
    sizes = args_of(node)[1] if node.target is aten.new_zeros.default else args_of(node)[0]
    return _fill(ctx, list(sizes), 0)


@register(aten.ones.default, aten.new_ones.default)
def _ones(ctx: Context, node: fx.Node) -> Value:
    sizes = args_of(node)[1] if node.target is aten.new_ones.default else args_of(node)[0]
    return _fill(ctx, list(sizes), 1)


@register(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default)
def _empty(ctx: Context, node: fx.Node) -> Value:
    # Uninitialised memory has no value to preserve; zeros keep the runtime deterministic. A
    # memory layout (empty_permuted, empty_strided) has no meaning in a GE graph.
    return _fill(ctx, list(args_of(node)[0]), 0)


@register(aten.scalar_tensor.default)
def _scalar_tensor(ctx: Context, node: fx.Node) -> Value:
    return ctx.tensor(args_of(node)[0], ctx.out_dtype())


@register(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default)
def _full_like(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    if node.target is aten.zeros_like.default:
        return ctx.emit("ZerosLike", [x])
    if node.target is aten.ones_like.default:
        return ctx.emit("OnesLike", [x])
    ones = ctx.emit("OnesLike", [x], suffix="ones")
    return ctx.emit("Mul", [ones, ctx.tensor(args_of(node)[1], dtype)])


@register(aten.tril.default, aten.triu.default)
def _triangle(ctx: Context, node: fx.Node) -> Value:
    op_type = "Tril" if node.target is aten.tril.default else "Triu"
    diagonal = int(args_of(node)[1]) if len(args_of(node)) > 1 else 0
    return ctx.emit(op_type, [ctx.tensor(args_of(node)[0])], {"diagonal": diagonal})


@register(aten._to_copy.default, aten.to.dtype)
def _to_copy(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dtype = ctx.out_dtype()
    if x.dtype == dtype:
        return ctx.emit("Identity", [x])
    return ctx.emit("Cast", [x], {"dst_type": DType(dtype, as_int=True)})


@register(aten.copy.default)
def _copy(ctx: Context, node: fx.Node) -> Value:
    # copy(dst, src) is how functionalisation writes results of in-place collectives back:
    # the result is src converted to dst's dtype and broadcast to dst's shape.
    dtype = ctx.out_dtype()
    src = ctx.tensor(args_of(node)[1], dtype)
    shape = ctx.out_shape()
    if src.shape == shape:
        return ctx.emit("Identity", [src])
    dst = ctx.tensor(args_of(node)[0])
    sizes = [ctx.dim(dst, i) for i in range(len(dst.shape))]
    return ctx.emit("BroadcastTo", [src, ctx.ints(sizes)])
