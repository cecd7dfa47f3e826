"""GraphRunner: capture a callable once per graph key, then answer calls by replaying it.

The runner dispatches: it finds the graph that answers a call (keys, parameter-set variants, call
paths) and replays it. Everything else it delegates: keys are built in ``_keys``, the capture
policy (warm-up, churn, limit, failures) decides in ``_policy``, call paths and their pools
(device choice, mode-2 rewind) are kept in ``_paths``, captures made in ``_capture``, replays and
output hand-out done by ``_entry``, captures reported by ``_trace``.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from npu_mempool._bound import BoundGraph
from npu_mempool._budget import graph_budget
from npu_mempool._capture import capture
from npu_mempool._counters import NEW_KEY, Counters, RecaptureReason, register
from npu_mempool._devices import GraphBackend
from npu_mempool._entry import Entry, Reclaim, reclaiming
from npu_mempool._keys import Layout
from npu_mempool._options import CaptureOptions, InputKind
from npu_mempool._paths import CallPath, CallPaths
from npu_mempool._policy import Action, CapturePolicy, Decision
from npu_mempool._pool import PoolHandle, state_of
from npu_mempool._static_bound import StaticBoundCall, StaticBoundGraph
from npu_mempool._trace import log, profiled, report_capture
from npu_mempool.errors import CaptureError, ConfigError, InputLayoutError

__all__ = ["GraphRunner"]

_LAYOUT_ERRORS = (AttributeError, IndexError, TypeError)
#: ``tensor.data_ptr()`` as the C method itself, mapped over the watched arguments of every call
#: (about three times as fast as a ``methodcaller``: a decode step watches dozens of parameters).
_data_ptr = torch._C.TensorBase.data_ptr


class GraphRunner:
    """Capture a callable into device graphs, one per graph key, and replay them.

    The graph key is made of the number of arguments, the shapes, dtypes and strides of the USER
    and MUTATED tensor arguments, and the values and types of the non-tensor arguments (SymInt
    values). A USER input's static buffer keeps the strides of the call that captured it (an
    expanded input's, whose elements share memory, is dense), and the input copy fills its
    elements: a callable that reads memory between or around a tensor's elements
    (``as_strided`` over a slice's gaps) must get that tensor as MUTATED, used in place. A hit
    copies the user inputs into the static buffers with one batched ``torch._foreach_copy_`` and
    replays the graph; a miss captures a new graph (rewinding the pool first in mode 2).

    Memory a live tensor uses is never handed out again within its step: an output the caller
    still holds (or a view of it) is not overwritten by a later call. Such a call replays (or
    captures) the graph on another call path, with a pool of its own; a rewind (mode 2) waits until
    no output of the pool is held. A step ends at :func:`~npu_mempool.mark_step_begin` and, with
    ``CaptureOptions(keep_held_outputs=False)``, at each top-level call of the thread; later calls
    of that thread may then overwrite what it handed out before (reading such an output raises
    :class:`~npu_mempool.StaleOutputError`), except what they pass back in. Called directly, a
    runner keeps held outputs by default: it cannot tell where its caller's steps begin. Calls from
    several threads are serialised per runner, and each gets its own outputs.

    Args:
        fn: The callable to capture, e.g. ``gm.forward`` of an FX graph. It returns a tensor, or a
            tuple/list (or any pytree) of tensors and constants.
        input_kinds: One :class:`InputKind` per positional argument; default: all ``USER``.
        options: Memory and capture policy.
        specialize: Called as ``specialize(key, args)`` once per new key before its capture;
            returns the callable to capture for that key (shape-specialised kernels).
        name: Shown in logs, warnings and errors.
        guarded: One flag per positional argument: ``True`` where the caller itself guarantees
            that the argument's shape, dtype and strides (or, for a non-tensor, its value) are
            the same on every call, as Dynamo's guards do for a graph compiled with static
            shapes. Guarded arguments are left out of the graph key. Default: none.

    Inference only: captures and emulated replays run without autograd.

    Example:
        >>> import torch
        >>> from npu_mempool import GraphRunner, InputKind
        >>> def step(tokens, cache):
        ...     cache.add_(1)  # updated in place: a MUTATED input
        ...     return tokens * 2 + cache
        >>> runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.MUTATED])
        >>> cache = torch.zeros(3)
        >>> runner(torch.ones(3), cache).tolist()  # first call: captures the graph
        [3.0, 3.0, 3.0]
        >>> runner(torch.ones(3), cache).tolist()  # same key: replays it
        [4.0, 4.0, 4.0]
        >>> cache
        tensor([2., 2., 2.])
        >>> runner.counters.captures, runner.counters.replays
        (1, 1)
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        input_kinds: Sequence[InputKind] | None = None,
        options: CaptureOptions = CaptureOptions(),  # noqa: B008 (frozen, shared safely)
        specialize: Callable[[Hashable, tuple[Any, ...]], Callable[..., Any]] | None = None,
        name: str | None = None,
        guarded: Sequence[bool] | None = None,
    ) -> None:
        self._fn = fn
        self._guarded = tuple(guarded) if guarded is not None else None
        if (
            self._guarded is not None
            and input_kinds is not None
            and len(self._guarded) != len(input_kinds)
        ):
            raise InputLayoutError(
                f"guarded has {len(self._guarded)} flag(s) but input_kinds names "
                f"{len(input_kinds)} argument(s); give both one entry per positional argument"
            )
        self._kinds = tuple(input_kinds) if input_kinds is not None else None
        given: tuple[object, ...] = self._kinds or ()  # typed loosely: callers pass anything
        wrong = [k for k in given if not isinstance(k, InputKind)]
        if wrong:
            # Anything else (a string such as "user") would match no class: the tensor would be
            # neither copied nor keyed, and every call would replay the first call's values.
            raise InputLayoutError(
                f"input_kinds must hold InputKind members, got {wrong[0]!r}; pass "
                "InputKind.USER, InputKind.PARAMETER or InputKind.MUTATED per positional argument"
            )
        if not isinstance(options, CaptureOptions):
            raise ConfigError(
                f"options must be an npu_mempool.CaptureOptions, got {type(options).__name__}"
            )
        self._options = options
        self._specialize = specialize
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        # Function-like: wrappers that read ``__name__`` on every call (Dynamo's ``disable``
        # does) would otherwise raise and swallow an AttributeError per call.
        self.__name__ = self.__qualname__ = self.name
        # Weak: the counters must not keep the runner (and its device memory) alive.
        this = weakref.ref(self)
        self.counters = Counters(pool_bytes=lambda: _pool_bytes_of(this()))
        register(self.counters, self)  # in the process-wide totals, also after this runner dies
        # A call picks its graph, copies its inputs in, replays and hands its outputs out as one
        # step, so concurrent callers never share static buffers. Runners that share a pool
        # (mode 1) share its lock: their graphs share memory too.
        # (Anything else given as a pool is refused at the first call, with the reason.)
        pool = options.pool
        self._lock = state_of(pool).lock if isinstance(pool, PoolHandle) else threading.RLock()
        self._call_paths = CallPaths(options)
        # The same list for the runner's life: the dispatch loop reads it directly.
        self._paths: list[CallPath] = self._call_paths.paths
        self._policy = CapturePolicy(options)
        # Read on every call: bound once (the policy's set of failed keys changes in place).
        self._failed = self._policy.failed
        self._force_recapture = options.force_recapture
        self._specialized: dict[Hashable, Callable[..., Any]] = {}
        self._layout: Layout | None = None
        self._eager = False
        # The id of the graph the last replay used (0: none yet): the dispatch asks it last.
        # An id, not a reference: the runner must not keep a graph it let go of alive.
        self._last = 0
        # Parameter-moved captures since the replay count was last seen to move (see
        # _parameters_keep_moving).
        self._moves = 0
        self._replays_at_move = 0
        # Who captured a graph: outputs ended by a top-level call alone are taken back from the
        # runner's own graphs only (see _entry.Reclaim).
        self._owner = object()

    @property
    def options(self) -> CaptureOptions:
        """The options this runner was built with."""
        return self._options

    @property
    def pool(self) -> PoolHandle | None:
        """The pool the first call path captures into (``None`` before the first capture)."""
        return self._paths[0].pool

    @property
    def num_graphs(self) -> int:
        """Graphs currently held, over every key, input-address variant and call path."""
        return self._call_paths.graphs()

    @property
    def num_paths(self) -> int:
        """Call paths in use (more than one where outputs were held across calls)."""
        return len(self._paths)

    @property
    def graph_keys(self) -> tuple[Hashable, ...]:
        """Keys of the graphs currently held, in capture order (for logs and diagnostics)."""
        return self._call_paths.keys()

    def __call__(self, *args: Any) -> Any:
        """Run ``fn(*args)``: replay its graph for this key, capturing it on first sight."""
        # Every replay of a captured graph runs through here, under the runner's lock (a call
        # picks its graph, copies its inputs in, replays and hands its outputs out as one step).
        # The watched addresses are read and the liveness checked by C functions, so a replay
        # opens six Python frames: this one, the key's (one generated expression), the entry's
        # claim and replay (which hands the outputs out inline), the step token of the hand-out
        # and the graph's own replay (tests/test_mempool_replay_calls.py counts them). Everything
        # else is the cold path.
        with self._lock:
            if self._eager:
                return self._eager_call(args)
            layout = self._layout
            if layout is None:
                layout = self._layout = Layout(
                    args, self._kinds, self._options.frozen_parameters, self._guarded
                )
            try:
                key = layout.key(args)
                # Also proves the key hashable (else a layout error).
                failed = key in self._failed
                ptrs = tuple(map(_data_ptr, layout.pick_watched(args))) if layout.watched else ()
            except _LAYOUT_ERRORS as exc:
                raise self._layout_error(args) from exc
            if failed:
                return self._eager_call(args)
            if self._force_recapture:
                return self._recapture(key, args)
            missing = None
            # With several call paths, the graph that replayed last is asked last: a caller that
            # holds its outputs into this call (``out = runner(x)``) finds another path's graph
            # free at once, without the take-back attempt of a held graph.
            deferred = None
            last = self._last if len(self._paths) > 1 else 0
            for path in self._paths:
                found = None
                for entry in path.entries.get(key, ()):
                    if entry.ptrs == ptrs:
                        found = entry
                        break
                if found is None:
                    # Captured here if no later path has a free graph for the call.
                    if missing is None:
                        missing = path
                    continue
                if id(found) == last:
                    deferred = found
                    continue
                # Where its memory is in use, outputs of ended steps may give it back (_steps), the
                # ones this call passes in read first (_entry.Reclaim).
                if found.claim(self._owner, args, layout.user, layout.pinned):
                    self._last = id(found)
                    self.counters.replays += 1
                    return found.replay(args)
                # Still in use: try the next call path.
            if deferred is not None and deferred.claim(
                self._owner, args, layout.user, layout.pinned
            ):
                self.counters.replays += 1
                return deferred.replay(args)
            if missing is None:
                missing = self._call_paths.add_path(self.name)
            else:
                self._check_layout(layout, args)
            return self._miss(missing, key, args)

    def as_function(self) -> Callable[..., Any]:
        """A plain function that does what calling the runner does (it keeps the runner alive).

        For frameworks that hold one plain callable per graph (a ``torch.compile`` backend). It
        carries the runner's name (``__name__``, ``__qualname__``).
        """
        # A partial of __call__, not a closure around it: calling a partial opens no Python frame
        # of its own, so a replay through it opens the frames of a call of the runner alone.
        call = functools.partial(GraphRunner.__call__, self)
        call.__name__ = call.__qualname__ = self.name  # type: ignore[attr-defined]
        return call

    def bind(
        self, *args: Any, static_outputs: bool = False, all_arguments: bool = False
    ) -> BoundGraph:
        """The graph the runner holds for ``args``, to call with their USER tensors alone.

        For engines that pick the captured layout themselves before each call (the batch size
        of a serving step): a call of the :class:`BoundGraph` copies the USER tensors in and
        replays, without the key or the watched addresses a runner call reads. It still checks
        the USER tensors' shapes, dtypes and strides and the liveness of the outputs it handed
        out; the PARAMETER and MUTATED tensors and the non-tensor values of ``args`` are bound,
        used in place on every call (see :class:`BoundGraph`).

        Args:
            *args: A call the runner has answered with a graph (call the runner with them first:
                its first call of a key captures).
            static_outputs: Return the graph's own outputs, the same tensors on every call, as a
                device graph replayed directly and vLLM's graph wrapper do: the next call of
                the bound graph, or of any static bound graph of the pool, overwrites their
                values, so the caller consumes or copies them before it calls again. Outputs of
                checked calls stay protected from it, and it from them. It saves the per-call
                hand-out and liveness check; ``CaptureOptions.check_output_overwrite`` makes
                reading an output after the next call raise (for tests).
            all_arguments: With ``static_outputs``: call the bound graph with every argument,
                as the runner is called, for engines that pass persistent buffers on each call
                (vLLM's graph wrapper). A call replays when it is the bound call: every tensor
                with the bound layout, every watched tensor (MUTATED, and PARAMETER unless
                ``frozen_parameters``) at the bound address, the other values equal and of the
                same types; any other call is a runner call and returns the runner's outputs.

        Raises:
            CaptureError: The runner holds no graph for ``args`` (not called with them yet, the
                key runs eagerly, or the runner runs eagerly for good).
            ConfigError: ``static_outputs`` on a runner with ``clone_output`` (which asks for
                copies of the outputs); ``all_arguments`` without ``static_outputs``.
            InputLayoutError: ``args`` do not fit the runner's call signature.
        """
        if not isinstance(static_outputs, bool):
            raise ConfigError(
                f"bind(static_outputs=...) must be True or False, got {static_outputs!r}"
            )
        if not isinstance(all_arguments, bool):
            raise ConfigError(
                f"bind(all_arguments=...) must be True or False, got {all_arguments!r}"
            )
        if all_arguments and not static_outputs:
            raise ConfigError(
                f"GraphRunner {self.name!r}: bind(all_arguments=True) binds a graph with static "
                "outputs; pass static_outputs=True too, or call the runner itself"
            )
        if static_outputs and self._options.clone_output:
            raise ConfigError(
                f"GraphRunner {self.name!r} clones its outputs (clone_output=True), which "
                "bind(static_outputs=True) would not: bind without static_outputs, or turn "
                "clone_output off"
            )
        with self._lock:
            layout = self._layout
            if layout is None or self._eager:
                raise self._nothing_bound(
                    "has not captured anything" if layout is None else "runs every call eagerly"
                )
            try:
                key = layout.key(args)
                ptrs = tuple(map(_data_ptr, layout.pick_watched(args))) if layout.watched else ()
            except _LAYOUT_ERRORS as exc:
                raise self._layout_error(args) from exc
            self._check_layout(layout, args)
            entries = self._graphs_for(key, ptrs)
            if not entries:
                raise self._nothing_bound(
                    "runs this key eagerly" if key in self._failed else "holds no graph for them"
                )
            common: dict[str, Any] = {
                "user": layout.user,
                "pinned": layout.pinned,
                "watched": layout.watched,
                "lock": self._lock,
                "owner": self._owner,
                "force_recapture": self._force_recapture,
            }
            if all_arguments:
                return StaticBoundCall(
                    self, entries, args, check=self._options.check_output_overwrite, **common
                )
            if static_outputs:
                return StaticBoundGraph(
                    self, entries, args, check=self._options.check_output_overwrite, **common
                )
            return BoundGraph(self, entries, args, **common)

    def _graphs_for(self, key: Hashable, ptrs: tuple[int, ...]) -> list[Entry]:
        """The graphs held for ``key`` and these watched addresses, one per call path at most."""
        found = []
        for path in self._paths:
            for entry in path.entries.get(key, ()):
                if entry.ptrs == ptrs and entry.live:
                    found.append(entry)
                    break
        return found

    def _nothing_bound(self, why: str) -> CaptureError:
        return CaptureError(
            f"GraphRunner {self.name!r} {why}: bind() binds a graph the runner holds for these "
            "arguments; call the runner with them first (a call of a new key captures it)"
        )

    def reset(self) -> None:
        """Free every graph (and the runner's own pools); the next call captures again."""
        with self._lock:
            self._free_graphs()
            self._policy.reset()
            self._eager = False

    # -- dispatch ------------------------------------------------------------------------------

    def _recapture(self, key: Hashable, args: tuple[Any, ...]) -> Any:
        """``force_recapture``: free the key's graphs and capture it again for this call."""
        forced = self._call_paths.known(key)
        self._call_paths.discard_key(key)
        result = self._miss(self._paths[0], key, args, RecaptureReason.FORCED if forced else None)
        return result

    def _reclaim(self, layout: Layout, args: tuple[Any, ...]) -> Reclaim:
        return Reclaim(self._owner, args, layout.user, layout.pinned)

    def _check_layout(self, layout: Layout, args: tuple[Any, ...]) -> None:
        """Slow path only: a call that found no graph is checked against the first call's layout."""
        if len(args) != layout.count or any(
            isinstance(args[i], torch.Tensor) for i in layout.scalars
        ):
            # A tensor where a value was would key a graph on the tensor's identity: one capture
            # per call until the limit. A different argument count is another signature.
            raise self._layout_error(args)

    def _layout_error(self, args: tuple[Any, ...]) -> InputLayoutError:
        assert self._layout is not None
        kinds = ["tensor" if isinstance(a, torch.Tensor) else type(a).__name__ for a in args]
        return InputLayoutError(
            f"GraphRunner {self.name!r} was first called with {self._layout.count} argument(s), "
            f"tensors at positions {self._layout.tensors} and hashable values elsewhere; this call "
            f"passed {kinds}. Keep one call signature per runner (create another runner for "
            "another signature) and pass non-tensor arguments as hashable values."
        )

    def _eager_call(self, args: tuple[Any, ...]) -> Any:
        self.counters.eager_calls += 1
        return self._fn(*args)

    # -- a call that found no free graph -------------------------------------------------------

    def _miss(
        self,
        path: CallPath,
        key: Hashable,
        args: tuple[Any, ...],
        forced: RecaptureReason | None = None,
    ) -> Any:
        """Ask the policy, then capture a graph for ``key`` on ``path`` (or do what it says).

        ``forced``: the key's graphs were just freed to capture it again (``force_recapture``).
        """
        layout = self._layout_checked()
        paths = self._call_paths
        known = paths.known(key)

        def make_room() -> int:
            # Graphs captured for inputs that no longer exist free their place first.
            paths.drop_dead(path, key)
            return paths.graphs()

        decision = self._policy.on_miss(
            key,
            args,
            layout,
            known=known,
            graphs=paths.graphs(),
            replays=self.counters.replays,
            make_room=make_room,
            device_warmup=lambda: paths.device_warmup(args),
            name=self.name,
        )
        if decision.action is Action.EAGER:
            if decision.message:
                log.warning("%s", decision.message)
            return self._eager_call(args)
        if decision.action is Action.GIVE_UP:
            return self._give_up(decision, args)
        reason = forced or paths.recapture_reason(path, key, args, layout, known)
        if reason is RecaptureReason.PARAMETER_MOVED and self._parameters_keep_moving():
            return self._copy_moving_parameters(
                paths.moved_parameters(path, key, args, layout), args
            )
        pool, backend = paths.pool_for(path, args, layout, self.name)
        if not self._may_capture(pool, backend):
            return self._eager_call(args)
        fn = self._specialized.get(key)
        if fn is None:
            fn = self._specialize(key, args) if self._specialize is not None else self._fn
            self._specialized[key] = fn
        with reclaiming(self._reclaim(layout, args)):
            if not paths.rewind(path, pool, backend, self.name):
                # Outputs in use lie where this pool would put the new graph: another path.
                path = paths.add_path(self.name)
                pool, backend = paths.pool_for(path, args, layout, self.name)
                paths.rewind(path, pool, backend, self.name)
        started = time.perf_counter()
        try:
            with profiled("npu_mempool.capture"):
                entry = capture(
                    fn=fn,
                    key=key,
                    args=args,
                    layout=layout,
                    options=self._options,
                    pool=pool,
                    backend=backend,
                    rewinds=path.rewinds,
                    name=self.name,
                    owner=self._owner,
                )
        except Exception as exc:
            paths.capture_failed(path, pool, self.name)
            return self._capture_failed(key, args, exc)
        report_capture(
            name=self.name,
            key=key,
            reason=reason,
            seconds=time.perf_counter() - started,
            call_path=paths.number(path),
            graphs_before=paths.graphs(),
            pool_bytes=lambda: pool.nbytes,
            calls=self.counters.calls,
            replays=self.counters.replays,
        )
        paths.add(path, key, entry)
        counters = self.counters
        if counters.captures:
            counters.capture_reasons[NEW_KEY if reason is None else reason] += 1
        counters.captures += 1
        if reason is not None:
            counters.recapture_reasons[reason] += 1
        if backend.executes_on_capture:
            return entry.hand_out()
        # A device capture only records: the capturing call replays once for its results. That
        # replay is part of the capture, not counted, so counters read the same on every device.
        return entry.replay(args)

    def _parameters_keep_moving(self) -> bool:
        """Whether parameters moved on MOVED_LIMIT captures in a row with no replay between.

        Parameter sets that alternate (two module instances, adapters switched) capture once
        each and then replay; parameters that come at a new address on every step (FSDP2
        gathers each layer's parameters anew, a module rebuilt per step) would capture on every
        call and never replay.
        """
        replays = self.counters.replays
        if replays != self._replays_at_move:
            self._replays_at_move = replays
            self._moves = 0
        self._moves += 1
        return self._moves >= MOVED_LIMIT

    def _copy_moving_parameters(self, moved: Sequence[int], args: tuple[Any, ...]) -> Any:
        """Copy the parameters at ``moved`` into static buffers on every call, like user inputs.

        Their graphs are freed and captured again once for the new layout; from then on a call
        copies their values in and replays, whatever their addresses.
        """
        assert self._layout is not None
        kinds = list(self._kinds or [InputKind.USER] * self._layout.count)
        for i in moved or self._layout.params:
            kinds[i] = InputKind.USER
        self._kinds = tuple(kinds)
        positions = list(moved or self._layout.params)
        self._free_graphs()
        self._layout = None
        self._moves = 0
        log.info(
            "GraphRunner %r: parameters at positions %s came at new addresses on %d captures in "
            "a row with no replay between; they are copied in on every call from now on, like "
            "user inputs, instead of being captured again",
            self.name,
            positions,
            MOVED_LIMIT,
        )
        _moving_once()
        return self(*args)

    def _may_capture(self, pool: PoolHandle, backend: GraphBackend) -> bool:
        """Whether the device takes another graph now: not one it refuses, not over its budget.

        A device that refuses every capture (a setting that forbids it) makes the runner eager
        for good, with one log line for the process (``_refusal``); a full budget makes this
        call eager, logged once by the budget.
        """
        refusal = getattr(backend, "refusal", None)
        refused = refusal() if refusal is not None else None
        if refused is not None:
            _refused_once(refused)
            self._eager = True
            self.counters.fallbacks += 1
            return False
        needed = getattr(backend, "graphs_needed", None)
        count = needed(pool) if needed is not None else 1
        return graph_budget(pool.device.type).admits(count, self.name)

    def _layout_checked(self) -> Layout:
        assert self._layout is not None
        return self._layout

    def _give_up(self, decision: Decision, args: tuple[Any, ...]) -> Any:
        """Warn once, free every graph and run eagerly from now on."""
        assert decision.warning is not None
        # The caller's frame: _give_up < _miss < _call < __call__ (or as_function's call).
        warnings.warn(decision.message, decision.warning, stacklevel=5)
        self._free_graphs()
        self._eager = True
        self.counters.fallbacks += 1
        return self._eager_call(args)

    def _capture_failed(self, key: Hashable, args: tuple[Any, ...], exc: Exception) -> Any:
        decision = self._policy.on_failure(
            key, exc, self.name, self._call_paths.device_warmup(args)
        )
        if decision.action is Action.RAISE:
            raise CaptureError(decision.message) from exc
        log.warning("%s; this key runs eagerly from now on", decision.message)
        # The key runs eagerly for every input set from now on: its graphs must not linger,
        # holding memory and counting toward capture_limit.
        self._call_paths.discard_key(key)
        self.counters.fallbacks += 1
        return self._eager_call(args)

    def _free_graphs(self) -> None:
        self._call_paths.free()
        self._specialized.clear()


#: Captures in a row, with no replay between, for which parameters came at new addresses: from
#: this many on, they are copied in like user inputs (see GraphRunner._parameters_keep_moving).
MOVED_LIMIT = 2

_refusals: set[str] = set()
_moving_said: list[bool] = []


def _moving_once() -> None:
    """Say once per process why runners copy parameters that keep moving."""
    if not _moving_said:
        _moving_said.append(True)
        log.warning(
            "parameters of captured graphs come at new addresses on every call (FSDP2 gathers "
            "them anew each step, or modules are rebuilt): their graphs copy them in on every "
            "call, like user inputs, instead of being captured again (logger npu_mempool, "
            "level INFO, names each graph)"
        )


def _refused_once(reason: str) -> None:
    """Log why the device refuses captures, once per process and reason."""
    if reason not in _refusals:
        _refusals.add(reason)
        log.warning("%s", reason)


def _pool_bytes_of(runner: GraphRunner | None) -> int:
    if runner is None:
        return 0
    return runner._call_paths.pool_bytes()
