"""Output structure, hand-out and liveness of a captured graph's outputs.

[Note: output liveness] A graph writes its static outputs on every replay, and graphs of one pool
share memory. A static output handed to the caller must therefore never be written again while
the caller (or anything the caller gave it to) still uses it. Outputs are handed out as fresh
tensor objects over the static storage (``detach()``: no copy), so the storage's use count rises
above what the runner itself holds exactly while some tensor, or a view of one, is alive. The
runner consults this count before every replay, rewind and free; where the memory is still in
use, it replays another call path (its own graphs, in a pool of their own) or captures one. This
is the rule CUDA Graph Trees apply with ``path_live_weakrefs`` before they hand memory out again.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

__all__ = ["Output", "storage_uses"]

#: Tensor objects sharing one storage (C-level; no Python frame).
storage_uses: Callable[[int], int] = torch._C._storage_Use_Count


class Output:
    """How to turn static output leaves into the container the callable returned."""

    def __init__(self, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            self.kind = "tensor"
            self.leaves: list[Any] = [out]
            self.spec: TreeSpec | None = None
        elif type(out) in (tuple, list) and not any(
            isinstance(v, (tuple, list, dict)) for v in out
        ):
            self.kind = type(out).__name__
            self.leaves = list(out)
            self.spec = None
        else:
            self.kind = "tree"
            self.leaves, self.spec = tree_flatten(out)

    def flatten(self) -> Callable[[Any], Sequence[Any]]:
        if self.kind == "tensor":
            return lambda out: (out,)
        if self.kind in ("tuple", "list"):
            # Already an indexable sequence of leaves: no per-replay copy into a list.
            return lambda out: out
        return lambda out: tree_flatten(out)[0]

    def builder(self) -> Callable[[list[Any]], Any]:
        """Turns output leaves back into the container: made once per graph, called per replay.

        A C callable (no Python frame) for a tensor, a tuple or a list; for other pytrees,
        ``tree_unflatten`` with the captured structure.
        """
        if self.kind == "tensor":
            return operator.itemgetter(0)
        if self.kind == "tuple":
            return tuple
        if self.kind == "list":
            return list
        assert self.spec is not None
        return functools.partial(tree_unflatten, treespec=self.spec)
