"""What the convolution, pooling and batch-norm converters share: NCHW ops on 4-D tensors.

GE's ``Conv2D``, ``MaxPoolV3``, ``AvgPoolV2`` and ``BNInfer`` take 4-D NCHW tensors (with
``data_format="NCHW"``) and four-element attribute lists (``[1, 1, h, w]`` for strides, kernel
sizes and dilations; ``[top, bottom, left, right]`` for pads). Lower-rank inputs are lifted to
4-D with ``Unsqueeze`` and brought back with ``Squeeze``, as TorchAir's converters do. See
docs/export-convolutions.md for the sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npu_graph_export._converters._base import Context
from npu_graph_export._graph import Shape, Tensor
from npu_graph_export.errors import UnsupportedOpError


def static_ints(values: Any, what: str, count: int, default: Sequence[int] = ()) -> list[int]:
    """``values`` as ``count`` Python ints (a single value repeated, empty -> ``default``).

    Raises:
        UnsupportedOpError: a value is only known at run time, or the list has another length.
    """
    items = [values] if isinstance(values, int) else list(values or ())
    if not items:
        items = list(default)
    if len(items) == 1:
        items = items * count
    if len(items) != count or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in items
    ):
        raise UnsupportedOpError(
            f"{what} must be {count} integers known when exporting, got {values!r}; "
            "give the layer fixed sizes"
        )
    return [int(v) for v in items]


def unsqueeze(ctx: Context, x: Tensor, axes: Sequence[int], suffix: str) -> Tensor:
    """``x`` with size-1 dimensions inserted at ``axes`` (GE ``Unsqueeze``)."""
    shape = list(x.shape)
    for axis in sorted(axes):
        shape.insert(axis, 1)
    return ctx.emit("Unsqueeze", [x], {"axes": list(axes)}, shape=tuple(shape), suffix=suffix)


def squeeze(ctx: Context, x: Tensor, axes: Sequence[int], shape: Shape) -> Tensor:
    """``x`` without the size-1 dimensions at ``axes``, as the current node's output."""
    return ctx.emit("Squeeze", [x], {"axis": list(axes)}, shape=shape)


def lifted_shape(shape: Shape, axes: Sequence[int]) -> Shape:
    """``shape`` with size-1 dimensions inserted at ``axes``."""
    lifted = list(shape)
    for axis in sorted(axes):
        lifted.insert(axis, 1)
    return tuple(lifted)
