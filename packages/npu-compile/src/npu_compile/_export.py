"""``npu_compile.dynamo_export``: npu-graph-export's exporter, taking a CompilerConfig."""

from __future__ import annotations

from typing import Any

import torch

from npu_compile.configs.compiler_config import CompilerConfig


def dynamo_export(
    *args: Any,
    model: torch.nn.Module,
    export_path: str = "export_file",
    export_name: str = "export",
    dynamic: bool = False,
    config: CompilerConfig | None = None,
    **kwargs: Any,
) -> Any:
    """Export ``model`` traced on ``args`` to an offline GE graph (``.air``, ``dynamo.pbtxt``).

    TorchAir's ``torchair.dynamo_export`` signature; the work is done by
    ``npu_graph_export.dynamo_export``, which reads ``config.export.experimental.*``.

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
        Whatever ``npu_graph_export.dynamo_export`` returns (see its documentation).
    """
    from npu_graph_export import dynamo_export as export

    return export(
        *args,
        model=model,
        export_path=export_path,
        export_name=export_name,
        dynamic=dynamic,
        config=config if config is not None else CompilerConfig(),
        **kwargs,
    )
