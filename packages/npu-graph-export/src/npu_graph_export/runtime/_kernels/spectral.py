"""Kernels of complex numbers and Fourier transforms over the innermost dimension(s).

``FFT``/``FFT2D`` are unnormalised; ``IFFT``/``IFFT2D`` divide by the transformed size, as in
TensorFlow, whose operators GE's follow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels._base import Array, Collectives, KernelError, kernel

_AXES = {"FFT": 1, "IFFT": 1, "FFT2D": 2, "IFFT2D": 2}


@kernel("FFT", "IFFT", "FFT2D", "IFFT2D")
def _fft(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    count = _AXES[op.type]
    if x.dtype.kind != "c" or x.ndim < count:
        raise KernelError(f"{op.type} needs a complex tensor of rank >= {count}, got {x.dtype}")
    axes = tuple(range(x.ndim - count, x.ndim))
    transform = np.fft.ifftn if op.type.startswith("I") else np.fft.fftn
    return [transform(x, axes=axes).astype(x.dtype, copy=False)]


@kernel("Real", "Imag")
def _part(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    x = xs[0]
    if x.dtype.kind != "c":
        raise KernelError(f"{op.type} needs a complex tensor, got {x.dtype}")
    return [np.ascontiguousarray(x.real if op.type == "Real" else x.imag)]


@kernel("Complex")
def _complex(op: ge.OpDef, xs: Sequence[Array], _: Collectives) -> list[Array]:
    real, imag = xs[0], xs[1]
    if real.dtype.kind != "f" or imag.dtype != real.dtype:
        raise KernelError(f"Complex needs two float tensors of one dtype, got {real.dtype}")
    kind = np.complex128 if real.dtype == np.float64 else np.complex64
    return [(real + 1j * imag).astype(kind)]
