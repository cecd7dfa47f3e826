"""Real device graphs: ``torch.accelerator.Graph`` or a device family's legacy graph class."""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from npu_mempool._budget import graph_budget
from npu_mempool._devices.base import Body, Graph, static_strides
from npu_mempool._pool import PoolHandle, state_of

_log = logging.getLogger("npu_mempool")

__all__ = [
    "DeviceBackend",
    "Family",
    "device_index",
    "has_accelerator_graph",
    "recording",
]


def has_accelerator_graph() -> bool:
    """Whether this torch has the device-generic ``torch.accelerator.Graph`` (2.12 and later)."""
    return hasattr(torch.accelerator, "Graph")


class Family(Protocol):
    """What differs between CUDA and NPU: pool ids, streams, allocator hooks, legacy graphs."""

    device_type: str
    warmup_runs: int
    #: What :func:`~npu_mempool.graph_implementation` names the family's own graph class.
    legacy_graph_name: str

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
    def legacy_context(self, graph: Any, pool_id: Any, stream: Any, error_mode: str) -> Any: ...
    def current_stream(self, device: torch.device) -> Any: ...
    def set_stream(self, stream: Any) -> None: ...
    def end_allocate_to_pool(self, index: int, pool_id: Any) -> bool: ...
    def release_pool(self, index: int, pool_id: Any) -> None: ...
    def capture_refusal(self) -> str | None: ...


