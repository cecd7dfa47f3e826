"""A device capture that fails leaves the stream, the allocator and the pool's use count right.

The fakes below follow torch's CUDA graph and caching allocator contract (``CUDAGraph.cpp``,
``CUDACachingAllocator.cpp``): ``capture_begin`` takes one use of the pool and routes allocations
to it; ``capture_end`` must run on the capture stream, stops the routing, and marks the capture
ended; ``reset`` (or the destructor) gives the use back only for an ended capture; giving back
more uses than were taken, or taking a use of a registered pool whose count fell to zero, is a
``TORCH_INTERNAL_ASSERT``, which aborts the process on a device (an ``AssertionError`` here).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from npu_mempool import CaptureError, CaptureOptions, GraphRunner, _devices, graph_pool_handle
from npu_mempool._devices import emulated
from npu_mempool._pool import state_of


class Allocator:
    """The caching allocator's view of private pools: use counts and allocation routing."""

    def __init__(self) -> None:
        self.uses: dict[Any, int] = {}
        self.routing: set[Any] = set()

    def begin(self, pool: Any) -> None:
        if pool in self.uses:
            assert self.uses[pool] > 0, "TORCH_INTERNAL_ASSERT: use_count > 0"
        self.uses[pool] = self.uses.get(pool, 0) + 1
        assert pool not in self.routing, "beginAllocateToPool: already recording"
        self.routing.add(pool)

    def end(self, index: int, pool: Any) -> None:
        if pool not in self.routing:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        self.routing.remove(pool)

    def release(self, index: int, pool: Any) -> None:
        self.uses[pool] -= 1
        assert self.uses[pool] >= 0, "TORCH_INTERNAL_ASSERT: uc >= 0"


