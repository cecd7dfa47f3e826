"""Arg-extremes, top-k, sorting and histograms.

GE's ``ArgMaxV2``/``ArgMin``, ``ArgMaxWithValue``/``ArgMinWithValue``, ``TopKV2``, ``Sort`` and
``Histogram``.

GE computes indices as int32 where PyTorch returns int64 (``ArgMaxWithValue``, ``TopKV2``,
``Sort``): a ``Cast`` follows, as in TorchAir. GE's ``Sort`` works along the last axis, so another
axis is moved there first and back after.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from npu_graph_export._converters._base import (
    Context,
    Value,
    args_of,
    aten,
    kwargs_of,
    positive_dim,
    register,
)
from npu_graph_export._converters._spatial import unsqueeze
from npu_graph_export._graph import DType, Shape, Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError

# ArgMaxWithValue / ArgMinWithValue take floating inputs only (GE's definitions).
_WITH_VALUE = {
    "ArgMaxV2": ("ArgMaxWithValue", {ge.DT_FLOAT, ge.DT_FLOAT16, ge.DT_BF16}),
    "ArgMin": ("ArgMinWithValue", {ge.DT_FLOAT, ge.DT_FLOAT16}),
}


def _arg(args: list[Any], kwargs: dict[str, Any], index: int, name: str, default: Any) -> Any:
    if len(args) > index and args[index] is not None:
        return args[index]
    return kwargs.get(name, default)


def _indices(ctx: Context, tensor: Tensor, shape: Shape) -> Tensor:
    """Int32 indices as PyTorch's int64."""
    return ctx.emit(
        "Cast",
        [tensor],
        {"dst_type": DType(ge.DT_INT64, as_int=True)},
        dtype=ge.DT_INT64,
        shape=shape,
        suffix="indices",
    )


def _arg_extreme(op_type: str) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        args, kwargs = list(args_of(node)), kwargs_of(node)
        x = ctx.tensor(args[0])
        dim = _arg(args, kwargs, 1, "dim", None)
        keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
        if dim is None:
            # Over every element: the index into the flattened tensor.
            flat = ctx.emit(
                "Reshape", [x, ctx.ints([-1])], shape=(-1,), dtype=x.dtype, suffix="flat"
            )
            found = ctx.emit(
                op_type,
                [flat, ctx.const(0, ge.DT_INT64, "dimension")],
                {"dtype": DType(ge.DT_INT64)},
                shape=(),
                suffix=op_type if keepdim else None,
            )
            if not keepdim:
                return found
            return ctx.emit("Reshape", [found, ctx.ints([1] * len(x.shape))])
        axis = positive_dim(int(dim), len(x.shape))
        reduced = tuple(d for i, d in enumerate(x.shape) if i != axis)
        found = ctx.emit(
            op_type,
            [x, ctx.const(axis, ge.DT_INT64, "dimension")],
            {"dtype": DType(ge.DT_INT64)},
            shape=reduced,
            suffix=op_type if keepdim else None,
        )
        return unsqueeze(ctx, found, [axis], "keepdim") if keepdim else found

    return convert


register(aten.argmax.default)(_arg_extreme("ArgMaxV2"))
register(aten.argmin.default)(_arg_extreme("ArgMin"))


def _extreme_dim(op_type: str, reduce_type: str) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        args, kwargs = list(args_of(node)), kwargs_of(node)
        x = ctx.tensor(args[0])
        axis = positive_dim(int(_arg(args, kwargs, 1, "dim", 0)), len(x.shape))
        keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
        values_shape = tuple(ctx.out_shape())
        fused, types = _WITH_VALUE[op_type]
        if x.dtype in types:
            indice, values = ctx.builder.add(
                fused,
                ctx.name(),
                [x],
                [(ge.DT_INT32, values_shape), (x.dtype, values_shape)],
                {"dimension": axis, "keep_dims": keepdim},
            )
            return [values, _indices(ctx, indice, values_shape)]
        # Integer inputs: the reduction and the arg-extreme as two ops.
        values = ctx.emit(
            reduce_type, [x, ctx.ints([axis], "axes")], {"keep_dims": keepdim}, suffix="values"
        )
        reduced = tuple(d for i, d in enumerate(x.shape) if i != axis)
        index = ctx.emit(
            op_type,
            [x, ctx.const(axis, ge.DT_INT64, "dimension")],
            {"dtype": DType(ge.DT_INT64)},
            dtype=ge.DT_INT64,
            shape=reduced,
            suffix="indices",
        )
        return [values, unsqueeze(ctx, index, [axis], "keepdim") if keepdim else index]

    return convert


