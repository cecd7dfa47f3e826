"""The benchmarks of ``npu-compile bench`` (``benchmarks/decode_step.py`` runs that command).

They ship with the package so that the command works from an installed wheel.

Two measurements:

* decode-step latency of the demo model: eager, npu-compile reduce-overhead, torch
  ``backend="cudagraphs"`` and torch ``mode="reduce-overhead"`` (the last two only on CUDA);
* per-call overhead of the backend on a tiny MLP against a trivial backend that returns
  ``gm.forward`` (the price of keys, input copies and replay bookkeeping; target <= 15 µs).
"""

from __future__ import annotations

import datetime
import functools
import importlib
import json
import os
import platform
import secrets
import time
import timeit
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from npu_compile._tools import device as _device
from npu_compile._tools.demo_model import DemoConfig, TinyDecoder
from npu_compile._tools.timing import Summary, alternate, summarize
from npu_compile.errors import OutputError

__all__ = [
    "BenchRow",
    "BenchReport",
    "decode_step_bench",
    "mlp_overhead_bench",
    "run_all",
    "OVERHEAD_TARGET_US",
]

OVERHEAD_TARGET_US = 15.0


@dataclass
class BenchRow:
    """One measured variant.

    Attributes:
        name: Variant name.
        us_per_call: Best-round microseconds per call, ``None`` when skipped or failed.
        median_us: Median over the rounds of microseconds per call.
        spread_us: Interquartile range over the rounds of microseconds per call.
        note: Why it was skipped, or extra detail.
        matches_eager: Whether the variant's output equals eager's (within 1e-3, and the same
            greedy tokens); ``None`` where it was not checked.
        max_abs_diff: Largest absolute difference from eager's output.
        cudagraph_skips: Graphs torch's own CUDA-graph paths left uncaptured while the variant
            compiled and ran (torch's ``cudagraph_skips`` counter); such a graph runs without a
            CUDA graph, so its time is not a graph replay's.
    """

    name: str
    us_per_call: float | None
    note: str = ""
    median_us: float | None = None
    spread_us: float | None = None
    matches_eager: bool | None = None
    max_abs_diff: float | None = None
    cudagraph_skips: int | None = None


