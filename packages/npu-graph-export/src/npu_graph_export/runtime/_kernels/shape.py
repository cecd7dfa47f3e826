"""Kernels that make or rearrange shapes.

Reshape, transpose, concat, split, slice, fill, range, pad, tile, strided views, reverse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    attr_bool,
    attr_int,
    attr_ints,
    attr_str,
    attr_type,
    check_size,
    checked_shape,
    kernel,
    normalize_axis,
    numpy_dtype,
)


@kernel("Shape")
def _shape(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    # GE's default for Shape.dtype is DT_INT32.
    dtype = numpy_dtype(attr_type(op, "dtype", ge.DT_INT32))
    return [np.asarray(xs[0].shape, dtype=dtype)]


@kernel("Squeeze")
def _squeeze(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = attr_ints(op, "axis") if "axis" in op.attr else []
    if not axes:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(normalize_axis(a, x.ndim) for a in axes))]


@kernel("Reshape")
def _reshape(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    shape = [int(d) for d in np.asarray(xs[1]).reshape(-1)]
    if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
        raise KernelError(f"invalid reshape target {shape}")
    return [np.reshape(xs[0], shape)]


@kernel("Transpose")
def _transpose(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    perm = [int(p) for p in np.asarray(xs[1]).reshape(-1)]
    return [np.transpose(xs[0], perm)]


@kernel("ExpandDims")
def _expand_dims(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.expand_dims(xs[0], normalize_axis(xs[1], xs[0].ndim + 1))]


@kernel("BroadcastTo")
def _broadcast_to(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.broadcast_to(xs[0], checked_shape(xs[1]))]


@kernel("ConcatV2")
def _concat(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    parts = list(xs[:-1])
    if not parts:
        raise KernelError("ConcatV2 needs at least one input")
    return [np.concatenate(parts, axis=normalize_axis(xs[-1], parts[0].ndim))]


@kernel("Pack")
def _pack(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    if not xs:
        raise KernelError("Pack needs at least one input")
    return [np.stack(list(xs), axis=normalize_axis(attr_int(op, "axis", 0), xs[0].ndim + 1))]


@kernel("SplitV")
def _split(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = normalize_axis(xs[2], x.ndim)
    sizes = [int(s) for s in np.asarray(xs[1]).reshape(-1)]
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise KernelError(f"split sizes {sizes} do not add up to dimension {x.shape[axis]}")
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@kernel("StridedSliceV2")
def _strided_slice(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    for mask in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if attr_int(op, mask, 0):
            raise KernelError(f"{mask} is not supported by the reference runtime")
    begin = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    end = [int(v) for v in np.asarray(xs[2]).reshape(-1)]
    axes = (
        [int(v) for v in np.asarray(xs[3]).reshape(-1)] if len(xs) > 3 else list(range(len(begin)))
    )
    strides = [int(v) for v in np.asarray(xs[4]).reshape(-1)] if len(xs) > 4 else [1] * len(begin)
    if not len(begin) == len(end) == len(axes) == len(strides):
        raise KernelError("begin, end, axes and strides must have the same length")
    index: list[slice] = [slice(None)] * x.ndim
    for b, e, a, s in zip(begin, end, axes, strides, strict=True):
        if s == 0:
            raise KernelError("slice stride 0")
        index[normalize_axis(a, x.ndim)] = slice(b, e, s)
    return [x[tuple(index)]]


@kernel("Fill")
def _fill(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    value = np.asarray(xs[1])
    shape = checked_shape(xs[0], value.dtype.itemsize)
    return [np.full(shape, value.reshape(-1)[0] if value.size else 0, value.dtype)]


@kernel("Range")
def _range(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in xs[:3])
    if delta == 0 or not np.isfinite([start, limit, delta]).all():
        raise KernelError("Range needs finite bounds and a non-zero delta")
    check_size(int(abs((limit - start) / delta)) + 1, np.asarray(xs[0]).dtype.itemsize, "Range")
    return [np.arange(start, limit, delta, dtype=np.asarray(xs[0]).dtype)]


_PAD_MODES = ("constant", "reflect", "edge")  # GE's names are numpy's


@kernel("PadV3")
def _pad(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    flat = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    if len(flat) != 2 * x.ndim:
        raise KernelError(f"PadV3 paddings {flat} must hold 2 values per dimension of {x.ndim}")
    if attr_bool(op, "paddings_contiguous", True):
        pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(x.ndim)]
    else:  # all begins, then all ends
        pairs = [(flat[i], flat[x.ndim + i]) for i in range(x.ndim)]
    if any(p < 0 for pair in pairs for p in pair):
        raise KernelError(f"PadV3 paddings {flat} must not be negative")
    mode = attr_str(op, "mode", "constant")
    if mode not in _PAD_MODES:
        raise KernelError(f"PadV3 mode {mode!r} is not supported ({', '.join(_PAD_MODES)})")
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pairs, strict=True))
    check_size(math.prod(shape), x.itemsize, f"padded shape {list(shape)}")
    if mode == "reflect":
        return [np.pad(x, pairs, mode="reflect")]
    if mode == "edge":
        return [np.pad(x, pairs, mode="edge")]
    value = np.asarray(xs[2]).reshape(-1) if len(xs) > 2 else np.zeros(1, x.dtype)
    fill = value[0] if value.size else np.zeros((), x.dtype)
    return [np.pad(x, pairs, mode="constant", constant_values=fill)]


@kernel("Tile")
def _tile(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    multiples = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    if len(multiples) != x.ndim or any(m < 0 for m in multiples):
        raise KernelError(
            f"Tile multiples {multiples} must be one non-negative count per dimension of {x.ndim}"
        )
    return [np.tile(x, multiples)]


@kernel("AsStrided")
def _as_strided(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    # Element strides into the input's row-major values (GE tensors are dense).
    flat = np.ascontiguousarray(xs[0]).reshape(-1)
    size = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    stride = [int(v) for v in np.asarray(xs[2]).reshape(-1)]
    offset = int(np.asarray(xs[3]).reshape(-1)[0]) if xs[3].size else 0
    if len(size) != len(stride) or any(d < 0 for d in size) or any(s < 0 for s in stride):
        raise KernelError(f"AsStrided size {size} and stride {stride} do not fit together")
    check_size(math.prod(size), flat.itemsize, f"AsStrided size {size}")
    if math.prod(size) == 0:
        return [np.zeros(size, flat.dtype)]
    last = offset + sum((d - 1) * s for d, s in zip(size, stride, strict=True))
    if offset < 0 or last >= flat.size:
        raise KernelError(
            f"AsStrided reads element {last} (offset {offset}) of an input of {flat.size}"
        )
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=[s * flat.itemsize for s in stride], writeable=False
    )
    return [np.array(view, copy=True)]


@kernel("ReverseV2")
def _reverse(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(normalize_axis(a, x.ndim) for a in np.asarray(xs[1]).reshape(-1))
    return [np.flip(x, axes) if axes else x]
