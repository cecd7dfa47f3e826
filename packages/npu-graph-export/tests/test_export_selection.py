"""Arg-extremes, max/min along a dimension, top-k, sorting and histograms against eager.

Inputs are chosen with ties where PyTorch defines the answer (the first of equal values for an
arg-extreme, the original order for a stable sort) and without ties where it does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels import KERNELS
from npu_graph_export.runtime._kernels.selection import stable_order
from torch import nn

Check = Callable[..., ge.GraphDef]


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def _types(graph: ge.GraphDef) -> set[str]:
    return {op.type for op in graph.op}


def _distinct(*shape: int) -> torch.Tensor:
    """Values without ties, in a shuffled order."""
    generator = torch.Generator().manual_seed(0)
    count = int(np.prod(shape))
    return torch.randperm(count, generator=generator).reshape(shape).float() / count - 0.5


TIES = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5], [-1.0, -4.0, 2.0, -4.0]])

ARG_EXTREMES: dict[str, Callable[[torch.Tensor], Any]] = {
    "argmax-all": lambda t: t.argmax(),
    "argmax-dim": lambda t: t.argmax(1),
    "argmax-negative-dim-keepdim": lambda t: t.argmax(-2, keepdim=True),
    "argmin-all-keepdim": lambda t: t.argmin(keepdim=True),
    "argmin-dim": lambda t: t.argmin(dim=1),
}


@pytest.mark.parametrize("case", list(ARG_EXTREMES))
def test_arg_extremes_return_the_first_of_equal_values(case: str, export_check: Check) -> None:
    graph = export_check(Fn(ARG_EXTREMES[case]), TIES)
    assert _types(graph) & {"ArgMaxV2", "ArgMin"}
    export_check(Fn(ARG_EXTREMES[case]), torch.tensor([[1, 5, 5], [7, 2, 7]]))  # integers


def test_argmax_attribute_is_the_int64_dtype_in_ge_numbering(export_check: Check) -> None:
    graph = export_check(Fn(lambda t: t.argmax(-1)), TIES)
    (op,) = [op for op in graph.op if op.type == "ArgMaxV2"]
    assert op.attr["dtype"].WhichOneof("value") == "dt"
    assert op.attr["dtype"].dt == 9  # ge::DT_INT64


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_max_and_min_along_a_dimension(dim: int, keepdim: bool, export_check: Check) -> None:
    def both(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        high, where_high = t.max(dim, keepdim=keepdim)
        low, where_low = torch.min(t, dim=dim, keepdim=keepdim)
        return high, where_high, low, where_low

    graph = export_check(Fn(both), TIES)
    assert {"ArgMaxWithValue", "ArgMinWithValue"} <= _types(graph)
    # Integer inputs: GE's fused ops take floats, so a reduction and an arg-extreme.
    graph = export_check(Fn(both), torch.tensor([[4, 9, 9], [3, 3, 1]]))
    assert {"ReduceMax", "ArgMaxV2", "ReduceMin", "ArgMin"} <= _types(graph)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize(("k", "dim"), [(1, -1), (3, 1), (2, 0)])
def test_topk(k: int, dim: int, largest: bool, export_check: Check) -> None:
    graph = export_check(
        Fn(lambda t: torch.topk(t, k, dim=dim, largest=largest)), _distinct(4, 6, 3)
    )
    (op,) = [op for op in graph.op if op.type == "TopKV2"]
    assert op.attr["largest"].b is largest
    assert op.attr["dim"].i == dim % 3
    assert op.output_desc[1].dtype == ge.DT_INT32  # GE's indices, cast to int64 after


def test_unsorted_topk_picks_the_same_elements(export_check: Check, tmp_path: Any) -> None:
    from npu_graph_export import dynamo_export, runtime

    x = _distinct(3, 8)
    model = Fn(lambda t: torch.topk(t, 3, sorted=False))
    dynamo_export(x, model=model, export_path=tmp_path / "out")
    values, indices = runtime.load(tmp_path / "out").run(x.numpy())
    expected, expected_indices = model(x)
    # Any order is allowed: the same values at the same positions.
    np.testing.assert_array_equal(np.sort(values, -1), np.sort(expected.numpy(), -1))
    np.testing.assert_array_equal(np.sort(indices, -1), np.sort(expected_indices.numpy(), -1))


SORTS: dict[str, Callable[[torch.Tensor], Any]] = {
    "last-dim": lambda t: torch.sort(t),
    "descending": lambda t: torch.sort(t, descending=True),
    "other-dim": lambda t: torch.sort(t, dim=0),
    "stable-descending": lambda t: torch.sort(t, dim=1, descending=True, stable=True),
    "stable-negative-dim": lambda t: torch.sort(t, dim=-2, stable=True),
    "argsort": lambda t: torch.argsort(t, dim=1, stable=True),
}


@pytest.mark.parametrize("case", list(SORTS))
def test_sort_is_stable_with_ties(case: str, export_check: Check) -> None:
    graph = export_check(Fn(SORTS[case]), TIES)
    (op,) = [op for op in graph.op if op.type == "Sort"]
    assert op.attr["axis"].i == -1  # another dimension is moved last and back
    export_check(Fn(SORTS[case]), torch.tensor([[3, 1, 3, 2], [0, 0, 5, 0]]))


def test_stable_order_keeps_ties_in_order_and_nan_largest() -> None:
    x = np.array([2.0, np.nan, 1.0, 2.0, 1.0])
    assert stable_order(x, 0, descending=False).tolist() == [2, 4, 0, 3, 1]
    assert stable_order(x, 0, descending=True).tolist() == [1, 0, 3, 2, 4]
    reference = torch.sort(torch.tensor(x), descending=True, stable=True).indices
    assert stable_order(x, 0, descending=True).tolist() == reference.tolist()


@pytest.mark.parametrize(
    ("bins", "low", "high"),
    [(4, -1.0, 1.0), (5, 0.0, 0.0), (3, 0.0, 4.0), (7, -0.25, 0.1)],
)
def test_histc(bins: int, low: float, high: float, export_check: Check) -> None:
    x = torch.tensor([-1.0, -0.5, 0.0, 0.2, 0.25, 1.0, 1.5, 3.0, 4.0, 2.0, 0.0])
    if low != high:  # NaN is left out of a given range (torch refuses it in the data's range)
        x = torch.cat([x, torch.tensor([float("nan")])])
    graph = export_check(Fn(lambda t: torch.histc(t, bins=bins, min=low, max=high)), x)
    (op,) = [op for op in graph.op if op.type == "Histogram"]
    assert op.attr["bins"].i == bins
    assert (op.attr["min"].f, op.attr["max"].f) == pytest.approx((low, high))


def test_histc_of_expert_ids_counts_tokens_per_expert(export_check: Check) -> None:
    # The mixture-of-experts use: integer-valued floats, one bin per expert.
    ids = torch.tensor([0.0, 3.0, 3.0, 1.0, 3.0, 2.0, 0.0, 3.0])
    export_check(Fn(lambda t: torch.histc(t, bins=4, min=0, max=3)), ids)


def test_histogram_kernel_of_a_constant_tensor() -> None:
    op = ge.OpDef(type="Histogram")
    op.attr["bins"].i = 3
    (got,) = KERNELS["Histogram"](op, [np.full(4, 2.0, np.float32)], None)  # type: ignore[arg-type]
    expected = torch.histc(torch.full((4,), 2.0), bins=3)
    np.testing.assert_array_equal(got, expected.numpy())
