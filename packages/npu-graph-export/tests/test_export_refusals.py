"""One refusal names everything a model needs that the exporter lacks, on one line.

Every op without a converter (or whose converter refuses its form) is named once, with how many
graph nodes use it and where the first comes from: the user's line, not torch's, and the module.
A branch on tensor values keeps torch's line of the user's code that took it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from npu_graph_export import (
    DataDependentControlFlowError,
    GraphBreakError,
    UnsupportedOpError,
    dynamo_export,
)
from npu_graph_export._locations import short_path
from torch import nn

HERE = short_path(__file__)  # as refusals name files: relative to the import root


def _line(fn: object, text: str) -> int:
    """The source line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return start + next(i for i, line in enumerate(lines) if text in line)


class Scan(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = torch.cumprod(x, dim=0)
        second = torch.cumprod(x, dim=1)
        return first + second + torch.special.i0(x)


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 2, dilation=2)


class Many(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scan = Scan()
        self.pool = Pool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.scan(x)
        # The pooling reads x, not y: a node whose input already failed cannot be tried.
        return y.sum() + self.pool(x[None, None]).sum() + torch.logcumsumexp(x, 0).sum()


def _refusal(model: nn.Module, x: torch.Tensor, tmp_path: Path) -> UnsupportedOpError:
    with pytest.raises(UnsupportedOpError) as info:
        dynamo_export(x, model=model, export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    return info.value


def test_every_missing_op_is_named_at_once_with_counts(tmp_path: Path) -> None:
    error = _refusal(Many(), torch.randn(6, 6), tmp_path)
    assert error.ops == {
        "aten.cumprod.default": 2,
        "aten.i0.default": 1,
        "aten.max_pool2d_with_indices.default": 1,
        "aten.logcumsumexp.default": 1,
    }
    message = str(error)
    assert "\n" not in message
    assert message.startswith("4 ATen ops cannot be exported (5 nodes): ")
    for op, count in error.ops.items():
        assert f"{op} x{count}, first at " in message
    # A converter's own refusal gives its reason in the same line.
    assert "dilation [2, 2]" in message
    assert error.op == "aten.cumprod.default"  # the first, as before
    assert "supported_ops()" in message


def test_each_op_is_located_at_the_user_s_first_line_and_module(tmp_path: Path) -> None:
    error = _refusal(Many(), torch.randn(6, 6), tmp_path)
    cumprod = _line(Scan.forward, "cumprod(x, dim=0)")
    assert error.locations["aten.cumprod.default"] == (f"{HERE}:{cumprod} in forward [scan: Scan]")
    # F.max_pool2d runs in torch/nn/functional.py: the place named is the user's call of it.
    pool = _line(Pool.forward, "max_pool2d")
    assert error.locations["aten.max_pool2d_with_indices.default"] == (
        f"{HERE}:{pool} in forward [pool: Pool]"
    )
    assert "torch/nn/functional.py" not in str(error)
    assert error.locations["aten.logcumsumexp.default"].endswith("in forward [<root>: Many]")


def test_a_torch_module_s_op_is_placed_at_the_user_s_call(tmp_path: Path) -> None:
    class Padded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pad = nn.ReflectionPad3d(1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.i1(self.pad(x))

    error = _refusal(Padded(), torch.randn(1, 1, 2, 3, 3), tmp_path)
    assert list(error.ops) == ["aten.special_i1.default"]
    assert error.module_path == f"{HERE}:{_line(Padded.forward, 'i1')} in forward [<root>: Padded]"


def test_data_dependent_refusal_keeps_torch_s_cause_line(tmp_path: Path) -> None:
    class Gate(nn.Module):
        def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
            is_global = flag.flatten().any().item()
            if is_global:
                return x * 2
            return x

    with pytest.raises(DataDependentControlFlowError) as info:
        dynamo_export(torch.randn(3), torch.tensor([True]), model=Gate(), export_path=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert "Caused by: if is_global:" in message
    assert f"{HERE}:{_line(Gate.forward, 'if is_global')}" in message
    assert "_dynamo/" not in message.split("Caused by:")[1]  # torch's own frame left out


def test_a_graph_break_names_the_user_s_line(tmp_path: Path) -> None:
    class Breaks(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch._dynamo.graph_break()
            return x + 1

    with pytest.raises(GraphBreakError) as info:
        dynamo_export(torch.randn(3), model=Breaks(), export_path=tmp_path)
    line = _line(Breaks.forward, "graph_break()")
    assert f"Caused by: {HERE}:{line} in forward: torch._dynamo.graph_break()" in str(info.value)
