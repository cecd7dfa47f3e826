"""Shared fixtures of the cross-package tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def device() -> torch.device:
    """The device the seed examples run on: the best available (``npu`` in the originals)."""
    from npu_compile._cli.device import best_device

    return best_device()


@pytest.fixture(autouse=True)
def _fresh_state(fresh_dynamo: None, fresh_tagged_events: None) -> None:
    """Each example starts from a clean Dynamo cache and tagged-event registry (root conftest)."""


@pytest.fixture(params=["dynamo-graph", "aten-graph"])
def cpu_replay(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run an example with both graphs the CPU emulation can replay.

    On CPU the backend replays Dynamo's graph (cheaper Python); devices capture the ATen graph
    after the stream pass. The ``aten-graph`` run puts that device path through the runner here.
    """
    from npu_compile._forward import replaying_aten_graph_on_cpu

    param: str = request.param
    with replaying_aten_graph_on_cpu(param == "aten-graph"):
        yield param
