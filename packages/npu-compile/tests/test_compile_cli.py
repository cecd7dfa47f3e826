import json
from pathlib import Path

import pytest
import torch
from npu_compile._tools import bench as _bench
from npu_compile.cli import main

SMALL = ["--layers", "1", "--dim", "32"]


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
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


def test_demo_counts_the_launches_one_replay_replaces() -> None:
    from npu_compile._tools.demo import _launches_per_step, run_demo
    from npu_compile._tools.demo_model import DemoConfig, TinyDecoder

    def launches(layers: int) -> int:
        model = TinyDecoder(DemoConfig(layers=layers, dim=32)).eval()
        return _launches_per_step(model, model.decode_step_inputs())

    config = DemoConfig(layers=1, dim=32)
    cpu = torch.device("cpu")
    result = run_demo(tokens=3, device=cpu, config=config, progress=None, print_fn=str)
    assert result.identical
    # One captured graph per decode step: one replay instead of every kernel of the step.
    assert result.replays_per_step == 1
    assert result.launches_per_step is not None
    assert result.launches_per_step > 1
    assert f"{result.launches_per_step} kernel launches" in result.table()
    assert "1 graph replay" in result.table()
    # Each decoder block adds the same kernels: the count grows by one block's per layer.
    two, three = launches(2), launches(3)
    assert two - result.launches_per_step == three - two > 0


