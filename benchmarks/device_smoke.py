"""The big questions of a device run, answered first: does capture and replay give eager's numbers?

Each check is isolated, so one failure never hides the others, and its outcome is written to
``smoke.json`` as soon as it ends (a run cut short keeps what it found, and names the check that
was running). In order:

- ``environment``: versions, the graph implementation, the allocator hooks torch offers, and the
  device's warm-up need (eager calls per new graph key before its capture), measured;
- ``raw_graph``: a plain ``torch.cuda.CUDAGraph`` capture and replay, the baseline that the
  machine itself works (CUDA only);
- ``replay_equals_eager``: a ``GraphRunner`` over several shapes, with the counts of captures,
  replays and warm-up calls the warm-up need implies;
- ``mutated_kv_cache``: a cache written in place at a position (a MUTATED input);
- ``pool_bytes``: pool memory with and without reuse across shapes, against each graph alone and
  against the static buffers every shape keeps, with the bounds the device tests assert;
- ``held_outputs_and_steps``: a held output is never overwritten; after ``mark_step_begin()`` it
  may be, and reading it then raises;
- ``decode_loop``: a greedy decode loop through ``torch.compile(backend=npu_compile...)`` gives
  eager's tokens, without and with a step boundary per step;
- ``host_sync_pieces``: a graph with a host sync (``.item()``) is split into captured pieces;
- ``dropout_masks``: dropout in training mode, captured: every replay draws a new mask, keeping
  the expected share (masks compared as distributions, not values);
- ``train_step``: forward, backward and an AdamW step compiled as one function with
  ``backend="npu_compile"``: eager's loss and parameters for three steps, captured and replayed;
- ``runner_autocast``: a ``GraphRunner`` under bfloat16 autocast gives autocast's numbers and
  dtype, and float32 ones after the block;
- in child processes, started first and run beside the others, so that an abort (a failed
  ``TORCH_INTERNAL_ASSERT``, a segfault) is recorded as a finding instead of ending the run:
  ``multi_stream`` (tagged streams and events through the runner), ``capture_error_python`` (a
  plain Python error raised inside the capture body), ``capture_stream_wait`` (a stream wait
  inside the capture on a stream that is not part of it), ``capture_host_sync`` (``.item()``
  inside a runner's capture), ``streams_record_wait`` (``npu_streams.record()`` and ``wait()`` in
  a function compiled with the backend: eager's numbers, one graph captured whole) and
  ``stream_scope_after_split`` (a graph split into pieces before, inside and across a stream
  scope: eager's numbers, every event a piece waits on recorded in that piece), the last two in
  the process of ``capture_stream_wait``; ``held_output_new_shape`` (an output held across a
  mode-2 pool rewind and the capture of a new shape), ``force_recapture_held`` (an output held
  across a forced recapture of its graph) and ``force_recapture_memory`` (200 forced recaptures,
  each output held while the next call captures: the pool stays within twice its size after 10
  calls), in one process; with no step boundary crossed, a held output must keep eager's values
  (``StaleOutputError`` is a failure there);
- ``capture_time``: what one capture costs through the runner, next to what torch's capture
  context managers add before every capture (device sync and cache emptying) and a whole
  allocator snapshot, which the runner no longer pays;
- ``replay_overhead``: a one-kernel graph through the runner against a raw ``torch.cuda.CUDAGraph``
  replay plus its input copy (target: runner <= 1.2x), with the raw replay's device time and
  whether the call is host-bound (only then does the ratio show the runner's cost); the runner
  must have captured once and replayed every timed call.

On a machine without an accelerator it runs the same checks on the CPU emulation (``--tiny`` for
small sizes): a check that the script works, not a result.

    python benchmarks/device_smoke.py --out DIR [--tiny]

Writes DIR/smoke.json; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _common import bound, device_us_per_call, pick_device, write_json

#: Prefix of the one line a child process prints its result on.
RESULT = "device-smoke-result: "
#: The counters of a runner that count calls (``pool_bytes`` is memory, not a count).
_COUNTED = ("captures", "replays", "fallbacks", "eager_calls")


@dataclass
class Context:
    device: torch.device
    tiny: bool
    #: Eager calls per new graph key before its capture on this device (measured first).
    warmup: int = 0
    results: dict[str, Any] = field(default_factory=dict)


def close(got: Any, expected: Any) -> None:
    """Equal up to float32 rounding: a replayed matmul may take another cuBLAS algorithm than
    the eager one (another stream, another workspace), which moves the last bits only."""
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) + x


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize()


def graph_counts(keys: Sequence[object], warmup: int) -> dict[str, int]:
    """Captures, replays and eager calls of one runner called with graph ``keys`` in turn.

    Each new key runs ``warmup`` times eagerly, is captured on the next call and replays after
    that, as long as no output is held across calls (one call path).
    """
    calls: dict[object, int] = {}
    counts = {"captures": 0, "replays": 0, "eager_calls": 0}
    for key in keys:
        calls[key] = calls.get(key, 0) + 1
        if calls[key] <= warmup:
            counts["eager_calls"] += 1
        elif calls[key] == warmup + 1:
            counts["captures"] += 1
        else:
            counts["replays"] += 1
    return counts


def counted(runner: Any) -> dict[str, int]:
    c = runner.counters
    return {"captures": c.captures, "replays": c.replays, "eager_calls": c.eager_calls}


def runner_rows(runners: Sequence[Any]) -> list[dict[str, Any]]:
    """Each runner's name, fallbacks and counts, as the checks report them."""
    return [{"name": r.name, "fallbacks": r.counters.fallbacks, **counted(r)} for r in runners]


def measure_warmup(device: torch.device) -> int:
    """Eager calls a runner makes for a new key before capturing it on ``device``."""
    from npu_mempool import GraphRunner

    runner = GraphRunner(lambda x: x + 1, name="warm-up probe")
    x = torch.zeros(1, device=device)
    for _ in range(8):
        runner(x)
        if runner.counters.captures:
            return int(runner.counters.eager_calls)
    raise AssertionError(f"no capture in 8 calls on {device}: {runner.counters}")


def mib(nbytes: float) -> float:
    return round(nbytes / 2**20, 2)


# -- checks in this process ---------------------------------------------------------------------


def check_environment(ctx: Context) -> dict[str, Any]:
    import npu_mempool

    device = ctx.device
    hooks = (
        "_cuda_getCheckpointState",
        "_cuda_setCheckpointPoolState",
        "_cuda_checkPoolLiveAllocations",
        "_cuda_clearCublasWorkspaces",
        "_cuda_endAllocateToPool",
        "_cuda_releasePool",
    )
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(device),
        "accelerator_graph": hasattr(torch.accelerator, "Graph"),
        "graph_implementation": npu_mempool.graph_implementation(device),
        "allocator_hooks": {name: hasattr(torch._C, name) for name in hooks},
    }
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        info["memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30)
    # Every expectation below is derived from this, never assumed (CUDA needs 1, others 0).
    ctx.warmup = info["warmup_calls"] = measure_warmup(device)
    return info


def check_raw_graph(ctx: Context) -> dict[str, Any]:
    if ctx.device.type != "cuda":
        return {"skipped": f"a raw CUDA graph needs CUDA (device is {ctx.device.type})"}
    device = ctx.device
    w = torch.randn(64, 64, device=device) / 8
    x = torch.randn(32, 64, device=device)
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        block(x, w)  # cuBLAS initialises here, not inside the capture
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = block(x, w)
    new = torch.randn(32, 64, device=device)
    x.copy_(new)
    graph.replay()
    close(out, block(new, w))
    return {"replayed": True}


def check_replay_equals_eager(ctx: Context) -> dict[str, Any]:
    from npu_mempool import GraphRunner, InputKind

    device = ctx.device
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=device) / 8
    runner = GraphRunner(block, input_kinds=[InputKind.USER, InputKind.PARAMETER])
    rows = (8, 8, 16, 16, 8, 32, 32, 16, 8)
    for n in rows:
        x = torch.randn(n, 64, device=device)
        close(runner(x, w), block(x, w))
    got, expected = counted(runner), graph_counts(rows, ctx.warmup)
    assert got == expected, f"counters {got}, expected {expected} (warm-up {ctx.warmup})"
    return {"counters": got, "paths": runner.num_paths}


