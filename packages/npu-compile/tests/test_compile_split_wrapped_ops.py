"""Splitting sees the op inside AOT's functionalization wrappers.

An op that writes into one of its arguments (``mutates_args``, the shape of vLLM's attention op
with an output buffer) reaches the backend wrapped: ``auto_functionalized_v2(op, ...)``. A rule
that looked at the node's target alone never split it, so the op was captured with the metadata
of the step it was captured on. Named in ``splitting_ops``, tagged ``cudagraph_unsafe``, or a
vLLM attention op on a device: each must run eagerly between pieces.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import npu_compile
import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend
from npu_compile._piecewise import split_points

_UNSAFE = getattr(torch.Tag, "cudagraph_unsafe", None)


@torch.library.custom_op("npu_compile_test::scale_into", mutates_args=("out",))
def scale_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * 2)


@scale_into.register_fake
def _(x: torch.Tensor, out: torch.Tensor) -> None:
    return None


@torch.library.custom_op(
    "npu_compile_test::unsafe_scale_into",
    mutates_args=("out",),
    tags=(_UNSAFE,) if _UNSAFE is not None else (),
)
def unsafe_scale_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * 2)


@unsafe_scale_into.register_fake
def _(x: torch.Tensor, out: torch.Tensor) -> None:
    return None


# The shape of vLLM's `unified_attention_with_output` (a name under `vllm::` with "attention"),
# and of its plain `unified_attention`; registered under a name vLLM does not use.
@torch.library.custom_op("vllm::npu_compile_test_attention_with_output", mutates_args=("output",))
def attention_with_output(q: torch.Tensor, output: torch.Tensor) -> None:
    output.copy_(q.softmax(-1))


@attention_with_output.register_fake
def _(q: torch.Tensor, output: torch.Tensor) -> None:
    return None


@torch.library.custom_op("vllm::npu_compile_test_attention", mutates_args=())
def attention(q: torch.Tensor) -> torch.Tensor:
    return q.softmax(-1)


@attention.register_fake
def _(q: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


class Sandwich(torch.nn.Module):
    """Two Linears around an op that writes its result into an output buffer."""

    def __init__(self, op: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        out = torch.empty_like(h)
        self.op(h, out)
        return self.second(out)


def _run(model: torch.nn.Module, config: CompilerConfig) -> npu_compile.NpuBackend:
    backend = get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert backend.stats.fallbacks == []
    return backend


@pytest.mark.parametrize(
    "spelling", ["npu_compile_test::scale_into", "npu_compile_test::scale_into.default"]
)
def test_a_mutating_op_named_in_splitting_ops_is_split(spelling: str) -> None:
    config = CompilerConfig()
    config.aclgraph_config.splitting_ops = [spelling]
    backend = _run(Sandwich(scale_into), config)
    assert backend.stats.pieces == 2
    (splits,) = backend.stats.splits.values()
    assert "npu_compile_test::scale_into" in splits[0]
    assert "named in splitting_ops" in splits[0]


@pytest.mark.skipif(_UNSAFE is None, reason="this torch has no cudagraph_unsafe tag")
def test_a_mutating_op_tagged_unsafe_is_split() -> None:
    backend = _run(Sandwich(unsafe_scale_into), CompilerConfig())
    assert backend.stats.pieces == 2
    (splits,) = backend.stats.splits.values()
    assert "cudagraph_unsafe" in splits[0]


def _aot_forward(fn: Any, *args: torch.Tensor) -> torch.fx.GraphModule:
    """The AOT forward graph of ``fn``, as the backend's forward compiler receives it."""
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[torch.fx.GraphModule] = []

    def forward_compiler(gm: torch.fx.GraphModule, example: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler)

    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    (graph,) = graphs
    return graph


@pytest.fixture
def fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("with_output", [True, False], ids=["with-output", "returning"])
def test_vllm_attention_is_split_on_a_device_with_or_without_an_output_argument(
    with_output: bool, fresh: None
) -> None:
    def layer(q: torch.Tensor) -> torch.Tensor:
        h = q * 2
        if with_output:
            out = torch.empty_like(h)
            attention_with_output(h, out)
        else:
            out = attention(h)
        return out + 1

    # Meta tensors stand in for a device's: the rule applies to every device but the CPU.
    graph = _aot_forward(layer, torch.empty(2, 4, device="meta"))
    if with_output:  # AOT wraps the op that writes into `output`
        assert any("auto_functionalized" in str(node.target) for node in graph.graph.nodes)
    (split,) = split_points(graph, torch.device("meta"), ())
    assert split.op.startswith("vllm::npu_compile_test_attention")
    assert "vLLM" in split.why
    # The CPU emulation re-runs every op on replay: nothing there is stale.
    assert not any("vLLM" in split.why for split in split_points(graph, torch.device("cpu"), ()))


def test_splitting_ops_and_capture_sizes_are_torch_compile_options() -> None:
    backend = get_npu_backend()
    model = Sandwich(scale_into)
    compiled = torch.compile(
        model,
        backend=backend,
        options={"splitting_ops": ["npu_compile_test::scale_into"], "capture_sizes": [4, 8]},
    )
    with torch.no_grad():
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.stats.pieces == 2
    config = CompilerConfig().with_options({"capture_sizes": [8, 2], "splitting_ops": ["aten::mm"]})
    assert config.aclgraph_config.capture_sizes == (2, 8)
    assert config.aclgraph_config.splitting_ops == ("aten::mm",)
