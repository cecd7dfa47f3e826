"""A BoundGraph that hands out the graph's own outputs: ``GraphRunner.bind(static_outputs=True)``.

The contract of a device graph replayed directly (``torch.cuda.CUDAGraph``) and of vLLM's graph
wrapper: every call returns the same tensors, and the next call overwrites their values. A
serving engine's step loop consumes (or copies) the outputs before it calls again, so the
per-call liveness check and hand-out of a checked :class:`~npu_mempool.BoundGraph` (a view per
output, its step token, the take-back) are work it does not need. What stays on the call's path:

- the USER tensors' layout and the autocast state, as in every bound graph;
- the runner's lock: the graph replays while no other caller of its pool does;
- the graph is still the runner's, and no output of a checked path (a runner call, a checked
  bound graph) of the pool is in use: those are never overwritten. The outputs of the pool's
  other static bound graphs are not protected from this one: static outputs are valid until the
  next call of any static bound graph of the pool (vLLM's contract for its one global pool);
- a graph whose checked outputs are still in use at bind time (the warm-up call's) is not replayed
  statically until they are dead: the static outputs alias them.

The static outputs are in use for every checked path while the bound graph lives: a runner call
of the same key never overwrites them (it replays, or captures, the key on another call path),
no other graph of the pool writes their memory, and the pool is not rewound under them. A call
the static path cannot serve (another requires_grad or device, another autocast state, the graph
let go of, a checked output in the way) goes through the runner and returns the runner's
outputs, under the runner's rules. The outputs are shared by every caller: one caller at a
time, as an engine's step loop.

With ``CaptureOptions.check_output_overwrite`` the bound graph checks its callers: each call hands
out new tensor objects and poisons the previous call's, so reading an output after the next call
raises :class:`~npu_mempool.StaleOutputError` (a view the caller made of one is not caught). For an
engine's tests; it costs the hand-out the contract saves.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd import profiler

from npu_mempool._bound import BoundGraph, _any_autocast, _data_ptr, layout_guards
from npu_mempool._entry import Entry
from npu_mempool._keys import autocast_state, picker
from npu_mempool._steps import take_back_outputs
from npu_mempool._trace import profiled

if TYPE_CHECKING:
    from npu_mempool._runner import GraphRunner

__all__ = ["StaticBoundCall", "StaticBoundGraph"]

_OVERWRITTEN = (
    "this output of static BoundGraph {name!r} was overwritten by the bound graph's next call "
    "(GraphRunner.bind(static_outputs=True) hands out the same memory on every call); clone() "
    "what must outlive the next call"
)


class _Pin:
    """The record, in the graph's pool, that a static bound graph hands out its outputs."""

    __slots__ = ("entry", "held")

    def __init__(self, entry: Entry) -> None:
        # Weakly: the finalizer that drops the record must not keep the graph alive.
        self.entry = weakref.ref(entry)
        self.held = False

    def hold(self) -> None:
        entry = self.entry()
        if entry is not None and not self.held:
            entry.state.hold_static(entry)
            self.held = True

    def release(self) -> None:
        entry = self.entry()
        if self.held and entry is not None:
            entry.state.drop_static(entry)
        self.held = False


