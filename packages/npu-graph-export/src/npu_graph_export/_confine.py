"""Confinement: reach every path below a trusted root without following a link.

The rule is documented once, in the repository's ``docs/paths.md``. In short: the directory the
user names (the directory an export goes into, the model's directory, ``weights_dir``) is
trusted as given; every component below it that this
package creates, writes, renames, removes or reads is reached from a file descriptor of its
parent, opened with ``O_NOFOLLOW``, so a symbolic link planted at any level is refused with an
error that names it, never followed. Files are written under a temporary name in the verified
directory and renamed into place relative to that directory's descriptor: nothing partial is
left, and the file they replace stays intact until the rename.

A copy of npu-static-kernel's module of the same name (the distributions never import each
other); only the error classes imported below differ. The repository's consistency check fails
when it drifts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from npu_graph_export.errors import ConfigError
from npu_graph_export.errors import ExportPathError as LinkError
from npu_graph_export.errors import ExportWriteError as WriteError

__all__ = [
    "LinkError",
    "WriteError",
    "check",
    "check_path_value",
    "dir_fd",
    "make_dirs",
    "make_temp_dir",
    "move",
    "open_file",
    "path_of",
    "read_bytes",
    "remove",
    "rename",
    "write_atomic",
    "write_error",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# Limits of Linux and macOS file systems (bytes): a longer name or path fails at the first
# write, so it is refused when given. _ROOM_BELOW is what the packages add below a directory.
NAME_MAX = 255
PATH_MAX = 4096
_ROOM_BELOW = 512
_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def check_path_value(value: object, what: str) -> str:
    """Return ``value`` as a path string, refusing what no file system accepts.

    Raises:
        ConfigError: ``value`` is not a ``str`` or ``os.PathLike`` of ``str``, is empty,
            contains a NUL byte, has a component longer than ``NAME_MAX`` bytes, or leaves no
            room below it within ``PATH_MAX``.
    """
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a path (str or os.PathLike), got {type(value).__name__}")
    if not text:
        raise ConfigError(f'{what} is an empty path; pass a directory ("." for the current one)')
    if "\0" in text:
        raise ConfigError(
            f"{what} {text!r} contains a NUL byte, which no file system accepts; pass a valid path"
        )
    try:
        encoded = os.fsencode(os.path.abspath(text))
    except UnicodeEncodeError as error:  # a lone surrogate under a non-UTF-8 file system
        raise ConfigError(
            f"{what} {text!r} cannot be encoded for this file system ({error.reason}); pass a "
            "path in its encoding"
        ) from error
    longest = max((len(part) for part in encoded.split(os.sep.encode())), default=0)
    if longest > NAME_MAX:
        raise ConfigError(
            f"{what} has a component of {longest} bytes; file systems take at most {NAME_MAX} "
            "bytes per name: choose shorter directory names"
        )
    if len(encoded) + _ROOM_BELOW > PATH_MAX:
        raise ConfigError(
            f"{what} is {len(encoded)} bytes long; the files written below it would pass the "
            f"system's limit of {PATH_MAX} bytes per path: choose a shorter path"
        )
    return text


def path_of(value: object, what: str = "the build directory") -> Path:
    """Return a directory named by raw input (an argument, a variable) as a checked path.

    ``None`` means the current directory. Values that were checked already (the fields of an
    options object) are passed on as they are, not through here again.

    Raises:
        ConfigError: As :func:`check_path_value`.
    """
    if value is None:
        return Path(os.getcwd())
    return Path(check_path_value(value, what))


def write_error(
    path: Path | str, error: OSError, todo: str = "", *, action: str = "write"
) -> WriteError:
    """The package's error for an ``OSError`` met while writing ``path``: what and what to do.

    Args:
        path: The file as the user knows it.
        error: What the operating system said.
        todo: What to do about it (a default fits the cause).
        action: The verb of the message (``cannot <action> <path>``).
    """
    code = error.errno
    detail = f"[Errno {code}] {error.strerror}" if code is not None else str(error)
    if code in _FULL:
        what = "the disk is full or a file size limit was reached"
        todo = todo or "free space (or raise the limit) and run again"
    elif code in _DENIED:
        what = "permission denied"
        todo = todo or "make the directory writable or choose another one"
    else:
        what = error.strerror or "an operating system error"
        todo = todo or "check the directory and run again"
    return WriteError(f"cannot {action} {path}: {what} ({detail}); {todo}")


def _below(root: Path, path: Path) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (both made absolute, lexically)."""
    base = os.path.abspath(root)
    full = os.path.abspath(path)
    relative = os.path.relpath(full, base)
    if relative == os.curdir:
        return ()
    parts = tuple(relative.split(os.sep))
    if parts[0] == os.pardir:
        raise LinkError(f"{path} is outside {root}; refusing to use it")
    return parts


