"""The private torch APIs npu_compile relies on, checked against the installed torch.

torch may move any of these in a minor release without notice. The tests below resolve every entry
on the installed torch and fail naming the one that moved, and scan the package's sources so that
a private torch name used there but missing from this list fails too. Checking a new torch release
is then this list, run through ``nox -s compat`` (docs/torch-compat.md). The list lives with the
tests, the only code that reads it, so it does not ship in the wheel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_compile
import pytest
from private_api import PrivateApi


@functools.cache
def _forward_metadata() -> Any:
    """What AOT autograd tells a forward compiler about its graph, as the backend reads it."""
    import torch
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._guards import TracingContext

    seen: list[Any] = []

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        context = TracingContext.try_get()
        seen.append(None if context is None else context.fw_metadata)
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler)

    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(1)  # an input mutation: input_info has something to say
        return x * 2

    torch.compile(step, backend=backend, fullgraph=True)(torch.ones(2), torch.zeros(2))
    if not seen or seen[0] is None:
        raise LookupError("the forward compiler ran without TracingContext.fw_metadata")
    return seen[0]


@functools.cache
def _marked_graph_input() -> dict[str, Any]:
    """What a backend sees of a traced tensor whose dimension 0 the user marked."""
    import torch
    from torch._guards import TracingContext

    seen: dict[str, Any] = {}

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        context = TracingContext.try_get()
        if context is not None:
            traced: Any = context.tensor_to_context
            for real, symbolic in list(traced.items()):
                seen["source"] = symbolic.tensor_source
                seen["marks"] = real._dynamo_dynamic_indices
            for node in gm.graph.nodes:
                value = node.meta.get("example_value")
                if isinstance(value, torch.Tensor):
                    size: Any = value.shape[0]
                    seen["shape_env"] = size.node.shape_env
        return gm.forward

    x = torch.ones(3, 2)
    torch._dynamo.mark_dynamic(x, 0)
    torch.compile(lambda t: t * 2, backend=backend, fullgraph=True)(x)
    if "source" not in seen:
        raise LookupError("the backend ran without TracingContext.tensor_to_context")
    return seen


def _marked_dims() -> object:
    marks = _marked_graph_input()["marks"]
    if 0 not in marks:
        raise LookupError(f"mark_dynamic(x, 0) left _dynamo_dynamic_indices = {marks!r}")
    return marks


def _shape_env() -> Any:
    return _marked_graph_input()["shape_env"]


def _shape_env_field(field: str) -> Callable[[], object]:
    return lambda: getattr(_shape_env(), field)


def _size_source() -> object:
    """Where the marked size's symbol came from: ``L['t'].size()[0]``, read as the code reads it."""
    (sources,) = _shape_env().var_to_sources.values()
    source = sources[0]
    if source.prop.name != "SIZE" or source.idx != 0 or source.base is None:
        raise LookupError(f"the marked size's source reads as {source!r}")
    return source


def _metadata(field: str) -> Callable[[], object]:
    return lambda: getattr(_forward_metadata(), field)


