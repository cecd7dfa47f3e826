import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from npu_compile import _bench
from npu_compile.cli import main


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


SMALL = ["--layers", "1", "--dim", "32"]


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "doctor" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "npu-compile 0." in capsys.readouterr().out


def test_doctor_reports_device_versions_and_features(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "device             cpu" in out
    assert f"torch              {torch.__version__}" in out
    assert "cpu-emulated" in out
    assert "npu-mempool" in out
    assert "capture / replay" in out


def test_demo_generates_identical_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--tokens", "6", "--device", "cpu", *SMALL]) == 0
    captured = capsys.readouterr()
    assert "tokens identical" in captured.out
    assert "yes" in captured.out.splitlines()[-1]
    assert "graphs captured" in captured.out
    assert "6/6" in captured.err  # progress went to stderr


def test_demo_fails_when_tokens_differ(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from npu_compile import _demo

    real = _demo.greedy_generate
    calls = {"n": 0}

    def skewed(*args: object, **kwargs: object) -> tuple[torch.Tensor, list[float]]:
        tokens, times = real(*args, **kwargs)  # type: ignore[arg-type]
        calls["n"] += 1
        # The 4th call is the measured compiled run: corrupt one token.
        return (tokens + 1 if calls["n"] == 4 else tokens), times

    monkeypatch.setattr(_demo, "greedy_generate", skewed)
    assert main(["demo", "--tokens", "3", "--quiet", "--device", "cpu", *SMALL]) == 1
    assert "different tokens" in capsys.readouterr().err


def test_diagnose_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--steps", "2", "--device", "cpu", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "Host Bound" in out
    assert "not separable" in out
    assert "reduce-overhead" in out


def test_bench_writes_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Fewer MLP calls keep the smoke test short; the numbers are not asserted (timings belong
    # in benchmarks/, not in tests).
    monkeypatch.setattr(
        _bench, "mlp_overhead_bench", lambda: _bench.BenchReport("mlp", "cpu", [], {}, {})
    )
    assert main(["bench", "--steps", "2", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "torch cudagraphs" in out
    assert "skipped: needs CUDA" in out
    payload = json.loads((tmp_path / "decode_step_cpu.json").read_text())
    names = [row["name"] for row in payload["reports"][0]["rows"]]
    assert names[:2] == ["eager", "npu_compile reduce-overhead"]
    assert payload["reports"][0]["rows"][1]["us_per_call"] > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--tokens", "1"],
        ["bench", "--steps", "0"],
        ["doctor", "--device", "nonsense"],
        ["demo", "--device", "xpu"],  # a real device type that is not present here
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
