"""Kernels that read or write by index: gathers, ``IndexByTensor``, scatters, ``Assign``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    KernelValueError,
    attr_bool,
    attr_int,
    attr_ints,
    attr_str,
    kernel,
    normalize_axis,
)


@kernel("GatherV2")
def _gather(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = normalize_axis(xs[2], x.ndim) if x.ndim else 0
    indices = xs[1].astype(np.int64)
    size = x.shape[axis] if x.ndim else 1
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise KernelValueError(
            f"gather index out of range for dimension of size {size} (indices span "
            f"{int(indices.min())}..{int(indices.max())})"
        )
    return [np.take(x, indices, axis=axis)]


@kernel("Gather")
def _gather_axis0(op: ge.OpDef, xs: Sequence[Array], comm: Collectives) -> list[Array]:
    axis = np.zeros((), np.int64)
    return _gather(op, [xs[0], xs[1], axis], comm)


@kernel("GatherElements")
def _gather_elements(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, index = xs[0], xs[1].astype(np.int64)
    axis = normalize_axis(attr_int(op, "dim", 0), x.ndim)
    if index.ndim != x.ndim:
        raise KernelError("GatherElements index must have the rank of x")
    size = x.shape[axis]
    if index.size and (index.min() < -size or index.max() >= size):
        raise KernelValueError(f"gather index out of range for dimension of size {size}")
    return [np.take_along_axis(x, np.where(index < 0, index + size, index), axis=axis)]


@kernel("IndexByTensor")
def _index_by_tensor(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, indices = xs[0], [i.astype(np.int64) for i in xs[1:]]
    mask = attr_ints(op, "indices_mask") if "indices_mask" in op.attr else [1] * len(indices)
    if sum(1 for m in mask if m) != len(indices) or len(mask) > x.ndim:
        raise KernelError(f"indices_mask {mask} does not match {len(indices)} index tensors")
    key: list[Any] = []
    feed = iter(indices)
    for axis, used in enumerate(mask):
        if not used:
            key.append(slice(None))
            continue
        index = next(feed)
        size = x.shape[axis]
        if index.size and (index.min() < -size or index.max() >= size):
            raise KernelValueError(f"index out of range for dimension of size {size}")
        key.append(index)
    # numpy's advanced indexing places the indexed dimensions as ATen's index does.
    return [x[tuple(key)]]


@kernel("TensorScatterUpdate", "TensorScatterAdd")
def _tensor_scatter(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, indices, updates = xs[0], xs[1].astype(np.int64), xs[2]
    if indices.ndim < 1 or indices.shape[-1] > x.ndim:
        raise KernelError(f"{op.type} indices of shape {list(indices.shape)}")
    depth = indices.shape[-1]
    sizes = np.asarray(x.shape[:depth], np.int64)
    flat = indices.reshape(-1, depth)
    if flat.size and ((flat < 0).any() or (flat >= sizes).any()):
        raise KernelValueError(f"scatter index out of range for dimensions {list(sizes)}")
    expected = (flat.shape[0], *x.shape[depth:])
    if updates.size != int(np.prod(expected)):
        raise KernelError(
            f"{op.type} of {list(updates.shape)} updates at {flat.shape[0]} positions of "
            f"{list(x.shape)}"
        )
    y = np.array(x, copy=True)
    rows = updates.reshape(expected).astype(x.dtype, copy=False)
    if op.type == "TensorScatterAdd":
        # Repeated positions add up (np.add.at does not buffer them).
        np.add.at(y, tuple(flat.T), rows)
        return [y]
    for position, row in zip(flat, rows, strict=True):
        y[tuple(position)] = row
    return [y]


@kernel("Assign")
def _assign(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    ref, value = xs[0], xs[1]
    if ref.shape != value.shape and attr_bool(op, "validate_shape", True):
        raise KernelError(f"Assign of shape {list(value.shape)} into {list(ref.shape)}")
    # The ref is the caller's array (RefData): updated in place, as on the device.
    np.copyto(ref, value.astype(ref.dtype, copy=False))
    return [ref]


@kernel("ScatterElements")
def _scatter_elements(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    data, indices, updates = xs[0], xs[1].astype(np.int64), xs[2]
    reduction = attr_str(op, "reduction", "none")
    if reduction not in ("none", "add"):
        raise KernelError(f"ScatterElements reduction {reduction!r} is not supported (none, add)")
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise KernelError(
            f"ScatterElements of {list(updates.shape)} updates at indices "
            f"{list(indices.shape)} into {list(data.shape)}"
        )
    axis = normalize_axis(attr_int(op, "axis", 0), data.ndim) if data.ndim else 0
    size = data.shape[axis] if data.ndim else 1
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise KernelValueError(f"scatter index out of range for a dimension of size {size}")
    # Along the other dimensions the indices cover a corner of the data (as in PyTorch).
    corner = [i > d for i, d in zip(indices.shape, data.shape, strict=True)]
    if any(past for k, past in enumerate(corner) if k != axis):
        raise KernelError(f"ScatterElements indices {list(indices.shape)} past {list(data.shape)}")
    where: list[Array] = list(np.indices(indices.shape))
    where[axis] = indices % size
    y = np.array(data, copy=True)
    values = updates.astype(data.dtype, copy=False)
    if reduction == "add":
        np.add.at(y, tuple(where), values)
    else:
        y[tuple(where)] = values
    return [y]
