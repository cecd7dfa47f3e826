"""Piecewise capture: a graph is split around what cannot be captured, and the pieces captured."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import npu_compile
import pytest
import torch
from npu_compile import CompilerConfig, FallbackReason, get_npu_backend


@pytest.fixture
def scalar_outputs() -> Iterator[None]:
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        yield


def _run(
    fn: Callable[..., Any],
    calls: list[tuple[Any, ...]],
    config: CompilerConfig | None = None,
) -> npu_compile.NpuBackend:
    """Compile ``fn``, call it with each argument tuple, and check every result against eager."""
    backend = get_npu_backend(compiler_config=config)
    compiled = torch.compile(fn, backend=backend)
    with torch.no_grad():
        for args in calls:
            torch.testing.assert_close(compiled(*args), fn(*args))
    return backend


def _counts_positive(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w)
    n = (h > 0).sum().item()  # a host sync in the middle of the graph
    return (h * 2 + 1) / (n + 1), h.sum(0)


def test_a_host_sync_splits_the_graph_and_the_pieces_replay(
    scalar_outputs: None, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    xs = [torch.randn(4, 8) for _ in range(5)]
    with caplog.at_level(logging.WARNING, logger="npu_compile"):
        backend = _run(_counts_positive, [(x, w) for x in xs + xs])
    stats = backend.stats
    assert stats.fallbacks == []
    assert (stats.captured, stats.piecewise, stats.pieces) == (1, 1, 2)
    (splits,) = stats.splits.values()
    assert "_local_scalar_dense" in splits[0]
    assert "reads a tensor value on the host" in splits[0]
    names = [runner.name for runner in stats.runners]
    assert names == [f"{next(iter(stats.splits))}.piece{i}" for i in range(2)]
    assert all(runner.counters.replays > 0 for runner in stats.runners)
    # One log line says where the graph was split and why.
    (line,) = [r.getMessage() for r in caplog.records if "piece(s)" in r.getMessage()]
    assert "captured in 2 piece(s)" in line
    assert "_local_scalar_dense" in line


def _masked_mean(x: torch.Tensor) -> torch.Tensor:
    y = torch.tanh(x) * 3
    picked = y[y > 0]  # nonzero: a data-dependent shape
    return picked.sum() / x.numel() + y.mean()


def test_a_data_dependent_shape_splits_the_graph() -> None:
    torch.manual_seed(0)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        backend = _run(_masked_mean, [(torch.randn(16),) for _ in range(4)])
    assert backend.stats.fallbacks == []
    assert backend.stats.piecewise == 1
    (splits,) = backend.stats.splits.values()
    assert any("depends on tensor values" in split for split in splits), splits


_STATE = {"scale": 1.0}


@torch.library.custom_op(
    "npu_compile_test::reads_state", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,)
)
def _reads_state(x: torch.Tensor) -> torch.Tensor:
    # Reads Python state outside its inputs: a replay would repeat the captured value.
    return x * _STATE["scale"]


@_reads_state.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _around_unsafe(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.npu_compile_test.reads_state(torch.sin(x) + 1) * 2 - 1


def test_an_op_tagged_unsafe_runs_eagerly_between_pieces_on_the_cpu_emulation() -> None:
    backend = get_npu_backend()
    compiled = torch.compile(_around_unsafe, backend=backend)
    x = torch.randn(6)
    with torch.no_grad():
        for scale in (1.0, 2.0, 3.0):
            _STATE["scale"] = scale
            # Equal to eager for each new value: the op really runs on every call.
            torch.testing.assert_close(compiled(x), _around_unsafe(x))
    assert backend.stats.pieces == 2
    assert "cudagraph_unsafe" in next(iter(backend.stats.splits.values()))[0]


def _on_two_devices(x: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # `m` lives on another device than the graph (meta stands in for a CPU tensor beside a
    # device graph): its op runs eagerly, the rest is captured.
    return torch.relu(x) * 2 + 1, m * 3


def test_an_op_on_another_device_is_split_out() -> None:
    backend = get_npu_backend()
    compiled = torch.compile(_on_two_devices, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5)
            out, meta = compiled(x, torch.empty(5, device="meta"))
            torch.testing.assert_close(out, torch.relu(x) * 2 + 1)
            assert meta.device.type == "meta"
    assert backend.stats.fallbacks == []
    (splits,) = backend.stats.splits.values()
    assert any("runs on meta" in split for split in splits)


def _block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x @ w
    return torch.softmax(h, dim=-1) @ w.t() + x


def test_splitting_ops_named_by_the_user_run_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    config = CompilerConfig()
    config.aclgraph_config.splitting_ops = ["aten::_softmax"]
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    with caplog.at_level(logging.INFO, logger="npu_compile"):
        backend = _run(_block, [(torch.randn(3, 8), w) for _ in range(3)], config)
    assert backend.stats.pieces == 2
    assert "named in splitting_ops" in next(iter(backend.stats.splits.values()))[0]
    (record,) = [r for r in caplog.records if "piece(s)" in r.getMessage()]
    assert record.levelno == logging.INFO  # chosen by the user: no warning


def test_a_graph_with_no_piece_worth_capturing_falls_back_with_the_reason() -> None:
    def only_softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    config = CompilerConfig()
    config.aclgraph_config.splitting_ops = ["aten::_softmax"]
    backend = _run(only_softmax, [(torch.randn(2, 3),)], config)
    assert backend.stats.pieces == 0
    assert list(backend.stats.fallback_reasons.values()) == [FallbackReason.SPLITTING_OPS]
    assert "no piece worth capturing" in backend.stats.fallbacks[0].message


def test_piecewise_off_keeps_the_whole_graph_fallback(scalar_outputs: None) -> None:
    config = CompilerConfig()
    config.aclgraph_config.piecewise = False
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    backend = _run(_counts_positive, [(torch.randn(4, 8), w)], config)
    assert list(backend.stats.fallback_reasons.values()) == [FallbackReason.HOST_SYNC]
    assert backend.stats.pieces == 0


def test_the_pieces_of_one_graph_share_one_pool(scalar_outputs: None) -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    backend = get_npu_backend()
    compiled = torch.compile(_counts_positive, backend=backend)
    with torch.no_grad():
        for _ in range(4):
            npu_compile.mark_step_begin()
            compiled(torch.randn(4, 8), w)
    first, second = backend.stats.runners
    assert first._paths[0].pool is second._paths[0].pool
    # With step boundaries, neither piece needed a second call path.
    assert all(len(runner._paths) == 1 for runner in backend.stats.runners)


def test_a_split_llama_decoder_equals_eager() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    compile_config = CompilerConfig()
    # Attention's softmax is left out of the pieces, as vLLM leaves attention out of its graphs.
    compile_config.aclgraph_config.splitting_ops = ["aten::_softmax", "aten::bmm"]
    backend = get_npu_backend(compiler_config=compile_config)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            ids = torch.randint(0, 64, (2, 7))
            got = compiled(input_ids=ids).logits
            torch.testing.assert_close(got, model(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
    assert backend.stats.fallbacks == []
    assert backend.stats.piecewise >= 1
    assert backend.stats.pieces >= 3
