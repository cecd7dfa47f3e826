"""Pooling: GE ``MaxPoolV3``, ``AvgPoolV2`` (NCHW) and ``AdaptiveAvgPool2d``.

``max_pool2d_with_indices`` exports its values only: ``MaxPoolV3`` computes no indices, and an
inference graph reads none (TorchAir's ``MaxPoolWithArgmaxV1`` returns an NPU-specific mask
instead of PyTorch's indices, which its converter replaces with the values anyway).
"""

from __future__ import annotations

from typing import Any

from torch import fx

from npu_graph_export._converters._base import (
    Context,
    Unavailable,
    Value,
    args_of,
    aten,
    kwargs_of,
    register,
)
from npu_graph_export._converters._spatial import lifted_shape, squeeze, static_ints, unsqueeze
from npu_graph_export._graph import AttrValue, Tensor
from npu_graph_export.errors import UnsupportedOpError


def _window(
    kernel_size: Any, stride: Any, padding: Any, what: str
) -> tuple[list[int], list[int], list[int]]:
    kernel = static_ints(kernel_size, f"{what} kernel_size", 2)
    strides = static_ints(stride, f"{what} stride", 2, default=kernel)  # ATen: [] = kernel
    pads = static_ints(padding, f"{what} padding", 2)
    return kernel, strides, pads


def _pool(ctx: Context, op_type: str, x: Tensor, attrs: dict[str, AttrValue]) -> Tensor:
    """Run a 4-D NCHW pooling op on ``x``; a 3-D (C, H, W) input gets a batch of 1."""
    rank = len(x.shape)
    if rank not in (3, 4):
        raise UnsupportedOpError(
            f"2-d pooling of a {rank}-d tensor; pass (N, C, H, W) or (C, H, W) inputs"
        )
    if rank == 3:
        x = unsqueeze(ctx, x, [0], "x/Unsqueeze")
    shape = ctx.out_shape() if rank == 4 else lifted_shape(ctx.out_shape(), [0])
    y = ctx.emit(op_type, [x], attrs, shape=shape, suffix=None if rank == 4 else op_type)
    ctx.layout(y, "NCHW", inputs=(0,))
    return y if rank == 4 else squeeze(ctx, y, [0], ctx.out_shape())


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (6 - len(args_of(node)))
    x_arg, kernel_size, stride, padding, dilation, ceil_mode = args[:6]
    kwargs = kwargs_of(node)
    kernel, strides, pads = _window(
        kernel_size,
        stride or kwargs.get("stride"),
        padding or kwargs.get("padding", 0),
        "max_pool2d",
    )
    dilations = static_ints(dilation or kwargs.get("dilation", 1), "max_pool2d dilation", 2)
    if dilations != [1, 1]:
        raise UnsupportedOpError(
            f"max pooling with dilation {dilations} has no GE converter here (MaxPoolV3 takes "
            "none); use dilation 1"
        )
    ceil = bool(ceil_mode if ceil_mode is not None else kwargs.get("ceil_mode", False))
    y = _pool(
        ctx,
        "MaxPoolV3",
        ctx.tensor(x_arg, ctx.out_dtype()),
        {
            "ksize": [1, 1, *kernel],
            "strides": [1, 1, *strides],
            "padding_mode": "CALCULATED",
            "pads": [pads[0], pads[0], pads[1], pads[1]],
            "data_format": "NCHW",
            "global_pooling": False,
            "ceil_mode": ceil,
        },
    )
    return [
        y,
        Unavailable(
            "the indices of max pooling (return_indices=True) are not exported: GE's MaxPoolV3 "
            "computes the values only; use the pooled values"
        ),
    ]


@register(aten.avg_pool2d.default)
def _avg_pool2d(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (7 - len(args_of(node)))
    x_arg, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor = args[:7]
    kwargs = kwargs_of(node)
    kernel, strides, pads = _window(
        kernel_size,
        stride or kwargs.get("stride"),
        padding or kwargs.get("padding", 0),
        "avg_pool2d",
    )
    ceil = bool(ceil_mode if ceil_mode is not None else kwargs.get("ceil_mode", False))
    include_pad = count_include_pad if count_include_pad is not None else True
    include_pad = bool(kwargs.get("count_include_pad", include_pad))
    divisor = divisor if divisor is not None else kwargs.get("divisor_override")
    return _pool(
        ctx,
        "AvgPoolV2",
        ctx.tensor(x_arg, ctx.out_dtype()),
        {
            "ksize": [1, 1, *kernel],
            "strides": [1, 1, *strides],
            "padding_mode": "CALCULATED",
            "pads": [pads[0], pads[0], pads[1], pads[1]],
            "data_format": "NCHW",
            "global_pooling": False,
            "ceil_mode": ceil,
            # GE's "exclusive": padding is left out of each window's divisor.
            "exclusive": not include_pad,
            "divisor_override": int(divisor or 0),
        },
    )


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(ctx: Context, node: fx.Node) -> Value:
    x_arg, output_size = args_of(node)[:2]
    size = static_ints(output_size, "adaptive_avg_pool2d output_size", 2)
    # As TorchAir: GE's own AdaptiveAvgPool2d (PyTorch's windows), left in the default layout.
    return ctx.emit(
        "AdaptiveAvgPool2d", [ctx.tensor(x_arg, ctx.out_dtype())], {"output_size": size}
    )
