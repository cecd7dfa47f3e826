"""TorchAir's option surface: read-back, npugraph_ex keys, passes, decompositions, pools."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import npu_compile
import npu_mempool
import pytest
import torch
from npu_compile import (
    BackendError,
    CompilerConfig,
    ConfigError,
    NoEffectWarning,
    UnknownOptionError,
    UnsupportedApiError,
    get_npu_backend,
)
from npu_compile._lowering import lower
from npu_compile._static_kernels import restricted
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS

# Tags are process-wide: each test also starts with an empty tagged-event registry (Dynamo is
# reset around every test by the package conftest).
pytestmark = pytest.mark.usefixtures("fresh_tagged_events")


class GraphSpy:
    """A post_grad_custom_post_pass that remembers the op targets of every AOT graph it sees."""

    def __init__(self) -> None:
        self.graphs: list[list[str]] = []
        self.configs: list[CompilerConfig] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any, config: Any) -> None:
        self.graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        self.configs.append(config)

    def ops(self) -> list[str]:
        return [op for graph in self.graphs for op in graph]


class KvCache(torch.nn.Module):
    """A KV-cache write (functional index_put + copy back after AOT) and some math."""

    def __init__(self, stream: bool = False) -> None:
        super().__init__()
        self.stream = stream
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_put_((pos,), x)
        if self.stream:
            with npu_compile.scope.npu_stream_switch("surface-side"):
                y = x * 2
        else:
            y = x * 2
        return y + self.cache.sum(0)


def _run(model: torch.nn.Module, config: CompilerConfig, *args: torch.Tensor, **kw: Any) -> Any:
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config, **kw))
    with torch.no_grad():
        return compiled(*args)


# ---- read-back and hostile assignments ----------------------------------------------------------


def test_options_read_back_like_torchair() -> None:
    config = CompilerConfig()
    assert config.mode.value == "reduce-overhead"
    assert config.debug.aclgraph.clone_input.value == "1"
    assert config.debug.run_eagerly.value == "0"
    assert config.debug.aclgraph.static_capture_size_limit.value == "64"
    assert config.dump_config.data_dump_stage.value == "optimized"
    # The views still act as the plain values.
    assert config.debug.aclgraph.clone_input
    assert not config.debug.run_eagerly
    assert f"{config.debug.run_eagerly}" == "False"
    assert config.debug.aclgraph.static_capture_size_limit + 1 == 65
    # TorchAir scripts also assign through `.value`.
    config.mode.value = "npugraph_ex"
    config.debug.aclgraph.clone_input.value = False
    assert config.get("mode") == "npugraph_ex"
    assert config.get("debug.aclgraph.clone_input") is False
    with pytest.raises(ConfigError, match="True or False"):
        config.debug.run_eagerly.value = "yes"


def test_deleting_an_option_is_a_one_line_project_error() -> None:
    config = CompilerConfig()
    with pytest.raises(ConfigError, match=r"^mode cannot be deleted: .*assign its default"):
        del config.mode
    with pytest.raises(ConfigError, match=r"debug\.aclgraph\.clone_input cannot be deleted"):
        del config.debug.aclgraph.clone_input
    with pytest.raises(UnknownOptionError):
        del config.no_such_option
    assert config.mode == "reduce-overhead"


@pytest.mark.parametrize("options", [None, [("clone_output", True)], "clone_output"])
def test_with_options_of_a_non_mapping_is_a_one_line_project_error(options: Any) -> None:
    with pytest.raises(ConfigError, match="must be a dict of npugraph_ex option names") as info:
        CompilerConfig().with_options(options)
    assert "\n" not in str(info.value)


def test_with_options_non_string_key() -> None:
    with pytest.raises(UnknownOptionError, match="unknown key 3"):
        CompilerConfig().with_options({3: True})  # type: ignore[dict-item]


def _valid_value(key: str) -> object:
    # The value TorchAir accepts, as the option's declaration names it (a stand-in made real).
    path, inverted = NPUGRAPH_EX_OPTIONS[key]
    value = dict(CompilerConfig._option_paths())[path].example
    if value == "<fn>":
        return GraphSpy()
    if value == "<dir>":
        return "."
    return not value if inverted else value


@pytest.mark.parametrize("key", sorted(NPUGRAPH_EX_OPTIONS))
def test_every_npugraph_ex_key_sets_its_path(key: str) -> None:
    value = _valid_value(key)
    derived = CompilerConfig().with_options({key: value})
    path, inverted = NPUGRAPH_EX_OPTIONS[key]
    stored = derived.get(path)
    if inverted:
        assert stored is (not value)
    elif isinstance(value, list):
        assert stored == tuple(value)
    else:
        assert stored == value


# ---- warnings and refusals ----------------------------------------------------------------------


def test_options_without_effect_warn_once_per_backend_and_say_why() -> None:
    config = CompilerConfig()
    config.ge_config.oo_level = "O1"
    config.experimental_config.pattern_fusion_pass = False
    with pytest.warns(NoEffectWarning) as record:
        backend = get_npu_backend(compiler_config=config)
    messages = [str(w.message) for w in record]
    assert any("ge_config.oo_level = 'O1'" in m and "Graph Engine" in m for m in messages)
    assert any("pattern_fusion_pass" in m and "Ascend" in m for m in messages)
    model = torch.compile(torch.nn.Linear(2, 2), backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compiling does not warn again
        with torch.no_grad():
            model(torch.ones(1, 2))
    # An implemented option left at its default, or set, never warns.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = CompilerConfig()
        clean.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
        get_npu_backend(compiler_config=clean)


def test_npugraph_ex_keys_without_effect_warn_at_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    import npu_compile.backend

    monkeypatch.setattr(npu_compile.backend, "_default_backend", None)  # it warns once per process
    model = torch.compile(
        torch.nn.Linear(2, 2), backend="npu_compile", options={"deadlock_check": True}
    )
    # Recorded by hand: pytest.warns would re-emit torch's own import-time deprecations.
    with warnings.catch_warnings(record=True) as record, torch.no_grad():
        warnings.simplefilter("always")
        model(torch.ones(1, 2))
    ours = [w for w in record if issubclass(w.category, NoEffectWarning)]
    assert len(ours) == 1
    assert "debug.deadlock_check" in str(ours[0].message)


def test_torchair_names_we_do_not_provide_say_why() -> None:
    with pytest.raises(UnsupportedApiError, match=r"get_compiler .*get_npu_backend"):
        _ = npu_compile.get_compiler
    with pytest.raises(UnsupportedApiError, match="Ascend"):
        _ = npu_compile.ops.npu_fused_infer_attention_score
    with pytest.raises(UnsupportedApiError, match="npu_print"):
        _ = npu_compile.ops.npu_print
    assert not hasattr(npu_compile, "npu_format_cast_via_cpu")
    with pytest.raises(AttributeError, match="no attribute 'nothing_like_this'"):
        _ = npu_compile.nothing_like_this


def test_graph_pool_handle_is_exported() -> None:
    assert npu_compile.graph_pool_handle is npu_mempool.graph_pool_handle


# ---- passes and decompositions take effect ------------------------------------------------------


def test_custom_pre_pass_runs_on_the_aot_graph_and_changes_the_result() -> None:
    def add_to_sub(gm: torch.fx.GraphModule, example_inputs: Any, config: Any) -> None:
        for node in gm.graph.nodes:
            if node.target == torch.ops.aten.add.Tensor:
                node.target = torch.ops.aten.sub.Tensor

    class Add(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    config = CompilerConfig()
    config.post_grad_custom_pre_pass = add_to_sub
    a, b = torch.full((2,), 5.0), torch.full((2,), 2.0)
    out = _run(Add(), config, a, b)
    assert out.tolist() == [3.0, 3.0]  # the pass ran: 5 - 2, not 5 + 2


def test_a_pass_returning_garbage_is_a_clear_error() -> None:
    config = CompilerConfig()
    config.post_grad_custom_post_pass = lambda gm, inputs, config: 42
    with pytest.raises(Exception, match="post_grad_custom_post_pass returned int"):
        _run(torch.nn.ReLU(), config, torch.ones(2))


def test_a_failing_pass_is_reported_not_taken_for_an_eager_fallback() -> None:
    def broken(gm: torch.fx.GraphModule, example_inputs: Any, config: Any) -> None:
        raise KeyError("no such node")

    config = CompilerConfig()
    config.post_grad_custom_pre_pass = broken
    with pytest.raises(Exception, match="post_grad_custom_pre_pass raised KeyError"):
        _run(torch.nn.ReLU(), config, torch.ones(2))


def test_custom_decompositions_replace_the_op() -> None:
    def doubled(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        return x * 2

    x = torch.ones(3)
    spy = GraphSpy()
    config = CompilerConfig()
    config.post_grad_custom_post_pass = spy
    out = _run(
        torch.nn.GELU(),
        config,
        x,
        custom_decompositions={torch.ops.aten.gelu.default: doubled},
    )
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert "aten.gelu.default" not in spy.ops()
    with pytest.raises(BackendError, match="custom_decompositions"):
        get_npu_backend(custom_decompositions=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="not an ATen operator"):
        get_npu_backend(custom_decompositions={"gelu": doubled})


@pytest.mark.parametrize("remove", [True, False])
def test_remove_noop_ops(remove: bool) -> None:
    class Pow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x**1) * 3

    spy = GraphSpy()
    config = CompilerConfig()
    config.experimental_config.remove_noop_ops = remove
    config.post_grad_custom_post_pass = spy
    out = _run(Pow(), config, torch.ones(2))
    assert out.tolist() == [3.0, 3.0]
    assert ("aten.pow.Tensor_Scalar" in spy.ops()) is not remove


def _captured_graph(config: CompilerConfig, tmp_path: Path) -> str:
    """Have the graph that runs dumped as text (debug.graph_dump) and return the last one."""
    config.debug.graph_dump.type = "txt"
    config.debug.graph_dump.path = str(tmp_path)
    return ""


def _read_dump(tmp_path: Path) -> str:
    dumps = sorted(tmp_path.glob("npu_compile_*.txt"), key=lambda p: p.stat().st_mtime)
    return dumps[-1].read_text()


@pytest.mark.parametrize("stream", [False, True], ids=["one-stream", "with-stream-scope"])
def test_input_reinplace_runs_with_and_without_streams(stream: bool, tmp_path: Path) -> None:
    config = CompilerConfig()
    _captured_graph(config, tmp_path)
    model = KvCache(stream)
    x, pos = torch.ones(2, 4), torch.tensor([1, 2])
    out = _run(model, config, x, pos)
    graph = _read_dump(tmp_path)
    # As TorchAir: the copy back into the cache becomes the in-place write, streams or not.
    assert "aten.index_put_.default" in graph
    assert "aten.copy_.default" not in graph
    assert out.tolist() == [[4.0] * 4] * 2
    assert model.cache.sum().item() == 8.0


class ScaleInput(torch.nn.Module):
    """``y.mul_`` on a graph input, next to a stream scope, and math on a dead intermediate."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with npu_compile.scope.npu_stream_switch("surface-side"):
            z = x * 2
        y.mul_(x)
        return (z + 1).relu() + y


