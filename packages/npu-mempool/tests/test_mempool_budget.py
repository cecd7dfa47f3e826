"""The device-wide graph budget: graphs of every runner and pool count; over it, calls run eagerly.

On Ascend each graph takes a device stream, of about 2048; the budget (1800 by default there)
keeps captures from taking the streams side scopes and communication need. Tested here on the
CPU emulation with a small budget.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import npu_mempool
import pytest
import torch
from npu_mempool import ConfigError, GraphRunner


@pytest.fixture
def budget() -> Iterator[npu_mempool.GraphBudget]:
    """The CPU's budget, three graphs above what earlier tests of the process still hold."""
    budget = npu_mempool.graph_budget("cpu")
    assert budget.limit is None  # no budget on the CPU by default
    gc.collect()
    budget.limit = budget.live + 3
    yield budget
    budget.limit = None


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_captures_over_the_budget_run_eagerly_with_one_log_line(
    budget: npu_mempool.GraphBudget, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = GraphRunner(_double, name="first"), GraphRunner(_double, name="second")
    start = budget.live
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        for size in (1, 2):
            torch.testing.assert_close(first(torch.ones(size)), torch.full((size,), 2.0))
        for size in (3, 4, 5):  # the second runner's third graph would be the fourth
            torch.testing.assert_close(second(torch.ones(size)), torch.full((size,), 2.0))
        torch.testing.assert_close(first(torch.ones(6)), torch.full((6,), 2.0))
    assert budget.live - start == 3
    assert (first.counters.captures, second.counters.captures) == (2, 1)
    assert (first.counters.eager_calls, second.counters.eager_calls) == (1, 2)
    [line] = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert "graph_budget('cpu').limit" in line
    # Graphs that go give their place back.
    second.reset()
    torch.testing.assert_close(first(torch.ones(7)), torch.full((7,), 2.0))
    assert first.counters.captures == 3


def test_the_budget_counts_graphs_until_they_are_freed_or_collected(
    budget: npu_mempool.GraphBudget,
) -> None:
    start = budget.live
    runner = GraphRunner(_double)
    runner(torch.ones(2))
    runner(torch.ones(3))
    assert budget.live == start + 2
    del runner
    gc.collect()
    assert budget.live == start


def test_npu_has_a_budget_and_it_takes_counts_only() -> None:
    assert npu_mempool.graph_budget("npu").limit == 1800
    budget = npu_mempool.graph_budget("cpu")
    for wrong in (0, -1, 1.5, True, "10"):
        with pytest.raises(ConfigError):
            budget.limit = wrong  # type: ignore[assignment]
