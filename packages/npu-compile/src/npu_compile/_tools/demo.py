"""``npu-compile demo``: the demo decoder generating tokens in eager and reduce-overhead mode.

Besides the timings (``_timing``'s statistics, as ``diagnose`` and ``bench`` report them), the
table shows what carries over to a device whatever the CPU timings say: the kernels one eager
decode step launches (the ATen ops the captured graph runs, counted by npu-static-kernel's op
recorder) against the graph replays that replace them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import torch
from npu_static_kernel import OpStatisticsRecorder

from npu_compile._tools import device as _device
from npu_compile._tools.demo_model import PROMPT_LENGTH, DemoConfig, TinyDecoder, greedy_generate
from npu_compile._tools.timing import compare_steps, summarize
from npu_compile.errors import DemoMismatchError

if TYPE_CHECKING:
    from npu_mempool import GraphRunner

__all__ = ["DemoResult", "run_demo", "DEMO_MAX_BYTES", "demo_model_bytes", "check_demo_size"]

DEMO_MAX_BYTES = 4 << 30
"""Largest demo model (weights, KV cache, per-block host objects) ``run_demo`` agrees to build."""

_BLOCK_HOST_BYTES = 64 << 10
"""Python objects of one decoder block (modules, parameters, hooks): about 28 KiB measured."""

# The Host/Device Bound rounds of the demo: a few seconds at most, then "Too Noisy".
_VERDICT_ROUNDS = 10
_VERDICT_SECONDS = 5.0


@dataclass(frozen=True)
class DemoResult:
    """What the demo measured.

    Attributes:
        device: Where it ran.
        tokens: Generated tokens per run.
        eager_ms: Median ms per decode step, eager.
        compiled_ms: Median ms per decode step, reduce-overhead.
        graphs_captured: Device graphs captured by the compiled run.
        replays: Graph replays during the compiled run.
        pool_bytes: Bytes held by the graph pools after the run (``None`` if not reported).
        eager_verdict: Host/Device Bound verdict of an eager decode step.
        compiled_verdict: The same under reduce-overhead.
        identical: Whether both runs produced the same tokens.
        fallbacks: FX graphs that fell back to eager, each as ``"graph (reason code): message"``.
        eager_min_ms: Fastest eager decode step, in ms (``None``: not measured).
        eager_spread_ms: Interquartile range of the eager decode steps, in ms.
        compiled_min_ms: Fastest reduce-overhead decode step, in ms.
        compiled_spread_ms: Interquartile range of the reduce-overhead decode steps, in ms.
        launches_per_step: Kernels one eager decode step launches: the ATen ops (views left
            out) the captured graph runs; a device launches each of them eagerly.
        replays_per_step: Graph replays one reduce-overhead decode step makes instead.
    """

    device: str
    tokens: int
    eager_ms: float
    compiled_ms: float
    graphs_captured: int
    replays: int
    pool_bytes: int | None
    eager_verdict: str
    compiled_verdict: str
    identical: bool
    fallbacks: tuple[str, ...]
    eager_min_ms: float | None = None
    eager_spread_ms: float | None = None
    compiled_min_ms: float | None = None
    compiled_spread_ms: float | None = None
    launches_per_step: int | None = None
    replays_per_step: int | None = None

    @property
    def speedup(self) -> float:
        """Eager ms per token divided by reduce-overhead ms per token."""
        return self.eager_ms / self.compiled_ms if self.compiled_ms > 0 else float("inf")

    def table(self) -> str:
        """The result table printed by the CLI."""
        pool = "n/a" if self.pool_bytes is None else _bytes(self.pool_bytes)
        rows = [
            ("", "eager", "reduce-overhead"),
            ("ms / token (decode, median)", f"{self.eager_ms:.3f}", f"{self.compiled_ms:.3f}"),
            (
                "ms / token (min, spread)",
                _min_spread(self.eager_min_ms, self.eager_spread_ms),
                _min_spread(self.compiled_min_ms, self.compiled_spread_ms),
            ),
            ("speedup", "1.00x", f"{self.speedup:.2f}x"),
            (
                "launches / decode step",
                _count(self.launches_per_step, "kernel launch", "kernel launches"),
                _count(self.replays_per_step, "graph replay", "graph replays"),
            ),
            ("graphs captured", "-", str(self.graphs_captured)),
            ("graph replays", "-", str(self.replays)),
            ("graph pool memory", "-", pool),
            ("step is", self.eager_verdict, self.compiled_verdict),
            ("tokens identical", "", "yes" if self.identical else "NO"),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"npu-compile demo: {self.tokens} tokens on {self.device}"]
        if self.device.split(":")[0] == "cpu":
            # Said up front: a first run on a laptop must not read ~1x as "it does not work".
            lines.append(
                "(on CPU the graph is emulated: a replay re-runs the captured code, so expect no "
                "speedup; on a GPU or NPU a replay saves the per-kernel launch cost: the launches "
                "row is what carries over)"
            )
        for row in rows:
            lines.append(
                f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}".rstrip()
            )
        for reason in self.fallbacks:
            lines.append(f"fallback: {reason}")
        return "\n".join(lines)


def _min_spread(minimum: float | None, spread: float | None) -> str:
    if minimum is None or spread is None:
        return "-"
    return f"{minimum:.3f}, {spread:.3f}"


def _count(value: int | None, one: str, many: str) -> str:
    if value is None:
        return "-"
    return f"{value} {one if value == 1 else many}"


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{count} B"  # pragma: no cover - loop always returns


class _Progress:
    """Token progress on one line (a TTY) or a few lines (logs)."""

    def __init__(self, stream: TextIO, label: str, total: int) -> None:
        self.stream = stream
        self.label = label
        self.total = total
        self.tty = stream.isatty()
        self.started = time.perf_counter()

    def __call__(self, index: int) -> None:
        done = index + 1
        if self.tty:
            bar = "#" * (20 * done // self.total)
            self.stream.write(f"\r  {self.label:<16} [{bar:<20}] {done}/{self.total}")
            if done == self.total:
                self.stream.write(f"  {time.perf_counter() - self.started:.1f}s\n")
            self.stream.flush()
        elif done == self.total or done % max(1, self.total // 4) == 0:
            self.stream.write(f"  {self.label}: {done}/{self.total} tokens\n")
            self.stream.flush()


def _phase(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


def demo_model_bytes(config: DemoConfig) -> int:
    """Estimate the memory of the demo model for ``config`` without building it.

    Counts float32 weights (embedding, blocks, final norm, head), the static KV cache of every
    block and the host objects of each block; activations of one decode step are far smaller.
    """
    dim, vocab = config.dim, config.vocab
    # qkv + proj + up (with bias) + down (with bias) + two LayerNorms.
    block = 3 * dim * dim + dim * dim + (4 * dim * dim + 4 * dim) + (4 * dim * dim + dim) + 4 * dim
    cache = 2 * config.batch * config.max_seq * dim
    floats = 2 * vocab * dim + 2 * dim + config.layers * (block + cache)
    return 4 * floats + 8 * config.max_seq + config.layers * _BLOCK_HOST_BYTES


def check_demo_size(config: DemoConfig, limit: int = DEMO_MAX_BYTES) -> None:
    """Raise ``ValueError`` if the demo model for ``config`` would need more than ``limit`` bytes.

    Checked before anything is allocated: ``--dim 1000000`` or ``--layers 100000`` would
    otherwise end in an allocation failure (or exhaust the machine) while building the model.
    """
    needed = demo_model_bytes(config)
    if needed > limit:
        raise ValueError(
            f"the demo model with {config.layers} layers of dim {config.dim} needs about "
            f"{_bytes(needed)} (weights and KV cache), over the demo's limit of {_bytes(limit)}; "
            "use a smaller --dim or --layers"
        )


def _runner_totals(runners: list[GraphRunner]) -> tuple[int, int, int | None]:
    """Captures, replays and pool bytes over ``runners`` (pool ``None``: no runner)."""
    captures = sum(runner.counters.captures for runner in runners)
    replays = sum(runner.counters.replays for runner in runners)
    pool = sum(runner.counters.pool_bytes for runner in runners) if runners else None
    return captures, replays, pool


def run_demo(
    tokens: int = 32,
    device: torch.device | None = None,
    config: DemoConfig | None = None,
    progress: TextIO | None = sys.stderr,
    print_fn: Callable[[str], None] = print,
) -> DemoResult:
    """Generate ``tokens`` tokens eagerly and under reduce-overhead; compare and time them.

    Args:
        tokens: Tokens to generate per run (>= 2).
        device: Where to run; ``None``: the best available device.
        config: Model shape; ``None``: the demo defaults.
        progress: Stream for progress lines; ``None``: silent.
        print_fn: Where status lines go.

    Returns:
        The :class:`DemoResult`. Callers decide what a mismatch means (the CLI exits non-zero).
    """
    if tokens < 2:
        raise ValueError(f"tokens must be >= 2 (one prefill and one decode step), got {tokens}")
    check_demo_size(config or DemoConfig())
    device = device or _device.best_device()
    max_seq = (config or DemoConfig()).max_seq
    if PROMPT_LENGTH + tokens > max_seq:
        # Checked before any work: otherwise the eager run would start and then fail.
        raise ValueError(
            f"prompt ({PROMPT_LENGTH}) + tokens ({tokens}) exceed the KV cache ({max_seq} "
            f"slots); use fewer tokens or DemoConfig(max_seq={PROMPT_LENGTH + tokens})"
        )
    model = TinyDecoder(config).to(device).eval()
    prompt = model.prompt()
    print_fn(
        f"model: {model.config.layers} layers, dim {model.config.dim}, vocab "
        f"{model.config.vocab}, KV cache {model.config.max_seq} slots; device {device} "
        f"({_device.graph_implementation(device)})"
    )

    def run(label: str, step: Callable[..., torch.Tensor]) -> tuple[torch.Tensor, list[float]]:
        # A short untimed run first: compilation and capture happen there, not in the timings.
        # It is the slow part of the demo (seconds against milliseconds per token): say so.
        warm = "compiling and capturing graphs" if label != "eager" else "warming up"
        _phase(progress, f"  {label}: {warm} ...")
        started = time.perf_counter()
        greedy_generate(model, step, prompt, 3)
        _phase(progress, f"  {label}: {warm} done in {time.perf_counter() - started:.1f}s")
        bar = _Progress(progress, label, tokens) if progress is not None else None
        return greedy_generate(model, step, prompt, tokens, on_token=bar)

    # The model is tiny: on CPU, intra-op threads only add scheduling noise to the timings.
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _compare(model, prompt, device, tokens, run, progress)
    finally:
        torch.set_num_threads(threads)


def _compare(
    model: TinyDecoder,
    prompt: torch.Tensor,
    device: torch.device,
    tokens: int,
    run: Callable[[str, Callable[..., torch.Tensor]], tuple[torch.Tensor, list[float]]],
    progress: TextIO | None,
) -> DemoResult:
    from npu_compile.backend import get_npu_backend

    torch._dynamo.reset()
    eager_tokens, eager_times = run("eager", model)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    compiled_tokens, compiled_times = run("reduce-overhead", compiled)
    captures, replays, pool = _runner_totals(backend.stats.runners)
    # Read now: torch._dynamo.reset() below resets the backend's statistics.
    stats = backend.stats
    fallbacks = tuple(
        f"{name} ({stats.fallback_reasons[name]}): {message}" for name, message in stats.fallbacks
    )

    # Host/Device Bound of one decode step (fixed position: the step can repeat), eager and
    # through the function compiled above, whose decode-step graph is captured already; the two
    # in alternating rounds, as diagnose times them.
    step_inputs = model.decode_step_inputs()
    _phase(progress, "  Host/Device Bound: timing one decode step, eager and reduce-overhead ...")
    with torch.no_grad():
        timings, _ = compare_steps(
            {"eager": model, "reduce-overhead": compiled},
            step_inputs,
            device,
            min_rounds=_VERDICT_ROUNDS,
            warmup=2,
            max_seconds=_VERDICT_SECONDS,
        )
        before = sum(runner.counters.replays for runner in backend.stats.runners)
        compiled(*step_inputs)
        replays_per_step = sum(r.counters.replays for r in backend.stats.runners) - before
    torch._dynamo.reset()
    launches = _launches_per_step(model, step_inputs) if captures else None
    eager_step = summarize(eager_times)
    compiled_step = summarize(compiled_times)

    return DemoResult(
        device=str(device),
        tokens=tokens,
        eager_ms=eager_step.median * 1000.0,
        compiled_ms=compiled_step.median * 1000.0,
        graphs_captured=captures,
        replays=replays,
        pool_bytes=pool,
        eager_verdict=timings["eager"].verdict,
        compiled_verdict=timings["reduce-overhead"].verdict,
        identical=torch.equal(eager_tokens, compiled_tokens),
        fallbacks=fallbacks,
        eager_min_ms=eager_step.min * 1000.0,
        eager_spread_ms=eager_step.spread * 1000.0,
        compiled_min_ms=compiled_step.min * 1000.0,
        compiled_spread_ms=compiled_step.spread * 1000.0,
        launches_per_step=launches,
        replays_per_step=replays_per_step,
    )


class _CompiledCodeRecorder(OpStatisticsRecorder):  # type: ignore[no-untyped-call]
    """npu-static-kernel's op recorder, which compiled code runs under.

    Dynamo runs a compiled frame's Python eagerly, not its compiled code, while a dispatch mode is
    active, unless the mode says it can do without seeing the compiler's own work; this one says
    so, and is entered only after the compilation.
    """

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let Dynamo run compiled code under this mode."""
        return True


