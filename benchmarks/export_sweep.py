"""The export sweep: PyTorch's Hugging Face list and the vision list through ``dynamo_export``.

    python benchmarks/export_sweep.py --out DIR [--models NAME,...] [--suites hf,vision]
                                      [--docs docs/export.md] [--table-only]

Each model of ``_accuracy_models`` (and the two vision models ``_export_sweep`` adds) is exported
from its small config in ``eval()``, static, and the causal language models with
``dynamic=True`` too; the ``.air`` must parse as a GE ``ModelDef`` and the numpy runtime must
match eager (see ``_export_sweep``). Each model runs in a process of its own, so a crash costs
only that model. ``DIR/export.json`` gets every outcome; ``--docs`` writes the Markdown table
users read (``nox -s export-sweep`` writes ``docs/export.md``). The command exits 0 once the
sweep ran, whatever the outcomes: the table says them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: The longest one model may take, both exports together, before it counts as an error.
PER_MODEL_SECONDS = 600
#: Share of the two lists that must export and match eager.
GOAL = 0.95
#: The package the sweep measures; the table names its last commit.
PACKAGE = "packages/npu-graph-export"


def _cases() -> list[Any]:
    from _accuracy_models import HF
    from _export_sweep import EXPORT_VISION

    return [*HF, *EXPORT_VISION]


def _one(name: str, json_out: Path) -> None:
    """Export one model every way; write its outcomes as JSON."""
    import torch
    from _export_sweep import run

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    case = next(case for case in _cases() if case.name == name)
    results: dict[str, Any] = {"name": name, "suite": case.suite, "code": _commit()}
    for way in _ways(name):
        started = time.perf_counter()
        outcome = run(case, dynamic=way == "dynamic")
        results[way] = {
            **dataclasses.asdict(outcome),
            "seconds": round(time.perf_counter() - started, 1),
        }
    json_out.write_text(json.dumps(results, indent=1))


def _ways(name: str) -> tuple[str, ...]:
    """How a model is exported: static, and for a causal language model dynamic too."""
    from _export_sweep import causal_lm

    case = next(case for case in _cases() if case.name == name)
    return ("static", "dynamic") if causal_lm(case) else ("static",)


def _sweep(names: list[str], out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    suites = {case.name: case.suite for case in _cases()}
    with tempfile.TemporaryDirectory() as scratch:
        for index, name in enumerate(names, start=1):
            target = Path(scratch) / f"{index}.json"
            started = time.perf_counter()
            try:
                done = subprocess.run(
                    [sys.executable, __file__, "--one", name, "--json", str(target)],
                    capture_output=True,
                    text=True,
                    timeout=PER_MODEL_SECONDS,
                    check=False,
                )
                failure = None if done.returncode == 0 else _last_line(done.stderr)
            except subprocess.TimeoutExpired:
                failure = f"took more than {PER_MODEL_SECONDS} s"
            if failure is None and target.exists():
                row = json.loads(target.read_text())
            else:
                row = {
                    "name": name,
                    "suite": suites[name],
                    "code": _commit(),
                    "crashed": failure or "no result",
                    "ways": list(_ways(name)),
                }
            rows.append(row)
            seconds = time.perf_counter() - started
            print(f"[{index}/{len(names)}] {name}: {_summary(row)} ({seconds:.0f} s)", flush=True)
            _write(out / "export.json", {"models": rows})
    return rows


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "the process failed"


def _summary(row: dict[str, Any]) -> str:
    if "crashed" in row:
        return f"crashed ({row['crashed']})"
    return ", ".join(f"{way} {row[way]['result']}" for way in ("static", "dynamic") if way in row)


def _write(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _result(row: dict[str, Any], way: str) -> str | None:
    """The row's outcome one way: ``pass``, ``wrong``, ``refused``, ``error``; None if not run."""
    if "crashed" in row:
        return "error" if way in row["ways"] else None
    return row[way]["result"] if way in row else None


