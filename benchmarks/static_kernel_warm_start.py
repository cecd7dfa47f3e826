"""Static kernels: cold build vs warm load in a second process, and step time with and without.

A small decoder-like block (layer norm, two matmuls with GELU, a residual add and a KV-cache
style ``copy_`` into an input) is traced to an ATen FX graph and handed to npu-static-kernel's
``StaticKernelCompiler.compile_static``, exactly as npu-compile does before a capture:

- **cold**: a fresh process with an empty build directory *and* an empty Inductor cache records
  op statistics and builds the artifact (``InductorBuilder`` on CPU/CUDA);
- **warm**: a second fresh process finds the artifact in the build directory and only loads it,
  sharing the first process's Inductor cache (another process on the same machine);
- **warm, empty Inductor cache**: the same with a new, empty Inductor cache, as on a new machine
  that was handed the build directory;
- **copied, empty Inductor cache**: the build directory copied to another path (as into a
  container image) and made read-only, loaded with a new, empty Inductor cache;
- **step**: per-call time of the eager ATen graph vs the loaded static-shape artifact (one more
  process, so the startup figures above do not include it).

Each second process is compared with the first one (``compile_static`` alone and the whole
process, ``import torch`` included); the target is at most 0.2x.

    python benchmarks/static_kernel_warm_start.py [--batch 8] [--hidden 256] [--layers 4]

Prints a table and writes ``benchmarks/results/static_kernel_warm_start.json``. Needs torch and
npu-static-kernel (a C++ compiler on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import pick_device

RESULTS = Path(__file__).resolve().parent / "results" / "static_kernel_warm_start.json"


def block(
    x: torch.Tensor, cache: torch.Tensor, *weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x
    for i in range(0, len(weights), 2):
        w1, w2 = weights[i], weights[i + 1]
        n = torch.nn.functional.layer_norm(h, h.shape[-1:])
        h = h + torch.nn.functional.gelu(n @ w1) @ w2
    cache.copy_(h)  # an in-place input update, like a KV-cache write
    return h.softmax(-1), h.sum(-1)


def make_case(args: argparse.Namespace, device: str) -> tuple[torch.fx.GraphModule, list[Any]]:
    from torch.fx.experimental.proxy_tensor import make_fx

    gen = torch.Generator().manual_seed(0)
    h = args.hidden
    weights = []
    for _ in range(args.layers):
        weights += [torch.randn(h, 4 * h, generator=gen) / h**0.5]
        weights += [torch.randn(4 * h, h, generator=gen) / (4 * h) ** 0.5]
    inputs = [torch.randn(args.batch, h, generator=gen), torch.zeros(args.batch, h), *weights]
    inputs = [t.to(device) for t in inputs]
    gm = make_fx(block, tracing_mode="fake")(*inputs)
    return gm, inputs


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(fn: Any, inputs: list[Any], device: str, steps: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean per-call time (microseconds) of ``steps`` calls."""
    for _ in range(10):
        fn(*inputs)
    samples = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            fn(*inputs)
        sync(device)
        samples.append((time.perf_counter() - start) / steps * 1e6)
    return statistics.median(samples)


