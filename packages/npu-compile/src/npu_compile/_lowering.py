"""The CompilerConfig lowered once into :class:`Settings`: what every graph of a backend reads.

:func:`lower` runs when a backend is made (and again for ``torch.compile(options=...)``), never
per graph: the capture options and the static-kernel options are built, and so validated, once,
by the package that owns them (``npu_mempool.CaptureOptions``,
``npu_static_kernel.StaticKernelOptions``). :func:`specializer` builds the per-shape static
kernel hook of one graph from them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from npu_mempool import CaptureOptions, PoolHandle, graph_pool_handle

from npu_compile._accel import first_tensor_device, with_index
from npu_compile._fallback import FallbackReason
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_static_kernel import StaticKernelOptions

    from npu_compile.configs.compiler_config import CompilerConfig

__all__ = ["Settings", "lower", "specialized_per_shape", "specializer"]

CompiledFn = Callable[..., Any]
Specialize = Callable[[object, Sequence[object]], CompiledFn]


@dataclasses.dataclass(frozen=True)
class Settings:
    """A :class:`CompilerConfig` lowered for the pipeline; frozen, shared by every graph.

    Attributes:
        config: The configuration snapshot (the passes and the dumps read their own options).
        capture: Whether graphs are captured at all. ``False`` runs every graph through the
            whole pipeline without capture: ``debug.run_eagerly``, a data dump, an FX summary
            with ``skip_compile``, or an engine that captures itself (vLLM).
        capture_options: What every graph runner of the backend is given.
        pool_id: A graph pool named by id tuple (``use_custom_pool``), resolved per device.
        static_kernels: The static-kernel options, ``None`` when static kernels are off.
        piecewise: Whether graphs may be captured in pieces around what cannot be captured.
        splitting_ops: Ops that always run eagerly between pieces.
        capture_sizes: Batch sizes graphs are padded to (empty: captured per exact size).
        capture_sizes_dim: The dimension that holds the batch, when named.
        strict: Raise instead of falling back (``debug.aclgraph.strict``).
        check_passes: Check each graph pass against the graph before it at the first call
            (``debug.aclgraph.check_passes``).
    """

    config: CompilerConfig
    capture: bool
    capture_options: CaptureOptions
    pool_id: tuple[int, int] | None
    static_kernels: StaticKernelOptions | None
    piecewise: bool
    splitting_ops: tuple[str, ...]
    capture_sizes: tuple[int, ...]
    capture_sizes_dim: int | None
    strict: bool
    check_passes: bool = False

    def for_inputs(self, example_inputs: Sequence[object]) -> Settings:
        """These settings with a pool id tuple resolved to the pool of the inputs' device."""
        if self.pool_id is None:
            return self
        pool = _pool_for(first_tensor_device(example_inputs), self.pool_id)
        return dataclasses.replace(
            self, capture_options=dataclasses.replace(self.capture_options, pool=pool)
        )


def lower(config: CompilerConfig, *, capture: bool = True) -> Settings:
    """Lower ``config`` once; ``capture=False`` runs every graph without capture.

    Raises:
        npu_mempool.ConfigError: A capture option npu-mempool refuses.
        npu_static_kernel.ConfigError: A static-kernel option npu-static-kernel refuses.
    """
    aclgraph = config.debug.aclgraph
    chosen = config.aclgraph_config.use_custom_pool
    # The option's validator admits None, a PoolHandle or a pool id tuple.
    pool_id = chosen if isinstance(chosen, tuple) else None
    handle = chosen if isinstance(chosen, PoolHandle) else None
    # A pool id tuple is resolved per device; until then the graph has a pool of its own (mode 1
    # still turns mode 2 off: TorchAir's rule, read from the option, not from the handle).
    shared = chosen is not None
    capture_options = CaptureOptions(
        pool=handle,
        # Mode 1 (a shared pool) turns mode 2 (reuse inside one FX graph) off, as in TorchAir.
        reuse_pool_across_shapes=not shared and not aclgraph.disable_mempool_reuse_in_same_fx,
        # Plain bool/int: config reads are views that also carry TorchAir's `.value`.
        clone_input=bool(aclgraph.clone_input),
        clone_output=bool(aclgraph.enable_output_clone),
        check_output_overwrite=bool(aclgraph.check_output_overwrite),
        capture_limit=int(aclgraph.static_capture_size_limit),
        frozen_parameters=bool(config.experimental_config.frozen_parameter),
        strict=bool(aclgraph.strict),
        capture_error_mode=str(aclgraph.capture_error_mode),
        force_recapture=bool(aclgraph.force_recapture),
        # Each call of the compiled function begins a new step unless the user keeps held
        # outputs (the policy before steps per call).
        keep_held_outputs=bool(aclgraph.keep_held_outputs),
        # warmup_runs left to npu-mempool: it knows which devices need an eager call per new
        # shape before capturing it (CUDA's lazily initialised cuBLAS).
    )
    summary = config.debug.fx_summary
    eager = (
        config.debug.run_eagerly
        or config.debug.data_dump.enabled
        or (summary.enabled and summary.skip_compile)
    )
    sizes = config.aclgraph_config.capture_sizes
    dim = config.aclgraph_config.capture_sizes_dim
    return Settings(
        config=config,
        capture=capture and not eager,
        capture_options=capture_options,
        pool_id=pool_id,
        static_kernels=_static_kernel_options(config),
        piecewise=bool(config.aclgraph_config.piecewise),
        splitting_ops=tuple(config.aclgraph_config.splitting_ops),
        capture_sizes=tuple(sizes) if sizes else (),
        capture_sizes_dim=None if dim is None else int(dim),
        strict=bool(aclgraph.strict),
        check_passes=bool(aclgraph.check_passes),
    )


