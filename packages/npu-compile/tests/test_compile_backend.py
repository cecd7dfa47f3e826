import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_compile
import npu_compile.backend
import npu_mempool
import npu_streams
import pytest
import torch
from npu_compile import BackendError, CompilerConfig, get_npu_backend
from npu_compile.backend import NpuBackend
from npu_mempool import InputKind


class Cached(torch.nn.Module):
    """A linear layer plus a KV-cache buffer written in place (a MUTATED input)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, x)
        return self.proj(x) + self.cache.sum(0)


@pytest.fixture
def runner_spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record how the backend builds each GraphRunner (the real runner still runs)."""
    seen: list[dict[str, Any]] = []
    real = npu_mempool.GraphRunner

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, fn: Any, **kwargs: Any) -> None:
            seen.append(kwargs)
            super().__init__(fn, **kwargs)

    monkeypatch.setattr(npu_mempool, "GraphRunner", Spy)
    return seen


def _pair() -> tuple[Cached, Cached]:
    model, reference = Cached(), Cached()
    reference.load_state_dict(model.state_dict())
    return model, reference


def test_round_trip_equals_eager_and_counts_captures_and_replays(
    runner_spy: list[dict[str, Any]],
) -> None:
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False, fullgraph=True)
    with torch.no_grad():
        x, pos = torch.randn(2, 4), torch.tensor([0, 1])
        with npu_mempool.counters.expect(captures=1, replays=2):
            for _ in range(3):
                torch.testing.assert_close(compiled(x, pos), reference(x, pos))
    # The in-place cache write stayed inside the graph and reached the caller's buffer.
    torch.testing.assert_close(model.cache, reference.cache)
    assert backend.stats.fx_graphs == 1
    assert backend.stats.captured == 1
    (runner,) = backend.stats.runners
    assert runner.counters.captures == 1
    assert runner.counters.replays == 2
    kinds = runner_spy[0]["input_kinds"]
    assert kinds.count(InputKind.MUTATED) == 1  # the cache buffer
    assert kinds.count(InputKind.PARAMETER) == 2  # weight and bias
    assert kinds.count(InputKind.USER) == 2  # x and pos
    # Every tensor the graph does not own is keyed (Dynamo's guards may be off), the
    # parameters by their addresses only, and the autocast state (off).
    (key,) = runner.graph_keys
    assert key[0] == len(kinds)
    cache = model.cache
    assert (cache.shape, cache.dtype, cache.stride()) in [key[i : i + 3] for i in range(len(key))]
    assert key[-1] is False


def test_a_new_shape_of_a_static_graph_gets_a_graph_of_its_own() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x), model(x))
        y = torch.randn(5, 4)  # a new shape: Dynamo recompiles, a new runner captures it
        torch.testing.assert_close(compiled(y), model(y))
    keys = [runner.graph_keys for runner in backend.stats.runners]
    assert len(keys) == 2
    assert all(len(k) == 1 for k in keys)  # one graph key per runner
    assert sum(r.counters.replays for r in backend.stats.runners) == 2


def test_new_user_tensors_are_copied_in_each_call() -> None:
    model, reference = _pair()
    compiled = torch.compile(model, backend=get_npu_backend(), dynamic=False)
    with torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 4), torch.tensor([step])
            torch.testing.assert_close(compiled(x, pos), reference(x, pos))
    torch.testing.assert_close(model.cache, reference.cache)


def test_dynamic_true_gives_one_fx_graph_and_one_capture_per_shape() -> None:
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (2, 3, 2, 5, 3):
            x, pos = torch.randn(n, 4), torch.arange(n)
            torch.testing.assert_close(compiled(x, pos), reference(x, pos))
    assert backend.stats.fx_graphs == 1
    (runner,) = backend.stats.runners
    assert runner.counters.captures == 3
    assert runner.counters.replays == 2
    assert len(set(runner.graph_keys)) == 3  # the sizes (symbolic to Dynamo) are keyed


def test_config_maps_onto_capture_options(runner_spy: list[dict[str, Any]]) -> None:
    config = CompilerConfig()
    config.debug.aclgraph.clone_input = False
    config.debug.aclgraph.enable_output_clone = True
    config.debug.aclgraph.static_capture_size_limit = 5
    config.debug.aclgraph.disable_mempool_reuse_in_same_fx = True
    config.experimental_config.frozen_parameter = True
    model, _ = _pair()
    with torch.no_grad():
        torch.compile(model, backend=get_npu_backend(compiler_config=config))(
            torch.randn(1, 4), torch.tensor([0])
        )
    options = runner_spy[0]["options"]
    assert options.clone_input is False
    assert options.clone_output is True
    assert options.capture_limit == 5
    assert options.reuse_pool_across_shapes is False
    assert options.frozen_parameters is True
    assert options.pool is None