register(aten.max.dim)(_extreme_dim("ArgMaxV2", "ReduceMax"))
register(aten.min.dim)(_extreme_dim("ArgMin", "ReduceMin"))


@register(aten.topk.default)
def _topk(ctx: Context, node: fx.Node) -> Value:
    args, kwargs = list(args_of(node)), kwargs_of(node)
    x = ctx.tensor(args[0])
    k = _arg(args, kwargs, 1, "k", None)
    dim = positive_dim(int(_arg(args, kwargs, 2, "dim", -1)), max(len(x.shape), 1))
    largest = bool(_arg(args, kwargs, 3, "largest", True))
    sorted_ = bool(_arg(args, kwargs, 4, "sorted", True))
    shape = tuple(ctx.out_shape())
    values, indices = ctx.builder.add(
        "TopKV2",
        ctx.name(),
        [x, ctx.tensor(k, ge.DT_INT32)],
        [(x.dtype, shape), (ge.DT_INT32, shape)],
        {"sorted": sorted_, "dim": dim, "largest": largest},
    )
    return [values, _indices(ctx, indices, shape)]


@register(aten.sort.default, aten.sort.stable)
def _sort(ctx: Context, node: fx.Node) -> Value:
    args, kwargs = list(args_of(node)), kwargs_of(node)
    x = ctx.tensor(args[0])
    if node.target is aten.sort.stable:
        stable = bool(kwargs.get("stable") or False)
        dim, descending = kwargs.get("dim", -1), kwargs.get("descending", False)
    else:
        stable = False
        dim = _arg(args, kwargs, 1, "dim", -1)
        descending = _arg(args, kwargs, 2, "descending", False)
    rank = len(x.shape)
    if rank == 0:
        return [ctx.emit("Identity", [x]), ctx.const(0, ge.DT_INT64, "index")]
    axis = positive_dim(int(dim), rank)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = axis != rank - 1
    if moved:
        x = ctx.emit(
            "Transpose",
            [x, ctx.ints(perm, "perm")],
            shape=tuple(x.shape[i] for i in perm),
            suffix="last",
        )
    values, indices = ctx.builder.add(
        "Sort",
        ctx.name("Sort" if moved else None),
        [x],
        [(x.dtype, x.shape), (ge.DT_INT32, x.shape)],
        {"axis": -1, "descending": bool(descending), "stable": stable},
    )
    indices = _indices(ctx, indices, x.shape)
    if not moved:
        return [values, indices]
    back = ctx.ints(perm, "perm_back")  # a swap is its own inverse
    return [
        ctx.emit("Transpose", [values, back], suffix="values"),
        ctx.emit("Transpose", [indices, back], dtype=ge.DT_INT64, suffix="indices_back"),
    ]


@register(aten.histc.default)
def _histc(ctx: Context, node: fx.Node) -> Value:
    args, kwargs = list(args_of(node)), kwargs_of(node)
    x = ctx.tensor(args[0])
    bins = int(_arg(args, kwargs, 1, "bins", 100))
    low = float(_arg(args, kwargs, 2, "min", 0))
    high = float(_arg(args, kwargs, 3, "max", 0))
    if bins < 1:
        raise UnsupportedOpError(f"histc with {bins} bins; give at least one")
    # GE's Histogram is PyTorch's histc (min == max: the range of the values).
    return ctx.emit("Histogram", [x], {"bins": bins, "min": low, "max": high})
