"""numpy kernels of GE's NCHW operators: ``Conv2D``, ``MaxPoolV3``, ``AvgPoolV2``, ``BNInfer``.

Attributes are read the way GE's op definitions declare them (docs/export-convolutions.md):
four-element ``strides``/``ksize``/``dilations`` in ``data_format`` order (``[1, 1, h, w]`` for
NCHW), ``pads`` as ``[top, bottom, left, right]``. Only ``data_format="NCHW"`` is implemented.
Windows are visited one kernel offset at a time, so a kernel holds at most the padded input and
its output, never an im2col matrix ``kernel_h * kernel_w`` times larger.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    attr_bool,
    attr_float,
    attr_int,
    attr_ints,
    attr_str,
    check_size,
    kernel,
)

_SPATIAL = frozenset({"Conv2D", "MaxPoolV3", "AvgPoolV2"})


def _four(op: ge.OpDef, name: str, default: Sequence[int] | None = None) -> list[int]:
    if default is not None and name not in op.attr:
        return list(default)
    values = attr_ints(op, name)
    if len(values) != 4:
        raise KernelError(f"attribute {name!r} must hold 4 integers, got {values}")
    return values


def _nchw(op: ge.OpDef, x: Array) -> None:
    data_format = attr_str(op, "data_format", "NHWC" if op.type == "Conv2D" else "NCHW")
    if data_format != "NCHW":
        raise KernelError(f"data_format {data_format!r} is not supported (NCHW only)")
    if x.ndim != 4:
        raise KernelError(f"{op.type} needs a 4-D input, got shape {list(x.shape)}")


def _hw(values: list[int], name: str, low: int) -> tuple[int, int]:
    if values[0] != 1 or values[1] != 1 or values[2] < low or values[3] < low:
        raise KernelError(f"{name} {values} must be [1, 1, h, w] with h, w >= {low} (NCHW)")
    return values[2], values[3]


def _pads(op: ge.OpDef) -> tuple[int, int, int, int]:
    pads = _four(op, "pads", [0, 0, 0, 0])
    if any(p < 0 for p in pads):
        raise KernelError(f"pads {pads} must not be negative")
    return pads[0], pads[1], pads[2], pads[3]


def pooled_size(size: int, window: int, stride: int, before: int, after: int, ceil: bool) -> int:
    """Output length along one axis, by GE's and PyTorch's formula.

    In ceil mode a last window must still start inside the input or its leading padding, and a
    window larger than the padded input still gives one output (EfficientNet's head pools a
    2 x 2 map with a 320 x 320 window).
    """
    span = size + before + after - window
    # Python's floor division rounds toward -inf, so a negative span counts right in both modes.
    count = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and count > 1 and (count - 1) * stride >= size + before:
        count -= 1
    if count < 1:
        raise KernelError(f"a window of {window} does not fit an input of {size} (padded)")
    return count


def output_shape(op: ge.OpDef, args: Sequence[Array]) -> tuple[int, ...] | None:
    """Output shape of a ``Conv2D``/``MaxPoolV3``/``AvgPoolV2`` from its inputs and attributes.

    ``None`` when the op is not one of them or its attributes are unusable (the kernel says why).
    """
    if op.type not in _SPATIAL or not args or args[0].ndim != 4:
        return None
    if op.type == "Conv2D" and (len(args) < 2 or args[1].ndim != 4):
        return None
    try:
        return _output_shape(op, args)
    except KernelError:
        return None


def _output_shape(op: ge.OpDef, args: Sequence[Array]) -> tuple[int, int, int, int]:
    n, channels, height, width = args[0].shape
    top, bottom, left, right = _pads(op)
    if op.type == "Conv2D":
        sh, sw = _hw(_four(op, "strides"), "strides", 1)
        dh, dw = _hw(_four(op, "dilations", [1, 1, 1, 1]), "dilations", 1)
        out_channels, _, kh, kw = args[1].shape
        rows = pooled_size(height, dh * (kh - 1) + 1, sh, top, bottom, False)
        cols = pooled_size(width, dw * (kw - 1) + 1, sw, left, right, False)
        return (n, out_channels, rows, cols)
    if attr_bool(op, "global_pooling"):
        return (n, channels, 1, 1)
    kh, kw = _hw(_four(op, "ksize"), "ksize", 1)
    sh, sw = _hw(_four(op, "strides"), "strides", 1)
    ceil = attr_bool(op, "ceil_mode")
    rows = pooled_size(height, kh, sh, top, bottom, ceil)
    cols = pooled_size(width, kw, sw, left, right, ceil)
    return (n, channels, rows, cols)


def padded_elements(op: ge.OpDef, x: Array, shape: Sequence[int]) -> int:
    """Elements of the padded input a kernel makes for an output of ``shape`` (see _padded)."""
    if op.type == "Conv2D":
        return _padded_size(x, _pads(op), 0, 0)
    if attr_bool(op, "global_pooling"):
        return int(x.size)
    kh, kw = _hw(_four(op, "ksize"), "ksize", 1)
    sh, sw = _hw(_four(op, "strides"), "strides", 1)
    rows, cols = (shape[2] - 1) * sh + kh, (shape[3] - 1) * sw + kw
    return _padded_size(x, _pads(op), rows, cols)


def _padded_size(x: Array, pads: tuple[int, int, int, int], rows: int, cols: int) -> int:
    top, bottom, left, right = pads
    height = max(top + x.shape[2] + bottom, rows)
    width = max(left + x.shape[3] + right, cols)
    return int(x.shape[0] * x.shape[1] * height * width)


def _padded(x: Array, pads: tuple[int, int, int, int], rows: int, cols: int, value: Any) -> Array:
    """``x`` padded with ``value``: ``pads``, plus what ceil mode's last windows read past."""
    top, bottom, left, right = pads
    height = max(top + x.shape[2] + bottom, rows)
    width = max(left + x.shape[3] + right, cols)
    shape = (x.shape[0], x.shape[1], height, width)
    check_size(math.prod(shape), x.itemsize, f"padded input {list(shape)}")
    out = np.full(shape, value, dtype=x.dtype)
    out[:, :, top : top + x.shape[2], left : left + x.shape[3]] = x
    return out


