"""Steps: which outputs handed out earlier a later call may take back and overwrite.

An output the caller still holds is never overwritten within its step (see [Note: output
liveness] in ``_outputs``). Once its step has ended, a later call of the same thread may take its
memory back: the output is poisoned first (:class:`StaleTensor`), so reading it raises
:class:`~npu_mempool.StaleOutputError` instead of returning the numbers of another step. This is
the contract of CUDA Graph Trees. A step ends:

* at an explicit boundary: :func:`mark_step_begin` (per thread) or torch's
  ``torch.compiler.cudagraph_mark_step_begin()`` (process-wide, as torch defines it), for every
  runner;
* at the next top-level call, for runners with ``CaptureOptions(keep_held_outputs=False)``
  (npu-compile's default). A top-level call is a block under :func:`top_level_call` (a backend's
  hook entered by Dynamo around every call of a compiled function, in the calling thread), or,
  where no such block is open, a change of torch's process-wide generation counter (bumped on
  every entry into a ``torch.compile``'d function), as CUDA Graph Trees read it. A thread whose
  step is held open (:func:`hold_step`: a training forward whose backward has not run yet) begins
  no step at a top-level call.

Steps are per thread: a step one thread begins never ends what another thread holds (only torch's
process-wide marker does, as torch defines it).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from npu_mempool.errors import StaleOutputError

__all__ = [
    "StaleTensor",
    "StepToken",
    "call_step",
    "ended_by_call",
    "ended_by_mark",
    "hold_step",
    "mark_step_begin",
    "migrate",
    "poison",
    "release_step",
    "step_token",
    "swappable",
    "top_level_call",
]


class _ThreadSteps(threading.local):
    """The step counters of one thread (``threading.local`` runs ``__init__`` once per thread)."""

    def __init__(self) -> None:
        self.marked = 0  # mark_step_begin() calls
        self.call = 0  # steps begun by top-level calls
        self.depth = 0  # top_level_call() blocks open
        self.generation = -1  # torch's generation when the last call step began (fallback)


_local = _ThreadSteps()

#: Threads whose step is held open (hold_step): a top-level call begins no step for them. A set
#: of thread ids, not a thread-local: the backward that releases it may run in another thread.
_held: set[int] = set()

#: (thread ident, its marked step, torch's process-wide step counter, its call step) at a
#: hand-out.
StepToken = tuple[int, int, int, int]


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
    _local.marked += 1


class _TopLevelCall:
    # Stateless (the state is the thread's), so one object serves every thread and nesting;
    # a class rather than a generator context manager: entered on every call of a compiled
    # function, it must cost next to nothing.
    __slots__ = ()

    def __enter__(self) -> None:
        steps = _local
        if steps.depth == 0 and threading.get_ident() not in _held:
            steps.call += 1
        steps.depth += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _local.depth -= 1


_TOP_LEVEL_CALL = _TopLevelCall()


def top_level_call() -> _TopLevelCall:
    """A context manager: the block is one top-level call of a compiled function in this thread.

    Entering it begins a new step for the calling thread, unless a block is already open in this
    thread (a nested call belongs to the outer one's step) or the thread's step is held open
    (:func:`hold_step`). Runners with ``CaptureOptions(keep_held_outputs=False)`` may then take
    back what they handed out to this thread in earlier steps. While a block is open, torch's
    process-wide generation counter is not consulted for this thread.

    A ``torch.compile`` backend exposes it as its ``backend_ctx_ctor``, which Dynamo enters around
    every call of the compiled function (``torch._dynamo.optimize(backend)``), in the calling
    thread.

    Example:
        >>> import torch
        >>> from npu_mempool import CaptureOptions, GraphRunner, StaleOutputError, top_level_call
        >>> runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(keep_held_outputs=False))
        >>> with top_level_call():
        ...     first = runner(torch.ones(2))
        ...     first.tolist()  # read within its step
        [2.0, 2.0]
        >>> with top_level_call():
        ...     second = runner(torch.zeros(2))  # a new step: `first` is taken back
        >>> second.tolist(), runner.num_paths
        ([0.0, 0.0], 1)
        >>> try:
        ...     first.tolist()
        ... except StaleOutputError:
        ...     print("overwritten")
        overwritten
    """
    return _TOP_LEVEL_CALL


def hold_step() -> int:
    """Keep the calling thread's current step open until :func:`release_step`.

    Until then a top-level call of this thread begins no new step (explicit boundaries still
    do). A training forward holds its step until its backward has run, so that a second forward
    of the same iteration (two inputs through one model) does not take back the outputs of the
    first, which the loss may still read. Holding twice needs one release (as CUDA Graph Trees,
    which wait for one backward: a forward whose backward never runs must not hold forever
    once another backward ran).

    Returns:
        The calling thread's id, to pass to :func:`release_step` (from any thread).
    """
    thread = threading.get_ident()
    _held.add(thread)
    return thread


def release_step(thread: int) -> None:
    """End a :func:`hold_step` of ``thread``: its next top-level call begins a new step."""
    _held.discard(thread)


def _torch_step() -> int:
    # torch counts its boundaries down from 0 in cudagraph_trees; the module is only imported
    # once someone used it, and until then no torch boundary was marked. (step_token reads the
    # same inline.)
    box = getattr(sys.modules.get("torch._inductor.cudagraph_trees"), "MarkStepBox", None)
    return int(getattr(box, "mark_step_counter", 0))


def _generation() -> int:
    # Dynamo bumps it on every entry into a torch.compile'd function, in any thread; CUDA Graph
    # Trees start a new generation on it. Without Dynamo imported, nothing was entered.
    # (step_token reads the same inline.)
    guard = sys.modules.get("torch._dynamo.mutation_guard")
    tracker = getattr(guard, "GenerationTracker", None)
    return int(getattr(tracker, "generation", 0))


def call_step() -> int:
    """The calling thread's call step, beginning a new one where torch's generation moved on.

    Outside a :func:`top_level_call` block the top-level calls are seen through torch's
    process-wide generation counter: the first runner call after it changed begins a new step
    (unless the thread's step is held). Another thread's call changes it too, so in this
    fallback a call of another thread can end the calling thread's step between two runner
    calls of one of its own calls; a thread still never ends what another thread holds.
    """
    steps = _local
    if steps.depth == 0:
        generation = _generation()
        if generation != steps.generation and threading.get_ident() not in _held:
            steps.generation = generation
            steps.call += 1
    return steps.call


def step_token(per_call: bool = False) -> StepToken:
    """The current step of the calling thread, recorded with every hand-out.

    Args:
        per_call: The runner takes back outputs at top-level calls (the call step is current).
    """
    # Once per replay: what _torch_step() and call_step() read, read here without calling them.
    steps = _local
    thread = threading.get_ident()
    box = getattr(sys.modules.get("torch._inductor.cudagraph_trees"), "MarkStepBox", None)
    torchs = int(getattr(box, "mark_step_counter", 0))
    if per_call and steps.depth == 0:
        guard = sys.modules.get("torch._dynamo.mutation_guard")
        generation = int(getattr(getattr(guard, "GenerationTracker", None), "generation", 0))
        if generation != steps.generation and thread not in _held:
            steps.generation = generation
            steps.call += 1
    return (thread, steps.marked, torchs, steps.call)


def ended_by_mark(token: StepToken) -> bool:
    """Whether an explicit boundary ended the step of ``token``, seen from the calling thread."""
    thread, marked, torchs, _ = token
    if torchs != _torch_step():
        return True
    return thread == threading.get_ident() and marked != _local.marked


def ended_by_call(token: StepToken) -> bool:
    """Whether a later top-level call of the calling thread ended the step of ``token``."""
    return token[0] == threading.get_ident() and token[3] != call_step()


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


def swappable(tensor: torch.Tensor, *, passed: bool) -> bool:
    """Whether ``tensor`` can be taken back: :func:`migrate` (``passed``) or :func:`poison` it.

    Both change the tensor object in place, which is safe only where nothing but the caller's
    object holds it: not autograd (a tensor saved for backward, a gradient), whose record of it
    would break. :func:`poison` also needs no weak reference to it but the runner's own.
    """
    if tensor._use_count() != 1:  # type: ignore[attr-defined]
        return False
    if passed:
        return not tensor.requires_grad
    return len(weakref.getweakrefs(tensor)) <= 1


def migrate(tensor: torch.Tensor) -> bool:
    """Move ``tensor`` (an output passed back in) out of graph memory, keeping its values.

    The object the caller holds then uses memory of its own, so the graph may overwrite its old
    memory while the caller still reads it. Returns ``False`` where torch refuses.
    """
    try:
        with torch.no_grad():
            copy = tensor.clone()
            tensor.set_(copy.untyped_storage(), copy.storage_offset(), copy.shape, copy.stride())
    except RuntimeError:
        return False
    return True
