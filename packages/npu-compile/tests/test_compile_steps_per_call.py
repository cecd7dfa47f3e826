"""One step per call: each call of a compiled function may overwrite what earlier calls returned."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import npu_compile
import npu_mempool
import pytest
import torch
from npu_compile import CompilerConfig, ConfigError, StaleOutputError, get_npu_backend
from npu_compile.backend import NpuBackend


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))


def _runner(backend: NpuBackend) -> npu_mempool.GraphRunner:
    (runner,) = backend.stats.runners
    return runner


def _keeping() -> CompilerConfig:
    config = CompilerConfig()
    config.debug.aclgraph.keep_held_outputs = True
    return config


def test_the_out_equals_f_x_loop_uses_one_pool() -> None:
    model = _model()
    single = get_npu_backend()
    with torch.no_grad():
        torch.compile(model, backend=single)(torch.randn(4, 16))
    one_graph = _runner(single).counters.pool_bytes
    torch._dynamo.reset()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        out = None
        for _ in range(5):
            x = torch.randn(4, 16)
            out = compiled(x)  # the previous `out` is still referenced during this call
            torch.testing.assert_close(out, model(x))
        assert out is not None
    runner = _runner(backend)
    assert (runner.num_paths, runner.num_graphs) == (1, 1)
    assert runner.counters.replays == 4
    assert runner.counters.pool_bytes == one_graph


def test_an_output_of_an_earlier_call_raises_when_read() -> None:
    compiled = torch.compile(_model(), backend=get_npu_backend())
    with torch.no_grad():
        first = compiled(torch.randn(4, 16))
        first.sum()  # read within its step: fine
        compiled(torch.randn(4, 16))
    assert first.shape == (4, 16)
    with pytest.raises(StaleOutputError, match="clone"):
        first.sum()
    assert issubclass(StaleOutputError, npu_compile.NpuCompileError) is False
    assert StaleOutputError is npu_mempool.StaleOutputError
    assert "StaleOutputError" in npu_compile.__all__


def test_h_equals_f_h_over_several_steps_equals_eager() -> None:
    model = _model()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    h = torch.randn(4, 16)
    expected = h.clone()
    with torch.no_grad():
        for _ in range(5):
            h = compiled(h)  # the previous step's output is this call's input
            expected = model(expected)
            torch.testing.assert_close(h, expected)
    assert _runner(backend).num_paths == 1


def test_a_state_grown_by_cat_every_step_equals_eager() -> None:
    # As a dynamic KV cache: every step a new shape (a new capture rewinding the pool over the
    # previous step's outputs), and the previous step's output is this step's input.
    def grow(cache: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = torch.cat([cache, row.tanh()])
        return cache, cache.softmax(0).sum(1)

    backend = get_npu_backend()
    compiled = torch.compile(grow, backend=backend)
    cache = expected = torch.randn(1, 4)
    with torch.no_grad():
        for step in range(6):
            row = torch.full((1, 4), float(step))
            cache, total = compiled(cache, row)
            expected, want = grow(expected, row)
            torch.testing.assert_close(cache, expected)
            torch.testing.assert_close(total, want)
    assert all(runner.num_paths == 1 for runner in backend.stats.runners)


_layer = torch.nn.Linear(4, 4)


def _block(x: torch.Tensor) -> torch.Tensor:
    y = _layer(x)
    torch._dynamo.graph_break()  # compiled as a frame of its own: called twice, the same graphs
    return y * 2


_paused, _resume = threading.Event(), threading.Event()
_pausing: list[bool] = []


@torch._dynamo.disable
def _pause() -> None:
    if _pausing:
        _paused.set()
        assert _resume.wait(timeout=30)


def _twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = _block(x)
    _pause()
    b = _block(x + 1)  # `a`, from the same graph, is still held: one step, not overwritten
    return a, b


def test_outputs_held_within_one_call_are_read_right() -> None:
    compiled = torch.compile(_twice, backend=get_npu_backend())
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            a, b = compiled(x)
            torch.testing.assert_close(a, _layer(x) * 2)
            torch.testing.assert_close(b, _layer(x + 1) * 2)


@pytest.mark.parametrize("make", ["backend", "registered name"])
def test_dynamo_tells_each_threads_calls_apart_through_the_backend(make: str) -> None:
    # torch._dynamo.optimize enters the backend's hook around each call, in the calling
    # thread: a call another thread makes meanwhile begins no step for this one. (Through
    # torch.compile, which drops the hook, the process-wide generation counter would.)
    backend = get_npu_backend() if make == "backend" else "npu_compile"
    compiled = torch._dynamo.optimize(backend)(_twice)
    other = torch.compile(torch.sin, backend="eager")
    x = torch.randn(2, 4)

    def elsewhere() -> None:
        assert _paused.wait(timeout=30)
        other(torch.ones(2))  # an entry into a compiled function, in another thread
        _resume.set()

    with torch.no_grad():
        compiled(x)
        thread = threading.Thread(target=elsewhere)
        thread.start()
        _pausing.append(True)
        try:
            a, b = compiled(x)
        finally:
            _pausing.clear()
            _paused.clear()
            _resume.clear()
            thread.join()
    torch.testing.assert_close(a, _layer(x) * 2)
    torch.testing.assert_close(b, _layer(x + 1) * 2)


def test_the_backend_object_and_the_registered_function_carry_the_hook() -> None:
    backend = get_npu_backend()
    assert backend.backend_ctx_ctor is npu_mempool.top_level_call  # type: ignore[attr-defined]
    registered = torch._dynamo.lookup_backend("npu_compile")
    assert registered.backend_ctx_ctor is npu_mempool.top_level_call


def test_keep_held_outputs_restores_the_second_call_path() -> None:
    model = _model()
    backend = get_npu_backend(compiler_config=_keeping())
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        held = [(compiled(x), model(x)) for x in (torch.randn(4, 16) for _ in range(3))]
    for got, expected in held:
        torch.testing.assert_close(got, expected)
    runner = _runner(backend)
    assert runner.counters.recapture_reasons["outputs_in_use"] == 2
    assert runner.options.keep_held_outputs


def test_keep_held_outputs_is_a_checked_flag() -> None:
    config = CompilerConfig()
    assert not config.debug.aclgraph.keep_held_outputs
    with pytest.raises(ConfigError):
        config.debug.aclgraph.keep_held_outputs = "yes"
    assert config.with_options({"keep_held_outputs": True}).debug.aclgraph.keep_held_outputs


def test_calls_from_several_threads_each_get_their_own_results() -> None:
    model = _model()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        compiled(torch.randn(4, 16))  # compiled once, before the threads race
    barrier = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def loop(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        try:
            with torch.no_grad():
                for _ in range(4):
                    x = torch.randn(4, 16, generator=generator)
                    barrier.wait()
                    out = compiled(x)  # each thread's previous `out` is still held
                    barrier.wait()  # both threads hold this step's output now
                    torch.testing.assert_close(out, model(x))
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Each thread overwrites only what it holds itself: one path per thread.
    assert _runner(backend).num_paths == 2


class _Shift(torch.nn.Module):
    """Saves nothing for its backward: autograd holds nothing of a forward but its output."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :2] + self.bias


