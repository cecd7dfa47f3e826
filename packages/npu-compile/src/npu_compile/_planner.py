"""The planning step: a prepared AOT forward graph and the lowered options in, a plan out.

:func:`plan_graph` reads the graph and :class:`~npu_compile._lowering.Settings` and returns a
frozen :class:`~npu_compile._plan.GraphPlan`; it changes neither. What the plan asks of the graph
(ints as device scalars, reinplacing) is applied by the pipeline afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from npu_compile._capturable import host_sync_reason
from npu_compile._fallback import FallbackReason
from npu_compile._inputs import guarded_by_dynamo
from npu_compile._padding import plan_padding
from npu_compile._piecewise import Split, pieces_to_capture, split_points
from npu_compile._plan import GraphFacts, GraphPlan, Route, fallback_plan

if TYPE_CHECKING:
    from npu_compile._lowering import Settings

__all__ = ["plan_graph"]


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
    splits: tuple[Split, ...] = ()
    if settings.piecewise:
        splits = tuple(split_points(gm, facts.device, settings.splitting_ops))
    else:
        host_sync = host_sync_reason(gm)
        if host_sync is not None:
            return fallback_plan(facts, FallbackReason.HOST_SYNC, host_sync)
    if not settings.capture:
        return GraphPlan(name, device, Route.EAGER, facts.kinds, splits=splits, bypass=facts.bypass)
    if splits:
        pieces = pieces_to_capture(gm, splits)
        if not pieces:
            return fallback_plan(facts, *_nothing_to_capture(splits))
        return GraphPlan(
            name,
            device,
            Route.PIECES,
            facts.kinds,
            splits=splits,
            pieces=pieces,
            bypass=facts.bypass,
        )
    # Not a training forward: its saved tensors would be cut to the batch as well.
    padding = (
        plan_padding(gm, example_inputs, facts.kinds, settings, name)
        if settings.capture_sizes and not facts.training
        else None
    )
    # Inside AOT's wrapper (no bypass) the runner receives AOT's arguments, which Dynamo does
    # not guard, so nothing is marked guarded there.
    guarded = tuple(guarded_by_dynamo(facts.kinds, example_inputs)) if facts.bypass else None
    return GraphPlan(
        name,
        device,
        Route.CAPTURE,
        facts.kinds,
        padding=padding,
        guarded=guarded,
        bypass=facts.bypass,
    )


def _nothing_to_capture(splits: Sequence[Split]) -> tuple[FallbackReason, str]:
    where = "; ".join(s.describe() for s in splits)
    return (
        splits[0].reason,
        f"no piece worth capturing is left around the nodes that must run eagerly: {where}",
    )
