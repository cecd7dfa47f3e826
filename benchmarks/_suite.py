"""What ``device_suite.sh`` needs that bash does badly: the environment, JSON records, merging.

    python benchmarks/_suite.py code --summary FILE [--root DIR]
    python benchmarks/_suite.py environment --summary FILE [--dry-run]
    python benchmarks/_suite.py step --summary FILE --name NAME --status STATUS ...
    python benchmarks/_suite.py fold --into FILE --name NAME --source JSON
    python benchmarks/_suite.py finish --summary FILE --out DIR

Every file is rewritten whole and atomically after each step, so a suite cut short (the machine
taken back, the command's own time limit) leaves readable JSON behind. Only ``environment``
imports torch. ``code`` runs first, before any step: the summary names the code it measured
(``_code.py``: commit, uncommitted changes, a hash of the tree that holds without ``.git``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import _code

#: What ``environment`` exits with when there is no accelerator (and no ``--dry-run``).
NO_DEVICE = 3

#: Environment variables that change what the figures mean, recorded set or not (``null``: unset):
#: the caching allocator's settings (a pool's segments and whether blocks are cached at all), the
#: NPU task queue, launches made synchronous (every replay and copy then waits for the device),
#: the devices visible, the CUDA libraries' modes and the host's thread counts.
RECORDED_VARIABLES = (
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NPU_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TASK_QUEUE_ENABLE",
    "CUDA_LAUNCH_BLOCKING",
    "ASCEND_LAUNCH_BLOCKING",
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "MULTI_STREAM_MEMORY_REUSE",
    "INF_NAN_MODE_ENABLE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
#: Variables of these families are recorded too when set: torch's, its compilers', the CUDA and
#: Ascend runtimes'. A name that looks like a credential never is.
RECORDED_PREFIXES = (
    "PYTORCH_",
    "TORCH_",
    "TORCHDYNAMO_",
    "TORCHINDUCTOR_",
    "CUDA_",
    "CUBLAS",
    "CUDNN",
    "NCCL_",
    "ASCEND_",
    "ACL_",
    "HCCL_",
)
_CREDENTIAL_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")


def recorded_variables(environ: dict[str, str]) -> dict[str, str | None]:
    """The variables of ``RECORDED_VARIABLES`` (``None`` when unset) and of its families."""
    found: dict[str, str | None] = {name: environ.get(name) for name in RECORDED_VARIABLES}
    for name in sorted(environ):
        credential = any(word in name.upper() for word in _CREDENTIAL_WORDS)
        if name.startswith(RECORDED_PREFIXES) and not credential:
            found.setdefault(name, environ[name])
    return found


def _load(path: Path) -> dict[str, Any]:
    if path.exists():
        try:
            document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return document
        except json.JSONDecodeError:
            pass
    return {}


def _write(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _version(module: str) -> str | None:
    try:
        return str(getattr(importlib.import_module(module), "__version__", "?"))
    except Exception as error:  # absent, or broken on import: both are worth knowing
        return f"unavailable ({type(error).__name__}: {error})"[:200]


def _command(*argv: str) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"failed: {error}"
    return (done.stdout + done.stderr).strip()


def code(args: argparse.Namespace) -> int:
    """The code about to be measured, into the summary, read before any step runs."""
    path = Path(args.summary)
    document = _load(path)
    try:
        document["code"] = _code.identity(Path(args.root))
    except OSError as error:  # an unreadable file must not stop the run; say so instead
        document["code"] = {"commit": None, "error": f"{type(error).__name__}: {error}"[:300]}
        print(f"warning: the code's identity is unknown: {document['code']['error']}")
    else:
        print(_code.describe(document["code"]))
    _write(path, document)
    return 0


def environment(args: argparse.Namespace) -> int:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dry_run": args.dry_run,
        "versions": {
            name: _version(name)
            for name in (
                "torch",
                "numpy",
                "google.protobuf",
                "transformers",
                "pytest",
                "hypothesis",
                "filelock",
                "triton",
            )
        },
    }
    import torch

    info["torch_cuda"] = torch.version.cuda
    info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    accelerator = (
        torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    )
    info["accelerator"] = None if accelerator is None else accelerator.type
    if accelerator is not None and accelerator.type == "cuda":
        index = torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        info["device"] = {
            "name": properties.name,
            "capability": f"{properties.major}.{properties.minor}",
            "memory_gib": round(properties.total_memory / 2**30, 1),
            "count": torch.cuda.device_count(),
        }
    elif accelerator is not None:
        info["device"] = {"type": accelerator.type, "count": torch.accelerator.device_count()}
    info["nvidia_smi"] = _command(
        "nvidia-smi",
        "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit,mig.mode.current",
        "--format=csv",
    )
    info["npu_smi"] = _command("npu-smi", "info")
    info["variables"] = recorded_variables(dict(os.environ))
    # The tool's whole report goes to the log only.
    print(_command("nvidia-smi") or _command("npu-smi", "info") or "no nvidia-smi or npu-smi")
    path = Path(args.summary)
    document = _load(path)
    document["environment"] = info
    _write(path, document)
    print(json.dumps(info, indent=2, default=str))
    if accelerator is None and not args.dry_run:
        print(
            f"error: no accelerator: torch {torch.__version__} sees no CUDA or NPU device; run the "
            "suite on a device machine, or pass --dry-run for the CPU check of the suite itself",
            file=sys.stderr,
        )
        return NO_DEVICE
    return 0


def _tail(path: Path, lines: int) -> list[str]:
    if not path.exists():
        return []
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def _digest(name: str, out: Path) -> dict[str, Any] | None:
    """The few numbers of a step's own file worth seeing in the summary."""
    if name == "smoke":
        smoke = _load(out / "smoke.json")
        if not smoke:
            return None
        checks = smoke.get("checks", {})
        return {
            "finished": smoke.get("finished"),
            "running when it ended": smoke.get("running"),
            "checks": {n: "ok" if e.get("ok") else "FAILED" for n, e in checks.items()},
        }
    if name == "device_tests":
        path = out / "device_tests.xml"
        if not path.exists():
            return None
        root = ET.parse(path).getroot()
        counts = ("tests", "failures", "errors", "skipped")
        digest: dict[str, Any] = {k: int(root.get(k) or 0) for k in counts}
        digest["passed"] = digest["tests"] - sum(digest[k] for k in counts[1:])
        # A skipped test checked nothing: how many, and why (the tests that never ran on the
        # device are among them, under the conftest's reason).
        reasons: dict[str, int] = {}
        for skipped in root.iter("skipped"):
            reason = (skipped.get("message") or "no reason given").strip()[:200]
            reasons[reason] = reasons.get(reason, 0) + 1
        digest["skip reasons"] = dict(sorted(reasons.items(), key=lambda item: -item[1]))
        digest["not passed"] = [
            f"{case.get('classname')}::{case.get('name')}: {kind.tag} {kind.get('message')}"[:300]
            for case in root.iter("testcase")
            for kind in case
            if kind.tag in ("failure", "error")
        ]
        return digest
    return None


