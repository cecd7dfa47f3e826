"""One captured graph: its static buffers, its replay, and the outputs it has handed out."""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from weakref import getweakrefs

import torch
from torch.autograd import profiler
from torch.multiprocessing.reductions import StorageWeakRef

from npu_mempool._budget import GraphBudget
from npu_mempool._devices import Graph
from npu_mempool._keys import picker
from npu_mempool._outputs import Output, storage_uses
from npu_mempool._pool import PoolHandle, PoolState, state_of
from npu_mempool._steps import StepToken, step_token, steps_ended, take_back_outputs
from npu_mempool._trace import profiled

__all__ = ["Entry", "Reclaim", "reclaiming"]


class Reclaim:
    """The call being dispatched, as the graphs it may take memory back from see it.

    Outputs of ended steps are taken back only while a runner dispatches a call (inside
    :func:`reclaiming`): the call's arguments must be read before memory they use is handed out
    again. A stale output passed back in as a USER argument (``h = f(h)``, a KV cache grown by
    ``torch.cat`` that comes back as the next step's input) is therefore never poisoned: it is
    moved out of the pool (copied) and stays valid for the caller, who may pass it to later
    graphs of the same call too. One passed in as a MUTATED or PARAMETER argument is used in
    place by the graph: it stays in use.

    Args:
        owner: The dispatching runner's identity: outputs ended only by a top-level call (not by
            an explicit boundary) are taken back from the runner's own graphs alone, since a
            graph of another runner sharing the pool may still read them later in the call.
        args: The call's arguments.
        user: Positions of its USER tensors.
        pinned: Positions of its MUTATED and PARAMETER tensors.

    The graph whose call it is gets the same four values directly (:meth:`Entry.claim`); this
    record is what other graphs of the pool read, while the call asks them (:func:`reclaiming`).
    """

    __slots__ = ("args", "owner", "pinned", "user")

    def __init__(
        self, owner: object, args: Sequence[Any], user: Sequence[int], pinned: Sequence[int]
    ) -> None:
        self.owner = owner
        self.args = args
        self.user = user
        self.pinned = pinned


class _Dispatching(threading.local):
    def __init__(self) -> None:
        self.call: Reclaim | None = None


_dispatching = _Dispatching()


@contextmanager
def reclaiming(call: Reclaim) -> Iterator[None]:
    """Within the block, graphs may take back outputs of ended steps, reading ``call`` first."""
    outer = _dispatching.call
    _dispatching.call = call
    try:
        yield
    finally:
        _dispatching.call = outer


