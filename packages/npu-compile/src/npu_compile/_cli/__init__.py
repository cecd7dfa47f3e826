"""The ``npu-compile`` command line (private): argument parsing, output and dispatch.

Modules, named without a leading underscore because the package itself is private:

* ``commands``: the argument parser and one handler per command (``doctor``, ``demo``,
  ``bench``, ``diagnose``); ``main`` lives there.
* ``common``: what every command shares (help that shows defaults, a quiet end on Ctrl-C or a
  closed pipe).

What the commands run lives in the package, so that it works from an installed wheel:
``npu_compile.diagnose`` (public), ``_demo`` and ``_demo_model`` (``npu-compile demo`` and the
small decoder it, ``bench`` and ``diagnose`` run), ``_bench`` (the benchmarks of
``npu-compile bench``, also run by ``benchmarks/decode_step.py``) and ``_device`` (the device
adapter: best device, timing, versions).

The public entry point is ``npu_compile.cli.main`` (the ``npu-compile`` script and
``python -m npu_compile``). No other module of npu_compile imports from here (an import-linter
contract in the repository's ``pyproject.toml`` checks it), so ``import npu_compile`` never
loads the command line.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``npu-compile`` command line (see ``commands.main``).

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code.
    """
    # Imported here, not at the top: importing this package should not pay for the parser.
    from npu_compile._cli.commands import main as run

    return run(argv)
