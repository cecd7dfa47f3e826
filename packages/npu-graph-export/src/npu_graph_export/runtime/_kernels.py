"""numpy implementations of the GE operators in ``_opdefs.OPS`` (reference semantics, not speed)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_graph_export._dtypes import NUMPY_OF_GE, WIDENED, narrow, proto_of_attr
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


def _checked_shape(values: Any, itemsize: int = 8) -> tuple[int, ...]:
    shape = tuple(int(v) for v in np.asarray(values).reshape(-1))
    if any(d < 0 for d in shape):
        raise KernelError(f"negative dimension in shape {shape}")
    check_size(math.prod(shape), itemsize, f"shape {shape}")
    return shape


def _axis(value: Any, rank: int) -> int:
    axis = int(np.asarray(value).reshape(-1)[0])
    if not -rank <= axis < max(rank, 1):
        raise KernelError(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


Kernel = Callable[[ge.OpDef, Sequence[Array], Collectives], list[Array]]
KERNELS: dict[str, Kernel] = {}


def kernel(*names: str) -> Callable[[Kernel], Kernel]:
    def wrap(fn: Kernel) -> Kernel:
        for name in names:
            KERNELS[name] = fn
        return fn

    return wrap


def _simple(fn: Callable[[Array, Array], Array]) -> Kernel:
    def run(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
        return [np.asarray(fn(xs[0], xs[1]))]

    return run


_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "RealDiv": np.true_divide,
    "FloorDiv": np.floor_divide,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Pow": np.power,
    "Equal": np.equal,
    "NotEqual": np.not_equal,
    "Less": np.less,
    "LessEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and,
    "LogicalOr": np.logical_or,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
}
for _name, _fn in _BINARY.items():
    KERNELS[_name] = _simple(_fn)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: Array) -> Array:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=x.dtype)


_UNARY: dict[str, Callable[[Array], Array]] = {
    "Identity": lambda x: x,
    "Neg": np.negative,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Rsqrt": lambda x: np.asarray(1.0 / np.sqrt(x), dtype=x.dtype),
    "Sin": np.sin,
    "Cos": np.cos,
    "Tanh": np.tanh,
    "Sigmoid": _sigmoid,
    "Abs": np.abs,
    "Relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "Reciprocal": lambda x: np.asarray(1.0 / x, dtype=x.dtype),
    "Erf": lambda x: _erf(x).astype(x.dtype),
    "LogicalNot": np.logical_not,
    "OnesLike": np.ones_like,
    "ZerosLike": np.zeros_like,
}
for _name, _fn1 in _UNARY.items():
    KERNELS[_name] = (lambda f: lambda op, xs, _: [np.asarray(f(xs[0]))])(_fn1)


def _gelu_tanh(x: Array) -> Array:
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return np.asarray(0.5 * x * (1.0 + np.tanh(inner)), dtype=x.dtype)


@kernel("Gelu")
def _gelu(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [_gelu_tanh(xs[0])]


@kernel("GeluV2")
def _gelu_v2(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if attr_str(op, "approximate", "none") == "tanh":
        return [_gelu_tanh(x)]
    return [np.asarray(0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), dtype=x.dtype)]


@kernel("Swish")
def _swish(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    return [np.asarray(x * _sigmoid(x * np.asarray(attr_float(op, "scale", 1.0), x.dtype)))]


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


@kernel("Cast")
def _cast(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    target = attr_type(op, "dst_type")
    if target in WIDENED:
        # Computed as float32, but holding only the values the narrow type can represent.
        return [narrow(xs[0].astype(np.float32), target)]
    return [xs[0].astype(numpy_dtype(target))]


@kernel("Tril", "Triu")
def _triangle(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    if xs[0].ndim < 2:
        raise KernelError("Tril/Triu need a tensor of rank >= 2")
    fn = np.tril if op.type == "Tril" else np.triu
    return [fn(xs[0], k=attr_int(op, "diagonal", 0))]


@kernel("Shape")
def _shape(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    # GE's default for Shape.dtype is DT_INT32.
    dtype = numpy_dtype(attr_type(op, "dtype", ge.DT_INT32))
    return [np.asarray(xs[0].shape, dtype=dtype)]


@kernel("Squeeze")
def _squeeze(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = attr_ints(op, "axis") if "axis" in op.attr else []
    if not axes:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(_axis(a, x.ndim) for a in axes))]


@kernel("SelectV2")
def _select(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.where(xs[0].astype(bool), xs[1], xs[2])]


def _adj(x: Array, flag: bool) -> Array:
    return np.swapaxes(x, -1, -2) if flag else x


@kernel("MatMulV2", "BatchMatMulV2")
def _matmul(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    first, second = (
        ("transpose_x1", "transpose_x2") if op.type == "MatMulV2" else ("adj_x1", "adj_x2")
    )
    x1, x2 = xs[0], xs[1]
    if x1.ndim < 2 or x2.ndim < 2:
        raise KernelError("matmul operands need rank >= 2")
    y = np.matmul(_adj(x1, attr_bool(op, first)), _adj(x2, attr_bool(op, second)))
    if len(xs) > 2:
        y = y + xs[2]
    return [y]


@kernel("SoftmaxV2", "LogSoftmaxV2")
def _softmax(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(_axis(a, x.ndim) for a in (attr_ints(op, "axes") if "axes" in op.attr else [-1]))
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x - np.max(x, axis=axes, keepdims=True)
        exp = np.exp(shifted)
        total = np.sum(exp, axis=axes, keepdims=True)
        if op.type == "SoftmaxV2":
            return [exp / total]
        return [shifted - np.log(total)]


@kernel("LayerNorm")
def _layer_norm(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, gamma, beta = xs[0], xs[1], xs[2]
    begin = _axis(attr_int(op, "begin_norm_axis"), x.ndim)
    axes = tuple(range(begin, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    eps = attr_float(op, "epsilon", 1e-5)
    y = (x - mean) / np.sqrt(variance + np.asarray(eps, x.dtype)) * gamma + beta
    return [y, mean, variance]


@kernel("ReduceMean", "ReduceSum", "ReduceMax")
def _reduce(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axes = tuple(_axis(a, x.ndim) for a in np.asarray(xs[1]).reshape(-1))
    keep = attr_bool(op, "keep_dims")
    if op.type == "ReduceMean":
        y = np.mean(x, axis=axes, keepdims=keep)
    elif op.type == "ReduceSum":
        y = np.sum(x, axis=axes, keepdims=keep)
    else:
        y = np.max(x, axis=axes, keepdims=keep)
    return [np.asarray(y, dtype=x.dtype)]


@kernel("Reshape")
def _reshape(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    shape = [int(d) for d in np.asarray(xs[1]).reshape(-1)]
    if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
        raise KernelError(f"invalid reshape target {shape}")
    return [np.reshape(xs[0], shape)]


@kernel("Transpose")
def _transpose(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    perm = [int(p) for p in np.asarray(xs[1]).reshape(-1)]
    return [np.transpose(xs[0], perm)]


@kernel("ExpandDims")
def _expand_dims(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.expand_dims(xs[0], _axis(xs[1], xs[0].ndim + 1))]


@kernel("BroadcastTo")
def _broadcast_to(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    return [np.broadcast_to(xs[0], _checked_shape(xs[1]))]


@kernel("ConcatV2")
def _concat(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    parts = list(xs[:-1])
    if not parts:
        raise KernelError("ConcatV2 needs at least one input")
    return [np.concatenate(parts, axis=_axis(xs[-1], parts[0].ndim))]


@kernel("Pack")
def _pack(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    if not xs:
        raise KernelError("Pack needs at least one input")
    return [np.stack(list(xs), axis=_axis(attr_int(op, "axis", 0), xs[0].ndim + 1))]


@kernel("SplitV")
def _split(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = _axis(xs[2], x.ndim)
    sizes = [int(s) for s in np.asarray(xs[1]).reshape(-1)]
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise KernelError(f"split sizes {sizes} do not add up to dimension {x.shape[axis]}")
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@kernel("GatherV2")
def _gather(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = _axis(xs[2], x.ndim) if x.ndim else 0
    indices = xs[1].astype(np.int64)
    size = x.shape[axis] if x.ndim else 1
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise KernelValueError(
            f"gather index out of range for dimension of size {size} (indices span "
            f"{int(indices.min())}..{int(indices.max())})"
        )
    return [np.take(x, indices, axis=axis)]


@kernel("Gather")
def _gather_axis0(op: ge.OpDef, xs: Sequence[Array], comm: Collectives) -> list[Array]:
    axis = np.zeros((), np.int64)
    return _gather(op, [xs[0], xs[1], axis], comm)


@kernel("GatherElements")
def _gather_elements(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, index = xs[0], xs[1].astype(np.int64)
    axis = _axis(attr_int(op, "dim", 0), x.ndim)
    if index.ndim != x.ndim:
        raise KernelError("GatherElements index must have the rank of x")
    size = x.shape[axis]
    if index.size and (index.min() < -size or index.max() >= size):
        raise KernelValueError(f"gather index out of range for dimension of size {size}")
    return [np.take_along_axis(x, np.where(index < 0, index + size, index), axis=axis)]


@kernel("IndexByTensor")
def _index_by_tensor(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, indices = xs[0], [i.astype(np.int64) for i in xs[1:]]
    mask = attr_ints(op, "indices_mask") if "indices_mask" in op.attr else [1] * len(indices)
    if sum(1 for m in mask if m) != len(indices) or len(mask) > x.ndim:
        raise KernelError(f"indices_mask {mask} does not match {len(indices)} index tensors")
    key: list[Any] = []
    feed = iter(indices)
    for axis, used in enumerate(mask):
        if not used:
            key.append(slice(None))
            continue
        index = next(feed)
        size = x.shape[axis]
        if index.size and (index.min() < -size or index.max() >= size):
            raise KernelValueError(f"index out of range for dimension of size {size}")
        key.append(index)
    # numpy's advanced indexing places the indexed dimensions as ATen's index does.
    return [x[tuple(key)]]


@kernel("TensorScatterUpdate")
def _tensor_scatter_update(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x, indices, updates = xs[0], xs[1].astype(np.int64), xs[2]
    if indices.ndim < 1 or indices.shape[-1] > x.ndim:
        raise KernelError(f"TensorScatterUpdate indices of shape {list(indices.shape)}")
    depth = indices.shape[-1]
    sizes = np.asarray(x.shape[:depth], np.int64)
    flat = indices.reshape(-1, depth)
    if flat.size and ((flat < 0).any() or (flat >= sizes).any()):
        raise KernelValueError(f"scatter index out of range for dimensions {list(sizes)}")
    y = np.array(x, copy=True)
    rows = updates.reshape(flat.shape[0], *x.shape[depth:])
    for position, row in zip(flat, rows, strict=True):
        y[tuple(position)] = row
    return [y]


@kernel("Cumsum")
def _cumsum(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    axis = _axis(xs[1], x.ndim)
    if attr_bool(op, "reverse"):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if attr_bool(op, "exclusive"):
        y = y - x
    return [np.flip(y, axis) if attr_bool(op, "reverse") else y]


@kernel("Assign")
def _assign(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    ref, value = xs[0], xs[1]
    if ref.shape != value.shape and attr_bool(op, "validate_shape", True):
        raise KernelError(f"Assign of shape {list(value.shape)} into {list(ref.shape)}")
    # The ref is the caller's array (RefData): updated in place, as on the device.
    np.copyto(ref, value.astype(ref.dtype, copy=False))
    return [ref]


@kernel("StridedSliceV2")
def _strided_slice(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    for mask in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if attr_int(op, mask, 0):
            raise KernelError(f"{mask} is not supported by the reference runtime")
    begin = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    end = [int(v) for v in np.asarray(xs[2]).reshape(-1)]
    axes = (
        [int(v) for v in np.asarray(xs[3]).reshape(-1)] if len(xs) > 3 else list(range(len(begin)))
    )
    strides = [int(v) for v in np.asarray(xs[4]).reshape(-1)] if len(xs) > 4 else [1] * len(begin)
    if not len(begin) == len(end) == len(axes) == len(strides):
        raise KernelError("begin, end, axes and strides must have the same length")
    index: list[slice] = [slice(None)] * x.ndim
    for b, e, a, s in zip(begin, end, axes, strides, strict=True):
        if s == 0:
            raise KernelError("slice stride 0")
        index[_axis(a, x.ndim)] = slice(b, e, s)
    return [x[tuple(index)]]


@kernel("Fill")
def _fill(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    value = np.asarray(xs[1])
    shape = _checked_shape(xs[0], value.dtype.itemsize)
    return [np.full(shape, value.reshape(-1)[0] if value.size else 0, value.dtype)]


@kernel("Range")
def _range(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in xs[:3])
    if delta == 0 or not np.isfinite([start, limit, delta]).all():
        raise KernelError("Range needs finite bounds and a non-zero delta")
    check_size(int(abs((limit - start) / delta)) + 1, np.asarray(xs[0]).dtype.itemsize, "Range")
    return [np.arange(start, limit, delta, dtype=np.asarray(xs[0]).dtype)]


def _group_size(op: ge.OpDef) -> int:
    # HcomAllReduce has no rank_size attribute: the group name written for non-HCCL process
    # groups lists the ranks (``tag=...;rank_list=0,1``); an HCCL communicator name does not.
    group = attr_str(op, "group", "")
    for part in group.split(";"):
        key, _, ranks = part.partition("=")
        if key.strip() == "rank_list" and ranks:
            return len(ranks.split(","))
    raise KernelError(
        f"the size of group {group!r} is unknown to the reference runtime (no rank_list in its "
        "name); run this .air with GE"
    )


@kernel("HcomAllReduce", "HcomAllGather", "HcomReduceScatter")
def _collective(op: ge.OpDef, xs: Sequence[Array], comm: Collectives) -> list[Array]:
    if comm.mode != "replicated":
        raise KernelError(
            f"{op.type} needs other ranks; load the model with collectives='replicated' to assume "
            "every rank holds the same input, or run the .air on devices with ATC/GE"
        )
    x = xs[0]
    size = attr_int(op, "rank_size") if "rank_size" in op.attr else _group_size(op)
    if size < 1 or size > 4096:
        raise KernelError(f"invalid group size {size}")
    if op.type == "HcomAllGather":
        return [np.concatenate([x] * size, axis=0)]
    reduction = attr_str(op, "reduction", "sum")
    if reduction == "sum":
        reduced = x * np.asarray(size, x.dtype)
    elif reduction == "prod":
        reduced = x**size
    elif reduction in {"max", "min"}:
        reduced = x
    else:
        raise KernelError(f"unknown reduction {reduction!r}")
    if op.type == "HcomAllReduce":
        return [reduced]
    if x.ndim == 0 or x.shape[0] % size:
        raise KernelError("reduce-scatter input's first dimension must divide by the group size")
    chunk = x.shape[0] // size
    rank = comm.rank if 0 <= comm.rank < size else 0
    return [reduced[rank * chunk : (rank + 1) * chunk]]
