"""npu-compile as vLLM's compile backend: tokens equal eager, graphs replay, the cache reloads.

Each engine runs in a fresh interpreter (``_serve.py``) with its own ``VLLM_CACHE_ROOT``, on a tiny
Llama checkpoint with random weights, under vLLM's defaults (AOT compile on). Every compiled run
is compared with an eager run of the same engine (``enforce_eager=True``), token for token.
Starting an engine takes most of each test's time, so runs are shared through module fixtures.

``nox -s vllm`` installs vLLM (CPU build) and runs these; elsewhere the module is skipped. This
directory has no ``__init__.py`` on purpose: pytest would import it as a package named ``vllm``
(its first parent without one is ``integration_tests/``), hiding vLLM itself.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration_tests.vllm._serve import BATCHES, MAX_TOKENS, RESULT_PREFIX, engine_env

if importlib.util.find_spec("vllm") is None:
    pytest.skip("needs vLLM (`nox -s vllm` installs it)", allow_module_level=True)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMPILED = {"compilation_config": {"mode": 2, "backend": "npu_compile"}}
CONFIGURED = {
    "compilation_config": {
        "mode": 2,
        "backend": "integration_tests.vllm._configured_backend.backend",
    }
}


def _serve(options: dict[str, Any], checkpoint: Path, cache_root: Path) -> dict[str, Any]:
    """One engine start in a fresh interpreter: ``_serve.py``'s report."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "integration_tests.vllm._serve",
            str(checkpoint),
            json.dumps(options),
        ],
        cwd=cache_root,
        env=engine_env(cache_root, ROOT),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = f"stdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-6000:]}"
    assert done.returncode == 0, f"vLLM run {options} failed\n{log}"
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert results, f"vLLM run {options} printed no result\n{log}"
    result: dict[str, Any] = json.loads(results[-1].removeprefix(RESULT_PREFIX))
    return result


def _assert_graphs_replayed(result: dict[str, Any], workers: int) -> None:
    """Every worker compiled with npu-compile, captured graphs, replayed them, never fell back."""
    stats = result["npu_compile"]
    assert len(stats) == workers, stats
    for rank, worker in enumerate(stats):
        assert worker["captured"] >= 1, (rank, worker)
        assert worker["replays"] > 0, (rank, worker)
        assert worker["fallbacks"] == 0, (rank, worker)
        assert worker["graph_fallbacks"] == 0, (rank, worker)


def _aot_counters(result: dict[str, Any]) -> dict[str, int]:
    """vLLM's AOT compile counts in the (single) worker: compiles, artifacts saved and loaded."""
    counters: dict[str, int] = result["vllm"][0]["compilation_counter"]
    return {name: value for name, value in counters.items() if name.startswith("num_aot_")}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tiny Llama goes: the first run writes it, later runs load it."""
    return tmp_path_factory.mktemp("llama") / "checkpoint"


@pytest.fixture(scope="module")
def eager(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference: vLLM without compilation or graphs, one worker."""
    result = _serve({"enforce_eager": True}, checkpoint, tmp_path_factory.mktemp("eager"))
    shapes = [[len(ids) for ids in batch] for batch in result["tokens"]]
    assert shapes == [[MAX_TOKENS] * len(batch) for batch in BATCHES], result["tokens"]
    return result


@pytest.fixture(scope="module")
def compiled_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``VLLM_CACHE_ROOT`` of the compiled single-worker runs: a cold start, then a warm one."""
    return tmp_path_factory.mktemp("compiled")


@pytest.fixture(scope="module")
def compiled(checkpoint: Path, compiled_cache: Path) -> dict[str, Any]:
    """``backend="npu_compile"``, one worker, from an empty compile cache."""
    return _serve(COMPILED, checkpoint, compiled_cache)


def test_npu_compile_backend_decodes_like_eager(
    eager: dict[str, Any], compiled: dict[str, Any]
) -> None:
    assert compiled["tokens"] == eager["tokens"]
    _assert_graphs_replayed(compiled, workers=1)


def test_tensor_parallel_workers_decode_like_eager(
    eager: dict[str, Any], checkpoint: Path, tmp_path: Path
) -> None:
    # Two workers in separate processes (vLLM's multiprocessing executor), each with its shard.
    result = _serve({**COMPILED, "tensor_parallel_size": 2}, checkpoint, tmp_path)
    assert result["tokens"] == eager["tokens"]
    _assert_graphs_replayed(result, workers=2)


def test_warm_start_loads_the_compiled_model_from_the_cache(
    eager: dict[str, Any],
    compiled: dict[str, Any],
    checkpoint: Path,
    compiled_cache: Path,
) -> None:
    # The cold start compiled through npu-compile and saved vLLM's AOT artifact ...
    cold = _aot_counters(compiled)
    assert cold["num_aot_artifacts_saved"] >= 1, cold
    assert cold["num_aot_artifacts_loaded"] == 0, cold
    # ... which a second process with the same cache loads instead of compiling.
    warm = _serve(COMPILED, checkpoint, compiled_cache)
    counters = _aot_counters(warm)
    assert counters["num_aot_artifacts_loaded"] >= 1, counters
    assert counters["num_aot_compiles"] == 0, counters
    assert warm["tokens"] == eager["tokens"]
    _assert_graphs_replayed(warm, workers=1)
    # npu-compile rebuilt its graphs from the artifact rather than compiling them again.
    stats = warm["npu_compile"][0]
    assert stats["loaded"] >= 1, stats
    assert stats["fx_graphs"] == 0, stats


def test_configured_backend_named_by_qualified_name(
    eager: dict[str, Any], checkpoint: Path, tmp_path: Path
) -> None:
    result = _serve(CONFIGURED, checkpoint, tmp_path)
    assert result["tokens"] == eager["tokens"]
    _assert_graphs_replayed(result, workers=1)
    # The worker compiled with the configured object, not with a default backend.
    configured = result["vllm"][0]["configured_backend"]
    assert configured is not None, "the worker never imported _configured_backend"
    assert configured["fx_graphs"] >= 1, configured


def test_platform_plugin_sends_vllm_default_compile_to_npu_compile(
    eager: dict[str, Any], checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No compilation_config at all: vLLM's default, under npu-compile's platform plugin. On CPU,
    # vLLM turns its compile mode into one Dynamo trace, which the plugin hands to npu_compile.
    monkeypatch.setenv("NPU_COMPILE_VLLM_PLATFORM", "1")
    result = _serve({}, checkpoint, tmp_path)
    assert result["tokens"] == eager["tokens"]
    _assert_graphs_replayed(result, workers=1)
    assert result["npu_compile"][0]["fx_graphs"] >= 1
