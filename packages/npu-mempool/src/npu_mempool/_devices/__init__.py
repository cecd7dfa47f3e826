"""Device graph adapters: one small interface over every graph implementation we drive.

* ``cpu``: :class:`EmulatedBackend`, a graph that really behaves like one: static outputs live in a
  byte arena (the pool), replay re-runs the callable on the static inputs and writes the results
  into the same static tensors, so aliasing, overwrite and pool rewind are observable on CPU.
* ``cuda``: ``torch.accelerator.Graph`` (torch >= 2.12), else ``torch.cuda.CUDAGraph`` (2.11).
* ``npu``: ``torch.accelerator.Graph`` when torch_npu registers it, else ``torch_npu.npu.NPUGraph``.

One module per concern: ``base`` (the interface), ``registry`` (device type -> backend),
``emulated`` (CPU), ``native`` (device graphs), ``cuda`` and ``npu`` (what each family adds).
``npu`` is the only module that touches ``torch_npu``, lazily, inside functions: torch_npu without
CANN breaks ``import torch`` itself.

Adding a device: a module here that declares ``DEVICE = DeviceType(name, build)`` (``build``
makes its backend, probing what it needs), and one line in ``DEVICES`` below.
"""

from __future__ import annotations

import torch

from npu_mempool._accel import default_device
from npu_mempool._devices import cuda, emulated, npu
from npu_mempool._devices.base import Body, Graph, GraphBackend, StaticLike
from npu_mempool._devices.cuda import Cuda
from npu_mempool._devices.emulated import EmulatedBackend, EmulatedGraph
from npu_mempool._devices.native import DeviceBackend, has_accelerator_graph
from npu_mempool._devices.npu import Npu
from npu_mempool._devices.registry import (
    DeviceType,
    backend_for,
    forget_backends,
    register,
    registered,
    unregister,
)
from npu_mempool._pool import PoolHandle

__all__ = [
    "DEVICES",
    "Body",
    "Cuda",
    "DeviceBackend",
    "DeviceType",
    "EmulatedBackend",
    "EmulatedGraph",
    "Graph",
    "GraphBackend",
    "Npu",
    "StaticLike",
    "backend_for",
    "default_device",
    "forget_backends",
    "graph_implementation",
    "graph_pool_handle",
    "has_accelerator_graph",
    "register",
    "registered",
    "unregister",
]

#: The device types npu-mempool captures on, one line each, in the order messages list them.
DEVICES: tuple[DeviceType, ...] = (
    emulated.DEVICE,
    cuda.DEVICE,
    npu.DEVICE,
)
for _device in DEVICES:
    register(_device)


def graph_implementation(device: torch.device | str | None = None) -> str:
    """Name the graph implementation used for ``device`` (default: the current accelerator).

    Returns:
        ``"torch.accelerator.Graph"``, ``"torch.cuda.CUDAGraph"``, ``"torch_npu.npu.NPUGraph"`` or
        ``"cpu-emulated"``.
    """
    if device is None:
        return backend_for(default_device().type).name
    # Parsed by hand: "npu" is only a torch device type once torch_npu is imported.
    device_type = device.type if isinstance(device, torch.device) else device.split(":")[0]
    return backend_for(device_type).name


def graph_pool_handle(device: torch.device | str | None = None) -> PoolHandle:
    """Create a graph memory pool that several runners can share (TorchAir mode 1).

    Args:
        device: Device of the pool; defaults to the current accelerator, else the CPU (where the
            pool is an emulated byte arena).

    Returns:
        A handle to pass as ``CaptureOptions(pool=handle)``.

    Example:
        >>> import torch
        >>> from npu_mempool import CaptureOptions, GraphRunner, graph_pool_handle
        >>> pool = graph_pool_handle("cpu")
        >>> options = CaptureOptions(pool=pool)
        >>> prefill = GraphRunner(torch.sin, options=options, name="prefill")
        >>> decode = GraphRunner(torch.cos, options=options, name="decode")
        >>> prefill(torch.zeros(2)), decode(torch.zeros(2))
        (tensor([0., 0.]), tensor([1., 1.]))
    """
    resolved = default_device() if device is None else torch.device(device)
    return backend_for(resolved.type).new_pool(resolved)
