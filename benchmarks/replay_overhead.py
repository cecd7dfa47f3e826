"""Per-call cost of a chain of tiny kernels: eager, raw graph replay, npu-mempool's GraphRunner.

The chain is ``--kernels`` elementwise ops on a tiny tensor, the host-bound case graphs exist for.
"raw replay" is the least a graph call can do: copy the new input into the static input, replay.
"runner" is ``GraphRunner.__call__`` doing the same work plus its key lookup and bookkeeping; the
target is runner <= 1.2 x raw replay on a device. A second table times a one-kernel graph, where
the runner's own Python overhead is most visible. "held previous" times the one-kernel graph in
an ``out = f(x)`` loop with one step per call (``keep_held_outputs=False``, one top-level call
each): every call first takes back the previous call's output, still held. "py calls" counts
the Python frames one replay through ``runner.as_function()`` opens, from that function's frame
to its return, the call of the graph's ``replay`` included but not the frames inside it (the CPU
emulation's re-run of the ops, which a device replay does not have); C calls are not counted.

Each row also has the device time per call of the raw replay and of the runner (timing events,
with the device kept busy while the calls are queued, so the host's gaps do not count) and, from
the raw replay's device time against its wall time, a ``bound``: ``host-bound`` when the device
is busy at most half the wall time (the device waits for the host, so what the runner adds on
the host shows), else ``device-bound`` (the device's work hides the host's: the ratio reads about
1.0 whatever the runner costs). The 1.2x target is judged on the host-bound rows only
(``target`` in the JSON).

On a CPU-only machine the graph is npu-mempool's emulated graph (replay re-runs the ops and copies
into the static output), so the numbers measure the runner's overhead, not a device graph; there
is no device time, every row's bound is ``n/a on cpu`` and the target is not judged.

    python benchmarks/replay_overhead.py [--kernels 200] [--calls 2000] [--repeats 7]

Prints a table and writes ``benchmarks/results/replay_overhead.json``. Needs torch and npu-mempool.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import npu_mempool
import torch
from _common import (
    HOST_BOUND_SHARE,
    RESULTS_DIR,
    bound,
    device_us_per_call,
    pick_device,
    write_json,
)

#: The target: a call through the runner at most this many times a raw replay plus input copy.
TARGET = 1.2
#: Calls between the timing events of a device-time measurement: few enough for the host to
#: queue them while the device is still busy with the work queued before them.
DEVICE_TIMED_CALLS = 200
#: The variants whose device time is measured.
RAW_AND_RUNNER = ("raw_replay", "runner")


def make_chain(kernels: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(kernels):
            x = x * 1.0001
        return x

    return chain


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu":
        torch.accelerator.synchronize()


def raw_replay(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, device: torch.device
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The bare minimum per call: input copy + replay, with no wrapper around it."""
    static_x = x.clone()
    if device.type == "cuda":
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(static_x)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fn(static_x)

        def call(new: torch.Tensor) -> torch.Tensor:
            static_x.copy_(new, non_blocking=True)
            graph.replay()
            return static_out

        return call
    if device.type == "cpu":
        static_out = fn(static_x).clone()

        def emulated(new: torch.Tensor) -> torch.Tensor:
            # What an emulated replay does: re-run the ops, write into the static output.
            static_x.copy_(new)
            static_out.copy_(fn(static_x))
            return static_out

        return emulated
    raise SystemExit(f"raw replay for {device.type} is not written; run on cuda or cpu")


def time_calls(
    call: Callable[[torch.Tensor], Any], x: torch.Tensor, device: torch.device, calls: int
) -> float:
    """Microseconds per call, queue drained at the end (so device time counts too)."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        call(x)
    synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def check_replayed(runner: npu_mempool.GraphRunner, before: dict[str, Any], calls: int) -> None:
    """Every one of the ``calls`` timed calls was a replay of the graph captured before them.

    A runner that fell back to eager, or captured anew, would time something else than a replay.
    """
    after = runner.counters.snapshot()
    moved = {name: after[name] - before[name] for name in ("captures", "replays", "fallbacks")}
    moved["eager_calls"] = after["eager_calls"] - before["eager_calls"]
    expected = {"captures": 0, "replays": calls, "fallbacks": 0, "eager_calls": 0}
    if moved != expected:
        raise SystemExit(
            f"{runner.name}: the timed calls were not all replays: the counters moved by {moved}, "
            f"expected {expected}; its times are no replay's"
        )


def python_calls_per_replay(function: Callable[[torch.Tensor], Any], x: torch.Tensor) -> int:
    """Python frames one call of ``function`` (a replay) opens outside the graph's own replay."""
    devices = str(Path(npu_mempool.__file__).parent / "_devices")
    counted = 0
    inside = 0  # frames open inside the graph's replay

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal counted, inside
        if event == "call":
            if inside:
                inside += 1
                return
            counted += 1
            code = frame.f_code
            if code.co_name == "replay" and code.co_filename.startswith(devices):
                inside = 1  # a graph's replay: what runs inside it is the device's work
        elif event == "return" and inside:
            inside -= 1

    gc.disable()
    sys.setprofile(profile)
    try:
        function(x)
    finally:
        sys.setprofile(None)
        gc.enable()
    return counted


