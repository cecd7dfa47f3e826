"""Guarded outputs: reading an output that a later replay overwrote raises instead of lying.

CUDA Graph Trees free stale output storages and install an access error, which only works for
device memory. Here outputs are handed out as a thin tensor subclass (a view of the static output,
no copy) that remembers the replay it came from; its ``__torch_function__`` compares that with the
replay counter of the memory it lives in, so the check works the same on CPU, CUDA and NPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.utils._pytree import tree_leaves

from npu_mempool.errors import StaleOutputError

__all__ = ["Epoch", "GuardedOutput"]


class Epoch:
    """A replay counter shared by every output that may alias the same pool memory."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


def _metadata_functions() -> frozenset[Callable[..., Any]]:
    # Reading metadata never touches the (possibly overwritten) data, so it stays allowed.
    getters = ("shape", "dtype", "device", "ndim", "layout", "requires_grad", "is_cuda", "names")
    methods = (
        "size",
        "dim",
        "stride",
        "numel",
        "nelement",
        "is_contiguous",
        "storage_offset",
        "element_size",
        "data_ptr",
        "untyped_storage",
        "__len__",
    )
    found: set[Callable[..., Any]] = set()
    for name in getters:
        attribute = getattr(torch.Tensor, name, None)
        if attribute is not None and hasattr(attribute, "__get__"):
            found.add(attribute.__get__)
    for name in methods:
        method = getattr(torch.Tensor, name, None)
        if method is not None:
            found.add(method)
    return frozenset(found)


class GuardedOutput(torch.Tensor):
    """A graph output that raises :class:`StaleOutputError` once a later replay overwrote it."""

    _npu_epoch: Epoch
    _npu_seen: int
    _npu_where: str
    _METADATA: ClassVar[frozenset[Callable[..., Any]]] = _metadata_functions()

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func not in cls._METADATA:
            for leaf in tree_leaves((args, kwargs)):
                if isinstance(leaf, GuardedOutput) and leaf._npu_epoch.value != leaf._npu_seen:
                    raise StaleOutputError(
                        f"{leaf._npu_where} was overwritten by a later replay of a graph in the "
                        f"same memory pool ({leaf._npu_epoch.value - leaf._npu_seen} replay(s) "
                        "since it was returned), so its values are no longer the ones computed "
                        "for that call. Clone outputs you keep across calls (out.clone()), or set "
                        "CaptureOptions(clone_output=True)."
                    )
        # Results of operations are plain tensors: only the returned output itself is guarded.
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def guard(tensor: torch.Tensor, epoch: Epoch, where: str) -> GuardedOutput:
    """Return a guarded view of ``tensor`` valid until ``epoch`` moves on."""
    out = tensor.as_subclass(GuardedOutput)
    out._npu_epoch = epoch
    out._npu_seen = epoch.value
    out._npu_where = where
    return out
