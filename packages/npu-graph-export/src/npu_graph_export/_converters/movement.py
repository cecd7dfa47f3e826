"""Data movement that changes sizes: padding (``PadV3``), repeat (``Tile``), strided views.

``F.pad`` in ``constant`` mode (and ``ZeroPad2d``) traces to ``aten.constant_pad_nd``; the
reflect, replicate and circular modes reach the exporter already decomposed into indexing and
slices. A negative pad crops: the exporter slices those sides off first (``StridedSliceV2``)
and pads the others, since ``PadV3`` takes non-negative paddings.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from npu_graph_export._converters._base import (
    Context,
    Value,
    args_of,
    aten,
    kwargs_of,
    register,
)
from npu_graph_export._converters._spatial import unsqueeze
from npu_graph_export._graph import Shape, Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError

_NO_MASKS = {
    "begin_mask": 0,
    "end_mask": 0,
    "ellipsis_mask": 0,
    "new_axis_mask": 0,
    "shrink_axis_mask": 0,
}


def _sign(ctx: Context, arg: Any) -> int:
    """-1, 0 or 1 for a pad amount; a size known only at run time must be provably >= 0."""
    if isinstance(arg, int):
        return (arg > 0) - (arg < 0)
    value = ctx.meta(arg) if isinstance(arg, fx.Node) else arg
    if isinstance(value, torch.SymInt) and statically_known_true(value >= 0):
        return 1
    raise UnsupportedOpError(
        f"a padding of {value} is only known at run time and may be negative (a crop), which "
        "PadV3 cannot do; pad by amounts known to be >= 0"
    )


def _crop(ctx: Context, x: Tensor, cuts: list[tuple[int, int, int]]) -> Tensor:
    """``x`` without ``before``/``after`` elements at each ``(axis, before, after)``."""
    axes = [axis for axis, _, _ in cuts]
    begin = [before for _, before, _ in cuts]
    end = [ctx.dim(x, axis) for axis, _, _ in cuts]
    ends: list[Any] = []
    for (_, _, after), size in zip(cuts, end, strict=True):
        if isinstance(size, int):
            ends.append(size - after)
        else:
            ends.append(ctx.emit("Sub", [size, ctx.tensor(after, size.dtype)], shape=()))
    shape = tuple(
        d if d < 0 or i not in axes else d - cuts[axes.index(i)][1] - cuts[axes.index(i)][2]
        for i, d in enumerate(x.shape)
    )
    return ctx.emit(
        "StridedSliceV2",
        [
            x,
            ctx.ints(begin, "crop_begin"),
            ctx.ints(ends, "crop_end"),
            ctx.ints(axes, "crop_axes"),
            ctx.ints([1] * len(axes), "crop_strides"),
        ],
        _NO_MASKS,
        shape=shape,
        suffix="crop",
    )


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node))
    x = ctx.tensor(args[0])
    pad = list(args[1])
    value = args[2] if len(args) > 2 else kwargs_of(node).get("value", 0)
    rank = len(x.shape)
    if len(pad) % 2 or len(pad) > 2 * rank:
        raise UnsupportedOpError(
            f"constant_pad_nd with {len(pad)} pad values for a {rank}-d tensor; give two per "
            "padded dimension, at most two per dimension"
        )
    # ATen lists the last dimension first: (last_begin, last_end, second_last_begin, ...).
    amounts: dict[int, tuple[Any, Any]] = {
        rank - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)
    }
    cuts = []
    paddings: list[Any] = []
    for axis in range(rank):
        before, after = amounts.get(axis, (0, 0))
        signs = (_sign(ctx, before), _sign(ctx, after))
        if min(signs) < 0:
            cuts.append((axis, -before if signs[0] < 0 else 0, -after if signs[1] < 0 else 0))
        paddings += [before if signs[0] > 0 else 0, after if signs[1] > 0 else 0]
    if cuts:
        x = _crop(ctx, x, cuts)
    if all(isinstance(p, int) and p == 0 for p in paddings):
        return ctx.emit("Identity", [x])
    fill = ctx.tensor(value, x.dtype)
    return ctx.emit(
        "PadV3",
        [x, ctx.ints(paddings, "paddings"), fill],
        {"mode": "constant", "paddings_contiguous": True},
    )


@register(aten.repeat.default)
def _repeat(ctx: Context, node: fx.Node) -> Value:
    x = ctx.tensor(args_of(node)[0])
    repeats = list(args_of(node)[1])
    extra = len(repeats) - len(x.shape)
    if extra < 0:
        raise UnsupportedOpError(
            f"repeat with {len(repeats)} counts for a {len(x.shape)}-d tensor; give one count "
            "per dimension"
        )
    if extra:
        # Tile takes one multiple per dimension: new leading dimensions first, as ATen does.
        x = unsqueeze(ctx, x, list(range(extra)), "x/Unsqueeze")
    return ctx.emit("Tile", [x, ctx.ints(repeats, "multiples")])


def _contiguous_strides(shape: Shape) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _same_layout(shape: Shape, strides: list[int], want: list[int]) -> bool:
    """Strides equal where they matter (a dimension of size 1 has any stride)."""
    return all(s == w or d == 1 for d, s, w in zip(shape, strides, want, strict=True))


@register(aten.as_strided.default)
def _as_strided(ctx: Context, node: fx.Node) -> Value:
    args = list(args_of(node)) + [None] * (4 - len(args_of(node)))
    source, size, stride, offset = args[:4]
    offset = 0 if offset is None else offset
    value = ctx.meta(source) if isinstance(source, fx.Node) else None
    if not isinstance(value, torch.Tensor):
        raise UnsupportedOpError("as_strided of something that is not a tensor")
    numbers = [*size, *stride, offset, *value.shape, *value.stride(), value.storage_offset()]
    if not all(isinstance(v, int) for v in numbers):
        raise UnsupportedOpError(
            "as_strided with sizes or strides only known at run time has no GE converter "
            "here; export with static shapes"
        )
    x = ctx.tensor(source)
    in_shape = tuple(int(d) for d in value.shape)
    in_strides = [int(s) for s in value.stride()]
    # GE tensors are dense and row-major: the strides index the input's storage, which is the
    # row-major order of the input only if the input is a dense view (a permutation of a
    # contiguous tensor). Such an input is transposed to its storage order first.
    order = sorted(range(len(in_shape)), key=lambda i: (-in_strides[i], i))
    stored = tuple(in_shape[i] for i in order)
    if value.storage_offset() != 0 or not _same_layout(
        stored, [in_strides[i] for i in order], _contiguous_strides(stored)
    ):
        raise UnsupportedOpError(
            f"as_strided of a view with strides {in_strides} and offset "
            f"{value.storage_offset()} reads memory outside the tensor's own values; call "
            ".contiguous() before it"
        )
    if order != sorted(order):
        x = ctx.emit("Transpose", [x, ctx.ints(order, "perm")], shape=stored, suffix="storage")
    out_shape = tuple(int(d) for d in size)
    out_strides = [int(s) for s in stride]
    count = 1
    for d in out_shape:
        count *= d
    reach = int(offset) + sum((d - 1) * s for d, s in zip(out_shape, out_strides, strict=True))
    if count and (min(out_strides, default=0) < 0 or reach >= value.numel()):
        raise UnsupportedOpError(
            f"as_strided to size {list(out_shape)} and strides {out_strides} reads past the "
            f"{value.numel()} elements of its input"
        )
    if (
        int(offset) == 0
        and count == value.numel()
        and _same_layout(out_shape, out_strides, _contiguous_strides(out_shape))
    ):
        # The common case (a view torch made with as_strided): the same values, reshaped.
        return ctx.emit("Reshape", [x, ctx.ints(list(out_shape))], {"axis": 0, "num_axes": -1})
    return ctx.emit(
        "AsStrided",
        [
            x,
            ctx.ints(list(out_shape), "size"),
            ctx.ints(out_strides, "stride"),
            ctx.const(int(offset), ge.DT_INT64, "storage_offset"),
        ],
    )