def _refused(root: Path, parts: tuple[str, ...], parent: int) -> LinkError:
    """The error for ``parts[-1]`` (inside ``parent``), which could not be opened as a directory."""
    where = Path(root).joinpath(*parts)
    try:
        mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode):
        return LinkError(
            f"{where} is a symbolic link; links below {root} are never followed: remove it "
            "(or pass the directory it points to instead)"
        )
    return LinkError(f"{where} is not a directory; remove it or choose another directory")


def _open_root(root: Path, create: bool) -> int:
    # The root is the user's choice: a link there (a home directory on another disk) is fine.
    if create:
        os.makedirs(root, exist_ok=True)
    return os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)


def _walk(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of ``root/parts``, each component opened with ``O_NOFOLLOW``."""
    fd = _open_root(root, create)
    try:
        for index, part in enumerate(parts):
            try:
                following = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                    os.mkdir(part, 0o777, dir_fd=fd)
                try:
                    following = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise _refused(root, parts[: index + 1], fd) from error
                    raise
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _refused(root, parts[: index + 1], fd) from error
                raise
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def dir_fd(root: Path, path: Path, *, create: bool = False) -> Iterator[int]:
    """Hold a descriptor of the directory ``path``, reached from ``root`` without links.

    Args:
        root: The trusted directory (followed as given).
        path: ``root`` itself or a directory below it.
        create: Create missing components (``root`` included).

    Raises:
        LinkError: A component below ``root`` is a symbolic link or not a directory.
        FileNotFoundError: A component is missing and ``create`` is false.
    """
    fd = _walk(root, _below(root, path), create)
    try:
        yield fd
    finally:
        os.close(fd)


def make_dirs(root: Path, path: Path) -> Path:
    """Create ``path`` and its missing parents below ``root``, refusing links; return it."""
    with dir_fd(root, path, create=True):
        return path


def check(root: Path, path: Path) -> bool:
    """Refuse a link at any component of ``path`` below ``root``; return whether it exists.

    Missing components are fine (nothing below them can be a link yet).

    Raises:
        LinkError: A directory component is a link or a file, or ``path`` itself is a link.
    """
    parts = _below(root, path)
    if not parts:
        return os.path.isdir(root)
    try:
        with dir_fd(root, path.parent) as parent:
            mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False  # the root is a file: whoever writes there says so
    if stat.S_ISLNK(mode):
        raise LinkError(
            f"{path} is a symbolic link; links below {root} are never followed: remove it"
        )
    return True


def open_file(root: Path, path: Path) -> int:
    """Open the regular file ``path`` below ``root`` for reading, refusing links at any level.

    Raises:
        LinkError: A component is a link, or ``path`` is not a regular file.
        FileNotFoundError: It does not exist.
    """
    with dir_fd(root, path.parent) as parent:
        try:
            fd = os.open(path.name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EMLINK):
                raise LinkError(
                    f"{path} is a symbolic link; links below {root} are never followed: remove it"
                ) from error
            raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LinkError(f"{path} is not a regular file")
    return fd


def read_bytes(root: Path, path: Path, limit: int | None = None) -> bytes:
    """The content of the regular file ``path`` below ``root`` (see :func:`open_file`).

    Raises:
        ValueError: The file holds more than ``limit`` bytes.
    """
    with open(open_file(root, path), "rb", closefd=True) as handle:
        if limit is not None and os.fstat(handle.fileno()).st_size > limit:
            raise ValueError(f"{path} holds more than {limit} bytes")
        return handle.read()


def _refuse_link(root: Path, path: Path, parent: int) -> None:
    """Raise if ``path`` (in the directory ``parent``) is a link.

    The rename that puts a file in place would replace a link, not follow it; still, a link
    where a file of ours belongs was planted: say so and write nothing.
    """
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.stat(path.name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise LinkError(
                f"{path} is a symbolic link; links below {root} are never followed: remove it"
            )


def write_atomic(
    root: Path,
    path: Path,
    content: bytes | Callable[[BinaryIO], None],
    *,
    mode: int = 0o644,
    todo: str = "",
    shown: Path | None = None,
) -> None:
    """Write ``path`` below ``root`` through a temporary file renamed into place.

    The parent directories are created without following links, the temporary file is created
    with ``O_EXCL | O_NOFOLLOW`` in the verified parent and synced before the rename, so a
    reader sees the old file or the new one, and a failure (a full disk) leaves the old one.

    Args:
        root: The trusted directory.
        path: The file to write.
        content: The bytes, or a function that writes them to a binary file object.
        mode: Permission bits of the new file (before the umask).
        todo: What the user should do if the disk is full or the write is denied.
        shown: The path to name in an error (default: ``path``), such as the final place of a
            file written into a staging directory.

    Raises:
        LinkError: A component below ``root`` (``path`` included) is a symbolic link.
        WriteError: The file cannot be written (full disk, permissions); it names the file.
    """
    try:
        with dir_fd(root, path.parent, create=True) as parent:
            _refuse_link(root, path, parent)
            temporary = f".{path.name[:64]}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
            fd = os.open(temporary, flags, mode, dir_fd=parent)
            try:
                with open(fd, "wb", closefd=True) as handle:
                    if callable(content):
                        content(handle)
                    else:
                        handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, path.name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent)
                raise
    except LinkError:
        raise
    except OSError as error:
        raise write_error(shown or path, error, todo) from error


def make_temp_dir(root: Path, parent: Path, prefix: str) -> Path:
    """Create a new private directory ``parent/<prefix><random>`` below ``root``; return it."""
    with dir_fd(root, parent, create=True) as fd:
        for _ in range(100):
            name = f"{prefix}{secrets.token_hex(4)}"
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                continue
            return parent / name
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent))


def rename(root: Path, directory: Path, source: str, target: str) -> None:
    """Rename ``directory/source`` to ``directory/target`` inside the verified ``directory``.

    A link at ``target`` is replaced, never followed (a rename does not follow its target).
    """
    with dir_fd(root, directory) as fd:
        os.replace(source, target, src_dir_fd=fd, dst_dir_fd=fd)


def move(root: Path, source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, both below ``root``, creating ``target``'s directory.

    Both directories are reached without links; a link at ``target`` is refused (a rename
    would replace it, never follow it, but it was planted where a file of ours belongs).
    """
    with (
        dir_fd(root, source.parent) as source_dir,
        dir_fd(root, target.parent, create=True) as target_dir,
    ):
        _refuse_link(root, target, target_dir)
        os.replace(source.name, target.name, src_dir_fd=source_dir, dst_dir_fd=target_dir)


def remove(root: Path, path: Path) -> bool:
    """Delete ``path`` below ``root`` (a tree, a file, or a link as a link); True if it existed."""
    parts = _below(root, path)
    if not parts:
        raise LinkError(f"refusing to remove {root} itself")
    try:
        with dir_fd(root, path.parent) as parent:
            try:
                mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(mode):
                # rmtree with dir_fd walks by descriptors and never follows a link inside.
                shutil.rmtree(parts[-1], dir_fd=parent, ignore_errors=True)
            else:
                os.unlink(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        return False
    return True
