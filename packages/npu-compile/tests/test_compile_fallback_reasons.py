"""Each way an FX graph falls back to eager carries its own ``FallbackReason`` code."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_compile
import pytest
import torch
from npu_compile import BackendError, CompilerConfig, Fallback, FallbackReason, get_npu_backend

# One case per reason: (function to compile, its arguments, what must hold around the call).
Case = tuple[Callable[..., Any], tuple[Any, ...], Callable[[pytest.MonkeyPatch], Any]]


def _mixed_devices(monkeypatch: pytest.MonkeyPatch) -> Any:
    return contextlib.nullcontext()


def _inference(monkeypatch: pytest.MonkeyPatch) -> Any:
    return torch.no_grad()


def _saved_with_grad(monkeypatch: pytest.MonkeyPatch) -> Any:
    # A training graph while torch bundles AOT autograd's result to save it (its AOT compile):
    # the saved artifact holds no backward graph. Other training graphs are captured.
    from torch._functorch import config as functorch_config

    stack = contextlib.ExitStack()
    stack.enter_context(functorch_config.patch(bundled_autograd_cache=True))
    stack.enter_context(torch.enable_grad())
    return stack


def _host_sync(monkeypatch: pytest.MonkeyPatch) -> Any:
    stack = contextlib.ExitStack()
    stack.enter_context(torch._dynamo.config.patch(capture_scalar_outputs=True))
    stack.enter_context(torch.no_grad())
    return stack


def _aot_fails(monkeypatch: pytest.MonkeyPatch) -> Any:
    import torch._functorch.aot_autograd as aot

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("unsupported op foo")

    monkeypatch.setattr(aot, "aot_module_simplified", broken)
    return torch.no_grad()


@torch.library.custom_op("vllm::npu_compile_test_attention", mutates_args=())
def _attention(q: torch.Tensor) -> torch.Tensor:
    # Stands for vLLM's attention ops, which read their metadata from vLLM's forward context.
    return q.clone()


@_attention.register_fake
def _(q: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


def _on_a_device(monkeypatch: pytest.MonkeyPatch) -> Any:
    # The check applies on devices only (the CPU emulation runs every op again): the real check,
    # told the graph runs on CUDA.
    from npu_compile import _capturable, _pipeline

    real = _capturable.external_state_reason
    monkeypatch.setattr(_pipeline, "external_state_reason", lambda gm, device: real(gm, "cuda"))
    return torch.no_grad()


def _attends(q: torch.Tensor) -> torch.Tensor:
    return torch.ops.vllm.npu_compile_test_attention(q * 2) + 1


def _two_devices(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 1, y * 2


def _reads_on_host(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    # The repeat count is a device value the host must read: uncapturable.
    return x.repeat(int(n.max().item()))


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _static_kernel_fails(monkeypatch: pytest.MonkeyPatch) -> Any:
    import npu_static_kernel

    def broken(self: object, request: object, out_dir: object) -> None:
        raise npu_static_kernel.BuildError(
            "Inductor could not compile the graph (C++ compile error\n\nCommand:\ng++ k.cpp"
            "\n\nOutput:\nk.cpp:3:1: error: 'vec' was not declared\n)"
        )

    monkeypatch.setattr(npu_static_kernel.InductorBuilder, "build", broken)
    stack = contextlib.ExitStack()
    stack.enter_context(torch.no_grad())
    # The static kernel compiler's own warning is checked in test_static_kernel_failures.
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore", npu_static_kernel.StaticKernelFallbackWarning)
    return stack


@torch.library.custom_op("npu_compile_test::between_pieces", mutates_args=())
def _between_pieces(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_between_pieces.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _splits_a_scope(x: torch.Tensor) -> torch.Tensor:
    import npu_streams

    with npu_streams.npu_stream_switch("side"):
        y = torch.ops.npu_compile_test.between_pieces(x * 2) + 1
    return y * 3


def _reads_between_rows(x: torch.Tensor) -> torch.Tensor:
    # Called with a slice: the gaps between its rows are not in the static copy of it.
    return x.as_strided((3, 16), (16, 1)).sum(-1)


_LINEAR = torch.nn.Linear(2, 2)

CASES: dict[FallbackReason, Case] = {
    FallbackReason.MIXED_DEVICES: (
        _two_devices,
        (torch.ones(2), torch.ones(2, device="meta")),
        _mixed_devices,
    ),
    FallbackReason.TRAINING: (_LINEAR, (torch.ones(1, 2),), _saved_with_grad),
    FallbackReason.HOST_SYNC: (_reads_on_host, (torch.randn(3), torch.tensor([2])), _host_sync),
    FallbackReason.AOT_TRACE_FAILED: (_plus_one, (torch.ones(2),), _aot_fails),
    FallbackReason.EXTERNAL_STATE: (_attends, (torch.ones(2),), _on_a_device),
    FallbackReason.SPLITTING_OPS: (_plus_one, (torch.ones(2),), _inference),
    FallbackReason.STATIC_KERNEL_FAILED: (_plus_one, (torch.ones(3),), _static_kernel_fails),
    FallbackReason.SPLIT_IN_STREAM_SCOPE: (_splits_a_scope, (torch.ones(2),), _inference),
    FallbackReason.STORAGE_READ: (
        _reads_between_rows,
        (torch.randn(5, 16)[:, 2:10],),
        _inference,
    ),
}

# With piecewise capture (the default) these graphs are split instead: the whole-graph reasons
# remain for piecewise=False (and for graphs with no piece worth capturing, test_compile_piecewise).
_WHOLE_GRAPH = {
    FallbackReason.MIXED_DEVICES,
    FallbackReason.HOST_SYNC,
    FallbackReason.EXTERNAL_STATE,
}


@torch.library.custom_op(
    "npu_compile_test::unsafe", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,)
)
def _unsafe(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_unsafe.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_ops_tagged_cudagraph_unsafe_are_external_state_on_a_device() -> None:
    from npu_compile._capturable import external_state_reason

    gm = torch.fx.symbolic_trace(lambda x: torch.ops.npu_compile_test.unsafe(x) + 1)
    reason = external_state_reason(gm, "cuda")
    assert reason is not None
    assert "cudagraph_unsafe" in reason
    assert external_state_reason(gm, "cpu") is None


def test_vllm_attention_is_captured_on_cpu() -> None:
    # The emulated graph runs the op again on every replay: its metadata is never stale.
    backend = get_npu_backend()
    compiled = torch.compile(_attends, backend=backend)
    with torch.no_grad():
        compiled(torch.ones(2))
    assert backend.stats.fallbacks == []
    assert backend.stats.captured == 1


def test_every_reason_has_a_case() -> None:
    assert set(CASES) == set(FallbackReason)


def test_the_reasons_are_public_strings() -> None:
    assert "FallbackReason" in npu_compile.__all__
    assert "Fallback" in npu_compile.__all__
    assert FallbackReason.HOST_SYNC == "host_sync"
    assert isinstance(FallbackReason.TRAINING, str)


@pytest.fixture
def compile_case(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[FallbackReason, CompilerConfig | None], npu_compile.NpuBackend]:
    """Compile one case's function with a fresh backend and return the backend."""

    def run(reason: FallbackReason, config: CompilerConfig | None) -> npu_compile.NpuBackend:
        fn, args, around = CASES[reason]
        config = config or CompilerConfig()
        if reason in _WHOLE_GRAPH:
            config.aclgraph_config.piecewise = False
        if reason is FallbackReason.SPLITTING_OPS:
            config.aclgraph_config.splitting_ops = ["aten::add"]  # its only operator
        if reason is FallbackReason.SPLIT_IN_STREAM_SCOPE:
            config.aclgraph_config.splitting_ops = ["npu_compile_test::between_pieces"]
        if reason is FallbackReason.STATIC_KERNEL_FAILED:
            static = config.experimental_config.aclgraph
            static._aclnn_static_shape_kernel = True
            static._aclnn_static_shape_kernel_build_dir = str(tmp_path / "build")
        backend = get_npu_backend(compiler_config=config)
        with around(monkeypatch):
            torch.compile(fn, backend=backend)(*args)
        return backend

    return run


