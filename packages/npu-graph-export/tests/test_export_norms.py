"""Vector norms (``LpNormV2``), group norm (``GroupNorm``) and batch norm by the input's own
statistics (weight standardisation) against eager."""

from __future__ import annotations

import math
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


def _ops(graph: ge.GraphDef, op_type: str) -> list[ge.OpDef]:
    return [op for op in graph.op if op.type == op_type]


NORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "l2-all": lambda t: torch.linalg.vector_norm(t),
    "l2-dims-keepdim": lambda t: torch.linalg.vector_norm(t, dim=(1, 2), keepdim=True),
    "l1-negative-dim": lambda t: torch.linalg.vector_norm(t, ord=1, dim=-1),
    "inf": lambda t: torch.linalg.vector_norm(t, ord=math.inf, dim=0),
    "minus-inf": lambda t: torch.linalg.vector_norm(t, ord=-math.inf, dim=1),
    "zero": lambda t: torch.linalg.vector_norm(t.relu(), ord=0, dim=2),
    "p3": lambda t: torch.linalg.vector_norm(t, ord=3, dim=(0, -1)),
    "tensor-norm": lambda t: t.norm(p=2, dim=1),
    "normalize": lambda t: F.normalize(t, dim=1),
}


@pytest.mark.parametrize("case", list(NORMS))
def test_vector_norm_is_lp_norm_v2(case: str, export_check: Check) -> None:
    torch.manual_seed(0)
    graph = export_check(Fn(NORMS[case]), torch.randn(3, 4, 5), rtol=1e-5, atol=1e-6)
    (op,) = _ops(graph, "LpNormV2")
    assert op.attr["epsilon"].f == 0.0


def test_vector_norm_attributes(export_check: Check) -> None:
    graph = export_check(Fn(NORMS["minus-inf"]), torch.randn(3, 4, 5))
    (op,) = _ops(graph, "LpNormV2")
    assert op.attr["p"].f == -math.inf
    assert list(op.attr["axes"].list.i) == [1]
    assert op.attr["keepdim"].b is False


def test_vector_norm_with_a_result_dtype(export_check: Check) -> None:
    export_check(
        Fn(lambda t: torch.linalg.vector_norm(t, dim=-1, dtype=torch.float64)), torch.randn(2, 5)
    )


GROUP_NORMS = {
    "4d-affine": (nn.GroupNorm(2, 6), (2, 6, 3, 4)),
    "one-group": (nn.GroupNorm(1, 4), (3, 4, 2, 2)),  # PoolFormer's GroupNorm(1, C)
    "per-channel-no-affine": (nn.GroupNorm(4, 4, affine=False, eps=1e-3), (2, 4, 5, 1)),
    "3d": (nn.GroupNorm(3, 6), (2, 6, 7)),
    "5d": (nn.GroupNorm(2, 4), (1, 4, 2, 3, 2)),
}


@pytest.mark.parametrize("case", list(GROUP_NORMS))
def test_group_norm_is_ge_group_norm_in_nchw(case: str, export_check: Check) -> None:
    torch.manual_seed(0)
    layer, shape = GROUP_NORMS[case]
    if layer.affine:
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
    graph = export_check(layer, torch.randn(shape), rtol=1e-5, atol=1e-5)
    (op,) = _ops(graph, "GroupNorm")
    assert op.attr["num_groups"].i == layer.num_groups
    assert op.attr["eps"].f == pytest.approx(layer.eps)
    assert op.attr["data_format"].s == b"NCHW"
    assert [d.layout for d in op.input_desc] == ["NCHW"] * 3
    assert len(op.input_desc[0].shape.dim) == 4


def test_group_norm_with_a_dynamic_batch(export_check: Check) -> None:
    export_check(
        nn.GroupNorm(2, 4),
        torch.randn(2, 4, 3, 3),
        dynamic=True,
        others=((torch.randn(3, 4, 5, 2),),),
        atol=1e-5,
    )


class StandardizedConv(nn.Conv2d):
    """BiT's weight standardisation: batch norm over the weight's own statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1), None, None, training=True, eps=1e-8
        ).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding)


def test_batch_norm_by_own_statistics_standardizes_weights(export_check: Check) -> None:
    torch.manual_seed(0)
    export_check(StandardizedConv(3, 4, 3, padding=1), torch.randn(2, 3, 5, 5), atol=1e-5)


@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_by_own_statistics_of_activations(affine: bool, export_check: Check) -> None:
    torch.manual_seed(0)
    weight = torch.randn(3) if affine else None
    bias = torch.randn(3) if affine else None
    model = Fn(lambda t: F.batch_norm(t, None, None, weight, bias, training=True, eps=1e-5))
    graph = export_check(model, torch.randn(4, 3, 2, 5), atol=1e-5)
    assert _ops(graph, "ReduceMean")
    assert _ops(graph, "Rsqrt")
