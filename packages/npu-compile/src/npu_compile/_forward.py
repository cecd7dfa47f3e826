"""AOT autograd's forward compiler: one AOT forward graph in, a plan for it out.

:class:`ForwardCompiler` is handed to ``aot_module_simplified`` as ``fw_compiler``. For the AOT
forward graph it runs the post-grad passes, ``npu_streams.prepare_for_capture`` and the optional
splitting, padding and int tensorification, and decides what the graph becomes: a graph runner,
captured pieces, an eager forward, or a fallback. It returns that decision as a
:class:`ForwardPlan`; AOT gets the plan's callable, and ``_pipeline.compile_graph`` reads the rest
of the plan once AOT returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _dump, _passes
from npu_compile._capturable import TRAINING_REASON, host_sync_reason, records_autograd
from npu_compile._eager import eager_forward, forward_of, static_kernels_lost
from npu_compile._fallback import FallbackReason
from npu_compile._inputs import guarded_by_dynamo, input_kinds, runner_is_whole_call
from npu_compile._lowering import specializer
from npu_compile._padding import plan_padding
from npu_compile._piecewise import split_points
from npu_compile._runners import capture_pieces, nothing_to_capture, runner_function
from npu_compile._summary import write_fx_summary
from npu_compile._tensorify import tensorify_int_inputs
from npu_compile._training import BackwardCompiler
from npu_compile.configs.compiler_config import CompilerConfig

if TYPE_CHECKING:
    from npu_compile._stats import BackendStats

__all__ = ["ForwardCompiler", "ForwardPlan"]

CompiledFn = Callable[..., Any]


@dataclass(frozen=True)
class ForwardPlan:
    """What the forward compiler decided for one AOT forward graph.

    Attributes:
        compiled: What AOT autograd wraps and calls (a ``GraphArtifact`` while saving).
        fallback: Why the graph runs eagerly, and the message, when it does.
        direct: The callable to hand Dynamo directly when AOT's runtime wrapper would add
            nothing (``bypass``).
        bypass: Whether AOT's runtime wrapper may be skipped.
    """

    compiled: CompiledFn
    fallback: tuple[FallbackReason, str] | None = None
    direct: CompiledFn | None = None
    bypass: bool = False


class ForwardCompiler:
    """AOT autograd's ``fw_compiler`` for one Dynamo graph.

    Args:
        name: The FX graph's name (``npu_compile_<n>``), used in logs and runner names.
        config: The options (pool id tuples already resolved).
        stats: The backend's statistics.
        n_dynamo_inputs: How many inputs Dynamo passes.
        device: The device the graph is captured on.
        split: Whether the graph may be captured in pieces (``aclgraph_config.piecewise``).
        saving: Whether torch's AOT compile bundles the result to be saved.
        backward: The backward compiler of the same graph, told about training forwards.
    """

    def __init__(
        self,
        *,
        name: str,
        config: CompilerConfig,
        stats: BackendStats,
        n_dynamo_inputs: int,
        device: torch.device,
        split: bool,
        saving: bool,
        backward: BackwardCompiler,
    ) -> None:
        self.name = name
        self.config = config
        self.stats = stats
        self.n_dynamo_inputs = n_dynamo_inputs
        self.device = device
        self.split = split
        self.saving = saving
        self.backward = backward
        # The grad mode of the call being compiled (AOT compiles the forward graph without grad).
        self.grad_enabled = torch.is_grad_enabled()
        #: The plan of the last forward graph compiled (AOT compiles one per Dynamo graph).
        self.plan: ForwardPlan | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        """Compile AOT's forward graph ``gm``; AOT gets the plan's callable (the plan is kept)."""
        self.plan = self.compile(gm, example_inputs)
        return self.plan.compiled

    def compile(self, fw_gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> ForwardPlan:
        """Decide what the AOT forward graph ``fw_gm`` becomes, and build it."""
        from npu_streams import prepare_for_capture
        from torch._guards import TracingContext

        config = self.config
        context = TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        kinds = input_kinds(meta, example_inputs)
        # A training graph: AOT's forward (outputs, then saved tensors) is captured below, behind
        # AOT's autograd wrapper, and the backward compiler captures the backward graph; only a
        # graph being saved cannot be (see TRAINING_REASON).
        training = meta is not None and records_autograd(meta, self.grad_enabled)
        if training:
            if self.saving:
                return self._eagerly(fw_gm, (FallbackReason.TRAINING, TRAINING_REASON))
            self.backward.saw_forward(fw_gm, kinds)
        fw_gm = _passes.run_post_grad_passes(fw_gm, example_inputs, config, self.name)
        prepared = prepare_for_capture(fw_gm)
        splits = (
            split_points(prepared, self.device, config.aclgraph_config.splitting_ops)
            if self.split
            else []
        )
        host_sync = None if self.split else host_sync_reason(prepared)
        if host_sync is not None:
            return self._eagerly(prepared, (FallbackReason.HOST_SYNC, host_sync))
        summary = config.debug.fx_summary
        eager = (
            config.debug.run_eagerly
            or config.debug.data_dump.enabled
            or (summary.enabled and summary.skip_compile)
        )
        # A saved graph runs behind AOT's wrapper, which it brings along; never bypass it then.
        bypass = (
            not self.saving
            and meta is not None
            and runner_is_whole_call(meta, fw_gm, self.n_dynamo_inputs)
        )
        # Ints that decide no shape become device scalars: one graph for all their values. Before
        # the reinplacing in finish(), which would otherwise keep the int arithmetic apart.
        sizes = config.aclgraph_config.capture_sizes
        # Not a training forward: its saved tensors would be cut to the batch as well.
        padding = (
            plan_padding(prepared, example_inputs, kinds, sizes, self.name, config=config)
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
        _passes.finish(prepared, example_inputs, finishing, self.name)
        write_fx_summary(prepared, config, self.name)
        if eager:
            self.stats.eager += 1
            dumper = _dump.data_dumper(prepared, config, self.name)
            forward = dumper or eager_forward(prepared, config, self.name, self.stats)
            return ForwardPlan(
                self._artifact(prepared, forward, capture=False), direct=forward, bypass=bypass
            )
        if splits:
            pieces = capture_pieces(
                prepared, splits, kinds, config, self.name, self.device, self.stats
            )
            if pieces is None:
                return self._eagerly(prepared, nothing_to_capture(splits))
            compiled = self._artifact(prepared, pieces, kinds=tuple(kinds))
            return ForwardPlan(compiled, direct=pieces, bypass=bypass)
        forward = forward_of(prepared)
        lost = static_kernels_lost(self.name, self.stats)
        hook = specializer(config, prepared, name=self.name, lost=lost)
        specialize = _passes.filter_specializer(config, hook, forward)
        # Inside AOT's wrapper (no bypass) the runner receives AOT's arguments, which Dynamo
        # does not guard, so nothing is marked guarded there.
        guarded = guarded_by_dynamo(kinds, example_inputs) if bypass else None
        # Every device, the CPU emulation included, captures the ATen graph after every pass.
        function = runner_function(
            forward,
            prepared,
            kinds,
            config,
            self.name,
            self.device,
            tensorified,
            self.stats,
            specialize,
            guarded,
        )
        if padding is not None:
            function = padding.wrap(function, forward, self.name)
        compiled = self._artifact(prepared, function, kinds=tuple(kinds), tensorified=tensorified)
        return ForwardPlan(compiled, direct=function, bypass=bypass)

    def _eagerly(
        self, gm: torch.fx.GraphModule, fallback: tuple[FallbackReason, str]
    ) -> ForwardPlan:
        """A plan that falls back; the fallback itself is logged once AOT returns."""
        compiled = self._artifact(gm, forward_of(gm), capture=False, fallback=fallback)
        return ForwardPlan(compiled, fallback=fallback)

    def _artifact(
        self, gm: torch.fx.GraphModule, function: CompiledFn, **fields: Any
    ) -> CompiledFn:
        # Under torch's AOT compile (vLLM's default) the compiled function must be saved and
        # loaded in another process: AOT then gets a GraphArtifact (see _artifact).
        if not self.saving:
            return function
        from npu_compile._artifact import GraphArtifact

        artifact = GraphArtifact(
            name=self.name, config=self.config, gm=gm, device=str(self.device), **fields
        )
        return artifact.bind(function)
