"""The ``torch.compile`` backend: reduce-overhead capture and replay of FX graphs.

``torch.compile(model, backend=get_npu_backend(compiler_config=config))``, or, with no import,
``torch.compile(model, backend="npu_compile")`` (a ``torch_dynamo_backends`` entry point).

Per FX graph the backend runs: Dynamo graph -> input classes from Dynamo sources -> AOT autograd
with ``keep_inference_input_mutations=True`` (in-place updates such as a KV cache write stay inside
the graph) -> mutated inputs from AOT metadata -> ``npu_streams.prepare_for_capture`` -> optional
static kernels -> ``npu_mempool.GraphRunner``. A graph that cannot be captured runs eagerly after
one logged reason (logger ``npu_compile``), or raises with ``debug.aclgraph.strict = True``.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _compat, _dump, _logs, _passes
from npu_compile._tensorify import tensorify_int_inputs
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError, NpuCompileError

if TYPE_CHECKING:
    from npu_mempool import GraphRunner

__all__ = ["NpuBackend", "get_npu_backend", "npu_compile_backend", "BackendStats"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]
_graph_ids = itertools.count()

#: On CPU the emulated graph replays Dynamo's graph rather than the ATen graph (faster Python);
#: tests set it to ``False`` to run the ATen graph through the runner as on a device.
CPU_REPLAYS_DYNAMO_GRAPH = True


@dataclass
class BackendStats:
    """What one backend object did, for users and tests.

    Attributes:
        fx_graphs: FX graphs handed to the backend by Dynamo.
        captured: FX graphs given to a graph runner (capture and replay).
        eager: FX graphs run without capture because ``debug.run_eagerly`` is set.
        fallbacks: ``(graph name, reason)`` for each FX graph that fell back to eager.
    """

    fx_graphs: int = 0
    captured: int = 0
    eager: int = 0
    fallbacks: list[tuple[str, str]] = field(default_factory=list)
    # Weak: a runner (and its graph pool) must die with the compiled code that uses it, not live
    # on in the statistics of a long-lived backend such as the one behind backend="npu_compile".
    _runner_refs: list[weakref.ref[GraphRunner]] = field(default_factory=list, repr=False)

    @property
    def runners(self) -> list[GraphRunner]:
        """The graph runners created and still alive, in creation order.

        Their ``counters`` hold captures, replays and pool bytes.
        """
        alive = (ref() for ref in self._runner_refs)
        return [runner for runner in alive if runner is not None]

    def _add_runner(self, runner: GraphRunner) -> None:
        self._runner_refs.append(weakref.ref(runner))


def _input_kinds_from_sources(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> list[bool]:
    """For each Dynamo graph input: is it a module parameter or buffer?

    Dynamo lifts parameters and buffers to graph inputs; their source names
    (``L['self']._modules['l']._parameters['weight']``) are the reliable split between model state
    and user inputs (``example_inputs`` of buffers are plain tensors).
    """
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    flags: list[bool] = []
    for index, example in enumerate(example_inputs):
        if not isinstance(example, torch.Tensor):
            flags.append(False)
            continue
        node = placeholders[index] if index < len(placeholders) else None
        grapharg = node.meta.get("grapharg") if node is not None else None
        source = getattr(getattr(grapharg, "source", None), "name", "")
        name = source() if callable(source) else str(source)
        flags.append(
            isinstance(example, torch.nn.Parameter)
            or "._parameters[" in name
            or "._buffers[" in name
        )
    return flags


def _devices(example_inputs: Sequence[object]) -> set[str]:
    return {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}


def _forward_of(gm: torch.fx.GraphModule) -> CompiledFn:
    """``gm.forward`` as the generated function itself.

    A lazily recompiled GraphModule's ``forward`` is a stub that recompiles and then goes through
    ``nn.Module.__call__`` on every call (several µs); compiling now binds the real code.
    """
    from torch.fx._lazy_graph_module import _LazyGraphModule

    _LazyGraphModule.force_recompile(gm)
    forward: CompiledFn = gm.forward
    return forward


def _uncapturable_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> str | None:
    """Return why this Dynamo graph cannot be captured, or ``None`` if it can."""
    devices = _devices(example_inputs)
    if len(devices) > 1:
        return (
            f"its inputs live on several device types ({', '.join(sorted(devices))}); a device "
            "graph runs on one device: move every input to the same device"
        )
    return None


#: Why a graph AOT traced for training is not captured (decided from what the graph does, not
#: from the grad mode around the call: a ``@torch.no_grad()`` forward traces an inference graph).
_TRAINING_REASON = (
    "autograd records this graph (an output requires grad); reduce-overhead captures inference "
    "graphs: call the model under torch.no_grad() or torch.inference_mode()"
)


def _records_autograd(meta: Any, grad_enabled: bool) -> bool:
    """Whether AOT traced a training graph: grad was on and some output requires grad."""
    return grad_enabled and any(
        getattr(info, "requires_grad", False) for info in getattr(meta, "output_info", ())
    )


def _host_sync_reason(fw_gm: torch.fx.GraphModule) -> str | None:
    """Ops that read device values on the host cannot be recorded into a device graph."""
    for node in fw_gm.graph.nodes:
        if node.op == "call_function" and node.target in _HOST_SYNC_OPS:
            return (
                f"node {node.name} ({node.target}) reads a tensor value on the host, which a "
                "device graph cannot capture; keep the value on the device or move the read "
                "out of the compiled region"
            )
    return None


_HOST_SYNC_OPS: frozenset[object] = frozenset(
    {
        torch.ops.aten._local_scalar_dense.default,
        torch.ops.aten.nonzero.default,
        torch.ops.aten.item.default,
    }
)


def _guarded_by_dynamo(kinds: Sequence[Any], example_inputs: Sequence[Any]) -> list[bool]:
    """Which runner arguments Dynamo's guards already pin down (shape, dtype and strides).

    Only meaningful where the runner receives Dynamo's own graph inputs (``bypass``): Dynamo
    calls a compiled graph only after its guards checked every tensor input, exactly for each
    static size and stride. Those inputs need no place in the graph key. Mutated inputs keep
    theirs: they are used in place, and a buffer kept in a module whose dict is unchanged may
    skip Dynamo's tensor checks; their key also catches another view of the same memory.
    """
    from npu_mempool import InputKind

    flags = []
    for kind, value in zip(kinds, example_inputs, strict=True):
        static = isinstance(value, torch.Tensor) and not any(
            isinstance(dim, torch.SymInt)
            for dim in (*value.shape, *value.stride(), value.storage_offset())
        )
        flags.append(static and kind is not InputKind.MUTATED)
    return flags


def _runner_is_whole_call(meta: Any, fw_gm: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOT's runtime wrapper would do nothing but call the compiled graph.

    Then the backend returns the graph runner itself and skips the wrapper (about 11 µs per call
    on CPU). That holds in inference when every input mutation is inside the graph, no output
    aliases an input or an intermediate, there are no effect tokens, no tensor subclasses, no
    functionalised RNG, and AOT did not deduplicate inputs.
    """
    try:
        placeholders = sum(1 for node in fw_gm.graph.nodes if node.op == "placeholder")
        plain_inputs = all(
            isinstance(m, int) or type(m).__name__ == "PlainTensorMeta"
            for m in meta.subclass_inp_meta
        )
        plain_outputs = all(
            isinstance(m, int) or type(m).__name__ == "PlainTensorMeta"
            for m in meta.subclass_fw_graph_out_meta
        )
        return bool(
            placeholders == n_inputs
            and meta.num_mutated_inp_runtime_indices == 0
            and not meta.tokens
            and meta.num_outputs_aliased == 0
            and meta.num_intermediate_bases == 0
            and meta.num_unsafe_view_outputs == 0
            and not meta.is_rng_op_functionalized
            and plain_inputs
            and plain_outputs
        )
    except AttributeError:  # an AOT metadata layout we do not know: keep the wrapper
        return False


