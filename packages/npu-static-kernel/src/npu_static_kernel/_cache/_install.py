"""Adding entries: a build's staging directory, or files copied from an archive, made complete.

An entry directory is complete by construction: it is assembled under a temporary name with
its ``meta.json`` (the SHA-256 and size of every file) and renamed into place with
``os.replace``, inside the descriptor of ``entries/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from npu_static_kernel import _confine
from npu_static_kernel._cache._index import index_add
from npu_static_kernel._cache._layout import TMP_PREFIX, TODO, CacheLayout
from npu_static_kernel._cache._locks import key_lock
from npu_static_kernel._cache._remove import move_aside
from npu_static_kernel._cache._verify import manifest, verify
from npu_static_kernel._entry import META, CacheEntry, check_key, entry_problem, safe_relative
from npu_static_kernel._io import json_bytes
from npu_static_kernel.errors import CacheError

__all__ = ["commit", "install_files", "staging"]


def staging(layout: CacheLayout, key: str) -> Path:
    """A fresh, empty staging directory for a build of ``key``."""
    check_key(key)
    return layout.new_dir(layout.entries_dir, f"{TMP_PREFIX}{key}-")


def _publish(layout: CacheLayout, key: str, staged: Path) -> None:
    """Rename ``staged`` (in ``entries/``) to ``entries/<key>``, inside the verified directory.

    Whatever is at ``<key>`` already is moved aside first: a link or a file is removed as
    such (never followed), a directory is renamed away and deleted.
    """
    if staged.parent != layout.entries_dir:
        raise CacheError(f"{staged} is not a staging directory of {layout.entries_dir}")
    with layout.entries_fd() as fd:
        try:
            mode: int | None = os.stat(key, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            move_aside(fd, key)
        elif mode is not None:
            os.unlink(key, dir_fd=fd)
        os.replace(staged.name, key, src_dir_fd=fd, dst_dir_fd=fd)


def commit(layout: CacheLayout, entry: CacheEntry, staged: Path) -> Path:
    """Move a finished staging directory into place (see :meth:`ArtifactCache.commit`)."""
    final = layout.entry_dir(entry.key)
    files = manifest(staged)
    entry = CacheEntry.from_json(
        {
            **entry.to_json(),
            "path": str(final),
            "size_bytes": sum(f["size"] for f in files.values()),
            "files": files,
        }
    )
    _confine.write_atomic(layout.build_dir, staged / META, json_bytes(entry.to_json()), todo=TODO)
    _publish(layout, entry.key, staged)
    index_add(layout, entry.key, entry.to_json())
    return final


def install_files(
    layout: CacheLayout, key: str, source: Path, files: Mapping[str, Mapping[str, Any]]
) -> Path | None:
    """Commit an artifact copied from elsewhere (see :meth:`ArtifactCache.install_files`)."""
    check_key(key)
    with key_lock(layout, key):
        with contextlib.suppress(CacheError):
            verify(layout, key)
            return None
        staged = staging(layout, key)
        try:
            for name in [META, *files]:
                relative = safe_relative(name)
                if relative is None:
                    raise CacheError(f"refusing the file name {name!r} in artifact {key[:12]}")
                fd = _confine.open_file(source, source / relative)
                with open(fd, "rb") as handle:
                    _confine.write_atomic(
                        layout.build_dir, staged / relative, _copier(handle), todo=TODO
                    )
            try:
                entry = json.loads((staged / META).read_text(encoding="utf-8"))
            except ValueError as exc:
                raise CacheError(f"the meta.json of artifact {key[:12]} is not JSON") from exc
            problem = entry_problem(entry)
            if problem is not None or entry["key"] != key or entry["files"] != dict(files):
                raise CacheError(
                    f"the meta.json of artifact {key[:12]} does not match the archive "
                    f"({problem or 'other key or file list'})"
                )
            if manifest(staged) != entry["files"]:
                raise CacheError(f"the files of artifact {key[:12]} do not match their hashes")
            final = layout.entry_dir(key)
            entry["path"] = str(final)
            _confine.write_atomic(layout.build_dir, staged / META, json_bytes(entry), todo=TODO)
            _publish(layout, key, staged)
        except BaseException:
            with contextlib.suppress(OSError):
                _confine.remove(layout.build_dir, staged)
            raise
        index_add(layout, key, entry)
    return final


def _copier(source: BinaryIO) -> Callable[[BinaryIO], None]:
    def copy(target: BinaryIO) -> None:
        shutil.copyfileobj(source, target)

    return copy
