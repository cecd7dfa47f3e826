"""The accuracy sweeps: PyTorch's Hugging Face list and a vision list, against eager, two ways.

    python benchmarks/accuracy.py --out DIR [--models NAME,...] [--suites hf,vision]
                                  [--modes inference,training,autocast_bf16,autocast_fp16]
                                  [--docs docs/accuracy.md] [--table-only]

Each model of ``_accuracy_models`` runs in a process of its own (a crash costs only that model),
in inference and in training (``--modes`` adds or chooses the autocast modes: inference under
bfloat16 or float16 autocast), with npu_compile (default options, the differential check of its
passes on) and with torch's ``aot_eager`` (see ``_accuracy``). ``DIR/accuracy.json`` gets every
outcome; a run of some models or some modes keeps the other results there. ``--docs`` writes
the Markdown table users read (``nox -s accuracy`` writes ``docs/accuracy.md``). The command
exits 0 once the sweep ran, whatever the outcomes: the table says them.
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

#: The longest one model may take, all four runs together, before it counts as an error.
PER_MODEL_SECONDS = 900


def _one(name: str, json_out: Path, modes: list[str]) -> None:
    """Run one model in ``modes``, with each backend; write its outcomes as JSON."""
    import torch
    from _accuracy import BACKENDS, run
    from _accuracy_models import HF, VISION

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    case = next(case for case in HF + VISION if case.name == name)
    results: dict[str, Any] = {"name": name, "suite": case.suite, "code": _commit()}
    for mode in modes:
        for backend in BACKENDS:
            started = time.perf_counter()
            outcome = run(case, mode, backend)
            results[f"{mode}/{backend}"] = {
                **dataclasses.asdict(outcome),
                "seconds": round(time.perf_counter() - started, 1),
            }
    json_out.write_text(json.dumps(results, indent=1))


def _sweep(
    names: list[str], out: Path, modes: list[str], previous: list[dict[str, Any]], order: list[str]
) -> list[dict[str, Any]]:
    """Run ``names`` in ``modes``; ``DIR/accuracy.json`` holds them merged into ``previous``.

    The file is written after each model, merged: a sweep stopped halfway keeps the results
    it had, of the earlier runs as of this one.
    """
    rows: list[dict[str, Any]] = []
    command = [sys.executable, __file__, "--modes", ",".join(modes)]
    with tempfile.TemporaryDirectory() as scratch:
        for index, name in enumerate(names, start=1):
            target = Path(scratch) / f"{index}.json"
            started = time.perf_counter()
            try:
                done = subprocess.run(
                    [*command, "--one", name, "--json", str(target)],
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
                    "suite": _suite(name),
                    "code": _commit(),
                    "crashed": failure or "no result",
                }
            rows.append(row)
            seconds = time.perf_counter() - started
            print(f"[{index}/{len(names)}] {name}: {_summary(row)} ({seconds:.0f} s)", flush=True)
            _write(out / "accuracy.json", {"models": _merge(previous, rows, modes, order)})
    return _merge(previous, rows, modes, order)


def _merge(
    previous: list[dict[str, Any]], fresh: list[dict[str, Any]], modes: list[str], order: list[str]
) -> list[dict[str, Any]]:
    """``fresh`` rows over ``previous`` ones, per model and per mode, in the lists' ``order``.

    A model run again in some modes keeps its results in the others. Each outcome carries the
    code it measured (``code``), so a table merged from runs at several commits names each.
    """
    from _accuracy import BACKENDS

    kept = {row["name"]: row for row in previous}
    for new in fresh:
        old = kept.get(new["name"])
        if old is None or "crashed" in old:
            kept[new["name"]] = new
            continue
        row = {key: value for key, value in old.items() if key != "crashed"}
        for key, outcome in row.items():
            if "/" in key:
                outcome.setdefault("code", old.get("code", "unknown"))
        if "crashed" in new:
            died = {"result": "error", "detail": f"the process died: {new['crashed']}"}
            fields: dict[str, Any] = {"worst": None, "where": "", "graphs": {}, "whole": None}
            for mode in modes:
                for backend in BACKENDS:
                    row[f"{mode}/{backend}"] = {**died, **fields, "code": new["code"]}
        else:
            for key, outcome in new.items():
                if "/" in key:
                    row[key] = {**outcome, "code": new["code"]}
        row["code"] = new["code"]
        kept[new["name"]] = row
    return [kept[name] for name in order if name in kept]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "the process failed"


def _suite(name: str) -> str:
    from _accuracy_models import HF

    return "hf" if any(case.name == name for case in HF) else "vision"


def _summary(row: dict[str, Any]) -> str:
    if "crashed" in row:
        return f"crashed ({row['crashed']})"
    return ", ".join(f"{key} {row[key]['result']}" for key in sorted(row) if "/" in key)


def _write(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _cell(row: dict[str, Any], key: str) -> str:
    if "crashed" in row:
        return "error: the process died"
    if key not in row:
        return "not run"
    outcome = row[key]
    result = outcome["result"]
    if result == "pass":
        worst = outcome["worst"]
        return "pass (exact)" if not worst else f"pass ({worst:.0e})"
    if result == "wrong":
        worst = outcome["worst"]
        far = "" if worst is None else f" {worst:.1e}"
        mode = key.split("/")[0]
        same = (
            " (as aot_eager)"
            if key.endswith("npu_compile") and _shared_with_torch(row, mode)
            else ""
        )
        return f"**wrong**{far} ({outcome['where'] or outcome['detail']}){same}"
    return f"{result}: {outcome['detail']}".replace("|", "/")


def _graphs(row: dict[str, Any]) -> str:
    """What npu_compile made of the model's FX graphs, inference then training."""
    if "crashed" in row:
        return "-"
    parts = []
    for mode in ("inference", "training"):
        if f"{mode}/npu_compile" not in row:
            continue
        graphs = row[f"{mode}/npu_compile"].get("graphs") or {}
        if not graphs:
            parts.append(f"{mode}: none compiled")
            continue
        words = [f"{graphs['captured']} of {graphs['fx_graphs']} captured"]
        if graphs.get("pieces"):
            words.append(f"{graphs['pieces']} in pieces")
        if graphs.get("fallbacks") or graphs.get("eager"):
            words.append(f"{graphs.get('fallbacks', 0) + graphs.get('eager', 0)} eager")
        whole = row[f"{mode}/npu_compile"].get("whole")
        steady = row[f"{mode}/npu_compile"].get("steady")
        if steady and steady["calls"]:
            replayed = f"steady calls replayed {steady['replays']}/{steady['calls']}"
            if steady.get("new_graphs"):
                replayed += f" ({steady['new_graphs']} the first of a graph Dynamo compiled again)"
            words.append(replayed)
        parts.append(f"{mode}: {', '.join(words)}" + (" (whole)" if whole else ""))
    return "; ".join(parts) or "-"


