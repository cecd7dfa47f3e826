"""Device adapter contract, checked against a fake ``torch_npu`` injected in ``sys.modules``."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import npu_mempool
import pytest
import torch
from npu_mempool import CaptureOptions, GraphRunner, InputKind, _devices, _trace
from npu_mempool._devices import emulated
from npu_mempool._pool import state_of

Route = Callable[[_devices.GraphBackend], None]


class FakeGraph:
    def __init__(self, fake: FakeTorchNpu) -> None:
        self.fake = fake
        self.replays = 0
        self.resets = 0
        self.captured = False

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self.fake.log.append(("capture_begin", pool, self.fake.current, capture_error_mode))
        self.fake.capturing = True

    def capture_end(self) -> None:
        self.fake.capturing = False
        self.fake.reserved += 4096  # a capture grows the pool
        self.captured = True

    def replay(self) -> None:
        assert self.captured, "replay before capture"
        self.replays += 1

    def reset(self) -> None:
        self.resets += 1

    def pool(self) -> Any:
        if not self.captured:
            raise RuntimeError("Called pool() without a preceding successful capture.")
        return (7, 0)


class FakeTorchNpu:
    """What npu-mempool may use of torch_npu, recording every call."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.graphs: list[FakeGraph] = []
        self.capturing = False
        self.reserved = 0
        self.stream = object()
        self.current: Any = None
        fake = self

        @contextlib.contextmanager
        def graph(
            g: FakeGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"
        ) -> Iterator[None]:
            # torch_npu's capture context: a device-wide sync and an emptied cache first.
            fake.log += [("synchronize",), ("empty_cache",)]
            with stream_context(stream):
                g.capture_begin(pool, capture_error_mode)
                try:
                    yield
                finally:
                    g.capture_end()

        @contextlib.contextmanager
        def stream_context(stream: Any) -> Iterator[None]:
            before, fake.current = fake.current, stream
            try:
                yield
            finally:
                fake.current = before

        def new_graph() -> FakeGraph:
            made = FakeGraph(fake)
            fake.graphs.append(made)
            return made

        def pool_handle() -> tuple[int, int]:
            fake.log.append(("graph_pool_handle",))
            return (7, 0)

        self.module = types.ModuleType("torch_npu")
        npu = types.SimpleNamespace(
            NPUGraph=new_graph,
            graph=graph,
            stream=stream_context,
            graph_pool_handle=pool_handle,
            Stream=lambda device=None: fake.stream,
            current_stream=lambda device=None: fake.stream,
            set_stream=lambda stream: None,
            memory_reserved=lambda device=None: fake.reserved,
            synchronize=lambda device=None: fake.log.append(("synchronize",)),
            empty_cache=lambda: fake.log.append(("empty_cache",)),
        )
        c = types.SimpleNamespace(
            _npu_getCheckpointState=lambda index, pool: fake._record("get", index, pool),
            _npu_setCheckpointPoolState=lambda index, state, stale, add: fake._record(
                "set", index, state, list(stale), list(add)
            ),
        )
        self.module.npu = npu  # type: ignore[attr-defined]
        self.module._C = c  # type: ignore[attr-defined]

    def _record(self, *entry: Any) -> Any:
        self.log.append(entry)
        return ("state", entry[2]) if entry[0] == "get" else None

    def calls(self, name: str) -> list[tuple[Any, ...]]:
        return [entry for entry in self.log if entry[0] == name]


@pytest.fixture
def route_cpu() -> Iterator[Route]:
    """Registers a backend for ``cpu`` (CPU tensors drive the adapter under test); undone after."""

    def route(backend: _devices.GraphBackend) -> None:
        _devices.register(_devices.DeviceType("cpu", lambda: backend), replace=True)

    yield route
    _devices.register(emulated.DEVICE, replace=True)


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch, route_cpu: Route) -> Iterator[FakeTorchNpu]:
    fake = FakeTorchNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", fake.module)
    _devices.forget_backends()
    # Drive CPU tensors through the NPU adapter: only the adapter's calls are under test.
    route_cpu(_devices.backend_for("npu"))
    yield fake
    _devices.forget_backends()


def test_npu_without_accelerator_graph_uses_npugraph(fake_npu: FakeTorchNpu) -> None:
    assert _devices.graph_implementation("npu") == "torch_npu.npu.NPUGraph"
    handle = _devices.backend_for("npu").new_pool(torch.device("cpu"))
    assert state_of(handle).native == (7, 0)
    assert fake_npu.calls("graph_pool_handle") == [("graph_pool_handle",)]