class NpuBackend:
    """A Dynamo backend bound to one :class:`CompilerConfig` (snapshotted at creation).

    Use :func:`get_npu_backend` to make one. Calling it is Dynamo's job.

    Attributes:
        config: The configuration (a private copy; later edits to the caller's object have no
            effect).
        stats: :class:`BackendStats` of the FX graphs this backend compiled.
    """

    compiler_name = "npu_compile"

    def __init__(
        self,
        config: CompilerConfig | None = None,
        custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    ) -> None:
        if config is not None and not isinstance(config, CompilerConfig):
            raise BackendError(
                f"compiler_config must be an npu_compile.CompilerConfig, got "
                f"{type(config).__name__}: build one with npu_compile.CompilerConfig()"
            )
        self.config = (config or CompilerConfig()).copy()
        self.stats = BackendStats()
        self.decompositions = _passes.check_decompositions(custom_decompositions)
        _compat.check_mode(self.config)
        self._warned: set[str] = set()
        _compat.warn_no_effect(self.config, self._warned)
        _logs.register()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NpuBackend)
            and other.config == self.config
            and other.decompositions == self.decompositions
        )

    def __hash__(self) -> int:
        return hash(("NpuBackend", self.config))

    def __repr__(self) -> str:
        return f"NpuBackend({self.config!r})"

    def __copy__(self) -> NpuBackend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> NpuBackend:
        # Frameworks copy the backend they are handed (Hugging Face's CompileConfig deep-copies
        # it); a copy would collect the statistics where the user cannot see them. The config
        # is a private snapshot already, so sharing the object is safe.
        return self

    def reset(self) -> None:
        """Forget the statistics (called by ``torch._dynamo.reset()``)."""
        self.stats = BackendStats()

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[object],
        *,
        mode: str | None = None,
        options: dict[str, object] | None = None,
    ) -> CompiledFn:
        """Compile one Dynamo FX graph.

        Args:
            gm: The Dynamo graph.
            example_inputs: Its example inputs (fake or real tensors, SymInts).
            mode: ``torch.compile(mode=...)``; only ``"reduce-overhead"`` (or none) is accepted.
            options: ``torch.compile(options=...)`` with TorchAir npugraph_ex option names.

        Returns:
            The callable Dynamo runs in place of the graph.
        """
        config = self.config
        if mode not in (None, "default", "reduce-overhead"):
            raise BackendError(
                f"torch.compile(mode={mode!r}) is not supported by the npu_compile backend; "
                "use mode='reduce-overhead' or leave mode out"
            )
        if options is not None:
            config = config.with_options(options)
            _compat.warn_no_effect(config, self._warned)
        self.stats.fx_graphs += 1
        return _compile(gm, list(example_inputs), config, self.stats, self.decompositions)


