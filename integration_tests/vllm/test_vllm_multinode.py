"""Two vLLM nodes on this machine over loopback, with npu-compile in every worker.

vLLM's own multi-node launch with the ``mp`` executor: node 0 is ``vllm.LLM(..., nnodes=2,
node_rank=0, master_addr="127.0.0.1", master_port=P)`` (``_serve.py``), node 1 is ``vllm serve
MODEL --headless --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port P`` started from
Python with the ``headless.py`` that ``docs/serving-vllm.md`` (section 3) shows, taken from the
page as a reader saves it (the CPU wheel's ``vllm`` command does not start). The nodes meet at
``torch.distributed`` init over loopback; each runs one worker, so ``tensor_parallel_size=2`` or
``pipeline_parallel_size=2`` spans both. Ray is not run: at vLLM 0.32 the CPU platform declares no
Ray device key, so Ray refuses the CPU backend.

Each node has its own environment (``PYTHONPATH``, ``VLLM_CACHE_ROOT``,
``NPU_COMPILE_VLLM_PLATFORM``) as it would on its own host, which is how the disagreements are made:
another npu-compile (a copy with another version first on node 1's path), a configured backend's
module on node 0's path only, the platform variable on node 0 only. Each must stop both nodes
before the model loads, with one line naming the nodes and what differs.

Every process of a run carries a tag in its environment; when a run ends, passed or failed, its
process groups are stopped and ``/proc`` must hold no tagged process (``_cluster.py``).

``nox -s vllm-multinode`` runs these (about ten minutes on two cores); ``nox -s vllm`` leaves them
out (marker ``multinode``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("needs vLLM (`nox -s vllm-multinode` installs it)", allow_module_level=True)

import npu_compile
from doc_blocks import file_block

from integration_tests.vllm._cluster import Cluster, free_port, python, serve_flags
from integration_tests.vllm._serve import ENGINE_ARGS, RESULT_PREFIX, engine_env
from integration_tests.vllm.test_vllm_serving import _assert_graphs_replayed, _serve

pytestmark = [pytest.mark.slow, pytest.mark.multinode]

ROOT = Path(__file__).resolve().parents[2]
# Both nodes must agree on the scheduler limits: `vllm.LLM` and `vllm serve` default differently,
# and nodes that differ run collectives of different sizes (the node check names this too).
LIMITS = {"max_num_batched_tokens": 512, "max_num_seqs": 8}
COMPILED = {"compilation_config": {"mode": 2, "backend": "npu_compile"}}
# One engine start takes a minute or two here; a run that fails at the node check, under one.
RUN_SECONDS = 600.0
DISAGREE = "npu-compile: vLLM's nodes disagree: "
SERVING_DOC = ROOT / "docs" / "serving-vllm.md"


def _multinode(rank: int, port: int) -> dict[str, Any]:
    return {
        "nnodes": 2,
        "node_rank": rank,
        "master_addr": "127.0.0.1",
        "master_port": port,
        "distributed_executor_backend": "mp",
    }


def _headless(checkpoint: Path) -> list[str]:
    """Node 1's command line: ``python headless.py CHECKPOINT --headless`` (flags follow).

    ``headless.py`` is the block of ``docs/serving-vllm.md`` that the page says to save under that
    name, written out as it stands there: the nodes run what users are told to run.
    """
    script = checkpoint.parent / "headless-node" / "headless.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(file_block(SERVING_DOC, "headless.py"), encoding="utf-8")
    return [sys.executable, str(script), str(checkpoint), "--headless"]


def _env(cache_root: Path, path: list[Path], extra: Mapping[str, str]) -> dict[str, str]:
    env = engine_env(cache_root, ROOT)
    # A node's own view: what is on its path, and NPU_COMPILE_VLLM_PLATFORM only where asked.
    env.pop("NPU_COMPILE_VLLM_PLATFORM", None)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), env["PYTHONPATH"]])
    return {**env, **extra}


def _start_nodes(
    cluster: Cluster,
    checkpoint: Path,
    options: Mapping[str, Any],
    caches: tuple[Path, Path],
    paths: tuple[list[Path], list[Path]] = ([], []),
    envs: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> tuple[Any, Any]:
    """Node 1 (headless), then node 0 (the engine), with the same engine arguments."""
    port = free_port()
    for cache in caches:
        cache.mkdir(parents=True, exist_ok=True)
    headless = {**ENGINE_ARGS, **options, **LIMITS, **_multinode(1, port)}
    node1 = cluster.start(
        1,
        _headless(checkpoint) + serve_flags(headless),
        _env(caches[1], paths[1], envs[1]),
        cwd=caches[1],
    )
    engine = {**options, **LIMITS, **_multinode(0, port)}
    node0 = cluster.start(
        0,
        python("integration_tests.vllm._serve", str(checkpoint), json.dumps(engine)),
        _env(caches[0], paths[0], envs[0]),
        cwd=caches[0],
    )
    return node0, node1


def _serve_two_nodes(
    tmp_path: Path, checkpoint: Path, options: Mapping[str, Any], caches: tuple[Path, Path]
) -> dict[str, Any]:
    """Both nodes serve ``_serve.py``'s batches; node 0's report (every worker of both nodes)."""
    with Cluster(tmp_path) as cluster:
        node0, node1 = _start_nodes(cluster, checkpoint, options, caches)
        status = cluster.wait(node0, RUN_SECONDS)
        logs = f"{node0.tail()}\n{node1.tail()}"
        assert status == 0, f"node 0 failed\n{logs}"
        # Node 1 serves until it is stopped (when the cluster ends): it must still be up.
        assert node1.process.poll() is None, f"node 1 stopped before node 0 was done\n{logs}"
        results = [line for line in node0.output().splitlines() if line.startswith(RESULT_PREFIX)]
        assert results, f"node 0 printed no result\n{logs}"
    result: dict[str, Any] = json.loads(results[-1].removeprefix(RESULT_PREFIX))
    return result


def _assert_two_nodes_checked(result: Mapping[str, Any]) -> None:
    for rank, worker in enumerate(result["npu_compile"]):
        assert worker["nodes_checked"] == 2, (rank, worker)


def _aot_counters(result: Mapping[str, Any]) -> list[dict[str, int]]:
    """vLLM's AOT compile counts of each worker (both nodes)."""
    return [
        {k: v for k, v in worker["compilation_counter"].items() if k.startswith("num_aot_")}
        for worker in result["vllm"]
    ]


