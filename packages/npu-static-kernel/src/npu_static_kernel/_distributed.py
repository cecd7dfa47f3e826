"""Node coordination: one process per node builds and installs, the others wait and load.

Installing Ascend static kernels rewrites files of CANN's shared op library, so two processes on
one node must never install at the same time, and no process may load while an install is in
progress. The local rank 0 of each node builds (or finds the cached artifact) and installs;
every process of the node then meets at a barrier of a per-node gloo group and loads.
"""

from __future__ import annotations

import datetime
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from npu_static_kernel.errors import ConfigError, StaticKernelDisabledWarning

__all__ = ["NodeRole", "node_role", "resolve_node_role", "take_disabled_warning"]

# How long followers wait at the barrier for their node's build (CANN builds take minutes).
BUILD_TIMEOUT = datetime.timedelta(minutes=30)


@dataclass(frozen=True)
class NodeRole:
    """Where this process stands in its node.

    Attributes:
        is_leader: Whether this process builds and installs for its node.
        local_rank: Rank inside the node.
        local_world_size: Processes on the node (1 when not distributed).
        barrier: Blocks until every process of the node arrives (a no-op alone).
    """

    is_leader: bool
    local_rank: int
    local_world_size: int
    barrier: Callable[[], None]


def _no_barrier() -> None:
    return None


SINGLE = NodeRole(is_leader=True, local_rank=0, local_world_size=1, barrier=_no_barrier)


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(
            f"{name}={raw!r} is not a positive integer; set it to the number of processes "
            "started on each node (the same value on every node)"
        )
    return value


@dataclass
class _Resolved:
    key: tuple[Any, ...]
    role: NodeRole | None
    # Keeps the default process group alive while cached, so its id() identifies it.
    anchor: Any
    warned: bool = False
    error: ConfigError | None = None  # a bad LOCAL_WORLD_SIZE, raised again on every call


_resolved: _Resolved | None = None
_resolve_lock = threading.Lock()


def _job_key() -> tuple[tuple[Any, ...], Any]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return ("single",), None
    anchor = dist.group.WORLD
    key = (id(anchor), dist.get_world_size(), dist.get_rank(), os.environ.get("LOCAL_WORLD_SIZE"))
    return key, anchor


def resolve_node_role() -> NodeRole | None:
    """Work out this process's node role, once per process group.

    The first call in a multi-process job is collective (it creates one gloo group per node):
    every rank must make it at the same point. Later calls return the cached role, so any number
    of compilers share one set of groups.

    Returns:
        :data:`SINGLE` outside a multi-process job, the node role inside one, or None when
        ``LOCAL_WORLD_SIZE`` is missing in a multi-process job (the caller switches static
        kernels off: without it ranks cannot tell who shares a node).

    Raises:
        ConfigError: ``LOCAL_WORLD_SIZE`` is not a positive divisor of the world size.
    """
    global _resolved
    with _resolve_lock:
        key, anchor = _job_key()
        if _resolved is None or _resolved.key != key:
            try:
                _resolved = _Resolved(key=key, role=_resolve(), anchor=anchor)
            except ConfigError as error:
                _resolved = _Resolved(key=key, role=None, anchor=anchor, error=error)
        if _resolved.error is not None:
            raise _resolved.error
        return _resolved.role


def take_disabled_warning() -> bool:
    """True exactly once per process group when static kernels are off (warn the user then)."""
    with _resolve_lock:
        if _resolved is None or _resolved.role is not None or _resolved.warned:
            return False
        _resolved.warned = True
        return True


def node_role(strict: bool) -> NodeRole | None:
    """This process's node role, or None (with one warning per job) when static kernels are off.

    Meant to be called from ``StaticKernelCompiler.compile_static``: the warnings point at its
    caller.

    Raises:
        ConfigError: With ``strict``, when ``LOCAL_WORLD_SIZE`` is invalid.
    """
    try:
        role = resolve_node_role()
    except ConfigError as error:
        if strict:
            raise
        # Every rank reads the same environment, so every rank turns static kernels off
        # here and none is left waiting at a node barrier.
        if take_disabled_warning():
            warnings.warn(
                f"static kernels are off: {error}", StaticKernelDisabledWarning, stacklevel=3
            )
        return None
    if role is None and take_disabled_warning():
        warnings.warn(
            "static kernels are off: torch.distributed runs several processes but "
            "LOCAL_WORLD_SIZE is not set, so processes sharing a node cannot agree on "
            "who installs kernels; export LOCAL_WORLD_SIZE=<processes per node>",
            StaticKernelDisabledWarning,
            stacklevel=3,
        )
    return role


def _forget() -> None:
    """Drop the cached role (tests that fake ``torch.distributed`` start from scratch)."""
    global _resolved
    with _resolve_lock:
        _resolved = None


def _resolve() -> NodeRole | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return SINGLE
    raw = os.environ.get("LOCAL_WORLD_SIZE")
    if raw is None:
        return None
    world, rank = dist.get_world_size(), dist.get_rank()
    local_world = _positive_int("LOCAL_WORLD_SIZE", raw)
    if world % local_world:
        raise ConfigError(
            f"LOCAL_WORLD_SIZE={local_world} does not divide the world size {world}; set it to "
            "the number of processes per node, the same on every node"
        )
    # new_group is collective over the whole job: every rank creates every node's group, in order.
    mine: Any = None
    for node in range(world // local_world):
        ranks = list(range(node * local_world, (node + 1) * local_world))
        group = dist.new_group(ranks=ranks, backend="gloo", timeout=BUILD_TIMEOUT)
        if rank in ranks:
            mine = group

    def barrier() -> None:
        dist.barrier(group=mine)

    local_rank = rank % local_world
    return NodeRole(
        is_leader=local_rank == 0,
        local_rank=local_rank,
        local_world_size=local_world,
        barrier=barrier,
    )