def _fallback(
    gm: torch.fx.GraphModule, name: str, reason: str, config: CompilerConfig, stats: BackendStats
) -> CompiledFn:
    if config.debug.aclgraph.strict:
        raise BackendError(
            f"cannot capture FX graph {name}: {reason} (debug.aclgraph.strict is set; unset it "
            "to run such graphs eagerly)"
        )
    logger.warning("FX graph %s runs eagerly: %s", name, reason)
    stats.fallbacks.append((name, reason))
    return _forward_of(gm)


def _capture_options(config: CompilerConfig) -> Any:
    from npu_mempool import CaptureOptions, PoolHandle

    aclgraph = config.debug.aclgraph
    pool = config.aclgraph_config.use_custom_pool
    assert pool is None or isinstance(pool, PoolHandle)  # the option's validator ensures it
    return CaptureOptions(
        pool=pool,
        # Mode 1 (a shared pool) turns mode 2 (reuse inside one FX graph) off, as in TorchAir.
        reuse_pool_across_shapes=pool is None and not aclgraph.disable_mempool_reuse_in_same_fx,
        # Plain bool/int: config reads are views that also carry TorchAir's `.value`.
        clone_input=bool(aclgraph.clone_input),
        clone_output=bool(aclgraph.enable_output_clone),
        check_output_overwrite=bool(aclgraph.check_output_overwrite),
        capture_limit=int(aclgraph.static_capture_size_limit),
        frozen_parameters=bool(config.experimental_config.frozen_parameter),
        strict=bool(aclgraph.strict),
        # warmup_runs left to npu-mempool: it knows which devices need an eager call per new
        # shape before capturing it (CUDA's lazily initialised cuBLAS).
    )


