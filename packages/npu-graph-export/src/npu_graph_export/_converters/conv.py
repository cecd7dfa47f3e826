"""Convolutions: ``aten.convolution`` (1-d and 2-d) as GE ``Conv2D`` in NCHW.

A 1-d convolution is a 2-d one over a height of 1, as TorchAir's converter writes it: input
and filter get a size-1 dimension at axis 2 (``Unsqueeze``), stride, padding and dilation get
``1``, ``0`` and ``1`` for that height, and the result loses the dimension again (``Squeeze``).
"""

from __future__ import annotations

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, register
from npu_graph_export._converters._spatial import lifted_shape, squeeze, static_ints, unsqueeze
from npu_graph_export._graph import Shape, Tensor
from npu_graph_export.errors import UnsupportedOpError


def conv2d(
    ctx: Context,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    *,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    shape: Shape,
    suffix: str | None = None,
) -> Tensor:
    """A GE ``Conv2D`` on NCHW ``x`` with an OIHW filter; ``padding`` is ``[h, w]``."""
    y = ctx.emit(
        "Conv2D",
        [x, weight, bias],
        {
            "strides": [1, 1, *stride],
            "pads": [padding[0], padding[0], padding[1], padding[1]],
            "dilations": [1, 1, *dilation],
            "groups": groups,
            "data_format": "NCHW",
            "offset_x": 0,
        },
        shape=shape,
        suffix=suffix,
    )
    # x, filter and y are NCHW; GE's definition lists the bias as ND.
    ctx.layout(y, "NCHW", inputs=(0, 1))
    return y


@register(aten.convolution.default)
def _convolution(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node))
    x_arg, weight_arg, bias_arg, stride, padding, dilation, transposed, _, groups = args[:9]
    if transposed:
        raise UnsupportedOpError(
            "transposed convolution (ConvTranspose) has no GE converter here; only 1-d and 2-d "
            "forward convolutions export"
        )
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    weight = ctx.tensor(weight_arg, dtype)
    bias = None if bias_arg is None else ctx.tensor(bias_arg, dtype)
    if not isinstance(groups, int) or groups < 1:
        raise UnsupportedOpError(f"convolution groups must be a fixed integer, got {groups!r}")
    rank = len(x.shape)
    if rank not in (3, 4):
        raise UnsupportedOpError(
            f"a convolution over {rank - 2} spatial dimensions has no GE converter here; "
            "1-d (N, C, L) and 2-d (N, C, H, W) inputs export"
        )
    spatial = rank - 2
    stride = static_ints(stride, "convolution stride", spatial)
    padding = static_ints(padding, "convolution padding", spatial)
    dilation = static_ints(dilation, "convolution dilation", spatial)
    if rank == 4:
        return conv2d(
            ctx,
            x,
            weight,
            bias,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            shape=ctx.out_shape(),
        )
    lifted = conv2d(
        ctx,
        unsqueeze(ctx, x, [2], "x/Unsqueeze"),
        unsqueeze(ctx, weight, [2], "filter/Unsqueeze"),
        bias,
        stride=[1, *stride],
        padding=[0, *padding],
        dilation=[1, *dilation],
        groups=groups,
        shape=lifted_shape(ctx.out_shape(), [2]),
        suffix="Conv2D",
    )
    return squeeze(ctx, lifted, [2], ctx.out_shape())
