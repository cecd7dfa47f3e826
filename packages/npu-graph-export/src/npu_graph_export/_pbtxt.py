"""Render a GE graph as TorchAir's readable ``dynamo.pbtxt`` (TensorFlow NodeDef-like text).

It is not protobuf text format of ``GraphDef``: every op is a ``node { ... }`` block with ``op``,
``input`` lines (control edges as ``^op``) and one ``attr`` entry per GE attribute whose value is
the attribute's own text, plus ``[i]<input>`` / ``[o]<output>`` pseudo-attributes holding each
tensor descriptor, so TensorBoard or Netron can show the graph.
"""

from __future__ import annotations

from google.protobuf import text_format
from google.protobuf.text_encoding import CEscape

from npu_graph_export._proto import ge_ir_pb2 as ge


def _text(message: object) -> str:
    # Big constants would make the file unreadable: show their size instead of their bytes.
    if isinstance(message, ge.AttrDef) and message.WhichOneof("value") == "t":
        clone = ge.AttrDef()
        clone.CopyFrom(message)
        clone.t.data = f"<{len(message.t.data)} bytes>".encode()
        message = clone
    return str(text_format.MessageToString(message, as_one_line=True))


def _attr(lines: list[str], key: str, value: str) -> None:
    lines.append("  attr {")
    lines.append(f'    key: "{CEscape(key, as_utf8=True)}"')
    lines.append("    value {")
    lines.append(f'      s: "{CEscape(value, as_utf8=True)}"')
    lines.append("    }")
    lines.append("  }")


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
            _attr(lines, key, _text(op.attr[key]))
        for desc in op.input_desc:
            _attr(lines, f"[i]{desc.name}", _text(desc))
        for desc in op.output_desc:
            _attr(lines, f"[o]{desc.name}", _text(desc))
        lines.append("}")
    return "\n".join(lines) + "\n"
