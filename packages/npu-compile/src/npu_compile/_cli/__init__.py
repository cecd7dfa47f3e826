"""The ``npu-compile`` command line (private): argument parsing, output and dispatch.

Modules, named without a leading underscore because the package itself is private:

* ``commands``: the argument parser and one handler per command (``doctor``, ``demo``,
  ``bench``, ``diagnose``); ``main`` lives there.
* ``common``: what every command shares (help that shows defaults, a quiet end on Ctrl-C or a
  closed pipe).

What the commands run lives in the package, so that it works from an installed wheel: the
public ``npu_compile.diagnosis``, the demo with its small decoder, and the benchmarks.

The public entry point is ``npu_compile.cli.main`` (the ``npu-compile`` script and
``python -m npu_compile``). No other module of npu_compile imports from here (an import-linter
contract in the repository's ``pyproject.toml`` checks it), so ``import npu_compile`` never
loads the command line.
"""
