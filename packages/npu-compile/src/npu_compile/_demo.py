"""``npu-compile demo``: the demo decoder generating tokens in eager and reduce-overhead mode."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import torch

from npu_compile import _device
from npu_compile._demo_model import PROMPT_LENGTH, DemoConfig, TinyDecoder, greedy_generate
from npu_compile._timing import measure
from npu_compile.errors import DemoMismatchError

if TYPE_CHECKING:
    from npu_mempool import GraphRunner

__all__ = ["DemoResult", "run_demo", "DEMO_MAX_BYTES", "demo_model_bytes", "check_demo_size"]

DEMO_MAX_BYTES = 4 << 30
"""Largest demo model (weights, KV cache, per-block host objects) ``run_demo`` agrees to build."""

_BLOCK_HOST_BYTES = 64 << 10
"""Python objects of one decoder block (modules, parameters, hooks): about 28 KiB measured."""


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
            ("speedup", "1.00x", f"{self.speedup:.2f}x"),
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
                "speedup; on a GPU or NPU a replay saves the per-kernel launch cost)"
            )
        for row in rows:
            lines.append(
                f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}".rstrip()
            )
        for reason in self.fallbacks:
            lines.append(f"fallback: {reason}")
        return "\n".join(lines)


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
    # through the function compiled above, whose decode-step graph is captured already.
    step_inputs = model.decode_step_inputs()
    _phase(progress, "  Host/Device Bound: timing one decode step, eager and reduce-overhead ...")
    with torch.no_grad():
        eager = measure("eager", model, step_inputs, device, steps=10, warmup=2)
        reduced = measure("reduce-overhead", compiled, step_inputs, device, steps=10, warmup=2)
    torch._dynamo.reset()

    return DemoResult(
        device=str(device),
        tokens=tokens,
        eager_ms=statistics.median(eager_times) * 1000.0,
        compiled_ms=statistics.median(compiled_times) * 1000.0,
        graphs_captured=captures,
        replays=replays,
        pool_bytes=pool,
        eager_verdict=eager.verdict,
        compiled_verdict=reduced.verdict,
        identical=torch.equal(eager_tokens, compiled_tokens),
        fallbacks=fallbacks,
    )


def check(result: DemoResult) -> None:
    """Raise :class:`DemoMismatchError` when the two runs disagree."""
    if not result.identical:
        raise DemoMismatchError(
            "reduce-overhead generated different tokens than eager; rerun with "
            "config.debug.run_eagerly = True to tell a capture problem from a tracing one"
        )
