"""Seed 004 (``dynamo_export``) through the npu_compile facade, ported by renaming the import."""

from __future__ import annotations

from pathlib import Path

import npu_compile
import numpy as np
import torch
from npu_graph_export import runtime


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(2, 2)
        self.linear2 = torch.nn.Linear(2, 2)
        for param in self.parameters():
            torch.nn.init.ones_(param)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear1(x) + self.linear2(y)


def test_seed_004_single_rank_export_runs_like_eager(tmp_path: Path) -> None:
    model = Model()
    x = torch.randn(2, 2)
    y = torch.randn(2, 2)
    config = npu_compile.CompilerConfig()
    config.export.experimental.enable_record_nn_module_stack = True
    result = npu_compile.dynamo_export(
        x, y, model=model, dynamic=False, export_path=str(tmp_path / "export_file"), config=config
    )
    assert result.air.is_file()
    assert result.pbtxt.is_file()
    # The option reached the exporter: ops carry their module stack.
    assert "nn_module_stack" in result.pbtxt.read_text()
    (out,) = runtime.load(result.air).run(x.numpy(), y.numpy())
    np.testing.assert_allclose(out, model(x, y).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_seed_004_default_config_is_a_compiler_config(tmp_path: Path) -> None:
    model = Model()
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    result = npu_compile.dynamo_export(x, y, model=model, export_path=str(tmp_path / "out"))
    assert result.air.name == "export.air"
    assert "nn_module_stack" not in result.pbtxt.read_text()
