"""Running a graph eagerly: its bound forward, the eager route, and every fallback, logged once.

Every way an FX graph ends up running without capture goes through here: the plan's ``EAGER``
route (:func:`eager_forward`), a graph that cannot be captured (:func:`fall_back`, or a
:class:`~npu_compile.BackendError` under ``debug.aclgraph.strict``), a loaded graph whose plan
says it falls back (:func:`report`), and a captured shape that runs without its static kernels
(:func:`static_kernels_lost`). Each is logged in one wording and recorded in the backend's
statistics with its :class:`~npu_compile.FallbackReason`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from npu_streams import has_stream_ops, scopes_closed_on_error
from torch.fx._lazy_graph_module import _LazyGraphModule

from npu_compile import _dump
from npu_compile._settings import Settings
from npu_compile._static_kernels import specialized_per_shape, specializer
from npu_compile._stats import BackendStats
from npu_compile.errors import BackendError, FallbackReason

__all__ = ["boxed", "eager_forward", "fall_back", "forward_of", "report", "static_kernels_lost"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def forward_of(gm: torch.nn.Module) -> CompiledFn:
    """``gm.forward`` as the generated function itself.

    A lazily recompiled GraphModule's ``forward`` is a stub that recompiles and then goes through
    ``nn.Module.__call__`` on every call (several µs); compiling now binds the real code. A graph
    with stream scopes closes the scopes an exception leaves open.
    """
    if not isinstance(gm, torch.fx.GraphModule):
        # torch's GmWrapper, around a graph whose inputs nest: it unflattens and calls the graph.
        wrapper: CompiledFn = gm.forward
        return wrapper
    _LazyGraphModule.force_recompile(gm)
    forward: CompiledFn = gm.forward
    if not has_stream_ops(gm):
        return forward

    def closing_scopes(*args: Any) -> Any:
        # The graph opens and closes its stream scopes with ops: an op that raises in between
        # would leave the side stream current, and a device capture could not end then.
        with scopes_closed_on_error():
            return forward(*args)

    return closing_scopes


def boxed(fn: CompiledFn) -> CompiledFn:
    """``fn`` in AOT's boxed calling convention: one list, emptied so its tensors can die early."""

    def call(args: list[Any]) -> Any:
        flat = tuple(args)
        args.clear()
        return fn(*flat)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call


def report(name: str, fallback: tuple[FallbackReason, str], stats: BackendStats) -> None:
    """Log and record that the FX graph ``name`` runs eagerly, in the one wording for it."""
    reason, message = fallback
    logger.warning("FX graph %s runs eagerly (%s): %s", name, reason, message)
    stats.record_fallback(name, reason, message)


def fall_back(
    gm: torch.fx.GraphModule,
    name: str,
    fallback: tuple[FallbackReason, str],
    strict: bool,
    stats: BackendStats,
) -> CompiledFn:
    """``gm`` run eagerly, logged and recorded; raises instead when ``strict``.

    Args:
        gm: The graph to run.
        name: The FX graph's name.
        fallback: Why it runs eagerly, and the message.
        strict: ``debug.aclgraph.strict``: raise :class:`BackendError` instead.
        stats: Where the fallback is recorded.
    """
    reason, message = fallback
    if strict:
        raise BackendError(
            f"cannot capture FX graph {name} ({reason}): {message} (debug.aclgraph.strict is "
            "set; unset it to run such graphs eagerly)",
            reason=reason,
        )
    report(name, fallback, stats)
    return forward_of(gm)


def eager_forward(
    gm: torch.fx.GraphModule, settings: Settings, name: str, stats: BackendStats
) -> CompiledFn:
    """The ``EAGER`` route: the graph after every pass, run without capture.

    With a data dump on, every operator's inputs and outputs are saved; with static kernels on,
    each shape runs its own (the whole pipeline but the capture).
    """
    stats.eager += 1
    if settings.data_dump is not None:
        return _dump.data_dumper(gm, settings.data_dump, name)
    forward = forward_of(gm)
    specialize = specializer(settings, gm, name, static_kernels_lost(name, stats), forward)
    if specialize is not None:
        forward = specialized_per_shape(specialize, forward)
    return forward


def static_kernels_lost(name: str, stats: BackendStats) -> Callable[[str], None]:
    """Record, once per FX graph, that a shape of it runs without its static kernels."""

    def lost(cause: str) -> None:
        if name in stats.fallback_reasons:
            return  # every later shape fails the same way: one entry per graph
        reason = FallbackReason.STATIC_KERNEL_FAILED
        message = f"a shape runs captured but without its static kernels: {cause}"
        logger.warning("FX graph %s runs without static kernels (%s): %s", name, reason, message)
        stats.record_fallback(name, reason, message)

    return lost