@dataclass
class BenchReport:
    """A benchmark's rows plus the context needed to compare figures later.

    Attributes:
        title: What was measured.
        device: Device string.
        rows: The variants.
        extra: Derived numbers (speedups, overhead difference; for the decode step
            ``ratios``: npu_compile's time over eager's, ``cudagraphs``' and
            ``reduce-overhead``'s, each with ``matches_eager``).
        environment: torch and package versions, host, the thread count the timings ran
            with, date.
    """

    title: str
    device: str
    rows: list[BenchRow]
    extra: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)

    def table(self) -> str:
        """Render as a fixed-width text table."""
        base = next((r.us_per_call for r in self.rows if r.name == "eager"), None)
        lines = [f"{self.title} on {self.device}"]
        header = (
            f"{'variant':<28} {'µs/call':>10} {'vs eager':>9} {'median':>10} {'spread':>8}  note"
        )
        lines += [header, "-" * len(header)]
        for row in self.rows:
            value = f"{row.us_per_call:10.1f}" if row.us_per_call is not None else f"{'-':>10}"
            ratio = f"{base / row.us_per_call:8.2f}x" if base and row.us_per_call else f"{'':>9}"
            median = f"{row.median_us:10.1f}" if row.median_us is not None else f"{'':>10}"
            spread = f"{row.spread_us:8.1f}" if row.spread_us is not None else f"{'':>8}"
            lines.append(f"{row.name:<28} {value} {ratio} {median} {spread}  {row.note}")
        for key, value in self.extra.items():
            if key == "ratios":
                lines += [_ratio_line(name, ratio) for name, ratio in value.items()]
            else:
                lines.append(f"{key}: {value}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)


_PACKAGES = ("npu_streams", "npu_mempool", "npu_static_kernel", "npu_graph_export", "npu_compile")


def _environment(device: torch.device, threads: int) -> dict[str, str]:
    """Context of a report; ``threads`` is the intra-op thread count the timings ran with."""
    versions = {name: str(importlib.import_module(name).__version__) for name in _PACKAGES}
    return {
        "torch": torch.__version__,
        **versions,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_threads": str(threads),
        "graph": _device.graph_implementation(device),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _time_steps(
    step: Callable[[], object], device: torch.device, steps: int, warmup: int
) -> Summary:
    """µs per call over 10 rounds of ``steps`` calls each (synchronised per round).

    The table's figure is the best round, the least disturbed one: on a shared machine, medians
    mostly measure the neighbours; the median and spread say how much they did.
    """
    for _ in range(warmup):
        step()
    _device.synchronize(device)

    def one_round() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _device.synchronize(device)
        return (time.perf_counter() - start) / steps * 1e6

    return alternate({"step": one_round}, min_rounds=10, max_rounds=10).summary("step")


def _note(progress: TextIO | None, text: str) -> None:
    if progress is not None:
        progress.write(f"  {text}\n")
        progress.flush()


def decode_step_bench(
    device: torch.device | None = None,
    steps: int = 50,
    config: DemoConfig | None = None,
    progress: TextIO | None = None,
) -> BenchReport:
    """Decode-step latency of the demo model under each way of running it.

    Args:
        device: Where to run; ``None``: the best available.
        steps: Steps per timing round.
        config: Model shape; ``None``: the demo defaults.
        progress: Stream for one line per variant (compiled ones compile and capture first);
            ``None``: silent.
    """
    device = device or _device.best_device()
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # a tiny model: threads only add noise (see `_environment`)
    try:
        return _decode_step_bench(device, steps, config, progress)
    finally:
        torch.set_num_threads(threads)


def _decode_step_bench(
    device: torch.device, steps: int, config: DemoConfig | None, progress: TextIO | None
) -> BenchReport:
    from npu_compile.backend import get_npu_backend

    model = TinyDecoder(config).to(device).eval()
    token, position = model.decode_step_inputs()
    with torch.no_grad():
        expected = model(token, position).clone()
    rows: list[BenchRow] = []

    def measure(name: str, fn: Callable[..., Any], note: str = "") -> None:
        _note(progress, f"decode step: {name}")
        torch._dynamo.reset()
        skips = _cudagraph_skips()
        try:
            with torch.no_grad():
                timing = _time_steps(lambda: fn(token, position), device, steps, warmup=3)
                # A fast variant that computes something else is no result: check it too.
                row = BenchRow(name, timing.min, note, **_compare(fn(token, position), expected))
                row.median_us, row.spread_us = timing.median, timing.spread
            if row.matches_eager is False:
                row.note = f"DIFFERS from eager (max |diff| {row.max_abs_diff:.3g}) {note}".strip()
        except Exception as error:  # a variant that fails must not hide the others
            row = BenchRow(name, None, f"failed: {type(error).__name__}: {error}"[:160])
        after = _cudagraph_skips()
        if skips is not None and after is not None:
            row.cudagraph_skips = after - skips
            if row.cudagraph_skips:
                skipped = f"torch skipped CUDA graphs for {row.cudagraph_skips} graph(s)"
                row.note = f"{row.note} {skipped}".strip()
        rows.append(row)

    measure("eager", model)
    backend = get_npu_backend()
    measure("npu_compile reduce-overhead", torch.compile(model, backend=backend, dynamic=False))
    # Read before the next measure's torch._dynamo.reset() clears the backend's statistics: a
    # variant that fell back to eager must not pass for a captured one.
    if rows[-1].us_per_call is not None and (backend.stats.fallbacks or not backend.stats.captured):
        stats = backend.stats
        reasons = (
            "; ".join(
                f"{stats.fallback_reasons[name]}: {message}" for name, message in stats.fallbacks
            )
            or "nothing captured"
        )
        rows[-1].note = f"NOT captured, ran eagerly: {reasons}"[:160]
    if device.type == "cuda":
        measure("torch cudagraphs", torch.compile(model, backend="cudagraphs", dynamic=False))
        measure(
            "torch mode=reduce-overhead",
            torch.compile(model, mode="reduce-overhead", dynamic=False),
            "inductor + CUDA graph trees",
        )
    else:
        for name in ("torch cudagraphs", "torch mode=reduce-overhead"):
            rows.append(BenchRow(name, None, f"skipped: needs CUDA (device is {device.type})"))
    torch._dynamo.reset()
    extra: dict[str, Any] = {}
    eager = rows[0].us_per_call
    ours = rows[1].us_per_call
    if eager and ours:
        extra["speedup (eager / npu_compile)"] = round(eager / ours, 3)
    extra["ratios"] = _ratios(rows)
    environment = _environment(device, torch.get_num_threads())
    return BenchReport("decode step (demo model)", str(device), rows, extra, environment)


#: The decode-step ratios reported, each npu_compile's time per step over another variant's.
_OURS = "npu_compile reduce-overhead"
_RATIOS = {
    "npu_compile / eager": "eager",
    "npu_compile / cudagraphs": "torch cudagraphs",
    "npu_compile / reduce-overhead": "torch mode=reduce-overhead",
}


def _ratios(rows: list[BenchRow]) -> dict[str, dict[str, Any]]:
    """npu_compile's µs per step over each other variant's (below 1: npu_compile is faster).

    Each ratio carries ``matches_eager``: true only when both variants gave eager's output (a
    fast variant that computes something else is no comparison), ``None`` when one of them was
    not checked; ``ratio`` is ``None``, with a ``note``, when a variant has no time (skipped or
    failed). ``cudagraph_skips`` is the other variant's: with skips, its time is not a graph
    replay's.
    """
    by_name = {row.name: row for row in rows}
    ours = by_name[_OURS]
    ratios: dict[str, dict[str, Any]] = {}
    for key, name in _RATIOS.items():
        other = by_name[name]
        entry: dict[str, Any] = {"over": name, "ratio": None, "matches_eager": None}
        if ours.us_per_call and other.us_per_call:
            entry["ratio"] = round(ours.us_per_call / other.us_per_call, 3)
        else:
            missing = ours if not ours.us_per_call else other
            entry["note"] = f"{missing.name}: {missing.note or 'no time'}"
        if ours.matches_eager is not None and other.matches_eager is not None:
            entry["matches_eager"] = ours.matches_eager and other.matches_eager
        entry["cudagraph_skips"] = other.cudagraph_skips
        ratios[key] = entry
    return ratios


def _ratio_line(name: str, ratio: dict[str, Any]) -> str:
    """One ratio of ``_ratios`` as a line of the table."""
    value = "-" if ratio["ratio"] is None else f"{ratio['ratio']:.3f}x"
    matches = {True: "matches eager", False: "DIFFERS from eager", None: "not checked"}
    text = f"{name}: {value} ({matches[ratio['matches_eager']]})"
    return f"{text}; {ratio['note']}" if ratio.get("note") else text


def _compare(got: torch.Tensor, expected: torch.Tensor) -> dict[str, Any]:
    """How far ``got`` (a variant's logits) is from eager's; read before the next call."""
    difference = (got.float() - expected.float()).abs().max().item()
    same_tokens = torch.equal(got.argmax(dim=-1), expected.argmax(dim=-1))
    close = torch.allclose(got.float(), expected.float(), rtol=1e-3, atol=1e-3)
    return {"matches_eager": bool(close and same_tokens), "max_abs_diff": float(difference)}


def _cudagraph_skips() -> int | None:
    """The graphs torch's CUDA-graph paths did not capture so far (``None``: not available)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return int(counters["inductor"]["cudagraph_skips"])


class _TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def _own_code_mlp(tag: str) -> _TinyMLP:
    """A `_TinyMLP` whose ``forward`` has its own code object.

    Dynamo keeps compiled entries per code object; giving each variant its own lets all variants
    live at once without any of them checking another backend's cache entry on each call.
    """
    code = _TinyMLP.forward.__code__.replace(co_name=f"forward_{tag}")
    forward = types.FunctionType(code, _TinyMLP.forward.__globals__, f"forward_{tag}")
    cls = type(f"_TinyMLP_{tag}", (_TinyMLP,), {"forward": forward})
    model: _TinyMLP = cls()
    return model.eval()


def _trivial_backend(gm: torch.fx.GraphModule, example_inputs: list[object]) -> Callable[..., Any]:
    forward: Callable[..., Any] = gm.forward
    return forward


def mlp_overhead_bench(
    number: int = 500, repeat: int = 41, progress: TextIO | None = None
) -> BenchReport:
    """Per-call cost of the backend on a tiny CPU MLP vs a backend returning ``gm.forward``.

    Single-threaded, under ``no_grad``. Each round times every variant back to back (``number``
    calls each), so slow drifts of a shared machine hit all variants alike. The table shows each
    variant's best round; the overhead is the median over rounds of the paired difference
    (ours minus trivial within the same round), which is robust to bursts of load.

    Args:
        number: Calls per variant per round.
        repeat: Rounds.
        progress: Stream for progress lines (every quarter of the rounds); ``None``: silent.
    """
    from npu_compile.backend import get_npu_backend

    device = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        environment = _environment(device, torch.get_num_threads())
        _note(progress, "per-call overhead: compiling the tiny MLP")
        x = torch.randn(4, 16)
        eager = _own_code_mlp("eager")
        variants: dict[str, Callable[..., Any]] = {
            "eager": eager,
            "trivial backend (gm.forward)": torch.compile(
                _own_code_mlp("trivial"), backend=_trivial_backend
            ),
            "npu_compile reduce-overhead": torch.compile(
                _own_code_mlp("ours"), backend=get_npu_backend()
            ),
        }
        taken: dict[str, list[float]] = {name: [] for name in variants}
        paired: list[float] = []
        with torch.no_grad():
            for fn in variants.values():
                for _ in range(20):
                    fn(x)
            for round_index in range(repeat):
                if round_index % max(1, repeat // 4) == 0:
                    _note(progress, f"per-call overhead: round {round_index + 1}/{repeat}")
                names = list(variants)
                if round_index % 2:  # alternate the order so neither variant always goes first
                    names.reverse()
                this_round: dict[str, float] = {}
                for name in names:
                    seconds = timeit.timeit(functools.partial(variants[name], x), number=number)
                    this_round[name] = seconds / number * 1e6
                    taken[name].append(this_round[name])
                paired.append(
                    this_round["npu_compile reduce-overhead"]
                    - this_round["trivial backend (gm.forward)"]
                )
        summaries = {name: summarize(values) for name, values in taken.items()}
        rows = [
            BenchRow(name, each.min, median_us=each.median, spread_us=each.spread)
            for name, each in summaries.items()
        ]
        torch._dynamo.reset()
    finally:
        torch.set_num_threads(threads)
    overhead = summarize(paired).median
    extra = {
        "overhead vs trivial backend (µs, median of paired rounds)": round(overhead, 2),
        "target (µs)": OVERHEAD_TARGET_US,
        "within target": overhead <= OVERHEAD_TARGET_US,
    }
    return BenchReport(
        "tiny MLP per-call overhead (1 thread)", str(device), rows, extra, environment
    )


def _write_result(path: Path, text: str) -> None:
    """Write ``path`` whole: a temporary file in its directory, synced, renamed into place.

    A reader sees the old file or the new one; a failure (a full disk) leaves the old one and no
    temporary file. The directory is the user's ``--out``, trusted as given; a symbolic link
    planted at the result file itself is refused (the rename would replace it, never follow it,
    but a link where the result belongs was put there by someone: say so and write nothing).

    Raises:
        OutputError: ``path`` is a symbolic link, or the file cannot be written; the message
            names the file and what to do.
    """
    todo = "free space or choose another --out"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            raise OutputError(
                f"{path} is a symbolic link; a result file is never written through a link: "
                "remove it or choose another --out"
            )
        temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(temporary, flags, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OutputError:
        raise
    except OSError as error:
        raise OutputError(f"cannot write {path} ({error.strerror or error}); {todo}") from error


def run_all(
    out_dir: Path | None,
    device: torch.device | None = None,
    steps: int = 50,
    print_fn: Callable[[str], None] = print,
    progress: TextIO | None = None,
) -> list[BenchReport]:
    """Run both benchmarks, print their tables, and write ``decode_step.json`` to ``out_dir``.

    The MLP overhead benchmark always runs on CPU (it measures host-side Python cost).
    ``progress`` receives a line per variant and per quarter of the MLP rounds.

    Raises:
        OutputError: The result file is a symbolic link or cannot be written.
    """
    device = device or _device.best_device()
    reports = [decode_step_bench(device, steps, progress=progress)]
    print_fn(reports[0].table())
    reports.append(mlp_overhead_bench(progress=progress))
    print_fn("")
    print_fn(reports[1].table())
    if out_dir is not None:
        path = out_dir / f"decode_step_{device.type}.json"
        document = {"reports": [r.to_json() for r in reports]}
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
        _write_result(path, text)
        print_fn(f"\nwrote {path}")
    return reports
