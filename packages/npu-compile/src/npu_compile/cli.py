"""Command-line entry point ``npu-compile``: ``doctor``, ``demo``, ``bench``, ``diagnose``."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from npu_compile._version import __version__

__all__ = ["main"]

# Longest --tokens of `demo`: the KV cache grows with it (layers x 2 x max_seq x dim floats).
_MAX_TOKENS = 4096
_SIBLINGS = ("npu-streams", "npu-mempool", "npu-static-kernel", "npu-graph-export")


def _doctor(args: argparse.Namespace) -> int:
    import torch

    from npu_compile import _device

    device = _device.best_device(args.device)
    versions = _device.versions()
    lines = [
        f"npu-compile {__version__}",
        f"device             {device}",
        f"torch              {versions['torch']}",
        f"torch_npu          {versions['torch_npu']} ({_device.torch_npu_status()})",
        f"CANN               {versions['CANN']}",
        f"graph              {_device.graph_implementation(device)}",
    ]
    for name in _SIBLINGS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "MISSING (pip install npu-compile installs it)"
        lines.append(f"{name:<18} {version}")
    accelerator = device.type != "cpu"
    cann = versions["CANN"] != "absent"
    feature_rows = [
        ("capture / replay", "yes" if accelerator else "emulated (same semantics, no speedup)"),
        ("multi-stream in graph", "yes" if accelerator else "no-op streams, program order kept"),
        ("memory pool modes 1-3", "yes" if accelerator else "emulated pool"),
        ("static kernels (Inductor)", "yes" if device.type in {"cpu", "cuda"} else "no"),
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
    return 0


def _demo(args: argparse.Namespace) -> int:
    from npu_compile import _device
    from npu_compile._demo import run_demo
    from npu_compile._demo_model import PROMPT_LENGTH, DemoConfig

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
    from npu_compile import _device
    from npu_compile._bench import run_all

    out = None if args.no_json else Path(args.out)
    run_all(out, _device.best_device(args.device), steps=args.steps)
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    import torch

    from npu_compile import _device
    from npu_compile._demo_model import DemoConfig, TinyDecoder
    from npu_compile._diagnose import diagnose

    device = _device.best_device(args.device)
    model = TinyDecoder(DemoConfig(layers=args.layers, dim=args.dim)).to(device).eval()
    prompt = model.prompt()
    token = prompt[:, :1].contiguous()
    position = torch.full((1,), prompt.shape[1], dtype=torch.long, device=device)
    print(f"diagnosing one decode step of the demo model ({args.layers} layers, dim {args.dim})")
    report = diagnose(model, token, position, steps=args.steps, compare=not args.eager_only)
    print(report)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-compile",
        description="TorchAir-style reduce-overhead compilation: checks, demo and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("--device", default=None, help="cpu, cuda, npu, ... (default: best)")
        return sub

    add("doctor", "show device, versions, graph implementation and feature matrix")
    demo = add("demo", "generate tokens with a small decoder, eager vs reduce-overhead")
    demo.add_argument("--tokens", type=int, default=32, help="tokens to generate (default 32)")
    demo.add_argument("--layers", type=int, default=4, help="decoder blocks (default 4)")
    demo.add_argument("--dim", type=int, default=128, help="hidden size (default 128)")
    demo.add_argument("--quiet", action="store_true", help="no progress lines")
    bench = add("bench", "decode-step latency and per-call overhead benchmarks")
    bench.add_argument("--steps", type=int, default=50, help="steps per timing round")
    bench.add_argument(
        "--out", default="benchmarks/results", help="JSON directory (default benchmarks/results)"
    )
    bench.add_argument("--no-json", action="store_true", help="print tables only")
    diag = add("diagnose", "Host Bound or Device Bound? (a decode step of the demo model)")
    diag.add_argument("--steps", type=int, default=20, help="measured steps (default 20)")
    diag.add_argument("--layers", type=int, default=4, help="decoder blocks (default 4)")
    diag.add_argument("--dim", type=int, default=128, help="hidden size (default 128)")
    diag.add_argument("--eager-only", action="store_true", help="skip the compiled comparison")
    return parser


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
        parser.print_help()
        return 0
    for name in ("tokens", "steps", "layers", "dim"):
        value = getattr(args, name, None)
        low = 2 if name == "tokens" else 1
        if value is not None and value < low:
            parser.error(f"--{name} must be >= {low}, got {value}")
    if getattr(args, "tokens", 0) > _MAX_TOKENS:
        parser.error(f"--tokens must be <= {_MAX_TOKENS}, got {args.tokens}")
    if getattr(args, "dim", None) is not None:
        from npu_compile._demo_model import PROMPT_LENGTH, DemoConfig

        tokens = getattr(args, "tokens", 0)
        max_seq = max(DemoConfig.max_seq, PROMPT_LENGTH + tokens)  # as _demo sizes the cache
        try:
            config = DemoConfig(layers=args.layers, dim=args.dim, max_seq=max_seq)
        except ValueError as error:
            parser.error(f"--dim/--layers: {error}")
        from npu_compile._demo import check_demo_size

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
        from npu_compile import _device

        available = _device.best_device()
        if requested.type not in {"cpu", available.type}:
            parser.error(
                f"--device {args.device} is not available here (best device: {available}); "
                "`npu-compile doctor` shows what was found"
            )
    return handlers[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
