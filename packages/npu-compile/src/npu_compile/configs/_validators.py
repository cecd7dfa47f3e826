"""Option validators for :class:`CompilerConfig`'s option tree.

Each takes the dotted option path and a value, and returns the normalised value or raises
:class:`~npu_compile.errors.ConfigError` saying what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import npu_mempool
import npu_static_kernel

from npu_compile.errors import ConfigError

T = TypeVar("T")

# Validators receive the dotted option path (for the message) and the value; they return the
# normalised value or raise ConfigError saying what is allowed.
Validator = Callable[[str, object], T]


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def boolean(path: str, value: object) -> bool:
    """Accept exactly ``True`` or ``False`` (``1``/``"1"`` are refused: they hide typos)."""
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{path} must be True or False, got {_describe(value)}")


def int_range(low: int, high: int) -> Validator[int]:
    """An integer in ``[low, high]`` (bools are refused)."""

    def validate(path: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise ConfigError(f"{path} must be an int in [{low}, {high}], got {_describe(value)}")

    return validate


def choice(*allowed: str, hints: dict[str, str] | None = None) -> Validator[str]:
    """One of ``allowed``; ``hints`` maps a known but unsupported value to an explanation."""

    def validate(path: str, value: object) -> str:
        if isinstance(value, str) and value in allowed:
            return value
        if isinstance(value, str) and hints and value in hints:
            raise ConfigError(f"{path} = {value!r} is not supported: {hints[value]}")
        names = ", ".join(repr(a) for a in allowed)
        raise ConfigError(f"{path} must be one of {names}, got {_describe(value)}")

    return validate


def static_kernel_dir(field: str) -> Validator[str | None]:
    """``None`` or a directory path, as npu-static-kernel checks its ``StaticKernelOptions.field``.

    The rule is npu-static-kernel's own (it owns the directories): checked when assigned, so that
    a path it would refuse (empty, a NUL byte, a name or path too long for the file system) is
    refused here with the option's name, not when the backend is made. Stored as given.
    """

    def validate(path: str, value: object) -> str | None:
        if value is None:
            return None
        try:
            npu_static_kernel.StaticKernelOptions(**{field: value})  # type: ignore[arg-type]
        except npu_static_kernel.ConfigError as error:
            raise ConfigError(f"{path} must be None or a directory path: {error}") from None
        # Checked above: a str, or an os.PathLike of one.
        assert isinstance(value, (str, os.PathLike))
        return str(os.fspath(value))

    return validate


def mempool_error_mode(path: str, value: object) -> str:
    """One of the capture error modes npu-mempool's ``CaptureOptions`` accepts (its rule)."""
    try:
        npu_mempool.CaptureOptions(capture_error_mode=value)  # type: ignore[arg-type]
    except npu_mempool.ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    assert isinstance(value, str)
    return value


def pool_handle(path: str, value: object) -> object:
    """``None``, an ``npu_mempool.PoolHandle``, or a device pool id tuple.

    The tuple is what ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()``
    return (two ints); the backend turns it into a pool on the device the graph runs on, the same
    pool for every graph that names the same tuple.
    """
    if value is None or isinstance(value, npu_mempool.PoolHandle):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return value
    raise ConfigError(
        f"{path} must be None, a pool from npu_compile.graph_pool_handle(device), or the tuple "
        f"torch.npu.graph_pool_handle() / torch.cuda.graph_pool_handle() returns, got "
        f"{_describe(value)}"
    )


def callable_or_none(path: str, value: object) -> object:
    """``None`` or a callable (a graph pass ``fn(gm, example_inputs, config)``)."""
    if value is None or callable(value):
        return value
    raise ConfigError(
        f"{path} must be None or a callable fn(gm, example_inputs, config), got {_describe(value)}"
    )


def optional_choice(*allowed: str) -> Validator[str | None]:
    """``None`` or one of ``allowed``."""

    def validate(path: str, value: object) -> str | None:
        if value is None or (isinstance(value, str) and value in allowed):
            return value
        names = ", ".join(repr(a) for a in allowed)
        raise ConfigError(f"{path} must be None or one of {names}, got {_describe(value)}")

    return validate


