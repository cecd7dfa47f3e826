"""A held output is never handed out again by what the runner does to its graphs.

Each case lets go of a graph, or of the allocator's protection of its memory, while an output it
handed out is still held: a forced recapture, a graph whose KV cache died, a failed capture of
the same key, a reset, a mode-2 rewind followed by a capture without one. The held output must
keep eager's values (or, past a step boundary, raise ``StaleOutputError``), never another
capture's numbers. On CPU the emulated pool writes a poison pattern wherever a device capture
could put its intermediates (see [Note: emulated intermediates] in ``npu_mempool._pool``), so
memory handed out again shows here as it would on a device.
"""

from __future__ import annotations

import gc
import logging

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    GraphRunner,
    InputKind,
    StaleOutputError,
    mark_step_begin,
)
from npu_mempool._pool import state_of

U, M = InputKind.USER, InputKind.MUTATED


def test_a_forced_recapture_keeps_the_held_output_of_the_graph_it_replaces() -> None:
    runner = GraphRunner(
        lambda x: x * 2, options=CaptureOptions(warmup_runs=0, force_recapture=True)
    )
    a = runner(torch.ones(4))
    b = runner(torch.full((4,), 5.0))
    torch.testing.assert_close(a, torch.full((4,), 2.0))
    torch.testing.assert_close(b, torch.full((4,), 10.0))
    c = runner(torch.full((4,), 7.0))
    for held, value in ((a, 2.0), (b, 10.0), (c, 14.0)):
        torch.testing.assert_close(held, torch.full((4,), value))


def test_a_replaced_graph_is_freed_once_its_outputs_die() -> None:
    runner = GraphRunner(
        lambda x: x * 2, options=CaptureOptions(warmup_runs=0, force_recapture=True)
    )
    a = runner(torch.ones(4))
    runner(torch.ones(4))
    pool = runner.pool
    assert pool is not None
    assert state_of(pool).retired() == 1  # kept while `a` lives
    del a
    runner(torch.ones(4))  # the next call finds it idle and frees it
    assert state_of(pool).retired() == 0


def test_a_forced_recapture_takes_back_an_output_of_an_ended_step() -> None:
    runner = GraphRunner(
        lambda x: x * 2, options=CaptureOptions(warmup_runs=0, force_recapture=True)
    )
    a = runner(torch.ones(4))
    mark_step_begin()
    b = runner(torch.full((4,), 5.0))
    torch.testing.assert_close(b, torch.full((4,), 10.0))
    with pytest.raises(StaleOutputError):
        a.tolist()


def test_a_graph_of_a_dead_cache_keeps_its_held_output() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(1)
        return x * 3 + cache

    runner = GraphRunner(step, input_kinds=[U, M], options=CaptureOptions(warmup_runs=0))
    cache = torch.zeros(64)
    held = runner(torch.ones(64), cache)  # 3 + 1
    # Made while the old cache lives, so it cannot take its address (which would rightly replay
    # the old graph elsewhere rather than drop it).
    fresh = torch.zeros(64)
    del cache  # the graph can never be right again: the next capture of the key drops it
    out = runner(torch.full((64,), 2.0), fresh)  # 6 + 1, on top of `held`; the old graph goes
    del out
    # A new shape may rewind the pool only while nothing of it is held: `held` still is.
    other = runner(torch.ones(32), torch.zeros(32))
    torch.testing.assert_close(other, torch.full((32,), 4.0))
    torch.testing.assert_close(held, torch.full((64,), 4.0))


