"""The on-disk artifact cache: content-hash keys, atomic commits, verified files, a locked index.

Layout under ``<build_dir>/static_kernel_cache/``::

    index.json            key -> entry metadata (rewritten atomically under index.json.lock)
    index.json.lock
    locks/<key>.lock      held while one process builds or installs that key
    entries/<key>/        a committed artifact: builder files + meta.json
    entries/.tmp-<key>-*  a build in progress (or one that was killed: discarded by the next
                          process that takes the key lock)

One module per concern, below this facade: ``_layout`` (paths, confined directory access),
``_locks`` (the file locks), ``_index`` (``index.json``), ``_verify`` (reading entries,
checking their hashes), ``_install`` (staging, commits, archive copies) and ``_remove``
(discards, the builder's uninstall hook, ``clean``). None of them imports a builder.

An entry directory is complete by construction: it is assembled under a temporary name and
renamed into place with ``os.replace``; ``meta.json`` is written before the rename and records the
SHA-256 and size of every file, which :meth:`ArtifactCache.verify` checks before anything is
loaded. Everything read from the directory is treated as untrusted: keys must be the hex digests
they are, and the index is only a listing convenience (lookups and listings read the entry
directories themselves). Every path below the build directory is reached from its parent's
descriptor without following a link (``_confine``): a link at any level (``static_kernel_cache``,
``entries``, ``locks``, a key, a file) is refused with an error that names it, or, for a key
under ``entries/``, removed as a link; it is never followed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from npu_static_kernel import _confine
from npu_static_kernel._cache import _install, _locks, _remove, _verify
from npu_static_kernel._cache._layout import CACHE_DIRNAME, CacheLayout, can_write
from npu_static_kernel._confine import path_of
from npu_static_kernel._entry import (
    META,
    CacheEntry,
    check_key,
    file_digest,
    is_key,
    now,
    safe_relative,
)
from npu_static_kernel.errors import CacheError

__all__ = [
    "CACHE_DIRNAME",
    "META",
    "ArtifactCache",
    "CacheEntry",
    "can_write",
    "file_digest",
    "is_key",
    "now",
    "safe_relative",
]


class ArtifactCache:
    """Shape-specialised artifacts on disk, shared by every process that uses the same directory.

    Args:
        build_dir: The build directory; the cache lives in ``<build_dir>/static_kernel_cache``.
            Defaults to the current directory.

    Raises:
        ConfigError: ``build_dir`` contains a NUL byte.

    Example:
        >>> import torch
        >>> from npu_static_kernel import ArtifactCache, StaticKernelCompiler
        >>> gm = torch.fx.symbolic_trace(lambda x, w: (torch.ops.aten.mm.default(x, w),))
        >>> args = [torch.ones(2, 3), torch.ones(3, 4)]
        >>> _ = StaticKernelCompiler("build").compile_static(gm, args)
        >>> cache = ArtifactCache("build")
        >>> [(entry.builder, entry.inputs) for entry in cache.entries()]
        [('inductor', ('float32[2, 3]', 'float32[3, 4]'))]
    """

    def __init__(self, build_dir: str | os.PathLike[str] | None = None) -> None:
        # Raw input (a user, the command line): the path rule runs here, where it enters.
        self._open(path_of(build_dir))

    @classmethod
    def _checked(cls, build_dir: Path) -> ArtifactCache:
        """The cache of a directory that the options it came from checked already."""
        cache = cls.__new__(cls)
        cache._open(build_dir)
        return cache

    def _open(self, build_dir: Path) -> None:
        # The trusted root: the build directory as given. Nothing below it is followed.
        self.build_dir = build_dir
        self._layout = CacheLayout(build_dir)
        self.root = self._layout.root

    def writable(self) -> bool:
        """Whether this process can add artifacts to the cache (see :func:`can_write`).

        Raises:
            CacheError: A component of the cache directory is a symbolic link.
        """
        _confine.check(self.build_dir, self.root)  # a link planted here is refused, not probed
        return can_write(self.root)

    def entry_dir(self, key: str) -> Path:
        """Return where the artifact for ``key`` lives (it may not exist).

        Raises:
            CacheError: ``key`` is not a hex digest.
        """
        return self._layout.entry_dir(key)

    @contextlib.contextmanager
    def key_lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        """Hold the per-key lock: one process at a time builds or installs ``key``.

        The lock is an OS file lock, so a process killed while holding it releases it.

        Args:
            key: The artifact key.
            timeout: Seconds to wait (``-1`` waits forever).

        Raises:
            CacheError: ``key`` is not a hex digest, the lock file is a link, or the lock was
                not obtained within ``timeout``.
        """
        with _locks.key_lock(self._layout, key, timeout):
            yield

    def read_entry(self, key: str) -> CacheEntry | None:
        """Return the committed entry of ``key`` from its ``meta.json``, or None on a miss.

        A missing, unreadable, oversized or malformed ``meta.json``, a ``meta.json`` written for
        another key, and an entry directory (or ``meta.json``) that is a symbolic link all count
        as a miss.

        Raises:
            CacheError: ``static_kernel_cache`` or ``entries`` is a symbolic link.
        """
        return _verify.read_entry(self._layout, key)

    def lookup(self, key: str) -> Path | None:
        """Return the committed artifact directory for ``key``, or None on a miss."""
        return self.entry_dir(key) if self.read_entry(key) is not None else None

    def verify(self, key: str) -> Path:
        """Check every file of ``key``'s artifact against the SHA-256 and size in its meta.json.

        Every file is opened from its directory's descriptor without following a link.

        Returns:
            The verified artifact directory.

        Raises:
            CacheError: The artifact is missing, lists no files, or a file is missing, is a link
                or not a regular file, or differs in size or content.
        """
        return _verify.verify(self._layout, key)

    def discard_stale(self, key: str) -> list[Path]:
        """Remove staging directories of ``key`` left by killed builds (hold the key lock)."""
        return _remove.discard_stale(self._layout, key)

    def staging(self, key: str) -> Path:
        """Return a fresh, empty staging directory for a build of ``key``."""
        return _install.staging(self._layout, key)

    def commit(self, entry: CacheEntry, staging: Path) -> Path:
        """Move a finished staging directory into place and record it in the index.

        Args:
            entry: Metadata for the artifact (``path``, ``size_bytes`` and ``files`` are filled
                in: the SHA-256 and size of every file in ``staging``).
            staging: The directory from :meth:`staging`, with the builder's files in it.

        Returns:
            The committed artifact directory.

        Raises:
            CacheError: A component of the cache is a symbolic link, or the disk is full (the
                message names the file); nothing is committed then.
        """
        return _install.commit(self._layout, entry, staging)

    def entries(self) -> list[CacheEntry]:
        """Return every committed artifact, oldest first.

        Read from the entry directories (the index is not trusted). Takes no lock and writes
        nothing: works on a read-only cache.

        Raises:
            CacheError: The cache directory exists but cannot be read, or a component of it is
                a symbolic link.
        """
        try:
            if not _confine.check(self.build_dir, self.root):
                return []
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(f"cannot read {self.root} ({exc}); check its permissions") from exc
        found = [self.read_entry(name) for name in self._layout.entry_names() if is_key(name)]
        return sorted((e for e in found if e is not None), key=lambda e: (e.created, e.key))

    def remove(self, key: str) -> bool:
        """Delete one artifact (waits for its key lock); return whether it existed.

        The builder that made it may undo its installation first (its
        :meth:`~StaticKernelBuilder.uninstall` hook), but only when every file of the
        artifact still matches its recorded SHA-256.

        Raises:
            CacheError: ``key`` is not a hex digest, the cache cannot be written, or a component
                of it is a symbolic link.
        """
        check_key(key)
        with self.key_lock(key):
            return self.discard(key)

    def discard(self, key: str) -> bool:
        """Like :meth:`remove`, for a caller that already holds the key lock."""
        return _remove.discard(self._layout, key)

    def clean(self) -> int:
        """Delete every artifact and every leftover staging directory; return how many artifacts.

        Only names this cache creates are touched: ``<key>`` directories and ``.tmp-<key>-*``
        staging directories, with ``<key>`` a hex digest.
        """
        return _remove.clean(self._layout)

    def unpack_dir(self) -> Path:
        """A new private directory in the cache for an archive being unpacked (remove it after)."""
        return self._layout.new_dir(self.root, ".unpack-")

    def remove_path(self, path: Path) -> None:
        """Delete ``path`` inside the cache (a tree, a file, or a link as a link)."""
        _confine.remove(self.build_dir, path)

    def install_files(
        self, key: str, source: Path, files: Mapping[str, Mapping[str, Any]]
    ) -> Path | None:
        """Commit an artifact copied from elsewhere (``pack``/``unpack``) after verifying it.

        Args:
            key: The artifact key.
            source: A directory holding ``meta.json`` and the listed files (read without
                following a link below it).
            files: The file hashes the carrier recorded (must equal those in ``meta.json``).

        Returns:
            The committed directory, or None when the cache already has a verified copy.

        Raises:
            CacheError: The files do not match their hashes, the cache cannot be written (the
                message names the file), or a component of the cache is a symbolic link.
        """
        return _install.install_files(self._layout, key, source, files)