def _regression(depth: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if depth == 1:
        return _Shift()
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 2, generator=generator)


Forwards = Callable[[Any, torch.Tensor], list[torch.Tensor]]


def _one_forward(run: Any, x: torch.Tensor) -> list[torch.Tensor]:
    return [run(x)]


def _two_forwards(run: Any, x: torch.Tensor) -> list[torch.Tensor]:
    # Two forwards before one backward: the second must not take back the first's output.
    return [run(x), run(x.flip(0))]


@pytest.mark.parametrize("depth", [1, 3], ids=["shift", "mlp"])
@pytest.mark.parametrize("forwards", [_one_forward, _two_forwards], ids=["one", "two"])
def test_adamw_training_with_outputs_held_equals_eager(forwards: Forwards, depth: int) -> None:
    model = _regression(depth)
    reference = _regression(depth)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    eager_optimizer = torch.optim.AdamW(reference.parameters(), lr=0.01)
    outs: list[torch.Tensor] = []
    for step in range(5):
        x, y = _batch(step)
        optimizer.zero_grad()
        eager_optimizer.zero_grad()
        # `outs`, the previous step's outputs, is still referenced during these forwards.
        outs, eager_outs = forwards(compiled, x), forwards(reference, x)
        loss = torch.nn.functional.mse_loss(sum(outs), y)
        eager_loss = torch.nn.functional.mse_loss(sum(eager_outs), y)
        loss.backward()
        eager_loss.backward()
        optimizer.step()
        eager_optimizer.step()
        torch.testing.assert_close(loss, eager_loss)
        for got, want in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(got, want)
    forward = backend.stats.runners[0]
    assert not forward.name.endswith("_backward")
    # One call path per forward of a step: the previous step's outputs were taken back.
    assert forward.num_paths == len(outs)


def test_a_forward_whose_backward_never_runs_holds_steps_until_a_backward_or_a_reset() -> None:
    model = _model()

    def loop(compiled: Any) -> torch.Tensor:
        with torch.no_grad():
            first = out = compiled(torch.randn(4, 16))
            for _ in range(2):
                out = compiled(torch.randn(4, 16))  # noqa: F841 (the previous `out` is held)
        return first

    training = torch.compile(_regression(3), backend=get_npu_backend())
    training(torch.randn(8, 4))  # grad on, and no backward: the thread's step stays open
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    first = loop(compiled)
    assert _runner(backend).num_paths == 3  # one step: nothing held was taken back
    first.sum()
    training(torch.randn(8, 4)).sum().backward()  # a backward releases the hold
    first = loop(compiled)
    assert _runner(backend).num_paths == 3  # steps again: no further path
    with pytest.raises(StaleOutputError):
        first.sum()
    training(torch.randn(8, 4))
    torch._dynamo.reset()  # so does a reset: those graphs are gone
    backend = get_npu_backend()
    loop(torch.compile(model, backend=backend))
    assert _runner(backend).num_paths == 1
