"""Render a GE graph as TorchAir's readable ``dynamo.pbtxt`` (TensorFlow ``GraphDef`` text).

Every op is a ``node { ... }`` block with ``op``, ``input`` lines (control edges as ``^op``) and
one ``attr`` entry per GE attribute, plus ``[i]<input>`` / ``[o]<output>`` pseudo-attributes
holding each tensor descriptor as text, as TorchAir writes them. Unlike TorchAir, which turns
every attribute into a string, values that TensorFlow's ``AttrValue`` can hold keep their type
(``i``, ``f``, ``b``, ``type``, lists of them) and constant tensors are written as ``tensor``
values, with an ``_output_shapes`` list per op: Netron, which opens ``.pbtxt`` files as
TensorFlow graphs, then shows constants as tensors (dtype, shape and, for small ones, values) and
tensor shapes on the edges.
"""

from __future__ import annotations

from google.protobuf import text_format
from google.protobuf.text_encoding import CEscape

from npu_graph_export._dtypes import proto_of_attr
from npu_graph_export._proto import ge_ir_pb2 as ge

# Constants up to this size are written with their bytes (shapes, axes, scalars: what one wants
# to read in a viewer); larger ones (weights) by dtype and shape only, to keep the file readable.
INLINE_TENSOR_BYTES = 1024

# GE data type -> TensorFlow DataType name (the same names, except half and bfloat16).
_TF_DTYPES: dict[int, str] = {
    ge.DT_FLOAT: "DT_FLOAT",
    ge.DT_FLOAT16: "DT_HALF",
    ge.DT_BF16: "DT_BFLOAT16",
    ge.DT_DOUBLE: "DT_DOUBLE",
    ge.DT_INT8: "DT_INT8",
    ge.DT_UINT8: "DT_UINT8",
    ge.DT_INT16: "DT_INT16",
    ge.DT_UINT16: "DT_UINT16",
    ge.DT_INT32: "DT_INT32",
    ge.DT_UINT32: "DT_UINT32",
    ge.DT_INT64: "DT_INT64",
    ge.DT_UINT64: "DT_UINT64",
    ge.DT_BOOL: "DT_BOOL",
    ge.DT_STRING: "DT_STRING",
    ge.DT_COMPLEX64: "DT_COMPLEX64",
    ge.DT_COMPLEX128: "DT_COMPLEX128",
}
_UNKNOWN_RANK = [-2]


def _attr_type(value: int) -> str | None:
    """TensorFlow's name for a dtype-valued attribute, or ``None``.

    ``AttrDef.dt`` holds ge::DataType numbers, not the proto enum of tensor descriptors.
    """
    proto = proto_of_attr(value)
    return (
        None if proto is None else _TF_DTYPES.get(proto)
    )  # GE's shape of a tensor whose rank is unknown


def _text(message: object) -> str:
    # Big constants would make the file unreadable: show their size instead of their bytes.
    if isinstance(message, ge.AttrDef) and message.WhichOneof("value") == "t":
        clone = ge.AttrDef()
        clone.CopyFrom(message)
        clone.t.data = f"<{len(message.t.data)} bytes>".encode()
        message = clone
    return str(text_format.MessageToString(message, as_one_line=True))


def _bytes(value: bytes | str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return f'"{CEscape(raw, as_utf8=False)}"'


def _float(value: float) -> str:
    # repr gives inf, -inf and nan, which the protobuf text format reads back.
    return repr(float(value))


def _shape(dims: list[int]) -> str:
    if dims == _UNKNOWN_RANK:
        return "{ unknown_rank: true }"
    return "{ " + " ".join(f"dim {{ size: {d} }}" for d in dims) + " }"


def _tensor(tensor: ge.TensorDef) -> str | None:
    dtype = _TF_DTYPES.get(tensor.desc.dtype)
    if dtype is None:
        return None
    parts = [f"dtype: {dtype}", f"tensor_shape {_shape(list(tensor.desc.shape.dim))}"]
    if len(tensor.data) <= INLINE_TENSOR_BYTES:
        parts.append(f"tensor_content: {_bytes(tensor.data)}")
    return "tensor { " + " ".join(parts) + " }"


def _list(value: ge.AttrDef.ListValue) -> str | None:
    if value.td or value.t or value.g or value.na or value.bt:
        return None  # no AttrValue equivalent: written as text
    items = [f"s: {_bytes(s)}" for s in value.s]
    items += [f"i: {i}" for i in value.i]
    items += [f"f: {_float(f)}" for f in value.f]
    items += [f"b: {'true' if b else 'false'}" for b in value.b]
    for dt in value.dt:
        name = _attr_type(dt)
        if name is None:
            return None
        items.append(f"type: {name}")
    return "list { " + " ".join(items) + " }"


def _typed(attr: ge.AttrDef) -> str | None:
    """The TensorFlow ``AttrValue`` text of ``attr``, or ``None`` when only text fits."""
    kind = attr.WhichOneof("value")
    if kind == "s":
        return f"s: {_bytes(attr.s)}"
    if kind == "i":
        return f"i: {attr.i}"
    if kind == "f":
        return f"f: {_float(attr.f)}"
    if kind == "b":
        return f"b: {'true' if attr.b else 'false'}"
    if kind == "dt" and _attr_type(attr.dt) is not None:
        return f"type: {_attr_type(attr.dt)}"
    if kind == "t":
        return _tensor(attr.t)
    if kind == "list":
        return _list(attr.list)
    return None


def _attr(lines: list[str], key: str, value: str) -> None:
    lines.append("  attr {")
    lines.append(f'    key: "{CEscape(key, as_utf8=True)}"')
    lines.append("    value {")
    lines.append(f"      {value}")
    lines.append("    }")
    lines.append("  }")


def _string(text: str) -> str:
    return f's: "{CEscape(text, as_utf8=True)}"'


def render_pbtxt(graph: ge.GraphDef) -> str:
    """Return the readable text of ``graph``."""
    lines: list[str] = []
    for op in graph.op:
        lines.append("node {")
        lines.append(f'  name: "{CEscape(op.name, as_utf8=True)}"')
        lines.append(f'  op: "{CEscape(op.type, as_utf8=True)}"')
        for ref in op.input:
            producer, _, index = ref.rpartition(":")
            shown = f"^{producer}" if index == "-1" else ref
            lines.append(f'  input: "{CEscape(shown, as_utf8=True)}"')
        for key in sorted(op.attr):
            typed = _typed(op.attr[key])
            _attr(lines, key, typed if typed is not None else _string(_text(op.attr[key])))
        for desc in op.input_desc:
            _attr(lines, f"[i]{desc.name}", _string(_text(desc)))
        for desc in op.output_desc:
            _attr(lines, f"[o]{desc.name}", _string(_text(desc)))
        if op.output_desc and "_output_shapes" not in op.attr:
            shapes = " ".join(f"shape {_shape(list(d.shape.dim))}" for d in op.output_desc)
            _attr(lines, "_output_shapes", f"list {{ {shapes} }}")
        lines.append("}")
    return "\n".join(lines) + "\n"
