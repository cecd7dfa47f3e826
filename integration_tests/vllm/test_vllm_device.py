"""npu-compile's platform plugin on a GPU: vLLM's FULL and PIECEWISE modes through NpuGraphWrapper.

vLLM's CPU build has no static-graph mode, so these need an accelerator (``-m device``) and a vLLM
build for it; they are skipped elsewhere. Each engine runs under ``NPU_COMPILE_VLLM_PLATFORM=1``,
so vLLM compiles each piece with ``NpuCompilerInterface`` and captures with ``NpuGraphWrapper``;
the tokens must equal ``enforce_eager``'s.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("needs vLLM (`nox -s vllm` installs it)", allow_module_level=True)

from integration_tests.vllm.test_vllm_serving import _serve

pytestmark = [pytest.mark.device, pytest.mark.slow]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llama-device") / "checkpoint"


@pytest.fixture(scope="module")
def eager(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _serve({"enforce_eager": True}, checkpoint, tmp_path_factory.mktemp("eager"))


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE"])
def test_platform_plugin_graph_modes_decode_like_eager(
    mode: str,
    eager: dict[str, Any],
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NPU_COMPILE_VLLM_PLATFORM", "1")
    result = _serve({"compilation_config": {"cudagraph_mode": mode}}, checkpoint, tmp_path)
    assert result["tokens"] == eager["tokens"]
    for rank, worker in enumerate(result["npu_compile"]):
        # Pieces compiled by npu-compile (no capture of its own), graphs captured by the wrapper.
        assert worker["fx_graphs"] >= 1, (rank, worker)
        assert worker["fallbacks"] == 0, (rank, worker)
        assert worker["captures"] >= 1, (rank, worker)
        assert worker["replays"] > 0, (rank, worker)
