"""The device types npu-mempool captures on: one registration per device module.

A device module declares a :class:`DeviceType` (its torch device type and how to build its graph
backend, capability probes included) and ``_devices/__init__.py`` registers it in its one list.
Everything that picks a backend by device type (runners, :func:`graph_implementation`,
:func:`graph_pool_handle`) reads this registry, so a new device needs no branch anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from npu_mempool._devices.base import GraphBackend
from npu_mempool.errors import ConfigError

__all__ = [
    "DeviceType",
    "backend_for",
    "forget_backends",
    "register",
    "registered",
    "unregister",
]


@dataclass(frozen=True)
class DeviceType:
    """One device type and how to build its graph backend.

    Attributes:
        name: The torch device type its tensors report (``tensor.device.type``).
        build: Makes the backend, probing the torch (and vendor library) capabilities it needs.
            Called once, at the first capture (or query) on that device type, never at import:
            a vendor library may be imported only inside it.
        note: Shown after the name where the registered types are listed, e.g. ``"emulated"``.
    """

    name: str
    build: Callable[[], GraphBackend]
    note: str = ""

    def describe(self) -> str:
        return f"{self.name!r} ({self.note})" if self.note else repr(self.name)


_REGISTRY: dict[str, DeviceType] = {}
# Built backends, per device type: a backend's capability probes run once.
_BACKENDS: dict[str, GraphBackend] = {}


def register(device: DeviceType, *, replace: bool = False) -> None:
    """Make ``device`` known; a second registration of one name needs ``replace=True``."""
    if device.name in _REGISTRY and not replace:
        raise ValueError(f"device type {device.name!r} is already registered")
    _REGISTRY[device.name] = device
    _BACKENDS.pop(device.name, None)


def unregister(name: str) -> DeviceType:
    """Forget the device type ``name`` (and its built backend); return its registration."""
    _BACKENDS.pop(name, None)
    return _REGISTRY.pop(name)


def registered() -> tuple[DeviceType, ...]:
    """Every registered device type, in registration order."""
    return tuple(_REGISTRY.values())


def forget_backends() -> None:
    """Drop the built backends: the next use builds them again, probing capabilities anew."""
    _BACKENDS.clear()


def backend_for(device_type: str) -> GraphBackend:
    """The graph implementation for tensors on ``device_type``."""
    backend = _BACKENDS.get(device_type)
    if backend is None:
        device = _REGISTRY.get(device_type)
        if device is None:
            raise ConfigError(
                f"no graph implementation for device type {device_type!r}; npu-mempool captures "
                f"graphs on {_listing()}. Move the inputs to one of these devices."
            )
        backend = _BACKENDS[device_type] = device.build()
    return backend


def _listing() -> str:
    names = [device.describe() for device in _REGISTRY.values()]
    if len(names) < 2:
        return "".join(names) or "no device type (none is registered)"
    return f"{', '.join(names[:-1])} and {names[-1]}"
