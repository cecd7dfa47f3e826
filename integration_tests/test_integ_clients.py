"""Callers the backend does not control: threads, nested compiled calls, grad modes.

Each scenario failed before outputs were tracked by liveness: a process-wide step counter decided
call paths, one set of static buffers served every thread, and the outer grad mode (not the
traced graph) decided whether a graph could be captured.
"""

from __future__ import annotations

import threading

import npu_mempool
import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))


def _run_threads(target: object, count: int) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.parametrize("clone", [True, False], ids=["output-clone", "default"])
def test_threads_calling_one_compiled_model_get_their_own_results(clone: bool) -> None:
    model = _model().eval()
    config = CompilerConfig()
    config.debug.aclgraph.enable_output_clone = clone
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config))
    with torch.no_grad():
        compiled(torch.randn(4, 16))  # compile once, before the threads start
    wrong: list[int] = []
    calls = 200

    def worker() -> None:
        generator = torch.Generator().manual_seed(threading.get_ident() % 2**31)
        with torch.no_grad():
            for _ in range(calls):
                x = torch.randn(4, 16, generator=generator)
                got = compiled(x)
                if not torch.allclose(got, model(x), atol=1e-6):
                    wrong.append(1)

    _run_threads(worker, 8)
    assert len(wrong) == 0


@pytest.mark.parametrize("steps", ["keep_held_outputs", "one step around the calls"])
def test_a_nested_compiled_call_and_a_background_thread_do_not_overwrite_a_held_output(
    steps: str,
) -> None:
    block = _Block().eval()
    other = _model(1).eval()
    config = CompilerConfig()
    # Each call of a compiled function begins a step by default: the calls below are one step
    # only inside one top_level_call() block (as the calls of a graph-break region are), or
    # when held outputs are kept.
    config.debug.aclgraph.keep_held_outputs = steps == "keep_held_outputs"
    backend = get_npu_backend(compiler_config=config)
    compiled_other = torch.compile(other, backend=backend)

    compiled_block = torch.compile(block, backend=backend)

    def forward(x: torch.Tensor) -> torch.Tensor:
        # Python between compiled calls, as a graph-break region runs it.
        with npu_mempool.top_level_call():
            a = compiled_block(x)
            compiled_other(torch.randn(2, 16))  # a nested compiled call in between
            b = compiled_block(a * 0.5)  # the same FX graph again while `a` is held
            return a + b

    stop = threading.Event()

    def background() -> None:
        with torch.no_grad():
            while not stop.is_set():
                compiled_other(torch.randn(2, 16))

    wrong = 0
    with torch.no_grad():
        # Compiled before the thread starts: on torch 2.11 a trace patches nn.Module.__call__ for
        # the whole process, and a compiled call in another thread meanwhile fails inside torch
        # ("using FX to symbolically trace a dynamo-optimized function").
        forward(torch.randn(2, 16))
        thread = threading.Thread(target=background)
        thread.start()
        try:
            for _ in range(100):
                x = torch.randn(2, 16)
                a = block(x)
                expected = a + block(a * 0.5)
                if not torch.allclose(forward(x), expected, atol=1e-6):
                    wrong += 1
        finally:
            stop.set()
            thread.join()
    assert wrong == 0
    assert sum(r.counters.replays for r in backend.stats.runners) > 0


def test_inference_mode_captures_and_replays() -> None:
    model = _model().eval()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.inference_mode():
        for _ in range(4):
            x = torch.randn(4, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert backend.stats.fallbacks == []
    runners = backend.stats.runners
    assert sum(r.counters.captures for r in runners) >= 1
    assert sum(r.counters.replays for r in runners) >= 2


def test_a_no_grad_decorated_forward_captures_with_grad_enabled_outside() -> None:
    class Decorated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _model()

        @torch.no_grad()
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.inner(x)
            return out

    model = Decorated().eval()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    assert torch.is_grad_enabled()
    with npu_mempool.counters.expect(captures=1, replays=3):
        for _ in range(4):
            x = torch.randn(4, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert backend.stats.fallbacks == []


def test_statistics_survive_a_deep_copy_of_the_backend() -> None:
    import copy

    backend = get_npu_backend()
    compiled = torch.compile(_model().eval(), backend=copy.deepcopy(backend))
    with torch.no_grad():
        compiled(torch.randn(2, 16))
    assert backend.stats.fx_graphs == 1
