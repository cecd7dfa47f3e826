"""Pass Python ints that decide no shape to the captured graph as device scalars.

A Python ``int`` that Dynamo turns into a SymInt graph input (a cache's position counter such as
Gemma's sliding-window ``cumulative_length``) is baked into a captured device graph as a kernel
argument, so every new value would need a capture of its own. Where the int only feeds arithmetic
(on other ints, or as the scalar operand of an element-wise op) and the graph's outputs, it can live
in device memory instead: the graph takes a 0-d int64 tensor, the int arithmetic becomes 0-d tensor
arithmetic, and SymInt outputs are read back as ints after the replay. One graph then serves every
value, the way torch passes Python floats to graphs as tensors.

An int that reaches a shape, a stride, a view or any op not listed here is left alone (one graph
per value, as before).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Tensorified", "tensorify_int_inputs"]

aten = torch.ops.aten

#: Int arithmetic on SymInts -> the aten op on 0-d tensors (operand order kept).
_INT_OPS: dict[Any, Any] = {
    operator.add: aten.add.Tensor,
    operator.sub: aten.sub.Tensor,
    operator.mul: aten.mul.Tensor,
    torch.sym_max: aten.maximum.default,
    torch.sym_min: aten.minimum.default,
}

#: Element-wise ops whose Scalar operand may be a 0-d tensor instead (same overload or a twin).
_SCALAR_OPERAND: dict[Any, Any] = {
    aten.add.Tensor: aten.add.Tensor,
    aten.sub.Tensor: aten.sub.Tensor,
    aten.mul.Tensor: aten.mul.Tensor,
    aten.add.Scalar: aten.add.Tensor,
    aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor,
    aten.eq.Scalar: aten.eq.Tensor,
    aten.ne.Scalar: aten.ne.Tensor,
    aten.le.Scalar: aten.le.Tensor,
    aten.lt.Scalar: aten.lt.Tensor,
    aten.ge.Scalar: aten.ge.Tensor,
    aten.gt.Scalar: aten.gt.Tensor,
    aten.eq.Tensor: aten.eq.Tensor,
    aten.ne.Tensor: aten.ne.Tensor,
    aten.le.Tensor: aten.le.Tensor,
    aten.lt.Tensor: aten.lt.Tensor,
    aten.ge.Tensor: aten.ge.Tensor,
    aten.gt.Tensor: aten.gt.Tensor,
}


@dataclass(frozen=True)
class Tensorified:
    """Which graph inputs now take 0-d tensors and which outputs must be read back as ints."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def wrap(self, fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """``fn`` (the transformed graph) as a callable taking and returning ints again."""
        inputs, outputs = self.inputs, self.outputs

        def call(*args: Any) -> Any:
            given = list(args)
            for i in inputs:
                # A fill kernel with the value as its argument: no host-to-device copy to wait on.
                given[i] = torch.full((), int(given[i]), dtype=torch.int64, device=device)
            out = list(fn(*given))
            for j in outputs:
                out[j] = int(out[j].item())
            return out

        call.__name__ = call.__qualname__ = getattr(fn, "__name__", "tensorified")
        return call


def _symbols_in_shapes(gm: torch.fx.GraphModule) -> set[Any]:
    # Imported here: symbolic shapes load sympy, which `import npu_compile` should not pay for.
    from torch.fx.experimental.symbolic_shapes import free_symbols

    found: set[Any] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            found |= free_symbols((*value.shape, *value.stride(), value.storage_offset()))
    return found


def tensorify_int_inputs(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Tensorified | None:
    """Rewrite ``gm`` in place so that eligible SymInt inputs are 0-d int64 tensors.

    Returns:
        What changed, or ``None`` when no input qualified (``gm`` untouched).
    """
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    from torch.fx.experimental.symbolic_shapes import free_symbols

    in_shapes = _symbols_in_shapes(gm)
    candidates = [
        (index, node)
        for index, (node, value) in enumerate(zip(placeholders, example_inputs, strict=True))
        if isinstance(value, torch.SymInt) and not (free_symbols(value) & in_shapes)
    ]
    chosen = [(index, node) for index, node in candidates if _only_supported_uses(node)]
    if not chosen:
        return None
    graph = gm.graph
    tensor_of: dict[torch.fx.Node, torch.fx.Node] = {node: node for _, node in chosen}
    for node in list(graph.nodes):
        if node.op != "call_function" or node in tensor_of:
            continue
        touched = [a for a in node.args if isinstance(a, torch.fx.Node) and a in tensor_of]
        if not touched:
            continue
        args = tuple(tensor_of.get(a, a) if isinstance(a, torch.fx.Node) else a for a in node.args)
        if node.target in _INT_OPS:
            if node.target in (operator.add, operator.mul) and not isinstance(
                args[0], torch.fx.Node
            ):
                args = (args[1], args[0])  # the aten op wants the tensor first
            with graph.inserting_before(node):
                tensor_of[node] = graph.call_function(_int_op(node.target, args), args)
        else:
            node.target = _SCALAR_OPERAND[node.target]
            node.args = args
    output = next(node for node in graph.nodes if node.op == "output")
    results = output.args[0]
    flat = list(results) if isinstance(results, (tuple, list)) else [results]
    read_back = tuple(
        j for j, value in enumerate(flat) if isinstance(value, torch.fx.Node) and value in tensor_of
    )
    flat = [tensor_of.get(v, v) if isinstance(v, torch.fx.Node) else v for v in flat]
    output.args = (type(results)(flat) if isinstance(results, (tuple, list)) else flat[0],)
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.target in _INT_OPS and not node.users:
            graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return Tensorified(tuple(index for index, _ in chosen), read_back)


def _int_op(target: Any, args: tuple[Any, ...]) -> Any:
    op = _INT_OPS[target]
    # sym_max(x, 0) with a plain int needs the Scalar form of the op.
    if op is aten.maximum.default and not all(isinstance(a, torch.fx.Node) for a in args):
        return aten.clamp_min.default
    if op is aten.minimum.default and not all(isinstance(a, torch.fx.Node) for a in args):
        return aten.clamp_max.default
    return op


def _only_supported_uses(start: torch.fx.Node) -> bool:
    """Whether every use of ``start`` (through int arithmetic) is one this pass can rewrite."""
    pending, seen = [start], set()
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        for user in node.users:
            if user.op == "output":
                continue
            if user.op != "call_function" or user.kwargs:
                return False
            if user.target in _INT_OPS:
                ints = [a for a in user.args if not isinstance(a, torch.fx.Node)]
                if not all(isinstance(a, int) for a in ints):
                    return False
                if user.target in (torch.sym_max, torch.sym_min) and not isinstance(
                    user.args[0], torch.fx.Node
                ):
                    return False  # clamp forms need the tensor first
                if user.target is operator.sub and not isinstance(user.args[0], torch.fx.Node):
                    return False  # int - tensor would need rsub
                pending.append(user)
            elif user.target in _SCALAR_OPERAND:
                # The int must be the scalar operand (second), the first a real tensor.
                first = user.args[0]
                if first is node or not isinstance(first, torch.fx.Node):
                    return False
                if not isinstance(first.meta.get("val"), torch.Tensor):
                    return False
            else:
                return False
    return True
