"""The per-graph pipeline: Dynamo graph -> AOT forward graph -> passes -> graph runner.

Per FX graph: capturability checks -> AOT autograd (in-place input updates such as a KV cache
write stay inside the graph) -> input classes from AOT metadata -> post-grad passes ->
``npu_streams.prepare_for_capture`` -> ints as device scalars -> optional static kernels ->
``npu_mempool.GraphRunner``. A graph that cannot be captured runs eagerly after one logged reason
(logger ``npu_compile``), or raises with ``debug.aclgraph.strict = True``; either way it names a
``FallbackReason`` code (``_fallback``).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _compat, _dump, _logs, _passes
from npu_compile._capturable import (
    TRAINING_REASON,
    external_state_reason,
    host_sync_reason,
    records_autograd,
    uncapturable_reason,
)
from npu_compile._device import device_of
from npu_compile._fallback import FallbackReason
from npu_compile._inputs import guarded_by_dynamo, input_kinds, runner_is_whole_call
from npu_compile._lowering import capture_options, specialized_per_shape, specializer
from npu_compile._padding import plan_padding
from npu_compile._piecewise import Split, graph_device, piecewise, split_points
from npu_compile._summary import write_fx_summary
from npu_compile._tensorify import tensorify_int_inputs
from npu_compile._training import BackwardCompiler
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError, NpuCompileError

if TYPE_CHECKING:
    from npu_compile._artifact import GraphArtifact
    from npu_compile._tensorify import Tensorified
    from npu_compile.backend import BackendStats

__all__ = [
    "compile_graph",
    "replaying_aten_graph_on_cpu",
    "bundling",
    "rebuild",
    "runner_function",
    "eager_forward",
]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]
_graph_ids = itertools.count()

#: On CPU the emulated graph replays Dynamo's graph rather than the ATen graph (faster Python);
#: ``replaying_aten_graph_on_cpu()`` runs the ATen graph through the runner as a device does.
_CPU_REPLAYS_DYNAMO_GRAPH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "npu_compile_cpu_replays_dynamo_graph", default=True
)


@contextlib.contextmanager
def replaying_aten_graph_on_cpu(enabled: bool = True) -> Iterator[None]:
    """Within the block, CPU graphs replay AOT's ATen graph, as a device captures it."""
    token = _CPU_REPLAYS_DYNAMO_GRAPH.set(not enabled)
    try:
        yield
    finally:
        _CPU_REPLAYS_DYNAMO_GRAPH.reset(token)


@dataclass
class _Plan:
    """What the AOT forward compiler decided for one graph."""

    #: Why the graph runs eagerly (and the message), when it does.
    fallback: tuple[FallbackReason, str] | None = None
    #: The callable to hand Dynamo directly when AOT's runtime wrapper would add nothing.
    direct: CompiledFn | None = None
    bypass: bool = False


