"""The GE operators this package writes and its runtime reads: input, output and attribute names.

Names follow CANN's operator specification so that ATC accepts the graph. The table is the one
place both sides agree on: the exporter names tensor descriptors from it and the runtime checks
loaded ops against it. This module must not import torch (the runtime imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OpSpec:
    """Signature of one GE operator.

    Attributes:
        inputs: Input names in order. A name ending in ``*`` is dynamic (``x0``, ``x1``, ...).
        outputs: Output names in order, with the same ``*`` convention.
        optional: Input names that may be left unconnected.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    optional: frozenset[str] = frozenset()

    def input_names(self, count: int, dynamic: Mapping[str, int] | None = None) -> list[str]:
        """Names of ``count`` connected inputs (dynamic inputs expanded, optional ones dropped).

        With one dynamic input its size is what the fixed inputs leave over; an operator with
        several (``GroupedMatmul``) needs ``dynamic``: the size of each by stem (``{"x": 1}``),
        0 for any not named.
        """
        if dynamic is None:
            return _expand(self.inputs, count)
        names: list[str] = []
        for name in self.inputs:
            if name.endswith("*"):
                names += [f"{name[:-1]}{i}" for i in range(dynamic.get(name[:-1], 0))]
            else:
                names.append(name)
        return names[:count]

    def trailing_optional(self, count: int) -> list[str]:
        """Optional inputs after the first ``count`` (written unfed when not connected)."""
        if any(name.endswith("*") for name in self.inputs):
            return []
        rest = list(self.inputs[count:])
        return rest if all(name in self.optional for name in rest) else []

    def output_names(self, count: int) -> list[str]:
        """Names of ``count`` outputs (a dynamic output expanded)."""
        return _expand(self.outputs, count)


def _expand(names: tuple[str, ...], count: int) -> list[str]:
    dynamic = [i for i, name in enumerate(names) if name.endswith("*")]
    if not dynamic:
        return list(names[:count])
    # One dynamic slot takes whatever the fixed names leave over.
    slot = dynamic[0]
    repeat = max(count - (len(names) - 1), 0)
    stem = names[slot][:-1]
    return [*names[:slot], *(f"{stem}{i}" for i in range(repeat)), *names[slot + 1 :]][:count]


_UNARY = OpSpec(("x",), ("y",))
_BINARY = OpSpec(("x1", "x2"), ("y",))

