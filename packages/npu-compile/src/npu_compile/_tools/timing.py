"""Timing statistics of ``diagnose``, ``npu-compile bench`` and the demo's table: one module.

Ways of running a step (eager, compiled, ...) are measured in rounds, one sample of each per
round, their order alternating (eager, compiled, then compiled, eager), so that a slow drift of a
shared machine hits every variant alike. Each variant's samples are summed up as min, median,
spread (the interquartile range) and the uncertainty of the median: the half-width of its 95 %
confidence interval, from the order statistics (no assumption about the distribution), relative
to the median. The rounds stop once every median is known within a bound, or when a time limit
is reached; a measurement that did not settle has no verdict (:data:`TOO_NOISY`).

Private: :mod:`npu_compile.diagnosis` makes the names public that users see.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from npu_compile._tools import device as _device

__all__ = [
    "HOST_BOUND",
    "DEVICE_BOUND",
    "TOO_NOISY",
    "DEFAULT_TOLERANCE",
    "DEFAULT_MAX_SECONDS",
    "PhaseTiming",
    "Rounds",
    "Summary",
    "alternate",
    "compare_steps",
    "summarize",
]

HOST_BOUND = "Host Bound"
"""Verdict of a step whose device waits for the host's kernel launches."""
DEVICE_BOUND = "Device Bound"
"""Verdict of a step whose device work takes clearly longer than the host's enqueue."""
TOO_NOISY = "Too Noisy"
"""No verdict: within the time limit the medians were not known to the bound."""
DEFAULT_TOLERANCE = 0.05
"""Default bound on the median's uncertainty: ±5 % of the median (95 % confidence)."""
DEFAULT_MAX_SECONDS = 10.0
"""Default time limit of the measured rounds."""

# The device span includes the tail after the host returns; when the host enqueue time is at least
# this fraction of the span, the device was mostly waiting on the host.
_HOST_BOUND_RATIO = 0.8
# Two-sided 95 % normal quantile: the median's confidence interval spans the order statistics
# n/2 ± 1.96·√n/2 (the binomial distribution of the number of samples below the median).
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class Summary:
    """What a variant's samples say, in the unit of the samples.

    Attributes:
        count: Samples taken.
        min: The smallest: the least disturbed run.
        median: The middle one.
        spread: Interquartile range (upper minus lower quartile); 0 for fewer than two samples.
        uncertainty: Half-width of the median's 95 % confidence interval relative to the median
            (0.03: ±3 %); ``inf`` while there are too few samples to bound it (fewer than 8).
    """

    count: int
    min: float
    median: float
    spread: float
    uncertainty: float


def summarize(samples: Sequence[float]) -> Summary:
    """Min, median, spread and the median's relative uncertainty of ``samples``.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples)
    count = len(ordered)
    median = statistics.median(ordered)
    spread = 0.0
    if count >= 2:
        lower, _, upper = statistics.quantiles(ordered, n=4, method="inclusive")
        spread = upper - lower
    return Summary(count, ordered[0], median, spread, _median_uncertainty(ordered, median))


def _median_uncertainty(ordered: Sequence[float], median: float) -> float:
    count = len(ordered)
    half = _Z95 * math.sqrt(count) / 2
    low = math.floor(count / 2 - half)  # 1-based ranks of the interval's ends
    high = math.ceil(count / 2 + half)
    if low < 1 or high > count:
        return math.inf
    width = (ordered[high - 1] - ordered[low - 1]) / 2
    if median <= 0:
        return 0.0 if width == 0 else math.inf
    return width / median


@dataclass(frozen=True)
class Rounds:
    """Samples of several variants taken in alternating rounds.

    Attributes:
        samples: Each variant's samples, in the order taken.
        settled: Whether every median was known within ``tolerance`` when the rounds stopped;
            ``False``: the time limit (or the round limit) came first.
        tolerance: The bound on each median's relative uncertainty.
        seconds: Wall time of the rounds.
    """

    samples: Mapping[str, tuple[float, ...]]
    settled: bool
    tolerance: float
    seconds: float

    @property
    def rounds(self) -> int:
        """Rounds taken (samples per variant)."""
        return min((len(s) for s in self.samples.values()), default=0)

    def summary(self, name: str) -> Summary:
        """The :class:`Summary` of variant ``name``."""
        return summarize(self.samples[name])

    def noisiest(self) -> tuple[str, Summary]:
        """The variant whose median is least certain, with its summary."""
        summaries = {name: self.summary(name) for name in self.samples}
        name = max(summaries, key=lambda n: summaries[n].uncertainty)
        return name, summaries[name]


def alternate(
    variants: Mapping[str, Callable[[], float]],
    *,
    min_rounds: int,
    tolerance: float = DEFAULT_TOLERANCE,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    max_rounds: int | None = None,
) -> Rounds:
    """Take one sample of every variant per round, alternating their order, until settled.

    Each callable takes one sample and returns it. The rounds go on until at least
    ``min_rounds`` are done and every variant's median is known within ``tolerance``
    (:func:`summarize`), or until ``max_seconds`` of wall time (or ``max_rounds``) have passed:
    then :attr:`Rounds.settled` is ``False``.
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    started = time.monotonic()
    settled = False
    done = 0
    while True:
        # Even rounds in the given order, odd ones reversed: no variant always goes first.
        for name in names if done % 2 == 0 else reversed(names):
            samples[name].append(float(variants[name]()))
        done += 1
        if done >= min_rounds and all(
            summarize(values).uncertainty <= tolerance for values in samples.values()
        ):
            settled = True
            break
        if time.monotonic() - started >= max_seconds:
            break
        if max_rounds is not None and done >= max_rounds:
            break
    seconds = time.monotonic() - started
    return Rounds(
        {name: tuple(values) for name, values in samples.items()}, settled, tolerance, seconds
    )