def optional_bool(path: str, value: object) -> bool | None:
    """``None`` (leave the choice to the runtime), ``True`` or ``False``."""
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"{path} must be None, True or False, got {_describe(value)}")


def optional_int_range(low: int, high: int) -> Validator[int | None]:
    """``None`` or an integer in ``[low, high]``."""
    checked = int_range(low, high)

    def validate(path: str, value: object) -> int | None:
        if value is None:
            return None
        try:
            return checked(path, value)
        except ConfigError:
            raise ConfigError(
                f"{path} must be None or an int in [{low}, {high}], got {_describe(value)}"
            ) from None

    return validate


def int_list_or_none(path: str, value: object) -> tuple[int, ...] | None:
    """``None`` or a list/tuple of ints, stored as a tuple (configs hash by value)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    raise ConfigError(f"{path} must be None or a list of ints, got {_describe(value)}")


def op_names(path: str, value: object) -> tuple[str, ...]:
    """A list of operator names ``"namespace::name"`` (``"aten::softmax"``), stored as a tuple."""
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, str) and "::" in v and v.split("::", 1)[1] for v in value
    ):
        return tuple(value)
    raise ConfigError(
        f"{path} must be a list of operator names such as 'aten::softmax' or "
        f"'vllm::unified_attention', got {_describe(value)}"
    )


def sizes_or_none(path: str, value: object) -> tuple[int, ...] | None:
    """``None`` or positive ints, stored sorted and without repeats."""
    if value is None:
        return None
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    raise ConfigError(
        f"{path} must be None or a non-empty list of positive ints (the batch sizes to capture), "
        f"got {_describe(value)}"
    )


def dim_or_none(path: str, value: object) -> int | None:
    """``None`` or a dimension index: an int ``>= 0`` (bools are refused)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ConfigError(
        f"{path} must be None or a dimension index, an int >= 0 (0 for batch-first inputs), got "
        f"{_describe(value)}"
    )


def dict_or_none(path: str, value: object) -> object:
    """``None`` or a ``dict`` (stored as a copy)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(f"{path} must be None or a dict, got {_describe(value)}")


def str_or_none(path: str, value: object) -> str | None:
    """``None`` or a string."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{path} must be None or a str, got {_describe(value)}")


def any_value(path: str, value: object) -> object:
    """Anything (TorchAir keeps these as plain attributes)."""
    return value


def existing_dir(path: str, value: object) -> str:
    """A path (``str`` or ``os.PathLike``) naming a directory that exists."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and text and "\0" not in text and os.path.isdir(text):
            return text
    raise ConfigError(
        f"{path} must name an existing directory, got {_describe(value)}; create it first"
    )


def existing_file_or_none(suffix: str = "") -> Validator[str | None]:
    """``None`` or a path naming an existing file (ending with ``suffix`` when given)."""

    def validate(path: str, value: object) -> str | None:
        if value is None:
            return None
        if isinstance(value, (str, os.PathLike)):
            text = os.fspath(value)
            if (
                isinstance(text, str)
                and text
                and "\0" not in text
                and text.endswith(suffix)
                and os.path.isfile(text)
            ):
                return text
        kind = f"an existing {suffix} file" if suffix else "an existing file"
        raise ConfigError(f"{path} must be None or {kind}, got {_describe(value)}")

    return validate


def real_path(path: str, value: object) -> str | None:
    """``None`` or a path, stored resolved (``os.path.realpath``) as TorchAir does."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and text and "\0" not in text:
            return os.path.realpath(text)
    raise ConfigError(f"{path} must be None or a non-empty path, got {_describe(value)}")


def matches(pattern: str, example: str) -> Validator[str]:
    """A string matching the regular expression ``pattern``."""
    import re

    compiled = re.compile(pattern)

    def validate(path: str, value: object) -> str:
        if isinstance(value, str) and compiled.match(value):
            return value
        raise ConfigError(
            f"{path} must be a string like {example!r} (pattern {pattern}), got {_describe(value)}"
        )

    return validate
