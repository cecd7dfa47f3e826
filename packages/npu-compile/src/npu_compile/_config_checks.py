"""What the backend checks of a config before compiling: mode, options without effect, pools.

* ``mode="max-autotune"`` (TorchAir's Graph Engine mode) is accepted by the config and refused
  here, with what to use instead;
* an option that has no meaning off Ascend, set to something other than its default, warns once
  per backend (:class:`~npu_compile.errors.NoEffectWarning`) naming why;
* a pool id tuple from ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()`` in
  ``aclgraph_config.use_custom_pool`` becomes an ``npu_mempool.PoolHandle`` on the graph's
  device, the same one for every graph that names the same tuple.

The shims for what differs between torch releases are in ``_torch_compat``.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import torch

from npu_compile._accel import first_tensor_device, with_index
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError, NoEffectWarning

__all__ = [
    "check_mode",
    "warn_no_effect",
    "resolve_pool",
]


def check_mode(config: CompilerConfig) -> None:
    """Refuse ``mode="max-autotune"`` with what runs instead."""
    if config.get("mode") == "max-autotune":
        raise BackendError(
            "config.mode = 'max-autotune' is TorchAir's Graph Engine mode, which needs CANN's GE "
            "runtime; npu-compile runs reduce-overhead (capture and replay) instead: set "
            "config.mode = 'reduce-overhead', or write an offline GE graph with "
            "npu_compile.dynamo_export"
        )


def warn_no_effect(config: CompilerConfig, warned: set[str]) -> None:
    """Warn once (per ``warned`` set) for each option set that has no effect here."""
    for path, option, value in config.options():
        if option.effect is None or value == option.default or path in warned:
            continue
        warned.add(path)
        warnings.warn(
            f"config.{path} = {value!r} has no effect with npu-compile: {option.effect}",
            NoEffectWarning,
            stacklevel=3,
        )
    dump_type = config.get("debug.graph_dump.type")
    if dump_type == "pbtxt" and "debug.graph_dump.type" not in warned:
        warned.add("debug.graph_dump.type")
        warnings.warn(
            "config.debug.graph_dump.type = 'pbtxt' has no effect with npu-compile: it is GE's "
            "graph format; use 'py' or 'txt' (or npu_compile.dynamo_export for a GE graph)",
            NoEffectWarning,
            stacklevel=3,
        )


_lock = threading.Lock()
_tuple_pools: dict[tuple[torch.device, tuple[int, int]], Any] = {}


def resolve_pool(config: CompilerConfig, example_inputs: list[object]) -> CompilerConfig:
    """Return ``config`` with a pool id tuple in ``use_custom_pool`` replaced by a pool handle."""
    pool = config.get("aclgraph_config.use_custom_pool")
    if not isinstance(pool, tuple):
        return config
    from npu_mempool import PoolHandle, graph_pool_handle

    device = with_index(first_tensor_device(example_inputs))
    key = (device, pool)
    with _lock:
        handle = _tuple_pools.get(key)
        if handle is None:
            # On CPU the pool is the emulated arena; on a device the tuple is the allocator's
            # own pool id, which the graph captures into.
            handle = graph_pool_handle("cpu") if device.type == "cpu" else PoolHandle(device, pool)
            _tuple_pools[key] = handle
    resolved = config.copy()
    resolved.aclgraph_config.use_custom_pool = handle
    return resolved
