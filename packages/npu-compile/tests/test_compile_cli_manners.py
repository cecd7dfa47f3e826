"""How the ``npu-compile`` command line behaves around its commands: help, exit codes, progress."""

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from npu_compile._cli import commands as cli
from npu_compile._tools import bench as _bench
from npu_compile.cli import main

SMALL = ["--layers", "1", "--dim", "32"]


def test_every_argument_has_help_and_shows_its_default(
    argparse_problems: Callable[[argparse.ArgumentParser], list[str]],
) -> None:
    assert argparse_problems(cli._parser()) == []


def test_no_command_exits_2_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: npu-compile")
    assert "a command is required" in err


def test_ctrl_c_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_doctor", interrupted)
    assert main(["doctor"]) == 130
    assert capsys.readouterr().err == "npu-compile: interrupted\n"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_compile", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        check=False,
    )


def test_a_closed_pipe_ends_quietly(
    closed_pipe_run: Callable[[str], tuple[str, int]],
) -> None:
    err, code = closed_pipe_run("npu_compile")
    assert err == ""
    assert code == 141


def test_doctor_fails_when_the_cpp_compiler_is_broken(tmp_path: Path) -> None:
    # Answers --version (so Inductor's compiler search accepts it) but cannot compile anything.
    broken = tmp_path / "broken-c++"
    broken.write_text(
        '#!/bin/sh\ncase "$1" in --version) echo "fake 1.0"; exit 0;; esac\n'
        'echo "broken: cannot compile" >&2\nexit 1\n'
    )
    broken.chmod(0o755)
    done = _run("doctor", "--device", "cpu", env={"CXX": str(broken)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "static kernels (Inductor)  BROKEN" in done.stdout
    assert "cannot compile a test file" in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_json_records_the_threads_used_and_package_versions() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # the process default differs from the benchmark's single thread
    try:
        report = _bench.mlp_overhead_bench(number=2, repeat=1)
    finally:
        torch.set_num_threads(threads)
    environment = report.to_json()["environment"]
    assert environment["cpu_threads"] == "1"
    import npu_compile
    import npu_graph_export
    import npu_mempool
    import npu_static_kernel
    import npu_streams

    for module in (npu_compile, npu_graph_export, npu_mempool, npu_static_kernel, npu_streams):
        assert environment[module.__name__] == module.__version__
    json.dumps(environment)


def test_demo_progress_covers_compile_and_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--tokens", "3", "--device", "cpu", *SMALL]) == 0
    err = capsys.readouterr().err
    start = err.index("reduce-overhead: compiling and capturing graphs ...")
    done = err.index("reduce-overhead: compiling and capturing graphs done in")
    tokens = err.index("reduce-overhead: 3/3 tokens")
    timing = err.index("Host/Device Bound: timing one decode step, eager and reduce-overhead")
    assert start < done < tokens < timing
    # The verdict times the step compiled for the generation: nothing is compiled a second time.
    assert "diagnose reduce-overhead: compiling and capturing" not in err


def test_bench_and_diagnose_show_progress_unless_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = _bench.mlp_overhead_bench
    monkeypatch.setattr(
        _bench, "mlp_overhead_bench", lambda **kwargs: real(number=2, repeat=4, **kwargs)
    )
    assert main(["bench", "--steps", "1", "--device", "cpu", "--no-json"]) == 0
    err = capsys.readouterr().err
    assert "decode step: eager" in err
    assert "decode step: npu_compile reduce-overhead" in err
    assert "per-call overhead: round 4/4" in err

    quick = ["diagnose", "--steps", "1", "--max-seconds", "2", "--device", "cpu"]
    assert main([*quick, *SMALL]) == 0
    err = capsys.readouterr().err
    assert "diagnose eager" in err
    assert "diagnose reduce-overhead: compiling and capturing" in err

    assert main([*quick, "--quiet", *SMALL]) == 0
    assert capsys.readouterr().err == ""
