"""StaticKernelCompiler: record, build or load, install, per new graph key.

The steps live here; what they use lives beside it: :mod:`._options` (the frozen options),
:mod:`._keys` (cache keys), :mod:`._inputs` (argument descriptions and protected copies),
:mod:`._threads` (the compile lock and the build thread), :mod:`._counters`, and the generic
:mod:`._cache`.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from npu_static_kernel import _device
from npu_static_kernel._accel import first_tensor_device
from npu_static_kernel._cache import ArtifactCache, CacheEntry, now
from npu_static_kernel._counters import StaticKernelCounters
from npu_static_kernel._distributed import NodeRole, node_role
from npu_static_kernel._inputs import describe, protected_args
from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder
from npu_static_kernel._keys import compute_key
from npu_static_kernel._options import FALLBACK_DIR_ENV, StaticKernelOptions, default_fallback_dir
from npu_static_kernel._reasons import first_error_line
from npu_static_kernel._record import OpStatistics, record_op_statistics
from npu_static_kernel._threads import compile_lock, in_fresh_thread
from npu_static_kernel.errors import (
    BuildError,
    CacheError,
    CacheFallbackWarning,
    ConfigError,
    NpuStaticKernelError,
    StaticKernelFallbackWarning,
)

__all__ = ["StaticKernelCompiler", "default_builder"]

logger = logging.getLogger("npu_static_kernel")

# (build dir, fallback dir) pairs already warned about in this process: one warning each.
_warned_read_only: set[tuple[Path, Path]] = set()
# Build directories whose lost static kernels were warned about in this process: one each.
_warned_fallback: set[Path] = set()


def default_builder(device_type: str) -> StaticKernelBuilder:
    """Return the builder for a device type: Ascend on ``npu``, Inductor on ``cuda`` and ``cpu``."""
    if device_type == "npu":
        from npu_static_kernel.builders import AscendBuilder

        return AscendBuilder()
    from npu_static_kernel.builders import InductorBuilder

    return InductorBuilder()


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
        options: The same three settings as one :class:`StaticKernelOptions`, instead of
            ``build_dir``, ``strict`` and ``fallback_dir``.

    Raises:
        ConfigError: A setting is invalid (see :class:`StaticKernelOptions`), ``options`` is
            not a :class:`StaticKernelOptions`, or it is given together with ``build_dir``,
            ``strict`` or ``fallback_dir``.

    Attributes:
        options: The checked settings (:class:`StaticKernelOptions`), frozen.
        build_dir: ``options.build_dir`` made absolute (the current directory when ``None``);
            read-only, as ``options`` is.
        strict: ``options.strict`` (read-only).
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
        options: StaticKernelOptions | None = None,
    ) -> None:
        if options is None:
            options = StaticKernelOptions(build_dir, strict, fallback_dir)
        elif not isinstance(options, StaticKernelOptions):
            raise ConfigError(
                f"options must be a StaticKernelOptions, got {type(options).__name__}"
            )
        elif build_dir is not None or strict is not False or fallback_dir is not None:
            raise ConfigError(
                "options= was given together with build_dir, strict or fallback_dir; set them "
                "in the StaticKernelOptions instead"
            )
        self.options = options
        # Made absolute once: a later chdir must not move the cache of a compiler in use. The path
        # was checked when the options were made (StaticKernelOptions owns that rule).
        build_dir = options.build_dir
        self._build_dir = (Path(build_dir) if build_dir is not None else Path.cwd()).absolute()
        self.builder = builder
        self.cache = ArtifactCache._checked(self._build_dir)
        self._fallback_dir = (
            Path(options.fallback_dir).absolute() if options.fallback_dir is not None else None
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
    def build_dir(self) -> Path:
        """``options.build_dir`` made absolute when the compiler was made."""
        return self._build_dir

    @property
    def strict(self) -> bool:
        """``options.strict``."""
        return self.options.strict

    @property
    def enabled(self) -> bool:
        """False once static kernels were switched off for this process (see the class doc)."""
        return self._enabled

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
            role = node_role(self.strict)
            self._enabled = role is not None
            if role is None:
                return gm.forward
            device_type = first_tensor_device(args).type
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
            statistics, failure = self._record(gm, protected_args(gm, args), builder)
            request = BuildRequest(gm, args, statistics, key, device_type)
            failure = self._build_on_node(request, builder, role, failure)
            if failure is not None:
                return self._fallback(gm, failure)
            try:
                fn = self._load(request, builder, role)
                # New copies: recording already ran the graph, and a graph that advances a
                # counter input (a cache position) must not see it advanced once more here.
                self._first_run(fn, gm, protected_args(gm, args), request)
            except NpuStaticKernelError as exc:
                return self._fallback(gm, exc)
            self.counters.loads += 1
            logger.debug("static kernels %s loaded for %s", key[:12], [describe(a) for a in args])
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
        if not (role.is_leader or _device.binds_device_index(request.device_type)):
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
            with compile_lock():
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
            with compile_lock():
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
        self._write_cache = ArtifactCache._checked(fallback)
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
                    in_fresh_thread(request.device_type, builder.build, request, staging)
                    entry = CacheEntry(
                        key=key,
                        builder=builder.name,
                        device=_device.device_fingerprint(request.device_type),
                        inputs=tuple(describe(a) for a in request.args),
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
