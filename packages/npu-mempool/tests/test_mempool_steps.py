"""Step boundaries: one call path for ``out = f(x)`` loops, and stale outputs that raise."""

from __future__ import annotations

import threading

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    GraphRunner,
    InputKind,
    StaleOutputError,
    mark_step_begin,
)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_loop_with_step_boundaries_uses_one_graph_and_one_pool() -> None:
    single = GraphRunner(double)
    single(torch.ones(64))
    runner = GraphRunner(double)
    out = None
    for step in range(6):
        mark_step_begin()
        out = runner(torch.full((64,), float(step)))
        assert torch.equal(out.clone(), torch.full((64,), 2.0 * step))
    assert out is not None
    assert runner.num_graphs == 1
    assert runner.counters.captures == 1
    assert runner.counters.replays == 5
    assert runner.counters.recapture_reasons == {}
    assert runner.counters.pool_bytes == single.counters.pool_bytes


def test_without_step_boundaries_a_held_output_is_never_overwritten() -> None:
    runner = GraphRunner(double)
    held = [runner(torch.full((4,), float(step))) for step in range(4)]
    for step, out in enumerate(held):
        assert torch.equal(out, torch.full((4,), 2.0 * step))
    assert runner.counters.recapture_reasons["outputs_in_use"] == 3


def test_reading_an_overwritten_output_raises_and_names_the_boundary() -> None:
    runner = GraphRunner(double)
    first = runner(torch.ones(3))
    mark_step_begin()
    second = runner(torch.zeros(3))
    assert second.tolist() == [0.0, 0.0, 0.0]
    # Its metadata stays: code that only looks at shapes keeps working.
    assert first.shape == (3,)
    assert first.dtype == torch.float32
    for read in (
        lambda: first.tolist(),
        lambda: first + 1,
        lambda: repr(first),
        lambda: torch.cat([first, second]),
        lambda: first.numpy(),
    ):
        with pytest.raises(StaleOutputError, match="mark_step_begin"):
            read()


def test_an_output_of_the_current_step_is_never_taken() -> None:
    runner = GraphRunner(double)
    mark_step_begin()
    first = runner(torch.ones(3))
    second = runner(torch.full((3,), 5.0))  # same step: `first` must survive
    assert first.tolist() == [2.0, 2.0, 2.0]
    assert second.tolist() == [10.0, 10.0, 10.0]
    assert runner.counters.recapture_reasons["outputs_in_use"] == 1


def test_a_view_of_an_output_keeps_its_memory_safe_across_a_boundary() -> None:
    runner = GraphRunner(double)
    views = []
    for step in range(3):
        mark_step_begin()
        views.append(runner(torch.full((4,), float(step)))[1:])
    # A view cannot be poisoned, so its memory is not handed out again: values stay right.
    assert [v.tolist() for v in views] == [[2.0 * s] * 3 for s in range(3)]
    assert runner.counters.replays == 0


def test_torchs_step_marker_is_honoured() -> None:
    runner = GraphRunner(double)
    first = runner(torch.ones(2))
    for step in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        out = runner(torch.full((2,), float(step)))
    assert out.tolist() == [4.0, 4.0]
    assert runner.num_graphs == 1
    with pytest.raises(StaleOutputError):
        first.tolist()


def test_a_boundary_in_one_thread_keeps_another_threads_outputs() -> None:
    runner = GraphRunner(double)
    theirs: list[torch.Tensor] = []
    ready, done = threading.Event(), threading.Event()

    def other() -> None:
        theirs.append(runner(torch.full((2,), 7.0)))
        ready.set()
        done.wait(timeout=30)

    thread = threading.Thread(target=other)
    thread.start()
    assert ready.wait(timeout=30)
    mark_step_begin()
    mine = runner(torch.ones(2))
    assert theirs[0].tolist() == [14.0, 14.0]
    assert mine.tolist() == [2.0, 2.0]
    done.set()
    thread.join()


def test_mode_2_rewind_takes_back_outputs_of_ended_steps() -> None:
    runner = GraphRunner(double, options=CaptureOptions(reuse_pool_across_shapes=True))
    small = runner(torch.ones(8))
    mark_step_begin()
    large = runner(torch.ones(16))  # a new shape: the rewind reuses `small`'s memory
    assert large.tolist() == [2.0] * 16
    assert runner.num_graphs == 2
    with pytest.raises(StaleOutputError):
        small.tolist()


def test_outputs_passed_to_autograd_are_left_alone() -> None:
    # An output autograd saved for backward cannot be swapped: its memory stays in use.
    w = torch.ones(3, requires_grad=True)
    runner = GraphRunner(double)
    with torch.no_grad():
        first = runner(torch.ones(3))
    with torch.enable_grad():
        loss = (w * first).sum()  # saves `first` for the gradient of w
    mark_step_begin()
    with torch.no_grad():
        runner(torch.zeros(3))
    loss.backward()
    assert w.grad is not None
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
    assert first.tolist() == [2.0, 2.0, 2.0]


def test_mutated_inputs_are_not_outputs_the_boundary_can_take() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache * 1

    runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.MUTATED])
    cache = torch.zeros(2)
    outs = []
    for _ in range(3):
        mark_step_begin()
        outs.append(runner(torch.ones(2), cache))
    assert cache.tolist() == [3.0, 3.0]
    assert outs[-1].tolist() == [3.0, 3.0]
    assert runner.num_graphs == 1
