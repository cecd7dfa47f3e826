"""Constants of a loaded graph: embedded ``Const`` tensors and ``FileConstant`` weight files.

Weight files are untrusted input found by an untrusted path: only the model's own directory and
the ``weights_dir`` the caller chose are read, never through a symbolic link, and every constant
is counted against the memory budget before its bytes are read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from npu_graph_export import _confine
from npu_graph_export._dtypes import WIDENED, dtype_name, element_size, proto_of_attr, widen
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import ExportPathError, ModelFormatError
from npu_graph_export.runtime._budget import Budget
from npu_graph_export.runtime._kernels import Array, KernelError, numpy_dtype


def load_constants(
    graph: ge.GraphDef, path: Path, weights_dir: Path | None, budget: Budget
) -> dict[str, Array]:
    """Every ``Const`` and ``FileConstant`` of ``graph`` (the ``.air`` at ``path``) by op name."""
    return {
        op.name: _load_constant(op, path, weights_dir, budget)
        for op in graph.op
        if op.type in {"Const", "FileConstant"}
    }


def _decode(raw: bytes, dtype: int, shape: Sequence[int], where: str) -> Array:
    size = element_size(dtype)
    if size is None:
        raise ModelFormatError(f"{where}: data type {dtype_name(dtype)} is not supported")
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"{where}: constant with negative dimension {list(shape)}")
    count = math.prod(shape)
    # No element cap here: the bytes are already in memory, and a weight of 2**28+ elements
    # (a large embedding) is legitimate.
    if count * size != len(raw):
        raise ModelFormatError(
            f"{where}: holds {len(raw)} bytes but {dtype_name(dtype)}{list(shape)} needs "
            f"{count * size}"
        )
    if dtype in WIDENED:
        return widen(raw, dtype).reshape(shape)
    return np.frombuffer(raw, dtype=numpy_dtype(dtype).newbyteorder("<")).reshape(shape)


def _weight_file(path: Path, weights_dir: Path | None, recorded: str) -> tuple[Path, Path]:
    # An export directory is self-contained: the files beside the .air (``<name>`` or
    # ``rank_<r>/<name>``) belong to it, even when the recorded path (relative to the
    # directory ATC runs from, or absolute) names another export's file of the same name.
    # Longest tail first: a ``p1`` beside the .air may be left over from an earlier
    # single-rank export into the same directory, while ``rank_0/p1`` is this rank's.
    # The recorded directory itself is never read: a model file may name any path
    # (``/etc/shadow``, ``../../key``), and only the model's own directory (or the
    # weights_dir the caller chose) is trusted, without a link anywhere below it.
    # Returns the trusted directory and the file in it.
    named = Path(recorded)
    candidates: list[Path] = []
    refused: list[str] = []
    roots = [r for r in (weights_dir, path.parent) if r is not None]
    for root in roots:
        for k in range(min(len(named.parts), 2), 0, -1):
            tail = named.parts[-k:]
            if any(part in {"..", "."} or part == named.anchor for part in tail):
                continue
            candidate = root.joinpath(*tail)
            try:
                if _confine.check(root, candidate) and candidate.is_file():
                    return root, candidate
            except ExportPathError:  # a link at some level: never followed
                refused.append(str(candidate))
                continue
            except (OSError, ValueError):  # NUL byte, too long
                continue
            candidates.append(candidate)
    if refused:
        raise ModelFormatError(
            f"{path}: weight file {recorded!r}: {', '.join(refused)} is or passes "
            "through a symbolic link; the runtime never follows links inside the model "
            "directory or weights_dir: copy the real file there"
        )
    raise ModelFormatError(
        f"{path}: weight file {recorded!r} not found (looked at "
        f"{', '.join(str(c) for c in candidates) or 'no usable path'}); weights are only read"
        " from the model's directory: copy the weight files with the .air or pass weights_dir="
    )


def _load_constant(op: ge.OpDef, path: Path, weights_dir: Path | None, budget: Budget) -> Array:
    where = f"{path}: {op.type} {op.name!r}"
    if op.type == "Const":
        if "value" not in op.attr or op.attr["value"].WhichOneof("value") != "t":
            raise ModelFormatError(f"{where} has no tensor value")
        tensor = op.attr["value"].t
        declared = op.output_desc[0].dtype if op.output_desc else 0
        if declared and tensor.desc.dtype != declared:
            # The bytes would be read as another type: silently different numbers.
            raise ModelFormatError(
                f"{where} holds {dtype_name(tensor.desc.dtype)} data but declares its output"
                f" as {dtype_name(declared)}"
            )
        shape = list(tensor.desc.shape.dim)
        value = _decode(tensor.data, tensor.desc.dtype, shape, where)
        _reserve_constant(shape, tensor.desc.dtype, where, budget)
        return value
    needed = ("shape", "dtype", "file_path")
    if any(key not in op.attr for key in needed):
        raise ModelFormatError(f"{where} lacks one of the attributes {needed}")
    shape = [int(d) for d in op.attr["shape"].list.i]
    # FileConstant.dtype holds a ge::DataType value, not the descriptor's proto enum.
    dtype = proto_of_attr(int(op.attr["dtype"].dt))
    if dtype is None:
        raise ModelFormatError(
            f"{where}: attribute dtype {int(op.attr['dtype'].dt)} is not a supported ge::DataType"
        )
    recorded = bytes(op.attr["file_path"].s).decode("utf-8", "replace")
    root, file = _weight_file(path, weights_dir, recorded)
    size = element_size(dtype)
    expected = math.prod(shape) * (size or 0)
    with open(_confine.open_file(root, file), "rb") as handle:  # no link, as checked
        actual = os.fstat(handle.fileno()).st_size
        if size is None or any(d < 0 for d in shape) or actual != expected:
            raise ModelFormatError(
                f"{where}: {file} has {actual} bytes, expected {expected} for "
                f"{dtype_name(dtype)}{shape}"
            )
        _reserve_constant(shape, dtype, where, budget)
        raw = handle.read()
    return _decode(raw, dtype, shape, where)


def _reserve_constant(shape: list[int], dtype: int, where: str, budget: Budget) -> None:
    count = math.prod(shape) if all(d >= 0 for d in shape) else 0
    raw = count * (element_size(dtype) or 0)
    try:
        computed = count * numpy_dtype(dtype).itemsize
    except KernelError:
        computed = raw
    # The raw bytes, plus the copy a type numpy lacks (bf16) is widened to.
    budget.reserve(raw + (computed if computed != raw else 0), where)
