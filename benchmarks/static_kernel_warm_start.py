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

With ``--via compile`` the same processes run a demo-style MLP through ``torch.compile`` with
npu-compile's backend and static kernels on, at two batch sizes (Dynamo, AOT autograd, the static
kernel build or load and the capture), which is what a served model pays at start-up.

With ``--via aot`` the same MLP goes through torch's AOT compile, the path vLLM takes by default:
the first process runs ``torch.compile(model.forward, ...).aot_compile(...)``, calls the result at
both batch sizes and saves it (``save_compiled_function``; the save is not in the step time, it is
in the process wall). Every second process loads it with ``torch.compiler.load_compiled_function``
and calls it at both batch sizes: no Dynamo tracing, no AOT autograd, no npu-compile pass (it
asserts that ``npu_compile.vllm.worker_stats()`` counts no traced FX graph and at least one loaded
one); the graph runner is rebuilt from the saved ATen graph and the static kernels load from the
build directory. One artifact serves both batch sizes: the batch dimension is marked dynamic
(``torch._dynamo.mark_dynamic``) before ``aot_compile``, which then traces once with a symbolic
batch. A loaded function cannot recompile (there is no Dynamo behind it to call): it checks its
guards on every call and raises when they fail, so an artifact traced with a static shape would
need one file per batch size. The graph runner still captures each batch size, and static kernels
are built and loaded per concrete shape, as with ``--via compile``. The saved function carries the
compiler options, the static-kernel build directory included, exactly as given: the build
directory is passed as a relative path (``build``) and every process runs in the directory that
holds it, so the copied-elsewhere process finds the copy, not the original.

With ``--via compile`` and ``--via aot`` every process also asserts that its graphs ran with
static kernels: the summed counters of the live ``StaticKernelCompiler`` objects (npu-compile keeps
one per FX graph inside its graph runner) show one load per batch size and no fallback, and with
``--via aot`` no build in a second process (the parent checks the build directories in every
mode). Finding them scans the live objects, about 0.1 s inside the process wall, recorded as
``static_kernels.probe_s``.

Each second process is compared with the first one (the compile step alone and the whole
process, ``import torch`` included); the target is at most 0.2x. A **floor** process does the
same tracing and the imports that loading any Inductor artifact does (Inductor's loader imports
``compile_fx`` and with it every lowering) but compiles and loads nothing: what no kernel cache
that loads through Inductor can remove. With ``--via aot`` nothing is traced, so the floor traces
nothing either: it builds the model and its inputs, imports ``npu_compile``, torch's loader
(``torch._dynamo.aot_compile``, which brings Dynamo with it) and what the static-kernel load
imports (``torch._inductor.standalone_compile`` and ``torch._inductor.compile_fx``), and loads
nothing (not even ``npu_static_kernel``). Every scenario runs ``--rounds``
times, each round with new directories; the tables show medians.

    python benchmarks/static_kernel_warm_start.py [--via static|compile|aot] [--rounds 3]

Prints a table and writes ``benchmarks/results/static_kernel_warm_start[_compile|_aot].json``.
Needs torch and npu-static-kernel (a C++ compiler on CPU); ``--via compile`` and ``--via aot``
also npu-compile.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
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
from _common import RESULTS_DIR, pick_device, write_json


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


