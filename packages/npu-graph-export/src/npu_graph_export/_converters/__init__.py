"""ATen -> GE converters, one module per operator family, gathered in one table.

Importing this package registers every converter in :data:`CONVERTERS`.
"""

from __future__ import annotations

from npu_graph_export._converters import (  # noqa: F401  (imported to register)
    activation,
    attention,
    batch_norm,
    collective,
    conv,
    creation,
    elementwise,
    experts,
    index,
    matmul,
    movement,
    norm,
    pool,
    reduce,
    selection,
    shape,
    spectral,
    symbolic,
)
from npu_graph_export._converters._base import (
    CONVERTERS,
    NAMED_CONVERTERS,
    Context,
    converter_for,
    ge_dtype,
    static_shape,
)

__all__ = [
    "CONVERTERS",
    "NAMED_CONVERTERS",
    "Context",
    "converter_for",
    "ge_dtype",
    "static_shape",
]
