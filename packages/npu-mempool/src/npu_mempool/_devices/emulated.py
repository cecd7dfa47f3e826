"""CPU graphs with device semantics: static buffers in a real arena, overwritten on replay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from npu_mempool._devices.base import Body, Graph, Rerun, static_strides
from npu_mempool._devices.registry import DeviceType
from npu_mempool._pool import PoolHandle, Span, state_of

__all__ = ["DEVICE", "EmulatedBackend", "EmulatedGraph"]


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``tensor`` as a flat uint8 tensor (no copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


class EmulatedGraph:
    """Replay re-runs the captured callable and copies its results into the static outputs.

    Each replay first poisons the pool memory a device replay could write intermediates to:
    what was free when the capture began, less the graph's own blocks (see [Note: emulated
    intermediates] in ``_pool``).
    """

    def __init__(
        self,
        rerun: Rerun,
        dst: list[torch.Tensor],
        src: list[int],
        pool: PoolHandle,
        blocks: list[int],
        shared: Sequence[tuple[torch.Tensor, int]] = (),
        scratch: tuple[list[Span], int] = ([], 0),
    ) -> None:
        self._rerun: Rerun | None = rerun
        self._dst = dst
        self._src = src
        self._shared = list(shared)
        # The pool's state, not its handle: a graph kept after its runner let it go must not keep
        # the handle alive (see Entry.pool).
        self._state = state_of(pool)
        self._blocks = blocks
        # Where a device graph's intermediates could lie: the spans free at the capture's start,
        # and every chunk mapped since, less the graph's own blocks.
        self._scratch = scratch
        self._own = self._state.arena.spans_of(blocks)  # type: ignore[union-attr]

    def replay(self, args: tuple[Any, ...]) -> None:
        rerun = self._rerun
        if rerun is None:
            raise RuntimeError("replay() of a graph that was reset; capture it again")
        # A device replay records no autograd history, and writes into its static outputs in any
        # grad mode; so does the emulation.
        if torch.is_grad_enabled():
            with torch.no_grad():
                self._run(rerun, args)
        else:
            self._run(rerun, args)

    def _run(self, rerun: Rerun, args: tuple[Any, ...]) -> None:
        arena = self._state.arena
        assert arena is not None
        spans, chunks = self._scratch
        arena.scribble(spans, chunks, self._own)
        out = rerun(args)
        if self._src:
            torch._foreach_copy_(self._dst, [out[i] for i in self._src])
        # Outputs that are views of one storage: its bytes are copied whole, views kept.
        for base, index in self._shared:
            source = _bytes_of(out[index])
            base[: source.numel()].copy_(source)

    def reset(self) -> None:
        # As a device allocator does: a block goes back to the pool once no tensor holds it.
        arena = self._state.arena
        assert arena is not None
        # Its outputs go too: a caller still holding the graph (a bound graph's replay step,
        # until its next call follows the runner's new graph) must not keep their blocks.
        self._dst = []
        self._shared = []
        for block in self._blocks:
            arena.release(block)
        self._blocks = []
        self._rerun = None


class EmulatedBackend:
    """CPU graphs with device semantics (static buffers in a real arena, overwrite on replay)."""

    name = "cpu-emulated"
    executes_on_capture = True
    default_warmup_runs = 0

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(torch.device("cpu"))

    def capture(
        self, pool: PoolHandle, body: Body, error_mode: str = "thread_local"
    ) -> tuple[Graph, list[Any]]:
        # error_mode: the CPU has no capture that another thread's call could invalidate.
        arena = state_of(pool).arena
        assert arena is not None, "an emulated graph needs a CPU pool"
        blocks: list[int] = []
        # A device capture allocates its intermediates from whatever the pool has free now.
        scratch = (arena.free_spans(), arena.chunks)
        arena.scribble(*scratch, own=[])

        def static_like(x: torch.Tensor) -> torch.Tensor:
            block, tensor = arena.empty(x.shape, x.dtype, static_strides(x))
            blocks.append(block)
            # The emulated capture runs the callable, so it must see the real input values.
            tensor.copy_(x)
            return tensor

        with torch.no_grad():
            try:
                leaves, rerun, inputs = body(static_like)
            except BaseException:
                # A failed capture keeps nothing: its static inputs go back to the pool, as a
                # device's failed capture gives its allocations back when its graph goes.
                for block in blocks:
                    arena.free(block)
                raise
            # Outputs that alias an input (a view of a KV cache, of a static input) are live
            # memory already updated by the re-run; everything else gets a static buffer.
            aliased = {t.untyped_storage()._cdata for t in inputs}
            static: list[Any] = list(leaves)
            dst: list[torch.Tensor] = []
            src: list[int] = []
            seen: dict[int, torch.Tensor] = {}
            # Distinct output tensors per storage: views of one another share a static storage,
            # as on a device, where they are views into one pool allocation.
            by_storage: dict[int, set[int]] = {}
            for leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    by_storage.setdefault(leaf.untyped_storage()._cdata, set()).add(id(leaf))
            shared: list[tuple[torch.Tensor, int]] = []
            bases: dict[int, torch.Tensor] = {}
            for i, leaf in enumerate(leaves):
                if not isinstance(leaf, torch.Tensor) or leaf.untyped_storage()._cdata in aliased:
                    continue
                if id(leaf) in seen:  # the same tensor returned twice stays one buffer
                    static[i] = seen[id(leaf)]
                    continue
                storage = leaf.untyped_storage()
                if len(by_storage[storage._cdata]) > 1:
                    base = bases.get(storage._cdata)
                    if base is None:
                        block, base = arena.empty(torch.Size([storage.nbytes()]), torch.uint8)
                        blocks.append(block)
                        base.copy_(_bytes_of(leaf))
                        bases[storage._cdata] = base
                        shared.append((base, i))
                    with torch.inference_mode(False):
                        buffer = torch.empty(0, dtype=leaf.dtype)
                        start = base.storage_offset() // leaf.element_size() + leaf.storage_offset()
                        buffer.set_(base.untyped_storage(), start, leaf.shape, leaf.stride())
                    seen[id(leaf)] = static[i] = buffer
                    continue
                # Strides as a device output would have them (those of empty_like: the
                # layout of a dense result, a transposed one stays transposed).
                layout = torch.empty_like(leaf, device="meta").stride()
                block, buffer = arena.empty(leaf.shape, leaf.dtype, layout)
                blocks.append(block)
                buffer.copy_(leaf)
                seen[id(leaf)] = buffer
                static[i] = buffer
                dst.append(buffer)
                src.append(i)
        graph = EmulatedGraph(rerun, dst, src, pool, blocks, shared, scratch)
        return graph, static

    def checkpoint(self, pool: PoolHandle) -> bool:
        state = state_of(pool)
        assert state.arena is not None
        state.save_checkpoint(state.arena.checkpoint())
        return True

    def rewind(self, pool: PoolHandle) -> bool:
        state = state_of(pool)
        assert state.arena is not None
        state.arena.rewind(state.checkpoint, set())
        state.rewound()
        return True


DEVICE = DeviceType("cpu", EmulatedBackend, note="emulated")
