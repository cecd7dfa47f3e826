"""Memory modes on the CPU emulated pool: sharing, rewind, input clone, output clone, liveness."""

from __future__ import annotations

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    ConfigError,
    GraphRunner,
    InputKind,
    graph_implementation,
    graph_pool_handle,
)

SHAPES = (64, 48, 32, 16)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def storage_range(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = storage_range(a), storage_range(b)
    return a0 < b1 and b0 < a1


def test_cpu_uses_the_emulated_graph() -> None:
    assert graph_implementation("cpu") == "cpu-emulated"


def test_mode2_graphs_of_one_runner_alias_and_hold_the_largest() -> None:
    runner = GraphRunner(double)
    # Outputs dropped before the next shape: each capture may rewind the pool.
    ptrs = [runner(torch.ones(n, 256)).data_ptr() for n in SHAPES]
    largest = GraphRunner(double)
    largest(torch.ones(SHAPES[0], 256))
    assert runner.counters.pool_bytes == largest.counters.pool_bytes
    # Every capture rewound the pool: later graphs live inside the bytes of the first one.
    for ptr in ptrs[1:]:
        assert ptrs[0] - largest.counters.pool_bytes < ptr < ptrs[0] + largest.counters.pool_bytes

    no_input_buffers = GraphRunner(double, options=CaptureOptions(clone_input=False))
    ptrs = [no_input_buffers(torch.ones(n, 256)).data_ptr() for n in SHAPES]
    assert len(set(ptrs)) == 1  # the same bytes for every shape


def test_mode2_does_not_rewind_over_a_held_output() -> None:
    runner = GraphRunner(double)
    held = [runner(torch.full((n, 256), float(n))) for n in SHAPES]
    for n, out in zip(SHAPES, held, strict=True):
        assert torch.equal(out, torch.full((n, 256), 2.0 * n))
    assert not any(overlaps(a, b) for i, a in enumerate(held) for b in held[i + 1 :])


def test_mode2_off_keeps_graphs_apart_and_holds_the_sum() -> None:
    runner = GraphRunner(double, options=CaptureOptions(reuse_pool_across_shapes=False))
    outs = [runner(torch.ones(n, 256)) for n in SHAPES]
    assert not any(overlaps(a, b) for i, a in enumerate(outs) for b in outs[i + 1 :])
    singles = 0
    for n in SHAPES:
        alone = GraphRunner(double, options=CaptureOptions(reuse_pool_across_shapes=False))
        alone(torch.ones(n, 256))
        singles += alone.counters.pool_bytes
    assert runner.counters.pool_bytes == singles
    # Outputs are safe across calls of other shapes: nothing aliases.
    first = runner(torch.full((SHAPES[0], 256), 3.0))
    runner(torch.ones(SHAPES[1], 256))
    assert torch.equal(first, torch.full((SHAPES[0], 256), 6.0))


def test_mode2_a_held_output_of_one_shape_survives_other_shapes() -> None:
    runner = GraphRunner(double)
    a = runner(torch.full((4,), 1.0))
    b = runner(torch.full((2,), 5.0))  # `a` is held: no rewind over it
    assert b.tolist() == [10, 10]
    assert a.tolist() == [2, 2, 2, 2]
    del a
    # `b` is held and shares the pool with the first shape's graph: that replay goes elsewhere.
    c = runner(torch.full((4,), 3.0))
    assert c.tolist() == [6, 6, 6, 6]
    assert b.tolist() == [10, 10]
    assert not overlaps(b, c)


def test_a_dropped_output_lets_the_next_shape_rewind_over_it() -> None:
    runner = GraphRunner(double)
    a_ptr = runner(torch.full((4,), 1.0)).data_ptr()
    b = runner(torch.full((2,), 5.0))
    assert b.data_ptr() == a_ptr  # the rewind put the new graph on the freed bytes
    assert runner.num_paths == 1


def test_clone_output_keeps_outputs_across_replays() -> None:
    runner = GraphRunner(double, options=CaptureOptions(clone_output=True))
    a = runner(torch.full((4,), 1.0))
    runner(torch.full((2,), 5.0))
    runner(torch.full((4,), 7.0))
    assert a.tolist() == [2, 2, 2, 2]


def test_clone_output_does_not_clone_outputs_that_alias_caller_memory() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache.add_(x)
        return cache, x + 1

    runner = GraphRunner(
        step,
        input_kinds=[InputKind.USER, InputKind.MUTATED],
        options=CaptureOptions(clone_output=True),
    )
    cache = torch.zeros(2)
    out_cache, out = runner(torch.ones(2), cache)
    assert out_cache is cache or out_cache.data_ptr() == cache.data_ptr()
    assert out.tolist() == [2, 2]


def test_check_output_overwrite_is_accepted_and_outputs_stay_valid() -> None:
    # Held outputs are never overwritten, so the debug aid finds nothing to flag.
    runner = GraphRunner(
        double, name="decoder", options=CaptureOptions(check_output_overwrite=True)
    )
    a = runner(torch.full((4,), 1.0))
    b = runner(torch.full((2,), 5.0))
    c = runner(torch.full((4,), 3.0))
    assert (a.tolist(), b.tolist(), c.tolist()) == ([2.0] * 4, [10.0] * 2, [6.0] * 4)


def test_mode1_runners_share_one_pool() -> None:
    pool = graph_pool_handle("cpu")
    options = CaptureOptions(pool=pool)
    first = GraphRunner(double, options=options)
    second = GraphRunner(lambda x: x + 1, options=options)
    a = first(torch.ones(64, 64))
    b = second(torch.ones(64, 64))
    assert first.pool is second.pool is pool
    assert first.counters.pool_bytes == second.counters.pool_bytes == pool.nbytes
    assert not overlaps(a, b)  # `a` is held while `second` captures
    # Mode 1 turns mode 2 off: a new shape does not rewind the shared pool over `b`.
    first(torch.ones(32, 64))
    assert b.tolist() == torch.full((64, 64), 2.0).tolist()


def test_mode1_memory_freed_by_one_runner_is_reused_by_another() -> None:
    pool = graph_pool_handle("cpu")
    first = GraphRunner(double, options=CaptureOptions(pool=pool))
    start = first(torch.ones(128, 64)).data_ptr()
    first.reset()
    second = GraphRunner(lambda x: x + 1, options=CaptureOptions(pool=pool))
    high_water = pool.nbytes
    b = second(torch.ones(128, 64))
    assert pool.nbytes == high_water
    assert b.data_ptr() == start  # the bytes `first` gave back


def test_mode1_memory_of_a_held_output_is_not_given_back_by_reset() -> None:
    pool = graph_pool_handle("cpu")
    first = GraphRunner(double, options=CaptureOptions(pool=pool))
    a = first(torch.ones(128, 64))
    first.reset()
    second = GraphRunner(lambda x: x + 1, options=CaptureOptions(pool=pool))
    b = second(torch.ones(128, 64))
    assert not overlaps(a, b)
    assert torch.equal(a, torch.full((128, 64), 2.0))


def test_mode1_pool_on_another_device_is_refused() -> None:
    class FakeHandle:
        device = torch.device("cuda")

    runner = GraphRunner(double, options=CaptureOptions(pool=FakeHandle()))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="graph_pool_handle"):
        runner(torch.ones(2))


