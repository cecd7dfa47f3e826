"""Command-line entry point `npu-static-kernel`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from npu_static_kernel._version import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `npu-static-kernel` command line.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(prog="npu-static-kernel")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0
