"""GraphRunner.bind: a captured graph called with its USER tensors alone, no key, no addresses.

What a bound graph still checks (the inputs' layout, the liveness of what it handed out, that
the runner still holds the graph) and what it leaves to its caller (tensors used in place are
the bound ones): each case below fails if the check it names were dropped.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from npu_mempool import (
    BoundGraph,
    CaptureError,
    CaptureOptions,
    GraphRunner,
    InputKind,
    InputLayoutError,
    _bound,
    mark_step_begin,
)

P, M, U = InputKind.PARAMETER, InputKind.MUTATED, InputKind.USER


def affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x @ w + b


def decode(x: torch.Tensor, cache: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    cache.add_(x.sum())
    return x * w + cache


def _affine_runner(**options: Any) -> tuple[GraphRunner, torch.Tensor, torch.Tensor]:
    runner = GraphRunner(affine, input_kinds=[U, P, P], options=CaptureOptions(**options))
    return runner, torch.randn(8, 8), torch.randn(8)


def test_a_bound_graph_replays_with_the_user_tensors_alone_and_builds_no_key() -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)  # captures
    bound = runner.bind(x, w, b)
    assert isinstance(bound, BoundGraph)
    assert bound.runner is runner
    layout = runner._layout
    assert layout is not None
    keys = []
    real_key = layout.key
    layout.key = lambda args: keys.append(args) or real_key(args)  # type: ignore[method-assign]
    for _ in range(3):
        y = torch.randn(4, 8)
        torch.testing.assert_close(bound(y), affine(y, w, b), rtol=0, atol=0)
    assert keys == []
    assert runner.counters.replays == 3
    assert runner.counters.captures == 1


@pytest.mark.parametrize(
    "wrong",
    [torch.zeros(3, 8), torch.zeros(4, 8, dtype=torch.float64), torch.zeros(8, 4).t(), 1.0],
    ids=["shape", "dtype", "strides", "not-a-tensor"],
)
def test_a_call_of_another_layout_is_refused_not_broadcast_or_cast(wrong: Any) -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    with pytest.raises(InputLayoutError, match="BoundGraph 'affine' replays a graph captured"):
        bound(wrong)
    with pytest.raises(InputLayoutError):
        bound(x, x)  # one USER tensor too many
    assert runner.counters.calls == 1


@pytest.mark.parametrize("guards", ["dynamo", "maps"])
def test_the_layout_check_holds_with_or_without_dynamos_tensor_check(
    guards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if guards == "maps":
        monkeypatch.setattr(_bound, "_TensorGuards", None)
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    y = torch.randn(4, 8)
    torch.testing.assert_close(bound(y), affine(y, w, b), rtol=0, atol=0)
    # Either way a fitting call replays without the runner's own path (no key built).
    layout = runner._layout
    assert layout is not None
    monkeypatch.setattr(layout, "key", _no_key)
    torch.testing.assert_close(bound(y), affine(y, w, b), rtol=0, atol=0)
    monkeypatch.undo()
    with pytest.raises(InputLayoutError):
        bound(torch.zeros(4, 8, dtype=torch.float16))
    # A difference the copy does not care about goes through the runner: right, never refused.
    z = torch.randn(4, 8, requires_grad=True)
    torch.testing.assert_close(bound(z), affine(z.detach(), w, b), rtol=0, atol=0)


def _no_key(args: tuple[Any, ...]) -> Any:
    raise AssertionError("the runner's key was built for a call of a bound graph")


def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


@pytest.mark.parametrize("guards", ["dynamo", "maps"])
def test_a_call_under_another_autocast_state_takes_the_runners_path(
    guards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if guards == "maps":
        monkeypatch.setattr(_bound, "_TensorGuards", None)
    runner = GraphRunner(matmul, input_kinds=[U, P])
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    runner(x, w)
    bound = runner.bind(x, w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = bound(x)
        expected = matmul(x, w)
    assert expected.dtype == torch.bfloat16
    assert out.dtype == torch.bfloat16  # not the float32 graph bound outside autocast
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert runner.counters.captures == 2  # the runner captured the autocast call as its own key
    torch.testing.assert_close(bound(x), matmul(x, w), rtol=0, atol=0)  # and back outside


def test_a_held_output_is_never_overwritten() -> None:
    runner, w, b = _affine_runner()
    x1, x2, x3 = (torch.randn(4, 8) for _ in range(3))
    runner(x1, w, b)
    bound = runner.bind(x1, w, b)
    first = bound(x1)
    view = bound(x2)[1:]  # the whole output dropped, a view of it held
    third = bound(x3)
    torch.testing.assert_close(first, affine(x1, w, b), rtol=0, atol=0)
    torch.testing.assert_close(view, affine(x2, w, b)[1:], rtol=0, atol=0)
    torch.testing.assert_close(third, affine(x3, w, b), rtol=0, atol=0)
    # Those calls found the bound graph in use and took another call path through the runner.
    assert runner.num_paths > 1


def test_the_out_equals_bound_of_x_loop_takes_the_two_call_paths_in_turn_without_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every call holds the previous output (out = bound(x)): once the runner has a second call
    # path, the bound graph replays the key's graph on whichever path is free, and a call never
    # pays the runner's key, addresses and dispatch again.
    runner, w, b = _affine_runner()
    xs = [torch.randn(4, 8) for _ in range(8)]
    runner(xs[0], w, b)
    bound = runner.bind(xs[0], w, b)
    out = bound(xs[0])
    out = bound(xs[1])  # the first output still held: a second call path is captured
    assert (runner.num_paths, runner.num_graphs) == (2, 2)
    through: list[tuple[Any, ...]] = []
    real = GraphRunner.__call__

    def counted(self: GraphRunner, *args: Any) -> Any:
        through.append(args)
        return real(self, *args)

    monkeypatch.setattr(GraphRunner, "__call__", counted)
    replays = runner.counters.replays
    for x in xs[2:]:
        previous, kept = out, out.clone()
        out = bound(x)
        torch.testing.assert_close(out, affine(x, w, b), rtol=0, atol=0)
        torch.testing.assert_close(previous, kept, rtol=0, atol=0)  # held: not overwritten
    assert through == []
    assert runner.counters.replays == replays + 6
    assert (runner.num_paths, runner.num_graphs, runner.counters.captures) == (2, 2, 2)


def test_outputs_of_ended_steps_are_taken_back_as_through_the_runner() -> None:
    runner, w, b = _affine_runner(keep_held_outputs=False)
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    out = bound(x)
    for _ in range(3):
        mark_step_begin()
        out = bound(out)  # h = f(h): the input stays valid, the graph replays
    expected = x
    for _ in range(4):
        expected = affine(expected, w, b)
    torch.testing.assert_close(out, expected)
    assert runner.num_graphs == 1


def test_bind_needs_a_graph_the_runner_holds() -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    with pytest.raises(CaptureError, match=r"has not captured anything.*call the runner"):
        runner.bind(x, w, b)
    runner(x, w, b)
    with pytest.raises(CaptureError, match="holds no graph for them"):
        runner.bind(torch.randn(2, 8), w, b)
    with pytest.raises(InputLayoutError):
        runner.bind(x, w)


def test_after_a_reset_the_bound_graph_follows_the_runners_new_graph() -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    runner.reset()
    y = torch.randn(4, 8)
    torch.testing.assert_close(bound(y), affine(y, w, b), rtol=0, atol=0)
    assert runner.counters.captures == 2  # through the runner: captured again
    replays = runner.counters.replays
    torch.testing.assert_close(bound(x), affine(x, w, b), rtol=0, atol=0)
    assert runner.counters.replays == replays + 1
    assert runner.counters.captures == 2


def test_force_recapture_goes_through_the_runner_on_every_call() -> None:
    runner, w, b = _affine_runner(force_recapture=True)
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    bound(x)
    bound(x)
    assert runner.counters.captures == 3
    assert runner.counters.replays == 0


def test_tensors_used_in_place_are_the_bound_ones() -> None:
    runner = GraphRunner(decode, input_kinds=[U, M, P])
    cache, w = torch.zeros(4), torch.full((4,), 2.0)
    x = torch.ones(4)
    runner(x, cache, w)
    bound = runner.bind(x, cache, w)
    eager_cache = cache.clone()
    for step in range(3):
        y = torch.full((4,), float(step))
        expected = decode(y, eager_cache, w)
        torch.testing.assert_close(bound(y), expected, rtol=0, atol=0)
    torch.testing.assert_close(cache, eager_cache, rtol=0, atol=0)  # updated in place
    w.mul_(3)  # an in-place update of a bound tensor is seen
    torch.testing.assert_close(bound(x), decode(x, eager_cache, w), rtol=0, atol=0)
    assert bound.check()
    # A replaced tensor is not: the graph keeps reading the bound storage, which stays alive.
    old = w.clone()
    w.data = torch.full((4,), 100.0)
    assert not bound.check()
    torch.testing.assert_close(bound(x), decode(x, eager_cache, old), rtol=0, atol=0)


def test_concurrent_callers_get_their_own_results() -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    wrong: list[str] = []

    def work(seed: int) -> None:
        held = []
        for i in range(40):
            y = torch.full((4, 8), float(seed * 100 + i))
            out = bound(y)
            held.append((out, affine(y, w, b)))
            if i % 3 == 0:
                held.clear()
        for out, expected in held:
            if not torch.equal(out, expected):
                wrong.append(f"thread {seed}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_a_profiled_call_records_the_replay() -> None:
    runner, w, b = _affine_runner()
    x = torch.randn(4, 8)
    runner(x, w, b)
    bound = runner.bind(x, w, b)
    with torch.profiler.profile() as prof:
        out = bound(x)
    torch.testing.assert_close(out, affine(x, w, b), rtol=0, atol=0)
    assert "npu_mempool.replay" in {event.name for event in prof.events()}
