"""Kernels that reduce or contract dimensions.

Matrix products (grouped ones too), softmax, layer and group norm, reductions, vector norms,
cumsum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from npu_graph_export._graph import UNFED_ATTR
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    KernelError,
    KernelValueError,
    attr_bool,
    attr_float,
    attr_int,
    attr_ints,
    attr_str,
    kernel,
    normalize_axis,
)


def _adj(x: Array, flag: bool) -> Array:
    return np.swapaxes(x, -1, -2) if flag else x


@kernel("MatMulV2", "BatchMatMulV2")
def _matmul(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    first, second = (
        ("transpose_x1", "transpose_x2") if op.type == "MatMulV2" else ("adj_x1", "adj_x2")
    )
    x1, x2 = xs[0], xs[1]
    if x1.ndim < 2 or x2.ndim < 2:
        raise KernelError("matmul operands need rank >= 2")
    y = np.matmul(_adj(x1, attr_bool(op, first)), _adj(x2, attr_bool(op, second)))
    if len(xs) > 2:
        y = y + xs[2]
    return [y]


@kernel("SoftmaxV2", "LogSoftmaxV2")
def _softmax(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(
        normalize_axis(a, x.ndim) for a in (attr_ints(op, "axes") if "axes" in op.attr else [-1])
    )
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x - np.max(x, axis=axes, keepdims=True)
        exp = np.exp(shifted)
        total = np.sum(exp, axis=axes, keepdims=True)
        if op.type == "SoftmaxV2":
            return [exp / total]
        return [shifted - np.log(total)]


@kernel("LayerNorm")
def _layer_norm(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, gamma, beta = xs[0], xs[1], xs[2]
    begin = normalize_axis(attr_int(op, "begin_norm_axis"), x.ndim)
    axes = tuple(range(begin, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    eps = attr_float(op, "epsilon", 1e-5)
    y = (x - mean) / np.sqrt(variance + np.asarray(eps, x.dtype)) * gamma + beta
    return [y, mean, variance]


_REDUCTIONS: dict[str, Callable[..., Any]] = {
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
    "ReduceAll": np.all,
    "ReduceAny": np.any,
}


@kernel(*_REDUCTIONS)
def _reduce(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(normalize_axis(a, x.ndim) for a in np.asarray(xs[1]).reshape(-1))
    keep = attr_bool(op, "keep_dims")
    if op.type in {"ReduceMax", "ReduceMin"} and any(x.shape[a] == 0 for a in axes):
        raise KernelError(f"{op.type} over an empty dimension of shape {list(x.shape)}")
    y = _REDUCTIONS[op.type](x, axis=axes, keepdims=keep)
    return [np.asarray(y, dtype=x.dtype)]


@kernel("LpNormV2")
def _lp_norm(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(normalize_axis(a, x.ndim) for a in attr_ints(op, "axes")) or None
    keep = attr_bool(op, "keepdim")
    p = attr_float(op, "p", 2.0)
    magnitude = np.abs(x)
    if p == math.inf:
        y = np.max(magnitude, axis=axes, keepdims=keep)
    elif p == -math.inf:
        y = np.min(magnitude, axis=axes, keepdims=keep)
    elif p == 0:
        y = np.sum(magnitude != 0, axis=axes, keepdims=keep)
    elif p == 2:
        y = np.sqrt(np.sum(magnitude * magnitude, axis=axes, keepdims=keep))
    elif p == 1:
        y = np.sum(magnitude, axis=axes, keepdims=keep)
    else:
        y = np.sum(magnitude**p, axis=axes, keepdims=keep) ** (1.0 / p)
    # GE's epsilon guards normalising divisions; the norm itself is the plain one (the exporter
    # writes 0).
    return [np.asarray(y, dtype=x.dtype)]


@kernel("GroupNorm")
def _group_norm(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, gamma, beta = xs[0], xs[1], xs[2]
    data_format = attr_str(op, "data_format", "NHWC")
    if data_format != "NCHW" or x.ndim < 2:
        raise KernelError(
            f"GroupNorm of shape {list(x.shape)} in {data_format!r}: only (N, C, ...) NCHW"
        )
    batch, channels = x.shape[:2]
    groups = attr_int(op, "num_groups")
    if groups < 1 or channels % groups or gamma.size != channels or beta.size != channels:
        raise KernelError(
            f"GroupNorm of {channels} channels in {groups} groups, gamma {gamma.size}, "
            f"beta {beta.size}"
        )
    grouped = x.reshape(batch, groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    variance = np.square(grouped - mean).mean(axis=-1, keepdims=True)
    eps = np.asarray(attr_float(op, "eps", 1e-4), x.dtype)
    normed = ((grouped - mean) / np.sqrt(variance + eps)).reshape(x.shape)
    lift = (1, channels, *([1] * (x.ndim - 2)))
    y = normed * gamma.reshape(lift) + beta.reshape(lift)
    return [y.astype(x.dtype), mean.reshape(batch, groups), variance.reshape(batch, groups)]


@kernel("GroupedMatmul")
def _grouped_matmul(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    # The inputs present, by name: dynamic inputs ("x0", "weight0", ...) vary in number.
    names = [d.name for d in op.input_desc if UNFED_ATTR not in d.attr]
    given = dict(zip(names, xs, strict=False))
    extra = sorted(set(given) - {"x0", "weight0", "group_list"})
    if "x0" not in given or "weight0" not in given or "group_list" not in given or extra:
        raise KernelError(
            f"GroupedMatmul with inputs {names}: only one x, one weight and a group_list "
            "(no bias, quantisation or per-token scale) are supported"
        )
    x, weight, groups = given["x0"], given["weight0"], given["group_list"]
    split_item, group_type = attr_int(op, "split_item", 0), attr_int(op, "group_type", -1)
    if split_item not in (2, 3) or group_type != 0 or x.ndim != 2 or weight.ndim != 3:
        raise KernelError(
            f"GroupedMatmul split_item={split_item}, group_type={group_type} on x "
            f"{list(x.shape)} and weight {list(weight.shape)}: only one (M, K) x split along M "
            "over an (E, K, N) weight"
        )
    if attr_bool(op, "transpose_weight"):
        weight = np.swapaxes(weight, -1, -2)
    if weight.shape[1] != x.shape[1]:
        raise KernelError(f"GroupedMatmul x {list(x.shape)} and weight {list(weight.shape)}")
    counts = np.asarray(groups).reshape(-1).astype(np.int64)
    if counts.size != weight.shape[0]:
        raise KernelError(f"group_list of {counts.size} groups for {weight.shape[0]} weights")
    ends = counts if attr_int(op, "group_list_type", 0) == 0 else np.cumsum(counts)
    if (np.diff(ends, prepend=0) < 0).any() or (ends.size and ends[-1] > x.shape[0]):
        raise KernelValueError(
            f"group_list {counts.tolist()} is not a non-decreasing split of {x.shape[0]} rows"
        )
    # Rows past the last group belong to no expert: zeros, as the fallback of transformers.
    y = np.zeros((x.shape[0], weight.shape[2]), dtype=np.result_type(x, weight))
    start = 0
    for expert, end in enumerate(ends.tolist()):
        if end > start:
            y[start:end] = x[start:end] @ weight[expert]
        start = end
    return [y]


@kernel("Cumsum")
def _cumsum(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = normalize_axis(xs[1], x.ndim)
    if attr_bool(op, "reverse"):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if attr_bool(op, "exclusive"):
        y = y - x
    return [np.flip(y, axis) if attr_bool(op, "reverse") else y]
