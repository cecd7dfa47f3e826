"""StaticKernelCompiler: record, build or load, install, per new graph key."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from npu_static_kernel import _device
from npu_static_kernel._cache import ArtifactCache, CacheEntry, now
from npu_static_kernel._distributed import NodeRole, resolve_node_role, take_disabled_warning
from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder, path_of
from npu_static_kernel._record import OpStatistics, record_op_statistics
from npu_static_kernel._version import __version__
from npu_static_kernel.errors import (
    BuildError,
    CacheError,
    CacheFallbackWarning,
    ConfigError,
    NpuStaticKernelError,
    StaticKernelDisabledWarning,
    StaticKernelFallbackWarning,
)

__all__ = [
    "FALLBACK_DIR_ENV",
    "StaticKernelCompiler",
    "StaticKernelCounters",
    "compute_key",
    "default_builder",
    "default_fallback_dir",
    "first_error_line",
]

logger = logging.getLogger("npu_static_kernel")

# Graph constants up to this many elements are hashed by value (they may be baked into compiled
# code); larger ones by metadata only, to keep hashing cheap.
_HASHED_CONSTANT_NUMEL = 1 << 16

FALLBACK_DIR_ENV = "NPU_STATIC_KERNEL_FALLBACK_DIR"

# (build dir, fallback dir) pairs already warned about in this process: one warning each.
_warned_read_only: set[tuple[Path, Path]] = set()
# Build directories whose lost static kernels were warned about in this process: one each.
_warned_fallback: set[Path] = set()


def default_fallback_dir() -> Path:
    """Where to build when the build directory is read-only.

    Returns:
        ``$NPU_STATIC_KERNEL_FALLBACK_DIR`` if set, else ``$XDG_CACHE_HOME/npu_static_kernel``
        (``~/.cache/npu_static_kernel`` without ``XDG_CACHE_HOME``).
    """
    configured = os.environ.get(FALLBACK_DIR_ENV)
    if configured:
        return path_of(configured, FALLBACK_DIR_ENV).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return path_of(base).absolute() / "npu_static_kernel"


@dataclass
class StaticKernelCounters:
    """What a :class:`StaticKernelCompiler` did, for tests and logs.

    Attributes:
        records: Op statistics recordings written.
        builds: Artifacts built by this process.
        hits: Artifacts found on disk (built by another process or an earlier run).
        installs: Artifacts installed by this process (node leader only).
        loads: Artifacts loaded (every process, once per key).
        fallbacks: Graph keys that run without static kernels (with a logged reason).
    """

    records: int = 0
    builds: int = 0
    hits: int = 0
    installs: int = 0
    loads: int = 0
    fallbacks: int = 0

    def snapshot(self) -> dict[str, int]:
        """The current values as a plain dict."""
        return dataclasses.asdict(self)

    @contextlib.contextmanager
    def expect(self, **deltas: int) -> Iterator[None]:
        """Assert how much each named counter moves inside the ``with`` block.

        Raises:
            AssertionError: A counter moved by another amount (all mismatches are listed).
            TypeError: A name that is not a counter.
        """
        unknown = sorted(set(deltas) - set(self.snapshot()))
        if unknown:
            raise TypeError(
                f"unknown counter(s) {unknown}; expected some of {list(self.snapshot())}"
            )
        before = self.snapshot()
        yield
        after = self.snapshot()
        wrong = [
            f"{name} moved by {after[name] - before[name]}, expected {expected}"
            for name, expected in deltas.items()
            if after[name] - before[name] != expected
        ]
        if wrong:
            raise AssertionError("static kernel counters: " + "; ".join(wrong))


def default_builder(device_type: str) -> StaticKernelBuilder:
    """Return the builder for a device type: Ascend on ``npu``, Inductor on ``cuda`` and ``cpu``."""
    if device_type == "npu":
        from npu_static_kernel.builders import AscendBuilder

        return AscendBuilder()
    from npu_static_kernel.builders import InductorBuilder

    return InductorBuilder()


def _describe(arg: Any) -> str:
    if isinstance(arg, torch.Tensor):
        text = f"{str(arg.dtype).removeprefix('torch.')}{list(arg.shape)}"
        if not arg.is_contiguous():
            text += f"@stride{list(arg.stride())}"
        return text
    if isinstance(arg, (bool, int, float)):
        return f"{type(arg).__name__}={arg}"
    return type(arg).__name__


def _constants_digest(gm: torch.fx.GraphModule) -> list[Any]:
    found: list[Any] = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = gm
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        if isinstance(value, torch.Tensor):
            entry: list[Any] = [str(node.target), _describe(value)]
            if value.numel() <= _HASHED_CONSTANT_NUMEL and value.device.type != "meta":
                # bytes() of the uint8 values, not .numpy(): numpy is not a dependency here.
                raw = value.detach().cpu().contiguous().view(-1).view(torch.uint8).tolist()
                entry.append(hashlib.sha256(bytes(raw)).hexdigest())
            found.append(entry)
    return found


def compute_key(gm: torch.fx.GraphModule, args: Sequence[Any], builder: StaticKernelBuilder) -> str:
    """Return the cache key of ``gm`` specialised for ``args`` by ``builder``.

    The key is a SHA-256 over the graph code and constants, every argument's dtype, shape,
    stride and device type (with the index on CUDA-like devices, whose compiled code is bound
    to it; ints by value), the torch and package versions, the device model,
    the deterministic-algorithms flag, the CPU thread count (CPU only), and the builder's name
    and :meth:`compute_hash`.

    Args:
        gm: The FX graph.
        args: Its runtime arguments.
        builder: The builder that will make the artifact.

    Returns:
        A 64-character hex digest.
    """
    device_type = _device.device_type_of(args)
    inputs = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            device = str(arg.device) if _per_device(arg.device.type) else arg.device.type
            inputs.append([str(arg.dtype), list(arg.shape), list(arg.stride()), device])
        else:
            inputs.append([type(arg).__name__, repr(arg)])
    document = {
        "graph": gm.code,
        "constants": _constants_digest(gm),
        "inputs": inputs,
        "torch": torch.__version__,
        "package": __version__,
        "device": _device.device_fingerprint(device_type),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        # Inductor bakes the CPU thread count into its C++ kernels.
        "cpu_threads": torch.get_num_threads() if device_type == "cpu" else None,
        "builder": builder.name,
        "builder_hash": builder.compute_hash(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _per_device(device_type: str) -> bool:
    """Whether an artifact for ``device_type`` is bound to the device index it was built on.

    Inductor's generated code pins the index it compiled for (``_DeviceGuard(0)``, outputs
    allocated on that device), so ``cuda:1`` must never load a ``cuda:0`` artifact: the index is
    part of the key and every process builds or loads its own. CPU code has no index; Ascend
    kernels are installed node-wide and aclnn selects them on any device of the node.
    """
    return device_type not in ("cpu", "npu", "meta")


def _mutated_positions(gm: torch.fx.GraphModule) -> set[int]:
    """Positions of placeholders that an op of the graph writes to (``copy_``, ``add_``...)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {node: i for i, node in enumerate(placeholders)}
    written: set[int] = set()
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = (
                node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            )
            if isinstance(value, torch.fx.Node) and value in index:
                written.add(index[value])
    return written


