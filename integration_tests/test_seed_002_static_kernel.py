"""Seed 002 (static kernel compilation), ported by renaming the imports.

With ``experimental_config.aclgraph._aclnn_static_shape_kernel`` on, every captured shape first
records its op statistics in the seed's layout and gets a shape-specialised build (Inductor on
CPU/CUDA) that is then captured; numbers must equal eager.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import npu_compile
import npu_mempool
import torch


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x)) * 2


def test_seed_002_static_kernels_record_build_and_match_eager(
    device: torch.device,
    tmp_path: Path,
    warmup_calls: Callable[[torch.device], int],
    graph_counts: Callable[[Sequence[object], int], dict[str, int]],
) -> None:
    config = npu_compile.CompilerConfig()
    config.mode = "reduce-overhead"
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = str(tmp_path)
    npu_backend = npu_compile.get_npu_backend(compiler_config=config)
    model = Model().to(device)
    opt_model = torch.compile(model, backend=npu_backend, dynamic=True)
    sizes = (2, 3, 2, 3)
    # One graph per size, captured after the device's warm-up calls (CPU: 2 and 2 replays).
    counts = graph_counts(sizes, warmup_calls(device))
    with torch.no_grad(), npu_mempool.counters.expect(**counts):
        for n in sizes:
            x = torch.randn(n, 8, device=device)
            torch.testing.assert_close(opt_model(x), model(x))

    # The seed's layout: aclnn_static_shape_kernel_outputs/<timestamp>_<pid>_outputs/<pid>/*.json
    outputs = tmp_path / "aclnn_static_shape_kernel_outputs"
    runs = [p for p in outputs.iterdir() if p.name.endswith(f"_{os.getpid()}_outputs")]
    assert runs, f"no op statistics under {outputs}"
    jsons = [p for run in runs for p in run.glob(f"{os.getpid()}/*.json")]
    assert jsons, "op statistics JSON files were not written"
    assert any(run.joinpath(f"{os.getpid()}_debug").is_dir() for run in runs)
    # Both shapes got statistics (TorchAir records only the first; every shape is expected here).
    assert any("_2_" in p.name for p in jsons)
    assert any("_3_" in p.name for p in jsons)


def test_seed_002_run_eagerly_still_builds_static_kernels(
    device: torch.device, tmp_path: Path
) -> None:
    """``debug.run_eagerly`` runs the whole pipeline but the capture: static kernels included."""
    config = npu_compile.CompilerConfig()
    config.debug.run_eagerly = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = str(tmp_path)
    model = Model().to(device)
    opt_model = torch.compile(model, backend=npu_compile.get_npu_backend(compiler_config=config))
    with torch.no_grad(), npu_mempool.counters.expect(captures=0):
        for _ in range(2):
            x = torch.randn(2, 8, device=device)
            torch.testing.assert_close(opt_model(x), model(x))
    outputs = tmp_path / "aclnn_static_shape_kernel_outputs"
    assert outputs.is_dir(), "run_eagerly skipped the static-kernel build"
    assert list(outputs.rglob("*.json"))