class Device:
    """torch.cuda as the CUDA adapter uses it, over :class:`Allocator`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.allocator = Allocator()
        self.current: Any = "caller-stream"
        self.pools = iter([(3, 1), (3, 2), (3, 3)])
        #: How the next capture's end fails: None, or "invalidated" (cudaStreamEndCapture).
        self.end_fails: str | None = None
        #: The capture error mode of each capture, in order.
        self.modes: list[str] = []
        #: Whether the default random number generator is in capture mode.
        self.generator_capturing = False
        device = self

        class Graph:
            def __init__(self) -> None:
                self.ended = False
                self.invalidated = False
                self.pool_id: Any = None
                self.stream: Any = None

            def capture_begin(self, pool: Any, capture_error_mode: str = "global") -> None:
                if pool is None:  # a private pool of this graph's own
                    pool = ("private", id(self))
                self.pool_id, self.stream = pool, device.current
                device.modes.append(capture_error_mode)
                device.allocator.begin(pool)
                device.generator_capturing = True  # the default generator's capture_prologue

            def capture_end(self) -> None:
                if device.current != self.stream:
                    raise RuntimeError("Capture must end on the same stream it began on.")
                if device.end_fails == "invalidated" or self.invalidated:
                    # The capture is over either way: this graph can never end it, the next
                    # capture starts afresh.
                    self.invalidated, device.end_fails = True, None
                    raise RuntimeError("operation failed due to a previous error during capture")
                device.allocator.end(0, self.pool_id)
                device.generator_capturing = False  # its capture_epilogue: after a clean end
                self.ended = True

            def pool(self) -> Any:
                if not self.ended:
                    raise RuntimeError("Called CUDAGraph::pool() without a preceding capture.")
                return self.pool_id

            def replay(self) -> None:
                assert self.ended

            def reset(self) -> None:
                if self.ended:
                    device.allocator.release(0, self.pool_id)
                    self.ended = False

            def __del__(self) -> None:
                self.reset()

        @contextlib.contextmanager
        def stream(s: Any) -> Iterator[None]:
            # torch.cuda.stream: current inside, the previous stream current again on the way
            # out, also when the block raised.
            previous, device.current = device.current, s
            try:
                yield
            finally:
                device.current = previous

        def graph(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(
                "torch.cuda.graph synchronizes the device and empties its caches before every "
                "capture; the adapter calls capture_begin/capture_end itself"
            )

        monkeypatch.setattr(torch.accelerator, "Graph", None, raising=False)
        monkeypatch.delattr(torch.accelerator, "Graph")
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(self.pools))
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: "capture-stream")
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.current)
        monkeypatch.setattr(torch.cuda, "set_stream", self._set_stream)
        monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: [])
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
        monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", self.allocator.end, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_releasePool", self.allocator.release, raising=False)
        # No checkpoint hooks: mode 2 is off, the pools are what is under test.
        monkeypatch.delattr(torch._C, "_cuda_getCheckpointState", raising=False)
        monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None, raising=False)

    def _set_stream(self, stream: Any) -> None:
        self.current = stream


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> Iterator[Device]:
    fake = Device(monkeypatch)
    backend = _devices.DeviceBackend(_devices.Cuda(), accelerator_graph=False)
    # CPU tensors drive the CUDA adapter: only its calls are under test.
    _devices.register(_devices.DeviceType("cpu", lambda: backend), replace=True)
    yield fake
    _devices.register(emulated.DEVICE, replace=True)


def _failing(device: Device, how: Callable[[], None]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A callable that fails the way ``how`` does while a capture is in progress."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        if device.current == "capture-stream" or device.current == "side-stream":
            how()
        return x * 2

    return fn


def _python_error() -> None:
    raise ValueError("a bug in the captured code")


def test_a_python_error_in_the_body_gives_the_pool_back_once(device: Device) -> None:
    # The capture still ends on the way out, so the graph owns its use of the pool: giving it
    # back here as well underflowed the count when the graph was freed (an abort on a device).
    runner = GraphRunner(_failing(device, _python_error), options=CaptureOptions(warmup_runs=0))
    torch.testing.assert_close(runner(torch.ones(4)), torch.full((4,), 2.0))  # then eagerly
    assert runner.counters.fallbacks == 1

    gc.collect()  # the half-made graph is freed: its reset gives its use back
    assert device.current == "caller-stream"
    assert device.allocator.routing == set()
    assert device.allocator.uses[(3, 1)] == 1  # only the empty graph that holds the pool
    pool = runner.pool
    assert pool is not None
    assert not state_of(pool).broken
    good = GraphRunner(lambda x: x + 1, options=CaptureOptions(warmup_runs=0, pool=pool))
    good(torch.ones(3))
    assert good.counters.captures == 1
    assert good.pool is pool


def test_an_error_left_on_a_side_stream_still_ends_the_capture(device: Device) -> None:
    # A graph that fails inside a stream scope leaves the side stream current: capture_end then
    # refuses to end there, the capture stays open on its stream and routing stays on.
    def switch_and_fail() -> None:
        device.current = "side-stream"
        raise ValueError("failed inside a stream scope")

    runner = GraphRunner(_failing(device, switch_and_fail), options=CaptureOptions(warmup_runs=0))
    torch.testing.assert_close(runner(torch.ones(4)), torch.full((4,), 2.0))  # then eagerly
    assert runner.counters.fallbacks == 1

    gc.collect()
    assert device.current == "caller-stream"
    assert device.allocator.routing == set()
    assert device.allocator.uses[(3, 1)] == 1


def test_a_capture_that_cannot_end_gives_its_use_back_and_retires_the_pool(
    device: Device, caplog: pytest.LogCaptureFixture
) -> None:
    shared = graph_pool_handle()
    hit = {"fail": True}

    def invalidate() -> None:
        if hit["fail"]:
            device.end_fails = "invalidated"

    first = GraphRunner(
        _failing(device, invalidate), options=CaptureOptions(warmup_runs=0, pool=shared)
    )
    second = GraphRunner(lambda x: x - 1, options=CaptureOptions(warmup_runs=0, pool=shared))
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        first(torch.ones(4))  # the capture fails; the call runs eagerly
    device.end_fails, hit["fail"] = None, False

    gc.collect()
    assert device.current == "caller-stream"
    assert device.allocator.routing == set()
    assert device.allocator.uses[(3, 1)] == 1  # the empty graph only: no use leaked or lost
    assert state_of(shared).broken
    # The other runner of the shared pool is told: it captures into a pool of its own.
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        second(torch.ones(3))
    assert second.counters.captures == 1
    assert second.pool is not shared
    assert "left unusable" in caplog.text


def test_a_capture_that_cannot_end_leaves_the_random_number_generator_usable(
    device: Device,
) -> None:
    # Seen on CUDA (torch 2.11): a capture invalidated by a cuBLAS error never ended, the
    # default generator stayed in capture mode, and the next eager torch.randn failed.
    def invalidate() -> None:
        device.end_fails = "invalidated"

    runner = GraphRunner(_failing(device, invalidate), options=CaptureOptions(warmup_runs=0))
    runner(torch.ones(4))  # the capture fails; the call runs eagerly
    device.end_fails = None
    assert runner.counters.fallbacks == 1
    assert not device.generator_capturing
    assert device.current == "caller-stream"
    gc.collect()
    assert device.allocator.routing == set()


def test_a_failed_capture_below_the_device_s_warm_up_says_so(
    device: Device, caplog: pytest.LogCaptureFixture
) -> None:
    # On CUDA, warmup_runs=0 let cuBLAS create its handle inside the first capture, and the log
    # said only "CUBLAS_STATUS_NOT_INITIALIZED".
    def library_init() -> None:
        device.end_fails = "invalidated"
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate")

    for runs, hinted in ((0, True), (None, False)):
        runner = GraphRunner(
            _failing(device, library_init), options=CaptureOptions(warmup_runs=runs)
        )
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="npu_mempool"):
            for _ in range(2):  # the warm-up call where the options ask for one, the capture
                runner(torch.ones(4))
        assert runner.counters.fallbacks == 1
        assert "CUBLAS_STATUS_NOT_INITIALIZED" in caplog.text
        assert ("warmup_runs=0 is below this device's need of 1" in caplog.text) is hinted
        device.end_fails = None


def test_a_shared_pool_whose_graphs_were_all_freed_takes_new_captures(device: Device) -> None:
    # Mode 1 with every graph reset while an output is held: without a graph holding the pool
    # its use count fell to zero while it stayed registered, and the next capture asserted.
    shared = graph_pool_handle()
    runner = GraphRunner(lambda x: x * 3, options=CaptureOptions(warmup_runs=0, pool=shared))
    held = runner(torch.ones(2))
    runner.reset()

    gc.collect()
    other = GraphRunner(lambda x: x + 5, options=CaptureOptions(warmup_runs=0, pool=shared))
    other(torch.ones(2))
    assert other.counters.captures == 1
    assert other.pool is shared
    del held


def test_the_capture_error_mode_reaches_the_device(device: Device) -> None:
    runner = GraphRunner(
        lambda x: x * 2, options=CaptureOptions(warmup_runs=0, capture_error_mode="relaxed")
    )
    runner(torch.ones(2))
    # The empty graph that holds the pool, then ours.
    assert device.modes == ["thread_local", "relaxed"]


def test_the_fallback_reason_names_the_body_error_not_the_failed_end(
    device: Device, caplog: pytest.LogCaptureFixture
) -> None:
    # A body that fails mid-capture invalidates the capture, so ending it fails too: the first
    # error is the cause a user can act on; the second would hide it behind the first.
    def host_sync() -> None:
        device.end_fails = "invalidated"
        raise RuntimeError("cannot read a tensor's value on the host while capturing: .item()")

    runner = GraphRunner(_failing(device, host_sync), options=CaptureOptions(warmup_runs=0))
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        torch.testing.assert_close(runner(torch.ones(4)), torch.full((4,), 2.0))  # then eagerly
    device.end_fails = None
    assert runner.counters.fallbacks == 1
    assert "while capturing: .item()" in caplog.text
    assert "previous error during capture" not in caplog.text

    strict = GraphRunner(
        _failing(device, host_sync), options=CaptureOptions(warmup_runs=0, strict=True)
    )
    with pytest.raises(CaptureError, match=r"while capturing: \.item\(\)") as raised:
        strict(torch.ones(4))
    device.end_fails = None
    cause = raised.value.__cause__
    assert isinstance(cause, RuntimeError)
    assert any("ending the capture then failed too" in note for note in cause.__notes__)
