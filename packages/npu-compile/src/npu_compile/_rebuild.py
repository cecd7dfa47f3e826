"""A graph loaded from a saved artifact, made callable again: no tracing, no passes.

torch's AOT compile (and vLLM's compile cache on top of it) loads a :class:`GraphArtifact` in a
later process; its ``post_compile`` calls :func:`rebuild` with the graph that will run, to build
the same graph runner, pieces or eager forward the forward compiler built when it was saved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _passes
from npu_compile._eager import eager_forward, forward_of, static_kernels_lost
from npu_compile._lowering import specializer
from npu_compile._padding import plan_padding
from npu_compile._piecewise import split_points
from npu_compile._runners import capture_pieces, runner_function
from npu_compile._stats import loaded_stats
from npu_compile.configs.compiler_config import CompilerConfig

if TYPE_CHECKING:
    from npu_compile._artifact import GraphArtifact

__all__ = ["rebuild"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def rebuild(artifact: GraphArtifact, gm: torch.fx.GraphModule) -> CompiledFn:
    """The callable of a graph loaded from a saved artifact: no tracing, no passes.

    Its runner counts in :data:`npu_compile.backend.loaded_stats`.
    """
    config = artifact.config if artifact.config is not None else CompilerConfig()
    name = artifact.name
    loaded_stats.fx_graphs += 1
    if artifact.fallback is not None:
        reason, message = artifact.fallback
        logger.warning("FX graph %s runs eagerly (%s): %s", name, reason, message)
        loaded_stats.record_fallback(name, reason, message)
        return forward_of(gm)
    if not artifact.capture:
        loaded_stats.eager += 1
        return eager_forward(gm, config, name, loaded_stats)
    device = torch.device(artifact.device)
    if config.aclgraph_config.piecewise:
        splits = split_points(gm, device, config.aclgraph_config.splitting_ops)
        if splits:
            pieces = capture_pieces(gm, splits, artifact.kinds, config, name, device, loaded_stats)
            if pieces is not None:
                return pieces
    forward = forward_of(gm)
    hook = specializer(config, gm, name=name, lost=static_kernels_lost(name, loaded_stats))
    specialize = _passes.filter_specializer(config, hook, forward)
    function = runner_function(
        forward,
        gm,
        artifact.kinds,
        config,
        name,
        device,
        artifact.tensorified,
        loaded_stats,
        specialize,
    )
    sizes = config.aclgraph_config.capture_sizes
    if sizes and artifact.tensorified is None:
        inputs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        padding = plan_padding(gm, inputs, artifact.kinds, sizes, name)
        if padding is not None:
            function = padding.wrap(function, forward, name)
    return function
