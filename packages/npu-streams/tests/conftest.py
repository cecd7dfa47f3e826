"""Fixtures for npu-streams: a clean event registry, and a fake accelerator for CPU runs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import npu_streams
import pytest
import torch
from npu_streams import _runtime


@pytest.fixture(autouse=True)
def fresh_events(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Tags are process-wide (on CPU too, where they keep their priority): each test starts clean.
    monkeypatch.setattr(_runtime, "_cpu_priorities", {})
    npu_streams.reset_tagged_events()
    yield
    npu_streams.reset_tagged_events()


@dataclass(eq=False)
class FakeStream:
    name: str
    priority: int


@dataclass(eq=False)
class FakeEvent:
    name: str
    log: list[tuple[str, ...]]

    def record(self, stream: FakeStream) -> None:
        self.log.append(("record", self.name, stream.name))

    def wait(self, stream: FakeStream) -> None:
        self.log.append(("wait", self.name, stream.name))


@dataclass
class FakeDevice:
    """Stands in for `_device` and `_accel`: one accelerator whose calls are logged in order."""

    device: torch.device = field(default_factory=lambda: torch.device("cuda", 0))
    log: list[tuple[str, ...]] = field(default_factory=list)
    current: FakeStream = field(default_factory=lambda: FakeStream("main", 0))
    streams: list[FakeStream] = field(default_factory=list)
    events: int = 0
    #: Streams recording into a device graph right now.
    capturing: set[str] = field(default_factory=set)

    def current_device(self) -> torch.device:
        return self.device

    def tensor_device(self, tensor: torch.Tensor) -> torch.device:
        return self.device

    def current_stream(self, device: torch.device) -> FakeStream:
        assert device == self.device
        return self.current

    def set_stream(self, stream: FakeStream) -> None:
        self.current = stream
        self.log.append(("set_stream", stream.name))

    def new_stream(self, device: torch.device, priority: int) -> FakeStream:
        stream = FakeStream(f"side{len(self.streams)}", priority)
        self.streams.append(stream)
        return stream

    def new_event(self, device: torch.device) -> FakeEvent:
        self.events += 1
        return FakeEvent(f"ev{self.events - 1}", self.log)

    def record_stream(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.log.append(("record_stream", stream.name))

    def is_capturing(self, stream: FakeStream) -> bool:
        return stream.name in self.capturing


@pytest.fixture
def fake_device(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    fake = FakeDevice()
    monkeypatch.setattr(_runtime, "_device", fake)
    monkeypatch.setattr(_runtime, "current_device", fake.current_device)
    monkeypatch.setattr(_runtime, "_streams", {})
    monkeypatch.setattr(_runtime, "_internal_events", {})
    return fake


class SeedModel(torch.nn.Module):
    """The example of TorchAir's multi-stream page (seed 000), with a configurable device/size."""

    def __init__(self, size: int = 8, device: str = "cpu", dtype: torch.dtype = torch.float32):
        super().__init__()
        self.size, self.device, self.dtype = size, device, dtype
        self.tagged_event1 = npu_streams.npu_create_tagged_event(tag="66")
        self.tagged_event2 = npu_streams.npu_create_tagged_event(tag="77")

    def forward(
        self, in1: torch.Tensor, in2: torch.Tensor, in3: torch.Tensor, in4: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        add_result = torch.add(in1, in2)
        npu_streams.npu_tagged_event_record(self.tagged_event1)
        with npu_streams.npu_stream_switch("1"):
            npu_streams.npu_tagged_event_wait(self.tagged_event1)
            mm_result = torch.mm(in3, in4)
            npu_streams.npu_tagged_event_record(self.tagged_event2)
        B = in3 + in4
        npu_streams.npu_record_tagged_stream(B, "1")
        mm1 = torch.mm(in3, in4)
        del B
        C = torch.ones(self.size, self.size, dtype=self.dtype, device=self.device)
        C.add_(2)
        with npu_streams.npu_stream_switch("2"):
            npu_streams.npu_tagged_event_wait(self.tagged_event2)
            add2 = torch.add(in3, in4)
        return add_result, mm_result, mm1, add2, C


@pytest.fixture
def seed_model() -> type[SeedModel]:
    return SeedModel
