"""Mixture-of-experts layers: grouped matrix products (GE ``GroupedMatmul``) and the routing
around them (top-k, sort, histc, cumsum, the inverse permutation) against eager."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels import KERNELS, KernelError, KernelValueError
from torch import nn

Check = Callable[..., ge.GraphDef]

EXPERTS, HIDDEN, OUT = 4, 8, 8  # rows of 16 bytes in bfloat16, as torch's kernel needs


def _grouped(op: str) -> Callable[..., torch.Tensor]:
    if op == "aten":
        # torch's own grouped_mm traces only in bfloat16 (transformers falls back otherwise).
        return lambda x, w, offs: torch._grouped_mm(x.bfloat16(), w.bfloat16(), offs=offs).float()
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers the operator)

    return lambda x, w, offs: torch.ops.transformers.grouped_mm_fallback(x, w, offs=offs)


class Experts(nn.Module):
    """transformers' grouped-mm experts: route, sort by expert, one product per group, unsort."""

    def __init__(self, grouped: Callable[..., torch.Tensor], top_k: int = 2) -> None:
        super().__init__()
        self.grouped = grouped
        self.top_k = top_k
        self.router = nn.Linear(HIDDEN, EXPERTS)
        self.weight = nn.Parameter(torch.randn(EXPERTS, HIDDEN, OUT))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(self.router(hidden).softmax(-1), self.top_k, dim=-1)
        expert_ids = chosen.reshape(-1)
        sorted_ids, perm = torch.sort(expert_ids)
        rows = hidden[perm // self.top_k]
        counts = torch.histc(sorted_ids.float(), bins=EXPERTS, min=0, max=EXPERTS - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        out = self.grouped(rows, self.weight, offsets) * weights.reshape(-1)[perm].unsqueeze(-1)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.size(0))
        return out[inverse].view(hidden.shape[0], self.top_k, OUT).sum(dim=1)


@pytest.mark.parametrize("op", ["aten", "transformers"])
def test_grouped_mm_is_ge_grouped_matmul(op: str, export_check: Check) -> None:
    torch.manual_seed(0)

    class Grouped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(EXPERTS, HIDDEN, OUT))
            self.grouped = _grouped(op)

        def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
            return self.grouped(x, self.weight, offs)

    offs = torch.tensor([2, 2, 5, 7], dtype=torch.int32)  # expert 1 gets no row
    tolerance = 2e-2 if op == "aten" else 1e-5  # bfloat16 products, float32 in the runtime
    graph = export_check(
        Grouped(),
        torch.randn(7, HIDDEN),
        offs,
        others=((torch.randn(7, HIDDEN), torch.tensor([0, 3, 3, 7], dtype=torch.int32)),),
        rtol=tolerance,
        atol=tolerance,
    )
    (matmul,) = [o for o in graph.op if o.type == "GroupedMatmul"]
    assert [d.name for d in matmul.input_desc] == ["x0", "weight0", "group_list"]
    assert matmul.input_desc[2].dtype == ge.DT_INT64
    assert [d.name for d in matmul.output_desc] == ["y0"]
    assert (matmul.attr["split_item"].i, matmul.attr["group_type"].i) == (3, 0)


@pytest.mark.parametrize("op", ["aten", "transformers"])
def test_routed_experts_match_eager(op: str, export_check: Check) -> None:
    torch.manual_seed(0)
    tolerance = 5e-2 if op == "aten" else 1e-5
    export_check(Experts(_grouped(op)), torch.randn(6, HIDDEN), rtol=tolerance, atol=tolerance)


def test_routed_experts_with_a_dynamic_token_count(export_check: Check) -> None:
    torch.manual_seed(0)
    export_check(
        Experts(_grouped("transformers")),
        torch.randn(6, HIDDEN),
        dynamic=True,
        others=((torch.randn(9, HIDDEN),), (torch.randn(3, HIDDEN),)),
        atol=1e-5,
    )


def _op(**attrs: int) -> ge.OpDef:
    op = ge.OpDef(type="GroupedMatmul")
    for name in ("x0", "weight0", "group_list"):
        op.input_desc.add(name=name)
    for name, value in attrs.items():
        op.attr[name].i = value
    return op


def test_grouped_matmul_kernel_counts_and_refusals() -> None:
    x, w = np.ones((5, 2), np.float32), np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    kernel = KERNELS["GroupedMatmul"]
    (by_counts,) = kernel(
        _op(split_item=3, group_type=0, group_list_type=1), [x, w, np.array([1, 0, 3])], None
    )  # type: ignore[arg-type]
    (by_ends,) = kernel(_op(split_item=3, group_type=0), [x, w, np.array([1, 1, 4])], None)  # type: ignore[arg-type]
    np.testing.assert_array_equal(by_counts, by_ends)
    np.testing.assert_array_equal(by_ends[4], [0, 0])  # past the last group: no expert
    np.testing.assert_array_equal(by_ends[1], x[1] @ w[2])
    with pytest.raises(KernelValueError, match="non-decreasing"):
        kernel(_op(split_item=3, group_type=0), [x, w, np.array([3, 1, 4])], None)  # type: ignore[arg-type]
    with pytest.raises(KernelError, match="group_type"):
        kernel(_op(split_item=3, group_type=2), [x, w, np.array([1, 1, 4])], None)  # type: ignore[arg-type]
