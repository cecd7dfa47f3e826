"""What every numpy kernel shares: the kernel table, attribute readers, errors and size checks."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_graph_export._dtypes import NUMPY_OF_GE, WIDENED, proto_of_attr
from npu_graph_export._proto import ge_ir_pb2 as ge

Array = np.ndarray[Any, Any]

MAX_ELEMENTS = 1 << 28
"""Tensors up to this many elements are created without asking; larger ones only when the
machine's free memory holds them, so a corrupt shape fails instead of hanging or swapping."""


def _available_bytes() -> int:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not Linux-like: stay with the cap
        return 0


def check_size(count: int, itemsize: int, what: str) -> None:
    """Refuse to create ``count`` elements of ``itemsize`` bytes beyond free memory."""
    if count <= MAX_ELEMENTS:
        return
    needed = count * itemsize
    available = _available_bytes()
    if needed > available:
        raise KernelError(
            f"{what} needs {needed} bytes ({count} elements) but {available} bytes of memory "
            "are free"
        )


class KernelError(Exception):
    """A kernel met inputs or attributes it cannot work with (turned into ModelFormatError)."""


class KernelValueError(KernelError):
    """Values flowing through a sound graph are out of range (an index past a dimension).

    Almost always the caller's input values (token ids beyond the vocabulary): turned into
    RuntimeInputError.
    """


@dataclass
class Collectives:
    """How the single-process runtime answers collectives.

    ``mode="error"`` refuses them. ``mode="replicated"`` assumes every one of the group's ranks
    holds the same tensor as this process, which makes each collective computable locally:
    all-reduce(sum) multiplies by the group size, all-gather repeats the tensor, reduce-scatter
    keeps this ``rank``'s chunk of the all-reduce.
    """

    mode: str = "error"
    rank: int = 0


def _attr(op: ge.OpDef, name: str) -> ge.AttrDef:
    if name not in op.attr:
        raise KernelError(f"missing attribute {name!r}")
    value: ge.AttrDef = op.attr[name]
    return value


def attr_int(op: ge.OpDef, name: str, default: int | None = None) -> int:
    if default is not None and name not in op.attr:
        return default
    return int(_attr(op, name).i)


def attr_float(op: ge.OpDef, name: str, default: float | None = None) -> float:
    if default is not None and name not in op.attr:
        return default
    return float(_attr(op, name).f)


def attr_bool(op: ge.OpDef, name: str, default: bool = False) -> bool:
    return bool(op.attr[name].b) if name in op.attr else default


def attr_str(op: ge.OpDef, name: str, default: str | None = None) -> str:
    if default is not None and name not in op.attr:
        return default
    return bytes(_attr(op, name).s).decode("utf-8", "replace")


def attr_ints(op: ge.OpDef, name: str) -> list[int]:
    return [int(v) for v in _attr(op, name).list.i]


def numpy_dtype(ge_type: int) -> np.dtype[Any]:
    """Numpy dtype for a proto data type; bf16 and fp8 compute as float32."""
    if ge_type in WIDENED:
        return np.dtype(np.float32)
    try:
        return NUMPY_OF_GE[ge_type]
    except KeyError:
        raise KernelError(
            f"data type {ge_type} is not supported by the reference runtime"
        ) from None


def checked_shape(values: Any, itemsize: int = 8) -> tuple[int, ...]:
    shape = tuple(int(v) for v in np.asarray(values).reshape(-1))
    if any(d < 0 for d in shape):
        raise KernelError(f"negative dimension in shape {shape}")
    check_size(math.prod(shape), itemsize, f"shape {shape}")
    return shape


def normalize_axis(value: Any, rank: int) -> int:
    axis = int(np.asarray(value).reshape(-1)[0])
    if not -rank <= axis < max(rank, 1):
        raise KernelError(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


Kernel = Callable[[ge.OpDef, Sequence[Array], Collectives], list[Array]]
KERNELS: dict[str, Kernel] = {}
"""Every kernel by GE op type; the family modules fill it when ``_kernels`` is imported."""


def register(name: str, fn: Kernel) -> None:
    """Make ``fn`` the kernel of GE op type ``name``; a second kernel for one type is a bug."""
    if name in KERNELS:
        raise RuntimeError(f"two reference kernels are registered for {name!r}")
    KERNELS[name] = fn


def kernel(*names: str) -> Callable[[Kernel], Kernel]:
    """Decorator: register the function as the kernel of each GE op type in ``names``."""

    def wrap(fn: Kernel) -> Kernel:
        for name in names:
            register(name, fn)
        return fn

    return wrap


def attr_type(op: ge.OpDef, name: str, default: int | None = None) -> int:
    """A dtype-valued attribute as a proto data type, read the way GE reads it.

    GE declares ``Cast.dst_type`` and ``Shape.dtype`` as ``Int`` and ``FileConstant.dtype`` as
    ``Type``; both hold ``ge::DataType`` values, not the proto enum of tensor descriptors.
    """
    if name not in op.attr and default is not None:
        return default
    field = _attr(op, name).WhichOneof("value")
    value = int(_attr(op, name).dt) if field == "dt" else int(_attr(op, name).i)
    proto = proto_of_attr(value)
    if proto is None:
        raise KernelError(f"attribute {name!r} names ge::DataType {value}, which is not supported")
    return proto