def _rank_directories(cache_root: Path) -> dict[str, list[str]]:
    """vLLM's AOT compile cache under one root: per model hash, the rank directories in it."""
    aot = cache_root / "torch_compile_cache" / "torch_aot_compile"
    return {
        entry.name: sorted(p.name for p in entry.iterdir() if p.name.startswith("rank_"))
        for entry in sorted(aot.iterdir())
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tiny Llama goes: the eager run writes it, every later run loads it."""
    return tmp_path_factory.mktemp("llama-multinode") / "checkpoint"


@pytest.fixture(scope="module")
def eager(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One node, one worker, no compilation: the tokens both nodes must produce."""
    return _serve({"enforce_eager": True, **LIMITS}, checkpoint, tmp_path_factory.mktemp("eager"))


@pytest.fixture(scope="module")
def pipeline_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``VLLM_CACHE_ROOT`` for both nodes (a shared file system): a cold, then a warm start."""
    return tmp_path_factory.mktemp("pipeline-cache")


@pytest.fixture(scope="module")
def pipeline_cold(
    eager: dict[str, Any],
    checkpoint: Path,
    pipeline_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    options = {**COMPILED, "pipeline_parallel_size": 2}
    caches = (pipeline_cache, pipeline_cache)
    return _serve_two_nodes(tmp_path_factory.mktemp("pp-cold"), checkpoint, options, caches)


def test_tensor_parallel_across_two_nodes_decodes_like_eager(
    eager: dict[str, Any], checkpoint: Path, tmp_path: Path
) -> None:
    # Each node its own compile cache, as on two hosts.
    caches = (tmp_path / "cache-node0", tmp_path / "cache-node1")
    options = {**COMPILED, "tensor_parallel_size": 2}
    result = _serve_two_nodes(tmp_path, checkpoint, options, caches)
    assert result["tokens"] == eager["tokens"]
    _assert_graphs_replayed(result, workers=2)
    _assert_two_nodes_checked(result)
    # vLLM keys its compile cache by rank: each node holds its own rank's, under the same hash.
    assert _rank_directories(caches[0]) == {
        name: ["rank_0_0"] for name in _rank_directories(caches[1])
    }
    assert list(_rank_directories(caches[1]).values()) == [["rank_1_0"]]


def test_pipeline_parallel_across_two_nodes_decodes_like_eager(
    eager: dict[str, Any], pipeline_cold: dict[str, Any], pipeline_cache: Path
) -> None:
    assert pipeline_cold["tokens"] == eager["tokens"]
    _assert_graphs_replayed(pipeline_cold, workers=2)
    _assert_two_nodes_checked(pipeline_cold)
    for worker in _aot_counters(pipeline_cold):
        assert worker["num_aot_artifacts_saved"] >= 1, worker
        assert worker["num_aot_artifacts_loaded"] == 0, worker
    # One shared cache root: the two stages' graphs side by side, one directory per rank.
    assert list(_rank_directories(pipeline_cache).values()) == [["rank_0_0", "rank_1_0"]]


def test_pipeline_warm_start_loads_each_rank_from_the_shared_cache(
    eager: dict[str, Any],
    pipeline_cold: dict[str, Any],
    checkpoint: Path,
    pipeline_cache: Path,
    tmp_path: Path,
) -> None:
    # The stages compile different graphs (embedding, head), so a rank that loaded the other's
    # would not decode these tokens.
    options = {**COMPILED, "pipeline_parallel_size": 2}
    warm = _serve_two_nodes(tmp_path, checkpoint, options, (pipeline_cache, pipeline_cache))
    assert warm["tokens"] == eager["tokens"]
    _assert_graphs_replayed(warm, workers=2)
    for worker in _aot_counters(warm):
        assert worker["num_aot_artifacts_loaded"] >= 1, worker
        assert worker["num_aot_compiles"] == 0, worker
    for rank, stats in enumerate(warm["npu_compile"]):
        assert stats["loaded"] >= 1, (rank, stats)
        assert stats["fx_graphs"] == 0, (rank, stats)


def _other_npu_compile(directory: Path) -> tuple[Path, str]:
    """A copy of npu_compile that says it is another version, as another install would."""
    source = Path(npu_compile.__file__).parent
    target = directory / "npu_compile"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    version = f"{npu_compile.__version__}+othernode"
    (target / "_version.py").write_text(f'__version__ = "{version}"\n')
    return directory, version


def _backend_module(directory: Path) -> Path:
    """A configured backend's module, ``node_backend``: the repository's configured backend."""
    directory.mkdir()
    (directory / "node_backend.py").write_text(
        "from integration_tests.vllm._configured_backend import backend\n"
    )
    return directory


@pytest.mark.parametrize("differs", ["npu-compile version", "backend module", "platform variable"])
def test_nodes_that_disagree_stop_before_the_model_loads(
    differs: str, checkpoint: Path, eager: dict[str, Any], tmp_path: Path
) -> None:
    paths: tuple[list[Path], list[Path]] = ([], [])
    envs: tuple[dict[str, str], dict[str, str]] = ({}, {})
    options: dict[str, Any] = {**COMPILED, "tensor_parallel_size": 2}
    if differs == "npu-compile version":
        other, version = _other_npu_compile(tmp_path / "other")
        paths[1].append(other)
        expected = [f"npu-compile {npu_compile.__version__} on node 0, {version} on node 1"]
    elif differs == "backend module":
        paths[0].append(_backend_module(tmp_path / "backends"))
        options["compilation_config"] = {"mode": 2, "backend": "node_backend.backend"}
        expected = ["backend module node_backend found (sha256 ", ") on node 0, missing on node 1"]
    else:
        # vLLM's default compilation on both; npu-compile's platform on node 0 only.
        options = {"tensor_parallel_size": 2}
        envs[0]["NPU_COMPILE_VLLM_PLATFORM"] = "1"
        expected = [
            "NPU_COMPILE_VLLM_PLATFORM set on node 0, unset on node 1",
            "compile backend npu_compile on node 0, inductor on node 1",
        ]
    caches = (tmp_path / "cache-node0", tmp_path / "cache-node1")
    with Cluster(tmp_path) as cluster:
        node0, node1 = _start_nodes(cluster, checkpoint, options, caches, paths, envs)
        statuses = [cluster.wait(node, RUN_SECONDS) for node in (node0, node1)]
        logs = f"{node0.tail()}\n{node1.tail()}"
        assert statuses[0] != 0, f"node 0 must fail\n{logs}"
        assert statuses[1] != 0, f"node 1 must fail\n{logs}"
        outputs = [node0.output(), node1.output()]
    lines = {
        line[line.index(DISAGREE) :]
        for output in outputs
        for line in output.splitlines()
        if DISAGREE in line
    }
    # Each node's worker stopped with the same single line.
    assert len(lines) == 1, f"{lines}\n{logs}"
    assert all(DISAGREE in output for output in outputs), logs
    (line,) = lines
    for fragment in expected:
        assert fragment in line, line
    # It stopped at the start: no model loaded, no token produced.
    for output in outputs:
        assert "Starting to load model" not in output, logs
        assert RESULT_PREFIX not in output, logs


def test_every_process_stops_when_the_test_fails(
    checkpoint: Path, eager: dict[str, Any], tmp_path: Path
) -> None:
    clusters: list[Cluster] = []
    seen: list[tuple[int, str]] = []
    with pytest.raises(RuntimeError, match="the test failed here"):
        _fail_while_a_node_runs(tmp_path, checkpoint, clusters, seen)
    assert any(_is_worker(command) for _, command in seen), f"no worker had started: {seen}"
    assert clusters[0].processes() == [], "a process of the failed test is still running"


def _fail_while_a_node_runs(
    tmp_path: Path, checkpoint: Path, clusters: list[Cluster], seen: list[tuple[int, str]]
) -> None:
    """Node 1 alone, its worker waiting for node 0 at ``torch.distributed`` init; then a failure."""
    cache = tmp_path / "cache"
    cache.mkdir()
    options = {**COMPILED, "tensor_parallel_size": 2}
    headless = {**ENGINE_ARGS, **options, **LIMITS, **_multinode(1, free_port())}
    with Cluster(tmp_path) as cluster:
        clusters.append(cluster)
        cluster.start(
            1,
            _headless(checkpoint) + serve_flags(headless),
            _env(cache, [], {}),
            cwd=cache,
        )
        seen += _wait_for_worker(cluster)
        raise RuntimeError("the test failed here")


def _is_worker(command: str) -> bool:
    # vLLM names its worker processes (the process title replaces the command line).
    return command.startswith("VLLM::Worker")


def _wait_for_worker(cluster: Cluster, timeout: float = 300.0) -> list[tuple[int, str]]:
    """The cluster's processes once the node has started its worker (``VLLM::Worker``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes = cluster.processes()
        if any(_is_worker(command) for _, command in processes):
            return processes
        if cluster.nodes[0].process.poll() is not None:
            raise AssertionError(f"the node stopped\n{cluster.nodes[0].tail()}")
        time.sleep(1.0)
    raise AssertionError(f"no worker within {timeout:.0f} s\n{cluster.nodes[0].tail()}")
