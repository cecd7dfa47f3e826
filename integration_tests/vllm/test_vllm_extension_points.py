"""npu_compile.vllm through vLLM's own extension points, in process (no engine started).

vLLM's CPU platform has no static-graph mode, so its engine never calls a static-graph wrapper on
CPU; here the wrapper is driven the way vLLM's model runner drives it (a forward context with a
runtime mode and a batch descriptor, inputs in persistent buffers). The compiler interface is
called as vLLM's ``CompilerManager`` calls it. FULL and PIECEWISE in a real engine need a GPU
(``test_vllm_device.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

import npu_compile
from npu_compile.errors import ConfigError
from npu_compile.vllm import NpuCompilerInterface, NpuGraphWrapper
from npu_compile.vllm._plugin import ENABLE_VARIABLE, platform_plugin
from vllm.compilation.compiler_interface import CompilerInterface
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.utils.import_utils import resolve_obj_by_qualname


@pytest.fixture(scope="module")
def vllm_config() -> VllmConfig:
    return VllmConfig()


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu() * positions.unsqueeze(1)


@pytest.fixture
def block() -> _Block:
    torch.manual_seed(0)
    return _Block().eval()


@pytest.fixture
def counted(block: _Block) -> Iterator[tuple[_Block, list[int]]]:
    calls: list[int] = []
    handle = block.register_forward_pre_hook(lambda module, args: calls.append(1))
    yield block, calls
    handle.remove()


def _step(
    wrapper: Any, config: VllmConfig, mode: CUDAGraphMode, tokens: int, *args: Any, **kwargs: Any
) -> torch.Tensor:
    descriptor = BatchDescriptor(num_tokens=tokens)
    with (
        torch.no_grad(),
        set_forward_context(None, config, cudagraph_runtime_mode=mode, batch_descriptor=descriptor),
    ):
        out: torch.Tensor = wrapper(*args, **kwargs)
        return out.clone()


def test_wrapper_captures_once_per_descriptor_and_replays_new_values(
    counted: tuple[_Block, list[int]], vllm_config: VllmConfig
) -> None:
    block, calls = counted
    wrapper = NpuGraphWrapper(block, vllm_config, CUDAGraphMode.FULL)
    # Persistent input buffers, as vLLM's model runner keeps them (padded to a capture size).
    x, positions = torch.zeros(4, 8), torch.zeros(4)
    before = npu_compile.vllm.worker_stats()
    for step in range(4):
        x.copy_(torch.randn(4, 8))
        positions.copy_(torch.arange(4) + step)
        with torch.no_grad():
            expected = block(x, positions)
        calls.clear()
        got = _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, x, positions)
        torch.testing.assert_close(got, expected)
    after = npu_compile.vllm.worker_stats()
    assert wrapper.num_graphs == 1
    assert after["captures"] - before["captures"] == 1
    assert after["replays"] - before["replays"] == 3

    # Another descriptor (another padded size) captures its own graph.
    small_x, small_positions = x[:2], positions[:2]
    with torch.no_grad():
        expected = block(small_x, small_positions)
    torch.testing.assert_close(
        _step(wrapper, vllm_config, CUDAGraphMode.FULL, 2, small_x, small_positions), expected
    )
    assert wrapper.num_graphs == 2
    wrapper.clear_graphs()
    assert wrapper.num_graphs == 0


def test_wrapper_replays_the_bound_step_with_static_outputs(
    block: _Block, vllm_config: VllmConfig
) -> None:
    # Once a descriptor is captured, a step with the bound buffers replays the bound graph
    # (static outputs: the same tensor each step, vLLM's own contract), with no runner call.
    wrapper = NpuGraphWrapper(block, vllm_config, CUDAGraphMode.FULL)
    x, positions = torch.zeros(4, 8), torch.zeros(4)
    descriptor = BatchDescriptor(num_tokens=4)
    before = npu_compile.vllm.worker_stats()
    outputs = []  # ids, not the tensors: a held output would move the next step elsewhere
    for step in range(5):
        x.copy_(torch.randn(4, 8))
        positions.copy_(torch.arange(4) + step)
        with (
            torch.no_grad(),
            set_forward_context(
                None,
                vllm_config,
                cudagraph_runtime_mode=CUDAGraphMode.FULL,
                batch_descriptor=descriptor,
            ),
        ):
            expected = block(x, positions)
            out = wrapper(x, positions)
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
            outputs.append(id(out))
            del out
    after = npu_compile.vllm.worker_stats()
    assert (after["captures"] - before["captures"], after["replays"] - before["replays"]) == (1, 4)
    # The bound graph's own output (kept alive, so its id is its own) from the first replay on.
    assert len(set(outputs[1:])) == 1

    # The same descriptor with a slice of the buffer for another size: one address, another
    # shape. Not the bound call, and not the runner's graph either: it is captured on its own.
    small_x, small_positions = x[:2], positions[:2]
    with torch.no_grad():
        expected = block(small_x, small_positions)
    torch.testing.assert_close(
        _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, small_x, small_positions),
        expected,
        rtol=0,
        atol=0,
    )
    wrapper.clear_graphs()
    assert wrapper.num_graphs == 0


def test_wrapper_flattens_nothing_per_step_for_flat_arguments(
    block: _Block, vllm_config: VllmConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM calls its pieces with flat positional tensors and ints: every step of every piece
    # used to flatten them with pytree (about 20 µs for nine arguments) before the replay.
    from npu_compile.vllm import _graph_wrapper

    wrapper = NpuGraphWrapper(block, vllm_config, CUDAGraphMode.FULL)
    x, positions = torch.zeros(4, 8), torch.zeros(4)
    _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, x, positions)  # captures
    flattened: list[object] = []
    for name in ("tree_flatten", "tree_leaves", "tree_structure"):
        real = getattr(_graph_wrapper.pytree, name)

        def counting(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            flattened.append(args)
            return _real(*args, **kwargs)

        monkeypatch.setattr(_graph_wrapper.pytree, name, counting)
    before = npu_compile.vllm.worker_stats()
    for step in range(3):
        x.copy_(torch.randn(4, 8))
        positions.copy_(torch.arange(4) + step)
        with torch.no_grad():
            expected = block(x, positions)
        torch.testing.assert_close(
            _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, x, positions), expected
        )
    assert flattened == []
    assert npu_compile.vllm.worker_stats()["replays"] - before["replays"] == 3

    # Flat keyword arguments: another structure of the arguments, its own graph (its runner
    # records the structure once); its steps flatten nothing either.
    with torch.no_grad():
        expected = block(x, positions)
    torch.testing.assert_close(
        _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, x, positions=positions), expected
    )
    assert wrapper.num_graphs == 2
    flattened.clear()
    torch.testing.assert_close(
        _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, x, positions=positions), expected
    )
    assert flattened == []
    assert wrapper.num_graphs == 2


class _Mix(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 - b


class _Nested(torch.nn.Module):
    def forward(self, pair: dict[str, torch.Tensor]) -> torch.Tensor:
        return pair["a"] * 2 - pair["b"]


def test_wrapper_keeps_each_argument_in_its_place_whatever_the_structure(
    vllm_config: VllmConfig,
) -> None:
    # Two keyword orders (and a keyword passed by position) with leaves of the same layouts: a
    # runner of the first structure handed the second call's tensors to the other parameters.
    a, b = torch.zeros(4, 8), torch.zeros(4, 8)
    calls: list[tuple[NpuGraphWrapper, tuple[Any, ...], dict[str, Any]]] = []
    mixed = NpuGraphWrapper(_Mix(), vllm_config, CUDAGraphMode.FULL)
    for args, kwargs in [
        ((), {"a": a, "b": b}),
        ((), {"b": b, "a": a}),
        ((a,), {"b": b}),
        ((a, b), {}),
    ]:
        calls.append((mixed, args, kwargs))
    # Nested: a dict argument, its keys in either order (pytree's own structure decides).
    nested = NpuGraphWrapper(_Nested(), vllm_config, CUDAGraphMode.FULL)
    calls.append((nested, ({"a": a, "b": b},), {}))
    calls.append((nested, (), {"pair": {"b": b, "a": a}}))
    before = npu_compile.vllm.worker_stats()
    for _ in range(3):  # the first round captures, the others replay
        for wrapper, args, kwargs in calls:
            a.copy_(torch.randn(4, 8))
            b.copy_(torch.randn(4, 8))
            expected = a * 2 - b
            got = _step(wrapper, vllm_config, CUDAGraphMode.FULL, 4, *args, **kwargs)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    after = npu_compile.vllm.worker_stats()
    assert (mixed.num_graphs, nested.num_graphs) == (4, 2)
    assert after["captures"] - before["captures"] == len(calls)
    assert after["replays"] - before["replays"] == 2 * len(calls)


@pytest.mark.parametrize(
    ("wrapper_mode", "context_mode"),
    [
        (CUDAGraphMode.FULL, CUDAGraphMode.NONE),
        (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL),
        (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE),
    ],
)
def test_wrapper_passes_through_other_modes(
    counted: tuple[_Block, list[int]],
    vllm_config: VllmConfig,
    wrapper_mode: CUDAGraphMode,
    context_mode: CUDAGraphMode,
) -> None:
    block, calls = counted
    wrapper = NpuGraphWrapper(block, vllm_config, wrapper_mode)
    x, positions = torch.randn(4, 8), torch.arange(4.0)
    for _ in range(2):
        _step(wrapper, vllm_config, context_mode, 4, x, positions)
    assert len(calls) == 2, "the runnable must run eagerly on every call"
    assert wrapper.num_graphs == 0


def test_wrapper_without_forward_context_runs_the_runnable(
    counted: tuple[_Block, list[int]], vllm_config: VllmConfig
) -> None:
    block, calls = counted
    wrapper = NpuGraphWrapper(block, vllm_config, CUDAGraphMode.FULL)
    with torch.no_grad():
        wrapper(torch.randn(2, 8), torch.ones(2))
    assert calls == [1]
    assert wrapper.num_graphs == 0
    # vLLM reads the runnable's attributes through the wrapper.
    assert wrapper.proj is block.proj
    assert wrapper.unwrap() is block


def test_wrapper_refuses_mode_none(block: _Block, vllm_config: VllmConfig) -> None:
    with pytest.raises(ValueError, match="FULL or PIECEWISE"):
        NpuGraphWrapper(block, vllm_config, CUDAGraphMode.NONE)


def _traced(block: _Block) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    gm = torch.fx.symbolic_trace(block)
    return gm, [torch.randn(4, 8), torch.arange(4.0)]


def test_compiler_interface_compiles_and_loads_a_piece(block: _Block, tmp_path: Any) -> None:
    compiler = NpuCompilerInterface()
    assert isinstance(compiler, CompilerInterface)
    compiler.initialize_cache(str(tmp_path), disable_cache=False, prefix="backbone")
    assert compiler.compute_hash(None) == NpuCompilerInterface().compute_hash(None)
    gm, inputs = _traced(block)
    options = {"npu_compile_options": {"clone_output": True}}
    with torch.no_grad():
        compiled, handle = compiler.compile(gm, inputs, options, None, "key")
        assert compiled is not None
        expected = block(*inputs)
        torch.testing.assert_close(compiled(*inputs), expected)
        loaded = NpuCompilerInterface().load(handle, gm, inputs, 0, None)
        torch.testing.assert_close(loaded(*inputs), expected)
    assert handle["options"] == {"clone_output": True}


def test_compiler_interface_puts_static_kernels_under_vllm_cache(tmp_path: Any) -> None:
    compiler = NpuCompilerInterface()
    compiler.initialize_cache(str(tmp_path), disable_cache=False)
    backend = compiler._backend({"npu_compile_options": {"static_kernel_compile": True}})
    static = backend.config.experimental_config.aclgraph
    assert static._aclnn_static_shape_kernel
    # vLLM's cache directory is the default the backend lowers, not written into the options.
    assert static._aclnn_static_shape_kernel_build_dir is None
    settings = backend._settings
    assert settings.static_kernels is not None
    assert str(settings.static_kernels.build_dir) == str(tmp_path / "npu_compile")
    # vLLM's capture does the capturing: the compiler only prepares the piece.
    assert not backend.capture
    assert not backend.config.debug.run_eagerly


def test_compiler_interface_refuses_other_versions_and_bad_options(block: _Block) -> None:
    gm, inputs = _traced(block)
    with pytest.raises(ConfigError, match="compile cache"):
        NpuCompilerInterface().load({"version": "0.0.0", "options": {}}, gm, inputs, 0, None)
    with pytest.raises(ConfigError, match="npu_compile_options"):
        NpuCompilerInterface().compile(gm, inputs, {"npu_compile_options": ["x"]}, None)


def test_platform_plugin_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENABLE_VARIABLE, raising=False)
    assert platform_plugin() is None
    monkeypatch.setenv(ENABLE_VARIABLE, "1")
    name = platform_plugin()
    assert name == "npu_compile.vllm._platforms.NpuCompileCpuPlatform"
    platform = resolve_obj_by_qualname(name)
    from vllm.platforms.cpu import CpuPlatform

    assert issubclass(platform, CpuPlatform)
    assert resolve_obj_by_qualname(platform.get_compile_backend()) is NpuCompilerInterface
    assert resolve_obj_by_qualname(platform.get_static_graph_wrapper_cls()) is NpuGraphWrapper


def test_platform_plugin_is_registered() -> None:
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="vllm.platform_plugins")}
    assert plugins.get("npu_compile") == "npu_compile.vllm._plugin:platform_plugin"


def test_node_check_plugin_is_registered() -> None:
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert plugins.get("npu_compile") == "npu_compile.vllm._nodes:register"


def test_node_check_wraps_the_start_of_vllm_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_compile.vllm._nodes import register
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    # vLLM's own method (the plugins may have run in this process already), restored afterwards.
    current = WorkerWrapperBase.init_device
    original = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(WorkerWrapperBase, "init_device", original)
    register()
    wrapped = WorkerWrapperBase.init_device
    assert wrapped is not original
    assert wrapped.__wrapped__ is original  # type: ignore[attr-defined]
    register()
    assert WorkerWrapperBase.init_device is wrapped, "loading the plugins again wraps once"
