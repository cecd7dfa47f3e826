"""Batch norm: at inference as GE ``BNInfer``; by the input's own statistics, composed.

At inference (running statistics) batch norm is ``BNInfer``, NCHW, as TorchAir writes it; by
the input's own statistics (no running statistics) it is composed of reductions.

``BNInfer`` takes a 4-D ``x`` and float32 ``scale``, ``offset``, ``mean`` and ``variance`` of
size C; a 2-d or 3-d input (``BatchNorm1d``) gets trailing size-1 dimensions first. Training
mode traces to other ATen ops (statistics updates), which have no converter: ``dynamo_export``
then says to call ``model.eval()``.
"""

from __future__ import annotations

import numpy as np
from torch import fx

from npu_graph_export._converters._base import (
    Context,
    Unavailable,
    Value,
    args_of,
    aten,
    register,
)
from npu_graph_export._converters._spatial import lifted_shape, squeeze, unsqueeze
from npu_graph_export._graph import Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError


def _parameter(ctx: Context, arg: object, channels: int, fill: float, name: str) -> Tensor:
    if arg is not None:
        return ctx.tensor(arg, ge.DT_FLOAT)
    if channels < 0:
        raise UnsupportedOpError(
            "batch norm without affine parameters needs a channel count known when exporting"
        )
    return ctx.const(np.full(channels, fill, np.float32), ge.DT_FLOAT, name)


@register(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_inference(ctx: Context, node: fx.Node) -> Value:
    x_arg, weight, bias, running_mean, running_var, _momentum, eps = list(args_of(node))[:7]
    x = ctx.tensor(x_arg, ctx.out_dtype())
    rank = len(x.shape)
    if rank not in (2, 3, 4):
        raise UnsupportedOpError(
            f"batch norm of a {rank}-d input has no GE converter here; 2-d to 4-d inputs "
            "(BatchNorm1d, BatchNorm2d) export"
        )
    channels = x.shape[1]
    mean = ctx.tensor(running_mean, ge.DT_FLOAT)
    variance = ctx.tensor(running_var, ge.DT_FLOAT)
    scale = _parameter(ctx, weight, channels, 1.0, "scale")
    offset = _parameter(ctx, bias, channels, 0.0, "offset")
    added = list(range(rank, 4))
    if added:
        x = unsqueeze(ctx, x, added, "x/Unsqueeze")
    y = ctx.emit(
        "BNInfer",
        [x, scale, offset, mean, variance],
        {"epsilon": float(eps)},
        shape=lifted_shape(ctx.out_shape(), added),
        suffix="BNInfer" if added else None,
    )
    # TorchAir marks all five inputs and the output NCHW.
    ctx.layout(y, "NCHW", inputs=range(5))
    if added:
        y = squeeze(ctx, y, added, ctx.out_shape())
    unused = Unavailable(
        "batch norm's saved statistics are training outputs and are not exported; call "
        "model.eval() and use the normalized values"
    )
    return [y, unused, unused]


@register(aten._native_batch_norm_legit.no_stats)
def _batch_norm_batch_statistics(ctx: Context, node: fx.Node) -> Value:
    # Normalising by the statistics of the input itself, without running statistics (weight
    # standardisation: F.batch_norm(w, None, None, training=True)): the batch's mean and
    # biased variance per channel, composed of reductions as RMSNorm is. No fused GE operator
    # computes it without also updating running statistics.
    x_arg, weight, bias, _training, _momentum, eps = list(args_of(node))[:6]
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    rank = len(x.shape)
    if rank < 2:
        raise UnsupportedOpError(
            f"batch norm of a {rank}-d input: give an (N, C, ...) input with a channel dimension"
        )
    axes = [0, *range(2, rank)]
    stats = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean = ctx.emit(
        "ReduceMean", [x, ctx.ints(axes, "axes")], {"keep_dims": True}, shape=stats, suffix="mean"
    )
    centred = ctx.emit("Sub", [x, mean], suffix="centred")
    square = ctx.emit("Mul", [centred, centred], suffix="square")
    variance = ctx.emit(
        "ReduceMean",
        [square, ctx.ints(axes, "variance_axes")],
        {"keep_dims": True},
        shape=stats,
        suffix="variance",
    )
    shifted = ctx.emit("Add", [variance, ctx.tensor(float(eps), dtype)], shape=stats, suffix="eps")
    rstd = ctx.emit("Rsqrt", [shifted], shape=stats, suffix="rstd")
    y = ctx.emit("Mul", [centred, rstd], suffix="normed")
    channel = tuple(x.shape[1] if i == 1 else 1 for i in range(rank))
    for arg, op_type, name in ((weight, "Mul", "scaled"), (bias, "Add", "shifted")):
        if arg is not None:
            param = ctx.tensor(arg, dtype)
            lifted = ctx.emit(
                "Reshape",
                [param, ctx.ints([ctx.dim(x, 1) if i == 1 else 1 for i in range(rank)])],
                shape=channel,
                suffix=f"{name}/param",
            )
            y = ctx.emit(op_type, [y, lifted], suffix=name)
    # ATen's other outputs: the mean and 1 / sqrt(variance + eps) per channel.
    flat = (x.shape[1],)
    return [
        y,
        ctx.emit("Reshape", [mean, ctx.ints([-1], "mean_shape")], shape=flat, suffix="save_mean"),
        ctx.emit("Reshape", [rstd, ctx.ints([-1], "rstd_shape")], shape=flat, suffix="save_rstd"),
    ]
