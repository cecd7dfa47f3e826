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

import copyreg
import sys
import threading
from collections.abc import Callable, Container, Iterable, Sequence
from types import TracebackType
from typing import Any
from weakref import getweakrefs

import torch

from npu_mempool.errors import StaleOutputError

__all__ = [
    "StaleTensor",
    "StepToken",
    "hold_step",
    "mark_step_begin",
    "release_step",
    "step_token",
    "steps_ended",
    "take_back_outputs",
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

#: Read on every hand-out (step_token), bound once: the interpreter's module table (the dict
#: itself, which Python never replaces) and torch's modules that hold its step counters.
_modules = sys.modules
_get_ident = threading.get_ident
_TREES = "torch._inductor.cudagraph_trees"
_MUTATION_GUARD = "torch._dynamo.mutation_guard"

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


def step_token(per_call: bool = False) -> StepToken:
    """The current step of the calling thread, recorded with every hand-out.

    Args:
        per_call: The runner takes back outputs at top-level calls (the call step is current).
    """
    # Once per replay: the counters are read inline (steps_ended reads the same). torch's
    # modules are looked up, not imported (importing them costs seconds); while one is not
    # loaded its counter is 0, without a getattr on None, which raises and catches an
    # AttributeError inside (two thirds of the token's time).
    steps = _local
    thread = _get_ident()
    trees = _modules.get(_TREES)
    torchs = (
        0
        if trees is None
        else int(getattr(getattr(trees, "MarkStepBox", None), "mark_step_counter", 0))
    )
    if per_call and steps.depth == 0:
        guard = _modules.get(_MUTATION_GUARD)
        generation = (
            0
            if guard is None
            else int(getattr(getattr(guard, "GenerationTracker", None), "generation", 0))
        )
        if generation != steps.generation and thread not in _held:
            steps.generation = generation
            steps.call += 1
    return (thread, steps.marked, torchs, steps.call)


def steps_ended(tokens: Iterable[StepToken], by_call: bool) -> bool:
    """Whether the step of every token has ended, seen from the calling thread.

    A step ends at an explicit boundary: torch's process-wide marker, or :func:`mark_step_begin`
    in the thread that took the token. With ``by_call`` (the runner takes back outputs at
    top-level calls, and this is its own call), a later top-level call of the calling thread ends
    the steps of its own tokens too. Outside a :func:`top_level_call` block the top-level calls
    are seen through torch's process-wide generation counter: the first look after it changed
    begins a new call step (unless the thread's step is held), as :func:`step_token` does. In
    this fallback a call of another thread can end the calling thread's step between two runner
    calls of one of its own calls; a thread still never ends what another thread holds.
    """
    # Asked on every call that finds its graph's outputs held: one frame, the counters read inline.
    steps = _local
    thread = _get_ident()
    trees = _modules.get(_TREES)
    torchs = (
        0
        if trees is None
        else int(getattr(getattr(trees, "MarkStepBox", None), "mark_step_counter", 0))
    )
    call = -1  # the call step, read at the first token that needs it
    for owner, marked, torch_step, call_step in tokens:
        if torch_step != torchs or (owner == thread and marked != steps.marked):
            continue  # ended by an explicit boundary
        if not by_call or owner != thread:
            return False
        if call < 0:
            if steps.depth == 0:
                guard = _modules.get(_MUTATION_GUARD)
                generation = (
                    0
                    if guard is None
                    else int(getattr(getattr(guard, "GenerationTracker", None), "generation", 0))
                )
                if generation != steps.generation and thread not in _held:
                    steps.generation = generation
                    steps.call += 1
            call = steps.call
        if call_step == call:
            return False
    return True


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


#: ``torch.utils.swap_tensors``' own last step: exchange the C tensors two objects point to. None
#: where torch lacks it (swap_tensors then does the whole swap).
_swap_impl: Any = getattr(torch._C, "_swap_tensor_impl", None)
#: Neither class has slots, so swapping a plain tensor for a StaleTensor swaps only the class, the
#: instance dict and the C tensor (what swap_tensors does once its checks pass).
_PLAIN_SWAP = (
    _swap_impl is not None
    and not copyreg._slotnames(torch.Tensor)  # type: ignore[attr-defined]
    and not copyreg._slotnames(StaleTensor)  # type: ignore[attr-defined]
)


def take_back_outputs(
    tensors: Sequence[torch.Tensor], passed: Container[int], message: str
) -> list[int]:
    """Take back outputs of ended steps: the caller's objects no longer use graph memory.

    Those whose ``id`` is in ``passed`` (the call passes them back in, none requiring grad) are
    moved out of the pool (copied, then set to the copy's storage) and keep their values. The
    others are poisoned: each becomes, in place, a :class:`StaleTensor` whose reads raise
    :class:`~npu_mempool.StaleOutputError` with ``message``. Returns the positions of the ones
    torch refused, left as they were (a tensor also held inside autograd's graph: its memory is
    not the runner's to take).

    Poisoning is ``torch.utils.swap_tensors(tensor, StaleTensor(tensor, message))``. For a plain
    tensor that passes every check of swap_tensors outright (no weak reference to either object,
    no slots, no other holder of either C tensor) its steps run inline, without its seven Python
    frames: swap the classes, the instance dicts, then the C tensors. Anything else (a tensor
    subclass, a weak reference, an extra holder) goes through swap_tensors itself, which
    decides. The StaleTensor is made as ``StaleTensor.__new__`` makes it, also inline: this runs
    on every call of an ``out = f(x)`` loop with one step per call.
    """
    kept: list[int] = []
    for i, tensor in enumerate(tensors):
        if id(tensor) in passed:
            # Moved out of graph memory, keeping its values: the object the caller holds then
            # uses memory of its own while the graph overwrites the old. It requires no grad (the
            # graph checked), so neither the copy nor the storage swap is recorded by autograd.
            copy = tensor.clone()
            storage, offset = copy.untyped_storage(), copy.storage_offset()
            try:
                tensor.set_(storage, offset, copy.shape, copy.stride())
            except RuntimeError:
                kept.append(i)  # torch refused (an inference tensor outside inference mode)
            continue
        stale: StaleTensor = torch.Tensor._make_wrapper_subclass(  # as StaleTensor(tensor, message)
            StaleTensor,
            tensor.shape,
            strides=tensor.stride(),
            storage_offset=tensor.storage_offset(),
            dtype=tensor.dtype,
            device=tensor.device,
        )
        stale._message = message
        if (
            _PLAIN_SWAP
            and type(tensor) is torch.Tensor
            and not getweakrefs(tensor)
            and tensor._use_count() == 1  # type: ignore[attr-defined]
            and stale._use_count() == 1  # type: ignore[attr-defined]
        ):
            tensor.__class__ = StaleTensor
            stale.__class__ = torch.Tensor  # type: ignore[assignment]
            attributes = tensor.__dict__
            tensor.__dict__ = stale.__dict__
            stale.__dict__ = attributes
            _swap_impl(tensor, stale)
            continue
        try:
            torch.utils.swap_tensors(tensor, stale)  # type: ignore[no-untyped-call]
        except RuntimeError:
            kept.append(i)
    return kept
