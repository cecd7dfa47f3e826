"""GraphRunner on CPU: keys, input classes, recapture, limits, failures, counters."""

from __future__ import annotations

import logging
import weakref

import npu_mempool
import pytest
import torch
from npu_mempool import (
    CaptureError,
    CaptureLimitWarning,
    CaptureOptions,
    ConfigError,
    GraphRunner,
    InputKind,
    InputLayoutError,
)
from npu_mempool._policy import CHURN_LIMIT

P, M, U = InputKind.PARAMETER, InputKind.MUTATED, InputKind.USER


def mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w + b)


def test_outputs_equal_eager_over_calls_and_shapes() -> None:
    torch.manual_seed(0)
    w, b = torch.randn(8, 4), torch.randn(4)
    runner = GraphRunner(mlp, input_kinds=[U, P, P])
    for rows in (2, 3, 2, 5, 3):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(runner(x, w, b), mlp(x, w, b))
    assert runner.num_graphs == 3
    assert runner.counters.captures == 3
    assert runner.counters.replays == 2


def test_key_includes_int_arguments_and_one_graph_per_key() -> None:
    calls: list[int] = []

    def fn(x: torch.Tensor, n: int) -> torch.Tensor:
        calls.append(n)
        return x * n

    runner = GraphRunner(fn)
    x = torch.ones(3)
    with runner.counters.expect(captures=2, replays=2):
        assert runner(x, 2).tolist() == [2, 2, 2]
        assert runner(x, 3).tolist() == [3, 3, 3]
        assert runner(x, 2).tolist() == [2, 2, 2]
        assert runner(x, 3).tolist() == [3, 3, 3]
    assert runner.num_graphs == 2
    size, f32 = torch.Size([3]), torch.float32
    # Per key: shape, dtype and strides of the tensor, the int and its type, autocast off.
    assert runner.graph_keys == (
        (2, size, f32, (1,), 2, int, False),
        (2, size, f32, (1,), 3, int, False),
    )


def test_container_types_and_constants_are_kept() -> None:
    def fn(x: torch.Tensor) -> list[object]:
        return [x + 1, 7, x * 2]

    runner = GraphRunner(fn)
    out = runner(torch.zeros(2))
    assert isinstance(out, list)
    assert out[1] == 7
    out2 = runner(torch.ones(2))
    assert out2[0].tolist() == [2, 2]
    assert out2[2].tolist() == [2, 2]

    nested = GraphRunner(lambda x: {"a": x + 1, "b": (x, 3)})
    got = nested(torch.zeros(2))
    assert set(got) == {"a", "b"}
    assert got["b"][1] == 3


def test_parameters_are_not_copied_and_their_move_recaptures() -> None:
    w = torch.ones(3)
    runner = GraphRunner(lambda x, w: x * w, input_kinds=[U, P])
    x = torch.full((3,), 2.0)
    assert runner(x, w).tolist() == [2, 2, 2]
    w.fill_(3)  # same address: the graph reads the new values, nothing is recaptured
    with runner.counters.expect(captures=0, replays=1):
        assert runner(x, w).tolist() == [6, 6, 6]
    w2 = torch.full((3,), 5.0)
    with runner.counters.expect(captures=1, recapture_reasons={"parameter_moved": 1}):
        assert runner(x, w2).tolist() == [10, 10, 10]
    # The first parameter set's graph is kept: two module instances sharing one FX graph
    # alternate between their graphs by replaying, never by recapturing.
    assert runner.num_graphs == 2
    with runner.counters.expect(captures=0, replays=4):
        for _ in range(2):
            assert runner(x, w).tolist() == [6, 6, 6]
            assert runner(x, w2).tolist() == [10, 10, 10]