OPS: dict[str, OpSpec] = {
    # Graph structure.
    "Data": _UNARY,
    "Const": OpSpec((), ("y",)),
    "FileConstant": OpSpec((), ("y",)),
    "RefData": _UNARY,
    "NetOutput": OpSpec(("input*",), ()),
    "Identity": _UNARY,
    "Assign": OpSpec(("ref", "value"), ("ref",)),
    # Elementwise.
    **{
        name: _BINARY
        for name in (
            "Add",
            "Sub",
            "Mul",
            "RealDiv",
            "FloorDiv",
            "Maximum",
            "Minimum",
            "Pow",
            "Equal",
            "NotEqual",
            "Less",
            "LessEqual",
            "Greater",
            "GreaterEqual",
            "LogicalAnd",
            "LogicalOr",
            "BitwiseAnd",
            "BitwiseOr",
            "FloorMod",
            "Mod",
        )
    },
    **{
        name: _UNARY
        for name in (
            "Neg",
            "Exp",
            "Log",
            "Sqrt",
            "Rsqrt",
            "Sin",
            "Cos",
            "Tanh",
            "Sigmoid",
            "Abs",
            "Relu",
            "Reciprocal",
            "Erf",
            "LogicalNot",
            "Gelu",
            "GeluV2",
            "Swish",
            "Cast",
            "OnesLike",
            "ZerosLike",
            "Tril",
            "Triu",
            "Shape",
            "Squeeze",
            "Unsqueeze",
            "Floor",
            "Ceil",
            "Sign",
            "Log1p",
            "Expm1",
            "LeakyRelu",
            "Elu",
            "LpNormV2",
        )
    },
    "SelectV2": OpSpec(("condition", "then", "else"), ("result",)),
    # Matrix products and normalisation.
    "MatMulV2": OpSpec(("x1", "x2", "bias", "offset_w"), ("y",), frozenset({"bias", "offset_w"})),
    "BatchMatMulV2": OpSpec(
        ("x1", "x2", "bias", "offset_w"), ("y",), frozenset({"bias", "offset_w"})
    ),
    "SoftmaxV2": _UNARY,
    "LogSoftmaxV2": OpSpec(("logits",), ("logsoftmax",)),
    "LayerNorm": OpSpec(("x", "gamma", "beta"), ("y", "mean", "variance")),
    # Convolution, pooling and batch norm (NCHW).
    "Conv2D": OpSpec(("x", "filter", "bias", "offset_w"), ("y",), frozenset({"bias", "offset_w"})),
    "MaxPoolV3": _UNARY,
    "AvgPoolV2": _UNARY,
    "AdaptiveAvgPool2d": _UNARY,
    "BNInfer": OpSpec(("x", "scale", "offset", "mean", "variance"), ("y",)),
    "GroupNorm": OpSpec(("x", "gamma", "beta"), ("y", "mean", "variance")),
    # Reductions.
    "ReduceMean": OpSpec(("x", "axes"), ("y",)),
    "ReduceSum": OpSpec(("x", "axes"), ("y",)),
    "ReduceMax": OpSpec(("x", "axes"), ("y",)),
    "ReduceMin": OpSpec(("x", "axes"), ("y",)),
    "ReduceProd": OpSpec(("x", "axes"), ("y",)),
    "ReduceAll": OpSpec(("x", "axes"), ("y",)),
    "ReduceAny": OpSpec(("x", "axes"), ("y",)),
    # Selection: arg-extremes, top-k, sorting, histograms.
    "ArgMaxV2": OpSpec(("x", "dimension"), ("y",)),
    "ArgMin": OpSpec(("x", "dimension"), ("y",)),
    "ArgMaxWithValue": OpSpec(("x",), ("indice", "values")),
    "ArgMinWithValue": OpSpec(("x",), ("indice", "values")),
    "TopKV2": OpSpec(("x", "k"), ("values", "indices")),
    "Sort": OpSpec(("x",), ("y1", "y2")),
    "Histogram": _UNARY,
    # Shapes and data movement.
    "Reshape": OpSpec(("x", "shape"), ("y",)),
    "Transpose": OpSpec(("x", "perm"), ("y",)),
    "ExpandDims": OpSpec(("x", "axis"), ("y",)),
    "BroadcastTo": OpSpec(("x", "shape"), ("y",)),
    "ConcatV2": OpSpec(("x*", "concat_dim"), ("y",)),
    "Pack": OpSpec(("x*",), ("y",)),
    "SplitV": OpSpec(("x", "size_splits", "split_dim"), ("y*",)),
    "GatherV2": OpSpec(("x", "indices", "axis"), ("y",)),
    "Gather": OpSpec(("x", "indices"), ("y",)),
    "GatherElements": OpSpec(("x", "index"), ("y",)),
    "IndexByTensor": OpSpec(("x", "indices*"), ("y",)),
    "Cumsum": OpSpec(("x", "axis"), ("y",)),
    "TensorScatterUpdate": OpSpec(("x", "indices", "updates"), ("y",)),
    "TensorScatterAdd": OpSpec(("x", "indices", "updates"), ("y",)),
    "ScatterElements": OpSpec(("data", "indices", "updates"), ("y",)),
    "StridedSliceV2": OpSpec(
        ("x", "begin", "end", "axes", "strides"), ("y",), frozenset({"axes", "strides"})
    ),
    "Fill": OpSpec(("dims", "value"), ("y",)),
    "PadV3": OpSpec(("x", "paddings", "constant_values"), ("y",), frozenset({"constant_values"})),
    "Tile": OpSpec(("x", "multiples"), ("y",)),
    "AsStrided": OpSpec(("x", "size", "stride", "storage_offset"), ("y",)),
    "ReverseV2": OpSpec(("x", "axis"), ("y",)),
    # Complex numbers and Fourier transforms over the innermost dimension(s).
    "FFT": _UNARY,
    "IFFT": _UNARY,
    "FFT2D": _UNARY,
    "IFFT2D": _UNARY,
    "Real": OpSpec(("input",), ("output",)),
    "Imag": OpSpec(("input",), ("output",)),
    "Complex": OpSpec(("real", "imag"), ("out",)),
    # Mixture-of-experts: one matrix product per group of rows.
    "GroupedMatmul": OpSpec(
        (
            "x*",
            "weight*",
            "bias*",
            "scale*",
            "offset*",
            "antiquant_scale*",
            "antiquant_offset*",
            "group_list",
            "per_token_scale",
        ),
        ("y*",),
        frozenset({"group_list", "per_token_scale"}),
    ),
    "Range": OpSpec(("start", "limit", "delta"), ("y",)),
    # Collectives.
    "HcomAllReduce": _UNARY,
    "HcomAllGather": _UNARY,
    "HcomReduceScatter": _UNARY,
}
"""Every GE operator type the exporter may emit, by type name."""
