"""GE data types: the two numberings GE uses, and numpy equivalents (no torch: the runtime uses it).

GE numbers the same data types twice:

* the ``ge_ir.proto`` enum ``DataType`` (``DT_FLOAT = 1``), used by ``TensorDescriptor.dtype``
  (every input/output descriptor and every ``TensorDef``);
* the C enum ``ge::DataType`` (``DT_FLOAT = 0``, ``DT_INT64 = 9``), used wherever an *attribute*
  names a data type: ``AttrDef.dt`` (``FileConstant.dtype``) and int attributes such as
  ``Cast.dst_type`` and ``Shape.dtype``. GE casts those attribute values straight to
  ``ge::DataType`` (metadef's ``data_type_serializer.cc``), and TorchAir fills them from its
  ``DataType`` class, which holds the C values.

This package works in the proto numbering everywhere and converts at the one place an attribute
is written (:func:`attr_of_proto`) or read (:func:`proto_of_attr`). Mixing the two reads a float32
weight file as float16 of half the size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge


@dataclass(frozen=True)
class GeType:
    """One data type in both GE numberings.

    Attributes:
        name: Enum name shared by both numberings (``DT_FLOAT``).
        proto: Value in ``ge_ir.proto``'s ``DataType`` (``TensorDescriptor.dtype``).
        c: Value of ``ge::DataType`` (dtype-valued attributes).
        itemsize: Bytes per element.
    """

    name: str
    proto: int
    c: int
    itemsize: int


TYPES: tuple[GeType, ...] = (
    GeType("DT_FLOAT", ge.DT_FLOAT, 0, 4),
    GeType("DT_FLOAT16", ge.DT_FLOAT16, 1, 2),
    GeType("DT_INT8", ge.DT_INT8, 2, 1),
    GeType("DT_INT32", ge.DT_INT32, 3, 4),
    GeType("DT_UINT8", ge.DT_UINT8, 4, 1),
    GeType("DT_INT16", ge.DT_INT16, 6, 2),
    GeType("DT_UINT16", ge.DT_UINT16, 7, 2),
    GeType("DT_UINT32", ge.DT_UINT32, 8, 4),
    GeType("DT_INT64", ge.DT_INT64, 9, 8),
    GeType("DT_UINT64", ge.DT_UINT64, 10, 8),
    GeType("DT_DOUBLE", ge.DT_DOUBLE, 11, 8),
    GeType("DT_BOOL", ge.DT_BOOL, 12, 1),
    GeType("DT_COMPLEX64", ge.DT_COMPLEX64, 16, 8),
    GeType("DT_COMPLEX128", ge.DT_COMPLEX128, 17, 16),
    GeType("DT_BF16", ge.DT_BF16, 27, 2),
    GeType("DT_FLOAT8_E5M2", ge.DT_FLOAT8_E5M2, 35, 1),
    GeType("DT_FLOAT8_E4M3FN", ge.DT_FLOAT8_E4M3FN, 36, 1),
)
"""Every data type this package writes or reads, with its value in each numbering."""

C_UNDEFINED = 28
"""``ge::DT_UNDEFINED`` (the proto enum's ``DT_UNDEFINED`` is 0)."""

_BY_PROTO = {t.proto: t for t in TYPES}
_BY_C = {t.c: t for t in TYPES}


def attr_of_proto(proto: int) -> int:
    """The ``ge::DataType`` value to store in an attribute for proto data type ``proto``.

    Raises:
        KeyError: ``proto`` is not a data type this package knows.
    """
    return _BY_PROTO[proto].c


def proto_of_attr(c: int) -> int | None:
    """The proto data type named by a dtype-valued attribute, or None when unknown."""
    found = _BY_C.get(c)
    return None if found is None else found.proto


NUMPY_OF_GE: dict[int, np.dtype[np.generic]] = {
    ge.DT_FLOAT: np.dtype(np.float32),
    ge.DT_FLOAT16: np.dtype(np.float16),
    ge.DT_DOUBLE: np.dtype(np.float64),
    ge.DT_INT8: np.dtype(np.int8),
    ge.DT_UINT8: np.dtype(np.uint8),
    ge.DT_INT16: np.dtype(np.int16),
    ge.DT_UINT16: np.dtype(np.uint16),
    ge.DT_INT32: np.dtype(np.int32),
    ge.DT_UINT32: np.dtype(np.uint32),
    ge.DT_INT64: np.dtype(np.int64),
    ge.DT_UINT64: np.dtype(np.uint64),
    ge.DT_BOOL: np.dtype(np.bool_),
    ge.DT_COMPLEX64: np.dtype(np.complex64),
    ge.DT_COMPLEX128: np.dtype(np.complex128),
}
"""Proto data types numpy can hold directly. bf16 and fp8 are stored as raw words (see WIDENED)."""

BF16 = ge.DT_BF16
"""bfloat16 has no numpy dtype; the runtime widens it to float32 on load."""

WIDENED = frozenset({ge.DT_BF16, ge.DT_FLOAT8_E5M2, ge.DT_FLOAT8_E4M3FN})
"""Data types numpy lacks: stored as raw bytes, computed as float32 by the runtime."""

GE_OF_NUMPY: dict[np.dtype[np.generic], int] = {v: k for k, v in NUMPY_OF_GE.items()}


def dtype_name(value: int) -> str:
    """Return the proto enum name of a data type (``DT_FLOAT``), or ``DT_<number>`` if unknown."""
    try:
        return str(ge.DataType.Name(value))
    except ValueError:
        return f"DT_{value}"


def element_size(value: int) -> int | None:
    """Bytes per element of a proto data type, or None when this package cannot read it."""
    found = _BY_PROTO.get(value)
    return None if found is None else found.itemsize


def _float8_table(exponent_bits: int, mantissa_bits: int, *, fn: bool) -> np.ndarray:
    """float32 value of each of the 256 bytes of an 8-bit float format.

    ``fn`` formats (e4m3fn) have no infinities and one NaN pattern per sign (all ones); the
    others (e5m2) follow IEEE 754 (all-ones exponent is inf/NaN).
    """
    bias = (1 << (exponent_bits - 1)) - 1
    values = np.empty(256, np.float32)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = byte & ((1 << mantissa_bits) - 1)
        top = (1 << exponent_bits) - 1
        if fn and exponent == top and mantissa == (1 << mantissa_bits) - 1:
            values[byte] = np.nan
        elif not fn and exponent == top:
            values[byte] = sign * np.inf if mantissa == 0 else np.nan
        elif exponent == 0:
            values[byte] = sign * mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            values[byte] = sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
    return values


FLOAT8_VALUES: dict[int, np.ndarray] = {
    ge.DT_FLOAT8_E5M2: _float8_table(5, 2, fn=False),
    ge.DT_FLOAT8_E4M3FN: _float8_table(4, 3, fn=True),
}
"""float32 value of every byte of the two fp8 formats (a lookup table decodes a tensor)."""


def widen(raw: bytes | np.ndarray, dtype: int) -> np.ndarray:
    """Decode little-endian bf16 or fp8 bytes to float32 (1-D)."""
    data = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes) else raw.view(np.uint8)
    if dtype == ge.DT_BF16:
        words = data.view("<u2").astype(np.uint32) << 16
        return words.view(np.float32)
    return FLOAT8_VALUES[dtype][data]


