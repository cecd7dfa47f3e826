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
5. ``op`` draws no random numbers (an in-place variant may draw them differently);
6. every node that reads the memory runs on ``op``'s stream: a reader on another stream that
   comes *before* ``op`` in program order may still be running when ``op`` writes (the graph
   orders reads after their producers, not writes after earlier reads).

Torch's own FX pass (``torch.fx.passes.reinplace``) misses (3) and gave wrong numbers on
Hugging Face's position-id code, which subtracts two overlapping slices of one tensor; Inductor's
reinplacing checks the same conditions as here. Which nodes share memory is known from the ops'
schemas as well as from the fake tensors (see [Note: aliasing by construction]): in a training
graph's forward the fake tensors of saved views can be wrong, and a node without a schema (a
Python function a user pass added) counts as a view of every operand, so the pass stays
conservative there.

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
    return [found for value in (*node.args, *node.kwargs.values()) for found in _nodes_in(value)]


class _Memory:
    """The graph's nodes grouped by the memory their values live in, kept up to date.

    [Note: aliasing by construction] Two nodes are in one group when their fake tensors share a
    storage, or when the op that made one returns (a view of) an operand: an operand with an
    alias annotation in the op's schema (``view(Tensor(a) self) -> Tensor(a)``, an in-place op's
    ``Tensor(a!) self``), or, for anything without a schema (a Python function, a higher-order
    op, an element of its tuple), every operand. The schema rule alone decides where the fake
    tensors disagree: in the forward graph AOT autograd partitions out of a training graph, a
    view saved for the backward carries a fake tensor of its own storage, and a pass that
    trusted it wrote into memory the backward later read. Groups only grow: a wrong union keeps
    an op out of place, never in.
    """

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.order = {node: index for index, node in enumerate(graph.nodes)}
        self._parent: dict[Node, Node] = {node: node for node in graph.nodes}
        by_fake: dict[int, Node] = {}
        for node in graph.nodes:
            fake = _storage(node)
            if fake is not None:
                self._union(node, by_fake.setdefault(fake, node))
            for source in _aliased_operands(node):
                self._union(node, source)
        self.nodes: dict[Node, list[Node]] = {}
        for node in graph.nodes:
            self.nodes.setdefault(self._find(node), []).append(node)

    def _find(self, node: Node) -> Node:
        parent = self._parent[node]
        while parent is not node:
            grand = self._parent[parent]
            self._parent[node] = grand  # path halving
            node, parent = parent, grand
        return node

    def _union(self, a: Node, b: Node) -> Node:
        ra, rb = self._find(a), self._find(b)
        if ra is not rb:
            self._parent[rb] = ra
        return ra

    def of(self, node: object) -> Node | None:
        """The group of ``node``'s memory (``None``: not a node of this graph)."""
        if not isinstance(node, Node) or node not in self._parent:
            return None
        return self._find(node)

    def readers(self, group: Node) -> set[Node]:
        """Every node that reads the memory of ``group``, through any of its nodes."""
        return {user for node in self.nodes.get(self._find(group), ()) for user in node.users}

    def merge(self, group: Node, node: Node) -> None:
        """``node``'s value now lives in the memory of ``group`` (it was written in place)."""
        ra, rb = self._find(group), self._find(node)
        if ra is rb:
            return
        root = self._union(ra, rb)
        moved = self.nodes.pop(rb if root is ra else ra, [])
        self.nodes.setdefault(root, []).extend(moved)


#: Ops that return a view of their first operand without saying so in their schema.
_UNANNOTATED_VIEWS = frozenset({"aten::_unsafe_view"})


