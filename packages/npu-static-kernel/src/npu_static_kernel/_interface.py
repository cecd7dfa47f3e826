"""The compiler interface every static kernel builder implements (hash, build, install, load)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from npu_static_kernel._record import OpRecord, OpStatistics, default_supports

__all__ = ["BuildRequest", "StaticKernelBuilder", "builder_class"]

# Builder classes by name, so the generic cache can call the uninstall hook of the builder that
# made an entry (read from its meta.json) without importing any builder module itself.
_BUILDERS: dict[str, type[StaticKernelBuilder]] = {}


@dataclass(frozen=True)
class BuildRequest:
    """Everything a builder gets for one graph at one set of static shapes.

    Attributes:
        gm: The ATen-level FX graph (may contain ``aten.copy_`` into placeholders).
        args: The runtime arguments (tensors and ints) the artifact is specialised for.
        statistics: The op statistics recorded for these arguments.
        key: The cache key of the artifact.
        device_type: ``"npu"``, ``"cuda"`` or ``"cpu"``.
    """

    gm: torch.fx.GraphModule
    args: Sequence[Any]
    statistics: OpStatistics | None
    key: str
    device_type: str


class StaticKernelBuilder(abc.ABC):
    """Builds, installs and loads shape-specialised artifacts for one graph.

    The cache calls the methods in this order: :meth:`compute_hash` (part of the cache key),
    :meth:`build` (only on a miss, into an empty staging directory that is renamed into the
    cache when it returns), :meth:`install` (once per node, on the process that built or found
    the artifact) and :meth:`load` (on every process).

    To add a builder, subclass this, set :attr:`name`, and implement :meth:`build` and
    :meth:`load`; keep :meth:`build` free of side effects outside ``out_dir`` (a killed build
    must leave nothing behind but the staging directory the cache discards).
    """

    name: ClassVar[str] = "builder"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _BUILDERS[cls.name] = cls

    def compute_hash(self) -> str:
        """Return a string covering every builder setting and toolchain version that changes output.

        Returns:
            Text hashed into the cache key; the default covers nothing beyond :attr:`name`.
        """
        return ""

    def supports_op(self, record: OpRecord) -> bool:
        """Return whether ``record`` belongs in the builder's compile list (``<pid>/``)."""
        return default_supports(record)

    @abc.abstractmethod
    def build(self, request: BuildRequest, out_dir: Path) -> None:
        """Build the artifact for ``request`` into ``out_dir``.

        Args:
            request: The graph, arguments and op statistics.
            out_dir: An empty directory owned by this build; everything written here becomes the
                artifact.

        Raises:
            BuildError: The toolchain is missing or the build failed.
        """

    def install(self, artifact_dir: Path) -> None:  # noqa: B027  (an optional hook, not abstract)
        """Make a committed artifact usable on this node (default: nothing to do).

        Called by one process per node, after a build or on a cache hit, before the other
        processes of the node load it.

        Args:
            artifact_dir: The committed artifact directory (read-only by convention).
        """

    @classmethod  # noqa: B027  (an optional hook, not abstract)
    def uninstall(cls, artifact_dir: Path) -> None:
        """Undo what :meth:`install` did outside the artifact (default: nothing to undo).

        Called by :meth:`ArtifactCache.remove` before an artifact made by this builder is
        deleted. Everything under ``artifact_dir`` may have been written by someone else: an
        implementation must only undo changes it can prove this package made.

        Args:
            artifact_dir: The committed artifact directory, confined to the cache.
        """

    @abc.abstractmethod
    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        """Return the callable to run instead of ``request.gm.forward``.

        Args:
            artifact_dir: The committed artifact directory.
            request: The graph and arguments it was built for.

        Returns:
            A callable with ``gm.forward``'s calling convention and outputs, input mutations
            included.

        Raises:
            CacheError: The artifact is unreadable.
        """


def builder_class(name: str) -> type[StaticKernelBuilder] | None:
    """Return the builder class registered under ``name`` (None when no such class exists)."""
    return _BUILDERS.get(name)
