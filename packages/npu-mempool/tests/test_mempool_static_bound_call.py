"""GraphRunner.bind(static_outputs=True, all_arguments=True): the bound call, every argument passed.

For engines that keep every input in persistent buffers and pass them on each call (vLLM's graph
wrapper). A call replays only when it is the bound call: each tensor with the bound layout, each
watched tensor at the bound address, the other values equal and of the same type. Each case
fails if the check it names were dropped: a call that differs would replay the bound graph and
return another call's numbers (or shape).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from npu_mempool import CaptureOptions, ConfigError, GraphRunner, InputKind, InputLayoutError

P, M, U = InputKind.PARAMETER, InputKind.MUTATED, InputKind.USER


def scaled(h: torch.Tensor, w: torch.Tensor, scale: Any) -> torch.Tensor:
    return h @ w * scale


def _bound(kinds: list[InputKind], h: torch.Tensor, w: torch.Tensor, **options: Any) -> Any:
    runner = GraphRunner(scaled, input_kinds=kinds, options=CaptureOptions(**options))
    runner(h, w, 2)  # captures; the output is dropped at once
    return runner, runner.bind(h, w, 2, static_outputs=True, all_arguments=True)


@pytest.mark.parametrize("kinds", [[M, P, U], [P, P, U], [U, P, U]], ids=["M", "P", "U"])
def test_the_bound_call_replays_and_returns_the_same_outputs(kinds: list[InputKind]) -> None:
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner, bound = _bound(kinds, h, w)
    assert bound.static_outputs
    replays, first = runner.counters.replays, None
    for _ in range(3):
        h.copy_(torch.randn(4, 8))  # new values in the persistent buffer
        out = bound(h, w, 2)
        torch.testing.assert_close(out, scaled(h, w, 2), rtol=0, atol=0)
        first = out if first is None else first
        assert out is first
    assert runner.counters.replays == replays + 3
    assert runner.counters.captures == 1


@pytest.mark.parametrize(
    "change",
    ["value", "type", "moved", "same_address_other_shape", "dtype", "arity"],
)
def test_a_call_that_is_not_the_bound_one_is_a_runner_call(change: str) -> None:
    buffer, w = torch.randn(8, 8), torch.randn(8, 8)
    h = buffer[:4]
    runner, bound = _bound([M, P, U], h, w)
    bound(h, w, 2)
    args: tuple[Any, ...] = (h, w, 2)
    if change == "value":
        args = (h, w, 3)
    elif change == "type":
        args = (h, w, 2.5)
    elif change == "moved":
        args = (h, torch.randn(8, 8), 2)
    elif change == "same_address_other_shape":
        args = (buffer[:2], w, 2)  # a persistent buffer's slice for another size
        assert args[0].data_ptr() == h.data_ptr()
    elif change == "dtype":
        args = (h.double(), w.double(), 2)
    replays, captures = runner.counters.replays, runner.counters.captures
    if change == "arity":
        # What the runner says of another signature, not a replay that ignores the extra one.
        with pytest.raises(InputLayoutError, match="argument"):
            bound(h, w, 2, 5)
        return
    out = bound(*args)
    torch.testing.assert_close(out, scaled(*args), rtol=0, atol=0)
    assert runner.counters.captures == captures + 1  # the runner captured the new call
    assert runner.counters.replays == replays
    # The bound call replays statically again once the runner call's checked output is dead
    # (while it lives, no static replay of the pool may write over it).
    del out
    torch.testing.assert_close(bound(h, w, 2), scaled(h, w, 2), rtol=0, atol=0)
    assert runner.counters.replays == replays + 1


def test_a_type_equal_value_is_not_the_bound_one() -> None:
    # 2 == 2.0 == True-ish comparisons: the type is compared too, as the runner's key does.
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner, bound = _bound([M, P, U], h, w)
    bound(h, w, 2)
    captures = runner.counters.captures
    bound(h, w, 2.0)
    assert runner.counters.captures == captures + 1


def test_autocast_is_seen_through_the_tensors_of_the_call() -> None:
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    _, bound = _bound([M, P, U], h, w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = bound(h, w, 2)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, scaled(h, w, 2), rtol=0, atol=0)


@pytest.mark.parametrize("static", [False, True])
def test_a_bound_graph_without_user_tensors_sees_autocast(static: bool) -> None:
    # Dynamo's tensor check sees the autocast state of its tensors' device only: with no USER
    # tensor it sees none, and a bound graph replayed the float32 graph under bfloat16 autocast.
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner = GraphRunner(lambda h, w: h @ w, input_kinds=[P, P])
    runner(h, w)
    bound = runner.bind(h, w, static_outputs=static)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = h @ w
        out = bound()
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_user_tensors_are_copied_in_from_their_positions() -> None:
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner, bound = _bound([U, P, U], h, w)
    for _ in range(2):
        x = torch.randn(4, 8)  # a new tensor each call: copied into the static input
        torch.testing.assert_close(bound(x, w, 2), scaled(x, w, 2), rtol=0, atol=0)
    assert runner.counters.captures == 1


def test_a_warm_up_output_alive_is_not_overwritten() -> None:
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner = GraphRunner(scaled, input_kinds=[M, P, U])
    warm = runner(h, w, 2)
    kept = warm.clone()
    bound = runner.bind(h, w, 2, static_outputs=True, all_arguments=True)
    h.copy_(torch.randn(4, 8))
    torch.testing.assert_close(bound(h, w, 2), scaled(h, w, 2), rtol=0, atol=0)
    torch.testing.assert_close(warm, kept, rtol=0, atol=0)


def test_all_arguments_needs_static_outputs() -> None:
    h, w = torch.randn(4, 8), torch.randn(8, 8)
    runner = GraphRunner(scaled, input_kinds=[M, P, U])
    runner(h, w, 2)
    with pytest.raises(ConfigError, match="static_outputs=True"):
        runner.bind(h, w, 2, all_arguments=True)
    with pytest.raises(ConfigError, match="True or False"):
        runner.bind(h, w, 2, static_outputs=True, all_arguments=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("all_arguments", [False, True])
def test_graphs_bound_while_their_warm_up_outputs_lived_replay_in_turn(
    all_arguments: bool,
) -> None:
    # vLLM's wrapper binds each graph right after its capture, while the capture's output is
    # still the caller's. The static outputs used to be made at the bind: their views kept every
    # such graph busy as a lender after the warm-up output died, and each bound graph found the
    # others in use and captured again on another call path.
    from npu_mempool import graph_pool_handle

    a, b = torch.zeros(4, 8), torch.zeros(4, 8)
    pool = graph_pool_handle(torch.device("cpu"))
    kinds = [M, M] if all_arguments else [U, M]
    runners = [
        GraphRunner(
            lambda a, b, k=k: a * k - b,
            input_kinds=kinds,
            options=CaptureOptions(pool=pool, clone_input=False),
        )
        for k in (2, 3, 4)
    ]
    bound = []
    for runner in runners:
        warm = runner(a, b)
        bound.append(runner.bind(a, b, static_outputs=True, all_arguments=all_arguments))
        del warm
    for _ in range(2):
        for k, graph in zip((2, 3, 4), bound, strict=True):
            a.copy_(torch.randn(4, 8))
            out = graph(a, b) if all_arguments else graph(a)
            torch.testing.assert_close(out, a * k - b, rtol=0, atol=0)
            del out
    assert [(r.counters.captures, r.counters.replays) for r in runners] == [(1, 2)] * 3


def test_a_graph_let_go_under_a_static_bound_graph_frees_its_blocks() -> None:
    # force_recapture: the static bound graph follows each new graph through the runner; the
    # runner's reset then frees it. The bound graph still pointed at the freed graph (its
    # input copy and replay steps), which kept the graph's static buffers in the pool while the
    # pool counted them free (found by the lifecycle machine).
    from npu_mempool import graph_pool_handle, top_level_call
    from npu_mempool._pool import state_of

    pool = graph_pool_handle(torch.device("cpu"))
    runner = GraphRunner(
        lambda x: x * 2 + 1,
        options=CaptureOptions(keep_held_outputs=False, force_recapture=True, pool=pool),
    )
    with top_level_call():
        runner(torch.ones(8, 64))
    bound = runner.bind(torch.zeros(8, 64), static_outputs=True)
    with top_level_call():
        torch.testing.assert_close(bound(torch.full((8, 64), 2.0)), torch.full((8, 64), 5.0))
    runner.reset()
    arena = state_of(pool).arena
    assert arena is not None
    kept = {block for graph in state_of(pool)._retired.values() for block in graph.graph._blocks}
    assert arena.blocks() <= kept
    del bound
