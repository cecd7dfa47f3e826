"""Fourier transforms (GE ``FFT``/``FFT2D``/``IFFT``/``IFFT2D``) and complex views against eager:
FNet's mixing, one- and two-dimensional transforms over any dimensions, the three
normalisations, inverse and real-input transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.runtime._kernels import KERNELS
from torch import nn

Check = Callable[..., ge.GraphDef]


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def _types(graph: ge.GraphDef) -> list[str]:
    return [op.type for op in graph.op]


TRANSFORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "fnet-mixing": lambda t: torch.fft.fft(torch.fft.fft(t, dim=-1), dim=-2).real,
    "fftn-last-two": lambda t: torch.fft.fftn(t, dim=(1, 2)).real,
    "fft-first-dim": lambda t: torch.fft.fft(t, dim=0).imag,
    "fft2-outer-dims": lambda t: torch.fft.fft2(t, dim=(0, 2)).real,
    "fftn-every-dim": lambda t: torch.fft.fftn(t).imag,
    "ortho": lambda t: torch.fft.fft(t, norm="ortho").real,
    "forward-norm": lambda t: torch.fft.fft2(t, norm="forward").imag,
    "inverse": lambda t: torch.fft.ifft(t.to(torch.complex64), dim=1).real,
    "inverse-2d-ortho": lambda t: torch.fft.ifft2(t.to(torch.complex64), norm="ortho").imag,
    "inverse-forward-norm": lambda t: torch.fft.ifft(t.to(torch.complex64), norm="forward").real,
    "rfft": lambda t: torch.fft.rfft(t).imag,
    "rfft2": lambda t: torch.fft.rfft2(t).real,
    "view-as-real": lambda t: torch.view_as_real(torch.fft.fft(t)),
}


@pytest.mark.parametrize("case", list(TRANSFORMS))
def test_fourier_transforms_match_eager(case: str, export_check: Check) -> None:
    torch.manual_seed(0)
    graph = export_check(Fn(TRANSFORMS[case]), torch.randn(3, 4, 6), rtol=1e-4, atol=1e-4)
    assert {"FFT", "FFT2D", "IFFT", "IFFT2D"} & set(_types(graph))
    assert {"Real", "Imag", "Pack"} <= set(_types(graph))


def test_fnet_mixing_is_one_fft2d_over_the_innermost_dims(export_check: Check) -> None:
    graph = export_check(Fn(TRANSFORMS["fftn-last-two"]), torch.randn(2, 4, 8), atol=1e-5)
    assert _types(graph).count("FFT2D") == 1
    assert "Transpose" not in _types(graph)  # already innermost


def test_view_as_complex_rotates(export_check: Check) -> None:
    # Llama's original rotary embedding: complex multiplication of pairs.
    angles = torch.polar(torch.ones(4, 3), torch.randn(4, 3))

    class Rotate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("freqs", torch.view_as_real(angles))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
            turned = pairs * torch.view_as_complex(self.freqs)
            return torch.view_as_real(turned).flatten(-2)

    graph = export_check(Rotate(), torch.randn(2, 4, 6), atol=1e-6)
    assert "Complex" in _types(graph)


def test_fft_kernels_are_tensorflow_s() -> None:
    x = (np.arange(12).reshape(3, 4) + 1j).astype(np.complex64)
    op = ge.OpDef(type="IFFT2D")
    (got,) = KERNELS["IFFT2D"](op, [x], None)  # type: ignore[arg-type]
    np.testing.assert_allclose(got, np.fft.ifft2(x), rtol=1e-6)  # divided by the size
    op = ge.OpDef(type="FFT")
    (got,) = KERNELS["FFT"](op, [x], None)  # type: ignore[arg-type]
    np.testing.assert_allclose(got, np.fft.fft(x, axis=-1), rtol=1e-5)
    assert got.dtype == np.complex64
