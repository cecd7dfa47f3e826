"""Padding rules for products, lookups, reductions, norms and attention (table: ``_batch_rules``).

As in :mod:`npu_compile._padding.views`, each rule returns the node's state or raises
:class:`~npu_compile._padding.proof.Unproven`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from npu_compile._padding.proof import (
    Prover,
    Rows,
    Rule,
    State,
    Unproven,
    listed,
    result_state,
    schema_arg,
    source_rows,
)

Node = torch.fx.Node

aten = torch.ops.aten


# -- products ------------------------------------------------------------------------------------


def matmul(prover: Prover, node: Node) -> State:
    """A matrix product (mm, addmm, bmm, baddbmm): the batch is a row of ``a`` or a column of ``b``.

    With ``bmm`` it may also be the leading dimension of both (a batch of matrices). A batch
    in the contracted dimension sums over rows, which padding changes.
    """
    prover.no_batch_values(node)
    target = node.target
    with_bias = target in (aten.addmm.default, aten.baddbmm.default)
    left, right = node.args[1:3] if with_bias else node.args[:2]
    rank = 3 if target in (aten.bmm.default, aten.baddbmm.default) else 2
    a, b = prover.rows(left), prover.rows(right)
    out = prover.batch_dim(node)
    if a is not None and b is not None:
        ok = rank == 3 and a.dim == b.dim == 0 and out == 0
    elif a is not None:
        ok = a.dim == rank - 2 and out == a.dim
    elif b is not None:
        ok = b.dim == rank - 1 and out == b.dim
    else:
        ok = False
    if not ok or out is None:
        raise Unproven(node, "contracts the batch dimension in a matrix product")
    merged = prover.merge(node, [a, b])
    if with_bias:
        bias = prover.broadcast_into(node, out, [node.args[0]])
        merged = prover.merge(node, [merged, bias])
    return dataclasses.replace(merged, dim=out)


def linear(prover: Prover, node: Node) -> State:
    """A linear layer: the batch in any dimension but the last (contracted); free weights."""
    prover.no_batch_values(node)
    if prover.rows(schema_arg(node, "weight")) or prover.rows(schema_arg(node, "bias")):
        raise Unproven(node, "multiplies by weights that hold the batch")
    state = source_rows(prover, node)
    rank = prover.val(node.args[0]).dim()
    if state.dim == rank - 1 or prover.batch_dim(node) != state.dim:
        raise Unproven(node, "contracts the batch dimension in a matrix product")
    return dataclasses.replace(state, identity=False)


# -- lookups -------------------------------------------------------------------------------------


def embedding(prover: Prover, node: Node) -> State:
    """An embedding: rows of indices look up a free table."""
    prover.no_batch_values(node)
    weight, indices = schema_arg(node, "weight"), schema_arg(node, "indices")
    if prover.rows(weight) is not None:
        raise Unproven(node, "looks up a table that holds the batch")
    prover.index_bound(node, indices, prover.val(weight).shape[0])
    state = prover.rows(indices)
    if state is None or prover.batch_dim(node) != state.dim:
        raise Unproven(node, "moves the batch dimension in a lookup")
    return Rows(state.dim, state.outer, const=state.const)


def index(prover: Prover, node: Node) -> State:
    """An ``index.Tensor`` (``x[i, j]``): the batch kept whole, or indexed by each row's position.

    A free tensor may be indexed by batch rows (a gather per row). A batch dimension indexed
    by anything else than ``arange(B)`` (``x[-1]``, ``x[perm]``) mixes rows and fails.
    """
    prover.no_batch_values(node)
    source, indices = node.args[0], listed(node.args[1])
    before = prover.val(source)
    state = prover.rows(source)
    present = [i for i, index in enumerate(indices) if index is not None]
    vals = [prover.val(indices[i]) for i in present]
    if not present or any(v.dtype in (torch.bool, torch.uint8) for v in vals):
        raise Unproven(node, "indexes with a mask, whose result size depends on values")
    width = max(v.dim() for v in vals)
    together = present == list(range(present[0], present[-1] + 1))
    start = present[0] if together else 0
    aligned: dict[int, Rows] = {}
    for i, v in zip(present, vals, strict=True):
        index_state = prover.rows(indices[i])
        if index_state is not None:
            aligned[index_state.dim + width - v.dim()] = index_state
    if len(aligned) > 1:
        raise Unproven(node, "indexes with the batch in two different dimensions")
    out = prover.batch_dim(node)
    if state is not None and state.dim not in present:
        # The batch dimension is sliced whole (``:``): it keeps its place around the indices.
        if aligned:
            raise Unproven(node, "indexes batch rows with the rows of another batch")
        if together:
            expected = state.dim if state.dim < start else state.dim - len(present) + width
        else:
            expected = width + sum(1 for d in range(state.dim) if d not in present)
        if out is None or out != expected:
            raise Unproven(node, "moves the batch dimension in an indexing")
        return dataclasses.replace(state, dim=out, identity=False)
    if state is not None:
        index_state = prover.rows(indices[state.dim])
        if (
            index_state is None
            or not index_state.identity
            or not prover.unit(before.shape[state.dim])
        ):
            raise Unproven(
                node, "indexes the batch dimension with other values than each row's position"
            )
    for i in present:
        if state is None or i != state.dim:
            prover.index_bound(node, indices[i], before.shape[i])
    if len(aligned) != 1 or out is None:
        raise Unproven(node, "moves the batch dimension in an indexing")
    ((position, index_state),) = aligned.items()
    if out != start + position:
        raise Unproven(node, "moves the batch dimension in an indexing")
    if state is not None:
        return dataclasses.replace(state, dim=out, identity=False)
    return Rows(out, index_state.outer, const=index_state.const)


def index_select(prover: Prover, node: Node) -> State:
    """An ``index_select`` along another dimension with a free index, or a free table by rows."""
    prover.no_batch_values(node)
    source, index = schema_arg(node, "self"), schema_arg(node, "index")
    state, index_state = prover.rows(source), prover.rows(index)
    before = prover.val(source)
    dim = schema_arg(node, "dim") % max(before.dim(), 1)
    out = prover.batch_dim(node)
    if state is not None and index_state is None and dim != state.dim and out == state.dim:
        return dataclasses.replace(state, identity=False)
    if (
        state is not None
        and index_state is not None
        and dim == state.dim == out
        and index_state.identity
        and prover.unit(before.shape[dim])
    ):
        return dataclasses.replace(state, identity=False)
    if state is None and index_state is not None and out is not None and out == dim:
        prover.index_bound(node, index, before.shape[dim])
        return Rows(out, index_state.outer, const=index_state.const)
    raise Unproven(node, "selects rows of the batch dimension")


def gather(prover: Prover, node: Node) -> State:
    """A gather along another dimension: source and index hold the batch in the same place."""
    prover.no_batch_values(node)
    source, index = schema_arg(node, "self"), schema_arg(node, "index")
    state, index_state = prover.rows(source), prover.rows(index)
    before = prover.val(source)
    dim = schema_arg(node, "dim") % max(before.dim(), 1)
    if (
        state is None
        or index_state is None
        or state.dim != index_state.dim
        or state.dim == dim
        or prover.batch_dim(node) != state.dim
    ):
        raise Unproven(node, "gathers across rows of the batch dimension")
    prover.index_bound(node, index, before.shape[dim])
    return dataclasses.replace(prover.merge(node, [state, index_state]), dim=state.dim)


# -- along dimensions: reductions, scans, sorts, softmax -----------------------------------------


def along(name: str, default: object, empty_is_all: bool) -> Rule:
    """An op that works along the dimensions in argument ``name``; never along the batch."""

    def rule(prover: Prover, node: Node) -> State:
        prover.no_batch_values(node)
        state = source_rows(prover, node)
        rank = max(prover.val(node.args[0]).dim(), 1)
        dims = schema_arg(node, name, default)
        if dims is None or (empty_is_all and dims == []):
            along = set(range(rank))
        else:
            along = {d % rank for d in (dims if isinstance(dims, (list, tuple)) else [dims])}
        if state.dim in along:
            raise Unproven(node, "works along the batch dimension (rows are combined)")
        return result_state(prover, node, state)

    return rule


def normalize(count: Callable[[Node], int]) -> Rule:
    """A layer norm or RMS norm over the last ``count(node)`` dimensions, with free weights."""

    def rule(prover: Prover, node: Node) -> State:
        prover.no_batch_values(node)
        state = source_rows(prover, node)
        for name in ("weight", "bias"):
            if prover.rows(schema_arg(node, name)) is not None:
                raise Unproven(node, f"normalizes with a {name} that holds the batch")
        if state.dim >= prover.val(node.args[0]).dim() - count(node):
            raise Unproven(node, "normalizes over the batch dimension")
        return result_state(prover, node, state)

    return rule


def batch_norm(prover: Prover, node: Node) -> State:
    """Batch norm: in training it computes statistics over every dimension but the channels.

    Those statistics combine rows unless the batch lives in the channel dimension (instance
    norm reshapes to ``(1, B * C, ...)``); with running statistics (eval) it is elementwise.
    """
    prover.no_batch_values(node)
    state = source_rows(prover, node)
    for name in ("weight", "bias", "running_mean", "running_var"):
        if prover.rows(schema_arg(node, name)) is not None:
            raise Unproven(node, f"normalizes with a {name} that holds the batch")
    training = schema_arg(node, "training", False)
    if training is not False and state.dim != 1:
        raise Unproven(node, "computes batch statistics over the batch rows (training mode)")
    return result_state(prover, node, state)


def group_norm(prover: Prover, node: Node) -> State:
    """A group norm: statistics per sample, the batch leading."""
    prover.no_batch_values(node, allow=("N",))
    state = source_rows(prover, node)
    if state.dim != 0 or any(prover.rows(schema_arg(node, n)) for n in ("weight", "bias")):
        raise Unproven(node, "normalizes over the batch dimension")
    return result_state(prover, node, state)


def leading(*batched: str) -> Rule:
    """An op that treats its leading dimension as independent samples (attention, conv, pools).

    Only the arguments named in ``batched`` may hold the batch, in dimension 0; every output
    holds it in dimension 0 or not at all. Dropout would draw random numbers per row.
    """

    def rule(prover: Prover, node: Node) -> State:
        prover.no_batch_values(node)
        if schema_arg(node, "dropout_p", 0.0) not in (0, 0.0):
            raise Unproven(node, "applies dropout to the batch rows")
        states = []
        for name, value in tensor_arguments(prover, node):
            state = prover.rows(value)
            if state is None:
                continue
            if name not in batched or state.dim != 0:
                raise Unproven(node, "needs the batch as the leading dimension of its samples")
            states.append(state)
        val = prover.val(node)
        for item in val if isinstance(val, (list, tuple)) else [val]:
            if isinstance(item, torch.Tensor) and prover.batch_dim(node, item) not in (None, 0):
                raise Unproven(node, "moves the batch dimension")
        return result_state(prover, node, prover.merge(node, states))

    return rule


def tensor_arguments(prover: Prover, node: Node) -> list[tuple[str, Node]]:
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    found: list[tuple[str, Node]] = []
    for argument in target._schema.arguments:
        value = schema_arg(node, argument.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        found.extend(
            (argument.name, v)
            for v in values
            if isinstance(v, Node) and isinstance(prover.val(v), torch.Tensor)
        )
    return found


def last_dims(count: Callable[[Node], int]) -> Rule:
    """An op on the last ``count(node)`` dimensions only (tril, constant_pad_nd)."""

    def rule(prover: Prover, node: Node) -> State:
        prover.no_batch_values(node)
        state = source_rows(prover, node)
        if state.dim >= prover.val(node.args[0]).dim() - count(node):
            raise Unproven(node, "works on the batch dimension")
        return result_state(prover, node, state)

    return rule


# -- values made from sizes ----------------------------------------------------------------------


def factory(prover: Prover, node: Node) -> State:
    """A factory (zeros, full, empty, new_ones, *_like): every row holds the same constant."""
    prover.no_batch_values(node, allow=("size", "stride"))
    dim = prover.batch_dim(node)
    return None if dim is None else Rows(dim, const=True)


def arange(prover: Prover, node: Node) -> State:
    """An ``arange`` up to a multiple of the batch: each row's values are its own positions."""
    prover.no_batch_values(node, allow=("end",))
    dim = prover.batch_dim(node)
    if dim is None:
        raise Unproven(node, "counts in a way the padding rules do not know")
    end = prover.val(schema_arg(node, "end"))
    identity = (
        schema_arg(node, "start", 0) == 0
        and schema_arg(node, "step", 1) == 1
        and end is not None
        and prover.unit(end)
    )
    return Rows(dim, coord=True, identity=identity)