def check_mutated_kv_cache(ctx: Context) -> dict[str, Any]:
    from npu_mempool import GraphRunner, InputKind

    device = ctx.device

    def step(x: torch.Tensor, pos: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(0, pos, x)  # written in place at the step's position
        return cache.sum(0) * 2

    runner = GraphRunner(step, input_kinds=[InputKind.USER, InputKind.USER, InputKind.MUTATED])
    cache = torch.zeros(16, 8, device=device)
    reference = cache.clone()
    for position in range(6):
        x = torch.randn(1, 8, device=device)
        pos = torch.tensor([position], device=device)
        close(runner(x, pos, cache), step(x, pos, reference))
        close(cache, reference)
    return {"counters": counted(runner), "paths": runner.num_paths}


def check_pool_bytes(ctx: Context) -> dict[str, Any]:
    from npu_mempool import CaptureOptions, GraphRunner, InputKind

    device = ctx.device
    rows, width = ((256, 192, 128, 64), 64) if ctx.tiny else ((4096, 3072, 2048, 1024), 1024)
    block(torch.randn(8, width, device=device), torch.randn(width, width, device=device))
    synchronize(device)  # the device libraries are initialised before any capture here

    def pool(options: CaptureOptions, shapes: Sequence[int]) -> int:
        w = torch.randn(width, width, device=device) / width**0.5
        runner = GraphRunner(
            block, input_kinds=[InputKind.USER, InputKind.PARAMETER], options=options
        )
        for n in shapes:
            x = torch.randn(n, width, device=device)
            torch.testing.assert_close(runner(x, w), block(x, w), rtol=1e-3, atol=1e-3)
        return int(runner.counters.pool_bytes)

    now = CaptureOptions(warmup_runs=0)  # pools are measured here, not the warm-up policy
    off = CaptureOptions(reuse_pool_across_shapes=False, warmup_runs=0)
    largest = pool(now, rows[:1])
    reuse = pool(now, rows)
    singles = sum(pool(off, (n,)) for n in rows)
    together = pool(off, rows)
    static = sum(2 * n * width * 4 for n in rows)  # every shape's float32 input and output
    result = {
        "rows": list(rows),
        "width": width,
        "MiB": {
            "largest alone": mib(largest),
            "reuse (mode 2), four shapes": mib(reuse),
            "no reuse, each alone, summed": mib(singles),
            "no reuse, four shapes": mib(together),
            "static inputs and outputs of the four": mib(static),
        },
        "reuse / largest (device test: <= 1.25)": round(reuse / largest, 3) if largest else None,
        "no reuse / sum of each alone (device test: <= 1.25)": round(together / singles, 3)
        if singles
        else None,
    }
    problems = []
    if not 0 < reuse <= 1.25 * largest:
        problems.append(f"reuse holds {mib(reuse)} MiB, over 1.25x the largest alone")
    if not static <= together <= 1.25 * singles:
        problems.append(
            f"without reuse the pool holds {mib(together)} MiB, outside [{mib(static)}, "
            f"1.25 x {mib(singles)}] MiB"
        )
    assert not problems, f"{'; '.join(problems)}; figures: {result['MiB']}"
    return result


def check_held_outputs_and_steps(ctx: Context) -> dict[str, Any]:
    from npu_mempool import CaptureOptions, GraphRunner, StaleOutputError, mark_step_begin

    device = ctx.device
    runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(warmup_runs=0))
    a = runner(torch.ones(8, device=device))
    b = runner(torch.ones(4, device=device))  # no rewind over `a` while it is held
    c = runner(torch.full((8,), 3.0, device=device))  # `a`'s graph is busy: a second call path
    assert a.tolist() == [2.0] * 8, a
    assert b.tolist() == [2.0] * 4, b
    assert c.tolist() == [6.0] * 8, c
    held_paths = runner.num_paths
    assert held_paths == 2, f"{held_paths} call paths for a held output, expected 2"

    stepped = GraphRunner(lambda x: x * 2, options=CaptureOptions(warmup_runs=0))
    first = stepped(torch.ones(8, device=device))
    mark_step_begin()  # a new step may overwrite what the earlier one handed out
    second = stepped(torch.zeros(8, device=device))
    assert second.tolist() == [0.0] * 8, second
    assert stepped.num_paths == 1, f"{stepped.num_paths} call paths after a step boundary"
    try:
        first.tolist()
    except StaleOutputError:
        stale = True
    else:
        stale = False
    assert stale, "an output overwritten after a step boundary could still be read"
    return {"paths_while_held": held_paths, "paths_with_step_boundary": stepped.num_paths}


