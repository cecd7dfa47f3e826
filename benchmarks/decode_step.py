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
(``npu_compile._tools.bench``), so users of an installed wheel run the same code and get the
same JSON.

An npu_compile time is a graph replay's only if the backend captured the graphs and replayed
them. This script watches every graph runner and every fallback of the backends the bench makes;
a row whose backend fell back (a graph run eagerly, a capture that failed), captured nothing or
never replayed is refused: its time leaves the JSON (``us_per_call`` and the figures derived from
it are ``null``, ``refused`` says why), and the script exits 1.

Usage: python benchmarks/decode_step.py [--device cuda] [--steps 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import npu_compile.backend
from _common import RESULTS_DIR, write_json
from npu_compile.cli import main as npu_compile_main

#: The row each backend the bench makes is timed in, in the order it makes them: the decode
#: step's, then the tiny MLP's (``npu_compile._tools.bench.run_all``).
TIMED_ROWS = (
    ("decode step", "npu_compile reduce-overhead"),
    ("tiny MLP", "npu_compile reduce-overhead"),
)


@dataclass
class Watched:
    """What one backend did: its graph runners (kept alive to be read) and its fallbacks."""

    runners: list[Any] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)

    def refusal(self) -> str | None:
        """Why this backend's time is no replay's, or ``None`` when it captured and replayed."""
        counts = {
            name: sum(getattr(r.counters, name) for r in self.runners)
            for name in ("captures", "replays", "fallbacks")
        }
        problems = []
        if self.fallbacks:
            problems.append(f"fell back to eager: {'; '.join(self.fallbacks)}"[:300])
        if counts["fallbacks"]:
            failed = [r.name for r in self.runners if r.counters.fallbacks]
            problems.append(f"a capture failed and its runner ran eagerly: {', '.join(failed)}")
        if not counts["captures"]:
            problems.append("captured no graph")
        elif not counts["replays"]:
            problems.append("never replayed a graph")
        return "; ".join(problems) or None

    def summary(self) -> dict[str, Any]:
        return {
            "runners": [
                {"name": r.name, **{k: getattr(r.counters, k) for k in _COUNTS}}
                for r in self.runners
            ],
            "fallbacks": self.fallbacks,
        }


_COUNTS = ("captures", "replays", "fallbacks", "eager_calls")


@contextlib.contextmanager
def watching() -> Iterator[list[Watched]]:
    """Every backend ``get_npu_backend`` makes inside, in order, with its runners and fallbacks.

    ``torch._dynamo.reset()``, which the bench calls before each variant, gives a backend new,
    empty statistics and lets its runners go, so they cannot be read after the bench; npu-compile
    offers no public hook for them either. The statistics' own record methods are watched
    instead, and what they record is counted for the backend made last: the bench compiles with
    one backend at a time.
    """
    from npu_compile.backend import BackendStats as stats_class

    made: list[Watched] = []
    real = npu_compile.backend.get_npu_backend
    record_runner = stats_class.record_runner
    record_fallback = stats_class.record_fallback

    def get_npu_backend(*args: Any, **kwargs: Any) -> Any:
        made.append(Watched())
        return real(*args, **kwargs)

    def keep_runner(stats: Any, runner: Any) -> None:
        if made:
            made[-1].runners.append(runner)
        record_runner(stats, runner)

    def keep_fallback(stats: Any, graph: str, reason: Any, message: str) -> None:
        if made:
            made[-1].fallbacks.append(f"{graph} ({reason}): {message}"[:200])
        record_fallback(stats, graph, reason, message)

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (npu_compile.backend, "get_npu_backend", get_npu_backend),
        (stats_class, "record_runner", keep_runner),
        (stats_class, "record_fallback", keep_fallback),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield made
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def refuse(report: dict[str, Any], row_name: str, why: str) -> None:
    """Take a refused row's time, and every figure made from it, out of its report."""
    for row in report["rows"]:
        if row["name"] == row_name:
            row.update(us_per_call=None, median_us=None, spread_us=None)
            row["refused"] = why
            row["note"] = f"REFUSED, not a graph replay's time: {why}"[:300]
    extra = report.get("extra", {})
    for ratio in extra.get("ratios", {}).values():
        ratio["ratio"] = None
        ratio["note"] = f"{row_name}: refused: {why}"[:300]
    for key in list(extra):
        if key.startswith(("speedup", "overhead", "within target")):
            extra[key] = None


def check(path: Path, made: list[Watched]) -> int:
    """Refuse each npu_compile row whose backend did not capture and replay; 1 if one was."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if len(made) != len(TIMED_ROWS):
        # The rows are told apart by the order of their backends: without it, none is trusted.
        why = f"the bench made {len(made)} backend(s), not {len(TIMED_ROWS)}: which timed what?"
        made = [Watched(fallbacks=[why]) for _ in TIMED_ROWS]
    checked = {}
    for (title, row_name), watched, report in zip(
        TIMED_ROWS, made, document["reports"], strict=True
    ):
        if not report["title"].startswith(title):
            raise SystemExit(f"the bench's reports changed: {report['title']!r}, not {title!r}")
        verdict = watched.refusal()
        checked[title] = {"refused": verdict, **watched.summary()}
        if verdict is None:
            print(f"{title} / {row_name}: captured and replayed: {watched.summary()['runners']}")
        else:
            refuse(report, row_name, verdict)
            print(f"REFUSED {title} / {row_name}: {verdict}")
    document["replay_check"] = checked
    write_json(path, document)
    return 1 if any(entry["refused"] for entry in checked.values()) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, npu (default: best)")
    parser.add_argument("--steps", type=int, default=50, help="steps per timing round")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    args = parser.parse_args()
    command = ["bench", "--steps", str(args.steps), "--out", str(args.out)]
    command += ["--device", args.device] if args.device else []
    with watching() as made:
        code = npu_compile_main(command)
    written = sorted(args.out.glob("decode_step_*.json"), key=lambda p: p.stat().st_mtime)
    if code != 0 or not written:
        return code or 1
    return check(written[-1], made)


if __name__ == "__main__":
    sys.exit(main())
