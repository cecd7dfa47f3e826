"""Turn an ExportedProgram's ATen graph into a GE graph (weights still unresolved)."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from npu_graph_export._converters import Context, converter_for, ge_dtype, static_shape
from npu_graph_export._converters._base import target_name
from npu_graph_export._graph import DIMS_ATTR, AttrValue, GraphBuilder, Tensor
from npu_graph_export._locations import user_frame
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export._refusals import FAILED, Refusals
from npu_graph_export.errors import ExportError, NpuGraphExportError, UnsupportedOpError


@dataclass
class Weight:
    """A parameter, buffer or lifted constant that becomes a Const or FileConstant op."""

    op_name: str
    qualified_name: str
    tensor: torch.Tensor


@dataclass
class Converted:
    """The GE graph of one model plus what the writer needs to finish it."""

    graph: ge.GraphDef
    weights: list[Weight] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)


def module_path(node: fx.Node) -> str:
    """Where in the user's model ``node`` came from: the user's source line and the module.

    The line is the deepest frame outside torch (``modeling_swin.py:271 in maybe_pad``, not
    ``torch/nn/functional.py``, where ``F.pad`` runs); the module is the innermost one of
    ``nn_module_stack``, in brackets (``[swin.embeddings: SwinEmbeddings]``).
    """
    parts: list[str] = []
    line = user_frame(node.meta.get("stack_trace") or "")
    if line:
        parts.append(line)
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, kind = list(stack.values())[-1]
        kind_name = kind if isinstance(kind, str) else getattr(kind, "__qualname__", str(kind))
        parts.append(f"[{path or '<root>'!s}: {kind_name.rsplit('.', 1)[-1]}]")
    return " ".join(parts) or "unknown location"


def op_name(target: Any) -> str:
    """A readable name for an FX call target (``aten.add.Tensor``)."""
    return target_name(target)


def _refused_name(node: fx.Node) -> str:
    """The op a refusal names: for an output read by ``getitem``, the op that made it."""
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
        return f"{op_name(node.args[0].target)} output {node.args[1]}"
    return op_name(node.target)


def _dim_symbol(size: Any) -> str:
    """The symbol of a dynamic dimension (``s0``), or "" for a static or derived one."""
    if isinstance(size, torch.SymInt):
        name = str(size.node.expr)
        return name if name.isidentifier() else ""
    return ""


def _module_stack_attr(node: fx.Node) -> str:
    return str(node.meta.get("nn_module_stack") or {})


def convert(
    program: ExportedProgram, graph_name: str, *, record_module_stack: bool = False
) -> Converted:
    """Convert ``program`` to GE ops; weights become placeholder ``Const`` ops to fill later.

    Raises:
        UnsupportedOpError: some ATen ops cannot be converted; one error names every such op
            with its count and where it first came from.
        ExportError: the model mutates a buffer or returns something that is not a tensor.
    """
    builder = GraphBuilder(graph_name)
    ctx = Context(builder)
    converted = Converted(builder.graph)
    signature = program.graph_signature
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    state = {**program.state_dict, **program.constants}
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]

    # Weights first (their op name is the placeholder's), then user inputs as Data 0..n-1.
    # Inputs the model writes in place (a KV cache): RefData inputs updated with Assign, as
    # TorchAir writes mutated inputs, so the device buffer itself receives the new values.
    mutated = set(signature.user_inputs_to_mutate.values())
    # Buffers the model writes (a static KV cache registered as buffers) are state, which an
    # offline graph keeps outside: they become RefData inputs after the user inputs.
    mutated_buffers = set(signature.buffers_to_mutate.values())
    user_index = 0
    state_inputs: list[fx.Node] = []
    for node in placeholders:
        spec = specs[node.name]
        value = node.meta.get("val")
        if spec.kind == InputKind.BUFFER and str(spec.target) in mutated_buffers:
            state_inputs.append(node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = state[str(spec.target)]
            tensor = tensor.detach() if isinstance(tensor, torch.Tensor) else tensor
            shape = tuple(tensor.shape)
            ctx.env[node] = builder.add1("Const", node.name, [], ge_dtype(tensor.dtype), shape)
            converted.weights.append(Weight(ctx.env[node].op, str(spec.target), tensor))
        elif spec.kind == InputKind.USER_INPUT and isinstance(value, torch.Tensor):
            dtype, shape = ge_dtype(value.dtype), static_shape(value)
            attrs: dict[str, AttrValue] = {"index": user_index}
            symbols = [_dim_symbol(d) for d in value.shape]
            if any(symbols):
                attrs[DIMS_ATTR] = ",".join(symbols)
            kind = "RefData" if spec.arg.name in mutated else "Data"
            data = builder.add1(kind, node.name, [], dtype, shape, attrs)
            op = builder.graph.op[-1]
            op.input_desc.add().CopyFrom(op.output_desc[0])
            op.input_desc[0].name = "x"
            user_index += 1
            ctx.env[node] = data
        elif spec.kind == InputKind.USER_INPUT and isinstance(value, torch.SymInt):
            # A Python int exported as dynamic: a 0-d int64 graph input.
            attrs = {"index": user_index}
            data = builder.add1("Data", node.name, [], ge.DT_INT64, (), attrs)
            op = builder.graph.op[-1]
            op.input_desc.add().CopyFrom(op.output_desc[0])
            op.input_desc[0].name = "x"
            user_index += 1
            ctx.env[node] = data
        elif spec.kind == InputKind.USER_INPUT:
            ctx.env[node] = value  # a Python scalar Dynamo specialised on
        else:
            raise ExportError(
                f"input {node.name!r} of kind {spec.kind.name} cannot be exported; export a "
                "model whose inputs are tensors, parameters and buffers"
            )

    for node in state_inputs:
        value = node.meta["val"]
        attrs = {"index": user_index}
        ctx.env[node] = builder.add1(
            "RefData", node.name, [], ge_dtype(value.dtype), static_shape(value), attrs
        )
        op = builder.graph.op[-1]
        op.input_desc.add().CopyFrom(op.output_desc[0])
        op.input_desc[0].name = "x"
        user_index += 1

    outputs: list[Tensor] = []
    assigns: list[Tensor] = []
    # Every node is tried, so one refusal names every op that cannot be exported: a node whose
    # input failed is skipped (its own converter cannot run), but still counted when its op
    # has no converter at all.
    refusals = Refusals()
    for node in program.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            if not refusals:
                outputs, assigns = _outputs(ctx, program, node)
            continue
        if node.op != "call_function":
            if node.op != "get_attr":  # a subgraph of a higher-order op: counted at its call
                refusals.add(
                    str(node.target), module_path(node), f"FX {node.op} nodes cannot be exported"
                )
            continue
        converter = converter_for(node.target)
        if converter is None:
            hint = (
                "control flow (torch.cond and other higher-order ops) has no GE converter: "
                "compute both branches and select with torch.where"
                if "higher_order" in str(node.target)
                else None
            )
            refusals.add(op_name(node.target), module_path(node), hint)
            ctx.env[node] = FAILED
            continue
        if any(ctx.env.get(arg) is FAILED for arg in node.all_input_nodes):
            ctx.env[node] = FAILED
            continue
        ctx.node = node
        builder.scope_attrs = (
            {"nn_module_stack": _module_stack_attr(node)} if record_module_stack else {}
        )
        try:
            ctx.env[node] = converter(ctx, node)
        except UnsupportedOpError as error:
            refusals.add(_refused_name(node), module_path(node), error.message)
            ctx.env[node] = FAILED
        except NpuGraphExportError:
            raise
        except Exception as error:
            raise ExportError(
                f"converting {op_name(node.target)} (from {module_path(node)}) failed: "
                f"{type(error).__name__}: {error}; please report this with the model"
            ) from error
    if refusals:
        raise refusals.error()
    builder.scope_attrs = {}
    builder.finish(outputs, controls=[a.op for a in assigns])
    _order_assigns(builder.graph, assigns)
    converted.groups = dict(ctx.groups)
    kept = {op.name for op in builder.graph.op}
    converted.weights = [w for w in converted.weights if w.op_name in kept]
    return converted


def _outputs(
    ctx: Context, program: ExportedProgram, node: fx.Node
) -> tuple[list[Tensor], list[Tensor]]:
    """The graph outputs, and one ``Assign`` per input the model updates in place."""
    results: list[Tensor] = []
    assigns: list[Tensor] = []
    signature = program.graph_signature
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    buffers = {str(spec.target): spec.arg.name for spec in signature.input_specs if spec.target}
    values = node.args[0]
    for spec, arg in zip(signature.output_specs, values, strict=True):  # type: ignore[arg-type]
        value = ctx.value(arg)
        if spec.kind in (OutputKind.USER_INPUT_MUTATION, OutputKind.BUFFER_MUTATION):
            name = str(spec.target)
            if spec.kind == OutputKind.BUFFER_MUTATION:
                name = buffers[name]
            ref = ctx.env[placeholders[name]]
            ctx.node = arg if isinstance(arg, fx.Node) else node
            new = ctx.tensor(arg, ref.dtype)
            assigns.append(
                ctx.builder.add1(
                    "Assign",
                    f"{ref.op}/Assign",
                    [ref, new],
                    ref.dtype,
                    ref.shape,
                    {"validate_shape": True, "use_locking": False},
                )
            )
            continue
        if spec.kind != OutputKind.USER_OUTPUT:
            raise ExportError(
                f"the model updates {spec.target!r} in place ({spec.kind.name}); an offline "
                "graph has no state, so return the new value as an output instead"
            )
        if not isinstance(value, Tensor):
            raise ExportError(
                f"model output {arg!s} is a {type(value).__name__}, not a tensor; return only "
                "tensors from forward()"
            )
        results.append(value)
    return results, assigns


def _order_assigns(graph: ge.GraphDef, assigns: list[Tensor]) -> None:
    """Make every other reader of an updated input run before its ``Assign`` (control edges).

    GE's RefData is the caller's buffer: an op reading the old value after the Assign would
    see the new one.
    """
    for assign in assigns:
        op = next(o for o in graph.op if o.name == assign.op)
        ref = op.input[0]
        readers = [o.name for o in graph.op if o.name != op.name and ref in o.input]
        op.input.extend(f"{name}:-1" for name in readers)