def _steady_share(rows: list[dict[str, Any]], mode: str) -> tuple[int, int, int]:
    """Replays, calls and first calls of new graphs in the steady state, over every model.

    Results from before ``new_graphs`` was recorded count none: where every steady call
    replayed, none was a new graph's first.
    """
    replays = calls = new = 0
    for r in rows:
        steady = (r.get(f"{mode}/npu_compile") or {}).get("steady")
        if steady:
            replays += steady["replays"]
            calls += steady["calls"]
            new += steady.get("new_graphs", 0)
    return replays, calls, new


#: How the table names each mode.
LABELS = {
    "inference": "inference",
    "training": "training",
    "autocast_bf16": "bf16 autocast",
    "autocast_fp16": "fp16 autocast",
}


def _modes_in(rows: list[dict[str, Any]]) -> list[str]:
    """The modes some row has results of, in the sweep's order."""
    from _accuracy import ALL_MODES

    return [mode for mode in ALL_MODES if any(f"{mode}/npu_compile" in r for r in rows)]


def _codes(rows: list[dict[str, Any]], modes: list[str]) -> str:
    """The code each mode measured: one list of commits, or one per group of modes."""
    by_mode: dict[str, set[str]] = {}
    for mode in modes:
        for r in rows:
            outcome = r.get(f"{mode}/npu_compile")
            code = r.get("code", "unknown") if outcome is None else outcome.get("code")
            by_mode.setdefault(mode, set()).add(code or r.get("code", "unknown"))
    groups: dict[tuple[str, ...], list[str]] = {}
    for mode, codes in by_mode.items():
        groups.setdefault(tuple(sorted(codes)), []).append(LABELS[mode])
    if len(groups) <= 1:
        only = next(iter(groups), ("unknown",))
        return ", ".join(f"`{code}`" for code in only)
    return "; ".join(
        ", ".join(f"`{code}`" for code in codes) + f" ({', '.join(labels)})"
        for codes, labels in groups.items()
    )


