"""Padding (``PadV3``), repeat (``Tile``) and strided views (``AsStrided``) against eager.

Every case is exported, checked against GE's operator definitions and run by the numpy runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels import KERNELS, KernelError
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


def _const(graph: ge.GraphDef, ref: str) -> np.ndarray:
    op = next(o for o in graph.op if o.name == ref.rsplit(":", 1)[0])
    desc = op.attr["value"].t.desc
    assert desc.dtype == ge.DT_INT64
    return np.frombuffer(op.attr["value"].t.data, np.int64).reshape(list(desc.shape.dim))


PADS = {
    "last-dim": ((1, 2), 0.0),
    "two-dims": ((1, 0, 2, 3), -1.5),
    "every-dim": ((1, 1, 0, 2, 1, 0), 3.0),
    "negative": ((-1, 2), 0.0),
    "crop-both-sides": ((-1, -2, 1, -1), 7.0),
    "zeros": ((0, 0, 0, 0), 0.0),
}


@pytest.mark.parametrize("case", list(PADS))
def test_constant_pad_is_padv3_with_ge_paddings(case: str, export_check: Check) -> None:
    pad, value = PADS[case]
    x = torch.randn(2, 3, 4, 5)
    graph = export_check(Fn(lambda t: F.pad(t, pad, value=value)), x)
    pads = _ops(graph, "PadV3")
    if all(p <= 0 for p in pad):
        assert not pads
        return
    (op,) = pads
    assert op.attr["mode"].s == b"constant"
    assert op.attr["paddings_contiguous"].b
    # GE's order: (begin, end) per dimension from the first; ATen's from the last.
    flat = [0] * 8
    for i in range(len(pad) // 2):
        axis = 3 - i
        flat[2 * axis], flat[2 * axis + 1] = max(pad[2 * i], 0), max(pad[2 * i + 1], 0)
    assert _const(graph, op.input[1]).tolist() == flat
    assert bool(_ops(graph, "StridedSliceV2")) == any(p < 0 for p in pad)


def test_zero_pad_2d_and_int_tensors(export_check: Check) -> None:
    export_check(nn.ZeroPad2d((1, 2, 0, 1)), torch.randn(1, 2, 3, 3))
    export_check(Fn(lambda t: F.pad(t, (2, 1), value=9)), torch.arange(12).reshape(3, 4))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_other_padding_modes_export_through_their_decompositions(
    mode: str, export_check: Check
) -> None:
    export_check(Fn(lambda t: F.pad(t, (2, 1, 1, 2), mode=mode)), torch.randn(1, 2, 4, 5))


def test_pad_by_a_dynamic_size(export_check: Check) -> None:
    # Swin pads windows to a multiple of their size: the amount follows the input's size.
    def pad_to_multiple(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t, (0, (4 - t.shape[-1] % 4) % 4))

    export_check(
        Fn(pad_to_multiple),
        torch.randn(2, 6),
        dynamic=True,
        others=((torch.randn(3, 9),), (torch.randn(1, 8),)),
    )


def test_padv3_kernel_modes_and_refusals() -> None:
    op = ge.OpDef(type="PadV3")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for mode, numpy_mode in (("reflect", "reflect"), ("edge", "edge")):
        op.attr["mode"].s = mode.encode()
        (got,) = KERNELS["PadV3"](op, [x, np.array([1, 0, 2, 1])], None)  # type: ignore[arg-type]
        np.testing.assert_array_equal(got, np.pad(x, [(1, 0), (2, 1)], mode=numpy_mode))
    op.attr["mode"].s = b"constant"
    op.attr["paddings_contiguous"].b = False  # all begins, then all ends
    (got,) = KERNELS["PadV3"](op, [x, np.array([1, 2, 0, 1]), np.float32(5)], None)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, np.pad(x, [(1, 0), (2, 1)], constant_values=5))
    with pytest.raises(KernelError, match="negative"):
        KERNELS["PadV3"](op, [x, np.array([-1, 0, 0, 0])], None)  # type: ignore[arg-type]
    op.attr["mode"].s = b"wrap"
    with pytest.raises(KernelError, match="mode"):
        KERNELS["PadV3"](op, [x, np.array([0, 0, 0, 0])], None)  # type: ignore[arg-type]


REPEATS = {
    "same-rank": (2, 1, 3),
    "ones": (1, 1, 1),
    "new-leading-dims": (2, 1, 2, 1, 2),
    "zero": (1, 0, 2),
}


@pytest.mark.parametrize("case", list(REPEATS))
def test_repeat_is_tile(case: str, export_check: Check) -> None:
    repeats = REPEATS[case]
    graph = export_check(Fn(lambda t: t.repeat(*repeats)), torch.randn(2, 3, 4))
    (tile,) = _ops(graph, "Tile")
    assert _const(graph, tile.input[1]).tolist() == list(repeats)
    assert len(tile.input_desc[0].shape.dim) == len(repeats)


def test_repeat_of_a_dynamic_batch(export_check: Check) -> None:
    # Whisper repeats its decoder positions over the batch.
    export_check(
        Fn(lambda t: t.repeat(t.shape[0], 2) * 1.0),
        torch.randn(3, 4),
        dynamic=True,
        others=((torch.randn(5, 2),),),
    )


def test_as_strided_as_a_reshape_and_as_a_window(export_check: Check) -> None:
    x = torch.randn(2, 6)
    graph = export_check(Fn(lambda t: torch.as_strided(t, (3, 4), (4, 1)) + 0), x)
    assert _ops(graph, "Reshape")
    assert not _ops(graph, "AsStrided")
    graph = export_check(Fn(lambda t: torch.as_strided(t, (4, 3), (2, 1), 1) + 0), x)
    (op,) = _ops(graph, "AsStrided")
    assert _const(graph, op.input[1]).tolist() == [4, 3]
    assert _const(graph, op.input[2]).tolist() == [2, 1]
    # A transposed input: its strides index the storage, which the export transposes back to.
    graph = export_check(
        Fn(lambda t: torch.as_strided(t.t(), (3, 2), (1, 3)) + 0), torch.randn(3, 4)
    )
    assert _ops(graph, "Transpose")


def test_as_strided_reading_past_the_input_is_refused(tmp_path: Path) -> None:
    from npu_graph_export import UnsupportedOpError, dynamo_export

    class Past(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return torch.as_strided(t[:, :2], (2, 2), (3, 1)) + 0

    with pytest.raises(UnsupportedOpError, match="as_strided"):
        dynamo_export(torch.randn(2, 3), model=Past(), export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tile_and_as_strided_kernels_refuse_what_does_not_fit() -> None:
    op = ge.OpDef(type="Tile")
    x = np.ones((2, 2), np.float32)
    with pytest.raises(KernelError, match="multiples"):
        KERNELS["Tile"](op, [x, np.array([2])], None)  # type: ignore[arg-type]
    op = ge.OpDef(type="AsStrided")
    with pytest.raises(KernelError, match="reads element"):
        KERNELS["AsStrided"](op, [x, np.array([2, 2]), np.array([3, 1]), np.array(0)], None)  # type: ignore[arg-type]


class Puts(nn.Module):
    """Writes by advanced index: several indices, adjacent or not, accumulating duplicates."""

    def forward(self, x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> Any:
        a = x.clone()
        a[rows, cols] = 7.0  # two adjacent indices
        b = x.clone()
        b[rows, :, cols[:1]] = x[0, 0, 0]  # indices apart: their dimensions go first
        c = torch.ops.aten.index_put(x, [None, cols], x[:, :3], True)  # duplicates add up
        d = x.index_add(2, cols, x[:, :, :3])
        return a, b, c, d


def test_index_put_with_several_indices_and_accumulation(export_check: Check) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5)
    rows, cols = torch.tensor([0, 2, -1]), torch.tensor([1, 1, 3])
    graph = export_check(Puts(), x, rows, cols)
    types = {op.type for op in graph.op}
    assert {"TensorScatterAdd", "TensorScatterUpdate"} <= types


@pytest.mark.parametrize(("kernel", "stride"), [(2, 2), (3, 1), ((2, 3), (1, 2))])
def test_fold_and_unfold(kernel: Any, stride: Any, export_check: Check) -> None:
    # MobileViT V2 and VOLO fold patches back: an accumulating put of every patch.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 7)

    def round_trip(t: torch.Tensor) -> torch.Tensor:
        patches = F.unfold(t, kernel, stride=stride)
        return F.fold(patches * 2, (6, 7), kernel, stride=stride)

    export_check(Fn(round_trip), x, atol=1e-5)


class Scatters(nn.Module):
    """scatter with a tensor, a scalar and adding (a router's group mask, counts per bin)."""

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> Any:
        mask = torch.zeros_like(x).scatter(1, index, 1.0)
        written = x.scatter(0, index[:2], x[:3] * 10)  # only src[:2, :2] is read
        counts = torch.zeros(4, 2).scatter_add(0, index.remainder(4), x[:, :2])
        return mask, written, counts


def test_scatter_is_scatter_elements(export_check: Check) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 4)
    index = torch.tensor([[0, 3], [1, 1], [2, 0], [3, 2], [0, 0]])
    graph = export_check(Scatters(), x, index)
    reductions = sorted(op.attr["reduction"].s for op in _ops(graph, "ScatterElements"))
    assert reductions == [b"add", b"none", b"none"]
