"""The per-graph pipeline: Dynamo graph -> AOT forward graph -> passes -> plan -> build.

Per FX graph (:func:`compile_graph`): capturability checks, then AOT autograd (in-place input
updates such as a KV cache write stay inside the graph) with :class:`ForwardCompiler` as its
forward compiler and, for training graphs, ``_training.BackwardCompiler`` as its backward
compiler. The forward compiler transforms the AOT forward graph (post-grad passes,
``npu_streams.prepare_for_capture``), plans it (``_planner``: what it becomes, decided once, as
a ``_plan.GraphPlan``), applies what the plan asks of the graph (ints as device scalars,
reinplacing) and builds it (``_build``). A graph that cannot be captured runs eagerly after one
logged reason (logger ``npu_compile``), or raises with ``debug.aclgraph.strict = True``; either
way it names a ``FallbackReason`` code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import npu_streams
import torch
from npu_mempool import NpuMempoolError
from npu_streams import NpuStreamsError, has_stream_ops

from npu_compile import _fallback, _passes, _torch_compat
from npu_compile._accel import accelerator_device, first_tensor_device
from npu_compile._build import build
from npu_compile._capturable import external_state_reason, records_autograd, uncapturable_reason
from npu_compile._dump import write_fx_summary
from npu_compile._fallback import fall_back
from npu_compile._inputs import input_kinds, runner_is_whole_call
from npu_compile._passes import PassTrail, checked
from npu_compile._plan import GraphFacts, GraphPlan, Route
from npu_compile._planner import plan_graph
from npu_compile._settings import Settings
from npu_compile._stats import BackendStats
from npu_compile._tensorify import tensorify_int_inputs
from npu_compile._training import BackwardCompiler
from npu_compile.errors import FallbackReason, NpuCompileError

__all__ = ["ForwardCompiler", "bundling", "compile_graph"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]
Decompositions = Mapping[Any, Callable[..., Any]]
_graph_ids = itertools.count()


@dataclasses.dataclass(frozen=True)
class DynamoGraph:
    """What the forward compiler needs to know of the Dynamo graph it compiles for.

    Attributes:
        name: The FX graph's name (``npu_compile_<n>``), used in logs and runner names.
        device: The device the graph is captured on.
        n_inputs: How many inputs Dynamo passes.
        saving: Whether torch's AOT compile bundles the result to be saved.
        keeps_wrapper: Why AOT's runtime wrapper must stay around the runner, whatever the
            graph is (``""`` when nothing but the graph decides; see [Note: torch's backend
            contract]).
    """

    name: str
    device: torch.device
    n_inputs: int
    saving: bool
    keeps_wrapper: str = ""


# [Note: torch's backend contract]
# A backend that runs AOT autograd keeps what torch's own helper for such backends
# (`torch._dynamo.backends.common.aot_autograd`) keeps, since torch's other layers rely on it. We
# call `aot_module_simplified` ourselves (the helper re-raises AOT's errors, where we fall back,
# and wraps the result in a second `disable` that Dynamo already puts around every compiled
# graph), so each part of that contract is kept where it is written:
# - inputs that are lists (compiled autograd passes its inputs as one list) are flattened with
#   torch's `flatten_graph_inputs`, and the compiled graph then takes one list (`_nested`);
# - `counters["aot_autograd"]` counts each AOT compile, `ok` or `not_ok`: DDPOptimizer pairs
#   each bucket's forward with its backward by that count (`compile_graph`);
# - the backward compiler, and the backward it returns, run under `torch._dynamo.disable`: AOT
#   compiles the backward when it first runs, inside autograd, where Dynamo's frame hook is
#   active if `backward()` was called in a compiled function (`_training.BackwardCompiler`);
# - the boxed calling convention (`_boxed_call`, one list argument) wherever AOT expects it;
# - AOT's runtime wrapper does what the graph needs around it: it turns autocast off when it was
#   on at compile time (`disable_amp`: the traced graph holds its casts already), and returns
#   fake outputs on the first call DDPOptimizer makes (`fakify_first_call`). The runner is
#   returned without that wrapper only where it provably does nothing (`keeps_wrapper`,
#   `_inputs.runner_is_whole_call`).
# - `enable_aot_logging`, so that torch's structured logs see our graphs as theirs.


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    settings: Settings,
    stats: BackendStats,
    decompositions: Decompositions,
) -> CompiledFn:
    """Compile one Dynamo graph: the callable Dynamo runs in its place."""
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        return _nested(gm, example_inputs, settings, stats, decompositions)
    return _compile(gm, example_inputs, settings, stats, decompositions)


def _nested(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    settings: Settings,
    stats: BackendStats,
    decompositions: Decompositions,
) -> CompiledFn:
    """A graph whose inputs nest (compiled autograd's list of tensors), flattened as torch does.

    torch's wrapper calls what is compiled here with the flat inputs as one list.
    """
    from torch._dynamo.utils import flatten_graph_inputs

    def compile_flat(wrapper: Any, flat_inputs: list[object]) -> CompiledFn:
        return _compile(wrapper, flat_inputs, settings, stats, decompositions, boxed=True)

    compiled: CompiledFn = flatten_graph_inputs(gm, example_inputs, compile_flat)
    return compiled


def _compile(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    settings: Settings,
    stats: BackendStats,
    decompositions: Decompositions,
    *,
    boxed: bool = False,
) -> CompiledFn:
    """:func:`compile_graph` of flat inputs; with ``boxed``, the result takes them as one list.

    ``gm`` is then torch's ``GmWrapper`` around the Dynamo graph, which AOT's result already
    calls with one list; a fallback is given that convention here.
    """
    from torch._dynamo.utils import counters
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._guards import TracingContext
    from torch._inductor.debug import enable_aot_logging

    convention = _fallback.boxed if boxed else _unchanged
    graph_module: torch.fx.GraphModule = gm.gm if boxed else gm  # type: ignore[assignment]
    name = f"npu_compile_{next(_graph_ids)}"
    if settings.piecewise:
        # What cannot be captured is split out of the AOT graph below, node by node.
        device = accelerator_device(example_inputs)
    else:
        device = first_tensor_device(example_inputs)
        refused = _refused(graph_module, example_inputs, device)
        if refused is not None:
            return convention(fall_back(gm, name, refused, settings.strict, stats))
    context = TracingContext.try_get()
    # Under torch's AOT compile (vLLM's default) the compiled function must be saved and loaded
    # in another process: the forward compiler then returns a GraphArtifact (see _artifact).
    graph = DynamoGraph(
        name,
        device,
        len(example_inputs),
        bundling(),
        keeps_wrapper=_keeps_wrapper(boxed, context),
    )
    backward = BackwardCompiler(name, settings, stats)
    forward = ForwardCompiler(graph, settings, stats, backward)
    keyed = (
        _torch_compat.options_in_cache_key(
            settings.options_digest, decompositions, settings.capture
        )
        if graph.saving
        else None
    )
    # DDPOptimizer reads this count to know that AOT compiled a bucket (see the Note above).
    counters["aot_autograd"]["total"] += 1
    try:
        with keyed or contextlib.nullcontext(), enable_aot_logging():
            compiled: CompiledFn = aot_module_simplified(
                gm,
                example_inputs,
                fw_compiler=forward,
                # While saving, a training graph runs eagerly: fw_compiler also gets its backward.
                bw_compiler=None if graph.saving else backward,
                decompositions=dict(decompositions),
                keep_inference_input_mutations=settings.keep_inference_input_mutations,
            )
        counters["aot_autograd"]["ok"] += 1
    except (NpuStreamsError, NpuMempoolError, NpuCompileError):
        counters["aot_autograd"]["not_ok"] += 1
        # A broken stream scope or a bad option is the user's to fix, never a silent fallback.
        raise
    except torch._dynamo.exc.RestartAnalysis:
        counters["aot_autograd"]["not_ok"] += 1
        # Dynamo's own signal to trace the frame again (e.g. a Python float or int it will now
        # pass as a tensor): not a failure of this graph, and the retrace compiles it anew.
        raise
    except Exception as error:  # AOT cannot trace this graph: it still runs eagerly
        counters["aot_autograd"]["not_ok"] += 1
        message = f"AOT autograd could not trace it ({type(error).__name__}: {error})"
        failed = (FallbackReason.AOT_TRACE_FAILED, message)
        eager = convention(fall_back(gm, name, failed, settings.strict, stats))
        if graph.saving and not boxed:
            # Dynamo's graph, saved as torch saves the `eager` backend's.
            from torch._dynamo.aot_compile_types import GraphModuleSerializableCallable

            return GraphModuleSerializableCallable(gm)
        return eager
    finished = forward.finish(gm, compiled)
    # AOT's own result takes its inputs as the caller passes them; what finish() chose instead
    # (a fallback of the Dynamo graph) takes them one by one.
    return finished if finished is compiled else convention(finished)


def _unchanged(fn: CompiledFn) -> CompiledFn:
    return fn


def _keeps_wrapper(boxed: bool, context: Any) -> str:
    """Why AOT's runtime wrapper must stay, for reasons outside the graph (``""``: none)."""
    if boxed:
        return "the inputs nest and torch's flattening wrapper calls the result boxed"
    if torch._C._is_any_autocast_enabled():
        return "autocast is on, which AOT's wrapper turns off around the graph (disable_amp)"
    if context is not None and getattr(context, "fakify_first_call", False):
        return "DDPOptimizer's first call expects AOT's fake outputs (fakify_first_call)"
    return ""


def _refused(
    gm: torch.fx.GraphModule, example_inputs: list[object], device: torch.device
) -> tuple[FallbackReason, str] | None:
    """Why a graph that is not split cannot be captured at all, before AOT traces it."""
    mixed = uncapturable_reason(gm, example_inputs)
    if mixed is not None:
        return FallbackReason.MIXED_DEVICES, mixed
    external = external_state_reason(gm, device.type)
    if external is not None:
        return FallbackReason.EXTERNAL_STATE, external
    return None


def bundling() -> bool:
    """Whether AOT autograd is bundling its result to be saved (torch's AOT compile).

    The test torch's own ``aot_eager`` backend makes before it returns a serializable result.
    """
    from torch._functorch import config as functorch_config

    return bool(
        getattr(functorch_config, "bundled_autograd_cache", False)
        or getattr(functorch_config, "force_autograd_cache", False)
    )


class ForwardCompiler:
    """AOT autograd's ``fw_compiler`` for one Dynamo graph: transform, plan, build.

    AOT's ``fw_compiler`` returns one callable, which AOT wraps. What else was decided (the
    plan, and the built callable before AOT's wrapper) stays here for :meth:`finish`, which
    ``compile_graph`` calls once AOT returns.

    Args:
        graph: The Dynamo graph it compiles for.
        settings: The lowered options (pool id tuples already resolved).
        stats: The backend's statistics.
        backward: The backward compiler of the same graph, told about training forwards.
    """

    def __init__(
        self,
        graph: DynamoGraph,
        settings: Settings,
        stats: BackendStats,
        backward: BackwardCompiler,
    ) -> None:
        self.graph = graph
        self.settings = settings
        self.stats = stats
        self.backward = backward
        # The grad mode of the call being compiled (AOT compiles the forward graph without grad).
        self.grad_enabled = torch.is_grad_enabled()
        self._plan: GraphPlan | None = None
        self._built: CompiledFn | None = None
        # Copies of the graph around each pass, with debug.aclgraph.check_passes (_passes.check).
        self._trail: PassTrail | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        """Compile AOT's forward graph ``gm``; AOT gets the callable (or its artifact)."""
        plan, prepared = self.plan(gm, example_inputs)
        self._plan = plan
        # The backward's runner captures into the pool the plan chose for the graph.
        self.backward.pool = plan.pool
        self._built = build(plan, prepared, self.settings, self.stats)
        if self._trail is not None and plan.route is not Route.FALLBACK:
            self._built = checked(self._built, self._trail)
        compiled = self._built
        if self.graph.saving:
            # Saved and loaded in another process: AOT gets a GraphArtifact. Imported here: it
            # loads Inductor's OutputCode, which a plain torch.compile never needs.
            from npu_compile._artifact import GraphArtifact

            artifact = GraphArtifact(plan=plan, settings=self.settings, gm=prepared)
            compiled = artifact.bind(compiled)
        # A training forward holds its thread's step until its backward has run (_training).
        return self.backward.track(compiled)

    def plan(
        self, fw_gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> tuple[GraphPlan, torch.fx.GraphModule]:
        """Transform the AOT forward graph, decide what it becomes, and apply the decision."""
        from torch._guards import TracingContext

        settings, graph = self.settings, self.graph
        context = TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        kinds = tuple(input_kinds(meta, example_inputs))
        # A training graph: AOT's forward (outputs, then saved tensors) is captured below, behind
        # AOT's autograd wrapper, and the backward compiler captures the backward graph; only a
        # graph being saved cannot be (see TRAINING_REASON).
        training = meta is not None and records_autograd(meta, self.grad_enabled)
        if training and not graph.saving:
            self.backward.saw_forward(fw_gm, kinds)
        trail = self._trail = (
            PassTrail(graph.name) if settings.check_passes and not graph.saving else None
        )
        fw_gm = _passes.run_post_grad_passes(fw_gm, example_inputs, settings, graph.name, trail)
        prepared = npu_streams.prepare_for_capture(fw_gm, graph.device)
        if trail is not None:
            trail.after("npu_streams.prepare_for_capture", prepared)
        facts = GraphFacts(
            graph.name,
            graph.device,
            kinds,
            training=training,
            saving=graph.saving,
            whole_call=(
                meta is not None
                and not graph.keeps_wrapper
                and runner_is_whole_call(meta, fw_gm, graph.n_inputs)
            ),
            streams=has_stream_ops(prepared),
        )
        plan = plan_graph(prepared, example_inputs, facts, settings)
        if plan.route is Route.FALLBACK:
            return plan, prepared
        if plan.tensorify:
            # Ints that decide no shape become device scalars: one graph for all their values.
            # Before the reinplacing below, which would otherwise keep the int arithmetic apart.
            tensorified = tensorify_int_inputs(prepared, example_inputs)
            plan = dataclasses.replace(plan, tensorified=tensorified)
            if trail is not None and tensorified is not None:
                device = torch.device(plan.device)
                trail.after(
                    "tensorify_int_inputs",
                    prepared,
                    adapt=lambda forward: tensorified.wrap(forward, device),
                )
        _passes.finish(
            prepared, example_inputs, settings, plan.reinplace_intermediates, graph.name, trail
        )
        write_fx_summary(prepared, settings.fx_summary, graph.name)
        return plan, prepared

    def finish(self, gm: torch.fx.GraphModule, compiled: CompiledFn) -> CompiledFn:
        """What Dynamo gets, once AOT returned ``compiled`` (AOT's wrapper around ours).

        Args:
            gm: The Dynamo graph, which a fallback runs (logged here, once).
            compiled: What AOT autograd returned.
        """
        plan, settings, saving = self._plan, self.settings, self.graph.saving
        if plan is not None and plan.fallback is not None:
            eager = fall_back(gm, self.graph.name, plan.fallback, settings.strict, self.stats)
            if not saving:
                return eager
        if saving:
            from npu_compile._artifact import SerializedGraph

            return SerializedGraph(compiled, self.graph.name)
        if plan is not None and plan.bypass and self._built is not None:
            return self._built
        return compiled
