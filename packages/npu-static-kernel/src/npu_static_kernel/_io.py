"""Atomic JSON writes shared by the recorder, the cache and the builders (see _confine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npu_static_kernel import _confine

__all__ = ["atomic_write_json", "json_bytes"]


def json_bytes(document: Any) -> bytes:
    """``document`` as the indented, key-sorted JSON text every file of the package uses."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def atomic_write_json(path: Path, document: Any, *, root: Path | None = None) -> None:
    """Write ``document`` as JSON to ``path`` via a synced temporary file and a rename.

    Args:
        path: The file to write.
        document: A JSON-serialisable value.
        root: The trusted directory ``path`` lies in: no component below it is followed if it
            is a link (default: ``path``'s directory, so only ``path`` itself is checked).

    Raises:
        CacheError: A component below ``root`` is a link, or the file cannot be written (a
            full disk, permissions); the message names the file.
    """
    _confine.write_atomic(path.parent if root is None else root, path, json_bytes(document))
