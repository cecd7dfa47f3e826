import math
from collections.abc import Callable
from pathlib import Path

import npu_mempool
import pytest
import torch
from npu_compile import DiagnoseReport, PhaseTiming, diagnose
from npu_compile._tools.timing import _verdict, alternate, summarize
from npu_compile.diagnosis import DEVICE_BOUND, HOST_BOUND, TOO_NOISY


class SteadyTimer:
    """A host clock under which every timed call takes exactly ``step`` seconds."""

    def __init__(self, step: float = 0.001) -> None:
        self.step = step
        self.now = 0.0
        self.readings = 0

    def __call__(self) -> float:
        # A timed call reads the clock twice: at its start, and at its end one step later.
        self.readings += 1
        if self.readings % 2 == 0:
            self.now += self.step
        return self.now


class NoisyTimer(SteadyTimer):
    """A host clock under which the timed calls alternately take 1 ms and 9 ms.

    The worst noise for a median: half the steps in each of two clusters, so the median's
    confidence interval always spans both, however many rounds are taken.
    """

    def __call__(self) -> float:
        self.readings += 1
        if self.readings % 2 == 0:
            self.now += 0.001 if self.readings % 4 == 2 else 0.009
        return self.now


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))


def test_cpu_report_says_device_time_is_not_separable() -> None:
    report = diagnose(_mlp(), torch.randn(2, 8), steps=3, warmup=1, timer=SteadyTimer())
    assert report.device == "cpu"
    assert report.separable is False
    assert report.settled is True
    assert report.verdict == HOST_BOUND
    assert report.eager.device_ms is None
    assert report.compiled is not None
    assert report.compiled.label == "reduce-overhead"
    assert report.eager.host_ms > 0
    text = str(report)
    assert "not separable" in text
    assert "n/a (cpu)" in text
    assert "reduce-overhead:" in text


def test_a_steady_clock_settles_at_the_fewest_rounds_with_a_verdict() -> None:
    report = diagnose(_mlp(), torch.randn(2, 8), steps=12, warmup=1, timer=SteadyTimer())
    # Every step took 1 ms: the median is known exactly once it can be bounded at all.
    assert report.settled is True
    assert report.steps == 12
    assert report.verdict == HOST_BOUND
    assert report.speedup == pytest.approx(1.0)
    for phase in (report.eager, report.compiled):
        assert phase is not None
        assert phase.verdict == HOST_BOUND
        assert phase.samples == 12
        assert (phase.min_ms, phase.host_ms, phase.spread_ms) == pytest.approx((1.0, 1.0, 0.0))
        assert phase.uncertainty == pytest.approx(0.0, abs=1e-9)
    # Fewer than 8 rounds cannot bound a median: a smaller `steps` still takes 8.
    few = diagnose(_mlp(), torch.randn(2, 8), steps=1, warmup=1, timer=SteadyTimer())
    assert (few.settled, few.steps) == (True, 8)


def test_a_noisy_clock_gets_no_verdict_and_no_speedup() -> None:
    with npu_mempool.counters.expect(captures=1):
        report = diagnose(
            _mlp(), torch.randn(2, 8), steps=3, warmup=1, max_seconds=0.5, timer=NoisyTimer()
        )
    assert report.settled is False
    assert report.verdict == TOO_NOISY
    assert report.speedup is None
    assert report.compiled is not None
    for phase in (report.eager, report.compiled):
        assert phase.verdict == TOO_NOISY
        assert phase.min_ms == pytest.approx(1.0)
        assert phase.uncertainty is not None
        assert phase.uncertainty > 0.05
    # It went on until the time limit, far past the fewest rounds.
    assert report.steps > 8
    assert report.seconds >= 0.5
    text = str(report)
    assert "Too Noisy: after" in text
    assert "no verdict" in text
    assert "reduce-overhead: " not in text  # no speed-up line
    document = report.to_dict()
    assert (document["verdict"], document["speedup"], document["settled"]) == (
        TOO_NOISY,
        None,
        False,
    )


def test_rounds_alternate_the_variants() -> None:
    order: list[str] = []

    def sample(name: str) -> Callable[[], float]:
        def take() -> float:
            order.append(name)
            return 1.0

        return take

    rounds = alternate({"eager": sample("eager"), "compiled": sample("compiled")}, min_rounds=8)
    assert rounds.settled is True
    assert rounds.rounds == 8
    assert order[:6] == ["eager", "compiled", "compiled", "eager", "eager", "compiled"]
    assert len(order) == 16


