"""Padding rules for elementwise ops, views and joins (the table is ``_batch_rules``).

Each rule gets the :class:`~npu_compile._padding.proof.Prover` and a node at least one of whose
inputs or sizes involves the batch, and returns the node's state or raises
:class:`~npu_compile._padding.proof.Unproven`. The output's batch dimension is read from its
symbolic shape; a rule checks that it is where the op's semantics put the input's, and that the
op does not work along it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from npu_compile._padding.proof import (
    Prover,
    Rows,
    Rule,
    State,
    Unproven,
    expr_of,
    listed,
    product,
    result_state,
    same,
    schema_arg,
    source_rows,
)

Node = torch.fx.Node

aten = torch.ops.aten


def aten_ops(*names: str) -> list[Any]:
    """ATen overloads by ``"name.overload"``; those this torch build lacks are left out."""
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(aten, packet, None), overload or "default", None)
        if op is not None:
            found.append(op)
    return found


# -- elementwise ---------------------------------------------------------------------------------


def pointwise(prover: Prover, node: Node) -> State:
    """Elementwise with broadcasting: each input's batch lines up with the output's."""
    prover.no_batch_values(node)
    out = prover.batch_dim(node)
    merged = prover.broadcast_into(node, out, prover.tensor_args(node))
    return None if out is None else dataclasses.replace(merged, dim=out)


def copy_like(prover: Prover, node: Node) -> State:
    """A copy or a cast: as elementwise, and an index stays the row's own position."""
    state = pointwise(prover, node)
    source = prover.rows(node.args[0])
    if isinstance(state, Rows) and source is not None and source.dim == state.dim:
        return dataclasses.replace(source, dim=state.dim)
    return state


# -- views ---------------------------------------------------------------------------------------


def reshape(prover: Prover, node: Node) -> State:
    """A view in row-major order: the batch must stay whole within one dimension.

    The input is ``[O][B][I]`` in row-major order (``O`` everything before the batch, the
    dimensions in front and the outer part of its own). The output keeps rows apart when its
    batch dimension holds that same ``[o][B][i]`` block: the sizes in front of it divide ``O``.
    """
    prover.no_batch_values(node, allow=("size", "shape", "sizes"))
    state = source_rows(prover, node)
    out = prover.batch_dim(node)
    if out is None:
        raise Unproven(node, "reshapes the batch dimension away")
    before, after = prover.val(node.args[0]).shape, prover.val(node).shape
    outer = quotient(product(before[: state.dim]) * state.outer, product(after[:out]))
    factor = prover.factor(after[out])
    if outer is None or factor is None or quotient(factor, outer) is None:
        raise Unproven(node, "splits the batch dimension across dimensions")
    identity = state.identity and prover.unit(after[out])
    # A constant batch (the same values in every row) merged with other dimensions repeats
    # a pattern that depends on the layout: from here on it is laid out like any other.
    return dataclasses.replace(state, dim=out, outer=outer, identity=identity, const=False)


def quotient(dividend: object, divisor: object) -> Any:
    """``a / b`` where it is a whole product of sizes (no division left), else ``None``."""
    a: Any = expr_of(dividend)
    b: Any = expr_of(divisor)
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    numerator, denominator = (a / b).cancel().as_numer_denom()
    return numerator if denominator == 1 else None


def permute(prover: Prover, node: Node) -> State:
    """A permutation (permute, transpose, t): the batch dimension moves where the op sends it."""
    prover.no_batch_values(node)
    state = source_rows(prover, node)
    rank = prover.val(node.args[0]).dim()
    target = node.target
    if target in PERMUTE:
        order = [d % rank for d in schema_arg(node, "dims")]
        expected = order.index(state.dim)
    elif target in TRANSPOSE:
        first, second = (schema_arg(node, name) % rank for name in ("dim0", "dim1"))
        expected = {first: second, second: first}.get(state.dim, state.dim)
    else:  # t
        expected = 1 - state.dim if rank == 2 else state.dim
    if prover.batch_dim(node) != expected:
        raise Unproven(node, "moves the batch dimension in a way the shape does not show")
    return dataclasses.replace(state, dim=expected)


def expand(prover: Prover, node: Node) -> State:
    """An expand: a free tensor repeated for every row, or the batch kept in place."""
    prover.no_batch_values(node, allow=("size",))
    state = prover.rows(node.args[0])
    out = prover.batch_dim(node)
    if state is None:
        return None if out is None else Rows(out, const=True)  # the same values in every row
    added = prover.val(node).dim() - prover.val(node.args[0]).dim()
    if out is None or out != state.dim + added:
        raise Unproven(node, "expands the batch dimension")
    return dataclasses.replace(state, dim=out)


def slice_(prover: Prover, node: Node) -> State:
    """A slice along another dimension, or the whole batch dimension (``x[:B]``)."""
    state = source_rows(prover, node)
    before = prover.val(node.args[0])
    dim = schema_arg(node, "dim", 0) % before.dim()
    if dim != state.dim:
        prover.no_batch_values(node)
        if prover.batch_dim(node) != state.dim:
            raise Unproven(node, "slices the batch dimension away")
        return state
    prover.no_batch_values(node, allow=("end",))
    start, step = schema_arg(node, "start"), schema_arg(node, "step", 1)
    out = prover.batch_dim(node)
    if (
        start in (None, 0)
        and step == 1
        and out == state.dim
        and same(prover.val(node).shape[out], before.shape[state.dim])
    ):
        return state
    raise Unproven(node, "takes part of the batch dimension")


def along_other(name: str) -> Rule:
    """Taking apart (select, split, unbind, chunk): fine along another dimension than the batch."""

    def rule(prover: Prover, node: Node) -> State:
        prover.no_batch_values(node)
        state = source_rows(prover, node)
        rank = prover.val(node.args[0]).dim()
        if schema_arg(node, name, 0) % rank == state.dim:
            raise Unproven(node, "takes rows of the batch dimension apart")
        return result_state(prover, node, state, state.identity)

    return rule


def joined(prover: Prover, node: Node, at: int) -> State:
    """Joining (cat, stack) at dimension ``at`` of the output: every input holds the batch alike."""
    prover.no_batch_values(node)
    out = prover.batch_dim(node)
    states = []
    for tensor in listed(node.args[0]):
        state = prover.rows(tensor)
        tensor_val = prover.val(tensor)
        if state is None and tensor_val.dim() == 1 and tensor_val.numel() == 0:
            continue  # cat skips the legacy empty tensor
        if state is None:
            raise Unproven(node, "joins a tensor without the batch to the batch rows")
        expected = state.dim if node.target is aten.cat.default or state.dim < at else state.dim + 1
        if expected != out:
            raise Unproven(node, "joins tensors that hold the batch in different dimensions")
        states.append(state)
    if out is None or out == at:
        raise Unproven(node, "joins along the batch dimension")
    return dataclasses.replace(prover.merge(node, states), dim=out)


def cat(prover: Prover, node: Node) -> State:
    return joined(prover, node, schema_arg(node, "dim", 0) % prover.val(node).dim())


def stack(prover: Prover, node: Node) -> State:
    return joined(prover, node, schema_arg(node, "dim", 0) % prover.val(node).dim())


PERMUTE = frozenset(aten_ops("permute.default", "permute_copy.default"))
TRANSPOSE = frozenset(aten_ops("transpose.int", "transpose_copy.int"))
