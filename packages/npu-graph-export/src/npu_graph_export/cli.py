"""Command-line entry point ``npu-graph-export``: ``export``, ``inspect`` and ``run``.

``inspect`` and ``run`` use only the numpy runtime, so they work where torch is not installed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npu_graph_export._cli_common import HelpFormatter, quiet_exit
from npu_graph_export._dtypes import element_size, proto_of_attr
from npu_graph_export._graph import WEIGHT_ATTR
from npu_graph_export._version import __version__
from npu_graph_export.errors import NpuGraphExportError


def _load_factory(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"error: expected MODULE:ATTR, got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise SystemExit(
            f"error: cannot import {module_name!r} ({error}); run from the directory that holds "
            "it or put it on PYTHONPATH"
        ) from error
    finally:
        sys.path.pop(0)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as error:
            raise SystemExit(f"error: {spec!r}: {error}") from error
    return target


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _max_bytes(text: str) -> int:
    from npu_graph_export.runtime._budget import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _load_input(path: str, budget: Any) -> Any:
    """Read a ``.npy`` file after checking the size its header declares (budget, file size)."""
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as handle:
            version = npy.read_magic(handle)
            if version == (1, 0):
                shape, _, dtype = npy.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, _, dtype = npy.read_array_header_2_0(handle)
            else:
                raise ValueError(f".npy format version {version} is not supported")
            if dtype.hasobject:
                raise ValueError("it holds Python objects, which are not loaded")
            declared = math.prod(shape) * dtype.itemsize
            present = os.fstat(handle.fileno()).st_size - handle.tell()
            if present < declared:
                raise ValueError(
                    f"its header declares {dtype}{list(shape)} ({declared} bytes) but the file "
                    f"holds {present}: it is truncated"
                )
            budget.reserve(declared, f"--input {path} ({dtype}{list(shape)})")
            handle.seek(0)
            return npy.read_array(handle, allow_pickle=False)
    except (ValueError, EOFError, TypeError, OverflowError) as error:
        raise SystemExit(
            f"error: --input {path}: not a .npy array file ({error}); save inputs with numpy.save"
        ) from error


def _cmd_export(args: argparse.Namespace) -> int:
    from npu_graph_export import ExportConfig, dynamo_export

    produced = _load_factory(args.factory)
    produced = produced() if callable(produced) else produced
    if not (isinstance(produced, tuple | list) and len(produced) == 2):
        raise SystemExit("error: the factory must return (model, example_inputs)")
    model, example = produced
    example_args = tuple(example) if isinstance(example, tuple | list) else (example,)
    config = ExportConfig(
        auto_atc_config_generated=args.auto_atc_config,
        enable_record_nn_module_stack=args.record_module_stack,
        **({} if args.embed_limit_bytes is None else {"embed_limit_bytes": args.embed_limit_bytes}),
    )
    result = dynamo_export(
        *example_args,
        model=model,
        export_path=args.export_path,
        export_name=args.export_name,
        dynamic=args.dynamic,
        config=config,
    )
    print(f"wrote {result.air}")
    print(f"wrote {result.pbtxt}")
    for path in (*result.weight_files, *result.config_files):
        print(f"wrote {path}")
    return 0


def _summary(model: Any) -> dict[str, Any]:
    ops = Counter(op.type for op in model.graph.op)
    embedded = external = 0
    for op in model.graph.op:
        if op.type == "Const" and WEIGHT_ATTR in op.attr:
            embedded += len(op.attr["value"].t.data)
        elif op.type == "FileConstant":
            count = math.prod(int(d) for d in op.attr["shape"].list.i)
            proto = proto_of_attr(int(op.attr["dtype"].dt))  # a ge::DataType value
            external += count * ((element_size(proto) if proto is not None else None) or 0)
    return {
        "model": str(model.path),
        "ops": dict(sorted(ops.items())),
        "inputs": [str(info) for info in model.inputs],
        "outputs": [str(info) for info in model.outputs],
        "weight_bytes": {"embedded": embedded, "files": external, "total": embedded + external},
    }


def _cmd_inspect(args: argparse.Namespace) -> int:
    from npu_graph_export import runtime

    model = runtime.load(
        args.model, weights_dir=args.weights_dir, rank=args.rank, max_bytes=args.max_bytes
    )
    if args.dot:
        from npu_graph_export._dot import render_dot

        sys.stdout.write(render_dot(model.graph, name=Path(str(model.path)).stem))
        return 0
    summary = _summary(model)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"model: {summary['model']}")
    print(f"ops ({sum(summary['ops'].values())}):")
    for op_type, count in summary["ops"].items():
        print(f"  {op_type:<20} {count}")
    print("inputs:")
    for line in summary["inputs"]:
        print(f"  {line}")
    print("outputs:")
    for line in summary["outputs"]:
        print(f"  {line}")
    weights = summary["weight_bytes"]
    total, embedded, files = weights["total"], weights["embedded"], weights["files"]
    print(f"weight bytes: {total} (embedded {embedded}, files {files})")
    return 0


def _random_input(
    info: Any, rng: np.random.Generator, dynamic_size: int, high: int, budget: Any
) -> Any:
    shape = [dynamic_size if d < 0 else d for d in info.shape]
    dtype = info.numpy_dtype
    # Checked before numpy allocates: a Data op may declare a dimension of 10^12. Random
    # numbers are drawn as 64-bit values, then converted.
    budget.reserve(math.prod(shape) * (8 + dtype.itemsize), f"random input {info}")
    try:
        if dtype.kind == "f":
            return rng.standard_normal(shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, shape).astype(dtype)
        return rng.integers(0, high, shape).astype(dtype)
    except ValueError as error:  # a dimension numpy cannot index, even with another one 0
        raise SystemExit(
            f"error: cannot make a random input for {info} ({error}); pass --input files"
        ) from error


def _cmd_run(args: argparse.Namespace) -> int:
    from npu_graph_export import runtime
    from npu_graph_export.runtime._budget import Budget

    model = runtime.load(
        args.model,
        weights_dir=args.weights_dir,
        collectives=args.collectives,
        rank=args.rank,
        max_bytes=args.max_bytes,
    )
    budget = Budget(model.max_bytes, model.held_bytes)
    if args.input:
        inputs = [_load_input(path, budget) for path in args.input]
    else:
        rng = np.random.default_rng(args.seed)
        inputs = [
            _random_input(i, rng, args.dynamic_size, args.int_high, budget) for i in model.inputs
        ]
    outputs = model.run(*inputs)
    for index, output in enumerate(outputs):
        print(f"output{index}: {output.dtype} {list(output.shape)}")
        if args.output_dir is not None:
            from npu_graph_export import _confine

            # The directory is the user's; the file in it is written atomically, never through
            # a link, and a full disk names the file.
            directory = Path(args.output_dir)
            _confine.write_atomic(
                directory,
                directory / f"output{index}.npy",
                functools.partial(np.save, arr=output, allow_pickle=False),
                todo="free space or pass another --output-dir",
            )
    return 0


_MAX_BYTES_HELP = (
    "memory budget, e.g. 4GiB (default: half the memory, at most 16 GiB); steps "
    "that would need more are refused before allocating"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-graph-export",
        description="Export PyTorch models to GE graphs (.air) and inspect or run them with numpy.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, help="what to do; `COMMAND --help` for its options"
    )

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=HelpFormatter)

    export = add("export", "export a model built by a Python factory")
    export.add_argument("factory", help="MODULE:ATTR returning (model, example_inputs)")
    export.add_argument("--export-path", default="export_file", help="directory to write into")
    export.add_argument(
        "--export-name", default="export", help="file name of the graph: NAME.air (NAME<rank>.air)"
    )
    export.add_argument("--dynamic", action="store_true", help="export dynamic dimensions")
    export.add_argument(
        "--auto-atc-config",
        action="store_true",
        help="also write ATC's model_relation_config.json and numa_config.json (multi-rank)",
    )
    export.add_argument(
        "--record-module-stack",
        action="store_true",
        help="tag each GE op with the nn.Module stack of the code it came from",
    )
    export.add_argument(
        "--embed-limit-bytes",
        type=_non_negative,
        default=None,
        help="weights are written to files above this graph size (default: 2 GB - 200 MB)",
    )
    export.set_defaults(handler=_cmd_export)

    inspect = add("inspect", "summarise an .air file or export directory")
    inspect.add_argument("model", help="an .air file or an export directory")
    inspect.add_argument(
        "--weights-dir",
        default=None,
        help="directory searched first for FileConstant weight files (then the export directory)",
    )
    inspect.add_argument(
        "--rank", type=int, default=None, help="which rank's graph in a multi-rank export"
    )
    output = inspect.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument(
        "--dot",
        action="store_true",
        help="print the graph as Graphviz DOT (render: dot -Tsvg graph.dot -o graph.svg)",
    )
    inspect.add_argument("--max-bytes", type=_max_bytes, default=None, help=_MAX_BYTES_HELP)
    inspect.set_defaults(handler=_cmd_inspect)

    run = add("run", "execute an .air file with the numpy runtime")
    run.add_argument("model", help="an .air file or an export directory")
    run.add_argument(
        "--input", action="append", help=".npy file per input, in order (default: random inputs)"
    )
    run.add_argument("--seed", type=_non_negative, default=0, help="seed for random inputs")
    run.add_argument("--dynamic-size", type=_non_negative, default=2, help="size for -1 dims")
    run.add_argument("--int-high", type=_positive, default=2, help="random ints are in [0, N)")
    run.add_argument("--output-dir", default=None, help="save outputs as .npy here")
    run.add_argument(
        "--weights-dir",
        default=None,
        help="directory searched first for FileConstant weight files (then the export directory)",
    )
    run.add_argument(
        "--collectives",
        choices=("error", "replicated"),
        default="error",
        help="collective ops: fail, or compute as if every rank held the same input",
    )
    run.add_argument(
        "--rank", type=int, default=None, help="which rank's graph in a multi-rank export"
    )
    run.add_argument("--max-bytes", type=_max_bytes, default=None, help=_MAX_BYTES_HELP)
    run.set_defaults(handler=_cmd_run)
    return parser


@quiet_exit("npu-graph-export")
def main(argv: Sequence[str] | None = None) -> int:
    """Run the `npu-graph-export` command line.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code: 0 on success, 1 when the model or files are at fault.
    """
    args = _parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except NpuGraphExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        if error.filename and error.errno is not None:
            from npu_graph_export import _confine

            # Name the file and say what to do (a full disk, no permission).
            error = _confine.write_error(error.filename, error, action="read or write")
        print(f"error: {error}", file=sys.stderr)
        return 1
    except MemoryError:
        # Past every budget check (the machine has less free memory than max_bytes).
        print(
            "error: out of memory; pass a smaller --max-bytes so that the runtime refuses "
            "such steps before allocating",
            file=sys.stderr,
        )
        return 1