def measure(kernels: int, calls: int, repeats: int, device: torch.device) -> dict[str, Any]:
    fn = make_chain(kernels)
    x = torch.randn(16, device=device)
    runner = npu_mempool.GraphRunner(fn, name=f"chain{kernels}")
    raw = raw_replay(fn, x, device)
    with torch.no_grad():
        torch.testing.assert_close(runner(x), fn(x))
        torch.testing.assert_close(raw(x), fn(x))
        for _ in range(3):  # past the device's warm-up calls (1 on CUDA) and the capture
            runner(x)
        variants: dict[str, Callable[[torch.Tensor], Any]] = {
            "eager": fn,
            "raw_replay": raw,
            "runner": runner,
        }
        samples: dict[str, list[float]] = {name: [] for name in variants}
        before = runner.counters.snapshot()
        for _ in range(repeats):  # interleaved so drift hits every variant alike
            for name, call in variants.items():
                samples[name].append(time_calls(call, x, device, calls))
        check_replayed(runner, before, repeats * calls)
        device_us = device_times(variants, x, device, calls)
        function = runner.as_function()
        replays = runner.counters.replays
        calls_per_replay = python_calls_per_replay(function, x)
        assert runner.counters.replays == replays + 1, "the counted call was not a replay"
    return summarize(samples, calls_per_replay, device_us, device)


