"""Command-line entry point ``npu-compile``: ``doctor``, ``demo``, ``bench``, ``diagnose``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from npu_compile._cli.common import HelpFormatter, quiet_exit
from npu_compile._tools.timing import DEFAULT_MAX_SECONDS, DEFAULT_TOLERANCE
from npu_compile._version import __version__
from npu_compile.errors import OutputError

__all__ = ["main", "load_step"]

# Longest --tokens of `demo`: the KV cache grows with it (layers x 2 x max_seq x dim floats).
_MAX_TOKENS = 4096
_SIBLINGS = ("npu-streams", "npu-mempool", "npu-static-kernel", "npu-graph-export")


def _cxx_problem() -> str | None:
    """Why Inductor cannot build C++ kernels here, or ``None`` when a test compile succeeds.

    Static kernels on CPU are C++ from ``torch._inductor``; a compiler that is missing, or found
    but unable to build (a broken ``CXX``, a missing libstdc++ header), only shows up at the
    first build otherwise.
    """
    import subprocess
    import tempfile

    from torch._inductor import cpp_builder, exc

    try:
        compiler = cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return "no C++ compiler found (set CXX or install g++)"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.cpp"
        source.write_text(
            "#include <vector>\nint main() { return std::vector<int>(1).size() - 1; }\n"
        )
        try:
            done = subprocess.run(
                [compiler, "-c", str(source), "-o", str(Path(tmp) / "probe.o")],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"C++ compiler {compiler!r} does not run ({error})"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no message"])[-1][:120]
        return f"C++ compiler {compiler!r} cannot compile a test file ({detail})"
    return None


def _doctor(args: argparse.Namespace) -> int:
    import torch

    from npu_compile._tools import device as _device

    device = _device.best_device(args.device)
    versions = _device.versions()
    npu_status = _device.torch_npu_status()
    graph = _device.graph_implementation(device)
    # Each entry: something doctor checked that is broken, with what to do about it.
    problems: list[str] = []
    lines = [
        f"npu-compile {__version__}",
        f"device             {device}",
        f"torch              {versions['torch']}",
        f"torch_npu          {versions['torch_npu']} ({npu_status})",
        f"CANN               {versions['CANN']}",
        f"graph              {graph}",
    ]
    if npu_status.startswith("installed but"):
        problems.append(f"torch_npu {npu_status}: check the CANN install and its set_env.sh")
    if graph.startswith("none"):
        problems.append(f"no graph implementation for {device}: {graph}")
    for name in _SIBLINGS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "MISSING (pip install npu-compile installs it)"
            problems.append(f"{name} is not installed: pip install npu-compile installs it")
        lines.append(f"{name:<18} {version}")
    accelerator = device.type != "cpu"
    cann = versions["CANN"] != "absent"
    inductor = "no"
    if device.type == "cpu":
        cxx = _cxx_problem()
        inductor = "yes" if cxx is None else f"BROKEN: {cxx}"
        if cxx is not None:
            problems.append(f"static kernels (Inductor): {cxx}")
    elif device.type == "cuda":
        inductor = "yes"
    feature_rows = [
        ("capture / replay", "yes" if accelerator else "emulated (same semantics, no speedup)"),
        ("multi-stream in graph", "yes" if accelerator else "no-op streams, program order kept"),
        ("memory pool modes 1-3", "yes" if accelerator else "emulated pool"),
        ("static kernels (Inductor)", inductor),
        ("static kernels (Ascend)", "yes" if cann else "no (needs CANN op_compiler)"),
        ("graph export (.air)", "yes (offline, any device)"),
        (
            "diagnose host/device",
            "yes" if accelerator else "host only (device time not separable on CPU)",
        ),
    ]
    lines.append("features:")
    lines += [f"  {name:<26} {state}" for name, state in feature_rows]
    lines.append(f"torch threads      {torch.get_num_threads()}")
    print("\n".join(lines))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _demo(args: argparse.Namespace) -> int:
    from npu_compile._tools import device as _device
    from npu_compile._tools.demo import run_demo
    from npu_compile._tools.demo_model import PROMPT_LENGTH, DemoConfig

    # The KV cache grows to fit long generations (validated against _MAX_TOKENS in main).
    max_seq = max(DemoConfig.max_seq, PROMPT_LENGTH + args.tokens)
    config = DemoConfig(layers=args.layers, dim=args.dim, max_seq=max_seq)
    result = run_demo(
        tokens=args.tokens,
        device=_device.best_device(args.device),
        config=config,
        progress=None if args.quiet else sys.stderr,
    )
    print(result.table())
    if not result.identical:
        print(
            "error: reduce-overhead generated different tokens than eager; rerun with "
            "config.debug.run_eagerly = True to tell a capture problem from a tracing one",
            file=sys.stderr,
        )
        return 1
    if result.graphs_captured == 0:
        # Every FX graph fell back to eager: identical tokens would compare eager with eager.
        print(
            "error: reduce-overhead captured no graph (see the fallback lines above), so the "
            "comparison with eager proves nothing",
            file=sys.stderr,
        )
        return 1
    return 0


def _bench(args: argparse.Namespace) -> int:
    from npu_compile._tools import device as _device
    from npu_compile._tools.bench import run_all

    out = None if args.no_json else Path(args.out)
    progress = None if args.quiet else sys.stderr
    run_all(out, _device.best_device(args.device), steps=args.steps, progress=progress)
    return 0


def load_step(spec: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The user's step for ``diagnose --model``, named ``"package.module:factory"``.

    ``factory()`` returns ``(fn, inputs)``: the step and a tuple of its inputs.

    Args:
        spec: The value of ``--model``.

    Returns:
        ``(step, inputs)`` as the factory made them.

    Raises:
        ValueError: the name is not ``MODULE:ATTR``, cannot be imported, or the factory does not
            return ``(callable, tuple)``.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--model {spec!r}: expected MODULE:FACTORY, e.g. mypkg.models:make_step")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--model {spec!r}: cannot import {module_name!r} ({error})") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"--model {spec!r}: {module_name} has no callable {attribute!r}")
    made = factory()
    if (
        not isinstance(made, tuple)
        or len(made) != 2
        or not callable(made[0])
        or not isinstance(made[1], tuple)
    ):
        raise ValueError(
            f"--model {spec!r}: {attribute}() must return (step, inputs) with inputs a tuple, "
            f"got {type(made).__name__}"
        )
    return made[0], made[1]


def _diagnose(args: argparse.Namespace) -> int:
    import json

    from npu_compile._tools import device as _device
    from npu_compile._tools.demo_model import DemoConfig, TinyDecoder
    from npu_compile.diagnosis import diagnose

    # With --json, stdout carries the JSON document only; everything else goes to stderr.
    say = sys.stderr if args.json else sys.stdout
    if args.model is not None:
        try:
            step, inputs = load_step(args.model)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"diagnosing {args.model}", file=say)
    else:
        device = _device.best_device(args.device)
        model = TinyDecoder(DemoConfig(layers=args.layers, dim=args.dim)).to(device).eval()
        step, inputs = model, model.decode_step_inputs()
        print(
            f"diagnosing one decode step of the demo model ({args.layers} layers, dim {args.dim})",
            file=say,
        )
    report = diagnose(
        step,
        *inputs,
        steps=args.steps,
        compare=not args.eager_only,
        progress=None if args.quiet else sys.stderr,
        trace=args.trace,
        tolerance=args.tolerance,
        max_seconds=args.max_seconds,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report)
    if args.trace is not None:
        print(f"trace written to {args.trace} (open it in Perfetto or chrome://tracing)", file=say)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-compile",
        description="TorchAir-style reduce-overhead compilation: checks, demo and benchmarks.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="what to do; `COMMAND --help` for its options"
    )

    def add(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, formatter_class=HelpFormatter)
        sub.add_argument(
            "--device", default=None, help="cpu, cuda, npu, ... (default: the best available)"
        )
        return sub

    add("doctor", "show device, versions, graph implementation and feature matrix")
    demo = add("demo", "generate tokens with a small decoder, eager vs reduce-overhead")
    demo.add_argument("--tokens", type=int, default=32, help="tokens to generate")
    demo.add_argument("--layers", type=int, default=4, help="decoder blocks")
    demo.add_argument("--dim", type=int, default=128, help="hidden size")
    demo.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    bench = add("bench", "decode-step latency and per-call overhead benchmarks")
    bench.add_argument("--steps", type=int, default=50, help="steps per timing round")
    bench.add_argument("--out", default="benchmarks/results", help="directory for the JSON file")
    bench.add_argument("--no-json", action="store_true", help="print tables only")
    bench.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    diag = add("diagnose", "Host Bound or Device Bound? (a decode step of the demo model)")
    diag.add_argument(
        "--steps",
        type=int,
        default=20,
        help="fewest measured rounds (one step of each variant per round, in turn)",
    )
    diag.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="stop once each median is known within this fraction of it (95%% confidence)",
    )
    diag.add_argument(
        "--max-seconds",
        type=float,
        default=DEFAULT_MAX_SECONDS,
        help="time limit of the rounds; past it the result is 'too noisy', with no verdict",
    )
    diag.add_argument("--layers", type=int, default=4, help="decoder blocks")
    diag.add_argument("--dim", type=int, default=128, help="hidden size")
    diag.add_argument("--eager-only", action="store_true", help="skip the compiled comparison")
    diag.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    diag.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FACTORY",
        help="diagnose your own step: FACTORY() in MODULE returns (step, inputs_tuple); "
        "--layers and --dim then do not apply",
    )
    diag.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="write a Chrome/Perfetto trace of the measured steps (torch.profiler) to FILE",
    )
    diag.add_argument(
        "--json", action="store_true", help="print the report as JSON on stdout (for scripts)"
    )
    return parser


@quiet_exit("npu-compile")
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``npu-compile`` command line.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    handlers = {"doctor": _doctor, "demo": _demo, "bench": _bench, "diagnose": _diagnose}
    if args.command is None:
        parser.error("a command is required: one of doctor, demo, bench, diagnose")
    for name in ("tokens", "steps", "layers", "dim"):
        value = getattr(args, name, None)
        low = 2 if name == "tokens" else 1
        if value is not None and value < low:
            parser.error(f"--{name} must be >= {low}, got {value}")
    for name in ("tolerance", "max_seconds"):
        value = getattr(args, name, None)
        if value is not None and not 0 < value < float("inf"):
            parser.error(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    if getattr(args, "tokens", 0) > _MAX_TOKENS:
        parser.error(f"--tokens must be <= {_MAX_TOKENS}, got {args.tokens}")
    if getattr(args, "dim", None) is not None:
        from npu_compile._tools.demo_model import PROMPT_LENGTH, DemoConfig

        tokens = getattr(args, "tokens", 0)
        max_seq = max(DemoConfig.max_seq, PROMPT_LENGTH + tokens)  # as demo sizes the cache
        try:
            config = DemoConfig(layers=args.layers, dim=args.dim, max_seq=max_seq)
        except ValueError as error:
            parser.error(f"--dim/--layers: {error}")
        from npu_compile._tools.demo import check_demo_size

        try:
            # Before any allocation: a huge --dim or --layers would fail deep inside torch.
            check_demo_size(config)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "bench" and not args.no_json:
        # Fail now, not after minutes of benchmarking, when the JSON cannot be written.
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            parser.error(
                f"--out {args.out}: cannot create it ({error.strerror}); pass another "
                "directory or --no-json"
            )
        if not os.access(out, os.W_OK):
            parser.error(f"--out {args.out} is not writable; pass another directory or --no-json")
    if args.device is not None:
        import torch

        try:
            requested = torch.device(args.device)
        except RuntimeError:
            parser.error(f"--device {args.device!r} is not a device name; try cpu, cuda or npu")
        from npu_compile._tools import device as _device

        available = _device.best_device()
        if requested.type not in {"cpu", available.type}:
            parser.error(
                f"--device {args.device} is not available here (best device: {available}); "
                "`npu-compile doctor` shows what was found"
            )
    try:
        return handlers[args.command](args)
    except OutputError as error:  # refused or failed with a message that says what to do
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.filename is None:
            raise
        # A result file (--out, --trace) that cannot be written: a full disk or no permission.
        print(
            f"error: cannot write {error.filename} ({error.strerror}); free space or choose "
            "another --out/--trace",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
