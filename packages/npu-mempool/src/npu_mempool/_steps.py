"""Step boundaries: the caller's promise that outputs of earlier steps are no longer read.

Without a boundary, an output the caller still holds is never overwritten (see
[Note: output liveness] in ``_outputs``): in ``for x in batches: out = f(x)`` the previous ``out``
is alive during the next call, which therefore replays on a second call path with a pool of its
own. :func:`mark_step_begin` (or torch's ``torch.compiler.cudagraph_mark_step_begin()``) declares
that a new step begins: a later call of the same thread may then overwrite what earlier steps
handed out, so one call path (one pool) is enough. The outputs it overwrites are poisoned first
(:class:`StaleTensor`): reading one raises :class:`~npu_mempool.StaleOutputError` instead of
returning the numbers of another step. This is the contract of CUDA Graph Trees.

The step is per thread: a boundary one thread marks never invalidates what another thread holds.
torch's counter is process-wide (as torch defines it) and is honoured as such.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from npu_mempool.errors import StaleOutputError

__all__ = ["StaleTensor", "StepToken", "mark_step_begin", "step_token", "step_ended"]

_local = threading.local()

#: (thread ident, that thread's step, torch's process-wide step counter) at a hand-out.
StepToken = tuple[int, int, int]


def mark_step_begin() -> None:
    """Declare that a new step (one decode step, one training iteration) begins in this thread.

    Outputs that graph runners handed out to this thread before the call may be overwritten by
    later calls, which then need no second call path and no second pool. Reading such an output
    after it was overwritten raises :class:`~npu_mempool.StaleOutputError`; ``clone()`` what
    must outlive the step. ``torch.compiler.cudagraph_mark_step_begin()`` has the same effect.

    Example:
        >>> import torch
        >>> from npu_mempool import GraphRunner, StaleOutputError, mark_step_begin
        >>> runner = GraphRunner(lambda x: x * 2)
        >>> first = runner(torch.ones(2))
        >>> mark_step_begin()
        >>> second = runner(torch.zeros(2))  # the same graph and memory, though `first` lives
        >>> second.tolist(), runner.num_graphs
        ([0.0, 0.0], 1)
        >>> try:
        ...     first.tolist()
        ... except StaleOutputError:
        ...     print("overwritten")
        overwritten
    """
    _local.step = getattr(_local, "step", 0) + 1


def _torch_step() -> int:
    # torch counts its boundaries down from 0 in cudagraph_trees; the module is only imported
    # once someone used it, and until then no torch boundary was marked.
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None:
        return 0
    box = getattr(trees, "MarkStepBox", None)
    return int(getattr(box, "mark_step_counter", 0))


def step_token() -> StepToken:
    """The current step of the calling thread, recorded with every hand-out."""
    return (threading.get_ident(), getattr(_local, "step", 0), _torch_step())


def step_ended(token: StepToken) -> bool:
    """Whether the step an output was handed out in has ended, seen from the calling thread."""
    thread, mine, torchs = token
    if torchs != _torch_step():
        return True
    return thread == threading.get_ident() and mine != getattr(_local, "step", 0)


_METADATA: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.Tensor.shape.__get__,  # type: ignore[attr-defined]
        torch.Tensor.dtype.__get__,  # type: ignore[attr-defined]
        torch.Tensor.device.__get__,
        torch.Tensor.ndim.__get__,  # type: ignore[attr-defined]
        torch.Tensor.requires_grad.__get__,  # type: ignore[attr-defined]
        torch.Tensor.size,
        torch.Tensor.dim,
        torch.Tensor.stride,
    }
)


class StaleTensor(torch.Tensor):
    """What an overwritten output becomes: its metadata stays, any read of its values raises.

    It holds no memory: the storage it replaced went back to the graph that overwrote it.
    """

    _message: str

    @staticmethod
    def __new__(cls, like: torch.Tensor, message: str) -> StaleTensor:
        stale: StaleTensor = torch.Tensor._make_wrapper_subclass(
            cls,
            like.shape,
            strides=like.stride(),
            storage_offset=like.storage_offset(),
            dtype=like.dtype,
            device=like.device,
        )
        stale._message = message
        return stale

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        raise _error(args, kwargs)

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        raise _error(args, kwargs)


def _error(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> StaleOutputError:
    found = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, StaleTensor)]
    if not found:  # a container argument (torch.cat([...])): look one level down
        for arg in args:
            if isinstance(arg, (list, tuple)):
                found = [a for a in arg if isinstance(a, StaleTensor)]
                if found:
                    break
    message = found[0]._message if found else "this output was overwritten by a later step"
    return StaleOutputError(message)


def poison(tensor: torch.Tensor, message: str) -> bool:
    """Turn ``tensor`` (the object the caller holds) into a :class:`StaleTensor`, in place.

    Returns ``False`` (and leaves it untouched) where torch refuses the swap: the tensor is also
    held inside autograd's graph, so its memory is not the runner's to take.
    """
    try:
        torch.utils.swap_tensors(tensor, StaleTensor(tensor, message))  # type: ignore[no-untyped-call]
    except RuntimeError:
        return False
    return True
