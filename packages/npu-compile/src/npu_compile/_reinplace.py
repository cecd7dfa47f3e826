"""Reinplacing: a functional op writes its result into an operand where nothing can tell.

Two passes over the graph about to be captured (``_passes.finish`` runs them, intermediates
first, as TorchAir does):

- :func:`reinplace_intermediates`: ``b = op(a, ...)`` becomes ``op_(a, ...)`` when ``a`` is
  memory the graph itself made and nothing reads that memory afterwards.
- :func:`reinplace_input_mutations`: ``b = op(a, ...)`` followed by ``a.copy_(b)`` into a graph
  input becomes ``op_(a, ...)`` (a KV-cache ``index_put`` and its copy become one ``index_put_``).

[Note: when writing in place is invisible] Both passes decide on memory, not on nodes: a value
and every view of it share one storage (the fake tensors in ``node.meta["val"]`` share their
fake storage exactly where the real tensors will). Writing ``a`` in place is invisible only when

1. the memory belongs to the graph (not a graph input, a view of one, or a constant);
2. no node after ``op`` reads that memory, through ``a`` or through any view or alias of it
   (the graph's outputs count as readers: the caller reads them);
3. no other operand of ``op`` shares the memory (``sub(x[1:], x[:-1])`` would read elements it
   has already overwritten);
4. ``op_`` exists with the same schema and the result has ``a``'s dtype, sizes and strides
   (no type promotion, no broadcast, no layout a later view depends on);
5. ``op`` draws no random numbers (an in-place variant may draw them differently).

Torch's own FX pass (``torch.fx.passes.reinplace``) misses (3) and gave wrong numbers on
Hugging Face's position-id code, which subtracts two overlapping slices of one tensor; Inductor's
reinplacing checks the same conditions as here. A node whose value carries no fake tensor (a node
a user pass added without metadata) hides what it aliases: anything read through it counts as a
reader of the memory it was made from, so the pass stays conservative there.

No check may specialise a symbolic size: sizes and strides are compared only where they are
known equal without a guard.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from npu_streams import STREAM_META_KEY
from torch.fx import Node

__all__ = ["reinplace_input_mutations", "reinplace_intermediates"]


def _storage(node: object) -> int | None:
    """An identity of the memory ``node``'s value lives in (``None``: not a tensor, unknown)."""
    value = node.meta.get("val") if isinstance(node, Node) else None
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return int(value.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):
        return None


def _same_size(x: object, y: object) -> bool:
    """Whether two sizes or strides are equal for every value of their symbols (no guard)."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(x == y))


def _same_layout(old: object, new: object) -> bool:
    """Whether ``new`` can live in ``old``'s memory as it is: dtype, sizes and strides."""
    if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
        return False
    if old.dtype != new.dtype or old.dim() != new.dim() or old.device != new.device:
        return False
    return all(
        _same_size(a, b)
        for a, b in zip((*old.shape, *old.stride()), (*new.shape, *new.stride()), strict=True)
    )


def _operands(node: Node) -> list[Node]:
    """Every node ``node`` reads, its first argument first (lists of tensors included)."""
    found: list[Node] = []

    def visit(value: object) -> None:
        if isinstance(value, Node):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    for value in (*node.args, *node.kwargs.values()):
        visit(value)
    return found


class _Memory:
    """The graph's nodes grouped by the storage their values live in, kept up to date."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.order = {node: index for index, node in enumerate(graph.nodes)}
        self.of: dict[Node, int | None] = {node: _storage(node) for node in graph.nodes}
        self.nodes: dict[int, list[Node]] = {}
        for node, storage in self.of.items():
            if storage is not None:
                self.nodes.setdefault(storage, []).append(node)

    def readers(self, storage: int) -> set[Node]:
        """Every node that reads ``storage``, directly or through a value of unknown aliasing."""
        seen: set[Node] = set()
        readers: set[Node] = set()
        todo = list(self.nodes.get(storage, ()))
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            for user in node.users:
                readers.add(user)
                # A value without a fake tensor (or a tuple of values) may be a view of this
                # memory: what reads it reads this memory too. getitem of a tuple has its own
                # fake tensor, and is found through its storage where it is a view.
                if self.of.get(user) is None and user.target is not operator.getitem:
                    todo.append(user)
        return readers

    def merge(self, into: int, node: Node) -> None:
        """``node``'s value now lives in storage ``into`` (it was written there in place)."""
        old = self.of.get(node)
        if old is None:
            self.of[node] = into
            self.nodes.setdefault(into, []).append(node)
            return
        if old == into:
            return
        for moved in self.nodes.pop(old, []):
            self.of[moved] = into
            self.nodes.setdefault(into, []).append(moved)