def test_demo_fails_when_tokens_differ(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from npu_compile._tools import demo as _demo

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
    # A bound of ±100 % settles on the busiest machine: this checks the report, not the figures.
    argv = ["diagnose", "--steps", "2", "--tolerance", "1", "--max-seconds", "20"]
    assert main([*argv, "--device", "cpu", *SMALL]) == 0
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
        _bench,
        "mlp_overhead_bench",
        lambda **kwargs: _bench.BenchReport("mlp", "cpu", [], {}, {}),
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
        ["demo", "--dim", "130"],  # not a multiple of the 4 heads: was a traceback in view()
        ["diagnose", "--dim", "3"],
        ["diagnose", "--tolerance", "0"],
        ["diagnose", "--max-seconds", "-1"],
        ["diagnose", "--max-seconds", "inf"],
        ["demo", "--tokens", "100000"],
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_bench_with_an_unwritable_out_dir_fails_before_benchmarking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(_bench, "run_all", lambda *args, **kwargs: ran.append(args))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as info:
        main(["bench", "--steps", "1", "--device", "cpu", "--out", str(blocker / "results")])
    assert info.value.code == 2
    assert "--no-json" in capsys.readouterr().err
    assert ran == []


def test_demo_grows_the_kv_cache_for_long_generations(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 prompt tokens + 125 new ones do not fit the default 128-slot cache.
    assert main(["demo", "--tokens", "125", "--quiet", "--device", "cpu", *SMALL]) == 0
    assert "125 tokens" in capsys.readouterr().out


def _nothing_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every FX graph falls back to eager, with the message "test says no"."""
    from npu_compile import FallbackReason, _planner
    from npu_compile._plan import Split

    said = Split("x", "aten::x", FallbackReason.MIXED_DEVICES, "test says no")
    monkeypatch.setattr(_planner, "split_points", lambda gm, device, ops: [said])
    monkeypatch.setattr(_planner, "pieces_to_capture", lambda gm, splits: ())


def test_demo_fails_when_nothing_was_captured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every FX graph falls back to eager: identical tokens would then prove nothing.

    _nothing_captured(monkeypatch)
    assert main(["demo", "--tokens", "3", "--quiet", "--device", "cpu", *SMALL]) == 1
    captured = capsys.readouterr()
    assert "captured no graph" in captured.err
    assert "test says no" in captured.out


def test_decode_bench_flags_a_variant_that_fell_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_compile._tools.demo_model import DemoConfig

    _nothing_captured(monkeypatch)
    report = _bench.decode_step_bench(
        torch.device("cpu"), steps=1, config=DemoConfig(layers=1, dim=32)
    )
    ours = report.rows[1]
    assert ours.name == "npu_compile reduce-overhead"
    assert "NOT captured" in ours.note
    assert "test says no" in ours.note


def test_decode_bench_checks_every_variant_against_eager() -> None:
    from npu_compile._tools.demo_model import DemoConfig

    report = _bench.decode_step_bench(
        torch.device("cpu"), steps=1, config=DemoConfig(layers=1, dim=32)
    )
    eager, ours = report.rows[:2]
    assert eager.matches_eager is True
    assert eager.max_abs_diff == 0.0
    assert ours.matches_eager is True, ours
    assert ours.max_abs_diff is not None
    assert ours.max_abs_diff < 1e-4
    # torch's own CUDA-graph variants are skipped on CPU; nothing counted a skipped graph.
    assert [row.cudagraph_skips for row in report.rows[:2]] == [0, 0]
    assert all(row.matches_eager is None for row in report.rows[2:])


def test_a_variant_that_computes_something_else_is_flagged() -> None:
    expected = torch.tensor([[[0.0, 1.0, 2.0]]])
    assert _bench._compare(expected.clone(), expected)["matches_eager"] is True
    other = _bench._compare(expected.flip(-1), expected)  # another greedy token
    assert other == {"matches_eager": False, "max_abs_diff": 2.0}


def test_diagnose_json_trace_and_a_user_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    (tmp_path / "my_steps.py").write_text(
        "import torch\n"
        "def make():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()\n"
        "    return model, (torch.randn(2, 8),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = tmp_path / "trace.json"
    code = main(
        [
            "diagnose",
            "--model",
            "my_steps:make",
            "--steps",
            "2",
            "--max-seconds",
            "2",
            "--quiet",
            "--json",
            "--trace",
            str(trace),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    document = json.loads(out)  # stdout holds the JSON document only
    assert document["verdict"] in {"Host Bound", "Device Bound"}
    assert document["compiled"]["label"] == "reduce-overhead"
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert "npu_mempool.replay" in names


def test_diagnose_with_a_bad_model_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--model", "no_such_module_x:make", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "cannot import" in err[0]


@pytest.mark.parametrize(("device", "noted"), [("cpu", True), ("cuda:0", False), ("npu:1", False)])
def test_demo_table_says_cpu_shows_no_speedup(device: str, noted: bool) -> None:
    from npu_compile._tools.demo import DemoResult

    result = DemoResult(
        device=device,
        tokens=4,
        eager_ms=1.0,
        compiled_ms=1.0,
        graphs_captured=2,
        replays=3,
        pool_bytes=0,
        eager_verdict="Host Bound",
        compiled_verdict="Host Bound",
        identical=True,
        fallbacks=(),
    )
    assert ("expect no speedup" in result.table()) is noted


class _Report:
    """A benchmark report stand-in: the write path is under test, not the benchmark."""

    def table(self) -> str:
        return "table"

    def to_json(self) -> dict[str, int]:
        return {"rows": 0}


def test_bench_refuses_a_link_planted_at_its_result_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_bench, "decode_step_bench", lambda *args, **kwargs: _Report())
    monkeypatch.setattr(_bench, "mlp_overhead_bench", lambda *args, **kwargs: _Report())
    out = tmp_path / "results"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "decode_step_cpu.json").symlink_to(victim)
    assert main(["bench", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "decode_step_cpu.json" in err
    assert len(err.strip().splitlines()) == 1
    assert victim.read_text() == "keep me"


def test_bench_writes_its_result_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_bench, "decode_step_bench", lambda *args, **kwargs: _Report())
    monkeypatch.setattr(_bench, "mlp_overhead_bench", lambda *args, **kwargs: _Report())
    out = tmp_path / "results"
    assert main(["bench", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 0
    written = json.loads((out / "decode_step_cpu.json").read_text())
    assert written == {"reports": [{"rows": 0}, {"rows": 0}]}
    assert [p.name for p in out.iterdir()] == ["decode_step_cpu.json"]  # no temporary left


def test_bench_on_a_full_disk_keeps_the_old_result_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno
    import os

    monkeypatch.setattr(_bench, "decode_step_bench", lambda *args, **kwargs: _Report())
    monkeypatch.setattr(_bench, "mlp_overhead_bench", lambda *args, **kwargs: _Report())
    out = tmp_path / "results"
    out.mkdir()
    (out / "decode_step_cpu.json").write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["bench", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ")
    assert "decode_step_cpu.json" in err
    assert "--out" in err
    assert len(err.strip().splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["decode_step_cpu.json"]  # no temporary left
    assert (out / "decode_step_cpu.json").read_text() == "old"
