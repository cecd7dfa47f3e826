"""Is a step Host Bound or Device Bound, and what does reduce-overhead change?

On an accelerator the host enqueues kernels asynchronously. Per step, :func:`diagnose` measures
the wall time of the Python call (host enqueue time) and the event-timed span of the device work
it queued. When the host takes about as long as the device span, the device waited for the host
between kernels: the step is Host Bound, and capturing it into one graph (one launch) is the cure.
When the device span is clearly longer, the device is the bottleneck: Device Bound. On CPU there
is no separate device: all work is host work, reported as such.

The figures are meant to be repeated. The eager and the compiled step are timed in alternating
rounds (eager, compiled, then compiled, eager, ...), so that a slow drift of a busy machine hits
both alike; each is reported with its min, median and spread. The rounds stop once each median is
known within ``tolerance`` (the half-width of its 95 % confidence interval, relative to it), or
after ``max_seconds``: then the report says :data:`TOO_NOISY` instead of a verdict, and gives no
speed-up.

The package root re-exports :func:`diagnose`, :class:`DiagnoseReport` and :class:`PhaseTiming`;
this module also holds the verdict strings :data:`HOST_BOUND`, :data:`DEVICE_BOUND` and
:data:`TOO_NOISY`. It is
named ``diagnosis`` so that no module hides behind the function: ``npu_compile.diagnose`` is
the function and ``npu_compile.diagnosis`` this module. ``npu-compile diagnose`` runs it from
the command line.

Example::

    from npu_compile.diagnosis import HOST_BOUND, diagnose

    report = diagnose(model, tokens, positions, steps=20)
    print(report)  # a table, the verdict and the speed-up of reduce-overhead
    if report.verdict == HOST_BOUND:  # TOO_NOISY: repeat on a quieter machine
        ...
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from npu_compile._accel import first_tensor_device
from npu_compile._tools.timing import (
    DEFAULT_MAX_SECONDS,
    DEFAULT_TOLERANCE,
    DEVICE_BOUND,
    HOST_BOUND,
    TOO_NOISY,
    PhaseTiming,
    compare_steps,
)
from npu_compile.configs.compiler_config import CompilerConfig

# Defined with the measurement they come from; public here.
PhaseTiming.__module__ = __name__

__all__ = [
    "diagnose",
    "DiagnoseReport",
    "PhaseTiming",
    "HOST_BOUND",
    "DEVICE_BOUND",
    "TOO_NOISY",
]


@dataclass(frozen=True)
class DiagnoseReport:
    """Result of :func:`diagnose`.

    Attributes:
        device: Where the step ran (``"cpu"``, ``"cuda:0"``, ``"npu:0"``).
        steps: Steps measured per phase (after warm-up): the rounds, one step of each per round.
        eager: Timings of the step run eagerly.
        compiled: Timings under reduce-overhead, or ``None`` when not asked for.
        separable: Whether device time could be measured apart from host time.
        settled: Whether every median was known within ``tolerance`` before the time limit;
            ``False``: the figures are too noisy for a verdict.
        tolerance: The bound on each median's uncertainty (0.05: ±5 %).
        seconds: Wall time of the measured rounds.
    """

    device: str
    steps: int
    eager: PhaseTiming
    compiled: PhaseTiming | None
    separable: bool
    settled: bool = True
    tolerance: float = DEFAULT_TOLERANCE
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        """The eager step's verdict: :data:`HOST_BOUND` or :data:`DEVICE_BOUND`.

        :data:`TOO_NOISY` when the rounds did not settle: the figures cannot be repeated.
        """
        return self.eager.verdict if self.settled else TOO_NOISY

    @property
    def speedup(self) -> float | None:
        """Eager step time divided by the reduce-overhead step time (``None`` when too noisy)."""
        if not self.settled or self.compiled is None or self.compiled.step_ms <= 0:
            return None
        return self.eager.step_ms / self.compiled.step_ms

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (for ``--json``): every field, the verdict and the speedup."""
        document = asdict(self)
        document.update(verdict=self.verdict, speedup=self.speedup, summary=self.summary())
        return document

    def summary(self) -> str:
        """One sentence: the verdict with its numbers, or why there is none."""
        e = self.eager
        if not self.settled:
            phases = [p for p in (self.eager, self.compiled) if p is not None]
            worst = max(phases, key=lambda p: p.uncertainty if p.uncertainty is not None else 0.0)
            after = f"after {self.steps} rounds in {self.seconds:.1f} s"
            if worst.uncertainty is None or math.isinf(worst.uncertainty):
                known = f"{after} there are too few steps to bound the median {worst.label} step"
            else:
                known = (
                    f"{after} the median {worst.label} step is known to "
                    f"±{worst.uncertainty:.1%} only, not within ±{self.tolerance:.0%}"
                )
            return (
                f"{TOO_NOISY}: {known}; no verdict. Repeat on a quieter machine, or allow more "
                "time (max_seconds, --max-seconds)."
            )
        if not self.separable:
            return (
                f"{HOST_BOUND}: on {self.device} there is no separate device, so all "
                f"{e.host_ms:.3f} ms per step are host time (device time is not separable)."
            )
        assert e.device_ms is not None
        ratio = e.host_ms / e.device_ms if e.device_ms > 0 else float("inf")
        if e.verdict == HOST_BOUND:
            why = "the device waits for kernel launches; reduce-overhead removes them"
        else:
            why = "the device is the bottleneck; capture saves little"
        return (
            f"{e.verdict}: host enqueue {e.host_ms:.3f} ms vs device {e.device_ms:.3f} ms per "
            f"step (host/device = {ratio:.2f}); {why}."
        )

    def __str__(self) -> str:
        rows = [("", "min ms", "median ms", "spread ms", "median ±", "device ms", "verdict")]
        for phase in (self.eager, self.compiled):
            if phase is None:
                continue
            device = f"{phase.device_ms:.3f}" if phase.device_ms is not None else "n/a (cpu)"
            rows.append(
                (
                    phase.label,
                    _ms(phase.min_ms),
                    f"{phase.step_ms:.3f}",
                    _ms(phase.spread_ms),
                    _percent(phase.uncertainty),
                    device,
                    phase.verdict,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        order = " and ".join(p.label for p in (self.eager, self.compiled) if p is not None)
        lines = [
            f"diagnose on {self.device}: {self.steps} rounds of {order} in turn, "
            f"{self.seconds:.1f} s (per step; median ± is its 95% confidence)"
        ]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
            lines.append("  ".join(cells).rstrip())
        lines.append(self.summary())
        if self.compiled is not None and self.speedup is not None:
            lines.append(
                f"reduce-overhead: {self.eager.step_ms:.3f} -> {self.compiled.step_ms:.3f} ms per "
                f"step ({self.speedup:.2f}x)."
            )
        return "\n".join(lines)


def diagnose(
    fn: Callable[..., Any],
    *inputs: Any,
    steps: int = 20,
    warmup: int = 3,
    compare: bool = True,
    compiler_config: CompilerConfig | None = None,
    progress: TextIO | None = None,
    trace: str | os.PathLike[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    timer: Callable[[], float] = time.perf_counter,
) -> DiagnoseReport:
    """Measure host enqueue time vs device time per step and say Host Bound or Device Bound.

    The step ``fn(*inputs)`` runs under ``torch.no_grad()``: eagerly and (with ``compare``)
    compiled with the npu-compile backend in reduce-overhead mode, so the report shows what
    capture changes. The two are timed in alternating rounds, one step of each per round, until
    each median is known within ``tolerance`` (and at least ``steps`` rounds are done), or until
    ``max_seconds`` have passed: then the verdict is :data:`TOO_NOISY` and there is no speed-up.
    ``fn`` must be safe to call repeatedly (a decode step that writes a KV cache at a fixed
    position is).

    Args:
        fn: The step: a function or ``nn.Module``.
        *inputs: Its inputs.
        steps: Fewest measured rounds (steps per phase); a median needs 8 to be bounded.
        warmup: Unmeasured steps first (compilation and capture happen here).
        compare: Also measure the step under reduce-overhead.
        compiler_config: Options for the compiled phase; ``None``: defaults.
        progress: Stream for a line as each phase starts and ends (the compiled phase compiles
            and captures first, which takes seconds); ``None``: silent.
        trace: Write a Chrome/Perfetto trace of the measured steps here (``torch.profiler``;
            the compiled phase shows npu_mempool's capture, replay and input-copy ranges).
        tolerance: Bound on each median's uncertainty, relative to it (0.05: ±5 %, at 95 %
            confidence).
        max_seconds: Time limit of the measured rounds, in seconds.
        timer: The host clock, in seconds (as ``timeit``'s ``timer``).

    Returns:
        A :class:`DiagnoseReport`; ``print(report)`` gives a table and the verdict.

    Raises:
        ValueError: ``steps`` or ``warmup`` is not an int in range, or ``tolerance`` or
            ``max_seconds`` is not a positive number.
        TypeError: ``fn`` is not callable.
    """

    def _is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def _is_positive(value: object) -> bool:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        )

    if not (_is_int(steps) and _is_int(warmup)) or steps < 1 or warmup < 0:
        raise ValueError(
            f"steps must be an int >= 1 and warmup an int >= 0, got steps={steps!r}, "
            f"warmup={warmup!r}"
        )
    if not (_is_positive(tolerance) and _is_positive(max_seconds)):
        raise ValueError(
            f"tolerance and max_seconds must be positive numbers, got tolerance={tolerance!r}, "
            f"max_seconds={max_seconds!r}"
        )
    if not callable(fn):
        raise TypeError(
            f"diagnose(fn, *inputs): fn must be the step to measure (a function or nn.Module), "
            f"got {type(fn).__name__}"
        )
    device = first_tensor_device(inputs)
    if isinstance(fn, torch.nn.Module) and not any(isinstance(x, torch.Tensor) for x in inputs):
        for tensor in _state_tensors(fn):
            device = tensor.device
            break
    variants: dict[str, Callable[..., Any]] = {"eager": fn}
    if compare:
        from npu_compile.backend import get_npu_backend

        backend = get_npu_backend(compiler_config=compiler_config)
        variants["reduce-overhead"] = torch.compile(fn, backend=backend, dynamic=False)
        _say(progress, "  diagnose reduce-overhead: compiling and capturing in the warm-up ...")
    with torch.no_grad(), _profiled(trace):
        names = " and ".join(variants)
        _say(
            progress,
            f"  diagnose {names}: warm-up, then {steps}+ rounds in turn, until each median is "
            f"known within ±{tolerance:.0%} or for {max_seconds:g} s at most ...",
        )
        started = time.perf_counter()
        timings, rounds = compare_steps(
            variants,
            inputs,
            device,
            min_rounds=steps,
            # The compiled step compiles on its first call and captures on its second.
            warmup=max(warmup, 2) if compare else warmup,
            tolerance=tolerance,
            max_seconds=max_seconds,
            timer=timer,
        )
        settled = "settled" if rounds.settled else "did not settle (too noisy)"
        _say(
            progress,
            f"  diagnose: {settled} after {rounds.rounds} rounds, "
            f"done in {time.perf_counter() - started:.1f}s",
        )
    return DiagnoseReport(
        device=str(device),
        steps=rounds.rounds,
        eager=timings["eager"],
        compiled=timings.get("reduce-overhead"),
        separable=device.type != "cpu",
        settled=rounds.settled,
        tolerance=tolerance,
        seconds=rounds.seconds,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _percent(value: float | None) -> str:
    if value is None:
        return "-"
    return "n/a (too few)" if math.isinf(value) else f"±{value:.1%}"


def _say(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


@contextlib.contextmanager
def _profiled(trace: str | os.PathLike[str] | None) -> Iterator[None]:
    if trace is None:
        yield
        return
    target = Path(trace)
    target.parent.mkdir(parents=True, exist_ok=True)
    # One profiling cycle: accumulating events changes nothing, and torch 2.11 warns on every
    # profile without it ("Profiler clears events at the end of each cycle").
    with torch.profiler.profile(acc_events=True) as profiler:
        yield
    # Written next to the target and renamed: a reader never sees half a trace.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        profiler.export_chrome_trace(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters then buffers of ``module`` (to find its device when it takes no tensor)."""
    return [*module.parameters(), *module.buffers()]
