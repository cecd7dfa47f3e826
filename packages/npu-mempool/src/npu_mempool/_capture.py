"""Capture one graph into a pool: static inputs, static outputs, and what the pool now owns."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch

from npu_mempool._budget import graph_budget
from npu_mempool._devices import GraphBackend
from npu_mempool._entry import Entry, storage_ref
from npu_mempool._keys import Layout
from npu_mempool._options import CaptureOptions
from npu_mempool._outputs import Output
from npu_mempool._pool import PoolHandle, state_of

__all__ = ["capture"]


def capture(
    *,
    fn: Callable[..., Any],
    key: Hashable,
    args: tuple[Any, ...],
    layout: Layout,
    options: CaptureOptions,
    pool: PoolHandle,
    backend: GraphBackend,
    rewinds: bool,
    name: str = "",
    owner: object = None,
) -> Entry:
    """Capture ``fn(*args)`` into ``pool`` and return its entry.

    Args:
        fn: The callable to capture (possibly specialised for this key).
        key: The graph key of ``args``.
        args: The call's arguments.
        layout: Which argument is what.
        options: The runner's options.
        pool: The pool to capture into (already rewound if the runner decided so).
        backend: The device's graph implementation.
        rewinds: Whether the pool is rewound before later captures: its outputs are then
            recorded as pool-owned so a device rewind can neutralise them.
        name: The runner's name, for messages.
        owner: The runner's identity (see :class:`~npu_mempool._entry.Reclaim`).
    """
    state = state_of(pool)
    coexists = state.live_lenders()  # before the capture allocates anything
    static_args: list[Any] = list(args)
    structure: list[Output] = []
    watched = set(layout.watched)

    def body(
        static_like: Callable[[torch.Tensor], torch.Tensor],
    ) -> tuple[list[Any], Callable[[tuple[Any, ...]], Sequence[Any]], list[torch.Tensor]]:
        for i in layout.user:
            # Without clone_input the caller's tensor is captured and later inputs are copied
            # into it, which is impossible where its elements share memory (an expanded
            # tensor): such an input gets a pool buffer as with clone_input.
            if options.clone_input or torch._debug_has_internal_overlap(args[i]) == 1:
                static_args[i] = static_like(args[i])
        with _autocast_cache_off():
            out = fn(*static_args)
        shape = Output(out)
        structure.append(shape)
        inputs = [static_args[i] for i in layout.tensors]
        flatten = shape.flatten()

        def rerun(call: tuple[Any, ...]) -> Sequence[Any]:
            # The emulated replay: watched inputs are the call's own tensors (they passed the
            # address check, so they are the captured memory), which the graph must not keep
            # alive, as a device graph keeps none (a replaced KV cache must be free to die).
            return flatten(fn(*[call[i] if i in watched else a for i, a in enumerate(static_args)]))

        return shape.leaves, rerun, inputs

    graph, static_leaves = backend.capture(pool, body, options.capture_error_mode)
    shape = structure[0]
    caller_storages = {
        args[i].untyped_storage()._cdata for i in layout.tensors if static_args[i] is args[i]
    }
    # Outputs in pool memory: they are what a later replay can overwrite. Not: outputs of the
    # caller's memory, empty ones (no allocation behind them) and tensors on another device (a
    # constant): the allocator's live-allocation check before a rewind must see only pool blocks.
    owned = [
        isinstance(leaf, torch.Tensor)
        and leaf.device.type == pool.device.type
        and leaf.untyped_storage().nbytes() > 0
        and leaf.untyped_storage()._cdata not in caller_storages
        for leaf in static_leaves
    ]
    statics = [t for t, mine in zip(static_leaves, owned, strict=True) if mine] + [
        static_args[i] for i in layout.user if static_args[i] is not args[i]
    ]
    # An output that is a MUTATED input (or a view of it) keeps that tensor alive through the
    # runner, so its liveness says nothing: such a graph is replaced, never kept.
    mutated = {args[i].untyped_storage()._cdata for i in layout.mutated}
    pinned = any(
        isinstance(leaf, torch.Tensor) and leaf.untyped_storage()._cdata in mutated
        for leaf in static_leaves
    )
    ptrs = tuple(args[i].data_ptr() for i in layout.watched)
    storages = None if pinned else tuple(storage_ref(args[i]) for i in layout.mutated)
    dst = [static_args[i] for i in layout.user]
    for i in watched:
        static_args[i] = None  # the replay passes the call's own tensors
    entry = Entry(
        key=key,
        graph=graph,
        pool=pool,
        ptrs=ptrs,
        storages=storages,
        user=layout.user,
        dst=dst,
        clone_input=options.clone_input,
        shape=shape,
        leaves=static_leaves,
        owned=owned,
        clone_output=options.clone_output,
        name=name,
        coexists=coexists,
        owner=owner,
        per_call=not options.keep_held_outputs,
    )
    keyed = set(layout.keyed_params)
    entry.watch_parameters([args[i] for i in layout.params if i in watched and i not in keyed])
    if rewinds:
        # Recorded per graph, so that freeing the graph lets its memory go (PoolState.disown).
        state.own(entry, statics)
    entry.count_in(graph_budget(pool.device.type))
    return entry


@contextlib.contextmanager
def _autocast_cache_off() -> Iterator[None]:
    """Autocast without its weight cache, while a graph is captured.

    Under autocast, the casts of parameters are cached until the autocast block exits, and a
    capture that used a cached copy would bake its address: once the block ends, the copy is
    freed and every replay reads memory that is someone else's. (torch's
    ``make_graphed_callables`` refuses autocast's cache for that reason.) Without the cache, the
    graph holds the casts themselves, which read the parameter on every replay.
    """
    if not (torch._C._is_any_autocast_enabled() and torch.is_autocast_cache_enabled()):
        yield
        return
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(True)