class StaticBoundGraph(BoundGraph):
    """A :class:`BoundGraph` whose calls return the graph's own outputs (see the module notes)."""

    __slots__ = (
        "_check",
        "_copy",
        "_counters",
        "_dst",
        "_entry",
        "_expected",
        "_finalizer",
        "_lent",
        "_lock_acquire",
        "_lock_release",
        "_pin",
        "_previous",
        "_ready",
        "_replay_graph",
        "_result",
        "_views",
    )

    def __init__(
        self,
        runner: GraphRunner,
        entries: Sequence[Entry],
        args: tuple[Any, ...],
        *,
        check: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, entries, args, **kwargs)
        self._check = check
        self._previous: list[torch.Tensor] = []
        self._counters = runner.counters
        self._lock_acquire = self._lock.acquire
        self._lock_release = self._lock.release
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._follow(entries[0])

    @property
    def static_outputs(self) -> bool:
        """Whether calls return the graph's own outputs, overwritten by the next call."""
        return True

    def _follow(self, entry: Entry) -> None:
        """Hand out ``entry``'s outputs from now on."""
        if self._finalizer is not None:
            self._finalizer()  # the previous graph's record goes (a finalizer runs once)
        if self._check and self._previous:
            # The call that brought this one here is a next call: the last outputs are over.
            take_back_outputs(self._previous, (), _OVERWRITTEN.format(name=self.name))
        self._entry = entry
        # The static outputs are made once no checked output of the graph is alive (at
        # _free_of_checked_outputs): made before, their views would count as a use of the
        # graph's memory, and its record as a lender would stay busy for every other graph of
        # the pool (bound graphs of it included) after the warm-up output died.
        self._views: list[Any] | None = None
        self._result: Any = None
        self._expected: tuple[int, ...] = ()
        # Checked paths see the static outputs as in use from _free_of_checked_outputs on (the
        # pool's static holders). Until then a checked output is alive, so the graph is one of
        # the pool's lenders already: its hand-out recorded it, and only an idle one is dropped.
        self._pin = _Pin(entry)
        self._finalizer = weakref.finalize(self, self._pin.release)
        self._finalizer.atexit = False
        self._copy, self._dst, self._replay_graph = entry.replay_steps()
        # The pool's checked lenders: while there are none, nothing stops the replay.
        self._lent = entry.state.lenders()
        self._ready = False
        self._previous = []
        # Told now where it can be (no checked output alive): the pool's other static bound
        # graphs then count this one's outputs as theirs to overwrite from their first call.
        self._free_of_checked_outputs()

    def _free_of_checked_outputs(self) -> bool:
        """Whether no output of a checked call of the graph is alive (then none can be again)."""
        entry = self._entry
        if self._views is None:
            # Uses of a graph another static bound graph hands out already are its static
            # outputs: no checked output of it can be alive (none was when it was held, and no
            # checked path replays it since).
            if entry.in_use() and id(entry) not in entry.state.static_holders():
                return False
            # What the runner and this bound graph hold of each output storage: a use beyond
            # these is an output of a checked call that the static outputs alias.
            self._views, self._result, self._expected = entry.static_outputs()
        elif entry.used_beyond(self._expected):
            return False
        # From now on no checked path replays the graph (the static outputs are in use), so
        # the record holds until the bound graph goes.
        self._pin.hold()
        # Ready for the static path, unless every call must capture anew.
        self._ready = not self._recapture
        return self._ready

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """Replay the bound graph on ``inputs``; return its own outputs (see the module notes)."""
        # The whole replay inline, with what it reads of the graph cached at _follow: this is
        # the path whose cost is the point of static outputs (one frame and C calls, the
        # graph's replay aside). The guard lines repeat BoundGraph.__call__'s: a shared helper
        # would be a frame more on every call.
        try:
            fits = self._guards(*inputs)
        except TypeError:  # another number of arguments, or not tensors
            fits = False
        if fits and (self._autocast or (not self._sees_autocast and _any_autocast())):
            fits = autocast_state() == self._autocast  # as in BoundGraph.__call__
        if not fits:
            return self._off_layout(inputs)
        self._lock_acquire()
        try:
            entry = self._entry
            if (
                entry.live
                and (self._ready or self._free_of_checked_outputs())
                and (not self._lent or not entry.state.in_use(entry, besides_static=True))
            ):
                if profiler._is_profiler_enabled:
                    return self._replay_profiled(entry, inputs)
                if inputs:
                    self._copy(self._dst, inputs)
                self._replay_graph(self._args)
                self._counters.replays += 1
                if self._check:
                    return self._hand_out_checked(entry)
                return self._result
            return self._through_runner(inputs)
        finally:
            self._lock_release()

    def _replay_profiled(self, entry: Entry, inputs: tuple[torch.Tensor, ...]) -> Any:
        with profiled("npu_mempool.replay"):
            if inputs:
                with profiled("npu_mempool.copy_inputs"):
                    self._copy(self._dst, inputs)
            self._replay_graph(self._args)
            self._counters.replays += 1
            return self._hand_out_checked(entry) if self._check else self._result

    def _hand_out_checked(self, entry: Entry) -> Any:
        """check_output_overwrite: new objects for this call, the previous call's poisoned."""
        if self._previous:
            take_back_outputs(self._previous, (), _OVERWRITTEN.format(name=self.name))
        assert self._views is not None  # made before the first static replay
        self._previous, result = entry.handed_anew(self._views)
        return result

    def _through_runner(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        result = super()._through_runner(inputs)
        if not self._entry.live:
            # The runner let the graph go (force_recapture, a capture limit): follow the key's
            # graph it holds now, if any; until then every call goes through the runner.
            for ref in self._entries:
                entry = ref()
                if entry is not None and entry.live:
                    self._follow(entry)
                    break
        return result


class StaticBoundCall(StaticBoundGraph):
    """``bind(static_outputs=True, all_arguments=True)``: called with the runner's arguments.

    For engines that keep every input in persistent buffers and pass them on each call, as
    vLLM's graph wrapper is called: each call brings every argument the runner takes, and
    replays the bound graph when it is the bound call: every tensor with the bound layout (and
    requires_grad, device, dispatch keys: Dynamo's check of them all, in one C call), every
    watched one (MUTATED, and PARAMETER unless ``frozen_parameters``) at the bound address,
    every other value equal to the bound one and of its type. Any other call is a runner call,
    with what that does (a key, a capture for new addresses), and returns the runner's checked
    outputs; bind again to make another call the bound one.
    """

    __slots__ = (
        "_arity",
        "_call_guards",
        "_layouts",
        "_pick_tensors",
        "_pick_user",
        "_pick_values",
        "_pick_watched",
        "_types",
        "_values",
    )

    def __init__(
        self,
        runner: GraphRunner,
        entries: Sequence[Entry],
        args: tuple[Any, ...],
        *,
        check: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, entries, args, check=check, **kwargs)
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        values = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        self._arity = len(args)
        self._pick_tensors = picker(tensors)
        self._pick_user = picker(self._user)
        self._pick_watched = picker(self._watched)
        self._pick_values = picker(values)
        self._values = self._pick_values(args)
        self._types = tuple(map(type, self._values))
        given = [args[i] for i in tensors]
        self._layouts = tuple(map(_layout_of, given))
        guards, sees = layout_guards(given)
        self._call_guards: Callable[..., bool] = guards or self._same_tensors
        # The autocast question is the base's, now over every tensor of the call.
        self._sees_autocast = sees

    def __call__(self, *args: Any) -> Any:
        """Replay the bound graph if ``args`` are the bound call; else call the runner."""
        # StaticBoundGraph.__call__'s body after its own check: repeated, as it repeats
        # BoundGraph's (a shared helper would be a frame more on every call).
        try:
            fits = (
                len(args) == self._arity
                and self._call_guards(*self._pick_tensors(args))
                and tuple(map(_data_ptr, self._pick_watched(args))) == self._ptrs
                and (values := self._pick_values(args)) == self._values
                and tuple(map(type, values)) == self._types
            )
        except TypeError:  # not tensors where the bound call had them
            fits = False
        if fits and (self._autocast or (not self._sees_autocast and _any_autocast())):
            fits = autocast_state() == self._autocast
        if not fits:
            return self._runner(*args)
        self._lock_acquire()
        try:
            entry = self._entry
            if (
                entry.live
                and (self._ready or self._free_of_checked_outputs())
                and (not self._lent or not entry.state.in_use(entry, besides_static=True))
            ):
                if profiler._is_profiler_enabled:
                    return self._replay_profiled(entry, self._pick_user(args))
                if self._user:
                    self._copy(self._dst, self._pick_user(args))
                self._replay_graph(self._args)
                self._counters.replays += 1
                if self._check:
                    return self._hand_out_checked(entry)
                return self._result
            return self._through_runner(self._pick_user(args))
        finally:
            self._lock_release()

    def _same_tensors(self, *tensors: torch.Tensor) -> bool:
        # Without Dynamo's check (a torch that lacks it): the layouts compared in Python.
        return tuple(map(_layout_of, tensors)) == self._layouts


def _layout_of(tensor: torch.Tensor) -> tuple[Any, ...]:
    return (tensor.shape, tensor.stride(), tensor.dtype, tensor.device, tensor.requires_grad)