def check_decode_loop(ctx: Context) -> dict[str, Any]:
    import npu_mempool
    from npu_compile import get_npu_backend
    from npu_compile.tools import DemoConfig, TinyDecoder, greedy_generate

    device = ctx.device
    model = TinyDecoder(DemoConfig(layers=2, dim=64)).to(device).eval()
    prompt = model.prompt()
    new_tokens = 8
    expected, _ = greedy_generate(model, model, prompt, new_tokens)
    result: dict[str, Any] = {}
    problems = []

    def with_step_boundaries(compiled: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def step(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            npu_mempool.mark_step_begin()  # what serving loops do: a new step per token
            return compiled(tokens, positions)

        return step

    for variant in ("held logits", "mark_step_begin per step"):
        torch._dynamo.reset()
        backend = get_npu_backend()
        compiled = torch.compile(model, backend=backend, dynamic=False)
        step = compiled if variant == "held logits" else with_step_boundaries(compiled)
        got, _ = greedy_generate(model, step, prompt, new_tokens)
        runners = backend.stats.runners
        eager = sum(r.counters.eager_calls for r in runners)
        result[variant] = {
            "tokens_equal": bool(torch.equal(got, expected)),
            "runners": [
                {"name": r.name, "paths": r.num_paths, **counted(r)} for r in backend.stats.runners
            ],
            "fallbacks": [str(f) for f in backend.stats.fallbacks],
        }
        if not torch.equal(got, expected):
            problems.append(f"{variant}: tokens {got.tolist()} != eager {expected.tolist()}")
        if backend.stats.fallbacks:
            problems.append(f"{variant}: fell back: {backend.stats.fallbacks}")
        # One prefill call and new_tokens - 1 decode steps, each graph warmed up first.
        if eager != min(1, ctx.warmup) + min(new_tokens - 1, ctx.warmup):
            problems.append(f"{variant}: {eager} warm-up calls (warm-up need {ctx.warmup})")
        for r in runners:
            if r.counters.captures and r.counters.captures != r.num_paths:
                problems.append(f"{variant}: {r.name} captured {r.counters.captures} times")
    torch._dynamo.reset()
    assert not problems, "; ".join(problems)
    return result


def _counts_positive(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w)
    n = (h > 0).sum().item()  # a host sync in the middle of the graph
    return (h * 2 + 1) / (n + 1), h.sum(0)


def check_host_sync_pieces(ctx: Context) -> dict[str, Any]:
    from npu_compile import get_npu_backend

    device = ctx.device
    torch._dynamo.reset()
    torch.manual_seed(0)
    w = torch.randn(8, 8, device=device)
    backend = get_npu_backend()
    # The piece after the sync is keyed by the synced value: each input comes back, so that
    # every value is seen past the device's warm-up and its graph replays.
    xs = [torch.randn(4, 8, device=device) for _ in range(3)]
    with torch._dynamo.config.patch(capture_scalar_outputs=True), torch.no_grad():
        compiled = torch.compile(_counts_positive, backend=backend)
        for x in xs * (ctx.warmup + 2):
            close(compiled(x, w), _counts_positive(x, w))
    stats = backend.stats
    result = {
        "pieces": stats.pieces,
        "splits": {name: list(splits) for name, splits in stats.splits.items()},
        "runners": [{"name": r.name, **counted(r)} for r in stats.runners],
        "fallbacks": [str(f) for f in stats.fallbacks],
    }
    torch._dynamo.reset()
    assert not stats.fallbacks, f"fell back: {stats.fallbacks}"
    assert stats.pieces == 2, f"{stats.pieces} pieces, expected 2 around the .item()"
    assert all(r.counters.replays > 0 for r in stats.runners), result["runners"]
    return result


def check_dropout_masks(ctx: Context) -> dict[str, Any]:
    """Dropout in training mode, captured: each replay draws a new mask, at the expected rate.

    A graph that froze its random numbers at capture would zero the same entries on every
    replay. Masks are compared as distributions (the share kept, the share two calls agree on),
    never as values: the device's generator is not the CPU's.
    """
    from npu_compile import get_npu_backend

    device = ctx.device
    p, rows, width = 0.25, 64, 64
    keep = 1 - p
    n = rows * width
    # Two independent masks agree where both keep or both drop an entry.
    agree = keep**2 + p**2
    # Five standard deviations of a share of n draws: a correct generator fails about once in
    # two million checks.
    keep_tolerance = 5 * (keep * p / n) ** 0.5
    agree_tolerance = 5 * (agree * (1 - agree) / n) ** 0.5
    torch._dynamo.reset()
    torch.manual_seed(0)
    linear = torch.nn.Linear(width, width).to(device)
    model = torch.nn.Sequential(linear, torch.nn.Dropout(p)).train()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    x = torch.randn(rows, width, device=device)
    calls = ctx.warmup + 1 + 6  # the warm-up calls, the capture, then six replays
    masks = []
    with torch.no_grad():
        dense = linear(x)  # what dropout zeroes or scales
        for _ in range(calls):
            y = compiled(x)
            kept = y != 0
            # The entries kept are the dense ones scaled by 1 / (1 - p): the graph is dropout.
            close(y[kept], dense[kept] / keep)
            masks.append(kept.clone())
            del y
    stats = backend.stats
    runners = stats.runners
    captured = masks[ctx.warmup :]  # from the capture on: the calls the graph answered
    keep_shares = [round(float(m.float().mean()), 4) for m in captured]
    agreements = [round(float((a == b).float().mean()), 4) for a, b in itertools.pairwise(captured)]
    result = {
        "p": p,
        "entries": n,
        "kept share per call (expected)": f"{keep} +- {keep_tolerance:.3f}",
        "kept share per call": keep_shares,
        "share two calls agree on (expected; 1.0: the same mask)": f"{agree} +- "
        f"{agree_tolerance:.3f}",
        "share consecutive calls agree on": agreements,
        "runners": runner_rows(runners),
        "fallbacks": [str(f) for f in stats.fallbacks],
    }
    torch._dynamo.reset()
    problems = []
    if stats.fallbacks or any(r.counters.fallbacks for r in runners):
        problems.append("not captured: it fell back")
    replays = sum(r.counters.replays for r in runners)
    if stats.captured != 1 or replays != calls - ctx.warmup - 1:
        problems.append(f"captured {stats.captured} graph(s), {replays} replays")
    if any(abs(share - keep) > keep_tolerance for share in keep_shares):
        problems.append(f"a call kept a share outside {keep} +- {keep_tolerance:.3f}")
    if any(abs(share - agree) > agree_tolerance for share in agreements):
        problems.append(
            "consecutive calls agree on a share outside "
            f"{agree} +- {agree_tolerance:.3f} (1.0: every replay reused one mask)"
        )
    assert not problems, f"{'; '.join(problems)}: {result}"
    return result


def _named_backend() -> str:
    """``"npu_compile"``, the name ``torch.compile`` knows the backend by, made known if need be.

    An installed npu-compile names it through its ``torch_dynamo_backends`` entry point; the suite
    runs the packages from their sources, which have no entry points, so the check registers the
    same function under the same name.
    """
    from npu_compile.backend import npu_compile_backend

    if "npu_compile" not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(npu_compile_backend, "npu_compile")
    return "npu_compile"


def check_train_step(ctx: Context) -> dict[str, Any]:
    """Forward, backward and an optimizer step compiled as one function: eager's every step."""
    import npu_mempool
    from npu_compile.backend import process_stats

    device = ctx.device
    capturable = device.type != "cpu"

    def make() -> tuple[torch.nn.Module, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
        ).to(device)
        # On a device the optimizer's step counts stay there (capturable), as a captured
        # optimizer step needs; the CPU has no such mode and needs none.
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=capturable)

        def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return model, step

    torch._dynamo.reset()
    name = _named_backend()
    stats_before, counters_before = process_stats(), npu_mempool.counters.snapshot()
    reference, reference_step = make()
    model, step = make()
    compiled = torch.compile(step, backend=name)
    losses = []
    for index in range(3):
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(16, 32, generator=generator).to(device)
        target = torch.randn(16, 8, generator=generator).to(device)
        expected = reference_step(x, target)
        got = compiled(x, target)
        close(got, expected)
        losses.append(round(float(got.detach()), 6))
        for (label, mine), theirs in zip(
            model.named_parameters(), reference.parameters(), strict=True
        ):
            try:
                close(mine, theirs)
            except AssertionError as error:
                raise AssertionError(f"step {index}: parameter {label} differs: {error}") from None
    stats_after, counters_after = process_stats(), npu_mempool.counters.snapshot()
    moved = {k: stats_after[k] - stats_before[k] for k in ("fx_graphs", "captured", "fallbacks")}
    runs = {k: counters_after[k] - counters_before[k] for k in _COUNTED}
    torch._dynamo.reset()
    result = {"losses": losses, "capturable": capturable, "backend": moved, "runners": runs}
    assert (moved["fallbacks"], runs["fallbacks"]) == (0, 0), f"fell back: {result}"
    assert min(moved["captured"], runs["captures"]) >= 1, f"nothing captured: {result}"
    assert runs["replays"] > 0, f"never replayed: {result}"
    return result


def check_runner_autocast(ctx: Context) -> dict[str, Any]:
    """A runner under bfloat16 autocast gives autocast's numbers; after the block, float32's."""
    from npu_mempool import GraphRunner, InputKind

    device = ctx.device

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w)  # a bfloat16 matmul under autocast, float32 outside it

    torch.manual_seed(0)
    w = torch.randn(64, 64, device=device) / 8
    runner = GraphRunner(fn, input_kinds=[InputKind.USER, InputKind.PARAMETER])
    calls = ctx.warmup + 3  # warm-up, capture, two replays in each state
    dtypes: dict[str, list[str]] = {"under autocast": [], "after it": []}

    def both(x: torch.Tensor, state: str) -> tuple[torch.Tensor, torch.Tensor]:
        if state == "under autocast":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return runner(x, w), fn(x, w)
        return runner(x, w), fn(x, w)

    for state in dtypes:
        for _ in range(calls):
            got, expected = both(torch.randn(16, 64, device=device), state)
            dtypes[state].append(str(got.dtype).removeprefix("torch."))
            assert got.dtype == expected.dtype, f"{state}: {got.dtype}, eager {expected.dtype}"
            if got.dtype == torch.bfloat16:
                # Another matmul algorithm moves the last bits of bfloat16's 8.
                torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
            else:
                close(got, expected)
            del got  # a held output would send the next call to a second call path
    assert dtypes["under autocast"][0] == "bfloat16", dtypes
    assert dtypes["after it"][0] == "float32", dtypes
    got_counts = counted(runner)
    expected_counts = graph_counts(["bf16"] * calls + ["f32"] * calls, ctx.warmup)
    assert got_counts == expected_counts, f"counters {got_counts}, expected {expected_counts}"
    return {"dtypes": dtypes, "counters": got_counts, "graphs": runner.num_graphs}


