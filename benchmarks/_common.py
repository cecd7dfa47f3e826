"""Shared by the benchmark scripts: the device to measure on, atomic result files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from npu_mempool._devices import default_device
from npu_static_kernel._io import atomic_write_json

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def pick_device() -> torch.device:
    """The current accelerator (CUDA, NPU, ...), else the CPU: npu-mempool's own choice."""
    return default_device()


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, payload)
    return path
