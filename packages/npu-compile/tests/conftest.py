"""Shared fixtures of npu-compile's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _autouse_fresh_dynamo(fresh_dynamo: None) -> None:
    """Every test compiles from scratch: the root conftest's ``fresh_dynamo`` around each one."""


@pytest.fixture(params=[True, False], ids=["cpu-replays-dynamo", "aten"])
def dynamo_graph(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run a test with both graphs the CPU emulation can replay (Dynamo's, or AOT's as a device)."""
    from npu_compile._forward import replaying_aten_graph_on_cpu

    replays_dynamo: bool = request.param
    with replaying_aten_graph_on_cpu(not replays_dynamo):
        yield replays_dynamo
