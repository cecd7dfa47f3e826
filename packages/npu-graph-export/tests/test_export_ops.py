"""Converters beyond the two decoders, the GE IR field numbers, and the pbtxt writer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from npu_graph_export import dynamo_export, runtime, supported_ops
from npu_graph_export._graph import GraphBuilder
from npu_graph_export._opdefs import OPS
from npu_graph_export._pbtxt import render_pbtxt
from npu_graph_export._proto import ge_ir_pb2 as ge

GeCheck = Callable[[ge.GraphDef], set[str]]


class Zoo(torch.nn.Module):
    """Many ATen ops in one graph, so one export checks many converters against eager."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 5))
        self.b = torch.nn.Parameter(torch.randn(5))

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.addmm(self.b, x, self.w)  # [4, 5]
        bmm = torch.bmm(x.unsqueeze(0), self.w.unsqueeze(0)).squeeze(0)
        cmp = torch.where((a > 0) & (a <= 1.5) | (a == 0), a.exp(), a.neg().relu())
        red = a.mean(dim=0) + a.sum(dim=1, keepdim=True).squeeze(1).amax() + a.amax(dim=-1)[:1]
        pieces = torch.split(x, [2, 4], dim=1)
        cat = torch.cat([pieces[1], pieces[0]], dim=1).t()
        picked = x.index_select(0, idx) + x.select(0, 1)
        full = torch.full((2, 3), 0.5) + torch.ones_like(a[:2, :3]) + torch.zeros(2, 3)
        tri = torch.triu(a[:4, :4], diagonal=1) + torch.tril(a[:4, :4], diagonal=-1)
        gelu = F.gelu(a) + torch.erf(a) * torch.sigmoid(a) - torch.tanh(a) / a.abs().add(1)
        logp = (
            F.log_softmax(a, dim=1) + a.abs().sqrt() + torch.maximum(a, torch.minimum(a, a.cos()))
        )
        ints = (idx * 2 + 1).to(torch.float32) // 2 + idx.float().add(1).reciprocal() - (1 - idx)
        expand = self.b.expand(3, 5) + torch.arange(5.0) * 0.5
        return cmp, red, cat, picked, full, tri, gelu, logp, ints, expand, bmm


def _check(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    path: Path,
    dynamic: bool,
    ge_check: Callable[[ge.GraphDef], set[str]],
) -> None:
    dynamo_export(*inputs, model=model, export_path=path, dynamic=dynamic)
    air = ge.ModelDef()
    air.ParseFromString((path / "export.air").read_bytes())
    ge_check(air.graph[0])  # every op as GE's op definitions declare it
    with torch.no_grad():
        expected = model(*inputs)
    got = runtime.load(path).run(*(t.numpy() for t in inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.numpy().dtype
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-6)


def test_op_zoo_matches_eager(tmp_path: Path, ge_check: GeCheck) -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(4, 6), torch.tensor([2, 0, 3]))
    _check(Zoo().eval(), inputs, tmp_path, dynamic=False, ge_check=ge_check)


def test_supported_ops_lists_the_decoder_ops() -> None:
    ops = supported_ops()
    for name in (
        "aten.linear.default",
        "aten.scaled_dot_product_attention.default",
        "aten.embedding.default",
        "_c10d_functional.all_reduce.default",
        "aten.sym_size.int",
        "aten.native_layer_norm.default",
    ):
        assert name in ops


def test_proto_field_numbers_match_ge() -> None:
    def numbers(message: type) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert ge.DESCRIPTOR.package == "ge.proto"
    assert {k: v for k, v in numbers(ge.ModelDef).items()} == {
        "name": 1,
        "version": 2,
        "custom_version": 3,
        "graph": 7,
        "attr": 11,
    }
    assert numbers(ge.GraphDef) == {"name": 1, "input": 4, "output": 5, "op": 6, "attr": 11}
    op = numbers(ge.OpDef)
    assert (op["name"], op["type"], op["input"], op["attr"]) == (1, 2, 5, 10)
    assert (op["input_desc"], op["output_desc"], op["subgraph_name"]) == (33, 34, 35)
    attr = numbers(ge.AttrDef)
    assert (attr["list"], attr["s"], attr["i"], attr["f"], attr["b"], attr["bt"]) == (
        1,
        2,
        3,
        4,
        5,
        7,
    )
    assert (attr["func"], attr["td"], attr["t"], attr["g"], attr["list_list_int"], attr["dt"]) == (
        10,
        11,
        12,
        13,
        14,
        15,
    )
    desc = numbers(ge.TensorDescriptor)
    assert (desc["name"], desc["dtype"], desc["shape"], desc["layout"], desc["attr"]) == (
        1,
        2,
        3,
        4,
        5,
    )
    assert desc["device_type"] == 14
    assert numbers(ge.TensorDef) == {"desc": 1, "data": 2}
    assert (ge.DT_FLOAT, ge.DT_FLOAT16, ge.DT_INT32, ge.DT_INT64, ge.DT_BOOL, ge.DT_BF16) == (
        1,
        2,
        7,
        8,
        11,
        27,
    )
    assert numbers(ge.AttrDef.ListValue)["val_type"] == 20