def _accumulator(*arrays: Array) -> np.dtype[Any]:
    kind = np.result_type(*arrays)
    if kind.kind == "f":
        return np.dtype(np.float64 if kind == np.float64 else np.float32)
    if kind.kind in "iub":
        return np.dtype(np.int64)
    raise KernelError(f"unsupported data type {kind}")


@kernel("Conv2D")
def _conv2d(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, weight = xs[0], xs[1]
    _nchw(op, x)
    if weight.ndim != 4:
        raise KernelError(f"Conv2D filter must be 4-D (OIHW), got shape {list(weight.shape)}")
    shape = _output_shape(op, xs)
    n, channels = x.shape[:2]
    out_channels, group_channels, kh, kw = weight.shape
    groups = attr_int(op, "groups", 1)
    if groups < 1 or group_channels * groups != channels or out_channels % groups:
        raise KernelError(
            f"Conv2D groups={groups} does not fit input channels {channels} and filter "
            f"{list(weight.shape)}"
        )
    sh, sw = _hw(_four(op, "strides"), "strides", 1)
    dh, dw = _hw(_four(op, "dilations", [1, 1, 1, 1]), "dilations", 1)
    rows, cols = shape[2], shape[3]
    acc = _accumulator(x, weight)
    padded = _padded(x.astype(acc, copy=False), _pads(op), 0, 0, 0)
    grouped = padded.reshape(n, groups, group_channels, *padded.shape[2:])
    filters = weight.astype(acc, copy=False).reshape(groups, out_channels // groups, -1, kh, kw)
    out = np.zeros((n, groups, out_channels // groups, rows, cols), dtype=acc)
    for i in range(kh):
        for j in range(kw):
            window = grouped[
                :,
                :,
                :,
                i * dh : i * dh + sh * (rows - 1) + 1 : sh,
                j * dw : j * dw + sw * (cols - 1) + 1 : sw,
            ]
            out += np.einsum("ngchw,goc->ngohw", window, filters[:, :, :, i, j])
    y = out.reshape(n, out_channels, rows, cols)
    if len(xs) > 2:
        bias = xs[2].reshape(-1)
        if bias.size != out_channels:
            raise KernelError(f"Conv2D bias of {bias.size} values for {out_channels} channels")
        y = y + bias.astype(acc).reshape(1, out_channels, 1, 1)
    return [y]


def _pool_window(op: ge.OpDef, x: Array) -> tuple[int, int, int, int, tuple[int, ...]]:
    _nchw(op, x)
    mode = attr_str(op, "padding_mode", "CALCULATED")
    if mode != "CALCULATED":
        raise KernelError(f"padding_mode {mode!r} is not supported (CALCULATED only)")
    shape = _output_shape(op, [x])
    if attr_bool(op, "global_pooling"):
        return x.shape[2], x.shape[3], 1, 1, shape
    kh, kw = _hw(_four(op, "ksize"), "ksize", 1)
    sh, sw = _hw(_four(op, "strides"), "strides", 1)
    return kh, kw, sh, sw, shape


def _windows(
    padded: Array, kh: int, kw: int, sh: int, sw: int, rows: int, cols: int
) -> Iterator[Array]:
    for i in range(kh):
        for j in range(kw):
            yield padded[:, :, i : i + sh * (rows - 1) + 1 : sh, j : j + sw * (cols - 1) + 1 : sw]


@kernel("MaxPoolV3")
def _max_pool(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    kh, kw, sh, sw, shape = _pool_window(op, x)
    rows, cols = shape[2], shape[3]
    pads = (0, 0, 0, 0) if attr_bool(op, "global_pooling") else _pads(op)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded = _padded(x, pads, (rows - 1) * sh + kh, (cols - 1) * sw + kw, lowest)
    out = np.full(shape, lowest, dtype=x.dtype)
    for window in _windows(padded, kh, kw, sh, sw, rows, cols):
        np.maximum(out, window, out=out)
    return [out]


def _divisors(size: int, window: int, stride: int, before: int, after: int, count: int) -> Any:
    """Per output position along one axis: window length over input+padding, and over input."""
    starts = np.arange(count) * stride - before
    ends = np.minimum(starts + window, size + after)
    with_pad = ends - starts
    inside = np.minimum(ends, size) - np.maximum(starts, 0)
    return with_pad, inside


@kernel("AvgPoolV2")
def _avg_pool(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    kh, kw, sh, sw, shape = _pool_window(op, x)
    rows, cols = shape[2], shape[3]
    pads = (0, 0, 0, 0) if attr_bool(op, "global_pooling") else _pads(op)
    acc = _accumulator(x)
    padded = _padded(x.astype(acc, copy=False), pads, (rows - 1) * sh + kh, (cols - 1) * sw + kw, 0)
    total = np.zeros(shape, dtype=acc)
    for window in _windows(padded, kh, kw, sh, sw, rows, cols):
        total += window
    # PyTorch's (and GE's) divisors: a window counts the padding it covers unless "exclusive",
    # never what ceil mode reads past the padding; divisor_override replaces both.
    override = attr_int(op, "divisor_override", 0)
    if override > 0:
        return [total / override]
    top, bottom, left, right = pads
    row_pad, row_in = _divisors(x.shape[2], kh, sh, top, bottom, rows)
    col_pad, col_in = _divisors(x.shape[3], kw, sw, left, right, cols)
    if attr_bool(op, "exclusive", True):
        divisor = np.outer(row_in, col_in)
    else:
        divisor = np.outer(row_pad, col_pad)
    with np.errstate(divide="ignore", invalid="ignore"):
        return [total / np.maximum(divisor, 0).astype(acc)]


def adaptive_windows(size: int, count: int) -> tuple[Array, Array]:
    """PyTorch's adaptive pooling windows along one axis: starts and (exclusive) ends."""
    index = np.arange(count, dtype=np.int64)
    return (index * size) // count, -((-(index + 1) * size) // count)


@kernel("AdaptiveAvgPool2d")
def _adaptive_avg_pool(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    size = attr_ints(op, "output_size")
    if x.ndim < 3 or len(size) != 2 or min(size) < 1:
        raise KernelError(
            f"AdaptiveAvgPool2d of shape {list(x.shape)} to output_size {size}: needs a "
            "(..., H, W) input and two positive sizes"
        )
    acc = _accumulator(x)
    # Sums over any window from a zero-bordered integral image: four lookups per output.
    integral = np.zeros((*x.shape[:-2], x.shape[-2] + 1, x.shape[-1] + 1), np.float64)
    integral[..., 1:, 1:] = x.astype(np.float64).cumsum(-2).cumsum(-1)
    top, bottom = adaptive_windows(x.shape[-2], size[0])
    left, right = adaptive_windows(x.shape[-1], size[1])
    rows, cols = np.ix_(np.arange(size[0]), np.arange(size[1]))
    total = (
        integral[..., bottom[rows], right[cols]]
        - integral[..., top[rows], right[cols]]
        - integral[..., bottom[rows], left[cols]]
        + integral[..., top[rows], left[cols]]
    )
    area = np.outer(bottom - top, right - left)
    return [(total / area).astype(acc)]


@kernel("BNInfer")
def _bn_infer(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if x.ndim < 2:
        raise KernelError(f"BNInfer needs an (N, C, ...) input, got shape {list(x.shape)}")
    channels = x.shape[1]
    params = []
    for name, value in zip(("scale", "offset", "mean", "variance"), xs[1:5], strict=True):
        if value.size != channels:
            raise KernelError(f"BNInfer {name} has {value.size} values for {channels} channels")
        params.append(value.astype(np.float32).reshape(1, channels, *([1] * (x.ndim - 2))))
    scale, offset, mean, variance = params
    eps = np.float32(attr_float(op, "epsilon"))
    return [(x.astype(np.float32) - mean) / np.sqrt(variance + eps) * scale + offset]


@kernel("Unsqueeze")
def _unsqueeze(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = attr_ints(op, "axes") if "axes" in op.attr else []
    rank = x.ndim + len(axes)
    normal = sorted(a % rank if -rank <= a < rank else -1 for a in axes)
    if -1 in normal or len(set(normal)) != len(normal):
        raise KernelError(f"Unsqueeze axes {axes} invalid for an output of rank {rank}")
    return [np.expand_dims(x, tuple(normal))]