def check_capture_time(ctx: Context) -> dict[str, Any]:
    """What one capture costs, and what the runner no longer pays before and after it."""
    from npu_mempool import CaptureOptions, GraphRunner, InputKind

    device = ctx.device
    width = 64 if ctx.tiny else 1024
    # As many shapes on the dry run: past 8 new shapes captured with no replay between, a
    # runner runs new shapes eagerly, and a dry run with fewer did not see that.
    shapes = [8 * (i + 1) for i in range(16)]
    w = torch.randn(width, width, device=device) / width**0.5
    block(torch.randn(8, width, device=device), w)
    synchronize(device)
    runner = GraphRunner(
        block,
        input_kinds=[InputKind.USER, InputKind.PARAMETER],
        options=CaptureOptions(warmup_runs=0),
    )
    seconds = []
    for n in shapes:  # each a new shape: a rewind and a capture, then the replay for its output
        x = torch.randn(n, width, device=device)
        synchronize(device)
        start = time.perf_counter()
        runner(x, w)
        synchronize(device)
        seconds.append(time.perf_counter() - start)
        runner(x, w)  # a replay, as a shape that is worth capturing gets (not timed)
    assert runner.counters.captures == len(shapes), counted(runner)
    assert runner.counters.replays == len(shapes), counted(runner)

    def ms(values: Sequence[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values) * 1e3, 3),
            "min": round(min(values) * 1e3, 3),
            "max": round(max(values) * 1e3, 3),
        }

    def timed(fn: Callable[[], object], repeats: int) -> dict[str, float]:
        values = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            values.append(time.perf_counter() - start)
        return ms(values)

    result: dict[str, Any] = {
        "shapes": len(shapes),
        "width": width,
        "runner capture call ms (capture + its replay)": ms(seconds),
        "reading pool_bytes ms (an allocator snapshot, now only when asked)": timed(
            lambda: runner.counters.pool_bytes, 5
        ),
    }
    if device.type == "cuda":
        # In this process's state (the allocator holds the pools above): what torch's capture
        # context managers do before every capture, and the snapshot taken after each before.
        def sync_and_empty() -> None:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()

        result["torch.cuda.graph's sync + empty_cache ms (no longer paid)"] = timed(
            sync_and_empty, 5
        )
        result["memory_snapshot ms (no longer paid per capture)"] = timed(
            torch.cuda.memory_snapshot,  # type: ignore[no-untyped-call]
            5,
        )
        result["raw capture ms"] = _raw_capture_ms(device, w, width, ms)
    else:
        result["note"] = "CPU emulation: the device-only figures are left out"
    return result


def _raw_capture_ms(
    device: torch.device, w: torch.Tensor, width: int, ms: Callable[[Sequence[float]], Any]
) -> dict[str, Any]:
    """The same block captured raw: through ``torch.cuda.graph``, and with capture_begin/end.

    Each on an idle device, and with a few milliseconds of work queued before it (as in a serving
    loop, where the previous step is still running): the context manager's synchronize waits for
    that work; a capture does not need to.
    """
    stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    pool = torch.cuda.graph_pool_handle()
    big = torch.randn(2048, 2048, device=device)
    graphs = []  # alive until the end: a freed graph would give its pool memory back

    def context(x: torch.Tensor) -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            block(x, w)
        graphs.append(graph)

    def direct(x: torch.Tensor) -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            graph.capture_begin(pool=pool)
            try:
                block(x, w)
            finally:
                graph.capture_end()
        graphs.append(graph)

    seconds: dict[str, list[float]] = {}
    for n in (8, 16, 24, 32):
        x = torch.randn(n, width, device=device)
        for name, capture in (("torch.cuda.graph", context), ("capture_begin/end", direct)):
            for queued in (False, True):
                torch.cuda.synchronize(device)
                if queued:
                    for _ in range(20):  # about 5 ms on an H100 (float32, 2048^3 each)
                        torch.mm(big, big)
                start = time.perf_counter()
                capture(x)
                label = f"{name}, {'work queued' if queued else 'idle device'}"
                seconds.setdefault(label, []).append(time.perf_counter() - start)
    torch.cuda.synchronize(device)
    return {label: ms(values) for label, values in seconds.items()}


def check_replay_overhead(ctx: Context) -> dict[str, Any]:
    """One tiny kernel: the runner's per-call cost against a raw replay plus its input copy."""
    from npu_mempool import GraphRunner

    device = ctx.device
    calls, repeats = (200, 3) if ctx.tiny else (3000, 5)
    x = torch.randn(16, device=device)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t * 1.0001

    runner = GraphRunner(fn, name="one kernel")
    variants: dict[str, Callable[[torch.Tensor], Any]] = {"eager": fn, "runner": runner}
    if device.type == "cuda":
        static_x = x.clone()
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn(static_x)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fn(static_x)

        def raw(t: torch.Tensor) -> torch.Tensor:
            static_x.copy_(t, non_blocking=True)
            graph.replay()
            return static_out

        variants["raw replay + input copy"] = raw

    def per_call_us(call: Callable[[torch.Tensor], Any]) -> float:
        for _ in range(50):
            call(x)
        synchronize(device)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                call(x)
            synchronize(device)
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        return round(best, 2)

    with torch.no_grad():
        torch.testing.assert_close(runner(x), fn(x))
        result: dict[str, Any] = {
            "us per call (best of repeats)": {name: per_call_us(v) for name, v in variants.items()}
        }
    # A runner that fell back to eager, or captured again and again, would time something else:
    # its one graph is captured once, after the warm-up need, and every later call replays it.
    runner_calls = 1 + 50 + repeats * calls
    expected = {
        "captures": 1,
        "replays": runner_calls - ctx.warmup - 1,
        "eager_calls": ctx.warmup,
        "fallbacks": 0,
    }
    got = counted(runner) | {"fallbacks": runner.counters.fallbacks}
    result["runner counters"] = got
    assert got == expected, (
        f"the runner did not replay every timed call: {got}, expected {expected}"
    )
    figures = result["us per call (best of repeats)"]
    if "raw replay + input copy" in figures:
        raw_wall = figures["raw replay + input copy"]
        with torch.no_grad():
            raw_device = device_us_per_call(
                variants["raw replay + input copy"], x, device, min(calls, 200)
            )
        result["raw replay device us"] = None if raw_device is None else round(raw_device, 2)
        # Only a host-bound call shows the runner's cost: a device-bound one reads about 1.0.
        result["bound"] = bound(raw_device, raw_wall, device)
        result["runner / raw (target <= 1.2 when host-bound)"] = round(
            figures["runner"] / raw_wall, 2
        )
    else:
        result["bound"] = bound(None, figures["runner"], device)
        result["note"] = "no raw device graph on the CPU emulation: eager and runner only"
    return result


