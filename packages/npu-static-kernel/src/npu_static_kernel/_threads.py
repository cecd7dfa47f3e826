"""Thread and lock plumbing of a build: Dynamo's compile lock, a fresh thread per build."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from npu_static_kernel import _device

__all__ = ["compile_lock", "in_fresh_thread"]


_own_compile_lock = threading.RLock()


def compile_lock() -> Any:
    """The lock Dynamo holds while it compiles (ours where that is gone), taken around a build.

    Tracing (FX's patcher, AOT autograd) keeps process-wide state, so torch traces one graph at
    a time: its compiles run under this lock. A build here starts at a graph's first call, not
    inside Dynamo, and without the lock it traced at the same time as another thread's compile
    (``CURRENT_PATCHER is None``) or saved what another thread's load had just registered.
    """
    from torch._dynamo import convert_frame

    return getattr(convert_frame, "compile_lock", _own_compile_lock)


def in_fresh_thread(device_type: str, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` on a new thread and re-raise what it raised.

    ``compile_static`` is called from inside a running compiled graph (AOT autograd's runtime
    wrapper keeps the Python dispatch key in the thread-local include set); a compiler started
    there sees the caller's dispatch state and fails. A new thread starts with clean
    thread-local dispatch state; the grad mode, inference mode and the current device are
    carried over (inputs made under ``torch.inference_mode`` can only be traced inside it).
    """
    errors: list[BaseException] = []
    grad = torch.is_grad_enabled()
    inference = torch.is_inference_mode_enabled()
    index = _device.current_device_index(device_type)

    def target() -> None:
        try:
            _device.set_device_index(device_type, index)
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                fn(*args)
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="npu-static-kernel-build", daemon=True)
    # Taken here, by the waiting thread: held by the builder, it would block a caller that
    # already holds it (it is re-entrant for its owner only).
    with compile_lock():
        thread.start()
        thread.join()
    if errors:
        raise errors[0]
