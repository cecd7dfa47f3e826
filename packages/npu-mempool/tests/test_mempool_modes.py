"""Memory modes on the CPU emulated pool: sharing, rewind, input clone, output clone, staleness."""

from __future__ import annotations

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    GraphRunner,
    InputKind,
    OptionsError,
    StaleOutputError,
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
    outs = [runner(torch.ones(n, 256)) for n in SHAPES]
    largest = GraphRunner(double)
    largest(torch.ones(SHAPES[0], 256))
    assert runner.counters.pool_bytes == largest.counters.pool_bytes
    # Every capture rewound the pool: later graphs live inside the bytes of the first one.
    base = outs[0].untyped_storage().data_ptr()
    for out in outs[1:]:
        assert base <= out.data_ptr() < base + largest.counters.pool_bytes

    no_input_buffers = GraphRunner(double, options=CaptureOptions(clone_input=False))
    outs = [no_input_buffers(torch.ones(n, 256)) for n in SHAPES]
    assert len({o.data_ptr() for o in outs}) == 1  # the same bytes for every shape


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


def test_mode2_output_of_one_shape_is_overwritten_by_another_shape() -> None:
    runner = GraphRunner(double)
    a = runner(torch.full((4,), 1.0))
    b = runner(torch.full((2,), 5.0))  # captured after a rewind: same bytes as `a`
    assert b.tolist() == [10, 10]
    assert a[:2].tolist() == [10, 10]  # documented: `a` was overwritten
    runner(torch.full((4,), 1.0))  # replaying `a`'s graph overwrites `b` in turn
    assert b.tolist() == [2, 2]


def test_same_graph_replay_overwrites_its_previous_output() -> None:
    runner = GraphRunner(double)
    first = runner(torch.ones(3))
    second = runner(torch.full((3,), 4.0))
    assert first is second
    assert first.tolist() == [8, 8, 8]


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


def test_check_output_overwrite_raises_on_a_stale_output() -> None:
    runner = GraphRunner(
        double, name="decoder", options=CaptureOptions(check_output_overwrite=True)
    )
    a = runner(torch.full((4,), 1.0))
    assert a.tolist() == [2, 2, 2, 2]  # fresh: readable
    runner(torch.full((2,), 5.0))
    assert a.shape == (4,)  # metadata stays readable
    with pytest.raises(StaleOutputError, match=r"'decoder'.*clone_output=True"):
        a.sum()
    with pytest.raises(StaleOutputError):
        a.tolist()
    fresh = runner(torch.full((4,), 3.0))
    assert fresh.tolist() == [6, 6, 6, 6]
    assert type(fresh + 1) is torch.Tensor  # results of operations are plain tensors


def test_check_output_overwrite_without_reuse_only_flags_the_same_graph() -> None:
    options = CaptureOptions(check_output_overwrite=True, reuse_pool_across_shapes=False)
    runner = GraphRunner(double, options=options)
    a = runner(torch.full((4,), 1.0))
    runner(torch.full((2,), 5.0))  # another graph, another region: `a` is intact
    assert a.tolist() == [2, 2, 2, 2]
    runner(torch.full((4,), 1.0))
    with pytest.raises(StaleOutputError):
        a.tolist()


def test_mode1_runners_share_one_pool() -> None:
    pool = graph_pool_handle("cpu")
    options = CaptureOptions(pool=pool)
    first = GraphRunner(double, options=options)
    second = GraphRunner(lambda x: x + 1, options=options)
    a = first(torch.ones(64, 64))
    b = second(torch.ones(64, 64))
    assert first.pool is second.pool is pool
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one arena
    assert first.counters.pool_bytes == second.counters.pool_bytes == pool.nbytes
    # Mode 1 turns mode 2 off: a new shape does not rewind the shared pool over `b`.
    first(torch.ones(32, 64))
    assert b.tolist() == torch.full((64, 64), 2.0).tolist()


def test_mode1_memory_freed_by_one_runner_is_reused_by_another() -> None:
    pool = graph_pool_handle("cpu")
    first = GraphRunner(double, options=CaptureOptions(pool=pool))
    a = first(torch.ones(128, 64))
    start = a.data_ptr()
    first.reset()
    second = GraphRunner(lambda x: x + 1, options=CaptureOptions(pool=pool))
    high_water = pool.nbytes
    b = second(torch.ones(128, 64))
    assert pool.nbytes == high_water
    assert b.data_ptr() == start  # the bytes `first` gave back
    assert a.tolist() == b.tolist()  # `a` (held past reset) now shows the other runner's result


def test_mode1_pool_on_another_device_is_refused() -> None:
    class FakeHandle:
        device = torch.device("cuda")

    runner = GraphRunner(double, options=CaptureOptions(pool=FakeHandle()))  # type: ignore[arg-type]
    with pytest.raises(OptionsError, match="graph_pool_handle"):
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


def test_check_output_overwrite_flags_outputs_of_freed_graphs() -> None:
    options = CaptureOptions(check_output_overwrite=True, reuse_pool_across_shapes=False)
    runner = GraphRunner(double, options=options)
    a = runner(torch.ones(2))
    runner.reset()
    with pytest.raises(StaleOutputError):
        a.sum()

    cache_runner = GraphRunner(
        lambda x, c: c + x, input_kinds=[InputKind.USER, InputKind.MUTATED], options=options
    )
    b = cache_runner(torch.ones(2), torch.zeros(2))
    cache_runner(torch.ones(2), torch.zeros(2))  # a new cache address: recapture frees b's graph
    with pytest.raises(StaleOutputError):
        b.sum()


def test_check_output_overwrite_flags_outputs_of_graphs_captured_after_the_replayed_one() -> None:
    # On a device a later capture may place its outputs on memory an earlier graph of the same
    # pool freed at the end of its capture, so replaying the earlier graph can overwrite them.
    options = CaptureOptions(check_output_overwrite=True, reuse_pool_across_shapes=False)
    runner = GraphRunner(double, options=options)
    runner(torch.full((4,), 1.0))
    b = runner(torch.full((2,), 5.0))
    runner(torch.full((4,), 1.0))
    with pytest.raises(StaleOutputError):
        b.tolist()


def test_check_output_overwrite_sees_replays_of_another_runner_in_a_mode1_pool() -> None:
    options = CaptureOptions(pool=graph_pool_handle("cpu"), check_output_overwrite=True)
    first = GraphRunner(double, options=options)
    second = GraphRunner(lambda x: x + 1, options=options)
    a = first(torch.ones(4))
    b = second(torch.ones(4))
    first(torch.ones(4))  # captured before `second`: may overwrite its outputs
    with pytest.raises(StaleOutputError):
        b.tolist()
    c = first(torch.ones(4))
    second(torch.ones(4))  # captured after `first`: cannot reach memory `first` holds
    assert c.tolist() == [2, 2, 2, 2]
    with pytest.raises(StaleOutputError):
        a.tolist()  # replayed over by `first` itself


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
