"""What every ``npu-compile`` command shares: help that shows defaults, and a quiet end.

A command stopped with Ctrl-C exits 130 (the shell's code for SIGINT) after one line; a command
whose output pipe was closed (``npu-compile doctor | head -1``) exits 141 (the code of a process
killed by SIGPIPE) without a word, instead of a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = ["HelpFormatter", "quiet_exit", "EXIT_INTERRUPTED", "EXIT_BROKEN_PIPE"]

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help when it has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text.lower():
            return text  # the help already says it, in its own words
        if action.default in (None, False, argparse.SUPPRESS) or action.default == []:
            return text
        return f"{text} (default: %(default)s)"


class _Main(Protocol):
    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def _silence_stdout() -> None:
    # The reader is gone: later writes (including the flush at interpreter exit) would raise
    # again and print "Exception ignored"; send them to /dev/null instead.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def quiet_exit(prog: str) -> Callable[[_Main], _Main]:
    """Wrap a CLI ``main`` so Ctrl-C and a closed output pipe end it quietly.

    Args:
        prog: Program name for the one-line message on Ctrl-C.

    Returns:
        A decorator for ``main(argv=None) -> int``.
    """

    def decorate(main: _Main) -> _Main:
        @functools.wraps(main)
        def wrapper(argv: Sequence[str] | None = None) -> int:
            try:
                try:
                    return main(argv)
                finally:
                    # Output is block-buffered into a pipe: a closed pipe shows up at this flush
                    # (also after ``--help``'s SystemExit), not at interpreter exit.
                    sys.stdout.flush()
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
            except BrokenPipeError:
                _silence_stdout()
                return EXIT_BROKEN_PIPE

        return wrapper

    return decorate
