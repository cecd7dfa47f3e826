"""Where the files of one cache live, and the confined way to reach them.

Every path below the build directory is reached from its parent's descriptor without following
a link (``_confine``): a link at any level is refused with an error that names it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from npu_static_kernel import _confine
from npu_static_kernel._entry import check_key
from npu_static_kernel.errors import CacheError

__all__ = ["CACHE_DIRNAME", "MAX_META_BYTES", "TMP_PREFIX", "TODO", "CacheLayout", "can_write"]

CACHE_DIRNAME = "static_kernel_cache"
TMP_PREFIX = ".tmp-"
# A meta.json is a few KiB; anything much larger is not ours and is not read into memory.
MAX_META_BYTES = 16 << 20
TODO = "free space, or pass another build directory"


def can_write(directory: Path, root: Path | None = None) -> bool:
    """Whether files can be created in ``directory`` (created with its parents if missing).

    Decided by creating (and removing) a probe file, not from permission bits: that is also
    right for read-only mounts, immutable directories and processes with elevated privileges.

    Args:
        directory: The directory to probe.
        root: The trusted directory ``directory`` lies in (default: ``directory`` itself);
            nothing below it may be a link.

    Raises:
        CacheError: A component below ``root`` is a symbolic link.
    """
    root = directory if root is None else root
    try:
        probe = _confine.make_temp_dir(root, directory, ".write-probe-")
    except CacheError:
        raise
    except OSError:
        return False
    with contextlib.suppress(OSError):
        _confine.remove(root, probe)
    return True


class CacheLayout:
    """The paths of one cache under ``build_dir`` (the trusted root: nothing below is followed).

    Args:
        build_dir: The build directory, already checked.
    """

    def __init__(self, build_dir: Path) -> None:
        self.build_dir = build_dir
        self.root = build_dir / CACHE_DIRNAME
        self.entries_dir = self.root / "entries"
        self.locks_dir = self.root / "locks"
        self.index = self.root / "index.json"
        self.index_lock = self.root / "index.json.lock"

    def ensure(self) -> None:
        """Create ``entries/`` and ``locks/`` (and the directories above them) if missing."""
        try:
            _confine.make_dirs(self.build_dir, self.entries_dir)
            _confine.make_dirs(self.build_dir, self.locks_dir)
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(
                f"cannot create the static kernel cache in {self.root} ({exc}); pass a writable "
                "build_dir"
            ) from exc

    def entry_dir(self, key: str) -> Path:
        """Where the artifact for ``key`` lives; CacheError when ``key`` is not a hex digest."""
        return self.entries_dir / check_key(key)

    def key_lock_path(self, key: str) -> Path:
        """The lock file of ``key`` (checked by the caller)."""
        return self.locks_dir / f"{key}.lock"

    def has_entries(self) -> bool:
        """Whether ``entries/`` exists; a link (or a file) on the way to it raises CacheError."""
        return _confine.check(self.build_dir, self.entries_dir)

    @contextlib.contextmanager
    def entries_fd(self) -> Iterator[int]:
        """The descriptor of ``entries/``, opened without following a link."""
        with _confine.dir_fd(self.build_dir, self.entries_dir) as fd:
            yield fd

    def entry_names(self) -> list[str]:
        """The names in ``entries/``, sorted (none when it does not exist)."""
        try:
            if not self.has_entries():
                return []
            with self.entries_fd() as fd:
                return sorted(os.listdir(fd))
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(
                f"cannot read the static kernel cache {self.entries_dir} ({exc}); check that "
                "the directory is readable"
            ) from exc

    def new_dir(self, parent: Path, prefix: str) -> Path:
        """A new private directory ``<parent>/<prefix>*`` (``parent`` is ``root`` or below it)."""
        self.ensure()
        try:
            return _confine.make_temp_dir(self.build_dir, parent, prefix)
        except CacheError:
            raise
        except OSError as exc:
            raise _confine.write_error(parent, exc, TODO) from exc