def measure_held(calls: int, repeats: int, device: torch.device) -> dict[str, Any]:
    """``for x in data: out = f(x)`` with one step per call: the previous output is still held.

    Each call is one top-level call (as Dynamo enters ``top_level_call`` around a compiled
    function), so the runner takes back the previous call's output (poisons it) and replays the
    same graph. "raw replay" and "eager" keep the previous output alive the same way.
    """
    fn = make_chain(1)
    x = torch.randn(16, device=device)
    options = npu_mempool.CaptureOptions(keep_held_outputs=False)
    runner = npu_mempool.GraphRunner(fn, name="held", options=options)
    function = runner.as_function()
    raw = raw_replay(fn, x, device)
    top_level_call = npu_mempool.top_level_call

    def held_loop(call: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
        out = None

        def step(new: torch.Tensor) -> None:
            nonlocal out
            with top_level_call():
                out = call(new)

        return step

    with torch.no_grad():
        variants = {name: held_loop(call) for name, call in (("eager", fn), ("raw_replay", raw))}
        variants["runner"] = held_loop(function)
        for step in variants.values():
            for _ in range(3):  # captures, replays, takes back
                step(x)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        before = runner.counters.snapshot()
        for _ in range(repeats):
            for name, step in variants.items():
                samples[name].append(time_calls(step, x, device, calls))
        check_replayed(runner, before, repeats * calls)
        device_us = device_times(variants, x, device, calls)
        previous = function(x)  # held while the counted call runs
        replays = runner.counters.replays
        with top_level_call():
            calls_per_replay = python_calls_per_replay(function, x)
        assert runner.counters.replays == replays + 1, "the counted call was not a replay"
        assert runner.num_paths == 1, "the previous output was not taken back"
        assert type(previous).__name__ == "StaleTensor", "the previous output was not taken back"
    return summarize(samples, calls_per_replay, device_us, device)


def device_times(
    variants: Mapping[str, Callable[[torch.Tensor], Any]],
    x: torch.Tensor,
    device: torch.device,
    calls: int,
) -> dict[str, float | None]:
    """Device µs per call of the raw replay and of the runner (``None`` on the CPU)."""
    timed = min(calls, DEVICE_TIMED_CALLS)
    return {name: device_us_per_call(variants[name], x, device, timed) for name in RAW_AND_RUNNER}


def summarize(
    samples: dict[str, list[float]],
    calls_per_replay: int,
    device_us: dict[str, float | None],
    device: torch.device,
) -> dict[str, Any]:
    # The minimum is the least noisy estimate of a fixed per-call cost on a shared machine.
    result: dict[str, Any] = {name: min(values) for name, values in samples.items()}
    result.update({f"{name}_median": statistics.median(v) for name, v in samples.items()})
    result["runner_over_raw"] = result["runner"] / result["raw_replay"]
    result["runner_overhead_us"] = result["runner"] - result["raw_replay"]
    result["python_calls_per_replay"] = calls_per_replay
    for name in RAW_AND_RUNNER:
        result[f"{name}_device_us"] = device_us[name]
    raw_device = device_us["raw_replay"]
    # The device's share of a raw replay's wall time: what decides whether the row can show
    # the runner's host cost at all.
    result["device_share"] = None if raw_device is None else raw_device / result["raw_replay"]
    result["bound"] = bound(raw_device, result["raw_replay"], device)
    return result


def judge(rows: dict[str, dict[str, Any]], device: torch.device) -> dict[str, Any]:
    """The 1.2x target, judged on the host-bound rows only."""
    host_bound = [name for name, row in rows.items() if row["bound"] == "host-bound"]
    over = [name for name in host_bound if rows[name]["runner_over_raw"] > TARGET]
    target: dict[str, Any] = {
        "what": f"runner <= {TARGET} x raw replay (input copy + graph replay), wall time per "
        "call, on host-bound rows only",
        "max_runner_over_raw": TARGET,
        "host_bound_share": HOST_BOUND_SHARE,
        "judged_on": host_bound,
        "not_judged": {name: row["bound"] for name, row in rows.items() if name not in host_bound},
        "over_target": over,
        "met": None,
    }
    if device.type == "cpu":
        target["note"] = "not judged on cpu: the emulated graph has no device time"
    elif not host_bound:
        target["note"] = "not judged: no row is host-bound, so none can show the runner's cost"
    else:
        target["met"] = not over
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=200)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    args = parser.parse_args()
    device = pick_device()
    graph = npu_mempool.graph_implementation(device)
    rows = {
        f"chain of {args.kernels}": measure(args.kernels, args.calls, args.repeats, device),
        "one kernel": measure(1, args.calls * 5, args.repeats, device),
        "held previous": measure_held(args.calls * 5, args.repeats, device),
    }
    print(f"device: {device}  graph: {graph}  torch {torch.__version__}")
    header = (
        f"{'workload':<16}{'eager':>11}{'raw replay':>12}{'runner':>11}{'overhead':>11}{'ratio':>8}"
        f"{'py calls':>10}{'raw device':>12}  bound"
    )
    print(header)
    print("-" * len(header))
    for name, r in rows.items():
        device_us = r["raw_replay_device_us"]
        on_device = f"{device_us:>10.2f}us" if device_us is not None else f"{'-':>12}"
        print(
            f"{name:<16}{r['eager']:>9.2f}us{r['raw_replay']:>10.2f}us{r['runner']:>9.2f}us"
            f"{r['runner_overhead_us']:>9.2f}us{r['runner_over_raw']:>7.2f}x"
            f"{r['python_calls_per_replay']:>10.0f}{on_device}  {r['bound']}"
        )
    target = judge(rows, device)
    verdict = {True: "met", False: "NOT met", None: "not judged"}[target["met"]]
    print(
        f"target runner <= {TARGET}x raw on host-bound rows ({', '.join(target['judged_on'])}): "
        f"{verdict}" + (f"; {target['note']}" if "note" in target else "")
    )
    path = write_json(
        args.out / "replay_overhead.json",
        {
            "device": str(device),
            "graph_implementation": graph,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "calls": args.calls,
            "repeats": args.repeats,
            "unit": "us per call (min of repeats; *_median: median)",
            "python_calls_per_replay": "Python frames of one replay through as_function(), "
            "the graph's replay call included, the frames inside it not",
            "device_us": "*_device_us: device time per call (timing events, the device kept "
            "busy while the calls were queued); device_share: raw replay's device time over its "
            "wall time; bound: host-bound when that share is at most "
            f"{HOST_BOUND_SHARE}, n/a on cpu",
            "rows": rows,
            "target": target,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
