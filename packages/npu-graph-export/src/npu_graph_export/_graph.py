"""Build a GE ``GraphDef`` op by op (no torch: the converters feed it plain dtypes and shapes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from npu_graph_export._dtypes import GE_OF_NUMPY, attr_of_proto
from npu_graph_export._opdefs import OPS
from npu_graph_export._proto import ge_ir_pb2 as ge

WEIGHT_ATTR = "_weight_name"
"""Op attribute holding a weight's qualified name (``layers.0.q.weight``) on Const/FileConstant."""

UNFED_ATTR = "_is_unfed_optional"
"""Input descriptor attribute marking an optional input left unconnected (input string "")."""

NAME_MAP_ATTRS = ("_input_name_key", "_input_name_value", "_output_name_key", "_output_name_value")
"""Per-op attributes from which GE's loader builds its input/output name -> index maps."""

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
    """Marks an attribute value as a data type, written in GE's attribute numbering.

    ``value`` is a proto data type (``ge.DT_FLOAT``, as in tensor descriptors); the attribute
    receives the ``ge::DataType`` value (see ``_dtypes``). ``as_int`` selects the ``i`` field,
    for attributes GE declares ``Int`` (``Cast.dst_type``, ``Shape.dtype``); otherwise ``dt``
    (attributes declared ``Type``, such as ``FileConstant.dtype``).
    """

    value: int
    as_int: bool = False


AttrValue = bool | int | float | str | bytes | DType | Sequence[int] | Sequence[float] | np.ndarray


FORMAT_ATTR = "format_for_int"
"""Descriptor attribute holding the tensor's ``ge::Format`` as an int (see :func:`set_layout`)."""

FORMATS = {"NCHW": 0, "NHWC": 1, "ND": 2}
"""``ge::Format`` values of the layouts this package writes (metadef's ``graph/types.h``)."""


def set_layout(desc: ge.TensorDescriptor, layout: str) -> None:
    """Give ``desc`` a layout, as both the ``layout`` string and the ``format_for_int`` int.

    GE builds a descriptor's format from ``format_for_int`` when it is there and from the
    ``layout`` string otherwise (metadef's ``GeTensorSerializeUtils::GetFormatFromDescProto``),
    and GE's own writer, which produces TorchAir's ``.air`` files, stores both: they must agree.
    """
    desc.layout = layout
    desc.attr[FORMAT_ATTR].i = FORMATS[layout]


def tensor_desc(
    name: str, dtype: int, shape: Iterable[int], layout: str = "ND"
) -> ge.TensorDescriptor:
    """Return a descriptor in the layout GE expects for graph tensors (``ND`` on the NPU)."""
    desc = ge.TensorDescriptor(name=name, dtype=dtype, device_type="NPU")  # type: ignore[arg-type]
    desc.shape.dim.extend(int(d) for d in shape)
    set_layout(desc, layout)
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
        if value.as_int:
            target.i = attr_of_proto(value.value)
        else:
            target.dt = attr_of_proto(value.value)
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
        inputs: Sequence[Tensor | None],
        outputs: Sequence[tuple[int, Shape]],
        attrs: Mapping[str, AttrValue] | None = None,
        dynamic: Mapping[str, int] | None = None,
    ) -> list[Tensor]:
        """Append one op and return references to its outputs.

        Optional inputs that are not fed (``None``, or left off the end) are written as GE
        expects them: an empty input string plus a descriptor marked ``_is_unfed_optional``.

        Args:
            op_type: GE operator type; must be in the catalogue of ``_opdefs``.
            name: Wanted op name; made unique.
            inputs: Producer outputs in the operator's input order; ``None`` for an unfed
                optional input.
            outputs: ``(dtype, shape)`` of each output.
            attrs: Operator attributes by GE attribute name.
            dynamic: How many tensors each dynamic input holds, for an operator with several
                (see :meth:`OpSpec.input_names`).

        Returns:
            One :class:`Tensor` per output.
        """
        spec = OPS[op_type]
        op = self.graph.op.add(name=self.unique(name), type=op_type)
        names = spec.input_names(len(inputs), dynamic)
        fed: list[Tensor | None] = list(inputs)
        # Trailing optional inputs are written unfed, as TorchAir's op builders do.
        names += spec.trailing_optional(len(names))
        fed += [None] * (len(names) - len(fed))
        for input_name, tensor in zip(names, fed, strict=True):
            if tensor is None:
                if input_name not in spec.optional:
                    raise ValueError(f"{op_type} input {input_name!r} is required")
                op.input.append("")
                desc = op.input_desc.add(name=input_name, dtype=ge.DT_UNDEFINED)
                desc.attr[UNFED_ATTR].i = 1
                continue
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
        inputs: Sequence[Tensor | None],
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

    def finish(self, outputs: Sequence[Tensor], controls: Sequence[str] = ()) -> ge.GraphDef:
        """Append ``NetOutput``, drop ops nothing depends on (inputs stay), return the graph.

        ``controls`` names ops that produce no output but must run (``Assign``): they become
        control inputs (``"<op>:-1"``) of ``NetOutput``.
        """
        self.add("NetOutput", "NetOutput", outputs, [])
        self.graph.op[-1].input.extend(f"{name}:-1" for name in controls)
        needed = {"NetOutput"}
        ops = {op.name: op for op in self.graph.op}
        stack = ["NetOutput"]
        while stack:
            for ref in ops[stack.pop()].input:
                producer = ref.rsplit(":", 1)[0]
                if ref and producer not in needed:
                    needed.add(producer)
                    stack.append(producer)
        kept = [op for op in self.graph.op if op.name in needed or op.type in _INPUT_TYPES]
        del self.graph.op[:]
        self.graph.op.extend(kept)
        self.graph.output.extend(t.ref for t in outputs)
        for op in self.graph.op:
            write_name_maps(op)
        return self.graph


_INPUT_TYPES = frozenset({"Data", "RefData"})


def write_name_maps(op: ge.OpDef) -> None:
    """Set the four name-map attributes GE's loader reads (descriptor names in order)."""
    in_key, in_value, out_key, out_value = (op.attr[k] for k in NAME_MAP_ATTRS)
    for target, descs in ((in_key, op.input_desc), (out_key, op.output_desc)):
        del target.list.s[:]
        target.list.s.extend(desc.name.encode() for desc in descs)
        target.list.val_type = ge.AttrDef.ListValue.VT_LIST_STRING
    for target, descs in ((in_value, op.input_desc), (out_value, op.output_desc)):
        del target.list.i[:]
        target.list.i.extend(range(len(descs)))
        target.list.val_type = ge.AttrDef.ListValue.VT_LIST_INT
