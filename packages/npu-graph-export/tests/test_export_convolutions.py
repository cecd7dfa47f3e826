"""Convolution, pooling and batch-norm converters: GE attributes as GE reads them, numbers as eager.

Each layer is exported alone; the test reads the GE op back from the ``.air`` (strides, pads,
dilations, groups, layouts) and runs the numpy runtime against eager PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from npu_graph_export import (
    ExportConfig,
    ModelFormatError,
    UnsupportedOpError,
    dynamo_export,
    runtime,
)
from npu_graph_export._proto import ge_ir_pb2 as ge
from torch import nn

Check = Callable[[ge.GraphDef], set[str]]
ReadGraph = Callable[[Path], ge.GraphDef]


def _export_and_run(
    model: nn.Module, x: torch.Tensor, path: Path, **kwargs: Any
) -> tuple[ge.GraphDef, np.ndarray]:
    model = model.eval()
    dynamo_export(x, model=model, export_path=path, **kwargs)
    (got,) = runtime.load(path).run(x.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)
    graph = ge.ModelDef()
    graph.ParseFromString((path / "export.air").read_bytes())
    return graph.graph[0], got


def _ops(graph: ge.GraphDef, op_type: str) -> list[ge.OpDef]:
    return [op for op in graph.op if op.type == op_type]


def _ints(op: ge.OpDef, name: str) -> list[int]:
    return list(op.attr[name].list.i)


CONV2D = {
    "stride-padding": (nn.Conv2d(3, 6, 3, stride=2, padding=1), (1, 3, 9, 11)),
    "asymmetric": (
        nn.Conv2d(3, 4, (3, 5), stride=(2, 1), padding=(1, 2), bias=False),
        (2, 3, 8, 9),
    ),
    "dilation": (nn.Conv2d(4, 4, 3, padding=2, dilation=2), (1, 4, 10, 10)),
    "groups": (nn.Conv2d(4, 6, 3, groups=2, dilation=(1, 2)), (2, 4, 7, 9)),
    "depthwise": (nn.Conv2d(6, 6, 3, padding=1, groups=6), (1, 6, 5, 5)),
    "pointwise": (nn.Conv2d(3, 8, 1), (2, 3, 4, 4)),
}


@pytest.mark.parametrize("case", list(CONV2D))
def test_conv2d_is_ge_conv2d_in_nchw(tmp_path: Path, case: str, ge_check: Check) -> None:
    torch.manual_seed(0)
    layer, shape = CONV2D[case]
    graph, _ = _export_and_run(layer, torch.randn(shape), tmp_path)
    ge_check(graph)
    (conv,) = _ops(graph, "Conv2D")
    stride, padding, dilation = layer.stride, layer.padding, layer.dilation
    assert isinstance(padding, tuple)
    assert _ints(conv, "strides") == [1, 1, *stride]
    assert _ints(conv, "pads") == [padding[0], padding[0], padding[1], padding[1]]
    assert _ints(conv, "dilations") == [1, 1, *dilation]
    assert conv.attr["groups"].i == layer.groups
    assert conv.attr["data_format"].s == b"NCHW"
    assert [d.layout for d in conv.input_desc[:2]] == ["NCHW", "NCHW"]
    assert conv.output_desc[0].layout == "NCHW"
    bias, offset_w = conv.input_desc[2], conv.input_desc[3]
    assert (conv.input[2] == "") == (layer.bias is None)
    assert offset_w.attr["_is_unfed_optional"].i == 1
    if layer.bias is not None:
        assert bias.layout == "ND"  # GE's Conv2D definition: bias format ND


CONV1D = {
    "whisper-stem": (nn.Conv1d(8, 16, 3, padding=1), (2, 8, 20)),
    "stride": (nn.Conv1d(4, 4, 3, stride=2, padding=1), (1, 4, 17)),
    "dilation-groups": (nn.Conv1d(4, 8, 3, dilation=3, groups=4, bias=False), (2, 4, 15)),
}


@pytest.mark.parametrize("case", list(CONV1D))
def test_conv1d_is_conv2d_over_a_height_of_one(tmp_path: Path, case: str, ge_check: Check) -> None:
    torch.manual_seed(0)
    layer, shape = CONV1D[case]
    graph, got = _export_and_run(layer, torch.randn(shape), tmp_path)
    ge_check(graph)
    (conv,) = _ops(graph, "Conv2D")
    # As TorchAir's converter: input and filter unsqueezed at axis 2, the result squeezed back.
    assert [_ints(op, "axes") for op in _ops(graph, "Unsqueeze")] == [[2], [2]]
    (squeeze,) = _ops(graph, "Squeeze")
    assert _ints(squeeze, "axis") == [2]
    assert list(conv.input_desc[0].shape.dim)[2] == 1
    assert list(conv.input_desc[1].shape.dim)[2] == 1
    assert _ints(conv, "strides") == [1, 1, 1, layer.stride[0]]
    assert _ints(conv, "pads") == [0, 0, layer.padding[0], layer.padding[0]]  # type: ignore[index]
    assert _ints(conv, "dilations") == [1, 1, 1, layer.dilation[0]]
    assert conv.attr["groups"].i == layer.groups
    assert got.ndim == 3


class Pools(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.max_pool2d(x, 3, stride=2, padding=1),
            F.max_pool2d(x, (2, 3), stride=(2, 2), ceil_mode=True),
            F.avg_pool2d(x, 3, stride=2, padding=1),  # padding counted
            F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
            F.avg_pool2d(x, 2, divisor_override=3),
            F.avg_pool2d(x[0], 2),  # (C, H, W)
            F.adaptive_avg_pool2d(x, (2, 3)),  # windows of unequal sizes
        )


def test_pooling_attributes_and_numbers(tmp_path: Path, ge_check: Check) -> None:
    x = torch.randn(2, 3, 9, 8)
    Pools()(x)
    dynamo_export(x, model=Pools(), export_path=tmp_path)
    graph = ge.ModelDef()
    graph.ParseFromString((tmp_path / "export.air").read_bytes())
    ge_check(graph.graph[0])
    got = runtime.load(tmp_path).run(x.numpy())
    for value, reference in zip(got, Pools()(x), strict=True):
        np.testing.assert_allclose(value, reference.numpy(), rtol=1e-5, atol=1e-6)
    ops = {op.name: op for op in graph.graph[0].op}
    first, second = sorted(
        (op for op in ops.values() if op.type == "MaxPoolV3"), key=lambda op: op.name
    )
    assert _ints(first, "ksize") == [1, 1, 3, 3]
    assert _ints(first, "strides") == [1, 1, 2, 2]
    assert _ints(first, "pads") == [1, 1, 1, 1]
    assert first.attr["padding_mode"].s == b"CALCULATED"
    assert not first.attr["ceil_mode"].b
    assert _ints(second, "ksize") == [1, 1, 2, 3]
    assert second.attr["ceil_mode"].b
    averages = sorted((op for op in ops.values() if op.type == "AvgPoolV2"), key=lambda o: o.name)
    assert [op.attr["exclusive"].b for op in averages] == [False, True, False, False]
    assert [op.attr["divisor_override"].i for op in averages] == [0, 0, 3, 0]
    (adaptive,) = [op for op in ops.values() if op.type == "AdaptiveAvgPool2d"]
    assert _ints(adaptive, "output_size") == [2, 3]


def test_batch_norm_1d_and_2d_are_bn_infer(tmp_path: Path, ge_check: Check) -> None:
    class Norms(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn2d = nn.BatchNorm2d(4, eps=1e-3)
            self.bn1d = nn.BatchNorm1d(4)
            self.plain = nn.BatchNorm2d(4, affine=False)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return self.bn2d(x), self.bn1d(x.mean((2, 3))), self.bn1d(x.flatten(2)), self.plain(x)

    torch.manual_seed(0)
    model = Norms().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d):
            module.running_mean.uniform_(-1.0, 1.0)
            module.running_var.uniform_(0.5, 2.0)
            if module.affine:
                nn.init.uniform_(module.weight, 0.5, 1.5)
                nn.init.uniform_(module.bias, -0.5, 0.5)
    x = torch.randn(2, 4, 3, 5)
    dynamo_export(x, model=model, export_path=tmp_path)
    graph = ge.ModelDef()
    graph.ParseFromString((tmp_path / "export.air").read_bytes())
    ge_check(graph.graph[0])
    norms = [op for op in graph.graph[0].op if op.type == "BNInfer"]
    assert len(norms) == 4
    assert sorted(round(op.attr["epsilon"].f, 6) for op in norms) == [1e-5, 1e-5, 1e-5, 1e-3]
    for op in norms:
        assert [d.layout for d in op.input_desc] == ["NCHW"] * 5
        assert [d.dtype for d in op.input_desc[1:]] == [ge.DT_FLOAT] * 4  # GE: float32 only
        assert len(op.input_desc[0].shape.dim) == 4
    got = runtime.load(tmp_path).run(x.numpy())
    with torch.no_grad():
        for value, reference in zip(got, model(x), strict=True):
            np.testing.assert_allclose(value, reference.numpy(), rtol=1e-4, atol=1e-5)


def test_tensor_descriptors_carry_format_for_int(
    tmp_path: Path, read_graph: ReadGraph, ge_check: Check
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    x = torch.randn(1, 3, 6, 6)
    dynamo_export(x, model=model, export_path=tmp_path, config=ExportConfig(embed_limit_bytes=0))
    graph = read_graph(tmp_path)
    ge_check(graph)  # every descriptor: layout and format_for_int agree
    (data,) = _ops(graph, "Data")
    # GE's ge::Format numbering: FORMAT_ND = 2, FORMAT_NCHW = 0 (metadef graph/types.h).
    assert data.output_desc[0].attr["format_for_int"].i == 2
    assert data.input_desc[0].attr["format_for_int"].i == 2
    weights = _ops(graph, "FileConstant")
    assert len(weights) == 4
    assert all(op.output_desc[0].attr["format_for_int"].i == 2 for op in weights)
    (conv,) = _ops(graph, "Conv2D")
    assert [d.attr["format_for_int"].i for d in conv.input_desc[:3]] == [0, 0, 2]
    assert conv.output_desc[0].attr["format_for_int"].i == 0


def test_dynamic_spatial_size_exports_and_runs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.AvgPool2d(2)
    ).eval()
    dynamo_export(torch.randn(2, 3, 16, 16), model=model, export_path=tmp_path, dynamic=True)
    loaded = runtime.load(tmp_path)
    assert loaded.inputs[0].shape == (-1, 3, -1, -1)
    for shape in ((1, 3, 12, 20), (3, 3, 17, 9)):
        x = torch.randn(shape)
        (got,) = loaded.run(x.numpy())
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "shape", "message"),
    [
        (nn.ConvTranspose2d(3, 3, 2), (1, 3, 4, 4), "transposed convolution"),
        (nn.Conv3d(2, 2, 1), (1, 2, 3, 3, 3), "3 spatial dimensions"),
        (nn.MaxPool2d(2, return_indices=True), (1, 2, 4, 4), "indices of max pooling"),
        (nn.MaxPool2d(2, dilation=2), (1, 2, 6, 6), "dilation"),
    ],
    ids=["transposed", "conv3d", "pool-indices", "pool-dilation"],
)
def test_what_ge_cannot_express_is_refused_by_name(
    tmp_path: Path, model: nn.Module, shape: tuple[int, ...], message: str
) -> None:
    with pytest.raises(UnsupportedOpError, match=message):
        dynamo_export(torch.randn(shape), model=model.eval(), export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _rewrite(path: Path, op_type: str, edit: Callable[[ge.OpDef], None]) -> Path:
    model = ge.ModelDef()
    model.ParseFromString((path / "export.air").read_bytes())
    for op in model.graph[0].op:
        if op.type == op_type:
            edit(op)
    target = path / "edited.air"
    target.write_bytes(model.SerializeToString())
    return target


def _set_ints(name: str, values: list[int]) -> Callable[[ge.OpDef], None]:
    def edit(op: ge.OpDef) -> None:
        del op.attr[name].list.i[:]
        op.attr[name].list.i.extend(values)

    return edit


def _set_text(name: str, value: bytes) -> Callable[[ge.OpDef], None]:
    def edit(op: ge.OpDef) -> None:
        op.attr[name].s = value

    return edit


def _set_int(name: str, value: int) -> Callable[[ge.OpDef], None]:
    def edit(op: ge.OpDef) -> None:
        op.attr[name].i = value

    return edit


@pytest.mark.parametrize(
    ("op_type", "edit", "message"),
    [
        ("Conv2D", _set_ints("strides", [1, 1, 0, 1]), "strides"),
        ("Conv2D", _set_ints("strides", [2, 1, 1, 1]), "strides"),
        ("Conv2D", _set_ints("pads", [1, -1, 0, 0]), "negative"),
        ("Conv2D", _set_int("groups", 3), "groups"),
        ("Conv2D", _set_text("data_format", b"NHWC"), "NCHW only"),
        ("Conv2D", _set_ints("dilations", [1, 1, 40, 1]), "does not fit"),
        ("MaxPoolV3", _set_ints("ksize", [1, 1, 9, 2]), "does not fit"),
        ("MaxPoolV3", _set_text("padding_mode", b"SAME"), "CALCULATED only"),
        ("AvgPoolV2", _set_ints("strides", [1, 1, 1]), "4 integers"),
    ],
)
def test_runtime_refuses_malformed_nchw_ops(
    tmp_path: Path, op_type: str, edit: Callable[[ge.OpDef], None], message: str
) -> None:
    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.avg_pool2d(F.max_pool2d(self.conv(x), 2), 2)

    dynamo_export(torch.randn(1, 4, 8, 8), model=Small().eval(), export_path=tmp_path)
    loaded = runtime.load(_rewrite(tmp_path, op_type, edit))
    with pytest.raises(ModelFormatError, match=message):
        loaded.run(np.zeros((1, 4, 8, 8), np.float32))


def test_runtime_budget_counts_the_padded_input(tmp_path: Path) -> None:
    from npu_graph_export import MemoryLimitError

    dynamo_export(torch.randn(1, 2, 4, 4), model=nn.MaxPool2d(2).eval(), export_path=tmp_path)

    def huge_window(op: ge.OpDef) -> None:
        # A window (and padding) as large as the stride: a small output from a huge padded input.
        _set_ints("ksize", [1, 1, 1, 1])(op)
        _set_ints("strides", [1, 1, 50_000, 50_000])(op)
        _set_ints("pads", [0, 50_000, 0, 50_000])(op)

    loaded = runtime.load(_rewrite(tmp_path, "MaxPoolV3", huge_window), max_bytes=1 << 26)
    with pytest.raises(MemoryLimitError):
        loaded.run(np.zeros((1, 2, 4, 4), np.float32))
