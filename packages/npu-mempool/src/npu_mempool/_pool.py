"""Graph memory pools: the handle users share (mode 1), its bookkeeping, and the CPU arena."""

from __future__ import annotations

import functools
import mmap
import threading
import weakref
from collections.abc import Callable, Iterable, KeysView
from typing import Any, Protocol

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["Lender", "PoolHandle", "PoolState", "live_pool_bytes", "state_of"]

# Same granularity as the CUDA caching allocator's smallest block, so emulated byte counts on CPU
# are in the same ballpark as device ones.
_ALIGN = 512
# Address space reserved per arena chunk; pages are committed only when written.
_CHUNK = 64 << 20

_LIVE_POOLS: weakref.WeakSet[PoolHandle] = weakref.WeakSet()


def live_pool_bytes() -> int:
    """Bytes held by every pool still alive in this process."""
    return sum(pool.nbytes for pool in list(_LIVE_POOLS))


#: A byte range of an arena: (chunk index, start, end).
Span = tuple[int, int, int]
#: What the emulation writes where a device graph's intermediates could lie: 0xFF bytes read as
#: NaN in every floating dtype and -1 in every signed integer dtype, never as a plausible result.
_SCRIBBLE = 0xFF


class _Arena:
    """A real byte arena that emulates a device graph pool on CPU.

    Memory comes in chunks that never move (anonymous memory maps, committed only where touched),
    carved at offsets by a first-fit allocator, so tensors allocated at overlapping offsets really
    share memory. Every tensor gets a storage of its own over its bytes, as a device allocation
    does: liveness of one output is its storage's use count, and a storage keeps its chunk mapped
    for as long as any tensor uses it, even after the pool is gone. Rewinding to a checkpoint
    forgets the blocks allocated since (the next allocations land on the same bytes), exactly like
    the device allocator's ``setCheckpointPoolState``, except blocks the caller says are still in
    use.

    [Note: emulated intermediates] Only static inputs and outputs are carved here; the work in
    between runs in ordinary CPU memory. On a device, a capture also allocates its intermediates
    from the pool, in whatever blocks are free at that moment, and every replay writes them
    again. So the emulation writes a poison pattern over every byte of the pool that was free
    when a graph's capture began (:meth:`free_spans`), at that capture and at each of its replays
    (:meth:`scribble`), except the graph's own blocks. A held output whose memory the allocator
    no longer protects (a block forgotten by a rewind, a freed graph's block) is then overwritten
    on CPU as it would be on a device, and tests see it.
    """

    def __init__(self) -> None:
        self._chunks: list[mmap.mmap] = []
        # The chunks as flat byte tensors (over the same memory), for scribbling.
        self._views: list[torch.Tensor] = []
        # block id -> (chunk index, byte offset, byte length)
        self._blocks: dict[int, tuple[int, int, int]] = {}
        self._next_id = 0
        self._ends: list[int] = []  # high-water mark per chunk
        # The storage of each block's tensor, weakly, and the blocks released while their
        # storage lived on: freed once it dies (see :meth:`release`).
        self._storages: dict[int, StorageWeakRef] = {}
        self._released: set[int] = set()

    @property
    def high_water(self) -> int:
        """Bytes of the pool ever in use at once, per chunk, summed."""
        return sum(self._ends)

    @property
    def chunks(self) -> int:
        """Chunks mapped so far."""
        return len(self._chunks)

    @property
    def allocated(self) -> int:
        """Bytes of the blocks allocated now (what the allocator would not hand out)."""
        self.sweep()
        return sum(length for _, _, length in self._blocks.values())

    def blocks(self) -> set[int]:
        """The ids of the blocks allocated now."""
        self.sweep()
        return set(self._blocks)

    def free_spans(self) -> list[Span]:
        """The byte ranges no block covers now, up to each chunk's end.

        See [Note: emulated intermediates]; chunks added later are free as a whole
        (:meth:`scribble` adds them).
        """
        spans: list[Span] = []
        for chunk, memory in enumerate(self._chunks):
            offset = 0
            for start, length in sorted(
                (start, length) for c, start, length in self._blocks.values() if c == chunk
            ):
                if start > offset:
                    spans.append((chunk, offset, start))
                offset = max(offset, start + length)
            spans.append((chunk, offset, len(memory)))
        return spans

    def spans_of(self, blocks: list[int]) -> list[Span]:
        """The byte ranges of ``blocks`` (those still allocated), sorted."""
        return sorted(
            (chunk, offset, offset + length)
            for chunk, offset, length in (self._blocks[b] for b in blocks if b in self._blocks)
        )

    def scribble(self, spans: list[Span], chunks: int, own: list[Span]) -> None:
        """Poison ``spans`` and every chunk from index ``chunks`` on, but not the ranges ``own``.

        Only below each chunk's high-water mark: nothing above it was ever handed out. ``own``
        are a graph's own blocks as :meth:`spans_of` gave them at its capture (a rewind since
        may have forgotten them, but the graph still writes there).
        """
        spans = spans + [(c, 0, len(self._chunks[c])) for c in range(chunks, len(self._chunks))]
        mine = [(chunk, begin, end - begin) for chunk, begin, end in own]
        for chunk, start, end in spans:
            end = min(end, self._ends[chunk])
            for c, begin, length in mine:
                if c != chunk or begin + length <= start or begin >= end:
                    continue
                if begin > start:
                    self._views[chunk][start:begin].fill_(_SCRIBBLE)
                start = max(start, begin + length)
            if end > start:
                self._views[chunk][start:end].fill_(_SCRIBBLE)

    def _fit(self, chunk: int, size: int) -> int | None:
        offset = 0
        taken = sorted((start, length) for c, start, length in self._blocks.values() if c == chunk)
        for start, length in taken:
            if start - offset >= size:
                break
            offset = max(offset, start + length)
        return offset if offset + size <= len(self._chunks[chunk]) else None

    def allocate(self, nbytes: int) -> tuple[int, int, int]:
        """Reserve ``nbytes``; return ``(block id, chunk index, byte offset)``."""
        self.sweep()
        size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        for chunk in range(len(self._chunks)):
            offset = self._fit(chunk, size)
            if offset is not None:
                break
        else:
            memory = mmap.mmap(-1, max(size, _CHUNK))
            self._chunks.append(memory)
            with torch.inference_mode(False):
                self._views.append(torch.frombuffer(memory, dtype=torch.uint8))
            self._ends.append(0)
            chunk, offset = len(self._chunks) - 1, 0
        self._ends[chunk] = max(self._ends[chunk], offset + size)
        block = self._next_id
        self._next_id += 1
        self._blocks[block] = (chunk, offset, size)
        return block, chunk, offset

    def free(self, block: int) -> None:
        # A block forgotten by a rewind is already free; its offset may belong to someone else now.
        self._blocks.pop(block, None)
        self._storages.pop(block, None)
        self._released.discard(block)

    def release(self, block: int) -> None:
        """Free ``block`` once no tensor uses its storage any more (now, if none does).

        What a device allocator does when a graph is reset: the memory of a static buffer or
        output stays allocated while a tensor holds it (the runner's records of it, an output
        the caller kept), and goes back to the pool when the last one dies. (:meth:`free` is for
        blocks whose tensors are known dead.)
        """
        storage = self._storages.get(block)
        if storage is None or storage.expired():  # type: ignore[no-untyped-call]
            self.free(block)
        else:
            self._released.add(block)

    def sweep(self) -> None:
        """Free the released blocks whose storages died since."""
        if not self._released:
            return
        for block in list(self._released):
            if self._storages[block].expired():  # type: ignore[no-untyped-call]
                self.free(block)

    def checkpoint(self) -> dict[int, tuple[int, int, int]]:
        self.sweep()
        return dict(self._blocks)

    def rewind(self, state: dict[int, tuple[int, int, int]], keep: set[int]) -> None:
        """Forget every block allocated since ``state`` except the block ids in ``keep``."""
        kept = {block: self._blocks[block] for block in keep if block in self._blocks}
        self._blocks = {**dict(state), **kept}
        # Forgotten blocks are free already: their storages no longer count.
        for block in set(self._storages) - set(self._blocks):
            self._storages.pop(block)
            self._released.discard(block)

    def empty(
        self, shape: torch.Size, dtype: torch.dtype, stride: tuple[int, ...] | None = None
    ) -> tuple[int, torch.Tensor]:
        """A tensor carved from the arena, with a storage of its own; returns ``(block, tensor)``.

        Contiguous unless ``stride`` is given, which must describe a layout whose elements do not
        overlap (dense, or with gaps between them, as a slice has); the storage reaches as far as
        the strides do.
        """
        itemsize = torch.empty((), dtype=dtype).element_size()
        if stride is None:
            strides: list[int] = []
            step = 1
            for dim in reversed(shape):
                strides.append(step)
                step *= max(dim, 1)
            stride = tuple(reversed(strides))
        nbytes = _span(shape, stride) * itemsize
        block, chunk, offset = self.allocate(nbytes)
        # Normal tensors even under inference_mode: replays copy into them in any mode.
        with torch.inference_mode(False):
            raw = torch.frombuffer(
                self._chunks[chunk], dtype=torch.uint8, count=max(nbytes, 1), offset=offset
            )
            tensor = torch.empty(0, dtype=dtype)
            tensor.set_(raw.untyped_storage(), 0, shape, stride)
        self._storages[block] = StorageWeakRef(tensor.untyped_storage())  # type: ignore[no-untyped-call]
        return block, tensor


