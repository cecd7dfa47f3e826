"""GE ``DataType`` values and their numpy equivalents (no torch: the runtime uses this module)."""

from __future__ import annotations

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge

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
"""GE data types numpy can hold directly. bf16 is stored as raw 16-bit words (see ``BF16``)."""

BF16 = ge.DT_BF16
"""bfloat16 has no numpy dtype; the runtime widens it to float32 on load."""

GE_OF_NUMPY: dict[np.dtype[np.generic], int] = {v: k for k, v in NUMPY_OF_GE.items()}


def dtype_name(value: int) -> str:
    """Return the GE enum name of a data type (``DT_FLOAT``), or ``DT_<number>`` if unknown."""
    try:
        return str(ge.DataType.Name(value))
    except ValueError:
        return f"DT_{value}"


def element_size(value: int) -> int | None:
    """Bytes per element of a GE data type, or None when this package cannot read it."""
    if value == BF16:
        return 2
    dtype = NUMPY_OF_GE.get(value)
    return None if dtype is None else dtype.itemsize
