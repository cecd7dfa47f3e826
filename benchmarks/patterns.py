"""The patterns sweep: how training and serving code calls torch.compile, against eager, two ways.

    python benchmarks/patterns.py --out DIR [--patterns NAME,...] [--docs docs/patterns.md]
                                  [--table-only]

Each pattern of ``_patterns`` (DDP and FSDP2 on two gloo processes, a compiled train step,
compiled autograd, channels_last nets, a float32 region under autocast, torchao's int8 weights,
peft's LoRA adapters, a diffusers UNet loop) runs in a process of its own per backend (a crash
costs only that run), with the registered ``npu_compile`` backend and with torch's
``aot_eager``, each against eager. ``DIR/patterns.json`` gets every outcome; ``--docs`` writes
the Markdown table users read (``nox -s patterns`` writes ``docs/patterns.md``). A pattern whose
library is not installed (torchao, peft, diffusers: ``nox -s patterns`` installs them) is
skipped. The command exits 0 once the sweep ran, whatever the outcomes: the table says them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
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

from accuracy import _commit, _last_line, _write  # noqa: E402

#: The longest one pattern may take with one backend before it counts as an error.
PER_RUN_SECONDS = 900
#: The libraries a row names the versions of.
LIBRARIES = ("torch", "transformers", "torchao", "peft", "diffusers")


def _versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _one(name: str, backend: str, json_out: Path) -> None:
    """Run one pattern with one backend; write its outcome as JSON."""
    import dataclasses

    import torch
    from _patterns import PATTERNS, run

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    started = time.perf_counter()
    outcome = run(PATTERNS[name], backend)
    result = {**dataclasses.asdict(outcome), "seconds": round(time.perf_counter() - started, 1)}
    json_out.write_text(json.dumps(result, indent=1))


def _sweep(
    names: list[str], out: Path, previous: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    from _patterns import BACKENDS, PATTERNS

    command = [sys.executable, __file__]
    rows: list[dict[str, Any]] = []
    code, versions = _commit(), _versions()
    with tempfile.TemporaryDirectory() as scratch:
        for index, name in enumerate(names, start=1):
            row: dict[str, Any] = {
                "name": name,
                "title": PATTERNS[name].title,
                "code": code,
                "versions": versions,
            }
            for backend in BACKENDS:
                target = Path(scratch) / f"{index}-{backend}.json"
                started = time.perf_counter()
                try:
                    done = subprocess.run(
                        [*command, "--one", name, "--backend", backend, "--json", str(target)],
                        capture_output=True,
                        text=True,
                        timeout=PER_RUN_SECONDS,
                        check=False,
                    )
                    failure = None if done.returncode == 0 else _last_line(done.stderr)
                except subprocess.TimeoutExpired:
                    failure = f"took more than {PER_RUN_SECONDS} s"
                if failure is None and target.exists():
                    row[backend] = json.loads(target.read_text())
                else:
                    detail = f"the process died: {failure or 'no result'}"
                    row[backend] = {"result": "error", "detail": detail[:300]}
                seconds = time.perf_counter() - started
                print(
                    f"[{index}/{len(names)}] {name}, {backend}: {_summary(row[backend])} "
                    f"({seconds:.0f} s)",
                    flush=True,
                )
            rows.append(row)
            kept = {**previous, **{r["name"]: r for r in rows}}
            _write(out / "patterns.json", {"patterns": _ordered(kept)})
    return rows


def _ordered(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    from _patterns import PATTERNS

    return [rows[name] for name in PATTERNS if name in rows]


def _summary(outcome: dict[str, Any]) -> str:
    detail = outcome.get("detail") or ""
    return str(outcome["result"]) + (f" ({detail[:120]})" if detail else "")


def _cell(outcome: dict[str, Any]) -> str:
    result = outcome["result"]
    worst = outcome.get("worst")
    if result == "pass":
        return "pass (exact)" if not worst else f"pass ({worst:.0e})"
    if result == "wrong":
        far = "" if worst is None or "dtype" in outcome["detail"] else f" {worst:.1e}"
        return f"**wrong**{far} ({outcome['detail']})".replace("|", "/")
    if result == "error":
        return f"**error**: {outcome['detail']}".replace("|", "/")
    return f"{result}: {outcome['detail']}".replace("|", "/")


def _graphs(outcome: dict[str, Any]) -> str:
    graphs = outcome.get("graphs") or {}
    if not graphs:
        return "-"
    words = [f"{graphs['captured']} of {graphs['fx_graphs']} captured"]
    if graphs.get("pieces"):
        words.append(f"{graphs['pieces']} in pieces")
    if graphs.get("fallbacks") or graphs.get("eager"):
        words.append(f"{graphs.get('fallbacks', 0) + graphs.get('eager', 0)} eager")
    return ", ".join(words) + (" (whole)" if outcome.get("whole") else "")


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _replays(outcome: dict[str, Any]) -> str:
    replays = outcome.get("replays") or {}
    if not replays:
        return "-"
    words = [_n(replays["captures"], "capture"), _n(replays["replays"], "replay")]
    if replays.get("recaptures"):
        reasons = outcome.get("recapture_reasons") or {}
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        words.append(_n(replays["recaptures"], "recapture") + (f" ({why})" if why else ""))
    for key, label in (("eager_calls", "eager call"), ("runner_fallbacks", "runner fallback")):
        if replays.get(key):
            words.append(_n(replays[key], label))
    return ", ".join(words)


def _steady(outcome: dict[str, Any]) -> str:
    steady = outcome.get("steady")
    if not steady or not steady["calls"]:
        return "-"
    share = 100 * steady["replays"] / steady["calls"]
    return f"{steady['replays']}/{steady['calls']} ({share:.0f}%)"


def _share(counts: tuple[int, int]) -> float:
    return counts[0] / counts[1] if counts[1] else 0.0


def _steady_total(rows: list[dict[str, Any]]) -> tuple[int, int]:
    replays = calls = 0
    for r in rows:
        steady = r["npu_compile"].get("steady")
        if steady and r["npu_compile"]["result"] in ("pass", "pieces"):
            replays += steady["replays"]
            calls += steady["calls"]
    return replays, calls


def _dynamo(row: dict[str, Any]) -> str:
    parts = []
    for backend, label in (("npu_compile", "ours"), ("aot_eager", "aot_eager")):
        dynamo = row[backend].get("dynamo") or {}
        if not dynamo:
            parts.append(f"{label}: -")
            continue
        words = f"{_n(dynamo['frames'], 'frame')}, {_n(dynamo['graph_breaks'], 'break')}"
        if "ddp_buckets" in dynamo:
            words += f", {_n(dynamo['ddp_buckets'], 'bucket')}"
        parts.append(f"{label}: {words}")
    return "; ".join(parts)


def _markdown(rows: list[dict[str, Any]]) -> str:
    from _accuracy import TOLERANCE
    from _patterns import PATTERNS

    def count(backend: str, result: str) -> int:
        return sum(1 for r in rows if r[backend]["result"] == result)

    codes = sorted({r.get("code", "unknown") for r in rows})
    versions: dict[str, set[str]] = {}
    for r in rows:
        for name, version in (r.get("versions") or {}).items():
            versions.setdefault(name, set()).add(version)
    lines = [
        "# Patterns against eager",
        "",
        "Generated by `nox -s patterns` (`benchmarks/patterns.py`); do not edit by hand. "
        "Packages measured (the last commit that changed `packages/`): "
        + ", ".join(f"`{code}`" for code in codes)
        + ". Libraries: "
        + ", ".join(f"{name} {', '.join(sorted(v))}" for name, v in versions.items())
        + ".",
        "",
        "The accuracy sweep ([accuracy.md](accuracy.md)) compiles a model and calls it; these "
        "patterns compile the way training and serving code does: around DDP (whose buckets "
        "Dynamo's DDPOptimizer splits the graph at) and FSDP2 on two gloo processes over "
        "loopback, around a whole train step or a backward (compiled autograd), over "
        "channels_last nets, a float32 region inside autocast, a tensor subclass (torchao), "
        "adapters switched at run time (peft) and a denoising loop (diffusers). Models come "
        "from small configs (never downloaded): the HF Llama and ResNet of the accuracy "
        "sweep, an MLP of four `Linear(512, 512)`, a two-stage `UNet2DConditionModel`. Each "
        "pattern runs in a process of its own per backend, eagerly and compiled with the "
        'same seed on the same data: *ours* is the registered `backend="npu_compile"` with '
        "its default options, `aot_eager` torch's own backend without capture, which tells "
        "torch's limits from ours.",
        "",
        f"Tolerances, as the accuracy sweep's: training {TOLERANCE['training']:g} (losses and "
        "every parameter after each step, on every rank), inference "
        f"{TOLERANCE['inference']:g} and bfloat16 autocast {TOLERANCE['autocast_bf16']:g} of "
        "each tensor's largest value; dtypes must be eager's, and channels_last outputs keep "
        "eager's memory format. Outcomes: *pass* (the largest difference seen); **wrong** (how "
        "far off, relative, and where); *fallback* or *pieces* (graphs ran eagerly, or "
        "captured around what cannot be, with the reasons npu_compile logged); **error** (its "
        "first line; for a distributed pattern, the rank's); *skipped* (a library not "
        "installed). *FX graphs, ours*: graphs npu_compile was handed and captured "
        "(`npu_compile.backend.process_stats()`); *replays, ours*: what its graph runners did "
        "(`npu_mempool.counters`, for the whole process); *steady calls replayed*: of the graph "
        "runners' calls once the loop was warm (after its first step or call; after the third "
        "for FSDP2, whose runners need two more to find its parameters moving), how many "
        "replayed: a graph captured and never replayed saves nothing on a device; *Dynamo*: "
        "frames compiled, graph breaks and DDPOptimizer's buckets, per backend.",
        "",
        "## Summary",
        "",
        "| backend | patterns | pass | wrong | fallback or pieces | error | skipped |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, label in (("npu_compile", "ours"), ("aot_eager", "aot_eager")):
        lines.append(
            f"| {label} | {len(rows)} | {count(backend, 'pass')} | {count(backend, 'wrong')} "
            f"| {count(backend, 'fallback') + count(backend, 'pieces')} "
            f"| {count(backend, 'error')} | {count(backend, 'skipped')} |"
        )
    torch_right = [r for r in rows if r["aot_eager"]["result"] == "pass"]
    ours_too = [r for r in torch_right if r["npu_compile"]["result"] == "pass"]
    lines += [
        "",
        f"Of the {len(torch_right)} patterns aot_eager gets right, ours gets {len(ours_too)} "
        "right"
        + (
            f"; not: {', '.join(r['name'] for r in torch_right if r not in ours_too)}."
            if len(ours_too) < len(torch_right)
            else "."
        ),
        "",
        "Steady-state calls that replayed, over the patterns ours passes: "
        + (
            "{}/{} ({:.0f}%).".format(*_steady_total(rows), 100 * _share(_steady_total(rows)))
            if _steady_total(rows)[1]
            else "none measured."
        ),
        "",
        "## Patterns",
        "",
        "| pattern | what | ours | aot_eager | FX graphs, ours | replays, ours "
        "| steady calls replayed | Dynamo |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        title = PATTERNS[r["name"]].title if r["name"] in PATTERNS else r.get("title", "")
        ours, theirs = r["npu_compile"], r["aot_eager"]
        cells = [
            f"`{r['name']}`",
            title,
            _cell(ours),
            _cell(theirs),
            _graphs(ours),
            _replays(ours),
            _steady(ours),
            _dynamo(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write_docs(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_markdown(rows), encoding="utf-8")
    os.replace(tmp, path)
    print(f"table written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for patterns.json")
    parser.add_argument("--patterns", help="comma-separated pattern names (default: every one)")
    parser.add_argument("--docs", type=Path, help="write the Markdown table here")
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: write --docs from the results already in DIR/patterns.json",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        _one(args.one, args.backend, args.json)
        return 0
    if args.out is None:
        parser.error("--out DIR is required: where patterns.json goes")
    from _accuracy_models import select
    from _patterns import PATTERNS

    try:
        names = select(list(PATTERNS), args.patterns)
    except ValueError as error:
        parser.error(str(error).replace("model", "pattern"))
    results = args.out / "patterns.json"
    if args.table_only:
        if args.docs is None or not results.exists():
            parser.error(f"--table-only needs --docs and the results of a sweep in {results}")
        _write_docs(args.docs, json.loads(results.read_text())["patterns"])
        return 0
    # Some patterns again: the others keep their last results (the table covers them all).
    previous = (
        {row["name"]: row for row in json.loads(results.read_text())["patterns"]}
        if args.patterns and results.exists()
        else {}
    )
    fresh = _sweep(names, args.out, previous)
    rows = _ordered({**previous, **{row["name"]: row for row in fresh}})
    if args.docs is not None:
        _write_docs(args.docs, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
