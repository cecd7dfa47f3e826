"""Plan: what one AOT forward graph becomes, decided once, as a frozen :class:`GraphPlan`.

The pipeline transforms a graph (passes, stream preparation) and gathers what it found about it
(:class:`GraphFacts`), then ``_planner.plan_graph`` decides, from the graph, the facts and the
lowered :class:`~npu_compile._settings.Settings` alone, what it becomes:

* ``CAPTURE``: one graph runner, optionally behind padding to the capture sizes;
* ``PIECES``: captured pieces with the nodes that cannot be captured run eagerly between them;
* ``EAGER``: the whole pipeline without capture (``debug.run_eagerly``, dumps, or an engine that
  captures itself);
* ``FALLBACK``: the graph runs eagerly, for a :class:`FallbackReason` that is logged once.

``_build.build`` turns a plan into the callable. The plan is saved in the artifact of a graph
that torch's AOT compile bundles, so a graph loaded in another process is built from the same
decisions, never decided again.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    # Types only: the plan is data, and importing it loads nothing that computes it.
    from npu_mempool import InputKind

    from npu_compile._padding.padded import Padding
    from npu_compile._tensorify import Tensorified
    from npu_compile.errors import FallbackReason

__all__ = ["GraphFacts", "GraphPlan", "PoolChoice", "Route", "Split", "fallback_plan"]


class Route(enum.Enum):
    """What a graph becomes."""

    CAPTURE = "capture"
    PIECES = "pieces"
    EAGER = "eager"
    FALLBACK = "fallback"


@dataclasses.dataclass(frozen=True)
class Split:
    """Why one node runs eagerly between pieces (``_piecewise.split_points`` finds them).

    Attributes:
        node: The node's name.
        op: The operator it calls.
        reason: Why it cannot be captured.
        why: The same, for people.
    """

    node: str
    op: str
    reason: FallbackReason
    why: str

    def describe(self) -> str:
        return f"{self.node} ({self.op}: {self.why})"


class PoolSource(enum.Enum):
    """Where the pool of a graph's runners comes from."""

    #: Each runner makes its own when it first captures (npu-mempool's call paths).
    OWN = "own"
    #: One pool for every piece of the graph, made when the graph is built.
    PIECES = "pieces"
    #: The user's ``PoolHandle`` (``aclgraph_config.use_custom_pool``), shared across graphs.
    HANDLE = "handle"
    #: A pool the user named by id (``use_custom_pool``): one per device and id in the process.
    ID = "id"


@dataclasses.dataclass(frozen=True)
class PoolChoice:
    """Which pool a graph's runners capture into, forward and backward: the planner's decision.

    ``_lowering.pool_options`` turns it into the runners' ``CaptureOptions``; npu-mempool then
    allocates (a pool per call path where the choice leaves it one to make).

    Attributes:
        source: Where the pool comes from.
        pool_id: The id the user named (``ID`` only).
    """

    source: PoolSource = PoolSource.OWN
    pool_id: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class GraphFacts:
    """What the pipeline knows of a graph before planning it.

    Attributes:
        name: The FX graph's name (``npu_compile_<n>``).
        device: The device it is captured on.
        kinds: The input class of each graph input.
        training: Whether the forward records autograd (its saved tensors are outputs too).
        saving: Whether torch's AOT compile bundles the result to be saved and loaded in
            another process.
        whole_call: Whether AOT's runtime wrapper would add nothing around the graph (its
            inputs are Dynamo's, nothing to unpack or mutate back).
        streams: Whether the graph uses stream scopes or events.
    """

    name: str
    device: torch.device
    kinds: tuple[InputKind, ...]
    training: bool = False
    saving: bool = False
    whole_call: bool = False
    streams: bool = False


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """What one graph becomes (see the module docstring).

    Attributes:
        name: The FX graph's name.
        device: The device it runs on.
        route: What it becomes.
        kinds: The input class of each graph input.
        fallback: Why it runs eagerly, and the message (``FALLBACK`` only).
        splits: The nodes that run eagerly between pieces (``PIECES``).
        pieces: The pieces around ``splits`` that are captured, by their place among the
            graph's partitions (``PIECES``); the others compute nothing worth a graph and run
            eagerly too.
        padding: How calls are padded to the capture sizes (``CAPTURE``), if they are.
        tensorified: Which inputs and outputs that made device scalars, once done.
        bypass: Whether AOT's runtime wrapper is skipped: the built callable is what Dynamo
            calls.
        reinplace_intermediates: Whether functional ops are written into dead intermediates
            (not in pieces, whose inputs made between pieces are copies, nor with streams).
        pool: The pool its runners capture into, its backward's included.
    """

    name: str
    device: str
    route: Route
    kinds: tuple[InputKind, ...] = ()
    fallback: tuple[FallbackReason, str] | None = None
    splits: tuple[Split, ...] = ()
    pieces: tuple[int, ...] = ()
    padding: Padding | None = None
    tensorified: Tensorified | None = None
    bypass: bool = False
    reinplace_intermediates: bool = False
    pool: PoolChoice = PoolChoice()

    @property
    def tensorify(self) -> bool:
        """Whether ints that decide no shape become device scalars (``CAPTURE``, unpadded).

        A padded graph keeps its ints as ints: the padding raises the batch size among them.
        """
        return self.route is Route.CAPTURE and self.padding is None


def fallback_plan(facts: GraphFacts, reason: FallbackReason, message: str) -> GraphPlan:
    """A plan that runs the graph eagerly for ``reason``."""
    return GraphPlan(
        facts.name, str(facts.device), Route.FALLBACK, facts.kinds, fallback=(reason, message)
    )