def _static_kernel_options(config: CompilerConfig) -> StaticKernelOptions | None:
    static = config.experimental_config.aclgraph
    if not static._aclnn_static_shape_kernel:
        return None
    from npu_static_kernel import StaticKernelOptions

    return StaticKernelOptions(
        build_dir=static._aclnn_static_shape_kernel_build_dir,
        # strict: a failed build raises instead of running the graph without static kernels.
        strict=bool(config.debug.aclgraph.strict),
        fallback_dir=static._aclnn_static_shape_kernel_fallback_dir,
    )


_pools_lock = threading.Lock()
_pools: dict[tuple[torch.device, tuple[int, int]], PoolHandle] = {}


def _pool_for(device: torch.device, pool_id: tuple[int, int]) -> PoolHandle:
    # One handle per (device, id) for the whole process: every backend naming the id shares it.
    device = with_index(device)
    key = (device, pool_id)
    with _pools_lock:
        handle = _pools.get(key)
        if handle is None:
            # On CPU the pool is the emulated arena; on a device the tuple is the allocator's
            # own pool id, which the graph captures into.
            handle = (
                graph_pool_handle("cpu") if device.type == "cpu" else PoolHandle(device, pool_id)
            )
            _pools[key] = handle
    return handle


def specializer(
    settings: Settings,
    gm: torch.fx.GraphModule,
    name: str,
    lost: Callable[[str], None] | None,
) -> Specialize | None:
    """The per-shape static kernel hook for ``gm``, or None when static kernels are off.

    Args:
        settings: The lowered options.
        gm: The graph to specialise.
        name: The FX graph's name, for messages.
        lost: Called with the cause (one line) each time a shape falls back to running without
            its static kernels.

    Returns:
        The hook. With ``debug.aclgraph.strict`` it raises :class:`BackendError` (reason
        ``static_kernel_failed``) where a shape's static kernels cannot be built.
    """
    if settings.static_kernels is None:
        return None
    from npu_static_kernel import NpuStaticKernelError, StaticKernelCompiler

    compiler = StaticKernelCompiler(options=settings.static_kernels)

    def specialize(key: object, args: Sequence[object]) -> CompiledFn:
        before = compiler.counters.fallbacks
        try:
            compiled: CompiledFn = compiler.compile_static(gm, list(args))
        except NpuStaticKernelError as error:  # strict mode
            reason = FallbackReason.STATIC_KERNEL_FAILED
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise BackendError(
                f"cannot build the static kernels of FX graph {name or '?'} ({reason}): {first} "
                "(debug.aclgraph.strict is set; unset it to run such graphs without them)",
                reason=reason,
            ) from error
        if lost is not None and compiler.counters.fallbacks != before:
            lost(compiler.last_fallback_reason or "unknown cause")
        return compiled

    return specialize


def specialized_per_shape(specialize: Specialize, forward: CompiledFn) -> CompiledFn:
    """Call the shape-specialised callable for each call's shapes (graphs run without capture)."""
    built: dict[Hashable, CompiledFn] = {}

    def call(*args: Any) -> Any:
        key = tuple(
            (a.shape, a.dtype, a.stride()) if isinstance(a, torch.Tensor) else (type(a), a)
            for a in args
        )
        fn = built.get(key)
        if fn is None:
            fn = built[key] = specialize(key, args)
        return fn(*args)

    call.__name__ = call.__qualname__ = getattr(forward, "__name__", "forward")
    return call
