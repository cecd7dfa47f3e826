"""GraphRunner: capture a callable once per graph key, then answer calls by replaying it.

The policies live here: which graph answers a call (keys, parameter-set variants, call paths),
when to capture, rewind or give up (warm-up, capture limit, failures). Keys are built in
``_keys``, captures made in ``_capture``, replays and output hand-out done by ``_entry``.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from npu_mempool._capture import capture
from npu_mempool._counters import Counters, RecaptureReason, register
from npu_mempool._devices import GraphBackend, backend_for
from npu_mempool._entry import Entry, pool_in_use
from npu_mempool._keys import Layout
from npu_mempool._options import CaptureOptions, InputKind
from npu_mempool._pool import PoolHandle
from npu_mempool._trace import profiled, trace_capture
from npu_mempool.errors import (
    CaptureChurnWarning,
    CaptureError,
    CaptureLimitWarning,
    ConfigError,
    InputLayoutError,
)

__all__ = ["GraphRunner"]

log = logging.getLogger("npu_mempool")

_LAYOUT_ERRORS = (AttributeError, IndexError, TypeError)

#: New graphs in a row, with no replay between them, that differ only in non-tensor values: past
#: this many, the value changes on every call and each capture is wasted work.
CHURN_LIMIT = 8


class _Path:
    """One call path: a set of graphs (one per key and input addresses) in one pool.

    Path 0 uses the runner's pool (or the shared one of mode 1). A call whose graph on every
    earlier path is busy (its outputs, or outputs of another graph of the same pool, are still
    in use) takes the next path, which has a pool of its own, so no call overwrites memory a live
    tensor uses (see [Note: output liveness] in ``_outputs``).
    """

    def __init__(self, pool: PoolHandle | None, rewinds: bool) -> None:
        self.pool = pool
        self.rewinds = rewinds
        self.entries: dict[Hashable, list[Entry]] = {}

    def graphs(self) -> int:
        return sum(map(len, self.entries.values()))

    def free(self) -> None:
        for entries in self.entries.values():
            for entry in entries:
                entry.discard()
        self.entries.clear()


class GraphRunner:
    """Capture a callable into device graphs, one per graph key, and replay them.

    The graph key is made of the number of arguments, the shapes and dtypes of the USER and
    MUTATED tensor arguments (and the strides of MUTATED ones, which are used in place), and the
    values and types of the non-tensor arguments (SymInt values). A hit copies the user inputs
    into the static buffers with one batched ``torch._foreach_copy_`` and replays the graph; a
    miss captures a new graph (rewinding the pool first in mode 2).

    Memory a live tensor uses is never handed out again: an output the caller still holds (or a
    view of it) is not overwritten by a later call. Such a call replays (or captures) the graph on
    another call path, with a pool of its own; a rewind (mode 2) waits until no output of the pool
    is held. Calls from several threads are serialised per runner, and each gets its own outputs.

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
        self._lock = pool._lock if isinstance(pool, PoolHandle) else threading.RLock()
        self._paths: list[_Path] = [_Path(options.pool, options.rewinds_pool)]
        self._specialized: dict[Hashable, Callable[..., Any]] = {}
        self._warm: dict[Hashable, int] = {}
        self._failed: set[Hashable] = set()
        # Non-tensor values of the new keys captured since the last replay (churn detection).
        self._misses: list[tuple[Hashable, tuple[Any, ...]]] = []
        self._layout: Layout | None = None
        self._eager = False

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
        return sum(path.graphs() for path in self._paths)

    @property
    def num_paths(self) -> int:
        """Call paths in use (more than one where outputs were held across calls)."""
        return len(self._paths)

    @property
    def graph_keys(self) -> tuple[Hashable, ...]:
        """Keys of the graphs currently held, in capture order (for logs and diagnostics)."""
        keys: dict[Hashable, None] = {}
        for path in self._paths:
            keys.update(dict.fromkeys(k for k, v in path.entries.items() if v))
        return tuple(keys)

    def __call__(self, *args: Any) -> Any:
        """Run ``fn(*args)``: replay its graph for this key, capturing it on first sight."""
        with self._lock:
            return self._call(args)

    def as_function(self) -> Callable[..., Any]:
        """A plain function that does what calling the runner does (it keeps the runner alive).

        For frameworks that hold one plain callable per graph (a ``torch.compile`` backend).
        """
        runner = self

        def call(*args: Any) -> Any:
            with runner._lock:
                return runner._call(args)

        call.__name__ = call.__qualname__ = self.name
        return call

    def reset(self) -> None:
        """Free every graph (and the runner's own pools); the next call captures again."""
        with self._lock:
            self._free_graphs()
            self._warm.clear()
            self._failed.clear()
            self._eager = False

    # -- dispatch ------------------------------------------------------------------------------

    def _call(self, args: tuple[Any, ...]) -> Any:
        if self._eager:
            return self._eager_call(args)
        layout = self._layout
        if layout is None:
            layout = self._layout = Layout(
                args, self._kinds, self._options.frozen_parameters, self._guarded
            )
        try:
            key = layout.key(args)
            failed = key in self._failed  # also proves the key hashable (else a layout error)
            ptrs = tuple([args[i].data_ptr() for i in layout.watched]) if layout.watched else ()
        except _LAYOUT_ERRORS as exc:
            raise self._layout_error(args) from exc
        if failed:
            return self._eager_call(args)
        for path in self._paths:
            entries = path.entries.get(key)
            found = None
            for entry in entries or ():
                if entry.ptrs == ptrs:
                    found = entry
                    break
            if found is None:
                self._check_layout(layout, args)
                return self._miss(path, key, args)
            # After a step boundary, outputs of ended steps give their memory back (_steps).
            free = not found.in_use() or found.release_stale()
            if free and not pool_in_use(found.pool, but=found):
                self._misses.clear()
                self.counters.replays += 1
                return found.replay(args)
            # Its memory is in use: try the next call path.
        return self._miss(self._new_path(), key, args)

    def _check_layout(self, layout: Layout, args: tuple[Any, ...]) -> None:
        """Slow path only: a call that found no graph is checked against the first call's layout."""
        if len(args) != layout.count or any(
            isinstance(args[i], torch.Tensor) for i in layout.scalars
        ):
            # A tensor where a value was would key a graph on the tensor's identity: one capture
            # per call until the limit. A different argument count is another signature.
            raise self._layout_error(args)

    def _new_path(self) -> _Path:
        # A pool of its own, even in mode 1: the shared pool is where the memory was busy.
        path = _Path(None, self._options.reuse_pool_across_shapes)
        self._paths.append(path)
        log.debug(
            "GraphRunner %r: outputs of earlier calls are still in use; call path %d added",
            self.name,
            len(self._paths),
        )
        return path

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

    # -- capture policy ------------------------------------------------------------------------

    def _miss(self, path: _Path, key: Hashable, args: tuple[Any, ...]) -> Any:
        """Capture a graph for ``key`` on ``path`` (after warm-up and within the limit)."""
        entries = path.entries.get(key, [])
        known = any(key in p.entries for p in self._paths)
        if not known:
            seen = self._warm.get(key, 0)
            if seen < self._warmup_runs(args):
                self._warm[key] = seen + 1
                return self._eager_call(args)
            if self._churning(args):
                return self._give_up_churn(args)
        if self.num_graphs >= self._options.capture_limit:
            # Graphs captured for inputs that no longer exist free their place first.
            self._drop_dead(path, key)
            if self.num_graphs >= self._options.capture_limit:
                return self._hit_limit(args)
        reason: RecaptureReason | None = None
        if entries:
            reason = self._moved_reason(entries[0], args)
        elif path is not self._paths[0] and known:
            reason = RecaptureReason.OUTPUTS_IN_USE
        pool, backend = self._ensure_pool(path, args)
        fn = self._specialized.get(key)
        if fn is None:
            fn = self._specialize(key, args) if self._specialize is not None else self._fn
            self._specialized[key] = fn
        self._rewind(path, pool, backend)
        started = time.perf_counter()
        try:
            with profiled("npu_mempool.capture"):
                entry = capture(
                    fn=fn,
                    key=key,
                    args=args,
                    layout=self._layout_checked(),
                    options=self._options,
                    pool=pool,
                    backend=backend,
                    rewinds=path.rewinds,
                    name=self.name,
                )
        except Exception as exc:
            if pool._broken and path.pool is pool:
                log.warning(
                    "GraphRunner %r: a failed capture left its pool unusable; later graphs go "
                    "into a new pool",
                    self.name,
                )
                path.pool = None
                path.rewinds = self._options.reuse_pool_across_shapes
            return self._capture_failed(key, args, exc)
        self._report_capture(key, reason, time.perf_counter() - started, path)
        if entries:
            # Graphs of MUTATED tensors that died (a replaced KV cache) can never be right again;
            # those of other live tensors or parameter sets stay as variants.
            self._drop_dead(path, key)
        path.entries.setdefault(key, []).append(entry)
        self.counters.captures += 1
        if reason is not None:
            self.counters.recapture_reasons[reason] += 1
        if backend.executes_on_capture:
            return entry.hand_out()
        # A device capture only records: the capturing call replays once for its results. That
        # replay is part of the capture, not counted, so counters read the same on every device.
        return entry.replay(args)

    def _report_capture(self, key: Hashable, reason: str | None, seconds: float, on: _Path) -> None:
        pool = on.pool
        assert pool is not None
        path = self._paths.index(on) + 1
        log.info(
            "GraphRunner %r: captured a graph in %.3f s (%s), %d graph(s), pool %s",
            self.name,
            seconds,
            reason or "new key",
            self.num_graphs + 1,
            _size(pool.nbytes),
        )
        log.debug("GraphRunner %r: key %r on call path %d", self.name, key, path)
        trace_capture(
            lambda: {
                "runner": self.name,
                "key": repr(key),
                "reason": reason or "new_key",
                "seconds": seconds,
                "call_path": path,
                "graphs": self.num_graphs,
                "pool_bytes": pool.nbytes,
            }
        )

    def _churning(self, args: tuple[Any, ...]) -> bool:
        """Whether the last new keys differed only in a non-tensor value that keeps changing."""
        layout = self._layout_checked()
        tensors = tuple((args[i].shape, args[i].dtype) for i in layout.user + layout.mutated)
        values = tuple(args[i] for i in layout.scalars)
        if self._misses and self._misses[-1][0] != tensors:
            self._misses.clear()
        self._misses.append((tensors, values))
        return len(self._misses) > CHURN_LIMIT

    def _give_up_churn(self, args: tuple[Any, ...]) -> Any:
        layout = self._layout_checked()
        varying = [
            i
            for n, i in enumerate(layout.scalars)
            if len({repr(values[n]) for _, values in self._misses}) > 1
        ]
        warnings.warn(
            f"GraphRunner {self.name!r} captured {CHURN_LIMIT} graphs in a row that differ only "
            f"in the value of argument(s) {varying} (ints that change on every call) and never "
            "replayed one; it runs eagerly from now on. Pass such a value as a tensor, keep it "
            "out of the compiled region, or let it decide nothing but arithmetic (npu_compile "
            "then passes it to the graph as a device scalar).",
            CaptureChurnWarning,
            stacklevel=5,
        )
        self._misses.clear()
        return self._give_up(args)

    def _layout_checked(self) -> Layout:
        assert self._layout is not None
        return self._layout

    def _moved_reason(self, entry: Entry, args: tuple[Any, ...]) -> RecaptureReason:
        layout = self._layout_checked()
        now = tuple(args[i].data_ptr() for i in layout.watched)
        moved = {i for i, a, b in zip(layout.watched, now, entry.ptrs, strict=True) if a != b}
        if moved.intersection(layout.mutated):
            return RecaptureReason.MUTATED_INPUT_MOVED
        return RecaptureReason.PARAMETER_MOVED

    def _drop_dead(self, path: _Path, key: Hashable) -> None:
        entries = path.entries.get(key)
        if not entries:
            return
        for entry in [e for e in entries if not e.alive()]:
            entries.remove(entry)
            entry.discard()

    def _rewind(self, path: _Path, pool: PoolHandle, backend: GraphBackend) -> None:
        """Mode 2: return the pool to its state before the first capture, if nothing uses it."""
        if not path.rewinds:
            return
        if pool._checkpoint is None:
            if not backend.checkpoint(pool):
                log.warning(
                    "GraphRunner %r: this device has no allocator checkpoint hooks, so graphs "
                    "of different shapes will not share memory (mode 2 off)",
                    self.name,
                )
                path.rewinds = False
            return
        if pool_in_use(pool):
            # Outputs of this pool are still held: the new graph goes on top this time.
            log.debug("GraphRunner %r: pool outputs in use, capture without rewind", self.name)
            return
        if not backend.rewind(pool):
            log.warning(
                "GraphRunner %r: its graph pool holds memory that its graphs do not own (a "
                "tensor created during capture and kept alive); rewinding would free it, so "
                "graphs of different shapes no longer share memory (mode 2 off)",
                self.name,
            )
            path.rewinds = False

    def _warmup_runs(self, args: tuple[Any, ...]) -> int:
        """Eager calls before a new key is captured: the option, else the device's need."""
        if self._options.warmup_runs is not None:
            return self._options.warmup_runs
        layout = self._layout_checked()
        device = next((args[i].device for i in layout.tensors), torch.device("cpu"))
        return backend_for(device.type).default_warmup_runs

    def _hit_limit(self, args: tuple[Any, ...]) -> Any:
        warnings.warn(
            f"GraphRunner {self.name!r} reached its capture limit of "
            f"{self._options.capture_limit} graphs; its graphs are freed and it runs eagerly from "
            "now on. Pad inputs to a few shapes (bucketing), or raise the limit: "
            "CaptureOptions(capture_limit=...), which TorchAir-style configs spell "
            "debug.aclgraph.static_capture_size_limit.",
            CaptureLimitWarning,
            stacklevel=5,
        )
        return self._give_up(args)

    def _give_up(self, args: tuple[Any, ...]) -> Any:
        """Free every graph and run eagerly from now on (after the caller's one warning)."""
        self._free_graphs()
        self._eager = True
        self.counters.fallbacks += 1
        return self._eager_call(args)

    def _capture_failed(self, key: Hashable, args: tuple[Any, ...], exc: Exception) -> Any:
        message = (
            f"GraphRunner {self.name!r} could not capture the graph for key {key!r}: "
            f"{type(exc).__name__}: {exc}"
        )
        if self._options.strict:
            raise CaptureError(
                message + ". Remove what cannot be captured (host syncs such as .item(), "
                "data-dependent shapes, CPU work) or drop strict=True to run such keys eagerly."
            ) from exc
        log.warning("%s; this key runs eagerly from now on", message)
        # The key runs eagerly for every input set from now on: its graphs must not linger,
        # holding memory and counting toward capture_limit.
        for path in self._paths:
            for entry in path.entries.pop(key, []):
                entry.discard()
        self._failed.add(key)
        self.counters.fallbacks += 1
        return self._eager_call(args)

    def _free_graphs(self) -> None:
        for path in self._paths:
            path.free()
        self._paths = [_Path(self._options.pool, self._options.rewinds_pool)]
        self._specialized.clear()

    def _ensure_pool(self, path: _Path, args: tuple[Any, ...]) -> tuple[PoolHandle, GraphBackend]:
        layout = self._layout_checked()
        devices = {args[i].device for i in layout.tensors}
        if len(devices) > 1:
            raise ConfigError(
                f"GraphRunner {self.name!r} got tensors on several devices "
                f"{sorted(map(str, devices))}; "
                "a graph runs on one device: move the inputs there first"
            )
        device = devices.pop() if devices else torch.device("cpu")
        if path.pool is not None and not _same_device(path.pool.device, device):
            raise ConfigError(
                f"CaptureOptions.pool is on {path.pool.device} but the inputs are on {device}; "
                f"create the pool with graph_pool_handle({str(device)!r})"
            )
        backend = backend_for(device.type)
        if path.pool is None:
            path.pool = backend.new_pool(device)
        return path.pool, backend


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes:.2f} GiB"


def _same_device(pool: torch.device, tensors: torch.device) -> bool:
    # "cuda" (no index) names the current device; only a mismatch of explicit indices is wrong.
    if pool.type != tensors.type:
        return False
    explicit: tuple[int | None, int | None] = (pool.index, tensors.index)
    return None in explicit or explicit[0] == explicit[1]


def _pool_bytes_of(runner: GraphRunner | None) -> int:
    if runner is None:
        return 0
    pools = {id(p.pool): p.pool for p in runner._paths if p.pool is not None}
    return sum(pool.nbytes for pool in pools.values())
