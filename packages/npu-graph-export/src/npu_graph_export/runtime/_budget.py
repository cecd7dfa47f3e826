"""The reference runtime's memory budget: every allocation is sized and checked before it is made.

A model file is untrusted input: a ``Data`` dimension of 10^12, a ``FileConstant`` matching a
huge sparse file, an ``.npy`` header or a ``BroadcastTo``/``ConcatV2``/``Tile`` chain in a small
graph can each ask numpy for more memory than the machine has. The runtime therefore adds up
what it holds (the parsed model, constants, inputs, every op's outputs: nothing is freed before
``run`` returns) and refuses, with :class:`MemoryLimitError`, any step whose estimated outputs
would take the total past ``max_bytes``. Estimates are upper bounds computed from shapes alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from npu_graph_export._dtypes import element_size
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import MemoryLimitError

Array = np.ndarray[Any, Any]

_GIB = 1 << 30
_FALLBACK_MAX_BYTES = 4 * _GIB
_CEILING_MAX_BYTES = 16 * _GIB


_CGROUP_LIMITS = (
    "/sys/fs/cgroup/memory.max",  # cgroup v2
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
)


def _memory_size() -> int | None:
    """Physical memory, or the container's memory limit when that is smaller."""
    try:
        physical = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None
    sizes = [physical] if physical > 0 else []
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            sizes.append(int(text))  # "max" (no limit) is skipped
    return min(sizes) if sizes else None


