"""The options of a :class:`~npu_static_kernel.StaticKernelCompiler`, frozen and checked once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from npu_static_kernel._confine import check_path_value, path_of
from npu_static_kernel.errors import ConfigError

__all__ = ["FALLBACK_DIR_ENV", "StaticKernelOptions", "default_fallback_dir"]

FALLBACK_DIR_ENV = "NPU_STATIC_KERNEL_FALLBACK_DIR"


def default_fallback_dir() -> Path:
    """Where to build when the build directory is read-only.

    Returns:
        ``$NPU_STATIC_KERNEL_FALLBACK_DIR`` if set, else ``$XDG_CACHE_HOME/npu_static_kernel``
        (``~/.cache/npu_static_kernel`` without ``XDG_CACHE_HOME``).
    """
    configured = os.environ.get(FALLBACK_DIR_ENV)
    if configured:
        return path_of(configured, FALLBACK_DIR_ENV).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return path_of(base).absolute() / "npu_static_kernel"


@dataclass(frozen=True)
class StaticKernelOptions:
    """Where a :class:`~npu_static_kernel.StaticKernelCompiler` works and how it treats failures.

    Every field is checked when the object is made, so a bad value fails at construction with a
    :class:`~npu_static_kernel.ConfigError`, not at the first build. Paths are kept as
    :class:`~pathlib.Path` (relative ones are made absolute by the compiler, against the current
    directory at its construction).

    Attributes:
        build_dir: Where op statistics (``aclnn_static_shape_kernel_outputs``) and the artifact
            cache (``static_kernel_cache``) live; ``None``: the current directory.
        strict: Raise build errors, and a bad ``LOCAL_WORLD_SIZE``, instead of warning once
            and running the graph unchanged.
        fallback_dir: Where to record and build when ``build_dir`` is not writable; ``None``:
            ``$NPU_STATIC_KERNEL_FALLBACK_DIR``, else ``$XDG_CACHE_HOME/npu_static_kernel``
            (``~/.cache/npu_static_kernel``).

    Raises:
        ConfigError: A path that is not a ``str`` or ``os.PathLike``, is empty, contains a NUL
            byte or is too long for the file system, or a ``strict`` that is not a bool.

    Example:
        >>> from npu_static_kernel import StaticKernelCompiler, StaticKernelOptions
        >>> options = StaticKernelOptions(build_dir="build", strict=True)
        >>> options.build_dir
        PosixPath('build')
        >>> StaticKernelCompiler(options=options).strict
        True
    """

    build_dir: str | os.PathLike[str] | None = None
    strict: bool = False
    fallback_dir: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        # The same wording as the keyword arguments of StaticKernelCompiler and ArtifactCache.
        for name, what in (("build_dir", "the build directory"), ("fallback_dir", "fallback_dir")):
            value = getattr(self, name)
            if value is not None:
                # Frozen: the checked value is stored once, as a Path, through object.__setattr__.
                object.__setattr__(self, name, Path(check_path_value(value, what)))
        if not isinstance(self.strict, bool):
            # A string such as "no" is truthy: it would silently turn strictness on.
            raise ConfigError(f"strict must be True or False, got {self.strict!r}")
