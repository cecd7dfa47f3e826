"""Parameters that come at a new address on every call are copied in, not captured again.

FSDP2 gathers each layer's parameters anew every step; a runner that watched their addresses
captured on every call and never replayed. Parameter sets that alternate (two module instances)
still get a graph each, which replays.
"""

from __future__ import annotations

import torch
from npu_mempool import GraphRunner, InputKind
from npu_mempool._runner import MOVED_LIMIT

P, U = InputKind.PARAMETER, InputKind.USER


def _affine(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w)


def test_parameters_gathered_anew_every_call_replay_after_a_few_captures() -> None:
    runner = GraphRunner(_affine, input_kinds=[U, P])
    weights = torch.randn(4, 3)
    for step in range(20):
        w = weights.clone() + step  # same values seen through a new tensor, a new address
        x = torch.randn(2, 4)
        torch.testing.assert_close(runner(x, w), _affine(x, w), rtol=0, atol=0)
    # Before, 20 captures and 0 replays.
    assert runner.counters.captures <= MOVED_LIMIT + 1
    assert runner.counters.replays >= 20 - (MOVED_LIMIT + 1)


def test_alternating_parameter_sets_keep_a_graph_each() -> None:
    runner = GraphRunner(_affine, input_kinds=[U, P])
    sets = [torch.randn(4, 3), torch.randn(4, 3)]
    for step in range(10):
        x = torch.randn(2, 4)
        w = sets[step % 2]
        torch.testing.assert_close(runner(x, w), _affine(x, w), rtol=0, atol=0)
    assert (runner.counters.captures, runner.counters.replays) == (2, 8)
    assert runner.counters.recapture_reasons["parameter_moved"] == 1
