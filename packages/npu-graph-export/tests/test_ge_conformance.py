"""Exported graphs read the way GE reads them: dtype numberings, op signatures, name maps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_graph_export import ExportConfig, dynamo_export, runtime
from npu_graph_export._dtypes import TYPES, attr_of_proto, proto_of_attr
from npu_graph_export._opdefs import OPS
from npu_graph_export._proto import ge_ir_pb2 as ge

Check = Callable[[ge.GraphDef], set[str]]

# (proto enum of TensorDescriptor.dtype, ge::DataType of dtype-valued attributes), from
# ge_ir.proto and metadef's c_types.h / TorchAir's DataType class.
EXPECTED_NUMBERINGS = {
    "float32": (1, 0),
    "float16": (2, 1),
    "int8": (3, 2),
    "uint8": (4, 4),
    "int16": (5, 6),
    "uint16": (6, 7),
    "int32": (7, 3),
    "int64": (8, 9),
    "uint32": (9, 8),
    "uint64": (10, 10),
    "bool": (11, 12),
    "float64": (12, 11),
    "complex64": (16, 16),
    "complex128": (17, 17),
    "bfloat16": (27, 27),
    "float8_e5m2": (34, 35),
    "float8_e4m3fn": (35, 36),
}


def test_both_dtype_numberings_match_ge() -> None:
    from npu_graph_export._converters import ge_dtype

    for name, (proto, c) in EXPECTED_NUMBERINGS.items():
        got = ge_dtype(getattr(torch, name))
        assert got == proto, name
        assert attr_of_proto(got) == c, name
        assert proto_of_attr(c) == proto, name
    assert {t.proto for t in TYPES} == {p for p, _ in EXPECTED_NUMBERINGS.values()}
    assert proto_of_attr(28) is None  # ge::DT_UNDEFINED


class Casts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x @ self.w
        return y.relu().to(torch.bool), y.to(torch.float16), (y * 4).to(torch.int64)


@pytest.fixture(scope="module")
def casts_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("casts")
    dynamo_export(
        torch.randn(2, 3),
        model=Casts().eval(),
        export_path=path,
        dynamic=True,
        config=ExportConfig(embed_limit_bytes=0),
    )
    return path


def test_dtype_attributes_use_ge_c_numbering(
    casts_export: Path, ge_check: Check, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(casts_export / "export.air")
    ge_check(graph)
    casts = {op.output_desc[0].dtype: op.attr["dst_type"].i for op in graph.op if op.type == "Cast"}
    assert casts[ge.DT_BOOL] == 12  # not 11 (DOUBLE)
    assert casts[ge.DT_FLOAT16] == 1
    assert casts[ge.DT_INT64] == 9
    (weight,) = [op for op in graph.op if op.type == "FileConstant"]
    assert weight.attr["dtype"].dt == 0  # float32, not 1 (float16)
    assert weight.output_desc[0].dtype == ge.DT_FLOAT


def test_runtime_reads_dtype_attributes_as_ge_does(casts_export: Path, tmp_path: Path) -> None:
    # Rewrite the FileConstant as GE would see a float16 weight (ge::DT_FLOAT16 = 1) of half
    # the bytes: the runtime must read the same numbers GE reads.
    model = ge.ModelDef()
    model.ParseFromString((casts_export / "export.air").read_bytes())
    (weight,) = [op for op in model.graph[0].op if op.type == "FileConstant"]
    values = np.arange(12, dtype=np.float16).reshape(3, 4)
    weight.attr["dtype"].dt = 1  # type: ignore[assignment]
    weight.output_desc[0].dtype = ge.DT_FLOAT16
    weight.attr["file_path"].s = b"w16"
    values.tofile(tmp_path / "w16")
    for op in model.graph[0].op:  # the consumer now gets float16: cast it back for the matmul
        for desc in op.input_desc:
            if desc.name == "x2" and op.type in {"MatMulV2", "BatchMatMulV2"}:
                desc.dtype = ge.DT_FLOAT16
    (tmp_path / "m.air").write_bytes(model.SerializeToString())
    loaded = runtime.load(tmp_path / "m.air")
    x = np.ones((2, 3), np.float32)
    flags, half, ints = loaded.run(x)
    expected = x @ values.astype(np.float32)
    np.testing.assert_allclose(half, expected)
    assert half.dtype == np.float16
    assert flags.dtype == np.bool_
    assert ints.dtype == np.int64
    np.testing.assert_array_equal(ints, (expected * 4).astype(np.int64))


def test_unfed_optional_inputs_written_as_torchair_does(
    decoder_exports: Callable[[str, bool], Path],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(decoder_exports("gpt2", False) / "export.air")
    matmuls = [op for op in graph.op if op.type in {"MatMulV2", "BatchMatMulV2"}]
    no_bias = [op for op in matmuls if op.input[2] == ""]
    assert no_bias  # lm_head and attention products
    for op in matmuls:
        assert [d.name for d in op.input_desc] == ["x1", "x2", "bias", "offset_w"]
        assert op.input[3] == ""
        assert op.input_desc[3].attr["_is_unfed_optional"].i == 1
        assert op.input_desc[3].dtype == ge.DT_UNDEFINED


def test_every_op_carries_name_maps_and_net_output_inputs_are_numbered(
    decoder_exports: Callable[[str, bool], Path],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(decoder_exports("llama", True) / "export.air")
    for op in graph.op:
        assert list(op.attr["_input_name_key"].list.s) == [d.name.encode() for d in op.input_desc]
        assert list(op.attr["_output_name_value"].list.i) == list(range(len(op.output_desc)))
    (net,) = [op for op in graph.op if op.type == "NetOutput"]
    assert [d.name for d in net.input_desc] == ["input0"]


def test_dynamic_sizes_read_with_int_shape_dtype_and_forced_unknown_gather(
    decoder_exports: Callable[[str, bool], Path],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(decoder_exports("llama", True) / "export.air")
    shapes = [op for op in graph.op if op.type == "Shape"]
    assert shapes
    assert all(op.attr["dtype"].WhichOneof("value") == "i" for op in shapes)
    assert all(op.attr["dtype"].i == 9 for op in shapes)  # ge::DT_INT64
    names = {op.name for op in shapes}
    readers = [op for op in graph.op if op.input and op.input[0].split(":")[0] in names]
    assert readers
    assert all(op.attr["_force_unknown_shape"].b for op in readers)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_decoder_graphs_conform_to_ge_op_definitions(
    decoder_exports: Callable[[str, bool], Path],
    ge_check: Check,
    name: str,
    dynamic: bool,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    ge_check(read_graph(decoder_exports(name, dynamic) / "export.air"))


def test_split_dim_is_int32(
    tmp_path: Path, ge_check: Check, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    class Split(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            a, b = x.split([1, 3], dim=-1)
            return b, a

    x = torch.randn(2, 4)
    dynamo_export(x, model=Split(), export_path=tmp_path)
    graph = read_graph(tmp_path / "export.air")
    ge_check(graph)
    (split,) = [op for op in graph.op if op.type == "SplitV"]
    assert split.input_desc[2].dtype == ge.DT_INT32
    b, a = runtime.load(tmp_path).run(x.numpy())
    np.testing.assert_array_equal(a, x[:, :1].numpy())
    np.testing.assert_array_equal(b, x[:, 1:].numpy())


def test_exporter_op_catalogue_agrees_with_ge(ge_op_table: dict[str, object]) -> None:
    for op_type, spec in OPS.items():
        reference = ge_op_table[op_type]
        names = tuple(n.rstrip("?") for n in reference.inputs)  # type: ignore[attr-defined]
        assert spec.inputs == names, op_type
        optional = {n[:-1] for n in reference.inputs if n.endswith("?")}  # type: ignore[attr-defined]
        assert spec.optional == optional, op_type
        assert spec.outputs == reference.outputs, op_type  # type: ignore[attr-defined]


def test_runtime_loads_a_weight_over_two_to_the_28_elements(tmp_path: Path) -> None:
    from npu_graph_export._graph import DType, GraphBuilder, Tensor

    count = (1 << 28) + 8  # uint8: 256 MiB, past the old per-tensor element cap
    builder = GraphBuilder("big")
    weight = builder.add1(
        "FileConstant",
        "w",
        [],
        ge.DT_UINT8,
        (count,),
        {"shape": [count], "dtype": DType(ge.DT_UINT8), "file_path": "w", "file_id": ""},
    )
    data = builder.add1("Data", "i", [], ge.DT_INT64, (1,), {"index": 0})
    axis = builder.const(np.int64(0), "axis")
    picked = builder.add1(
        "GatherV2", "g", [weight, data, axis], ge.DT_UINT8, (1,), {"batch_dims": 0}
    )
    graph = builder.finish([Tensor(picked.op, 0, picked.dtype, picked.shape)])
    model = ge.ModelDef(name="big")
    model.graph.add().CopyFrom(graph)
    (tmp_path / "big.air").write_bytes(model.SerializeToString())
    values = np.zeros(count, np.uint8)
    values[-1] = 7
    values.tofile(tmp_path / "w")
    del values
    (got,) = runtime.load(tmp_path / "big.air").run(np.array([count - 1]))
    assert got.tolist() == [7]


@pytest.mark.parametrize(
    ("dtype", "proto"),
    [
        (torch.float8_e4m3fn, ge.DT_FLOAT8_E4M3FN),
        (torch.float8_e5m2, ge.DT_FLOAT8_E5M2),
        (torch.uint16, ge.DT_UINT16),
        (torch.uint32, ge.DT_UINT32),
        (torch.uint64, ge.DT_UINT64),
    ],
)
def test_fp8_and_unsigned_weights_export_and_run(
    tmp_path: Path,
    dtype: torch.dtype,
    proto: int,
    ge_check: Check,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            values = torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.25, -448.0]])
            if not dtype.is_floating_point:
                values = values.abs()
            self.register_buffer("w", values.to(dtype))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w.to(torch.float32)

    model = Scaled()
    x = torch.randn(2, 3)
    dynamo_export(x, model=model, export_path=tmp_path, config=ExportConfig(embed_limit_bytes=0))
    graph = read_graph(tmp_path / "export.air")
    ge_check(graph)
    (weight,) = [op for op in graph.op if op.type == "FileConstant"]
    assert weight.output_desc[0].dtype == proto
    assert weight.attr["dtype"].dt == attr_of_proto(proto)
    (got,) = runtime.load(tmp_path).run(x.numpy())
    np.testing.assert_array_equal(got, model(x).numpy())


def test_remaining_op_types_conform(
    tmp_path: Path, ge_check: Check, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    # The decoder, op-zoo, transformers, KV-cache and collective tests check the other types;
    # these are the converters' op types none of those models produce.
    class Rest(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            flags = ((x < 0.5) != (x > 0)).float()
            return flags + torch.log(x.abs() + 1)

    x = torch.randn(3, 4)
    dynamo_export(x, model=Rest(), export_path=tmp_path)
    types = ge_check(read_graph(tmp_path / "export.air"))
    assert {"Less", "NotEqual", "Log"} <= types
    (got,) = runtime.load(tmp_path).run(x.numpy())
    np.testing.assert_allclose(got, Rest()(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_runtime_casts_to_narrow_floats_round_as_torch(tmp_path: Path, dtype: torch.dtype) -> None:
    class RoundTrip(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(dtype).to(torch.float32) * 1.0

    generator = torch.Generator().manual_seed(0)
    scales = torch.logspace(-9, 3, 2000)
    x = torch.cat(
        [
            torch.randn(2000, generator=generator) * scales,
            torch.tensor([0.0, -0.0, 448.0, 464.0, 465.0, 57344.0, 61440.0, 1e6, -1e9]),
            torch.tensor([float("inf"), float("nan")]),
        ]
    )
    dynamo_export(x, model=RoundTrip(), export_path=tmp_path)
    (got,) = runtime.load(tmp_path).run(x.numpy())
    expected = RoundTrip()(x)
    # The runtime saturates an e4m3fn overflow to the largest value, as torch does from 2.13 on;
    # torch 2.11 made it NaN. Only an overflow of a number may differ, and only in that way.
    overflow = expected.isnan() & ~x.isnan()
    largest = torch.finfo(dtype).max
    expected = torch.where(overflow, torch.copysign(torch.tensor(largest), x), expected)
    np.testing.assert_array_equal(got, expected.numpy())  # NaN positions equal too


def test_runtime_creates_a_tensor_over_two_to_the_28_elements(tmp_path: Path) -> None:
    class Big(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            big = torch.ones((1 << 28) + 8, dtype=torch.uint8)  # 256 MiB
            return big[-2:] + x

    x = torch.tensor([1, 2], dtype=torch.uint8)
    dynamo_export(x, model=Big(), export_path=tmp_path)
    (got,) = runtime.load(tmp_path).run(x.numpy())
    assert got.tolist() == [2, 3]
