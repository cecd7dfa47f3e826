"""GraphRunner.bind(static_outputs=True): the graph's own outputs, overwritten by the next call.

The contract of a device graph replayed directly and of vLLM's graph wrapper. What it keeps:
the outputs of checked calls (the runner's, a checked bound graph's) are never overwritten by
a static replay, and the static outputs never by a checked one; a graph whose warm-up output is
alive is not replayed statically; the layout is checked; the pool's record goes with the bound
graph. Each case fails if the check it names were dropped.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    ConfigError,
    GraphRunner,
    InputKind,
    InputLayoutError,
    StaleOutputError,
)
from npu_mempool._pool import state_of

P, U = InputKind.PARAMETER, InputKind.USER


def affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w + b) * 2


def _runner(**options: Any) -> tuple[GraphRunner, torch.Tensor, torch.Tensor]:
    runner = GraphRunner(affine, input_kinds=[U, P, P], options=CaptureOptions(**options))
    return runner, torch.randn(8, 8), torch.randn(8)


def _bound(runner: GraphRunner, rows: int, w: torch.Tensor, b: torch.Tensor) -> Any:
    runner(torch.randn(rows, 8), w, b)  # captures; the output is dropped at once
    return runner.bind(torch.randn(rows, 8), w, b, static_outputs=True)


def test_every_call_returns_the_same_outputs_with_that_calls_values() -> None:
    runner, w, b = _runner()
    bound = _bound(runner, 4, w, b)
    assert bound.static_outputs
    assert not runner.bind(torch.randn(4, 8), w, b).static_outputs
    replays = runner.counters.replays
    first = None
    for _ in range(4):
        x = torch.randn(4, 8)
        out = bound(x)
        torch.testing.assert_close(out, affine(x, w, b), rtol=0, atol=0)
        first = out if first is None else first
        assert out is first  # the same tensor: the previous call's values are gone
    assert runner.counters.replays == replays + 4
    assert runner.counters.captures == 1


def test_a_warm_up_output_still_alive_is_never_overwritten() -> None:
    runner, w, b = _runner()
    x0 = torch.randn(4, 8)
    held = runner(x0, w, b)  # the warm-up output, kept
    bound = runner.bind(x0, w, b, static_outputs=True)
    for _ in range(3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
        torch.testing.assert_close(held, affine(x0, w, b), rtol=0, atol=0)
    replays = runner.counters.replays
    del held
    x = torch.randn(4, 8)
    torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
    assert runner.counters.replays == replays + 1  # replayed now that nothing else uses it


@pytest.mark.parametrize("rows", [4, 16, 8], ids=["same key", "larger key", "smaller key"])
def test_a_runner_call_leaves_the_static_outputs_alone(rows: int) -> None:
    # The same key's graph, or another key's in the same rewound pool (overlapping memory).
    runner, w, b = _runner()
    bound = _bound(runner, 4, w, b)
    runner(torch.randn(16, 8), w, b)
    x = torch.randn(4, 8)
    out = bound(x)
    expected = affine(x, w, b)
    for _ in range(3):
        y = torch.randn(rows, 8)
        torch.testing.assert_close(runner(y, w, b), affine(y, w, b), rtol=0, atol=0)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_static_replays_never_overwrite_a_checked_output_of_the_pool() -> None:
    # Mode 2: every key's graph shares one rewound pool, so the graphs overlap in memory. A
    # held output of another key must survive the static replays.
    runner, w, b = _runner()
    bound = _bound(runner, 8, w, b)
    x16 = torch.randn(16, 8)
    held = runner(x16, w, b)
    for _ in range(3):
        x = torch.randn(8, 8)
        torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
        torch.testing.assert_close(held, affine(x16, w, b), rtol=0, atol=0)


def test_static_bound_graphs_of_one_pool_replay_in_turn_without_captures() -> None:
    # An engine binds every captured size: each call replays, none captures or falls back.
    runner, w, b = _runner()
    sizes = (16, 8, 4)
    for rows in sizes:
        runner(torch.randn(rows, 8), w, b)
    bound = {rows: runner.bind(torch.randn(rows, 8), w, b, static_outputs=True) for rows in sizes}
    captures, replays = runner.counters.captures, runner.counters.replays
    for _ in range(3):
        for rows in (4, 16, 8):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(bound[rows](x), affine(x, w, b), rtol=0, atol=0)
    assert runner.counters.captures == captures
    assert runner.counters.replays == replays + 9


def test_the_layout_is_checked() -> None:
    runner, w, b = _runner()
    bound = _bound(runner, 4, w, b)
    with pytest.raises(InputLayoutError, match="bf"):
        bound(torch.randn(4, 8, dtype=torch.bfloat16))
    with pytest.raises(InputLayoutError):
        bound(torch.randn(1, 8))  # would broadcast into the static buffer


def test_outputs_kept_after_the_bound_graph_goes_stay_protected() -> None:
    runner, w, b = _runner()
    bound = _bound(runner, 8, w, b)
    x = torch.randn(8, 8)
    out = bound(x)
    expected = affine(x, w, b)
    state = state_of(bound._entry.pool)
    assert list(state.static_holders())
    del bound
    gc.collect()
    assert not list(state.static_holders())
    # A checked output again: the runner's calls of this key and of others leave it alone.
    for rows in (8, 16, 8):
        y = torch.randn(rows, 8)
        torch.testing.assert_close(runner(y, w, b), affine(y, w, b), rtol=0, atol=0)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_check_output_overwrite_makes_a_read_after_the_next_call_raise() -> None:
    runner, w, b = _runner(check_output_overwrite=True)
    bound = _bound(runner, 4, w, b)
    x = torch.randn(4, 8)
    old = bound(x)
    torch.testing.assert_close(old, affine(x, w, b), rtol=0, atol=0)
    y = torch.randn(4, 8)
    new = bound(y)
    with pytest.raises(StaleOutputError, match="next call"):
        old.sum()
    torch.testing.assert_close(new, affine(y, w, b), rtol=0, atol=0)
    # The loop that passes each output back in reads it before it is overwritten.
    h = torch.randn(4, 8)
    for _ in range(3):
        expected = affine(h.clone(), w, b)
        h = bound(h)
        torch.testing.assert_close(h, expected, rtol=0, atol=0)


def test_force_recapture_and_a_reset_are_followed() -> None:
    runner, w, b = _runner(force_recapture=True)
    bound = _bound(runner, 4, w, b)
    for _ in range(2):
        x = torch.randn(4, 8)
        torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
    runner, w, b = _runner()
    bound = _bound(runner, 4, w, b)
    runner.reset()
    for _ in range(3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
    assert bound._entry.live  # it follows the graph the runner captured after the reset
    replays = runner.counters.replays
    bound(torch.randn(4, 8))
    assert runner.counters.replays == replays + 1


def test_bad_requests_are_refused() -> None:
    runner, w, b = _runner(clone_output=True)
    runner(torch.randn(4, 8), w, b)
    with pytest.raises(ConfigError, match="clone_output"):
        runner.bind(torch.randn(4, 8), w, b, static_outputs=True)
    with pytest.raises(ConfigError, match="True or False"):
        runner.bind(torch.randn(4, 8), w, b, static_outputs="yes")  # type: ignore[arg-type]
