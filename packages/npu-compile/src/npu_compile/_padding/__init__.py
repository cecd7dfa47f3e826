"""Padding calls up to the capture sizes, and the proof that it keeps a graph's numbers.

Two doors: :func:`plan_padding`, which the planner calls to decide whether a graph with a
dynamic batch may be padded (``plan``: the guards and the proof), and :class:`Padding`, the
decision the plan records and the build wraps around the runner (``padded``: pad the inputs,
replay, cut the outputs back). The proof is an abstract interpretation of the ATen graph that
tracks, per value, which input rows each output row depends on (``proof``, with the per-op rules
in ``rules``, ``ops`` and ``views``, and the batch symbol found in ``symbol``); a graph is padded
only where every output row depends on its own input row alone.
"""

from __future__ import annotations

from npu_compile._padding.padded import Padding
from npu_compile._padding.plan import plan_padding

__all__ = ["Padding", "plan_padding"]
