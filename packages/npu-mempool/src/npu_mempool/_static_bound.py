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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd import profiler

from npu_mempool._bound import BoundGraph, _any_autocast
from npu_mempool._entry import Entry
from npu_mempool._keys import autocast_state
from npu_mempool._steps import take_back_outputs
from npu_mempool._trace import profiled

if TYPE_CHECKING:
    from npu_mempool._runner import GraphRunner

__all__ = ["StaticBoundGraph"]

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
        # What the runner and this bound graph hold of each output storage: a use beyond these
        # is an output of a checked call (the warm-up's) that the static outputs alias.
        self._views, self._result, self._expected = entry.static_outputs()
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
        if entry.used_beyond(self._expected):
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