def test_custom_pool_turns_reuse_in_same_fx_off(runner_spy: list[dict[str, Any]]) -> None:
    config = CompilerConfig()
    pool = npu_mempool.graph_pool_handle("cpu")
    config.aclgraph_config.use_custom_pool = pool
    model, reference = _pair()
    with torch.no_grad():
        out = torch.compile(model, backend=get_npu_backend(compiler_config=config))(
            torch.ones(1, 4), torch.tensor([0])
        )
        torch.testing.assert_close(out, reference(torch.ones(1, 4), torch.tensor([0])))
    options = runner_spy[0]["options"]
    assert options.pool is pool
    assert options.reuse_pool_across_shapes is False


def test_backend_snapshots_its_config() -> None:
    config = CompilerConfig()
    backend = get_npu_backend(compiler_config=config)
    config.debug.run_eagerly = True
    assert not backend.config.debug.run_eagerly
    assert backend == get_npu_backend()
    assert hash(backend) == hash(get_npu_backend())
    with pytest.raises(BackendError, match="CompilerConfig"):
        NpuBackend({"mode": "reduce-overhead"})  # type: ignore[arg-type]


def test_run_eagerly_runs_the_pipeline_without_capture(runner_spy: list[dict[str, Any]]) -> None:
    config = CompilerConfig()
    config.debug.run_eagerly = True
    backend = get_npu_backend(compiler_config=config)
    model, reference = _pair()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad(), npu_mempool.counters.expect(captures=0, replays=0):
        for step in range(3):
            x, pos = torch.randn(1, 4), torch.tensor([step])
            torch.testing.assert_close(compiled(x, pos), reference(x, pos))
    torch.testing.assert_close(model.cache, reference.cache)
    assert backend.stats.eager == 1
    assert runner_spy == []


