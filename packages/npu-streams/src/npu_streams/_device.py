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
    "is_capturing",
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


def is_capturing(stream: torch.Stream) -> bool:
    """Whether ``stream`` is recording into a device graph right now.

    The device module's ``is_current_stream_capturing`` (``torch.cuda``, and ``torch.npu`` once
    torch_npu is loaded) answers for the current stream only, so ``stream`` is made current for
    the question. A device without the call never captures.
    """
    module = torch.get_device_module(stream.device.type)
    check = getattr(module, "is_current_stream_capturing", None)
    if check is None:
        return False
    previous = current_stream(stream.device)
    set_stream(stream)
    try:
        return bool(check())
    finally:
        set_stream(previous)
