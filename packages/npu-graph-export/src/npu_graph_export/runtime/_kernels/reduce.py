"""Kernels that reduce or contract dimensions: matmul, softmax, layer norm, reductions, cumsum."""

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
    attr_ints,
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


@kernel("ReduceMean", "ReduceSum", "ReduceMax")
def _reduce(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(normalize_axis(a, x.ndim) for a in np.asarray(xs[1]).reshape(-1))
    keep = attr_bool(op, "keep_dims")
    if op.type == "ReduceMean":
        y = np.mean(x, axis=axes, keepdims=keep)
    elif op.type == "ReduceSum":
        y = np.sum(x, axis=axes, keepdims=keep)
    else:
        y = np.max(x, axis=axes, keepdims=keep)
    return [np.asarray(y, dtype=x.dtype)]


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
