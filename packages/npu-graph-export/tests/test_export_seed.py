"""The seed's single-card example, with ``import npu_graph_export as torchair``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(2, 2)
        self.linear2 = torch.nn.Linear(2, 2)
        for param in self.parameters():
            torch.nn.init.ones_(param)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear1(x) + self.linear2(y)


def test_single_card_example_writes_the_documented_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import npu_graph_export as torchair
    from npu_graph_export import runtime
    from npu_graph_export._proto import ge_ir_pb2 as ge

    monkeypatch.chdir(tmp_path)
    model = Model()
    x = torch.randn(2, 2)
    y = torch.randn(2, 2)
    torchair.dynamo_export(x, y, model=model, dynamic=False)

    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert files == ["export_file", "export_file/dynamo.pbtxt", "export_file/export.air"]
    parsed = ge.ModelDef()
    parsed.ParseFromString((tmp_path / "export_file" / "export.air").read_bytes())
    ops = [op.type for op in parsed.graph[0].op]
    assert ops.count("Data") == 2
    assert ops.count("MatMulV2") == 2
    assert "Add" in ops
    assert ops.count("Const") == 4  # two weights, two biases, embedded (far below 2 GB)
    assert "nn_module_stack" not in str(parsed)  # off by default

    (got,) = runtime.load("export_file").run(x.numpy(), y.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x, y).numpy(), rtol=1e-6)


def test_dynamo_export_has_no_shared_mutable_default() -> None:
    import inspect

    from npu_graph_export import dynamo_export

    assert inspect.signature(dynamo_export).parameters["config"].default is None
