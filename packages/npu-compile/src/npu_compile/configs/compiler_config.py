"""`CompilerConfig`: the TorchAir option tree for the features npu-compile implements.

The names and defaults follow TorchAir's ``torchair.configs.compiler_config.CompilerConfig`` so a
script ports by changing its import. Every assignment is validated on the spot.
"""

from __future__ import annotations

from collections.abc import Mapping

from npu_compile._options import (
    _Group,
    _Node,
    _Option,
    boolean,
    choice,
    int_range,
    optional_path,
    pool_handle,
)
from npu_compile.errors import ConfigError

__all__ = ["CompilerConfig", "NPUGRAPH_EX_OPTIONS"]

_MODE_HINTS = {
    "max-autotune": (
        "it is TorchAir's Graph Engine mode, which needs CANN's GE runtime; npu-compile implements "
        "reduce-overhead only. Set config.mode = 'reduce-overhead' (or leave the default), or use "
        "npu_compile.dynamo_export to write an offline GE graph."
    ),
}


class AclGraphConfig(_Node):
    """``aclgraph_config``: where captured graphs take their memory.

    Attributes:
        use_custom_pool: A pool handle (``npu_mempool.graph_pool_handle()``); every graph
            compiled with this config captures into it, across FX graphs (mode 1). Setting it
            turns pool reuse inside one FX graph (mode 2) off. ``None`` (default): one pool per
            FX graph.
    """

    use_custom_pool = _Option[object](None, pool_handle, "shared pool (mode 1)")


class AclGraphDebugConfig(_Node):
    """``debug.aclgraph``: capture and memory policies.

    Attributes:
        disable_mempool_reuse_in_same_fx: ``True`` turns off memory reuse between the graphs of
            one FX graph (mode 2; default ``False`` = reuse on).
        clone_input: Copy user inputs into graph-owned buffers with one batched copy per call
            (mode 3; default ``True``). ``False`` captures the caller's own tensors.
        enable_output_clone: Clone outputs before returning them, so they survive later replays.
        static_capture_size_limit: Most graphs one FX graph may capture (default 64); past it the
            FX graph runs eagerly with one warning and its graphs are freed.
        check_output_overwrite: Debug aid: reading an output that a later replay overwrote raises
            a clear error instead of returning wrong numbers (npu-compile extension).
        strict: Raise instead of falling back to eager when a graph cannot be captured
            (npu-compile extension; default ``False``: one logged reason, then eager).
    """

    disable_mempool_reuse_in_same_fx = _Option(False, boolean, "no pool reuse inside one FX graph")
    clone_input = _Option(True, boolean, "copy user inputs into graph buffers")
    enable_output_clone = _Option(False, boolean, "clone outputs before return")
    static_capture_size_limit = _Option(64, int_range(1, 2**63 - 1), "max graphs per FX graph")
    check_output_overwrite = _Option(False, boolean, "detect reads of overwritten outputs")
    strict = _Option(False, boolean, "raise instead of falling back to eager")


class DebugConfig(_Node):
    """``debug``: debugging switches.

    Attributes:
        run_eagerly: Run the whole reduce-overhead pipeline (AOT graph, stream pass, static
            kernels) but call the graph directly instead of capturing and replaying it.
        aclgraph: Capture and memory policies (:class:`AclGraphDebugConfig`).
    """

    run_eagerly = _Option(False, boolean, "run the pipeline without capture")
    aclgraph = _Group(AclGraphDebugConfig)


class ExperimentalAclGraphConfig(_Node):
    """``experimental_config.aclgraph``: static (shape-specialised) kernels.

    Attributes:
        _aclnn_static_shape_kernel: Build shape-specialised kernels for every captured shape.
        _aclnn_static_shape_kernel_build_dir: Where artifacts go (``None``: current directory).
    """

    _aclnn_static_shape_kernel = _Option(False, boolean, "static kernel compilation")
    _aclnn_static_shape_kernel_build_dir = _Option[str | None](
        None, optional_path, "static kernel build directory"
    )


class ExperimentalConfig(_Node):
    """``experimental_config``.

    Attributes:
        frozen_parameter: Promise that parameter and buffer addresses never change, so the graph
            runner skips checking them on each call.
        aclgraph: Static kernel options (:class:`ExperimentalAclGraphConfig`).
    """

    frozen_parameter = _Option(False, boolean, "parameter addresses never change")
    aclgraph = _Group(ExperimentalAclGraphConfig)


class ExportExperimentalConfig(_Node):
    """``export.experimental``: options read by ``dynamo_export``.

    Attributes:
        auto_atc_config_generated: Multi-rank export writes ATC config templates on rank 0.
        enable_record_nn_module_stack: Each exported op carries its ``nn_module_stack``.
    """

    auto_atc_config_generated = _Option(False, boolean, "write ATC config templates")
    enable_record_nn_module_stack = _Option(False, boolean, "record nn_module_stack per op")


class ExportConfig(_Node):
    """``export``.

    Attributes:
        experimental: :class:`ExportExperimentalConfig`.
    """

    experimental = _Group(ExportExperimentalConfig)


class CompilerConfig(_Node):
    """Options of the npu-compile backend, in TorchAir's tree.

    Assignment validates: an unknown name raises :class:`~npu_compile.errors.UnknownOptionError`
    (a ``ValueError`` and an ``AttributeError``) naming the valid options and the closest match; a
    wrong type or value raises :class:`~npu_compile.errors.ConfigError` naming what is allowed.
    Configs compare equal and hash by value, so they can key caches.

    Attributes:
        mode: ``"reduce-overhead"`` (default; capture and replay). ``"npugraph_ex"`` is accepted as
            its TorchAir alias. ``"max-autotune"`` (GE graph mode) is refused with an explanation.
        aclgraph_config: :class:`AclGraphConfig`.
        debug: :class:`DebugConfig`.
        experimental_config: :class:`ExperimentalConfig`.
        export: :class:`ExportConfig`.

    Example:
        >>> config = CompilerConfig()
        >>> config.mode = "reduce-overhead"
        >>> config.debug.aclgraph.enable_output_clone = True
    """

    mode = _Option(
        "reduce-overhead",
        choice("reduce-overhead", "npugraph_ex", hints=_MODE_HINTS),
        "graph mode",
    )
    aclgraph_config = _Group(AclGraphConfig)
    debug = _Group(DebugConfig)
    experimental_config = _Group(ExperimentalConfig)
    export = _Group(ExportConfig)

    def __init__(self) -> None:
        super().__init__("")

    def with_options(self, options: Mapping[str, object]) -> CompilerConfig:
        """Return a copy with TorchAir ``npugraph_ex`` options applied.

        These are the keys of ``torch.compile(..., options={...})`` (see
        :data:`NPUGRAPH_EX_OPTIONS` for the mapping onto this tree).

        Args:
            options: ``{option name: value}``.

        Returns:
            A new config; this one is unchanged.

        Raises:
            UnknownOptionError: An option name is not known.
            ConfigError: A value is not allowed.
        """
        import difflib

        from npu_compile.errors import UnknownOptionError

        result = self.copy()
        for key, value in options.items():
            if key not in NPUGRAPH_EX_OPTIONS:
                names = sorted(NPUGRAPH_EX_OPTIONS)
                close = difflib.get_close_matches(key, names, n=1)
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
    "static_kernel_build_dir": (
        "experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir",
        False,
    ),
    "frozen_parameter": ("experimental_config.frozen_parameter", False),
    "check_output_overwrite": ("debug.aclgraph.check_output_overwrite", False),
    "strict": ("debug.aclgraph.strict", False),
}
