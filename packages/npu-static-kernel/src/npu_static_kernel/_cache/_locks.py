"""The cache's file locks: one per key (a build or install), one for the index.

They are OS file locks, so a process killed while holding one releases it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import filelock

from npu_static_kernel import _confine
from npu_static_kernel._cache._layout import CacheLayout
from npu_static_kernel._entry import check_key
from npu_static_kernel.errors import CacheError

__all__ = ["index_lock", "key_lock", "try_key_lock"]


def _lock_file(layout: CacheLayout, path: Path) -> filelock.FileLock:
    """A file lock at ``path``, refused when ``path`` (or a directory above) is a link."""
    layout.ensure()
    _confine.check(layout.build_dir, path)
    return filelock.FileLock(str(path))


@contextlib.contextmanager
def key_lock(layout: CacheLayout, key: str, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of ``key`` (see :meth:`ArtifactCache.key_lock`)."""
    check_key(key)
    lock = _lock_file(layout, layout.key_lock_path(key))
    try:
        lock.acquire(timeout=timeout)
    except filelock.Timeout as exc:
        raise CacheError(
            f"another process holds the build lock for {key} ({lock.lock_file}); wait for it "
            "to finish, or remove the lock file if no process is running"
        ) from exc
    except OSError as exc:
        raise CacheError(
            f"cannot take the build lock for {key[:12]} in {layout.locks_dir} ({exc}); pass "
            "a writable build directory"
        ) from exc
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def try_key_lock(layout: CacheLayout, key: str) -> Iterator[None]:
    """Hold the lock of ``key`` if it is free now; ``filelock.Timeout`` when it is held."""
    lock = _lock_file(layout, layout.key_lock_path(key))
    lock.acquire(timeout=0)
    try:
        yield
    finally:
        lock.release()


def index_lock(layout: CacheLayout) -> filelock.FileLock:
    """The lock that serialises rewrites of ``index.json``."""
    return _lock_file(layout, layout.index_lock)
