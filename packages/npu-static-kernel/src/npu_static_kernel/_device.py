"""Device adapter: the only module that talks to device-specific APIs (torch_npu lazily).

A new accelerator type that torch's device module API describes (``torch.get_device_module``)
and ``torch.accelerator`` drives needs nothing here, unless an extension registers its module
(``_EXTENSIONS``), its capability query is not a description of the chip (``_NAME_ONLY``), or
its compiled artifacts do not pin the device index (:func:`binds_device_index`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import platform
from typing import Any

import torch

from npu_static_kernel._cann_names import FORMAT_ND, FORMAT_NHWC, npu_format_name

# Device types whose torch module (torch.<type>) an extension registers: imported before the
# device is described, only then and guarded (installing torch_npu without CANN breaks it).
_EXTENSIONS = {"npu": "torch_npu"}
# Device types described by their name alone. torch_npu's get_device_capability() is a
# stand-in for PyTorch compatibility (None unless TORCH_NPU_DEVICE_CAPABILITY is set, with a
# warning on each call), and the SoC name (Ascend910B3...) already names the chip exactly.
_NAME_ONLY = frozenset({"npu"})


def binds_device_index(device_type: str) -> bool:
    """Whether an artifact for ``device_type`` is bound to the device index it was built on.

    Inductor's generated code pins the index it compiled for (``_DeviceGuard(0)``, outputs
    allocated on that device), so ``cuda:1`` must never load a ``cuda:0`` artifact: the index is
    part of the key and every process builds or loads its own. CPU code has no index; Ascend
    kernels are installed node-wide and aclnn selects them on any device of the node.
    """
    return device_type not in ("cpu", "npu", "meta")


def device_fingerprint(device_type: str) -> str:
    """Describe the device model so an artifact built for one chip is never loaded on another.

    An accelerator is described through torch's device module API, the same for every type
    (``torch.get_device_module``): ``<type>:<get_device_name()>``, then its
    ``get_device_capability()`` where it has one (``sm80`` for a ``(major, minor)`` pair, a short
    digest otherwise) and ``torch.version.<type>`` where torch has it; CUDA gives
    ``cuda:<name>:sm<major><minor>:cuda<version>``, Ascend ``npu:<SoC name>``. The host (CPU,
    and a device type torch has no usable module for) is ``<type>:<machine>:<CPU capability>``.
    """
    module = _accelerator_module(device_type)
    if module is None or not hasattr(module, "get_device_name"):
        cpu_capability = torch.backends.cpu.get_cpu_capability()
        return f"{device_type}:{platform.machine()}:{cpu_capability}"
    name = _ask(module, "get_device_name")
    parts = [device_type, "unknown" if name is None else str(name)]
    if device_type not in _NAME_ONLY:
        capability = _capability_text(_ask(module, "get_device_capability"))
        if capability is not None:
            parts.append(capability)
        if hasattr(torch.version, device_type):
            parts.append(f"{device_type}{getattr(torch.version, device_type)}")
    return ":".join(parts)


def _accelerator_module(device_type: str) -> Any:
    """The torch module of an accelerator type (``torch.cuda``...), or None when there is none.

    The host has none here (``torch.cpu`` names no device), nor has a type whose module is
    missing or says it is unavailable. An extension that registers the module is imported
    first, lazily and guarded.
    """
    if device_type == "cpu":
        return None
    extension = _EXTENSIONS.get(device_type)
    if extension is not None:
        try:
            importlib.import_module(extension)
        except Exception:  # torch_npu without CANN raises almost anything at import time
            return None
    try:
        module = torch.get_device_module(device_type)
    except RuntimeError:  # no torch.<type> (meta, an extension that is not loaded)
        return None
    is_available = getattr(module, "is_available", None)
    if is_available is not None and not is_available():
        return None
    return module


def _ask(module: Any, query: str) -> Any:
    """``module.<query>()``, or None where the module lacks it or its runtime cannot answer."""
    function = getattr(module, query, None)
    if function is None:
        return None
    try:
        return function()
    except Exception:  # a device runtime that cannot answer raises its own error types
        return None


def _capability_text(capability: object) -> str | None:
    """``sm<major><minor>`` for a tuple of ints (CUDA's spelling), else a digest of the value."""
    if capability is None:
        return None
    if isinstance(capability, tuple) and all(isinstance(v, int) for v in capability):
        return "sm" + "".join(str(v) for v in capability)
    # XPU answers a dict of device properties: a short digest keeps the fingerprint readable.
    text = json.dumps(capability, sort_keys=True, default=str)
    return "cap" + hashlib.sha256(text.encode()).hexdigest()[:12]


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
