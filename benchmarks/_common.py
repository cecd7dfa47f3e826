"""Shared by the benchmark scripts: the device to measure on, device time, atomic result files."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
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


#: A row is host-bound when a raw replay keeps the device busy for at most this share of its wall
#: time: the device then waits for the host, so whatever the host adds per call shows in the wall
#: time. Above it the row is device-bound: the device's own work hides the host's, and a ratio of
#: wall times reads about 1.0 whatever the host does.
HOST_BOUND_SHARE = 0.5

#: Label of every row on the CPU, where there is no device time to compare with.
NO_DEVICE_TIME = "n/a on cpu"


def device_us_per_call(
    call: Callable[[torch.Tensor], Any], x: torch.Tensor, device: torch.device, calls: int
) -> float | None:
    """Microseconds of device time per call: the stream's time between two timing events.

    The events bracket ``calls`` calls queued while the device is still busy with matrix
    products queued before them, so the device runs the calls back to back and the host's gaps
    between them are not counted. That the device was busy all along is checked (an event after
    the products, not yet reached when the host has queued the last call); if not, more products
    are queued and it is measured again. ``None`` on the CPU (no device time, none is made up),
    and when the device could not be kept busy (a call that waits for the device itself).
    """
    if device.type == "cpu":
        return None
    a = torch.randn(2048, 2048, device=device)
    product = torch.empty_like(a)
    for products in (8, 32, 128, 512):
        torch.accelerator.synchronize()
        for _ in range(products):
            torch.mm(a, a, out=product)
        busy = torch.Event(device=device)
        start = torch.Event(device=device, enable_timing=True)
        end = torch.Event(device=device, enable_timing=True)
        busy.record()
        start.record()
        for _ in range(calls):
            call(x)
        end.record()
        queued_ahead = not busy.query()  # the device had not reached the calls yet
        end.synchronize()
        if queued_ahead:
            return float(start.elapsed_time(end)) * 1e3 / calls
    return None


def bound(device_us: float | None, wall_us: float, device: torch.device) -> str:
    """``host-bound`` or ``device-bound`` from a raw replay's device and wall time per call."""
    if device.type == "cpu":
        return NO_DEVICE_TIME
    if device_us is None:
        return "unknown (no device time)"
    return "host-bound" if device_us <= HOST_BOUND_SHARE * wall_us else "device-bound"


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
