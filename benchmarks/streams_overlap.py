"""Two independent branches in one captured device graph: one stream vs ``npu_stream_switch``.

Each branch is a chain of small matmuls that occupies only part of the device, so a graph
captured on one stream leaves it partly idle, while the same graph with the second branch in an
``npu_stream_switch`` scope (fork/join inserted by ``npu_streams.prepare_for_capture``) runs the
branches side by side. Prints a table and writes ``benchmarks/results/streams_overlap.json``.

    python benchmarks/streams_overlap.py [--rows 64] [--width 1024] [--depth 48]

Self-contained: needs torch and npu-streams only. On a machine without an accelerator it says
"no accelerator" and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import npu_streams
import torch
from _common import RESULTS_DIR, write_json


def _chain(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    for w in weights:
        x = torch.relu(x @ w)
    return x


@dataclass
class Row:
    variant: str
    ms: list[float]

    @property
    def ms_median(self) -> float:
        return statistics.median(self.ms)


def one_stream(
    xa: torch.Tensor, xb: torch.Tensor, wa: list[torch.Tensor], wb: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    yb = _chain(xb, wb)
    ya = _chain(xa, wa)
    return ya, yb


def two_streams(
    xa: torch.Tensor, xb: torch.Tensor, wa: list[torch.Tensor], wb: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    with npu_streams.npu_stream_switch("overlap-b"):
        yb = _chain(xb, wb)
    ya = _chain(xa, wa)
    return ya, yb


def _prepared(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled by Dynamo into one FX graph, run through the capture pass."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        return npu_streams.prepare_for_capture(gm).forward

    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)


def _capture(fn: Callable[..., Any], args: tuple[Any, ...], device: torch.device) -> Any:
    """Warm ``fn`` up on a side stream, capture it; returns (graph, outputs) or None."""
    if device.type == "cuda":
        graph = torch.cuda.CUDAGraph()
        warmup = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        warmup.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(warmup):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream(device).wait_stream(warmup)
        with torch.cuda.graph(graph):
            outputs = fn(*args)
        return graph, outputs
    if hasattr(torch.accelerator, "Graph"):
        accelerator_graph = torch.accelerator.Graph()
        stream = torch.Stream(device, priority=0)
        with stream:
            for _ in range(3):
                fn(*args)
        with stream, accelerator_graph:
            outputs = fn(*args)
        return accelerator_graph, outputs
    return None


def _time_replays(graph: Any, device: torch.device, replays: int, repeats: int) -> list[float]:
    """Milliseconds per replay, one figure per repeat (device events around ``replays`` runs)."""
    figures = []
    for _ in range(repeats):
        start = torch.Event(device, enable_timing=True)
        end = torch.Event(device, enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        figures.append(start.elapsed_time(end) / replays)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="rows of each branch's activations")
    parser.add_argument("--width", type=int, default=1024, help="matmul width (K = N)")
    parser.add_argument("--depth", type=int, default=48, help="matmuls per branch")
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument("--replays", type=int, default=200, help="replays per timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings per variant")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    args = parser.parse_args(argv)

    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is None:
        print("streams_overlap: no accelerator (CUDA or NPU) available; nothing to measure.")
        return 0
    device = torch.device(accelerator.type, torch.accelerator.current_device_index())
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    scale: float = args.width**-0.5

    def tensor(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype).mul_(scale)

    inputs = (
        torch.randn(args.rows, args.width, device=device, dtype=dtype),
        torch.randn(args.rows, args.width, device=device, dtype=dtype),
        [tensor(args.width, args.width) for _ in range(args.depth)],
        [tensor(args.width, args.width) for _ in range(args.depth)],
    )

    rows: list[Row] = []
    outputs = {}
    with torch.no_grad():
        for name, fn in (("one stream", one_stream), ("npu_stream_switch", two_streams)):
            captured = _capture(_prepared(fn), inputs, device)
            if captured is None:
                print(f"streams_overlap: no graph API for {device.type}, torch {torch.__version__}")
                return 0
            graph, outputs[name] = captured
            graph.replay()
            torch.accelerator.synchronize()
            figures = _time_replays(graph, device, args.replays, args.repeats)
            rows.append(Row(name, figures))

    same = all(
        torch.equal(a, b)
        for a, b in zip(outputs["one stream"], outputs["npu_stream_switch"], strict=True)
    )
    speedup = rows[0].ms_median / rows[1].ms_median
    print(
        f"streams_overlap on {torch.accelerator.current_accelerator()} "
        f"({device}), torch {torch.__version__}: 2 branches x {args.depth} matmuls "
        f"[{args.rows}x{args.width}] @ [{args.width}x{args.width}] {args.dtype}, "
        f"{args.replays} replays x {args.repeats}"
    )
    print(f"{'variant':<20} {'ms / replay (median)':>22} {'min':>9} {'max':>9}")
    for row in rows:
        print(f"{row.variant:<20} {row.ms_median:>22.4f} {min(row.ms):>9.4f} {max(row.ms):>9.4f}")
    print(f"speedup (one stream / npu_stream_switch): {speedup:.2f}x; outputs equal: {same}")
    path = write_json(
        args.out / "streams_overlap.json",
        {
            "benchmark": "streams_overlap",
            "device": str(device),
            "device_name": _device_name(device),
            "torch": torch.__version__,
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "results": [{**asdict(row), "ms_median": row.ms_median} for row in rows],
            "speedup": speedup,
            "outputs_equal": same,
        },
    )
    print(f"wrote {path}")
    return 0 if same else 1


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


if __name__ == "__main__":
    sys.exit(main())
