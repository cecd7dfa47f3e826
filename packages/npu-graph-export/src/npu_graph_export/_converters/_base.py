"""What every converter gets: the graph builder, converted values, and small helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from npu_graph_export._graph import AttrValue, DType, GraphBuilder, Shape, Tensor, set_layout
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import ExportError

GE_OF_TORCH: dict[torch.dtype, int] = {
    torch.float32: ge.DT_FLOAT,
    torch.float16: ge.DT_FLOAT16,
    torch.bfloat16: ge.DT_BF16,
    torch.float64: ge.DT_DOUBLE,
    torch.int8: ge.DT_INT8,
    torch.uint8: ge.DT_UINT8,
    torch.int16: ge.DT_INT16,
    torch.int32: ge.DT_INT32,
    torch.int64: ge.DT_INT64,
    torch.uint16: ge.DT_UINT16,
    torch.uint32: ge.DT_UINT32,
    torch.uint64: ge.DT_UINT64,
    torch.bool: ge.DT_BOOL,
    torch.complex64: ge.DT_COMPLEX64,
    torch.complex128: ge.DT_COMPLEX128,
    torch.float8_e5m2: ge.DT_FLOAT8_E5M2,
    torch.float8_e4m3fn: ge.DT_FLOAT8_E4M3FN,
}


INT32_MAX = 2**31 - 1

Value = Any
"""What an FX node converts to: a Tensor, a list of Tensors, or a Python constant."""


@dataclass(frozen=True)
class Unavailable:
    """An output of an ATen op that its GE op does not compute (max-pool indices).

    Reading it (``operator.getitem``) raises :class:`UnsupportedOpError` with ``reason``.
    """

    reason: str


def ge_dtype(dtype: torch.dtype) -> int:
    """Return the GE data type of a torch dtype, or raise a clear error."""
    try:
        return GE_OF_TORCH[dtype]
    except KeyError:
        raise ExportError(
            f"dtype {dtype} has no GE equivalent this exporter supports; cast the model to one "
            f"of {sorted(str(d) for d in GE_OF_TORCH)} before exporting"
        ) from None


def static_shape(value: torch.Tensor) -> Shape:
    """The shape of a fake tensor, with -1 for every dimension only known at run time."""
    return tuple(int(d) if is_concrete_int(d) else -1 for d in value.shape)


class Context:
    """State shared by the converters of one graph.

    Attributes:
        builder: The GE graph being built.
        env: Converted value of every FX node seen so far.
        node: The FX node being converted.
        groups: Process groups used by collectives: GE group name -> ranks.
    """

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self.env: dict[fx.Node, Value] = {}
        self.node: fx.Node | None = None
        self.groups: dict[str, list[int]] = {}

    # -- reading the FX node -------------------------------------------------------------------

    @property
    def current(self) -> fx.Node:
        """The FX node being converted."""
        assert self.node is not None
        return self.node

    def meta(self, node: fx.Node | None = None) -> Any:
        """The fake value Dynamo recorded for ``node`` (default: the current node)."""
        return (node or self.current).meta.get("val")

    def out_dtype(self) -> int:
        """GE dtype of the current node's (first) output."""
        value = self.meta()
        value = value[0] if isinstance(value, list | tuple) else value
        return ge_dtype(value.dtype)

    def out_shape(self) -> Shape:
        """Static shape (-1 for dynamic dims) of the current node's (first) output."""
        value = self.meta()
        value = value[0] if isinstance(value, list | tuple) else value
        return static_shape(value)

    def value(self, arg: Any) -> Value:
        """The converted value of an FX argument (nodes looked up, lists mapped, rest as is)."""
        if isinstance(arg, fx.Node):
            return self.env[arg]
        if isinstance(arg, list | tuple):
            return [self.value(a) for a in arg]
        return arg

    def torch_dtype_of(self, arg: Any) -> torch.dtype | None:
        """The torch dtype of a tensor argument, or None for a Python scalar."""
        if isinstance(arg, fx.Node):
            value = self.meta(arg)
            if isinstance(value, torch.Tensor):
                return value.dtype
            if isinstance(value, torch.SymInt):
                return torch.int64
            if isinstance(value, torch.SymFloat):
                return torch.float32
        return None

    # -- making GE tensors ---------------------------------------------------------------------

    def name(self, suffix: str | None = None) -> str:
        """Op name for the current node, or for a helper op of it."""
        base = self.current.name
        return base if suffix is None else f"{base}/{suffix}"

    def const(self, value: Any, dtype: int, suffix: str = "const") -> Tensor:
        """A ``Const`` holding ``value`` (a scalar or nested list) with GE dtype ``dtype``."""
        from npu_graph_export._dtypes import NUMPY_OF_GE

        array = np.asarray(value, dtype=NUMPY_OF_GE.get(dtype, np.float32))
        tensor = self.builder.const(array, self.name(suffix))
        return self.cast(tensor, dtype) if tensor.dtype != dtype else tensor

    def tensor(self, arg: Any, dtype: int | None = None) -> Tensor:
        """The GE tensor of an argument; a Python scalar becomes a 0-d ``Const`` of ``dtype``."""
        value = self.value(arg)
        if isinstance(value, Tensor):
            return value if dtype is None else self.cast(value, dtype)
        if isinstance(value, bool | int | float):
            if dtype is None:
                dtype = (
                    ge.DT_BOOL
                    if isinstance(value, bool)
                    else ge.DT_INT64
                    if isinstance(value, int)
                    else ge.DT_FLOAT
                )
            return self.const(value, dtype, "scalar")
        raise ExportError(
            f"{self.current.target} received {type(value).__name__} where a tensor was expected; "
            "pass tensors (not Python objects) to the ops of the exported model"
        )

    def cast(self, tensor: Tensor, dtype: int) -> Tensor:
        """``tensor`` converted to ``dtype`` (a ``Cast`` op unless it already has it)."""
        if tensor.dtype == dtype:
            return tensor
        return self.builder.add1(
            "Cast",
            self.name("Cast"),
            [tensor],
            dtype,
            tensor.shape,
            {"dst_type": DType(dtype, as_int=True)},
        )

    def emit(
        self,
        op_type: str,
        inputs: Sequence[Tensor | None],
        attrs: Mapping[str, AttrValue] | None = None,
        *,
        dtype: int | None = None,
        shape: Shape | None = None,
        suffix: str | None = None,
    ) -> Tensor:
        """Append a one-output op; dtype and shape default to the current node's output."""
        return self.builder.add1(
            op_type,
            self.name(suffix),
            inputs,
            self.out_dtype() if dtype is None else dtype,
            self.out_shape() if shape is None else shape,
            attrs,
        )

    def layout(
        self,
        tensor: Tensor,
        layout: str,
        *,
        inputs: Sequence[int] = (),
        outputs: Sequence[int] = (0,),
    ) -> None:
        """Set ``layout`` on input and output descriptors of the op that made ``tensor``.

        GE reads formats only from descriptors: an NCHW operator (``Conv2D``) learns that its
        input is NCHW from its own input descriptor, as TorchAir's converters write it.
        """
        op = next(o for o in reversed(self.builder.graph.op) if o.name == tensor.op)
        for index in inputs:
            set_layout(op.input_desc[index], layout)
        for index in outputs:
            set_layout(op.output_desc[index], layout)

    def ints(self, values: Sequence[Any], suffix: str = "shape") -> Tensor:
        """A 1-D int64 tensor of ``values``; symbolic sizes make it a ``Pack`` of scalars."""
        converted = [self.value(v) for v in values]
        if all(isinstance(v, int) for v in converted):
            return self.const(np.asarray(converted, dtype=np.int64), ge.DT_INT64, suffix)
        scalars = [
            self.cast(v, ge.DT_INT64) if isinstance(v, Tensor) else self.const(int(v), ge.DT_INT64)
            for v in converted
        ]
        return self.builder.add1(
            "Pack",
            self.name(suffix),
            scalars,
            ge.DT_INT64,
            (len(scalars),),
            {"axis": 0, "N": len(scalars)},
        )

    def dim(self, tensor: Tensor, axis: int) -> Tensor | int:
        """Size of ``tensor`` along ``axis``: an int when static, else a 0-d int64 tensor."""
        axis = axis % max(len(tensor.shape), 1)
        if tensor.shape[axis] >= 0:
            return tensor.shape[axis]
        shape = self.builder.add1(
            "Shape",
            self.name("Shape"),
            [tensor],
            ge.DT_INT64,
            (len(tensor.shape),),
            {"dtype": DType(ge.DT_INT64, as_int=True)},  # an Int attribute in GE's IR
        )
        index = self.const(axis, ge.DT_INT64, "index")
        # As TorchAir's sym_size: GE must not fold a size read from Shape into a constant.
        return self.builder.add1(
            "Gather",
            self.name("Gather"),
            [shape, index],
            ge.DT_INT64,
            (),
            {"batch_dims": 0, "_force_unknown_shape": True},
        )


