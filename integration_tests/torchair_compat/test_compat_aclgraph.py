"""TorchAir aclgraph scripts (its ``tests/st/torchair_aclgraph_st.py`` cases), imports renamed.

Each script is the user's: a model, a ``CompilerConfig`` set as TorchAir documents, a backend
from ``get_npu_backend``, calls. What is checked is what the user relies on: eager's numbers,
the in-place update of their tensors, the captures and replays the option promises.
"""

from __future__ import annotations

from pathlib import Path

import npu_compile as torchair
import npu_mempool
import pytest
import torch
from npu_compile import CompilerConfig


def _backend(config: CompilerConfig) -> torchair.NpuBackend:
    return torchair.get_npu_backend(compiler_config=config)


@pytest.mark.parametrize("keep", [True, False])
def test_keep_inference_input_mutations(device: torch.device, keep: bool) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.div_(2)
            return x - 1

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.aclgraph.clone_input = False
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    config.experimental_config.keep_inference_input_mutations = keep
    model = torch.compile(Model(), backend=_backend(config), dynamic=False)
    x = torch.full((3, 2), 8.0, device=device)
    with torch.no_grad():
        model(x)  # warm up (and capture)
        for expected in (2.0, 1.0):
            out = model(x)
            assert x.tolist() == [[expected * 1.0] * 2] * 3  # the caller's tensor is updated
            assert out.tolist() == [[expected - 1.0] * 2] * 3


def test_static_capture_size_limit(device: torch.device) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.aclgraph.static_capture_size_limit = 1
    backend = _backend(config)
    model = Model().to(device)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        a = torch.randn(3, 2, device=device)
        torch.testing.assert_close(compiled(a), model(a))
        b = torch.randn(4, 2, device=device)
        with pytest.warns(npu_mempool.CaptureLimitWarning, match="static_capture_size_limit"):
            torch.testing.assert_close(compiled(b), model(b))  # past the limit: eager
    (runner,) = backend.stats.runners
    assert runner.counters.captures == 1
    assert runner.counters.fallbacks == 1


def test_run_eagerly_skips_capture(device: torch.device) -> None:
    config = CompilerConfig()
    config.debug.run_eagerly = True
    backend = _backend(config)
    model = torch.compile(torch.nn.Softmax(dim=-1), backend=backend)
    x = torch.randn(2, 5, device=device)
    with torch.no_grad():
        torch.testing.assert_close(model(x), torch.softmax(x, -1))
    assert backend.stats.eager == 1
    assert backend.stats.captured == 0


def test_enable_output_clone_keeps_held_outputs(device: torch.device) -> None:
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.aclgraph.enable_output_clone = True
    model = torch.compile(torch.nn.ReLU(), backend=_backend(config), dynamic=False)
    with torch.no_grad():
        first = model(torch.ones(4, device=device))
        model(torch.full((4,), 5.0, device=device))
    assert first.tolist() == [1.0] * 4  # not overwritten by the second replay


@pytest.mark.parametrize(
    "option",
    [
        "debug.aclgraph.disable_mempool_reuse_in_same_fx",
        "experimental_config.frozen_parameter",
        "debug.aclgraph.check_output_overwrite",
        "debug.aclgraph.strict",
    ],
)
def test_memory_options_keep_eager_numbers(device: torch.device, option: str) -> None:
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.set(option, True)
    model = torch.nn.Linear(4, 3).to(device)
    compiled = torch.compile(model, backend=_backend(config), dynamic=True)
    with torch.no_grad():
        for rows in (2, 3, 2):
            x = torch.randn(rows, 4, device=device)
            torch.testing.assert_close(compiled(x).clone(), model(x))


def test_remove_noop_ops(device: torch.device) -> None:
    # After TorchAir's test_enable_remove_noop_ops_*_acl: `repeat(1, 1)` copies nothing new.
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.repeat(1, 1) * 2

    for remove in (True, False):
        seen: list[str] = []
        config = CompilerConfig()
        config.mode = "reduce-overhead"
        config.experimental_config.remove_noop_ops = remove
        config.post_grad_custom_post_pass = lambda gm, inputs, cfg, seen=seen: seen.extend(
            str(n.target) for n in gm.graph.nodes
        )
        torch._dynamo.reset()
        model = torch.compile(Model(), backend=_backend(config), dynamic=False)
        x = torch.randn(2, 4, device=device)
        with torch.no_grad():
            torch.testing.assert_close(model(x), x * 2)
        assert ("aten.repeat.default" in seen) is not remove


def test_graph_dump_py(device: torch.device, tmp_path: Path) -> None:
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.graph_dump.type = "py"
    config.debug.graph_dump.path = str(tmp_path)
    model = torch.compile(torch.nn.GELU(), backend=_backend(config))
    with torch.no_grad():
        model(torch.ones(2, device=device))
    (dump,) = tmp_path.glob("*.py")
    assert "aten.gelu" in dump.read_text()


def test_data_dump_npy_with_filter(device: torch.device, tmp_path: Path) -> None:
    # TorchAir's eager data dump page: dump only `add_1` and `sub`.
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            x = x + y
            x = x + y
            x = x * 2
            return x - 1

    config = CompilerConfig()
    config.debug.data_dump.type = "npy"
    config.debug.data_dump.path = str(tmp_path)
    config.debug.data_dump.filter = lambda n: n if n.name in ["add_1", "sub"] else None
    backend = _backend(config)
    model = torch.compile(Model(), backend=backend)
    x, y = torch.ones(2, 2, device=device), torch.ones(2, 2, device=device)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(model(x, y), (x + 2 * y) * 2 - 1)
    assert backend.stats.captured == 0  # a data dump runs the graph eagerly, as in TorchAir
    (graph_dir,) = (tmp_path / "worldsize1_global_rank0").iterdir()
    assert sorted(p.name for p in graph_dir.iterdir()) == ["0", "1"]  # one folder per call
    # <node>-<aten op>.<INPUT|OUTPUT>.<index>.<time>.npy (the op may be reinplaced: add_1 -> add_)
    files = sorted(
        (p.name.split("-")[0], *p.name.split(".")[-4:-2]) for p in (graph_dir / "0").iterdir()
    )
    assert files == [
        ("add_1", "INPUT", "0"),
        ("add_1", "INPUT", "1"),
        ("add_1", "OUTPUT", "0"),
        ("sub", "INPUT", "0"),
        ("sub", "INPUT", "1"),
        ("sub", "OUTPUT", "0"),
    ]
    import numpy as np

    (out,) = (graph_dir / "0").glob("sub-*.OUTPUT.0.*.npy")
    assert np.load(out).tolist() == [[5.0, 5.0], [5.0, 5.0]]


def test_static_kernel_sym_value_range_excludes_keys(device: torch.device, tmp_path: Path) -> None:
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = str(tmp_path)
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range = [1000]
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index = 0
    model = torch.nn.Linear(4, 2).to(device)
    compiled = torch.compile(model, backend=_backend(config), dynamic=True)
    with torch.no_grad():
        for rows in (2, 3):
            x = torch.randn(rows, 4, device=device)
            torch.testing.assert_close(compiled(x).clone(), model(x))
    assert list(tmp_path.iterdir()) == []  # no key had its symbolic size in the range


def test_max_autotune_is_refused_with_what_runs_instead() -> None:
    config = CompilerConfig()  # TorchAir's default mode is max-autotune; scripts often say so
    config.mode = "max-autotune"
    with pytest.raises(torchair.BackendError, match="runs reduce-overhead"):
        torchair.get_npu_backend(compiler_config=config)
