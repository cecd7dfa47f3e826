"""A graph backend for the CPU whose replay does nothing: what a replay pays on the host, alone.

Registered for the ``cpu`` device type by ``host_path.py`` only, in place of the emulated graph,
and taken out again afterwards (:func:`null_graphs`). A capture runs the body once, on static
input buffers allocated as a device capture allocates them (``torch.empty_strided`` with the
caller's strides), so the graph has real static inputs and outputs; a replay runs nothing (no op
re-runs, no copy into the outputs: the outputs keep the capture's values). The pool has a
``native`` id, so no CPU arena backs it; there is no checkpoint, so mode 2 is off.

What a call through a runner still costs with this backend is everything but the device's
work: the key, the liveness check, the input copy, the hand-out of the outputs, and whatever
the compiler wraps around the runner.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from npu_mempool import PoolHandle, _devices
from npu_mempool._devices.base import Body, static_strides

__all__ = ["NAME", "NullBackend", "NullGraph", "null_graphs"]

#: What ``npu_mempool.graph_implementation("cpu")`` names while the null backend is registered.
NAME = "null (replay runs nothing)"

_pool_ids = itertools.count()


class NullGraph:
    """A captured graph whose replay does nothing."""

    #: Nothing, in one C call (``id`` of the arguments, ignored): the device's work is what this
    #: benchmark leaves out, and a device graph's replay is one C call too (``CUDAGraph.replay``,
    #: ``NPUGraph.replay``), with no Python frame.
    replay = staticmethod(id)

    def reset(self) -> None:
        """Nothing to free: the static buffers are ordinary tensors."""


class NullBackend:
    """Captures by running the body once; replays nothing. Never rewinds (mode 2 off)."""

    name = NAME
    executes_on_capture = True
    default_warmup_runs = 0

    def __init__(self) -> None:
        #: The pools this backend made: a runner captured with it has its pool here.
        self.pools: weakref.WeakSet[PoolHandle] = weakref.WeakSet()

    def new_pool(self, device: torch.device) -> PoolHandle:
        # A native id: the pool keeps no CPU arena (nothing is carved, nothing scribbled).
        pool = PoolHandle(device, native=("null", next(_pool_ids)))
        self.pools.add(pool)
        return pool

    def capture(
        self, pool: PoolHandle, body: Body, error_mode: str = "thread_local"
    ) -> tuple[NullGraph, list[Any]]:
        def static_like(x: torch.Tensor) -> torch.Tensor:
            # As a device capture allocates a static input (npu_mempool's native backend); the
            # capture runs the body, so the buffer gets the call's values, for its first result.
            with torch.inference_mode(False):
                static = torch.empty_strided(
                    x.shape, static_strides(x), dtype=x.dtype, device=x.device
                )
            static.copy_(x)
            return static

        with torch.no_grad():
            leaves, _rerun, _inputs = body(static_like)
        return NullGraph(), leaves

    def checkpoint(self, pool: PoolHandle) -> bool:
        return False

    def rewind(self, pool: PoolHandle) -> bool:
        return False


class _NoModeTwoNotice(logging.Filter):
    """Drops the runner's notice that mode 2 is off: the null backend has it off by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "no allocator checkpoint hooks" not in record.getMessage()


@contextlib.contextmanager
def null_graphs() -> Iterator[NullBackend]:
    """Within the block, graphs captured on the CPU are null graphs.

    Graphs captured inside keep their null graph after the block (a replay reads no registry);
    captures after it get the CPU's registered backend again (the emulated graph).
    """
    (previous,) = [device for device in _devices.registered() if device.name == "cpu"]
    backend = NullBackend()
    notice = _NoModeTwoNotice()
    logger = logging.getLogger("npu_mempool")
    _devices.register(_devices.DeviceType("cpu", lambda: backend, note="null"), replace=True)
    _devices.forget_backends()
    logger.addFilter(notice)
    try:
        yield backend
    finally:
        logger.removeFilter(notice)
        _devices.register(previous, replace=True)
        _devices.forget_backends()