Converter = Callable[[Context, fx.Node], Value]

CONVERTERS: dict[Any, Converter] = {}
"""The one table of ATen (and Python operator) targets to their GE converter."""

NAMED_CONVERTERS: dict[str, Converter] = {}
"""Converters of operators other libraries register (``transformers.grouped_mm_fallback``), by
the name :func:`converter_for` reads off the target: such an op exists only once its library is
imported, which this package never does."""


def register(*targets: Any) -> Callable[[Converter], Converter]:
    """Register a converter for each of ``targets`` (an OpOverload or a Python callable)."""

    def wrap(fn: Converter) -> Converter:
        for target in targets:
            CONVERTERS[target] = fn
        return fn

    return wrap


def register_named(*names: str) -> Callable[[Converter], Converter]:
    """Register a converter for each operator named ``namespace.name.overload``."""

    def wrap(fn: Converter) -> Converter:
        for name in names:
            NAMED_CONVERTERS[name] = fn
        return fn

    return wrap


def target_name(target: Any) -> str:
    """``namespace.name.overload`` of an operator, or a Python callable's name."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def converter_for(target: Any) -> Converter | None:
    """The converter of an FX call target, or None."""
    found = CONVERTERS.get(target)
    if found is None and isinstance(target, torch._ops.OpOverload):
        found = NAMED_CONVERTERS.get(target_name(target))
    return found


def args_of(node: fx.Node) -> tuple[Any, ...]:
    """The node's positional arguments, typed loosely: converters check what they need."""
    return tuple(node.args)


def kwargs_of(node: fx.Node) -> dict[str, Any]:
    """The node's keyword arguments, typed loosely."""
    return dict(node.kwargs)


def positive_dim(dim: int, rank: int) -> int:
    """``dim`` as a non-negative axis of a tensor of ``rank`` dimensions."""
    return dim % rank if rank else 0


aten = torch.ops.aten