class Lender(Protocol):
    """A graph that hands out outputs in pool memory (an ``_entry.Entry``)."""

    #: Graphs of the pool whose outputs were alive when this one was captured (weakly).
    coexists: tuple[weakref.ref[Any], ...]
    #: The pool's rewind count when it was captured (:attr:`PoolState.epoch`).
    epoch: int

    def in_use(self) -> bool:
        """Whether an output it handed out (or a view of one) is still alive."""

    def release_stale(self) -> bool:
        """Take back outputs of ended steps; return whether its memory is now free."""

    def free(self) -> None:
        """Free the graph and the pool memory only it holds (its outputs are no longer used)."""


class PoolState:
    """Everything the package keeps about one pool; reached with :func:`state_of`.

    Device handles (pool id, capture stream, byte counts) are plain attributes the device
    backend owns. The rest is bookkeeping that several modules consult, so it is kept behind
    methods: which graphs lent out outputs (liveness before a replay or a rewind), the rewind
    checkpoint and the tensors a rewind must neutralise (mode 2), whether a failed capture broke
    the pool, and the lock that serialises every runner capturing into it.
    """

    def __init__(self, native: Any) -> None:
        # Device pools: the allocator's pool id, the capture stream (the caching allocator binds
        # segments to the stream they were allocated on, so one stream per pool keeps them
        # reusable), a keep-alive graph and the bytes the pool grew by.
        self.native = native
        self.stream: Any = None
        self.keepalive: list[Any] = []
        self.grown = 0
        # Reads the pool's exact bytes from the allocator (None where it cannot tell); set by the
        # device backend at the first capture, called only when the bytes are asked for.
        self.measure: Callable[[], int | None] | None = None
        # No native pool id means an emulated pool: a CPU byte arena.
        self.arena = _Arena() if native is None else None
        # Held by every runner that captures into this pool while it picks a graph, replays it
        # and hands its outputs out: graphs of one pool share memory, so two callers (two
        # threads, two runners) must never replay them at the same time.
        self.lock = threading.RLock()
        # Rewind bookkeeping (mode 2): the state before the first capture and the tensors the
        # allocator still owns, which a rewind must neutralise.
        self._checkpoint: Any = None
        # Per graph (by identity), dropped when the graph is freed: a record that outlived its
        # graph would keep that graph's memory allocated until the next rewind, which a loop
        # that always holds an output never reaches.
        self._owned: dict[int, list[torch.Tensor]] = {}
        # Graphs of this pool whose outputs were handed out and may still be held: before a
        # replay or a rewind, their outputs' liveness decides whether the pool memory is free.
        # Changed in place only: graphs keep a view of its keys (lenders()).
        self._lent: dict[int, weakref.ref[Any]] = {}
        # Graphs the runner let go of (a recapture, a dead KV cache, a failed capture, a reset)
        # while outputs they handed out were still in use: held here, and lenders still, until
        # those outputs die or are taken back, so that no rewind or capture hands their memory
        # out. Freed then (see :meth:`in_use`).
        self._retired: dict[int, Lender] = {}
        # Graphs whose outputs static BoundGraphs hand out (GraphRunner.bind(static_outputs=True)),
        # by identity (weakly, with the number of such bound graphs), once each was seen free of
        # any other output in use. Kept apart from _lent: every checked path counts them as
        # lenders whose outputs are in use, but a static bound graph does not (the outputs of
        # static bound graphs are valid until the next call of any of the pool's, vLLM's
        # contract), so its one question before a replay is whether _lent is empty.
        self._static: dict[int, list[Any]] = {}
        # Rewinds so far: a graph captured before the last one may hold outputs in memory the
        # allocator has since given to later captures (see :meth:`protects_lent_memory`).
        self.epoch = 0
        # A device capture into this pool failed: no further capture may use it.
        self._broken = False

    # -- outputs lent out ----------------------------------------------------------------------

    def lending(self, lender: Lender) -> Callable[[], None]:
        """A function that records ``lender`` as having handed outputs out of this pool.

        Called on every hand-out, so it is made once per graph and costs one C call (the
        lender is held weakly: the record must not keep a freed graph alive).
        """
        return functools.partial(self._lent.__setitem__, id(lender), weakref.ref(lender))

    def lenders(self) -> KeysView[int]:
        """The identities of the graphs recorded as lenders: a live view, read without a call.

        A graph compares it with its own identity before each replay: while no other graph is
        recorded, :meth:`in_use` has nothing to look at.
        """
        return self._lent.keys()

    def hold_static(self, lender: Lender) -> None:
        """A static bound graph hands out ``lender``'s outputs from now on (see ``_static``).

        Only once no other output of ``lender`` is in use, and while its runner holds it (a
        graph let go of is never held): its record as a checked lender goes.
        """
        held = self._static.get(id(lender))
        if held is None:
            self._static[id(lender)] = [weakref.ref(lender), 1]
        else:
            held[1] += 1
        self._lent.pop(id(lender), None)

    def drop_static(self, lender: Lender) -> None:
        """One static bound graph of ``lender`` no longer hands out its outputs.

        Where its outputs are still in use (the caller kept one), ``lender`` is a checked lender
        again, so that nothing overwrites them.
        """
        held = self._static.get(id(lender))
        if held is None:
            return
        held[1] -= 1
        if held[1] <= 0:
            del self._static[id(lender)]
            if lender.in_use():
                self._lent[id(lender)] = weakref.ref(lender)

    def static_holders(self) -> KeysView[int]:
        """The graphs whose outputs static bound graphs hand out: a live view, like lenders()."""
        return self._static.keys()

    def forget(self, lender: Lender) -> None:
        """Stop tracking ``lender`` (it is being freed)."""
        self._lent.pop(id(lender), None)
        self._static.pop(id(lender), None)

    def retire(self, lender: Lender) -> None:
        """Keep ``lender``, which its runner let go of, until its outputs are no longer used.

        Until then it counts as a lender like any other graph: no rewind happens, no graph that
        could overlap its outputs replays, and a capture allocates around them. It is freed
        (:meth:`Lender.free`) the first time :meth:`in_use` finds its outputs dead or taken back.
        """
        self._retired[id(lender)] = lender
        self._lent[id(lender)] = weakref.ref(lender)

    def retired(self) -> int:
        """Graphs let go of whose outputs are still in use (for tests and diagnostics)."""
        return len(self._retired)

    def in_use(self, but: Lender | None = None, *, besides_static: bool = False) -> bool:
        """Whether outputs handed out by graphs of this pool (other than ``but``) are alive.

        Graphs found idle are forgotten, so the check costs one look per graph still lent out.
        ``besides_static``: the question of a static bound graph, for which the outputs of the
        pool's other static bound graphs are not in use (see ``_static``).
        """
        lent = self._lent
        coexists = but.coexists if but is not None else ()
        if not besides_static:
            # The outputs static bound graphs hold are in use for every checked path.
            # A snapshot: a bound graph collected meanwhile drops its record (a finalizer).
            for ref, _ in tuple(self._static.values()):
                holder = ref()
                if (
                    holder is not None
                    and holder is not but
                    and not any(other() is holder for other in coexists)
                ):
                    return True
        if not lent or (but is not None and len(lent) == 1 and id(but) in lent):
            return False  # nothing lent, or only the graph the caller checked itself
        busy = False
        static = self._static if besides_static else {}
        for ident, ref in list(lent.items()):
            lender = ref()
            if lender is but or ident in static:
                continue  # the caller checked it, or a static bound graph hands it out
            if lender is not None and any(other() is lender for other in coexists):
                continue  # its live outputs were live when `but` was captured: no overlap
            if lender is None or not lender.in_use() or lender.release_stale():
                lent.pop(ident, None)
                retired = self._retired.pop(ident, None)
                if retired is not None:
                    retired.free()
            else:
                busy = True
        return busy

    def live_lenders(self) -> tuple[weakref.ref[Any], ...]:
        """The graphs whose handed-out outputs are alive now (asked before a capture)."""
        lent = tuple(
            ref for ref in self._lent.values() if (lender := ref()) is not None and lender.in_use()
        )
        return lent + tuple(ref for ref, _ in tuple(self._static.values()) if ref() is not None)

    def protects_lent_memory(self) -> bool:
        """Whether the allocator still protects the memory of every output in use.

        Asked before a capture into the pool without a rewind. A graph captured before the last
        rewind keeps its static addresses, which the rewind gave back to the allocator (graphs
        of different shapes share memory, and replay in turn); an output it handed out after
        the rewind lies in memory the allocator may hand to the new capture, for its outputs or
        its intermediates. Such a capture must go into another pool.
        """
        return all(
            lender.epoch == self.epoch
            for ref in self._lent.values()
            if (lender := ref()) is not None and lender.in_use()
        ) and all(
            holder.epoch == self.epoch
            for ref, _ in tuple(self._static.values())
            if (holder := ref()) is not None
        )

    # -- rewind (mode 2) -----------------------------------------------------------------------

    @property
    def has_checkpoint(self) -> bool:
        """Whether a rewind target was saved."""
        return self._checkpoint is not None

    @property
    def checkpoint(self) -> Any:
        """The saved rewind target (allocator state, or the arena's block table)."""
        return self._checkpoint

    def save_checkpoint(self, state: Any) -> None:
        """Remember ``state`` as what a rewind returns the pool to."""
        self._checkpoint = state

    def own(self, lender: object, tensors: Iterable[torch.Tensor]) -> None:
        """Record pool tensors of ``lender`` a later rewind must neutralise (its static buffers)."""
        self._owned.setdefault(id(lender), []).extend(tensors)

    def disown(self, lender: object) -> None:
        """``lender`` is freed: its tensors are no longer the pool's to neutralise."""
        self._owned.pop(id(lender), None)

    def owned(self) -> tuple[torch.Tensor, ...]:
        """The tensors recorded since the last rewind, of the graphs not freed since."""
        return tuple(tensor for tensors in self._owned.values() for tensor in tensors)

    def rewound(self) -> None:
        """The pool was rewound: the recorded tensors no longer own their memory."""
        self._owned.clear()
        self.epoch += 1

    # -- failure -------------------------------------------------------------------------------

    @property
    def broken(self) -> bool:
        """Whether a failed device capture left the pool unusable for further captures."""
        return self._broken

    def mark_broken(self) -> None:
        """A device capture into the pool failed: no further capture may use it."""
        self._broken = True

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds: the arena high-water mark on CPU, its segments on a device.

        On a device, the segments the allocator holds for the pool, read now; where the allocator
        cannot list them, what the device's reserved memory grew by during the captures.
        """
        if self.arena is not None:
            return self.arena.high_water
        exact = self.measure() if self.measure is not None else None
        return self.grown if exact is None else exact


class PoolHandle:
    """A graph memory pool that several graphs, and several runners, may capture into.

    Create one with :func:`npu_mempool.graph_pool_handle` and pass it as
    ``CaptureOptions(pool=handle)`` to share memory across runners (TorchAir mode 1).

    Attributes:
        device: The device whose memory the pool holds.
    """

    def __init__(self, device: torch.device, native: Any = None) -> None:
        self.device = device
        self._state = PoolState(native)
        _LIVE_POOLS.add(self)

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds: arena high-water mark on CPU, allocator segments on a device."""
        return self._state.nbytes

    def __repr__(self) -> str:
        return f"PoolHandle(device={self.device}, nbytes={self.nbytes})"


def state_of(pool: PoolHandle) -> PoolState:
    """The package's bookkeeping of ``pool`` (kept off the public handle)."""
    return pool._state


def _span(shape: torch.Size, stride: tuple[int, ...]) -> int:
    """The elements of storage a tensor of ``shape`` and ``stride`` reaches (0 when empty)."""
    if any(dim == 0 for dim in shape):
        return 0
    return 1 + sum((dim - 1) * step for dim, step in zip(shape, stride, strict=True))
