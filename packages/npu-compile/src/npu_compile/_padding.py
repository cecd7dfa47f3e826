"""Capture sizes: pad the batch up to a listed size, replay, cut the outputs back.

vLLM (``cudagraph_capture_sizes``) and SGLang (``--cuda-graph-bs``) capture a fixed list of batch
sizes and pad each batch up to the nearest one, so a serving loop whose batch size changes on
every step replays a few graphs instead of capturing one per size. Here a graph is padded only
where that is proven to give the numbers it would give unpadded:

1. The batch is a dimension the user named (``_batch_symbol.find_batch``): marked with
   ``mark_dynamic``, named by ``aclgraph_config.capture_sizes_dim``, or dimension 0.
2. No input is written in place (a buffer update, a cache write): the padded call would write
   a copy, or write the padding rows into the caller's state.
3. Every output row depends only on the same input row (``_batch_proof.prove`` over the rule
   table of ``_batch_rules``): padded rows change no real row.
4. Only capture sizes the graph's guards admit are used (a graph traced at batch 1 is never run
   at batch 4).

Where any of that fails, the graph is captured per exact size, as without ``capture_sizes``,
after one log line naming why (or a ``ConfigError`` under ``debug.aclgraph.strict``). Each size
is captured when a call first needs it, by that call: a call changes the caller's state once,
as the unpadded call would.

The padding rows are copies of the first row, so every padded row computes what a real row
computes: an index or a divisor that is fine for the real rows is fine for the padding too
(zero rows could index out of range or divide by zero where no real row does).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from npu_mempool import InputKind

from npu_compile._batch_proof import BatchInt, Rows, SliceRows, Unproven, prove
from npu_compile._batch_rules import rule_for
from npu_compile._batch_symbol import Batch, Guards, find_batch
from npu_compile.errors import ConfigError

if TYPE_CHECKING:
    from npu_compile._lowering import Settings

__all__ = ["Padding", "plan_padding"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Padding:
    """How one graph's calls are padded to the capture sizes and its outputs cut back.

    Attributes:
        sizes: The capture sizes the graph's guards admit, ascending.
        largest: The largest listed capture size: a larger batch runs eagerly.
        tensor_dims: ``(argument, dimension)`` pairs that hold the batch size.
        int_args: Positions of int arguments equal to the batch size.
        outputs: Per flat output, how it is cut back (``None``: as it is).
        symbol: The batch size's symbol, for messages.
    """

    sizes: tuple[int, ...]
    largest: int
    tensor_dims: tuple[tuple[int, int], ...]
    int_args: tuple[int, ...]
    outputs: tuple[SliceRows | BatchInt | None, ...]
    symbol: str

    def batch(self, args: Sequence[Any]) -> int:
        """The batch size of a call."""
        if self.tensor_dims:
            arg, dim = self.tensor_dims[0]
            return int(args[arg].shape[dim])
        return int(args[self.int_args[0]])

    def pad(self, args: Sequence[Any], size: int) -> list[Any]:
        """The arguments with ``size`` rows: the real ones, then copies of the first."""
        padded = list(args)
        for arg, dim in self.tensor_dims:
            tensor = args[arg]
            rows = tensor.shape[dim]
            shape = list(tensor.shape)
            shape[dim] = size
            grown = tensor.new_empty(shape)
            grown.narrow(dim, 0, rows).copy_(tensor)
            extra = grown.narrow(dim, rows, size - rows)
            if rows:
                extra.copy_(tensor.narrow(dim, 0, 1).expand_as(extra))
            else:
                extra.zero_()
            padded[arg] = grown
        for arg in self.int_args:
            padded[arg] = size
        return padded

    def cut(self, outputs: Any, batch: int, size: int) -> Any:
        """The outputs of a call padded to ``size``, cut back to ``batch`` rows in place.

        In place (``as_strided_``), not as new views: each output stays the very tensor object
        the runner handed out, which it tracks to take the memory back after a step boundary.
        """
        flat = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        cut: set[int] = set()  # a tensor returned twice is cut once
        for i, spec in enumerate(self.outputs):
            if i >= len(flat):
                break
            if isinstance(spec, BatchInt):
                flat[i] = spec.scale * batch + spec.offset
                continue
            tensor = flat[i]
            if spec is None or not isinstance(tensor, torch.Tensor) or id(tensor) in cut:
                continue
            cut.add(id(tensor))
            # Each batch row is ``g`` consecutive entries of the dimension (``B * g``).
            rows = tensor.shape[spec.dim] // size * batch
            if tensor.untyped_storage().nbytes() == 0:
                # An empty output is the runner's own static tensor, not a hand-out copy.
                flat[i] = tensor.narrow(spec.dim, 0, rows)
                continue
            shape = list(tensor.shape)
            shape[spec.dim] = rows
            tensor.as_strided_(shape, tensor.stride(), tensor.storage_offset())
        if isinstance(outputs, torch.Tensor):
            return flat[0]
        return type(outputs)(flat) if isinstance(outputs, tuple) else flat

    def wrap(self, runner: CompiledFn, eager: CompiledFn, name: str) -> CompiledFn:
        """The function Dynamo calls: pad, replay, cut; larger batches run ``eager``.

        Nothing is captured ahead of traffic: the runner captures a size at the first call that
        needs it, with that call's own arguments, so warm-ups never touch the caller's state.
        """
        sizes, largest = self.sizes, self.largest
        told: set[int] = set()

        def padded(*args: Any) -> Any:
            batch = self.batch(args)
            if batch > largest:
                if batch not in told:
                    told.add(batch)
                    logger.info(
                        "FX graph %s: batch size %d is larger than the largest capture size %d; "
                        "it runs eagerly",
                        name,
                        batch,
                        largest,
                    )
                return eager(*args)
            at = bisect.bisect_left(sizes, batch)
            if at == len(sizes) or sizes[at] == batch:
                # A listed size, or one no admitted size covers: captured as it is.
                return runner(*args)
            size = sizes[at]
            return self.cut(runner(*self.pad(args, size)), batch, size)

        return padded


def plan_padding(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    kinds: Sequence[InputKind],
    settings: Settings,
    name: str,
) -> Padding | None:
    """The padding plan of an AOT forward graph, or ``None``: captured per exact size.

    Args:
        gm: The AOT forward graph.
        example_inputs: Its example inputs.
        kinds: The input classes of its inputs.
        settings: The lowered options (``capture_sizes``, ``capture_sizes_dim``, ``strict``).
        name: The FX graph's name, for messages.

    Raises:
        ConfigError: Under ``debug.aclgraph.strict``, the graph cannot be padded.
    """
    sizes = settings.capture_sizes
    strict = settings.strict

    def refuse(why: str) -> None:
        message = (
            f"FX graph {name} is captured per batch size, not padded to "
            f"aclgraph_config.capture_sizes: {why}"
        )
        if strict:
            raise ConfigError(
                f"{message} (debug.aclgraph.strict is set; unset it to capture such graphs per "
                "size, or leave capture_sizes unset)"
            )
        logger.warning(message)

    found = find_batch(example_inputs, settings.capture_sizes_dim)
    if found is None:
        return None
    if isinstance(found, str):
        refuse(found)
        return None
    guards = Guards(found.symbol, example_inputs)
    admitted, left_out = guards.admitted(sizes)
    if not guards.pads_some_batch(admitted):
        # Traced under a guard that pins the batch (Eq(s0, 1)): every call runs at a size it
        # may run at, so there is nothing to pad and nothing to prove.
        logger.info(
            "FX graph %s is captured per batch size: its guards leave no batch to pad (%s)",
            name,
            "; ".join(sorted(set(left_out.values()))) or "no listed size above a batch",
        )
        return None
    written = _written_input(gm, kinds)
    if written is not None:
        refuse(written)
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dims = dict(found.tensor_dims)
    states = [Rows(dims[i]) if i in dims else None for i in range(len(placeholders))]
    try:
        proof = prove(gm, found.symbol, states, rule_for)
    except Unproven as error:
        refuse(f"{error}; padding rows could change real rows there")
        return None
    admitted, left_out = guards.admitted(sizes, proof.bounds)
    if left_out:
        logger.info(
            "FX graph %s: capture sizes %s left out, the graph holds only where %s",
            name,
            sorted(left_out),
            "; ".join(sorted(set(left_out.values()))),
        )
    if not admitted:
        return None
    return _padding(found, admitted, sizes[-1], proof.outputs)


def _padding(
    batch: Batch,
    admitted: tuple[int, ...],
    largest: int,
    outputs: tuple[SliceRows | BatchInt | None, ...],
) -> Padding:
    return Padding(
        sizes=admitted,
        largest=largest,
        tensor_dims=batch.tensor_dims,
        int_args=batch.int_args,
        outputs=outputs,
        symbol=str(batch.symbol),
    )


def _written_input(gm: torch.fx.GraphModule, kinds: Sequence[InputKind]) -> str | None:
    """Why the graph writes an input in place (a buffer update, a KV-cache write), if it does.

    A padded call runs on padded copies: the write would go to the copy, or carry the padding
    rows into the caller's state.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index, kind in enumerate(kinds):
        if kind is not InputKind.MUTATED or index >= len(placeholders):
            continue
        target = placeholders[index]
        writer = next(
            (
                user
                for user in target.users
                if isinstance(user.target, torch._ops.OpOverload) and user.target._schema.is_mutable
            ),
            None,
        )
        where = f"node {writer.name} ({writer.target}) " if writer is not None else ""
        return f"{where}updates the graph input {target.name} in place (state such as a buffer)"
    return None
