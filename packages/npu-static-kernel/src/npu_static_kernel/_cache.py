"""The on-disk artifact cache: content-hash keys, atomic commits, a file-locked index.

Layout under ``<build_dir>/static_kernel_cache/``::

    index.json            key -> entry metadata (rewritten atomically under index.json.lock)
    index.json.lock
    locks/<key>.lock      held while one process builds or installs that key
    entries/<key>/        a committed artifact: builder files + meta.json
    entries/.tmp-<key>-*  a build in progress (or one that was killed: discarded by the next
                          process that takes the key lock)

An entry directory is complete by construction: it is assembled under a temporary name and
renamed into place with ``os.replace``; ``meta.json`` is written before the rename. The index
is a convenience for listing; lookups read the entry directory itself, so a crash between the
rename and the index update loses nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import filelock

from npu_static_kernel._interface import path_of
from npu_static_kernel._io import atomic_write_json
from npu_static_kernel.errors import CacheError

__all__ = ["CACHE_DIRNAME", "ArtifactCache", "CacheEntry"]

CACHE_DIRNAME = "static_kernel_cache"
_META = "meta.json"
_TMP_PREFIX = ".tmp-"


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

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        data = asdict(self)
        data["inputs"] = list(self.inputs)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CacheEntry:
        """Rebuild an entry from :meth:`to_json` output."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["inputs"] = tuple(known.get("inputs", ()))
        return cls(**known)


def _remove_dir(path: Path, key: str) -> None:
    """Rename ``path`` to a staging name first, so no reader ever sees it half-deleted."""
    trash = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{key}-old-", dir=path.parent))
    os.replace(path, trash / "old")
    shutil.rmtree(trash, ignore_errors=True)


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ArtifactCache:
    """Shape-specialised artifacts on disk, shared by every process that uses the same directory.

    Args:
        build_dir: The build directory; the cache lives in ``<build_dir>/static_kernel_cache``.
            Defaults to the current directory.

    Example:
        >>> cache = ArtifactCache("/path/test")
        >>> [entry.key for entry in cache.entries()]
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

    def entry_dir(self, key: str) -> Path:
        """Return where the artifact for ``key`` lives (it may not exist)."""
        return self._entries_dir / key

    @contextlib.contextmanager
    def key_lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        """Hold the per-key lock: one process at a time builds or installs ``key``.

        The lock is an OS file lock, so a process killed while holding it releases it.

        Args:
            key: The artifact key.
            timeout: Seconds to wait (``-1`` waits forever).

        Raises:
            CacheError: The lock was not obtained within ``timeout``.
        """
        self._ensure()
        lock = filelock.FileLock(str(self._locks_dir / f"{key}.lock"))
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout as exc:
            raise CacheError(
                f"another process holds the build lock for {key} ({lock.lock_file}); wait for it "
                "to finish, or remove the lock file if no process is running"
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def _index_lock(self) -> filelock.FileLock:
        self._ensure()
        return filelock.FileLock(str(self._index) + ".lock")

    def lookup(self, key: str) -> Path | None:
        """Return the committed artifact directory for ``key``, or None on a miss."""
        path = self.entry_dir(key)
        try:
            meta = json.loads((path / _META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return path if meta.get("key") == key else None

    def discard_stale(self, key: str) -> list[Path]:
        """Remove staging directories of ``key`` left by killed builds (hold the key lock)."""
        removed = []
        if self._entries_dir.is_dir():
            for path in self._entries_dir.glob(f"{_TMP_PREFIX}{key}-*"):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        return removed

    def staging(self, key: str) -> Path:
        """Return a fresh, empty staging directory for a build of ``key``."""
        self._ensure()
        return Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{key}-", dir=self._entries_dir))

    def commit(self, entry: CacheEntry, staging: Path) -> Path:
        """Move a finished staging directory into place and record it in the index.

        Args:
            entry: Metadata for the artifact (``path`` and ``size_bytes`` are filled in).
            staging: The directory from :meth:`staging`, with the builder's files in it.

        Returns:
            The committed artifact directory.
        """
        final = self.entry_dir(entry.key)
        entry = CacheEntry.from_json(
            {**entry.to_json(), "path": str(final), "size_bytes": _dir_size(staging)}
        )
        atomic_write_json(staging / _META, entry.to_json())
        if final.exists():
            # An unreadable leftover under the same key: move it aside first, since a directory
            # cannot be replaced by a rename while it has content.
            _remove_dir(final, entry.key)
        os.replace(staging, final)
        with self._index_lock():
            index = self._read_index()
            index[entry.key] = entry.to_json()
            atomic_write_json(self._index, index)
        return final

    def _read_index(self) -> dict[str, Any]:
        try:
            data = json.loads(self._index.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged index loses only listing data: entries are re-read from disk below.
            return {}
        return data if isinstance(data, dict) else {}

    def entries(self) -> list[CacheEntry]:
        """Return every committed artifact, oldest first (index reconciled with the disk)."""
        if not self.root.is_dir():
            return []
        # No lock: the index is only ever replaced whole (atomic rename), so listing works on a
        # read-only cache and creates nothing.
        index = self._read_index()
        found: dict[str, CacheEntry] = {}
        for key, data in index.items():
            if self.lookup(key) is not None and isinstance(data, dict):
                found[key] = CacheEntry.from_json(data)
        if self._entries_dir.is_dir():
            for path in self._entries_dir.iterdir():
                if path.name.startswith(_TMP_PREFIX) or path.name in found:
                    continue
                if self.lookup(path.name) is not None:
                    data = json.loads((path / _META).read_text(encoding="utf-8"))
                    found[path.name] = CacheEntry.from_json(data)
        return sorted(found.values(), key=lambda e: (e.created, e.key))

    def remove(self, key: str) -> bool:
        """Delete one artifact (waits for its key lock); return whether it existed."""
        from npu_static_kernel._ascend import run_uninstallers

        with self.key_lock(key):
            path = self.entry_dir(key)
            existed = path.exists()
            if existed:
                run_uninstallers(path)
                _remove_dir(path, key)
            self.discard_stale(key)
            with self._index_lock():
                index = self._read_index()
                if index.pop(key, None) is not None or existed:
                    atomic_write_json(self._index, index)
        return existed

    def clean(self) -> int:
        """Delete every artifact and every leftover staging directory; return how many artifacts."""
        removed = sum(self.remove(entry.key) for entry in self.entries())
        if self._entries_dir.is_dir():
            stale_keys = {
                path.name[len(_TMP_PREFIX) :].split("-", 1)[0]
                for path in self._entries_dir.glob(f"{_TMP_PREFIX}*")
            }
            for key in stale_keys:
                # A held key lock means a build is running right now: leave its staging alone.
                with contextlib.suppress(CacheError), self.key_lock(key, timeout=0):
                    self.discard_stale(key)
        return removed


def now() -> str:
    """The current time as an ISO-8601 string (UTC), as stored in :attr:`CacheEntry.created`."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
