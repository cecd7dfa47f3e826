"""What the backend tells: log lines, profiler ranges, trace artifacts, debug-dir graphs."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from npu_compile import get_npu_backend


def _compiled() -> tuple[torch.nn.Module, torch.nn.Module]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    return model, torch.compile(model, backend=get_npu_backend())


def test_each_graph_and_each_capture_logs_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    _, compiled = _compiled()
    with caplog.at_level(logging.INFO), torch.no_grad():
        for _ in range(3):
            compiled(torch.randn(2, 4))
    ours = [r for r in caplog.records if r.name in ("npu_compile", "npu_mempool")]
    infos = [r.getMessage() for r in ours if r.levelno == logging.INFO]
    assert any("FX graph npu_compile_" in m and "inputs" in m for m in infos), infos
    captures = [m for m in infos if "captured a graph" in m]
    assert len(captures) == 1, infos
    assert "pool" in captures[0]


def test_debug_shows_input_classes_and_the_captured_graph(caplog: pytest.LogCaptureFixture) -> None:
    _, compiled = _compiled()
    with caplog.at_level(logging.DEBUG, logger="npu_compile"), torch.no_grad():
        compiled(torch.randn(2, 4))
    messages = [r.getMessage() for r in caplog.records if r.name == "npu_compile"]
    assert any("input classes" in m and "PARAMETER" in m for m in messages)
    assert any("as captured" in m and "def forward" in m for m in messages)


def test_profiler_shows_capture_replay_and_input_copy() -> None:
    _, compiled = _compiled()
    # acc_events: one cycle either way, and torch 2.11 warns on every profile without it.
    with torch.no_grad(), torch.profiler.profile(acc_events=True) as prof:
        for _ in range(3):
            compiled(torch.randn(2, 4))
    names = {event.name for event in prof.events()}
    assert {"npu_mempool.capture", "npu_mempool.replay", "npu_mempool.copy_inputs"} <= names


def test_torch_logs_and_compile_debug_reach_our_loggers(tmp_path: Path) -> None:
    script = (
        "import torch, npu_compile\n"
        "m = torch.nn.Linear(4, 4).eval()\n"
        "c = torch.compile(m, backend=npu_compile.get_npu_backend())\n"
        "with torch.no_grad():\n"
        "    c(torch.randn(2, 4)); c(torch.randn(2, 4))\n"
    )
    # The structured trace goes to TORCH_TRACE: TORCH_COMPILE_DEBUG writes one of its own
    # (torch_compile_debug/tlparse) only from torch 2.12 on.
    trace_dir = tmp_path / "trace"
    env = {
        **os.environ,
        "TORCH_LOGS": "+npu_compile",
        "TORCH_COMPILE_DEBUG": "1",
        "TORCH_TRACE": str(trace_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "captured a graph" in done.stderr
    assert "input classes" in done.stderr
    dumped = list(tmp_path.glob("torch_compile_debug/*/npu_compile/npu_compile_*.py"))
    assert dumped, sorted(str(p) for p in tmp_path.rglob("*"))[:20]
    traces = list(trace_dir.glob("*.log"))
    assert any("npu_mempool_capture" in t.read_text() for t in traces)


@pytest.mark.parametrize("skip_compile", [True, False])
def test_fx_summary_writes_operator_counts(tmp_path: Path, skip_compile: bool) -> None:
    import csv

    from npu_compile import CompilerConfig

    config = CompilerConfig()
    config.debug.fx_summary.type = "csv"
    config.debug.fx_summary.skip_compile = skip_compile
    config.debug.fx_summary.path = str(tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.ReLU()).eval()
    backend = get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(compiled(x), model(x))
    (summary,) = tmp_path.glob("*.csv")
    rows = list(csv.reader(summary.read_text().splitlines()))
    assert rows[0] == ["op", "count", "inputs of the first use"]
    counts = {row[0]: int(row[1]) for row in rows[1:]}
    assert sum(n for op, n in counts.items() if op.startswith("aten.relu")) == 2, counts
    assert any("float32[2, 4]" in row[2] for row in rows[1:])
    captured = sum(r.counters.captures for r in backend.stats.runners)
    assert captured == (0 if skip_compile else 1)


def test_stream_fork_and_join_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    import npu_compile

    def fn(x: torch.Tensor) -> torch.Tensor:
        with npu_compile.scope.npu_stream_switch("observed"):
            y = x * 2
        return y + 1

    compiled = torch.compile(fn, backend=get_npu_backend())
    with caplog.at_level(logging.DEBUG, logger="npu_streams"), torch.no_grad():
        compiled(torch.randn(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "npu_streams"]
    assert any("stream scope 'observed': fork after" in m for m in messages), messages