def test_op_catalogue_expands_dynamic_and_optional_inputs() -> None:
    assert OPS["ConcatV2"].input_names(4) == ["x0", "x1", "x2", "concat_dim"]
    assert OPS["MatMulV2"].input_names(2) == ["x1", "x2"]
    assert OPS["SplitV"].output_names(3) == ["y0", "y1", "y2"]
    assert OPS["LayerNorm"].output_names(3) == ["y", "mean", "variance"]


def test_pbtxt_renders_control_edges_and_descriptors() -> None:
    builder = GraphBuilder("g")
    x = builder.add1("Data", "x", [], ge.DT_FLOAT, (2,), {"index": 0})
    y = builder.add1("Neg", "neg", [x], ge.DT_FLOAT, (2,))
    graph = builder.finish([y])
    graph.op[1].input.append("x:-1")
    text = render_pbtxt(graph)
    assert 'input: "x:0"' in text
    assert 'input: "^x"' in text
    assert 'key: "[o]y"' in text
    assert 'key: "index"' in text
    assert [op.type for op in graph.op] == ["Data", "Neg", "NetOutput"]


class Bitwise(torch.nn.Module):
    """``&``/``|`` on integers are bitwise (6 & 3 == 2), on bool masks logical."""

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor, f: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return (
            a & b,
            a | b,
            a & 5,
            mask & (f > 0),
            mask | (f > 0),
            torch.logical_and(f, a),
            torch.logical_or(a, f),
        )


def test_bitwise_ops_on_integers_are_bitwise_and_on_masks_logical(
    tmp_path: Path, ge_check: GeCheck
) -> None:
    inputs = (
        torch.tensor([6, 3, 0, 12]),
        torch.tensor([3, 5, 1, 10]),
        torch.tensor([True, False, True, True]),
        torch.tensor([1.0, -1.0, 0.0, 2.0]),
    )
    _check(Bitwise(), inputs, tmp_path, dynamic=False, ge_check=ge_check)
    ops = {op.type for op in runtime.load(tmp_path).graph.op}
    assert {"BitwiseAnd", "BitwiseOr", "LogicalAnd", "LogicalOr"} <= ops


class Clamps(torch.nn.Module):
    def forward(self, x: torch.Tensor, low: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.clamp(-0.5, 0.5),
            x.clamp(min=0.1),
            x.clamp(max=-0.2),
            torch.clamp(x, low, low + 0.3),
            F.relu6(x * 8),
            F.hardtanh(x),
            x.clamp_min(0.2),
        )


def test_clamp_family_matches_eager(tmp_path: Path, ge_check: GeCheck) -> None:
    torch.manual_seed(0)
    _check(
        Clamps(),
        (torch.randn(3, 8), torch.randn(8)),
        tmp_path / "f32",
        dynamic=True,
        ge_check=ge_check,
    )
    ints = torch.tensor([-7, 7, 3, 0])
    _check(
        Clamps(),
        (ints, torch.tensor([1, -1, 2, 0])),
        tmp_path / "i64",
        dynamic=False,
        ge_check=ge_check,
    )


class MoreOps(torch.nn.Module):
    """Rounding, remainders, activations, reductions and reversal, each as its GE operator."""

    def forward(self, x: torch.Tensor, ints: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.floor() + x.ceil() * 2 + x.sign(),
            torch.remainder(x, 0.7) + torch.fmod(x, -0.7),
            torch.remainder(ints, 3) - torch.fmod(ints, 3),
            x.abs().log1p() + x.clamp(max=2).expm1(),
            F.leaky_relu(x, 0.2) + F.elu(x, alpha=0.5) + F.selu(x) + F.celu(x),
            x.amin(dim=1) + x.amax(dim=0).sum() + x.min() + x.max(),
            x.prod(dim=-1, keepdim=True),
            (x > 0).any(dim=1) & (x > -3).all(dim=1),
            (x > 2).any(),
            torch.flip(x, dims=[0, -1]),
            torch.empty_like(x.t(), memory_format=torch.contiguous_format).zero_() + x.t(),
        )


def test_more_ops_match_eager(tmp_path: Path, ge_check: GeCheck) -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(4, 6) * 2, torch.tensor([-7, 7, 3, 0, -2]))
    _check(MoreOps().eval(), inputs, tmp_path, dynamic=False, ge_check=ge_check)
    ops = {op.type for op in runtime.load(tmp_path).graph.op}
    assert {"Floor", "Ceil", "Sign", "FloorMod", "Mod", "Log1p", "Expm1", "LeakyRelu", "Elu"} <= ops
    assert {"ReduceMin", "ReduceMax", "ReduceProd", "ReduceAny", "ReverseV2"} <= ops


class SizeArithmetic(torch.nn.Module):
    """Python arithmetic on sizes, as dynamic exports of GPT-Neo and XLNet trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        window = torch.sym_min(rows, 4) + torch.sym_max(rows, 2) - (rows % 3)
        positions = torch.arange(-rows, window)
        return positions.float().unsqueeze(0) + x.sum(1, keepdim=True)


def test_size_arithmetic_of_dynamic_exports(tmp_path: Path, ge_check: GeCheck) -> None:
    model = SizeArithmetic()
    dynamo_export(torch.randn(5, 3), model=model, export_path=tmp_path, dynamic=True)
    air = ge.ModelDef()
    air.ParseFromString((tmp_path / "export.air").read_bytes())
    ge_check(air.graph[0])
    loaded = runtime.load(tmp_path)
    for rows in (2, 5, 7):
        x = torch.randn(rows, 3)
        (got,) = loaded.run(x.numpy())
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
