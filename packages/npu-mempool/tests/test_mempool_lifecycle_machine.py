"""Held outputs stay right over every sequence of calls, holds, boundaries, recaptures, failures.

A stateful property test (hypothesis): two runners, alone or sharing a pool, called at several
shapes, directly or through graphs bound to a shape (``GraphRunner.bind``, with checked or static
outputs), with their outputs dropped, held whole, held through a view or passed back in; step
boundaries;
``keep_held_outputs`` on and off; ``force_recapture``; captures that fail; a capture limit that
runs out; resets. After every step:

* each output still held reads the values eager gave for its call, or raises
  ``StaleOutputError``, and only once a step boundary has passed since it was handed out; an
  output of a static bound graph reads them until the next call (of anything: the contract
  states no more), and never raises;
* each pool holds no block but the static buffers of the graphs still kept, including graphs let
  go of while their outputs were held (the bound the README states), and each runner keeps at
  most ``capture_limit`` graphs.

The CPU pool poisons what a device capture could use for its intermediates (see [Note: emulated
intermediates] in ``npu_mempool._pool``), so memory handed out again shows here as on a device.
Failing examples found so far are kept in ``hypothesis-examples/`` beside this file and replayed
first on every run; ``NPU_RECORD_EXAMPLES=1`` adds the ones a run finds. Hypothesis keys them by the
machine's source: a changed machine starts with none, so record again against the code before
the fix it guards.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from lifecycle import Held, examples, failing_cpu_backend
from npu_mempool import (
    BoundGraph,
    CaptureError,
    CaptureLimitWarning,
    CaptureOptions,
    GraphRunner,
    StaleOutputError,
    graph_pool_handle,
    mark_step_begin,
    top_level_call,
)
from npu_mempool._pool import PoolHandle, state_of

EXAMPLES = examples(Path(__file__).parent / "hypothesis-examples")
WIDTH = 64  # with 8 to 32 rows: static buffers of several alignment blocks, so graphs overlap


def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _shift(x: torch.Tensor) -> torch.Tensor:
    return x - 3


class RunnerLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._backend = failing_cpu_backend()
        self.backend = self._backend.__enter__()
        self.runners: list[GraphRunner] = []
        self.held: list[Held] = []
        self.marks = 0
        self.calls = 0
        self.value = 0.0
        self.limit = 64
        self.bound: list[tuple[int, BoundGraph]] = []
        # Outputs of static bound graphs: valid until the next call, never taken back.
        self.static_held: list[Held] = []

    def teardown(self) -> None:
        self._backend.__exit__(None, None, None)

    @initialize(
        keep=st.booleans(),
        force=st.booleans(),
        shared=st.booleans(),
        limit=st.sampled_from([2, 4, 64]),
    )
    def setup(self, keep: bool, force: bool, shared: bool, limit: int) -> None:
        pool = graph_pool_handle() if shared else None
        options = CaptureOptions(
            warmup_runs=0,
            keep_held_outputs=keep,
            force_recapture=force,
            pool=pool,
            capture_limit=limit,
        )
        self.limit = limit
        self.runners = [
            GraphRunner(_scale, options=options, name="scale"),
            GraphRunner(_shift, options=options, name="shift"),
        ]

    def _call(self, which: int, x: torch.Tensor, bound: BoundGraph | None = None) -> torch.Tensor:
        runner = self.runners[which]
        expected = (_scale, _shift)[which](x.clone())
        with warnings.catch_warnings():
            # Running out of captures is one of the paths under test, not a failure.
            warnings.simplefilter("ignore", CaptureLimitWarning)
            with top_level_call():
                out = (bound or runner)(x)
        self.calls += 1
        # The next call may overwrite what static bound graphs handed out (their contract).
        self.static_held.clear()
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        return out

    def _keep(self, out: torch.Tensor, which: int, how: str, static: bool = False) -> None:
        expected = out.clone()
        per_call = not self.runners[which].options.keep_held_outputs
        if static:
            # Held until the next call, which no step boundary changes: never stale.
            never = 1 << 30
            if how != "drop":
                kept = out if how == "whole" else out[1:]
                self.static_held.append(
                    Held(kept, kept.clone(), never, never, False, how == "whole")
                )
            return
        if how == "view":
            self.held.append(Held(out[1:], expected[1:], self.marks, self.calls, per_call, False))
        elif how == "whole":
            self.held.append(Held(out, expected, self.marks, self.calls, per_call, True))

    @rule(
        which=st.integers(0, 1),
        rows=st.sampled_from([8, 16, 32]),
        how=st.sampled_from(["drop", "whole", "view"]),
    )
    def call(self, which: int, rows: int, how: str) -> None:
        self.value += 1
        out = self._call(which, torch.full((rows, WIDTH), self.value))
        self._keep(out, which, how)

    @rule(
        which=st.integers(0, 1),
        rows=st.sampled_from([8, 16, 32]),
        kind=st.sampled_from(["checked", "static", "static, all arguments"]),
    )
    def bind(self, which: int, rows: int, kind: str) -> None:
        # Bound only where the runner holds a graph for the shape; bound graphs outlive
        # resets, recaptures and failures of their runner's graphs.
        try:
            bound = self.runners[which].bind(
                torch.zeros(rows, WIDTH),
                static_outputs=kind != "checked",
                all_arguments=kind == "static, all arguments",
            )
        except CaptureError:
            return
        self.bound.append((which, bound))

    @precondition(lambda self: bool(self.bound))
    @rule(data=st.data(), how=st.sampled_from(["drop", "whole", "view"]))
    def call_bound(self, data: st.DataObject, how: str) -> None:
        which, bound = data.draw(st.sampled_from(self.bound))
        self.value += 1
        rows = bound._sizes[0][0]
        out = self._call(which, torch.full((rows, WIDTH), self.value), bound)
        self._keep(out, which, how, bound.static_outputs)

    @precondition(lambda self: any(h.whole for h in self.held))
    @rule(which=st.integers(0, 1), data=st.data(), how=st.sampled_from(["drop", "whole"]))
    def call_with_a_held_output(self, which: int, data: st.DataObject, how: str) -> None:
        # h = f(h): an output passed back in stays valid (it is moved out of the pool first).
        wholes = [h for h in self.held if h.whole]
        held = data.draw(st.sampled_from(wholes))
        try:
            held.tensor.sum()
        except StaleOutputError:
            return  # a stale output cannot be an input; the invariant checked it may be stale
        # Through a graph bound to its shape, where one was bound and the draw says so.
        bound = [b for w, b in self.bound if w == which and b._sizes[0] == held.tensor.shape]
        via = data.draw(st.sampled_from([None, *bound]))
        out = self._call(which, held.tensor, via)
        self._keep(out, which, how, via is not None and via.static_outputs)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))

    @rule()
    def step_boundary(self) -> None:
        mark_step_begin()
        self.marks += 1

    @rule(which=st.integers(0, 1))
    def reset(self, which: int) -> None:
        self.runners[which].reset()

    @rule()
    def fail_the_next_capture(self) -> None:
        self.backend.fail_next = True

    @invariant()
    def held_outputs_read_eager_values_or_are_stale(self) -> None:
        for held in self.held:
            held.check(self.marks, self.calls)
        for held in self.static_held:
            held.check(self.marks, self.calls)

    @invariant()
    def pools_hold_only_what_kept_graphs_need(self) -> None:
        kept: dict[int, tuple[PoolHandle, list[Any]]] = {}
        for runner in self.runners:
            assert runner.num_graphs <= self.limit
            for path in runner._call_paths.paths:
                if path.pool is not None:
                    kept.setdefault(id(path.pool), (path.pool, []))
                for entries in path.entries.values():
                    for entry in entries:
                        kept.setdefault(id(entry.pool), (entry.pool, []))[1].append(entry)
        for pool, entries in kept.values():
            state = state_of(pool)
            arena = state.arena
            assert arena is not None
            graphs = entries + list(getattr(state, "_retired", {}).values())
            blocks = {block for entry in graphs for block in entry.graph._blocks}
            allocated = arena.blocks()
            assert allocated <= blocks, (
                f"the pool holds {len(allocated - blocks)} block(s) no kept graph uses"
            )


def test_held_outputs_survive_every_sequence() -> None:
    # Run in both grad modes (conftest): 75 sequences each, the stored failures first.
    run_state_machine_as_test(
        RunnerLifecycle,
        settings=settings(
            max_examples=75,
            stateful_step_count=25,
            deadline=None,
            database=EXAMPLES,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
