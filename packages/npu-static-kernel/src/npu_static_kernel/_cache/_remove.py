"""Removing entries: the builder's uninstall hook, then a rename aside so no reader sees half.

Only names this cache creates are touched: ``<key>`` directories and ``.tmp-<key>-*`` staging
directories, with ``<key>`` a hex digest. A link in place of an entry is removed as a link.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import stat
from pathlib import Path

import filelock

from npu_static_kernel import _confine
from npu_static_kernel._cache._index import index_remove
from npu_static_kernel._cache._layout import TMP_PREFIX, CacheLayout
from npu_static_kernel._cache._locks import key_lock, try_key_lock
from npu_static_kernel._cache._verify import read_entry, verify
from npu_static_kernel._entry import check_key, is_key
from npu_static_kernel._interface import builder_class
from npu_static_kernel.errors import CacheError

__all__ = ["clean", "discard", "discard_stale", "move_aside"]

logger = logging.getLogger("npu_static_kernel")


def move_aside(entries: int, key: str) -> None:
    """Rename ``entries/<key>`` to a staging name, then delete it: no reader sees it half-deleted.

    Works on the descriptor of ``entries/``, so the directory renamed and deleted is the one
    found there (``rmtree`` with ``dir_fd`` never follows a link inside it).
    """
    trash = f"{TMP_PREFIX}{key}-old-{secrets.token_hex(4)}"
    os.mkdir(trash, 0o700, dir_fd=entries)
    trash_fd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=entries)
    try:
        os.replace(key, "old", src_dir_fd=entries, dst_dir_fd=trash_fd)
    finally:
        os.close(trash_fd)
    shutil.rmtree(trash, dir_fd=entries, ignore_errors=True)


def discard_stale(layout: CacheLayout, key: str) -> list[Path]:
    """Remove staging directories of ``key`` left by killed builds (hold the key lock)."""
    check_key(key)
    removed = []
    for name in layout.entry_names():
        if name.startswith(f"{TMP_PREFIX}{key}-"):
            path = layout.entries_dir / name
            _confine.remove(layout.build_dir, path)  # a link is removed as a link
            removed.append(path)
    return removed


def _uninstall(layout: CacheLayout, key: str) -> None:
    entry = read_entry(layout, key)
    if entry is None:
        return
    cls = builder_class(entry.builder)
    if cls is None:
        return
    try:
        path = verify(layout, key)
    except CacheError as exc:
        logger.warning("not running the uninstall step of %s: %s", key[:12], exc)
        return
    cls.uninstall(path)


def discard(layout: CacheLayout, key: str) -> bool:
    """Delete the artifact of ``key`` (see :meth:`ArtifactCache.discard`)."""
    check_key(key)
    existed = False
    if layout.has_entries():
        with layout.entries_fd() as fd:
            try:
                mode: int | None = os.stat(key, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            existed = mode is not None
            if mode is not None and not stat.S_ISDIR(mode):
                os.unlink(key, dir_fd=fd)  # never follow a link planted in the cache
            elif mode is not None:
                _uninstall(layout, key)
                move_aside(fd, key)
    discard_stale(layout, key)
    index_remove(layout, key, existed)
    return existed


def clean(layout: CacheLayout) -> int:
    """Delete every artifact and leftover staging directory (see :meth:`ArtifactCache.clean`)."""
    removed = 0
    for name in layout.entry_names():
        if is_key(name):
            with key_lock(layout, name):
                removed += discard(layout, name)
    stale_keys = set()
    for name in layout.entry_names():
        if name.startswith(TMP_PREFIX):
            key = name[len(TMP_PREFIX) :].split("-", 1)[0]
            if is_key(key):
                stale_keys.add(key)
    for key in stale_keys:
        # A held key lock means a build is running right now: leave its staging alone.
        with contextlib.suppress(filelock.Timeout), try_key_lock(layout, key):
            discard_stale(layout, key)
    return removed