def child(args: argparse.Namespace) -> None:
    """One process: compile_static (build or load), then time steps; print one JSON line."""
    from npu_static_kernel import StaticKernelCompiler

    device = args.device
    if device == "cpu":
        # The CPU is shared with the build tools and other jobs: one thread keeps steps comparable.
        torch.set_num_threads(args.threads)
    gm, inputs = make_case(args, device)
    compiler = StaticKernelCompiler(args.build_dir, strict=True)
    sync(device)
    start = time.perf_counter()
    fn = compiler.compile_static(gm, inputs)
    sync(device)
    seconds = time.perf_counter() - start
    eager_inputs = [t.clone() for t in inputs]
    static_inputs = [t.clone() for t in inputs]
    torch.testing.assert_close(fn(*static_inputs), gm(*eager_inputs), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(static_inputs[1], eager_inputs[1], rtol=1e-4, atol=1e-4)
    report: dict[str, Any] = {"compile_static_s": seconds, "counters": vars(compiler.counters)}
    if args.time_steps:
        with torch.no_grad():
            report["eager_step_us"] = time_steps(gm, inputs, device, args.steps, args.repeats)
            report["static_step_us"] = time_steps(fn, inputs, device, args.steps, args.repeats)
    print(json.dumps(report))


def run_child(
    args: argparse.Namespace,
    build_dir: str,
    inductor_cache: str,
    *,
    time_steps: bool = False,
    fallback: str | None = None,
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--build-dir", build_dir]
    command += ["--time-steps"] if time_steps else []
    for name in ("device", "batch", "hidden", "layers", "steps", "repeats", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor_cache)
    if fallback is not None:
        env["NPU_STATIC_KERNEL_FALLBACK_DIR"] = fallback
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"child failed:\n{result.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    report["process_wall_s"] = wall
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", default=pick_device().type)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for the steps")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build-dir", help=argparse.SUPPRESS)
    parser.add_argument("--time-steps", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="static-kernel-bench-") as tmp:
        build_dir = os.path.join(tmp, "build")
        machine_cache = os.path.join(tmp, "inductor")
        cold = run_child(args, build_dir, machine_cache)
        warm = run_child(args, build_dir, machine_cache)
        fresh = run_child(args, build_dir, os.path.join(tmp, "inductor-new-machine"))
        image = os.path.join(tmp, "image", "build")
        shutil.copytree(build_dir, image)
        for root, dirs, files in os.walk(image):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o555 if name in dirs else 0o444)
        copied = run_child(
            args, image, os.path.join(tmp, "inductor-image"), fallback=os.path.join(tmp, "fb")
        )
        steps = run_child(args, build_dir, machine_cache, time_steps=True)
        for root, dirs, _ in os.walk(image):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
    assert cold["counters"]["builds"] == 1, cold
    for report in (warm, fresh, copied):
        assert report["counters"]["builds"] == 0, report
        assert report["counters"]["hits"] == 1, report

    def ratio(report: dict[str, Any], field: str) -> float:
        return float(report[field]) / float(cold[field])

    rows = [
        ("cold: record + build + load (s)", cold["compile_static_s"]),
        ("warm: 2nd process, same Inductor cache (s)", warm["compile_static_s"]),
        ("warm, empty Inductor cache (s)", fresh["compile_static_s"]),
        ("copied read-only, empty Inductor cache (s)", copied["compile_static_s"]),
        ("cold process wall incl. import (s)", cold["process_wall_s"]),
        ("warm process wall (s)", warm["process_wall_s"]),
        ("warm, empty Inductor cache, process wall (s)", fresh["process_wall_s"]),
        ("copied read-only, process wall (s)", copied["process_wall_s"]),
        ("step, eager ATen graph (us)", steps["eager_step_us"]),
        ("step, static kernels (us)", steps["static_step_us"]),
    ]
    ratios = {
        "warm": ratio(warm, "compile_static_s"),
        "warm_empty_inductor_cache": ratio(fresh, "compile_static_s"),
        "copied_empty_inductor_cache": ratio(copied, "compile_static_s"),
        "warm_process": ratio(warm, "process_wall_s"),
        "warm_empty_inductor_cache_process": ratio(fresh, "process_wall_s"),
        "copied_empty_inductor_cache_process": ratio(copied, "process_wall_s"),
    }
    speedup = cold["compile_static_s"] / warm["compile_static_s"]
    step_speedup = steps["eager_step_us"] / steps["static_step_us"]
    device_name = (
        torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    )
    print(f"\nstatic kernel warm start on {args.device} ({device_name}), torch {torch.__version__}")
    print(f"block: batch {args.batch}, hidden {args.hidden}, {args.layers} layers\n")
    print(f"{'measure':<46}{'value':>10}")
    for name, value in rows:
        print(f"{name:<46}{value:>10.3f}")
    print("\nsecond process / first process (target <= 0.2x):")
    for name, value in ratios.items():
        print(f"  {name:<44}{value:>9.3f}x")
    print(f"{'step speed-up (eager / static)':<46}{step_speedup:>9.2f}x")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "static_kernel_warm_start",
        "device": args.device,
        "device_name": device_name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "shape": {"batch": args.batch, "hidden": args.hidden, "layers": args.layers},
        "cold": cold,
        "warm": warm,
        "warm_empty_inductor_cache": fresh,
        "copied_read_only_empty_inductor_cache": copied,
        "steps": steps,
        "ratios_to_cold": ratios,
        "warm_start_speedup": speedup,
        "step_speedup": step_speedup,
    }
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(tmp_out, args.out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
