"""Device graph adapters: one small interface over every graph implementation we drive.

* ``cpu``: :class:`EmulatedBackend`, a graph that really behaves like one: static outputs live in a
  byte arena (the pool), replay re-runs the callable on the static inputs and writes the results
  into the same static tensors, so aliasing, overwrite and pool rewind are observable on CPU.
* ``cuda``: ``torch.accelerator.Graph`` (torch >= 2.12), else ``torch.cuda.CUDAGraph`` (2.11).
* ``npu``: ``torch.accelerator.Graph`` when torch_npu registers it, else ``torch_npu.npu.NPUGraph``.

This is the only module that touches ``torch_npu``, and only lazily, inside functions: installing
torch_npu without CANN breaks ``import torch`` itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch

from npu_mempool._pool import PoolHandle
from npu_mempool.errors import OptionsError

__all__ = [
    "Body",
    "DeviceBackend",
    "EmulatedBackend",
    "EmulatedGraph",
    "Graph",
    "GraphBackend",
    "backend_for",
    "default_device",
    "graph_implementation",
    "graph_pool_handle",
]

StaticLike = Callable[[torch.Tensor], torch.Tensor]
#: Recomputes a graph's output leaves for one call's arguments (CPU emulation only).
Rerun = Callable[[tuple[Any, ...]], Sequence[Any]]
#: What a runner captures: given ``static_like`` (allocates a pool tensor shaped like its argument),
#: returns the flat output leaves, a function that recomputes them, and every tensor the callable
#: received (so outputs aliasing an input are recognised).
Body = Callable[[StaticLike], tuple[list[Any], Rerun, list[torch.Tensor]]]


class Graph(Protocol):
    """A captured graph."""

    def replay(self, args: tuple[Any, ...]) -> None:
        """Run the captured work again, writing into the same static outputs.

        ``args`` are the call's arguments, already checked to be the captured ones where the
        graph reads them in place (a device graph ignores them; the CPU emulation re-runs on them).
        """

    def reset(self) -> None:
        """Free the graph and the pool memory only it holds."""


class GraphBackend(Protocol):
    """One device family's graph implementation."""

    name: str
    #: Whether ``capture`` runs the callable (CPU emulation) or only records it (devices).
    executes_on_capture: bool
    #: Eager calls a new key needs before its capture when ``CaptureOptions.warmup_runs`` is None.
    default_warmup_runs: int

    def new_pool(self, device: torch.device) -> PoolHandle:
        """Create an empty pool on ``device``."""

    def capture(self, pool: PoolHandle, body: Body) -> tuple[Graph, list[Any]]:
        """Capture ``body`` into ``pool``; return the graph and its static output leaves."""

    def checkpoint(self, pool: PoolHandle) -> bool:
        """Remember the pool's current state for later rewinds; ``False`` when unsupported."""

    def rewind(self, pool: PoolHandle) -> bool:
        """Return the pool to its checkpoint; memory of later captures becomes free again.

        The caller rewinds only while no output of the pool's graphs is held outside them. Returns
        ``False``, changing nothing, when the pool holds allocations the runner does not know
        about (a tensor created during capture and kept by the callable): rewinding then would
        free memory still in use.
        """


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``tensor`` as a flat uint8 tensor (no copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


class EmulatedGraph:
    """Replay re-runs the captured callable and copies its results into the static outputs."""

    def __init__(
        self,
        rerun: Rerun,
        dst: list[torch.Tensor],
        src: list[int],
        pool: PoolHandle,
        blocks: list[int],
        shared: Sequence[tuple[torch.Tensor, int]] = (),
    ) -> None:
        self._rerun: Rerun | None = rerun
        self._dst = dst
        self._src = src
        self._shared = list(shared)
        self._pool = pool
        self._blocks = blocks

    def replay(self, args: tuple[Any, ...]) -> None:
        rerun = self._rerun
        if rerun is None:
            raise RuntimeError("replay() of a graph that was reset; capture it again")
        # A device replay records no autograd history, and writes into its static outputs in any
        # grad mode; so does the emulation.
        with torch.no_grad():
            out = rerun(args)
            if self._src:
                torch._foreach_copy_(self._dst, [out[i] for i in self._src])
            # Outputs that are views of one storage: its bytes are copied whole, views kept.
            for base, index in self._shared:
                source = _bytes_of(out[index])
                base[: source.numel()].copy_(source)

    def reset(self) -> None:
        arena = self._pool._arena
        assert arena is not None
        for block in self._blocks:
            arena.free(block)
        self._blocks = []
        self._rerun = None


class EmulatedBackend:
    """CPU graphs with device semantics (static buffers in a real arena, overwrite on replay)."""

    name = "cpu-emulated"
    executes_on_capture = True
    default_warmup_runs = 0

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(torch.device("cpu"))

    def capture(self, pool: PoolHandle, body: Body) -> tuple[Graph, list[Any]]:
        arena = pool._arena
        assert arena is not None, "an emulated graph needs a CPU pool"
        blocks: list[int] = []

        def static_like(x: torch.Tensor) -> torch.Tensor:
            block, tensor = arena.empty(x.shape, x.dtype)
            blocks.append(block)
            # The emulated capture runs the callable, so it must see the real input values.
            tensor.copy_(x)
            return tensor

        with torch.no_grad():
            leaves, rerun, inputs = body(static_like)
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
        graph = EmulatedGraph(rerun, dst, src, pool, blocks, shared)
        return graph, static

    def checkpoint(self, pool: PoolHandle) -> bool:
        assert pool._arena is not None
        pool._checkpoint = pool._arena.checkpoint()
        return True

    def rewind(self, pool: PoolHandle) -> bool:
        assert pool._arena is not None
        pool._arena.rewind(pool._checkpoint, set())
        pool._owned.clear()
        return True


class _Family(Protocol):
    """What differs between CUDA and NPU: pool ids, streams, allocator hooks, legacy graphs."""

    device_type: str
    warmup_runs: int

    def pool_id(self) -> Any: ...
    def stream(self, device: torch.device) -> Any: ...
    def reserved(self, device: torch.device) -> int: ...
    def snapshot(self) -> list[dict[str, Any]]: ...
    def get_state(self, index: int, pool_id: Any) -> Any: ...
    def set_state(self, index: int, state: Any, stale: list[int]) -> None: ...
    def live_allocations_are(self, index: int, pool_id: Any, ptrs: set[int]) -> bool | None: ...
    def has_checkpoint_hooks(self) -> bool: ...
    def drop_library_workspaces(self) -> None: ...
    def legacy_graph(self) -> Any: ...
    def legacy_context(self, graph: Any, pool_id: Any, stream: Any) -> Any: ...


class _Cuda:
    device_type = "cuda"
    # cuBLAS creates its handle and workspace on first use; inside a capture that allocation
    # would land in the graph pool for good (torch's own CUDA graph paths warm up too).
    warmup_runs = 1

    def pool_id(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def reserved(self, device: torch.device) -> int:
        return int(torch.cuda.memory_reserved(device))

    def snapshot(self) -> list[dict[str, Any]]:
        return list(torch.cuda.memory_snapshot())  # type: ignore[no-untyped-call]

    def get_state(self, index: int, pool_id: Any) -> Any:
        return torch._C._cuda_getCheckpointState(index, pool_id)

    def set_state(self, index: int, state: Any, stale: list[int]) -> None:
        torch._C._cuda_setCheckpointPoolState(index, state, stale, [])

    def live_allocations_are(self, index: int, pool_id: Any, ptrs: set[int]) -> bool | None:
        check = getattr(torch._C, "_cuda_checkPoolLiveAllocations", None)
        return None if check is None else bool(check(index, pool_id, ptrs))

    def has_checkpoint_hooks(self) -> bool:
        return hasattr(torch._C, "_cuda_getCheckpointState") and hasattr(
            torch._C, "_cuda_setCheckpointPoolState"
        )

    def drop_library_workspaces(self) -> None:
        # cuBLAS keeps one workspace per (handle, stream), allocated on first use: during a
        # capture it comes from the graph pool and stays allocated there for good, so the pool
        # holds memory no graph output owns and can never be rewound (mode 2 off). Dropping the
        # cache around captures, as CUDA Graph Trees do, makes the workspace an ordinary
        # intermediate of the graph that captured it.
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()

    def legacy_graph(self) -> Any:
        return torch.cuda.CUDAGraph()

    def legacy_context(self, graph: Any, pool_id: Any, stream: Any) -> Any:
        return torch.cuda.graph(
            graph, pool=pool_id, stream=stream, capture_error_mode="thread_local"
        )


def _torch_npu() -> Any:
    return importlib.import_module("torch_npu")


class _Npu:
    device_type = "npu"
    warmup_runs = 0  # TorchAir's num_warmup_iters default

    def pool_id(self) -> Any:
        return _torch_npu().npu.graph_pool_handle()

    def stream(self, device: torch.device) -> Any:
        return _torch_npu().npu.Stream(device=device)

    def reserved(self, device: torch.device) -> int:
        return int(_torch_npu().npu.memory_reserved(device))

    def snapshot(self) -> list[dict[str, Any]]:
        return list(_torch_npu().npu.memory_snapshot())

    def get_state(self, index: int, pool_id: Any) -> Any:
        return _torch_npu()._C._npu_getCheckpointState(index, pool_id)

    def set_state(self, index: int, state: Any, stale: list[int]) -> None:
        _torch_npu()._C._npu_setCheckpointPoolState(index, state, stale, [])

    def live_allocations_are(self, index: int, pool_id: Any, ptrs: set[int]) -> bool | None:
        check = getattr(_torch_npu()._C, "_npu_checkPoolLiveAllocations", None)
        return None if check is None else bool(check(index, pool_id, ptrs))

    def has_checkpoint_hooks(self) -> bool:
        c = getattr(_torch_npu(), "_C", None)
        return hasattr(c, "_npu_getCheckpointState") and hasattr(c, "_npu_setCheckpointPoolState")

    def drop_library_workspaces(self) -> None:
        return None  # torch_npu exposes no such cache to drop

    def legacy_graph(self) -> Any:
        return _torch_npu().npu.NPUGraph()

    def legacy_context(self, graph: Any, pool_id: Any, stream: Any) -> Any:
        return _torch_npu().npu.graph(graph, pool=pool_id, stream=stream)


class _DeviceGraph:
    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._replay = graph.replay

    def replay(self, args: tuple[Any, ...]) -> None:
        self._replay()

    def reset(self) -> None:
        self._graph.reset()


class DeviceBackend:
    """Real device graphs through ``torch.accelerator.Graph`` or the family's legacy class."""

    executes_on_capture = False

    def __init__(self, family: _Family, accelerator_graph: bool) -> None:
        self._family = family
        self._accelerator_graph = accelerator_graph
        self.default_warmup_runs = family.warmup_runs
        if accelerator_graph:
            self.name = "torch.accelerator.Graph"
        else:
            self.name = (
                "torch.cuda.CUDAGraph"
                if family.device_type == "cuda"
                else ("torch_npu.npu.NPUGraph")
            )

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(device, native=self._family.pool_id())

    @contextlib.contextmanager
    def _capturing(self, pool: PoolHandle, graph_out: list[Any]) -> Iterator[None]:
        if self._accelerator_graph:
            if pool._stream is None:
                pool._stream = torch.Stream(device=pool.device)
            graph = torch.accelerator.Graph(pool=pool._native, capture_error_mode="thread_local")
            graph_out.append(graph)
            # accelerator.Graph captures on the current stream; the pool's own stream keeps the
            # caching allocator's segments reusable by the next capture.
            with pool._stream, graph:
                yield
        else:
            if pool._stream is None:
                pool._stream = self._family.stream(pool.device)
            graph = self._family.legacy_graph()
            graph_out.append(graph)
            with self._family.legacy_context(graph, pool._native, pool._stream):
                yield

    def capture(self, pool: PoolHandle, body: Body) -> tuple[Graph, list[Any]]:
        made: list[Any] = []
        before = self._family.reserved(pool.device)

        def static_like(x: torch.Tensor) -> torch.Tensor:
            # Allocated inside the capture, hence from the graph pool; filled before each replay.
            # A normal tensor even under inference_mode: replays copy into it in any mode.
            with torch.inference_mode(False):
                return torch.empty(x.shape, dtype=x.dtype, device=x.device)

        self._family.drop_library_workspaces()
        try:
            with torch.no_grad(), self._capturing(pool, made):
                leaves, _rerun, _inputs = body(static_like)
        finally:
            self._family.drop_library_workspaces()
        self._measure(pool, before)
        return _DeviceGraph(made[0]), leaves

    def _measure(self, pool: PoolHandle, reserved_before: int) -> None:
        """Update the pool's byte count after a capture into it."""
        try:
            # Exact: the segments the allocator holds for this pool.
            wanted = tuple(pool._native)
            pool._grown = sum(
                int(segment["total_size"])
                for segment in self._family.snapshot()
                if tuple(segment.get("segment_pool_id", ())) == wanted
            )
        except Exception:
            # Approximate: what the device's reserved memory grew by during the capture.
            grown = self._family.reserved(pool.device) - reserved_before
            pool._grown += max(0, grown)

    def checkpoint(self, pool: PoolHandle) -> bool:
        if not self._family.has_checkpoint_hooks():
            return False
        # An empty capture creates the private pool; the graph is kept so the pool outlives the
        # runner's graphs, and the state after it is the rewind target.
        made: list[Any] = []
        before = self._family.reserved(pool.device)
        with warnings.catch_warnings():
            # The capture is empty on purpose; torch warns about every empty capture ("The CUDA
            # Graph is empty ...", raised as an error where warnings are errors), as it does for
            # the one CUDA Graph Trees makes when it starts.
            warnings.filterwarnings("ignore", r"The \w+ Graph is empty", UserWarning)
            with self._capturing(pool, made):
                pass
        pool._keepalive.extend(made)
        self._measure(pool, before)
        pool._checkpoint = self._family.get_state(_index(pool.device), pool._native)
        return True

    def rewind(self, pool: PoolHandle) -> bool:
        index = _index(pool.device)
        # The allocator frees every block allocated since the checkpoint; each must belong to a
        # tensor we hold, or a tensor someone else holds would point at recycled memory.
        live = {t.untyped_storage().data_ptr() for t in pool._owned}
        if self._family.live_allocations_are(index, pool._native, live) is False:
            return False
        # Tensors the allocator still owns (static buffers of captures since the last rewind)
        # lose their deleters: their bytes now belong to whatever the next capture allocates.
        stale = list({t.untyped_storage()._cdata: None for t in pool._owned})
        self._family.set_state(index, pool._checkpoint, stale)
        pool._owned.clear()
        return True


def _index(device: torch.device) -> int:
    # A device named without an index ("cuda", as in graph_pool_handle("cuda")) means the
    # current one, as for the pool's capture stream: not always the first.
    index: int | None = device.index
    if index is not None:
        return index
    if torch.accelerator.is_available():
        return int(torch.accelerator.current_device_index())
    return 0


def has_accelerator_graph() -> bool:
    """Whether this torch has the device-generic ``torch.accelerator.Graph`` (2.12 and later)."""
    accelerator: Any = getattr(torch, "accelerator", None)
    return hasattr(accelerator, "Graph")


def _npu_registers_accelerator_graph() -> bool:
    if not has_accelerator_graph():
        return False
    try:
        current = torch.accelerator.current_accelerator()
        if current is None or current.type != "npu":
            return False
        torch.accelerator.Graph()
    except Exception:
        return False
    return True


@functools.cache
def backend_for(device_type: str) -> GraphBackend:
    """The graph implementation for tensors on ``device_type``."""
    if device_type == "cpu":
        return EmulatedBackend()
    if device_type == "cuda":
        return DeviceBackend(_Cuda(), accelerator_graph=has_accelerator_graph())
    if device_type == "npu":
        return DeviceBackend(_Npu(), accelerator_graph=_npu_registers_accelerator_graph())
    raise OptionsError(
        f"no graph implementation for device type {device_type!r}; npu-mempool captures graphs on "
        "'cpu' (emulated), 'cuda' and 'npu'. Move the inputs to one of these devices."
    )


def default_device() -> torch.device:
    """The current accelerator, or the CPU when there is none."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        current = accelerator.current_accelerator()
        if current is not None:
            return torch.device(current.type, accelerator.current_device_index())
    return torch.device("cpu")


def graph_implementation(device: torch.device | str | None = None) -> str:
    """Name the graph implementation used for ``device`` (default: the current accelerator).

    Returns:
        ``"torch.accelerator.Graph"``, ``"torch.cuda.CUDAGraph"``, ``"torch_npu.npu.NPUGraph"`` or
        ``"cpu-emulated"``.
    """
    if device is None:
        return backend_for(default_device().type).name
    # Parsed by hand: "npu" is only a torch device type once torch_npu is imported.
    device_type = device.type if isinstance(device, torch.device) else device.split(":")[0]
    return backend_for(device_type).name


def graph_pool_handle(device: torch.device | str | None = None) -> PoolHandle:
    """Create a graph memory pool that several runners can share (TorchAir mode 1).

    Args:
        device: Device of the pool; defaults to the current accelerator, else the CPU (where the
            pool is an emulated byte arena).

    Returns:
        A handle to pass as ``CaptureOptions(pool=handle)``.

    Example:
        >>> pool = graph_pool_handle("cpu")
        >>> options = CaptureOptions(pool=pool)  # doctest: +SKIP
    """
    resolved = default_device() if device is None else torch.device(device)
    return backend_for(resolved.type).new_pool(resolved)