def step(args: argparse.Namespace) -> int:
    path = Path(args.summary)
    document = _load(path)
    entry: dict[str, Any] = {
        "name": args.name,
        "status": args.status,
        "exit_code": int(args.rc) if args.rc else None,
        "seconds": args.seconds,
        "timeout_s": args.timeout,
        "estimate_s": args.estimate,
    }
    digest = _digest(args.name, Path(args.out)) if args.out else None
    note = args.note
    if args.name == "device_tests" and digest is not None and digest["skipped"]:
        # Named in the step's own line: a step whose tests were skipped passed for nothing.
        skipped = (
            f"{digest['skipped']} of {digest['tests']} tests skipped, {digest['passed']} passed"
        )
        if document.get("environment", {}).get("dry_run"):
            skipped += " (dry run: no device)"
        note = f"{note}; {skipped}" if note else skipped
    if note:
        entry["note"] = note
    if digest is not None:
        entry["digest"] = digest
    if args.status not in ("ok", "skipped") and args.log:
        entry["log_tail"] = _tail(Path(args.log), 40)
    steps = [s for s in document.get("steps", []) if s.get("name") != args.name]
    document["steps"] = [*steps, entry]
    _write(path, document)
    return 0


def fold(args: argparse.Namespace) -> int:
    """Put a benchmark's JSON into the one benchmarks file, under the step's name."""
    into = Path(args.into)
    document = _load(into)
    source = Path(args.source)
    if source.exists():
        document[args.name] = json.loads(source.read_text(encoding="utf-8"))
    else:
        document[args.name] = {"missing": f"the step wrote no {source.name}"}
    _write(into, document)
    return 0


def _figures(out: Path) -> dict[str, Any]:
    """The figures the targets are read from, out of benchmarks.json.

    The replay overhead per row with its bound (only host-bound rows judge the 1.2x target), and
    the decode step's ratios of npu_compile to the other variants.
    """
    benchmarks = _load(out / "benchmarks.json")
    figures: dict[str, Any] = {}
    replay = benchmarks.get("replay_overhead") or {}
    if isinstance(replay.get("rows"), dict):
        figures["replay_overhead"] = {
            "target": replay.get("target"),
            "rows": {
                name: {k: row.get(k) for k in ("runner_over_raw", "bound", "device_share")}
                for name, row in replay["rows"].items()
            },
        }
    reports = (benchmarks.get("decode_step") or {}).get("reports") or []
    if reports and "ratios" in reports[0].get("extra", {}):
        figures["decode_step"] = reports[0]["extra"]["ratios"]
    return figures


