"""``npu_compile.dynamo_export``: npu-graph-export's exporter, taking a CompilerConfig."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npu_compile.configs import _config_checks
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import ConfigError

if TYPE_CHECKING:
    from npu_graph_export import ExportResult


def dynamo_export(
    *args: Any,
    model: torch.nn.Module,
    export_path: str = "export_file",
    export_name: str = "export",
    dynamic: bool = False,
    config: CompilerConfig | None = None,
    **kwargs: Any,
) -> ExportResult:
    """Export ``model`` traced on ``args`` to an offline GE graph (``.air``, ``dynamo.pbtxt``).

    TorchAir's ``torchair.dynamo_export`` signature; the work is done by
    ``npu_graph_export.dynamo_export``, given an ``ExportConfig`` made from
    ``config.export.experimental.*``.

    Args:
        *args: Example inputs of the model.
        model: The module to export.
        export_path: Output directory.
        export_name: Base name of the ``.air`` file(s).
        dynamic: Export with symbolic shapes.
        config: Options (``export.experimental.auto_atc_config_generated``,
            ``export.experimental.enable_record_nn_module_stack``); ``None``: defaults.
        **kwargs: Keyword inputs of the model.

    Returns:
        The ``npu_graph_export.ExportResult`` of the export.

    Raises:
        ConfigError: ``config`` is not a CompilerConfig, or sets
            ``experimental_config.frozen_parameter`` (an export cannot promise fixed weight
            addresses, as in TorchAir).
    """
    if config is None:
        config = CompilerConfig()
    if not isinstance(config, CompilerConfig):
        raise ConfigError(
            f"dynamo_export config must be an npu_compile.CompilerConfig, got "
            f"{type(config).__name__}; build one with npu_compile.CompilerConfig()"
        )
    if config.experimental_config.frozen_parameter:
        raise ConfigError(
            "dynamo_export does not support experimental_config.frozen_parameter = True (fixed "
            "weight addresses belong to a running process, not to an offline graph); set it to "
            "False for the export"
        )
    # Imported here: the exporter loads its converters, torch's symbolic shapes and sympy, which
    # a process that never exports should not pay for at `import npu_compile`.
    from npu_graph_export import ExportConfig
    from npu_graph_export import dynamo_export as export

    _config_checks.warn_no_effect(config, set())
    experimental = config.export.experimental
    # The TorchAir tree is the facade; the exporter gets its own frozen, checked options.
    options = ExportConfig(
        auto_atc_config_generated=bool(experimental.auto_atc_config_generated),
        enable_record_nn_module_stack=bool(experimental.enable_record_nn_module_stack),
    )

    return export(
        *args,
        model=model,
        export_path=export_path,
        export_name=export_name,
        dynamic=dynamic,
        config=options,
        **kwargs,
    )
