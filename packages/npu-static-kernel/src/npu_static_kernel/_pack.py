"""Move a cache between machines: one tar.gz with a manifest of SHA-256 hashes, verified on unpack.

Archive layout::

    manifest.json                   first member: format, package version, file -> sha256/size
    entries/<key>/meta.json
    entries/<key>/<artifact files>

``unpack`` reads the archive as a stream and never calls ``tarfile``'s extraction: every member
must be a regular file named in the manifest, with a relative name that stays inside the archive
root, the declared size and the declared hash; the manifest's total size is checked against a
limit before anything is written. Each artifact is then verified against its own ``meta.json``
and committed with the cache's atomic rename.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from npu_static_kernel import _confine
from npu_static_kernel._cache import META, ArtifactCache, is_key, safe_relative
from npu_static_kernel._entry import stream_digest
from npu_static_kernel._version import __version__
from npu_static_kernel.errors import CacheError

__all__ = ["DEFAULT_MAX_BYTES", "PackResult", "pack_cache", "unpack_cache"]

_FORMAT = "npu-static-kernel-pack"
_MANIFEST = "manifest.json"
_MAX_MANIFEST_BYTES = 16 << 20
_MAX_FILES = 100_000
DEFAULT_MAX_BYTES = 8 << 30


@dataclass
class PackResult:
    """What :func:`pack_cache` or :func:`unpack_cache` did.

    Attributes:
        keys: Artifacts written (pack) or committed (unpack).
        skipped: ``key: reason`` for artifacts left out (pack: failed verification; unpack:
            already present and verified).
        size_bytes: Bytes of artifact files carried.
    """

    keys: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    size_bytes: int = 0


def pack_cache(cache: ArtifactCache, archive: Path) -> PackResult:
    """Write every verified artifact of ``cache`` into a ``.tar.gz`` at ``archive`` (atomically).

    Raises:
        CacheError: The cache cannot be read or the archive cannot be written.
    """
    result = PackResult()
    files: dict[str, dict[str, Any]] = {}
    for entry in cache.entries():
        try:
            cache.verify(entry.key)
        except CacheError as exc:
            result.skipped.append(f"{entry.key[:12]}: {exc}")
            continue
        root = cache.entry_dir(entry.key)
        for name in [META, *entry.files]:
            with open(_confine.open_file(cache.build_dir, root / name), "rb") as handle:
                sha, size = stream_digest(handle)
            files[f"entries/{entry.key}/{name}"] = {"sha256": sha, "size": size}
        result.keys.append(entry.key)
        result.size_bytes += sum(f["size"] for f in entry.files.values())
    manifest = json.dumps(
        {"format": _FORMAT, "version": 1, "package": __version__, "files": files},
        indent=2,
        sort_keys=True,
    ).encode()
    archive = archive.absolute()

    def write(raw: BinaryIO) -> None:
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            info = tarfile.TarInfo(_MANIFEST)
            info.size = len(manifest)
            info.mode = 0o644
            tar.addfile(info, _BytesReader(manifest))
            for name in files:
                info = tarfile.TarInfo(name)
                info.size = files[name]["size"]
                info.mode = 0o644
                with open(_confine.open_file(cache.build_dir, cache.root / name), "rb") as handle:
                    tar.addfile(info, handle)

    # The archive's directory is the user's choice; the archive itself is replaced, never
    # written through (a link there is replaced by the file).
    _confine.write_atomic(
        archive.parent, archive, write, todo="free space or write the archive elsewhere"
    )
    return result


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk = self._data[self._at : end]
        self._at += len(chunk)
        return chunk


def _bad(archive: Path, why: str) -> CacheError:
    return CacheError(f"refusing {archive}: {why}; unpack only archives made by `pack`")


def _read_manifest(archive: Path, tar: tarfile.TarFile, max_bytes: int) -> dict[str, Any]:
    member = tar.next()
    if member is None or member.name != _MANIFEST or not member.isreg():
        raise _bad(archive, f"the first member is not {_MANIFEST}")
    if member.size > _MAX_MANIFEST_BYTES:
        raise _bad(archive, f"{_MANIFEST} has {member.size} bytes")
    handle = tar.extractfile(member)
    assert handle is not None
    try:
        document = json.loads(handle.read(_MAX_MANIFEST_BYTES + 1))
    except ValueError as exc:
        raise _bad(archive, f"{_MANIFEST} is not JSON") from exc
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise _bad(archive, f"{_MANIFEST} is not a {_FORMAT} manifest")
    files = document.get("files")
    if not isinstance(files, dict) or len(files) > _MAX_FILES:
        raise _bad(archive, "the manifest has no valid file list")
    total = 0
    for name, digest in files.items():
        path = safe_relative(name)
        if path is None or len(path.parts) < 3 or path.parts[0] != "entries":
            raise _bad(archive, f"the file name {name!r} leaves the cache")
        if not is_key(path.parts[1]):
            raise _bad(archive, f"{path.parts[1]!r} in {name!r} is not an artifact key")
        if not isinstance(digest, dict) or not isinstance(digest.get("sha256"), str):
            raise _bad(archive, f"no sha256 for {name!r}")
        size = digest.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise _bad(archive, f"no valid size for {name!r}")
        total += size
    if total > max_bytes:
        raise _bad(archive, f"it holds {total} bytes, more than the limit of {max_bytes}")
    return files


def _copy_member(cache: ArtifactCache, handle: IO[bytes], target: Path, size: int) -> str:
    """Copy ``size`` bytes of ``handle`` to ``target`` (confined to the cache); return the SHA-256.

    An empty string when the member ended early.
    """
    digest = hashlib.sha256()
    remaining = size

    def write(out: BinaryIO) -> None:
        nonlocal remaining
        while remaining:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
            remaining -= len(chunk)

    _confine.write_atomic(
        cache.build_dir, target, write, todo="free space or pass another --build-dir"
    )
    return digest.hexdigest() if remaining == 0 else ""


def unpack_cache(
    archive: Path, cache: ArtifactCache, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> PackResult:
    """Verify an archive from :func:`pack_cache` and commit its artifacts into ``cache``.

    Args:
        archive: The ``.tar.gz`` file.
        cache: The cache to fill (artifacts it already holds, verified, are kept).
        max_bytes: Refuse archives whose files add up to more than this.

    Raises:
        CacheError: The archive is unreadable, names a file outside the cache, holds a link,
            device or directory member, a file not in its manifest, or a file whose size or
            SHA-256 differs from the manifest; nothing is committed then.
    """
    result = PackResult()
    try:
        tar = tarfile.open(archive, mode="r:*")  # noqa: SIM115  (closed by the with below)
    except (OSError, tarfile.TarError) as exc:
        raise CacheError(f"cannot read {archive} ({exc}); pass an archive made by `pack`") from exc
    staging: Path | None = None
    try:
        with tar:
            staging = cache.unpack_dir()
            files = _read_manifest(archive, tar, max_bytes)
            seen: set[str] = set()
            while (member := tar.next()) is not None:
                name = member.name
                if name not in files or name in seen:
                    raise _bad(archive, f"the member {name!r} is not in the manifest (or repeated)")
                if not member.isreg():
                    raise _bad(archive, f"the member {name!r} is not a regular file")
                if member.size != files[name]["size"]:
                    raise _bad(archive, f"{name!r} has {member.size} bytes, not as declared")
                seen.add(name)
                relative = safe_relative(name)
                assert relative is not None
                target = staging / relative
                handle = tar.extractfile(member)
                assert handle is not None
                if _copy_member(cache, handle, target, member.size) != files[name]["sha256"]:
                    raise _bad(archive, f"{name!r} does not match its SHA-256 in the manifest")
            missing = sorted(set(files) - seen)
            if missing:
                raise _bad(archive, f"{len(missing)} file(s) of the manifest are missing")
            by_key: dict[str, dict[str, dict[str, Any]]] = {}
            for name, digest in files.items():
                _, key, *rest = name.split("/")
                by_key.setdefault(key, {})["/".join(rest)] = digest
            for key, listed in sorted(by_key.items()):
                if META not in listed:
                    raise _bad(archive, f"artifact {key[:12]} has no {META}")
                carried = {n: d for n, d in listed.items() if n != META}
                committed = cache.install_files(key, staging / "entries" / key, carried)
                if committed is None:
                    result.skipped.append(f"{key[:12]}: already in the cache")
                else:
                    result.keys.append(key)
                    result.size_bytes += sum(int(d["size"]) for d in carried.values())
    except CacheError:
        raise
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise CacheError(f"cannot unpack {archive} ({exc}); check the archive and disk") from exc
    finally:
        if staging is not None:
            cache.remove_path(staging)
    return result
