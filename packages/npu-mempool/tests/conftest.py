"""Every npu-mempool test runs twice: with autograd on and under ``torch.no_grad()``.

A replay takes a different path in each (the CPU emulation inlines its re-run only without
autograd), and users call runners both ways: a test must hold for both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, params=["grad", "no_grad"])
def grad_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch.set_grad_enabled(request.param == "grad"):
        yield request.param
