"""``index.json``: key -> entry metadata, a listing convenience rewritten atomically under its lock.

Nothing trusts it: lookups and listings read the entry directories themselves, so a missing or
damaged index loses only listing data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from npu_static_kernel import _confine
from npu_static_kernel._cache._layout import MAX_META_BYTES, TODO, CacheLayout
from npu_static_kernel._cache._locks import index_lock
from npu_static_kernel._entry import is_key
from npu_static_kernel._io import json_bytes

__all__ = ["index_add", "index_remove"]


def _read(layout: CacheLayout) -> dict[str, Any]:
    try:
        raw = _confine.read_bytes(layout.build_dir, layout.index, MAX_META_BYTES * 4)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        # A missing or damaged index loses only listing data: entries live on disk.
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if is_key(k)}


def _write(layout: CacheLayout, index: dict[str, Any]) -> None:
    _confine.write_atomic(layout.build_dir, layout.index, json_bytes(index), todo=TODO)


def index_add(layout: CacheLayout, key: str, document: Mapping[str, Any]) -> None:
    """Record ``key`` with its metadata (its file hashes are left out)."""
    with index_lock(layout):
        index = _read(layout)
        index[key] = {k: v for k, v in document.items() if k != "files"}
        _write(layout, index)


def index_remove(layout: CacheLayout, key: str, existed: bool) -> None:
    """Drop ``key``; the index is rewritten when it listed the key or the entry ``existed``."""
    with index_lock(layout):
        index = _read(layout)
        if index.pop(key, None) is not None or existed:
            _write(layout, index)
