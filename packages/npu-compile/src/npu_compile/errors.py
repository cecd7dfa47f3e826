"""Errors raised by npu-compile.

Every error derives from :class:`NpuCompileError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching, and
:class:`FallbackReason` is the code of each reason a graph runs eagerly instead of captured.
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "FallbackReason",
    "NpuCompileError",
    "ConfigError",
    "UnknownOptionError",
    "BackendError",
    "DemoMismatchError",
    "OutputError",
    "PassCheckError",
    "UnsupportedApiError",
    "NoEffectWarning",
]


class FallbackReason(enum.StrEnum):
    """Why an FX graph fell back to eager (values of ``BackendStats.fallback_reasons``).

    Members are strings, so ``reason == "host_sync"`` keeps working. The logged warning and the
    strict-mode :class:`~npu_compile.BackendError` name the value too.

    Attributes:
        MIXED_DEVICES: The graph's inputs live on several device types; a device graph runs on
            one device.
        TRAINING: Autograd records the graph (an output requires grad) and it cannot be
            captured: torch's AOT compile is saving it (a saved artifact holds no backward
            graph). Other training graphs are captured, forward and backward.
        HOST_SYNC: An operator reads a tensor value on the host (``.item()``, ``nonzero``),
            which a device graph cannot record.
        AOT_TRACE_FAILED: AOT autograd could not trace the graph.
        EXTERNAL_STATE: An operator reads per-step state from outside the graph's inputs
            (vLLM's attention metadata on a device), or is tagged
            ``torch.Tag.cudagraph_unsafe``, which a replay would reuse stale.
        SPLITTING_OPS: Every operator worth capturing is named in
            ``aclgraph_config.splitting_ops``, so no piece is left to capture.
        STATIC_KERNEL_FAILED: Static kernels are on but could not be built, found or loaded for
            a shape of the graph (a compiler error, a link refused in the build directory, a
            full disk). The graph is still captured and replayed, without them; the message
            gives the cause (the compiler's first error line). Recorded once per graph.
        STORAGE_READ: An operator (``as_strided``) addresses a user input's storage beyond the
            input's own elements (the gaps of a slice, the memory around it, or a fixed storage
            offset), which the static copy a captured graph reads does not hold.
        SPLIT_IN_STREAM_SCOPE: A node that must run outside device graphs (a split point of
            piecewise capture) sits inside an ``npu_stream_switch`` scope, which the split would
            cut in two.
    """

    MIXED_DEVICES = "mixed_devices"
    TRAINING = "training"
    HOST_SYNC = "host_sync"
    AOT_TRACE_FAILED = "aot_trace_failed"
    EXTERNAL_STATE = "external_state"
    SPLITTING_OPS = "splitting_ops"
    STATIC_KERNEL_FAILED = "static_kernel_failed"
    STORAGE_READ = "storage_read"
    SPLIT_IN_STREAM_SCOPE = "split_in_stream_scope"


class NpuCompileError(Exception):
    """Root of every error raised by npu-compile."""

    code: ClassVar[str] = "npu-compile"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(NpuCompileError, ValueError):
    """A CompilerConfig option is unknown or has a wrong value."""

    code: ClassVar[str] = "config"


class UnknownOptionError(ConfigError, AttributeError):
    """A CompilerConfig option name does not exist.

    It is also an ``AttributeError`` so ``getattr(config, name, default)`` and ``hasattr`` behave as
    on any Python object.
    """

    code: ClassVar[str] = "config-unknown-option"


class BackendError(NpuCompileError, RuntimeError):
    """The backend cannot compile a graph as asked.

    Attributes:
        reason: Why the graph could not be captured, when ``debug.aclgraph.strict`` turned a
            fallback to eager into this error; ``None`` for other errors.
    """

    code: ClassVar[str] = "backend"

    def __init__(self, message: str, *, reason: FallbackReason | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class PassCheckError(BackendError):
    """A graph pass of npu-compile changed what a graph computes (``debug.aclgraph.check_passes``).

    Raised at the graph's first call, before it runs; the message names the pass and the first
    node whose value differs.
    """

    code: ClassVar[str] = "backend-pass-check"


class OutputError(NpuCompileError, OSError):
    """A result file (``npu-compile bench --out``) cannot be written where it was asked for.

    A full disk, no permission, or a symbolic link met below the directory named; the message
    names the file and says what to do.
    """

    code: ClassVar[str] = "output"


class DemoMismatchError(NpuCompileError, AssertionError):
    """The compiled model produced different tokens than eager in ``npu-compile demo``."""

    code: ClassVar[str] = "demo-mismatch"


class UnsupportedApiError(NpuCompileError, AttributeError):
    """A TorchAir public name that npu-compile does not provide; the message says why.

    It is an ``AttributeError``, so ``hasattr(npu_compile, name)`` is ``False`` for such names.
    """

    code: ClassVar[str] = "unsupported-api"


class NoEffectWarning(UserWarning):
    """A TorchAir option that is accepted but does nothing with npu-compile (it says why).

    Emitted once per backend and option, when the option is set to something other than its
    default. Filter it with ``warnings.filterwarnings("ignore", category=NoEffectWarning)``.
    """

    code: ClassVar[str] = "no-effect"
