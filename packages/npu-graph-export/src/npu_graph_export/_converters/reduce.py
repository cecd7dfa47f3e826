"""Reductions over axes (an empty or missing ``dim`` reduces every axis)."""

from __future__ import annotations

from typing import Any

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._proto import ge_ir_pb2 as ge


def _reduce(op_type: str) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        dtype = ctx.out_dtype()
        x = ctx.tensor(args_of(node)[0], dtype)
        rank = len(x.shape)
        dims = args_of(node)[1] if len(args_of(node)) > 1 else kwargs_of(node).get("dim")
        if dims is None or dims == []:
            axes = list(range(rank))
        else:
            dims = [dims] if isinstance(dims, int) else dims
            axes = [int(d) % max(rank, 1) for d in dims]
        keep = (
            bool(args_of(node)[2])
            if len(args_of(node)) > 2
            else bool(kwargs_of(node).get("keepdim", False))
        )
        return ctx.emit(op_type, [x, ctx.ints(axes, "axes")], {"keep_dims": keep})

    return convert


register(aten.mean.dim, aten.mean.default)(_reduce("ReduceMean"))
register(aten.sum.dim_IntList, aten.sum.default)(_reduce("ReduceSum"))
register(aten.amax.default, aten.max.default)(_reduce("ReduceMax"))
register(aten.amin.default, aten.min.default)(_reduce("ReduceMin"))
register(aten.prod.dim_int, aten.prod.default)(_reduce("ReduceProd"))
register(aten.any.default, aten.any.dim, aten.any.dims)(_reduce("ReduceAny"))
register(aten.all.default, aten.all.dim, aten.all.dims)(_reduce("ReduceAll"))


@register(aten.cumsum.default)
def _cumsum(ctx: Context, node: fx.Node) -> Value:
    # ATen's cumsum of ints/bools accumulates in int64 (the output dtype): cast first.
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    axis = int(args_of(node)[1]) % max(len(x.shape), 1)
    return ctx.emit(
        "Cumsum",
        [x, ctx.const(axis, ge.DT_INT32, "axis")],
        {"exclusive": False, "reverse": False},
    )
