"""Render a GE graph as Graphviz DOT text (``npu-graph-export inspect --dot``).

Plain text, no Graphviz needed to produce it: ``dot -Tsvg graph.dot -o graph.svg`` draws it, and
online DOT viewers open it. One node per GE op, labelled with its name and type; one edge per
data input (labelled with the tensor's dtype and shape) and a dashed edge per control input.
"""

from __future__ import annotations

from npu_graph_export._dtypes import dtype_name
from npu_graph_export._proto import ge_ir_pb2 as ge

__all__ = ["render_dot"]

# Shapes by role, so inputs, weights and outputs stand out from compute.
_SHAPES = {
    "Data": "invhouse",
    "Const": "note",
    "FileConstant": "note",
    "NetOutput": "house",
}


def _quote(text: str) -> str:
    """A DOT double-quoted ID: backslashes and quotes escaped, newlines as DOT escapes."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _describe(desc: ge.TensorDescriptor) -> str:
    dims = ", ".join(str(d) for d in desc.shape.dim)
    return f"{dtype_name(desc.dtype).removeprefix('DT_').lower()}[{dims}]"


def render_dot(graph: ge.GraphDef, name: str = "graph") -> str:
    """Return ``graph`` as a Graphviz ``digraph``.

    Args:
        graph: The GE graph.
        name: The digraph's name (shown by some viewers).

    Returns:
        DOT text ending with a newline.
    """
    outputs = {op.name: list(op.output_desc) for op in graph.op}
    lines = [
        f"digraph {_quote(name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    for op in graph.op:
        shape = _SHAPES.get(op.type, "box")
        label = _quote(f"{op.name}\n{op.type}")
        lines.append(f"  {_quote(op.name)} [label={label}, shape={shape}];")
    for op in graph.op:
        for ref in op.input:
            producer, _, index = ref.rpartition(":")
            if not producer:  # a bare name: output 0 of that op
                producer, index = ref, "0"
            if producer not in outputs:
                continue  # the runtime's loader rejects such graphs; draw what exists
            if index == "-1":
                lines.append(f"  {_quote(producer)} -> {_quote(op.name)} [style=dashed];")
                continue
            descs = outputs[producer]
            position = int(index) if index.isdigit() else 0
            label = _describe(descs[position]) if position < len(descs) else f"out {index}"
            lines.append(f"  {_quote(producer)} -> {_quote(op.name)} [label={_quote(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