def test_input_mutation_stays_in_place_in_a_graph_with_stream_scopes(tmp_path: Path) -> None:
    config = CompilerConfig()
    _captured_graph(config, tmp_path)
    x = torch.arange(6.0).reshape(2, 3) - 2
    y, y_eager = torch.full((2, 3), 3.0), torch.full((2, 3), 3.0)
    expected = ScaleInput()(x, y_eager)
    out = _run(ScaleInput(), config, x, y)
    graph = _read_dump(tmp_path)
    assert "aten.mul_.Tensor" in graph  # y written in place: no extra buffer ...
    assert "aten.copy_.default" not in graph  # ... and no copy back into it
    # Intermediates are not reinplaced where streams are: `z + 1` may not overwrite z.
    assert "aten.relu_.default" not in graph
    assert "aten.add_.Tensor" not in graph
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(y, y_eager)


class WriteInputReadOnSideStream(torch.nn.Module):
    """The input ``y`` is read on a side stream, then written in place on the main stream."""

    def __init__(self, scatter: bool) -> None:
        super().__init__()
        self.scatter = scatter

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with npu_compile.scope.npu_stream_switch("surface-side"):
            z = y * 2
        if self.scatter:  # Inductor's reinplace pass handles index_put
            y.index_put_((torch.tensor([0]),), x[:1])
        else:
            y.mul_(x)
        return z + y