_SCHEMAS = "torch._functorch._aot_autograd.schemas"
_WHOLE_CALL = (
    "AOT's runtime wrapper stays around every call (about 11 us on CPU; _inputs.py catches the "
    "AttributeError)"
)


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    # AOT autograd: the backend is an AOT forward compiler and reads AOT's view of the graph.
    PrivateApi(
        "torch._functorch.aot_autograd.aot_module_simplified",
        "AOT autograd",
        "_pipeline.compile_graph turns Dynamo's graph into the ATen forward graph it captures",
    ),
    PrivateApi(
        "torch._guards.TracingContext.try_get",
        "AOT autograd",
        "_pipeline and _passes.post_grad find the tracing context (metadata, fake mode) of the "
        "compile",
    ),
    PrivateApi(
        "torch._guards.TracingContext.fw_metadata",
        "AOT autograd",
        "_pipeline.ForwardCompiler reads AOT's ViewAndMutationMeta of the graph",
        probe=_forward_metadata,
    ),
    # Dispatch: the demo counts the ATen ops a compiled step runs.
    PrivateApi(
        "torch.utils._python_dispatch.TorchDispatchMode.ignore_compile_internals",
        "dispatch",
        "_demo._CompiledCodeRecorder overrides it so that Dynamo runs the compiled decode step "
        "under npu-static-kernel's op recorder (the launches row of the demo's table)",
        optional="Dynamo runs the step's Python under the recorder: the launches row counts the "
        "eager model's ATen ops instead of the captured graph's",
    ),
    PrivateApi(
        "torch._ops.HigherOrderOperator",
        "FX",
        "_capturable finds the op inside auto_functionalized(_v2) and with_effects for splitting",
    ),
    PrivateApi(
        "torch.fx.passes.split_module.split_module",
        "FX",
        "_piecewise splits a graph into pieces around the nodes that run eagerly",
    ),
    PrivateApi(
        "torch.fx.passes.reinplace._maybe_get_inplace_op",
        "FX",
        "_passes.reinplace finds the in-place variant of a functional op (same schema)",
    ),
    PrivateApi(
        "torch._guards.detect_fake_mode",
        "AOT autograd",
        "_passes.post_grad finds the shape environment of the example inputs (no new guards in "
        "passes)",
    ),
    PrivateApi(
        f"{_SCHEMAS}.ViewAndMutationMeta.input_info",
        "AOT autograd",
        "_inputs.input_kinds marks the inputs the graph writes (MUTATED)",
        probe=_metadata("input_info"),
    ),
    PrivateApi(
        f"{_SCHEMAS}.InputAliasInfo.mutates_data",
        "AOT autograd",
        "_inputs.input_kinds marks the inputs the graph writes (MUTATED)",
    ),
    PrivateApi(
        f"{_SCHEMAS}.ViewAndMutationMeta.output_info",
        "AOT autograd",
        "_capturable.records_autograd sends training graphs to eager (read with a default: a "
        "rename would hide training graphs)",
        probe=_metadata("output_info"),
    ),
    PrivateApi(
        f"{_SCHEMAS}.OutputAliasInfo.requires_grad",
        "AOT autograd",
        "_capturable.records_autograd sends training graphs to eager",
    ),
    PrivateApi(
        f"{_SCHEMAS}.ViewAndMutationMeta.tokens",
        "AOT autograd",
        "_inputs counts the effect tokens AOT puts before Dynamo's inputs",
        probe=_metadata("tokens"),
    ),
    PrivateApi(
        f"{_SCHEMAS}.ViewAndMutationMeta.static_input_indices",
        "AOT autograd",
        "_inputs.input_kinds marks parameters and buffers (PARAMETER: never copied per call)",
        optional="parameters are copied into static buffers on every call",
        probe=_metadata("static_input_indices"),
    ),
    PrivateApi(
        f"{_SCHEMAS}.PlainTensorMeta",
        "AOT autograd",
        "_inputs.runner_is_whole_call checks that no input or output is a tensor subclass",
        optional=_WHOLE_CALL,
    ),
    *(
        PrivateApi(
            f"{_SCHEMAS}.ViewAndMutationMeta.{field}",
            "AOT autograd",
            "_inputs.runner_is_whole_call decides whether AOT's runtime wrapper can be skipped",
            optional=_WHOLE_CALL,
            probe=_metadata(field),
        )
        for field in (
            "subclass_inp_meta",
            "subclass_fw_graph_out_meta",
            "num_mutated_inp_runtime_indices",
            "num_outputs_aliased",
            "num_intermediate_bases",
            "num_unsafe_view_outputs",
            "is_rng_op_functionalized",
        )
    ),
    PrivateApi(
        "torch._functorch.config.bundled_autograd_cache",
        "AOT autograd",
        "_pipeline.bundling tells a compile whose result torch's AOT compile saves",
    ),
    PrivateApi(
        "torch._functorch.config.force_autograd_cache",
        "AOT autograd",
        "_pipeline.bundling tells a compile whose result torch's AOT compile saves",
    ),
    # Dynamo and torch's AOT compile (save and load of a compiled function).
    PrivateApi(
        "torch._dynamo.exc.RestartAnalysis",
        "Dynamo",
        "_pipeline lets Dynamo's retrace signal through instead of falling back to eager",
    ),
    PrivateApi(
        "torch._dynamo.reset",
        "Dynamo",
        "the demo and bench commands compile each variant from scratch",
    ),
    PrivateApi(
        "torch._dynamo.utils.counters",
        "Dynamo",
        "_pipeline counts each AOT compile as torch's AOT backends do (DDPOptimizer pairs its "
        "buckets' forwards and backwards by it); bench records torch's cudagraph_skips count",
    ),
    PrivateApi(
        "torch._dynamo.utils.flatten_graph_inputs",
        "Dynamo",
        "_pipeline flattens a graph whose inputs nest (compiled autograd's list of tensors)",
    ),
    PrivateApi(
        "torch._compile._disable_dynamo",
        "Dynamo",
        "_training keeps Dynamo from tracing the backward compiler, which autograd calls, and "
        "the backward it returns (torch._dynamo.disable, imported when first called)",
    ),
    PrivateApi(
        "torch._inductor.debug.enable_aot_logging",
        "Inductor",
        "_pipeline compiles under AOT's logging, as torch's AOT backends do",
    ),
    PrivateApi(
        "torch._C._is_any_autocast_enabled",
        "autocast",
        "_pipeline keeps AOT's runtime wrapper (which turns autocast off) under autocast",
    ),
    PrivateApi(
        "torch._subclasses.fake_tensor.unset_fake_temporarily",
        "fake tensors",
        "_capturable compares an as_strided read with its input's elements on real indices",
    ),
    PrivateApi(
        "torch._dynamo.config.debug_dir_root",
        "Dynamo",
        "_logs writes captured graphs into TORCH_COMPILE_DEBUG's directory",
    ),
    PrivateApi(
        "torch._dynamo.utils.get_debug_dir",
        "Dynamo",
        "_logs writes captured graphs into TORCH_COMPILE_DEBUG's directory",
    ),
    PrivateApi(
        "torch._dynamo.aot_compile_types.SerializableCallable",
        "Dynamo AOT compile",
        "_artifact.SerializedGraph is what a saved compiled function holds per graph",
    ),
    PrivateApi(
        "torch._dynamo.aot_compile_types.GraphModuleSerializableCallable",
        "Dynamo AOT compile",
        "_pipeline saves a graph AOT cannot trace as torch saves the eager backend's",
    ),
    PrivateApi(
        "torch._dynamo.aot_compile_types.BundledAOTAutogradSerializableCallable."
        "serialize_compile_artifacts",
        "Dynamo AOT compile",
        "_artifact.SerializedGraph saves AOT's bundled result",
    ),
    PrivateApi(
        "torch._dynamo.aot_compile_types.BundledAOTAutogradSerializableCallable."
        "deserialize_compile_artifacts",
        "Dynamo AOT compile",
        "_artifact.SerializedGraph loads AOT's bundled result",
    ),
    PrivateApi(
        "torch._inductor.output_code.OutputCode",
        "Inductor",
        "_artifact.GraphArtifact is the forward compiler's result AOT bundles and saves",
    ),
    PrivateApi(
        "torch._inductor.output_code.OutputCode.post_compile",
        "Inductor",
        "_artifact.GraphArtifact rebuilds its graph runner after a load",
    ),
    PrivateApi(
        "torch._inductor.output_code.OutputCode.prepare_for_serialization",
        "Inductor",
        "_artifact.GraphArtifact pickles its ATen graph before a save",
    ),
    PrivateApi(
        "torch._inductor.output_code.OutputCode.set_triton_bundle",
        "Inductor",
        "_artifact.GraphArtifact has no Triton kernels to bundle",
    ),
    PrivateApi(
        "torch.fx._graph_pickler.GraphPickler.dumps",
        "FX",
        "_artifact pickles the captured ATen graph into a saved compiled function",
    ),
    PrivateApi(
        "torch.fx._graph_pickler.GraphPickler.loads",
        "FX",
        "_artifact unpickles the ATen graph of a saved compiled function",
    ),
    PrivateApi(
        "torch.fx._graph_pickler.Options", "FX", "_artifact pickles graphs with any op in them"
    ),
    PrivateApi(
        "torch._subclasses.FakeTensorMode",
        "FX",
        "_artifact unpickles a saved graph's fake values",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv",
        "FX symbolic shapes",
        "_artifact unpickles a saved graph's symbolic sizes",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.error_on_new_guards",
        "FX symbolic shapes",
        "_torch_compat.no_new_guards skips a pass whose decision would guard a symbolic size",
        optional="_torch_compat.no_new_guards intercepts ShapeEnv._check_frozen (torch 2.11)",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes._ShapeEnvGuardError",
        "FX symbolic shapes",
        "_torch_compat.no_new_guards catches what error_on_new_guards raises",
        optional="only needed with error_on_new_guards",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv._check_frozen",
        "FX symbolic shapes",
        "_torch_compat.no_new_guards refuses a new guard here where error_on_new_guards is missing",
        optional="where error_on_new_guards is missing too, every built-in pass is skipped on a "
        "graph with symbolic sizes",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.free_symbols",
        "FX symbolic shapes",
        "_tensorify finds the int inputs that decide no shape",
    ),
    # Capture sizes: which dimension the user marked, and the guards a graph was traced under.
    PrivateApi(
        "torch._guards.TracingContext.tensor_to_context",
        "Dynamo",
        "_padding.symbol finds the tensors the user marked among those Dynamo traced",
        probe=lambda: _marked_graph_input()["source"],
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.StatefulSymbolicContext.tensor_source",
        "FX symbolic shapes",
        "_padding.symbol names a traced tensor by its source",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.var_to_sources",
        "FX symbolic shapes",
        "_padding.symbol finds which dimension of which input each size symbol came from",
        probe=_size_source,
    ),
    PrivateApi(
        "torch._dynamo.source.TensorPropertySource",
        "Dynamo",
        "_padding.symbol reads a size symbol's source (base, prop, idx)",
    ),
    PrivateApi(
        "torch._dynamo.decorators.mark_dynamic",
        "Dynamo",
        "_padding.symbol pads the dimension mark_dynamic recorded in _dynamo_dynamic_indices",
        probe=_marked_dims,
    ),
    PrivateApi(
        "torch.fx.experimental.sym_node.SymNode.shape_env",
        "FX symbolic shapes",
        "_padding.symbol finds the shape environment of the batch size's symbol",
        probe=_shape_env,
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.guards",
        "FX symbolic shapes",
        "_padding.symbol keeps the capture sizes the guards on the batch size admit",
        probe=_shape_env_field("guards"),
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.deferred_runtime_asserts",
        "FX symbolic shapes",
        "_padding.symbol keeps the capture sizes the runtime assertions on the batch size admit",
        probe=_shape_env_field("deferred_runtime_asserts"),
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.var_to_range",
        "FX symbolic shapes",
        "_padding.symbol keeps the capture sizes within the batch size's value range",
        probe=_shape_env_field("var_to_range"),
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.ShapeEnv.replacements",
        "FX symbolic shapes",
        "_padding.symbol reads guards with the sizes torch specialised replaced",
        probe=_shape_env_field("replacements"),
    ),
    PrivateApi(
        "torch._ops.OpOverload._schema",
        "dispatch",
        "_padding.proof reads an op's arguments by name and which ones it writes; "
        "_passes.reinplace reads which operands an op's results alias (the alias annotations)",
        probe=lambda: __import__("torch").ops.aten.view.default._schema.returns[0].alias_info,
    ),
    PrivateApi(
        "torch.fx._lazy_graph_module._LazyGraphModule.force_recompile",
        "FX",
        "_fallback.forward_of binds a graph's generated forward (no lazy-recompile stub)",
    ),
    # Inductor's passes the backend reuses on the ATen graph.
    PrivateApi(
        "torch._inductor.fx_passes.post_grad.remove_noop_ops",
        "Inductor",
        "_passes.post_grad drops no-op views and copies before capture",
    ),
    PrivateApi(
        "torch._inductor.fx_passes.reinplace.reinplace_inplaceable_ops_core",
        "Inductor",
        "_passes.reinplace writes a functional op copied back into an input in place (KV caches)",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.statically_known_true",
        "FX symbolic shapes",
        "_passes.reinplace compares symbolic sizes and strides without adding a guard",
    ),
    PrivateApi(
        "torch._inductor.cpp_builder.get_cpp_compiler",
        "Inductor",
        "the doctor command checks the C++ compiler CPU static kernels need",
    ),
    PrivateApi(
        "torch._inductor.exc.InvalidCxxCompiler",
        "Inductor",
        "the doctor command reports a C++ compiler Inductor cannot use",
    ),
    PrivateApi(
        "torch._ops.OpOverload",
        "dispatch",
        "_passes.post_grad checks the ops a user pass names",
    ),
    PrivateApi(
        "torch._ops.OpOverloadPacket",
        "dispatch",
        "_passes.post_grad checks the ops a user pass names",
    ),
    PrivateApi(
        "torch._logging._internal.register_log",
        "logging",
        "_logs registers npu_compile as a TORCH_LOGS name",
    ),
    PrivateApi(
        "torch._logging._internal._parse_log_settings.cache_clear",
        "logging",
        "_logs applies TORCH_LOGS again once the name exists",
    ),
    PrivateApi(
        "torch._logging._internal._init_logs",
        "logging",
        "_logs applies TORCH_LOGS again once the name exists",
    ),
    PrivateApi(
        "torch._logging._internal.trace_structured",
        "logging",
        "_logs writes each captured graph into TORCH_TRACE (tlparse)",
    ),
    PrivateApi(
        "torch.distributed.distributed_c10d._get_default_store",
        "distributed",
        "vllm/_nodes.py: a vLLM worker exchanges its node's settings through the default group's "
        "store (bounded waits, where a collective would hang on a node without the check)",
    ),
    PrivateApi(
        "torch.utils._pytree.tree_flatten",
        "pytree",
        "vllm/_graph_wrapper.py flattens a piece's keyword or nested arguments, with their "
        "structure, which picks the runner",
    ),
    PrivateApi(
        "torch.utils._pytree.tree_structure",
        "pytree",
        "vllm/_graph_wrapper.py records a piece's argument structure when it makes a runner",
    ),
    PrivateApi(
        "torch.utils._pytree.tree_unflatten",
        "pytree",
        "vllm/_graph_wrapper.py rebuilds a piece's arguments for a capture",
    ),
    PrivateApi(
        "torch.utils._pytree.TreeSpec",
        "pytree",
        "vllm/_graph_wrapper.py types the spec of a piece's flattened arguments",
    ),
)


PACKAGE_DIR = Path(npu_compile.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_compile")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to PRIVATE_APIS above: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from PRIVATE_APIS above: {', '.join(unused)}"
