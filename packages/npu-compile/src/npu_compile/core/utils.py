"""TorchAir-compatible ``core.utils``: the package logger.

``logger`` is the standard :mod:`logging` logger named ``npu_compile``: fallbacks to eager and
other decisions of the backend are reported through it. ``logger.setLevel(logging.DEBUG)`` or
``logging.basicConfig`` shows them.
"""

from __future__ import annotations

import logging

__all__ = ["logger"]

logger = logging.getLogger("npu_compile")