def _markdown(rows: list[dict[str, Any]]) -> str:
    from _accuracy import TOLERANCE

    modes = _modes_in(rows)

    def count(suite: str, key: str, result: str) -> int:
        return sum(
            1
            for r in rows
            if r["suite"] == suite
            and "crashed" not in r
            and key in r
            and r[key]["result"] == result
        )

    columns = [(mode, backend) for mode in modes for backend in ("npu_compile", "aot_eager")]
    heads = [
        f"{LABELS[mode]}, {'ours' if backend == 'npu_compile' else backend}"
        for mode, backend in columns
    ]
    autocast = [mode for mode in modes if mode.startswith("autocast")]
    tolerances = ", ".join(
        f"{LABELS[mode]} {TOLERANCE[mode]:g}" for mode in ("inference", "training", *autocast)
    )
    lines = [
        "# Accuracy against eager",
        "",
        "Generated by `nox -s accuracy` (`benchmarks/accuracy.py`); do not edit by hand. "
        "Packages measured (the last commit that changed `packages/`): "
        + _codes(rows, modes)
        + ".",
        "",
        "Every model is built from a small config (width 64, 2 layers, no dropout; never "
        "downloaded) and run several ways against eager: **inference** (`eval()`, `no_grad`, "
        "three calls and a call at another length or image size, every output compared), "
        "**training** (`train()`, two steps of forward and backward, the loss, every gradient "
        "and every buffer compared) and inference under **bf16 autocast** and **fp16 "
        "autocast** (`torch.autocast(device_type, dtype)`, against eager under the same "
        "autocast; `--modes` runs them). *ours* is `npu_compile` with its default options and the "
        "differential check of its passes on (`debug.aclgraph.check_passes`); `aot_eager` is "
        "torch's own backend without capture, which tells torch's limits from ours.",
        "",
        f"Tolerances, of each tensor's largest value: {tolerances}; every output must have "
        "eager's dtype too." + _autocast_note(rows, autocast) + " Outcomes: *pass*; **wrong** "
        "(how far off, relative, "
        "and where); *fallback* or *pieces* (the graph ran eagerly, or captured around what "
        "cannot be, with the reasons); *error* (its first line); *not run*. A pass gives the "
        "largest difference seen. *FX graphs, ours*: how many graphs Dynamo handed "
        "npu_compile, how many it captured, and whether each was captured whole.",
        "",
        "## Summary",
        "",
        "| suite | models | "
        + " | ".join(
            [*heads[:2], "captured whole (inference)", *heads[2:]]
            if modes[:1] == ["inference"]
            else heads
        )
        + " |",
        "|---|---|" + "---|" * (len(heads) + (modes[:1] == ["inference"])),
    ]
    for suite in ("hf", "vision"):
        members = [r for r in rows if r["suite"] == suite]
        if not members:
            continue
        cells = [f"{count(suite, f'{mode}/{backend}', 'pass')} pass" for mode, backend in columns]
        if modes[:1] == ["inference"]:
            whole = sum(
                1
                for r in members
                if "crashed" not in r
                and r["inference/npu_compile"].get("whole") is True
                and r["inference/npu_compile"]["result"] == "pass"
            )
            cells.insert(2, f"{whole} ({100 * whole / len(members):.0f}%)")
        lines.append(f"| {suite} | {len(members)} | " + " | ".join(cells) + " |")
    shares = [(mode, *_steady_share(rows, mode)) for mode in modes]
    measured = [share for share in shares if share[2]]
    if measured:
        lines += [
            "",
            "Steady-state calls that replayed (the graph runners' calls once each loop was warm: "
            "after the first call or step, before a new length; a graph captured and never "
            "replayed saves nothing on a device): "
            + "; ".join(
                f"{LABELS[mode]} {replays}/{calls} ({100 * replays / calls:.0f}%"
                + (
                    f"; {new} of the others the first call of a graph Dynamo compiled again "
                    f"in the steady state, {replays}/{calls - new} without them"
                    if new
                    else ""
                )
                + ")"
                for mode, replays, calls, new in measured
            )
            + "."
            + (
                " Dynamo compiles a model again when the model changes its own state on its "
                "first call: Hugging Face's classification losses set `config.problem_type` (a "
                "guard on it fails on the second step, under aot_eager too)."
                if any(share[3] for share in measured)
                else ""
            ),
        ]
    lines += ["", "## Goals", ""]
    for goal, met in _goals(rows, modes):
        lines.append(f"- {'met' if met else '**not met**'}: {goal}")
    for suite, title in (("hf", "PyTorch's Hugging Face list"), ("vision", "Vision models")):
        members = [r for r in rows if r["suite"] == suite]
        if not members:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| model | " + " | ".join(heads) + " | FX graphs, ours |",
            "|---|" + "---|" * (len(heads) + 1),
        ]
        for r in members:
            cells = [_cell(r, f"{mode}/{backend}") for mode, backend in columns]
            cells.append(_graphs(r))
            lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _autocast_note(rows: list[dict[str, Any]], autocast: list[str]) -> str:
    """Why the autocast tolerances are what they are, with what aot_eager gave."""
    if not autocast:
        return ""
    theirs = [
        r[f"{mode}/aot_eager"]["worst"]
        for r in rows
        for mode in autocast
        if f"{mode}/aot_eager" in r and r[f"{mode}/aot_eager"].get("worst") is not None
    ]
    largest = max(theirs, default=0.0)
    torch_gives = "eager's numbers exactly" if not largest else f"at most {largest:.1e} off"
    return (
        " Under autocast, eager and a graph run the same ops in the same low-precision dtype; "
        f"torch's aot_eager gives {torch_gives} here. A graph whose ops are decomposed or "
        "regrouped may round apart: the tolerances allow four rounding steps of bfloat16 "
        "(2^-8 relative) and of float16 (2^-11) and no more, and a region autocast leaves in "
        "float32 must come back in float32 (its values alone may round within them)."
    )


