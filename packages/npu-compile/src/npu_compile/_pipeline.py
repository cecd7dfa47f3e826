"""The per-graph pipeline: Dynamo graph -> AOT forward graph -> passes -> graph runner.

Per FX graph: capturability checks -> AOT autograd (in-place input updates such as a KV cache
write stay inside the graph) with the forward compiler of ``_forward`` (input classes from AOT
metadata -> post-grad passes -> ``npu_streams.prepare_for_capture`` -> ints as device scalars ->
optional static kernels -> ``npu_mempool.GraphRunner``, built in ``_runners``) and, for training
graphs, the backward compiler of ``_training``. A graph that cannot be captured runs eagerly
after one logged reason (logger ``npu_compile``), or raises with ``debug.aclgraph.strict =
True``; either way it names a ``FallbackReason`` code (``_eager.fall_back``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _config_checks, _torch_compat
from npu_compile._accel import accelerator_device, first_tensor_device
from npu_compile._capturable import external_state_reason, uncapturable_reason
from npu_compile._eager import fall_back
from npu_compile._fallback import FallbackReason
from npu_compile._forward import ForwardCompiler
from npu_compile._training import BackwardCompiler
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import NpuCompileError

if TYPE_CHECKING:
    from npu_compile._stats import BackendStats

__all__ = ["bundling", "compile_graph"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]
_graph_ids = itertools.count()


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    config: CompilerConfig,
    stats: BackendStats,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> CompiledFn:
    """Compile one Dynamo graph: the callable Dynamo runs in its place."""
    from npu_mempool import NpuMempoolError
    from npu_streams import NpuStreamsError
    from torch._functorch.aot_autograd import aot_module_simplified

    name = f"npu_compile_{next(_graph_ids)}"
    split = bool(config.aclgraph_config.piecewise)
    if split:
        # What cannot be captured is split out of the AOT graph below, node by node.
        device = accelerator_device(example_inputs)
    else:
        mixed = uncapturable_reason(gm, example_inputs)
        if mixed is not None:
            return fall_back(gm, name, FallbackReason.MIXED_DEVICES, mixed, config, stats)
        device = first_tensor_device(example_inputs)
        external = external_state_reason(gm, device.type)
        if external is not None:
            return fall_back(gm, name, FallbackReason.EXTERNAL_STATE, external, config, stats)
    config = _config_checks.resolve_pool(config, example_inputs)
    decompositions = decompositions or {}
    # Under torch's AOT compile (vLLM's default) the compiled function must be saved and loaded
    # in another process: the forward compiler then returns a GraphArtifact (see _artifact).
    saving = bundling()
    backward = BackwardCompiler(name, config, stats)
    forward = ForwardCompiler(
        name=name,
        config=config,
        stats=stats,
        n_dynamo_inputs=len(example_inputs),
        device=device,
        split=split,
        saving=saving,
        backward=backward,
    )
    keyed = _torch_compat.options_in_cache_key(config, decompositions) if saving else None
    try:
        with keyed or contextlib.nullcontext():
            compiled: CompiledFn = aot_module_simplified(
                gm,
                example_inputs,
                fw_compiler=forward,
                # While saving, a training graph runs eagerly: fw_compiler also gets its backward.
                bw_compiler=None if saving else backward,
                decompositions=dict(decompositions),
                keep_inference_input_mutations=bool(
                    config.experimental_config.keep_inference_input_mutations
                ),
            )
    except (NpuStreamsError, NpuMempoolError, NpuCompileError):
        # A broken stream scope or a bad option is the user's to fix, never a silent fallback.
        raise
    except torch._dynamo.exc.RestartAnalysis:
        # Dynamo's own signal to trace the frame again (e.g. a Python float or int it will now
        # pass as a tensor): not a failure of this graph, and the retrace compiles it anew.
        raise
    except Exception as error:  # AOT cannot trace this graph: it still runs eagerly
        message = f"AOT autograd could not trace it ({type(error).__name__}: {error})"
        eager = fall_back(gm, name, FallbackReason.AOT_TRACE_FAILED, message, config, stats)
        if saving:
            # Dynamo's graph, saved as torch saves the `eager` backend's.
            from torch._dynamo.aot_compile_types import GraphModuleSerializableCallable

            return GraphModuleSerializableCallable(gm)
        return eager
    plan = forward.plan
    if plan is not None and plan.fallback is not None:
        reason, message = plan.fallback
        eager = fall_back(gm, name, reason, message, config, stats)
        if not saving:
            return eager
    if saving:
        from npu_compile._artifact import SerializedGraph

        return SerializedGraph(compiled, name)
    if plan is not None and plan.bypass and plan.direct is not None:
        return plan.direct
    return compiled


def bundling() -> bool:
    """Whether AOT autograd is bundling its result to be saved (torch's AOT compile).

    The test torch's own ``aot_eager`` backend makes before it returns a serializable result.
    """
    from torch._functorch import config as functorch_config

    return bool(
        getattr(functorch_config, "bundled_autograd_cache", False)
        or getattr(functorch_config, "force_autograd_cache", False)
    )
