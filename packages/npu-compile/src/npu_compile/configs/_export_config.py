"""``export``: the options TorchAir's export reads (``dynamo_export`` sets most of them)."""

from __future__ import annotations

from npu_compile.configs._effects import EXPORT_INTERNAL
from npu_compile.configs._options import _Group, _Node, _Option
from npu_compile.configs._validators import any_value, boolean, existing_dir

__all__ = ["CompilerExportConfig", "CompilerExportExperimentalConfig"]


class CompilerExportExperimentalConfig(_Node):
    """``export.experimental``: options read by ``dynamo_export``.

    Attributes:
        enable_record_nn_module_stack: Each exported op carries its ``nn_module_stack``.
        auto_atc_config_generated: Multi-rank export writes ATC config templates on rank 0.
        enable_lite_export: GE's reduced converter set; accepted, no effect here.
    """

    enable_record_nn_module_stack = _Option(
        False, boolean, "record nn_module_stack per op", note="read by `dynamo_export`"
    )
    auto_atc_config_generated = _Option(
        False, boolean, "write ATC config templates", note="read by `dynamo_export`"
    )
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

    export_mode = _Option(False, boolean, "export mode", effect=EXPORT_INTERNAL)
    export_path_dir = _Option(
        "./", existing_dir, "export folder", effect=EXPORT_INTERNAL, example="<dir>"
    )
    export_name = _Option[object](
        None, any_value, "export name", effect=EXPORT_INTERNAL, example="exported"
    )
    weight_name = _Option[object](
        None, any_value, "weight names", effect=EXPORT_INTERNAL, example={1: "w"}
    )
    inputs_name = _Option[object](
        None, any_value, "input names", effect=EXPORT_INTERNAL, example={1: "x"}
    )
    experimental = _Group(CompilerExportExperimentalConfig)
