"""Build a GE ``GraphDef`` op by op (no torch: the converters feed it plain dtypes and shapes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from npu_graph_export._dtypes import GE_OF_NUMPY
from npu_graph_export._opdefs import OPS
from npu_graph_export._proto import ge_ir_pb2 as ge

WEIGHT_ATTR = "_weight_name"
"""Op attribute holding a weight's qualified name (``layers.0.q.weight``) on Const/FileConstant."""

DIMS_ATTR = "_dim_symbols"
"""Data op attribute: comma-separated symbol per dimension (empty when static), so the runtime
can check that dimensions the model ties together (batch of ``ids`` and ``mask``) agree."""

Shape = tuple[int, ...]
"""A tensor shape; -1 marks a dimension only known at run time."""


@dataclass(frozen=True)
class Tensor:
    """One output of a GE op, as seen by the ops that consume it."""

    op: str
    index: int
    dtype: int
    shape: Shape

    @property
    def ref(self) -> str:
        """The ``"<op>:<index>"`` string GE uses for a data edge."""
        return f"{self.op}:{self.index}"


@dataclass(frozen=True)
class DType:
    """Marks an attribute value as a GE data type (``AttrDef.dt``) rather than a plain int."""

    value: int


AttrValue = bool | int | float | str | bytes | DType | Sequence[int] | Sequence[float] | np.ndarray


def tensor_desc(name: str, dtype: int, shape: Iterable[int]) -> ge.TensorDescriptor:
    """Return a descriptor in the layout GE expects for graph tensors (``ND`` on the NPU)."""
    desc = ge.TensorDescriptor(name=name, dtype=dtype, layout="ND", device_type="NPU")  # type: ignore[arg-type]
    desc.shape.dim.extend(int(d) for d in shape)
    return desc


def tensor_def(array: np.ndarray) -> ge.TensorDef:
    """Return a ``TensorDef`` holding ``array``'s raw little-endian bytes."""
    contiguous = np.ascontiguousarray(array)
    little = contiguous.astype(contiguous.dtype.newbyteorder("<"), copy=False)
    dtype = GE_OF_NUMPY[np.dtype(array.dtype)]
    return ge.TensorDef(desc=tensor_desc("y", dtype, array.shape), data=little.tobytes())


def set_attr(target: ge.AttrDef, value: AttrValue) -> None:
    """Store a Python value in a GE ``AttrDef`` using the field GE reads for that kind."""
    if isinstance(value, DType):
        target.dt = value.value
    elif isinstance(value, bool):
        target.b = value
    elif isinstance(value, int):
        target.i = value
    elif isinstance(value, float):
        target.f = value
    elif isinstance(value, str):
        target.s = value.encode()
    elif isinstance(value, bytes):
        target.s = value
    elif isinstance(value, np.ndarray):
        target.t.CopyFrom(tensor_def(value))
    else:
        items = list(value)
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            target.list.i.extend(int(item) for item in items)
            target.list.val_type = ge.AttrDef.ListValue.VT_LIST_INT
        else:
            target.list.f.extend(float(item) for item in items)
            target.list.val_type = ge.AttrDef.ListValue.VT_LIST_FLOAT


class GraphBuilder:
    """Appends GE ops to one ``GraphDef`` and hands out :class:`Tensor` references to them."""

    def __init__(self, name: str) -> None:
        self.graph = ge.GraphDef(name=name)
        self._names: set[str] = set()
        self.scope_attrs: dict[str, AttrValue] = {}
        """Attributes stamped on every op added while set (the current FX node's module stack)."""

    def unique(self, base: str) -> str:
        """Return ``base``, or ``base_<n>`` if an op already has that name."""
        name, n = base, 0
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def add(
        self,
        op_type: str,
        name: str,
        inputs: Sequence[Tensor],
        outputs: Sequence[tuple[int, Shape]],
        attrs: Mapping[str, AttrValue] | None = None,
    ) -> list[Tensor]:
        """Append one op and return references to its outputs.

        Args:
            op_type: GE operator type; must be in the catalogue of ``_opdefs``.
            name: Wanted op name; made unique.
            inputs: Producer outputs in the operator's input order.
            outputs: ``(dtype, shape)`` of each output.
            attrs: Operator attributes by GE attribute name.

        Returns:
            One :class:`Tensor` per output.
        """
        spec = OPS[op_type]
        op = self.graph.op.add(name=self.unique(name), type=op_type)
        for input_name, tensor in zip(spec.input_names(len(inputs)), inputs, strict=True):
            op.input.append(tensor.ref)
            op.input_desc.append(tensor_desc(input_name, tensor.dtype, tensor.shape))
        for output_name, (dtype, shape) in zip(
            spec.output_names(len(outputs)), outputs, strict=True
        ):
            op.output_desc.append(tensor_desc(output_name, dtype, shape))
        for key, value in {**(attrs or {}), **self.scope_attrs}.items():
            set_attr(op.attr[key], value)
        return [
            Tensor(op.name, index, dtype, tuple(shape))
            for index, (dtype, shape) in enumerate(outputs)
        ]

    def add1(
        self,
        op_type: str,
        name: str,
        inputs: Sequence[Tensor],
        dtype: int,
        shape: Shape,
        attrs: Mapping[str, AttrValue] | None = None,
    ) -> Tensor:
        """Append a single-output op and return its output."""
        return self.add(op_type, name, inputs, [(dtype, shape)], attrs)[0]

    def const(self, array: np.ndarray, name: str = "const") -> Tensor:
        """Append a ``Const`` holding ``array`` (used for shapes, axes and scalars)."""
        array = np.asarray(array)
        dtype = GE_OF_NUMPY[np.dtype(array.dtype)]
        return self.add1("Const", name, [], dtype, tuple(array.shape), {"value": array})

    def finish(self, outputs: Sequence[Tensor]) -> ge.GraphDef:
        """Append ``NetOutput``, drop ops nothing depends on (Data ops stay), return the graph."""
        self.add("NetOutput", "NetOutput", outputs, [])
        needed = {"NetOutput"}
        ops = {op.name: op for op in self.graph.op}
        stack = ["NetOutput"]
        while stack:
            for ref in ops[stack.pop()].input:
                producer = ref.rsplit(":", 1)[0]
                if producer not in needed:
                    needed.add(producer)
                    stack.append(producer)
        kept = [op for op in self.graph.op if op.name in needed or op.type == "Data"]
        del self.graph.op[:]
        self.graph.op.extend(kept)
        self.graph.output.extend(t.ref for t in outputs)
        return self.graph
