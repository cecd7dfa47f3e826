"""Pictures of an exported graph: ``dynamo.pbtxt`` as a TensorFlow graph (what Netron opens) and
``npu-graph-export inspect --dot`` (Graphviz)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from npu_graph_export import dynamo_export, runtime
from npu_graph_export.cli import main

# TensorFlow's DataType numbers (tensorflow/core/framework/types.proto).
_TF_DTYPES = {
    "DT_INVALID": 0,
    "DT_FLOAT": 1,
    "DT_DOUBLE": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 5,
    "DT_INT8": 6,
    "DT_STRING": 7,
    "DT_COMPLEX64": 8,
    "DT_INT64": 9,
    "DT_BOOL": 10,
    "DT_BFLOAT16": 14,
    "DT_UINT16": 17,
    "DT_COMPLEX128": 18,
    "DT_HALF": 19,
    "DT_UINT32": 22,
    "DT_UINT64": 23,
}


def _tf_graphdef() -> Any:
    """The message class of TensorFlow's ``GraphDef``: the subset Netron reads from a .pbtxt.

    Field names and numbers follow tensorflow/core/framework/{graph,node_def,attr_value,tensor,
    tensor_shape,types}.proto, so a text that parses here parses as a TensorFlow graph.
    """
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="tf_subset.proto", package="tfs", syntax="proto3")
    enum = f.enum_type.add(name="DataType")
    for name, number in _TF_DTYPES.items():
        enum.value.add(name=name, number=number)

    def field(
        msg: Any,
        name: str,
        number: int,
        kind: int,
        label: int = 1,
        type_name: str = "",
        oneof: int | None = None,
    ) -> None:
        entry = msg.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            entry.type_name = type_name
        if oneof is not None:
            entry.oneof_index = oneof

    rep = F.LABEL_REPEATED
    shape = f.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    field(dim, "size", 1, F.TYPE_INT64)
    field(dim, "name", 2, F.TYPE_STRING)
    field(shape, "dim", 2, F.TYPE_MESSAGE, rep, ".tfs.TensorShapeProto.Dim")
    field(shape, "unknown_rank", 3, F.TYPE_BOOL)
    tensor = f.message_type.add(name="TensorProto")
    field(tensor, "dtype", 1, F.TYPE_ENUM, type_name=".tfs.DataType")
    field(tensor, "tensor_shape", 2, F.TYPE_MESSAGE, type_name=".tfs.TensorShapeProto")
    field(tensor, "tensor_content", 4, F.TYPE_BYTES)
    attr = f.message_type.add(name="AttrValue")
    lst = attr.nested_type.add(name="ListValue")
    field(lst, "s", 2, F.TYPE_BYTES, rep)
    field(lst, "i", 3, F.TYPE_INT64, rep)
    field(lst, "f", 4, F.TYPE_FLOAT, rep)
    field(lst, "b", 5, F.TYPE_BOOL, rep)
    field(lst, "type", 6, F.TYPE_ENUM, rep, ".tfs.DataType")
    field(lst, "shape", 7, F.TYPE_MESSAGE, rep, ".tfs.TensorShapeProto")
    field(lst, "tensor", 8, F.TYPE_MESSAGE, rep, ".tfs.TensorProto")
    attr.oneof_decl.add(name="value")
    field(attr, "list", 1, F.TYPE_MESSAGE, type_name=".tfs.AttrValue.ListValue", oneof=0)
    field(attr, "s", 2, F.TYPE_BYTES, oneof=0)
    field(attr, "i", 3, F.TYPE_INT64, oneof=0)
    field(attr, "f", 4, F.TYPE_FLOAT, oneof=0)
    field(attr, "b", 5, F.TYPE_BOOL, oneof=0)
    field(attr, "type", 6, F.TYPE_ENUM, type_name=".tfs.DataType", oneof=0)
    field(attr, "shape", 7, F.TYPE_MESSAGE, type_name=".tfs.TensorShapeProto", oneof=0)
    field(attr, "tensor", 8, F.TYPE_MESSAGE, type_name=".tfs.TensorProto", oneof=0)
    node = f.message_type.add(name="NodeDef")
    entry = node.nested_type.add(name="AttrEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_MESSAGE, type_name=".tfs.AttrValue")
    field(node, "name", 1, F.TYPE_STRING)
    field(node, "op", 2, F.TYPE_STRING)
    field(node, "input", 3, F.TYPE_STRING, rep)
    field(node, "device", 4, F.TYPE_STRING)
    field(node, "attr", 5, F.TYPE_MESSAGE, rep, ".tfs.NodeDef.AttrEntry")
    graph = f.message_type.add(name="GraphDef")
    field(graph, "node", 1, F.TYPE_MESSAGE, rep, ".tfs.NodeDef")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tfs.GraphDef"))


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x).reshape(2, 2, 8), dim=-1)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pictures") / "out"
    model = _Small().eval()
    dynamo_export(torch.randn(4, 8), model=model, export_path=str(out))
    return out


def test_pbtxt_parses_as_a_tensorflow_graph_with_const_tensors(export_dir: Path) -> None:
    parsed = text_format.Parse((export_dir / "dynamo.pbtxt").read_text(), _tf_graphdef()())
    graph = runtime.load(export_dir).graph
    assert [n.name for n in parsed.node] == [op.name for op in graph.op]
    weight = _Small().proj.weight.detach().numpy()
    consts = [n for n in parsed.node if n.op == "Const"]
    assert consts
    found = False
    for node in consts:
        tensor = node.attr["value"].tensor
        assert tensor.dtype != 0, f"{node.name}: value is not a tensor"
        dims = [d.size for d in tensor.tensor_shape.dim]
        if tensor.dtype == _TF_DTYPES["DT_FLOAT"] and dims == [8, 8]:
            values = np.frombuffer(tensor.tensor_content, dtype=np.float32).reshape(8, 8)
            found = found or bool(
                np.array_equal(values, weight) or np.array_equal(values, weight.T)
            )
    assert found, "the projection weight is not among the Const tensors"
    softmax = next(n for n in parsed.node if n.op == "SoftmaxV2")
    assert [d.size for d in softmax.attr["_output_shapes"].list.shape[0].dim] == [2, 2, 8]
    assert list(softmax.attr["axes"].list.i) == [2]  # typed ints, not a string


def _parse_dot(text: str) -> tuple[str, list[str], list[tuple[str, str]]]:
    """A structural DOT reader: the digraph's name, its node IDs and edges (quoted IDs only)."""
    quoted = r'"((?:[^"\\]|\\.)*)"'
    lines = text.strip().splitlines()
    head = re.fullmatch(rf"digraph {quoted} \{{", lines[0])
    assert head, lines[0]
    assert lines[-1] == "}"
    nodes: list[str] = []
    edges: list[tuple[str, str]] = []
    for line in lines[1:-1]:
        line = line.strip()
        if edge := re.fullmatch(rf"{quoted} -> {quoted}(?: \[.*\])?;", line):
            edges.append((edge.group(1), edge.group(2)))
        elif node := re.fullmatch(rf"{quoted} \[.*\];", line):
            nodes.append(node.group(1))
        else:
            assert re.fullmatch(r"(\w+=\w+|(node|edge) \[.*\]);", line), line
    return head.group(1), nodes, edges


