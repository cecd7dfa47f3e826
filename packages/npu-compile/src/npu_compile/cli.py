"""Command-line entry point ``npu-compile``: ``doctor``, ``demo``, ``bench``, ``diagnose``.

The commands live in the private ``npu_compile._cli`` package; this module is the public path of
``main`` (the ``npu-compile`` script and ``python -m npu_compile`` call it).
"""

from __future__ import annotations

import sys

from npu_compile._cli.commands import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
