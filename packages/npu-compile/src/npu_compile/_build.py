"""Build: a :class:`~npu_compile._plan.GraphPlan` and its graph made into the callable to run.

One step for both ways a graph arrives: compiled in this process (``_pipeline``), or loaded from
a saved artifact (``_artifact``), which builds from the plan saved with it. Every runner is
recorded in the backend's :class:`~npu_compile._stats.BackendStats` and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import npu_mempool
import torch
from npu_mempool import InputKind

from npu_compile import _logs
from npu_compile._fallback import eager_forward, forward_of, report, static_kernels_lost
from npu_compile._lowering import pool_options
from npu_compile._piecewise import piecewise
from npu_compile._plan import GraphPlan, Route
from npu_compile._settings import Settings
from npu_compile._static_kernels import specializer
from npu_compile._stats import BackendStats, loaded_stats
from npu_compile.errors import BackendError, FallbackReason

__all__ = ["build", "build_loaded"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def build(
    plan: GraphPlan, gm: torch.fx.GraphModule, settings: Settings, stats: BackendStats
) -> CompiledFn:
    """The callable that runs ``gm`` as ``plan`` says.

    A ``FALLBACK`` plan gives the graph's own forward: logging and recording the fallback is
    the caller's (it happens once per FX graph, on whichever graph the caller runs).
    """
    if plan.route is Route.FALLBACK:
        return forward_of(gm)
    if plan.route is Route.EAGER:
        return eager_forward(gm, settings, plan.name, stats)
    if plan.route is Route.PIECES:
        return _pieces(plan, gm, settings, stats)
    return _runner(plan, gm, settings, stats)


def build_loaded(plan: GraphPlan, gm: torch.fx.GraphModule, settings: Settings) -> CompiledFn:
    """:func:`build` for a graph loaded from a saved artifact, counted in ``loaded_stats``."""
    loaded_stats.fx_graphs += 1
    if plan.fallback is not None:
        report(plan.name, plan.fallback, loaded_stats)
    return build(plan, gm, settings, loaded_stats)


def _runner(
    plan: GraphPlan, gm: torch.fx.GraphModule, settings: Settings, stats: BackendStats
) -> CompiledFn:

    name = plan.name
    forward = forward_of(gm)
    specialize = specializer(settings, gm, name, static_kernels_lost(name, stats), forward)
    runner = npu_mempool.GraphRunner(
        forward,
        input_kinds=plan.kinds,
        options=pool_options(plan.pool, settings, torch.device(plan.device)),
        specialize=_traced_for(gm, name, specialize, forward),
        name=name,
    )
    stats.captured += 1
    stats.record_runner(runner)
    _report(plan, gm, static_kernels=specialize is not None)
    # The runner as a plain function: what Dynamo calls on every step, so the cheapest form.
    function = runner.as_function()
    if plan.tensorified is not None:
        function = plan.tensorified.wrap(function, torch.device(plan.device))
    if plan.padding is not None:
        function = plan.padding.wrap(function, forward, name)
    return function


def _traced_for(
    gm: torch.fx.GraphModule,
    name: str,
    specialize: Callable[[Hashable, tuple[Any, ...]], CompiledFn] | None,
    forward: CompiledFn,
) -> Callable[[Hashable, tuple[Any, ...]], CompiledFn]:
    """The runner's per-key hook, refusing a key the graph was not traced for.

    No input is marked guarded for the runner, even where it gets Dynamo's own inputs: Dynamo's
    guards can be turned off (torch.compile's ``guard_filter_fn``, as an engine that dispatches
    itself does) and the backend cannot tell.

    The runner keys every call on its inputs' shapes, dtypes and strides, so a replay never
    serves another layout. But a new key is captured by running the graph, which was traced
    for the static sizes, dtypes and strides of its example inputs: with Dynamo's guards, no
    other layout reaches it; without them (``guard_filter_fn``, an engine that dispatches
    itself), running it on another layout could give another number without an error. So a new
    key's layout is checked against the traced one where that is static, and refused loudly.
    """
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    traced = [
        (index, value)
        for index, node in enumerate(placeholders)
        if isinstance(value := node.meta.get("val"), torch.Tensor)
    ]

    def check(key: Hashable, args: tuple[Any, ...]) -> CompiledFn:
        for index, value in traced:
            arg = args[index] if index < len(args) else None
            if isinstance(arg, torch.Tensor) and not _fits(value, arg):
                raise BackendError(
                    f"FX graph {name} was traced for input {index} as {_layout(value)} but is "
                    f"called with {_layout(arg)}: Dynamo's guards, which send other layouts to "
                    "another graph, are off (torch.compile options guard_filter_fn). Keep "
                    "tensor guards (torch.compiler.keep_tensor_guards_unsafe), or compile with "
                    "dynamic=True for sizes that change"
                )
        return specialize(key, args) if specialize is not None else forward

    return check


def _fits(traced: torch.Tensor, arg: torch.Tensor) -> bool:
    """Whether ``arg`` has the layout ``traced`` was traced with, where that is static."""
    if arg.dtype != traced.dtype or arg.dim() != traced.dim():
        return False
    # Typed as objects: a traced size or stride may be a SymInt (a dynamic dimension: any value).
    wanted: list[object] = [*traced.shape, *traced.stride()]
    got: list[object] = [*arg.shape, *arg.stride()]
    return all(not isinstance(w, int) or w == g for w, g in zip(wanted, got, strict=True))


def _layout(tensor: torch.Tensor) -> str:
    sizes: list[object] = list(tensor.shape)
    strides: list[object] = list(tensor.stride())
    return f"{str(tensor.dtype).removeprefix('torch.')} sizes {sizes} strides {strides}"


def _pieces(
    plan: GraphPlan, gm: torch.fx.GraphModule, settings: Settings, stats: BackendStats
) -> CompiledFn:

    # One pool for every piece of the graph (the plan's PIECES), or the user's.
    options = pool_options(plan.pool, settings, torch.device(plan.device))

    made: list[str] = []

    def make_runner(piece: torch.fx.GraphModule, kinds: list[InputKind]) -> CompiledFn:
        name = f"{plan.name}.piece{len(made)}"
        made.append(name)
        runner = npu_mempool.GraphRunner(
            forward_of(piece), input_kinds=kinds, options=options, name=name
        )
        stats.record_runner(runner)
        return runner.as_function()

    split_gm = piecewise(gm, plan, make_runner)
    pieces = len(made)
    chosen = all(s.reason is FallbackReason.SPLITTING_OPS for s in plan.splits)
    described = tuple(s.describe() for s in plan.splits)
    logger.log(
        logging.INFO if chosen else logging.WARNING,
        "FX graph %s captured in %d piece(s); run eagerly between them: %s",
        plan.name,
        pieces,
        "; ".join(described),
    )
    stats.captured += 1
    stats.record_split(plan.name, pieces, described)
    _logs.dump_graph(plan.name, split_gm)
    return forward_of(split_gm)


def _report(plan: GraphPlan, gm: torch.fx.GraphModule, *, static_kernels: bool) -> None:
    kinds: Sequence[InputKind] = plan.kinds
    counts = {kind: sum(1 for k in kinds if k is kind) for kind in dict.fromkeys(kinds)}
    classes = ", ".join(f"{n} {kind.name.lower()}" for kind, n in counts.items())
    logger.info(
        "FX graph %s: %d inputs (%s) captured per graph key%s",
        plan.name,
        len(kinds),
        classes or "none",
        " with static kernels" if static_kernels else "",
    )
    logger.debug(
        "FX graph %s: input classes %s; ints passed as device scalars at %s; AOT wrapper %s",
        plan.name,
        [kind.name for kind in kinds],
        list(plan.tensorified.inputs) if plan.tensorified is not None else [],
        "skipped" if plan.bypass else "kept",
    )
    _logs.dump_graph(plan.name, gm)
