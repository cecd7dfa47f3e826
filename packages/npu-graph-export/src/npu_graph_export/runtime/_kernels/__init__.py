"""numpy implementations of the GE operators in ``_opdefs.OPS`` (reference semantics, not speed).

One module per operator family; importing this package registers every kernel in
:data:`KERNELS`, the one table the runtime looks kernels up in.
"""

from __future__ import annotations

from npu_graph_export.runtime._kernels import (  # noqa: F401  (imported to register)
    collective,
    elementwise,
    index,
    nn,
    reduce,
    selection,
    shape,
    spectral,
)
from npu_graph_export.runtime._kernels._base import (
    KERNELS,
    Array,
    Collectives,
    Kernel,
    KernelError,
    KernelValueError,
    numpy_dtype,
)

__all__ = [
    "KERNELS",
    "Array",
    "Collectives",
    "Kernel",
    "KernelError",
    "KernelValueError",
    "numpy_dtype",
]
