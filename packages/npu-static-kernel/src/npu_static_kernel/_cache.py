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
they are, paths are resolved and confined to ``entries/``, and the index is only a listing
convenience (lookups and listings read the entry directories themselves).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import filelock

from npu_static_kernel._interface import builder_class, path_of
from npu_static_kernel._io import atomic_write_json
from npu_static_kernel.errors import CacheError

__all__ = [
    "CACHE_DIRNAME",
    "META",
    "ArtifactCache",
    "CacheEntry",
    "can_write",
    "file_digest",
    "is_key",
    "safe_relative",
]

CACHE_DIRNAME = "static_kernel_cache"
META = "meta.json"
_TMP_PREFIX = ".tmp-"
_KEY = re.compile(r"[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A meta.json is a few KiB; anything much larger is not ours and is not read into memory.
_MAX_META_BYTES = 16 << 20

logger = logging.getLogger("npu_static_kernel")


def is_key(value: object) -> bool:
    """Whether ``value`` is an artifact key: a SHA-256 hex digest (64 lowercase hex digits)."""
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def _check_key(key: object) -> str:
    if not is_key(key):
        raise CacheError(
            f"{key!r} is not an artifact key (keys are 64 lowercase hex digits); run "
            "`npu-static-kernel list` to see the keys"
        )
    assert isinstance(key, str)
    return key


def safe_relative(name: object) -> PurePosixPath | None:
    """Return ``name`` as a relative POSIX path that stays inside its root, else None.

    Refused: non-strings, empty names, absolute paths, ``..`` or ``.`` components, backslashes
    and NUL bytes.
    """
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        return None
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("..", ".", "") for part in name.split("/")):
        return None
    return path