# -- checks in child processes ------------------------------------------------------------------


def child_multi_stream(device: torch.device, tiny: bool) -> dict[str, Any]:
    import npu_compile as tng
    import npu_streams

    size = 64 if tiny else 512

    class Model(torch.nn.Module):
        """Seed 000: tagged events order an add, two matmuls and another add on two streams."""

        def __init__(self) -> None:
            super().__init__()
            self.event1 = tng.ops.npu_create_tagged_event(tag="66")
            self.event2 = tng.ops.npu_create_tagged_event(tag="77")

        def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            a, b, c, d = inputs
            add = a + b
            tng.ops.npu_tagged_event_record(self.event1)
            with tng.scope.npu_stream_switch("1"):
                tng.ops.npu_tagged_event_wait(self.event1)
                mm = c @ d
                tng.ops.npu_tagged_event_record(self.event2)
            with tng.scope.npu_stream_switch("2"):
                tng.ops.npu_tagged_event_wait(self.event2)
                add2 = mm + add
            return add, mm, add2

    model = Model()
    backend = tng.get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False, fullgraph=True)
    for _ in range(4):
        inputs = [torch.randn(size, size, device=device, dtype=torch.float16) for _ in range(4)]
        expected = model(*inputs)
        got = compiled(*inputs)
        for mine, theirs in zip(got, expected, strict=True):
            # float16 sums of 512 products: a few units in the last place apart at most.
            torch.testing.assert_close(mine, theirs, rtol=1e-2, atol=1e-2)
        del got  # a held output would send the next call to a second call path
    runners = backend.stats.runners
    result = {
        "runners": runner_rows(runners),
        "fallbacks": [str(f) for f in backend.stats.fallbacks],
        "stream_tag_after": npu_streams.current_stream_tag(),
    }
    assert not backend.stats.fallbacks, f"fell back: {backend.stats.fallbacks}"
    assert result["stream_tag_after"] == "default", f"a stream scope was left open: {result}"
    assert sum(r.counters.captures for r in runners) >= 1, f"nothing captured: {result}"
    assert all(r.counters.fallbacks == 0 for r in runners), f"a capture failed: {result}"
    return result


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _clean_exit(device: torch.device) -> None:
    """Free every graph now, while the child can still report: an abort here is the finding."""
    gc.collect()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.synchronize(device)


def child_capture_error_python(device: torch.device, tiny: bool) -> dict[str, Any]:
    from npu_mempool import CaptureOptions, GraphRunner

    seen: list[bool] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        # With no warm-up the first call is the capture (on the emulation too).
        seen.append(_capturing(device))
        if len(seen) == 1:
            raise ValueError("a Python error inside the capture body")
        return x * 3

    failing = GraphRunner(fn, options=CaptureOptions(warmup_runs=0), name="raises in capture")
    outs = [failing(torch.ones(2, device=device)).tolist() for _ in range(3)]
    assert outs == [[3.0, 3.0]] * 3, outs
    failed = counted(failing) | {"fallbacks": failing.counters.fallbacks}
    del failing
    _clean_exit(device)
    later = GraphRunner(lambda x: x + 1, options=CaptureOptions(warmup_runs=0), name="later")
    for _ in range(3):
        assert later(torch.ones(2, device=device)).tolist() == [2.0, 2.0]
    after = counted(later)
    del later
    _clean_exit(device)
    assert failed["fallbacks"] == 1, failed
    assert failed["captures"] == 0, failed
    assert (after["captures"], after["replays"]) == (1, 2), after
    return {"raised_while_capturing": seen[0], "failing": failed, "later": after}


def child_capture_stream_wait(device: torch.device, tiny: bool) -> dict[str, Any]:
    import npu_compile
    import npu_streams

    if device.type != "cpu":
        # A tagged stream used outside any capture: a wait inside the capture must not join it.
        with npu_streams.npu_stream_switch("unrelated"):
            torch.ones(1, device=device).add_(1)
        synchronize(device)

    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_streams.npu_stream_switch("w1"):
            y = x * 2
        npu_streams.wait([y])
        return y + 1

    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(fn, backend=backend, dynamic=False, fullgraph=True)
    for _ in range(4):
        x = torch.randn(256, device=device)
        torch.testing.assert_close(compiled(x), x * 2 + 1)
    runners = backend.stats.runners
    result = {
        "runners": runner_rows(runners),
        "fallbacks": [str(f) for f in backend.stats.fallbacks],
    }
    _clean_exit(device)
    assert not backend.stats.fallbacks, f"fell back: {result}"
    assert all(r.counters.fallbacks == 0 for r in runners), f"the capture failed: {result}"
    assert sum(r.counters.captures for r in runners) >= 1, f"nothing captured: {result}"
    return result


def child_capture_host_sync(device: torch.device, tiny: bool) -> dict[str, Any]:
    from npu_mempool import CaptureOptions, GraphRunner

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * float(x.sum().item())  # a host sync: a device capture must fail

    failing = GraphRunner(fn, options=CaptureOptions(warmup_runs=0), name="item in capture")
    for _ in range(3):
        x = torch.ones(4, device=device)
        torch.testing.assert_close(failing(x), x * 4)
    failed = counted(failing) | {"fallbacks": failing.counters.fallbacks}
    del failing
    _clean_exit(device)
    # The failed capture must not leave the random number generator capturing: eager random
    # ops after it, and a later capture that draws random numbers, work.
    drawn = torch.rand(4096, device=device)
    later = GraphRunner(
        lambda x: x + torch.rand_like(x), options=CaptureOptions(warmup_runs=0), name="later"
    )
    draws = []
    for _ in range(3):
        x = torch.ones(4096, device=device)
        draws.append(later(x) - x)
    after = counted(later)
    for sample in (drawn, *draws):
        assert float(sample.min()) >= 0.0, "not uniform in [0, 1)"
        assert float(sample.max()) < 1.0, "not uniform in [0, 1)"
        assert abs(float(sample.mean()) - 0.5) < 0.05, "not uniform in [0, 1)"
    assert not torch.equal(draws[1], draws[2]), "two replays drew the same random numbers"
    default_stream = device.type != "cuda" or (
        torch.cuda.current_stream(device) == torch.cuda.default_stream(device)
    )
    del later
    _clean_exit(device)
    assert default_stream, "the capture stream is still current after the failed capture"
    assert (after["captures"], after["replays"]) == (1, 2), after
    return {"failing": failed, "later": after, "caller_stream_restored": default_stream}