@pytest.mark.parametrize("scatter", [False, True], ids=["mul_", "index_put_"])
def test_input_read_on_another_stream_is_not_written_in_place(
    scatter: bool, tmp_path: Path
) -> None:
    config = CompilerConfig()
    _captured_graph(config, tmp_path)
    x = torch.arange(6.0).reshape(2, 3)
    y, y_eager = torch.full((2, 3), 3.0), torch.full((2, 3), 3.0)
    expected = WriteInputReadOnSideStream(scatter)(x, y_eager)
    out = _run(WriteInputReadOnSideStream(scatter), config, x, y)
    graph = _read_dump(tmp_path)
    # As TorchAir: the side stream could still be reading y, so the copy back stays.
    assert "aten.mul_.Tensor" not in graph
    assert "aten.index_put_.default" not in graph
    assert "aten.copy_.default" in graph
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(y, y_eager)


def test_reinplace_passes_can_be_disabled_like_torchair(tmp_path: Path) -> None:
    config = CompilerConfig()
    config.debug.aclgraph.disable_reinplace_input_mutated_ops_pass = True
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    _captured_graph(config, tmp_path)
    _run(KvCache(), config, torch.ones(2, 4), torch.tensor([1, 2]))
    graph = _read_dump(tmp_path)
    assert "aten.copy_.default" in graph
    assert "aten.index_put_.default" not in graph
    assert "aten.add_.Tensor" not in graph


