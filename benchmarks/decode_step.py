"""Decode-step latency of the npu-compile demo model, and the backend's per-call overhead.

Variants: eager, npu_compile reduce-overhead, torch ``backend="cudagraphs"`` and torch
``mode="reduce-overhead"`` (the last two need CUDA and are skipped elsewhere with a note). On
every machine it also measures a tiny MLP compiled with our backend against a trivial backend
that returns ``gm.forward`` (target: at most 15 µs more per call).

Prints tables and writes ``benchmarks/results/decode_step_<device>.json``. The code lives in the
package (``npu_compile._cli.bench``) so ``npu-compile bench`` runs the same thing.

Usage: python benchmarks/decode_step.py [--device cuda] [--steps 50]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from npu_compile import _device
from npu_compile._cli.bench import run_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, npu (default: best)")
    parser.add_argument("--steps", type=int, default=50, help="steps per timing round")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results"), help="directory for the JSON file"
    )
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    out = Path(args.out)
    try:  # fail now, not after the benchmarks ran, when the JSON cannot be written
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--out {args.out}: cannot create it ({error.strerror})")
    run_all(out, _device.best_device(args.device), steps=args.steps)


if __name__ == "__main__":
    main()
