"""How a graph's calls are padded to the capture sizes and its outputs cut back, at run time.

The :class:`Padding` of a graph's plan: ``_padding.plan_padding`` proves a graph may be padded
and computes it; here is what a call does with it (see ``_padding`` for the rules).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from npu_compile._padding.proof import BatchInt, SliceRows

__all__ = ["Padding"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]

#: Missing rows up to which a padded input repeats its first row as inputs of the concatenation.
_REPEATED = 8


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
            if not rows:
                shape = list(tensor.shape)
                shape[dim] = size
                padded[arg] = tensor.new_zeros(shape)
                continue
            missing = size - rows
            # One concatenation in place of an allocation and two copies. Nothing is kept
            # between calls: an index tensor cached for every caller would be read on other
            # streams than the one that wrote it. Dense, as the padded batch always was.
            # The first row (a slice where the batch leads: a third cheaper than narrow), given
            # to the concatenation once per missing row up to _REPEATED rows (an expanded view
            # costs more host time than a few more inputs to one concatenation), expanded above.
            first = tensor[:1] if dim == 0 else tensor.narrow(dim, 0, 1)
            if missing <= _REPEATED:
                grown = torch.cat((tensor, *(first,) * missing), dim)
            else:
                shape = list(tensor.shape)
                shape[dim] = missing
                grown = torch.cat((tensor, first.expand(shape)), dim)
            padded[arg] = grown.contiguous()
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
            if not tensor.numel() and tensor.untyped_storage().nbytes() == 0:
                # An empty output is the runner's own static tensor, not a hand-out copy (asked
                # of empty tensors alone: a storage object per output costs a call's host time).
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