def test_a_failed_capture_of_a_held_key_keeps_its_held_output(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A new parameter set of a known key fails to capture: the key's graphs are freed (it runs
    # eagerly from now on), and one of them handed out the output still held.
    calls = []

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        calls.append(w)
        if len(calls) == 2:  # the second capture fails (a host sync on a device, say)
            raise RuntimeError("cannot be captured")
        return x * w

    runner = GraphRunner(
        step, input_kinds=[U, InputKind.PARAMETER], options=CaptureOptions(warmup_runs=0)
    )
    w = torch.ones(64)
    held = runner(torch.full((64,), 2.0), w)
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        out = runner(torch.full((64,), 3.0), torch.full((64,), 5.0))  # fails, runs eagerly
    assert runner.counters.fallbacks == 1
    torch.testing.assert_close(out, torch.full((64,), 15.0))
    # A capture of another key goes into the pool: it must not land on `held`.
    other = runner(torch.full((32,), 1.0), torch.ones(32))
    torch.testing.assert_close(other, torch.ones(32))
    torch.testing.assert_close(held, torch.full((64,), 2.0))


def test_a_reset_keeps_outputs_held_across_it() -> None:
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(warmup_runs=0))
    held = runner(torch.ones(64))
    runner.reset()
    after = runner(torch.full((64,), 4.0))
    torch.testing.assert_close(held, torch.full((64,), 2.0))
    torch.testing.assert_close(after, torch.full((64,), 5.0))


def test_an_output_of_a_graph_captured_before_a_rewind_is_not_handed_to_a_later_capture() -> None:
    # Mode 2: the 8-row capture rewinds the pool, so the 16-row graph's memory is the 8-row
    # graph's too (they replay in turn). An output of the 16-row graph held while a 32-row
    # graph is captured lies in memory the allocator gave back at that rewind: the capture
    # must go into another pool, not on top.
    runner = GraphRunner(lambda x: x * 2 + 1, options=CaptureOptions(warmup_runs=0))
    runner(torch.ones(16, 64))
    runner(torch.ones(8, 64))  # rewinds
    held = runner(torch.full((16, 64), 3.0))
    out = runner(torch.full((32, 64), 5.0))
    torch.testing.assert_close(held, torch.full((16, 64), 7.0))
    torch.testing.assert_close(out, torch.full((32, 64), 11.0))
    assert runner.num_paths == 2
    # Once both are gone the 32-row graph replays where it was captured: no fourth capture.
    del held, out
    again = runner(torch.full((32, 64), 1.0))
    torch.testing.assert_close(again, torch.full((32, 64), 3.0))
    assert runner.counters.captures == 3


def test_a_capture_on_top_of_outputs_of_its_own_epoch_stays_in_the_pool() -> None:
    # Outputs of a graph captured after the last rewind are protected by the allocator: the
    # next capture goes on top of them in the same pool (no second path).
    runner = GraphRunner(lambda x: x - 1, options=CaptureOptions(warmup_runs=0))
    held = runner(torch.full((16, 64), 3.0))
    out = runner(torch.full((32, 64), 5.0))
    torch.testing.assert_close(held, torch.full((16, 64), 2.0))
    torch.testing.assert_close(out, torch.full((32, 64), 4.0))
    assert runner.num_paths == 1


def test_a_graph_let_go_of_while_its_pool_is_gone_is_collected() -> None:
    runner = GraphRunner(
        lambda x: x * 2, options=CaptureOptions(warmup_runs=0, force_recapture=True)
    )
    a = runner(torch.ones(4))
    runner(torch.ones(4))
    del runner
    gc.collect()
    torch.testing.assert_close(a, torch.full((4,), 2.0))  # the memory stayed with `a`


def test_a_failed_capture_gives_its_static_inputs_back_to_the_pool() -> None:
    calls = []

    def fails_on_its_capture(x: torch.Tensor) -> torch.Tensor:
        calls.append(x)
        if len(calls) == 1:
            raise RuntimeError("cannot be captured")
        return x + 1

    runner = GraphRunner(fails_on_its_capture, options=CaptureOptions(warmup_runs=0))
    torch.testing.assert_close(runner(torch.ones(64)), torch.full((64,), 2.0))  # eagerly
    assert runner.counters.fallbacks == 1
    pool = runner.pool
    assert pool is not None
    arena = state_of(pool).arena
    assert arena is not None
    assert arena.allocated == 0
