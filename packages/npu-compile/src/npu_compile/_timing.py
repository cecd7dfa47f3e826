"""One phase of :func:`npu_compile.diagnose`: a step's host and device time, and its verdict.

Private: :func:`~npu_compile.diagnosis.diagnose` measures an eager and a compiled phase with it,
and ``npu-compile demo`` the step it already compiled. The names are public through
:mod:`npu_compile.diagnosis`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from npu_compile import _device

__all__ = ["HOST_BOUND", "DEVICE_BOUND", "PhaseTiming", "measure"]

HOST_BOUND = "Host Bound"
"""Verdict of a step whose device waits for the host's kernel launches."""
DEVICE_BOUND = "Device Bound"
"""Verdict of a step whose device work takes clearly longer than the host's enqueue."""
# The device span includes the tail after the host returns; when the host enqueue time is at least
# this fraction of the span, the device was mostly waiting on the host.
_HOST_BOUND_RATIO = 0.8


@dataclass(frozen=True)
class PhaseTiming:
    """Per-step timings of one way of running the step (median over the measured steps).

    Attributes:
        label: ``"eager"`` or ``"reduce-overhead"``.
        host_ms: Wall time of the Python call, in milliseconds.
        device_ms: Event-timed device span in milliseconds, ``None`` on CPU.
        verdict: :data:`HOST_BOUND` or :data:`DEVICE_BOUND`.
    """

    label: str
    host_ms: float
    device_ms: float | None
    verdict: str

    @property
    def step_ms(self) -> float:
        """End-to-end time of one step (the larger of host and device time)."""
        return max(self.host_ms, self.device_ms or 0.0)


def _verdict(host: float, device: float | None) -> str:
    if device is None:
        return HOST_BOUND
    return HOST_BOUND if host >= _HOST_BOUND_RATIO * device else DEVICE_BOUND


def measure(
    label: str,
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    device: torch.device,
    steps: int,
    warmup: int,
) -> PhaseTiming:
    """Time ``steps`` calls of ``fn(*inputs)`` after ``warmup`` untimed ones (medians)."""
    for _ in range(warmup):
        fn(*inputs)
    _device.synchronize(device)
    hosts: list[float] = []
    devices: list[float] = []
    for _ in range(steps):
        # The result is dropped before the next call: a held output would make that call
        # replay a second call path (outputs in use are never overwritten).
        host, dev = _device.timed_call(lambda: fn(*inputs), device)[:2]
        hosts.append(host * 1000.0)
        if dev is not None:
            devices.append(dev * 1000.0)
    host_ms = statistics.median(hosts)
    device_ms = statistics.median(devices) if devices else None
    return PhaseTiming(label, host_ms, device_ms, _verdict(host_ms, device_ms))
