"""A loaded GE model and its execution, op by op, with the numpy kernels.

Loading reads the file (``_parse``), checks the graph (``_validate``) and reads its constants
(``_weights``); :meth:`Model.run` then checks the inputs and runs each op's kernel in order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npu_graph_export._dtypes import dtype_name
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import (
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
from npu_graph_export.runtime._parse import (
    INPUT_TYPES,
    TensorInfo,
    bad,
    dim_symbols,
    find_air,
    input_infos,
    net_output,
    parse_edges,
    read_model,
)
from npu_graph_export.runtime._validate import (
    check_edge_dtypes,
    check_ops,
    collective_ranks,
    topological_order,
)
from npu_graph_export.runtime._weights import load_constants


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
        budget = Budget(self.max_bytes)
        budget.reserve(model.ByteSize(), f"{path}: the parsed model")
        if not model.graph:
            raise bad(path, "it holds no graph")
        self.graph = model.graph[0]
        self._comm = Collectives(collectives, rank)
        self._ops = check_ops(self.graph, path)
        self._edges = {name: parse_edges(op, self._ops, path) for name, op in self._ops.items()}
        check_edge_dtypes(self._ops, self._edges, path)
        self._order = topological_order(self._ops, self._edges, path)
        self._net_output = net_output(self.graph, path)
        self.inputs = input_infos(self.graph, path)
        self._dim_symbols = [dim_symbols(self._ops[info.name], info) for info in self.inputs]
        self.outputs = [
            TensorInfo(f"output{i}", desc.dtype, tuple(desc.shape.dim))
            for i, desc in enumerate(self._net_output.input_desc)
        ]
        self._group_ranks = collective_ranks(self.graph, collectives, rank, path)
        self._constants = load_constants(self.graph, path, weights_dir, budget)
        self._held = budget.used

    @property
    def held_bytes(self) -> int:
        """Bytes the loaded model holds (parsed graph and constants), part of ``max_bytes``."""
        return self._held

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
        raise bad(self.path, "NetOutput is unreachable")

    def _execute(
        self, op: ge.OpDef, args: list[Array], data: dict[str, Array], budget: Budget
    ) -> list[Array]:
        if op.type == "RefData":
            # A snapshot, so that ops reading the old value are unaffected by the Assign.
            budget.reserve(data[op.name].nbytes, f"a snapshot of input {op.name!r}")
            return [np.array(data[op.name], copy=True)]
        if op.type in INPUT_TYPES:
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
    air = find_air(given, rank)
    model = read_model(given, air, limit)
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
        raise bad(air, f"it is inconsistent ({type(e).__name__}: {e})") from e