def _figure_lines(figures: dict[str, Any]) -> list[str]:
    lines = []
    replay = figures.get("replay_overhead")
    if replay:
        target = replay.get("target") or {}
        rows = ", ".join(
            f"{name} {row['runner_over_raw']:.2f}x {row['bound']}"
            for name, row in replay["rows"].items()
            if row.get("runner_over_raw") is not None
        )
        verdict = "met" if target.get("met") else "NOT met" if target.get("met") is False else "-"
        lines.append(f"replay overhead: {rows}; target (host-bound rows): {verdict}")
        if target.get("note"):
            lines.append(f"  {target['note']}")
    decode = figures.get("decode_step")
    if decode:
        parts = []
        for name, ratio in sorted(decode.items(), key=lambda item: "eager" not in item[0]):
            value = "-" if ratio.get("ratio") is None else f"{ratio['ratio']:.2f}x"
            matches = {True: "matches eager", False: "DIFFERS from eager"}.get(
                ratio.get("matches_eager"), "not checked"
            )
            parts.append(f"{name} {value} ({matches})")
        lines.append(f"decode step: {'; '.join(parts)}")
    return lines


def finish(args: argparse.Namespace) -> int:
    path = Path(args.summary)
    document = _load(path)
    steps = document.get("steps", [])
    document["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    document["seconds"] = args.seconds
    document["not ok"] = [s["name"] for s in steps if s["status"] not in ("ok", "skipped")]
    document["skipped"] = [s["name"] for s in steps if s["status"] == "skipped"]
    figures = _figures(Path(args.out))
    if figures:
        document["figures"] = figures
    _write(path, document)
    files = sorted(p.name for p in Path(args.out).iterdir() if not p.name.startswith("."))
    width = max(len(s["name"]) for s in steps) if steps else 10
    print(f"\n{'step':<{width}}  {'status':<10} {'seconds':>7} {'timeout':>7}  note")
    for s in steps:
        note = s.get("note", "")
        print(
            f"{s['name']:<{width}}  {s['status']:<10} {s['seconds']:>7} {s['timeout_s']:>7}  {note}"
        )
    for s in steps:  # what failed inside the two steps that check many things at once
        digest = s.get("digest") or {}
        failed = [n for n, state in digest.get("checks", {}).items() if state != "ok"]
        if s["name"] == "smoke" and digest:
            print(f"smoke: {len(digest['checks'])} checks, failed: {', '.join(failed) or 'none'}")
        if s["name"] == "device_tests" and digest:
            counts = {k: digest[k] for k in ("tests", "passed", "failures", "errors", "skipped")}
            print(f"device tests: {counts}")
            for line in digest["not passed"]:
                print(f"  {line[:200]}")
            for reason, count in digest["skip reasons"].items():
                print(f"  skipped {count}: {reason}")
    for line in _figure_lines(figures):
        print(line)
    if "code" in document:
        code = document["code"]
        print(_code.describe(code) if "tree_sha256" in code else f"code: {code.get('error')}")
    print(f"total {args.seconds} s; files in {args.out}: {', '.join(files)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    identify = commands.add_parser("code", help="the code about to be measured, into the summary")
    identify.add_argument("--summary", required=True, help="summary.json to update")
    identify.add_argument("--root", default=str(_code.ROOT), help="the tree (default: this one)")
    env = commands.add_parser("environment", help="versions and the device, into the summary")
    env.add_argument("--summary", required=True, help="summary.json to update")
    env.add_argument("--dry-run", action="store_true", help="no device needed")
    record = commands.add_parser("step", help="record one step's outcome in the summary")
    record.add_argument("--summary", required=True, help="summary.json to update")
    record.add_argument("--name", required=True, help="the step")
    record.add_argument("--status", required=True, help="ok, failed, timed out, skipped")
    record.add_argument("--rc", default="", help="its exit code (empty: it did not run)")
    record.add_argument("--seconds", type=int, default=0, help="how long it ran")
    record.add_argument("--timeout", type=int, default=0, help="the time it was given")
    record.add_argument("--estimate", type=int, default=0, help="its estimated device time")
    record.add_argument("--note", default="", help="why it was skipped, or what went wrong")
    record.add_argument("--log", default=None, help="its log, whose tail a failed step keeps")
    record.add_argument("--out", default=None, help="the suite's output directory (digests)")
    merge = commands.add_parser("fold", help="put a benchmark's JSON into benchmarks.json")
    merge.add_argument("--into", required=True, help="benchmarks.json")
    merge.add_argument("--name", required=True, help="the step")
    merge.add_argument("--source", required=True, help="the JSON file the benchmark wrote")
    done = commands.add_parser("finish", help="close the summary and print the table")
    done.add_argument("--summary", required=True, help="summary.json")
    done.add_argument("--out", required=True, help="the suite's output directory")
    done.add_argument("--seconds", type=int, default=0, help="the suite's wall time")
    args = parser.parse_args()
    handlers = {
        "code": code,
        "environment": environment,
        "step": step,
        "fold": fold,
        "finish": finish,
    }
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
