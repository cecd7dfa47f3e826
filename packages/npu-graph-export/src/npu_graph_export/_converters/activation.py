"""Activations and softmax."""

from __future__ import annotations

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register


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


@register(aten.softmax.int, aten._softmax.default, aten._safe_softmax.default)
def _softmax(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    rank = len(x.shape)
    dim = int(args_of(node)[1]) % max(rank, 1)
    return ctx.emit("SoftmaxV2", [x], {"axes": [dim]})


@register(aten.log_softmax.int, aten._log_softmax.default)
def _log_softmax(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    dim = int(args_of(node)[1]) % max(len(x.shape), 1)
    return ctx.emit("LogSoftmaxV2", [x], {"axes": [dim]})