def file_digest(path: Path) -> tuple[str, int]:
    """Return the SHA-256 hex digest and size of a regular file (read in chunks)."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class CacheEntry:
    """One committed artifact.

    Attributes:
        key: The content hash the artifact is stored under.
        builder: Name of the builder that made it.
        device: Device fingerprint it was built for.
        inputs: Argument descriptions (``float32[4, 8]``, ``int=4``) it is specialised for.
        created: ISO timestamp of the commit.
        graph: A short name of the graph (its class name).
        size_bytes: Total size of the artifact files.
        path: Directory of the artifact.
        extra: Anything else the writer recorded.
        files: Relative path -> ``{"sha256": hex digest, "size": bytes}`` of every artifact file
            (``meta.json`` aside), checked before the artifact is loaded.
    """

    key: str
    builder: str
    device: str
    inputs: tuple[str, ...]
    created: str
    graph: str = ""
    size_bytes: int = 0
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        data = asdict(self)
        data["inputs"] = list(self.inputs)
        return data

    @classmethod
    def from_json(cls, data: Any) -> CacheEntry:
        """Rebuild an entry from :meth:`to_json` output, checking every field's type.

        Raises:
            CacheError: ``data`` is not an entry (not an object, a missing or mistyped field).
        """
        problem = _entry_problem(data)
        if problem is not None:
            raise CacheError(
                f"malformed static kernel cache entry ({problem}); remove it with "
                "`npu-static-kernel clean`"
            )
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["inputs"] = tuple(known.get("inputs", ()))
        return cls(**known)


def _entry_problem(data: Any) -> str | None:
    """Describe what makes ``data`` an invalid entry, or None when it is valid."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    if not is_key(data.get("key")):
        return "no valid key"
    for name in ("builder", "device", "created"):
        if not isinstance(data.get(name), str):
            return f"{name!r} is not a string"
    for name in ("graph", "path"):
        if not isinstance(data.get(name, ""), str):
            return f"{name!r} is not a string"
    inputs = data.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        return "'inputs' is not a list of strings"
    size = data.get("size_bytes", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "'size_bytes' is not a non-negative integer"
    if not isinstance(data.get("extra", {}), dict):
        return "'extra' is not an object"
    files = data.get("files", {})
    if not isinstance(files, dict):
        return "'files' is not an object"
    for name, digest in files.items():
        if safe_relative(name) is None or name == META:
            return f"file name {name!r} leaves the artifact directory"
        if not isinstance(digest, dict) or not isinstance(digest.get("sha256"), str):
            return f"no sha256 for {name!r}"
        if _SHA256.fullmatch(digest["sha256"]) is None:
            return f"bad sha256 for {name!r}"
        size = digest.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"bad size for {name!r}"
    return None


def _remove_dir(path: Path, key: str) -> None:
    """Rename ``path`` to a staging name first, so no reader ever sees it half-deleted."""
    trash = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{key}-old-", dir=path.parent))
    os.replace(path, trash / "old")
    shutil.rmtree(trash, ignore_errors=True)


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


def can_write(directory: Path) -> bool:
    """Whether files can be created in ``directory`` (created with its parents if missing).

    Decided by creating (and removing) a probe file, not from permission bits: that is also
    right for read-only mounts, immutable directories and processes with elevated privileges.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
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
        self.root = path_of(build_dir) / CACHE_DIRNAME
        self._entries_dir = self.root / "entries"
        self._locks_dir = self.root / "locks"
        self._index = self.root / "index.json"

    def _ensure(self) -> None:
        try:
            self._entries_dir.mkdir(parents=True, exist_ok=True)
            self._locks_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"cannot create the static kernel cache in {self.root} ({exc}); pass a writable "
                "build_dir"
            ) from exc

    def writable(self) -> bool:
        """Whether this process can add artifacts to the cache (see :func:`can_write`)."""
        return can_write(self.root)

    def entry_dir(self, key: str) -> Path:
        """Return where the artifact for ``key`` lives (it may not exist).

        Raises:
            CacheError: ``key`` is not a hex digest.
        """
        return self._entries_dir / _check_key(key)

    def _confined(self, key: str) -> Path | None:
        """The entry directory of ``key`` if it is a real directory inside ``entries/``."""
        path = self.entry_dir(key)
        try:
            if path.is_symlink() or not path.is_dir():
                return None
            if path.resolve().parent != self._entries_dir.resolve():
                return None
        except (OSError, RuntimeError):
            return None
        return path

    @contextlib.contextmanager
    def key_lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        """Hold the per-key lock: one process at a time builds or installs ``key``.

        The lock is an OS file lock, so a process killed while holding it releases it.

        Args:
            key: The artifact key.
            timeout: Seconds to wait (``-1`` waits forever).

        Raises:
            CacheError: ``key`` is not a hex digest, or the lock was not obtained within
                ``timeout``.
        """
        _check_key(key)
        self._ensure()
        lock = filelock.FileLock(str(self._locks_dir / f"{key}.lock"))
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
        self._ensure()
        return filelock.FileLock(str(self._index) + ".lock")

    def read_entry(self, key: str) -> CacheEntry | None:
        """Return the committed entry of ``key`` from its ``meta.json``, or None on a miss.

        A missing, unreadable, oversized or malformed ``meta.json``, a ``meta.json`` written for
        another key, and an entry directory that is a symbolic link all count as a miss.
        """
        if not is_key(key):
            return None
        path = self._confined(key)
        if path is None:
            return None
        meta = path / META
        try:
            if meta.is_symlink() or meta.stat().st_size > _MAX_META_BYTES:
                return None
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if _entry_problem(data) is not None or data["key"] != key:
            return None
        return CacheEntry.from_json(data)

    def lookup(self, key: str) -> Path | None:
        """Return the committed artifact directory for ``key``, or None on a miss."""
        return self.entry_dir(key) if self.read_entry(key) is not None else None

    def verify(self, key: str) -> Path:
        """Check every file of ``key``'s artifact against the SHA-256 and size in its meta.json.

        Returns:
            The verified artifact directory.

        Raises:
            CacheError: The artifact is missing, lists no files, or a file is missing, is not a
                regular file inside the artifact, or differs in size or content.
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
        resolved_root = root.resolve()
        for name, expected in entry.files.items():
            path = root / name
            try:
                if path.is_symlink() or not path.is_file():
                    raise CacheError(f"{name} is missing or not a regular file")
                if resolved_root not in path.resolve().parents:
                    raise CacheError(f"{name} resolves outside the artifact")
                if path.stat().st_size != expected["size"]:
                    raise CacheError(
                        f"{name} has {path.stat().st_size} bytes, {expected['size']} recorded"
                    )
                sha, _ = file_digest(path)
            except OSError as exc:
                raise CacheError(
                    f"the artifact {key[:12]} cannot be read ({exc}); it is rebuilt"
                ) from exc
            except CacheError as exc:
                raise CacheError(
                    f"the artifact {key[:12]} does not match its meta.json ({exc}); it is rebuilt"
                ) from exc
            if sha != expected["sha256"]:
                raise CacheError(
                    f"the artifact {key[:12]} does not match its meta.json ({name}: SHA-256 "
                    f"{sha[:12]}, {expected['sha256'][:12]} recorded); it is rebuilt"
                )
        return root

    def discard_stale(self, key: str) -> list[Path]:
        """Remove staging directories of ``key`` left by killed builds (hold the key lock)."""
        _check_key(key)
        removed = []
        if self._entries_dir.is_dir():
            for path in self._entries_dir.glob(f"{_TMP_PREFIX}{key}-*"):
                if path.is_symlink():
                    path.unlink(missing_ok=True)
                else:
                    shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        return removed

    def staging(self, key: str) -> Path:
        """Return a fresh, empty staging directory for a build of ``key``."""
        _check_key(key)
        self._ensure()
        return Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{key}-", dir=self._entries_dir))

    def commit(self, entry: CacheEntry, staging: Path) -> Path:
        """Move a finished staging directory into place and record it in the index.

        Args:
            entry: Metadata for the artifact (``path``, ``size_bytes`` and ``files`` are filled
                in: the SHA-256 and size of every file in ``staging``).
            staging: The directory from :meth:`staging`, with the builder's files in it.

        Returns:
            The committed artifact directory.
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
        atomic_write_json(staging / META, entry.to_json())
        if final.is_symlink():
            final.unlink()
        elif final.exists():
            # An unreadable leftover under the same key: move it aside first, since a directory
            # cannot be replaced by a rename while it has content.
            _remove_dir(final, entry.key)
        os.replace(staging, final)
        with self._index_lock():
            index = self._read_index()
            index[entry.key] = {k: v for k, v in entry.to_json().items() if k != "files"}
            atomic_write_json(self._index, index)
        return final

    def _read_index(self) -> dict[str, Any]:
        try:
            if self._index.stat().st_size > _MAX_META_BYTES * 4:
                return {}
            data = json.loads(self._index.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # A missing or damaged index loses only listing data: entries live on disk.
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if is_key(k)}

    def _entry_names(self) -> list[str]:
        if not self._entries_dir.is_dir():
            return []
        try:
            return sorted(p.name for p in self._entries_dir.iterdir())
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
            CacheError: The cache directory exists but cannot be read.
        """
        try:
            if not self.root.is_dir():
                return []
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
            CacheError: ``key`` is not a hex digest, or the cache cannot be written.
        """
        _check_key(key)
        with self.key_lock(key):
            return self.discard(key)

    def discard(self, key: str) -> bool:
        """Like :meth:`remove`, for a caller that already holds the key lock."""
        path = self.entry_dir(key)
        existed = path.is_symlink() or path.exists()
        if path.is_symlink() or (existed and not path.is_dir()):
            path.unlink()  # never follow a link planted in the cache
        elif existed:
            self._uninstall(key)
            _remove_dir(path, key)
        self.discard_stale(key)
        with self._index_lock():
            index = self._read_index()
            if index.pop(key, None) is not None or existed:
                atomic_write_json(self._index, index)
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
            with contextlib.suppress(CacheError), self.key_lock(key, timeout=0):
                self.discard_stale(key)
        return removed

    def install_files(
        self, key: str, source: Path, files: Mapping[str, Mapping[str, Any]]
    ) -> Path | None:
        """Commit an artifact copied from elsewhere (``pack``/``unpack``) after verifying it.

        Args:
            key: The artifact key.
            source: A directory holding ``meta.json`` and the listed files.
            files: The file hashes the carrier recorded (must equal those in ``meta.json``).

        Returns:
            The committed directory, or None when the cache already has a verified copy.

        Raises:
            CacheError: The files do not match their hashes, or the cache cannot be written.
        """
        _check_key(key)
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
                    target = staging / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source / relative, target)
                    target.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
                try:
                    entry = json.loads((staging / META).read_text(encoding="utf-8"))
                except ValueError as exc:
                    raise CacheError(f"the meta.json of artifact {key[:12]} is not JSON") from exc
                problem = _entry_problem(entry)
                if problem is not None or entry["key"] != key or entry["files"] != dict(files):
                    raise CacheError(
                        f"the meta.json of artifact {key[:12]} does not match the archive "
                        f"({problem or 'other key or file list'})"
                    )
                if _manifest(staging) != entry["files"]:
                    raise CacheError(f"the files of artifact {key[:12]} do not match their hashes")
                final = self.entry_dir(key)
                entry["path"] = str(final)
                atomic_write_json(staging / META, entry)
                if final.is_symlink():
                    final.unlink()
                elif final.exists():
                    _remove_dir(final, key)
                os.replace(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            with self._index_lock():
                index = self._read_index()
                index[key] = {k: v for k, v in entry.items() if k != "files"}
                atomic_write_json(self._index, index)
        return final


def now() -> str:
    """The current time as an ISO-8601 string (UTC), as stored in :attr:`CacheEntry.created`."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