class Entry:
    """A captured graph and everything its replay needs, prepared once at capture.

    A replay copies the call's USER inputs into the static input buffers, replays the graph and
    hands the static outputs out (see [Note: output liveness] in ``_outputs``). It runs on every
    call of a captured key, so everything it can know in advance is worked out here: the input
    copy, the output builder, the storages whose use counts tell liveness, the pool's record of
    lenders, bound methods. On a free graph its hot path (:meth:`claim`, :meth:`replay`,
    :meth:`hand_out`) calls C functions only, apart from the graph's replay and the step token of
    a hand-out.
    """

    __slots__ = (
        "__weakref__",
        "_alone",
        "_budget",
        "_build",
        "_clone_output",
        "_copy",
        "_dst",
        "_handed",
        "_in_pool",
        "_leaves",
        "_lend",
        "_lent",
        "_mine",
        "_owner",
        "_per_call",
        "_pick",
        "_pool",
        "_replay_graph",
        "_stale",
        "_static",
        "_storages",
        "_watchers",
        "coexists",
        "epoch",
        "graph",
        "key",
        "live",
        "name",
        "ptrs",
        "state",
        "storages",
    )

    def __init__(
        self,
        *,
        key: Hashable,
        graph: Graph,
        pool: PoolHandle,
        ptrs: tuple[int, ...],
        storages: tuple[StorageWeakRef, ...] | None,
        user: list[int],
        dst: list[torch.Tensor],
        clone_input: bool,
        shape: Output,
        leaves: list[Any],
        owned: list[bool],
        clone_output: bool,
        name: str = "",
        coexists: tuple[weakref.ref[Entry], ...] = (),
        owner: object = None,
        per_call: bool = False,
    ) -> None:
        self.key = key
        self.name = name
        # The runner's graph until it lets go of it (discard): a BoundGraph replays it only then.
        self.live = True
        # Graphs of the pool whose outputs were alive while this one was captured: its memory
        # cannot overlap those outputs, so it may replay while they are still in use (the pieces
        # of one split graph, each fed by the one before, or two runners sharing a pool in turn).
        self.coexists = coexists
        self.graph = graph
        self._replay_graph = graph.replay
        # Weakly: a graph kept until its outputs die (PoolState.retire) must not keep its pool
        # alive, which would make the two a cycle that only the cyclic collector frees.
        self._pool = weakref.ref(pool)
        # Gives the graph back to its device's budget (count_in); nothing until counted.
        self._budget: Callable[[], object] = _uncounted
        # The pool's bookkeeping: this graph records its lent outputs there on every hand-out.
        self.state: PoolState = state_of(pool)
        # Captured after the pool's last rewind so far: the allocator protects its blocks until
        # the next one (PoolState.protects_lent_memory).
        self.epoch = self.state.epoch
        # Addresses of the watched inputs (MUTATED, and PARAMETER unless frozen) at capture.
        self.ptrs = ptrs
        # Finalizers of the nn.Parameter inputs (watch_parameters), detached when freed.
        self._watchers: list[weakref.finalize[Any, Any]] = []
        # The storages of the MUTATED inputs at capture, held weakly: while they all live, the
        # graph still serves the caller's tensors; once one died, the graph is stale. None:
        # liveness cannot tell (an output pins a MUTATED input).
        self.storages = storages
        # The input copy: the call's USER tensors (picked by position) into the static buffers.
        self._pick = picker(user)
        self._dst = dst
        self._copy: Callable[[list[torch.Tensor], tuple[torch.Tensor, ...]], None] = (
            torch._foreach_copy_ if clone_input else _copy_moved
        )
        # The container the callable returned, rebuilt around the leaves (a C callable for a
        # tensor, a tuple or a list).
        self._build = shape.builder()
        self._leaves = leaves
        # Positions of the outputs in pool memory: the ones handed out as views (or clones).
        self._in_pool = tuple(i for i, mine in enumerate(owned) if mine)
        self._clone_output = clone_output
        # The runner that captured it, and whether a top-level call ends the step of what it
        # handed out (CaptureOptions.keep_held_outputs off), or only an explicit boundary.
        self._owner = owner
        self._per_call = per_call
        # What reading an output this graph took back raises.
        self._stale = (_PER_CALL if per_call else _MARKED).format(name=name)
        # What the runner itself holds of each pool-owned output storage: more uses than these
        # mean a handed-out output (or a view of one) is alive.
        uses: dict[int, int] = {}
        for leaf, mine in zip(leaves, owned, strict=True):
            if mine:
                cdata = leaf.untyped_storage()._cdata
                uses[cdata] = storage_uses(cdata)
        # Two columns, so that the liveness check of every call maps C functions over them.
        self._storages = tuple(uses)
        self._mine = tuple(uses.values())
        # The outputs handed out (weakly) with the step they were handed out in: after a step
        # boundary they may be taken back (see _steps).
        self._handed: list[tuple[weakref.ref[torch.Tensor], StepToken]] = []
        self._lend = self.state.lending(self)
        # The graphs of the pool that lent outputs out (a live view), and this graph alone: while
        # no other graph is recorded there, the pool holds nothing else of this graph's memory.
        self._lent = self.state.lenders()
        # The graphs whose outputs static bound graphs hold: in use for this one's replays too.
        self._static = self.state.static_holders()
        self._alone = frozenset((id(self),))

    @property
    def pool(self) -> PoolHandle | None:
        """The pool the graph was captured into (``None`` once it is gone)."""
        return self._pool()

    def in_use(self) -> bool:
        """Whether an output this graph handed out (or a view of one) is still alive."""
        return any(map(operator.gt, map(storage_uses, self._storages), self._mine))

    def claim(
        self, owner: object, args: Sequence[Any], user: Sequence[int], pinned: Sequence[int]
    ) -> bool:
        """Whether the graph may replay for this call: nothing uses the memory it writes.

        Asked by the runner that dispatches the call (its identity ``owner``, the call's
        ``args``, the positions of its USER tensors and of its MUTATED and PARAMETER ones, as in
        :class:`Reclaim`). Free when no output it handed out (or a view of one) is alive and no
        other graph of its pool lent out outputs still in use (:meth:`PoolState.in_use`, asked
        only where another graph is recorded as a lender).

        Where its own outputs are alive, the ones of steps that have ended are taken back first
        (:meth:`_release`). Where another graph's outputs are in use, those graphs may take back
        theirs, reading this call's arguments first (a second question to the pool, so that a
        free pool answers without the record of the call). The first case is the path of every
        ``out = f(x)`` loop with one step per call (the previous output is still held): it
        opens three frames more than a free graph's replay, the take-back's, its step check's
        and the poisoning of the old outputs (one frame for all of them).
        """
        if any(
            map(operator.gt, map(storage_uses, self._storages), self._mine)
        ) and not self._release(owner, args, user, pinned):
            return False
        if (self._lent <= self._alone and not self._static) or not self.state.in_use(self):
            return True  # no other graph of the pool lent anything still in use
        # Off the common path (another graph's outputs are in use): ask again, letting those
        # graphs take back what ended.
        with reclaiming(Reclaim(owner, args, user, pinned)):
            return not self.state.in_use(self)

    def replay(self, args: tuple[Any, ...], picked: tuple[torch.Tensor, ...] | None = None) -> Any:
        """Copy the inputs in, replay, and hand the outputs out.

        Args:
            args: The call's arguments (the emulated graph re-runs on the tensors used in place).
            picked: The USER tensors, where the caller has them already (a BoundGraph, whose
                ``args`` hold none); by default picked out of ``args``.
        """
        if picked is None:
            picked = self._pick(args)
        if profiler._is_profiler_enabled:
            return self._replay_profiled(args, picked)
        if picked:
            self._copy(self._dst, picked)
        self._replay_graph(args)
        # hand_out(), inline for the common case (a frame less on every replay).
        in_pool = self._in_pool
        if not in_pool or self._clone_output:
            return self.hand_out()
        leaves = list(self._leaves)
        token = step_token(self._per_call)
        handed = []
        for i in in_pool:
            leaves[i] = out = leaves[i].detach()
            handed.append((weakref.ref(out), token))
        self._handed = handed
        self._lend()
        return self._build(leaves)

    def _replay_profiled(self, args: tuple[Any, ...], picked: tuple[torch.Tensor, ...]) -> Any:
        # The same steps inside profiler ranges; kept off the common path (two context managers
        # per call otherwise).
        with profiled("npu_mempool.replay"):
            if picked:
                with profiled("npu_mempool.copy_inputs"):
                    self._copy(self._dst, picked)
            self.graph.replay(args)
            return self.hand_out()

    def hand_out(self) -> Any:
        """The outputs of the last replay, as the callable returned them."""
        if not self._in_pool:
            return self._build(self._leaves)
        leaves = list(self._leaves)
        if self._clone_output:
            for i in self._in_pool:
                leaves[i] = leaves[i].clone()
            return self._build(leaves)
        # A graph replays only when its memory is free, so every output handed out before is
        # dead (or was taken back): the list starts again.
        token = step_token(self._per_call)
        handed = []
        for i in self._in_pool:
            leaves[i] = out = leaves[i].detach()
            handed.append((weakref.ref(out), token))
        self._handed = handed
        # The pool must know: its other graphs may not write this memory while it is used.
        self._lend()
        return self._build(leaves)

    # -- static bound graphs (GraphRunner.bind(static_outputs=True), _static_bound) ---------

    def static_outputs(self) -> tuple[list[Any], Any, tuple[int, ...]]:
        """The outputs a static bound graph hands out on every call, made once.

        Returns the leaves (views of the pool-owned outputs, the others as they are), the
        container the callable returned built of them, and the use count of each output storage
        while nothing but the runner and these views holds it (:meth:`used_beyond`).
        """
        before = tuple(map(storage_uses, self._storages))
        leaves = self._viewed(self._leaves)
        added = map(operator.sub, map(storage_uses, self._storages), before)
        return leaves, self._build(leaves), tuple(map(operator.add, self._mine, added))

    def used_beyond(self, expected: tuple[int, ...]) -> bool:
        """Whether an output storage has more uses than ``expected`` (from static_outputs)."""
        return any(map(operator.gt, map(storage_uses, self._storages), expected))

    def handed_anew(self, leaves: list[Any]) -> tuple[list[torch.Tensor], Any]:
        """New views of ``leaves``' pool-owned outputs, and the container built of them."""
        leaves = self._viewed(leaves)
        return [leaves[i] for i in self._in_pool], self._build(leaves)

    def _viewed(self, leaves: list[Any]) -> list[Any]:
        """``leaves`` with each pool-owned output replaced by a new view of it (``detach``)."""
        viewed = list(leaves)
        for i in self._in_pool:
            viewed[i] = viewed[i].detach()
        return viewed

    def replay_steps(self) -> tuple[Callable[..., None], list[torch.Tensor], Callable[..., Any]]:
        """The input copy, its static buffers and the graph's replay, to call inline."""
        return self._copy, self._dst, self._replay_graph

    def release_stale(self) -> bool:
        """Take back outputs of ended steps; return whether the graph's memory is now free.

        Only while a runner dispatches a call (:func:`reclaiming`, or :meth:`claim` of the call's
        own graph): see :meth:`_release`.
        """
        call = _dispatching.call
        if call is None:
            return False
        return self._release(call.owner, call.args, call.user, call.pinned)

    def _release(
        self, owner: object, args: Sequence[Any], user: Sequence[int], pinned: Sequence[int]
    ) -> bool:
        """Take back outputs of ended steps for a call; return whether the memory is now free.

        Only where every use of the memory beyond the runner's own is an output this graph handed
        out in a step that has ended (see ``_steps``). Those are poisoned (reading one raises
        :class:`~npu_mempool.StaleOutputError`), except the ones the call itself passes in as
        USER arguments, which are moved out of the pool and stay valid (see :class:`Reclaim`). A
        view the caller made of an output, an output of the current step, an output held inside
        autograd's graph or one the call uses in place keeps the memory in use, and nothing is
        taken. Plain loops, no comprehensions: no frame but this one and the step check on the
        way to a decision.
        """
        tensors: list[torch.Tensor] = []
        tokens: list[StepToken] = []
        ref: weakref.ref[torch.Tensor] | None
        for ref, token in self._handed:
            tensor = ref()
            if tensor is not None:
                tensors.append(tensor)
                tokens.append(token)
        # The loop's last weak reference would outlive ours (torch swaps no tensor with one).
        ref = None
        if not tensors:
            return False
        # Outputs ended by a top-level call alone are taken back by the runner's own graphs only.
        if not steps_ended(tokens, self._per_call and owner is self._owner):
            return False
        held: dict[int, int] = {}
        for tensor in tensors:
            cdata = tensor.untyped_storage()._cdata
            held[cdata] = held.get(cdata, 0) + 1
        for cdata, mine in zip(self._storages, self._mine, strict=True):
            if storage_uses(cdata) - mine != held.get(cdata, 0):
                return False  # something else (a view of an output) still uses the memory
        # Decided before anything is touched, so that a call never takes back half the outputs.
        # The call must not use an output's memory in place (a MUTATED or PARAMETER argument):
        # one that is a view of an output was counted above (a use beyond the outputs), so what
        # is left is an output passed itself, told by identity (torch keeps one Python object
        # per C tensor). No storage object per argument: a decode step pins some sixty.
        if pinned and not set(map(id, tensors)).isdisjoint(map(id, map(args.__getitem__, pinned))):
            return False
        passed = set(map(id, map(args.__getitem__, user)))
        for tensor in tensors:
            # Taking back changes the caller's object in place: safe only where nothing but that
            # object holds it, not autograd (a tensor saved for backward, a gradient), whose
            # record of it would break (what torch.utils.swap_tensors requires). One moved out of
            # the pool keeps its values, so it must not require grad; one poisoned may have no
            # weak reference but the runner's own.
            if tensor._use_count() != 1:  # type: ignore[attr-defined]
                return False
            if id(tensor) in passed:
                if tensor.requires_grad:
                    return False
            elif len(getweakrefs(tensor)) > 1:
                return False
        # torch swaps no tensor that has a weak reference: drop ours first.
        self._handed.clear()
        kept = take_back_outputs(tensors, passed, self._stale)
        if kept:
            self._handed = [(weakref.ref(tensors[i]), tokens[i]) for i in kept]
            return False
        return not any(map(operator.gt, map(storage_uses, self._storages), self._mine))

    def watch_parameters(self, parameters: Sequence[torch.Tensor]) -> None:
        """Never replay for ``parameters``' addresses again once one of them is collected.

        For the nn.Parameter inputs, which the key leaves out (their layout cannot change at
        their address): a new parameter of another shape could take a dead one's address, and
        the address check alone would replay this graph for it.
        """
        ref = weakref.ref(self)
        self._watchers = [weakref.finalize(p, _parameter_died, ref) for p in parameters]

    def alive(self) -> bool:
        """Whether every MUTATED tensor and nn.Parameter the graph was captured with exists."""
        if self.storages is None or _GONE in self.ptrs:
            return False
        return not any(storage.expired() for storage in self.storages)  # type: ignore[no-untyped-call]

    def discard(self) -> None:
        """Let the graph go: free it now, or once no handed-out output uses its memory.

        A graph whose outputs are still in use stays with its pool, as a lender, until they die
        or are taken back (:meth:`PoolState.retire`): forgetting it would let the next rewind
        give their memory to another capture, and the caller would read that capture's numbers.
        """
        self.live = False
        if self.in_use():
            self.state.retire(self)
        else:
            self.free()

    def free(self) -> None:
        """Free the graph and the pool memory only it holds (its outputs are no longer used)."""
        self.live = False
        self.state.forget(self)
        self.state.disown(self)
        # Its static buffers go with it, in place: a static bound graph still pointing at the
        # graph (until its next call follows the runner's new one) shares these lists, and must
        # not keep pool memory that the pool counts as free.
        self._dst.clear()
        self._leaves.clear()
        for watcher in self._watchers:
            watcher.detach()
        self.graph.reset()
        self._budget()

    def count_in(self, budget: GraphBudget) -> None:
        """Count this graph in its device's budget until it is freed (or collected)."""
        self._budget = budget.hold(self)


