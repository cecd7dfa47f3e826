"""The ``npu-compile`` command line and the tooling behind it (private).

Modules, named without a leading underscore because the package itself is private:

* ``commands``: the argument parser and one handler per command (``doctor``, ``demo``,
  ``bench``, ``diagnose``); ``main`` lives there.
* ``common``: what every command shares (help that shows defaults, a quiet end on Ctrl-C or a
  closed pipe).
* ``demo`` and ``demo_model``: ``npu-compile demo`` and the small decoder it, ``bench`` and
  ``diagnose`` run.
* ``bench``: the benchmarks of ``npu-compile bench`` (also run by ``benchmarks/decode_step.py``).
* ``diagnose``: Host Bound or Device Bound; its public names are re-exported as
  ``npu_compile.diagnose``, ``npu_compile.DiagnoseReport`` and ``npu_compile.PhaseTiming``.
* ``files``: atomic JSON result files.

The public entry points are ``npu_compile.cli.main`` (the ``npu-compile`` script and
``python -m npu_compile``) and the ``diagnose`` names above. The backend modules never import
from here (an import-linter contract in the repository's ``pyproject.toml`` checks it), and
``import npu_compile`` loads only ``diagnose`` from this package: the command line itself is
imported when it runs.
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
    # Imported here, not at the top: ``import npu_compile`` imports this package for
    # ``diagnose`` and should not pay for the argument parser.
    from npu_compile._cli.commands import main as run

    return run(argv)
