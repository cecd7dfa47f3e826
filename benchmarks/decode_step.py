"""Decode-step latency of the npu-compile demo model, and the backend's per-call overhead.

Variants: eager, npu_compile reduce-overhead, torch ``backend="cudagraphs"`` and torch
``mode="reduce-overhead"`` (the last two need CUDA and are skipped elsewhere with a note). Each
variant's output is checked against eager's (``matches_eager``, ``max_abs_diff``), and torch's
count of graphs its CUDA-graph paths skipped is recorded per variant (``cudagraph_skips``). The
ratios of npu_compile's time per step to eager's, ``cudagraphs``' and ``reduce-overhead``'s, each
with ``matches_eager``, are in the report's ``extra.ratios``. On every machine it also measures a
tiny MLP compiled with our backend against a trivial backend that returns ``gm.forward``
(target: at most 15 µs more per call).

Prints tables and writes ``benchmarks/results/decode_step_<device>.json``. It runs
``npu-compile bench`` with this folder's defaults: the benchmarks ship in the package
(``npu_compile._bench``), so users of an installed wheel run the same code and get the same JSON.

Usage: python benchmarks/decode_step.py [--device cuda] [--steps 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import RESULTS_DIR
from npu_compile.cli import main as npu_compile_main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, npu (default: best)")
    parser.add_argument("--steps", type=int, default=50, help="steps per timing round")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    args = parser.parse_args()
    command = ["bench", "--steps", str(args.steps), "--out", str(args.out)]
    command += ["--device", args.device] if args.device else []
    return npu_compile_main(command)


if __name__ == "__main__":
    sys.exit(main())
