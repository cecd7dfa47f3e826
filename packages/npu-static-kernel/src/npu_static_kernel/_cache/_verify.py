"""Reading and verifying entries: ``meta.json`` records the SHA-256 and size of every file.

An entry is read from its own directory (the index is not trusted) and its files are checked
against ``meta.json`` before anything is installed or loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from npu_static_kernel import _confine
from npu_static_kernel._cache._layout import MAX_META_BYTES, CacheLayout
from npu_static_kernel._entry import (
    META,
    CacheEntry,
    entry_problem,
    file_digest,
    is_key,
    stream_digest,
)
from npu_static_kernel.errors import CacheError

__all__ = ["manifest", "read_entry", "verify"]


def manifest(directory: Path) -> dict[str, dict[str, Any]]:
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


def read_entry(layout: CacheLayout, key: str) -> CacheEntry | None:
    """The committed entry of ``key`` (see :meth:`ArtifactCache.read_entry`)."""
    if not is_key(key) or not layout.has_entries():
        return None
    try:
        raw = _confine.read_bytes(layout.build_dir, layout.entry_dir(key) / META, MAX_META_BYTES)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if entry_problem(data) is not None or data["key"] != key:
        return None
    return CacheEntry.from_json(data)


def verify(layout: CacheLayout, key: str) -> Path:
    """Check every file of ``key``'s artifact (see :meth:`ArtifactCache.verify`)."""
    entry = read_entry(layout, key)
    if entry is None:
        raise CacheError(f"no readable artifact {key[:12]} in {layout.root}")
    if not entry.files:
        raise CacheError(
            f"the artifact {key[:12]} records no file hashes (written by an older version); "
            "it is rebuilt"
        )
    root = layout.entry_dir(key)
    for name, expected in entry.files.items():
        try:
            fd = _confine.open_file(layout.build_dir, root / name)
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