def _shared_with_torch(row: dict[str, Any], mode: str) -> bool:
    """Whether ours is wrong exactly where and as far as torch's aot_eager is."""
    ours, theirs = row.get(f"{mode}/npu_compile"), row.get(f"{mode}/aot_eager")
    return (
        ours is not None
        and theirs is not None
        and ours["result"] == theirs["result"] == "wrong"
        and ours["where"] == theirs["where"]
        and ours["worst"] is not None
        and theirs["worst"] is not None
        and abs(ours["worst"] - theirs["worst"]) <= 0.01 * theirs["worst"]
    )


def _goals(rows: list[dict[str, Any]], modes: list[str]) -> list[tuple[str, bool]]:
    ran = [r for r in rows if "crashed" not in r]
    runs = [(r, mode) for r in ran for mode in modes if f"{mode}/npu_compile" in r]
    ours_right = all(
        r[f"{mode}/aot_eager"]["result"] != "pass" or r[f"{mode}/npu_compile"]["result"] == "pass"
        for r, mode in runs
    )
    ours_alone = [
        f"{r['name']} ({LABELS[mode]})"
        for r, mode in runs
        if r[f"{mode}/npu_compile"]["result"] == "wrong" and not _shared_with_torch(r, mode)
    ]
    shared = [f"{r['name']} ({LABELS[mode]})" for r, mode in runs if _shared_with_torch(r, mode)]
    hf = [r for r in rows if r["suite"] == "hf"]
    whole = sum(
        1
        for r in hf
        if "crashed" not in r
        and "inference/npu_compile" in r
        and r["inference/npu_compile"]["result"] == "pass"
        and r["inference/npu_compile"].get("whole") is True
    )
    silent = "no wrong number without an error" + (
        f" ({', '.join(ours_alone)})" if ours_alone else ""
    )
    if shared:
        silent += (
            "; wrong numbers torch's aot_eager gives too, the same, come from torch's own "
            f"decompositions, not from this backend: {', '.join(shared)}"
        )
    died = [
        f"{r['name']} ({LABELS[mode]})"
        for r, mode in runs
        if r[f"{mode}/npu_compile"]["detail"].startswith("the process died")
    ]
    return [
        (
            "every model aot_eager gets right, ours gets right "
            f"({', '.join(LABELS[mode] for mode in modes)})",
            ours_right,
        ),
        (silent, not ours_alone),
        (
            f"at least 95% of the HF list captured whole in inference ({whole} of {len(hf)})",
            bool(hf) and whole >= 0.95 * len(hf),
        ),
        (
            "every model ran to an outcome (no process died)"
            + (f" ({', '.join(died)})" if died else ""),
            len(ran) == len(rows) and not died,
        ),
    ]


