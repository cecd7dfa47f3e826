"""Errors raised by npu-compile.

Every error derives from :class:`NpuCompileError`; each concrete class also
derives from the builtin that matches its cause, so ``except ValueError`` keeps working for callers
who do not know this package. Each class has a stable ``code`` for programmatic matching.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from npu_compile._fallback import FallbackReason

__all__ = [
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