@pytest.mark.parametrize("reason", list(FallbackReason), ids=str)
def test_each_fallback_records_its_reason_next_to_the_message(
    reason: FallbackReason,
    compile_case: Callable[[FallbackReason, CompilerConfig | None], npu_compile.NpuBackend],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="npu_compile"):
        backend = compile_case(reason, None)
    (entry,) = backend.stats.fallbacks
    assert isinstance(entry, Fallback)
    graph, message = entry  # still a (graph, message) pair
    assert (graph, message) == (entry.graph, entry.message)
    assert message
    assert backend.stats.fallback_reasons == {graph: reason}
    (record,) = [r for r in caplog.records if r.name == "npu_compile"]
    # A graph whose static kernels failed is still captured: it runs without them, not eagerly.
    how = "without static kernels" if reason is FallbackReason.STATIC_KERNEL_FAILED else "eagerly"
    assert f"runs {how} ({reason.value}): " in record.getMessage()
    assert message in record.getMessage()


@pytest.mark.parametrize("reason", list(FallbackReason), ids=str)
def test_strict_mode_raises_with_the_reason(
    reason: FallbackReason,
    compile_case: Callable[[FallbackReason, CompilerConfig | None], npu_compile.NpuBackend],
) -> None:
    config = CompilerConfig()
    config.debug.aclgraph.strict = True
    with pytest.raises(Exception, match=rf"\({reason.value}\)") as info:
        compile_case(reason, config)
    # Dynamo wraps backend errors in BackendCompilerFailed and keeps ours as inner_exception.
    error = getattr(info.value, "inner_exception", info.value)
    assert isinstance(error, BackendError)
    assert error.reason is reason