def _commit() -> str:
    """The packages measured: the last commit that changed ``packages/``, and whether they differ.

    The harness and the table change more often than the code they measure; naming the last
    commit of ``packages/`` keeps rows measured before and after a harness change comparable.
    """
    where = ["git", "-C", str(HERE.parent)]
    try:
        head = subprocess.run(
            [*where, "log", "-1", "--format=%h", "--abbrev=12", "--", "packages"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [*where, "status", "--porcelain", "--untracked-files=no", "--", "packages"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return f"{head} with uncommitted changes" if dirty else head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for accuracy.json")
    parser.add_argument("--models", help="comma-separated model names (default: every model)")
    parser.add_argument("--suites", default="hf,vision", help="hf, vision or both")
    parser.add_argument(
        "--modes",
        default="inference,training",
        help="comma-separated: inference, training, autocast_bf16, autocast_fp16 "
        "(default: inference,training)",
    )
    parser.add_argument("--docs", type=Path, help="write the Markdown table here")
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: write --docs from the results already in DIR/accuracy.json",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from _accuracy import ALL_MODES

    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(ALL_MODES))
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; known: {', '.join(ALL_MODES)}")
    modes = [mode for mode in ALL_MODES if mode in modes]
    if args.one:
        _one(args.one, args.json, modes)
        return 0
    if args.out is None:
        parser.error("--out DIR is required: where accuracy.json goes")
    from _accuracy_models import HF, VISION, select

    suites = set(args.suites.split(","))
    cases = [case for case in HF + VISION if case.suite in suites]
    try:
        names = select([case.name for case in cases], args.models)
    except ValueError as error:
        parser.error(str(error))
    results = args.out / "accuracy.json"
    if args.table_only:
        if args.docs is None or not results.exists():
            parser.error(f"--table-only needs --docs and the results of a sweep in {results}")
        rows = json.loads(results.read_text())["models"]
        _write_docs(args.docs, rows)
        return 0
    # The models and modes not run keep their last results (the table covers them all, each
    # outcome naming the code it measured).
    previous = json.loads(results.read_text())["models"] if results.exists() else []
    rows = _sweep(names, args.out, modes, previous, [case.name for case in HF + VISION])
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
