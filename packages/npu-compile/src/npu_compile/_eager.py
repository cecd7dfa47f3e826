"""Running a graph eagerly: its bound forward, a logged fallback, static kernels lost.

Every way an FX graph ends up running eagerly goes through here, so each one is logged once and
recorded in the backend's statistics with its :class:`FallbackReason`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from npu_streams import has_stream_ops, scopes_closed_on_error

from npu_compile._fallback import FallbackReason
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_compile._stats import BackendStats

__all__ = ["fall_back", "forward_of", "static_kernels_lost"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def forward_of(gm: torch.fx.GraphModule) -> CompiledFn:
    """``gm.forward`` as the generated function itself.

    A lazily recompiled GraphModule's ``forward`` is a stub that recompiles and then goes through
    ``nn.Module.__call__`` on every call (several µs); compiling now binds the real code. A graph
    with stream scopes closes the scopes an exception leaves open.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule

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
    logger.warning("FX graph %s runs eagerly (%s): %s", name, reason, message)
    stats.record_fallback(name, reason, message)
    return forward_of(gm)


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
