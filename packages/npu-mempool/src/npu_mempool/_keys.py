"""Graph keys: which positional argument is what, and the key a call is looked up by."""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from npu_mempool._options import InputKind
from npu_mempool.errors import InputLayoutError

__all__ = ["Layout", "autocast_state"]


class Layout:
    """Which positional argument is what, fixed at the first call."""

    def __init__(
        self,
        args: tuple[Any, ...],
        kinds: Sequence[InputKind] | None,
        frozen: bool,
        guarded: Sequence[bool] | None,
    ):
        if guarded is not None and len(guarded) != len(args):
            raise InputLayoutError(
                f"guarded names {len(guarded)} argument(s) but the call passed {len(args)}; "
                "give one flag per positional argument"
            )
        self.guarded = [bool(g) for g in guarded] if guarded is not None else [False] * len(args)
        if kinds is None:
            kinds = [InputKind.USER] * len(args)
        if len(kinds) != len(args):
            raise InputLayoutError(
                f"input_kinds names {len(kinds)} argument(s) but the call passed {len(args)}; "
                "give one InputKind per positional argument"
            )
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.count = len(args)
        self.tensors = tensors
        self.user = [i for i in tensors if kinds[i] is InputKind.USER]
        self.mutated = [i for i in tensors if kinds[i] is InputKind.MUTATED]
        self.params = [i for i in tensors if kinds[i] is InputKind.PARAMETER]
        # Used in place by the graph: outputs they share memory with are never taken back.
        self.pinned = self.mutated + self.params
        self.scalars = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        # Addresses checked on every call: mutated inputs always, parameters unless frozen.
        self.watched = sorted(self.mutated + ([] if frozen else self.params))
        # PARAMETER tensors keyed on their layouts too: those that are no nn.Parameter at the
        # first call. A buffer's slices for two sizes (an engine's persistent input buffer)
        # start at one address, so the address alone would replay one size's graph for the
        # other; an nn.Parameter keeps its layout at its address (a new layout is new memory),
        # and a model's weights are many: one layout read per call each is host time.
        self.keyed_params = (
            []
            if frozen
            else [i for i in self.params if not isinstance(args[i], torch.nn.Parameter)]
        )
        self.pick_watched = picker(self.watched)
        self.key = self._key_function()

    def _key_function(self) -> Callable[[tuple[Any, ...]], Hashable]:
        # An nn.Parameter's layout cannot change without its address changing, so only user,
        # mutated and keyed parameter inputs (PARAMETER tensors that are no nn.Parameter: see
        # keyed_params) and non-tensor values such as SymInts make up the key. A graph is
        # only valid for the dtypes it was captured with, and the batched input copy would
        # silently cast another dtype into the static buffer, so dtypes are part of the key. So
        # are strides: a mutated input is used in place, and the same address seen through other
        # strides (a transposed view) needs its own graph; a user input's static copy keeps the
        # strides of the call that captured it (``static_strides``), so a call with another
        # layout (a slice, a transpose) gets a graph traced on its own layout. The argument count
        # is part of the key so that an extra argument is never silently ignored, and the types
        # of non-tensor values too:
        # ``1``, ``1.0`` and ``True`` compare equal but do not give the same graph.
        # Generated once per runner: a flat tuple expression, the cheapest key Python can build
        # (about as fast as the shape alone; map/unpacking over pickers costs several times more).
        # Arguments the caller guards itself (Dynamo checks shapes, dtypes and strides of a
        # graph compiled with static shapes before calling it) stay out of the key; with every
        # argument guarded the key is a constant and a call computes nothing.
        parts = [] if all(self.guarded) else ["len(a)"]
        for i in sorted(self.user + self.mutated + self.keyed_params):
            if self.guarded[i]:
                continue
            parts += [f"a[{i}].shape", f"a[{i}].dtype", f"a[{i}].stride()"]
        for i in self.scalars:
            if not self.guarded[i]:
                parts += [f"a[{i}]", f"type(a[{i}])"]
        if parts:
            # A graph holds the casts autocast made while it was captured, and a replay makes
            # no others: a call under another autocast state needs a graph of its own. (One C
            # call while autocast is off. A caller that guards every argument, Dynamo, also
            # guards the autocast state.)
            parts.append("(any_autocast() and autocast_state())")
        # The source is built from integer indices only: nothing user-controlled is evaluated.
        self.key_source = f"({', '.join(parts)},)" if parts else "()"
        names = {
            "len": len,
            "type": type,
            "any_autocast": torch._C._is_any_autocast_enabled,
            "autocast_state": autocast_state,
        }
        key: Callable[[tuple[Any, ...]], Hashable] = eval(f"lambda a: {self.key_source}", names)
        return key


#: The device types whose autocast state a graph key tells apart.
_AUTOCAST_DEVICES = ("cpu", "cuda", "npu", "xpu", "mps")


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """Each device type autocast is on for, with its dtype (read only while autocast is on)."""
    state = []
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                state.append((device, torch.get_autocast_dtype(device)))
        except RuntimeError:  # a device type this torch build does not know
            continue
    return tuple(state)


def picker(positions: Sequence[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A C callable that returns a call's arguments at ``positions`` as a tuple, of any length.

    One C call per call's pick: an itemgetter of one index would return the item itself, so one
    position is picked as a slice of one, which keeps it a tuple (none: an empty slice).
    """
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    first = positions[0] if positions else 0
    return operator.itemgetter(slice(first, first + len(positions)))