def _specializer(
    config: CompilerConfig, gm: torch.fx.GraphModule
) -> Callable[[object, Sequence[object]], Callable[..., Any]] | None:
    static = config.experimental_config.aclgraph
    if not static._aclnn_static_shape_kernel:
        return None
    from npu_static_kernel import StaticKernelCompiler

    compiler = StaticKernelCompiler(static._aclnn_static_shape_kernel_build_dir)

    def specialize(key: object, args: Sequence[object]) -> Callable[..., Any]:
        compiled: Callable[..., Any] = compiler.compile_static(gm, list(args))
        return compiled

    return specialize


def _specialized_per_shape(
    specialize: Callable[[object, Sequence[object]], Callable[..., Any]], forward: CompiledFn
) -> CompiledFn:
    """Call the shape-specialised callable for each call's shapes (``debug.run_eagerly``)."""
    built: dict[Hashable, Callable[..., Any]] = {}

    def call(*args: Any) -> Any:
        key = tuple(
            (a.shape, a.dtype, a.stride()) if isinstance(a, torch.Tensor) else (type(a), a)
            for a in args
        )
        fn = built.get(key)
        if fn is None:
            fn = built[key] = specialize(key, args)
        return fn(*args)

    call.__name__ = call.__qualname__ = getattr(forward, "__name__", "forward")
    return call


