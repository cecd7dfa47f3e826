"""What the backend checks of a config before compiling: the mode, options without effect.

* ``mode="max-autotune"`` (TorchAir's Graph Engine mode) is accepted by the config and refused
  here, with what to use instead;
* an option that has no meaning off Ascend, set to something other than its default, warns once
  per backend (:class:`~npu_compile.errors.NoEffectWarning`) naming why.

The shims for what differs between torch releases are in ``_torch_compat``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from npu_compile.errors import BackendError, NoEffectWarning

if TYPE_CHECKING:
    from npu_compile.configs.compiler_config import CompilerConfig

__all__ = [
    "check_mode",
    "warn_no_effect",
]


def check_mode(config: CompilerConfig) -> None:
    """Refuse ``mode="max-autotune"`` with what runs instead."""
    if config.get("mode") == "max-autotune":
        raise BackendError(
            "config.mode = 'max-autotune' is TorchAir's Graph Engine mode, which needs CANN's GE "
            "runtime; npu-compile runs reduce-overhead (capture and replay) instead: set "
            "config.mode = 'reduce-overhead', or write an offline GE graph with "
            "npu_compile.dynamo_export"
        )


def warn_no_effect(config: CompilerConfig, warned: set[str]) -> None:
    """Warn once (per ``warned`` set) for each option set that has no effect here."""
    for path, option, value in config.options():
        if option.effect is None or value == option.default or path in warned:
            continue
        warned.add(path)
        warnings.warn(
            f"config.{path} = {value!r} has no effect with npu-compile: {option.effect}",
            NoEffectWarning,
            stacklevel=3,
        )
    dump_type = config.get("debug.graph_dump.type")
    if dump_type == "pbtxt" and "debug.graph_dump.type" not in warned:
        warned.add("debug.graph_dump.type")
        warnings.warn(
            "config.debug.graph_dump.type = 'pbtxt' has no effect with npu-compile: it is GE's "
            "graph format; use 'py' or 'txt' (or npu_compile.dynamo_export for a GE graph)",
            NoEffectWarning,
            stacklevel=3,
        )