def _launches_per_step(model: TinyDecoder, inputs: tuple[Any, ...]) -> int:
    """Kernel launches of one eager decode step, counted in the graph the backend captures.

    The decode step is compiled through the whole reduce-overhead pipeline with
    ``debug.run_eagerly`` (the same graph, after every pass, called directly instead of
    captured), then one step runs under the op recorder: every ATen op that launches a kernel
    there is one launch a device makes per step without the graph.
    """
    from npu_compile.backend import get_npu_backend
    from npu_compile.configs.compiler_config import CompilerConfig

    config = CompilerConfig()
    config.debug.run_eagerly = True
    backend = get_npu_backend(compiler_config=config)
    graph = torch.compile(model, backend=backend, dynamic=False)
    try:
        with torch.no_grad():
            graph(*inputs)  # compiles here, outside the recorder
            with _CompiledCodeRecorder() as recorder:
                graph(*inputs)
    finally:
        torch._dynamo.reset()
    return sum(record.count for record in recorder.records if record.launches_kernel)


def check(result: DemoResult) -> None:
    """Raise :class:`DemoMismatchError` when the two runs disagree."""
    if not result.identical:
        raise DemoMismatchError(
            "reduce-overhead generated different tokens than eager; rerun with "
            "config.debug.run_eagerly = True to tell a capture problem from a tracing one"
        )