#: A watched address of a graph one of whose nn.Parameter inputs was collected: every one of
#: them reads so, equal to no call's (no address is negative), so the graph never replays
#: again (and make_room frees it first).
_GONE = -1


def _parameter_died(ref: weakref.ref[Entry]) -> None:
    entry = ref()
    if entry is not None:
        # One assignment: safe from any thread, under any lock or none.
        entry.ptrs = (_GONE,) * len(entry.ptrs)


def _uncounted() -> None:
    """A graph counted in no budget has nothing to give back."""


_MARKED = (
    "this output of graph {name!r} was handed out before a step boundary "
    "(npu_mempool.mark_step_begin() or torch.compiler.cudagraph_mark_step_begin()) and a later "
    "replay overwrote it; clone() outputs that must outlive their step"
)
_PER_CALL = (
    "this output of graph {name!r} was handed out before a step boundary (a later call of the "
    "compiled function, npu_mempool.mark_step_begin() or "
    "torch.compiler.cudagraph_mark_step_begin()) and a later replay overwrote it; clone() "
    "outputs that must outlive their step, or keep every held output "
    "(npu_compile: config.debug.aclgraph.keep_held_outputs = True; npu_mempool: "
    "CaptureOptions(keep_held_outputs=True))"
)


def storage_ref(tensor: torch.Tensor) -> StorageWeakRef:
    """A weak reference to the tensor's storage (alive as long as any view of it is)."""
    return StorageWeakRef(tensor.untyped_storage())  # type: ignore[no-untyped-call]


def _copy_moved(dst: list[torch.Tensor], src: tuple[torch.Tensor, ...]) -> None:
    """clone_input=False: copy only the inputs that are not the captured tensors themselves."""
    moved = [(d, s) for d, s in zip(dst, src, strict=True) if d.data_ptr() != s.data_ptr()]
    if moved:
        torch._foreach_copy_([d for d, _ in moved], [s for _, s in moved])