def _protected_args(gm: torch.fx.GraphModule, args: Sequence[Any]) -> list[Any]:
    """Copies of the mutated tensor arguments (same strides), so recording changes no input."""
    protected = list(args)
    for position in _mutated_positions(gm):
        if position < len(protected) and isinstance(protected[position], torch.Tensor):
            original = protected[position]
            copy = torch.empty_strided(
                original.size(), original.stride(), dtype=original.dtype, device=original.device
            )
            protected[position] = copy.copy_(original)
    return protected


_own_compile_lock = threading.RLock()


def _compile_lock() -> Any:
    """The lock Dynamo holds while it compiles (ours where that is gone), taken around a build.

    Tracing (FX's patcher, AOT autograd) keeps process-wide state, so torch traces one graph at
    a time: its compiles run under this lock. A build here starts at a graph's first call, not
    inside Dynamo, and without the lock it traced at the same time as another thread's compile
    (``CURRENT_PATCHER is None``) or saved what another thread's load had just registered.
    """
    from torch._dynamo import convert_frame

    return getattr(convert_frame, "compile_lock", _own_compile_lock)


def _in_fresh_thread(device_type: str, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` on a new thread and re-raise what it raised.

    ``compile_static`` is called from inside a running compiled graph (AOT autograd's runtime
    wrapper keeps the Python dispatch key in the thread-local include set); a compiler started
    there sees the caller's dispatch state and fails. A new thread starts with clean
    thread-local dispatch state; the grad mode, inference mode and the current device are
    carried over (inputs made under ``torch.inference_mode`` can only be traced inside it).
    """
    errors: list[BaseException] = []
    grad = torch.is_grad_enabled()
    inference = torch.is_inference_mode_enabled()
    index = _device.current_device_index(device_type)

    def target() -> None:
        try:
            _device.set_device_index(device_type, index)
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                fn(*args)
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="npu-static-kernel-build", daemon=True)
    # Taken here, by the waiting thread: held by the builder, it would block a caller that
    # already holds it (it is re-entrant for its owner only).
    with _compile_lock():
        thread.start()
        thread.join()
    if errors:
        raise errors[0]


class StaticKernelCompiler:
    """Give every newly captured graph shape its own shape-specialised kernels.

    Call :meth:`compile_static` once per new graph key, right before capture. It records the op
    statistics of one eager run, builds the artifact (or finds it in the cache, built by another
    process or an earlier run), installs it once per node and returns the callable to capture.
    Unlike TorchAir, which builds for the first shape only, every shape gets its kernels.
    Recording and a first run of the loaded artifact use copies of the inputs the graph writes
    to, so the arguments are left unchanged.

    With ``torch.distributed`` initialised and more than one process, ``LOCAL_WORLD_SIZE`` must
    be set: local rank 0 of each node builds and installs while the node's other processes wait
    at a barrier, then all load (on CUDA, whose artifacts are bound to a device index, every
    process builds or finds its own). Without it, or with a value that is not a positive divisor
    of the world size, a :class:`StaticKernelDisabledWarning` is issued once and graphs run
    without static kernels (``strict``: a bad value raises :class:`ConfigError`).

    A build directory this process cannot write to (baked into an image, mounted read-only) is
    still read: artifacts found there are verified and loaded, and anything new is recorded and
    built in the fallback directory instead, with one :class:`CacheFallbackWarning`.

    Args:
        build_dir: Where op statistics (``aclnn_static_shape_kernel_outputs``) and the artifact
            cache (``static_kernel_cache``) live; defaults to the current directory.
        fallback_dir: Where to record and build when ``build_dir`` is not writable; default:
            ``$NPU_STATIC_KERNEL_FALLBACK_DIR``, else ``$XDG_CACHE_HOME/npu_static_kernel``
            (``~/.cache/npu_static_kernel``).
        builder: The builder; default: :class:`AscendBuilder` on ``npu``, :class:`InductorBuilder`
            on ``cuda``/``cpu`` (chosen from the first tensor argument).
        strict: Raise build errors, and a bad ``LOCAL_WORLD_SIZE``, instead of warning once
            and running the graph unchanged.

    Attributes:
        counters: What this compiler did (:class:`StaticKernelCounters`).
        last_statistics: The op statistics of the latest recording.
        last_fallback_reason: One line saying why the latest graph key runs without static
            kernels (the compiler's first error line, a link refused in the cache); ``None``
            until that happens. Each such fallback also moves ``counters.fallbacks`` and is
            logged in full, and the first one per build directory issues a
            :class:`StaticKernelFallbackWarning`.

    Example:
        >>> import torch
        >>> from npu_static_kernel import StaticKernelCompiler
        >>> def graph(x, w):  # an ATen-level graph, as AOT autograd makes them
        ...     return (torch.ops.aten.mm.default(x, w),)
        >>> gm = torch.fx.symbolic_trace(graph)
        >>> args = [torch.ones(2, 3), torch.ones(3, 4)]
        >>> compiler = StaticKernelCompiler("build")
        >>> fn = compiler.compile_static(gm, args)
        >>> fn(*args)  # same outputs and input mutations as gm(*args)
        (tensor([[3., 3., 3., 3.],
                [3., 3., 3., 3.]]),)
    """

    def __init__(
        self,
        build_dir: str | os.PathLike[str] | None = None,
        *,
        builder: StaticKernelBuilder | None = None,
        strict: bool = False,
        fallback_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.build_dir = path_of(build_dir).absolute()
        self.builder = builder
        self.strict = strict
        self.cache = ArtifactCache(self.build_dir)
        self._fallback_dir = (
            path_of(fallback_dir, "fallback_dir").absolute() if fallback_dir is not None else None
        )
        # Decided on first use: where statistics and new artifacts go, and the caches searched.
        self._write_dir: Path | None = None
        self._write_cache = self.cache
        self._caches: list[ArtifactCache] = [self.cache]
        # (cache root, key) of artifacts that failed verification: warned about once, skipped.
        self._rejected: set[tuple[Path, str]] = set()
        self.counters = StaticKernelCounters()
        self.last_statistics: OpStatistics | None = None
        self.last_fallback_reason: str | None = None
        self._enabled = True
        self._loaded: dict[str, Callable[..., Any]] = {}
        self._lock = threading.RLock()

    @property
    def enabled(self) -> bool:
        """False once static kernels were switched off for this process (see the class doc)."""
        return self._enabled

    def _node_role(self) -> NodeRole | None:
        try:
            role = resolve_node_role()
        except ConfigError as error:
            if self.strict:
                raise
            # Every rank reads the same environment, so every rank turns static kernels off
            # here and none is left waiting at a node barrier.
            self._enabled = False
            if take_disabled_warning():
                warnings.warn(
                    f"static kernels are off: {error}", StaticKernelDisabledWarning, stacklevel=3
                )
            return None
        self._enabled = role is not None
        if role is None and take_disabled_warning():
            warnings.warn(
                "static kernels are off: torch.distributed runs several processes but "
                "LOCAL_WORLD_SIZE is not set, so processes sharing a node cannot agree on "
                "who installs kernels; export LOCAL_WORLD_SIZE=<processes per node>",
                StaticKernelDisabledWarning,
                stacklevel=3,
            )
        return role

    def compile_static(self, gm: torch.fx.GraphModule, args: Sequence[Any]) -> Callable[..., Any]:
        """Record, build or load, and return the callable to capture for these shapes.

        In a multi-process job every rank must call this for the same graph key at the same
        point (it contains a node barrier).

        Args:
            gm: The ATen-level FX graph (after AOT autograd; may ``aten.copy_`` into inputs).
            args: The runtime arguments (tensors and ints) of this graph key.

        Returns:
            A callable with ``gm.forward``'s calling convention, outputs and input mutations:
            the shape-specialised artifact, or ``gm.forward`` itself when static kernels are
            off or the build failed (a warning is logged with the reason).

        Raises:
            BuildError: With ``strict=True``, when the artifact cannot be built.
        """
        with self._lock:
            args = tuple(args)
            role = self._node_role()
            if role is None:
                return gm.forward
            device_type = _device.device_type_of(args)
            if self.builder is None:
                self.builder = default_builder(device_type)
            builder = self.builder
            try:
                key = compute_key(gm, args, builder)
            except NpuStaticKernelError as exc:
                return self._fallback(gm, exc)
            loaded = self._loaded.get(key)
            if loaded is not None:
                return loaded
            # Copies for the recording run alone, freed after it (a KV cache can be large).
            statistics, failure = self._record(gm, _protected_args(gm, args), builder)
            request = BuildRequest(gm, args, statistics, key, device_type)
            failure = self._build_on_node(request, builder, role, failure)
            if failure is not None:
                return self._fallback(gm, failure)
            try:
                fn = self._load(request, builder, role)
                # New copies: recording already ran the graph, and a graph that advances a
                # counter input (a cache position) must not see it advanced once more here.
                self._first_run(fn, gm, _protected_args(gm, args), request)
            except NpuStaticKernelError as exc:
                return self._fallback(gm, exc)
            self.counters.loads += 1
            logger.debug("static kernels %s loaded for %s", key[:12], [_describe(a) for a in args])
            self._loaded[key] = fn
            return fn

    def _record(
        self, gm: torch.fx.GraphModule, protected: Sequence[Any], builder: StaticKernelBuilder
    ) -> tuple[OpStatistics | None, NpuStaticKernelError | None]:
        """Step 1: the op statistics of this graph key, written in the seed's layout."""
        write_dir = self.build_dir
        try:
            # Inside the try: a link planted in the build directory is refused here (CacheError).
            write_dir = self._choose_write_dir()
            statistics = record_op_statistics(
                gm, *protected, build_dir=write_dir, supports=builder.supports_op
            )
        except NpuStaticKernelError as exc:
            return None, exc  # reported after the node's barrier, like the one below
        except OSError as exc:
            # Reported after the node's barrier (step 2): the other processes wait there.
            return None, CacheError(
                f"cannot write op statistics under {write_dir} ({exc}); pass a writable "
                "directory as the build directory"
            )
        self.counters.records += 1
        self.last_statistics = statistics
        return statistics, None

    def _build_on_node(
        self,
        request: BuildRequest,
        builder: StaticKernelBuilder,
        role: NodeRole,
        failure: NpuStaticKernelError | None,
    ) -> NpuStaticKernelError | None:
        """Step 2: build (or find) the artifact, once per node, and meet the node's barrier.

        On CUDA every process has its own key (the device index is in it): each builds or finds
        its own artifact; elsewhere the node's leader does it for everyone.
        """
        if not (role.is_leader or _per_device(request.device_type)):
            role.barrier()
            return failure
        try:
            if failure is None:
                self._build_or_find(request, builder)
        except NpuStaticKernelError as exc:
            failure = exc
        except OSError as exc:  # disk full, permissions: the cache could not be written
            failure = CacheError(
                f"cannot write the static kernel cache in {self._write_cache.root} ({exc}); "
                "free space or pass a writable build directory"
            )
        finally:
            role.barrier()
        return failure

    def _load(
        self, request: BuildRequest, builder: StaticKernelBuilder, role: NodeRole
    ) -> Callable[..., Any]:
        """Step 3: load the verified artifact; alone on the node, replace a damaged one once."""
        key = request.key
        path = self._locate(key)
        if path is None:
            raise BuildError(
                f"no artifact for key {key[:12]} after the node's build; the process with local "
                "rank 0 logged why"
            )
        try:
            # Under the compile lock too: Inductor's loader records what it loads in the same
            # process-wide registry a build saves from ("more than one artifact").
            with _compile_lock():
                return builder.load(path, request)
        except CacheError as exc:
            if role.local_world_size > 1:
                raise
            # Alone on the node: a damaged artifact (truncated copy, disk error) is replaced.
            self._reject(path, key, exc)
            try:
                self._build_or_find(request, builder)
            except OSError as again:
                raise CacheError(f"cannot rebuild the artifact {key[:12]} ({again})") from again
            path = self._locate(key)
            if path is None:
                raise exc from None
            with _compile_lock():
                return builder.load(path, request)

    def _first_run(
        self,
        fn: Callable[..., Any],
        gm: torch.fx.GraphModule,
        protected: Sequence[Any],
        request: BuildRequest,
    ) -> None:
        """Step 4: one run on the protected copies.

        It proves the artifact works here and finishes lazy work (kernel loading) before anyone
        captures it.
        """
        if fn == gm.forward:
            return
        try:
            fn(*protected)
            _device.synchronize(request.device_type)
        except Exception as exc:
            key = request.key
            raise CacheError(
                f"the artifact {key[:12]} failed its first run ({type(exc).__name__}: {exc}); "
                f"remove it with `npu-static-kernel clean --key {key[:12]}`"
            ) from exc

    def _choose_write_dir(self) -> Path:
        """Return the directory for statistics and new artifacts (decided once per compiler)."""
        if self._write_dir is not None:
            return self._write_dir
        if self.cache.writable():
            self._write_dir = self.build_dir
            return self._write_dir
        fallback = self._fallback_dir or default_fallback_dir()
        self._write_dir = fallback
        self._write_cache = ArtifactCache(fallback)
        self._caches = [self.cache, self._write_cache]
        if (self.build_dir, fallback) not in _warned_read_only:
            _warned_read_only.add((self.build_dir, fallback))
            warnings.warn(
                f"the static kernel cache in {self.build_dir} is not writable: artifacts found "
                f"there are used, new ones are built in {fallback} (choose another place with "
                f"fallback_dir= or {FALLBACK_DIR_ENV})",
                CacheFallbackWarning,
                stacklevel=4,
            )
        return fallback

    def _reject(self, path: Path, key: str, error: NpuStaticKernelError) -> None:
        """Skip ``key`` in the cache holding ``path`` from now on; warn once; discard if ours."""
        for cache in self._caches:
            if path == cache.entry_dir(key) and (cache.root, key) not in self._rejected:
                logger.warning(
                    "discarding the unreadable artifact %s, building it again: %s", key[:12], error
                )
                if cache is self._write_cache:
                    with cache.key_lock(key):
                        if cache.lookup(key) == path:
                            cache.discard(key)
                else:
                    self._rejected.add((cache.root, key))

    def _verified(self, cache: ArtifactCache, key: str) -> Path | None:
        """The artifact of ``key`` in ``cache`` if its files match their hashes, else None."""
        if (cache.root, key) in self._rejected or cache.lookup(key) is None:
            return None
        try:
            return cache.verify(key)
        except CacheError as exc:
            logger.warning(
                "discarding the unreadable artifact %s, building it again: %s", key[:12], exc
            )
            self._rejected.add((cache.root, key))
            return None

    def _locate(self, key: str) -> Path | None:
        """The first verified artifact of ``key`` in the searched caches."""
        for cache in self._caches:
            path = self._verified(cache, key)
            if path is not None:
                return path
        return None

    def _build_or_find(self, request: BuildRequest, builder: StaticKernelBuilder) -> None:
        key = request.key
        cache = self._write_cache
        for other in self._caches:
            if other is not cache:
                found = self._verified(other, key)
                if found is not None:
                    # A read-only cache: committed entries never change, so no lock is needed.
                    logger.info("static kernels %s found in %s", key[:12], other.root)
                    self.counters.hits += 1
                    builder.install(found)
                    self.counters.installs += 1
                    return
        with cache.key_lock(key):
            # The artifact may have failed verification before we held the lock: look again.
            self._rejected.discard((cache.root, key))
            path = self._verified(cache, key)
            if path is None:
                if cache.lookup(key) is not None or cache.entry_dir(key).exists():
                    cache.discard(key)
                self._rejected.discard((cache.root, key))
                stale = cache.discard_stale(key)
                if stale:
                    logger.info("discarded %d unfinished build(s) of %s", len(stale), key[:12])
                staging = cache.staging(key)
                try:
                    _in_fresh_thread(request.device_type, builder.build, request, staging)
                    entry = CacheEntry(
                        key=key,
                        builder=builder.name,
                        device=_device.device_fingerprint(request.device_type),
                        inputs=tuple(_describe(a) for a in request.args),
                        created=now(),
                        graph=type(request.gm).__name__,
                        extra={"statistics": str(request.statistics.output_dir)}
                        if request.statistics is not None
                        else {},
                    )
                    path = cache.commit(entry, staging)
                except BaseException:
                    # The staging directory is all a failed build wrote: nothing half-done stays.
                    cache.discard_stale(key)
                    raise
                self.counters.builds += 1
                logger.info("built static kernels %s for %s", key[:12], entry.inputs)
            else:
                logger.info("static kernels %s found in the cache %s", key[:12], cache.root)
                self.counters.hits += 1
            builder.install(path)
            self.counters.installs += 1

    def _fallback(
        self, gm: torch.fx.GraphModule, error: NpuStaticKernelError
    ) -> Callable[..., Any]:
        if self.strict:
            raise error
        self.counters.fallbacks += 1
        self.last_fallback_reason = reason = first_error_line(error)
        logger.warning("running the graph without static kernels: %s", error)
        if self.build_dir not in _warned_fallback:
            # Once per build directory: every later shape would fail the same way, and the
            # counters alone do not say why the speedup is gone.
            _warned_fallback.add(self.build_dir)
            warnings.warn(
                f"static kernels for the build directory {self.build_dir} are lost, graphs run "
                f"without them: {reason} (the full error is logged by the "
                "npu_static_kernel logger; strict=True raises it)",
                StaticKernelFallbackWarning,
                stacklevel=3,
            )
        return gm.forward


_ERROR_WORD = re.compile(r"\b(error|fatal|failed|cannot|denied)\b", re.IGNORECASE)


def first_error_line(error: BaseException) -> str:
    """The line that says what went wrong: the compiler's first error line when there is one.

    A build error embeds the compiler's command and output (Inductor's ``CppCompileError``,
    ``op_compiler``'s tail): its own first line only says that a compile failed, so the first
    line of the output that names an error is added to it.
    """
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    head = lines[0]
    _, marker, output = text.partition("Output:")
    candidates = output.splitlines() if marker else lines[1:]
    for line in candidates:
        line = line.strip()
        if line and _ERROR_WORD.search(line) and not line.startswith("Command"):
            return f"{head}: {line}" if line not in head else head
    return head
