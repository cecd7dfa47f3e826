"""How a graph's calls are padded to the capture sizes and its outputs cut back, at run time.

The :class:`Padding` of a graph's plan: ``_padding.plan_padding`` proves a graph may be padded
and computes it; here is what a call does with it (see ``_padding`` for the rules). The per-call
path is the host time a padded replay adds to a listed size's, so what can be known from the plan
alone (which size a batch pads to, which outputs are cut and how) is worked out once.
"""

from __future__ import annotations

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


def _grown(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``tensor`` grown to ``size`` along ``dim``: its rows, then copies of its first row.

    Copies, not whatever a buffer held: the added rows reach the graph's ops, and a real row is a
    value they are known to take (an index in range, a finite number).
    """
    rows = tensor.shape[dim]
    if not rows:
        shape = list(tensor.shape)
        shape[dim] = size
        return tensor.new_zeros(shape)
    missing = size - rows
    # One concatenation in place of an allocation and two copies. Nothing is kept between
    # calls: an index tensor cached for every caller would be read on other streams than the
    # one that wrote it. Dense, as the padded batch always was. The first row (a slice where
    # the batch leads: a third cheaper than narrow), given to the concatenation once per
    # missing row up to _REPEATED rows (an expanded view costs more host time than a few more
    # inputs to one concatenation), expanded above.
    first = tensor[:1] if dim == 0 else tensor.narrow(dim, 0, 1)
    if missing <= _REPEATED:
        grown = torch.cat((tensor, *(first,) * missing), dim)
    else:
        shape = list(tensor.shape)
        shape[dim] = missing
        grown = torch.cat((tensor, first.expand(shape)), dim)
    return grown.contiguous()


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
    # Worked out from the fields above, once: (output, dimension) of the outputs cut to rows,
    # and (output, rule) of the int outputs recomputed for the real batch.
    _rows: tuple[tuple[int, int], ...] = dataclasses.field(init=False, repr=False, compare=False)
    _ints: tuple[tuple[int, BatchInt], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        rows = tuple((i, s.dim) for i, s in enumerate(self.outputs) if isinstance(s, SliceRows))
        ints = tuple((i, s) for i, s in enumerate(self.outputs) if isinstance(s, BatchInt))
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(self, "_ints", ints)

    def batch(self, args: Sequence[Any]) -> int:
        """The batch size of a call."""
        if self.tensor_dims:
            arg, dim = self.tensor_dims[0]
            return int(args[arg].shape[dim])
        return int(args[self.int_args[0]])

    def target(self, batch: int) -> int | None:
        """The size a call of ``batch`` rows runs at, or ``None``: it runs eagerly.

        A batch no admitted size covers, yet no larger than the largest listed one, runs at its
        own size (captured as it is).
        """
        if not 0 <= batch <= self.largest:
            return None
        return next((size for size in self.sizes if size >= batch), batch)

    def pad(self, args: Sequence[Any], size: int) -> list[Any]:
        """The arguments with ``size`` rows: the real ones, then copies of the first."""
        padded = list(args)
        for arg, dim in self.tensor_dims:
            padded[arg] = _grown(args[arg], dim, size)
        for arg in self.int_args:
            padded[arg] = size
        return padded

    def cut(self, outputs: Any, batch: int, size: int) -> Any:
        """The outputs of a call padded to ``size``, cut back to ``batch`` rows in place.

        In place (``as_strided_``), not as new views: each output stays the very tensor object
        the runner handed out, which it tracks to take the memory back after a step boundary.
        So the outputs themselves come back, unless an int output is recomputed or an empty
        output narrowed.
        """
        single = isinstance(outputs, torch.Tensor)
        flat: Sequence[Any] = (outputs,) if single else outputs
        count = len(flat)
        new: dict[int, Any] = {}
        done: set[int] | None = set() if len(self._rows) > 1 else None  # a tensor returned twice
        for i, dim in self._rows:
            if i >= count:
                break
            tensor = flat[i]
            if not isinstance(tensor, torch.Tensor):
                continue
            if done is not None:
                if id(tensor) in done:
                    continue
                done.add(id(tensor))
            # Each batch row is ``g`` consecutive entries of the dimension (``B * g``).
            shape = list(tensor.shape)
            shape[dim] = shape[dim] // size * batch
            if not tensor.numel() and tensor.untyped_storage().nbytes() == 0:
                # An empty output is the runner's own static tensor, not a hand-out copy (asked
                # of empty tensors alone: a storage object per output costs a call's host time).
                new[i] = tensor.narrow(dim, 0, shape[dim])
                continue
            tensor.as_strided_(shape, tensor.stride(), tensor.storage_offset())
        for i, rule in self._ints:
            if i < count:
                new[i] = rule.scale * batch + rule.offset
        if not new:
            return outputs
        if single:
            return new[0]
        cut = [new.get(i, value) for i, value in enumerate(flat)]
        return tuple(cut) if isinstance(outputs, tuple) else cut

    def wrap(self, runner: CompiledFn, eager: CompiledFn, name: str) -> CompiledFn:
        """The function Dynamo calls: pad, replay, cut; larger batches run ``eager``.

        Nothing is captured ahead of traffic: the runner captures a size at the first call that
        needs it, with that call's own arguments, so warm-ups never touch the caller's state.
        """
        # Each batch's size, looked up: one dictionary read per call in place of a search.
        targets = {b: s for b in range(self.largest + 1) if (s := self.target(b)) is not None}
        # Where the batch size is read: an argument's dimension, or an int argument (dim -1).
        arg, dim = self.tensor_dims[0] if self.tensor_dims else (self.int_args[0], -1)
        pad, cut, largest = self.pad, self.cut, self.largest
        told: set[int] = set()

        def padded(*args: Any) -> Any:
            value = args[arg]
            batch = value.shape[dim] if dim >= 0 else int(value)
            size = targets.get(batch)  # None: larger than the largest (sizes are never negative)
            if size == batch:
                return runner(*args)
            if size is None:
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
            return cut(runner(*pad(args, size)), batch, size)

        return padded
