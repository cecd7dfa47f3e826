"""Normalisation: LayerNorm, GroupNorm and vector norms (fused GE ops), RMSNorm (composed)."""

from __future__ import annotations

import numpy as np
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._dtypes import NUMPY_OF_GE
from npu_graph_export._graph import Tensor
from npu_graph_export.errors import UnsupportedOpError


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


@register(aten.linalg_vector_norm.default)
def _vector_norm(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (4 - len(args_of(node)))
    kwargs = kwargs_of(node)
    x_arg, order, dims, keepdim = args[:4]
    order = kwargs.get("ord", 2 if order is None else order)
    dims = kwargs.get("dim", dims)
    keepdim = bool(kwargs.get("keepdim", keepdim or False))
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)  # ATen computes in the result dtype (``dtype=``)
    rank = len(x.shape)
    axes = [] if not dims else [int(d) % max(rank, 1) for d in dims]
    # LpNormV2's p is a float that may be inf or -inf (the largest or smallest magnitude); its
    # epsilon is 0 so the norm is exactly ATen's.
    return ctx.emit(
        "LpNormV2",
        [x],
        {"p": float(order), "axes": axes, "keepdim": keepdim, "epsilon": 0.0},
    )


@register(aten.native_group_norm.default)
def _group_norm(ctx: Context, node: fx.Node) -> Value:
    x_arg, weight_arg, bias_arg, batch, channels, spatial, groups, eps = list(args_of(node))[:8]
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    if not isinstance(channels, int):
        raise UnsupportedOpError(
            "group norm needs a channel count known when exporting; export with static channels"
        )
    numpy_dtype = NUMPY_OF_GE.get(dtype, np.dtype(np.float32))
    gamma = (
        ctx.const(np.ones(channels, numpy_dtype), dtype, "gamma")
        if weight_arg is None
        else ctx.tensor(weight_arg, dtype)
    )
    beta = (
        ctx.const(np.zeros(channels, numpy_dtype), dtype, "beta")
        if bias_arg is None
        else ctx.tensor(bias_arg, dtype)
    )
    source, shape = x, x.shape
    lifted = len(shape) != 4
    if lifted:
        # GE's GroupNorm reads NCHW: any (N, C, *) input becomes (N, C, H*W, 1) and back.
        x = ctx.emit(
            "Reshape",
            [x, ctx.ints([batch, channels, spatial, 1], "nchw")],
            shape=(shape[0], channels, -1 if not isinstance(spatial, int) else spatial, 1),
            suffix="nchw",
        )
    stats = (x.shape[0], int(groups))
    y, mean, variance = ctx.builder.add(
        "GroupNorm",
        ctx.name("GroupNorm" if lifted else None),
        [x, gamma, beta],
        [(dtype, x.shape), (dtype, stats), (dtype, stats)],
        {
            "num_groups": int(groups),
            "data_format": "NCHW",
            "eps": float(eps),
            "is_training": True,
        },
    )
    # TorchAir marks every input and output of GroupNorm NCHW.
    ctx.layout(y, "NCHW", inputs=range(3), outputs=range(3))
    if lifted:
        sizes = [ctx.dim(source, i) for i in range(len(shape))]
        y = ctx.emit("Reshape", [y, ctx.ints(sizes)], shape=shape)
    # ATen's third output is 1 / sqrt(variance + eps); pruned unless something reads it.
    shifted = ctx.emit(
        "Add", [variance, ctx.tensor(float(eps), dtype)], shape=stats, suffix="variance_eps"
    )
    rstd = ctx.emit("Rsqrt", [shifted], shape=stats, suffix="rstd")
    return [y, mean, rstd]
