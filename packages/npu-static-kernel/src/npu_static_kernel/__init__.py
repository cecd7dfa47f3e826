"""Shape-specialised (static) kernel builds, artifact cache and multi-process builds.

:class:`StaticKernelCompiler` is the entry point: for every new graph shape it records op
statistics (:func:`record_op_statistics`), builds an artifact with a builder
(:class:`InductorBuilder` on CUDA/CPU, :class:`AscendBuilder` on Ascend) or finds it in the
:class:`ArtifactCache`, installs it once per node and returns the callable to capture.
"""

from __future__ import annotations

from npu_static_kernel._cache import ArtifactCache, CacheEntry
from npu_static_kernel._cann_names import cann_op_type
from npu_static_kernel._compiler import StaticKernelCompiler, default_builder
from npu_static_kernel._counters import StaticKernelCounters
from npu_static_kernel._keys import compute_key
from npu_static_kernel._options import FALLBACK_DIR_ENV, StaticKernelOptions, default_fallback_dir
from npu_static_kernel._record import (
    OpRecord,
    OpStatistics,
    OpStatisticsRecorder,
    record_op_statistics,
    write_op_statistics,
)
from npu_static_kernel._version import __version__
from npu_static_kernel.builders import (
    AscendBuilder,
    BuildRequest,
    InductorBuilder,
    StaticKernelBuilder,
)
from npu_static_kernel.errors import (
    BuildError,
    CacheError,
    CacheFallbackWarning,
    ConfigError,
    NpuStaticKernelError,
    StaticKernelDisabledWarning,
    StaticKernelFallbackWarning,
)

__all__ = [
    "__version__",
    # compile per graph key
    "StaticKernelCompiler",
    "StaticKernelOptions",
    "StaticKernelCounters",
    "compute_key",
    "default_fallback_dir",
    "FALLBACK_DIR_ENV",
    # op statistics
    "record_op_statistics",
    "OpStatisticsRecorder",
    "OpStatistics",
    "OpRecord",
    "write_op_statistics",
    "cann_op_type",
    # builders
    "StaticKernelBuilder",
    "BuildRequest",
    "InductorBuilder",
    "AscendBuilder",
    "default_builder",
    # cache
    "ArtifactCache",
    "CacheEntry",
    # errors
    "NpuStaticKernelError",
    "BuildError",
    "CacheError",
    "ConfigError",
    "StaticKernelDisabledWarning",
    "CacheFallbackWarning",
    "StaticKernelFallbackWarning",
]
