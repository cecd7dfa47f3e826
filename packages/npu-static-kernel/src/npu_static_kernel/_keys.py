"""Cache keys: what makes two graph keys share an artifact, hashed into one hex digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import torch

from npu_static_kernel import _device
from npu_static_kernel._accel import first_tensor_device
from npu_static_kernel._inputs import describe
from npu_static_kernel._interface import StaticKernelBuilder
from npu_static_kernel._version import __version__

__all__ = ["compute_key"]

# Graph constants up to this many elements are hashed by value (they may be baked into compiled
# code); larger ones by metadata only, to keep hashing cheap.
_HASHED_CONSTANT_NUMEL = 1 << 16


def _constants_digest(gm: torch.fx.GraphModule) -> list[Any]:
    found: list[Any] = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = gm
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        if isinstance(value, torch.Tensor):
            entry: list[Any] = [str(node.target), describe(value)]
            if value.numel() <= _HASHED_CONSTANT_NUMEL and value.device.type != "meta":
                # bytes() of the uint8 values, not .numpy(): numpy is not a dependency here.
                raw = value.detach().cpu().contiguous().view(-1).view(torch.uint8).tolist()
                entry.append(hashlib.sha256(bytes(raw)).hexdigest())
            found.append(entry)
    return found


def compute_key(gm: torch.fx.GraphModule, args: Sequence[Any], builder: StaticKernelBuilder) -> str:
    """Return the cache key of ``gm`` specialised for ``args`` by ``builder``.

    The key is a SHA-256 over the graph code and constants, every argument's dtype, shape,
    stride and device type (with the index on CUDA-like devices, whose compiled code is bound
    to it; ints by value), the torch and package versions, the device model,
    the deterministic-algorithms flag, the CPU thread count (CPU only), and the builder's name
    and :meth:`compute_hash`.

    Args:
        gm: The FX graph.
        args: Its runtime arguments.
        builder: The builder that will make the artifact.

    Returns:
        A 64-character hex digest.
    """
    device_type = first_tensor_device(args).type
    inputs = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            bound = _device.binds_device_index(arg.device.type)
            device = str(arg.device) if bound else arg.device.type
            inputs.append([str(arg.dtype), list(arg.shape), list(arg.stride()), device])
        else:
            inputs.append([type(arg).__name__, repr(arg)])
    document = {
        "graph": gm.code,
        "constants": _constants_digest(gm),
        "inputs": inputs,
        "torch": torch.__version__,
        "package": __version__,
        "device": _device.device_fingerprint(device_type),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        # Inductor bakes the CPU thread count into its C++ kernels.
        "cpu_threads": torch.get_num_threads() if device_type == "cpu" else None,
        "builder": builder.name,
        "builder_hash": builder.compute_hash(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