@contextlib.contextmanager
def recording(graph: Any, stream_context: Any, pool_id: Any, error_mode: str) -> Iterator[None]:
    """What a family's ``graph(graph, pool=..., stream=..., capture_error_mode=...)`` does.

    ``torch.cuda.graph`` and ``torch_npu.npu.graph`` less their device-wide sync and cache
    emptying (see [Note: what a capture pays]): ``capture_begin`` into the pool inside
    ``stream_context`` (the family's ``stream(s)``), and the capture ends on the way out whatever
    happened inside. The caller's stream is current again even when ending the capture raised
    (``_abandon`` then ends it on its own stream).
    """
    with stream_context:
        graph.capture_begin(pool=pool_id, capture_error_mode=error_mode)
        try:
            yield
        finally:
            graph.capture_end()


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

    def __init__(self, family: Family, accelerator_graph: bool) -> None:
        self._family = family
        self._accelerator_graph = accelerator_graph
        self.default_warmup_runs = family.warmup_runs
        self.name = "torch.accelerator.Graph" if accelerator_graph else family.legacy_graph_name

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(device, native=self._family.pool_id())

    def refusal(self) -> str | None:
        """Why this device refuses every capture now (a setting), or ``None``."""
        return self._family.capture_refusal()

    def graphs_needed(self, pool: PoolHandle) -> int:
        """Graphs a capture into ``pool`` adds: its own, and the pool's keep-alive at first."""
        return 1 if state_of(pool).keepalive else 2

    @contextlib.contextmanager
    def _capturing(
        self, pool: PoolHandle, graph_out: list[Any], error_mode: str = "thread_local"
    ) -> Iterator[None]:
        state = state_of(pool)
        if self._accelerator_graph:
            if state.stream is None:
                state.stream = torch.Stream(device=pool.device)
            graph = torch.accelerator.Graph(
                pool=state.native,
                capture_error_mode=error_mode,  # type: ignore[arg-type]  # a checked option
            )
            graph_out.append(graph)
            # accelerator.Graph captures on the current stream; the pool's own stream keeps the
            # caching allocator's segments reusable by the next capture. Not `with graph`: see
            # [Note: what a capture pays].
            with state.stream:
                graph.capture_begin()
                try:
                    yield
                finally:
                    graph.capture_end()
        else:
            if state.stream is None:
                state.stream = self._family.stream(pool.device)
            graph = self._family.legacy_graph()
            graph_out.append(graph)
            with self._family.legacy_context(graph, state.native, state.stream, error_mode):
                yield

    # [Note: what a capture pays]
    # torch's capture context managers (`with torch.accelerator.Graph()`, `torch.cuda.graph`)
    # synchronize the device and empty the allocator's caches (device and pinned host) before
    # every capture, "to free as much memory as we can for the graph". Neither is needed for a
    # correct capture: a capture records work without running it, so nothing queued before it
    # can race with it; it allocates from its own private pool, not from blocks other pools
    # cache; and its replays are queued on the caller's stream behind whatever the caller queued
    # before. What they cost is a device-wide wait and a free of every cached segment per capture
    # (which the next eager allocations then take from the driver again), paid once per shape and
    # once per piece of a split graph (vLLM skips the emptying for all but its first capture for
    # that reason). So captures call `capture_begin` / `capture_end` directly, and end the capture
    # on the way out whatever happened inside, as the context managers do. The price: a capture
    # close to the device's
    # memory limit cannot count on the memory other pools cache being handed back to the driver
    # first (the allocator does not free cached segments while a capture is under way).
    # Pool bytes are read from the allocator's snapshot only when asked for (`PoolState.nbytes`),
    # never during a capture.

    def capture(
        self, pool: PoolHandle, body: Body, error_mode: str = "thread_local"
    ) -> tuple[Graph, list[Any]]:
        # The pool's first graph: an empty capture that holds the pool for the handle's life.
        self._keep_alive(pool)
        made: list[Any] = []
        before = self._family.reserved(pool.device)

        def static_like(x: torch.Tensor) -> torch.Tensor:
            # Allocated inside the capture, hence from the graph pool; filled before each replay.
            # A normal tensor even under inference_mode: replays copy into it in any mode. The
            # caller's strides (see static_strides), in a storage that reaches as far as they do.
            with torch.inference_mode(False):
                return torch.empty_strided(
                    x.shape, static_strides(x), dtype=x.dtype, device=x.device
                )

        self._family.drop_library_workspaces()
        stream = self._family.current_stream(pool.device)
        failed: list[BaseException] = []
        try:
            with torch.no_grad(), self._capturing(pool, made, error_mode):
                try:
                    leaves, _rerun, _inputs = body(static_like)
                except BaseException as error:
                    failed.append(error)
                    raise
        except BaseException as error:
            self._abandon(pool, made[0] if made else None, stream)
            if failed and error is not failed[0]:
                # Ending a capture whose body failed fails too ("operation failed due to a
                # previous error during capture"): the body's error is the cause to report.
                first = failed[0]
                first.add_note(
                    f"ending the capture then failed too: {type(error).__name__}: {error}"
                )
                raise first from None
            raise
        finally:
            self._family.drop_library_workspaces()
        self._measure(pool, before)
        return _DeviceGraph(made[0]), leaves

    def _abandon(self, pool: PoolHandle, graph: Any, caller_stream: Any) -> None:
        """Leave a capture that raised with the stream, the allocator and the pool consistent.

        [Note: the pool's use count] ``capture_begin`` takes one use of the pool and routes the
        thread's allocations to it; ``capture_end`` stops the routing, and the graph gives its
        use back when it is reset or destroyed, but only if its capture ended. So a failure has
        two cases. The body raised and the capture still ended (the graph context ends it on the
        way out): the graph owns its use, and giving it back here too would underflow the count
        (``TORCH_INTERNAL_ASSERT`` in the graph's destructor aborts the process). The capture
        did not end (``capture_end`` refused, e.g. because another stream was current, or
        failed): routing is still on and nobody gives the use back, so this does, once.
        """
        state = state_of(pool)
        index = device_index(pool.device)
        if graph is not None and not _capture_ended(graph) and state.stream is not None:
            # capture_end refused to end on another stream than the capture's, or never ran:
            # end it on its own stream, so that stream (and its thread) leaves capture mode.
            with contextlib.suppress(RuntimeError):
                self._family.set_stream(state.stream)
                graph.capture_end()
        self._family.set_stream(caller_stream)
        if graph is not None and not _capture_ended(graph):
            self._end_generator_capture(pool.device)
        if self._family.end_allocate_to_pool(index, state.native):
            # The capture never ended cleanly: give capture_begin's use back, and capture
            # nothing more into this pool (what the failure left in it is not known).
            self._family.release_pool(index, state.native)
            state.mark_broken()

    def _end_generator_capture(self, device: torch.device) -> None:
        """Take the default random number generator out of the capture that never ended.

        [Note: a generator left capturing] ``capture_begin`` puts the device's default
        generator into capture mode, and only a ``capture_end`` that succeeds takes it out
        (torch 2.11: after ``cudaStreamEndCapture``, which fails for an invalidated capture).
        Left so, every random op after it fails eagerly ("Offset increment outside graph
        capture encountered unexpectedly"), in the fallback call and in the user's code. One
        empty capture that ends cleanly takes the generator through capture and out of it
        again; its own graph is dropped at once. Swapping in a fresh generator state would do
        it too, but the graphs captured before would then advance the old state's offset on
        every replay while eager ops draw from the new one: the same random numbers twice.
        """
        graph = self._family.legacy_graph()
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", r"The \w+ Graph is empty", UserWarning)
                with self._family.legacy_context(
                    graph, None, self._family.stream(device), "thread_local"
                ):
                    pass
        except RuntimeError as error:  # a device in an error state: nothing more to do here
            _log.debug("could not end the random number generator's capture: %s", error)
        finally:
            graph.reset()

    def _measure(self, pool: PoolHandle, reserved_before: int) -> None:
        """Keep what the pool's byte count needs after a capture into it (a cheap read)."""
        state = state_of(pool)
        # The estimate, for where the allocator cannot list the pool's segments: what the
        # device's reserved memory grew by during the capture.
        state.grown += max(0, self._family.reserved(pool.device) - reserved_before)
        if state.measure is None:
            state.measure = functools.partial(self._segment_bytes, state.native)

    def _segment_bytes(self, native: Any) -> int | None:
        """The bytes of the segments the allocator holds for pool ``native``; ``None``: unknown.

        Exact, but a snapshot of the whole allocator: read when someone asks for the pool's
        bytes, never during a capture.
        """
        try:
            wanted = tuple(native)
            return sum(
                int(segment["total_size"])
                for segment in self._family.snapshot()
                if tuple(segment.get("segment_pool_id", ())) == wanted
            )
        except Exception:
            return None

    def _keep_alive(self, pool: PoolHandle) -> None:
        """Capture one empty graph into ``pool`` and keep it while the handle lives.

        Every graph of a pool holds one use of it (see [Note: the pool's use count]); when the
        last graph is reset while an output still lives in the pool, the count reaches zero and
        the pool stays registered, and the allocator asserts on the next capture into that pool
        id. The empty graph keeps the count above zero until the handle itself goes.
        """
        state = state_of(pool)
        if state.keepalive:
            return
        made: list[Any] = []
        before = self._family.reserved(pool.device)
        with warnings.catch_warnings():
            # The capture is empty on purpose; torch warns about every empty capture ("The CUDA
            # Graph is empty ...", raised as an error where warnings are errors), as it does for
            # the one CUDA Graph Trees makes when it starts.
            warnings.filterwarnings("ignore", r"The \w+ Graph is empty", UserWarning)
            with self._capturing(pool, made):
                pass
        state.keepalive.extend(made)
        # It takes a device stream like any graph: counted while the handle lives.
        graph_budget(pool.device.type).hold(pool)
        self._measure(pool, before)

    def checkpoint(self, pool: PoolHandle) -> bool:
        if not self._family.has_checkpoint_hooks():
            return False
        # The empty capture creates the private pool; the state after it is the rewind target.
        self._keep_alive(pool)
        state = state_of(pool)
        state.save_checkpoint(self._family.get_state(device_index(pool.device), state.native))
        return True

    def rewind(self, pool: PoolHandle) -> bool:
        index = device_index(pool.device)
        state = state_of(pool)
        owned = state.owned()
        # The allocator frees every block allocated since the checkpoint; each must belong to a
        # tensor we hold, or a tensor someone else holds would point at recycled memory.
        live = {t.untyped_storage().data_ptr() for t in owned}
        if self._family.live_allocations_are(index, state.native, live) is False:
            return False
        # Tensors the allocator still owns (static buffers of captures since the last rewind)
        # lose their deleters: their bytes now belong to whatever the next capture allocates.
        stale = list({t.untyped_storage()._cdata: None for t in owned})
        self._family.set_state(index, state.checkpoint, stale)
        state.rewound()
        return True


def _capture_ended(graph: Any) -> bool:
    """Whether ``graph``'s capture ended (its ``pool()`` refuses to answer before that)."""
    try:
        graph.pool()
    except RuntimeError:
        return False
    return True


def device_index(device: torch.device) -> int:
    # A device named without an index ("cuda", as in graph_pool_handle("cuda")) means the
    # current one, as for the pool's capture stream: not always the first.
    index: int | None = device.index
    if index is not None:
        return index
    if torch.accelerator.is_available():
        return int(torch.accelerator.current_device_index())
    return 0
