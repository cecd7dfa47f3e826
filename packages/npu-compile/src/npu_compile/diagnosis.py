"""Is a step Host Bound or Device Bound, and what does reduce-overhead change?

On an accelerator the host enqueues kernels asynchronously. Per step, :func:`diagnose` measures
the wall time of the Python call (host enqueue time) and the event-timed span of the device work
it queued. When the host takes about as long as the device span, the device waited for the host
between kernels: the step is Host Bound, and capturing it into one graph (one launch) is the cure.
When the device span is clearly longer, the device is the bottleneck: Device Bound. On CPU there
is no separate device: all work is host work, reported as such.

The package root re-exports :func:`diagnose`, :class:`DiagnoseReport` and :class:`PhaseTiming`;
this module also holds the verdict strings :data:`HOST_BOUND` and :data:`DEVICE_BOUND`. It is
named ``diagnosis`` so that no module hides behind the function: ``npu_compile.diagnose`` is
the function and ``npu_compile.diagnosis`` this module. ``npu-compile diagnose`` runs it from
the command line.

Example::

    from npu_compile.diagnosis import HOST_BOUND, diagnose

    report = diagnose(model, tokens, positions, steps=20)
    print(report)  # a table, the verdict and the speed-up of reduce-overhead
    if report.verdict == HOST_BOUND:
        ...
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from npu_compile._accel import first_tensor_device
from npu_compile._timing import DEVICE_BOUND, HOST_BOUND, PhaseTiming, measure
from npu_compile.configs.compiler_config import CompilerConfig

# Defined with the measurement they come from; public here.
PhaseTiming.__module__ = __name__

__all__ = [
    "diagnose",
    "DiagnoseReport",
    "PhaseTiming",
    "HOST_BOUND",
    "DEVICE_BOUND",
]


@dataclass(frozen=True)
class DiagnoseReport:
    """Result of :func:`diagnose`.

    Attributes:
        device: Where the step ran (``"cpu"``, ``"cuda:0"``, ``"npu:0"``).
        steps: Steps measured per phase (after warm-up).
        eager: Timings of the step run eagerly.
        compiled: Timings under reduce-overhead, or ``None`` when not asked for.
        separable: Whether device time could be measured apart from host time.
    """

    device: str
    steps: int
    eager: PhaseTiming
    compiled: PhaseTiming | None
    separable: bool

    @property
    def verdict(self) -> str:
        """The eager step's verdict: :data:`HOST_BOUND` or :data:`DEVICE_BOUND`."""
        return self.eager.verdict

    @property
    def speedup(self) -> float | None:
        """Eager step time divided by the reduce-overhead step time."""
        if self.compiled is None or self.compiled.step_ms <= 0:
            return None
        return self.eager.step_ms / self.compiled.step_ms

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (for ``--json``): every field, the verdict and the speedup."""
        document = asdict(self)
        document.update(verdict=self.verdict, speedup=self.speedup, summary=self.summary())
        return document

    def summary(self) -> str:
        """One sentence: the verdict with its numbers."""
        e = self.eager
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
        rows = [("", "host ms/step", "device ms/step", "verdict")]
        for phase in (self.eager, self.compiled):
            if phase is None:
                continue
            device = f"{phase.device_ms:.3f}" if phase.device_ms is not None else "n/a (cpu)"
            rows.append((phase.label, f"{phase.host_ms:.3f}", device, phase.verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [f"diagnose on {self.device}, {self.steps} steps (median)"]
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
) -> DiagnoseReport:
    """Measure host enqueue time vs device time per step and say Host Bound or Device Bound.

    The step ``fn(*inputs)`` runs under ``torch.no_grad()``: first eagerly, then (with
    ``compare``) compiled with the npu-compile backend in reduce-overhead mode, so the report
    shows what capture changes. ``fn`` must be safe to call repeatedly (a decode step that writes
    a KV cache at a fixed position is).

    Args:
        fn: The step: a function or ``nn.Module``.
        *inputs: Its inputs.
        steps: Measured steps per phase (medians are reported).
        warmup: Unmeasured steps first (compilation and capture happen here).
        compare: Also measure the step under reduce-overhead.
        compiler_config: Options for the compiled phase; ``None``: defaults.
        progress: Stream for a line as each phase starts and ends (the compiled phase compiles
            and captures first, which takes seconds); ``None``: silent.
        trace: Write a Chrome/Perfetto trace of the measured steps here (``torch.profiler``;
            the compiled phase shows npu_mempool's capture, replay and input-copy ranges).

    Returns:
        A :class:`DiagnoseReport`; ``print(report)`` gives a table and the verdict.

    Raises:
        ValueError: ``steps`` or ``warmup`` is not an int in range.
        TypeError: ``fn`` is not callable.
    """

    def _is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not (_is_int(steps) and _is_int(warmup)) or steps < 1 or warmup < 0:
        raise ValueError(
            f"steps must be an int >= 1 and warmup an int >= 0, got steps={steps!r}, "
            f"warmup={warmup!r}"
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
    with torch.no_grad(), _profiled(trace):
        _say(progress, f"  diagnose eager: {warmup} warm-up + {steps} measured steps ...")
        eager = measure("eager", fn, inputs, device, steps, warmup)
        compiled = None
        if compare:
            from npu_compile.backend import get_npu_backend

            backend = get_npu_backend(compiler_config=compiler_config)
            compiled_fn = torch.compile(fn, backend=backend, dynamic=False)
            _say(
                progress,
                f"  diagnose reduce-overhead: compiling and capturing, then {steps} measured "
                "steps ...",
            )
            started = time.perf_counter()
            compiled = measure(
                "reduce-overhead", compiled_fn, inputs, device, steps, max(warmup, 2)
            )
            _say(progress, f"  diagnose: done in {time.perf_counter() - started:.1f}s")
    return DiagnoseReport(
        device=str(device),
        steps=steps,
        eager=eager,
        compiled=compiled,
        separable=device.type != "cpu",
    )


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