def test_parameter_sets_count_toward_the_capture_limit() -> None:
    runner = GraphRunner(
        lambda x, w: x * w, input_kinds=[U, P], options=CaptureOptions(capture_limit=2)
    )
    x = torch.ones(2)
    # Kept alive: a dead weight's address may be reused by the next one, which then (rightly,
    # as on a device) replays the graph captured at that address.
    weights = [torch.full((2,), v) for v in (2.0, 3.0, 4.0)]
    runner(x, weights[0])
    runner(x, weights[1])
    assert runner.num_graphs == 2
    with pytest.warns(CaptureLimitWarning, match="capture limit of 2"):
        assert runner(x, weights[2]).tolist() == [4, 4]
    assert runner.num_graphs == 0


def test_frozen_parameters_skip_the_address_check() -> None:
    runner = GraphRunner(
        lambda x, w: x * w, input_kinds=[U, P], options=CaptureOptions(frozen_parameters=True)
    )
    x, w = torch.ones(2), torch.full((2,), 2.0)
    runner(x, w)
    with runner.counters.expect(captures=0, recaptures=0, replays=1):
        # The promise is broken here on purpose: the captured parameter is still the one used.
        assert runner(x, torch.full((2,), 9.0)).tolist() == [2, 2]


def test_mutated_input_is_updated_in_place_and_its_move_recaptures() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
        cache[pos] = x
        return cache.sum(0)

    runner = GraphRunner(step, input_kinds=[U, M, U])
    cache = torch.zeros(4, 2)
    runner(torch.ones(2), cache, 0)
    runner(torch.full((2,), 2.0), cache, 1)
    assert cache.tolist() == [[1, 1], [2, 2], [0, 0], [0, 0]]
    assert runner(torch.full((2,), 3.0), cache, 0).tolist() == [5, 5]

    other = torch.zeros(4, 2)
    with runner.counters.expect(captures=1, recapture_reasons={"mutated_input_moved": 1}):
        assert runner(torch.ones(2), other, 0).tolist() == [1, 1]
    assert other[0].tolist() == [1, 1]
    assert cache[0].tolist() == [3, 3]  # the old cache is not written
    # Both caches live on (two model instances): the first graph was kept, switching back replays.
    assert runner.num_graphs == 3
    with runner.counters.expect(captures=0, replays=2):
        assert runner(torch.full((2,), 4.0), cache, 0).tolist() == [6, 6]
        assert runner(torch.full((2,), 5.0), other, 0).tolist() == [5, 5]
    assert cache.tolist() == [[4, 4], [2, 2], [0, 0], [0, 0]]
    assert other.tolist() == [[5, 5], [0, 0], [0, 0], [0, 0]]


def test_a_replaced_cache_recaptures_and_frees_the_old_graph() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache * 2

    runner = GraphRunner(step, input_kinds=[U, M])
    cache = torch.zeros(3)
    runner(torch.ones(3), cache)
    keep_alive = [torch.empty(3) for _ in range(4)]  # so the new cache lands elsewhere
    cache = torch.zeros(3)  # the old cache dies here: its graph can never be right again
    with runner.counters.expect(captures=1, recapture_reasons={"mutated_input_moved": 1}):
        assert runner(torch.ones(3), cache).tolist() == [2, 2, 2]
    assert runner.num_graphs == 1
    del keep_alive


def test_alternating_separate_caches_replays_until_one_dies() -> None:
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache.sum(0)

    runner = GraphRunner(step, input_kinds=[U, M])
    caches = [torch.zeros(2, 2), torch.zeros(2, 2)]
    with runner.counters.expect(captures=2, replays=4):
        for _ in range(3):
            for cache in caches:
                runner(torch.ones(2, 2), cache)
    assert [c.tolist() for c in caches] == [[[3, 3], [3, 3]]] * 2
    # One instance goes away; a third takes its place: the dead one's graph is dropped.
    keep_alive = [torch.empty(2, 2) for _ in range(4)]
    caches[0] = torch.zeros(2, 2)
    runner(torch.ones(2, 2), caches[0])
    runner(torch.ones(2, 2), caches[1])
    assert runner.num_graphs == 2
    del keep_alive


