"""The call paths of one runner: their graphs, their pools, and the device they run on.

Path 0 uses the runner's pool (or the shared one of mode 1). A call whose graph on every earlier
path is busy (its outputs, or outputs of another graph of the same pool, are still in use) takes
the next path, which has a pool of its own, so no call overwrites memory a live tensor uses (see
[Note: output liveness] in ``_outputs``). :class:`CallPaths` keeps this bookkeeping: which pool
and backend a capture uses, when a pool is rewound (mode 2), and which graphs are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import torch

from npu_mempool._accel import first_tensor_device
from npu_mempool._counters import RecaptureReason
from npu_mempool._devices import GraphBackend, backend_for
from npu_mempool._entry import Entry
from npu_mempool._keys import Layout
from npu_mempool._options import CaptureOptions
from npu_mempool._pool import PoolHandle, state_of
from npu_mempool.errors import ConfigError

__all__ = ["CallPath", "CallPaths"]

log = logging.getLogger("npu_mempool")


class CallPath:
    """One call path: a set of graphs (one per key and input addresses) in one pool."""

    def __init__(self, pool: PoolHandle | None, rewinds: bool) -> None:
        self.pool = pool
        self.rewinds = rewinds
        self.entries: dict[Hashable, list[Entry]] = {}

    def graphs(self) -> int:
        return sum(map(len, self.entries.values()))

    def free(self) -> None:
        for entries in self.entries.values():
            for entry in entries:
                entry.discard()
        self.entries.clear()


class CallPaths:
    """Every call path of one runner, with the pools and graphs they hold.

    ``paths`` is one list for the runner's life (it is changed in place, never replaced), so the
    runner's dispatch may keep a reference to it.
    """

    def __init__(self, options: CaptureOptions) -> None:
        self._options = options
        self.paths: list[CallPath] = [CallPath(options.pool, options.rewinds_pool)]

    # -- what is held --------------------------------------------------------------------------

    def graphs(self) -> int:
        """Graphs held, over every key, input-address variant and call path."""
        return sum(path.graphs() for path in self.paths)

    def keys(self) -> tuple[Hashable, ...]:
        """Keys of the graphs held, in capture order."""
        keys: dict[Hashable, None] = {}
        for path in self.paths:
            keys.update(dict.fromkeys(k for k, v in path.entries.items() if v))
        return tuple(keys)

    def known(self, key: Hashable) -> bool:
        """Whether a graph of ``key`` exists on some call path."""
        return any(key in path.entries for path in self.paths)

    def pool_bytes(self) -> int:
        """Bytes of the distinct pools the paths use."""
        pools = {id(p.pool): p.pool for p in self.paths if p.pool is not None}
        return sum(pool.nbytes for pool in pools.values())

    def number(self, path: CallPath) -> int:
        """The 1-based number of ``path``, as logs and traces show it."""
        return self.paths.index(path) + 1

    # -- paths and graphs ----------------------------------------------------------------------

    def add_path(self, name: str) -> CallPath:
        """A new call path, for a call whose graphs on every path are busy."""
        # A pool of its own, even in mode 1: the shared pool is where the memory was busy.
        path = CallPath(None, self._options.reuse_pool_across_shapes)
        self.paths.append(path)
        log.debug(
            "GraphRunner %r: outputs of earlier calls are still in use; call path %d added",
            name,
            len(self.paths),
        )
        return path

    def recapture_reason(
        self, path: CallPath, key: Hashable, args: tuple[Any, ...], layout: Layout, known: bool
    ) -> RecaptureReason | None:
        """Why a graph of a ``known`` key is captured again on ``path`` (``None``: a new key)."""
        entries = path.entries.get(key)
        if entries:
            now = tuple(args[i].data_ptr() for i in layout.watched)
            moved = {
                i for i, a, b in zip(layout.watched, now, entries[0].ptrs, strict=True) if a != b
            }
            if moved.intersection(layout.mutated):
                return RecaptureReason.MUTATED_INPUT_MOVED
            return RecaptureReason.PARAMETER_MOVED
        if path is not self.paths[0] and known:
            return RecaptureReason.OUTPUTS_IN_USE
        return None

    def moved_parameters(
        self, path: CallPath, key: Hashable, args: tuple[Any, ...], layout: Layout
    ) -> list[int]:
        """Positions of the PARAMETER inputs at another address than ``key``'s graph on ``path``."""
        entries = path.entries.get(key)
        if not entries:
            return []
        params = set(layout.params)
        return [
            i
            for i, ptr in zip(layout.watched, entries[0].ptrs, strict=True)
            if i in params and args[i].data_ptr() != ptr
        ]

    def add(self, path: CallPath, key: Hashable, entry: Entry) -> None:
        """Keep ``entry`` as a graph of ``key`` on ``path``."""
        entries = path.entries.get(key)
        if entries:
            # Graphs of MUTATED tensors that died (a replaced KV cache) can never be right again;
            # those of other live tensors or parameter sets stay as variants.
            self.drop_dead(path, key)
        path.entries.setdefault(key, []).append(entry)

    def drop_dead(self, path: CallPath, key: Hashable) -> None:
        """Free the graphs of ``key`` on ``path`` captured for tensors that no longer exist."""
        entries = path.entries.get(key)
        if not entries:
            return
        for entry in [e for e in entries if not e.alive()]:
            entries.remove(entry)
            entry.discard()

    def discard_key(self, key: Hashable) -> None:
        """Free every graph of ``key``, on every path."""
        for path in self.paths:
            for entry in path.entries.pop(key, []):
                entry.discard()

    def free(self) -> None:
        """Free every graph and the runner's own pools; one path with the options' pool is left."""
        for path in self.paths:
            path.free()
        self.paths[:] = [CallPath(self._options.pool, self._options.rewinds_pool)]

    # -- pools and devices ---------------------------------------------------------------------

    def device_warmup(self, args: tuple[Any, ...]) -> int:
        """Eager calls the device of ``args`` needs before a capture."""
        return backend_for(first_tensor_device(args).type).default_warmup_runs

    def pool_for(
        self, path: CallPath, args: tuple[Any, ...], layout: Layout, name: str
    ) -> tuple[PoolHandle, GraphBackend]:
        """The pool ``path`` captures into (created on first use) and the device's backend."""
        devices = {args[i].device for i in layout.tensors}
        if len(devices) > 1:
            raise ConfigError(
                f"GraphRunner {name!r} got tensors on several devices "
                f"{sorted(map(str, devices))}; "
                "a graph runs on one device: move the inputs there first"
            )
        device = devices.pop() if devices else torch.device("cpu")
        if path.pool is not None and not _same_device(path.pool.device, device):
            raise ConfigError(
                f"CaptureOptions.pool is on {path.pool.device} but the inputs are on {device}; "
                f"create the pool with graph_pool_handle({str(device)!r})"
            )
        backend = backend_for(device.type)
        if path.pool is not None and state_of(path.pool).broken:
            # Another runner's failed capture broke this shared pool (mode 1): capturing into it
            # again could corrupt it, so this path goes on in a pool of its own.
            log.warning(
                "GraphRunner %r: its pool was left unusable by a failed capture (maybe of another "
                "runner sharing it); later graphs go into a new pool",
                name,
            )
            path.pool = None
            path.rewinds = self._options.reuse_pool_across_shapes
        if path.pool is None:
            path.pool = backend.new_pool(device)
        return path.pool, backend

    def rewind(self, path: CallPath, pool: PoolHandle, backend: GraphBackend, name: str) -> bool:
        """Ready ``pool`` for a capture: in mode 2, return it to its state before the first one.

        Returns whether the capture may go into ``pool``: not where an output in use lies in
        memory the allocator no longer protects (see :meth:`PoolState.protects_lent_memory`).
        """
        state = state_of(pool)
        if not path.rewinds:
            return state.protects_lent_memory()
        if not state.has_checkpoint:
            if not backend.checkpoint(pool):
                log.warning(
                    "GraphRunner %r: this device has no allocator checkpoint hooks, so graphs "
                    "of different shapes will not share memory (mode 2 off)",
                    name,
                )
                path.rewinds = False
            return True
        if state.in_use():
            # Outputs of this pool are still held: the new graph goes on top this time, unless
            # they lie in memory an earlier rewind gave back.
            log.debug("GraphRunner %r: pool outputs in use, capture without rewind", name)
            return state.protects_lent_memory()
        if not backend.rewind(pool):
            log.warning(
                "GraphRunner %r: its graph pool holds memory that its graphs do not own (a "
                "tensor created during capture and kept alive); rewinding would free it, so "
                "graphs of different shapes no longer share memory (mode 2 off)",
                name,
            )
            path.rewinds = False
        return True

    def capture_failed(self, path: CallPath, pool: PoolHandle, name: str) -> None:
        """A capture into ``pool`` failed: a pool it left unusable is not used again."""
        if state_of(pool).broken and path.pool is pool:
            log.warning(
                "GraphRunner %r: a failed capture left its pool unusable; later graphs go "
                "into a new pool",
                name,
            )
            path.pool = None
            path.rewinds = self._options.reuse_pool_across_shapes


def _same_device(pool: torch.device, tensors: torch.device) -> bool:
    # "cuda" (no index) names the current device; only a mismatch of explicit indices is wrong.
    if pool.type != tensors.type:
        return False
    explicit: tuple[int | None, int | None] = (pool.index, tensors.index)
    return None in explicit or explicit[0] == explicit[1]