def _compile(
    gm: torch.fx.GraphModule,
    example_inputs: list[object],
    config: CompilerConfig,
    stats: BackendStats,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> CompiledFn:
    from npu_mempool import GraphRunner, InputKind
    from npu_streams import prepare_for_capture
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._guards import TracingContext

    name = f"npu_compile_{next(_graph_ids)}"
    reason = _uncapturable_reason(gm, example_inputs)
    if reason is not None:
        return _fallback(gm, name, reason, config, stats)

    config = _compat.resolve_pool(config, example_inputs)
    decompositions = decompositions or {}
    # The grad mode of the call being compiled (AOT compiles the forward graph without grad).
    grad_enabled = torch.is_grad_enabled()
    is_state = _input_kinds_from_sources(gm, example_inputs)
    n_dynamo_inputs = len(example_inputs)
    device = next(
        (x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu")
    )
    device_type = device.type
    dynamo_gm = gm
    built: dict[str, Any] = {}

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        fw_gm = gm  # the AOT forward graph (the outer `gm` is Dynamo's)
        context = TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        tokens = len(meta.tokens) if meta is not None else 0
        kinds = []
        for index in range(len(example_inputs)):
            dynamo_index = index - tokens
            info = meta.input_info[dynamo_index] if meta is not None and dynamo_index >= 0 else None
            if info is not None and info.mutates_data:
                kinds.append(InputKind.MUTATED)
            elif 0 <= dynamo_index < len(is_state) and is_state[dynamo_index]:
                kinds.append(InputKind.PARAMETER)
            else:
                kinds.append(InputKind.USER)
        if meta is not None and _records_autograd(meta, grad_enabled):
            built["fallback"] = _TRAINING_REASON
            return _forward_of(fw_gm)
        fw_gm = _passes.run_post_grad_passes(fw_gm, example_inputs, config, name)
        prepared = prepare_for_capture(fw_gm)
        forward = _forward_of(prepared)
        host_sync = _host_sync_reason(prepared)
        if host_sync is not None:
            built["fallback"] = host_sync
            return forward
        if config.debug.run_eagerly or config.debug.data_dump.enabled:
            _passes.finish(prepared, example_inputs, config, name)
            dumper = _dump.data_dumper(prepared, config, name)
            forward = dumper or _forward_of(prepared)
            stats.eager += 1
            specialize = (
                _passes.filter_specializer(config, _specializer(config, prepared), forward)
                if dumper is None
                else None
            )
            if specialize is not None:
                # The whole pipeline but the capture, as documented: static kernels included.
                forward = _specialized_per_shape(specialize, forward)
            built["direct"] = forward
            built["bypass"] = meta is not None and _runner_is_whole_call(
                meta, fw_gm, n_dynamo_inputs
            )
            return forward
        bypass = meta is not None and _runner_is_whole_call(meta, fw_gm, n_dynamo_inputs)
        # Ints that decide no shape become device scalars: one graph for all their values.
        tensorified = tensorify_int_inputs(prepared, example_inputs)
        _passes.finish(prepared, example_inputs, config, name)
        forward = _forward_of(prepared)
        specialize = _passes.filter_specializer(config, _specializer(config, prepared), forward)
        replayed = forward
        if (
            device_type == "cpu"
            and bypass
            and specialize is None
            and tensorified is None
            and CPU_REPLAYS_DYNAMO_GRAPH
            and not _passes.rewrites_graph(config, decompositions)
        ):
            # The CPU "graph" replays by re-running Python. Dynamo's graph calls the fast torch
            # bindings (one `linear` instead of ATen `t` + `addmm` overload calls), several µs
            # cheaper per step, with the same ops and the same in-place updates. With `bypass`
            # its inputs are AOT's inputs one to one, so the input classes still apply.
            replayed = _forward_of(dynamo_gm)
        runner = GraphRunner(
            replayed,
            input_kinds=kinds,
            options=_capture_options(config),
            specialize=specialize,
            name=name,
            guarded=_guarded_by_dynamo(kinds, example_inputs) if bypass else None,
        )
        stats.captured += 1
        stats._add_runner(runner)
        _report(name, kinds, tensorified, bypass, specialize is not None, prepared)
        # The runner as a plain function: what Dynamo calls on every step, so the cheapest form.
        # Inside AOT's wrapper (no bypass) the runner receives AOT's arguments, which Dynamo
        # does not guard, so nothing is marked guarded there.
        function = runner.as_function()
        if tensorified is not None:
            function = tensorified.wrap(function, device)
        built["direct"] = function
        built["bypass"] = bypass
        return function

    from npu_mempool import NpuMempoolError
    from npu_streams import NpuStreamsError

    try:
        compiled: CompiledFn = aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=fw_compiler,
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
        reason = f"AOT autograd could not trace it ({type(error).__name__}: {error})"
        return _fallback(gm, name, reason, config, stats)
    if "fallback" in built:
        return _fallback(gm, name, built["fallback"], config, stats)
    if built.get("bypass"):
        direct: CompiledFn = built["direct"]
        return direct
    return compiled


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


def get_npu_backend(
    *,
    compiler_config: CompilerConfig | None = None,
    custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> NpuBackend:
    """Return a ``torch.compile`` backend configured by ``compiler_config``.

    Args:
        compiler_config: Options; ``None`` means the defaults (reduce-overhead). The config is
            copied: edit it before this call.
        custom_decompositions: ``{ATen op overload: function}`` applied while AOT autograd
            traces the graph (the function replaces the op in the captured graph).

    Returns:
        The backend, for ``torch.compile(model, backend=...)``.

    Raises:
        BackendError: ``compiler_config.mode`` is ``"max-autotune"`` (GE), or the
            decompositions are not ``{op: function}``.

    Example:
        >>> config = CompilerConfig()
        >>> config.mode = "reduce-overhead"
        >>> backend = get_npu_backend(compiler_config=config)
        >>> # model = torch.compile(model, backend=backend)
    """
    return NpuBackend(compiler_config, custom_decompositions)


_default_backend: NpuBackend | None = None


def npu_compile_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object], **kwargs: Any
) -> CompiledFn:
    """The backend behind ``torch.compile(model, backend="npu_compile")`` (default options).

    Args:
        gm: The Dynamo graph.
        example_inputs: Its example inputs.
        **kwargs: ``mode`` and ``options`` from ``torch.compile``.

    Returns:
        The callable Dynamo runs in place of the graph.
    """
    global _default_backend
    if _default_backend is None:
        _default_backend = NpuBackend()
    return _default_backend(gm, example_inputs, **kwargs)
