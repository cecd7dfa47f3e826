"""The nodes of a multi-node vLLM server compare their npu-compile setup before the model loads.

What is compared, how the differences read, and the exchange through a ``torch.distributed`` store,
here without vLLM (a configuration object with the fields a worker's ``VllmConfig`` has). A real
two-node server, with each disagreement, is ``integration_tests/vllm/test_vllm_multinode.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from npu_compile import __version__
from npu_compile.vllm import _nodes
from npu_compile.vllm._nodes import (
    CHECK_VARIABLE,
    check_nodes,
    disagreement,
    exchange,
    local_report,
    register,
    verdict,
)


def _config(node_rank: int = 0, nnodes: int = 2, backend: str = "npu_compile") -> Any:
    """The fields of vLLM's ``VllmConfig`` the check reads."""
    ns = types.SimpleNamespace
    return ns(
        compilation_config=ns(mode=2, backend=backend),
        model_config=ns(dtype=torch.float32, max_model_len=128),
        scheduler_config=ns(max_num_batched_tokens=512, max_num_seqs=8),
        parallel_config=ns(nnodes=nnodes, node_rank=node_rank),
    )


def _report(node: str, uses: bool = True, **changed: str) -> dict[str, Any]:
    settings = {"npu-compile": "0.1.0", "torch": "2.13.0", "compile backend": "npu_compile"}
    return {"node": node, "settings": {**settings, **changed}, "uses": uses}


def test_local_report_names_the_node_and_what_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPU_COMPILE_VLLM_PLATFORM", raising=False)
    report = local_report(_config(node_rank=1))
    assert report["node"] == "node 1"
    assert report["uses"] is True
    settings = report["settings"]
    assert settings["npu-compile"] == __version__
    assert settings["torch"] == torch.__version__
    assert settings["NPU_COMPILE_VLLM_PLATFORM"] == "unset"
    assert settings["compile backend"] == "npu_compile"
    assert settings["dtype"] == "float32"
    assert settings["max_num_batched_tokens"] == "512"
    assert all(isinstance(value, str) for value in settings.values())

    monkeypatch.setenv("NPU_COMPILE_VLLM_PLATFORM", "1")
    report = local_report(_config(backend="inductor"))
    assert report["settings"]["NPU_COMPILE_VLLM_PLATFORM"] == "set"
    assert report["uses"] is True, "the platform plugin is npu-compile"