def test_mode3_clone_input_copies_into_pool_buffers() -> None:
    runner = GraphRunner(double)
    x = torch.ones(3)
    runner(x)
    y = torch.full((3,), 4.0)
    assert runner(y).tolist() == [8, 8, 8]
    assert x.tolist() == [1, 1, 1]  # the caller's tensors are never written


def test_mode3_off_captures_the_first_tensor_and_overwrites_it() -> None:
    seen: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.data_ptr())
        return x * 2

    runner = GraphRunner(fn, options=CaptureOptions(clone_input=False))
    x = torch.ones(3)
    runner(x)
    assert seen == [x.data_ptr()]  # the user's own tensor was captured
    y = torch.full((3,), 4.0)
    assert runner(y).tolist() == [8, 8, 8]
    assert x.tolist() == [4, 4, 4]  # documented: y's data was copied into x
    x.fill_(5)
    assert runner(x).tolist() == [10, 10, 10]  # same tensor: no copy needed


@pytest.mark.parametrize("reuse", [True, False])
def test_mode3_off_with_an_expanded_first_input_still_takes_new_inputs(reuse: bool) -> None:
    options = CaptureOptions(clone_input=False, reuse_pool_across_shapes=reuse)
    runner = GraphRunner(lambda x: x + 1, options=options)
    base = torch.ones(1)
    assert runner(base.expand(3)).tolist() == [2, 2, 2]
    assert runner(torch.arange(3.0)).tolist() == [1, 2, 3]
    assert base.tolist() == [1]  # nothing was copied into the caller's expanded tensor
    assert runner(torch.zeros(1).expand(3)).tolist() == [1, 1, 1]