def narrow(values: np.ndarray, dtype: int) -> np.ndarray:
    """float32 ``values`` rounded to bf16 or fp8 (nearest, ties to even), still as float32.

    Out of range, e5m2 and bf16 give infinities and e4m3fn (which has none) saturates to its
    largest value, as torch's conversions do from torch 2.13 on (torch 2.11 gives NaN there).
    """
    x = np.asarray(values, np.float32)
    if dtype == ge.DT_BF16:
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        out = rounded.astype(np.uint32).view(np.float32)
        return np.where(np.isnan(x), x, out)
    table = FLOAT8_VALUES[dtype]
    finite = table[:0x80][np.isfinite(table[:0x80])]  # non-negative codes 0x00.. in order
    magnitude = np.abs(x)
    upper = np.clip(np.searchsorted(finite, magnitude), 1, len(finite) - 1)
    lower = upper - 1
    below, above = finite[lower], finite[upper]
    pick_upper = (magnitude - below > above - magnitude) | (
        (magnitude - below == above - magnitude) & (upper % 2 == 0)
    )
    result = np.where(pick_upper, above, below)
    # Past the largest value by half a step or more: overflow.
    step = finite[-1] - finite[-2]
    overflow = magnitude >= finite[-1] + step / 2
    result = np.where(overflow, np.inf if dtype == ge.DT_FLOAT8_E5M2 else finite[-1], result)
    return np.where(np.isnan(x), np.nan, np.copysign(result, x)).astype(np.float32)
