from pathlib import Path

import pytest
import torch
from npu_compile import DiagnoseReport, PhaseTiming, diagnose
from npu_compile._timing import _verdict
from npu_compile.diagnosis import DEVICE_BOUND, HOST_BOUND


def test_cpu_report_says_device_time_is_not_separable() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    report = diagnose(model, torch.randn(2, 8), steps=3, warmup=1)
    assert report.device == "cpu"
    assert report.separable is False
    assert report.verdict == HOST_BOUND
    assert report.eager.device_ms is None
    assert report.compiled is not None
    assert report.compiled.label == "reduce-overhead"
    assert report.eager.host_ms > 0
    text = str(report)
    assert "not separable" in text
    assert "n/a (cpu)" in text
    assert "reduce-overhead:" in text


def test_eager_only() -> None:
    report = diagnose(lambda x: x * 2, torch.randn(4), steps=2, compare=False)
    assert report.compiled is None
    assert report.speedup is None
    assert "reduce-overhead" not in str(report)


@pytest.mark.parametrize(("steps", "warmup"), [(0, 1), (1, -1), (2.5, 1), (2, 1.0)])
def test_bad_step_counts(steps: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="steps must be"):
        diagnose(lambda x: x, torch.randn(1), steps=steps, warmup=warmup)


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
    from npu_compile._device import best_device

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
    report = diagnose(model, torch.randn(2, 8), steps=2, warmup=1, trace=trace)
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
