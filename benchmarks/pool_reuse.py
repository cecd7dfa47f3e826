"""Graph pool memory per npu-mempool mode: the same four shapes captured under each policy.

Each mode captures ``block(x, w) = relu(x @ w) + x`` for four batch sizes and reports the bytes
held by its graph pool(s):

* ``mode2 reuse`` (default): one pool per runner, rewound before each capture: about the largest.
* ``mode2 off``: no rewind: about the sum of the four.
* ``mode1 shared pool``: two runners (two FX graphs) capture into one ``graph_pool_handle()``.
* ``mode3 off``: no input buffers in the pool (``clone_input=False``).
* ``largest alone`` / ``sum of singles``: references.
* ``out = f(x) loop``: the commonest loop, one shape, the previous ``out`` still referenced
  during the next call. ``one step per call`` is the default of ``torch.compile`` with the
  npu_compile backend: measured through ``torch.compile`` itself, and through a ``GraphRunner``
  with ``keep_held_outputs=False`` and ``npu_mempool.top_level_call()`` around each call (what the
  backend does). ``mark_step_begin()`` marks an explicit boundary before each call. With
  ``keep_held_outputs`` (a ``GraphRunner``'s default, ``debug.aclgraph.keep_held_outputs`` in
  npu-compile) and no boundary, the held output forces a second call path and pool. The others
  should need exactly one graph's memory (``x largest`` = 1.00).

On a CPU-only machine the pool is npu-mempool's emulated arena: its bytes are the static inputs
and outputs (the arena high-water mark), not the intermediates a device pool also holds.

    python benchmarks/pool_reuse.py [--width 1024] [--rows 4096,3072,2048,1024]

Prints a table and writes ``benchmarks/results/pool_reuse.json``. Needs torch and npu-mempool
(and npu-compile for the ``torch.compile`` row).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import platform
from pathlib import Path

import npu_mempool
import torch
from _common import RESULTS_DIR, pick_device, write_json
from npu_mempool import CaptureOptions, GraphRunner, InputKind

KINDS = [InputKind.USER, InputKind.PARAMETER]


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) + x


def run_shapes(runner: GraphRunner, rows: list[int], w: torch.Tensor) -> None:
    for n in rows:
        x = torch.randn(n, w.shape[0], device=w.device)
        torch.testing.assert_close(runner(x, w), block(x, w), rtol=1e-3, atol=1e-3)


def measure(rows: list[int], width: int, device: torch.device) -> dict[str, int]:
    w = torch.randn(width, width, device=device) / width**0.5
    # One eager call first: with no warm-up call, cuBLAS would create its handle inside the
    # first capture, which CUDA refuses (CUBLAS_STATUS_NOT_INITIALIZED; the key then runs
    # eagerly and measures nothing).
    block(torch.randn(rows[0], width, device=device), w)
    out: dict[str, int] = {}

    # Every shape is captured on its first call (no warm-up call, which on CUDA would leave a
    # shape called once uncaptured): the pools, not the warm-up policy, are measured here.
    def one(options: CaptureOptions, shapes: list[int]) -> int:
        runner = GraphRunner(block, input_kinds=KINDS, options=options)
        run_shapes(runner, shapes, w)
        return runner.counters.pool_bytes

    out["largest alone"] = one(CaptureOptions(warmup_runs=0), rows[:1])
    out["sum of singles"] = sum(one(CaptureOptions(warmup_runs=0), [n]) for n in rows)
    out["mode2 reuse"] = one(CaptureOptions(warmup_runs=0), rows)
    out["mode2 off"] = one(CaptureOptions(reuse_pool_across_shapes=False, warmup_runs=0), rows)
    out["mode3 off (reuse on)"] = one(CaptureOptions(clone_input=False, warmup_runs=0), rows)
    pool = npu_mempool.graph_pool_handle(device)
    first = GraphRunner(block, input_kinds=KINDS, options=CaptureOptions(pool=pool, warmup_runs=0))
    second = GraphRunner(block, input_kinds=KINDS, options=CaptureOptions(pool=pool, warmup_runs=0))
    run_shapes(first, rows[:1], w)
    first.reset()  # the first FX graph is done: its memory is free for the second
    run_shapes(second, rows[:1], w)
    out["mode1 shared pool, 2 runners in turn"] = pool.nbytes
    if importlib.util.find_spec("npu_compile") is not None:
        out["out = f(x) loop, one step per call (torch.compile)"] = compiled_loop(rows[0], w)
    out["out = f(x) loop, one step per call (GraphRunner)"] = loop(rows[0], w, "per call")
    out["out = f(x) loop, mark_step_begin()"] = loop(rows[0], w, "marked")
    out["out = f(x) loop, keep_held_outputs"] = loop(rows[0], w, "kept")
    return out


def loop(n: int, w: torch.Tensor, steps: str) -> int:
    # "kept": the runner's default, no boundary; "marked": an explicit boundary per call; "per
    # call": each call is a top-level call of its own, as the npu_compile backend declares it.
    options = CaptureOptions(warmup_runs=0, keep_held_outputs=steps != "per call")
    runner = GraphRunner(block, input_kinds=KINDS, options=options)
    out = None
    for _ in range(4):
        if steps == "marked":
            npu_mempool.mark_step_begin()
        x = torch.randn(n, w.shape[0], device=w.device)
        scope = npu_mempool.top_level_call() if steps == "per call" else contextlib.nullcontext()
        with scope:
            out = runner(x, w)  # the previous `out` is still referenced during this call
        torch.testing.assert_close(out, block(x, w), rtol=1e-3, atol=1e-3)
    return runner.counters.pool_bytes


class Block(torch.nn.Module):
    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return block(x, self.w)


def compiled_loop(n: int, w: torch.Tensor) -> int:
    import npu_compile

    config = npu_compile.CompilerConfig()
    config.mode = "reduce-overhead"
    backend = npu_compile.get_npu_backend(compiler_config=config)
    model = Block(w)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    out = None
    for _ in range(4):
        x = torch.randn(n, w.shape[0], device=w.device)
        out = compiled(x)  # the previous `out` is still referenced during this call
        torch.testing.assert_close(out, block(x, w), rtol=1e-3, atol=1e-3)
    (runner,) = backend.stats.runners
    return runner.counters.pool_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--rows", default="4096,3072,2048,1024")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    args = parser.parse_args()
    rows = [int(n) for n in args.rows.split(",")]
    device = pick_device()
    with torch.no_grad():
        result = measure(rows, args.width, device)
    largest = result["largest alone"]
    print(f"device: {device}  graph: {npu_mempool.graph_implementation(device)}")
    print(f"shapes: {rows} x {args.width} (float32)")
    print(f"{'mode':<52}{'MiB':>10}{'x largest':>11}")
    print("-" * 73)
    for name, nbytes in result.items():
        print(f"{name:<52}{nbytes / 2**20:>10.1f}{nbytes / largest:>10.2f}x")
    path = write_json(
        args.out / "pool_reuse.json",
        {
            "device": str(device),
            "graph_implementation": npu_mempool.graph_implementation(device),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "rows": rows,
            "width": args.width,
            "bytes": result,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
