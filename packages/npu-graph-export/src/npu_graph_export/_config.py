"""Export options: :class:`ExportConfig`, or any TorchAir-style ``CompilerConfig`` object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npu_graph_export.errors import ConfigError

DEFAULT_EMBED_LIMIT_BYTES = (2048 - 200) * 1024 * 1024
"""Above this many bytes (graph plus weights) weights leave the ``.air`` for their own files.

protobuf cannot serialise messages over 2 GiB; 200 MiB are kept free for the graph itself."""

_EXPERIMENTAL = ("auto_atc_config_generated", "enable_record_nn_module_stack")
"""The options TorchAir keeps under ``config.export.experimental``."""


class _Experimental:
    """Read-only ``config.export.experimental`` view of an :class:`ExportConfig`."""

    __slots__ = ("_config",)

    def __init__(self, config: ExportConfig) -> None:
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name in _EXPERIMENTAL:
            return getattr(self._config, name)
        raise AttributeError(f"export.experimental has no option {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        if name not in _EXPERIMENTAL:
            raise AttributeError(f"export.experimental has no option {name!r}")
        raise ConfigError(
            f"ExportConfig is frozen, export.experimental.{name} cannot be assigned: build it as "
            f"ExportConfig({name}=True), derive one with dataclasses.replace(config, {name}=True),"
            " or pass an npu_compile.CompilerConfig (TorchAir spelling) as config="
        )


class _ExportSection:
    """Read-only ``config.export`` view of an :class:`ExportConfig`."""

    __slots__ = ("experimental",)
    experimental: _Experimental

    def __init__(self, config: ExportConfig) -> None:
        object.__setattr__(self, "experimental", _Experimental(config))

    def __setattr__(self, name: str, value: object) -> None:
        raise ConfigError(
            f"ExportConfig is frozen, export.{name} cannot be assigned: give the options to "
            "ExportConfig(...) or dataclasses.replace, or pass an npu_compile.CompilerConfig "
            "(TorchAir spelling) as config="
        )


@dataclass(frozen=True)
class ExportConfig:
    """Options of :func:`dynamo_export`, checked when built (frozen).

    Give the options to the constructor, or derive a changed copy with ``dataclasses.replace``;
    a wrong value is a :class:`~npu_graph_export.ConfigError` at once. The TorchAir spelling
    ``config.export.experimental.<option>`` reads the options; to set them in that spelling,
    pass an ``npu_compile.CompilerConfig`` as ``config=`` instead.

    Attributes:
        auto_atc_config_generated: In a distributed export, rank 0 also writes
            ``model_relation_config.json`` and ``numa_config.json`` templates for ATC.
        enable_record_nn_module_stack: Every GE op carries the ``nn_module_stack`` of the
            PyTorch code it came from (string attribute), so GE can split the graph by layer.
        embed_limit_bytes: When the ``.air`` with every weight embedded would be longer than
            this many bytes, every weight becomes a ``FileConstant`` backed by a raw file;
            otherwise all are embedded ``Const``.

    Example:
        >>> import dataclasses
        >>> from npu_graph_export import ExportConfig
        >>> config = ExportConfig(enable_record_nn_module_stack=True)
        >>> config.export.experimental.enable_record_nn_module_stack
        True
        >>> dataclasses.replace(config, embed_limit_bytes=0).embed_limit_bytes
        0
    """

    auto_atc_config_generated: bool = False
    enable_record_nn_module_stack: bool = False
    embed_limit_bytes: int = DEFAULT_EMBED_LIMIT_BYTES

    def __post_init__(self) -> None:
        for name in _EXPERIMENTAL:
            value = getattr(self, name)
            if not isinstance(value, bool):
                # A string such as "0" or "False" is truthy: it would silently turn the option on.
                raise ConfigError(f"ExportConfig.{name} must be True or False, got {value!r}")
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
        """TorchAir-style read access: ``config.export.experimental.<option>``."""
        return _ExportSection(self)


def resolve_config(config: Any) -> ExportConfig:
    """Turn ``None``, an :class:`ExportConfig` or a ``CompilerConfig``-like object into options.

    A foreign object only needs ``config.export.experimental.auto_atc_config_generated`` and
    ``.enable_record_nn_module_stack`` (npu-compile's ``CompilerConfig`` has them), so this
    package never imports npu-compile. Their values must be ``True`` or ``False``.
    """
    if config is None:
        return ExportConfig()
    if isinstance(config, ExportConfig):
        return config  # frozen: the caller cannot change it during the export
    experimental = getattr(getattr(config, "export", None), "experimental", None)
    if experimental is None:
        raise ConfigError(
            f"config must be an ExportConfig or have config.export.experimental (a CompilerConfig),"
            f" got {type(config).__name__}"
        )
    values: dict[str, bool] = {}
    for name in _EXPERIMENTAL:
        value = getattr(experimental, name, False)
        flag = _flag(value)
        if flag is None:
            # Never bool(value): the string "0" would turn the option on.
            raise ConfigError(
                f"config.export.experimental.{name} must be True or False, got {value!r}; "
                "set it to a bool"
            )
        values[name] = flag
    return ExportConfig(**values)


def _flag(value: object) -> bool | None:
    """``value`` as a flag when it is one: a bool, or a bool-like ``int`` subclass of 0 or 1.

    npu-compile's ``CompilerConfig`` reads its booleans back as such a subclass (``bool`` cannot
    be subclassed, and the value also carries TorchAir's ``.value`` string). A plain ``1`` is
    refused, as ``ExportConfig`` and ``CompilerConfig`` refuse it; so is anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and type(value) is not int and value in (0, 1):
        return value == 1
    return None
