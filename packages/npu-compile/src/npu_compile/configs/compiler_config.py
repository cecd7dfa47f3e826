"""`CompilerConfig`: the TorchAir option tree for the features npu-compile implements.

The names and defaults follow TorchAir's ``torchair.configs.compiler_config.CompilerConfig`` so a
script ports by changing its import. Every assignment is validated on the spot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from npu_compile._options import (
    _Group,
    _Node,
    _Option,
    any_value,
    boolean,
    callable_or_none,
    choice,
    dict_or_none,
    existing_dir,
    existing_file_or_none,
    int_list_or_none,
    int_range,
    matches,
    op_names,
    optional_bool,
    optional_choice,
    optional_int_range,
    optional_path,
    pool_handle,
    real_path,
    sizes_or_none,
    str_or_none,
)
from npu_compile.errors import ConfigError, UnknownOptionError

__all__ = ["CompilerConfig", "NPUGRAPH_EX_OPTIONS"]

_INT64_MAX = 2**63 - 1

# Why an option has no effect here (the backend warns once with this text when it is set).
_GE = (
    "it configures CANN's Graph Engine (TorchAir's max-autotune mode), which npu-compile does "
    "not run"
)
_ASCEND = "it drives an Ascend-only runtime feature (CANN), which this backend does not use"
_NPU_PATTERNS = (
    "its passes rewrite Ascend (torch_npu) operator patterns, which graphs here do not contain"
)
_EXPORT_INTERNAL = "dynamo_export sets it itself; set dynamo_export's arguments instead"


class AclGraphConfig(_Node):
    """``aclgraph_config``: where captured graphs take their memory, and what they capture.

    Attributes:
        use_custom_pool: A pool every graph compiled with this config captures into, across FX
            graphs (mode 1): ``npu_compile.graph_pool_handle()``, or the tuple
            ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()`` returns (the
            same tuple means the same pool). Setting it turns pool reuse inside one FX graph
            (mode 2) off. ``None`` (default): one pool per FX graph.
        piecewise: Split a graph around the operators that cannot be captured on its device
            (host syncs such as ``.item()``, operators on another device, operators tagged
            ``torch.Tag.cudagraph_unsafe``) and around ``splitting_ops``; capture the pieces into
            one pool and run those operators eagerly between them (npu-compile extension;
            default ``True``). ``False``: such a graph runs eagerly as a whole.
        splitting_ops: Operators to leave out of the captured pieces and run eagerly, by name
            (``"aten::softmax"``, ``"vllm::unified_attention"``), as vLLM's ``splitting_ops``
            (npu-compile extension; default none).
        capture_sizes: Batch sizes to capture, as vLLM's ``cudagraph_capture_sizes``
            (npu-compile extension; default ``None``: one graph per size seen). With a list, a
            graph with a dynamic batch dimension (the first dynamic dimension of its inputs)
            pads each call up to the nearest listed size, replays, and slices the outputs
            back; a larger batch runs eagerly. The first call captures every listed size,
            largest first, into one pool. Padding is correct only where the rows are
            independent: a graph that reduces over the batch dimension is refused.
    """

    use_custom_pool = _Option[object](None, pool_handle, "shared pool (mode 1)")
    piecewise = _Option(True, boolean, "split around operators that cannot be captured")
    splitting_ops = _Option[tuple[str, ...]]((), op_names, "operators run eagerly between pieces")
    capture_sizes = _Option[tuple[int, ...] | None](None, sizes_or_none, "batch sizes to capture")


class AclGraphDebugConfig(_Node):
    """``debug.aclgraph``: capture and memory policies.

    Attributes:
        disable_reinplace_inplaceable_ops_pass: ``True`` keeps functional ops functional (no
            rewrite of ``out = op(x)`` into ``op_(x)`` where ``x`` is dead afterwards).
        disable_reinplace_input_mutated_ops_pass: ``True`` keeps "functional op + copy back into a
            mutated input" as is instead of one in-place op on the input (KV-cache writes).
        disable_mempool_reuse_in_same_fx: ``True`` turns off memory reuse between the graphs of
            one FX graph (mode 2; default ``False`` = reuse on).
        enable_output_clone: Clone outputs before returning them, so they survive later replays.
        static_capture_size_limit: Most graphs one FX graph may capture (default 64); past it the
            FX graph runs eagerly with one warning and its graphs are freed.
        clone_input: Copy user inputs into graph-owned buffers with one batched copy per call
            (mode 3; default ``True``). ``False`` captures the caller's own tensors.
        remove_cat_ops: TorchAir rewrites ``cat`` of Ascend ops with ``out=`` variants into
            writes into one buffer; accepted, no effect here.
        check_output_overwrite: Debug aid: reading an output that a later replay overwrote raises
            a clear error instead of returning wrong numbers (npu-compile extension).
        strict: Raise instead of falling back to eager when a graph cannot be captured
            (npu-compile extension; default ``False``: one logged reason, then eager).
        force_recapture: npugraph_ex's ``force_recapture``; accepted, no effect here.
        capture_error_mode: npugraph_ex's ``capture_error_mode``; accepted, no effect here (the
            runner captures in ``"thread_local"`` mode).
    """

    disable_reinplace_inplaceable_ops_pass = _Option(
        False, boolean, "no reinplacing of functional ops"
    )
    disable_reinplace_input_mutated_ops_pass = _Option(
        False, boolean, "no reinplacing of copies back into mutated inputs"
    )
    disable_mempool_reuse_in_same_fx = _Option(False, boolean, "no pool reuse inside one FX graph")
    enable_output_clone = _Option(False, boolean, "clone outputs before return")
    static_capture_size_limit = _Option(64, int_range(1, _INT64_MAX), "max graphs per FX graph")
    clone_input = _Option(True, boolean, "copy user inputs into graph buffers")
    remove_cat_ops = _Option(True, boolean, "rewrite cat of out= ops", effect=_NPU_PATTERNS)
    check_output_overwrite = _Option(False, boolean, "detect reads of overwritten outputs")
    strict = _Option(False, boolean, "raise instead of falling back to eager")
    force_recapture = _Option(
        False,
        boolean,
        "recapture on every call",
        effect="the graph runner keeps one capture per graph key; run with debug.run_eagerly "
        "to compare against uncaptured execution instead",
    )
    capture_error_mode = _Option(
        "global",
        choice("global", "thread_local", "relaxed"),
        "capture error mode",
        effect="the graph runner always captures in 'thread_local' mode",
    )


class _DumpBase(_Node):
    # TorchAir keeps the folder in `_path` (with `path` as its property); scripts use either.
    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__("path" if name == "_path" else name, value)

    def __getattribute__(self, name: str) -> Any:
        if name == "_path":
            return object.__getattribute__(self, "__dict__").get("path")
        return super().__getattribute__(name)

    def full_path(self, name: str) -> str | None:
        """Where a dump named ``name`` goes (TorchAir's naming), or ``None`` when off."""
        import os
        from datetime import UTC, datetime

        kind = self.__dict__["type"]
        if kind is None:
            return None
        folder = self.__dict__.get("path") or "."
        stamp = datetime.now(tz=UTC).strftime("%Y%m%d%H%M%S%f")
        return os.path.join(folder, f"{name}_rank_0_pid_{os.getpid()}_ts_{stamp}.{kind}")

    @property
    def enabled(self) -> bool:
        """Whether a dump type is set."""
        return self.__dict__["type"] is not None


class GraphDumpConfig(_DumpBase):
    """``debug.graph_dump``: write each compiled graph to a file.

    Attributes:
        type: ``"py"`` (the graph's Python code) or ``"txt"`` (its node listing): written for
            every FX graph after the passes; ``"pbtxt"`` is GE's format (no effect here).
        path: Folder of the dumps (default: current directory).
    """

    type = _Option[str | None](None, optional_choice("txt", "pbtxt", "py"), "graph dump format")
    path = _Option[str | None](None, real_path, "graph dump folder")


class DataDumpConfig(_DumpBase):
    """``debug.data_dump``: run graphs eagerly and save every operator's inputs and outputs.

    Attributes:
        type: ``"npy"`` turns the dump on: graphs are not captured, and each call writes one
            ``.npy`` per operator input and output under
            ``<path>/worldsize1_global_rank0/<graph>/<call>/``.
        path: Folder of the dumps (default: current directory).
        filter: ``fn(node) -> node or None``; only the FX nodes it returns are dumped.
    """

    type = _Option[str | None](None, optional_choice("npy"), "eager data dump")
    path = _Option[str | None](None, real_path, "data dump folder")
    filter = _Option[object](None, callable_or_none, "data dump filter")


class FxSummaryConfig(_DumpBase):
    """``debug.fx_summary``: the operator statistics of each FX graph, as CSV.

    Attributes:
        type: ``"csv"`` writes one file per FX graph (AOT's graph after the passes): a row per
            operator with its count and the input dtypes and shapes of its first use.
        skip_compile: Then run the graph eagerly instead of capturing it (TorchAir skips GE's
            compilation after the summary).
        path: Folder of the summaries (default: current directory; also ``_path``).
    """

    type = _Option[str | None](None, optional_choice("csv"), "fx summary")
    skip_compile = _Option(True, boolean, "skip compilation after the summary")
    path = _Option[str | None](None, real_path, "fx summary folder")


class DebugConfig(_Node):
    """``debug``: debugging switches.

    Attributes:
        graph_dump: :class:`GraphDumpConfig`.
        data_dump: :class:`DataDumpConfig`.
        fx_summary: :class:`FxSummaryConfig`.
        run_eagerly: Run the whole reduce-overhead pipeline (AOT graph, stream pass, static
            kernels) but call the graph directly instead of capturing and replaying it.
        aclgraph: Capture and memory policies (:class:`AclGraphDebugConfig`).
        deadlock_check: TorchAir's device deadlock watchdog; accepted, no effect here.
    """

    graph_dump = _Group(GraphDumpConfig)
    data_dump = _Group(DataDumpConfig)
    fx_summary = _Group(FxSummaryConfig)
    run_eagerly = _Option(False, boolean, "run the pipeline without capture")
    aclgraph = _Group(AclGraphDebugConfig)
    deadlock_check = _Option(False, boolean, "deadlock check", effect=_ASCEND)


class AoeConfig(_Node):
    """``aoe_config``: CANN's AOE tuning of GE graphs; accepted, no effect here."""

    aoe_mode = _Option[str | None](None, optional_choice("2"), "AOE tuning mode", effect=_GE)
    work_path = _Option("./", existing_dir, "AOE work folder", effect=_GE)
    aoe_config_file = _Option[str | None](
        None, existing_file_or_none(), "AOE config file", effect=_GE
    )


class CompilerExportExperimentalConfig(_Node):
    """``export.experimental``: options read by ``dynamo_export``.

    Attributes:
        enable_record_nn_module_stack: Each exported op carries its ``nn_module_stack``.
        auto_atc_config_generated: Multi-rank export writes ATC config templates on rank 0.
        enable_lite_export: GE's reduced converter set; accepted, no effect here.
    """

    enable_record_nn_module_stack = _Option(False, boolean, "record nn_module_stack per op")
    auto_atc_config_generated = _Option(False, boolean, "write ATC config templates")
    enable_lite_export = _Option(
        False,
        boolean,
        "lite export converters",
        effect="npu-graph-export has one converter set; the exported graph is the same either way",
    )


class CompilerExportConfig(_Node):
    """``export``: TorchAir's ``ExportConfig`` group, named apart from ``npu_graph_export``'s.

    Attributes:
        export_mode, export_path_dir, export_name, weight_name, inputs_name: set by TorchAir's
            ``dynamo_export`` for its own use; accepted, no effect here.
        experimental: :class:`CompilerExportExperimentalConfig`.
    """

    export_mode = _Option(False, boolean, "export mode", effect=_EXPORT_INTERNAL)
    export_path_dir = _Option("./", existing_dir, "export folder", effect=_EXPORT_INTERNAL)
    export_name = _Option[object](None, any_value, "export name", effect=_EXPORT_INTERNAL)
    weight_name = _Option[object](None, any_value, "weight names", effect=_EXPORT_INTERNAL)
    inputs_name = _Option[object](None, any_value, "input names", effect=_EXPORT_INTERNAL)
    experimental = _Group(CompilerExportExperimentalConfig)


class DumpConfig(_Node):
    """``dump_config``: tensor dumps by the Ascend runtime; accepted, no effect here."""

    enable_dump = _Option(False, boolean, "tensor dump", effect=_ASCEND)
    dump_path = _Option("./", existing_dir, "dump folder", effect=_ASCEND)
    dump_mode = _Option("all", choice("input", "output", "all"), "dump mode", effect=_ASCEND)
    quant_dumpable = _Option(False, boolean, "dump quantised ops", effect=_ASCEND)
    dump_step = _Option(
        "", matches(r"^(((\d+)|(\d+-{0,1}\d+))\|{0,1})*$", "0|1|2-5|6"), "steps", effect=_ASCEND
    )
    dump_layer = _Option(
        "", matches(r"^[0-9a-zA-Z_\" /\\.]*$", "Mul_1 Add1 Conv2D_1"), "layers", effect=_ASCEND
    )
    dump_data = _Option("tensor", choice("tensor", "stats"), "dump data", effect=_ASCEND)
    dump_config_path = _Option[str | None](
        None, existing_file_or_none(".json"), "acl dump config", effect=_ASCEND
    )
    data_dump_stage = _Option(
        "optimized", choice("original", "optimized"), "dump stage", effect=_ASCEND
    )


class FusionConfig(_Node):
    """``fusion_config``: GE fusion switches; accepted, no effect here."""

    fusion_switch_file = _Option[str | None](
        None, existing_file_or_none(), "fusion switch file", effect=_GE
    )


class ExperimentalAclGraphConfig(_Node):
    """``experimental_config.aclgraph``: static (shape-specialised) kernels.

    Attributes:
        _aclnn_static_shape_kernel: Build shape-specialised kernels for every captured shape.
        _aclnn_static_shape_kernel_build_dir: Where artifacts go (``None``: current directory).
        _aclnn_static_shape_kernel_fallback_dir: Where statistics and new artifacts go when the
            build directory is read-only (a cache baked into an image): artifacts found in the
            build directory are still used, misses build here, with one warning. ``None``:
            ``$NPU_STATIC_KERNEL_FALLBACK_DIR``, else ``$XDG_CACHE_HOME/npu_static_kernel``
            (npu-compile extension).
        _aclnn_static_shape_kernel_sym_value_range: Build only for graph keys whose symbolic size
            number ``_aclnn_static_shape_kernel_sym_index`` is in this list (``None``: all).
        _aclnn_static_shape_kernel_sym_index: Which symbolic size the range looks at.
        _super_kernel_optimize, _super_kernel_optimize_options, _super_kernel_debug_options:
            Ascend super kernels; accepted, no effect here.
        disable_static_kernel_compile_cache: npugraph_ex's switch; accepted, no effect (the
            static kernel cache is keyed by content and always used).
    """

    _aclnn_static_shape_kernel = _Option(False, boolean, "static kernel compilation")
    _aclnn_static_shape_kernel_build_dir = _Option[str | None](
        None, optional_path, "static kernel build directory"
    )
    _aclnn_static_shape_kernel_fallback_dir = _Option[str | None](
        None, optional_path, "static kernel fallback directory"
    )
    _aclnn_static_shape_kernel_sym_value_range = _Option[tuple[int, ...] | None](
        None, int_list_or_none, "symbolic values that get static kernels"
    )
    _aclnn_static_shape_kernel_sym_index = _Option(
        0, int_range(0, _INT64_MAX), "index of the symbolic value checked"
    )
    _super_kernel_optimize = _Option(False, boolean, "super kernels", effect=_ASCEND)
    _super_kernel_optimize_options = _Option[object](
        None, dict_or_none, "super kernel options", effect=_ASCEND
    )
    _super_kernel_debug_options = _Option[object](
        None, dict_or_none, "super kernel debug options", effect=_ASCEND
    )
    disable_static_kernel_compile_cache = _Option(
        False,
        boolean,
        "no static kernel cache",
        effect="the static kernel cache is keyed by graph content and always used",
    )


class ExperimentalConfig(_Node):
    """``experimental_config``.

    Attributes:
        keep_inference_input_mutations: Keep in-place updates of inputs (a KV cache write)
            inside the captured graph (default ``True``); ``False`` leaves them to AOT autograd's
            wrapper, after the replay.
        frozen_parameter: Promise that parameter and buffer addresses never change, so the graph
            runner skips checking them on each call.
        remove_noop_ops: Remove operators that return their input unchanged (default ``True``).
        pattern_fusion_pass: TorchAir's Ascend fusion patterns; accepted, no effect here.
        aclgraph: Static kernel options (:class:`ExperimentalAclGraphConfig`).
        The other options configure GE and are accepted with no effect here.
    """

    cc_parallel_enable = _Option(False, boolean, "parallel communication", effect=_GE)
    keep_inference_input_mutations = _Option(True, boolean, "input mutations stay in the graph")
    memory_efficiency = _Option(False, boolean, "GE memory efficiency", effect=_GE)
    frozen_parameter = _Option(False, boolean, "parameter addresses never change")
    static_model_ops_lower_limit = _Option[int | None](
        None, optional_int_range(-1, _INT64_MAX), "GE static model threshold", effect=_GE
    )
    jit_compile = _Option("auto", choice("auto"), "GE jit compile", effect=_GE)
    npu_fx_pass = _Option(False, boolean, "NPU FX passes", effect=_NPU_PATTERNS)
    aot_config_enable_joint_graph = _Option(
        False,
        boolean,
        "joint forward/backward graph",
        effect="GE's joint training graph; training graphs are captured here as AOT autograd's "
        "forward and backward graphs",
    )
    aot_config_output_loss_index = _Option(
        0,
        int_range(0, _INT64_MAX),
        "loss output index",
        effect="GE's joint training graph; training graphs are captured here as AOT autograd's "
        "forward and backward graphs",
    )
    topology_sorting_strategy = _Option(
        "DFS", choice("BFS", "DFS", "RDFS", "StableRDFS"), "GE topological order", effect=_GE
    )
    enable_ref_data = _Option(False, boolean, "GE RefData inputs", effect=_GE)
    enable_view_optimize = _Option(True, boolean, "GE view optimisation", effect=_GE)
    remove_noop_ops = _Option(True, boolean, "remove no-op operators")
    tiling_schedule_optimize = _Option(False, boolean, "GE tiling schedule", effect=_GE)
    pattern_fusion_pass = _Option(True, boolean, "Ascend fusion patterns", effect=_NPU_PATTERNS)
    aclgraph = _Group(ExperimentalAclGraphConfig)


class InferenceConfig(_Node):
    """``inference_config``: GE dynamic gears; accepted, no effect here."""

    dynamic_gears_merge_policy = _Option(
        "zip", choice("zip", "product"), "gear merge policy", effect=_GE
    )


class GeConfig(_Node):
    """``ge_config``: Graph Engine options; accepted, no effect here."""

    enable_single_stream = _Option(False, boolean, "GE single stream", effect=_GE)
    oo_level = _Option("O3", choice("O1", "O3"), "GE optimisation level", effect=_GE)
    oo_constant_folding = _Option[bool | None](None, optional_bool, "GE folding", effect=_GE)
    oo_dead_code_elimination = _Option[bool | None](None, optional_bool, "GE DCE", effect=_GE)
    export_compile_stat = _Option("2", choice("0", "1", "2"), "GE compile stats", effect=_GE)
    aicore_num = _Option[str | None](None, str_or_none, "GE AI core count", effect=_GE)
    optimization_switch = _Option[str | None](None, str_or_none, "GE switches", effect=_GE)


class CompilerConfig(_Node):
    """Options of the npu-compile backend, in TorchAir's tree.

    Every option path of TorchAir's ``CompilerConfig`` exists with its name, type checks and
    default (except ``mode``, whose default here is ``"reduce-overhead"``). Options that have no
    meaning off Ascend are accepted and make the backend warn once, naming why; the README lists
    each option's status. Reads give the value itself (``config.debug.run_eagerly`` is falsy);
    strings, ints and booleans also carry TorchAir's ``.value`` (``config.mode.value``,
    ``config.debug.aclgraph.clone_input.value == "1"``), which can be assigned too.

    Assignment validates: an unknown name raises :class:`~npu_compile.errors.UnknownOptionError`
    (a ``ValueError`` and an ``AttributeError``) naming the valid options and the closest match; a
    wrong type or value raises :class:`~npu_compile.errors.ConfigError` naming what is allowed.
    Configs compare equal and hash by value, so they can key caches.

    Attributes:
        mode: ``"reduce-overhead"`` (default; capture and replay). ``"npugraph_ex"`` is accepted as
            its TorchAir alias. ``"max-autotune"`` (GE graph mode) is accepted here and refused by
            :func:`~npu_compile.get_npu_backend`, which says what to use instead.
        post_grad_custom_pre_pass: ``fn(gm, example_inputs, config)`` run on each AOT graph
            before npu-compile's own passes (edit ``gm`` in place, or return a new GraphModule).
        post_grad_custom_post_pass: The same, run after them, right before capture.
        aclgraph_config: :class:`AclGraphConfig`.
        debug: :class:`DebugConfig`.
        experimental_config: :class:`ExperimentalConfig`.
        export: :class:`CompilerExportConfig`.
        aoe_config, dump_config, fusion_config, inference_config, ge_config: GE and Ascend
            runtime options, accepted with no effect here.

    Example:
        >>> from npu_compile import CompilerConfig
        >>> config = CompilerConfig()
        >>> config.mode = "reduce-overhead"
        >>> config.debug.aclgraph.enable_output_clone = True
        >>> config.mode.value
        'reduce-overhead'
    """

    mode = _Option(
        "reduce-overhead", choice("reduce-overhead", "npugraph_ex", "max-autotune"), "graph mode"
    )
    post_grad_custom_pre_pass = _Option[object](None, callable_or_none, "pass before ours")
    post_grad_custom_post_pass = _Option[object](None, callable_or_none, "pass after ours")
    debug = _Group(DebugConfig)
    aoe_config = _Group(AoeConfig)
    export = _Group(CompilerExportConfig)
    dump_config = _Group(DumpConfig)
    fusion_config = _Group(FusionConfig)
    experimental_config = _Group(ExperimentalConfig)
    inference_config = _Group(InferenceConfig)
    ge_config = _Group(GeConfig)
    aclgraph_config = _Group(AclGraphConfig)

    def __init__(self) -> None:
        super().__init__("")

    def _unknown(self, name: str) -> UnknownOptionError:
        if name == "npugraphex_config":
            return UnknownOptionError(
                "CompilerConfig has no npugraphex_config: TorchAir keeps a process-wide mirror "
                "of torch.compile(options=...) there; pass options= to torch.compile, or set the "
                "config paths the keys map to (npu_compile.configs.compiler_config."
                "NPUGRAPH_EX_OPTIONS)"
            )
        return super()._unknown(name)

    def with_options(self, options: Mapping[str, object] | None) -> CompilerConfig:
        """Return a copy with ``torch.compile(..., options={...})`` keys applied.

        The keys are TorchAir's npugraph_ex option names (see :data:`NPUGRAPH_EX_OPTIONS` for
        the mapping onto this tree).

        Args:
            options: ``{option name: value}``.

        Returns:
            A new config; this one is unchanged.

        Raises:
            UnknownOptionError: An option name is not known.
            ConfigError: ``options`` is not a mapping, or a value is not allowed.
        """
        import difflib

        if not isinstance(options, Mapping):
            raise ConfigError(
                f"torch.compile options must be a dict of npugraph_ex option names to values, got "
                f"{type(options).__name__}; pass options={{'clone_output': True}} or leave it out"
            )
        result = self.copy()
        for name, value in options.items():
            key: object = name  # callers outside mypy may pass any key
            if not isinstance(key, str) or key not in NPUGRAPH_EX_OPTIONS:
                names = sorted(NPUGRAPH_EX_OPTIONS)
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise UnknownOptionError(
                    f"torch.compile options: unknown key {key!r}.{hint} "
                    f"Valid keys: {', '.join(names)}."
                )
            path, inverted = NPUGRAPH_EX_OPTIONS[key]
            if inverted:
                if not isinstance(value, bool):
                    raise ConfigError(
                        f"torch.compile options: {key} must be True or False, got {value!r}"
                    )
                value = not value
            result.set(path, value)
        return result


# TorchAir npugraph_ex option name -> (CompilerConfig path, boolean inverted).
NPUGRAPH_EX_OPTIONS: dict[str, tuple[str, bool]] = {
    "use_graph_pool": ("aclgraph_config.use_custom_pool", False),
    "reuse_graph_pool_in_same_fx": ("debug.aclgraph.disable_mempool_reuse_in_same_fx", True),
    "capture_limit": ("debug.aclgraph.static_capture_size_limit", False),
    "clone_input": ("debug.aclgraph.clone_input", False),
    "clone_output": ("debug.aclgraph.enable_output_clone", False),
    "force_eager": ("debug.run_eagerly", False),
    "static_kernel_compile": ("experimental_config.aclgraph._aclnn_static_shape_kernel", False),
    "_vllm_aclnn_static_kernel_sym_index": (
        "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index",
        False,
    ),
    "_vllm_aclnn_static_kernel_sym_range": (
        "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range",
        False,
    ),
    "super_kernel_optimize": ("experimental_config.aclgraph._super_kernel_optimize", False),
    "super_kernel_optimize_options": (
        "experimental_config.aclgraph._super_kernel_optimize_options",
        False,
    ),
    "super_kernel_debug_options": (
        "experimental_config.aclgraph._super_kernel_debug_options",
        False,
    ),
    "inplace_pass": ("debug.aclgraph.disable_reinplace_inplaceable_ops_pass", True),
    "input_inplace_pass": ("debug.aclgraph.disable_reinplace_input_mutated_ops_pass", True),
    "remove_noop_ops": ("experimental_config.remove_noop_ops", False),
    "remove_cat_ops": ("debug.aclgraph.remove_cat_ops", False),
    "pattern_fusion_pass": ("experimental_config.pattern_fusion_pass", False),
    "frozen_parameter": ("experimental_config.frozen_parameter", False),
    "post_grad_custom_pre_pass": ("post_grad_custom_pre_pass", False),
    "post_grad_custom_post_pass": ("post_grad_custom_post_pass", False),
    "dump_tensor_data": ("dump_config.enable_dump", False),
    "data_dump_stage": ("dump_config.data_dump_stage", False),
    "data_dump_dir": ("dump_config.dump_path", False),
    # The standalone npugraph_ex backend's own keys.
    "deadlock_check": ("debug.deadlock_check", False),
    "force_recapture": ("debug.aclgraph.force_recapture", False),
    "capture_error_mode": ("debug.aclgraph.capture_error_mode", False),
    "disable_static_kernel_compile_cache": (
        "experimental_config.aclgraph.disable_static_kernel_compile_cache",
        False,
    ),
    # npu-compile's own keys.
    "static_kernel_build_dir": (
        "experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir",
        False,
    ),
    "static_kernel_fallback_dir": (
        "experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir",
        False,
    ),
    "check_output_overwrite": ("debug.aclgraph.check_output_overwrite", False),
    "strict": ("debug.aclgraph.strict", False),
}
