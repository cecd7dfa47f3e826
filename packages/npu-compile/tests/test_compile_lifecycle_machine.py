"""Held outputs of compiled functions stay right over every sequence of calls (stateful test).

The backend's side of ``npu-mempool``'s lifecycle machine: a function compiled with
``torch.compile(backend=npu_compile)``, called at several shapes, its outputs dropped, held
whole, held through a view or passed back in; ``torch.compiler.cudagraph_mark_step_begin()``;
``keep_held_outputs`` on and off, ``force_recapture``, a custom pool, a capture limit, captures
that fail, and ``torch._dynamo.reset()`` between calls. After every step each output still held
reads the values eager gave for its call, or raises ``StaleOutputError`` once a step boundary
(a later call of the compiled function, where outputs are not kept, or the explicit marker) has
passed since it was handed out. Failing examples are kept in ``hypothesis-examples/`` and
replayed first; ``NPU_RECORD_EXAMPLES=1`` adds the ones a run finds. Hypothesis keys them by the
machine's source: a changed machine starts with none, so record again against the code before
the fix it guards.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import npu_compile
import npu_mempool
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
from npu_mempool import CaptureLimitWarning, StaleOutputError

EXAMPLES = examples(Path(__file__).parent / "hypothesis-examples")
WIDTH = 64


def _step(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 0.5 + 1) * 3 - x


class CompiledLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._backend = failing_cpu_backend()
        self.backend = self._backend.__enter__()
        torch._dynamo.reset()
        self.compiled: Any = None
        self.keep = False
        self.held: list[Held] = []
        self.marks = 0
        self.calls = 0
        self.value = 0.0

    def teardown(self) -> None:
        torch._dynamo.reset()
        self._backend.__exit__(None, None, None)

    @initialize(
        keep=st.booleans(),
        force=st.booleans(),
        shared=st.booleans(),
        limit=st.sampled_from([2, 64]),
    )
    def setup(self, keep: bool, force: bool, shared: bool, limit: int) -> None:
        config = npu_compile.CompilerConfig()
        config.debug.aclgraph.keep_held_outputs = keep
        config.debug.aclgraph.force_recapture = force
        config.debug.aclgraph.static_capture_size_limit = limit
        if shared:
            config.aclgraph_config.use_custom_pool = npu_mempool.graph_pool_handle("cpu")
        self.keep = keep
        backend = npu_compile.get_npu_backend(compiler_config=config)
        self.compiled = torch.compile(_step, backend=backend, dynamic=False)

    def _call(self, x: torch.Tensor, how: str) -> None:
        expected = _step(x.clone())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CaptureLimitWarning)
            out = self.compiled(x)
        self.calls += 1
        torch.testing.assert_close(out, expected)
        per_call = not self.keep
        if how == "whole":
            self.held.append(Held(out, out.clone(), self.marks, self.calls, per_call, True))
        elif how == "view":
            self.held.append(
                Held(out[1:], out[1:].clone(), self.marks, self.calls, per_call, False)
            )

    @rule(rows=st.sampled_from([8, 16, 32]), how=st.sampled_from(["drop", "whole", "view"]))
    def call(self, rows: int, how: str) -> None:
        self.value += 0.25
        self._call(torch.full((rows, WIDTH), self.value), how)

    @precondition(lambda self: any(h.whole for h in self.held))
    @rule(data=st.data(), how=st.sampled_from(["drop", "whole"]))
    def call_with_a_held_output(self, data: st.DataObject, how: str) -> None:
        held = data.draw(st.sampled_from([h for h in self.held if h.whole]))
        try:
            held.tensor.sum()
        except StaleOutputError:
            return
        self._call(held.tensor, how)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))

    @rule()
    def step_boundary(self) -> None:
        torch.compiler.cudagraph_mark_step_begin()
        self.marks += 1

    @rule()
    def dynamo_reset(self) -> None:
        torch._dynamo.reset()

    @rule()
    def fail_the_next_capture(self) -> None:
        self.backend.fail_next = True

    @invariant()
    def held_outputs_read_eager_values_or_are_stale(self) -> None:
        for held in self.held:
            held.check(self.marks, self.calls)


def test_held_outputs_of_compiled_functions_survive_every_sequence() -> None:
    run_state_machine_as_test(
        CompiledLifecycle,
        settings=settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            database=EXAMPLES,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