@dataclass(frozen=True)
class PhaseTiming:
    """Per-step timings of one way of running the step, from alternating rounds.

    Attributes:
        label: ``"eager"`` or ``"reduce-overhead"``.
        host_ms: Median wall time of the Python call, in milliseconds.
        device_ms: Median event-timed device span in milliseconds, ``None`` on CPU.
        verdict: :data:`HOST_BOUND` or :data:`DEVICE_BOUND`, or :data:`TOO_NOISY` when the
            rounds did not settle.
        min_ms: The fastest step (the larger of host and device time), in milliseconds.
        spread_ms: Interquartile range of the step times, in milliseconds.
        uncertainty: Half-width of the 95 % confidence interval of the median step time,
            relative to it (0.03: ±3 %).
        samples: Steps measured.
    """

    label: str
    host_ms: float
    device_ms: float | None
    verdict: str
    min_ms: float | None = None
    spread_ms: float | None = None
    uncertainty: float | None = None
    samples: int = 0

    @property
    def step_ms(self) -> float:
        """End-to-end time of one step (the larger of host and device time)."""
        return max(self.host_ms, self.device_ms or 0.0)


def _verdict(host: float, device: float | None) -> str:
    if device is None:
        return HOST_BOUND
    return HOST_BOUND if host >= _HOST_BOUND_RATIO * device else DEVICE_BOUND


def compare_steps(
    steps: Mapping[str, Callable[..., Any]],
    inputs: tuple[Any, ...],
    device: torch.device,
    *,
    min_rounds: int,
    warmup: int,
    tolerance: float = DEFAULT_TOLERANCE,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    timer: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, PhaseTiming], Rounds]:
    """Time each ``fn(*inputs)`` of ``steps`` in alternating rounds, one step per round each.

    Each variant first runs ``warmup`` untimed steps (compilation and capture happen there).
    ``timer`` is the host clock in seconds (as ``timeit``'s). Returns a :class:`PhaseTiming`
    per variant and the rounds behind them; a variant's verdict is :data:`TOO_NOISY` unless the
    rounds settled.
    """
    for fn in steps.values():
        for _ in range(warmup):
            fn(*inputs)
    _device.synchronize(device)
    hosts: dict[str, list[float]] = {name: [] for name in steps}
    devices: dict[str, list[float]] = {name: [] for name in steps}

    def sampler(name: str) -> Callable[[], float]:
        fn = steps[name]

        def sample() -> float:
            # The result is dropped before the next call: a held output would make that call
            # replay a second call path (outputs in use are never overwritten).
            host, dev = _device.timed_call(lambda: fn(*inputs), device, timer)[:2]
            hosts[name].append(host * 1000.0)
            if dev is not None:
                devices[name].append(dev * 1000.0)
            return max(host, dev or 0.0) * 1000.0

        return sample

    rounds = alternate(
        {name: sampler(name) for name in steps},
        min_rounds=min_rounds,
        tolerance=tolerance,
        max_seconds=max_seconds,
    )
    timings = {}
    for name in steps:
        host_ms = statistics.median(hosts[name])
        device_ms = statistics.median(devices[name]) if devices[name] else None
        step = rounds.summary(name)
        timings[name] = PhaseTiming(
            label=name,
            host_ms=host_ms,
            device_ms=device_ms,
            verdict=_verdict(host_ms, device_ms) if rounds.settled else TOO_NOISY,
            min_ms=step.min,
            spread_ms=step.spread,
            uncertainty=step.uncertainty,
            samples=step.count,
        )
    return timings, rounds