def test_a_backend_by_qualified_name_reports_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NPU_COMPILE_VLLM_PLATFORM", raising=False)
    (tmp_path / "serving_backend_for_nodes.py").write_text("backend = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = local_report(_config(backend="serving_backend_for_nodes.backend"))["settings"]
    assert found["backend module serving_backend_for_nodes"].startswith("found (sha256 ")
    absent = local_report(_config(backend="absent_serving_backend_for_nodes.backend"))
    assert absent["settings"]["backend module absent_serving_backend_for_nodes"] == "missing"
    # A backend torch registers by name (Inductor): no module, and npu-compile is not in use.
    inductor = local_report(_config(backend="inductor"))
    assert not any(key.startswith("backend module") for key in inductor["settings"])
    assert inductor["uses"] is False


def test_nodes_that_agree_have_nothing_to_say() -> None:
    reports = {0: _report("node 0"), 1: _report("node 0"), 2: _report("node 1")}
    assert disagreement(reports) is None
    assert verdict(reports, [], world_size=3, nnodes=2, timeout=60) == (None, None)


def test_each_difference_names_every_value_and_its_nodes() -> None:
    reports = {
        0: _report("node 0"),
        1: _report("node 1", **{"npu-compile": "0.2.0"}),
        2: _report("node 2", **{"compile backend": "inductor"}),
    }
    assert disagreement(reports) == (
        "npu-compile 0.1.0 on node 0 and node 2, 0.2.0 on node 1; "
        "compile backend npu_compile on node 0 and node 1, inductor on node 2"
    )


def test_a_setting_one_node_lacks_reads_absent() -> None:
    reports = {0: _report("node 0", **{"backend module m": "found"}), 1: _report("node 1")}
    assert disagreement(reports) == "backend module m found on node 0, absent on node 1"


def test_differences_are_an_error_where_a_node_uses_npu_compile() -> None:
    reports = {0: _report("node 0"), 1: _report("node 1", uses=False, torch="2.14.0")}
    error, warning = verdict(reports, [], world_size=2, nnodes=2, timeout=60)
    assert warning is None
    assert error is not None
    assert "\n" not in error
    assert error.startswith(
        "npu-compile: vLLM's nodes disagree: torch 2.13.0 on node 0, 2.14.0 on node 1; start "
        "every node with the same npu-compile"
    )
    assert f"{CHECK_VARIABLE}=0" in error


def test_differences_are_only_a_warning_where_no_node_uses_npu_compile() -> None:
    reports = {0: _report("node 0", uses=False), 1: _report("node 1", uses=False, torch="2.14")}
    error, warning = verdict(reports, [], world_size=2, nnodes=2, timeout=60)
    assert error is None
    assert warning is not None
    assert "torch 2.13.0 on node 0, 2.14 on node 1" in warning


def test_a_rank_that_sent_nothing_is_named_with_its_node() -> None:
    error, _ = verdict({0: _report("node 0")}, [1], world_size=2, nnodes=2, timeout=60)
    assert error is not None
    assert error.startswith("npu-compile: rank 1 (node 1) sent no settings within 60 s")
    assert "VLLM_PLUGINS" in error


def test_exchange_reads_every_rank_and_names_the_silent_ones() -> None:
    store = dist.HashStore()
    results: dict[int, tuple[dict[int, dict[str, Any]], list[int]]] = {}

    def rank(r: int) -> None:
        results[r] = exchange(store, r, 2, _report(f"node {r}"), timeout=30)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results[0] == results[1] == ({0: _report("node 0"), 1: _report("node 1")}, [])

    # A third rank of another world that never reports: the wait ends, and names it.
    alone = dist.HashStore()
    assert exchange(alone, 0, 2, _report("node 0"), timeout=0.2) == ({0: _report("node 0")}, [1])


def test_no_check_without_torch_distributed_or_when_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not dist.is_initialized()
    check_nodes(_config())  # nothing to compare with: returns
    monkeypatch.setenv(CHECK_VARIABLE, "0")
    check_nodes(_config())


def test_register_wraps_the_worker_start_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class WorkerWrapperBase:
        vllm_config = _config()

        def init_device(self) -> None:
            calls.append("init_device")

    module = types.ModuleType("vllm.v1.worker.worker_base")
    module.WorkerWrapperBase = WorkerWrapperBase  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.worker_base", module)
    checked: list[Any] = []
    monkeypatch.setattr(_nodes, "check_nodes", lambda config: checked.append(config))
    register()
    register()  # vLLM may load the plugins again: still one wrapper
    WorkerWrapperBase().init_device()
    assert calls == ["init_device"]
    assert checked == [WorkerWrapperBase.vllm_config]
    assert WorkerWrapperBase.init_device.__name__ == "init_device"


def test_register_leaves_a_process_without_workers_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm.v1.worker.worker_base", raising=False)
    register()
    assert "vllm.v1.worker.worker_base" not in sys.modules


_RANK = textwrap.dedent(
    """
    import json, os, sys, types
    import torch, torch.distributed as dist
    from npu_compile.errors import ConfigError
    from npu_compile.vllm._nodes import check_nodes, nodes_checked

    rank, port = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank
    )
    ns = types.SimpleNamespace
    config = ns(
        compilation_config=ns(mode=2, backend="npu_compile"),
        model_config=ns(dtype=torch.float32, max_model_len=128),
        scheduler_config=ns(max_num_batched_tokens=512, max_num_seqs=8),
        parallel_config=ns(nnodes=2, node_rank=rank),
    )
    try:
        check_nodes(config, timeout=60)
        error = None
    except ConfigError as raised:
        error = str(raised)
    print(json.dumps({"error": error, "nodes_checked": nodes_checked()}), flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _two_ranks(tmp_path: Path, platform_on: list[bool]) -> list[dict[str, Any]]:
    """Two processes in one ``torch.distributed`` group over loopback, each checking its node."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    port = str(_free_port())
    processes = []
    for rank, platform in enumerate(platform_on):
        env = {k: v for k, v in os.environ.items() if k != "NPU_COMPILE_VLLM_PLATFORM"}
        if platform:
            env["NPU_COMPILE_VLLM_PLATFORM"] = "1"
        processes.append(
            subprocess.Popen(
                [sys.executable, str(script), str(rank), port],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    results = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


@pytest.mark.slow
def test_two_processes_agree_through_the_default_store(tmp_path: Path) -> None:
    assert _two_ranks(tmp_path, [False, False]) == [{"error": None, "nodes_checked": 2}] * 2


@pytest.mark.slow
def test_two_processes_that_differ_both_stop_with_the_same_line(tmp_path: Path) -> None:
    results = _two_ranks(tmp_path, [True, False])
    errors = {result["error"] for result in results}
    assert len(errors) == 1, errors
    (error,) = errors
    assert error.startswith(
        "npu-compile: vLLM's nodes disagree: NPU_COMPILE_VLLM_PLATFORM set on node 0, unset on "
        "node 1; start every node"
    )
    assert all(result["nodes_checked"] == 0 for result in results)
