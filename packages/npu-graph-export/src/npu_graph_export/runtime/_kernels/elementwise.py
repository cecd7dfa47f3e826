"""Elementwise kernels: arithmetic, comparisons, activations, ``Cast``, ``SelectV2``, ``Tril``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from npu_graph_export._dtypes import WIDENED, narrow
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import (
    Array,
    Collectives,
    Kernel,
    KernelError,
    attr_float,
    attr_int,
    attr_str,
    attr_type,
    kernel,
    numpy_dtype,
    register,
)


def _simple(fn: Callable[[Array, Array], Array]) -> Kernel:
    def run(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
        return [np.asarray(fn(xs[0], xs[1]))]

    return run


_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "RealDiv": np.true_divide,
    "FloorDiv": np.floor_divide,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Pow": np.power,
    "Equal": np.equal,
    "NotEqual": np.not_equal,
    "Less": np.less,
    "LessEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and,
    "LogicalOr": np.logical_or,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "FloorMod": np.mod,  # the sign of the divisor, as Python's %
    "Mod": np.fmod,  # the sign of the dividend, as C's fmod
}
for _name, _fn in _BINARY.items():
    register(_name, _simple(_fn))

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: Array) -> Array:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=x.dtype)


_UNARY: dict[str, Callable[[Array], Array]] = {
    "Identity": lambda x: x,
    "Neg": np.negative,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Rsqrt": lambda x: np.asarray(1.0 / np.sqrt(x), dtype=x.dtype),
    "Sin": np.sin,
    "Cos": np.cos,
    "Tanh": np.tanh,
    "Sigmoid": _sigmoid,
    "Abs": np.abs,
    "Relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "Reciprocal": lambda x: np.asarray(1.0 / x, dtype=x.dtype),
    "Erf": lambda x: _erf(x).astype(x.dtype),
    "LogicalNot": np.logical_not,
    "OnesLike": np.ones_like,
    "ZerosLike": np.zeros_like,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sign": np.sign,
    "Log1p": np.log1p,
    "Expm1": np.expm1,
}
for _name, _fn1 in _UNARY.items():
    register(_name, (lambda f: lambda op, xs, _: [np.asarray(f(xs[0]))])(_fn1))


def _gelu_tanh(x: Array) -> Array:
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return np.asarray(0.5 * x * (1.0 + np.tanh(inner)), dtype=x.dtype)


@kernel("Gelu")
def _gelu(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [_gelu_tanh(xs[0])]


@kernel("GeluV2")
def _gelu_v2(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if attr_str(op, "approximate", "none") == "tanh":
        return [_gelu_tanh(x)]
    return [np.asarray(0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), dtype=x.dtype)]


@kernel("Swish")
def _swish(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    return [np.asarray(x * _sigmoid(x * np.asarray(attr_float(op, "scale", 1.0), x.dtype)))]


@kernel("LeakyRelu")
def _leaky_relu(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    slope = np.asarray(attr_float(op, "negative_slope", 0.0), x.dtype)
    return [np.where(x > 0, x, x * slope)]


@kernel("Elu")
def _elu(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    alpha, scale, input_scale = (
        np.asarray(attr_float(op, name, 1.0), x.dtype) for name in ("alpha", "scale", "input_scale")
    )
    return [scale * np.where(x > 0, x, alpha * np.expm1(x * input_scale))]


@kernel("Cast")
def _cast(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    target = attr_type(op, "dst_type")
    if target in WIDENED:
        # Computed as float32, but holding only the values the narrow type can represent.
        return [narrow(xs[0].astype(np.float32), target)]
    return [xs[0].astype(numpy_dtype(target))]


@kernel("Tril", "Triu")
def _triangle(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    if xs[0].ndim < 2:
        raise KernelError("Tril/Triu need a tensor of rank >= 2")
    fn = np.tril if op.type == "Tril" else np.triu
    return [fn(xs[0], k=attr_int(op, "diagonal", 0))]


@kernel("SelectV2")
def _select(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.where(xs[0].astype(bool), xs[1], xs[2])]