def test_each_call_runs_the_callable_once_so_in_place_updates_are_not_doubled() -> None:
    def bump(counter: torch.Tensor) -> torch.Tensor:
        counter.add_(1)
        return counter * 1

    runner = GraphRunner(bump, input_kinds=[M])
    counter = torch.zeros(1)
    for expected in (1, 2, 3):
        assert runner(counter).item() == expected


def test_capture_limit_warns_once_frees_graphs_and_runs_eagerly() -> None:
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(capture_limit=2))
    runner(torch.zeros(1))
    runner(torch.zeros(2))
    assert runner.pool is not None
    assert runner.pool.nbytes > 0
    with pytest.warns(CaptureLimitWarning, match="capture limit of 2"):
        out = runner(torch.zeros(3))
    assert out.tolist() == [1, 1, 1]
    assert runner.num_graphs == 0
    assert runner.pool is None
    assert runner.counters.pool_bytes == 0
    with runner.counters.expect(captures=0, replays=0, eager_calls=3, fallbacks=0):
        runner(torch.zeros(1))  # no second warning (warnings are errors in this suite)
        runner(torch.zeros(4))
        assert runner(torch.zeros(2)).tolist() == [1, 1]
    assert runner.counters.fallbacks == 1


def test_reset_frees_graphs_and_captures_again() -> None:
    runner = GraphRunner(lambda x: x + 1)
    runner(torch.zeros(2))
    runner.reset()
    assert runner.num_graphs == 0
    with runner.counters.expect(captures=1):
        assert runner(torch.zeros(2)).tolist() == [1, 1]


def failing(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 3:
        raise RuntimeError("operation not permitted when stream is capturing")
    return x + 1


def test_capture_failure_logs_once_and_runs_that_key_eagerly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = {"n": 0}

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("not capturable")
        return x + 1

    runner = GraphRunner(fn, name="flaky")
    with caplog.at_level(logging.WARNING, logger="npu_mempool"):
        assert runner(torch.zeros(2)).tolist() == [1, 1]
        assert runner(torch.zeros(2)).tolist() == [1, 1]
    records = [r for r in caplog.records if "could not capture" in r.getMessage()]
    assert len(records) == 1
    assert "'flaky'" in records[0].getMessage()
    assert runner.counters.fallbacks == 1
    assert runner.counters.eager_calls == 2
    assert runner.counters.captures == 0


def test_strict_raises_capture_error_with_the_cause() -> None:
    runner = GraphRunner(failing, options=CaptureOptions(strict=True))
    assert runner(torch.zeros(2)).tolist() == [1, 1]
    with pytest.raises(CaptureError, match="could not capture") as info:
        runner(torch.zeros(3))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_specialize_is_called_once_per_new_key() -> None:
    seen: list[object] = []

    def specialize(key: object, args: tuple[object, ...]) -> object:
        seen.append(key)
        return lambda x: x * 10

    runner = GraphRunner(lambda x: x, specialize=specialize)  # type: ignore[arg-type]
    assert runner(torch.ones(2)).tolist() == [10, 10]
    runner(torch.ones(2))
    runner(torch.ones(3))
    assert seen == [
        (1, torch.Size([2]), torch.float32, (1,), False),
        (1, torch.Size([3]), torch.float32, (1,), False),
    ]


def test_warmup_runs_are_eager_then_the_key_is_captured() -> None:
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(warmup_runs=1))
    with runner.counters.expect(eager_calls=1, captures=1, replays=1):
        for _ in range(3):
            assert runner(torch.zeros(2)).tolist() == [1, 1]


def test_warmup_default_follows_the_device() -> None:
    from npu_mempool._devices import backend_for

    # CUDA libraries initialise lazily (cuBLAS) and must not do it inside a capture.
    assert backend_for("cuda").default_warmup_runs == 1
    assert backend_for("npu").default_warmup_runs == 0
    assert backend_for("cpu").default_warmup_runs == 0
    # On CPU the default captures on the first call of a key; an explicit option wins.
    runner = GraphRunner(lambda x: x + 1)
    with runner.counters.expect(eager_calls=0, captures=1):
        runner(torch.zeros(2))
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(warmup_runs=2))
    with runner.counters.expect(eager_calls=2, captures=1):
        for _ in range(3):
            runner(torch.zeros(2))