def _held_outcome(held: torch.Tensor, expected: torch.Tensor) -> str:
    """What an output held across a later call reads: eager's values, and nothing else.

    No step boundary lies between the calls (no ``mark_step_begin()``), so nothing may take the
    output back: ``StaleOutputError`` there is a failure, as are other values (a caller that kept
    the output would compute on numbers that are not its own).
    """
    from npu_mempool import StaleOutputError

    try:
        values = held.clone()
    except StaleOutputError as error:
        raise AssertionError(
            "the held output was taken back (StaleOutputError) with no step boundary crossed: "
            f"a caller holding it can no longer read it ({error})"
        ) from None
    difference = (values.float() - expected.float()).abs().max().item()
    assert torch.allclose(values, expected, rtol=1e-4, atol=1e-4), (
        f"the held output changed under the caller (max |diff| {difference:.3g} from eager's): "
        "it must keep eager's values"
    )
    return "kept eager's values"


def child_held_output_new_shape(device: torch.device, tiny: bool) -> dict[str, Any]:
    """An output held across a mode-2 pool rewind and the capture of a new, larger shape."""
    from npu_mempool import CaptureOptions, GraphRunner, InputKind

    width = 64 if tiny else 1024
    torch.manual_seed(0)
    w = torch.randn(width, width, device=device) / width**0.5
    block(torch.randn(8, width, device=device), w)
    synchronize(device)  # the device libraries initialise here, not inside a capture
    runner = GraphRunner(
        block,
        input_kinds=[InputKind.USER, InputKind.PARAMETER],
        options=CaptureOptions(warmup_runs=0),  # mode 2: one pool, rewound for each new shape
        name="held across a rewind",
    )
    for rows in (16, 8):  # both captured; the 8-row capture rewinds the pool
        x = torch.randn(rows, width, device=device)
        close(runner(x, w), block(x, w))
    x16 = torch.randn(16, width, device=device)
    replays = runner.counters.replays
    held = runner(x16, w)  # the 16-row graph replayed; the caller keeps its output
    assert runner.counters.replays == replays + 1, f"not a replay: {counted(runner)}"
    expected = block(x16, w)
    x32 = torch.randn(32, width, device=device)
    close(runner(x32, w), block(x32, w))  # a new shape: a rewind and a capture, `held` alive
    synchronize(device)
    result = {"counters": counted(runner), "paths": runner.num_paths}
    result["held output"] = _held_outcome(held, expected)
    return result


def child_force_recapture_held(device: torch.device, tiny: bool) -> dict[str, Any]:
    """An output held across a forced recapture of its own graph."""
    from npu_mempool import CaptureOptions, GraphRunner

    runner = GraphRunner(
        lambda x: x * 2,
        options=CaptureOptions(warmup_runs=0, force_recapture=True),
        name="force_recapture",
    )
    held = runner(torch.ones(8, device=device))
    later = runner(torch.full((8,), 5.0, device=device))  # the same key, captured anew
    assert later.tolist() == [10.0] * 8, later
    counters = counted(runner) | {"recaptures": runner.counters.recaptures}
    # Captured anew either way: recaptured in place, or on a second call path beside `held`.
    assert counters["captures"] + counters["recaptures"] >= 2, f"no new capture: {counters}"
    synchronize(device)
    outcome = _held_outcome(held, torch.full((8,), 2.0, device=device))
    return {"counters": counters, "paths": runner.num_paths, "held output": outcome}


_OPAQUE: list[Callable[[torch.Tensor], torch.Tensor]] = []