def test_mode3_buffers_count_in_pool_bytes() -> None:
    with_clone = GraphRunner(double)
    without = GraphRunner(double, options=CaptureOptions(clone_input=False))
    with_clone(torch.ones(256))
    without(torch.ones(256))
    assert with_clone.counters.pool_bytes == 2 * without.counters.pool_bytes


def test_outputs_that_are_views_of_each_other_stay_views_across_replays() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y[0], y.t()

    runner = GraphRunner(fn)
    runner(torch.ones(2, 3))
    x = torch.arange(6.0).reshape(2, 3)
    out = runner(x)
    for got, want in zip(out, fn(x), strict=True):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
    out[1].fill_(-1)  # as on a device: one pool allocation behind the three views
    assert out[0][0].tolist() == [-1, -1, -1]
    assert out[2][:, 0].tolist() == [-1, -1, -1]


def test_a_transposed_output_keeps_its_strides() -> None:
    runner = GraphRunner(lambda x: (x @ x).t())
    runner(torch.ones(3, 3))
    out = runner(torch.eye(3))
    assert out.stride() == (1, 3)
    torch.testing.assert_close(out, torch.eye(3))


def test_a_graph_captured_while_anothers_outputs_lived_replays_beside_them() -> None:
    # Two runners share a pool and the second consumes the first's output (the pieces of a
    # split graph): the second was captured while that output lived, so its memory cannot
    # overlap it, and it replays beside it instead of taking a second call path.
    pool = graph_pool_handle("cpu")
    first = GraphRunner(lambda x: x + 1, options=CaptureOptions(pool=pool))
    second = GraphRunner(lambda h: h * 3, options=CaptureOptions(pool=pool))
    for step in range(4):
        hidden = first(torch.full((8,), float(step)))
        out = second(hidden)
        assert out.tolist() == [3.0 * (step + 1)] * 8
        del hidden, out
    assert second.counters.recapture_reasons == {}
    assert (first.num_graphs, second.num_graphs) == (1, 1)
    assert second.counters.replays == 3


def test_a_graph_captured_before_anothers_outputs_lived_still_waits_for_them() -> None:
    pool = graph_pool_handle("cpu")
    first = GraphRunner(lambda x: x + 1, options=CaptureOptions(pool=pool))
    second = GraphRunner(lambda h: h * 3, options=CaptureOptions(pool=pool))
    first(torch.ones(8))  # captured while nothing of the pool was alive
    kept = second(torch.ones(8))
    again = first(torch.full((8,), 2.0))  # `kept` lives: `first` may overlap it
    assert kept.tolist() == [3.0] * 8
    assert again.tolist() == [3.0] * 8
    assert first.counters.recapture_reasons["outputs_in_use"] == 1
