"""Steps per call (``keep_held_outputs=False``): each top-level call begins a step of its thread."""

from __future__ import annotations

import threading

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    GraphRunner,
    InputKind,
    StaleOutputError,
    graph_pool_handle,
    hold_step,
    mark_step_begin,
    release_step,
    top_level_call,
)

PER_CALL = CaptureOptions(keep_held_outputs=False)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_loop_of_top_level_calls_uses_one_graph_and_one_pool() -> None:
    single = GraphRunner(double)
    single(torch.ones(64))
    runner = GraphRunner(double, options=PER_CALL)
    out = None
    for step in range(6):
        with top_level_call():
            out = runner(torch.full((64,), float(step)))  # the previous `out` is still held
        assert torch.equal(out, torch.full((64,), 2.0 * step))
    assert runner.num_paths == 1
    assert (runner.counters.captures, runner.counters.replays) == (1, 5)
    assert runner.counters.pool_bytes == single.counters.pool_bytes


def test_an_output_of_an_earlier_call_raises_when_read() -> None:
    runner = GraphRunner(double, options=PER_CALL)
    with top_level_call():
        first = runner(torch.ones(3))
    with top_level_call():
        runner(torch.zeros(3))
    assert first.shape == (3,)
    with pytest.raises(StaleOutputError, match="later call of the compiled function"):
        first.tolist()


def test_outputs_held_within_one_call_are_never_taken() -> None:
    runner = GraphRunner(double, options=PER_CALL)
    with top_level_call():
        first = runner(torch.ones(3))
        second = runner(torch.full((3,), 5.0))  # the same step: `first` must survive
        with top_level_call():  # a nested call belongs to the outer one's step
            third = runner(torch.full((3,), 7.0))
    assert first.tolist() == [2.0] * 3
    assert second.tolist() == [10.0] * 3
    assert third.tolist() == [14.0] * 3
    assert runner.num_paths == 3


def test_without_a_top_level_call_nothing_ends() -> None:
    # A runner called directly, outside any compiled function, sees no new call.
    runner = GraphRunner(double, options=PER_CALL)
    held = [runner(torch.full((2,), float(step))) for step in range(3)]
    assert [out.tolist() for out in held] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]
    assert runner.num_paths == 3


def test_the_default_keeps_held_outputs_across_top_level_calls() -> None:
    runner = GraphRunner(double)
    held = []
    for step in range(3):
        with top_level_call():
            held.append(runner(torch.full((2,), float(step))))
    assert [out.tolist() for out in held] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]
    assert runner.counters.recapture_reasons["outputs_in_use"] == 2


@pytest.mark.parametrize("reuse", [True, False], ids=["mode2", "no-rewind"])
def test_an_output_passed_back_in_stays_valid_and_is_read_first(reuse: bool) -> None:
    # h = f(h): each call's input is the previous call's output, overwritten by this replay.
    runner = GraphRunner(
        lambda h: h * 2 + 1,
        options=CaptureOptions(keep_held_outputs=False, reuse_pool_across_shapes=reuse),
    )
    h = torch.ones(8)
    expected = h.clone()
    inputs = []
    for _ in range(5):
        with top_level_call():
            inputs.append(h)
            h = runner(h)
        expected = expected * 2 + 1
        assert torch.equal(h, expected)
    assert runner.num_paths == 1
    # The outputs passed back in were moved out of the pool, not poisoned: still readable.
    assert [t[0].item() for t in inputs] == [1.0, 3.0, 7.0, 15.0, 31.0]


