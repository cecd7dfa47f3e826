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
