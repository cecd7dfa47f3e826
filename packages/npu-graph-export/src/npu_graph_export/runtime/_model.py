"""Load and check a GE model, then execute it op by op with the numpy kernels."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from npu_graph_export import _confine
from npu_graph_export._dtypes import WIDENED, dtype_name, element_size, proto_of_attr, widen
from npu_graph_export._graph import DIMS_ATTR, UNFED_ATTR
from npu_graph_export._opdefs import OPS
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import (
    ExportPathError,
    MemoryLimitError,
    ModelFormatError,
    NpuGraphExportError,
    RuntimeInputError,
)
from npu_graph_export.runtime._budget import (
    Budget,
    check_max_bytes,
    estimate_output_bytes,
    format_bytes,
    held_bytes,
)
from npu_graph_export.runtime._kernels import (
    KERNELS,
    Array,
    Collectives,
    KernelError,
    KernelValueError,
    numpy_dtype,
)

MAX_MODEL_BYTES = 1 << 31
"""protobuf cannot hold more; anything larger is not an .air file we could have written."""


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


def _bad(path: object, message: str) -> ModelFormatError:
    return ModelFormatError(
        f"{path}: {message}; the file is not a valid GE model written by dynamo_export "
        "(re-export it, or check that the whole file was copied)"
    )


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


class Model:
    """A GE graph loaded for execution by the numpy reference runtime.

    Attributes:
        path: The ``.air`` file.
        graph: The main ``GraphDef``.
        inputs: The ``Data`` ops in index order.
        outputs: The graph outputs in ``NetOutput`` order.
        max_bytes: The memory budget of loading and running (see :func:`load`).
    """

    def __init__(
        self,
        model: ge.ModelDef,
        path: Path,
        *,
        weights_dir: Path | None = None,
        collectives: str = "error",
        rank: int = 0,
        max_bytes: int | None = None,
    ) -> None:
        if collectives not in {"error", "replicated"}:
            raise ValueError(f"collectives must be 'error' or 'replicated', got {collectives!r}")
        self.path = path
        self.max_bytes = check_max_bytes(max_bytes)
        # What loading holds: the parsed model, then each constant as it is decoded.
        self._budget = Budget(self.max_bytes)
        self._budget.reserve(model.ByteSize(), f"{path}: the parsed model")
        if not model.graph:
            raise _bad(path, "it holds no graph")
        self.graph = model.graph[0]
        self._comm = Collectives(collectives, rank)
        self._weights_dir = weights_dir
        self._ops: dict[str, ge.OpDef] = {}
        for op in self.graph.op:
            if op.name in self._ops:
                raise _bad(path, f"two ops are named {op.name!r}")
            if op.type not in OPS or (op.type not in KERNELS and op.type not in _STRUCTURAL):
                raise _bad(path, f"op {op.name!r} has type {op.type!r}, which is not supported")
            self._ops[op.name] = op
        self._edges = {name: self._parse_inputs(op) for name, op in self._ops.items()}
        self._check_edge_dtypes()
        self._order = self._topological_order()
        outputs = [op for op in self.graph.op if op.type == "NetOutput"]
        if len(outputs) != 1:
            raise _bad(path, f"expected one NetOutput op, found {len(outputs)}")
        self._net_output = outputs[0]
        self.inputs = self._input_infos()
        self._dim_symbols = [self._symbols_of(info) for info in self.inputs]
        self.outputs = [
            TensorInfo(f"output{i}", desc.dtype, tuple(desc.shape.dim))
            for i, desc in enumerate(self._net_output.input_desc)
        ]
        self._group_ranks = self._collective_ranks(collectives, rank)
        self._constants = {
            op.name: self._load_constant(op)
            for op in self.graph.op
            if op.type in {"Const", "FileConstant"}
        }
        self._held = self._budget.used

    @property
    def held_bytes(self) -> int:
        """Bytes the loaded model holds (parsed graph and constants), part of ``max_bytes``."""
        return self._held

    # -- loading checks ------------------------------------------------------------------------

    def _parse_inputs(self, op: ge.OpDef) -> list[tuple[str, int]]:
        edges: list[tuple[str, int]] = []
        unfed = [
            position
            for position, ref in enumerate(op.input)
            if not ref
            and position < len(op.input_desc)
            and UNFED_ATTR in op.input_desc[position].attr
        ]
        # Unfed optional inputs ("" plus a marked descriptor) are skipped; only trailing ones
        # are supported, so the fed inputs keep their positions.
        if unfed and any(ref and not ref.endswith(":-1") for ref in op.input[unfed[0] :]):
            raise _bad(self.path, f"op {op.name!r} has an unfed optional input before a fed one")
        for position, ref in enumerate(op.input):
            if position in unfed:
                continue
            producer, sep, index_text = ref.rpartition(":")
            try:
                index = int(index_text)
            except ValueError:
                index = -2
            if not sep or producer not in self._ops or index < -1:
                raise _bad(self.path, f"op {op.name!r} has a broken input {ref!r}")
            if index >= 0 and index >= max(len(self._ops[producer].output_desc), 1):
                raise _bad(self.path, f"op {op.name!r} reads missing output {ref!r}")
            edges.append((producer, index))
        return edges

    def _check_edge_dtypes(self) -> None:
        # The runtime casts each result to its op's declared output dtype: a declaration that
        # disagrees with what the consumer (or NetOutput) declares reading would silently turn
        # the numbers into another type (a float result into int8), so refuse the graph.
        for name, edges in self._edges.items():
            consumer = self._ops[name]
            data_edges = [(p, i) for p, i in edges if i >= 0]
            for position, (producer, index) in enumerate(data_edges):
                outputs = self._ops[producer].output_desc
                if position >= len(consumer.input_desc) or index >= len(outputs):
                    continue
                made, read = outputs[index].dtype, consumer.input_desc[position].dtype
                if made and read and made != read:
                    raise _bad(
                        self.path,
                        f"op {producer!r} declares output {index} as {dtype_name(made)} but "
                        f"{name!r} reads it as {dtype_name(read)} (input {position})",
                    )

    def _collective_ranks(self, collectives: str, rank: int) -> dict[str, int]:
        """This process's position in each collective's group (the chunk reduce-scatter keeps)."""
        positions: dict[str, int] = {}
        if collectives != "replicated":
            return positions  # collectives raise when run
        for op in self.graph.op:
            if not op.type.startswith("Hcom"):
                continue
            members = _group_members(op)
            if members is None:
                continue  # an HCCL group name: its size and members are GE's to know
            if rank not in members:
                raise RuntimeInputError(
                    f"{self.path}: rank {rank} is not a member of the group of {op.type} "
                    f"{op.name!r} (ranks {members}); pass rank= (--rank) of a member"
                )
            positions[op.name] = members.index(rank)
        return positions

    def _topological_order(self) -> list[str]:
        pending = {name: len({p for p, _ in edges}) for name, edges in self._edges.items()}
        users: dict[str, list[str]] = {name: [] for name in self._ops}
        for name, edges in self._edges.items():
            for producer in {p for p, _ in edges}:
                users[producer].append(name)
        ready = [name for name, count in pending.items() if count == 0]
        order: list[str] = []
        while ready:
            name = ready.pop()
            order.append(name)
            for user in users[name]:
                pending[user] -= 1
                if pending[user] == 0:
                    ready.append(user)
        if len(order) != len(self._ops):
            raise _bad(self.path, "the graph has a cycle")
        return order

    def _input_infos(self) -> list[TensorInfo]:
        data = [op for op in self.graph.op if op.type in _INPUT_TYPES]
        indices = sorted(int(op.attr["index"].i) if "index" in op.attr else -1 for op in data)
        if indices != list(range(len(data))):
            raise _bad(self.path, f"Data op indices {indices} are not 0..{len(data) - 1}")
        data.sort(key=lambda op: int(op.attr["index"].i))
        infos = []
        for op in data:
            if not op.output_desc:
                raise _bad(self.path, f"Data op {op.name!r} has no output description")
            desc = op.output_desc[0]
            if any(d < -1 for d in desc.shape.dim) and list(desc.shape.dim) != [-2]:
                raise _bad(self.path, f"Data op {op.name!r} has an invalid shape")
            infos.append(TensorInfo(op.name, desc.dtype, tuple(desc.shape.dim)))
        return infos

    def _symbols_of(self, info: TensorInfo) -> list[str]:
        op = self._ops[info.name]
        if DIMS_ATTR not in op.attr:
            return []
        symbols = bytes(op.attr[DIMS_ATTR].s).decode("utf-8", "replace").split(",")
        return symbols if len(symbols) == len(info.shape) else []  # not ours: ignore

    def _weight_file(self, recorded: str) -> tuple[Path, Path]:
        # An export directory is self-contained: the files beside the .air (``<name>`` or
        # ``rank_<r>/<name>``) belong to it, even when the recorded path (relative to the
        # directory ATC runs from, or absolute) names another export's file of the same name.
        # Longest tail first: a ``p1`` beside the .air may be left over from an earlier
        # single-rank export into the same directory, while ``rank_0/p1`` is this rank's.
        # The recorded directory itself is never read: a model file may name any path
        # (``/etc/shadow``, ``../../key``), and only the model's own directory (or the
        # weights_dir the caller chose) is trusted, without a link anywhere below it.
        # Returns the trusted directory and the file in it.
        path = Path(recorded)
        candidates: list[Path] = []
        refused: list[str] = []
        roots = [r for r in (self._weights_dir, self.path.parent) if r is not None]
        for root in roots:
            for k in range(min(len(path.parts), 2), 0, -1):
                tail = path.parts[-k:]
                if any(part in {"..", "."} or part == path.anchor for part in tail):
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
                f"{self.path}: weight file {recorded!r}: {', '.join(refused)} is or passes "
                "through a symbolic link; the runtime never follows links inside the model "
                "directory or weights_dir: copy the real file there"
            )
        raise ModelFormatError(
            f"{self.path}: weight file {recorded!r} not found (looked at "
            f"{', '.join(str(c) for c in candidates) or 'no usable path'}); weights are only read"
            " from the model's directory: copy the weight files with the .air or pass weights_dir="
        )

    def _load_constant(self, op: ge.OpDef) -> Array:
        where = f"{self.path}: {op.type} {op.name!r}"
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
            self._reserve_constant(shape, tensor.desc.dtype, where)
            return value
        needed = ("shape", "dtype", "file_path")
        if any(key not in op.attr for key in needed):
            raise ModelFormatError(f"{where} lacks one of the attributes {needed}")
        shape = [int(d) for d in op.attr["shape"].list.i]
        # FileConstant.dtype holds a ge::DataType value, not the descriptor's proto enum.
        dtype = proto_of_attr(int(op.attr["dtype"].dt))
        if dtype is None:
            raise ModelFormatError(
                f"{where}: attribute dtype {int(op.attr['dtype'].dt)} is not a supported "
                "ge::DataType"
            )
        recorded = bytes(op.attr["file_path"].s).decode("utf-8", "replace")
        root, file = self._weight_file(recorded)
        size = element_size(dtype)
        expected = math.prod(shape) * (size or 0)
        with open(_confine.open_file(root, file), "rb") as handle:  # no link, as checked
            actual = os.fstat(handle.fileno()).st_size
            if size is None or any(d < 0 for d in shape) or actual != expected:
                raise ModelFormatError(
                    f"{where}: {file} has {actual} bytes, expected {expected} for "
                    f"{dtype_name(dtype)}{shape}"
                )
            self._reserve_constant(shape, dtype, where)
            raw = handle.read()
        return _decode(raw, dtype, shape, where)

    def _reserve_constant(self, shape: list[int], dtype: int, where: str) -> None:
        count = math.prod(shape) if all(d >= 0 for d in shape) else 0
        raw = count * (element_size(dtype) or 0)
        try:
            computed = count * numpy_dtype(dtype).itemsize
        except KernelError:
            computed = raw
        # The raw bytes, plus the copy a type numpy lacks (bf16) is widened to.
        self._budget.reserve(raw + (computed if computed != raw else 0), where)

    # -- execution -----------------------------------------------------------------------------

    def _check_inputs(self, inputs: Sequence[Any], budget: Budget) -> list[Array]:
        if len(inputs) != len(self.inputs):
            raise RuntimeInputError(
                f"the model takes {len(self.inputs)} inputs ({', '.join(map(str, self.inputs))}),"
                f" got {len(inputs)}"
            )
        arrays: list[Array] = []
        for info, value in zip(self.inputs, inputs, strict=True):
            array = np.asarray(value)
            want = info.numpy_dtype
            if array.dtype != want:
                if not np.can_cast(array.dtype, want, casting="same_kind"):
                    raise RuntimeInputError(
                        f"input {info} got dtype {array.dtype}; pass a {want} array"
                    )
                budget.reserve(array.size * want.itemsize, f"converting input {info.name!r}")
                array = _narrow(array, want, info)
            else:
                budget.reserve(array.nbytes, f"input {info.name!r}")
            shape = info.shape
            if shape != (-2,) and (
                array.ndim != len(shape)
                or any(d not in (-1, got) for d, got in zip(shape, array.shape, strict=True))
            ):
                raise RuntimeInputError(
                    f"input {info} got shape {list(array.shape)}; -1 marks dynamic dimensions"
                )
            arrays.append(array)
        self._check_tied_dims(arrays)
        return arrays

    def _check_tied_dims(self, arrays: list[Array]) -> None:
        # Dimensions traced as one symbol must agree at run time (the batch of ids and mask).
        seen: dict[str, tuple[int, str, int]] = {}
        for info, symbols, array in zip(self.inputs, self._dim_symbols, arrays, strict=True):
            for axis, symbol in enumerate(symbols):
                if not symbol:
                    continue
                size = int(array.shape[axis])
                first = seen.setdefault(symbol, (size, info.name, axis))
                if first[0] != size:
                    raise RuntimeInputError(
                        f"input {info.name!r} has size {size} in dimension {axis} but input "
                        f"{first[1]!r} has size {first[0]} in dimension {first[2]}; the model was"
                        f" exported with these dimensions equal ({symbol}): pass inputs that agree"
                    )

    def _check_refs(self, inputs: Sequence[Any], arrays: list[Array]) -> None:
        # A RefData input (a KV cache the model updates in place) is written through: it must
        # be the caller's own writable array, as it is the device buffer for GE.
        for info, given, array in zip(self.inputs, inputs, arrays, strict=True):
            if self._ops[info.name].type != "RefData":
                continue
            if array is not given or not array.flags.writeable:
                raise RuntimeInputError(
                    f"input {info} is updated in place by the model; pass a writable numpy "
                    f"array of dtype {info.numpy_dtype} (it receives the new values)"
                )

    def run(self, *inputs: Any) -> list[Array]:
        """Execute the graph on ``inputs`` (arrays in ``Data`` index order).

        Returns:
            The outputs in ``NetOutput`` order, as numpy arrays.

        Raises:
            RuntimeInputError: wrong number, dtype or shape of inputs, dynamic dimensions
                that disagree, or values out of range (a token id past the vocabulary).
            ModelFormatError: the graph cannot be executed (inconsistent ops or attributes).
        """
        # Everything stays referenced until the run ends, so the sum of what each step made is
        # what the run holds: the budget refuses a step before its allocation would pass it.
        budget = Budget(self.max_bytes, self._held)
        arrays = self._check_inputs(inputs, budget)
        self._check_refs(inputs, arrays)
        by_name = {info.name: array for info, array in zip(self.inputs, arrays, strict=True)}
        values: dict[str, list[Array]] = {}
        for name in self._order:
            op = self._ops[name]
            args = [values[p][i] for p, i in self._edges[name] if i >= 0]
            if op.type == "Assign" and self._ops[self._edges[name][0][0]].type == "RefData":
                # Readers of a RefData get a snapshot (below); Assign writes the caller's array.
                args[0] = by_name[self._edges[name][0][0]]
            if op.type == "NetOutput":
                budget.reserve(sum(a.nbytes for a in args), "copying the outputs")
                return [np.array(a, copy=True) for a in args]
            values[name] = self._execute(op, args, by_name, budget)
        raise _bad(self.path, "NetOutput is unreachable")

    def _execute(
        self, op: ge.OpDef, args: list[Array], data: dict[str, Array], budget: Budget
    ) -> list[Array]:
        if op.type == "RefData":
            # A snapshot, so that ops reading the old value are unaffected by the Assign.
            budget.reserve(data[op.name].nbytes, f"a snapshot of input {op.name!r}")
            return [np.array(data[op.name], copy=True)]
        if op.type in _INPUT_TYPES:
            return [data[op.name]]
        if op.type in {"Const", "FileConstant"}:
            return [self._constants[op.name]]
        what = f"op {op.name!r} ({op.type}) on {[f'{a.dtype}{list(a.shape)}' for a in args]}"
        budget.check(estimate_output_bytes(op, args), what)
        comm = self._comm
        if op.name in self._group_ranks:
            comm = Collectives(comm.mode, self._group_ranks[op.name])
        try:
            with np.errstate(all="ignore"):
                results = KERNELS[op.type](op, args, comm)
            out = []
            for index, result in enumerate(results):
                result = np.asarray(result)
                if index < len(op.output_desc) and op.output_desc[index].dtype:
                    result = self._declared(op, index, result)
                out.append(result)
            budget.reserve(sum(held_bytes(r) for r in out), what)
            return out
        except MemoryError as error:
            if isinstance(error, MemoryLimitError):
                raise
            raise MemoryLimitError(
                f"{what} ran out of memory ({format_bytes(budget.used)} held, limit "
                f"{format_bytes(budget.limit)}); lower max_bytes (--max-bytes) to what the "
                "machine can spare, or check the model and input shapes"
            ) from error
        except KernelValueError as error:
            raise RuntimeInputError(
                f"op {op.name!r} ({op.type}) failed on values computed from the inputs: {error};"
                " check the input values (token ids must be below the vocabulary size)"
            ) from error
        except (
            KernelError,
            ValueError,
            IndexError,
            TypeError,
            KeyError,
            OverflowError,
            AttributeError,
        ) as error:
            raise ModelFormatError(
                f"{self.path}: op {op.name!r} ({op.type}) failed on inputs "
                f"{[f'{a.dtype}{list(a.shape)}' for a in args]}: {error}"
            ) from error

    def _declared(self, op: ge.OpDef, index: int, result: Array) -> Array:
        # Results take their op's declared dtype (a float64 from numpy's promotion back to
        # float32, int64 shapes to int32), but never across kinds: a float declared int8 is an
        # inconsistent graph, not a cast to make silently.
        want = numpy_dtype(op.output_desc[index].dtype)
        if result.dtype != want and not np.can_cast(result.dtype, want, casting="same_kind"):
            raise ModelFormatError(
                f"{self.path}: op {op.name!r} ({op.type}) computes {result.dtype} for output "
                f"{index} but its output_desc declares {dtype_name(op.output_desc[index].dtype)}"
            )
        return result.astype(want, copy=False)


def _group_members(op: ge.OpDef) -> list[int] | None:
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


def _narrow(array: Array, want: np.dtype[Any], info: TensorInfo) -> Array:
    """``array`` converted to ``want``, refusing values the narrower type cannot hold."""
    if array.size and want.kind in "iu" and array.dtype.kind in "iub":
        limits = np.iinfo(want)
        low, high = int(array.min()), int(array.max())
        if low < limits.min or high > limits.max:
            raise RuntimeInputError(
                f"input {info} got values {low}..{high}, outside {want}'s range "
                f"{limits.min}..{limits.max}; pass values that fit (they would wrap around)"
            )
    with np.errstate(over="ignore"):  # detected below, with a message that says what to do
        converted = array.astype(want)
    if array.size and want.kind in "fc" and array.dtype.kind in "fciub":
        overflow = np.isfinite(array) & ~np.isfinite(converted)
        if overflow.any():
            raise RuntimeInputError(
                f"input {info} got values beyond {want}'s range (they would become inf); pass "
                "values that fit"
            )
    return converted


_INPUT_TYPES = frozenset({"Data", "RefData"})
_STRUCTURAL = frozenset({"Data", "RefData", "Const", "FileConstant", "NetOutput"})


def _find_air(path: Path, rank: int | None) -> Path:
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


def load(
    path: str | os.PathLike[str],
    *,
    weights_dir: str | os.PathLike[str] | None = None,
    collectives: str = "error",
    rank: int | None = None,
    max_bytes: int | None = None,
) -> Model:
    """Load an ``.air`` file (or an export directory holding one) for the numpy runtime.

    Args:
        path: An ``.air`` file, or a directory with exactly one (``rank`` picks one of several).
        weights_dir: A directory holding the ``FileConstant`` weight files, searched first,
            then the export directory (the ``.air``'s, with its ``rank_<r>/``). A weight is
            looked up by the last one or two parts of the path recorded in the graph
            (``<name>``, ``rank_<r>/<name>``); files outside these two directories, ``..``
            and symbolic links below them (at any level) are never read.
        collectives: ``"error"`` (default) refuses collective ops; ``"replicated"`` runs them as
            if every rank held the same input (see :class:`Collectives`).
        rank: This rank in a multi-rank export (picks ``<name><rank>.air`` in a directory and
            the reduce-scatter chunk); it must be a member of every collective's group.
        max_bytes: Memory budget in bytes for loading and for each :meth:`Model.run` (the
            model, its constants, inputs and every intermediate result); ``None``: half the
            memory (physical, or the container's limit), at most 16 GiB. Checked before each
            allocation.

    Raises:
        ModelFormatError: the file is missing, truncated, corrupt or uses unsupported ops.
        MemoryLimitError: the model or its weights need more than ``max_bytes``.
        RuntimeInputError: ``rank`` is not a member of a collective's group.
    """
    limit = check_max_bytes(max_bytes)
    given = Path(path)
    air = _find_air(given, rank)
    # A directory is trusted as given, not a link below it (an .air found there); a file named
    # by the caller is the caller's choice.
    try:
        fd = _confine.open_file(given, air) if air != given else os.open(air, os.O_RDONLY)
    except ExportPathError as error:
        raise _bad(air, f"it is not read ({error})") from error
    with open(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size >= MAX_MODEL_BYTES:
            raise _bad(air, f"it is {size} bytes, over protobuf's 2 GiB limit")
        # The file's bytes and the parsed message are both held while parsing.
        Budget(limit).check(2 * size, f"{air}: reading the model")
        model = ge.ModelDef()
        try:
            model.ParseFromString(handle.read())
        except (DecodeError, ValueError, RuntimeError) as error:
            raise _bad(air, f"protobuf could not parse it ({error})") from error
    if collectives not in {"error", "replicated"}:
        raise ValueError(f"collectives must be 'error' or 'replicated', got {collectives!r}")
    try:
        return Model(
            model,
            air,
            weights_dir=None if weights_dir is None else Path(weights_dir),
            collectives=collectives,
            rank=rank or 0,
            max_bytes=limit,
        )
    except NpuGraphExportError:
        raise
    except MemoryError as e:  # past the budget: the machine has less than max_bytes free
        raise MemoryLimitError(
            f"{air}: ran out of memory while loading (limit {format_bytes(limit)}); pass a "
            "smaller max_bytes (--max-bytes) so that loading is refused before allocating"
        ) from e
    except (KernelError, ValueError, KeyError, IndexError, TypeError, OverflowError, OSError) as e:
        raise _bad(air, f"it is inconsistent ({type(e).__name__}: {e})") from e
