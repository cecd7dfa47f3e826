"""Normalisation layers: LayerNorm (fused GE op) and RMSNorm (composed)."""

from __future__ import annotations

import numpy as np
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._dtypes import NUMPY_OF_GE
from npu_graph_export._graph import Tensor


def _layer_norm(ctx: Context, node: fx.Node) -> list[Tensor]:
    args = list(args_of(node)) + [None] * (5 - len(args_of(node)))
    x_arg, normalized_shape, weight_arg, bias_arg, eps = args[:5]
    eps = kwargs_of(node).get("eps", 1e-5 if eps is None else eps)
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    norm_shape = [int(d) for d in normalized_shape]
    begin = len(x.shape) - len(norm_shape)
    numpy_dtype = NUMPY_OF_GE.get(dtype, np.dtype(np.float32))
    gamma = (
        ctx.const(np.ones(norm_shape, numpy_dtype), dtype, "gamma")
        if weight_arg is None
        else ctx.tensor(weight_arg, dtype)
    )
    beta = (
        ctx.const(np.zeros(norm_shape, numpy_dtype), dtype, "beta")
        if bias_arg is None
        else ctx.tensor(bias_arg, dtype)
    )
    stats_shape = tuple(x.shape[:begin]) + (1,) * len(norm_shape)
    return ctx.builder.add(
        "LayerNorm",
        ctx.name(),
        [x, gamma, beta],
        [(dtype, x.shape), (dtype, stats_shape), (dtype, stats_shape)],
        {"begin_norm_axis": begin, "begin_params_axis": begin, "epsilon": float(eps)},
    )


@register(aten.layer_norm.default)
def _layer_norm_single(ctx: Context, node: fx.Node) -> Value:
    return _layer_norm(ctx, node)[0]


@register(aten.native_layer_norm.default)
def _native_layer_norm(ctx: Context, node: fx.Node) -> Value:
    # ATen returns (y, mean, rstd); GE returns (y, mean, variance). Only y is used at inference.
    return _layer_norm(ctx, node)


@register(aten.rms_norm.default)
def _rms_norm(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (4 - len(args_of(node)))
    x_arg, normalized_shape, weight_arg, eps = args[:4]
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    axes = list(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    eps_value = float(np.finfo(np.float32).eps) if eps is None else float(eps)
    square = ctx.emit("Mul", [x, x], suffix="square")
    stats_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean = ctx.emit(
        "ReduceMean",
        [square, ctx.ints(axes, "axes")],
        {"keep_dims": True},
        shape=stats_shape,
        suffix="mean",
    )
    shifted = ctx.emit("Add", [mean, ctx.tensor(eps_value, dtype)], shape=stats_shape, suffix="eps")
    scale = ctx.emit("Rsqrt", [shifted], shape=stats_shape, suffix="rsqrt")
    y = ctx.emit("Mul", [x, scale], suffix=None if weight_arg is None else "normed")
    if weight_arg is None:
        return y
    return ctx.emit("Mul", [y, ctx.tensor(weight_arg, dtype)])
