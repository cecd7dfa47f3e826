"""GraphRunner: capture a callable once per graph key, then answer calls by replaying it."""

from __future__ import annotations

import itertools
import logging
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from npu_mempool._counters import Counters, counters
from npu_mempool._device import EmulatedGraph, GraphBackend, backend_for
from npu_mempool._options import CaptureOptions, InputKind
from npu_mempool._pool import PoolHandle
from npu_mempool._stale import Epoch, guard
from npu_mempool.errors import CaptureError, CaptureLimitWarning, InputLayoutError, OptionsError

__all__ = ["GraphRunner"]

log = logging.getLogger("npu_mempool")

_NO_KEY = object()  # key of every call before the argument layout is known


class _Layout:
    """Which positional argument is what, fixed at the first call."""

    def __init__(
        self,
        args: tuple[Any, ...],
        kinds: Sequence[InputKind] | None,
        frozen: bool,
        guarded: Sequence[bool] | None,
    ):
        if guarded is not None and len(guarded) != len(args):
            raise InputLayoutError(
                f"guarded names {len(guarded)} argument(s) but the call passed {len(args)}; "
                "give one flag per positional argument"
            )
        self.guarded = [bool(g) for g in guarded] if guarded is not None else [False] * len(args)
        if kinds is None:
            kinds = [InputKind.USER] * len(args)
        if len(kinds) != len(args):
            raise InputLayoutError(
                f"input_kinds names {len(kinds)} argument(s) but the call passed {len(args)}; "
                "give one InputKind per positional argument"
            )
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.count = len(args)
        self.tensors = tensors
        self.user = [i for i in tensors if kinds[i] is InputKind.USER]
        self.mutated = [i for i in tensors if kinds[i] is InputKind.MUTATED]
        self.params = [i for i in tensors if kinds[i] is InputKind.PARAMETER]
        self.scalars = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        # Addresses checked on every call: mutated inputs always, parameters unless frozen.
        self.watched = sorted(self.mutated + ([] if frozen else self.params))
        self.key = self._key_function()

    def _key_function(self) -> Callable[[tuple[Any, ...]], Hashable]:
        # Parameter shapes cannot change without their address changing, so only user and
        # mutated inputs (and non-tensor values such as SymInts) make up the key. A graph is
        # only valid for the dtypes it was captured with, and the batched input copy would
        # silently cast another dtype into the static buffer, so dtypes are part of the key. A
        # mutated input is used in place: the same address seen through other strides (a
        # transposed view) needs its own graph. The argument count is part of the key so that
        # an extra argument is never silently ignored, and the types of non-tensor values too:
        # ``1``, ``1.0`` and ``True`` compare equal but do not give the same graph.
        # Generated once per runner: a flat tuple expression, the cheapest key Python can build
        # (about as fast as the shape alone; map/unpacking over pickers costs several times more).
        # Arguments the caller guards itself (Dynamo checks shapes, dtypes and strides of a
        # graph compiled with static shapes before calling it) stay out of the key; with every
        # argument guarded the key is a constant and a call computes nothing.
        mutated = set(self.mutated)
        parts = [] if all(self.guarded) else ["len(a)"]
        for i in sorted(self.user + self.mutated):
            if self.guarded[i]:
                continue
            parts += [f"a[{i}].shape", f"a[{i}].dtype"]
            if i in mutated:
                parts.append(f"a[{i}].stride()")
        for i in self.scalars:
            if not self.guarded[i]:
                parts += [f"a[{i}]", f"type(a[{i}])"]
        # The source is built from integer indices only: nothing user-controlled is evaluated.
        self.key_source = f"({', '.join(parts)},)" if parts else "()"
        key: Callable[[tuple[Any, ...]], Hashable] = eval(
            f"lambda a: {self.key_source}", {"len": len, "type": type}
        )
        return key


