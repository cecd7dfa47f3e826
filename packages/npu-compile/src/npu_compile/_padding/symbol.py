"""Which size of a graph is the batch, and which capture sizes the graph may run at.

The batch is a dimension the user named, never the first dynamic one that happens to come up:

* ``aclgraph_config.capture_sizes_dim = k``: dimension ``k`` of the tensors the graph takes;
* else the dimensions marked with ``torch._dynamo.mark_dynamic`` (or ``maybe_mark_dynamic``);
* else dimension 0 (batch first, as ``torch.nn``, Hugging Face and serving engines lay out
  inputs), where it is dynamic (``dynamic=True``, or a recompile that found it changing).

Those dimensions must all carry one size symbol, and that symbol no other dimension of an input:
under duck sizing torch gives equal sizes one symbol (a batch of 3 prompts of 3 tokens), and the
graph then assumes they stay equal, which padding one of them breaks.

A graph is only valid where the guards it was traced under hold (``Eq(s0, 1)`` for a graph
traced at batch 1, ``Ne(s0, 1)``, a range): :class:`Guards` keeps the capture sizes that
satisfy every guard, runtime assertion and range on the batch symbol (:class:`Guards`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from npu_compile._padding.proof import expr_of

__all__ = ["Batch", "Guards", "find_batch"]

Expr = Any


@dataclasses.dataclass(frozen=True)
class Batch:
    """The batch of one AOT forward graph.

    Attributes:
        symbol: The batch size's symbol.
        tensor_dims: ``(input, dimension)`` pairs of the AOT graph's inputs that hold it.
        int_args: Positions of int inputs equal to it.
    """

    symbol: Expr
    tensor_dims: tuple[tuple[int, int], ...]
    int_args: tuple[int, ...]


#: Attributes ``torch._dynamo.mark_dynamic`` and its siblings set on the tensor they mark.
_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices")


@dataclasses.dataclass
class _Input:
    """A tensor Dynamo traced: its name, its dynamic sizes by dimension, the dimensions marked."""

    label: str
    sizes: dict[int, Expr] = dataclasses.field(default_factory=dict)
    marks: set[int] = dataclasses.field(default_factory=set)


def _name(source: Any) -> str:
    name = source.name  # a property since torch 2.12, a method before
    return str(name() if callable(name) else name)


def _traced_inputs(example_inputs: Sequence[Any]) -> list[_Input]:
    """The tensors of the traced frame with their size symbols and the user's marks.

    The shape environment records where each size symbol came from (``L['x'].size()[0]``), and
    the tracing context keeps each traced tensor with its source: together they say which
    dimension of which input holds a symbol, and which dimensions the user marked. Without them
    (no tracing context) the graph's own inputs stand in, unnamed and unmarked.
    """
    from torch._guards import TracingContext

    shape_env = _any_shape_env(example_inputs)
    context = TracingContext.try_get()
    if shape_env is None or context is None:
        return [
            _Input(f"input {i}", {d: expr_of(size) for d, size in enumerate(value.shape)})
            for i, value in enumerate(example_inputs)
            if isinstance(value, torch.Tensor)
        ]
    replacements = dict(shape_env.replacements)
    inputs: dict[str, _Input] = {}
    for symbol, sources in shape_env.var_to_sources.items():
        for source in sources:  # a TensorPropertySource (base, prop, idx) for a tensor's size
            prop = getattr(getattr(source, "prop", None), "name", None)
            base, dim = getattr(source, "base", None), getattr(source, "idx", None)
            if prop == "SIZE" and base is not None and isinstance(dim, int):
                label = _name(base)
                inputs.setdefault(label, _Input(label)).sizes[dim] = replacements.get(
                    symbol, symbol
                )
    traced: Any = context.tensor_to_context  # a WeakIdKeyDictionary: real tensor -> context
    for real, symbolic in list(traced.items()):
        source = getattr(symbolic, "tensor_source", None)
        if source is not None:
            label = _name(source)
            entry = inputs.setdefault(label, _Input(label))
            for attribute in _MARKS:
                entry.marks |= set(getattr(real, attribute, ()) or ())
    return list(inputs.values())


def _plain(size: object) -> Expr | None:
    expr = expr_of(size)
    return expr if getattr(expr, "is_Symbol", False) else None


def find_batch(example_inputs: Sequence[Any], dim: int | None) -> Batch | str | None:
    """The batch of a graph; a reason why it cannot be padded; or ``None`` where it has none.

    Args:
        example_inputs: The AOT forward graph's example inputs.
        dim: ``aclgraph_config.capture_sizes_dim``.
    """
    inputs = _traced_inputs(example_inputs)
    marked = set().union(*(entry.marks for entry in inputs)) if dim is None else set()

    def allowed(entry: _Input) -> set[int]:
        if dim is not None:
            return {dim}
        # A tensor the user did not mark (an attention mask beside marked ids) may hold the
        # batch where the marked ones do.
        return entry.marks or marked or {0}

    in_graph = {
        symbol
        for value in example_inputs
        if isinstance(value, torch.Tensor)
        for symbol in map(_plain, value.shape)
        if symbol is not None
    }
    candidates: dict[Expr, str] = {}
    for entry in inputs:
        for d in sorted(entry.marks if marked else allowed(entry)):
            symbol = _plain(entry.sizes.get(d))
            if symbol is not None and symbol in in_graph:
                candidates[symbol] = ""
    for symbol in candidates:
        candidates[symbol] = _shared(symbol, inputs, allowed)
    valid = [symbol for symbol, why in candidates.items() if not why]
    if len(valid) > 1:
        names = ", ".join(str(s) for s in valid)
        return (
            f"several sizes could be the batch ({names}); mark the batch with "
            "torch._dynamo.mark_dynamic, or set aclgraph_config.capture_sizes_dim"
        )
    if not valid:
        return next((why for why in candidates.values() if why), None)
    return _in_aot_inputs(valid[0], example_inputs)


def _shared(symbol: Expr, inputs: Sequence[_Input], allowed: Callable[[_Input], set[int]]) -> str:
    """Why ``symbol`` cannot be padded alone: another dimension holds it too ("" if none)."""
    for entry in inputs:
        held = sorted(d for d, size in entry.sizes.items() if symbol in _symbols(size))
        others = [d for d in held if d not in allowed(entry)] or held[1:]
        if others:
            return (
                f"the batch size {symbol} is also the size of dimension {others[0]} of "
                f"{entry.label} (torch gave equal sizes one symbol, and the graph assumes they "
                "stay equal)"
            )
        for d in held:
            if _plain(entry.sizes[d]) is None:
                return f"dimension {d} of {entry.label} is {expr_of(entry.sizes[d])}"
    return ""


def _symbols(size: object) -> set[Expr]:
    expr = expr_of(size)
    return set() if isinstance(expr, (int, float, bool)) else set(expr.free_symbols)


def _in_aot_inputs(symbol: Expr, example_inputs: Sequence[Any]) -> Batch | str | None:
    tensor_dims: list[tuple[int, int]] = []
    int_args: list[int] = []
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            held = [d for d, size in enumerate(value.shape) if symbol in _symbols(size)]
            if len(held) > 1 or any(_plain(value.shape[d]) != symbol for d in held):
                return f"graph input {index} holds the batch size {symbol} in another way"
            tensor_dims.extend((index, d) for d in held)
        elif symbol in _symbols(value):
            if expr_of(value) != symbol:
                return f"int input {index} is {expr_of(value)}, computed from the batch size"
            int_args.append(index)
    if not tensor_dims and not int_args:
        return None
    return Batch(symbol, tuple(tensor_dims), tuple(int_args))


def _any_shape_env(example_inputs: Sequence[Any], symbol: Expr = None) -> Any:
    """The shape environment of the inputs' sizes (of ``symbol``'s, when given)."""
    for value in example_inputs:
        sizes = value.shape if isinstance(value, torch.Tensor) else [value]
        for size in sizes:
            if isinstance(size, torch.SymInt) and (symbol is None or symbol in _symbols(size)):
                return size.node.shape_env
    return None


def _conditions(shape_env: Any, symbol: Expr) -> Iterator[Expr]:
    """The guards and runtime assertions of the shape environment that involve ``symbol``."""
    replacements = dict(getattr(shape_env, "replacements", {}) or {})
    found = [guard.expr for guard in shape_env.guards]
    for asserts in shape_env.deferred_runtime_asserts.values():
        found.extend(runtime_assert.expr for runtime_assert in asserts)
    for expr in found:
        if replacements:
            expr = expr.xreplace(replacements)
        if symbol in expr.free_symbols:
            yield expr


def _holds(condition: Expr, symbol: Expr, size: int) -> bool:
    value = condition.subs(symbol, size)
    if getattr(value, "free_symbols", None):
        return False  # it also depends on another size: not provably true at every call
    try:
        return bool(value)
    except TypeError:  # an unevaluated relation
        return False


class Guards:
    """What the graph's guards, runtime assertions and value range say of the batch size.

    Args:
        symbol: The batch size's symbol.
        example_inputs: The graph's example inputs (their sizes lead to the shape environment).
    """

    def __init__(self, symbol: Expr, example_inputs: Sequence[Any]) -> None:
        self.symbol = symbol
        shape_env = _any_shape_env(example_inputs, symbol)
        self.readable = shape_env is not None
        self.conditions = list(_conditions(shape_env, symbol)) if shape_env is not None else []
        self.limits = shape_env.var_to_range.get(symbol) if shape_env is not None else None

    def refusal(self, size: int, bounds: Sequence[Expr] = ()) -> str | None:
        """Why the graph may not run at batch ``size`` (``None``: it may)."""
        if not self.readable:
            return "the guards of the graph cannot be read"
        limits = self.limits
        if limits is not None and not (bool(limits.lower <= size) and bool(size <= limits.upper)):
            return f"{self.symbol} in [{limits.lower}, {limits.upper}]"
        failed = next(
            (c for c in (*self.conditions, *bounds) if not _holds(c, self.symbol, size)), None
        )
        return None if failed is None else str(failed)

    def admitted(
        self, sizes: Sequence[int], bounds: Sequence[Expr] = ()
    ) -> tuple[tuple[int, ...], dict[int, str]]:
        """The capture sizes the graph may run at, and why each other one is left out."""
        kept: list[int] = []
        left_out: dict[int, str] = {}
        for size in sizes:
            why = self.refusal(size, bounds)
            if why is None:
                kept.append(size)
            else:
                left_out[size] = why
        return tuple(kept), left_out

    def pads_some_batch(self, kept: Sequence[int]) -> bool:
        """Whether a batch the graph runs at lies below an admitted size it is not equal to.

        A graph traced at batch 1 (``Eq(s0, 1)``) runs at 1 only: there is nothing to pad.
        """
        listed = set(kept)
        # The small batches, and the batch just below each size: enough to find one in any
        # graph worth padding without walking every batch up to the largest size.
        batches = sorted({*range(1, 65), *(size - 1 for size in kept)})
        return any(
            0 < batch < max(kept, default=0) and batch not in listed and self.refusal(batch) is None
            for batch in batches
        )
