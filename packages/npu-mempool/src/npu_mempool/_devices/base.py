"""The interface every graph implementation offers the runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from npu_mempool._pool import PoolHandle

__all__ = ["Body", "Graph", "GraphBackend", "Rerun", "StaticLike", "static_strides"]

StaticLike = Callable[[torch.Tensor], torch.Tensor]
#: Recomputes a graph's output leaves for one call's arguments (CPU emulation only).
Rerun = Callable[[tuple[Any, ...]], Sequence[Any]]
#: What a runner captures: given ``static_like`` (allocates a pool tensor shaped like its argument),
#: returns the flat output leaves, a function that recomputes them, and every tensor the callable
#: received (so outputs aliasing an input are recognised).
Body = Callable[[StaticLike], tuple[list[Any], Rerun, list[torch.Tensor]]]


class Graph(Protocol):
    """A captured graph."""

    def replay(self, args: tuple[Any, ...]) -> None:
        """Run the captured work again, writing into the same static outputs.

        ``args`` are the call's arguments, already checked to be the captured ones where the
        graph reads them in place (a device graph ignores them; the CPU emulation re-runs on them).
        """

    def reset(self) -> None:
        """Free the graph and the pool memory only it holds."""


class GraphBackend(Protocol):
    """One device family's graph implementation."""

    name: str
    #: Whether ``capture`` runs the callable (CPU emulation) or only records it (devices).
    executes_on_capture: bool
    #: Eager calls a new key needs before its capture when ``CaptureOptions.warmup_runs`` is None.
    default_warmup_runs: int

    def new_pool(self, device: torch.device) -> PoolHandle:
        """Create an empty pool on ``device``."""

    def capture(
        self, pool: PoolHandle, body: Body, error_mode: str = "thread_local"
    ) -> tuple[Graph, list[Any]]:
        """Capture ``body`` into ``pool``; return the graph and its static output leaves.

        ``error_mode`` is the device's capture error mode (``"global"``, ``"thread_local"`` or
        ``"relaxed"``: which API calls of other threads a capture refuses).
        """

    def checkpoint(self, pool: PoolHandle) -> bool:
        """Remember the pool's current state for later rewinds; ``False`` when unsupported."""

    def rewind(self, pool: PoolHandle) -> bool:
        """Return the pool to its checkpoint; memory of later captures becomes free again.

        The caller rewinds only while no output of the pool's graphs is held outside them. Returns
        ``False``, changing nothing, when the pool holds allocations the runner does not know
        about (a tensor created during capture and kept by the callable): rewinding then would
        free memory still in use.
        """


def static_strides(x: torch.Tensor) -> tuple[int, ...]:
    """The strides a static copy of ``x`` gets: the caller's own, unless its elements overlap.

    The graph is captured on the copy and replayed on every later call's values, so the copy
    must look to the callable as the caller's tensor does: Dynamo traced and guarded the
    caller's strides, and a graph may read them (``as_strided``, a ``view`` that only a
    transposed layout allows). A non-dense input (a slice such as ``x[:, 2:10]``) keeps its gaps,
    which stay unwritten: the copy fills the elements only. An expanded input (elements that
    share memory) cannot be a copy target; it gets the dense layout ``empty_like`` gives.
    """
    if _overlaps(x.shape, x.stride()):
        return tuple(torch.empty_like(x, device="meta").stride())
    return tuple(x.stride())


def _overlaps(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether two elements of a layout may share memory (``False`` proves they do not).

    Dimensions ordered by stride, each must step past everything the smaller ones span. (torch's
    own check answers "too hard" for every layout that is not dense.)
    """
    dims = sorted((step, size) for size, step in zip(shape, stride, strict=True) if size > 1)
    reach = 1
    for step, size in dims:
        if step < reach:
            return True
        reach = step * (size - 1) + reach
    return False
