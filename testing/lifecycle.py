"""What the stateful lifecycle tests of npu-mempool and npu-compile share.

A CPU graph backend whose next capture fails on request (:class:`FailingBackend`, registered for
the duration of a test with :func:`failing_cpu_backend`), the record of an output a test holds
(:class:`Held`), and the database of failing examples each test keeps beside itself
(:func:`examples`). This directory is on pytest's ``pythonpath`` (root ``pyproject.toml``);
nothing of it ships in a wheel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    ReadOnlyDatabase,
)
from npu_mempool import PoolHandle, _devices
from npu_mempool._devices import emulated

__all__ = ["FailingBackend", "Held", "InjectedCaptureError", "examples", "failing_cpu_backend"]


class InjectedCaptureError(RuntimeError):
    """What a capture body raises where a device cannot capture it (a host sync, say)."""


class FailingBackend(emulated.EmulatedBackend):
    """The CPU emulation, whose next capture fails when asked: its body raises at the end.

    The body has run by then (its static inputs are allocated, the callable has run), as a
    device capture that fails at an operator the device cannot record.
    """

    def __init__(self) -> None:
        self.fail_next = False

    def capture(self, pool: PoolHandle, body: Any, error_mode: str = "thread_local") -> Any:
        """Capture as the emulation does, or fail at the end of the body when asked."""
        if not self.fail_next:
            return super().capture(pool, body, error_mode)
        self.fail_next = False

        def failing(static_like: Any) -> Any:
            body(static_like)
            raise InjectedCaptureError("the capture failed (injected)")

        return super().capture(pool, failing, error_mode)


@contextlib.contextmanager
def failing_cpu_backend() -> Iterator[FailingBackend]:
    """Within the block, CPU graphs are captured by a :class:`FailingBackend`."""
    backend = FailingBackend()
    _devices.register(_devices.DeviceType("cpu", lambda: backend), replace=True)
    try:
        yield backend
    finally:
        _devices.register(emulated.DEVICE, replace=True)


@dataclasses.dataclass
class Held:
    """An output a test keeps, with the values eager computed for its call.

    Attributes:
        tensor: The output (or a view of it).
        expected: Eager's values.
        marks: Explicit step boundaries before its hand-out.
        call: Its call's number.
        per_call: Whether a later top-level call ends its step (``keep_held_outputs`` off).
        whole: The output itself, not a view of it.
    """

    tensor: torch.Tensor
    expected: torch.Tensor
    marks: int
    call: int
    per_call: bool
    whole: bool

    def may_be_stale(self, marks: int, calls: int) -> bool:
        """Whether a step boundary has passed since its hand-out (it may be taken back)."""
        return marks > self.marks or (self.per_call and calls > self.call)

    def check(self, marks: int, calls: int) -> None:
        """It reads eager's values, or raises ``StaleOutputError`` past a step boundary only."""
        from npu_mempool import StaleOutputError

        try:
            actual = self.tensor.clone()
        except StaleOutputError:
            assert self.may_be_stale(marks, calls), "an output was taken back within its step"
            return
        assert torch.equal(actual, self.expected), (
            f"a held output changed: {actual.flatten()[:4].tolist()} instead of "
            f"{self.expected.flatten()[:4].tolist()}"
        )


def examples(folder: Path) -> ExampleDatabase:
    """The failing examples kept in ``folder``, read only unless ``NPU_RECORD_EXAMPLES`` is set.

    Read only, so that a run on fixed code keeps the examples that failed on the code before (a
    writable database drops an example that no longer fails); ``NPU_RECORD_EXAMPLES=1`` lets a
    run add the failures it finds.
    """
    stored = DirectoryBasedExampleDatabase(folder)
    return stored if os.environ.get("NPU_RECORD_EXAMPLES") else ReadOnlyDatabase(stored)