def test_summary_of_samples() -> None:
    summary = summarize([5.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0])
    assert (summary.count, summary.min, summary.median, summary.spread) == (9, 1.0, 5.0, 4.0)
    # The 95 % interval of the median of 9 samples runs from the 1st to the 8th: (8 - 1) / 2.
    assert summary.uncertainty == pytest.approx(3.5 / 5.0)
    assert math.isinf(summarize([1.0] * 7).uncertainty)
    assert summarize([2.0] * 8).uncertainty == 0.0
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


def test_eager_only() -> None:
    report = diagnose(lambda x: x * 2, torch.randn(4), steps=2, compare=False, timer=SteadyTimer())
    assert report.compiled is None
    assert report.speedup is None
    assert "reduce-overhead" not in str(report)


@pytest.mark.parametrize(("steps", "warmup"), [(0, 1), (1, -1), (2.5, 1), (2, 1.0)])
def test_bad_step_counts(steps: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="steps must be"):
        diagnose(lambda x: x, torch.randn(1), steps=steps, warmup=warmup)


@pytest.mark.parametrize(
    ("tolerance", "max_seconds"), [(0, 1), (-0.1, 1), (0.05, 0), (0.05, math.inf), (True, 1)]
)
def test_bad_bounds(tolerance: float, max_seconds: float) -> None:
    with pytest.raises(ValueError, match="tolerance and max_seconds must be positive"):
        diagnose(lambda x: x, torch.randn(1), tolerance=tolerance, max_seconds=max_seconds)


def test_fn_must_be_callable() -> None:
    # A common slip: diagnose(x, model) instead of diagnose(model, x).
    with pytest.raises(TypeError, match="fn must be the step"):
        diagnose(torch.randn(2), torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def test_verdict_rule_and_accelerator_summary() -> None:
    # Host enqueue close to the device span: the device waited on the host.
    assert _verdict(0.95, 1.0) == HOST_BOUND
    assert _verdict(0.2, 1.0) == DEVICE_BOUND
    assert _verdict(1.0, None) == HOST_BOUND
    report = DiagnoseReport(
        device="cuda:0",
        steps=5,
        eager=PhaseTiming("eager", 2.0, 2.1, HOST_BOUND),
        compiled=PhaseTiming("reduce-overhead", 0.1, 0.5, DEVICE_BOUND),
        separable=True,
    )
    assert report.speedup == pytest.approx(2.1 / 0.5)
    text = str(report)
    assert "Host Bound: host enqueue 2.000 ms vs device 2.100 ms" in text
    assert "4.20x" in text


@pytest.mark.device
def test_accelerator_timings_are_separated() -> None:
    from npu_compile._tools.device import best_device

    device = best_device()
    x = torch.randn(256, 256, device=device)
    report = diagnose(lambda a: (a @ a).relu() @ a, x, steps=5)
    assert report.separable is True
    assert report.eager.device_ms is not None
    assert report.eager.device_ms > 0


def test_trace_and_json_of_a_diagnosis(tmp_path: Path) -> None:
    import json

    from npu_compile.diagnosis import diagnose

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    trace = tmp_path / "sub" / "trace.json"
    report = diagnose(model, torch.randn(2, 8), steps=2, warmup=1, trace=trace, max_seconds=1)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {event.get("name") for event in events}
    assert {"npu_mempool.replay", "npu_mempool.copy_inputs"} <= names
    document = json.loads(json.dumps(report.to_dict()))
    assert document["verdict"] == report.verdict
    assert document["eager"]["host_ms"] > 0
    assert document["compiled"]["label"] == "reduce-overhead"


def test_load_step_names_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_compile._cli.commands import load_step

    (tmp_path / "user_steps.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(1, 4),)\n"
        "def wrong():\n"
        "    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn, inputs = load_step("user_steps:make")
    assert callable(fn)
    assert len(inputs) == 1
    for spec, message in [
        ("user_steps", "MODULE:FACTORY"),
        ("no_such_module_here:make", "cannot import"),
        ("user_steps:missing", "no callable"),
        ("user_steps:wrong", "must return"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_step(spec)
