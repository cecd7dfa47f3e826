"""Root pytest configuration: skip ``device``-marked tests when no accelerator is present."""

from __future__ import annotations

import pytest


def _accelerator_available() -> bool:
    import torch

    return bool(torch.accelerator.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("device") for item in items) and not _accelerator_available():
        skip = pytest.mark.skip(reason="needs an accelerator (CUDA or NPU); none is available")
        for item in items:
            if item.get_closest_marker("device"):
                item.add_marker(skip)
