"""Device adapter: the only module that talks to device-specific stream and event APIs.

Everything else in the package works with ``torch.device``, ``torch.Stream`` and ``torch.Event``.
This module creates streams (with a priority where the device supports one) and events, and
switches the current stream; ``_accel`` answers "which accelerator is current". ``torch_npu`` is
imported only lazily, inside functions, because installing it on a machine without CANN breaks
``import torch``.
"""

from __future__ import annotations

import torch

__all__ = [
    "tensor_device",
    "current_stream",
    "set_stream",
    "new_stream",
    "new_event",
    "record_stream",
]


def tensor_device(tensor: torch.Tensor) -> torch.device | None:
    """The accelerator device ``tensor`` lives on, or ``None`` for CPU (and meta) tensors."""
    if tensor.device.type in ("cpu", "meta"):
        return None
    return tensor.device


def current_stream(device: torch.device) -> torch.Stream:
    """The stream that work issued on ``device`` goes to right now."""
    return torch.accelerator.current_stream(device)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device (thread-local, like ``torch.cuda.stream``)."""
    torch.accelerator.set_stream(stream)


def new_stream(device: torch.device, priority: int) -> torch.Stream:
    """A new stream on ``device``; ``priority`` (0 or negative = higher) where the device has one.

    ``torch.Stream(device, priority=...)`` is the generic path (CUDA, and NPU when torch_npu
    registers its stream hooks). Some torch_npu releases reject the generic constructor with a
    priority; for those the NPU stream class is used directly.
    """
    try:
        return torch.Stream(device, priority=priority)
    except (RuntimeError, TypeError):
        if device.type != "npu":
            raise
    import torch_npu  # lazily: importing it without CANN installed breaks torch itself

    stream: torch.Stream = torch_npu.npu.Stream(device, priority=priority)
    return stream


def new_event(device: torch.device) -> torch.Event:
    """A new (timing-free) event for ``device``."""
    return torch.Event(device)


def record_stream(tensor: torch.Tensor, stream: torch.Stream) -> None:
    """Tell the caching allocator that ``stream`` uses ``tensor`` (``Tensor.record_stream``)."""
    tensor.record_stream(stream)
