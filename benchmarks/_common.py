"""Shared by the benchmark scripts: the device to measure on, atomic result files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def pick_device() -> torch.device:
    """The current accelerator (CUDA, NPU, ...), else the CPU."""
    if torch.accelerator.is_available():
        current = torch.accelerator.current_accelerator()
        if current is not None:
            return torch.device(current.type, torch.accelerator.current_device_index())
    return torch.device("cpu")


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private; a result file is as readable as any other new file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
