"""TorchAir's Ascend-only scopes, accepted with no effect, and ``npu_wait_tensor``.

``limit_core_num``, ``super_kernel``, ``op_never_timeout`` and ``data_dump`` tag the operators
inside them for CANN (core limits, super kernel fusion, no timeout, tensor dumps). Nothing here
reads those tags, so the scopes only keep a script running: each one warns once
(:class:`~npu_compile.errors.NoEffectWarning`) the first time it runs. The warning comes from a
custom op that the scope issues, at run time, not from Python code Dynamo traces: a warning
during tracing would break the graph, and ``fullgraph=True`` scripts must still compile.
"""

from __future__ import annotations

import threading
import warnings
from types import TracebackType

import npu_streams
import torch
from torch.fx.node import has_side_effect

from npu_compile.errors import NoEffectWarning

__all__ = [
    "limit_core_num",
    "super_kernel",
    "op_never_timeout",
    "data_dump",
    "npu_wait_tensor",
]

_WHY = {
    "limit_core_num": "AI core limits per stream are an Ascend runtime feature",
    "super_kernel": "super kernel fusion is an Ascend (CANN) feature",
    "op_never_timeout": "operator timeouts belong to CANN's Graph Engine",
    "data_dump": "tensor dumps of a captured graph are an Ascend runtime feature",
}
_warned: set[str] = set()
_lock = threading.Lock()


@torch.library.custom_op("npu_compile::no_effect_scope", mutates_args=())
def _no_effect_scope(name: str) -> None:
    with _lock:
        first = name not in _warned
        _warned.add(name)
    if first:
        warnings.warn(
            f"npu_compile.scope.{name} has no effect with npu-compile: {_WHY[name]}; the "
            "operators inside run as if the scope were absent",
            NoEffectWarning,
            stacklevel=2,
        )


@_no_effect_scope.register_fake
def _no_effect_scope_fake(name: str) -> None:
    return None


has_side_effect(torch.ops.npu_compile.no_effect_scope.default)
has_side_effect(torch.ops.npu_compile.no_effect_scope)


class _NoEffectScope:
    def __init__(self, name: str) -> None:
        self._name = name

    def __enter__(self) -> _NoEffectScope:
        torch.ops.npu_compile.no_effect_scope(self._name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def limit_core_num(op_aicore_num: int, op_vectorcore_num: int) -> _NoEffectScope:
    """TorchAir's per-scope AI core limit: accepted, no effect here (warns once).

    Args:
        op_aicore_num: Cube cores the operators inside may use (Ascend).
        op_vectorcore_num: Vector cores the operators inside may use (Ascend).

    Returns:
        A context manager.

    Raises:
        TypeError: A count is not an int.
    """
    _check_int("op_aicore_num", op_aicore_num)
    _check_int("op_vectorcore_num", op_vectorcore_num)
    return _NoEffectScope("limit_core_num")


def super_kernel(scope: str | None, options: str = "") -> _NoEffectScope:
    """TorchAir's super kernel scope: accepted, no effect here (warns once).

    Args:
        scope: Name of the fused region (``None`` as ``""``).
        options: CANN super kernel options.

    Returns:
        A context manager.

    Raises:
        TypeError: ``scope`` or ``options`` is not a string.
    """
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"super_kernel scope must be a str, got {type(scope).__name__}")
    if not isinstance(options, str):
        raise TypeError(f"super_kernel options must be a str, got {type(options).__name__}")
    return _NoEffectScope("super_kernel")


def op_never_timeout(enable: bool = True) -> _NoEffectScope:
    """TorchAir's no-timeout scope for GE operators: accepted, no effect here (warns once).

    Args:
        enable: Whether the operators inside never time out.

    Returns:
        A context manager.

    Raises:
        TypeError: ``enable`` is not a bool (as in TorchAir).
    """
    if not isinstance(enable, bool):
        raise TypeError(
            f"op_never_timeout() argument 'enable' must be bool, got {type(enable).__name__}"
        )
    return _NoEffectScope("op_never_timeout")


def data_dump() -> _NoEffectScope:
    """TorchAir's tensor-dump scope: accepted, no effect here (warns once).

    Returns:
        A context manager.
    """
    return _NoEffectScope("data_dump")


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    """Return ``self``, used after ``dependency`` is computed (TorchAir's GE control edge).

    Here it is :func:`npu_compile.ops.wait` on ``dependency``: the current stream waits for the
    stream that produces it, then ``self`` is returned unchanged.

    Args:
        self: The tensor to return.
        dependency: The tensor that must be complete first.

    Returns:
        ``self``.
    """
    npu_streams.wait([dependency])
    return self
