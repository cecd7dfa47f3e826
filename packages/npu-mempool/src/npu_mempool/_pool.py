"""Graph memory pools: the handle users share (mode 1) and the CPU byte arena behind it."""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["PoolHandle", "live_pool_bytes"]

# Same granularity as the CUDA caching allocator's smallest block, so emulated byte counts on CPU
# are in the same ballpark as device ones.
_ALIGN = 512

_LIVE_POOLS: weakref.WeakSet[PoolHandle] = weakref.WeakSet()


def live_pool_bytes() -> int:
    """Bytes held by every pool still alive in this process."""
    return sum(pool.nbytes for pool in list(_LIVE_POOLS))


class _Arena:
    """A real byte arena that emulates a device graph pool on CPU.

    One resizable ``UntypedStorage`` backs every static tensor of the pool, carved at offsets by a
    first-fit allocator, so tensors allocated at overlapping offsets really share memory. Rewinding
    to a checkpoint forgets the blocks allocated since, exactly like the device allocator's
    ``setCheckpointPoolState``: the next allocations land on the same bytes. Growing the storage
    keeps existing views valid because they hold the storage, not its address.
    """

    def __init__(self) -> None:
        self.storage = torch.empty(0, dtype=torch.uint8).untyped_storage()
        self._blocks: dict[int, tuple[int, int]] = {}
        self._next_id = 0
        self.high_water = 0

    def allocate(self, nbytes: int) -> tuple[int, int]:
        """Reserve ``nbytes``; return ``(block id, byte offset)``."""
        size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        offset = 0
        for start, length in sorted(self._blocks.values()):
            if start - offset >= size:
                break
            offset = max(offset, start + length)
        end = offset + size
        capacity = self.storage.nbytes()
        if end > capacity:
            self.storage.resize_(max(end, capacity + capacity // 2))
        self.high_water = max(self.high_water, end)
        block = self._next_id
        self._next_id += 1
        self._blocks[block] = (offset, size)
        return block, offset

    def free(self, block: int) -> None:
        # A block forgotten by a rewind is already free; its offset may belong to someone else now.
        self._blocks.pop(block, None)

    def checkpoint(self) -> dict[int, tuple[int, int]]:
        return dict(self._blocks)

    def rewind(self, state: dict[int, tuple[int, int]]) -> None:
        self._blocks = dict(state)

    def empty(
        self, shape: torch.Size, dtype: torch.dtype, stride: tuple[int, ...] | None = None
    ) -> tuple[int, torch.Tensor]:
        """A tensor carved from the arena; returns ``(block id, tensor)``.

        Contiguous unless ``stride`` is given, which must describe a dense, non-overlapping
        layout of ``shape`` (a permutation of the contiguous strides).
        """
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for dim in shape:
            numel *= dim
        block, offset = self.allocate(numel * itemsize)
        if stride is None:
            strides: list[int] = []
            step = 1
            for dim in reversed(shape):
                strides.append(step)
                step *= max(dim, 1)
            stride = tuple(reversed(strides))
        tensor = torch.empty(0, dtype=dtype)
        tensor.set_(self.storage, offset // itemsize, shape, stride)
        return block, tensor


class PoolHandle:
    """A graph memory pool that several graphs, and several runners, may capture into.

    Create one with :func:`npu_mempool.graph_pool_handle` and pass it as
    ``CaptureOptions(pool=handle)`` to share memory across runners (TorchAir mode 1).

    Attributes:
        device: The device whose memory the pool holds.
    """

    def __init__(self, device: torch.device, native: Any = None) -> None:
        self.device = device
        # Device pools: the allocator's pool id, the capture stream (the caching allocator binds
        # segments to the stream they were allocated on, so one stream per pool keeps them
        # reusable), a keep-alive graph and the bytes the pool grew by.
        self._native = native
        self._stream: Any = None
        self._keepalive: list[Any] = []
        self._grown = 0
        # No native pool id means an emulated pool: a CPU byte arena.
        self._arena = _Arena() if native is None else None
        # Rewind bookkeeping (mode 2): the state before the first capture and the tensors the
        # allocator still owns, which a rewind must neutralise.
        self._checkpoint: Any = None
        self._owned: list[torch.Tensor] = []
        # check_output_overwrite without rewinds: the replay counters of the pool's graphs in
        # capture order (a replay makes outputs of graphs captured after it stale).
        self._captured: list[Any] = []
        _LIVE_POOLS.add(self)

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds: the arena high-water mark on CPU, allocator growth on a device."""
        return self._arena.high_water if self._arena is not None else self._grown

    def __repr__(self) -> str:
        return f"PoolHandle(device={self.device}, nbytes={self.nbytes})"