def default_max_bytes() -> int:
    """Half the memory (physical, or the container's limit), at most 16 GiB.

    4 GiB where neither can be read.
    """
    size = _memory_size()
    if size is None:
        return _FALLBACK_MAX_BYTES
    return min(size // 2, _CEILING_MAX_BYTES)


def format_bytes(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps it >= 1 (``1.50 GiB``)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def parse_bytes(text: str) -> int:
    """Parse ``4GiB``, ``512MiB``, ``1.5G``, ``100000`` (bytes) into a byte count.

    Raises:
        ValueError: not a positive size.
    """
    units = {
        "": 1,
        "b": 1,
        "k": 1 << 10,
        "kb": 1 << 10,
        "kib": 1 << 10,
        "m": 1 << 20,
        "mb": 1 << 20,
        "mib": 1 << 20,
        "g": 1 << 30,
        "gb": 1 << 30,
        "gib": 1 << 30,
        "t": 1 << 40,
        "tb": 1 << 40,
        "tib": 1 << 40,
    }
    stripped = text.strip().lower()
    number = stripped.rstrip("bkmgti ")
    unit = stripped[len(number) :].strip()
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if unit not in units or not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a size such as 4GiB, 512MiB or 1000000, got {text!r}")
    return max(1, int(value * units[unit]))


def check_max_bytes(value: object) -> int:
    """Validate a ``max_bytes`` argument (``None``: the default)."""
    if value is None:
        return default_max_bytes()
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_bytes must be a positive int (bytes) or None, got {value!r}")
    return value


class Budget:
    """Bytes held so far against a limit; :meth:`reserve` refuses what would not fit.

    Args:
        limit: The most bytes the run may hold.
        used: Bytes already held (the loaded model and its constants).
    """

    def __init__(self, limit: int, used: int = 0) -> None:
        self.limit = limit
        self.used = used

    def check(self, nbytes: int, what: str) -> None:
        """Raise :class:`MemoryLimitError` unless ``nbytes`` more would fit."""
        if self.used + nbytes > self.limit:
            held = f" on top of {format_bytes(self.used)} already held" if self.used else ""
            raise MemoryLimitError(
                f"{what} needs {format_bytes(nbytes)}{held}, limit {format_bytes(self.limit)}; "
                "pass a larger max_bytes (--max-bytes) if the machine has the memory, or check "
                "the model and input shapes"
            )

    def reserve(self, nbytes: int, what: str) -> None:
        """:meth:`check`, then count ``nbytes`` as held."""
        self.check(nbytes, what)
        self.used += nbytes


def held_bytes(array: Array) -> int:
    """Bytes ``array`` owns (0 for a view: its base is counted where it was made)."""
    return int(array.nbytes) if array.base is None else 0


def _values(array: Array, limit: int = 64) -> list[int] | None:
    """The integers in a small shape/count operand; None when it is large or not numeric."""
    if array.size > limit or array.dtype.kind not in "iubf":
        return None
    flat = array.reshape(-1)
    if array.dtype.kind == "f" and not np.isfinite(flat).all():
        return None  # the kernel refuses it
    return [int(v) for v in flat]  # kernels read float shapes with int() too


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The broadcast shape of ``shapes`` (numpy rules), or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _declared_itemsize(op: ge.OpDef) -> int:
    sizes = [element_size(desc.dtype) or 0 for desc in op.output_desc]
    # bf16 results compute as float32.
    return max([4 if size == 2 else size for size in sizes] + [0])


def _axis(args: Sequence[Array], index: int, rank: int) -> int:
    values = _values(args[index]) if len(args) > index else None
    if not values or rank == 0:
        return 0
    return values[0] % rank


def estimate_output_bytes(op: ge.OpDef, args: Sequence[Array]) -> int:
    """An upper bound of the bytes ``op``'s kernel allocates for its outputs, from shapes only.

    Ops whose output can be larger than their inputs (``BroadcastTo``, ``Fill``, ``ConcatV2``,
    ``Pack``, ``Tile``, ``PadV3``, ``AsStrided``, ``Histogram``, ``GatherV2``, ``Range``, matmuls,
    all-gather, broadcasting elementwise ops) get their own rule; anything else is bounded by
    the broadcast of its inputs per output.
    """
    item = max([a.itemsize for a in args] + [_declared_itemsize(op), 1])
    kind = op.type
    size: int | None = None
    if kind in {"BroadcastTo", "Expand"} and len(args) >= 2:
        shape = _values(args[1])
        if shape is not None:
            target = _broadcast([tuple(args[0].shape), tuple(abs(d) for d in shape)])
            size = math.prod(target if target is not None else (abs(d) for d in shape))
    elif kind == "Fill" and args:
        shape = _values(args[0])
        size = None if shape is None else math.prod(abs(d) for d in shape)
    elif kind in {"ConcatV2", "Concat", "Pack", "SplitV", "Split"}:
        size = sum(a.size for a in args)
    elif kind == "Tile" and len(args) >= 2:
        multiples = _values(args[1])
        size = None if multiples is None else args[0].size * math.prod(abs(m) for m in multiples)
    elif kind == "PadV3" and len(args) >= 2:
        pads = _values(args[1])
        if pads is not None and len(pads) == 2 * args[0].ndim:
            # The two layouts of the paddings pair them differently; every pad added to every
            # dimension bounds both.
            extra = sum(abs(p) for p in pads)
            size = math.prod(d + extra for d in args[0].shape)
    elif kind == "AsStrided" and len(args) >= 2:
        shape = _values(args[1])
        size = None if shape is None else math.prod(abs(d) for d in shape)
    elif kind == "Histogram" and "bins" in op.attr:
        size = abs(int(op.attr["bins"].i)) + args[0].size if args else 0
        item = max(item, 8)
    elif kind == "GroupedMatmul" and len(args) >= 2 and args[0].ndim == 2 and args[1].ndim == 3:
        size = 2 * args[0].shape[0] * max(args[1].shape[1:])
    elif kind == "OneHot" and len(args) >= 2:
        depth = _values(args[1])
        size = None if not depth else args[0].size * abs(depth[0])
    elif kind == "GatherV2" and len(args) >= 2:
        x = args[0]
        axis = _axis(args, 2, x.ndim)
        rows = x.shape[axis] if x.ndim else 1
        size = args[1].size * (x.size // rows if rows else 0)
    elif kind == "Range" and len(args) >= 3:
        try:
            start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in args[:3])
            count = abs((limit - start) / delta) + 1 if delta else 0.0
        except (IndexError, ValueError, TypeError, OverflowError):
            count = 0.0
        size = int(count) if math.isfinite(count) else 1 << 62
        item = max(item, 8)
    elif kind in {"MatMulV2", "BatchMatMulV2", "MatMul", "BatchMatMul"} and len(args) >= 2:
        x1, x2 = args[0], args[1]
        if x1.ndim >= 2 and x2.ndim >= 2:
            batch = _broadcast([tuple(x1.shape[:-2]), tuple(x2.shape[:-2])]) or ()
            rows = max(x1.shape[-2:])
            cols = max(x2.shape[-2:])
            size = math.prod(batch) * rows * cols * 2  # product, then the bias add
    elif kind in {"Conv2D", "MaxPoolV3", "AvgPoolV2"}:
        from npu_graph_export.runtime._kernels.nn import output_shape, padded_elements

        out = output_shape(op, args)
        if out is not None:
            # The output and its accumulator, plus the padded copy of the input the kernel
            # makes (large when a hostile graph pads a small input by a lot).
            size = 2 * math.prod(out) + padded_elements(op, args[0], out)
            item = max(item, 4)
    elif kind == "AdaptiveAvgPool2d" and args and args[0].ndim >= 2 and "output_size" in op.attr:
        pooled = [abs(int(v)) for v in op.attr["output_size"].list.i]
        if len(pooled) == 2:
            # The output and the float64 integral image the kernel sums windows from.
            planes = math.prod(args[0].shape[:-2])
            integral = (args[0].shape[-2] + 1) * (args[0].shape[-1] + 1)
            size = planes * (pooled[0] * pooled[1] + 2 * integral)
            item = max(item, 8)
    elif kind == "HcomAllGather" and args:
        group = int(op.attr["rank_size"].i) if "rank_size" in op.attr else 0
        if not group and "ranklist" in op.attr:
            group = len(op.attr["ranklist"].list.i)
        size = args[0].size * max(group, 1)
    elif kind == "HcomReduceScatter" and args:
        size = 2 * args[0].size
    if size is None:
        shapes = [tuple(a.shape) for a in args]
        joined = _broadcast(shapes)
        biggest = max([a.size for a in args] + [1])
        size = max(math.prod(joined) if joined is not None else biggest, biggest)
        size *= max(len(op.output_desc), 1)
    return size * item
