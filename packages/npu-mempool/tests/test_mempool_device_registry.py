"""A device type is one registration: runners, graph_implementation and pools follow it.

The device registered here is ``meta``: its tensors are real torch tensors of a device type
npu-mempool does not know, without data, so its graph only keeps shapes. That is enough to see
a runner capture and replay on a device that exists only through its registration.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    ConfigError,
    GraphRunner,
    PoolHandle,
    graph_implementation,
    graph_pool_handle,
)
from npu_mempool._devices import DeviceType, backend_for, register, registered, unregister
from npu_mempool._devices.base import Body
from npu_mempool._pool import state_of

BUILT_IN = "'cpu' \\(emulated\\), 'cuda' and 'npu'"


class MetaGraph:
    """Replays by re-running the callable on the call's tensors and copying into the outputs."""

    def __init__(self, rerun: Any, static: list[Any], log: list[str]) -> None:
        self._rerun = rerun
        self._static = static
        self._log = log

    def replay(self, args: tuple[Any, ...]) -> None:
        self._log.append("replay")
        out = self._rerun(args)
        for static, new in zip(self._static, out, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(new)

    def reset(self) -> None:
        self._log.append("reset")


class MetaBackend:
    """The smallest graph backend: what a new device module would build."""

    name = "meta-test-graph"
    executes_on_capture = True
    default_warmup_runs = 0

    def __init__(self) -> None:
        self.log: list[str] = []
        self.pools = 0

    def new_pool(self, device: torch.device) -> PoolHandle:
        self.pools += 1
        return PoolHandle(device, native=("meta-pool", self.pools))

    def capture(
        self, pool: PoolHandle, body: Body, error_mode: str = "thread_local"
    ) -> tuple[MetaGraph, list[Any]]:
        self.log.append("capture")
        with torch.no_grad():
            leaves, rerun, _inputs = body(torch.empty_like)
        static = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return MetaGraph(rerun, static, self.log), static

    def checkpoint(self, pool: PoolHandle) -> bool:
        state_of(pool).save_checkpoint("empty")
        return True

    def rewind(self, pool: PoolHandle) -> bool:
        self.log.append("rewind")
        state_of(pool).rewound()
        return True


@pytest.fixture
def meta() -> Iterator[MetaBackend]:
    backend = MetaBackend()
    register(DeviceType("meta", lambda: backend, note="test"))
    try:
        yield backend
    finally:
        unregister("meta")


def test_a_runner_captures_and_replays_on_a_registered_device(meta: MetaBackend) -> None:
    runner = GraphRunner(lambda x, y: (x * 2 + y).sum(0), name="meta_step")
    x, y = torch.empty(3, 4, device="meta"), torch.empty(3, 4, device="meta")
    first = runner(x, y)
    assert (first.device.type, first.shape, first.dtype) == ("meta", (4,), torch.float32)
    del first  # its memory is free again: the next call replays
    assert runner(x, y).shape == (4,)
    held = runner(x, y)  # an output still held: the next call takes a second call path
    assert runner(x, y).shape == (4,)
    del held
    runner(torch.empty(5, 4, device="meta"), torch.empty(5, 4, device="meta"))
    assert (runner.counters.captures, runner.counters.replays) == (3, 2)
    assert runner.num_paths == 2
    assert meta.log == ["capture", "replay", "replay", "capture", "rewind", "capture"]
    assert runner.pool is not None
    assert runner.pool.device.type == "meta"
    assert state_of(runner.pool).native == ("meta-pool", 1)


def test_graph_implementation_and_pools_go_through_the_registration(meta: MetaBackend) -> None:
    assert graph_implementation("meta") == "meta-test-graph"
    assert graph_implementation(torch.device("meta")) == "meta-test-graph"
    assert backend_for("meta") is meta
    handle = graph_pool_handle("meta")
    assert state_of(handle).native == ("meta-pool", 1)
    a = GraphRunner(torch.neg, options=CaptureOptions(pool=handle))
    b = GraphRunner(torch.abs, options=CaptureOptions(pool=handle))
    a(torch.empty(2, device="meta"))
    b(torch.empty(2, device="meta"))
    assert a.pool is b.pool is handle
    assert meta.pools == 1


def test_the_unknown_device_error_lists_the_registered_types(meta: MetaBackend) -> None:
    assert [device.name for device in registered()] == ["cpu", "cuda", "npu", "meta"]
    with pytest.raises(ConfigError, match="'cuda', 'npu' and 'meta' \\(test\\)"):
        backend_for("xla")


def test_unregistering_removes_the_device_again() -> None:
    backend = MetaBackend()
    register(DeviceType("meta", lambda: backend))
    assert graph_implementation("meta") == "meta-test-graph"
    with pytest.raises(ValueError, match="already registered"):
        register(DeviceType("meta", lambda: backend))
    unregister("meta")
    with pytest.raises(
        ConfigError, match=f"device type 'meta'; npu-mempool captures graphs on {BUILT_IN}"
    ):
        graph_implementation("meta")
    runner = GraphRunner(torch.neg)
    with pytest.raises(ConfigError, match=BUILT_IN):
        runner(torch.empty(2, device="meta"))


def test_a_backend_is_built_once_at_first_use() -> None:
    built: list[MetaBackend] = []

    def build() -> MetaBackend:
        built.append(MetaBackend())
        return built[-1]

    register(DeviceType("meta", build))
    try:
        assert built == []  # registering builds nothing (a vendor library may not import)
        graph_implementation("meta")
        graph_implementation("meta:0")
        assert len(built) == 1
    finally:
        unregister("meta")