def test_runner_drives_the_npu_graph_contract(fake_npu: FakeTorchNpu) -> None:
    inside: list[bool] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        inside.append(fake_npu.capturing)
        return x * 2

    runner = GraphRunner(fn)
    runner(torch.ones(4))
    # An empty capture creates the pool, its state is the rewind target, then the real capture.
    assert len(fake_npu.calls("graph_pool_handle")) == 1
    begin = ("capture_begin", (7, 0), fake_npu.stream, "thread_local")
    assert fake_npu.calls("capture_begin") == [begin] * 2
    # Neither capture synchronised the device nor emptied its cache (torch_npu's graph context
    # does both; see [Note: what a capture pays]).
    assert fake_npu.calls("synchronize") == fake_npu.calls("empty_cache") == []
    assert fake_npu.calls("get") == [("get", 0, (7, 0))]
    assert inside == [True]  # the callable ran inside the capture only
    dummy, first = fake_npu.graphs
    assert first.replays == 1
    assert dummy.replays == 0
    assert runner.counters.pool_bytes == 2 * 4096

    runner(torch.ones(4))
    assert first.replays == 2
    assert len(fake_npu.graphs) == 2
    assert inside == [True]

    runner(torch.ones(8))  # a new shape rewinds the pool before capturing
    (set_call,) = fake_npu.calls("set")
    _, index, state, stale, add = set_call
    assert (index, state, add) == (0, ("state", (7, 0)), [])
    assert len(stale) == 2  # the first graph's static input buffer and output
    assert all(isinstance(ptr, int) for ptr in stale)
    assert fake_npu.graphs[2].replays == 1

    runner.reset()
    assert first.resets == 1
    assert fake_npu.graphs[2].resets == 1


def test_no_rewind_when_mode2_is_off(fake_npu: FakeTorchNpu) -> None:
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(reuse_pool_across_shapes=False))
    runner(torch.ones(2))
    runner(torch.ones(3))
    assert fake_npu.calls("get") == []
    assert fake_npu.calls("set") == []
    # The two graphs, and the empty one that holds the pool while the handle lives (no
    # checkpoint is taken from it).
    assert len(fake_npu.graphs) == 3


def test_recapture_resets_the_old_npu_graph(fake_npu: FakeTorchNpu) -> None:
    runner = GraphRunner(
        lambda x, c: c.add_(x) * 1, input_kinds=[InputKind.USER, InputKind.MUTATED]
    )
    cache = torch.zeros(2)
    runner(torch.ones(2), cache)
    old = fake_npu.graphs[-1]
    # The new cache is made while the old one lives (so it cannot take the old address, which
    # would rightly replay); the old one dies at the assignment.
    cache = torch.zeros(2)
    runner(torch.ones(2), cache)
    assert old.resets == 1
    assert runner.counters.recapture_reasons == {"mutated_input_moved": 1}


def test_a_live_second_cache_keeps_the_npu_graph(fake_npu: FakeTorchNpu) -> None:
    runner = GraphRunner(
        lambda x, c: c.add_(x) * 1, input_kinds=[InputKind.USER, InputKind.MUTATED]
    )
    first, second = torch.zeros(2), torch.zeros(2)
    runner(torch.ones(2), first)
    old = fake_npu.graphs[-1]
    runner(torch.ones(2), second)
    runner(torch.ones(2), first)
    assert old.resets == 0
    assert runner.counters.captures == 2
    # A device capture records only: each call replays the graph (the capturing calls' replays
    # are part of their capture, so the counters read as on the CPU emulation).
    assert [g.replays for g in fake_npu.graphs[-2:]] == [2, 1]
    assert runner.counters.replays == 1


def test_missing_checkpoint_hooks_turn_mode2_off(
    fake_npu: FakeTorchNpu, caplog: pytest.LogCaptureFixture
) -> None:
    del fake_npu.module._C._npu_setCheckpointPoolState  # type: ignore[attr-defined]
    runner = GraphRunner(lambda x: x + 1)
    runner(torch.ones(2))
    runner(torch.ones(3))
    assert "no allocator checkpoint hooks" in caplog.text
    assert fake_npu.calls("set") == []


def test_rewind_is_refused_when_the_pool_holds_unknown_memory(
    fake_npu: FakeTorchNpu, caplog: pytest.LogCaptureFixture
) -> None:
    checked: list[set[int]] = []

    def check(index: int, pool: Any, ptrs: set[int]) -> bool:
        checked.append(set(ptrs))
        return False  # the pool holds something the runner did not allocate

    fake_npu.module._C._npu_checkPoolLiveAllocations = check  # type: ignore[attr-defined]
    runner = GraphRunner(lambda x: x + 1, name="leaky")
    runner(torch.ones(2))
    runner(torch.ones(3))
    runner(torch.ones(4))
    assert len(checked) == 1  # asked once, then mode 2 stays off for this runner
    assert len(checked[0]) == 2  # the first graph's input buffer and output
    assert fake_npu.calls("set") == []
    assert "'leaky'" in caplog.text
    assert "mode 2 off" in caplog.text


