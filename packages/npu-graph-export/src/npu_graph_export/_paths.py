"""Checks on where an export may write, and writing a set of files without half-done states."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from npu_graph_export import _confine
from npu_graph_export.errors import ExportPathError, NpuGraphExportError

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")

_STAGING_PREFIX = ".npu-graph-export-"
# ``.npu-graph-export-<host>-<pid>-<random>``: whose staging directory it is, so that the next
# export can tell the leftovers of a killed process (kill -9, power loss) from live ones.
_STAGING = re.compile(r"\.npu-graph-export-(?P<host>[A-Za-z0-9_.\-]*)-(?P<pid>[0-9]+)-[a-z0-9_]+")


def check_export_name(name: str) -> str:
    """Return ``name`` if it is a plain file name, else raise :class:`ExportPathError`."""
    if not isinstance(name, str):
        raise TypeError(f"export_name must be a str (a plain file name), got {type(name).__name__}")
    if (
        not name
        or name in {".", ".."}
        or "/" in name
        or "\\" in name
        or "\0" in name
        or os.sep in name
        or (os.altsep is not None and os.altsep in name)
    ):
        raise ExportPathError(
            f"export_name {name!r} must be a plain file name (no '/', '\\' or '..'): it names "
            "files inside export_path; pass the directory as export_path instead"
        )
    return name


def weight_file_name(qualified_name: str) -> str:
    """File name for a weight: its qualified name with '.' (and anything unsafe) as '_'."""
    return _SAFE.sub("_", qualified_name.replace(".", "_")) or "weight"


def _root(export_path: Path) -> Path:
    """The trusted directory of an export: the parent of ``export_path``, as the user gave it."""
    return export_path.absolute().parent


def check_export_path(export_path: object) -> Path:
    """Return ``export_path`` as a :class:`Path`, refusing values no file system accepts.

    Raises:
        ConfigError: An empty path, a path with a NUL byte, or not a path at all.
    """
    return Path(_confine.check_path_value(export_path, "export_path"))


def check_target(export_path: Path, relative_files: list[str]) -> None:
    """Refuse links and paths that leave ``export_path``, before anything is written.

    ``export_path``'s parent is trusted as given; ``export_path`` and every directory and file
    below it are looked up without following a link (see ``_confine``).

    Raises:
        ExportPathError: ``export_path``, a directory on the way to a file, or a file to write is
            a symbolic link, exists as the wrong kind of entry, or leaves ``export_path``.
    """
    root = _root(export_path)
    if _confine.check(root, export_path) and not export_path.is_dir():
        raise ExportPathError(
            f"export_path {str(export_path)!r} exists and is not a directory; choose another path"
        )
    for relative in relative_files:
        parts = Path(relative).parts
        if Path(relative).is_absolute() or ".." in parts:
            raise ExportPathError(
                f"{relative!r} would be written outside export_path {str(export_path)!r}; "
                "use names without '/' or '..'"
            )
        target = export_path / relative
        if _confine.check(root, target) and target.is_dir():
            raise ExportPathError(f"{str(target)!r} is a directory; remove it or export elsewhere")


def _host() -> str:
    return _SAFE.sub("_", socket.gethostname())[:64] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a pid we cannot ask about): keep it
    except OSError:
        return True
    return True


def remove_stale_staging(parent: Path) -> list[Path]:
    """Delete staging directories that dead processes on this host left in ``parent``.

    Only entries named by :func:`write_files` for this host are considered, only real
    directories (never a symlink), and only when their process no longer exists: a live export
    (here or on another host sharing the directory) is never touched.

    Returns:
        The directories removed.
    """
    removed: list[Path] = []
    host = _host()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = _STAGING.fullmatch(entry.name)
        if match is None or match["host"] != host or int(match["pid"]) == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or _alive(int(match["pid"])):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def write_files(export_path: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative path -> bytes) under ``export_path``.

    Everything is first written into a temporary directory next to ``export_path`` (same file
    system), then each file is moved into place with ``os.replace``, so a reader never sees a
    truncated file and a failure while writing (a full disk) leaves earlier exports untouched.
    Every directory below ``export_path``'s parent is reached without following a link. The
    staging directory's name holds this host and process id; the staging directories of
    processes that died before cleaning up are removed here.

    Raises:
        ExportPathError: A component below ``export_path``'s parent is a symbolic link.
        ExportWriteError: A file cannot be written (full disk, size limit, permissions); the
            message names it. Nothing of this export is left then.
    """
    root = _root(export_path)
    todo = (
        f"free space (or raise the limit) or pass another export_path; nothing was written and "
        f"files already in {export_path} are unchanged"
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(root)
        prefix = f"{_STAGING_PREFIX}{_host()}-{os.getpid()}-"
        staging = _confine.make_temp_dir(root, root, prefix)
    except NpuGraphExportError:
        raise
    except OSError as error:
        raise _confine.write_error(export_path, error, todo) from error
    try:
        for relative, data in files.items():
            _confine.write_atomic(
                root, staging / relative, data, todo=todo, shown=export_path / relative
            )
        for relative in files:  # every target, before the first move: all or nothing
            _confine.check(root, export_path / relative)
        for relative in files:
            try:
                _confine.move(root, staging / relative, export_path / relative)
            except NpuGraphExportError:
                raise
            except OSError as error:
                raise _confine.write_error(export_path / relative, error, todo) from error
    finally:
        with contextlib.suppress(OSError):
            _confine.remove(root, staging)