def test_layout_errors_are_clear() -> None:
    with pytest.raises(InputLayoutError, match="one InputKind per positional argument"):
        GraphRunner(lambda x: x, input_kinds=[U, U])(torch.zeros(1))
    runner = GraphRunner(lambda x, n: x * n)
    runner(torch.ones(1), 2)
    with pytest.raises(InputLayoutError, match="Keep one call signature"):
        runner(3, torch.ones(1))


def test_options_error_is_a_deprecated_alias_that_still_catches() -> None:
    from npu_mempool import OptionsError

    assert OptionsError is ConfigError
    with pytest.raises(OptionsError, match="capture_limit"):
        CaptureOptions(capture_limit=0)


def test_a_bad_option_has_the_config_code_of_every_npu_package() -> None:
    with pytest.raises(ConfigError) as caught:
        CaptureOptions(capture_limit=0)
    assert caught.value.code == "config"


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="capture_limit"):
        CaptureOptions(capture_limit=0)
    with pytest.raises(ValueError, match="warmup_runs"):
        CaptureOptions(warmup_runs=-1)


@pytest.mark.parametrize(
    ("field", "value"),
    [("clone_input", "yes"), ("clone_output", 1), ("strict", None), ("capture_limit", "8")],
)
def test_options_of_the_wrong_type_are_refused(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        CaptureOptions(**{field: value})  # type: ignore[arg-type]


def test_threads_sharing_a_runner_get_their_own_outputs() -> None:
    import threading

    w = torch.randn(8, 8) / 3

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w) + x

    runner = GraphRunner(step, input_kinds=[U, P])
    runner(torch.randn(4, 8), w)
    wrong: list[int] = []

    def worker(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        for _ in range(100):
            x = torch.randn(4, 8, generator=generator)
            out = runner(x, w)
            if not torch.allclose(out, step(x, w)):
                wrong.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_runners_sharing_a_pool_never_replay_at_once() -> None:
    """Mode 1: graphs of one pool share memory, so two threads calling two runners of one pool
    take turns (on a device, one graph's replay may reuse what the other's buffers hold)."""
    import threading

    entered, release = threading.Event(), threading.Event()
    blocking = threading.local()

    def slow(x: torch.Tensor) -> torch.Tensor:
        if getattr(blocking, "on", False):
            entered.set()
            assert release.wait(10), "the test never released the first call"
        return x + 1

    options = CaptureOptions(pool=npu_mempool.graph_pool_handle("cpu"))
    first = GraphRunner(slow, options=options, name="first")
    reached: list[str] = []
    second = GraphRunner(lambda x: (reached.append("second"), x - 1)[1], options=options)
    first(torch.zeros(2))  # captured: the CPU emulation re-runs ``slow`` on every replay
    second(torch.zeros(2))
    reached.clear()

    def hold_the_pool() -> None:
        blocking.on = True
        first(torch.zeros(2))

    holder = threading.Thread(target=hold_the_pool)
    holder.start()
    assert entered.wait(10)
    other = threading.Thread(target=second, args=(torch.zeros(2),))
    other.start()
    other.join(0.3)
    assert reached == []  # waits for the pool while ``first`` replays
    release.set()
    holder.join(10)
    other.join(10)
    assert reached == ["second"]


def test_process_wide_counters_sum_runners() -> None:
    with npu_mempool.counters.expect(captures=2, replays=1):
        a = GraphRunner(lambda x: x + 1)
        b = GraphRunner(lambda x: x - 1)
        a(torch.zeros(1))
        a(torch.zeros(1))
        b(torch.zeros(1))
    assert npu_mempool.counters.pool_bytes >= a.counters.pool_bytes + b.counters.pool_bytes


def test_expect_reports_every_mismatch() -> None:
    runner = GraphRunner(lambda x: x + 1)
    expected = r"captures moved by 1, expected 2.*replays"
    with (
        pytest.raises(AssertionError, match=expected),
        runner.counters.expect(captures=2, replays=1),
    ):
        runner(torch.zeros(1))
    with pytest.raises(TypeError, match="unknown counter"), runner.counters.expect(graphs=1):
        pass


def test_failed_recapture_drops_the_old_graph(caplog: pytest.LogCaptureFixture) -> None:
    state = {"fail": False}

    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        if state["fail"]:
            raise RuntimeError("cannot capture now")
        return cache + x

    runner = GraphRunner(step, input_kinds=[U, M])
    # The first cache stays alive, so the second cannot reuse its address: a cache freed and
    # allocated again at the same address is no move, and its replay (which the emulation runs
    # by calling step) would raise without any recapture.
    first_cache = torch.zeros(2)
    runner(torch.ones(2), first_cache)
    state["fail"] = True
    failing_call = pytest.raises(RuntimeError, match="cannot capture now")
    with caplog.at_level(logging.WARNING, logger="npu_mempool"), failing_call:
        runner(torch.ones(2), torch.zeros(2))  # moved cache: recapture fails, eager raises too
    assert runner.num_graphs == 0
    state["fail"] = False
    assert runner(torch.ones(2), torch.full((2,), 4.0)).tolist() == [5, 5]  # eager from now on
    assert runner.counters.eager_calls == 2


def test_a_dropped_runner_frees_its_graphs_without_the_garbage_collector() -> None:
    import gc
    import weakref

    gc.disable()
    try:
        runner = GraphRunner(lambda x, c: c.add_(x), input_kinds=[U, M])
        runner(torch.ones(2), torch.zeros(2))
        runner(torch.ones(2), torch.zeros(2))
        pool = weakref.ref(runner.pool)  # type: ignore[arg-type]
        alive = weakref.ref(runner)
        del runner
        assert alive() is None
        assert pool() is None
    finally:
        gc.enable()


def test_runner_is_function_like_for_wrappers_that_read_its_name() -> None:
    # Dynamo's disable() wrapper reads __name__ on every call; without it each call would raise
    # and swallow an AttributeError.
    runner = GraphRunner(mlp, input_kinds=[U, P, P], name="decode_step")
    assert runner.__name__ == "decode_step"
    assert runner.__qualname__ == "decode_step"
    assert GraphRunner(mlp).__name__ == "mlp"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_a_dtype_change_with_the_same_shape_captures_its_own_graph(dtype: torch.dtype) -> None:
    runner = GraphRunner(lambda x: x * 3)
    runner(torch.ones(4))
    x = torch.arange(4).to(dtype)
    out = runner(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, x * 3)
    assert runner.num_graphs == 2


def test_an_extra_argument_is_a_layout_error_not_ignored() -> None:
    runner = GraphRunner(lambda *xs: sum(xs))
    runner(torch.ones(2))
    with pytest.raises(InputLayoutError, match="first called with 1 argument"):
        runner(torch.ones(2), torch.ones(2))


def test_equal_values_of_other_types_get_their_own_graph() -> None:
    runner = GraphRunner(lambda x, s: x * s)
    x = torch.arange(3)
    assert runner(x, 1).dtype == torch.int64
    out = runner(x, 1.0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x * 1.0)


def test_a_tensor_where_a_value_was_is_a_layout_error() -> None:
    runner = GraphRunner(lambda x, s: x * s)
    runner(torch.ones(2), 2)
    with pytest.raises(InputLayoutError, match="hashable values elsewhere"):
        runner(torch.ones(2), torch.ones(2))
    assert runner.num_graphs == 1


def test_a_mutated_input_seen_through_other_strides_is_not_replayed() -> None:
    def accumulate(cache: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache.sum(0)

    runner = GraphRunner(accumulate, input_kinds=[M, U])
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    cache, expected = torch.zeros(2, 2), torch.zeros(2, 2)
    runner(cache, x)
    cache.zero_()
    out = runner(cache.t(), x)  # same address and shape, transposed
    torch.testing.assert_close(out, accumulate(expected.t(), x))
    torch.testing.assert_close(cache, expected)


# The callable tells a capture from an eager call by autograd being off: only with autograd on.
@pytest.mark.parametrize("grad_mode", ["grad"], indirect=True)
def test_a_failed_capture_for_a_new_parameter_set_frees_the_key_s_graphs() -> None:
    w1, w2, w3 = torch.full((3,), 2.0), torch.full((3,), 3.0), torch.full((3,), 4.0)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if w is w3 and not torch.is_grad_enabled():  # captures run without autograd
            raise RuntimeError("not capturable")
        return x * w

    runner = GraphRunner(fn, input_kinds=[U, P], options=CaptureOptions(capture_limit=3))
    x = torch.ones(3)
    runner(x, w1)
    runner(x, w2)  # a second graph for the key, the first kept as a variant
    assert runner.num_graphs == 2
    runner(x, w1)  # a replay: parameter sets that alternate, not parameters that keep moving
    assert runner(x, w3).tolist() == [4, 4, 4]  # the capture fails: eager from now on
    assert runner.num_graphs == 0
    assert runner(x, w1).tolist() == [2, 2, 2]


def test_input_kinds_that_are_not_input_kind_members_are_refused() -> None:
    with pytest.raises(InputLayoutError, match="InputKind members, got 'user'"):
        GraphRunner(lambda x: x + 1, input_kinds=["user"])  # type: ignore[list-item]


def test_a_graph_returning_its_cache_does_not_pin_replaced_caches() -> None:
    # The output views the cache, so the runner itself keeps the cache alive: such a graph is
    # replaced when the cache moves, never kept, or every replaced cache would stay in memory.
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache[0]

    runner = GraphRunner(step, input_kinds=[U, M])
    cache = torch.zeros(2, 2)
    runner(torch.ones(2, 2), cache)
    gone = weakref.ref(cache)
    del cache
    runner(torch.ones(2, 2), torch.zeros(2, 2))
    assert gone() is None
    assert runner.num_graphs == 1


def test_a_value_that_changes_every_call_stops_capturing_with_one_warning() -> None:
    def shifted(x: torch.Tensor, offset: int) -> torch.Tensor:
        return x + offset

    runner = GraphRunner(shifted, input_kinds=[U, U], name="shifted")
    xs = [torch.randn(3) for _ in range(20)]
    with pytest.warns(npu_mempool.CaptureChurnWarning, match=r"argument\(s\) \[1\]") as record:
        outs = [runner(x, step).clone() for step, x in enumerate(xs)]
    assert len(record) == 1
    for step, (x, out) in enumerate(zip(xs, outs, strict=True)):
        torch.testing.assert_close(out, x + step)
    assert runner.counters.captures == CHURN_LIMIT
    assert runner.num_graphs == 0
    assert runner.counters.eager_calls == 20 - CHURN_LIMIT


def test_values_that_repeat_are_not_churn() -> None:
    def shifted(x: torch.Tensor, offset: int) -> torch.Tensor:
        return x + offset

    runner = GraphRunner(shifted, input_kinds=[U, U])
    for step in range(40):
        x = torch.randn(3)
        torch.testing.assert_close(runner(x, step % 4), x + step % 4)
    assert runner.counters.captures == 4
    assert runner.counters.replays == 36


def test_recapture_reasons_are_enum_members_that_read_as_strings() -> None:
    runner = GraphRunner(lambda x, w: x @ w, input_kinds=[U, P])
    first = torch.ones(2, 2)  # alive, so the next weight cannot take its address
    runner(torch.ones(1, 2), first)
    runner(torch.ones(1, 2), torch.ones(2, 2))  # another parameter tensor
    reasons = runner.counters.recapture_reasons
    assert reasons[npu_mempool.RecaptureReason.PARAMETER_MOVED] == 1
    assert reasons["parameter_moved"] == 1
    assert runner.counters.snapshot()["recapture_reasons"] == {"parameter_moved": 1}


def test_process_wide_counters_keep_what_dropped_runners_counted() -> None:
    import gc

    before = npu_mempool.counters.snapshot()
    runner = GraphRunner(lambda x: x * 2)
    for _ in range(3):
        runner(torch.ones(2))
    del runner
    gc.collect()
    after = npu_mempool.counters.snapshot()
    assert after["captures"] - before["captures"] == 1
    assert after["replays"] - before["replays"] == 2


def test_force_recapture_captures_every_call_anew() -> None:
    # A debugging aid (npugraph_ex's force_recapture): the graph of a key is freed and captured
    # again on each call, and no churn or limit makes the runner give up.
    state = {"scale": 1.0}

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * state["scale"]  # a value read at capture: a stale graph would keep it

    runner = GraphRunner(fn, options=CaptureOptions(force_recapture=True, capture_limit=2))
    for scale in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0):
        state["scale"] = scale
        torch.testing.assert_close(runner(torch.ones(3)), torch.full((3,), scale))
    assert runner.counters.captures == 10
    assert runner.counters.replays == 0
    assert runner.counters.recapture_reasons == {"forced": 9}
    assert runner.num_graphs == 1
    assert runner.counters.fallbacks == 0


def test_each_capture_logs_the_replays_and_calls_before_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = GraphRunner(lambda x: x * 2, name="logged")
    with caplog.at_level(logging.INFO, logger="npu_mempool"):
        for n in (2, 2, 2, 3, 3):
            runner(torch.ones(n))
    lines = [r.getMessage() for r in caplog.records if "captured a graph" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].endswith("0 replay(s) in 0 call(s) before it")
    # The second shape comes after three calls of the first, two of them replays.
    assert lines[1].endswith("2 replay(s) in 3 call(s) before it")


def test_a_buffer_slice_of_another_size_at_the_same_address_is_another_key() -> None:
    # An engine's persistent buffer passed as PARAMETER: its slices for two sizes start at one
    # address, and the second replayed the first's graph (two rows for a one-row input).
    buffer, w = torch.randn(8, 4), torch.randn(4, 4)
    runner = GraphRunner(lambda h, w: h @ w, input_kinds=[P, P])
    runner(buffer[:2], w)
    torch.testing.assert_close(runner(buffer[:2], w), buffer[:2] @ w, rtol=0, atol=0)
    torch.testing.assert_close(runner(buffer[:1], w), buffer[:1] @ w, rtol=0, atol=0)
    torch.testing.assert_close(runner(buffer[:4], w), buffer[:4] @ w, rtol=0, atol=0)
    # The same address and shape through other strides.
    torch.testing.assert_close(runner(buffer[:4].t(), w), buffer[:4].t() @ w, rtol=0, atol=0)
    assert runner.counters.captures == 4


def test_an_nn_parameter_is_keyed_by_its_address_alone() -> None:
    # A model's weights keep their layout at their address: no layout read per call for them.
    weight = torch.nn.Parameter(torch.randn(4, 4), requires_grad=False)
    runner = GraphRunner(lambda x, w: x @ w, input_kinds=[U, P])
    runner(torch.randn(2, 4), weight)
    layout = runner._layout
    assert layout is not None
    assert "a[1]" not in layout.key_source


def test_a_new_parameter_at_a_dead_ones_address_never_replays_its_graph() -> None:
    # nn.Parameters are keyed by address alone: a new one of another shape that takes a dead
    # one's address (as a caching allocator hands it out) replayed the dead one's graph.
    import gc

    x = torch.randn(2, 4)
    storage = torch.empty(64)  # one allocation both parameters are views of, in turn
    first = torch.nn.Parameter(storage[:16].view(4, 4), requires_grad=False)
    runner = GraphRunner(lambda x, w: x @ w, input_kinds=[U, P])
    runner(x, first)
    del first
    gc.collect()
    second = torch.nn.Parameter(storage[:8].view(4, 2), requires_grad=False)
    torch.testing.assert_close(runner(x, second), x @ second, rtol=0, atol=0)
    assert runner.counters.captures == 2
