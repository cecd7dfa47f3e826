"""torch's AOT compile: the backend's graphs are saved, and another process loads them untraced.

vLLM compiles through this path by default (``VLLM_USE_AOT_COMPILE``): the compiled model is
saved to its compile cache and a later process loads it instead of tracing. The saving process
and the loading process are separate Python processes here, as in a server restart.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from npu_compile._artifact import _HEADER, _MAGIC, ARTIFACT_FORMAT, _unframe
from npu_compile.errors import BackendError

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import npu_compile
    from npu_compile.vllm import worker_stats

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            self.register_buffer("cache", torch.zeros(16, 8))

        def forward(self, x, pos):
            self.cache[pos] = x.sum(0)  # an in-place input update: AOT's wrapper is saved too
            return self.proj(x).relu() + self.cache.mean(0)

    phase, path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    eager = mode == "eager"
    torch.manual_seed(0)
    model, reference = Step().eval(), Step().eval()
    reference.load_state_dict(model.state_dict())
    config = npu_compile.CompilerConfig()
    config.debug.run_eagerly = eager
    backend = npu_compile.NpuBackend(config, capture=mode != "nocapture")
    steps = [(torch.randn(4, 8), torch.tensor([i])) for i in range(3)]
    with torch.no_grad():
        if phase == "save":
            # torch.compile attaches `aot_compile` only while the option is on (off by default
            # before torch 2.13), as vLLM sets it.
            with torch._dynamo.config.patch(enable_aot_compile=True):
                compiled = torch.compile(model.forward, backend=backend, fullgraph=True)
                fn = compiled.aot_compile((steps[0], {}))
        else:
            with open(path, "rb") as f:
                fn = torch.compiler.load_compiled_function(f, f_globals=Step.forward.__globals__)
        same = True
        for x, pos in steps:
            out = fn(model, x, pos).clone()
            same = same and torch.allclose(out, reference(x, pos))
    if phase == "save":
        fn.save_compiled_function(path)
    print(json.dumps({"same": bool(same), "stats": worker_stats()}))
    """
)


def _run(
    tmp_path: Path,
    phase: str,
    eager: bool = False,
    inductor_cache: Path | None = None,
    mode: str | None = None,
) -> dict[str, object]:
    script = tmp_path / "step.py"
    script.write_text(_SCRIPT)
    artifact = tmp_path / "step.aot"
    env = None
    if inductor_cache is not None:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            phase,
            str(artifact),
            mode or ("eager" if eager else "capture"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.slow
def test_saved_graph_loads_in_another_process_without_tracing(tmp_path: Path) -> None:
    saved = _run(tmp_path, "save")
    assert saved["same"] is True
    assert saved["stats"] == {**saved["stats"], "fx_graphs": 1, "captured": 1, "fallbacks": 0}  # type: ignore[dict-item]

    loaded = _run(tmp_path, "load")
    stats = loaded["stats"]
    assert isinstance(stats, dict)
    assert loaded["same"] is True, "the loaded graph computed other numbers than eager"
    # Nothing was traced or compiled: the backend never ran; the runner was rebuilt and replays.
    assert stats["fx_graphs"] == 0
    assert stats["loaded"] == 1
    assert stats["captured"] == 1
    assert stats["fallbacks"] == 0
    assert stats["replays"] >= 1


@pytest.mark.slow
def test_eager_graph_saves_and_loads(tmp_path: Path) -> None:
    # debug.run_eagerly: the pipeline without the capture, saved and loaded the same way.
    assert _run(tmp_path, "save", eager=True)["same"] is True
    loaded = _run(tmp_path, "load", eager=True)
    stats = loaded["stats"]
    assert isinstance(stats, dict)
    assert loaded["same"] is True
    assert (stats["fx_graphs"], stats["loaded"], stats["eager"], stats["captures"]) == (0, 1, 1, 0)


@pytest.mark.slow
def test_other_options_do_not_reuse_a_saved_result(tmp_path: Path) -> None:
    # AOT autograd's on-disk cache, shared by the processes of a machine, keys a graph by torch's
    # options; a save with other npu-compile options must compile anew, not load the first
    # process's graph runner (torch 2.11 did: its key holds nothing that differs per process).
    cache = tmp_path / "inductor-cache"
    assert _run(tmp_path, "save", inductor_cache=cache)["stats"]["captured"] == 1  # type: ignore[index]
    stats = _run(tmp_path, "save", eager=True, inductor_cache=cache)["stats"]
    assert isinstance(stats, dict)
    assert (stats["fx_graphs"], stats["eager"], stats["captured"]) == (1, 1, 0)


@pytest.mark.slow
def test_a_backend_without_capture_does_not_reuse_a_captured_result(tmp_path: Path) -> None:
    # vLLM's backend (capture=False: its own wrapper captures) and a plain torch.compile with the
    # same options share the machine's cache: neither may load the other's graph.
    cache = tmp_path / "inductor-cache"
    assert _run(tmp_path, "save", inductor_cache=cache)["stats"]["captured"] == 1  # type: ignore[index]
    stats = _run(tmp_path, "save", inductor_cache=cache, mode="nocapture")["stats"]
    assert isinstance(stats, dict)
    assert (stats["fx_graphs"], stats["eager"], stats["captured"]) == (1, 1, 0)


def _frame(inner: bytes, *, magic: bytes = _MAGIC, version: int = ARTIFACT_FORMAT) -> bytes:
    name = b"npu_compile_0"
    digest = hashlib.sha256(inner).digest()
    return _HEADER.pack(magic, version, digest, len(name)) + name + inner


def test_frame_round_trip() -> None:
    assert _unframe(_frame(b"bundle")) == ("npu_compile_0", b"bundle")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (_frame(b"bundle", magic=b"something else!\0"), "no npu-compile header"),
        (_frame(b"bundle", version=ARTIFACT_FORMAT + 1), "has format"),
        (_frame(b"bundle")[:-1], "SHA-256"),
        (_frame(b"bundle")[:-6] + b"bundLE", "SHA-256"),
    ],
    ids=["empty", "foreign", "newer-format", "truncated", "edited"],
)
def test_damaged_artifact_is_refused_before_unpickling(data: bytes, message: str) -> None:
    with pytest.raises(BackendError, match=message) as raised:
        _unframe(data)
    assert "delete the compile cache entry" in str(raised.value)
