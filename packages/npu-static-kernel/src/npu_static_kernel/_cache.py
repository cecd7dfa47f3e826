"""The on-disk artifact cache: content-hash keys, atomic commits, verified files, a locked index.

Layout under ``<build_dir>/static_kernel_cache/``::

    index.json            key -> entry metadata (rewritten atomically under index.json.lock)
    index.json.lock
    locks/<key>.lock      held while one process builds or installs that key
    entries/<key>/        a committed artifact: builder files + meta.json
    entries/.tmp-<key>-*  a build in progress (or one that was killed: discarded by the next
                          process that takes the key lock)

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
import json
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import filelock

from npu_static_kernel import _confine
from npu_static_kernel._entry import (
    META,
    CacheEntry,
    check_key,
    entry_problem,
    file_digest,
    is_key,
    now,
    safe_relative,
    stream_digest,
)
from npu_static_kernel._interface import builder_class, path_of
from npu_static_kernel._io import json_bytes
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

CACHE_DIRNAME = "static_kernel_cache"
_TMP_PREFIX = ".tmp-"
# A meta.json is a few KiB; anything much larger is not ours and is not read into memory.
_MAX_META_BYTES = 16 << 20
_TODO = "free space, or pass another build directory"

logger = logging.getLogger("npu_static_kernel")


def _manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """SHA-256 and size of every regular file under ``directory`` (``meta.json`` excluded)."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            raise CacheError(
                f"the build wrote a symbolic link {path}; artifacts hold regular files only"
            )
        if not path.is_file():
            continue
        name = path.relative_to(directory).as_posix()
        if name == META:
            continue
        sha, size = file_digest(path)
        files[name] = {"sha256": sha, "size": size}
    return files


