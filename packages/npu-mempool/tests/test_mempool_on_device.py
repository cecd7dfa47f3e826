"""Real device graphs (CUDA or NPU): numbers equal eager; pool reuse holds about the largest."""

from __future__ import annotations

import pytest
import torch
from npu_mempool import CaptureOptions, GraphRunner, InputKind, _devices

pytestmark = pytest.mark.device

ROWS = (4096, 3072, 2048, 1024)  # largest first, as serving engines capture their sizes
WIDTH = 1024


# These tests check capture semantics (one capture per new shape, pool bytes of captured graphs),
# so they capture on the first call of a key; the device libraries are warmed up once instead.
CAPTURE_NOW = CaptureOptions(warmup_runs=0)


@pytest.fixture
def device() -> torch.device:
    device = _devices.default_device()
    # cuBLAS and friends initialise on first use, which must not happen inside a capture.
    x = torch.randn(8, 8, device=device)
    block(x, x)
    torch.accelerator.synchronize()
    return device


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) + x


def test_uses_a_real_graph(device: torch.device) -> None:
    assert _devices.graph_implementation(device) != "cpu-emulated"


def test_numbers_equal_eager_across_shapes_and_calls(device: torch.device) -> None:
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=device) / 8
    runner = GraphRunner(
        block, input_kinds=[InputKind.USER, InputKind.PARAMETER], options=CAPTURE_NOW
    )
    for rows in (8, 16, 8, 32, 16, 8):
        x = torch.randn(rows, 64, device=device)
        torch.testing.assert_close(runner(x, w), block(x, w))
    assert runner.counters.captures == 3
    assert runner.counters.replays == 3


def test_mutated_cache_is_updated_once_per_call(device: torch.device) -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache * 2

    runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.MUTATED], options=CAPTURE_NOW)
    cache = torch.zeros(4, device=device)
    for i in range(1, 4):
        out = runner(torch.ones(4, device=device), cache)
        assert cache.tolist() == [float(i)] * 4
        assert out.tolist() == [2.0 * i] * 4


def test_a_held_output_survives_later_calls_on_device(device: torch.device) -> None:
    runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(warmup_runs=0))
    a = runner(torch.ones(8, device=device))
    b = runner(torch.ones(4, device=device))  # no rewind over `a` while it is held
    c = runner(torch.full((8,), 3.0, device=device))  # `a`'s graph is busy: another call path
    assert a.tolist() == [2.0] * 8
    assert b.tolist() == [2.0] * 4
    assert c.tolist() == [6.0] * 8


def _pool_bytes(options: CaptureOptions, rows: tuple[int, ...], device: torch.device) -> int:
    w = torch.randn(WIDTH, WIDTH, device=device)
    runner = GraphRunner(block, input_kinds=[InputKind.USER, InputKind.PARAMETER], options=options)
    for n in rows:
        x = torch.randn(n, WIDTH, device=device)
        torch.testing.assert_close(runner(x, w), block(x, w), rtol=1e-3, atol=1e-3)
    return runner.counters.pool_bytes


def test_a_bound_graph_replays_the_device_graph_and_keeps_held_outputs(
    device: torch.device,
) -> None:
    def step(x: torch.Tensor, w: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x.sum(0))
        return block(x, w) + cache

    torch.manual_seed(0)
    w = torch.randn(64, 64, device=device) / 8
    cache = torch.zeros(64, device=device)
    runner = GraphRunner(
        step,
        input_kinds=[InputKind.USER, InputKind.PARAMETER, InputKind.MUTATED],
        options=CAPTURE_NOW,
    )
    x = torch.randn(8, 64, device=device)
    eager_cache = cache.clone()
    torch.testing.assert_close(runner(x, w, cache), step(x, w, eager_cache))
    bound = runner.bind(x, w, cache)
    held = []
    for _ in range(4):
        y = torch.randn(8, 64, device=device)
        expected = step(y, w, eager_cache)
        out = bound(y)
        held.append((out, expected))
    for out, expected in held:  # each held output kept its own numbers
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(cache, eager_cache)
    assert runner.counters.eager_calls == 0
    assert runner.counters.replays >= 1


def test_static_bound_graphs_replay_every_size_and_spare_a_held_checked_output(
    device: torch.device,
) -> None:
    # An engine's path: every captured size bound with static outputs (one rewound pool, so
    # the sizes' graphs overlap in device memory).
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=device) / 8
    runner = GraphRunner(
        block, input_kinds=[InputKind.USER, InputKind.PARAMETER], options=CAPTURE_NOW
    )
    sizes = (32, 16, 8)
    for rows in sizes:
        runner(torch.randn(rows, 64, device=device), w)
    bound = {
        rows: runner.bind(torch.randn(rows, 64, device=device), w, static_outputs=True)
        for rows in sizes
    }

    def calls(static: bool) -> None:
        for _ in range(3):
            for rows in (8, 32, 16):
                x = torch.randn(rows, 64, device=device)
                out = bound[rows](x)
                torch.testing.assert_close(out, block(x, w))
                again = bound[rows](torch.randn(rows, 64, device=device))
                assert again is out or not static  # one set of outputs per bound graph

    captures, replays = runner.counters.captures, runner.counters.replays
    calls(static=True)
    assert runner.counters.captures == captures
    assert runner.counters.replays == replays + 18
    # A checked output of another key, held: it may overlap the sizes' graphs, which then go
    # through the runner (another call path) and never overwrite it.
    x_held = torch.randn(24, 64, device=device)
    held = runner(x_held, w)
    calls(static=False)
    torch.testing.assert_close(held, block(x_held, w))
    assert runner.counters.eager_calls == 0


def test_four_shapes_with_reuse_hold_about_the_largest(device: torch.device) -> None:
    largest = _pool_bytes(CAPTURE_NOW, ROWS[:1], device)
    shared = _pool_bytes(CAPTURE_NOW, ROWS, device)
    assert largest > 0
    assert shared <= 1.25 * largest, (shared, largest)


def test_four_shapes_without_reuse_keep_every_shape_and_no_more_than_apart(
    device: torch.device,
) -> None:
    off = CaptureOptions(reuse_pool_across_shapes=False, warmup_runs=0)
    singles = sum(_pool_bytes(off, (n,), device) for n in ROWS)
    together = _pool_bytes(off, ROWS, device)
    # Without reuse no capture rewinds the pool over an earlier graph: the static input and
    # output of every shape stay allocated at once, so the pool holds at least those. What each
    # graph frees after its capture (its intermediates, the cuBLAS workspace) a real caching
    # allocator hands to the next capture in the same pool, so the four together may take well
    # under the sum of each captured alone, never much more.
    static = sum(2 * n * WIDTH * 4 for n in ROWS)  # float32 input and output per shape
    assert static <= together <= 1.25 * singles, (static, together, singles)
