"""Which device: the current accelerator, and the device of the tensors a call is given.

A copy of npu-compile's module of the same name (the distributions never import each other); the
repository's consistency check fails when it drifts. Change npu-compile's copy, then run
``python .ci/check_consistency.py --sync``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = [
    "accelerator_device",
    "current_device",
    "default_device",
    "first_tensor_device",
    "with_index",
]

#: Device types that hold no accelerator memory: a graph is never captured on them.
_HOST_TYPES = ("cpu", "meta")


def current_device() -> torch.device | None:
    """The current accelerator at the calling thread's current index, or None without one.

    The index is the thread's current one, not always 0 (``torch.accelerator.set_device_index``).
    """
    if not torch.accelerator.is_available():
        return None
    found = torch.accelerator.current_accelerator()
    if found is None:
        return None
    return torch.device(found.type, torch.accelerator.current_device_index())


def default_device() -> torch.device:
    """The current accelerator, or the CPU when there is none."""
    found = current_device()
    return found if found is not None else torch.device("cpu")


def with_index(device: torch.device) -> torch.device:
    """``device`` with its index: an accelerator named without one means its current device."""
    index: int | None = device.index  # None when named without one ("cuda")
    if device.type in _HOST_TYPES or index is not None:
        return device
    return torch.device(device.type, torch.accelerator.current_device_index())


def first_tensor_device(values: Iterable[object]) -> torch.device:
    """The device of the first tensor among ``values`` (the CPU when there is none)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def accelerator_device(values: Iterable[object]) -> torch.device:
    """The first accelerator device among the tensors in ``values``, else the CPU.

    A graph that mixes a device with CPU (or meta) tensors is captured on the device, and the
    nodes on the other devices run eagerly.
    """
    for value in values:
        if isinstance(value, torch.Tensor) and value.device.type not in _HOST_TYPES:
            return value.device
    return torch.device("cpu")
