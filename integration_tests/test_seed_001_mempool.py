"""Seed 001 (memory reuse between graphs), ported by renaming the imports.

The seed configures the three memory modes and output cloning on a CompilerConfig; here each
setting runs a model over several shapes (``dynamic=True``: one FX graph, one captured graph per
shape) and must give eager's numbers, with counters showing the captures and replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import npu_compile
import npu_mempool
import pytest
import torch

# Every example runs with both graphs the CPU emulation can replay (see conftest.cpu_replay).


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(16, 16)
        self.register_buffer("cache", torch.zeros(8, 16))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, x)  # a mutated input (KV-cache style)
        return torch.relu(self.linear(x)) + self.cache.mean(0)


class Other(Model):
    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return super().forward(x, pos) * 2


def _pair(device: torch.device, cls: type[Model] = Model) -> tuple[Model, Model]:
    model, reference = cls().to(device), cls().to(device)
    reference.load_state_dict(model.state_dict())
    return model, reference


def _mode1(config: npu_compile.CompilerConfig, device: torch.device) -> None:
    config.aclgraph_config.use_custom_pool = npu_mempool.graph_pool_handle(device)


def _mode2_off(config: npu_compile.CompilerConfig, device: torch.device) -> None:
    config.debug.aclgraph.disable_mempool_reuse_in_same_fx = True


def _mode3_off(config: npu_compile.CompilerConfig, device: torch.device) -> None:
    config.debug.aclgraph.clone_input = False


def _output_clone(config: npu_compile.CompilerConfig, device: torch.device) -> None:
    config.debug.aclgraph.enable_output_clone = True


def _seed_all(config: npu_compile.CompilerConfig, device: torch.device) -> None:
    # The seed's snippet, all four lines together.
    _mode1(config, device)
    _mode2_off(config, device)
    _mode3_off(config, device)
    _output_clone(config, device)


Configure = Callable[[npu_compile.CompilerConfig, torch.device], None]


@pytest.mark.parametrize(
    "configure",
    [
        pytest.param(lambda c, d: None, id="defaults"),
        pytest.param(_mode1, id="mode1-custom-pool"),
        pytest.param(_mode2_off, id="mode2-off"),
        pytest.param(_mode3_off, id="mode3-off"),
        pytest.param(_output_clone, id="output-clone"),
        pytest.param(_seed_all, id="seed-snippet"),
    ],
)
def test_seed_001_modes_match_eager(
    device: torch.device,
    configure: Configure,
    warmup_calls: Callable[[torch.device], int],
    graph_counts: Callable[[Sequence[object], int], dict[str, int]],
) -> None:
    config = npu_compile.CompilerConfig()
    config.mode = "reduce-overhead"
    configure(config, device)
    npu_backend = npu_compile.get_npu_backend(compiler_config=config)
    model, reference = _pair(device)
    opt_model = torch.compile(model, backend=npu_backend, dynamic=True)
    shapes = [2, 4, 2, 6, 4, 2]
    # One graph per shape, captured after the device's warm-up calls (CPU: 3 and 3 replays).
    counts = graph_counts(shapes, warmup_calls(device))
    with torch.no_grad(), npu_mempool.counters.expect(**counts):
        for n in shapes:
            x, pos = torch.randn(n, 16, device=device), torch.arange(n, device=device)
            torch.testing.assert_close(opt_model(x, pos), reference(x, pos))
    torch.testing.assert_close(model.cache, reference.cache)
    assert npu_backend.stats.fx_graphs == 1


def test_seed_001_mode1_shares_one_pool_across_fx_graphs(device: torch.device) -> None:
    config = npu_compile.CompilerConfig()
    pool = npu_mempool.graph_pool_handle(device)
    config.aclgraph_config.use_custom_pool = pool
    backend = npu_compile.get_npu_backend(compiler_config=config)
    first, first_ref = _pair(device)
    second, second_ref = _pair(device, Other)
    x, pos = torch.randn(2, 16, device=device), torch.arange(2, device=device)
    with torch.no_grad():
        a = torch.compile(first, backend=backend)(x, pos).clone()
        b = torch.compile(second, backend=backend)(x, pos).clone()
        torch.testing.assert_close(a, first_ref(x, pos))
        torch.testing.assert_close(b, second_ref(x, pos))
    # Two FX graphs, two runners, one pool.
    assert backend.stats.fx_graphs == 2
    assert len(backend.stats.runners) == 2


def test_seed_001_output_clone_keeps_held_outputs(device: torch.device) -> None:
    """Scenario 2: an output held across a replay of another shape stays correct with clone."""
    config = npu_compile.CompilerConfig()
    config.debug.aclgraph.enable_output_clone = True
    model, reference = _pair(device)
    opt_model = torch.compile(model, backend=npu_compile.get_npu_backend(compiler_config=config))
    with torch.no_grad():
        x2, p2 = torch.randn(2, 16, device=device), torch.arange(2, device=device)
        x4, p4 = torch.randn(4, 16, device=device), torch.arange(4, device=device)
        held = opt_model(x2, p2)
        want = reference(x2, p2)
        for _ in range(2):
            opt_model(x4, p4)
            opt_model(torch.randn(2, 16, device=device), p2)
        reference(x4, p4)
        torch.testing.assert_close(held, want)


@pytest.mark.parametrize("keep", [True, False], ids=["keep_held_outputs", "default"])
def test_seed_001_held_outputs_are_never_overwritten_or_raise(
    device: torch.device, keep: bool
) -> None:
    """Without clone, an output held across later calls keeps its values with
    ``keep_held_outputs``; by default a later call overwrites it and reading it raises (the
    overwrite check, accepted for TorchAir scripts, has nothing left to flag)."""
    config = npu_compile.CompilerConfig()
    config.debug.aclgraph.check_output_overwrite = True
    config.debug.aclgraph.keep_held_outputs = keep
    model, reference = _pair(device)
    opt_model = torch.compile(model, backend=npu_compile.get_npu_backend(compiler_config=config))
    with torch.no_grad():
        x, pos = torch.randn(2, 16, device=device), torch.arange(2, device=device)
        held = opt_model(x, pos)
        opt_model(torch.randn(2, 16, device=device), pos)
        opt_model(torch.randn(2, 16, device=device), pos)
        if keep:
            torch.testing.assert_close(held, reference(x, pos))
        else:
            with pytest.raises(npu_compile.StaleOutputError):
                held.sum()
