"""First call of each model of PyTorch's Hugging Face list: npu_compile against Inductor.

    python benchmarks/first_call.py --out DIR [--models NAME,...]

The first call of a compiled model pays for everything before its first result: Dynamo's trace,
AOT autograd, the backend's own work (npu_compile: passes, planning, the capture; Inductor: code
generation and the C++ or Triton build) and the run. Each model (inference, ``torch.no_grad()``,
the inputs of the accuracy sweep) is compiled in a fresh process per backend, so nothing is
warm: Inductor gets an empty cache directory of its own (``TORCHINDUCTOR_CACHE_DIR``), and
npu_compile runs without static kernels (its default). The two backends alternate which goes
first from one model to the next, and each runs once. Wall time on a shared machine is noisy:
read the ratios, not single rows.

``DIR/first_call.json`` gets every time and the ratio npu_compile / Inductor per model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BACKENDS = ("npu_compile", "inductor")
#: The most one first call may take before it counts as failed.
LIMIT_SECONDS = 600


def _child(name: str, backend: str) -> dict[str, Any]:
    """Compile and call one model once; what the first call cost."""
    import warnings

    import torch
    from _accuracy_models import HF, build

    warnings.simplefilter("ignore")
    case = next(case for case in HF if case.name == name)
    model = build(case).eval()
    inputs = case.inputs(case.lengths[0], 0)
    if backend == "npu_compile":
        import npu_compile

        config = npu_compile.CompilerConfig()
        chosen: Any = npu_compile.get_npu_backend(compiler_config=config)
        static = bool(config.experimental_config.aclgraph._aclnn_static_shape_kernel)
    else:
        chosen, static = "inductor", False
    with torch.no_grad():
        compiled = torch.compile(model, backend=chosen)
        started = time.perf_counter()
        compiled(**inputs)
        seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "static_kernels": static}


def _run_child(name: str, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", name, "--backend", backend],
                capture_output=True,
                text=True,
                env=env,
                timeout=LIMIT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"took more than {LIMIT_SECONDS} s"}
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"error": (lines[-1] if lines else "the process failed")[:300]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for first_call.json")
    parser.add_argument("--models", help="comma-separated model names (default: the HF list)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.backend)))
        return 0
    if args.out is None:
        parser.error("--out DIR is required: where first_call.json goes")
    from _accuracy_models import HF, select

    try:
        names = select([case.name for case in HF], args.models)
    except ValueError as error:
        parser.error(str(error))
    rows: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        order = BACKENDS if index % 2 == 0 else BACKENDS[::-1]
        row: dict[str, Any] = {"model": name, "first": order[0]}
        for backend in order:
            row[backend] = _run_child(name, backend)
        ours, theirs = row["npu_compile"].get("seconds"), row["inductor"].get("seconds")
        row["ratio"] = round(ours / theirs, 3) if ours and theirs else None
        rows.append(row)
        print(
            f"{name}: npu_compile {ours} s, inductor {theirs} s, ratio {row['ratio']}",
            flush=True,
        )
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "first_call.json").write_text(json.dumps({"models": rows}, indent=1))
    ratios = [row["ratio"] for row in rows if row["ratio"] is not None]
    if ratios:
        print(
            f"ratio npu_compile / inductor over {len(ratios)} models: median "
            f"{statistics.median(ratios):.2f}, largest {max(ratios):.2f}, "
            f"over 0.5: {sum(r > 0.5 for r in ratios)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
