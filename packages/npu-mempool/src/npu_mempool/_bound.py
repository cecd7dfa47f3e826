"""BoundGraph: one graph of a runner, called with its USER tensors alone and no key to build.

For engines that dispatch calls themselves (a serving engine picks the captured batch size
before it calls, as vLLM's graph dispatcher does): the graph is chosen once, at
:meth:`GraphRunner.bind`, so a call skips what a runner call does to find it (the key, the
watched addresses, the call paths). What keeps it right is what stays on the call's path:

- the USER tensors must have the shapes, dtypes and strides the graph was captured with (one C
  call, Dynamo's tensor check), since the batched input copy would broadcast a smaller tensor
  and cast another dtype without a word; a call under another autocast state than the graph's
  goes through the runner, whose key tells them apart;
- the handed-out outputs are checked for liveness as on every replay: where one (or a view of
  one) is still in use, or another graph of the pool lent out memory still in use, the call
  replays the key's graph on another call path of the runner if one is free (a loop
  ``out = bound(x)`` holds the previous output during the call: its calls take the runner's two
  call paths in turn), and otherwise goes through the runner, which never overwrites memory a
  live tensor uses;
- the tensors used in place (PARAMETER and MUTATED arguments) are the bound ones, held with
  their storages for the bound graph's life: the graph can never read freed memory. They are
  updated in place (``copy_``, ``load_state_dict``, an ``index_copy_`` into a KV cache); a
  tensor replaced (a cache reallocated, ``param.data = ...``, ``module.to(...)``) is not seen:
  bind again. :meth:`BoundGraph.check` tells whether the bound tensors still sit where the
  graph reads them.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from npu_mempool._entry import Entry
from npu_mempool._keys import autocast_state
from npu_mempool.errors import InputLayoutError

if TYPE_CHECKING:
    from npu_mempool._runner import GraphRunner

__all__ = ["BoundGraph"]


try:
    # Dynamo's own tensor check, in C++: dtype, device, shape, strides, requires_grad and the
    # dispatch keys of every tensor in one call (a fifth of the three maps below, one tensor).
    from torch._C._dynamo.guards import TensorGuards

    # Typed loosely: torch's stub types the per-tensor sizes as one list of SymInts.
    _TensorGuards: Any = TensorGuards
except ImportError:  # pragma: no cover - a torch without it: the maps alone decide
    _TensorGuards = None

_size = torch._C.TensorBase.size
_stride = torch._C.TensorBase.stride
_dtype = operator.attrgetter("dtype")
_data_ptr = torch._C.TensorBase.data_ptr


def layout_guards(tensors: Sequence[torch.Tensor]) -> tuple[Callable[..., bool] | None, bool]:
    """Dynamo's C check of ``tensors``' layouts, and whether it sees their device's autocast.

    ``(None, False)`` where torch has no such check (or its signature moved): the caller
    compares the layouts itself and asks for the autocast state.
    """
    if _TensorGuards is None:
        return None, False
    try:
        check: Callable[..., bool] = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.size()) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        ).check
    except Exception:  # its signature moved: the caller's own comparison decides
        return None, False
    # It compares the tensors' dispatch keys with the thread's, and autocast turns its device's
    # key on: seen for the tensors' device, and so for none where there is no tensor.
    return check, bool(tensors)


_any_autocast = torch._C._is_any_autocast_enabled


class BoundGraph:
    """One captured graph of a :class:`GraphRunner`, called with its USER tensors alone.

    Made by :meth:`GraphRunner.bind`. A call passes the USER tensor arguments in the order of
    their positions (the PARAMETER and MUTATED tensors and the non-tensor values are the ones
    bound) and returns what a call of the runner returns. It replays the bound graph without
    building a key or reading the watched addresses; see the module's notes for what it still
    checks and what it leaves to the caller (tensors used in place are updated in place).

    Where the bound graph cannot replay now (an output it handed out is still in use, the runner
    let the graph go, ``force_recapture``), the call replays the key's graph on another of the
    runner's call paths if that one is free, or else is made through the runner with the bound
    arguments, with everything a runner call does (a capture on another call path included);
    the bound graph then follows the graphs the runner holds for the key.

    Attributes:
        name: The runner's name.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_autocast",
        "_call",
        "_dtypes",
        "_entries",
        "_guards",
        "_key",
        "_lock",
        "_originals",
        "_owner",
        "_pinned",
        "_ptrs",
        "_recapture",
        "_runner",
        "_sees_autocast",
        "_sizes",
        "_strides",
        "_user",
        "_watched",
        "name",
    )

    def __init__(
        self,
        runner: GraphRunner,
        entries: Sequence[Entry],
        args: tuple[Any, ...],
        *,
        user: Sequence[int],
        pinned: Sequence[int],
        watched: Sequence[int],
        lock: Any,
        owner: object,
        force_recapture: bool,
    ) -> None:
        self.name = runner.name
        self._runner = runner
        # The key's graphs on the runner's call paths, weakly: a graph the runner let go of must
        # not keep its pool memory for the bound graph's sake (its static buffers), and must
        # never replay again.
        self._entries = tuple(map(weakref.ref, entries))
        self._key = entries[0].key
        self._ptrs = entries[0].ptrs
        self._user = tuple(user)
        self._watched = tuple(watched)
        picked = [args[i] for i in self._user]
        # The tensors used in place, as aliases of their storages at bind time: a tensor whose
        # storage is replaced later (param.data = ...) leaves the alias on the old one, which
        # stays alive, so the graph (and the CPU emulation, as a device graph does) reads the
        # bound values, never freed memory. The originals are kept to tell (check()).
        self._originals = tuple(args[i] for i in self._watched)
        bound = list(args)
        for i in pinned:
            bound[i] = args[i].detach()
        for i in self._user:
            bound[i] = None  # each call brings its own: the bind's are not kept alive
        self._args = tuple(bound)
        self._sizes = tuple(map(_size, picked))
        self._strides = tuple(map(_stride, picked))
        self._dtypes = tuple(map(_dtype, picked))
        # Whether the guards see the autocast state of the USER tensors' device (with none,
        # nothing is seen: every call asks).
        guards, self._sees_autocast = layout_guards(picked)
        self._guards: Callable[..., bool] = guards or self._same_layout
        # The autocast state the graph was captured under (its key holds it, and bind() found
        # the graph under the state of now): a call under another state takes the runner's path.
        self._autocast = autocast_state() if _any_autocast() else ()
        # What Entry.claim reads of a call: its USER tensors come first, then the tensors used
        # in place, so that the positions are fixed and a call builds one tuple.
        self._pinned = tuple(self._args[i] for i in pinned)
        self._call = (
            tuple(range(len(picked))),
            tuple(range(len(picked), len(picked) + len(pinned))),
        )
        self._lock = lock
        self._owner = owner
        self._recapture = force_recapture

    @property
    def static_outputs(self) -> bool:
        """Whether calls return the graph's own outputs, overwritten by the next call."""
        return False

    @property
    def runner(self) -> GraphRunner:
        """The runner the graph belongs to."""
        return self._runner

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """Replay the bound graph on ``inputs`` (the USER tensors, in order)."""
        try:
            fits = self._guards(*inputs)
        except TypeError:  # another number of arguments, or not tensors
            fits = False
        # A graph captured under autocast compares the whole state (dtypes, devices); one captured
        # without it learns from the guards whether its device's autocast is on (autocast of
        # another device changes none of its ops), else asks.
        if fits and (self._autocast or (not self._sees_autocast and _any_autocast())):
            fits = autocast_state() == self._autocast
        if not fits:
            return self._off_layout(inputs)
        with self._lock:
            if not self._recapture:
                user, pinned = self._call
                given = inputs + self._pinned
                entries = self._entries
                for i, ref in enumerate(entries, 1):
                    entry = ref()
                    if (
                        entry is not None
                        and entry.live
                        and entry.claim(self._owner, given, user, pinned)
                    ):
                        if len(entries) > 1:
                            # The graph just replayed goes last: a caller holding its outputs
                            # into the next call finds the other graph free at the first try.
                            self._entries = entries[i:] + entries[:i]
                        self._runner.counters.replays += 1
                        return entry.replay(self._args, inputs)
            return self._through_runner(inputs)

    def _off_layout(self, inputs: tuple[Any, ...]) -> Any:
        """A call the guards refused: another layout, or what the runner tells apart itself."""
        # The layout differs (refused), or what the runner's key tells apart (the autocast
        # state) or the copy does not care about (requires_grad, the device of a tensor copied
        # in): the runner's path decides.
        if not self._same_layout(*inputs):
            raise self._mismatch(inputs)
        with self._lock:
            return self._through_runner(inputs)

    def _same_layout(self, *inputs: Any) -> bool:
        try:
            return (
                tuple(map(_size, inputs)) == self._sizes
                and tuple(map(_stride, inputs)) == self._strides
                and tuple(map(_dtype, inputs)) == self._dtypes
            )
        except (AttributeError, TypeError):
            return False  # not a tensor

    def check(self) -> bool:
        """Whether every bound tensor used in place still has the address the graph reads.

        ``False`` after a bound tensor's storage was replaced (``param.data = ...``, a module
        moved with ``.to()``): the graph reads the old values until the runner is bound again.
        One address read per watched tensor: for tests and debugging, not for every call.
        """
        return tuple(map(_data_ptr, self._originals)) == self._ptrs

    def _through_runner(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        """The call through the runner, with the bound arguments; follow the key's graphs."""
        args = list(self._args)
        for position, tensor in zip(self._user, inputs, strict=True):
            args[position] = tensor
        result = self._runner(*args)
        # The runner may have captured the key on a new call path, or again in place of a graph
        # it let go of: the bound graph replays whichever of them is free from now on.
        found = self._runner._graphs_for(self._key, self._ptrs)
        if found:
            self._entries = tuple(map(weakref.ref, found))
        return result

    def _mismatch(self, inputs: tuple[Any, ...]) -> InputLayoutError:
        def layout(value: Any) -> str:
            if not isinstance(value, torch.Tensor):
                return type(value).__name__
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"

        bound = [
            f"{str(d).removeprefix('torch.')}{list(s)}"
            for s, d in zip(self._sizes, self._dtypes, strict=True)
        ]
        given = [layout(value) for value in inputs]
        detail = "" if given != bound else " (the strides differ)"
        return InputLayoutError(
            f"BoundGraph {self.name!r} replays a graph captured for USER tensors {bound}; this "
            f"call passed {given}{detail}. Bind the runner once per captured layout "
            "(GraphRunner.bind) and pass each bound graph the layout it was bound with, or call "
            "the runner itself"
        )
