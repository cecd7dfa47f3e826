"""TorchAir-style reduce-overhead compilation for PyTorch on NPU, CUDA and CPU.

Port a TorchAir script by replacing ``torchair`` with ``npu_compile``::

    import npu_compile as tng

    config = tng.CompilerConfig()
    config.mode = "reduce-overhead"
    model = torch.compile(model, backend=tng.get_npu_backend(compiler_config=config))
"""

from __future__ import annotations

from npu_mempool import StaleOutputError, graph_pool_handle, mark_step_begin

from npu_compile import core, ops, scope
from npu_compile._export import dynamo_export
from npu_compile._stats import Fallback
from npu_compile._unsupported import unsupported
from npu_compile._version import __version__
from npu_compile.backend import NpuBackend, get_npu_backend
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.core.utils import logger
from npu_compile.diagnosis import DiagnoseReport, PhaseTiming, diagnose
from npu_compile.errors import (
    BackendError,
    ConfigError,
    DemoMismatchError,
    FallbackReason,
    NoEffectWarning,
    NpuCompileError,
    OutputError,
    PassCheckError,
    UnknownOptionError,
    UnsupportedApiError,
)

__all__ = [
    "__version__",
    "CompilerConfig",
    "get_npu_backend",
    "NpuBackend",
    "Fallback",
    "FallbackReason",
    "diagnose",
    "DiagnoseReport",
    "PhaseTiming",
    "dynamo_export",
    "graph_pool_handle",
    "mark_step_begin",
    "patch_for_hcom",
    "logger",
    "scope",
    "ops",
    "core",
    "NpuCompileError",
    "ConfigError",
    "UnknownOptionError",
    "BackendError",
    "DemoMismatchError",
    "UnsupportedApiError",
    "NoEffectWarning",
    "OutputError",
    "PassCheckError",
    "StaleOutputError",
]


def patch_for_hcom() -> None:
    """TorchAir's collective tracing patch for torch < 2.3.1: no effect here (warns).

    torch >= 2.3.1, which npu-compile requires, traces ``torch.distributed`` collectives
    natively, as TorchAir itself says when it is called on such a torch.
    """
    import warnings

    warnings.warn(
        "npu_compile.patch_for_hcom() has no effect: torch >= 2.3.1 traces torch.distributed "
        "collectives natively; remove the call",
        NoEffectWarning,
        stacklevel=2,
    )


def __getattr__(name: str) -> object:
    # TorchAir names this package does not provide get an error that says why.
    raise unsupported(__name__, name)
