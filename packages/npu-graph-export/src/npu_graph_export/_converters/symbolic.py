"""Sizes known only at run time (dynamic shapes) and graph bookkeeping nodes."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, register
from npu_graph_export._proto import ge_ir_pb2 as ge


@register(aten.sym_size.int)
def _sym_size(ctx: Context, node: fx.Node) -> Value:
    # A dynamic size is a 0-d int64 tensor computed from the input's Shape at run time.
    return ctx.dim(ctx.tensor(args_of(node)[0]), int(args_of(node)[1]))


def _arith(op_type: str) -> Any:
    def convert(ctx: Context, node: fx.Node) -> Value:
        values = [ctx.value(a) for a in args_of(node)]
        if all(isinstance(v, int) for v in values):
            return _PYTHON[op_type](values[0], values[1])
        lhs, rhs = (ctx.tensor(a, ge.DT_INT64) for a in args_of(node))
        return ctx.emit(op_type, [lhs, rhs], dtype=ge.DT_INT64, shape=())

    return convert


_PYTHON: dict[str, Callable[[int, int], int]] = {
    "Mul": operator.mul,
    "Add": operator.add,
    "Sub": operator.sub,
    "FloorDiv": operator.floordiv,
    "FloorMod": operator.mod,
    "Minimum": min,
    "Maximum": max,
}


def _compare(op_type: str, python: Callable[[int, int], bool]) -> Any:
    # Size comparisons feed runtime assertions (dropped); computed only if something uses them.
    def convert(ctx: Context, node: fx.Node) -> Value:
        values = [ctx.value(a) for a in args_of(node)]
        if all(isinstance(v, int) for v in values):
            return python(values[0], values[1])
        lhs, rhs = (ctx.tensor(a, ge.DT_INT64) for a in args_of(node))
        return ctx.emit(op_type, [lhs, rhs], dtype=ge.DT_BOOL, shape=())

    return convert


for _target, _op_type in {
    operator.ge: "GreaterEqual",
    operator.gt: "Greater",
    operator.le: "LessEqual",
    operator.lt: "Less",
    operator.eq: "Equal",
    operator.ne: "NotEqual",
}.items():
    register(_target)(_compare(_op_type, _target))

register(operator.mul)(_arith("Mul"))
register(operator.add)(_arith("Add"))
register(operator.sub)(_arith("Sub"))
register(operator.floordiv)(_arith("FloorDiv"))
register(operator.mod)(_arith("FloorMod"))
register(torch.sym_min)(_arith("Minimum"))
register(torch.sym_max)(_arith("Maximum"))


@register(operator.neg)
def _neg(ctx: Context, node: fx.Node) -> Value:
    value = ctx.value(args_of(node)[0])
    if isinstance(value, int):
        return -value
    return ctx.emit("Neg", [ctx.tensor(args_of(node)[0], ge.DT_INT64)], dtype=ge.DT_INT64, shape=())


@register(
    aten._assert_tensor_metadata.default,
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
    aten.sym_constrain_range.default,
    torch._check,
    torch._check_is_size,
)
def _no_op(ctx: Context, node: fx.Node) -> Value:
    # Trace-time assertions: nothing to compute in the exported graph.
    return None
