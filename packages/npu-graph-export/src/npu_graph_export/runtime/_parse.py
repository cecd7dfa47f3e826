"""Read a GE model file and the structure of its graph: edges, inputs and collective groups."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from npu_graph_export import _confine
from npu_graph_export._dtypes import dtype_name
from npu_graph_export._graph import DIMS_ATTR, UNFED_ATTR
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import ExportPathError, ModelFormatError
from npu_graph_export.runtime._budget import Budget
from npu_graph_export.runtime._kernels import KernelError, numpy_dtype

MAX_MODEL_BYTES = 1 << 31
"""protobuf cannot hold more; anything larger is not an .air file we could have written."""

INPUT_TYPES = frozenset({"Data", "RefData"})
STRUCTURAL = frozenset({"Data", "RefData", "Const", "FileConstant", "NetOutput"})
"""Op types the runtime handles itself, without a kernel."""


@dataclass(frozen=True)
class TensorInfo:
    """Name, GE dtype and shape (-1: dynamic) of a model input or output."""

    name: str
    dtype: int
    shape: tuple[int, ...]

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The numpy dtype the runtime uses for this tensor.

        Raises:
            ModelFormatError: the reference runtime cannot hold this data type.
        """
        try:
            return numpy_dtype(self.dtype)
        except KernelError as error:
            raise ModelFormatError(
                f"{self}: data type {dtype_name(self.dtype)} is not supported by the reference "
                "runtime; run this model with ATC/GE"
            ) from error

    def __str__(self) -> str:
        return f"{self.name}: {dtype_name(self.dtype)}{list(self.shape)}"


def bad(path: object, message: str) -> ModelFormatError:
    """The error for a model file that ``dynamo_export`` cannot have written."""
    return ModelFormatError(
        f"{path}: {message}; the file is not a valid GE model written by dynamo_export "
        "(re-export it, or check that the whole file was copied)"
    )


def find_air(path: Path, rank: int | None) -> Path:
    """The ``.air`` file ``path`` names: itself, or the one (of ``rank``) in a directory."""
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(path.glob("*.air"))
        if rank is not None:
            # <name><rank>.air: with 12 ranks, "1" also ends "mp_rank11", so first look for the
            # exact name after the prefix that every rank's file shares ("mp_rank").
            stems = [p.stem for p in found]
            prefix = min(stems, key=len) if stems else ""
            while any(not stem.startswith(prefix) for stem in stems):
                prefix = prefix[:-1]
            exact = [p for p in found if p.stem == f"{prefix}{rank}"]
            found = exact or [p for p in found if p.stem.endswith(str(rank))]
        if len(found) == 1:
            return found[0]
        raise ModelFormatError(
            f"{path}: expected exactly one .air file{'' if rank is None else f' for rank {rank}'}"
            f", found {[p.name for p in found]}; pass the .air file itself"
        )
    raise ModelFormatError(f"{path}: no such file or directory")