def test_other_backend_errors_have_no_reason() -> None:
    assert BackendError("what went wrong; what to do").reason is None


def test_a_lost_static_kernel_names_the_compiler_s_first_error_line(
    compile_case: Callable[[FallbackReason, CompilerConfig | None], npu_compile.NpuBackend],
) -> None:
    backend = compile_case(FallbackReason.STATIC_KERNEL_FAILED, None)
    ((_graph, message),) = backend.stats.fallbacks
    assert "k.cpp:3:1: error: 'vec' was not declared" in message
    assert backend.stats.captured == 1  # still captured, without its static kernels


def test_reset_forgets_the_reasons(
    compile_case: Callable[[FallbackReason, CompilerConfig | None], npu_compile.NpuBackend],
) -> None:
    backend = compile_case(FallbackReason.AOT_TRACE_FAILED, None)
    assert backend.stats.fallback_reasons
    backend.reset()
    assert backend.stats.fallbacks == []
    assert backend.stats.fallback_reasons == {}


def test_the_bench_note_names_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_compile import _planner
    from npu_compile._plan import Split
    from npu_compile._tools.bench import decode_step_bench
    from npu_compile._tools.demo_model import DemoConfig

    said = Split("x", "aten::x", FallbackReason.MIXED_DEVICES, "test says no")
    monkeypatch.setattr(_planner, "split_points", lambda gm, device, ops: [said])
    monkeypatch.setattr(_planner, "pieces_to_capture", lambda gm, splits: ())
    report = decode_step_bench(torch.device("cpu"), steps=1, config=DemoConfig(layers=1, dim=32))
    assert "mixed_devices: " in report.rows[1].note
    assert "test says no" in report.rows[1].note