@pytest.mark.parametrize(
    ("hooks", "ends_with"),
    [
        (("_npu_endAllocateToPool", "_npu_releasePool"), "_npu_endAllocateToPool"),
        # torch_npu 2.11 and 2.12 spell the first hook by torch's old name.
        (
            ("_npu_endAllocateCurrentStreamToPool", "_npu_releasePool"),
            "_npu_endAllocateCurrentStreamToPool",
        ),
        (
            ("_npu_endAllocateToPool", "_npu_endAllocateCurrentStreamToPool", "_npu_releasePool"),
            "_npu_endAllocateToPool",
        ),
    ],
    ids=["torch_npu-2.13+", "torch_npu-2.11-2.12", "both-names"],
)
def test_a_failed_npu_capture_stops_allocating_to_its_pool(
    fake_npu: FakeTorchNpu, hooks: tuple[str, ...], ends_with: str
) -> None:
    for hook in hooks:
        setattr(
            fake_npu.module._C,
            hook,
            lambda i, p, hook=hook: fake_npu.log.append((hook, i, p)),
        )

    def fn(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 8:
            raise RuntimeError("operation not permitted when stream is capturing")
        return x * 2

    runner = GraphRunner(fn)
    runner(torch.ones(4))
    with pytest.raises(RuntimeError, match="capturing"):
        runner(torch.ones(8))  # the failed key runs eagerly, which raises the same way
    assert fake_npu.calls(ends_with) == [(ends_with, 0, (7, 0))]
    assert fake_npu.calls("_npu_releasePool") == [("_npu_releasePool", 0, (7, 0))]
    for unused in set(hooks) - {ends_with, "_npu_releasePool"}:
        assert fake_npu.calls(unused) == []


def test_unknown_device_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'cpu' \\(emulated\\), 'cuda' and 'npu'"):
        _devices.backend_for("xla")


def test_importing_the_package_never_imports_torch_npu() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch_npu':\n"
        "            raise ImportError('torch_npu imported at import time')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import npu_mempool\n"
        "npu_mempool.graph_implementation('cpu')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class FakeCudaGraphApi:
    """torch.cuda / torch.accelerator graph calls the CUDA adapter makes, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.graphs: list[FakeGraph] = []
        self.segments: list[dict[str, Any]] = []
        api = self

        class Graph(FakeGraph):
            # torch.accelerator.Graph takes its pool and mode when made, torch.cuda.CUDAGraph at
            # capture_begin; both are recorded as ("capture_begin", pool, mode).
            def __init__(
                self, keep_graph: bool = False, *, pool: Any = None, capture_error_mode: str = ""
            ) -> None:
                super().__init__(api.log)
                self.pool_id = pool
                self.mode = capture_error_mode
                api.graphs.append(self)

            def capture_begin(self, pool: Any = None, capture_error_mode: str = "") -> None:
                self.pool_id = pool or self.pool_id
                api.log.append(("capture_begin", self.pool_id, capture_error_mode or self.mode))

            def capture_end(self) -> None:
                self.captured = True
                api.segments.append({"segment_pool_id": self.pool_id, "total_size": 2 << 20})

        class Stream:
            def __init__(self, device: Any = None) -> None:
                self.device = device

            def __enter__(self) -> None:
                api.log.append(("stream",))

            def __exit__(self, *exc: object) -> None:
                pass

        @contextlib.contextmanager
        def stream_context(stream: Any) -> Iterator[None]:
            api.log.append(("stream",))
            yield

        def snapshot() -> list[dict[str, Any]]:
            api.log.append(("memory_snapshot",))
            return list(api.segments)

        def costly(name: str) -> Callable[..., None]:
            return lambda *args, **kwargs: api.log.append((name,))

        monkeypatch.setattr(torch.accelerator, "Graph", Graph, raising=False)
        monkeypatch.setattr(torch, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: Graph())
        monkeypatch.setattr(torch.cuda, "stream", stream_context)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (3, 1))
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "caller-stream")
        monkeypatch.setattr(torch.cuda, "set_stream", lambda s: api.log.append(("set_stream", s)))
        monkeypatch.setattr(torch.cuda, "memory_snapshot", snapshot)
        # What torch's capture context managers pay before every capture; the adapter must not.
        for module in (torch.cuda, torch.accelerator):
            for name in ("synchronize", "empty_cache"):
                monkeypatch.setattr(module, name, costly(name), raising=False)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
        monkeypatch.setattr(
            torch._C, "_cuda_getCheckpointState", lambda i, p: ("state", p), raising=False
        )
        monkeypatch.setattr(
            torch._C,
            "_cuda_checkPoolLiveAllocations",
            lambda i, p, ptrs: api.log.append(("check", len(ptrs))) or True,
            raising=False,
        )
        monkeypatch.setattr(
            torch._C,
            "_cuda_setCheckpointPoolState",
            lambda i, state, stale, add: api.log.append(("set", state, len(stale))),
            raising=False,
        )


@pytest.mark.parametrize("accelerator_graph", [True, False])
def test_cuda_adapter_contract(
    monkeypatch: pytest.MonkeyPatch, route_cpu: Route, accelerator_graph: bool
) -> None:
    api = FakeCudaGraphApi(monkeypatch)
    backend = _devices.DeviceBackend(_devices.Cuda(), accelerator_graph=accelerator_graph)
    route_cpu(backend)
    expected = "torch.accelerator.Graph" if accelerator_graph else "torch.cuda.CUDAGraph"
    assert backend.name == expected

    # The capture protocol is under test here, not the CUDA warm-up default (one eager call
    # per new key, tested in test_mempool_runner): capture on the first call.
    runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(warmup_runs=0))
    runner(torch.ones(4))
    runner(torch.ones(8))
    entered = [entry for entry in api.log if entry[0] == "capture_begin"]
    assert len(entered) == 3  # the empty capture that creates the pool, then two shapes
    assert all(entry == ("capture_begin", (3, 1), "thread_local") for entry in entered)
    assert api.log.count(("stream",)) == 3  # each capture runs on the pool's own stream
    assert all(g.captured for g in api.graphs)  # every capture was ended
    assert ("check", 2) in api.log
    assert api.log.index(("check", 2)) < api.log.index(("set", ("state", (3, 1)), 2))
    # Pool bytes are the allocator segments owned by this pool.
    assert runner.counters.pool_bytes == 3 * (2 << 20)
    assert [g.replays for g in api.graphs] == [0, 1, 1]


def test_cuda_picks_accelerator_graph_only_where_torch_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _devices.forget_backends()
    try:
        has_it = hasattr(torch.accelerator, "Graph")
        assert _devices.has_accelerator_graph() is has_it
        expected = "torch.accelerator.Graph" if has_it else "torch.cuda.CUDAGraph"
        assert _devices.graph_implementation("cuda") == expected
        _devices.forget_backends()
        monkeypatch.delattr(torch.accelerator, "Graph", raising=False)
        assert _devices.graph_implementation("cuda:0") == "torch.cuda.CUDAGraph"
    finally:
        _devices.forget_backends()


def test_the_empty_checkpoint_capture_does_not_warn(
    fake_npu: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch warns "The CUDA Graph is empty" at the end of a capture that recorded nothing; the
    # checkpoint capture is empty by design and must not surface it (warnings are errors here).
    ran: list[bool] = []
    capture = fake_npu.module.npu.graph  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def warning_graph(
        g: FakeGraph, pool: Any = None, stream: Any = None, **kw: Any
    ) -> Iterator[None]:
        before = len(ran)
        with capture(g, pool=pool, stream=stream):
            yield
        if len(ran) == before:
            import warnings

            warnings.warn(
                "The NPU Graph is empty. This usually means that the graph was attempted to be "
                "captured on wrong device or stream.",
                UserWarning,
                stacklevel=2,
            )

    monkeypatch.setattr(fake_npu.module.npu, "graph", warning_graph)  # type: ignore[attr-defined]

    def fn(x: torch.Tensor) -> torch.Tensor:
        ran.append(True)
        return x * 2

    runner = GraphRunner(fn, options=CaptureOptions(strict=True))
    runner(torch.ones(4))
    assert runner.counters.captures == 1
    assert fake_npu.calls("get") == [("get", 0, (7, 0))]


def test_a_pool_named_without_an_index_checkpoints_the_current_device(
    fake_npu: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 1)
    runner = GraphRunner(lambda x: x * 2)
    runner(torch.ones(4))
    assert fake_npu.calls("get") == [("get", 1, (7, 0))]


def test_library_workspaces_are_dropped_around_each_capture(
    fake_npu: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cuBLAS workspace allocated during a capture would stay allocated in the graph pool and
    # make every later rewind refuse (mode 2 silently off); CUDA Graph Trees drop them too.
    events: list[str] = []
    monkeypatch.setattr(_devices.Npu, "drop_library_workspaces", lambda self: events.append("drop"))

    def fn(x: torch.Tensor) -> torch.Tensor:
        events.append("body")
        return x * 2

    runner = GraphRunner(fn)
    runner(torch.ones(4))
    runner(torch.ones(5))
    assert events == ["drop", "body", "drop"] * 2


def test_cuda_drops_the_cublas_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(
        torch._C, "_cuda_clearCublasWorkspaces", lambda: calls.append(True), raising=False
    )
    _devices.Cuda().drop_library_workspaces()
    assert calls == [True]


@pytest.mark.parametrize("accelerator_graph", [True, False])
def test_a_cuda_capture_pays_no_device_sync_cache_emptying_or_snapshot(
    monkeypatch: pytest.MonkeyPatch, route_cpu: Route, accelerator_graph: bool
) -> None:
    # torch's capture context managers synchronize the device and empty its caches before every
    # capture, and a snapshot of the whole allocator measured each pool after it: none of it is
    # needed for a correct capture (native.py, [Note: what a capture pays]). The pool's bytes are
    # read from the allocator when asked for, and still exact.
    api = FakeCudaGraphApi(monkeypatch)
    backend = _devices.DeviceBackend(_devices.Cuda(), accelerator_graph=accelerator_graph)
    route_cpu(backend)
    # As when no structured trace is written (TORCH_TRACE unset): torch builds each trace event,
    # pool bytes included, whenever its trace logger may have somewhere to write it.
    monkeypatch.setattr(_trace, "trace_capture", lambda record: None)
    runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(warmup_runs=0))
    for n in (4, 8, 4, 16):  # a fake graph computes nothing: only the calls are checked
        runner(torch.ones(n))
    assert runner.counters.captures == 3
    paid = [entry for entry in api.log if entry[0] in ("synchronize", "empty_cache")]
    assert paid == []
    assert ("memory_snapshot",) not in api.log
    assert runner.counters.pool_bytes == 4 * (2 << 20)  # the checkpoint capture and three shapes
    assert api.log.count(("memory_snapshot",)) == 1


def test_empty_and_host_outputs_are_not_pool_memory_for_the_rewind_check(
    monkeypatch: pytest.MonkeyPatch, route_cpu: Route
) -> None:
    api = FakeCudaGraphApi(monkeypatch)
    backend = _devices.DeviceBackend(_devices.Cuda(), accelerator_graph=False)
    route_cpu(backend)
    # Tensors stand in for CUDA ones here: mark the pool as a CPU one so the device check passes.
    monkeypatch.setattr(
        backend, "new_pool", lambda device: _devices.PoolHandle(torch.device("cpu"), (3, 1))
    )

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x[:0] + 1  # the second output holds no memory

    runner = GraphRunner(fn, options=CaptureOptions(warmup_runs=0))
    runner(torch.ones(4))
    runner(torch.ones(8))
    # Only the non-empty output (and the static input) are offered to the live-allocation check.
    assert ("check", 2) in api.log


def test_task_queue_level_2_runs_every_graph_eagerly_with_one_warning(
    fake_npu: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # torch_npu refuses every capture under TASK_QUEUE_ENABLE=2: without a word, every key of
    # every runner failed to capture and warned on its own, none naming the setting.
    from npu_mempool import _runner

    monkeypatch.setenv("TASK_QUEUE_ENABLE", "2")
    monkeypatch.setattr(_runner, "_refusals", set())
    runners = [GraphRunner(lambda x: x * 2), GraphRunner(lambda x: x + 1)]
    with caplog.at_level(logging.WARNING):
        for runner in runners:
            for size in (2, 3, 2):
                runner(torch.ones(size))
    assert fake_npu.calls("capture_begin") == []
    assert [r.counters.captures for r in runners] == [0, 0]
    assert [r.counters.eager_calls for r in runners] == [3, 3]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "TASK_QUEUE_ENABLE=2" in warning
    assert "TASK_QUEUE_ENABLE=1" in warning


def test_a_pool_s_keep_alive_graph_counts_in_the_budget(fake_npu: FakeTorchNpu) -> None:
    budget = npu_mempool.graph_budget("cpu")  # the fake routes CPU tensors through the NPU path
    start = budget.live
    runner = GraphRunner(lambda x: x * 2)
    runner(torch.ones(4))
    assert budget.live - start == 2  # the pool's keep-alive graph and the runner's
    runner.reset()  # frees the graph and the runner's own pool, with its keep-alive graph
    assert budget.live == start
