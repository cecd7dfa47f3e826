"""Device adapter: the only module that talks to device-specific APIs (torch_npu lazily)."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from typing import Any

import torch

from npu_static_kernel._cann_names import FORMAT_ND, FORMAT_NHWC, npu_format_name


def device_type_of(args: Iterable[Any]) -> str:
    """Return the device type of the first tensor in ``args`` (``"cpu"`` when there is none)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.type
    return "cpu"


def binds_device_index(device_type: str) -> bool:
    """Whether an artifact for ``device_type`` is bound to the device index it was built on.

    Inductor's generated code pins the index it compiled for (``_DeviceGuard(0)``, outputs
    allocated on that device), so ``cuda:1`` must never load a ``cuda:0`` artifact: the index is
    part of the key and every process builds or loads its own. CPU code has no index; Ascend
    kernels are installed node-wide and aclnn selects them on any device of the node.
    """
    return device_type not in ("cpu", "npu", "meta")


def device_fingerprint(device_type: str) -> str:
    """Describe the device model so an artifact built for one chip is never loaded on another."""
    if device_type == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"cuda:{torch.cuda.get_device_name()}:sm{major}{minor}:cuda{torch.version.cuda}"
    if device_type == "npu":
        return f"npu:{npu_soc_name() or 'unknown'}"
    cpu_capability = torch.backends.cpu.get_cpu_capability()
    return f"{device_type}:{platform.machine()}:{cpu_capability}"


def storage_format(tensor: torch.Tensor) -> str:
    """Return the CANN-style storage format name of ``tensor`` (``ND`` for plain dense tensors)."""
    if tensor.device.type == "npu":
        try:
            import torch_npu

            fmt = int(torch_npu.get_npu_format(tensor))
        except (ImportError, AttributeError, RuntimeError):
            return FORMAT_ND
        return npu_format_name(fmt)
    channels_last = tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
    if channels_last and not tensor.is_contiguous():
        # A channels-last 4-D tensor is laid out NHWC even though its logical shape is NCHW.
        return FORMAT_NHWC
    return FORMAT_ND


def npu_soc_name() -> str | None:
    """Return the Ascend SoC name (``Ascend910B3``...), or None when torch_npu is unusable."""
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        return str(torch.npu.get_device_name())  # type: ignore[attr-defined]
    except Exception:  # torch_npu without CANN raises almost anything at import time
        return None


def npu_reselect_static_kernel() -> bool:
    """Ask aclnn to pick up newly installed static kernels; False when torch_npu lacks the hook."""
    try:
        import torch_npu

        reselect = torch_npu.npu._aclnn_reselect_static_kernel
    except (ImportError, AttributeError):
        return False
    reselect()
    return True


def synchronize(device_type: str) -> None:
    """Wait for queued device work so recorded op statistics describe completed calls."""
    if device_type == "cpu":
        return
    torch.accelerator.synchronize()


def current_device_index(device_type: str) -> int | None:
    """The calling thread's current device index for ``device_type`` (None on CPU)."""
    if device_type == "cpu":
        return None
    return int(torch.accelerator.current_device_index())


def set_device_index(device_type: str, index: int | None) -> None:
    """Make ``index`` the current device of the calling thread (a new thread starts at 0)."""
    if index is None:
        return
    torch.accelerator.set_device_index(index)
