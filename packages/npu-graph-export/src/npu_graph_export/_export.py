"""``dynamo_export``: trace, convert, choose how weights are stored, write atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from npu_graph_export._atc import model_relation_config, numa_config, to_json
from npu_graph_export._config import ExportConfig, resolve_config
from npu_graph_export._convert import Converted, convert
from npu_graph_export._converters import ge_dtype
from npu_graph_export._graph import WEIGHT_ATTR, DType, set_attr, tensor_desc
from npu_graph_export._paths import (
    check_export_name,
    check_export_path,
    check_target,
    weight_file_name,
    write_files,
)
from npu_graph_export._pbtxt import render_pbtxt
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export._trace import trace
from npu_graph_export.errors import ExportError, UnsupportedOpError


@dataclass(frozen=True)
class ExportResult:
    """What :func:`dynamo_export` wrote.

    Attributes:
        air: The ``.air`` model file.
        pbtxt: The readable ``dynamo.pbtxt``.
        weight_files: Raw weight files (empty when weights are embedded in the ``.air``).
        config_files: ATC config templates written by this rank.
        rank: This process's rank, or None outside torch.distributed.
        ops: Number of GE ops in the graph, by type.
    """

    air: Path
    pbtxt: Path
    weight_files: tuple[Path, ...] = ()
    config_files: tuple[Path, ...] = ()
    rank: int | None = None
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def externalized(self) -> bool:
        """True when weights live in their own files (``FileConstant`` ops)."""
        return bool(self.weight_files)


def supported_ops() -> list[str]:
    """Names of the ATen (and Python operator) targets that have a GE converter, sorted."""
    from npu_graph_export._convert import op_name
    from npu_graph_export._converters import CONVERTERS, NAMED_CONVERTERS

    return sorted({op_name(target) for target in CONVERTERS} | set(NAMED_CONVERTERS))


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes()) if flat.numel() else b""


def _distributed() -> tuple[int, list[int]] | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), [int(r) for r in dist.get_process_group_ranks(dist.group.WORLD)]


def _model_bytes(model_name: str, graph: ge.GraphDef) -> int:
    """Size of ``ModelDef(name, version=1, graph=[graph])`` serialised, without building it."""
    graph_bytes = int(graph.ByteSize())
    length_bytes = max(1, (graph_bytes.bit_length() + 6) // 7)  # varint length prefix
    wrapper = int(ge.ModelDef(name=model_name, version=1).ByteSize())
    return wrapper + 1 + length_bytes + graph_bytes


def _resolve_weights(
    converted: Converted, options: ExportConfig, weight_dir: Path, model_name: str
) -> dict[str, bytes]:
    """Fill the weight ops in place (all Const or all FileConstant); return files to write.

    Weights are embedded when the resulting ``.air`` is at most ``embed_limit_bytes`` long.
    """
    ops = {op.name: op for op in converted.graph.op}
    payloads = [(w, _tensor_bytes(w.tensor)) for w in converted.weights]
    for weight, _ in payloads:
        # Private attribute (GE ignores "_" attrs): lets tools tell weights from small constants.
        set_attr(ops[weight.op_name].attr[WEIGHT_ATTR], weight.qualified_name)
    # A lower bound of the embedded size (no tensor descriptors yet): if it is already over the
    # limit, skip building the embedded graph (which could be past protobuf's 2 GiB).
    estimate = converted.graph.ByteSize() + sum(len(data) for _, data in payloads)
    if estimate <= options.embed_limit_bytes:
        for weight, data in payloads:
            value = ops[weight.op_name].attr["value"].t
            value.desc.CopyFrom(
                tensor_desc("y", ge_dtype(weight.tensor.dtype), list(weight.tensor.shape))
            )
            value.data = data
        if _model_bytes(model_name, converted.graph) <= options.embed_limit_bytes:
            return {}
    files: dict[str, bytes] = {}
    used: set[str] = set()
    for weight, data in payloads:
        op = ops[weight.op_name]
        name = weight_file_name(weight.qualified_name)
        while name in used:  # two names that differ only in '.' vs '_'
            name += "_"
        used.add(name)
        op.type = "FileConstant"
        if "value" in op.attr:
            del op.attr["value"]
        set_attr(op.attr["shape"], list(weight.tensor.shape))
        set_attr(op.attr["dtype"], DType(ge_dtype(weight.tensor.dtype)))
        set_attr(op.attr["file_path"], str(weight_dir / name))
        set_attr(op.attr["file_id"], "")
        files[name] = data
    return files


def dynamo_export(
    *args: Any,
    model: torch.nn.Module,
    export_path: str | os.PathLike[str] = "export_file",
    export_name: str = "export",
    dynamic: bool = False,
    config: Any = None,
    dynamic_dims: Mapping[str, Sequence[int]] | None = None,
    **kwargs: Any,
) -> ExportResult:
    """Export ``model(*args, **kwargs)`` as an offline GE graph (``.air``) plus readable text.

    The model is traced once by Dynamo as a single graph on fake tensors (nothing executes),
    converted from ATen to GE operators and written to ``export_path``:
    ``<export_name>.air`` (binary ``ge.proto.ModelDef``), ``dynamo.pbtxt`` and, when graph plus
    weights exceed the embed limit, one raw file per weight. Under ``torch.distributed`` each
    rank writes ``<export_name><rank>.air`` and ``rank_<rank>/`` (pbtxt and weights), and
    collectives become ``HcomAllReduce`` / ``HcomAllGather`` / ``HcomReduceScatter``.

    Args:
        *args: Example positional inputs of ``model``.
        model: The module to export.
        export_path: Output directory (created if missing). Weight paths recorded in the graph
            keep this form: a relative path means ATC must run from its parent directory.
        export_name: Base name of the ``.air`` file; a plain file name.
        dynamic: Export every input dimension (and every Python ``int`` input) as dynamic
            (-1 in the graph) where the model allows it; ``False`` keeps the example shapes.
        config: An :class:`ExportConfig`, or any object with
            ``config.export.experimental.auto_atc_config_generated`` and
            ``.enable_record_nn_module_stack`` set to ``True`` or ``False`` (such as
            ``npu_compile.CompilerConfig``).
        dynamic_dims: Dimensions to export as dynamic whatever ``dynamic`` says, by forward()
            argument name: ``{"input_ids": [0]}`` exports a dynamic batch from a batch-1
            example. Dimensions marked with ``torch._dynamo.mark_dynamic`` count too.
        **kwargs: Example keyword inputs of ``model``.

    Returns:
        The paths written, as an :class:`ExportResult`.

    Raises:
        ConfigError: ``export_path`` is empty or contains a NUL byte; ``config`` is not a
            config, or one of its options is not ``True`` or ``False``.
        ExportPathError: unsafe ``export_path``/``export_name`` (a symbolic link at any level
            below ``export_path``'s parent, an escaping path).
        ExportWriteError: a file cannot be written (full disk, file size limit, permissions);
            the message names it, and files of an earlier export are left unchanged.
        GraphBreakError: the model is not one graph; ``DataDependentControlFlowError`` for
            branches on tensor values.
        UnsupportedOpError: ATen ops without GE converter: one error names every one of them,
            with its count and the user's source line and module of its first use.

    Nothing is written unless every check and the conversion succeed.

    Example:
        >>> import torch
        >>> from npu_graph_export import dynamo_export
        >>> model = torch.nn.Linear(4, 2)
        >>> result = dynamo_export(torch.randn(3, 4), model=model, export_path="out")
        >>> result.air, result.pbtxt
        (PosixPath('out/export.air'), PosixPath('out/dynamo.pbtxt'))
        >>> result.ops["MatMulV2"]
        1
    """
    options = resolve_config(config)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_export_name(export_name)
    root = check_export_path(export_path)
    dist_info = _distributed()
    rank = None if dist_info is None else dist_info[0]
    sub = Path() if rank is None else Path(f"rank_{rank}")
    air_name = f"{export_name}.air" if rank is None else f"{export_name}{rank}.air"
    pbtxt_name = str(sub / "dynamo.pbtxt")
    check_target(root, [air_name, pbtxt_name])

    program = trace(model, tuple(args), dict(kwargs), dynamic=dynamic, dynamic_dims=dynamic_dims)
    try:
        converted = convert(
            program, export_name, record_module_stack=options.enable_record_nn_module_stack
        )
    except UnsupportedOpError as error:
        training_op = any(
            "dropout" in op or ("batch_norm" in op and "no_training" not in op) for op in error.ops
        )
        if not (model.training and training_op):
            raise
        # Forgetting eval() is the usual cause: dropout and batch norm then trace to
        # training-only ops (native_dropout, batch-norm statistics updates).
        raise UnsupportedOpError(
            f"{error.message}. The model is in training mode: call model.eval() before "
            "exporting (dropout and batch-norm updates have no inference graph)",
            op=error.op,
            module_path=error.module_path,
            ops=error.ops,
            locations=error.locations,
        ) from error
    weight_files = _resolve_weights(converted, options, root / sub, export_name)

    model_def = ge.ModelDef(name=export_name, version=1)
    model_def.graph.add().CopyFrom(converted.graph)
    payload = model_def.SerializeToString()
    if len(payload) >= 2**31:
        raise ExportError(
            f"the serialised graph is {len(payload)} bytes, over protobuf's 2 GiB limit; lower "
            "ExportConfig.embed_limit_bytes so that weights are written to files"
        )

    files: dict[str, bytes] = {
        air_name: payload,
        pbtxt_name: render_pbtxt(converted.graph).encode(),
    }
    files.update({str(sub / name): data for name, data in weight_files.items()})
    config_names: list[str] = []
    # Templates only make sense for a graph that talks to other ranks (as TorchAir does).
    wants_templates = options.auto_atc_config_generated and bool(converted.groups)
    if dist_info is not None and rank == 0 and wants_templates:
        world = dist_info[1]
        files["model_relation_config.json"] = to_json(
            model_relation_config(export_name, world, converted.groups)
        )
        files["numa_config.json"] = to_json(numa_config(world))
        config_names = ["model_relation_config.json", "numa_config.json"]
    check_target(root, list(files))
    write_files(root, files)

    counts: dict[str, int] = {}
    for op in converted.graph.op:
        counts[op.type] = counts.get(op.type, 0) + 1
    return ExportResult(
        air=root / air_name,
        pbtxt=root / pbtxt_name,
        weight_files=tuple(root / sub / name for name in weight_files),
        config_files=tuple(root / name for name in config_names),
        rank=rank,
        ops=counts,
    )
