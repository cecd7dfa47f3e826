"""Shared fixtures of the cross-package tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def device() -> torch.device:
    """The device the seed examples run on: the best available (``npu`` in the originals)."""
    from npu_compile.tools import best_device

    return best_device()


@pytest.fixture(autouse=True)
def _fresh_state(fresh_dynamo: None, fresh_tagged_events: None) -> None:
    """Each example starts from a clean Dynamo cache and tagged-event registry (root conftest)."""
