"""Shared fixtures of npu-compile's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Every test compiles from scratch: no graph cached by an earlier test answers its calls."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(params=[True, False], ids=["cpu-replays-dynamo", "aten"])
def dynamo_graph(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run a test with both graphs the CPU emulation can replay (Dynamo's, or AOT's as a device)."""
    from npu_compile._pipeline import replaying_aten_graph_on_cpu

    replays_dynamo: bool = request.param
    with replaying_aten_graph_on_cpu(not replays_dynamo):
        yield replays_dynamo
