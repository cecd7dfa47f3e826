"""A graph's shape-specialised (static) kernels: the per-key hook its runner calls.

With static kernels on (``experimental_config.aclgraph._aclnn_static_shape_kernel``), each new
graph key is compiled for its exact shapes by npu-static-kernel before its capture; the runner
captures the result. :func:`specializer` makes that hook for one graph from the lowered
settings, restricted to the values of one int argument where the user named a range
(``_aclnn_static_shape_kernel_sym_value_range``/``_sym_index``); :func:`specialized_per_shape`
serves a graph that runs without capture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from npu_static_kernel import NpuStaticKernelError, StaticKernelCompiler

from npu_compile._settings import Settings
from npu_compile.errors import BackendError, FallbackReason

__all__ = ["Specialize", "restricted", "specialized_per_shape", "specializer"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]
Specialize = Callable[[object, Sequence[object]], CompiledFn]


def specializer(
    settings: Settings,
    gm: torch.fx.GraphModule,
    name: str,
    lost: Callable[[str], None] | None,
    generic: CompiledFn,
) -> Specialize | None:
    """The per-shape static kernel hook for ``gm``, or None when static kernels are off.

    Args:
        settings: The lowered options.
        gm: The graph to specialise.
        name: The FX graph's name, for messages.
        lost: Called with the cause (one line) each time a shape falls back to running without
            its static kernels.
        generic: What keys outside the named range of sizes run (the graph's own forward).

    Returns:
        The hook. With ``debug.aclgraph.strict`` it raises :class:`BackendError` (reason
        ``static_kernel_failed``) where a shape's static kernels cannot be built.
    """
    if settings.static_kernels is None:
        return None
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

    return restricted(specialize, settings, generic)


def restricted(specialize: Specialize, settings: Settings, generic: CompiledFn) -> Specialize:
    """``specialize`` for the keys whose int argument is in the range the settings name.

    Other keys run ``generic``. Without a range (``_aclnn_static_shape_kernel_sym_value_range``)
    every key is specialised.
    """
    allowed, index = settings.static_kernel_sym_range, settings.static_kernel_sym_index
    if allowed is None:
        return specialize

    def in_range(key: object, args: Sequence[object]) -> CompiledFn:
        # Only keys whose int argument number `index` is in the range get static kernels.
        sizes = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        if index < len(sizes) and sizes[index] in allowed:
            return specialize(key, args)
        logger.debug(
            "no static kernels for key %s: symbolic size %d is %s, not in %s",
            key,
            index,
            sizes[index] if index < len(sizes) else "absent",
            allowed,
        )
        return generic

    return in_range


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
