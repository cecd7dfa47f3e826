"""One graph input for a tensor passed to ``dynamo_export`` more than once.

A cache passed as two arguments, or the output of ``reduce_scatter_tensor`` that is also a model
input, is one buffer: what the model writes through one argument, it reads through the other.
TorchAir traces with Dynamo, which gives such a tensor one graph input (one ``RefData`` when the
model writes it). torch.export (2.11-2.13) cannot export a write to a duplicated input, so here
forward() is traced through a signature that takes the tensor once, at its first position, and
passes it on to every argument that received it.

Views of one tensor that differ (another offset, shape or strides) are not the same buffer seen
twice; an offline graph's inputs cannot overlap partially, and they stay an error (``_trace``).
"""

from __future__ import annotations

import inspect
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

_NAMED = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


@dataclass(frozen=True)
class SharedInputs:
    """The inputs to trace once each tensor passed twice is passed once.

    Attributes:
        args: Positional example inputs, without the repeated tensors.
        kwargs: Keyword example inputs, without the repeated tensors.
        repeats: forward() argument name -> name of the argument holding the same tensor first.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    repeats: dict[str, str]

    def rename(self, dims: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]] | None:
        """``dynamic_dims`` with names of dropped arguments moved to the argument kept."""
        if dims is None:
            return None
        merged: dict[str, list[int]] = {}
        for name, values in dims.items():
            merged.setdefault(self.repeats.get(name, name), []).extend(int(v) for v in values)
        return merged


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are the same memory seen the same way (one buffer, twice)."""
    if a is b:
        return True
    if a.device != b.device or a.device.type == "meta" or a.dtype != b.dtype:
        return False
    try:
        same_storage = a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False
    return (
        same_storage
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def _plan(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[inspect.Signature, SharedInputs] | None:
    try:
        signature = inspect.signature(model.forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None  # no usable signature: inputs are traced as given
    firsts: list[tuple[str, torch.Tensor]] = []
    repeats: dict[str, str] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind not in _NAMED or not isinstance(value, torch.Tensor):
            continue
        first = next((n for n, t in firsts if same_tensor(t, value)), None)
        if first is None:
            firsts.append((name, value))
        else:
            repeats[name] = first
    if not repeats:
        return None
    positional = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    kept_args = tuple(
        v for i, v in enumerate(args) if i >= len(positional) or positional[i] not in repeats
    )
    kept_kwargs = {k: v for k, v in kwargs.items() if k not in repeats}
    return signature, SharedInputs(kept_args, kept_kwargs, repeats)


@contextmanager
def shared_inputs(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[SharedInputs]:
    """While tracing, let forward() take each tensor passed more than once only once.

    Yields the example inputs to trace with (unchanged when no tensor repeats). The model's own
    forward() still receives every argument: the traced signature fills the repeated ones from
    the argument kept. Parameter and buffer names are unchanged (the model is not wrapped).
    """
    plan = _plan(model, args, kwargs)
    if plan is None:
        yield SharedInputs(args, kwargs, {})
        return
    signature, shared = plan
    original = model.forward
    repeats = shared.repeats
    params = signature.parameters

    def forward(self: torch.nn.Module, *call_args: Any, **call_kwargs: Any) -> Any:
        values = dict(traced.bind(*call_args, **call_kwargs).arguments)
        values.update({name: values[first] for name, first in repeats.items()})
        full = inspect.BoundArguments(
            signature, OrderedDict((n, values[n]) for n in params if n in values)
        )
        return original(*full.args, **full.kwargs)

    traced = signature.replace(parameters=[p for n, p in params.items() if n not in repeats])
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = traced.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *traced.parameters.values()]
    )
    had = "forward" in vars(model)
    model.forward = types.MethodType(forward, model)
    try:
        yield shared
    finally:
        if had:
            model.forward = original
        else:
            del model.forward