def forward_of(gm: torch.fx.GraphModule) -> CompiledFn:
    """``gm.forward`` as the generated function itself.

    A lazily recompiled GraphModule's ``forward`` is a stub that recompiles and then goes through
    ``nn.Module.__call__`` on every call (several µs); compiling now binds the real code.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule

    _LazyGraphModule.force_recompile(gm)
    forward: CompiledFn = gm.forward
    return forward


def _fallback(
    gm: torch.fx.GraphModule,
    name: str,
    reason: FallbackReason,
    message: str,
    config: CompilerConfig,
    stats: BackendStats,
) -> CompiledFn:
    if config.debug.aclgraph.strict:
        raise BackendError(
            f"cannot capture FX graph {name} ({reason}): {message} (debug.aclgraph.strict is "
            "set; unset it to run such graphs eagerly)",
            reason=reason,
        )
    logger.warning("FX graph %s runs eagerly (%s): %s", name, reason, message)
    stats._add_fallback(name, reason, message)
    return forward_of(gm)


def _static_kernels_lost(name: str, stats: BackendStats) -> Callable[[str], None]:
    """Record, once per FX graph, that a shape of it runs without its static kernels."""

    def lost(cause: str) -> None:
        if name in stats.fallback_reasons:
            return  # every later shape fails the same way: one entry per graph
        reason = FallbackReason.STATIC_KERNEL_FAILED
        message = f"a shape runs captured but without its static kernels: {cause}"
        logger.warning("FX graph %s runs without static kernels (%s): %s", name, reason, message)
        stats._add_fallback(name, reason, message)

    return lost


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    config: CompilerConfig,
    stats: BackendStats,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> CompiledFn:
    from npu_streams import prepare_for_capture
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._guards import TracingContext

    name = f"npu_compile_{next(_graph_ids)}"
    split = bool(config.aclgraph_config.piecewise)
    if split:
        # What cannot be captured is split out of the AOT graph below, node by node.
        device = graph_device(example_inputs)
    else:
        mixed = uncapturable_reason(gm, example_inputs)
        if mixed is not None:
            return _fallback(gm, name, FallbackReason.MIXED_DEVICES, mixed, config, stats)
        device = device_of(*example_inputs)
        external = external_state_reason(gm, device.type)
        if external is not None:
            return _fallback(gm, name, FallbackReason.EXTERNAL_STATE, external, config, stats)
    config = _compat.resolve_pool(config, example_inputs)
    decompositions = decompositions or {}
    # The grad mode of the call being compiled (AOT compiles the forward graph without grad).
    grad_enabled = torch.is_grad_enabled()
    n_dynamo_inputs = len(example_inputs)
    device_type = device.type
    dynamo_gm = gm
    plan = _Plan()

    # Under torch's AOT compile (vLLM's default) the compiled function must be saved and loaded
    # in another process: the forward compiler then returns a GraphArtifact (see _artifact).
    saving = bundling()

    def artifact(fw_gm: torch.fx.GraphModule, function: CompiledFn, **fields: Any) -> CompiledFn:
        if not saving:
            return function
        from npu_compile._artifact import GraphArtifact

        return GraphArtifact(name=name, config=config, gm=fw_gm, device=str(device), **fields).bind(
            function
        )

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        fw_gm = gm  # the AOT forward graph (the outer `gm` is Dynamo's)
        context = TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        kinds = input_kinds(meta, example_inputs)
        if meta is not None and records_autograd(meta, grad_enabled):
            # A training graph: AOT's forward (outputs, then saved tensors) is captured below,
            # behind AOT's autograd wrapper, and `backward` captures the backward graph; only a
            # graph being saved cannot be (see TRAINING_REASON).
            if saving:
                plan.fallback = (FallbackReason.TRAINING, TRAINING_REASON)
                return artifact(fw_gm, forward_of(fw_gm), capture=False, fallback=plan.fallback)
            backward.saw_forward(fw_gm, kinds)
        fw_gm = _passes.run_post_grad_passes(fw_gm, example_inputs, config, name)
        prepared = prepare_for_capture(fw_gm)
        splitting_ops = config.aclgraph_config.splitting_ops
        splits = split_points(prepared, device, splitting_ops) if split else []
        host_sync = None if split else host_sync_reason(prepared)
        if host_sync is not None:
            plan.fallback = (FallbackReason.HOST_SYNC, host_sync)
            return artifact(prepared, forward_of(prepared), capture=False, fallback=plan.fallback)
        summary = config.debug.fx_summary
        eager = (
            config.debug.run_eagerly
            or config.debug.data_dump.enabled
            or (summary.enabled and summary.skip_compile)
        )
        # A saved graph runs behind AOT's wrapper, which it brings along; never bypass it then.
        bypass = (
            not saving and meta is not None and runner_is_whole_call(meta, fw_gm, n_dynamo_inputs)
        )
        # Ints that decide no shape become device scalars: one graph for all their values. Before
        # the reinplacing in finish(), which would otherwise keep the int arithmetic apart.
        sizes = config.aclgraph_config.capture_sizes
        # Not a training forward: its saved tensors would be cut to the batch as well.
        training = meta is not None and records_autograd(meta, grad_enabled)
        padding = (
            plan_padding(prepared, example_inputs, kinds, sizes, name)
            if sizes and not eager and not splits and not training
            else None
        )
        # A padded graph keeps its ints as ints: the padding raises the batch size among them.
        tensorified = (
            None if eager or splits or padding else tensorify_int_inputs(prepared, example_inputs)
        )
        finishing = config
        if splits:
            # A piece gets the tensors made between pieces as copied inputs: an op reinplaced
            # onto one would write the copy, not the tensor later pieces read.
            finishing = config.copy()
            finishing.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
        _passes.finish(prepared, example_inputs, finishing, name)
        write_fx_summary(prepared, config, name)
        if eager:
            stats.eager += 1
            dumper = _dump.data_dumper(prepared, config, name)
            forward = dumper or eager_forward(prepared, config, name, stats)
            plan.direct = forward
            plan.bypass = bypass
            return artifact(prepared, forward, capture=False)
        if splits:
            pieces = capture_pieces(prepared, splits, kinds, config, name, device, stats)
            if pieces is None:
                plan.fallback = nothing_to_capture(splits)
                return artifact(
                    prepared, forward_of(prepared), capture=False, fallback=plan.fallback
                )
            plan.direct = pieces
            plan.bypass = bypass
            return artifact(prepared, pieces, kinds=tuple(kinds))
        forward = forward_of(prepared)
        hook = specializer(config, prepared, name=name, lost=_static_kernels_lost(name, stats))
        specialize = _passes.filter_specializer(config, hook, forward)
        replayed = forward
        if (
            device_type == "cpu"
            and bypass
            and specialize is None
            and tensorified is None
            and _CPU_REPLAYS_DYNAMO_GRAPH.get()
            and not _passes.rewrites_graph(config, decompositions)
        ):
            # The CPU "graph" replays by re-running Python. Dynamo's graph calls the fast torch
            # bindings (one `linear` instead of ATen `t` + `addmm` overload calls), several µs
            # cheaper per step, with the same ops and the same in-place updates. With `bypass`
            # its inputs are AOT's inputs one to one, so the input classes still apply.
            replayed = forward_of(dynamo_gm)
        # Inside AOT's wrapper (no bypass) the runner receives AOT's arguments, which Dynamo
        # does not guard, so nothing is marked guarded there.
        guarded = guarded_by_dynamo(kinds, example_inputs) if bypass else None
        function = runner_function(
            replayed, prepared, kinds, config, name, device, tensorified, stats, specialize, guarded
        )
        if padding is not None:
            function = padding.wrap(function, forward, name)
        plan.direct = function
        plan.bypass = bypass
        return artifact(prepared, function, kinds=tuple(kinds), tensorified=tensorified)

    from npu_mempool import NpuMempoolError
    from npu_streams import NpuStreamsError

    backward = BackwardCompiler(name, config, stats)
    keyed = _compat.options_in_cache_key(config, decompositions) if saving else None
    try:
        with keyed or contextlib.nullcontext():
            compiled: CompiledFn = aot_module_simplified(
                gm,
                example_inputs,
                fw_compiler=fw_compiler,
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
        eager = _fallback(gm, name, FallbackReason.AOT_TRACE_FAILED, message, config, stats)
        if saving:
            # Dynamo's graph, saved as torch saves the `eager` backend's.
            from torch._dynamo.aot_compile_types import GraphModuleSerializableCallable

            return GraphModuleSerializableCallable(gm)
        return eager
    if plan.fallback is not None:
        reason, message = plan.fallback
        eager = _fallback(gm, name, reason, message, config, stats)
        if not saving:
            return eager
    if saving:
        from npu_compile._artifact import SerializedGraph

        return SerializedGraph(compiled, name)
    if plan.bypass and plan.direct is not None:
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


def eager_forward(
    gm: torch.fx.GraphModule,
    config: CompilerConfig,
    name: str = "",
    stats: BackendStats | None = None,
) -> CompiledFn:
    """The graph run without capture; with static kernels on, per shape, as documented."""
    forward = forward_of(gm)
    lost = _static_kernels_lost(name, stats) if stats is not None else None
    hook = specializer(config, gm, name=name, lost=lost)
    specialize = _passes.filter_specializer(config, hook, forward)
    if specialize is not None:
        # The whole pipeline but the capture: static kernels included.
        forward = specialized_per_shape(specialize, forward)
    return forward


def runner_function(
    replayed: CompiledFn,
    prepared: torch.fx.GraphModule,
    kinds: Sequence[Any],
    config: CompilerConfig,
    name: str,
    device: torch.device,
    tensorified: Tensorified | None,
    stats: BackendStats,
    specialize: Callable[[object, Sequence[object]], CompiledFn] | None,
    guarded: list[bool] | None = None,
) -> CompiledFn:
    """A graph runner for ``replayed``, registered in ``stats``, as the plain function to call."""
    from npu_mempool import GraphRunner

    runner = GraphRunner(
        replayed,
        input_kinds=kinds,
        options=capture_options(config),
        specialize=specialize,
        name=name,
        guarded=guarded,
    )
    stats.captured += 1
    stats._add_runner(runner)
    _report(name, kinds, tensorified, guarded is not None, specialize is not None, prepared)
    # The runner as a plain function: what Dynamo calls on every step, so the cheapest form.
    function = runner.as_function()
    if tensorified is not None:
        function = tensorified.wrap(function, device)
    return function


def rebuild(artifact: GraphArtifact, gm: torch.fx.GraphModule) -> CompiledFn:
    """The callable of a graph loaded from a saved artifact: no tracing, no passes.

    Its runner counts in :data:`npu_compile.backend.loaded_stats`.
    """
    from npu_compile.backend import loaded_stats

    config = artifact.config if artifact.config is not None else CompilerConfig()
    name = artifact.name
    loaded_stats.fx_graphs += 1
    if artifact.fallback is not None:
        reason, message = artifact.fallback
        logger.warning("FX graph %s runs eagerly (%s): %s", name, reason, message)
        loaded_stats._add_fallback(name, reason, message)
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
    hook = specializer(config, gm, name=name, lost=_static_kernels_lost(name, loaded_stats))
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


def capture_pieces(
    gm: torch.fx.GraphModule,
    splits: list[Split],
    kinds: Sequence[Any],
    config: CompilerConfig,
    name: str,
    device: torch.device,
    stats: BackendStats,
) -> CompiledFn | None:
    """The graph as captured pieces with its split nodes between them, logged and counted."""
    made = piecewise(gm, splits, kinds, config, name, device, stats)
    if made is None:
        return None
    split_gm, pieces = made
    chosen = all(s.reason is FallbackReason.SPLITTING_OPS for s in splits)
    logger.log(
        logging.INFO if chosen else logging.WARNING,
        "FX graph %s captured in %d piece(s); run eagerly between them: %s",
        name,
        pieces,
        "; ".join(s.describe() for s in splits),
    )
    stats.captured += 1
    stats._add_split(name, pieces, tuple(s.describe() for s in splits))
    _logs.dump_graph(name, split_gm)
    return forward_of(split_gm)


def nothing_to_capture(splits: list[Split]) -> tuple[FallbackReason, str]:
    """The fallback of a graph whose pieces are all too small to capture."""
    first = splits[0]
    where = "; ".join(s.describe() for s in splits)
    return (
        first.reason,
        f"no piece worth capturing is left around the nodes that must run eagerly: {where}",
    )


def _report(
    name: str,
    kinds: Sequence[Any],
    tensorified: Any,
    bypass: bool,
    static_kernels: bool,
    prepared: torch.fx.GraphModule,
) -> None:
    counts = {kind: sum(1 for k in kinds if k is kind) for kind in dict.fromkeys(kinds)}
    classes = ", ".join(f"{n} {kind.name.lower()}" for kind, n in counts.items())
    logger.info(
        "FX graph %s: %d inputs (%s) captured per graph key%s",
        name,
        len(kinds),
        classes or "none",
        " with static kernels" if static_kernels else "",
    )
    logger.debug(
        "FX graph %s: input classes %s; ints passed as device scalars at %s; AOT wrapper %s",
        name,
        [kind.name for kind in kinds],
        list(tensorified.inputs) if tensorified is not None else [],
        "skipped" if bypass else "kept",
    )
    _logs.dump_graph(name, prepared)
