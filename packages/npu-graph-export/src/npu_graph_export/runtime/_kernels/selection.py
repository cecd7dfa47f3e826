"""Kernels that pick elements by value: arg-extremes, top-k, sorting, histograms.

Ties and NaN follow PyTorch on the CPU: an arg-extreme returns the first of equal values, NaN
counts as larger than every number, sorting is stable (descending too: equal values keep their
order) and a histogram leaves out values outside its range and NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    attr_bool,
    attr_float,
    attr_int,
    check_size,
    kernel,
    normalize_axis,
)


def _first_extreme(x: Array, axis: int, largest: bool) -> Array:
    """Index of the first largest (smallest) value along ``axis``; the first NaN if any."""
    if x.shape[axis] == 0:
        raise KernelError("an arg-extreme over an empty dimension")
    found = np.argmax(x, axis=axis) if largest else np.argmin(x, axis=axis)
    return np.asarray(found, dtype=np.int64)


@kernel("ArgMaxV2", "ArgMin")
def _arg_extreme(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if x.ndim == 0:
        return [np.zeros((), np.int64)]
    axis = normalize_axis(xs[1], x.ndim)
    return [_first_extreme(x, axis, op.type == "ArgMaxV2")]


@kernel("ArgMaxWithValue", "ArgMinWithValue")
def _extreme_with_value(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if x.ndim == 0:
        return [np.zeros((), np.int32), x]
    axis = normalize_axis(attr_int(op, "dimension"), x.ndim)
    index = _first_extreme(x, axis, op.type == "ArgMaxWithValue")
    values = np.take_along_axis(x, np.expand_dims(index, axis), axis=axis)
    if not attr_bool(op, "keep_dims"):
        values = np.squeeze(values, axis)
    else:
        index = np.expand_dims(index, axis)
    return [index.astype(np.int32), values]


def stable_order(x: Array, axis: int, descending: bool) -> Array:
    """Indices that sort ``x`` along ``axis``, equal values in their original order.

    NaN sorts as the largest value: last ascending, first descending.
    """
    if not descending:
        return np.asarray(np.argsort(x, axis=axis, kind="stable"), dtype=np.int64)
    # Sorting the reversed input ascending and reading it backwards keeps equal values in
    # their original order (a plain reversal would put the last of them first).
    count = x.shape[axis]
    backwards = np.flip(x, axis)
    order = np.flip(np.argsort(backwards, axis=axis, kind="stable"), axis)
    return np.asarray(count - 1 - order, dtype=np.int64)


@kernel("TopKV2")
def _top_k(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    k = int(np.asarray(xs[1]).reshape(-1)[0])
    if x.ndim == 0:
        if k not in (0, 1):
            raise KernelError(f"TopKV2 k={k} of a scalar")
        return [x, np.zeros((), np.int32)]
    axis = normalize_axis(attr_int(op, "dim", -1), x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise KernelError(f"TopKV2 k={k} for a dimension of size {x.shape[axis]}")
    # Sorted whether or not "sorted" asks for it: any order is allowed when it does not.
    order = stable_order(x, axis, attr_bool(op, "largest", True))
    index = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, index, axis=axis), index.astype(np.int32)]


@kernel("Sort")
def _sort(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if x.ndim == 0:
        return [x, np.zeros((), np.int32)]
    axis = normalize_axis(attr_int(op, "axis", -1), x.ndim)
    order = stable_order(x, axis, attr_bool(op, "descending"))
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int32)]


@kernel("Histogram")
def _histogram(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = np.asarray(xs[0]).reshape(-1)
    bins = attr_int(op, "bins", 100)
    if bins < 1:
        raise KernelError(f"Histogram needs at least one bin, got {bins}")
    check_size(bins, 8, f"Histogram of {bins} bins")
    work = x.astype(np.float32) if x.dtype.kind != "f" else x
    low = work.dtype.type(attr_float(op, "min", 0.0))
    high = work.dtype.type(attr_float(op, "max", 0.0))
    finite = work[~np.isnan(work)]
    if low == high and finite.size:
        # PyTorch's histc: equal bounds mean the range of the values.
        low, high = finite.min(), finite.max()
    if low == high:
        low, high = low - 1, high + 1
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise KernelError(f"Histogram range [{low}, {high}] is not a finite interval")
    inside = finite[(finite >= low) & (finite <= high)]
    # The bin as PyTorch computes it, in the input's precision; the top edge joins the last bin.
    position = ((inside - low) * work.dtype.type(bins) / (high - low)).astype(np.int64)
    position = np.minimum(position, bins - 1)
    counts = np.bincount(position, minlength=bins)[:bins]
    return [counts.astype(np.float32)]
