"""Artifact keys and entries: what a ``meta.json`` holds and how every field of it is checked."""

from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from npu_static_kernel.errors import CacheError

__all__ = [
    "META",
    "CacheEntry",
    "check_key",
    "entry_problem",
    "file_digest",
    "is_key",
    "now",
    "safe_relative",
    "stream_digest",
]

META = "meta.json"
_KEY = re.compile(r"[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_key(value: object) -> bool:
    """Whether ``value`` is an artifact key: a SHA-256 hex digest (64 lowercase hex digits)."""
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def check_key(key: object) -> str:
    """Return ``key`` if it is an artifact key, else raise :class:`CacheError`."""
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
    with path.open("rb") as handle:
        return stream_digest(handle)


def stream_digest(handle: BinaryIO) -> tuple[str, int]:
    """Return the SHA-256 hex digest and size of what is left to read in ``handle``."""
    digest = hashlib.sha256()
    size = 0
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
        problem = entry_problem(data)
        if problem is not None:
            raise CacheError(
                f"malformed static kernel cache entry ({problem}); remove it with "
                "`npu-static-kernel clean`"
            )
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["inputs"] = tuple(known.get("inputs", ()))
        return cls(**known)


def entry_problem(data: Any) -> str | None:
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


def now() -> str:
    """The current time as an ISO-8601 string (UTC), as stored in :attr:`CacheEntry.created`."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
