"""dynamic=True never exports static silently; dynamic_dims / mark_dynamic pick dims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from npu_graph_export import ExportError, dynamo_export, runtime


class KwargsOnly(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.proj(kwargs["x"]) * kwargs["scale"]


class Prefix(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:, :n] + n


def test_inputs_in_forward_kwargs_are_dynamic(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = KwargsOnly().eval()
    x, scale = torch.randn(2, 4), torch.tensor(2.0)
    dynamo_export(model=model, export_path=tmp_path, dynamic=True, x=x, scale=scale)
    loaded = runtime.load(tmp_path)
    assert [i.shape for i in loaded.inputs] == [(-1, 4), ()]
    x5 = torch.randn(5, 4)
    (got,) = loaded.run(x5.numpy(), np.float32(3.0))
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x=x5, scale=torch.tensor(3.0)).numpy(), rtol=1e-6)


def test_python_int_inputs_are_graph_inputs_when_dynamic(tmp_path: Path) -> None:
    dynamo_export(torch.randn(2, 6), 3, model=Prefix(), export_path=tmp_path, dynamic=True)
    loaded = runtime.load(tmp_path)
    assert [(i.name, i.shape) for i in loaded.inputs] == [("x", (-1, -1)), ("n", ())]
    x = np.arange(21, dtype=np.float32).reshape(3, 7)
    (got,) = loaded.run(x, 5)
    np.testing.assert_array_equal(got, x[:, :5] + 5)


def test_dynamic_dims_makes_a_batch_one_example_dynamic(tmp_path: Path) -> None:
    dynamo_export(
        torch.randn(1, 6), 3, model=Prefix(), export_path=tmp_path, dynamic_dims={"x": [0]}
    )
    loaded = runtime.load(tmp_path)
    assert [i.shape for i in loaded.inputs] == [(-1, 6)]
    x = np.ones((4, 6), np.float32)
    np.testing.assert_array_equal(loaded.run(x)[0], x[:, :3] + 3)


def test_mark_dynamic_is_respected(tmp_path: Path) -> None:
    x = torch.randn(1, 6)
    torch._dynamo.mark_dynamic(x, 0)
    dynamo_export(x, 3, model=Prefix(), export_path=tmp_path)
    assert [i.shape for i in runtime.load(tmp_path).inputs] == [(-1, 6)]


def test_dynamic_dims_naming_an_unknown_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="dynamic_dims"):
        dynamo_export(
            torch.randn(1, 6), 3, model=Prefix(), export_path=tmp_path, dynamic_dims={"y": [0]}
        )


def test_dynamic_export_that_comes_out_static_warns(tmp_path: Path) -> None:
    class Fixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3))  # x must be 2 x 3 to add to it

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.w

    with pytest.warns(UserWarning, match="graph is static"):
        dynamo_export(torch.randn(2, 3), model=Fixed(), export_path=tmp_path, dynamic=True)
    assert runtime.load(tmp_path).inputs[0].shape == (2, 3)