def read_model(given: Path, air: Path, limit: int) -> ge.ModelDef:
    """Parse ``air`` (found from ``given``, what the caller named) within ``limit`` bytes."""
    # A directory is trusted as given, not a link below it (an .air found there); a file named
    # by the caller is the caller's choice.
    try:
        fd = _confine.open_file(given, air) if air != given else os.open(air, os.O_RDONLY)
    except ExportPathError as error:
        raise bad(air, f"it is not read ({error})") from error
    with open(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size >= MAX_MODEL_BYTES:
            raise bad(air, f"it is {size} bytes, over protobuf's 2 GiB limit")
        # The file's bytes and the parsed message are both held while parsing.
        Budget(limit).check(2 * size, f"{air}: reading the model")
        model = ge.ModelDef()
        try:
            model.ParseFromString(handle.read())
        except (DecodeError, ValueError, RuntimeError) as error:
            raise bad(air, f"protobuf could not parse it ({error})") from error
    return model


def parse_edges(op: ge.OpDef, ops: dict[str, ge.OpDef], path: Path) -> list[tuple[str, int]]:
    """The ``(producer, output index)`` pairs ``op`` reads; index -1 is a control edge."""
    edges: list[tuple[str, int]] = []
    unfed = [
        position
        for position, ref in enumerate(op.input)
        if not ref and position < len(op.input_desc) and UNFED_ATTR in op.input_desc[position].attr
    ]
    # Unfed optional inputs ("" plus a marked descriptor) are skipped; only trailing ones
    # are supported, so the fed inputs keep their positions.
    if unfed and any(ref and not ref.endswith(":-1") for ref in op.input[unfed[0] :]):
        raise bad(path, f"op {op.name!r} has an unfed optional input before a fed one")
    for position, ref in enumerate(op.input):
        if position in unfed:
            continue
        producer, sep, index_text = ref.rpartition(":")
        try:
            index = int(index_text)
        except ValueError:
            index = -2
        if not sep or producer not in ops or index < -1:
            raise bad(path, f"op {op.name!r} has a broken input {ref!r}")
        if index >= 0 and index >= max(len(ops[producer].output_desc), 1):
            raise bad(path, f"op {op.name!r} reads missing output {ref!r}")
        edges.append((producer, index))
    return edges


def net_output(graph: ge.GraphDef, path: Path) -> ge.OpDef:
    """The graph's one ``NetOutput`` op."""
    outputs = [op for op in graph.op if op.type == "NetOutput"]
    if len(outputs) != 1:
        raise bad(path, f"expected one NetOutput op, found {len(outputs)}")
    found: ge.OpDef = outputs[0]
    return found


def input_infos(graph: ge.GraphDef, path: Path) -> list[TensorInfo]:
    """The graph's ``Data``/``RefData`` inputs in index order."""
    data = [op for op in graph.op if op.type in INPUT_TYPES]
    indices = sorted(int(op.attr["index"].i) if "index" in op.attr else -1 for op in data)
    if indices != list(range(len(data))):
        raise bad(path, f"Data op indices {indices} are not 0..{len(data) - 1}")
    data.sort(key=lambda op: int(op.attr["index"].i))
    infos = []
    for op in data:
        if not op.output_desc:
            raise bad(path, f"Data op {op.name!r} has no output description")
        desc = op.output_desc[0]
        if any(d < -1 for d in desc.shape.dim) and list(desc.shape.dim) != [-2]:
            raise bad(path, f"Data op {op.name!r} has an invalid shape")
        infos.append(TensorInfo(op.name, desc.dtype, tuple(desc.shape.dim)))
    return infos


def dim_symbols(op: ge.OpDef, info: TensorInfo) -> list[str]:
    """The symbol each dimension of input ``info`` was traced as ("" for a static one)."""
    if DIMS_ATTR not in op.attr:
        return []
    symbols = bytes(op.attr[DIMS_ATTR].s).decode("utf-8", "replace").split(",")
    return symbols if len(symbols) == len(info.shape) else []  # not ours: ignore


def group_members(op: ge.OpDef) -> list[int] | None:
    """The global ranks of a collective's group, in group order, when the graph says them.

    From the ``ranklist`` attribute, else the ``rank_list=`` part of a non-HCCL group name
    (``tag=...;rank_list=0,1``), else ``0..rank_size-1``; None when nothing says.
    """
    if "ranklist" in op.attr and op.attr["ranklist"].list.i:
        return [int(r) for r in op.attr["ranklist"].list.i]
    group = bytes(op.attr["group"].s).decode("utf-8", "replace") if "group" in op.attr else ""
    for part in group.split(";"):
        key, _, ranks = part.partition("=")
        if key.strip() == "rank_list" and ranks:
            try:
                return [int(r) for r in ranks.split(",")]
            except ValueError:
                return None  # the kernel refuses the group
    if "rank_size" in op.attr:
        return list(range(max(int(op.attr["rank_size"].i), 0)))
    return None
