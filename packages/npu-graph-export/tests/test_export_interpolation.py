"""Interpolation (``F.interpolate``) exports through torch's own decompositions, not GE's resize
operators (which index as TensorFlow does), so every mode and scale gives PyTorch's numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from npu_graph_export._proto import ge_ir_pb2 as ge
from torch import nn

Check = Callable[..., ge.GraphDef]


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


RESIZES: dict[str, dict[str, Any]] = {
    "nearest-twice": {"scale_factor": 2, "mode": "nearest"},
    "nearest-to-size": {"size": (7, 9), "mode": "nearest"},
    "nearest-fractional-scale": {"scale_factor": 1.5, "mode": "nearest"},
    "nearest-exact": {"size": (3, 4), "mode": "nearest-exact"},
    "bilinear": {"size": (7, 9), "mode": "bilinear", "align_corners": False},
    "bilinear-align-corners": {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
    "bilinear-down": {"scale_factor": 0.5, "mode": "bilinear"},
    "bicubic": {"size": (8, 8), "mode": "bicubic", "align_corners": False},
}


@pytest.mark.parametrize("case", list(RESIZES))
def test_interpolation_matches_eager(case: str, export_check: Check) -> None:
    torch.manual_seed(0)
    graph = export_check(Fn(lambda t: F.interpolate(t, **RESIZES[case])), torch.randn(2, 3, 5, 6))
    assert not {op.type for op in graph.op} & {"ResizeBilinearV2", "ResizeNearestNeighborV2"}


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_one_dimensional_interpolation(mode: str, export_check: Check) -> None:
    export_check(Fn(lambda t: F.interpolate(t, size=11, mode=mode)), torch.randn(2, 3, 7))


def test_upsampling_a_dynamic_image(export_check: Check) -> None:
    export_check(
        nn.Upsample(scale_factor=2, mode="bilinear"),
        torch.randn(1, 2, 4, 6),
        dynamic=True,
        others=((torch.randn(2, 2, 3, 5),),),
    )