def test_an_output_passed_back_in_survives_the_rewind_of_a_new_shape() -> None:
    # A KV cache grown by cat: every step a new shape (a new capture that rewinds the pool over
    # the previous step's outputs), and the previous output is this step's input.
    def grow(cache: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grown = torch.cat([cache, row])
        return grown, grown.sum(0)

    runner = GraphRunner(grow, options=PER_CALL)
    largest = GraphRunner(grow)
    largest(torch.ones(6, 4), torch.ones(1, 4))
    cache = torch.ones(1, 4)
    for step in range(5):
        with top_level_call():
            row = torch.full((1, 4), float(step))
            cache, total = runner(cache, row)
        assert cache.shape == (step + 2, 4)
        assert total.tolist() == [1.0 + sum(range(step + 1))] * 4
    assert (runner.num_paths, runner.num_graphs) == (1, 5)
    assert runner.counters.pool_bytes == largest.counters.pool_bytes  # rewound, not stacked


@pytest.mark.parametrize("passed", ["itself", "a view of it"])
def test_an_output_passed_back_in_place_stays_in_use(passed: str) -> None:
    # A MUTATED input is updated by the graph in place, at its own address: never taken back,
    # whether the call passes the output itself or a view of its memory.
    def step(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        state.add_(x)
        return state * 2

    runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.MUTATED], options=PER_CALL)
    with top_level_call():
        state = runner(torch.ones(2), torch.zeros(2))  # an output in the runner's pool
    expected = 2.0
    for _ in range(3):
        with top_level_call():
            previous = state
            given = previous if passed == "itself" else previous[:]
            state = runner(torch.ones(2), given)  # the old output is this call's state
            del given
        assert previous.tolist() == [expected + 1] * 2  # updated in place, never poisoned
        expected = (expected + 1) * 2
        assert state.tolist() == [expected] * 2


def test_a_held_step_begins_no_new_step_until_released() -> None:
    runner = GraphRunner(double, options=PER_CALL)
    with top_level_call():
        first = runner(torch.ones(2))
    thread = hold_step()  # a training forward whose backward has not run yet
    try:
        with top_level_call():
            second = runner(torch.zeros(2))
        assert first.tolist() == [2.0, 2.0]  # the same step: kept
    finally:
        release_step(thread)
    with top_level_call():
        runner(torch.zeros(2))  # a new step: takes back `first`, whose path is free first
    assert second.tolist() == [0.0, 0.0]
    with pytest.raises(StaleOutputError):
        first.tolist()


def test_an_explicit_boundary_ends_a_held_step() -> None:
    runner = GraphRunner(double, options=PER_CALL)
    thread = hold_step()
    try:
        first = runner(torch.ones(2))
        mark_step_begin()
        runner(torch.zeros(2))
    finally:
        release_step(thread)
    with pytest.raises(StaleOutputError):
        first.tolist()


def test_a_call_in_one_thread_keeps_another_threads_outputs() -> None:
    runner = GraphRunner(double, options=PER_CALL)
    theirs: list[torch.Tensor] = []
    ready, done = threading.Event(), threading.Event()

    def other() -> None:
        with top_level_call():
            theirs.append(runner(torch.full((2,), 7.0)))
        ready.set()
        done.wait(timeout=30)

    thread = threading.Thread(target=other)
    thread.start()
    assert ready.wait(timeout=30)
    for step in range(3):
        with top_level_call():
            mine = runner(torch.full((2,), float(step)))
        assert mine.tolist() == [2.0 * step] * 2
    assert theirs[0].tolist() == [14.0, 14.0]
    done.set()
    thread.join()
    assert runner.num_paths == 2  # theirs on one path, mine overwritten in place on the other


def test_another_runners_outputs_are_taken_back_only_at_an_explicit_boundary() -> None:
    # Two runners sharing a pool (mode 1): a call of one cannot know whether a graph of the
    # other still reads its outputs later in the same call, so a new call alone takes nothing.
    pool = graph_pool_handle("cpu")
    first = GraphRunner(double, options=CaptureOptions(pool=pool, keep_held_outputs=False))
    second = GraphRunner(torch.neg, options=CaptureOptions(pool=pool, keep_held_outputs=False))
    with top_level_call():
        a = first(torch.ones(2))
        b = second(torch.ones(2))
    with top_level_call():
        first(torch.ones(2))  # `b` (the other runner's) is kept: a second path
    assert b.tolist() == [-1.0, -1.0]
    assert first.num_paths == 2
    with pytest.raises(StaleOutputError):
        a.tolist()  # its own output of the earlier call was taken back
    mark_step_begin()
    first(torch.ones(2))
    with pytest.raises(StaleOutputError):
        b.tolist()
