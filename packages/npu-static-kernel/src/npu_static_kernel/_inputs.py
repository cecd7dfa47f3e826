"""A graph's runtime arguments: their one-line descriptions and copies of those the graph writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["describe", "protected_args"]


def describe(arg: Any) -> str:
    """One line for logs and cache entries: ``float32[2, 3]``, ``int=4``, a type name."""
    if isinstance(arg, torch.Tensor):
        text = f"{str(arg.dtype).removeprefix('torch.')}{list(arg.shape)}"
        if not arg.is_contiguous():
            text += f"@stride{list(arg.stride())}"
        return text
    if isinstance(arg, (bool, int, float)):
        return f"{type(arg).__name__}={arg}"
    return type(arg).__name__


def _mutated_positions(gm: torch.fx.GraphModule) -> set[int]:
    """Positions of placeholders that an op of the graph writes to (``copy_``, ``add_``...)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {node: i for i, node in enumerate(placeholders)}
    written: set[int] = set()
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = (
                node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            )
            if isinstance(value, torch.fx.Node) and value in index:
                written.add(index[value])
    return written


def protected_args(gm: torch.fx.GraphModule, args: Sequence[Any]) -> list[Any]:
    """Copies of the mutated tensor arguments (same strides), so recording changes no input."""
    protected = list(args)
    for position in _mutated_positions(gm):
        if position < len(protected) and isinstance(protected[position], torch.Tensor):
            original = protected[position]
            copy = torch.empty_strided(
                original.size(), original.stride(), dtype=original.dtype, device=original.device
            )
            protected[position] = copy.copy_(original)
    return protected
