"""Export options: :class:`ExportConfig`, or any TorchAir-style ``CompilerConfig`` object."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from npu_graph_export.errors import ConfigError

DEFAULT_EMBED_LIMIT_BYTES = (2048 - 200) * 1024 * 1024
"""Above this many bytes (graph plus weights) weights leave the ``.air`` for their own files.

protobuf cannot serialise messages over 2 GiB; 200 MiB are kept free for the graph itself."""


class _Experimental:
    """``config.export.experimental`` view of an :class:`ExportConfig` (TorchAir spelling)."""

    _FIELDS = ("auto_atc_config_generated", "enable_record_nn_module_stack")

    def __init__(self, config: ExportConfig) -> None:
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name in self._FIELDS:
            return getattr(self._config, name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._FIELDS:
            raise AttributeError(f"export.experimental has no option {name!r}")
        setattr(self._config, name, bool(value))


class _ExportSection:
    def __init__(self, config: ExportConfig) -> None:
        self.experimental = _Experimental(config)


@dataclass
class ExportConfig:
    """Options of :func:`dynamo_export`.

    The TorchAir spelling works too, so scripts written for ``torchair.CompilerConfig`` port by
    renaming: ``config.export.experimental.auto_atc_config_generated = True``.

    Attributes:
        auto_atc_config_generated: In a distributed export, rank 0 also writes
            ``model_relation_config.json`` and ``numa_config.json`` templates for ATC.
        enable_record_nn_module_stack: Every GE op carries the ``nn_module_stack`` of the
            PyTorch code it came from (string attribute), so GE can split the graph by layer.
        embed_limit_bytes: When the ``.air`` with every weight embedded would be longer than
            this many bytes, every weight becomes a ``FileConstant`` backed by a raw file;
            otherwise all are embedded ``Const``.
    """

    auto_atc_config_generated: bool = False
    enable_record_nn_module_stack: bool = False
    embed_limit_bytes: int = DEFAULT_EMBED_LIMIT_BYTES

    def __post_init__(self) -> None:
        for name in ("auto_atc_config_generated", "enable_record_nn_module_stack"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"ExportConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        limit = self.embed_limit_bytes
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ConfigError(f"ExportConfig.embed_limit_bytes must be an int, got {limit!r}")
        if self.embed_limit_bytes < 0:
            raise ConfigError(
                f"embed_limit_bytes must be >= 0, got {self.embed_limit_bytes}; use 0 to always "
                "write weights to files"
            )

    @property
    def export(self) -> _ExportSection:
        """TorchAir-style access: ``config.export.experimental.<option>``."""
        return _ExportSection(self)


def resolve_config(config: Any) -> ExportConfig:
    """Turn ``None``, an :class:`ExportConfig` or a ``CompilerConfig``-like object into options.

    A foreign object only needs ``config.export.experimental.auto_atc_config_generated`` and
    ``.enable_record_nn_module_stack`` (npu-compile's ``CompilerConfig`` has them), so this
    package never imports npu-compile.
    """
    if config is None:
        return ExportConfig()
    if isinstance(config, ExportConfig):
        return replace(config)  # a snapshot: later edits by the caller do not leak in
    experimental = getattr(getattr(config, "export", None), "experimental", None)
    if experimental is None:
        raise ConfigError(
            f"config must be an ExportConfig or have config.export.experimental (a CompilerConfig),"
            f" got {type(config).__name__}"
        )
    return ExportConfig(
        auto_atc_config_generated=bool(getattr(experimental, "auto_atc_config_generated", False)),
        enable_record_nn_module_stack=bool(
            getattr(experimental, "enable_record_nn_module_stack", False)
        ),
    )
