"""The replay path: guarded arguments, ``as_function``, call paths and output liveness.

Each test states a behaviour a user relies on whichever path answers the call: the same numbers
as eager, held outputs never overwritten, the caller's tensors left alone, no leaked runner.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from npu_mempool import CaptureOptions, GraphRunner, InputKind, InputLayoutError

P, M, U = InputKind.PARAMETER, InputKind.MUTATED, InputKind.USER


def affine(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w)


def test_all_guarded_arguments_give_one_constant_key() -> None:
    w = torch.randn(4, 3)
    runner = GraphRunner(affine, input_kinds=[U, P], guarded=[True, True])
    for _ in range(3):
        x = torch.randn(2, 4)
        torch.testing.assert_close(runner(x, w), affine(x, w))
    assert runner.graph_keys == ((),)
    assert runner.counters.captures == 1
    assert runner.counters.replays == 2


def test_unguarded_arguments_stay_in_the_key() -> None:
    def scaled(x: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
        return (x @ w) * n

    w = torch.randn(4, 3)
    runner = GraphRunner(scaled, input_kinds=[U, P, U], guarded=[True, True, False])
    x = torch.randn(2, 4)
    torch.testing.assert_close(runner(x, w, 2), scaled(x, w, 2))
    torch.testing.assert_close(runner(x, w, 3), scaled(x, w, 3))
    # The last part: autocast is off.
    assert runner.graph_keys == ((3, 2, int, False), (3, 3, int, False))


def test_guarded_flags_must_match_the_arguments() -> None:
    with pytest.raises(InputLayoutError, match="guarded has 1 flag"):
        GraphRunner(affine, input_kinds=[U, P], guarded=[True])
    runner = GraphRunner(affine, guarded=[True, True, True])
    with pytest.raises(InputLayoutError, match="one flag per positional argument"):
        runner(torch.randn(2, 4), torch.randn(4, 3))


def test_parameters_are_still_watched_when_guarded() -> None:
    # Guarding speaks of shapes, never of addresses: another weight must not replay the graph
    # captured with the first one.
    runner = GraphRunner(affine, input_kinds=[U, P], guarded=[True, True])
    x = torch.randn(2, 4)
    w1, w2 = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(runner(x, w1), affine(x, w1))
    torch.testing.assert_close(runner(x, w2), affine(x, w2))
    torch.testing.assert_close(runner(x, w1), affine(x, w1))
    assert runner.counters.recapture_reasons["parameter_moved"] == 1
    assert runner.counters.replays == 1  # w1 again: its graph was kept as a variant


@pytest.mark.parametrize("made_before_first_call", [True, False])
def test_as_function_answers_like_the_runner(made_before_first_call: bool) -> None:
    w = torch.randn(4, 3)
    runner = GraphRunner(affine, input_kinds=[U, P])
    if not made_before_first_call:
        runner(torch.randn(2, 4), w)
    function = runner.as_function()
    assert function.__name__ == runner.name
    for rows in (2, 5, 2, 5):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(function(x, w), affine(x, w))
    assert runner.num_graphs == 2
    assert runner.counters.captures == 2
    assert runner.counters.replays == (2 if made_before_first_call else 3)


def test_as_function_reports_layout_errors_like_the_runner() -> None:
    runner = GraphRunner(affine, input_kinds=[U, P])
    function = runner.as_function()
    function(torch.randn(2, 4), torch.randn(4, 3))
    with pytest.raises(InputLayoutError, match="first called with 2 argument"):
        function(torch.randn(2, 4))


def test_as_function_keeps_the_runner_alive_and_frees_it_without_the_gc() -> None:
    runner = GraphRunner(affine, input_kinds=[U, P], guarded=[True, True])
    ref = weakref.ref(runner)
    function = runner.as_function()
    del runner
    w = torch.randn(4, 3)
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(function(x, w), affine(x, w))
    assert ref() is not None
    gc.disable()
    try:
        del function
        assert ref() is None, "the function and its runner form a reference cycle"
    finally:
        gc.enable()


def test_emulated_replay_leaves_a_user_input_the_callable_writes_alone() -> None:
    # On a device the callable writes the static copy, never the caller's tensor.
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    runner = GraphRunner(bump, input_kinds=[U])
    for value in (1.0, 5.0, 7.0):
        x = torch.full((3,), value)
        assert runner(x).tolist() == [(value + 1) * 2] * 3
        assert x.tolist() == [value] * 3
    assert runner.counters.replays == 2


def test_inputs_with_other_strides_get_a_graph_of_their_own() -> None:
    # A callable that reads memory order (as_strided, a stride-specialised kernel) must see the
    # caller's layout, as eager does: a transposed input of the same shape and dtype is another
    # key, captured on a static copy with the transposed strides.
    def flat(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, (16,), (1,)) * 1

    runner = GraphRunner(flat, input_kinds=[U])
    runner(torch.randn(4, 4))
    for start in (0.0, 100.0):
        x = (torch.arange(16.0) + start).reshape(4, 4).t()
        assert x.stride() == (1, 4)
        assert runner(x).tolist() == flat(x).tolist()
    assert (runner.counters.captures, runner.counters.replays) == (2, 1)


def test_a_sliced_input_keeps_its_strides_and_gaps_stay_unread() -> None:
    # x[:, 2:10] of a (4, 16) tensor: rows 16 apart. The static copy keeps those strides, so a
    # graph traced with them (Dynamo bakes the caller's strides into as_strided) reads the
    # copied elements, never a gap.
    def windows(x: torch.Tensor) -> torch.Tensor:
        return x.as_strided((2, 3, 4), (16, 2, 1)).sum(-1)

    runner = GraphRunner(windows, input_kinds=[U])
    for _ in range(3):
        x = torch.randn(4, 16)[:, 2:10]
        torch.testing.assert_close(runner(x), windows(x), rtol=0, atol=0)
    assert (runner.counters.captures, runner.counters.replays) == (1, 2)


def test_feeding_an_output_back_as_the_next_input() -> None:
    # The decode-loop pattern h = step(h): the input is the static output of the last replay.
    w = torch.randn(4, 4) / 2
    runner = GraphRunner(affine, input_kinds=[U, P])
    h = torch.randn(2, 4)
    expected = h.clone()
    for _ in range(4):
        h = runner(h, w)
        expected = affine(expected, w)
        torch.testing.assert_close(h, expected)
    # `h` is held while the next call runs: the two calls alternate between two call paths.
    assert runner.num_paths == 2
    assert runner.counters.captures == 2
    assert runner.counters.replays == 2


def test_feeding_an_output_back_while_another_output_views_the_input() -> None:
    w = torch.randn(4, 4) / 2

    def step(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(x @ w), x[0]

    runner = GraphRunner(step, input_kinds=[U])
    h = torch.randn(2, 4)
    for _ in range(4):
        fed = h.clone()
        h, row = runner(h)
        torch.testing.assert_close(h, torch.tanh(fed @ w))
        torch.testing.assert_close(row, fed[0])  # the input of this call, not its output


def test_an_output_viewing_the_static_input_is_not_overwritten_while_held() -> None:
    def head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[0], x.sum(0)

    runner = GraphRunner(head, input_kinds=[U])
    first_view, _ = runner(torch.zeros(2, 3))
    x = torch.arange(6.0).reshape(2, 3)
    view, total = runner(x)
    assert view.tolist() == [0.0, 1.0, 2.0]
    assert first_view.tolist() == [0.0, 0.0, 0.0]  # held: the second call took another path
    assert total.tolist() == [3.0, 5.0, 7.0]


def test_a_dropped_output_is_reused_by_the_next_replay() -> None:
    w = torch.randn(4, 3)
    runner = GraphRunner(affine, input_kinds=[U, P], guarded=[True, True])
    x1, x2 = torch.randn(2, 4), torch.randn(2, 4)
    first_ptr = runner(x1, w).data_ptr()
    second = runner(x2, w)
    assert second.data_ptr() == first_ptr  # the static output, written again
    torch.testing.assert_close(second, affine(x2, w))
    assert runner.num_paths == 1


def test_replay_under_autograd_records_nothing() -> None:
    w = torch.randn(4, 3, requires_grad=True)
    runner = GraphRunner(affine, input_kinds=[U, P])
    with torch.no_grad():
        runner(torch.randn(2, 4), w)
    x = torch.randn(2, 4)
    with torch.enable_grad():
        out = runner(x, w)
    assert out.grad_fn is None
    torch.testing.assert_close(out, affine(x, w).detach())


def test_without_clone_input_later_inputs_are_copied_into_the_first() -> None:
    w = torch.randn(4, 3)
    runner = GraphRunner(affine, input_kinds=[U, P], options=CaptureOptions(clone_input=False))
    first = torch.randn(2, 4)
    runner(first, w)
    second = torch.randn(2, 4)
    torch.testing.assert_close(runner(second, w), affine(second, w))
    torch.testing.assert_close(first, second)  # the captured tensor is the static input


@pytest.mark.parametrize("as_function", [False, True], ids=["runner", "as_function"])
def test_a_held_output_is_not_overwritten_by_the_next_call(as_function: bool) -> None:
    w = torch.randn(4, 4) / 2
    runner = GraphRunner(affine, input_kinds=[U, P])
    call = runner.as_function() if as_function else runner
    for _ in range(4):
        x = torch.randn(2, 4)
        first = call(x, w)  # held while the same graph runs again, as `a + block(a)` does
        second = call(first, w)
        torch.testing.assert_close(first, affine(x, w))
        torch.testing.assert_close(second, affine(affine(x, w), w))
        del first, second
    assert runner.num_graphs == 2  # one per call path
    assert runner.counters.captures == 2
    assert runner.counters.replays == 6


def test_a_view_of_an_output_keeps_it_from_being_overwritten() -> None:
    w = torch.randn(4, 4) / 2
    runner = GraphRunner(affine, input_kinds=[U, P])
    x = torch.randn(2, 4)
    row = runner(x, w)[0]  # only a view survives
    runner(torch.randn(2, 4), w)
    torch.testing.assert_close(row, affine(x, w)[0])


def test_call_paths_each_have_their_own_pool_and_reset_together() -> None:
    w = torch.randn(4, 4)
    runner = GraphRunner(affine, input_kinds=[U, P])
    held = runner(torch.randn(2, 4), w)
    runner(torch.randn(2, 4), w)
    assert runner.counters.pool_bytes > runner.pool.nbytes > 0  # type: ignore[union-attr]
    del held
    runner.reset()
    assert runner.num_graphs == 0
    x = torch.randn(2, 4)
    torch.testing.assert_close(runner(x, w), affine(x, w))
    assert runner.num_graphs == 1