def can_write(directory: Path, root: Path | None = None) -> bool:
    """Whether files can be created in ``directory`` (created with its parents if missing).

    Decided by creating (and removing) a probe file, not from permission bits: that is also
    right for read-only mounts, immutable directories and processes with elevated privileges.

    Args:
        directory: The directory to probe.
        root: The trusted directory ``directory`` lies in (default: ``directory`` itself);
            nothing below it may be a link.

    Raises:
        CacheError: A component below ``root`` is a symbolic link.
    """
    root = directory if root is None else root
    try:
        probe = _confine.make_temp_dir(root, directory, ".write-probe-")
    except CacheError:
        raise
    except OSError:
        return False
    with contextlib.suppress(OSError):
        _confine.remove(root, probe)
    return True


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
        # The trusted root: the build directory as given. Nothing below it is followed.
        self.build_dir = path_of(build_dir)
        self.root = self.build_dir / CACHE_DIRNAME
        self._entries_dir = self.root / "entries"
        self._locks_dir = self.root / "locks"
        self._index = self.root / "index.json"

    def _ensure(self) -> None:
        try:
            _confine.make_dirs(self.build_dir, self._entries_dir)
            _confine.make_dirs(self.build_dir, self._locks_dir)
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(
                f"cannot create the static kernel cache in {self.root} ({exc}); pass a writable "
                "build_dir"
            ) from exc

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
        return self._entries_dir / check_key(key)

    def _has_entries(self) -> bool:
        """Whether ``entries/`` exists; a link (or a file) on the way to it raises CacheError."""
        return _confine.check(self.build_dir, self._entries_dir)

    @contextlib.contextmanager
    def _entries_fd(self) -> Iterator[int]:
        with _confine.dir_fd(self.build_dir, self._entries_dir) as fd:
            yield fd

    def _lock_file(self, path: Path) -> filelock.FileLock:
        """A file lock at ``path``, refused when ``path`` (or a directory above) is a link."""
        self._ensure()
        _confine.check(self.build_dir, path)
        return filelock.FileLock(str(path))

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
        check_key(key)
        lock = self._lock_file(self._locks_dir / f"{key}.lock")
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout as exc:
            raise CacheError(
                f"another process holds the build lock for {key} ({lock.lock_file}); wait for it "
                "to finish, or remove the lock file if no process is running"
            ) from exc
        except OSError as exc:
            raise CacheError(
                f"cannot take the build lock for {key[:12]} in {self._locks_dir} ({exc}); pass "
                "a writable build directory"
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def _index_lock(self) -> filelock.FileLock:
        return self._lock_file(self.root / "index.json.lock")

    def read_entry(self, key: str) -> CacheEntry | None:
        """Return the committed entry of ``key`` from its ``meta.json``, or None on a miss.

        A missing, unreadable, oversized or malformed ``meta.json``, a ``meta.json`` written for
        another key, and an entry directory (or ``meta.json``) that is a symbolic link all count
        as a miss.

        Raises:
            CacheError: ``static_kernel_cache`` or ``entries`` is a symbolic link.
        """
        if not is_key(key) or not self._has_entries():
            return None
        try:
            raw = _confine.read_bytes(self.build_dir, self.entry_dir(key) / META, _MAX_META_BYTES)
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError):
            return None
        if entry_problem(data) is not None or data["key"] != key:
            return None
        return CacheEntry.from_json(data)

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
        entry = self.read_entry(key)
        if entry is None:
            raise CacheError(f"no readable artifact {key[:12]} in {self.root}")
        if not entry.files:
            raise CacheError(
                f"the artifact {key[:12]} records no file hashes (written by an older version); "
                "it is rebuilt"
            )
        root = self.entry_dir(key)
        for name, expected in entry.files.items():
            try:
                fd = _confine.open_file(self.build_dir, root / name)
                with open(fd, "rb") as handle:
                    size = os.fstat(handle.fileno()).st_size
                    if size != expected["size"]:
                        raise CacheError(f"{name} has {size} bytes, {expected['size']} recorded")
                    sha, _ = stream_digest(handle)
            except CacheError as exc:
                raise CacheError(
                    f"the artifact {key[:12]} does not match its meta.json ({exc}); it is rebuilt"
                ) from exc
            except FileNotFoundError as exc:
                raise CacheError(
                    f"the artifact {key[:12]} does not match its meta.json ({name} is missing); "
                    "it is rebuilt"
                ) from exc
            except OSError as exc:
                raise CacheError(
                    f"the artifact {key[:12]} cannot be read ({exc}); it is rebuilt"
                ) from exc
            if sha != expected["sha256"]:
                raise CacheError(
                    f"the artifact {key[:12]} does not match its meta.json ({name}: SHA-256 "
                    f"{sha[:12]}, {expected['sha256'][:12]} recorded); it is rebuilt"
                )
        return root

    def discard_stale(self, key: str) -> list[Path]:
        """Remove staging directories of ``key`` left by killed builds (hold the key lock)."""
        check_key(key)
        removed = []
        for name in self._entry_names():
            if name.startswith(f"{_TMP_PREFIX}{key}-"):
                path = self._entries_dir / name
                _confine.remove(self.build_dir, path)  # a link is removed as a link
                removed.append(path)
        return removed

    def staging(self, key: str) -> Path:
        """Return a fresh, empty staging directory for a build of ``key``."""
        check_key(key)
        self._ensure()
        try:
            return _confine.make_temp_dir(self.build_dir, self._entries_dir, f"{_TMP_PREFIX}{key}-")
        except CacheError:
            raise
        except OSError as exc:
            raise _confine.write_error(self._entries_dir, exc, _TODO) from exc

    def _publish(self, key: str, staging: Path) -> None:
        """Rename ``staging`` (in ``entries/``) to ``entries/<key>``, inside the verified directory.

        Whatever is at ``<key>`` already is moved aside first: a link or a file is removed as
        such (never followed), a directory is renamed away and deleted.
        """
        if staging.parent != self._entries_dir:
            raise CacheError(f"{staging} is not a staging directory of {self._entries_dir}")
        with self._entries_fd() as fd:
            try:
                mode: int | None = os.stat(key, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and stat.S_ISDIR(mode):
                _move_aside(fd, key)
            elif mode is not None:
                os.unlink(key, dir_fd=fd)
            os.replace(staging.name, key, src_dir_fd=fd, dst_dir_fd=fd)

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
        final = self.entry_dir(entry.key)
        files = _manifest(staging)
        entry = CacheEntry.from_json(
            {
                **entry.to_json(),
                "path": str(final),
                "size_bytes": sum(f["size"] for f in files.values()),
                "files": files,
            }
        )
        _confine.write_atomic(
            self.build_dir, staging / META, json_bytes(entry.to_json()), todo=_TODO
        )
        self._publish(entry.key, staging)
        self._index_add(entry.key, entry.to_json())
        return final

    def _index_add(self, key: str, document: Mapping[str, Any]) -> None:
        with self._index_lock():
            index = self._read_index()
            index[key] = {k: v for k, v in document.items() if k != "files"}
            self._write_index(index)

    def _write_index(self, index: dict[str, Any]) -> None:
        _confine.write_atomic(self.build_dir, self._index, json_bytes(index), todo=_TODO)

    def _read_index(self) -> dict[str, Any]:
        try:
            raw = _confine.read_bytes(self.build_dir, self._index, _MAX_META_BYTES * 4)
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError):
            # A missing or damaged index loses only listing data: entries live on disk.
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if is_key(k)}

    def _entry_names(self) -> list[str]:
        try:
            if not self._has_entries():
                return []
            with self._entries_fd() as fd:
                return sorted(os.listdir(fd))
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(
                f"cannot read the static kernel cache {self._entries_dir} ({exc}); check that "
                "the directory is readable"
            ) from exc

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
        found = [self.read_entry(name) for name in self._entry_names() if is_key(name)]
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
        check_key(key)
        existed = False
        if self._has_entries():
            with self._entries_fd() as fd:
                try:
                    mode: int | None = os.stat(key, dir_fd=fd, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    mode = None
                existed = mode is not None
                if mode is not None and not stat.S_ISDIR(mode):
                    os.unlink(key, dir_fd=fd)  # never follow a link planted in the cache
                elif mode is not None:
                    self._uninstall(key)
                    _move_aside(fd, key)
        self.discard_stale(key)
        with self._index_lock():
            index = self._read_index()
            if index.pop(key, None) is not None or existed:
                self._write_index(index)
        return existed

    def _uninstall(self, key: str) -> None:
        entry = self.read_entry(key)
        if entry is None:
            return
        cls = builder_class(entry.builder)
        if cls is None:
            return
        try:
            path = self.verify(key)
        except CacheError as exc:
            logger.warning("not running the uninstall step of %s: %s", key[:12], exc)
            return
        cls.uninstall(path)

    def clean(self) -> int:
        """Delete every artifact and every leftover staging directory; return how many artifacts.

        Only names this cache creates are touched: ``<key>`` directories and ``.tmp-<key>-*``
        staging directories, with ``<key>`` a hex digest.
        """
        removed = sum(self.remove(name) for name in self._entry_names() if is_key(name))
        stale_keys = set()
        for name in self._entry_names():
            if name.startswith(_TMP_PREFIX):
                key = name[len(_TMP_PREFIX) :].split("-", 1)[0]
                if is_key(key):
                    stale_keys.add(key)
        for key in stale_keys:
            # A held key lock means a build is running right now: leave its staging alone.
            with contextlib.suppress(filelock.Timeout), self._try_key_lock(key):
                self.discard_stale(key)
        return removed

    @contextlib.contextmanager
    def _try_key_lock(self, key: str) -> Iterator[None]:
        lock = self._lock_file(self._locks_dir / f"{key}.lock")
        lock.acquire(timeout=0)
        try:
            yield
        finally:
            lock.release()

    def unpack_dir(self) -> Path:
        """A new private directory in the cache for an archive being unpacked (remove it after)."""
        self._ensure()
        try:
            return _confine.make_temp_dir(self.build_dir, self.root, ".unpack-")
        except CacheError:
            raise
        except OSError as exc:
            raise _confine.write_error(self.root, exc, _TODO) from exc

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
        check_key(key)
        with self.key_lock(key):
            with contextlib.suppress(CacheError):
                self.verify(key)
                return None
            staging = self.staging(key)
            try:
                for name in [META, *files]:
                    relative = safe_relative(name)
                    if relative is None:
                        raise CacheError(f"refusing the file name {name!r} in artifact {key[:12]}")
                    fd = _confine.open_file(source, source / relative)
                    with open(fd, "rb") as handle:
                        _confine.write_atomic(
                            self.build_dir, staging / relative, _copier(handle), todo=_TODO
                        )
                try:
                    entry = json.loads((staging / META).read_text(encoding="utf-8"))
                except ValueError as exc:
                    raise CacheError(f"the meta.json of artifact {key[:12]} is not JSON") from exc
                problem = entry_problem(entry)
                if problem is not None or entry["key"] != key or entry["files"] != dict(files):
                    raise CacheError(
                        f"the meta.json of artifact {key[:12]} does not match the archive "
                        f"({problem or 'other key or file list'})"
                    )
                if _manifest(staging) != entry["files"]:
                    raise CacheError(f"the files of artifact {key[:12]} do not match their hashes")
                final = self.entry_dir(key)
                entry["path"] = str(final)
                _confine.write_atomic(self.build_dir, staging / META, json_bytes(entry), todo=_TODO)
                self._publish(key, staging)
            except BaseException:
                with contextlib.suppress(OSError):
                    _confine.remove(self.build_dir, staging)
                raise
            self._index_add(key, entry)
        return final


def _move_aside(entries: int, key: str) -> None:
    """Rename ``entries/<key>`` to a staging name, then delete it: no reader sees it half-deleted.

    Works on the descriptor of ``entries/``, so the directory renamed and deleted is the one
    found there (``rmtree`` with ``dir_fd`` never follows a link inside it).
    """
    trash = f"{_TMP_PREFIX}{key}-old-{secrets.token_hex(4)}"
    os.mkdir(trash, 0o700, dir_fd=entries)
    trash_fd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=entries)
    try:
        os.replace(key, "old", src_dir_fd=entries, dst_dir_fd=trash_fd)
    finally:
        os.close(trash_fd)
    shutil.rmtree(trash, dir_fd=entries, ignore_errors=True)


def _copier(source: BinaryIO) -> Callable[[BinaryIO], None]:
    def copy(target: BinaryIO) -> None:
        shutil.copyfileobj(source, target)

    return copy
