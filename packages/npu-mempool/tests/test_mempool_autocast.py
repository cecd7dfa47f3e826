"""A runner called under ``torch.autocast``: the casts are part of the graph, per autocast state.

A device graph replays the kernels of its capture, casts included, and nothing else: a graph
captured under autocast must never answer a call outside it (or under another dtype), and its
casts must not read autocast's weight cache, whose copies die when the autocast block exits.
"""

from __future__ import annotations

import torch
from npu_mempool import GraphRunner, InputKind

P, U = InputKind.PARAMETER, InputKind.USER


def test_a_capture_under_autocast_does_not_use_its_weight_cache() -> None:
    # torch's make_graphed_callables refuses autocast's cache: a graph that baked a cached copy's
    # address reads freed memory once the block exits. The runner captures with the cache off.
    seen: list[bool] = []

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_autocast_cache_enabled())
        return torch.nn.functional.linear(x, w)

    w = torch.randn(4, 4, requires_grad=True)
    runner = GraphRunner(linear, input_kinds=[U, P])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = runner(torch.randn(2, 4), w)
    assert out.dtype == torch.bfloat16
    assert seen == [False]
    assert torch.is_autocast_cache_enabled()  # restored once the capture ended


def test_each_autocast_state_gets_its_own_graph() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    w = torch.randn(4, 4)
    runner = GraphRunner(f, input_kinds=[U, P])
    states = [("cpu", torch.bfloat16), None, ("cpu", torch.float16)]
    for _ in range(2):
        for state in states:
            x = torch.randn(2, 4)
            if state is None:
                got, expected = runner(x, w).clone(), f(x, w)
            else:
                with torch.autocast(state[0], dtype=state[1]):
                    got, expected = runner(x, w).clone(), f(x, w)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert (runner.counters.captures, runner.counters.replays) == (3, 3)
