"""The planning step: a prepared AOT forward graph and the lowered options in, a plan out.

:func:`plan_graph` reads the graph, what the pipeline found about it
(:class:`~npu_compile._plan.GraphFacts`) and :class:`~npu_compile._settings.Settings`, and returns
a frozen :class:`~npu_compile._plan.GraphPlan`; it changes none of them. Every decision about
the graph is made here and recorded in the plan: its route (captured whole, in pieces, eagerly,
or a fallback and why), the padding, whether AOT's wrapper is bypassed, which passes apply. The
pipeline applies what the plan asks of the graph (ints as device scalars, reinplacing)
afterwards, and the build reads nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from npu_mempool import InputKind

from npu_compile._capturable import TRAINING_REASON, host_sync_reason, storage_read_reason
from npu_compile._padding import plan_padding
from npu_compile._piecewise import pieces_to_capture, split_points
from npu_compile._plan import (
    GraphFacts,
    GraphPlan,
    PoolChoice,
    PoolSource,
    Route,
    Split,
    fallback_plan,
)
from npu_compile.errors import FallbackReason

if TYPE_CHECKING:
    from npu_compile._settings import Settings

__all__ = ["plan_graph", "pool_choice"]


def plan_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    facts: GraphFacts,
    settings: Settings,
) -> GraphPlan:
    """Decide what the prepared AOT forward graph ``gm`` becomes.

    Raises:
        ConfigError: Under ``debug.aclgraph.strict``, the graph cannot be padded to the capture
            sizes.
    """
    name, device = facts.name, str(facts.device)
    if facts.training and facts.saving:
        return fallback_plan(facts, FallbackReason.TRAINING, TRAINING_REASON)
    # USER inputs are copied into static buffers, which hold their elements alone.
    copied = [kind is InputKind.USER for kind in facts.kinds]
    storage_read = storage_read_reason(gm, copied, example_inputs)
    if storage_read is not None:
        return fallback_plan(facts, FallbackReason.STORAGE_READ, storage_read)
    # A saved graph runs behind AOT's wrapper, which it brings along: never bypassed then.
    bypass = facts.whole_call and not facts.saving
    # As in TorchAir, no intermediate is reinplaced in a graph with streams: a write another
    # stream may still read would race, and the graph does not say when that stream is done.
    reinplace = settings.reinplace_intermediates and not facts.streams
    splits: tuple[Split, ...] = ()
    if settings.piecewise:
        splits = tuple(split_points(gm, facts.device, settings.splitting_ops))
    else:
        host_sync = host_sync_reason(gm)
        if host_sync is not None:
            return fallback_plan(facts, FallbackReason.HOST_SYNC, host_sync)
    pool = pool_choice(settings, pieces=bool(splits))
    if not settings.capture:
        return GraphPlan(
            name,
            device,
            Route.EAGER,
            facts.kinds,
            splits=splits,
            bypass=bypass,
            reinplace_intermediates=reinplace and not splits,
        )
    if splits:
        in_scope = _split_in_stream_scope(gm, splits) if facts.streams else None
        if in_scope is not None:
            return fallback_plan(facts, FallbackReason.SPLIT_IN_STREAM_SCOPE, in_scope)
        pieces = pieces_to_capture(gm, splits)
        if not pieces:
            return fallback_plan(facts, *_nothing_to_capture(splits))
        # A piece gets the tensors made between pieces as copied inputs: an op reinplaced onto
        # one would write the copy, not the tensor later pieces read.
        return GraphPlan(
            name,
            device,
            Route.PIECES,
            facts.kinds,
            splits=splits,
            pieces=pieces,
            bypass=bypass,
            pool=pool,
        )
    # Not a training forward: its saved tensors would be cut to the batch as well.
    padding = (
        plan_padding(gm, example_inputs, facts.kinds, settings, name)
        if settings.capture_sizes and not facts.training
        else None
    )
    return GraphPlan(
        name,
        device,
        Route.CAPTURE,
        facts.kinds,
        padding=padding,
        bypass=bypass,
        reinplace_intermediates=reinplace,
        pool=pool,
    )


def pool_choice(settings: Settings, *, pieces: bool) -> PoolChoice:
    """The pool a graph's runners capture into (its backward's too).

    A pool the user named (``use_custom_pool``) is shared by every graph that names it. Else
    the pieces of a split graph share one pool of their own (a piece captured while the
    outputs of the pieces before it live replays beside them), and a whole graph's runner makes
    its own.
    """
    if settings.pool_id is not None:
        return PoolChoice(PoolSource.ID, settings.pool_id)
    if settings.capture_options.pool is not None:
        return PoolChoice(PoolSource.HANDLE)
    return PoolChoice(PoolSource.PIECES if pieces else PoolSource.OWN)


def _nothing_to_capture(splits: Sequence[Split]) -> tuple[FallbackReason, str]:
    where = "; ".join(s.describe() for s in splits)
    return (
        splits[0].reason,
        f"no piece worth capturing is left around the nodes that must run eagerly: {where}",
    )


def _split_in_stream_scope(gm: torch.fx.GraphModule, splits: Sequence[Split]) -> str | None:
    """Why the graph cannot be split where it must: a split node runs inside a stream scope.

    Each piece forks its side streams at its start and joins them at its end, so a scope must
    lie whole in one piece: one the split cuts in two would leave a side stream current across
    the eager node and the next capture.
    """
    from npu_streams import DEFAULT_TAG, STREAM_META_KEY

    nodes = {node.name: node for node in gm.graph.nodes}
    for split in splits:
        node = nodes.get(split.node)
        tag = node.meta.get(STREAM_META_KEY, DEFAULT_TAG) if node is not None else DEFAULT_TAG
        if tag != DEFAULT_TAG:
            return (
                f"node {split.node} ({split.op}) must run eagerly ({split.why}) but sits inside "
                f"stream scope {tag!r}, which a split cannot cut in two; move it out of the "
                "npu_stream_switch block, or compile with aclgraph_config.piecewise=False"
            )
    return None