def _cell(row: dict[str, Any], way: str) -> str:
    if _result(row, way) is None:
        return "-"
    if "crashed" in row:
        return f"**error**: the process died ({row['crashed']})".replace("|", "/")
    outcome = row[way]
    result = outcome["result"]
    if result == "pass":
        worst = outcome["worst"]
        if outcome.get("zeros"):
            return "pass (eager gives only zeros)"
        # A model whose outputs are all zeros was compared on its hidden states as well.
        deeper = f", {outcome['detail']}" if outcome.get("detail") else ""
        return f"pass (exact{deeper})" if not worst else f"pass ({worst:.0e}{deeper})"
    if result == "wrong":
        return f"**wrong** ({outcome['detail']})".replace("|", "/")
    label = "refused" if result == "refused" else "**error**"
    kind = f" ({outcome['kind']})" if outcome.get("kind") else ""
    return f"{label}{kind}: {outcome['detail']}".replace("|", "/")


def _counts(rows: list[dict[str, Any]], way: str) -> dict[str, int]:
    counts = {"pass": 0, "wrong": 0, "refused": 0, "error": 0}
    for row in rows:
        result = _result(row, way)
        if result is not None:
            counts[result] += 1
    return counts


def _markdown(rows: list[dict[str, Any]]) -> str:
    from _export_sweep import TOLERANCE

    lines = [
        "# Export to GE: PyTorch's model lists through `dynamo_export` and the numpy runtime",
        "",
        "Generated by `nox -s export-sweep` (`benchmarks/export_sweep.py`); do not edit by hand. "
        "npu-graph-export measured (the last commit that changed it): "
        + ", ".join(f"`{code}`" for code in sorted({r.get("code", "unknown") for r in rows}))
        + ".",
        "",
        "Every model of PyTorch's Hugging Face benchmark list and of the vision list (the "
        "accuracy sweeps' models, [accuracy.md](accuracy.md), and BiT and Swin V2 from "
        "PyTorch's TIMM list) is built from a small config (width 64, 2 layers, no dropout; "
        "never downloaded), put in `eval()` and exported as a user would: "
        "`dynamo_export(model=m, **inputs)` with the inputs PyTorch's harness gives it, less "
        "the training targets, and `use_cache=False` where the model takes it. The `.air` "
        "must parse as a GE `ModelDef`; the numpy reference runtime then runs it and every "
        "output is compared with eager. The causal language models are also exported with "
        "`dynamic=True` and run at two lengths. A model whose outputs are all zeros in eager "
        "(its small random weights vanish through many normalised layers) is exported again "
        "with `output_hidden_states=True` and compared on those as well.",
        "",
        f"Tolerance: {TOLERANCE:g} of each output's largest value (the runtime computes in "
        "float32 in another order than eager; an exact GELU replaced by its tanh form is off "
        "by about 3e-5 and fails). Outcomes: *pass* (the largest difference seen); **wrong** "
        "(how far off, and where); *refused* (the exporter's one-line refusal, which names "
        "every op it lacks); **error** (something failed that should not: the exporter, the "
        "`.air` or the runtime).",
        "",
        "## Summary",
        "",
        "| list | models | pass | wrong | refused | error |",
        "|---|---|---|---|---|---|",
    ]
    groups = [
        ("PyTorch's HF list, static", [r for r in rows if r["suite"] == "hf"], "static"),
        ("vision list, static", [r for r in rows if r["suite"] == "vision"], "static"),
        ("causal LMs, `dynamic=True`", rows, "dynamic"),
    ]
    for title, members, way in groups:
        counted = [r for r in members if _result(r, way) is not None]
        if not counted:
            continue
        counts = _counts(counted, way)
        lines.append(
            f"| {title} | {len(counted)} | {counts['pass']} | {counts['wrong']} "
            f"| {counts['refused']} | {counts['error']} |"
        )
    lines += ["", "## Goals", ""]
    for goal, met in _goals(rows):
        lines.append(f"- {'met' if met else '**not met**'}: {goal}")
    for suite, title in (("hf", "PyTorch's Hugging Face list"), ("vision", "Vision models")):
        members = [r for r in rows if r["suite"] == suite]
        if not members:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| model | static | `dynamic=True` | GE ops |",
            "|---|---|---|---|",
        ]
        for r in members:
            ops = r.get("static", {}).get("ops") if "crashed" not in r else None
            lines.append(
                f"| {r['name']} | {_cell(r, 'static')} | {_cell(r, 'dynamic')} | {ops or '-'} |"
            )
    return "\n".join(lines) + "\n"


