"""Elementwise arithmetic, comparisons, logic and unary maths."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from npu_graph_export._converters._base import (
    Context,
    Value,
    args_of,
    aten,
    ge_dtype,
    kwargs_of,
    register,
)
from npu_graph_export._graph import Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge


def _operand_dtype(ctx: Context, node: fx.Node) -> int:
    # ATen promotes mixed operands (int tensor + float weight); GE ops need equal dtypes, so
    # cast both to torch's promoted type, which is also the output dtype for arithmetic.
    values = [ctx.meta(a) if isinstance(a, fx.Node) else a for a in args_of(node)[:2]]
    promoted: torch.dtype = torch.result_type(*values)
    return ge_dtype(promoted)


def _binary(op_type: str, *, compare: bool = False) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        dtype = _operand_dtype(ctx, node) if compare else ctx.out_dtype()
        lhs, rhs = (ctx.tensor(a, dtype) for a in args_of(node)[:2])
        alpha = kwargs_of(node).get("alpha", 1)
        if alpha != 1:
            rhs = ctx.emit(
                "Mul", [rhs, ctx.tensor(alpha, dtype)], suffix="alpha", dtype=dtype, shape=rhs.shape
            )
        return ctx.emit(op_type, [lhs, rhs])

    return convert


for _op_type, _targets in {
    "Add": (aten.add.Tensor, aten.add.Scalar),
    "Sub": (aten.sub.Tensor, aten.sub.Scalar),
    "Mul": (aten.mul.Tensor, aten.mul.Scalar),
    "Maximum": (aten.maximum.default,),
    "Minimum": (aten.minimum.default,),
    "Pow": (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar),
    # Python's % (the sign of the divisor) and C's fmod (the sign of the dividend).
    "FloorMod": (aten.remainder.Tensor, aten.remainder.Scalar),
    "Mod": (aten.fmod.Tensor, aten.fmod.Scalar),
}.items():
    register(*_targets)(_binary(_op_type))

for _op_type, _targets in {
    "Equal": (aten.eq.Tensor, aten.eq.Scalar),
    "NotEqual": (aten.ne.Tensor, aten.ne.Scalar),
    "Less": (aten.lt.Tensor, aten.lt.Scalar),
    "LessEqual": (aten.le.Tensor, aten.le.Scalar),
    "Greater": (aten.gt.Tensor, aten.gt.Scalar),
    "GreaterEqual": (aten.ge.Tensor, aten.ge.Scalar),
}.items():
    register(*_targets)(_binary(_op_type, compare=True))


def _logical(op_type: str) -> Any:
    # GE's LogicalAnd/LogicalOr take bool inputs: ATen's logical_* accept any dtype and
    # treat non-zero as true, so both operands are cast to bool first.
    def convert(ctx: Context, node: fx.Node) -> Value:
        lhs, rhs = (ctx.tensor(a, ge.DT_BOOL) for a in args_of(node)[:2])
        return ctx.emit(op_type, [lhs, rhs], dtype=ge.DT_BOOL)

    return convert


register(aten.logical_and.default)(_logical("LogicalAnd"))
register(aten.logical_or.default)(_logical("LogicalOr"))


def _bitwise(logical: str, bitwise: str) -> Any:
    # ``a & b`` is logical on bool masks but bit-by-bit on integers (6 & 3 == 2): GE has one
    # operator for each, as TorchAir's converter chooses.
    def convert(ctx: Context, node: fx.Node) -> Value:
        dtype = ctx.out_dtype()
        if dtype == ge.DT_BOOL:
            return _logical(logical)(ctx, node)
        lhs, rhs = (ctx.tensor(a, dtype) for a in args_of(node)[:2])
        return ctx.emit(bitwise, [lhs, rhs])

    return convert


register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_bitwise("LogicalAnd", "BitwiseAnd"))
register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_bitwise("LogicalOr", "BitwiseOr"))


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    lhs, rhs = (ctx.tensor(a, dtype) for a in args_of(node)[:2])
    alpha = kwargs_of(node).get("alpha", 1)
    if alpha != 1:
        lhs = ctx.emit("Mul", [lhs, ctx.tensor(alpha, dtype)], suffix="alpha", shape=lhs.shape)
    return ctx.emit("Sub", [rhs, lhs])


@register(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode)
def _div(ctx: Context, node: fx.Node) -> Value:
    mode = kwargs_of(node).get("rounding_mode")
    dtype = ctx.out_dtype()
    lhs, rhs = (ctx.tensor(a, dtype) for a in args_of(node)[:2])
    if mode is None:
        return ctx.emit("RealDiv", [lhs, rhs])
    if mode == "floor":
        return ctx.emit("FloorDiv", [lhs, rhs])
    from npu_graph_export.errors import UnsupportedOpError

    raise UnsupportedOpError(
        f"aten.div with rounding_mode={mode!r} has no GE converter; use floor division or "
        "true division in the model"
    )


def _unary(op_type: str, **attrs: Any) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        return ctx.emit(
            op_type, [ctx.tensor(args_of(node)[0], ctx.out_dtype())], dict(attrs) or None
        )

    return convert


for _op_type, _targets in {
    "Neg": (aten.neg.default,),
    "Exp": (aten.exp.default,),
    "Log": (aten.log.default,),
    "Sqrt": (aten.sqrt.default,),
    "Rsqrt": (aten.rsqrt.default,),
    "Sin": (aten.sin.default,),
    "Cos": (aten.cos.default,),
    "Tanh": (aten.tanh.default,),
    "Sigmoid": (aten.sigmoid.default,),
    "Abs": (aten.abs.default,),
    "Relu": (aten.relu.default,),
    "Reciprocal": (aten.reciprocal.default,),
    "Erf": (aten.erf.default,),
    "Floor": (aten.floor.default,),
    "Ceil": (aten.ceil.default,),
    "Sign": (aten.sign.default,),
    "Log1p": (aten.log1p.default,),
    "Expm1": (aten.expm1.default,),
}.items():
    register(*_targets)(_unary(_op_type))


@register(aten.leaky_relu.default)
def _leaky_relu(ctx: Context, node: fx.Node) -> Value:
    slope = args_of(node)[1] if len(args_of(node)) > 1 else 0.01
    x = ctx.tensor(args_of(node)[0], ctx.out_dtype())
    return ctx.emit("LeakyRelu", [x], {"negative_slope": float(slope)})


@register(aten.elu.default)
def _elu(ctx: Context, node: fx.Node) -> Value:
    # ATen: scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1)), as GE's Elu.
    args = list(args_of(node)) + [None] * (4 - len(args_of(node)))
    alpha, scale, input_scale = (1.0 if v is None else float(v) for v in args[1:4])
    x = ctx.tensor(args[0], ctx.out_dtype())
    return ctx.emit("Elu", [x], {"alpha": alpha, "scale": scale, "input_scale": input_scale})


@register(aten.logical_not.default, aten.bitwise_not.default)
def _logical_not(ctx: Context, node: fx.Node) -> Value:
    source = ctx.meta(args_of(node)[0])
    if source.dtype != torch.bool:
        from npu_graph_export.errors import UnsupportedOpError

        raise UnsupportedOpError(
            "aten.bitwise_not on integer tensors has no GE converter here; apply it to a bool "
            "mask (~mask) instead"
        )
    return ctx.emit("LogicalNot", [ctx.tensor(args_of(node)[0], ge.DT_BOOL)], dtype=ge.DT_BOOL)


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    condition = ctx.tensor(args_of(node)[0], ge.DT_BOOL)
    then, other = (ctx.tensor(a, dtype) for a in args_of(node)[1:3])
    return ctx.emit("SelectV2", [condition, then, other])


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    source = ctx.tensor(args_of(node)[0], dtype)
    mask = ctx.tensor(args_of(node)[1], ge.DT_BOOL)
    fill = args_of(node)[2]
    fill_value: Tensor = ctx.tensor(fill if not isinstance(fill, float) else float(fill), dtype)
    return ctx.emit("SelectV2", [mask, fill_value, source])


@register(
    aten.clamp.default,
    aten.clamp.Tensor,
    aten.clamp_min.default,
    aten.clamp_max.default,
    aten.hardtanh.default,
)
def _clamp(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    args, kwargs = args_of(node), kwargs_of(node)
    if node.target is aten.hardtanh.default:  # also relu6
        low = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
        high = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    elif node.target is aten.clamp_min.default:
        low, high = args[1], None
    elif node.target is aten.clamp_max.default:
        low, high = None, args[1]
    else:
        low = args[1] if len(args) > 1 else kwargs.get("min")
        high = args[2] if len(args) > 2 else kwargs.get("max")
    x = ctx.tensor(args[0], dtype)
    if low is None and high is None:
        return ctx.emit("Identity", [x])
    if low is not None:
        x = ctx.emit("Maximum", [x, ctx.tensor(low, dtype)], suffix="min")
    if high is not None:
        x = ctx.emit("Minimum", [x, ctx.tensor(high, dtype)], suffix="max")
    return x
