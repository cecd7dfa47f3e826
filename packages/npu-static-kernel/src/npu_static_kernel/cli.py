"""Command-line entry point ``npu-static-kernel``: list, clean, pack and unpack the artifact cache.

Errors are printed as one ``error: ...`` line on stderr with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from npu_static_kernel import _confine
from npu_static_kernel._cache import ArtifactCache
from npu_static_kernel._cann_names import OUTPUTS_DIRNAME
from npu_static_kernel._cli_common import HelpFormatter, quiet_exit
from npu_static_kernel._confine import path_of
from npu_static_kernel._pack import DEFAULT_MAX_BYTES, pack_cache, unpack_cache
from npu_static_kernel._version import __version__
from npu_static_kernel.errors import NpuStaticKernelError


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _list(args: argparse.Namespace) -> int:
    entries = ArtifactCache(args.build_dir).entries()
    if args.json:
        json.dump([e.to_json() for e in entries], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not entries:
        print(f"no static kernel artifacts in {ArtifactCache(args.build_dir).root}")
        return 0
    print(f"{'key':<14}{'builder':<10}{'size':>10}  {'created (UTC)':<21}inputs")
    for e in entries:
        created = e.created[:19].replace("T", " ")
        inputs = ", ".join(e.inputs)
        print(f"{e.key[:12]:<14}{e.builder:<10}{_size(e.size_bytes):>10}  {created:<21}{inputs}")
    return 0


def _clean(args: argparse.Namespace) -> int:
    cache = ArtifactCache(args.build_dir)
    if args.key is not None:
        if not args.key.strip():
            # An empty prefix (``--key "$UNSET"``) must not fall through to cleaning everything.
            print(
                "error: --key needs a key prefix; run `npu-static-kernel list` to see the keys, "
                "or omit --key to remove every artifact",
                file=sys.stderr,
            )
            return 2
        matches = [e.key for e in cache.entries() if e.key.startswith(args.key)]
        if len(matches) != 1:
            print(
                f"error: key prefix {args.key!r} matches {len(matches)} artifacts; "
                "run `npu-static-kernel list` and pass a longer prefix",
                file=sys.stderr,
            )
            return 2
        cache.remove(matches[0])
        removed = 1
    else:
        removed = cache.clean()
    print(f"removed {removed} artifact(s) from {cache.root}")
    if args.records:
        build_dir = path_of(args.build_dir)
        records = build_dir / OUTPUTS_DIRNAME
        real = records.is_dir() and not records.is_symlink()
        # A link is removed as a link: what it points to is never deleted.
        if _confine.remove(build_dir, records) and real:
            print(f"removed op statistics in {records}")
    return 0


def _pack(args: argparse.Namespace) -> int:
    cache = ArtifactCache(args.build_dir)
    result = pack_cache(cache, Path(args.archive))
    for reason in result.skipped:
        print(f"warning: left out {reason}", file=sys.stderr)
    print(f"packed {len(result.keys)} artifact(s), {_size(result.size_bytes)}, into {args.archive}")
    return 0


def _unpack(args: argparse.Namespace) -> int:
    cache = ArtifactCache(args.build_dir)
    result = unpack_cache(Path(args.archive), cache, max_bytes=args.max_bytes)
    for reason in result.skipped:
        print(f"kept {reason}")
    print(f"unpacked {len(result.keys)} verified artifact(s) into {cache.root}")
    return 0


@quiet_exit("npu-static-kernel")
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``npu-static-kernel`` command line.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(
        prog="npu-static-kernel",
        description="Inspect, clean, pack and unpack static kernel artifacts.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--build-dir", default=None, help="the build directory (default: current directory)"
    )
    commands = parser.add_subparsers(
        dest="command", required=True, help="what to do; `COMMAND --help` for its options"
    )
    listing = commands.add_parser(
        "list", parents=[common], help="list cached artifacts", formatter_class=HelpFormatter
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=_list)
    clean = commands.add_parser(
        "clean",
        parents=[common],
        help="remove artifacts (running Ascend uninstall scripts)",
        formatter_class=HelpFormatter,
    )
    clean.add_argument("--key", help="remove only the artifact whose key starts with this")
    clean.add_argument(
        "--records", action="store_true", help=f"also remove the op statistics ({OUTPUTS_DIRNAME})"
    )
    clean.set_defaults(run=_clean)
    packing = commands.add_parser(
        "pack",
        parents=[common],
        help="write every verified artifact into a .tar.gz",
        formatter_class=HelpFormatter,
    )
    packing.add_argument("archive", help="the archive to write (e.g. kernels.tar.gz)")
    packing.set_defaults(run=_pack)
    unpacking = commands.add_parser(
        "unpack",
        parents=[common],
        help="verify a .tar.gz from `pack` and add its artifacts",
        formatter_class=HelpFormatter,
    )
    unpacking.add_argument("archive", help="the archive made by `npu-static-kernel pack`")
    unpacking.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        help=f"refuse archives holding more than this many bytes (default {DEFAULT_MAX_BYTES})",
    )
    unpacking.set_defaults(run=_unpack)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except (NpuStaticKernelError, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, NpuStaticKernelError) and exc.filename:
            exc = _confine.write_error(exc.filename, exc, action="read or write")
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    return code
