"""``experimental_config``: static kernels, input mutations, parameters, no-op removal."""

from __future__ import annotations

from npu_compile.configs._effects import ASCEND, GE, INT64_MAX, NPU_PATTERNS
from npu_compile.configs._options import _Group, _Node, _Option
from npu_compile.configs._validators import (
    boolean,
    choice,
    dict_or_none,
    int_list_or_none,
    int_range,
    optional_int_range,
    static_kernel_dir,
)

__all__ = ["ExperimentalAclGraphConfig", "ExperimentalConfig"]

_JOINT_GRAPH = (
    "GE's joint training graph; training graphs are captured here as AOT autograd's forward and "
    "backward graphs"
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

    _aclnn_static_shape_kernel = _Option(
        False,
        boolean,
        "static kernel compilation",
        key="static_kernel_compile",
        note="Inductor (CPU/CUDA) or CANN builder, every captured shape",
    )
    _aclnn_static_shape_kernel_build_dir = _Option[str | None](
        None,
        static_kernel_dir("build_dir"),
        "static kernel build directory",
        key="static_kernel_build_dir",
        example="<dir>",
        note="where the artifacts go (`None`: the current directory)",
    )
    _aclnn_static_shape_kernel_fallback_dir = _Option[str | None](
        None,
        static_kernel_dir("fallback_dir"),
        "static kernel fallback directory",
        key="static_kernel_fallback_dir",
        example="<dir>",
        note="npu-compile extension: where misses build when the build dir is read-only (default "
        "`$NPU_STATIC_KERNEL_FALLBACK_DIR`, else `$XDG_CACHE_HOME/npu_static_kernel`)",
    )
    _aclnn_static_shape_kernel_sym_value_range = _Option[tuple[int, ...] | None](
        None,
        int_list_or_none,
        "symbolic values that get static kernels",
        key="_vllm_aclnn_static_kernel_sym_range",
        example=[1, 2],
        note="only keys whose symbolic size is in the list get static kernels",
    )
    _aclnn_static_shape_kernel_sym_index = _Option(
        0,
        int_range(0, INT64_MAX),
        "index of the symbolic value checked",
        key="_vllm_aclnn_static_kernel_sym_index",
        example=1,
        note="which symbolic size the range checks",
    )
    _super_kernel_optimize = _Option(
        False, boolean, "super kernels", effect=ASCEND, key="super_kernel_optimize"
    )
    _super_kernel_optimize_options = _Option[object](
        None,
        dict_or_none,
        "super kernel options",
        effect=ASCEND,
        key="super_kernel_optimize_options",
        example={"k": "v"},
    )
    _super_kernel_debug_options = _Option[object](
        None,
        dict_or_none,
        "super kernel debug options",
        effect=ASCEND,
        key="super_kernel_debug_options",
        example={"k": "v"},
    )
    disable_static_kernel_compile_cache = _Option(
        False,
        boolean,
        "no static kernel cache",
        effect="the static kernel cache is keyed by graph content and always used",
        key="disable_static_kernel_compile_cache",
        note="npugraph_ex option; the static kernel cache is keyed by graph content and always "
        "used",
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

    cc_parallel_enable = _Option(False, boolean, "parallel communication", effect=GE)
    keep_inference_input_mutations = _Option(
        True,
        boolean,
        "input mutations stay in the graph",
        note="`False`: AOT's wrapper copies mutated inputs after the replay",
    )
    memory_efficiency = _Option(False, boolean, "GE memory efficiency", effect=GE)
    frozen_parameter = _Option(
        False,
        boolean,
        "parameter addresses never change",
        key="frozen_parameter",
        note="no per-call address check of parameters",
    )
    static_model_ops_lower_limit = _Option[int | None](
        None,
        optional_int_range(-1, INT64_MAX),
        "GE static model threshold",
        effect=GE,
        example=4,
    )
    # TorchAir accepts no other value.
    jit_compile = _Option("auto", choice("auto"), "GE jit compile", effect=GE, example="auto")
    npu_fx_pass = _Option(False, boolean, "NPU FX passes", effect=NPU_PATTERNS)
    aot_config_enable_joint_graph = _Option(
        False, boolean, "joint forward/backward graph", effect=_JOINT_GRAPH
    )
    aot_config_output_loss_index = _Option(
        0, int_range(0, INT64_MAX), "loss output index", effect=_JOINT_GRAPH, example=1
    )
    topology_sorting_strategy = _Option(
        "DFS",
        choice("BFS", "DFS", "RDFS", "StableRDFS"),
        "GE topological order",
        effect=GE,
        example="StableRDFS",
    )
    enable_ref_data = _Option(False, boolean, "GE RefData inputs", effect=GE)
    enable_view_optimize = _Option(True, boolean, "GE view optimisation", effect=GE)
    remove_noop_ops = _Option(
        True,
        boolean,
        "remove no-op operators",
        key="remove_noop_ops",
        note="torch's no-op removal (`x ** 1`, `repeat(1, 1)`, ...)",
    )
    tiling_schedule_optimize = _Option(False, boolean, "GE tiling schedule", effect=GE)
    pattern_fusion_pass = _Option(
        True, boolean, "Ascend fusion patterns", effect=NPU_PATTERNS, key="pattern_fusion_pass"
    )
    aclgraph = _Group(ExperimentalAclGraphConfig)
