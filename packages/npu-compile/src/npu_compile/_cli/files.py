"""Atomic result files: a reader never sees half a file, a crash leaves the old one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_json"]


def atomic_write_json(path: Path, document: Any) -> None:
    """Write ``document`` as JSON to ``path`` via a synced temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        # A full disk shows up in write() or fsync(), whose errors name no file: name it.
        raise OSError(error.errno, error.strerror, str(path)) from error
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
