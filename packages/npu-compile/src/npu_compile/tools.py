"""What ``npu-compile demo``, ``bench`` and ``diagnose`` run, for scripts that run the same code.

The demo's small decoder language model (built in code, never downloaded) and its greedy
decoding; the timing statistics the commands share (rounds alternated between variants, the
median and its spread); the device the commands pick. A benchmark or a device check that uses
these measures what the installed package's commands measure.

Example:
    >>> import torch
    >>> from npu_compile.tools import DemoConfig, TinyDecoder, summarize
    >>> model = TinyDecoder(DemoConfig(layers=1)).eval()
    >>> summarize([1.0, 2.0, 3.0]).median
    2.0
"""

from __future__ import annotations

from npu_compile._tools.demo_model import DemoConfig, TinyDecoder, greedy_generate
from npu_compile._tools.device import best_device
from npu_compile._tools.timing import Summary, alternate, summarize

__all__ = [
    "DemoConfig",
    "Summary",
    "TinyDecoder",
    "alternate",
    "best_device",
    "greedy_generate",
    "summarize",
]
