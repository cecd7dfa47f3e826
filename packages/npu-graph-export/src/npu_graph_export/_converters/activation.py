"""Activations and softmax."""

from __future__ import annotations

import math

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._graph import Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge


@register(aten.gelu.default)
def _gelu(ctx: Context, node: fx.Node) -> Value:
    # GeluV2 carries the approximation as an attribute, so exact ("none") and tanh GELU both
    # keep their numerics (plain Gelu is the tanh form only).
    approximate = str(kwargs_of(node).get("approximate", "none"))
    x = ctx.tensor(args_of(node)[0])
    return ctx.emit("GeluV2", [x], {"approximate": approximate})


@register(aten.silu.default)
def _silu(ctx: Context, node: fx.Node) -> Value:
    # SiLU is Swish with scale 1: x * sigmoid(scale * x).
    return ctx.emit("Swish", [ctx.tensor(args_of(node)[0])], {"scale": 1.0})


def zero_masked_rows(ctx: Context, scores: Tensor, probs: Tensor, axis: int) -> Tensor:
    """``probs`` with 0 where every score along ``axis`` is -inf (softmax there is NaN).

    This is ATen's ``_safe_softmax``, which SDPA uses: a query that may attend to nothing (a
    padded row of a causal mask with left padding) gets zeros instead of NaN.
    """
    shape = scores.shape
    row_shape = tuple(1 if i == axis else d for i, d in enumerate(shape))
    row_max = ctx.emit(
        "ReduceMax",
        [scores, ctx.ints([axis], "row_axes")],
        {"keep_dims": True},
        dtype=scores.dtype,
        shape=row_shape,
        suffix="row_max",
    )
    empty = ctx.emit(
        "Equal",
        [row_max, ctx.tensor(-math.inf, scores.dtype)],
        dtype=ge.DT_BOOL,
        shape=row_shape,
        suffix="empty_row",
    )
    zero = ctx.tensor(0.0, probs.dtype)
    return ctx.emit(
        "SelectV2", [empty, zero, probs], dtype=probs.dtype, shape=probs.shape, suffix="safe"
    )


@register(aten.softmax.int, aten._softmax.default, aten._safe_softmax.default)
def _softmax(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    rank = len(x.shape)
    dim = int(args_of(node)[1]) % max(rank, 1)
    if node.target is not aten._safe_softmax.default:
        return ctx.emit("SoftmaxV2", [x], {"axes": [dim]})
    probs = ctx.emit("SoftmaxV2", [x], {"axes": [dim]}, suffix="softmax")
    return zero_masked_rows(ctx, x, probs, dim)


@register(aten.log_softmax.int, aten._log_softmax.default)
def _log_softmax(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    dim = int(args_of(node)[1]) % max(len(x.shape), 1)
    return ctx.emit("LogSoftmaxV2", [x], {"axes": [dim]})
