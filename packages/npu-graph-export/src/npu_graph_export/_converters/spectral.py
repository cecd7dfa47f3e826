"""Fourier transforms and complex tensors.

GE's ``FFT``/``FFT2D``/``IFFT``/``IFFT2D``, ``Real``, ``Imag`` and ``Complex``.

GE's transforms work on the innermost dimension (``FFT``) or the two innermost (``FFT2D``), as
TensorFlow's do: the dimensions ATen names are moved last, transformed, and moved back (as
TorchAir's ``_fft_c2c`` converter does). ATen's forward transform is unnormalised and its inverse
divides by the signal size only when asked (``normalization``: 0 none, 1 by the square root of
the size, 2 by the size); GE's inverse always divides by the size, so the exporter scales to
ATen's convention. A real input (``_fft_r2c``) is cast to complex first and, for a one-sided
transform, the last transformed dimension is cut to ``n // 2 + 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from torch import fx

from npu_graph_export._converters._base import (
    INT32_MAX,
    Context,
    Value,
    args_of,
    aten,
    register,
)
from npu_graph_export._graph import DType, Shape, Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError

_REAL_OF: dict[int, int] = {ge.DT_COMPLEX64: ge.DT_FLOAT, ge.DT_COMPLEX128: ge.DT_DOUBLE}
_COMPLEX_OF: dict[int, int] = {real: complex_ for complex_, real in _REAL_OF.items()}


def _dims(dims: Sequence[object], rank: int) -> list[int]:
    if not all(isinstance(d, int) for d in dims):
        raise UnsupportedOpError("a Fourier transform over dimensions known only at run time")
    return sorted({int(d) % rank for d in dims})  # type: ignore[call-overload]


def _transform(ctx: Context, x: Tensor, axes: list[int], forward: bool, step: int) -> Tensor:
    """``x`` transformed along one or two ``axes`` (moved innermost and back)."""
    rank = len(x.shape)
    rest = [i for i in range(rank) if i not in axes]
    perm = rest + axes
    moved = perm != list(range(rank))
    if moved:
        shape = tuple(x.shape[i] for i in perm)
        x = ctx.emit(
            "Transpose", [x, ctx.ints(perm, f"perm{step}")], shape=shape, suffix=f"in{step}"
        )
    op_type = ("FFT" if forward else "IFFT") + ("2D" if len(axes) == 2 else "")
    y = ctx.emit(op_type, [x], dtype=x.dtype, shape=x.shape, suffix=f"{op_type}{step}")
    if not moved:
        return y
    inverse = [perm.index(i) for i in range(rank)]
    shape = tuple(y.shape[i] for i in inverse)
    return ctx.emit(
        "Transpose", [y, ctx.ints(inverse, f"unperm{step}")], shape=shape, suffix=f"out{step}"
    )


def _c2c(ctx: Context, x: Tensor, dims: list[int], normalization: int, forward: bool) -> Tensor:
    if any(x.shape[d] < 0 for d in dims):
        raise UnsupportedOpError(
            "a Fourier transform over a dimension known only at run time; export with static "
            "sizes along the transformed dimensions"
        )
    size = math.prod(x.shape[d] for d in dims)
    # Two dimensions at a time (FFT2D), then one (FFT): a transform over several separates.
    y, step = x, 0
    remaining = list(dims)
    while remaining:
        axes, remaining = remaining[-2:], remaining[:-2]
        y = _transform(ctx, y, axes, forward, step)
        step += 1
    # ATen's scale relative to GE's result: GE's inverse transforms divide by the size.
    scale = {0: 1.0, 1: 1.0 / math.sqrt(size), 2: 1.0 / size}.get(normalization)
    if scale is None:
        raise UnsupportedOpError(f"Fourier normalization mode {normalization} is not ATen's")
    if not forward:
        scale *= size
    if scale == 1.0:
        return y
    factor = ctx.const(np.asarray(scale, np.float32), ge.DT_FLOAT, "scale")
    factor = ctx.emit(
        "Cast",
        [factor],
        {"dst_type": DType(y.dtype, as_int=True)},
        dtype=y.dtype,
        shape=(),
        suffix="scale_complex",
    )
    return ctx.emit("Mul", [y, factor], dtype=y.dtype, shape=y.shape, suffix="normalized")


@register(aten._fft_c2c.default)
def _fft_c2c(ctx: Context, node: fx.Node) -> Value:
    x_arg, dims, normalization, forward = list(args_of(node))[:4]
    x = ctx.tensor(x_arg)
    y = _c2c(ctx, x, _dims(dims, len(x.shape)), int(normalization), bool(forward))
    return ctx.emit("Identity", [y])


@register(aten._fft_r2c.default)
def _fft_r2c(ctx: Context, node: fx.Node) -> Value:
    x_arg, dims, normalization, onesided = list(args_of(node))[:4]
    dtype = ctx.out_dtype()
    real = ctx.tensor(x_arg, _REAL_OF.get(dtype, ge.DT_FLOAT))
    x = ctx.emit(
        "Cast",
        [real],
        {"dst_type": DType(dtype, as_int=True)},
        dtype=dtype,
        shape=real.shape,
        suffix="complex",
    )
    axes = _dims(dims, len(x.shape))
    y = _c2c(ctx, x, axes, int(normalization), True)
    if not onesided:
        return ctx.emit("Identity", [y])
    last = axes[-1]
    kept = x.shape[last] // 2 + 1
    return ctx.emit(
        "StridedSliceV2",
        [
            y,
            ctx.ints([0], "begin"),
            ctx.ints([min(kept, INT32_MAX)], "end"),
            ctx.ints([last], "axes"),
            ctx.ints([1], "strides"),
        ],
        {
            "begin_mask": 0,
            "end_mask": 0,
            "ellipsis_mask": 0,
            "new_axis_mask": 0,
            "shrink_axis_mask": 0,
        },
    )


@register(aten.view_as_real.default)
def _view_as_real(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    real_type = _REAL_OF.get(x.dtype)
    if real_type is None:
        raise UnsupportedOpError(f"view_as_real of a {ctx.meta(args_of(node)[0]).dtype} tensor")
    parts = [
        ctx.emit(
            op_type, [x], {"Tout": DType(real_type)}, dtype=real_type, shape=x.shape, suffix=op_type
        )
        for op_type in ("Real", "Imag")
    ]
    return ctx.emit("Pack", parts, {"axis": -1, "N": 2})


@register(aten.view_as_complex.default)
def _view_as_complex(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    dtype = ctx.out_dtype()
    if x.dtype not in _COMPLEX_OF or not x.shape or x.shape[-1] != 2:
        raise UnsupportedOpError("view_as_complex of a tensor whose last dimension is not 2")
    shape: Shape = x.shape[:-1]
    axis = ctx.const(len(x.shape) - 1, ge.DT_INT64, "axis")
    real, imag = (
        ctx.emit(
            "GatherV2",
            [x, ctx.const(i, ge.DT_INT64, name), axis],
            {"batch_dims": 0},
            dtype=x.dtype,
            shape=shape,
            suffix=name,
        )
        for i, name in enumerate(("real", "imag"))
    )
    return ctx.emit("Complex", [real, imag], {"Tout": DType(dtype)})
