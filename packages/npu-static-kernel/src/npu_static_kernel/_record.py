"""Op statistics: record every operator call of one eager run and write one JSON per configuration.

The files follow the layout Ascend's static kernel compiler consumes (TorchAir's
``aclnn_static_shape_kernel_outputs``)::

    <build_dir>/aclnn_static_shape_kernel_outputs/
        <timestamp>_<pid>_outputs/
            <pid>/              ops the builder supports (its compile list)
            <pid>_debug/        every op that ran
                MatMulV2_float_ND_1_2048_0.json

A file name is ``<op type>_<dtype>_<format>_<dims of the first tensor input>_<index>``; the index
tells apart configurations that share the rest of the name (same first input, other attributes).
These names, and the CANN op type and dtype names inside them, are spelled in
:mod:`npu_static_kernel._cann_names`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_static_kernel import _confine, _device
from npu_static_kernel._accel import first_tensor_device
from npu_static_kernel._cann_names import (
    OUTPUTS_DIRNAME,
    cann_dtype_name,
    cann_op_type,
    debug_dir_name,
    op_file_name,
    op_file_stem,
    outputs_dir_name,
    selected_dir_name,
)
from npu_static_kernel._io import atomic_write_json

__all__ = [
    "OUTPUTS_DIRNAME",
    "OpRecord",
    "OpStatistics",
    "OpStatisticsRecorder",
    "cann_op_type",
    "record_op_statistics",
    "write_op_statistics",
]


def _tensor_spec(tensor: torch.Tensor) -> dict[str, Any]:
    return {
        "dtype": cann_dtype_name(tensor.dtype),
        "format": _device.storage_format(tensor),
        "shape": [int(d) for d in tensor.shape],
        "stride": [int(s) for s in tensor.stride()],
    }


def _jsonable(value: Any) -> Any:
    """Turn a scalar argument into a JSON value that compares equal for equal arguments."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _jsonable(value.node.hint if hasattr(value.node, "hint") else str(value))
    if isinstance(value, torch.dtype):
        return cann_dtype_name(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


@dataclass
class OpRecord:
    """One distinct operator configuration seen while recording.

    Attributes:
        op_type: CANN op type name (``MatMulV2``).
        aten_op: The overload that ran (``aten.mm.default``).
        inputs: Tensor inputs in call order: name, dtype, format, shape, stride.
        outputs: Tensor outputs: dtype, format, shape, stride.
        attrs: Non-tensor (scalar) arguments by schema name.
        device: Device type the op ran on.
        is_view: Whether the op only creates a view (no kernel runs).
        count: How many times this configuration ran.
    """

    op_type: str
    aten_op: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    attrs: dict[str, Any]
    device: str
    is_view: bool
    count: int = 1

    @property
    def namespace(self) -> str:
        """The op's library namespace (``aten`` for PyTorch's own ops)."""
        return self.aten_op.split(".", 1)[0]

    @property
    def launches_kernel(self) -> bool:
        """Whether each run of this configuration launches a kernel: an ATen op, not a view.

        A view only changes tensor metadata; ops of other libraries are left to their owners.
        ``sum(r.count for r in recorder.records if r.launches_kernel)`` is the number of kernel
        launches a recorded run made eagerly.
        """
        return self.namespace == "aten" and not self.is_view

    @property
    def stem(self) -> str:
        """The file name without index: op type, dtype, format and dims of the first tensor."""
        first = self.inputs[0] if self.inputs else (self.outputs[0] if self.outputs else None)
        if first is None:
            return self.op_type
        return op_file_stem(self.op_type, first["dtype"], first["format"], first["shape"])

    def signature(self) -> str:
        """A canonical string that is equal exactly for equal configurations."""
        return json.dumps([self.aten_op, self.inputs, self.attrs, self.device], sort_keys=True)

    def to_json(self, *, supported: bool) -> dict[str, Any]:
        """Return the JSON document written for this configuration."""
        return {
            "op_type": self.op_type,
            "aten_op": self.aten_op,
            "device": self.device,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "attrs": self.attrs,
            "count": self.count,
            "supported": supported,
        }


class OpStatisticsRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode that records every operator call (op, dtypes, shapes, strides, scalars).

    Example:
        >>> import torch
        >>> from npu_static_kernel import OpStatisticsRecorder
        >>> a, b = torch.ones(2, 3), torch.ones(3, 4)
        >>> with OpStatisticsRecorder() as recorder:
        ...     c = torch.mm(a, b).relu()
        >>> [r.op_type for r in recorder.records]
        ['MatMulV2', 'Relu']
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._records: dict[str, OpRecord] = {}

    @property
    def records(self) -> list[OpRecord]:
        """Distinct configurations in first-seen order."""
        return list(self._records.values())

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        out = func(*args, **kwargs)
        self._record(func, args, kwargs, out)
        return out

    def _record(self, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> None:
        schema_args = list(func._schema.arguments) if hasattr(func, "_schema") else []
        named: list[tuple[str, Any]] = []
        for index, value in enumerate(args):
            name = schema_args[index].name if index < len(schema_args) else f"arg{index}"
            named.append((name, value))
        named.extend(kwargs.items())
        inputs: list[dict[str, Any]] = []
        attrs: dict[str, Any] = {}
        device = "cpu"
        for name, value in named:
            tensors = _tensors_in(value)
            if tensors is None:
                attrs[name] = _jsonable(value)
                continue
            for position, tensor in enumerate(tensors):
                spec = {"name": name if len(tensors) == 1 else f"{name}[{position}]"}
                spec.update(_tensor_spec(tensor))
                inputs.append(spec)
                device = tensor.device.type
        outputs = [_tensor_spec(t) for t in _flatten_tensors(out)]
        aten_op = str(func)  # "aten.mm.default"
        record = OpRecord(
            op_type=cann_op_type(aten_op),
            aten_op=aten_op,
            inputs=inputs,
            outputs=outputs,
            attrs=attrs,
            device=device,
            is_view=bool(getattr(func, "is_view", False)),
        )
        key = record.signature()
        seen = self._records.get(key)
        if seen is None:
            self._records[key] = record
        else:
            seen.count += 1


def _tensors_in(value: Any) -> list[torch.Tensor] | None:
    """The tensors an argument holds, or None for a scalar argument (optional tensors count)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        tensors = [v for v in value if isinstance(v, torch.Tensor)]
        return tensors or None
    return None


def _flatten_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flatten_tensors(v)]
    return []


@dataclass(frozen=True)
class OpStatistics:
    """What one recording wrote.

    Attributes:
        output_dir: ``<build_dir>/aclnn_static_shape_kernel_outputs/<timestamp>_<pid>_outputs``.
        selected_dir: ``<output_dir>/<pid>``: the configurations the builder supports.
        debug_dir: ``<output_dir>/<pid>_debug``: every configuration.
        records: The distinct configurations, in first-seen order.
        files: File name of each record (same order), identical in both directories.
        selected: File names written to ``selected_dir``.
    """

    output_dir: Path
    selected_dir: Path
    debug_dir: Path
    records: tuple[OpRecord, ...]
    files: tuple[str, ...]
    selected: tuple[str, ...] = field(default=())


def write_op_statistics(
    records: Iterable[OpRecord],
    build_dir: str | os.PathLike[str] | None = None,
    *,
    supports: Callable[[OpRecord], bool] | None = None,
) -> OpStatistics:
    """Write one JSON per record into a new ``<timestamp>_<pid>_outputs`` directory.

    The directory is assembled under a temporary name and renamed into place, so a reader never
    sees a half-written set.

    Args:
        records: Distinct configurations (from :class:`OpStatisticsRecorder`).
        build_dir: Root directory; defaults to the current directory.
        supports: Predicate choosing the records that go to ``<pid>/`` (the builder's compile
            list); defaults to every kernel-launching aten op (views excluded).

    Returns:
        The written :class:`OpStatistics`.
    """
    records = list(records)
    supports = supports or default_supports
    pid = os.getpid()
    # The build directory is trusted as given; nothing below it is followed if it is a link.
    base = Path(build_dir if build_dir is not None else os.getcwd())
    root = _confine.make_dirs(base, base / OUTPUTS_DIRNAME)
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")
    final = root / outputs_dir_name(stamp, pid)
    while _confine.check(base, final):  # two recordings in the same microsecond of one process
        stamp = str(int(stamp) + 1)
        final = root / outputs_dir_name(stamp, pid)
    staging = _confine.make_temp_dir(base, root, f".{final.name}.tmp-")
    try:
        _confine.make_dirs(base, staging / selected_dir_name(pid))
        _confine.make_dirs(base, staging / debug_dir_name(pid))
        counters: dict[str, int] = {}
        names: list[str] = []
        selected: list[str] = []
        for record in records:
            index = counters.get(record.stem, 0)
            counters[record.stem] = index + 1
            name = op_file_name(record.stem, index)
            names.append(name)
            chosen = supports(record)
            document = record.to_json(supported=chosen)
            atomic_write_json(staging / debug_dir_name(pid) / name, document, root=base)
            if chosen:
                atomic_write_json(staging / selected_dir_name(pid) / name, document, root=base)
                selected.append(name)
        _confine.rename(base, root, staging.name, final.name)
    except BaseException:
        with contextlib.suppress(OSError):
            _confine.remove(base, staging)
        raise
    return OpStatistics(
        output_dir=final,
        selected_dir=final / selected_dir_name(pid),
        debug_dir=final / debug_dir_name(pid),
        records=tuple(records),
        files=tuple(names),
        selected=tuple(selected),
    )


def default_supports(record: OpRecord) -> bool:
    """True for aten ops that launch a kernel (views only change metadata)."""
    return record.launches_kernel


def record_op_statistics(
    fn: Callable[..., Any],
    *args: Any,
    build_dir: str | os.PathLike[str] | None = None,
    supports: Callable[[OpRecord], bool] | None = None,
) -> OpStatistics:
    """Run ``fn(*args)`` once eagerly and write its op statistics.

    Every operator call is recorded (op, input dtypes, shapes, strides/format, scalar
    arguments); one JSON per distinct configuration is written under
    ``<build_dir>/aclnn_static_shape_kernel_outputs/<timestamp>_<pid>_outputs/``.
    ``fn`` really runs: in-place ops mutate ``args`` as usual.

    Args:
        fn: The callable to record (an FX ``GraphModule`` or any function of tensors).
        *args: Its positional arguments.
        build_dir: Root directory; defaults to the current directory.
        supports: Predicate choosing the records written to ``<pid>/`` (see
            :func:`write_op_statistics`).

    Returns:
        The written :class:`OpStatistics`.

    Example:
        >>> import torch
        >>> from npu_static_kernel import record_op_statistics
        >>> stats = record_op_statistics(torch.mm, torch.ones(1, 2048), torch.ones(2048, 8))
        >>> stats.files
        ('MatMulV2_float_ND_1_2048_0.json',)
    """
    with torch.no_grad(), OpStatisticsRecorder() as recorder:
        fn(*args)
    _device.synchronize(first_tensor_device(args).type)
    return write_op_statistics(recorder.records, build_dir, supports=supports)