def test_autograd_graph_is_captured_forward_and_backward(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A training graph with an in-place buffer update: captured, forward and backward, silently.
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    pos = torch.tensor([0, 1])
    with caplog.at_level(logging.WARNING, logger="npu_compile"):
        for _ in range(3):
            x = torch.randn(2, 4)
            model.zero_grad()
            reference.zero_grad()
            out, expected = compiled(x, pos), reference(x, pos)
            torch.testing.assert_close(out, expected)
            out.pow(2).sum().backward()
            expected.pow(2).sum().backward()
            for got, want in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(got.grad, want.grad)
            torch.testing.assert_close(model.cache, reference.cache)
            del out  # else held through the next call, which then takes a second call path
    assert [r for r in caplog.records if r.name == "npu_compile"] == []
    assert backend.stats.fallbacks == []
    forward, backward = backend.stats.runners
    assert backward.name == forward.name + "_backward"
    for runner in (forward, backward):
        assert (runner.counters.captures, runner.counters.replays) == (1, 2)


def test_host_sync_in_graph_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    def fn(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        # The repeat count is a device value the host must read: uncapturable.
        return x.repeat(int(n.max().item()))

    backend = get_npu_backend()
    x, n = torch.randn(3), torch.tensor([2])
    with (
        torch._dynamo.config.patch(capture_scalar_outputs=True),
        torch.no_grad(),
        caplog.at_level(logging.WARNING, logger="npu_compile"),
    ):
        out = torch.compile(fn, backend=backend, fullgraph=True)(x, n)
    torch.testing.assert_close(out, fn(x, n))
    (record,) = [r for r in caplog.records if r.name == "npu_compile"]
    assert "reads a tensor value on the host" in record.getMessage()


def test_strict_raises_instead_of_falling_back() -> None:
    def fn(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return x.repeat(int(n.max().item()))  # a host read: uncapturable

    config = CompilerConfig()
    config.debug.aclgraph.strict = True
    config.aclgraph_config.piecewise = False  # else the read is split out, and nothing falls back
    compiled = torch.compile(fn, backend=get_npu_backend(compiler_config=config))
    with (
        torch._dynamo.config.patch(capture_scalar_outputs=True),
        torch.no_grad(),
        pytest.raises(Exception, match=r"debug\.aclgraph\.strict") as info,
    ):
        compiled(torch.randn(3), torch.tensor([2]))
    # Dynamo wraps backend errors in BackendCompilerFailed and keeps ours as inner_exception.
    assert isinstance(getattr(info.value, "inner_exception", info.value), BackendError)


def test_output_aliasing_an_input_keeps_view_semantics() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[0], x * 2

    backend = get_npu_backend()
    compiled = torch.compile(fn, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 2)
            view, doubled = compiled(x)
            assert view.data_ptr() == x.data_ptr()
            torch.testing.assert_close(doubled, x * 2)


def test_string_backend_and_torch_compile_options() -> None:
    assert "npu_compile" in torch._dynamo.list_backends(exclude_tags=())
    model, reference = _pair()
    compiled = torch.compile(model, backend="npu_compile", options={"force_eager": True})
    with torch.no_grad(), npu_mempool.counters.expect(captures=0):
        torch.testing.assert_close(
            compiled(torch.ones(1, 4), torch.tensor([0])),
            reference(torch.ones(1, 4), torch.tensor([0])),
        )


def test_unknown_torch_compile_option_and_mode_are_clear_errors() -> None:
    model, _ = _pair()
    bad_option = torch.compile(model, backend="npu_compile", options={"clone_inputs": False})
    with pytest.raises(Exception, match="Did you mean 'clone_input'"):
        bad_option(torch.ones(1, 4), torch.tensor([0]))
    torch._dynamo.reset()
    bad_mode = torch.compile(model, backend="npu_compile", mode="max-autotune")
    with pytest.raises(Exception, match="mode='reduce-overhead'"):
        bad_mode(torch.ones(1, 4), torch.tensor([0]))


def test_public_facade_names() -> None:
    from npu_compile.configs.compiler_config import CompilerConfig as Deep
    from npu_compile.core.utils import logger

    assert Deep is npu_compile.CompilerConfig
    assert logger is logging.getLogger("npu_compile")
    assert callable(npu_compile.scope.npu_stream_switch)
    for name in (
        "npu_create_tagged_event",
        "npu_tagged_event_record",
        "npu_tagged_event_wait",
        "npu_record_tagged_stream",
    ):
        assert callable(getattr(npu_compile.ops, name))
    assert set(npu_compile.__all__) >= {"CompilerConfig", "get_npu_backend", "diagnose"}


@pytest.mark.device
def test_demo_decoder_on_the_accelerator_matches_eager(
    warmup_calls: Callable[[torch.device], int],
) -> None:
    from npu_compile._tools.demo_model import DemoConfig, TinyDecoder, greedy_generate
    from npu_compile._tools.device import best_device

    device = best_device()
    warmup = warmup_calls(device)  # eager calls per new graph before its capture (CUDA: 1)
    model = TinyDecoder(DemoConfig(layers=2, dim=64)).to(device).eval()
    prompt = model.prompt()
    expected, _ = greedy_generate(model, model, prompt, 8)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    got, _ = greedy_generate(model, compiled, prompt, 8)
    assert torch.equal(got, expected)
    assert backend.stats.fallbacks == []
    runners = backend.stats.runners
    counts = {
        name: sum(getattr(runner.counters, name) for runner in runners)
        for name in ("captures", "replays", "eager_calls")
    }
    # One prefill call, then seven decode steps: each of the two graphs runs eagerly first where
    # the device needs a warm-up call (on CUDA the prefill is never captured).
    assert counts["eager_calls"] == min(1, warmup) + min(7, warmup), counts
    # The loop holds the previous step's logits while it calls the next step: without a step
    # boundary that call takes a second call path, with one it reuses the first. Either way each
    # graph is captured once per call path it uses, and every other call replays.
    for runner in runners:
        assert runner.num_paths <= 2, runner.name
        if runner.counters.captures:
            assert runner.counters.captures == runner.num_paths, runner.name
    assert sum(counts.values()) == 8, counts
    assert counts["replays"] >= 7 - warmup - 2, counts


def test_graph_break_inside_a_stream_scope_is_an_error() -> None:
    import npu_streams

    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_compile.scope.npu_stream_switch("1"):
            y = x * 2
            torch._dynamo.graph_break()
            y = y + 1
        return y

    compiled = torch.compile(fn, backend=get_npu_backend())
    with torch.no_grad(), pytest.raises(Exception) as info:  # noqa: PT011 - inner error checked
        compiled(torch.randn(3))
    inner = getattr(info.value, "inner_exception", info.value)
    assert isinstance(inner, npu_streams.StreamScopeError)


def test_untraceable_graph_falls_back_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch._functorch.aot_autograd as aot

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("unsupported op foo")

    monkeypatch.setattr(aot, "aot_module_simplified", broken)
    backend = get_npu_backend()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="npu_compile"):
        out = torch.compile(lambda x: x + 1, backend=backend)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    (record,) = [r for r in caplog.records if r.name == "npu_compile"]
    assert "unsupported op foo" in record.getMessage()
    assert len(backend.stats.fallbacks) == 1


class _Broken(torch.nn.Module):
    """A block with a graph break, called twice per forward: one FX graph replayed twice."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 4)

    def block(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        torch._dynamo.graph_break()
        return y.relu() * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + self.block(x + 1)


@pytest.mark.parametrize("option", [None, "enable_output_clone", "check_output_overwrite"], ids=str)
def test_graph_break_block_called_twice_matches_eager(option: str | None) -> None:
    # The block's first FX graph runs twice per forward while its first output is still held:
    # the second call replays graphs of its own (a second call path), so nothing is overwritten,
    # with or without output clone, and the overwrite check finds nothing to report.
    model = _Broken().eval()
    config = CompilerConfig()
    if option is not None:
        setattr(config.debug.aclgraph, option, True)
    backend = get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 4)
            torch.testing.assert_close(compiled(x), model(x))
    replays = sum(r.counters.replays for r in backend.stats.runners)
    assert replays > 0
    assert not backend.stats.fallbacks


def test_capture_limit_warns_with_the_option_name_and_keeps_numbers_right() -> None:
    model, reference = _pair()
    config = CompilerConfig()
    config.debug.aclgraph.static_capture_size_limit = 2
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config), dynamic=True)
    with torch.no_grad():
        for n in (2, 3):
            x, pos = torch.randn(n, 4), torch.arange(n)
            torch.testing.assert_close(compiled(x, pos), reference(x, pos))
        x, pos = torch.randn(5, 4), torch.arange(5)
        with pytest.warns(npu_mempool.CaptureLimitWarning, match="static_capture_size_limit"):
            torch.testing.assert_close(compiled(x, pos), reference(x, pos))
    torch.testing.assert_close(model.cache, reference.cache)


@torch.library.custom_op("npu_compile_test::fails_when_negative", mutates_args=())
def _fails_when_negative(x: torch.Tensor) -> torch.Tensor:
    if bool((x < 0).any()):
        raise ValueError("a negative input")
    return x.clone()


@_fails_when_negative.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_an_error_inside_a_stream_scope_closes_the_scope() -> None:
    # The graph opens and closes the scope with ops: an op failing in between used to leave the
    # scope open (and, on a device, its stream current, where a capture cannot end).
    def scoped(x: torch.Tensor) -> torch.Tensor:
        with npu_compile.scope.npu_stream_switch("side"):
            y = torch.ops.npu_compile_test.fails_when_negative(x * 2)
        return y + 1

    compiled = torch.compile(scoped, backend=get_npu_backend(), fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(torch.ones(3)), scoped(torch.ones(3)))
        with pytest.raises(ValueError, match="a negative input"):
            compiled(-torch.ones(3))
        assert npu_streams.current_stream_tag() == "default"
        torch.testing.assert_close(compiled(torch.ones(3)), scoped(torch.ones(3)))


def test_force_recapture_recaptures_on_every_call() -> None:
    config = CompilerConfig()
    config.debug.aclgraph.force_recapture = True
    backend = get_npu_backend(compiler_config=config)
    model = torch.nn.Linear(4, 4)
    compiled = torch.compile(model, backend=backend, options={"force_recapture": True})
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 4)
            torch.testing.assert_close(compiled(x), model(x))
    (runner,) = backend.stats.runners
    assert runner.counters.captures == 4
    assert runner.counters.recapture_reasons == {"forced": 3}


def test_an_engine_s_build_directory_is_a_default_never_written_into_the_config(
    tmp_path: Path,
) -> None:
    config = CompilerConfig()
    static = config.experimental_config.aclgraph
    static._aclnn_static_shape_kernel = True
    backend = NpuBackend(config, static_kernel_build_dir=str(tmp_path / "engine"))
    assert backend._settings.static_kernels is not None
    assert str(backend._settings.static_kernels.build_dir) == str(tmp_path / "engine")
    assert backend.config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir is None
    static._aclnn_static_shape_kernel_build_dir = str(tmp_path / "mine")  # the user's wins
    named = NpuBackend(config, static_kernel_build_dir=str(tmp_path / "engine"))
    assert named._settings.static_kernels is not None
    assert str(named._settings.static_kernels.build_dir) == str(tmp_path / "mine")


def test_the_build_directory_is_checked_where_it_enters_and_passed_on_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import npu_static_kernel._confine
    import npu_static_kernel._options

    checked: list[str] = []
    rule = npu_static_kernel._confine.check_path_value

    def counting(value: object, what: str) -> str:
        checked.append(str(value))
        return rule(value, what)

    monkeypatch.setattr(npu_static_kernel._confine, "check_path_value", counting)
    monkeypatch.setattr(npu_static_kernel._options, "check_path_value", counting)
    build = str(tmp_path / "kernels")
    config = CompilerConfig()
    static = config.experimental_config.aclgraph
    static._aclnn_static_shape_kernel = True
    static._aclnn_static_shape_kernel_build_dir = build
    assert checked == [build]  # where it enters the config
    backend = NpuBackend(config)
    assert checked == [build, build]  # where it enters the backend
    model = torch.nn.Linear(4, 4)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            torch.testing.assert_close(compiled(x), model(x))
    # The compiler and its cache take the checked path: the rule runs no third time.
    assert checked == [build, build]
    assert (tmp_path / "kernels" / "static_kernel_cache").is_dir()
