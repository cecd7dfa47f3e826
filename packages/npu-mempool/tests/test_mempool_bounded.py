"""Pool memory stays bounded in loops that never let a pool rewind (mode 2).

A loop that always holds its last output (``out = r(x)``) never finds its pool free, so the pool
is never rewound. Every graph the runner lets go of must still give its memory back once its
outputs die, as a device allocator takes a block back when its last tensor dies; the CPU arena
keeps memory the same way (``_Arena.release``). The bound stated here: at most the two graphs of
the last two calls stay alive (the one whose output the caller holds, and the newest), whatever
the number of calls.
"""

from __future__ import annotations

import gc
import weakref

import torch
from npu_mempool import CaptureOptions, GraphRunner, InputKind
from torch.multiprocessing.reductions import StorageWeakRef

#: Graphs (and so output storages) alive at once in the loops below: see the module docstring.
BOUND = 2


def _alive(refs: list[StorageWeakRef]) -> int:
    return sum(not ref.expired() for ref in refs)  # type: ignore[no-untyped-call]


def test_force_recapture_with_held_outputs_keeps_two_graphs_alive() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin()

    runner = GraphRunner(f, options=CaptureOptions(force_recapture=True))
    refs: list[StorageWeakRef] = []
    out = None
    for i in range(1000):
        x = torch.randn(256, generator=torch.Generator().manual_seed(i))
        out = runner(x)
        torch.testing.assert_close(out, f(x))
        refs.append(StorageWeakRef(out.untyped_storage()))  # type: ignore[no-untyped-call]
        if i == 10:
            early_bytes = runner.counters.pool_bytes
    assert runner.counters.captures == 1000
    # Before, every capture's buffers were kept until a rewind that never came: 1000 alive.
    assert _alive(refs) <= BOUND
    assert runner.counters.pool_bytes == early_bytes
    assert out is not None


def test_replaced_caches_with_held_outputs_keep_two_graphs_alive() -> None:
    # A serving loop: each request brings a new KV cache (a MUTATED input at a new address, so
    # a new graph), and the caller still holds the previous request's output.
    def step(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return cache * 2

    runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.MUTATED])
    refs: list[StorageWeakRef] = []
    out = None
    for request in range(40):
        cache = torch.zeros(64)
        for _ in range(3):
            out = runner(torch.ones(64), cache)
        assert out is not None
        torch.testing.assert_close(out, torch.full((64,), 6.0))
        refs.append(StorageWeakRef(out.untyped_storage()))  # type: ignore[no-untyped-call]
        if request == 5:
            early_bytes = runner.counters.pool_bytes
    assert _alive(refs) <= BOUND
    assert runner.counters.pool_bytes == early_bytes


def test_a_graph_kept_for_its_outputs_does_not_keep_its_pool_in_a_cycle() -> None:
    # A graph let go of while its output is held is kept until that output dies. Once the runner
    # and the output are gone, its pool goes at once, not at the next cyclic collection.
    runner = GraphRunner(lambda x: x + 1, options=CaptureOptions(force_recapture=True))
    held = runner(torch.ones(8))
    runner(torch.ones(8))  # lets the first graph go: kept, its output is held
    pool = weakref.ref(runner.pool)  # type: ignore[arg-type]
    gc.disable()
    try:
        del runner
        del held
        assert pool() is None
    finally:
        gc.enable()