def _graph_owned(memory: _Memory, graph: torch.fx.Graph) -> set[int]:
    """Storages of graph inputs and constants: memory the graph must not write as scratch."""
    return {
        storage
        for node in graph.nodes
        if node.op in ("placeholder", "get_attr") and (storage := memory.of[node]) is not None
    }


def _inplace_variant(node: Node) -> Any:
    from torch.fx.passes.reinplace import _maybe_get_inplace_op

    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if torch.Tag.nondeterministic_seeded in target.tags:
        return None  # condition 5
    return _maybe_get_inplace_op(target)


def reinplace_intermediates(graph: torch.fx.Graph) -> int:
    """Write functional ops into operands the graph made and no later node reads.

    See [Note: when writing in place is invisible]. Returns how many ops now write in place.
    """
    memory = _Memory(graph)
    inputs = _graph_owned(memory, graph)
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], Node):
            continue
        inplace = _inplace_variant(node)
        if inplace is None:
            continue
        target = node.args[0]
        storage = memory.of.get(target)
        if storage is None or storage in inputs:
            continue  # condition 1
        if not _same_layout(target.meta.get("val"), node.meta.get("val")):
            continue  # condition 4
        if any(memory.of.get(other) == storage for other in _operands(node)[1:]):
            continue  # condition 3
        position = memory.order[node]
        if any(memory.order.get(reader, -1) > position for reader in memory.readers(storage)):
            continue  # condition 2
        node.target = inplace
        memory.merge(storage, node)
        changed += 1
    return changed


def _copies_into_inputs(graph: torch.fx.Graph) -> list[Node]:
    """The ``copy_`` nodes that write a value back into a graph input."""
    return [
        node
        for node in graph.nodes
        if node.target is torch.ops.aten.copy_.default
        and isinstance(node.args[0], Node)
        and node.args[0].op == "placeholder"
        and isinstance(node.args[1], Node)
    ]


def _streams(nodes: Iterable[Node]) -> set[Any]:

    return {node.meta.get(STREAM_META_KEY) for node in nodes} - {None}


def _inputs_read_across_streams(graph: torch.fx.Graph) -> bool:
    """True when a graph input written back (``copy_``) is read on more than one stream."""
    memory = _Memory(graph)
    for copy in _copies_into_inputs(graph):
        dst = copy.args[0]
        assert isinstance(dst, Node)
        storage = memory.of.get(dst)
        readers = memory.readers(storage) if storage is not None else set(dst.users)
        if len(_streams(readers - {copy})) > 1:
            return True
    return False


def reinplace_input_mutations(graph: torch.fx.Graph) -> None:
    """Write functional ops whose result is copied back into a graph input into that input.

    Inductor's pass knows the scatter-like ops (``index_put``, ``slice_scatter``) but not
    streams: it runs only where every graph input written back is read on one stream. The plain
    ops (``y.mul_(s)`` traced as ``mul`` + ``copy_``) are handled by
    :func:`_reinplace_copied_back_ops` with TorchAir's stream condition.
    """
    from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops_core

    if not _inputs_read_across_streams(graph):
        reinplace_inplaceable_ops_core(graph)
    _reinplace_copied_back_ops(graph)


def _reinplace_copied_back_ops(graph: torch.fx.Graph) -> None:
    """``b = op(a, ...)`` then ``a.copy_(b)`` into a graph input ``a`` becomes ``op_(a, ...)``.

    Only where nothing can tell the difference: ``op_`` exists, ``b`` has ``a``'s layout, no
    other operand of ``op`` shares ``a``'s memory, nothing reads ``a`` (or a view of it) between
    ``op`` and the copy, and, in a graph with streams, every reader of ``a`` runs on ``op``'s
    stream (TorchAir's condition: a reader on another stream could see the new value early).
    """
    memory = _Memory(graph)
    for copy in _copies_into_inputs(graph):
        dst, src = copy.args[0], copy.args[1]
        assert isinstance(dst, Node)
        assert isinstance(src, Node)
        if src.op != "call_function" or not src.args or src.args[0] is not dst:
            continue
        inplace = _inplace_variant(src)
        storage = memory.of.get(dst)
        if inplace is None or storage is None:
            continue
        if not _same_layout(dst.meta.get("val"), src.meta.get("val")):
            continue
        if any(memory.of.get(other) == storage for other in _operands(src)[1:]):
            continue
        readers = memory.readers(storage) - {src, copy}
        if any(memory.order[src] < memory.order[user] < memory.order[copy] for user in readers):
            continue
        if len(_streams({*readers, src})) > 1:
            continue
        src.target = inplace
        copy.replace_all_uses_with(dst)
        graph.erase_node(copy)