def _goals(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    passed = sum(1 for r in rows if _result(r, "static") == "pass")
    ways = ("static", "dynamic")
    wrong = [f"{r['name']} ({way})" for r in rows for way in ways if _result(r, way) == "wrong"]
    refusals = [
        r[way]["detail"]
        for r in rows
        if "crashed" not in r
        for way in ways
        if way in r and r[way]["result"] == "refused"
    ]
    errors = [f"{r['name']} ({way})" for r in rows for way in ways if _result(r, way) == "error"]
    return [
        (
            f"at least {GOAL:.0%} of the two lists export and match eager ({passed} of "
            f"{len(rows)}, {passed / max(len(rows), 1):.0%})",
            bool(rows) and passed >= GOAL * len(rows),
        ),
        ("no wrong number" + (f" ({', '.join(wrong)})" if wrong else ""), not wrong),
        (
            "every refusal is one line that names what is missing",
            all("\n" not in text for text in refusals),
        ),
        (
            "nothing failed that should not" + (f" ({', '.join(errors)})" if errors else ""),
            not errors,
        ),
    ]


def _commit() -> str:
    """The code measured: the last commit that changed the package, and whether it differs.

    The harness and the table change more often than the package; naming the package's last
    commit keeps rows measured before and after a harness change comparable.
    """
    where = ["git", "-C", str(HERE.parent)]
    try:
        head = subprocess.run(
            [*where, "log", "-1", "--format=%h", "--abbrev=12", "--", PACKAGE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [*where, "status", "--porcelain", "--untracked-files=no", "--", PACKAGE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return f"{head} with uncommitted changes" if dirty else head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for export.json")
    parser.add_argument("--models", help="comma-separated model names (default: every model)")
    parser.add_argument("--suites", default="hf,vision", help="hf, vision or both")
    parser.add_argument("--docs", type=Path, help="write the Markdown table here")
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: write --docs from the results already in DIR/export.json",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        _one(args.one, args.json)
        return 0
    if args.out is None:
        parser.error("--out DIR is required: where export.json goes")
    from _accuracy_models import select

    suites = set(args.suites.split(","))
    cases = [case for case in _cases() if case.suite in suites]
    try:
        names = select([case.name for case in cases], args.models)
    except ValueError as error:
        parser.error(str(error))
    results = args.out / "export.json"
    if args.table_only:
        if args.docs is None or not results.exists():
            parser.error(f"--table-only needs --docs and the results of a sweep in {results}")
        _write_docs(args.docs, json.loads(results.read_text())["models"])
        return 0
    previous = json.loads(results.read_text())["models"] if args.models and results.exists() else []
    rows = _sweep(names, args.out)
    if previous:
        # Some models again: the others keep their last results (the table covers them all).
        kept = {row["name"]: row for row in previous}
        kept.update({row["name"]: row for row in rows})
        rows = [kept[case.name] for case in cases if case.name in kept]
        _write(results, {"models": rows})
    if args.docs is not None:
        _write_docs(args.docs, rows)
    return 0


def _write_docs(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_markdown(rows), encoding="utf-8")
    os.replace(tmp, path)
    print(f"table written to {path}")


if __name__ == "__main__":
    sys.exit(main())