class MLP(torch.nn.Module):
    """The demo-style model of ``--via compile``: pre-norm GELU MLP blocks with residuals."""

    def __init__(self, hidden: int, layers: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(hidden) for _ in range(layers))
        self.ups = torch.nn.ModuleList(torch.nn.Linear(hidden, 4 * hidden) for _ in range(layers))
        self.downs = torch.nn.ModuleList(torch.nn.Linear(4 * hidden, hidden) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, up, down in zip(self.norms, self.ups, self.downs, strict=True):
            x = x + down(torch.nn.functional.gelu(up(norm(x))))
        return x.softmax(-1)


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


def child_static(args: argparse.Namespace) -> dict[str, Any]:
    """compile_static on the ATen graph (build or load), then optionally time steps."""
    from npu_static_kernel import StaticKernelCompiler

    device = args.device
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
    report: dict[str, Any] = {"compile_s": seconds, "builds": compiler.counters.builds}
    if args.time_steps:
        with torch.no_grad():
            report["eager_step_us"] = time_steps(gm, inputs, device, args.steps, args.repeats)
            report["static_step_us"] = time_steps(fn, inputs, device, args.steps, args.repeats)
    return report


def static_kernel_config(args: argparse.Namespace) -> Any:
    """npu-compile's options with static kernels on, built in ``args.build_dir``."""
    import npu_compile

    config = npu_compile.CompilerConfig()
    static = config.experimental_config.aclgraph
    static._aclnn_static_shape_kernel = True
    static._aclnn_static_shape_kernel_build_dir = args.build_dir
    config.debug.aclgraph.strict = True  # a build or load that fails is an error, not a fallback
    return config


def static_kernel_counters() -> dict[str, Any]:
    """The counters of every live ``StaticKernelCompiler``, summed, and how many there are.

    npu-compile makes one per FX graph and keeps it inside the graph's runner, with no handle to
    it; they are found among the live objects. A graph that runs without static kernels has no
    compiler, or one whose ``loads`` did not move. The scan is in the process wall (about 0.1 s
    on CPU), so ``probe_s`` says how long it took.
    """
    from npu_static_kernel import StaticKernelCompiler, StaticKernelCounters

    start = time.perf_counter()

    # issubclass(type(o)) rather than isinstance: isinstance reads `__class__`, which some of
    # torch's lazy module objects answer with a deprecation warning.
    compilers = [o for o in gc.get_objects() if issubclass(type(o), StaticKernelCompiler)]
    totals: dict[str, Any] = dict.fromkeys(StaticKernelCounters().snapshot(), 0)
    for compiler in compilers:
        for name, value in compiler.counters.snapshot().items():
            totals[name] += value
    totals["compilers"] = len(compilers)
    return totals | {"probe_s": time.perf_counter() - start}


def check_static_kernels(kernels: dict[str, Any], shapes: int, *, second: bool) -> None:
    """Each shape ran with static kernels (one load each, no fallback); a 2nd process built none."""
    assert kernels["loads"] == shapes, f"static kernels not loaded once per shape: {kernels}"
    assert kernels["fallbacks"] == 0, f"a shape ran without static kernels: {kernels}"
    assert not second or kernels["builds"] == 0, f"a second process built: {kernels}"


def child_compile(args: argparse.Namespace) -> dict[str, Any]:
    """torch.compile + npu-compile with static kernels: first output at two batch sizes."""
    import npu_compile
    import npu_mempool

    device = args.device
    model = MLP(args.hidden, args.layers).to(device)
    backend = npu_compile.get_npu_backend(compiler_config=static_kernel_config(args))
    batches = (args.batch, 2 * args.batch)
    inputs = [torch.randn(b, args.hidden, device=device) for b in batches]
    sync(device)
    start = time.perf_counter()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        outputs = [compiled(x).clone() for x in inputs]
    sync(device)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        for x, out in zip(inputs, outputs, strict=True):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    report: dict[str, Any] = {
        "compile_s": seconds,
        "captures": npu_mempool.counters.snapshot()["captures"],
        "fallbacks": len(backend.stats.fallbacks),
        "static_kernels": static_kernel_counters(),
    }
    # Which process this is, the parent knows: it checks that no second process built.
    check_static_kernels(report["static_kernels"], len(batches), second=False)
    if args.time_steps:
        report |= time_eager_and_static(args, model, compiled, inputs[:1])
    return report


def time_eager_and_static(
    args: argparse.Namespace, model: Any, static: Any, inputs: list[Any]
) -> dict[str, float]:
    """Per-call time of the eager model and of its static-kernel form, same inputs."""
    with torch.no_grad():
        return {
            "eager_step_us": time_steps(model, inputs, args.device, args.steps, args.repeats),
            "static_step_us": time_steps(static, inputs, args.device, args.steps, args.repeats),
        }


def child_aot(args: argparse.Namespace) -> dict[str, Any]:
    """torch's AOT compile + npu-compile: compile and save, or load (no tracing); both batches."""
    from npu_compile.vllm import worker_stats

    device = args.device
    model = MLP(args.hidden, args.layers).to(device)
    batches = (args.batch, 2 * args.batch)
    inputs = [torch.randn(b, args.hidden, device=device) for b in batches]
    report: dict[str, Any] = {"phase": "load" if args.load else "save"}
    fn: Any  # torch's AOT-compiled function: called, and saved by the first process
    sync(device)
    start = time.perf_counter()
    if args.load:
        with open(args.artifact, "rb") as handle:
            fn = torch.compiler.load_compiled_function(handle, f_globals=MLP.forward.__globals__)
    else:
        import npu_compile

        backend = npu_compile.get_npu_backend(compiler_config=static_kernel_config(args))
        example = inputs[0].clone()
        torch._dynamo.mark_dynamic(example, 0)  # one artifact for every batch size
        # torch.compile attaches `aot_compile` only while the option is on (off by default
        # before torch 2.13), so the compile call is inside the patch too.
        with torch.no_grad(), torch._dynamo.config.patch(enable_aot_compile=True):
            compiled: Any = torch.compile(model.forward, backend=backend, fullgraph=True)
            fn = compiled.aot_compile(((example,), {}))
    with torch.no_grad():
        # The saved function is the unbound `forward`: the module comes first.
        outputs = [fn(model, x).clone() for x in inputs]
    sync(device)
    report["compile_s"] = time.perf_counter() - start
    if not args.load:
        start = time.perf_counter()
        fn.save_compiled_function(args.artifact)
        report["save_s"] = time.perf_counter() - start
    report["artifact_bytes"] = os.path.getsize(args.artifact)
    with torch.no_grad():
        for x, out in zip(inputs, outputs, strict=True):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    stats = worker_stats()
    kernels = static_kernel_counters()
    report |= {"captures": stats["captures"], "stats": stats, "static_kernels": kernels}
    if args.load:
        # Nothing traced or compiled here: the backend never ran, the graph came from the file.
        assert stats["fx_graphs"] == 0, f"the loading process traced: {stats}"
        assert stats["loaded"] >= 1, f"nothing was loaded: {stats}"
    else:
        assert stats["fx_graphs"] >= 1, f"the first process traced nothing: {stats}"
        assert stats["loaded"] == 0, f"the first process loaded a graph: {stats}"
    assert stats["fallbacks"] == 0, f"a graph runs eagerly: {stats}"
    check_static_kernels(kernels, len(batches), second=args.load)
    if args.time_steps:
        report |= time_eager_and_static(args, model, functools.partial(fn, model), inputs[:1])
    return report


def child_floor(args: argparse.Namespace) -> dict[str, Any]:
    """What any such process pays before a kernel cache can help: no static kernels at all.

    The same tracing (``make_fx``, or Dynamo and AOT autograd through ``aot_eager``; none with
    ``--via aot``, whose second processes trace nothing) and the imports that loading any
    Inductor artifact does; nothing is compiled or loaded.
    """
    device = args.device
    start = time.perf_counter()
    if args.via == "aot":
        # Nothing to trace: the model and its inputs, npu-compile, and torch's loader of a saved
        # compiled function (`torch._dynamo.aot_compile`, which imports Dynamo).
        model = MLP(args.hidden, args.layers).to(device)
        for b in (args.batch, 2 * args.batch):
            torch.randn(b, args.hidden, device=device)
        importlib.import_module("npu_compile")
        importlib.import_module("torch._dynamo.aot_compile")
    elif args.via == "compile":
        model = MLP(args.hidden, args.layers).to(device)
        compiled = torch.compile(model, backend="aot_eager", dynamic=False)
        with torch.no_grad():
            for b in (args.batch, 2 * args.batch):
                compiled(torch.randn(b, args.hidden, device=device))
    else:
        make_case(args, device)
    # What loading any Inductor artifact imports: the loader module, and `compile_fx`, which the
    # load imports and which brings all of Inductor's lowerings with it (~0.7 s on its own).
    importlib.import_module("torch._inductor.standalone_compile")
    importlib.import_module("torch._inductor.compile_fx")

    return {"compile_s": time.perf_counter() - start}


def child(args: argparse.Namespace) -> None:
    """One process: build or load, check against eager, print one JSON line."""
    if args.device == "cpu":
        # The CPU is shared with the build tools and other jobs: one thread keeps steps comparable.
        torch.set_num_threads(args.threads)
    if args.floor:
        report = child_floor(args)
    elif args.via == "aot":
        report = child_aot(args)
    else:
        report = child_compile(args) if args.via == "compile" else child_static(args)
    print(json.dumps(report))


def run_child(
    args: argparse.Namespace,
    build_dir: str,
    inductor_cache: str,
    *,
    time_steps: bool = False,
    fallback: str | None = None,
    floor: bool = False,
    load: bool = False,
) -> dict[str, Any]:
    cwd = None
    if args.via == "aot":
        # The saved function keeps the build directory as given: a relative one, resolved in the
        # directory the process runs in, which also holds the artifact.
        cwd, build_dir = os.path.split(build_dir)
        os.makedirs(cwd, exist_ok=True)
    command = [sys.executable, os.path.abspath(__file__), "--child", "--build-dir", build_dir]
    command += ["--time-steps"] if time_steps else []
    command += ["--floor"] if floor else []
    command += ["--load"] if load else []
    for name in ("via", "device", "batch", "hidden", "layers", "steps", "repeats", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor_cache)
    if fallback is not None:
        env["NPU_STATIC_KERNEL_FALLBACK_DIR"] = fallback
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    wall = time.perf_counter() - start
    # One line per process as it ends: a run cut short by a time limit still says how far it got.
    what = "steps" if time_steps else "floor" if floor else "load" if load else "build or load"
    print(f"  process ({what}) ended after {wall:.1f} s, exit code {result.returncode}", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"child failed:\n{result.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    report["process_wall_s"] = wall
    return report


def artifacts(root: str) -> int:
    """How many artifacts a static-kernel cache directory holds."""
    from npu_static_kernel import ArtifactCache

    return len(ArtifactCache(root).entries()) if os.path.isdir(root) else 0


def one_round(args: argparse.Namespace, tmp: str) -> dict[str, dict[str, Any]]:
    """Cold, warm, warm with an empty Inductor cache, copied read-only: new directories."""
    build_dir = os.path.join(tmp, "build")
    machine_cache = os.path.join(tmp, "inductor")
    load = args.via == "aot"  # second processes load the first one's saved function
    cold = run_child(args, build_dir, machine_cache)
    built = artifacts(build_dir)
    assert built >= 1, "the first process built no artifact"
    warm = run_child(args, build_dir, machine_cache, load=load)
    fresh = run_child(args, build_dir, os.path.join(tmp, "inductor-new-machine"), load=load)
    image = os.path.join(tmp, "image", "build")
    shutil.copytree(build_dir, image)
    if load:  # the saved function travels with the build directory, read-only too
        saved = shutil.copy(os.path.join(tmp, AOT_ARTIFACT), os.path.dirname(image))
        os.chmod(saved, 0o444)
    for root, dirs, files in os.walk(image):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o555 if name in dirs else 0o444)
    fallback = os.path.join(tmp, "fallback")
    copied = run_child(
        args, image, os.path.join(tmp, "inductor-image"), fallback=fallback, load=load
    )
    for root, dirs, _ in os.walk(image):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    # Every second process loaded what the first one built: nothing new anywhere.
    assert artifacts(build_dir) == built, "a second process built"
    assert artifacts(image) == built, "the copied cache was written to"
    assert artifacts(fallback) == 0, "the copied cache missed and built in the fallback"
    floor = run_child(
        args, os.path.join(tmp, "unused"), os.path.join(tmp, "inductor-floor"), floor=True
    )
    return {"cold": cold, "warm": warm, "fresh": fresh, "copied": copied, "floor": floor}


#: The saved compiled function of ``--via aot``, next to the build directory.
AOT_ARTIFACT = "mlp.aot"

SCENARIOS = {
    "warm": "2nd process, same Inductor cache",
    "fresh": "2nd process, empty Inductor cache",
    "copied": "copied read-only, empty Inductor cache",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--via",
        choices=("static", "compile", "aot"),
        default="static",
        help="compile_static on an ATen graph, torch.compile with npu-compile, or torch's AOT "
        "compile with npu-compile (saved, then loaded without tracing)",
    )
    parser.add_argument("--device", default=pick_device().type)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="repeat every scenario")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for the steps")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build-dir", help=argparse.SUPPRESS)
    parser.add_argument("--time-steps", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--artifact", default=AOT_ARTIFACT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="static-kernel-bench-") as tmp:
            rounds.append(one_round(args, tmp))
    with tempfile.TemporaryDirectory(prefix="static-kernel-bench-") as tmp:
        build, cache = os.path.join(tmp, "build"), os.path.join(tmp, "i")
        if args.via == "aot":
            # Steps of the loaded function, what a restarted server runs: save first, then load.
            run_child(args, build, cache)
        steps = run_child(args, build, cache, time_steps=True, load=args.via == "aot")

    def median(scenario: str, field: str) -> float:
        return statistics.median(float(r[scenario][field]) for r in rounds)

    def ratio(scenario: str, field: str) -> float:
        """Median over rounds of this scenario / the same round's first process."""
        return statistics.median(
            float(r[scenario][field]) / float(r["cold"][field]) for r in rounds
        )

    step = {
        "static": "compile_static",
        "compile": "torch.compile to first outputs",
        "aot": "AOT compile or load to first outputs",
    }[args.via]
    rows = [(f"first process: {step} (s)", median("cold", "compile_s"))]
    rows += [(f"{label}: {step} (s)", median(k, "compile_s")) for k, label in SCENARIOS.items()]
    rows += [("first process wall, import torch included (s)", median("cold", "process_wall_s"))]
    rows += [(f"{label}: wall (s)", median(k, "process_wall_s")) for k, label in SCENARIOS.items()]
    rows += [
        ("floor: same process with no static kernels: wall (s)", median("floor", "process_wall_s")),
        (
            "2nd process (empty Inductor cache) above the floor (s)",
            statistics.median(
                float(r["fresh"]["process_wall_s"]) - float(r["floor"]["process_wall_s"])
                for r in rounds
            ),
        ),
        ("step, eager (us)", steps["eager_step_us"]),
        ("step, static kernels (us)", steps["static_step_us"]),
    ]
    ratios = {f"{k}_compile": ratio(k, "compile_s") for k in SCENARIOS}
    ratios |= {f"{k}_process": ratio(k, "process_wall_s") for k in SCENARIOS}
    ratios["floor_process"] = ratio("floor", "process_wall_s")
    step_speedup = steps["eager_step_us"] / steps["static_step_us"]
    device_name = (
        torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    )
    print(f"\nstatic kernel warm start via {args.via} on {args.device} ({device_name}), ", end="")
    print(f"torch {torch.__version__}, median of {args.rounds} rounds")
    print(f"batch {args.batch}, hidden {args.hidden}, {args.layers} layers\n")
    print(f"{'measure':<62}{'value':>10}")
    for name, value in rows:
        print(f"{name:<62}{value:>10.3f}")
    print("\nsecond process / first process, median of per-round ratios (target <= 0.2x):")
    for name, value in ratios.items():
        print(f"  {name:<60}{value:>9.3f}x")
    print(f"{'step speed-up (eager / static)':<62}{step_speedup:>9.2f}x")

    suffix = {"static": "", "compile": "_compile", "aot": "_aot"}[args.via]
    path = write_json(
        args.out / f"static_kernel_warm_start{suffix}.json",
        {
            "benchmark": "static_kernel_warm_start",
            "via": args.via,
            "device": args.device,
            "device_name": device_name,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "shape": {"batch": args.batch, "hidden": args.hidden, "layers": args.layers},
            "rounds": rounds,
            "steps": steps,
            "medians": dict(rows),
            "ratios_to_cold": ratios,
            "step_speedup": step_speedup,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
