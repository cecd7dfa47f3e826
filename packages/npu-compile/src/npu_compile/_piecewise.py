"""Piecewise capture: split an FX graph around what cannot be captured, capture the pieces.

A graph with one operator a device graph cannot hold (a host sync such as ``.item()``, an
operator on another device, one tagged ``torch.Tag.cudagraph_unsafe``) used to run eagerly as a
whole. Instead, the AOT forward graph is split at those operators (and at the operators the user
names in ``aclgraph_config.splitting_ops``, as vLLM's ``splitting_ops``): each run of capturable
operators between them becomes a piece with a graph runner of its own, and the split operators run
eagerly between the pieces. All pieces of one graph capture into one pool; a piece captured while
the outputs of the pieces before it were alive replays beside them (npu-mempool's coexistence
rule), so the pieces of one call do not push each other onto second call paths.

The CPU emulation applies the same rules as a device, so splitting is tested without one.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import npu_streams
import torch
from npu_mempool import InputKind

from npu_compile._capturable import HOST_SYNC_OPS, called_op, op_name, op_tags, unsafe_tag
from npu_compile._plan import GraphPlan, Split
from npu_compile.errors import FallbackReason

__all__ = ["piecewise", "pieces_to_capture", "split_points"]

CompiledFn = Callable[..., Any]

logger = logging.getLogger("npu_compile")

#: Operators that compute nothing: a piece made only of these is not worth a graph.
_FREE_OPS = frozenset(
    {
        operator.getitem,
        torch.ops.aten.view.default,
        torch.ops.aten._unsafe_view.default,
        torch.ops.aten.reshape.default,
        torch.ops.aten.expand.default,
        torch.ops.aten.permute.default,
        torch.ops.aten.t.default,
        torch.ops.aten.transpose.int,
        torch.ops.aten.unsqueeze.default,
        torch.ops.aten.squeeze.dim,
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.select.int,
        torch.ops.aten.alias.default,
        torch.ops.aten.detach.default,
        torch.ops.aten.sym_size.int,
    }
)


def split_points(
    gm: torch.fx.GraphModule, device: torch.device, splitting_ops: Sequence[str]
) -> list[Split]:
    """The nodes of an AOT forward graph that must run outside device graphs, in graph order."""
    named = set(splitting_ops)
    splits: list[Split] = []
    eager: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem and node.args and node.args[0] in eager:
            eager.add(node)  # an element of an eager node's tuple result goes with it
            continue
        split = _why(node, device, named)
        if split is not None:
            splits.append(split)
            eager.add(node)
    return splits


def _why(node: torch.fx.Node, device: torch.device, named: set[str]) -> Split | None:
    # An op that writes into an argument runs inside a functionalization wrapper: the rules
    # below are about the op it calls.
    target = called_op(node)
    name = op_name(target)
    overload = getattr(target, "_overloadname", "")
    if name in named or (overload and f"{name}.{overload}" in named):
        return Split(node.name, name, FallbackReason.SPLITTING_OPS, "named in splitting_ops")
    if target in HOST_SYNC_OPS:
        return Split(node.name, name, FallbackReason.HOST_SYNC, "reads a tensor value on the host")
    if node.meta.get("unbacked_bindings"):
        # It makes a size no trace knew (boolean-mask indexing, unique): the host waits for it.
        return Split(
            node.name, name, FallbackReason.HOST_SYNC, "its output size depends on tensor values"
        )
    if unsafe_tag() is not None and unsafe_tag() in op_tags(target):
        return Split(
            node.name, name, FallbackReason.EXTERNAL_STATE, "tagged torch.Tag.cudagraph_unsafe"
        )
    if device.type != "cpu" and name.startswith("vllm::") and "attention" in name:
        return Split(
            node.name, name, FallbackReason.EXTERNAL_STATE, "reads vLLM's per-step metadata"
        )
    other = _other_device(node, device)
    if other is not None:
        return Split(node.name, name, FallbackReason.MIXED_DEVICES, f"runs on {other}")
    return None


def _other_device(node: torch.fx.Node, device: torch.device) -> str | None:
    values: list[object] = [node.meta.get("val")]
    for arg in (*node.args, *node.kwargs.values()):
        if isinstance(arg, torch.fx.Node):
            values.append(arg.meta.get("val"))
        elif isinstance(arg, (list, tuple)):
            values.extend(a.meta.get("val") for a in arg if isinstance(a, torch.fx.Node))
    for value in values:
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            # Even a 0-d CPU tensor: a device graph would keep the value it read at capture.
            if isinstance(tensor, torch.Tensor) and tensor.device.type != device.type:
                return str(tensor.device)
    return None


def _worth_capturing(nodes: Sequence[torch.fx.Node]) -> bool:
    return any(node.op == "call_function" and node.target not in _FREE_OPS for node in nodes)


def _partitions(
    gm: torch.fx.GraphModule, splits: Sequence[Split]
) -> tuple[dict[str, int], set[int]]:
    """The partition of every node (split nodes get one of their own) and the eager ones."""
    eager_nodes = {s.node for s in splits}
    partition_of: dict[str, int] = {}
    eager_partitions: set[int] = set()
    current = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        source = node.args[0] if node.target is operator.getitem and node.args else None
        if isinstance(source, torch.fx.Node) and source.name in eager_nodes:
            partition_of[node.name] = partition_of[source.name]
        elif node.name in eager_nodes:
            # A partition of its own: split_module names it submod_<id>.
            current += 1
            partition_of[node.name] = current
            eager_partitions.add(current)
            current += 1
        else:
            partition_of[node.name] = current
    return partition_of, eager_partitions


def pieces_to_capture(gm: torch.fx.GraphModule, splits: Sequence[Split]) -> tuple[int, ...]:
    """The pieces around ``splits`` worth a graph, by partition (none: the graph runs eagerly).

    A piece made only of operators that compute nothing (views, getitem) is not worth one: it
    runs eagerly with the split nodes.
    """
    partition_of, eager_partitions = _partitions(gm, splits)
    members: dict[int, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        part = partition_of.get(node.name)
        if part is not None and part not in eager_partitions:
            members.setdefault(part, []).append(node)
    return tuple(part for part, nodes in members.items() if _worth_capturing(nodes))


def piecewise(
    gm: torch.fx.GraphModule,
    plan: GraphPlan,
    make_runner: Callable[[torch.fx.GraphModule, list[InputKind]], CompiledFn],
) -> torch.fx.GraphModule:
    """``gm`` with the pieces its plan captures replaced by graph runners.

    Args:
        gm: The AOT forward graph after every pass.
        plan: Its plan (``PIECES``): the split points (:func:`split_points`), the pieces to
            capture (:func:`pieces_to_capture`) and the input class of each of ``gm``'s
            placeholders.
        make_runner: Makes the runner of a piece (its graph and input classes, pieces in
            order) and returns it as the function to call.

    Returns:
        A GraphModule taking ``gm``'s inputs, which calls the pieces' runners and the split nodes
        in order.
    """
    from torch.fx.passes.split_module import split_module

    partition_of, _ = _partitions(gm, plan.splits)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    kind_of = dict(zip(placeholders, plan.kinds, strict=True))
    split = split_module(gm, gm, lambda node: partition_of[node.name], keep_original_order=True)
    _streams_per_piece(split)
    captured = {f"submod_{p}" for p in plan.pieces}
    for node in list(split.graph.nodes):
        if node.op != "call_module" or str(node.target) not in captured:
            continue
        submodule = getattr(split, str(node.target))
        piece_kinds = [
            kind_of.get(arg.name, InputKind.USER)
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder"
            else InputKind.USER
            for arg in node.args
        ]
        attribute = str(node.target)
        unmatched = npu_streams.unmatched_waits(submodule)
        if unmatched:  # prepare_piece makes none: a capture would be refused
            raise AssertionError(f"piece {attribute} waits on events it never records: {unmatched}")
        node.op = "call_function"
        node.target = make_runner(submodule, piece_kinds)
        delattr(split, attribute)
    split.recompile()
    return split


def _streams_per_piece(split: torch.fx.GraphModule) -> None:
    """Give each piece with stream scopes fork/join events of its own (``prepare_piece``).

    The graph's own fork is recorded in its first piece and waited on in later ones: a device
    refuses a wait on an event another capture recorded, and eagerly a later piece's side
    stream would not wait for the eager work between the pieces. The planner refused a split
    inside a scope, so every scope lies in one piece.
    """
    for _, submodule in split.named_children():
        if isinstance(submodule, torch.fx.GraphModule) and npu_streams.has_stream_ops(submodule):
            npu_streams.prepare_piece(submodule)
