"""CompilerConfig lowered to what the lower packages take: capture options, static kernels."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from npu_compile._fallback import FallbackReason
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError

__all__ = [
    "capture_options",
    "specialized_per_shape",
    "specializer",
    "static_kernel_options",
]

CompiledFn = Callable[..., Any]


def capture_options(config: CompilerConfig) -> Any:
    from npu_mempool import CaptureOptions, PoolHandle

    aclgraph = config.debug.aclgraph
    pool = config.aclgraph_config.use_custom_pool
    assert pool is None or isinstance(pool, PoolHandle)  # the option's validator ensures it
    return CaptureOptions(
        pool=pool,
        # Mode 1 (a shared pool) turns mode 2 (reuse inside one FX graph) off, as in TorchAir.
        reuse_pool_across_shapes=pool is None and not aclgraph.disable_mempool_reuse_in_same_fx,
        # Plain bool/int: config reads are views that also carry TorchAir's `.value`.
        clone_input=bool(aclgraph.clone_input),
        clone_output=bool(aclgraph.enable_output_clone),
        check_output_overwrite=bool(aclgraph.check_output_overwrite),
        capture_limit=int(aclgraph.static_capture_size_limit),
        frozen_parameters=bool(config.experimental_config.frozen_parameter),
        strict=bool(aclgraph.strict),
        capture_error_mode=str(aclgraph.capture_error_mode),
        # warmup_runs left to npu-mempool: it knows which devices need an eager call per new
        # shape before capturing it (CUDA's lazily initialised cuBLAS).
    )


def static_kernel_options(config: CompilerConfig) -> Any:
    """The ``npu_static_kernel.StaticKernelOptions`` that ``config`` asks for."""
    from npu_static_kernel import StaticKernelOptions

    static = config.experimental_config.aclgraph
    return StaticKernelOptions(
        build_dir=static._aclnn_static_shape_kernel_build_dir,
        # strict: a failed build raises instead of running the graph without static kernels.
        strict=bool(config.debug.aclgraph.strict),
        fallback_dir=static._aclnn_static_shape_kernel_fallback_dir,
    )


def specializer(
    config: CompilerConfig,
    gm: torch.fx.GraphModule,
    *,
    name: str = "",
    lost: Callable[[str], None] | None = None,
) -> Callable[[object, Sequence[object]], Callable[..., Any]] | None:
    """The per-shape static kernel hook for ``gm``, or None when static kernels are off.

    Args:
        config: The compiler options.
        gm: The graph to specialise.
        name: The FX graph's name, for messages.
        lost: Called with the cause (one line) each time a shape falls back to running without
            its static kernels.

    Returns:
        The hook. With ``debug.aclgraph.strict`` it raises :class:`BackendError` (reason
        ``static_kernel_failed``) where a shape's static kernels cannot be built.
    """
    static = config.experimental_config.aclgraph
    if not static._aclnn_static_shape_kernel:
        return None
    from npu_static_kernel import NpuStaticKernelError, StaticKernelCompiler

    compiler = StaticKernelCompiler(options=static_kernel_options(config))

    def specialize(key: object, args: Sequence[object]) -> Callable[..., Any]:
        before = compiler.counters.fallbacks
        try:
            compiled: Callable[..., Any] = compiler.compile_static(gm, list(args))
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


def specialized_per_shape(
    specialize: Callable[[object, Sequence[object]], Callable[..., Any]], forward: CompiledFn
) -> CompiledFn:
    """Call the shape-specialised callable for each call's shapes (``debug.run_eagerly``)."""
    built: dict[Hashable, Callable[..., Any]] = {}

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