def test_inspect_dot_draws_one_node_per_op_and_only_declared_edges(
    export_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(export_dir), "--dot"]) == 0
    name, nodes, edges = _parse_dot(capsys.readouterr().out)
    graph = runtime.load(export_dir).graph
    assert name == "export"
    assert sorted(nodes) == sorted(op.name for op in graph.op)
    assert len(nodes) == len(set(nodes))
    declared = set(nodes)
    assert edges
    assert all(a in declared and b in declared for a, b in edges)
    # One edge per fed input (data or control); an unfed optional input is an empty name.
    assert len(edges) == sum(1 for op in graph.op for ref in op.input if ref)


def test_inspect_dot_and_json_are_exclusive(export_dir: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["inspect", str(export_dir), "--dot", "--json"])
    assert info.value.code == 2


def test_pbtxt_dtype_attributes_name_tensorflow_types(tmp_path: Path) -> None:
    from npu_graph_export import ExportConfig

    # Weights in files: FileConstant ops carry a dtype-valued attribute (ge::DataType numbers).
    dynamo_export(
        torch.randn(4, 8),
        model=_Small().eval(),
        export_path=str(tmp_path / "out"),
        config=ExportConfig(embed_limit_bytes=0),
    )
    parsed = text_format.Parse((tmp_path / "out" / "dynamo.pbtxt").read_text(), _tf_graphdef()())
    files = [n for n in parsed.node if n.op == "FileConstant"]
    assert files
    assert {n.attr["dtype"].type for n in files} == {_TF_DTYPES["DT_FLOAT"]}