def test_functional_reinplace_writes_into_dead_intermediates(tmp_path: Path) -> None:
    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * 2).add(1).relu()

    config = CompilerConfig()
    _captured_graph(config, tmp_path)
    assert _run(Chain(), config, torch.ones(3)).tolist() == [3.0] * 3
    graph = _read_dump(tmp_path)
    assert "aten.add_.Tensor" in graph  # `mul` is dead after the add: written in place
    assert "aten.relu_.default" in graph


def test_keep_inference_input_mutations_off_leaves_the_copy_to_aot() -> None:
    spy = GraphSpy()
    config = CompilerConfig()
    config.experimental_config.keep_inference_input_mutations = False
    config.post_grad_custom_post_pass = spy
    model = KvCache()
    _run(model, config, torch.ones(2, 4), torch.tensor([1, 2]))
    assert "aten.copy_.default" not in spy.ops()
    assert "aten.index_put_.default" not in spy.ops()
    assert model.cache.sum().item() == 8.0  # AOT's wrapper still updated the buffer


def test_graph_dump_py_writes_each_graph(tmp_path: Path) -> None:
    config = CompilerConfig()
    config.debug.graph_dump.type = "py"
    config.debug.graph_dump.path = str(tmp_path)
    _run(torch.nn.ReLU(), config, torch.ones(2))
    (dump,) = tmp_path.glob("npu_compile_*_rank_0_pid_*_ts_*.py")
    assert "torch.ops.aten.relu.default" in dump.read_text()


def test_pool_id_tuples_share_one_pool_across_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    real = npu_mempool.GraphRunner

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, fn: Any, **kwargs: Any) -> None:
            seen.append(kwargs["options"].pool)
            super().__init__(fn, **kwargs)

    monkeypatch.setattr(npu_mempool, "GraphRunner", Spy)
    config = CompilerConfig()
    config.aclgraph_config.use_custom_pool = (7, 0)  # what torch.cuda.graph_pool_handle() gives
    first = _run(torch.nn.ReLU(), config, torch.ones(2))
    second = _run(torch.nn.Tanh(), config, torch.ones(3))
    assert first.tolist() == [1.0, 1.0]
    assert second.tolist() == pytest.approx([0.7616] * 3, abs=1e-4)
    assert len(seen) == 2
    assert isinstance(seen[0], npu_mempool.PoolHandle)
    assert seen[0] is seen[1]  # one pool for both FX graphs (mode 1)


def test_static_kernel_sym_range_selects_keys() -> None:
    built: list[object] = []

    def specialize(key: object, args: Any) -> Any:
        built.append(key)
        return "specialised"

    config = CompilerConfig()
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range = [4, 8]
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index = 1
    filtered = restricted(specialize, lower(config), generic=print)
    assert filtered("a", [torch.ones(1), 2, 8]) == "specialised"
    assert filtered("b", [torch.ones(1), 8, 3]) is print
    assert filtered("c", [torch.ones(1)]) is print
    assert built == ["a"]
    assert restricted(specialize, lower(CompilerConfig()), print) is specialize


def test_dynamo_export_refuses_frozen_parameter(tmp_path: Path) -> None:
    config = CompilerConfig()
    config.experimental_config.frozen_parameter = True
    with pytest.raises(ConfigError, match="frozen_parameter"):
        npu_compile.dynamo_export(
            torch.ones(2, 2), model=torch.nn.Linear(2, 2), export_path=str(tmp_path), config=config
        )
    assert list(tmp_path.iterdir()) == []


def test_data_dump_runs_eagerly_and_saves_each_operator(tmp_path: Path) -> None:
    import numpy as np

    config = CompilerConfig()
    config.debug.data_dump.type = "npy"
    config.debug.data_dump.path = str(tmp_path)
    backend = get_npu_backend(compiler_config=config)
    model = torch.compile(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()), backend=backend)
    with torch.no_grad():
        out = model(torch.tensor([-1.0, 1.0]))
    assert backend.stats.captured == 0
    assert backend.stats.eager == 1
    (step,) = (tmp_path / "worldsize1_global_rank0").glob("npu_compile_*/0")
    (tanh_in,) = step.glob("tanh-aten.tanh*.INPUT.0.*.npy")  # maybe reinplaced: tanh_
    (tanh_out,) = step.glob("tanh-aten.tanh*.OUTPUT.0.*.npy")
    np.testing.assert_allclose(np.load(tanh_in), [0.0, 1.0])  # saved before the op ran
    np.testing.assert_allclose(np.load(tanh_out), out.numpy())
    with pytest.raises(ConfigError, match="filter"):
        config.debug.data_dump.filter = "add_1"