def _schema_aliases(target: torch._ops.OpOverload, node: Node) -> list[Node]:
    """The operands of ``node`` that its result may be (a view of), by ``target``'s schema."""
    schema = target._schema
    if schema.name in _UNANNOTATED_VIEWS:
        return _operands(node)[:1]
    returned: set[str] = set()
    for result in schema.returns:
        if result.alias_info is not None:
            returned |= set(result.alias_info.before_set)
    found: list[Node] = []
    for index, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None:
            continue
        # A view annotation (a) says the result is a view of the operand; a write annotation
        # (a!) says so only where a result carries the same set (an in-place op returning
        # self), not for an operand an op merely writes.
        if info.is_write and not set(info.before_set) & returned:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        found.extend(_nodes_in(value))
    return found


def _aliased_operands(node: Node) -> list[Node]:
    """The nodes whose memory ``node``'s value may share (see [Note: aliasing by construction])."""
    if node.op in ("placeholder", "get_attr", "output"):
        return []
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return _schema_aliases(target, node)
    if target is operator.getitem and node.args and isinstance(node.args[0], Node):
        source = node.args[0]
        if isinstance(source.target, torch._ops.OpOverload):
            # An element of an op's results: a view where the op returns views, else its own.
            return [source] if _schema_aliases(source.target, source) else []
        return [source]
    return _operands(node)  # no schema: it may return any operand, or a view of one


def _nodes_in(value: object) -> list[Node]:
    found: list[Node] = []
    if isinstance(value, Node):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(_nodes_in(item))
    return found


def _graph_owned(memory: _Memory, graph: torch.fx.Graph) -> set[Node]:
    """Memory of graph inputs and constants: memory the graph must not write as scratch."""
    return {
        group
        for node in graph.nodes
        if node.op in ("placeholder", "get_attr") and (group := memory.of(node)) is not None
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
        storage = memory.of(target)
        if storage is None or storage in inputs:
            continue  # condition 1
        if not _same_layout(target.meta.get("val"), node.meta.get("val")):
            continue  # condition 4
        if any(memory.of(other) is storage for other in _operands(node)[1:]):
            continue  # condition 3
        position = memory.order[node]
        readers = memory.readers(storage)
        if any(memory.order.get(reader, -1) > position for reader in readers):
            continue  # condition 2
        if len(_streams({*readers, node})) > 1:
            continue  # condition 6
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
        storage = memory.of(dst)
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
        _read_foreach_results_from_operands(graph)
    _reinplace_copied_back_ops(graph)


def _read_foreach_results_from_operands(graph: torch.fx.Graph) -> None:
    """Point the readers of an in-place foreach op's results at the tensors it wrote.

    Inductor's pass turns ``_foreach_add(xs, 1)`` copied back into ``xs`` into
    ``_foreach_add_(xs, 1)`` and leaves the ``getitem`` nodes that read its results: Inductor's
    lowering returns the written list, but the ATen op returns nothing, so the graph as a device
    captures it (and as it runs eagerly) would index ``None`` (an optimizer's step counts:
    ``capturable`` Adam). Element ``i`` of the result is ``xs[i]`` after the write, and every
    reader of the getitem comes after the op.
    """
    for node in list(graph.nodes):
        target = node.target
        if not isinstance(target, torch._ops.OpOverload) or target._schema.returns:
            continue
        if not node.args or not isinstance(node.args[0], (list, tuple)):
            continue
        written = node.args[0]
        for user in list(node.users):
            if user.target is not operator.getitem or not isinstance(user.args[1], int):
                continue
            replacement = written[user.args[1]]
            if isinstance(replacement, Node):
                user.replace_all_uses_with(replacement)
                graph.erase_node(user)


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
        storage = memory.of(dst)
        if inplace is None or storage is None:
            continue
        if not _same_layout(dst.meta.get("val"), src.meta.get("val")):
            continue
        if any(memory.of(other) is storage for other in _operands(src)[1:]):
            continue
        readers = memory.readers(storage) - {src, copy}
        if any(memory.order[src] < memory.order[user] < memory.order[copy] for user in readers):
            continue
        if len(_streams({*readers, src})) > 1:
            continue
        src.target = inplace
        copy.replace_all_uses_with(dst)
        graph.erase_node(copy)
