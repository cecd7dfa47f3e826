"""Checks a loaded graph must pass before it runs: op types, edge dtypes, cycles, group members."""

from __future__ import annotations

from pathlib import Path

from npu_graph_export._dtypes import dtype_name
from npu_graph_export._opdefs import OPS
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import RuntimeInputError
from npu_graph_export.runtime._kernels import KERNELS
from npu_graph_export.runtime._parse import STRUCTURAL, bad, group_members


def check_ops(graph: ge.GraphDef, path: Path) -> dict[str, ge.OpDef]:
    """The graph's ops by name; names must be unique and every type one the runtime runs."""
    ops: dict[str, ge.OpDef] = {}
    for op in graph.op:
        if op.name in ops:
            raise bad(path, f"two ops are named {op.name!r}")
        if op.type not in OPS or (op.type not in KERNELS and op.type not in STRUCTURAL):
            raise bad(path, f"op {op.name!r} has type {op.type!r}, which is not supported")
        ops[op.name] = op
    return ops


def check_edge_dtypes(
    ops: dict[str, ge.OpDef], edges: dict[str, list[tuple[str, int]]], path: Path
) -> None:
    """Refuse an edge whose producer and consumer declare different dtypes."""
    # The runtime casts each result to its op's declared output dtype: a declaration that
    # disagrees with what the consumer (or NetOutput) declares reading would silently turn
    # the numbers into another type (a float result into int8), so refuse the graph.
    for name, op_edges in edges.items():
        consumer = ops[name]
        data_edges = [(p, i) for p, i in op_edges if i >= 0]
        for position, (producer, index) in enumerate(data_edges):
            outputs = ops[producer].output_desc
            if position >= len(consumer.input_desc) or index >= len(outputs):
                continue
            made, read = outputs[index].dtype, consumer.input_desc[position].dtype
            if made and read and made != read:
                raise bad(
                    path,
                    f"op {producer!r} declares output {index} as {dtype_name(made)} but "
                    f"{name!r} reads it as {dtype_name(read)} (input {position})",
                )


def topological_order(
    ops: dict[str, ge.OpDef], edges: dict[str, list[tuple[str, int]]], path: Path
) -> list[str]:
    """Op names in an order that runs every producer before its users; a cycle is refused."""
    pending = {name: len({p for p, _ in op_edges}) for name, op_edges in edges.items()}
    users: dict[str, list[str]] = {name: [] for name in ops}
    for name, op_edges in edges.items():
        for producer in {p for p, _ in op_edges}:
            users[producer].append(name)
    ready = [name for name, count in pending.items() if count == 0]
    order: list[str] = []
    while ready:
        name = ready.pop()
        order.append(name)
        for user in users[name]:
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    if len(order) != len(ops):
        raise bad(path, "the graph has a cycle")
    return order


def collective_ranks(graph: ge.GraphDef, collectives: str, rank: int, path: Path) -> dict[str, int]:
    """This process's position in each collective's group (the chunk reduce-scatter keeps)."""
    positions: dict[str, int] = {}
    if collectives != "replicated":
        return positions  # collectives raise when run
    for op in graph.op:
        if not op.type.startswith("Hcom"):
            continue
        members = group_members(op)
        if members is None:
            continue  # an HCCL group name: its size and members are GE's to know
        if rank not in members:
            raise RuntimeInputError(
                f"{path}: rank {rank} is not a member of the group of {op.type} "
                f"{op.name!r} (ranks {members}); pass rank= (--rank) of a member"
            )
        positions[op.name] = members.index(rank)
    return positions