class _Output:
    """How to turn static output leaves into the container the callable returned."""

    def __init__(self, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            self.kind = "tensor"
            self.leaves: list[Any] = [out]
            self.spec: TreeSpec | None = None
        elif type(out) in (tuple, list) and not any(
            isinstance(v, (tuple, list, dict)) for v in out
        ):
            self.kind = type(out).__name__
            self.leaves = list(out)
            self.spec = None
        else:
            self.kind = "tree"
            self.leaves, self.spec = tree_flatten(out)

    def flatten(self) -> Callable[[Any], Sequence[Any]]:
        if self.kind == "tensor":
            return lambda out: (out,)
        if self.kind in ("tuple", "list"):
            # Already an indexable sequence of leaves: no per-replay copy into a list.
            return lambda out: out
        return lambda out: tree_flatten(out)[0]

    def build(self, leaves: list[Any]) -> Any:
        if self.kind == "tensor":
            return leaves[0]
        if self.kind == "tuple":
            return tuple(leaves)
        if self.kind == "list":
            return list(leaves)
        assert self.spec is not None
        return tree_unflatten(leaves, self.spec)


class _Entry:
    """One captured graph and what its replay path needs, prepared once."""

    __slots__ = ("epoch", "first_result", "graph", "key", "ptrs", "run", "storages")

    def __init__(
        self,
        key: Hashable,
        graph: Any,
        ptrs: tuple[int, ...],
        epoch: Epoch,
        storages: tuple[StorageWeakRef, ...] | None,
    ) -> None:
        self.epoch = epoch
        self.key = key
        self.graph = graph
        self.ptrs = ptrs
        # The storages of the MUTATED inputs at capture, held weakly: while they all live, the
        # graph still serves the caller's tensors; once one died, the graph is stale. None:
        # liveness cannot tell (an output pins a MUTATED input).
        self.storages = storages
        self.run: Callable[[tuple[Any, ...]], Any] = lambda args: None
        self.first_result: Callable[[], Any] = lambda: None

    def discard(self) -> None:
        """Free the graph; outputs handed out from it become stale (and, soon, their memory)."""
        self.epoch.value += 1
        self.graph.reset()


class GraphRunner:
    """Capture a callable into device graphs, one per graph key, and replay them.

    The graph key is made of the number of arguments, the shapes and dtypes of the USER and
    MUTATED tensor arguments (and the strides of MUTATED ones, which are used in place), and the
    values and types of the non-tensor arguments (SymInt values). A call looks its key up in one
    dict; a hit copies the user inputs into the static buffers with one batched
    ``torch._foreach_copy_`` and replays the graph; a miss captures a new graph (rewinding the
    pool first in mode 2).

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
            shapes. Guarded arguments are left out of the graph key; with all of them guarded,
            finding the graph costs nothing. Default: none.
        step: Returns the identity of the current step (Dynamo's generation counter, which
            moves on each top-level call of a compiled model). The n-th call within one step
            replays graphs of its own (call path n, in a pool of its own), so an output of an
            earlier call in the same step, such as a block with a graph break called twice in
            one ``forward``, is never overwritten by a later one. ``None``: every call shares
            one set of graphs.

    Inference only: captures and emulated replays run without autograd.

    Example:
        >>> runner = GraphRunner(model_step, input_kinds=[InputKind.USER, InputKind.MUTATED])
        >>> logits = runner(tokens, kv_cache)  # doctest: +SKIP
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
        step: Callable[[], Hashable] | None = None,
    ) -> None:
        self._fn = fn
        self._step = step
        # [the last step seen, calls made in it so far]; path n > 0 is the runner _paths[n].
        self._in_step: list[Any] = [object(), 0]
        self._paths: dict[int, GraphRunner] = {}
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
        self._options = options
        self._specialize = specialize
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        # Function-like: wrappers that read ``__name__`` on every call (Dynamo's ``disable``
        # does) would otherwise raise and swallow an AttributeError per call.
        self.__name__ = self.__qualname__ = self.name
        # A weak reference: replay closures hold the counters, and a cycle back to the runner
        # would keep its device memory alive until the garbage collector runs.
        this = weakref.ref(self)
        self.counters = Counters(pool_bytes=lambda: _pool_bytes_of(this()))

        def miss(args: tuple[Any, ...]) -> Any:
            runner = this()
            assert runner is not None, "a replay path outlived its runner"
            return runner._miss(args)

        # What a replay path calls when its address check fails; weak for the same reason.
        self._weak_miss = miss
        # Functions made by as_function(), told when the key function changes.
        self._functions: list[weakref.ref[Callable[..., Any]]] = []
        self._graphs: dict[Hashable, Callable[[tuple[Any, ...]], Any]] = {}
        self._entries: dict[Hashable, _Entry] = {}
        # Graphs of a key captured for other parameter addresses (two module instances sharing
        # one FX graph): kept so that switching back replays instead of recapturing.
        self._variants: dict[Hashable, list[_Entry]] = {}
        self._specialized: dict[Hashable, Callable[..., Any]] = {}
        self._warm: dict[Hashable, int] = {}
        self._layout: _Layout | None = None
        self._key: Callable[[tuple[Any, ...]], Hashable] = lambda args: _NO_KEY
        self._pool: PoolHandle | None = options.pool
        self._backend: GraphBackend | None = None
        self._rewinds = options.rewinds_pool
        self._epoch = Epoch()  # replay counter of the runner's pool (mode 2 outputs alias)
        self._eager = False

    @property
    def options(self) -> CaptureOptions:
        """The options this runner was built with."""
        return self._options

    @property
    def pool(self) -> PoolHandle | None:
        """The pool graphs are captured into (``None`` before the first capture)."""
        return self._pool

    @property
    def num_graphs(self) -> int:
        """Graphs currently held, with parameter-set variants and later call paths' graphs."""
        return self._own_graphs() + sum(p.num_graphs for p in self._paths.values())

    def _own_graphs(self) -> int:
        return len(self._entries) + sum(map(len, self._variants.values()))

    @property
    def graph_keys(self) -> tuple[Hashable, ...]:
        """Keys of the graphs currently held, in capture order (for logs and diagnostics)."""
        return tuple(self._entries)

    def __call__(self, *args: Any) -> Any:
        """Run ``fn(*args)``: replay its graph for this key, capturing it on first sight."""
        if self._step is not None:
            step = self._step()
            if step == self._in_step[0]:
                return self._later_path(args)
            self._in_step[0], self._in_step[1] = step, 0
        try:
            run = self._graphs.get(self._key(args), self._miss)
        except (AttributeError, IndexError, TypeError):
            run = self._miss  # raises the layout error
        return run(args)

    def as_function(self) -> Callable[..., Any]:
        """A plain function that does what calling the runner does, at a lower cost per call.

        For frameworks that hold one callable per graph and call it in a hot loop (a
        ``torch.compile`` backend): it saves the bound-method call of ``__call__`` and, where
        the key is known when it is made (every argument ``guarded``, or after the first call),
        the call of the key function. The function keeps the runner alive.
        """
        namespace: dict[str, Any] = {
            "get": self._graphs.get,
            "miss": self._miss,
            "key": self._key,
            "errors": (AttributeError, IndexError, TypeError),
            "len": len,
            "type": type,
            "step": self._step,
            "in_step": self._in_step,
            "later_path": self._later_path,
        }
        if self._layout is not None:
            key = self._layout.key_source
        elif self._guarded is not None and all(self._guarded):
            key = "()"
        else:
            key = "key(a)"  # until the first call fixes the layout; see _miss
        # With a step function, a call that is not the first of its step takes its own path.
        steps = (
            "    s = step()\n"
            "    if s == in_step[0]:\n"
            "        return later_path(a)\n"
            "    in_step[0] = s\n"
            "    in_step[1] = 0\n"
        )
        source = (
            "def call(*a):\n"
            f"{steps if self._step is not None else ''}"
            "    try:\n"
            f"        run = get({key}, miss)\n"
            "    except errors:\n"
            "        run = miss  # raises the layout error\n"
            "    return run(a)\n"
        )
        exec(source, namespace)  # a fixed source around the layout's key (integer indices only)
        function: Callable[..., Any] = namespace.pop("call")
        function.__name__ = function.__qualname__ = self.name
        self._functions.append(weakref.ref(function))
        return function

    def reset(self) -> None:
        """Free every graph (and the runner's own pool); the next call captures again."""
        for path in self._paths.values():
            path.reset()
        self._paths.clear()
        self._free_graphs()
        self._warm.clear()
        self._eager = False
        self._rewinds = self._options.rewinds_pool

    # -- slow path ---------------------------------------------------------------------------

    def _later_path(self, args: tuple[Any, ...]) -> Any:
        """A second (third, ...) call within one step: replay the graphs of that call path."""
        self._in_step[1] += 1
        index = self._in_step[1]
        path = self._paths.get(index)
        if path is None:
            # Same callable and policy; its own graphs and (unless a shared pool was given) its
            # own pool, so this call's outputs and the earlier calls' never share memory.
            path = GraphRunner(
                self._fn,
                input_kinds=self._kinds,
                options=self._options,
                specialize=self._specialize,
                name=f"{self.name}[call {index + 1} of a step]",
                guarded=self._guarded,
            )
            path.counters = self.counters  # one set of counters per compiled graph
            self._paths[index] = path
        return path(*args)

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
        counters.eager_calls += 1
        return self._fn(*args)

    def _miss(self, args: tuple[Any, ...]) -> Any:
        if self._eager:
            return self._eager_call(args)
        if self._layout is None:
            self._layout = _Layout(
                args, self._kinds, self._options.frozen_parameters, self._guarded
            )
            self._key = self._layout.key
            for ref in self._functions:
                function = ref()
                if function is not None:
                    function.__globals__["key"] = self._key
        try:
            key = self._key(args)
            hash(key)
        except (AttributeError, IndexError, TypeError) as exc:
            raise self._layout_error(args) from exc
        layout = self._layout
        if len(args) != layout.count or any(
            isinstance(args[i], torch.Tensor) for i in layout.scalars
        ):
            # A tensor where a value was would key a graph on the tensor's identity: one capture
            # per call until the limit. A different argument count is another signature.
            raise self._layout_error(args)
        old = self._entries.get(key)
        reason = None
        keep = False
        if old is not None:
            reason = self._moved(old, args)
            # Another parameter set, or other MUTATED tensors while the captured ones still live
            # (two model instances, each with its KV cache): keep the old graph as a variant, so
            # that alternating replays. A MUTATED tensor that died was replaced: its graph goes.
            keep = reason == "parameter_moved" or _alive(old)
            if keep:
                variant = self._switch_variant(key, old, args)
                if variant is not None:
                    return variant.run(args)
                if self._own_graphs() >= self._options.capture_limit:
                    return self._hit_limit(args)
        else:
            cached = self._graphs.get(key)
            if cached is not None:  # a key whose capture failed: eager for good
                return cached(args)
            seen = self._warm.get(key, 0)
            if seen < self._warmup_runs(args):
                self._warm[key] = seen + 1
                return self._eager_call(args)
            if self._own_graphs() >= self._options.capture_limit:
                return self._hit_limit(args)
        # Configuration errors are the caller's to fix, never a reason to fall back silently.
        pool, backend = self._ensure_pool(args)
        try:
            entry = self._capture(key, args, pool, backend)
        except Exception as exc:
            return self._capture_failed(key, args, exc)
        if old is not None:
            if keep:
                self._variants.setdefault(key, []).append(old)
            else:
                old.discard()
            self.counters.recapture_reasons[reason or "unknown"] += 1
            counters.recapture_reasons[reason or "unknown"] += 1
        self._entries[key] = entry
        self._graphs[key] = entry.run
        self.counters.captures += 1
        counters.captures += 1
        return entry.first_result() if self._executes_on_capture() else entry.run(args)

    def _warmup_runs(self, args: tuple[Any, ...]) -> int:
        """Eager calls before a new key is captured: the option, else the device's need."""
        if self._options.warmup_runs is not None:
            return self._options.warmup_runs
        assert self._layout is not None
        device = next((args[i].device for i in self._layout.tensors), torch.device("cpu"))
        return backend_for(device.type).default_warmup_runs

    def _executes_on_capture(self) -> bool:
        assert self._backend is not None
        return self._backend.executes_on_capture

    def _watched_ptrs(self, args: tuple[Any, ...]) -> tuple[int, ...]:
        """Addresses of the inputs whose address a graph depends on (slow path only)."""
        assert self._layout is not None
        return tuple(args[i].data_ptr() for i in self._layout.watched)

    def _moved(self, entry: _Entry, args: tuple[Any, ...]) -> str:
        layout = self._layout
        assert layout is not None
        pairs = zip(layout.watched, self._watched_ptrs(args), entry.ptrs, strict=True)
        moved = {i for i, now, then in pairs if now != then}
        return "mutated_input_moved" if moved.intersection(layout.mutated) else "parameter_moved"

    def _switch_variant(
        self, key: Hashable, current: _Entry, args: tuple[Any, ...]
    ) -> _Entry | None:
        """Make the graph captured for these parameter addresses the key's active one, if any."""
        variants = self._variants.get(key)
        if not variants:
            return None
        for stale in [v for v in variants if not _alive(v)]:
            variants.remove(stale)  # its KV cache died: it can never be right again
            stale.discard()
        now = self._watched_ptrs(args)
        for index, variant in enumerate(variants):
            if variant.ptrs == now:
                variants[index] = current
                self._entries[key] = variant
                self._graphs[key] = variant.run
                return variant
        return None

    def _hit_limit(self, args: tuple[Any, ...]) -> Any:
        warnings.warn(
            f"GraphRunner {self.name!r} reached its capture limit of "
            f"{self._options.capture_limit} graphs; its graphs are freed and it runs eagerly from "
            "now on. Pad inputs to a few shapes (bucketing), or raise the limit: "
            "CaptureOptions(capture_limit=...), which TorchAir-style configs spell "
            "debug.aclgraph.static_capture_size_limit.",
            CaptureLimitWarning,
            stacklevel=3,
        )
        self._fall_back()
        return self._eager_call(args)

    def _fall_back(self) -> None:
        self._free_graphs()
        self._eager = True
        self.counters.fallbacks += 1
        counters.fallbacks += 1

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
        # A failed recapture: the key runs eagerly for every parameter set from now on, so its
        # graphs (the active one and those kept for other parameter addresses) must not linger,
        # holding memory and counting toward capture_limit.
        stale = self._variants.pop(key, [])
        old = self._entries.pop(key, None)
        if old is not None:
            stale.append(old)
        for entry in stale:
            entry.discard()
        self.counters.fallbacks += 1
        counters.fallbacks += 1
        self._graphs[key] = _eager(self._fn, self.counters)
        return self._eager_call(args)

    def _free_graphs(self) -> None:
        for entry in [*self._entries.values(), *itertools.chain(*self._variants.values())]:
            entry.discard()
        self._entries.clear()
        self._variants.clear()
        self._graphs.clear()
        self._specialized.clear()
        if self._options.pool is None:
            self._pool = None  # the runner's own pool goes with its graphs

    # -- capture -----------------------------------------------------------------------------

    def _ensure_pool(self, args: tuple[Any, ...]) -> tuple[PoolHandle, GraphBackend]:
        assert self._layout is not None
        devices = {args[i].device for i in self._layout.tensors}
        if len(devices) > 1:
            raise OptionsError(
                f"GraphRunner {self.name!r} got tensors on several devices "
                f"{sorted(map(str, devices))}; "
                "a graph runs on one device: move the inputs there first"
            )
        device = devices.pop() if devices else torch.device("cpu")
        if self._pool is not None and not _same_device(self._pool.device, device):
            raise OptionsError(
                f"CaptureOptions.pool is on {self._pool.device} but the inputs are on {device}; "
                f"create the pool with graph_pool_handle({str(device)!r})"
            )
        backend = backend_for(device.type)
        if self._pool is None:
            self._pool = backend.new_pool(device)
        self._backend = backend
        return self._pool, backend

    def _capture(
        self, key: Hashable, args: tuple[Any, ...], pool: PoolHandle, backend: GraphBackend
    ) -> _Entry:
        layout = self._layout
        assert layout is not None
        options = self._options
        fn = self._specialized.get(key)
        if fn is None:
            fn = self._specialize(key, args) if self._specialize is not None else self._fn
            self._specialized[key] = fn

        if self._rewinds:
            if pool._checkpoint is None:
                if not backend.checkpoint(pool):
                    log.warning(
                        "GraphRunner %r: this device has no allocator checkpoint hooks, so graphs "
                        "of different shapes will not share memory (mode 2 off)",
                        self.name,
                    )
                    self._rewinds = False
            elif not backend.rewind(pool):
                log.warning(
                    "GraphRunner %r: its graph pool holds memory that its graphs do not own (a "
                    "tensor created during capture and kept alive); rewinding would free it, so "
                    "graphs of different shapes no longer share memory (mode 2 off)",
                    self.name,
                )
                self._rewinds = False

        static_args = list(args)
        structure: list[_Output] = []
        writes_user: list[bool] = []

        def body(static_like: Callable[[torch.Tensor], torch.Tensor]) -> Any:
            for i in layout.user:
                # Without clone_input the caller's tensor is captured and later inputs are copied
                # into it, which is impossible where its elements share memory (an expanded
                # tensor): such an input gets a pool buffer as with clone_input.
                if options.clone_input or torch._debug_has_internal_overlap(args[i]) == 1:
                    static_args[i] = static_like(args[i])
            versions = [static_args[i]._version for i in layout.user]
            out = fn(*static_args)
            # Whether the callable writes into an input it was given as USER (its static copy
            # on a device): the emulated replay may read the caller's tensors only if it does not.
            writes_user[:] = [
                static_args[i]._version != v for i, v in zip(layout.user, versions, strict=True)
            ]
            shape = _Output(out)
            structure.append(shape)
            inputs = [static_args[i] for i in layout.tensors]
            if shape.kind in ("tuple", "list"):
                rerun: Callable[[], Sequence[Any]] = lambda: fn(*static_args)  # noqa: E731
            else:
                flatten = shape.flatten()
                rerun = lambda: flatten(fn(*static_args))  # noqa: E731
            return shape.leaves, rerun, inputs

        graph, static_leaves = backend.capture(pool, body)
        shape = structure[0]

        caller_storages = {
            args[i].untyped_storage()._cdata for i in layout.tensors if static_args[i] is args[i]
        }
        # Outputs in pool memory: they are what a later replay can overwrite.
        owned = [
            isinstance(leaf, torch.Tensor) and leaf.untyped_storage()._cdata not in caller_storages
            for leaf in static_leaves
        ]
        if self._rewinds:
            pool._owned.extend(t for t, mine in zip(static_leaves, owned, strict=True) if mine)
            pool._owned.extend(static_args[i] for i in layout.user if static_args[i] is not args[i])

        ptrs = self._watched_ptrs(args)
        # Decided by the option, not by whether rewinding still works: once the pool was rewound,
        # later graphs may land on memory of earlier ones even without further rewinds.
        epoch = self._epoch if self._options.rewinds_pool else Epoch()
        # Without rewinds, graphs still share the pool (the runner's own, or the custom pool of
        # mode 1 with other runners): a later capture may place its outputs on memory an earlier
        # graph freed at the end of its capture (its intermediates), so replaying the earlier
        # graph overwrites them. The check marks outputs of every graph captured since as stale.
        captured, start = [epoch], 0
        if options.check_output_overwrite and not self._options.rewinds_pool:
            captured, start = pool._captured, len(pool._captured)
            captured.append(epoch)
        # An output that is a MUTATED input (or a view of it) keeps that tensor alive through
        # the runner, so its liveness says nothing: such a graph is replaced, never kept.
        mutated = {args[i].untyped_storage()._cdata for i in layout.mutated}
        pinned = any(
            isinstance(leaf, torch.Tensor) and leaf.untyped_storage()._cdata in mutated
            for leaf in static_leaves
        )
        storages = None if pinned else tuple(_storage_ref(args[i]) for i in layout.mutated)
        entry = _Entry(key, graph, ptrs, epoch, storages)
        self._build_run(
            entry, fn, shape, static_leaves, owned, static_args, captured, start, any(writes_user)
        )
        if isinstance(graph, EmulatedGraph) and graph.inline_copies is not None:
            # The generated path passes the call's own tensors for watched inputs; the graph
            # must not keep the captured ones alive (a device graph keeps no tensor alive).
            for i in layout.watched:
                static_args[i] = None
            graph.forget_rerun()
        return entry

    def _build_run(
        self,
        entry: _Entry,
        fn: Callable[..., Any],
        shape: _Output,
        static_leaves: list[Any],
        owned: list[bool],
        static_args: list[Any],
        captured: list[Epoch],
        start: int,
        writes_user: bool,
    ) -> None:
        """Prepare everything the replay path needs, so a call only copies, replays, returns."""
        layout = self._layout
        assert layout is not None
        options = self._options
        epoch = entry.epoch
        replay = entry.graph.replay
        mine = self.counters
        total = counters

        ptrs = entry.ptrs
        dst = [static_args[i] for i in layout.user]
        clone_input = options.clone_input

        where = f"GraphRunner {self.name!r} (graph key {entry.key!r})"
        check = options.check_output_overwrite
        finish: Callable[[], Any]
        result = shape.build(static_leaves)
        constant = False
        if options.clone_output or check:
            wrap: list[Callable[[Any], Any] | None] = []
            for index, in_pool in enumerate(owned):
                if not in_pool:
                    wrap.append(None)
                elif options.clone_output:
                    wrap.append(torch.Tensor.clone)
                else:
                    wrap.append(_guarder(epoch, f"output {index} of {where}"))
            pairs = list(zip(static_leaves, wrap, strict=True))
            build = shape.build

            def finish() -> Any:
                if check:
                    # Every output handed out before this call is now stale, and so are those of
                    # graphs captured later into this pool (see _capture).
                    for stale in itertools.islice(captured, start, None):
                        stale.value += 1
                return build([leaf if f is None else f(leaf) for leaf, f in pairs])

        elif shape.kind == "list":
            # A fresh list per call: the caller may mutate it.
            def finish() -> Any:
                return list(result)

        elif shape.kind == "tree":
            build = shape.build

            def finish() -> Any:
                return build(static_leaves)

        else:  # a tensor or a tuple: the same immutable object every call
            constant = True

            def finish() -> Any:
                return result

        entry.run = _generate_run(
            watched=[(i, ptr) for i, ptr in zip(layout.watched, ptrs, strict=True)],
            user=layout.user,
            dst=dst,
            clone_input=clone_input,
            replay=replay,
            inline=entry.graph.inline_copies,
            fn=fn,
            static_args=tuple(static_args),
            # The emulated replay may run on the caller's USER tensors (see _generate_run) when
            # that cannot be told apart from running on the static copies.
            read_callers=clone_input and constant and not writes_user,
            strides=[(i, static_args[i].stride()) for i in layout.user if not layout.guarded[i]],
            output_kind=shape.kind,
            miss=self._weak_miss,
            flatten=shape.flatten(),
            counters=(mine, total),
            result=result if constant else None,
            finish=None if constant else finish,
        )
        entry.first_result = finish


def _generate_run(
    *,
    watched: list[tuple[int, int]],
    user: list[int],
    dst: list[torch.Tensor],
    clone_input: bool,
    replay: Callable[[], None],
    inline: tuple[list[torch.Tensor], tuple[int, ...]] | None,
    fn: Callable[..., Any],
    static_args: tuple[Any, ...],
    read_callers: bool,
    strides: list[tuple[int, tuple[int, ...]]],
    output_kind: str,
    miss: Callable[[tuple[Any, ...]], Any],
    flatten: Callable[[Any], Sequence[Any]],
    counters: tuple[Counters, Counters],
    result: Any,
    finish: Callable[[], Any] | None,
) -> Callable[[tuple[Any, ...]], Any]:
    """Write one graph's replay path as a single straight-line function.

    The replay path is the per-call price of reduce-overhead, and on a small step it is made of
    Python frames and op dispatches more than of work: a closure per stage (address check, input
    picker, replay, re-run, output picker) costs several microseconds. Generated once per
    captured graph, the function indexes the arguments at literal positions, compares watched
    addresses with literal values and, for an emulated graph, inlines the re-run and its batched
    output copy. The source is made of integers and fixed names only; every object it uses comes
    in through its namespace.

    Returns:
        ``run(args)``: the graph's output; where a watched address moved, what ``miss(args)``
        (the runner's slow path) returns.
    """
    namespace: dict[str, Any] = {
        "miss": miss,
        "copy": torch._foreach_copy_,
        "copy_moved": _copy_moved,
        "dst": dst,
        "replay": replay,
        "mine": counters[0],
        "total": counters[1],
        "result": result,
        "finish": finish,
    }
    lines = ["def run(a):"]
    if watched:
        namespace.update({f"p{i}": ptr for i, ptr in watched})
        checks = " or ".join(f"a[{i}].data_ptr() != p{i}" for i, _ in watched)
        lines += [f"    if {checks}:", "        return miss(a)"]
    picked_user = "".join(f"a[{i}], " for i in user)
    copy_in = [f"{'copy' if clone_input else 'copy_moved'}(dst, ({picked_user}))"] if user else []
    if inline is None:
        body = [*copy_in, "replay()"]
    else:
        # An emulated graph: what EmulatedGraph.replay does, inlined. The re-run receives the
        # static copies of the USER inputs and, for watched inputs (mutated ones, parameters
        # unless frozen), the call's own tensors: they passed the address check, so they are the
        # captured memory, and the graph keeps no reference to them, as a device graph keeps
        # none (a replaced KV cache must be free to die). Under autograd it runs without
        # recording, as a replay does.
        targets, sources = inline
        namespace.update(fn=fn, no_grad=torch.no_grad, grad_enabled=torch.is_grad_enabled)
        namespace.update(out_dst=targets, flatten=flatten)
        live = {i for i, _ in watched}
        namespace.update({f"s{i}": v for i, v in enumerate(static_args) if i not in live})
        picked_out = "".join(f"out[{i}], " for i in sources)
        wrap = {"tensor": "({},)", "tree": "flatten({})"}.get(output_kind, "{}")
        count = len(static_args)
        statics = ", ".join(f"a[{i}]" if i in live else f"s{i}" for i in range(count))
        callers = ", ".join(f"a[{i}]" if i in live or i in user else f"s{i}" for i in range(count))
        slow = [*copy_in, "with no_grad():", f"    out = {wrap.format(f'fn({statics})')}"]
        slow += [f"copy(out_dst, ({picked_out}))"] if sources else []
        if read_callers and user:
            # Run on the caller's USER tensors too, then copy them into the static inputs in
            # the same batched copy as the outputs (inputs first: an input may be an output of
            # the previous replay). Nothing tells this apart from copying first: the callable
            # writes none of them (checked at capture) and their strides are the static
            # copies' (guarded by the caller, or checked here). It saves an op dispatch per
            # replay, the largest share of the emulation's cost on a small step.
            namespace["io_dst"] = dst + targets
            namespace.update({f"t{i}": stride for i, stride in strides})
            condition = " or ".join(
                ["grad_enabled()", *(f"a[{i}].stride() != t{i}" for i, _ in strides)]
            )
            fast = [
                f"out = {wrap.format(f'fn({callers})')}",
                f"copy(io_dst, ({picked_user}{picked_out}))",
            ]
        else:
            condition = "grad_enabled()"
            rerun = wrap.format(f"fn({statics})")
            fast = [*copy_in, f"out = {rerun}"]
            fast += [f"copy(out_dst, ({picked_out}))"] if sources else []
        body = [
            f"if {condition}:",
            *(f"    {line}" for line in slow),
            "else:",
            *(f"    {line}" for line in fast),
        ]
    lines += [f"    {line}" for line in body]
    lines += ["    mine.replays += 1", "    total.replays += 1"]
    lines.append("    return result" if finish is None else "    return finish()")
    exec("\n".join(lines), namespace)  # integers and fixed names only, see above
    # Popped: left in its own globals, the function would form a cycle only the GC can free.
    run: Callable[[tuple[Any, ...]], Any] = namespace.pop("run")
    return run


def _storage_ref(tensor: torch.Tensor) -> StorageWeakRef:
    """A weak reference to the tensor's storage (alive as long as any view of it is)."""
    return StorageWeakRef(tensor.untyped_storage())  # type: ignore[no-untyped-call]


def _alive(entry: _Entry) -> bool:
    """Whether every MUTATED tensor the entry was captured with still exists."""
    if entry.storages is None:
        return False
    return not any(storage.expired() for storage in entry.storages)  # type: ignore[no-untyped-call]


def _same_device(pool: torch.device, tensors: torch.device) -> bool:
    # "cuda" (no index) names the current device; only a mismatch of explicit indices is wrong.
    if pool.type != tensors.type:
        return False
    explicit: tuple[int | None, int | None] = (pool.index, tensors.index)
    return None in explicit or explicit[0] == explicit[1]


def _eager(fn: Callable[..., Any], mine: Counters) -> Callable[[tuple[Any, ...]], Any]:
    def run(args: tuple[Any, ...]) -> Any:
        mine.eager_calls += 1
        counters.eager_calls += 1
        return fn(*args)

    return run


def _pool_bytes_of(runner: GraphRunner | None) -> int:
    if runner is None:
        return 0
    pools = {id(p): p for p in [runner.pool, *(path.pool for path in runner._paths.values())]}
    return sum(pool.nbytes for pool in pools.values() if pool is not None)


def _guarder(epoch: Epoch, where: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda tensor: guard(tensor, epoch, where)


def _copy_moved(dst: list[torch.Tensor], src: tuple[torch.Tensor, ...]) -> None:
    """clone_input=False: copy only the inputs that are not the captured tensors themselves."""
    moved = [(d, s) for d, s in zip(dst, src, strict=True) if d.data_ptr() != s.data_ptr()]
    if moved:
        torch._foreach_copy_([d for d, _ in moved], [s for _, s in moved])