def _opaque() -> Callable[[torch.Tensor], torch.Tensor]:
    """``device_smoke::opaque``, an op named in ``splitting_ops``: it runs between pieces.

    It stands for the ops serving engines run eagerly between captured pieces (attention).
    Defined on first use, once per process: only the child that splits graphs needs it.
    """
    if not _OPAQUE:

        @torch.library.custom_op("device_smoke::opaque", mutates_args=())
        def opaque(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @opaque.register_fake
        def _(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)

        _OPAQUE.append(torch.ops.device_smoke.opaque)
    return _OPAQUE[0]


@contextlib.contextmanager
def _pieces_made() -> Iterator[list[torch.fx.GraphModule]]:
    """The graphs of the pieces the backend captures while inside, in order.

    npu-compile offers no public view of a piece's graph; this watches its private builder, as
    its own tests do (``test_compile_stream_markers.py``).
    """
    from npu_compile import _build

    made: list[torch.fx.GraphModule] = []
    real = getattr(_build, "piecewise")  # noqa: B009 (imported there, not exported)

    def watched(gm: torch.fx.GraphModule, plan: Any, make_runner: Any) -> Any:
        def making(piece: torch.fx.GraphModule, kinds: Any) -> Any:
            made.append(piece)
            return make_runner(piece, kinds)

        return real(gm, plan, making)

    setattr(_build, "piecewise", watched)  # noqa: B010
    try:
        yield made
    finally:
        setattr(_build, "piecewise", real)  # noqa: B010


def child_stream_scope_after_split(device: torch.device, tiny: bool) -> dict[str, Any]:
    """A graph split into pieces around a stream scope: eager's numbers, each piece's waits its own.

    A device refuses a wait on an event another capture recorded, and eagerly a side stream is
    not ordered after the op run between the pieces: every event a piece waits on must be
    recorded in that piece. Three places for the split: before the scope, inside it (a split
    cannot cut a scope in two: the graph may run eagerly, saying so), and before the scope with a
    wait inside it on a marker recorded before the split.
    """
    import npu_compile
    import npu_streams

    opaque = _opaque()
    size = 64 if tiny else 1024

    def before(x: torch.Tensor) -> torch.Tensor:
        o = opaque(x * 2)
        with npu_streams.npu_stream_switch("side"):
            z = o + 1
        return z * 3

    def inside(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        with npu_streams.npu_stream_switch("side"):
            z = opaque(y) + 1
        return z * 3

    def marker_before(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        marker = npu_streams.record()  # `y` is done on the main stream from here
        o = opaque(y)
        with npu_streams.npu_stream_switch("side"):
            npu_streams.wait([marker])
            z = o + 1
        return z * 3

    result: dict[str, Any] = {}
    problems = []
    placements = {
        "split before the scope": before,
        "split inside the scope": inside,
        "split between a marker and its wait": marker_before,
    }
    for name, fn in placements.items():
        torch._dynamo.reset()
        config = npu_compile.CompilerConfig()
        config.aclgraph_config.splitting_ops = ("device_smoke::opaque",)
        backend = npu_compile.get_npu_backend(compiler_config=config)
        compiled = torch.compile(fn, backend=backend, dynamic=False, fullgraph=True)
        try:
            with _pieces_made() as pieces, torch.no_grad():
                for _ in range(4):
                    x = torch.randn(size, device=device)
                    close(compiled(x), fn(x))
        except Exception as error:  # one placement failing must not hide the others
            problems.append(f"{name}: {type(error).__name__}: {error}"[:500])
            result[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
            continue
        stats = backend.stats
        runners = stats.runners
        unmatched = [[str(w) for w in npu_streams.unmatched_waits(piece)] for piece in pieces]
        unordered = [npu_streams.unordered_reads(piece) for piece in pieces]
        reasons = sorted(str(r) for r in stats.fallback_reasons.values())
        entry = {
            "pieces": stats.pieces,
            "splits": {graph: list(splits) for graph, splits in stats.splits.items()},
            "waits without their record, per piece": unmatched,
            "reads across streams no event orders, per piece": unordered,
            "fallback reasons": reasons,
            "runners": runner_rows(runners),
            "stream_tag_after": npu_streams.current_stream_tag(),
        }
        result[name] = entry
        if any(unmatched):
            problems.append(f"{name}: a piece waits on an event it does not record: {unmatched}")
        if any(unordered):
            problems.append(f"{name}: a piece reads across streams unordered: {unordered}")
        if entry["stream_tag_after"] != "default":
            problems.append(f"{name}: a stream scope was left open")
        refused = reasons == [str(npu_compile.FallbackReason.SPLIT_IN_STREAM_SCOPE)]
        if fn is inside and refused and not runners:
            entry["outcome"] = "run eagerly: a split cannot cut a stream scope (logged reason)"
            continue
        if reasons or any(r.counters.fallbacks for r in runners):
            problems.append(f"{name}: fell back: {reasons or entry['runners']}")
        elif (stats.piecewise, stats.pieces) != (1, 2):
            problems.append(
                f"{name}: {stats.pieces} piece(s) in {stats.piecewise} graph(s), not 2 in 1"
            )
        elif not all(r.counters.replays > 0 for r in runners):
            problems.append(f"{name}: a piece never replayed: {entry['runners']}")
        else:
            entry["outcome"] = "captured in 2 pieces, each waiting on its own events only"
    torch._dynamo.reset()
    _clean_exit(device)
    assert not problems, f"{'; '.join(problems)}; {result}"
    return result


def child_force_recapture_memory(device: torch.device, tiny: bool) -> dict[str, Any]:
    """200 forced recaptures while the caller holds each output: the pool stays bounded.

    ``out = r(x)`` keeps the previous output alive while the next call captures anew, so two
    graphs' memory (the held one and the new capture) is what a correct pool needs. The bound:
    after 200 calls the runner's pool holds at most twice its high-water mark over the first
    10 calls; a pool that kept one capture's memory per call would hold about 20 times it.
    """
    import npu_mempool
    from npu_mempool import CaptureOptions, GraphRunner

    width = 64 if tiny else 1024
    calls, early = 200, 10
    runner = GraphRunner(
        lambda x: x * 2 + 1,
        options=CaptureOptions(warmup_runs=0, force_recapture=True),
        name="forced recaptures, outputs held",
    )
    x = torch.randn(width, width, device=device)
    expected = x * 2 + 1  # the kernels load here, not inside the first capture
    synchronize(device)
    early_peak = 0
    mib_after: dict[int, float] = {}
    out = None
    for call in range(1, calls + 1):
        out = runner(x)  # the previous `out` is held while this call captures anew
        if call <= early:
            early_peak = max(early_peak, runner.counters.pool_bytes)
        if call in (1, 2, early) or call % 50 == 0:
            mib_after[call] = mib(runner.counters.pool_bytes)
    assert out is not None
    close(out, expected)
    synchronize(device)
    final = runner.counters.pool_bytes
    result = {
        "calls": calls,
        "tensor MiB": mib(x.numel() * x.element_size()),
        "pool MiB after call": mib_after,
        "bound MiB (2x the high-water mark of the first 10 calls)": mib(2 * early_peak),
        "all pools of the process MiB": mib(npu_mempool.counters.pool_bytes),
        "counters": counted(runner) | {"recaptures": runner.counters.recaptures},
        "paths": runner.num_paths,
    }
    del out
    assert runner.counters.recaptures >= calls - 1, f"not recaptured on every call: {result}"
    assert 0 < final <= 2 * early_peak, f"the pool grew past its bound: {result}"
    return result


def _compiled_matches(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    reference: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    size: int,
    device: torch.device,
) -> Any:
    """Check ``fn(x, w)`` compiled whole with the backend against ``reference``; the backend.

    Four calls (warm-up, capture, replays), each with a new ``x``; the backend has the stats.
    """
    import npu_compile

    torch.manual_seed(0)
    w = torch.randn(size, size, device=device) / size**0.5
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(fn, backend=backend, dynamic=False, fullgraph=True)
    for _ in range(4):
        x = torch.randn(size, size, device=device)
        close(compiled(x, w), reference(x, w))
    return backend


def child_streams_record_wait(device: torch.device, tiny: bool) -> dict[str, Any]:
    """``npu_streams.record()``/``wait()`` under the backend: eager's numbers, one whole graph."""
    import npu_streams

    size = 64 if tiny else 1024

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x @ w
        ready = npu_streams.record()  # `h` is done on the main stream from here
        with npu_streams.npu_stream_switch("record-wait"):
            npu_streams.wait([ready])
            side = torch.relu(h) * 2
            done = npu_streams.record()
        main = h + 1  # on the main stream, beside the side stream's work
        npu_streams.wait([side, done])  # joined before `side` is read here
        return main + side

    def eager(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x @ w
        return (h + 1) + torch.relu(h) * 2

    # fullgraph: a graph break at record() or wait() fails here instead of splitting the graph.
    stats = _compiled_matches(fn, eager, size, device).stats
    runners = stats.runners
    result = {
        "fx_graphs": stats.fx_graphs,
        "captured": stats.captured,
        "piecewise": stats.piecewise,
        "splits": {name: list(splits) for name, splits in stats.splits.items()},
        "runners": runner_rows(runners),
        "fallbacks": [str(f) for f in stats.fallbacks],
        "stream_tag_after": npu_streams.current_stream_tag(),
    }
    _clean_exit(device)
    assert not stats.fallbacks, f"fell back: {result}"
    whole = (stats.fx_graphs, stats.captured, stats.piecewise, len(runners)) == (1, 1, 0, 1)
    assert whole, f"not one graph captured whole: {result}"
    assert runners[0].counters.fallbacks == 0, f"the capture failed: {result}"
    assert runners[0].counters.captures == 1, f"not captured once: {result}"
    assert runners[0].counters.replays >= 1, f"never replayed: {result}"
    assert result["stream_tag_after"] == "default", f"a stream scope was left open: {result}"
    return result


def child_streams_read_without_wait(device: torch.device, tiny: bool) -> dict[str, Any]:
    """Values read across streams with no event of the user's: the backend orders them.

    The side stream runs a chain of matmuls on a value the main stream made before the scope,
    and the main stream reads its result right after the scope; nothing in the program orders
    either read. A replay that ran them side by side would read memory not yet written.
    """
    import npu_streams

    size, depth = (64, 2) if tiny else (1024, 8)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        with npu_streams.npu_stream_switch("unordered"):
            z = y
            for _ in range(depth):
                z = torch.relu(z @ w)
        return z * 3 + 1

    def arithmetic(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        z = x @ w
        for _ in range(depth):
            z = torch.relu(z @ w)
        return z * 3 + 1

    backend = _compiled_matches(fn, arithmetic, size, device)
    runners = backend.stats.runners
    result = {
        "runners": runner_rows(runners),
        "fallbacks": [str(f) for f in backend.stats.fallbacks],
        "stream_tag_after": npu_streams.current_stream_tag(),
    }
    _clean_exit(device)
    assert not backend.stats.fallbacks, f"fell back: {result}"
    assert len(runners) == 1, f"not one graph: {result}"
    assert runners[0].counters.replays >= 1, f"never replayed: {result}"
    return result


CHILDREN: dict[str, Callable[[torch.device, bool], dict[str, Any]]] = {
    "multi_stream": child_multi_stream,
    "capture_error_python": child_capture_error_python,
    "capture_stream_wait": child_capture_stream_wait,
    "capture_host_sync": child_capture_host_sync,
    "held_output_new_shape": child_held_output_new_shape,
    "force_recapture_held": child_force_recapture_held,
    "streams_record_wait": child_streams_record_wait,
    "streams_read_without_wait": child_streams_read_without_wait,
    "stream_scope_after_split": child_stream_scope_after_split,
    "force_recapture_memory": child_force_recapture_memory,
}

#: The child processes and the checks each runs, in order. A process start (``import torch``, the
#: device's context) costs more than most checks, so related checks share one: the held outputs
#: and forced recaptures (npu-mempool alone), and the stream waits and scopes under the backend.
CHILD_PROCESSES: tuple[tuple[str, ...], ...] = (
    ("multi_stream",),
    ("capture_error_python",),
    (
        "capture_stream_wait",
        "streams_record_wait",
        "streams_read_without_wait",
        "stream_scope_after_split",
    ),
    ("capture_host_sync",),
    ("held_output_new_shape", "force_recapture_held", "force_recapture_memory"),
)

IN_PROCESS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "environment": check_environment,
    "raw_graph": check_raw_graph,
    "replay_equals_eager": check_replay_equals_eager,
    "mutated_kv_cache": check_mutated_kv_cache,
    "pool_bytes": check_pool_bytes,
    "held_outputs_and_steps": check_held_outputs_and_steps,
    "decode_loop": check_decode_loop,
    "host_sync_pieces": check_host_sync_pieces,
    "dropout_masks": check_dropout_masks,
    "train_step": check_train_step,
    "runner_autocast": check_runner_autocast,
}

#: After the children: the timings, so that no child competes with them.
TIMINGS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "capture_time": check_capture_time,
    "replay_overhead": check_replay_overhead,
}


# -- running and recording ----------------------------------------------------------------------


def _failure(error: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "error": f"{type(error).__name__}: {error}"[:1500],
        "traceback": traceback.format_exc()[-3000:],
    }


class Recorder:
    """smoke.json, rewritten whole (atomically) after every check."""

    def __init__(self, out: Path, ctx: Context) -> None:
        self.path = out / "smoke.json"
        self.ctx = ctx
        self.started = time.perf_counter()
        self.document: dict[str, Any] = {
            "device": str(ctx.device),
            "tiny": ctx.tiny,
            "finished": False,
            "running": None,
            "checks": {},
        }

    def running(self, name: str | None) -> None:
        self.document["running"] = name
        self.write()

    def record(self, name: str, entry: dict[str, Any]) -> None:
        self.document["checks"][name] = entry
        self.document["running"] = None
        state = "ok" if entry["ok"] else "FAILED"
        shown = entry.get("result") if entry["ok"] else entry.get("error")
        print(f"== {name}: {state} ({entry['seconds']} s) {json.dumps(shown, default=str)[:600]}")
        self.write()

    def finish(self) -> bool:
        checks = self.document["checks"]
        self.document["finished"] = True
        self.document["seconds"] = round(time.perf_counter() - self.started, 1)
        self.document["failed"] = sorted(n for n, e in checks.items() if not e["ok"])
        self.write()
        return not self.document["failed"]

    def write(self) -> None:
        write_json(self.path, json.loads(json.dumps(self.document, default=str)))


def run_in_process(
    recorder: Recorder, name: str, check: Callable[[Context], dict[str, Any]]
) -> None:
    recorder.running(name)
    start = time.perf_counter()
    try:
        entry: dict[str, Any] = {"ok": True, "result": check(recorder.ctx)}
    except Exception as error:  # every check reports; none stops the rest
        entry = _failure(error)
    entry["seconds"] = round(time.perf_counter() - start, 2)
    recorder.record(name, entry)


@dataclass
class Child:
    names: tuple[str, ...]
    process: subprocess.Popen[str]
    started: float


def start_children(ctx: Context) -> list[Child]:
    children = []
    for names in CHILD_PROCESSES:
        command = [sys.executable, os.path.abspath(__file__), "--child", ",".join(names)]
        command += ["--tiny"] if ctx.tiny else []
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        children.append(Child(names, process, time.perf_counter()))
    return children


def collect_child(recorder: Recorder, child: Child, deadline: float) -> None:
    """Wait for ``child`` until ``deadline``; record what each check reported, or how it ended.

    The process's end belongs to every check it ran: an abort on the way out (a graph freed at
    exit) may come from any of them.
    """
    recorder.running(", ".join(child.names))
    timed_out = False
    try:
        stdout, stderr = child.process.communicate(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        child.process.kill()
        stdout, stderr = child.process.communicate()
        timed_out = True
    seconds = round(time.perf_counter() - child.started, 2)
    code = child.process.returncode
    reported: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if line.startswith(RESULT):
            name, _, entry_json = line[len(RESULT) :].partition(" ")
            reported[name] = json.loads(entry_json)
    for name in child.names:
        entry: dict[str, Any] = reported.get(name, {"ok": False})
        # Its own time where it reported one (the first check's includes the process start).
        entry.setdefault("seconds", seconds)
        entry["process_seconds"] = seconds  # from its start until collected here
        entry["returncode"] = code
        if timed_out:
            entry["ok"] = False
            entry["error"] = f"hung: killed after {seconds} s" + (
                f"; {entry['error']}" if "error" in entry else ""
            )
        elif code != 0:
            # Its checks may have passed, and then the process died on the way out (a graph
            # freed at exit, a C++ assertion): the process's end is part of what is checked.
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            entry["ok"] = False
            entry["error"] = (
                f"the process ended with {how}"
                + (" after reporting" if name in reported else " before reporting")
                + (f"; {entry['error']}" if "error" in entry else "")
            )
        elif name not in reported:
            entry["error"] = "the process exited without reporting this check"
        if not entry["ok"]:
            entry["stderr_tail"] = stderr[-3000:]
        recorder.record(name, entry)


def child_main(names: Sequence[str], tiny: bool) -> int:
    """Child checks in turn: each entry on one line as it ends, then exit (an abort shows)."""
    device = pick_device()
    started = time.perf_counter()
    for name in names:
        try:
            entry: dict[str, Any] = {"ok": True, "result": CHILDREN[name](device, tiny)}
        except Exception as error:
            entry = _failure(error)
        # Its own time, the imports it needs included (torch was imported before the first).
        entry["seconds"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        print(f"{RESULT}{name} {json.dumps(entry, default=str)}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for smoke.json")
    parser.add_argument("--tiny", action="store_true", help="small sizes (the CPU dry run)")
    parser.add_argument(
        "--child-timeout", type=float, default=90.0, help="seconds each child check may take"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # checks, comma-separated
    args = parser.parse_args()
    if args.child:
        names = args.child.split(",")
        unknown = [name for name in names if name not in CHILDREN]
        if unknown:
            parser.error(f"unknown child check(s) {', '.join(unknown)}; known: {sorted(CHILDREN)}")
        return child_main(names, args.tiny)
    if args.out is None:
        parser.error("--out DIR is required")
    ctx = Context(device=pick_device(), tiny=args.tiny)
    print(f"device smoke check on {ctx.device}, torch {torch.__version__}")
    recorder = Recorder(args.out, ctx)
    children = start_children(ctx)  # they run beside the checks below
    children_deadline = time.perf_counter() + args.child_timeout
    for name, check in IN_PROCESS.items():
        run_in_process(recorder, name, check)
    for child in children:
        collect_child(recorder, child, children_deadline)
    for name, check in TIMINGS.items():
        run_in_process(recorder, name, check)
    ok = recorder.finish()
    failed = recorder.document["failed"]
    print(
        f"smoke: {len(recorder.document['checks'])} checks, failed: {', '.join(failed) or 'none'}"
    )
    print(f"wrote {recorder.path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
