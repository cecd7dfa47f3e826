"""Device adapter of npu-compile's tooling: the only module of npu-compile that may touch torch_npu.

The device to run on and the timing of a step (host and device time) for ``diagnose``, the demo
and the benchmarks, and what ``npu-compile doctor`` reports (versions, whether torch_npu imports,
the graph implementation). Installing torch_npu on a machine without CANN breaks ``import torch``
itself, so nothing here imports it at module import time; every probe is guarded and reports
"absent" instead of raising.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

import npu_mempool
import torch

from npu_compile._accel import current_device

__all__ = [
    "best_device",
    "synchronize",
    "timed_call",
    "versions",
    "graph_implementation",
    "has_accelerator",
]


def has_accelerator() -> bool:
    """Return whether a CUDA or NPU device is usable."""
    return current_device() is not None


def best_device(requested: str | None = None) -> torch.device:
    """Return the device to run on: ``requested`` if given, else npu, cuda, then cpu.

    Args:
        requested: A device string (``"cpu"``, ``"cuda"``, ``"npu:1"``) or ``None`` for the best.
    """
    if requested:
        device = torch.device(requested)
        given: int | None = device.index  # None when named without one ("cuda")
        if device.type == "cpu" or given is not None:
            return device
        # An accelerator named without an index means its current device (timing events need
        # an explicit one), as it does for torch itself.
        current = current_device()
        index = current.index if current is not None and current.type == device.type else 0
        return torch.device(device.type, index)
    found = current_device()
    return found if found is not None else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (no-op on CPU)."""
    if device.type == "cpu":
        return
    module = torch.get_device_module(device.type)
    module.synchronize(device)


def timed_call(
    fn: Callable[[], object],
    device: torch.device,
    timer: Callable[[], float] = time.perf_counter,
) -> tuple[float, float | None, object]:
    """Run ``fn`` once and time it; ``timer`` is the host clock in seconds.

    Returns:
        ``(host seconds, device seconds or None, result)``. Host time is the wall time of the
        Python call (the enqueue time on an accelerator); device time is the event-timed span of
        the work it queued, or ``None`` on CPU where the two cannot be separated.
    """
    if device.type == "cpu":
        start = timer()
        result = fn()
        return timer() - start, None, result
    synchronize(device)
    begin = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    begin.record()
    start = timer()
    result = fn()
    host = timer() - start
    end.record()
    end.synchronize()
    return host, begin.elapsed_time(end) / 1000.0, result


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cann_version() -> str | None:
    # CANN writes its version into the toolkit's install directory; reading the file needs no
    # import of torch_npu (which would fail without CANN and is what we are diagnosing).
    for root in (
        os.environ.get("ASCEND_TOOLKIT_HOME"),
        os.environ.get("ASCEND_HOME_PATH"),
        "/usr/local/Ascend/ascend-toolkit/latest",
    ):
        if not root:
            continue
        for name in ("version.cfg", "version.info"):
            path = Path(root) / name
            if path.is_file():
                for line in path.read_text(errors="replace").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip().lower() in {"version", "toolkit_version"} and value.strip():
                        return value.strip().strip('"')
    return None


def _torch_npu_loadable() -> str | None:
    """Return why torch_npu cannot be used, or ``None`` when it imports."""
    if importlib.util.find_spec("torch_npu") is None:
        return "not installed"
    try:
        import torch_npu  # noqa: F401  (registers the npu device)
    except Exception as error:  # ImportError without CANN, RuntimeError from autoload
        return f"installed but does not import ({type(error).__name__}: {error})"
    return None


def versions() -> dict[str, str]:
    """Versions of torch, torch_npu and CANN (``"absent"`` where missing)."""
    npu = _distribution_version("torch-npu") or _distribution_version("torch_npu")
    return {
        "torch": torch.__version__,
        "torch_npu": npu or "absent",
        "CANN": _cann_version() or "absent",
    }


def torch_npu_status() -> str:
    """One line on torch_npu: ``usable``, ``not installed`` or why it does not import."""
    problem = _torch_npu_loadable()
    return "usable" if problem is None else problem


def graph_implementation(device: torch.device) -> str:
    """Name the device-graph implementation npu-mempool will use for captures on ``device``."""
    try:
        return npu_mempool.graph_implementation(device)
    except Exception as error:  # a device type npu-mempool has no backend for
        return f"none ({type(error).__name__}: {error})"
