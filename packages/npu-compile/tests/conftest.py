"""Shared fixtures of npu-compile's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _autouse_fresh_dynamo(fresh_dynamo: None) -> None:
    """Every test compiles from scratch: the root conftest's ``fresh_dynamo`` around each one."""
