"""Two instances of one module class share one FX graph; each keeps its own captured graph."""

from __future__ import annotations

import npu_compile
import npu_mempool
import pytest
import torch

pytestmark = pytest.mark.usefixtures("cpu_replay")


def test_alternating_instances_replay_instead_of_recapturing(device: torch.device) -> None:
    torch.manual_seed(0)
    first = torch.nn.Linear(8, 8).to(device)
    second = torch.nn.Linear(8, 8).to(device)
    backend = npu_compile.get_npu_backend()
    step_a = torch.compile(first, backend=backend, fullgraph=True)
    step_b = torch.compile(second, backend=backend, fullgraph=True)
    x = torch.randn(2, 8, device=device)
    with torch.no_grad():
        step_a(x), step_b(x)  # one capture per parameter set
        with npu_mempool.counters.expect(captures=0, replays=6):
            for _ in range(3):
                torch.testing.assert_close(step_a(x), first(x))
                torch.testing.assert_close(step_b(x), second(x))
