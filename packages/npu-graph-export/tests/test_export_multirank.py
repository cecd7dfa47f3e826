"""The seed's multi-card example: two gloo ranks spawned with torch.multiprocessing."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from npu_graph_export import ModelFormatError, runtime
from npu_graph_export._proto import ge_ir_pb2 as ge

SEED_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from types import SimpleNamespace

    import torch
    import npu_graph_export as torchair
    from npu_graph_export import ExportConfig


    class AllReduceSingeGroup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p1 = torch.nn.Parameter(torch.tensor([[1.1, 1.1], [1.1, 1.1]]))
            self.p2 = torch.nn.Parameter(torch.tensor([[2.2, 2.2], [3.3, 3.3]]))

        def forward(self, x, y):
            x = x + y + self.p1 + self.p2
            torch.distributed.all_reduce(x)
            return x


    class GatherScatter(torch.nn.Module):
        def forward(self, x):
            gathered = torch.empty(4, 2)
            torch.distributed.all_gather_into_tensor(gathered, x)
            scattered = torch.empty(2, 2)
            torch.distributed.reduce_scatter_tensor(scattered, gathered)
            return gathered, scattered


    class ScatterIntoInput(torch.nn.Module):
        def forward(self, x, out):
            torch.distributed.reduce_scatter_tensor(out, x * 2)
            return out + 1


    class ScatterIntoSharedInput(torch.nn.Module):
        def forward(self, x, out, cache):
            torch.distributed.reduce_scatter_tensor(out, x * 2)
            return cache + 1


    def example(rank, world_size):
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
        x = torch.ones([2, 2], dtype=torch.int32)
        y = torch.ones([2, 2], dtype=torch.int32)
        mod = AllReduceSingeGroup()
        # The seed sets these on a CompilerConfig; ExportConfig is frozen and takes them when
        # built (npu_compile.CompilerConfig keeps the TorchAir assignments).
        config = ExportConfig(
            auto_atc_config_generated=True,
            enable_record_nn_module_stack=True,
            embed_limit_bytes=0,  # the seed's tree shows p1/p2 as weight files
        )
        torchair.dynamo_export(x, y, model=mod, dynamic=True, export_path="./mp",
                               export_name="mp_rank", config=config)
        # A CompilerConfig-like object from another package works the same way.
        options = SimpleNamespace(export=SimpleNamespace(experimental=SimpleNamespace(
            auto_atc_config_generated=False, enable_record_nn_module_stack=False)))
        torchair.dynamo_export(torch.ones(2, 2), model=GatherScatter(), export_path="./mp2",
                               export_name="gs", config=options)
        torchair.dynamo_export(torch.ones(4, 2), torch.zeros(2, 2), model=ScatterIntoInput(),
                               export_path="./mp3", export_name="rs")
        # The output buffer is also passed as the cache: one graph input (TorchAir's RefData).
        shared = torch.zeros(2, 2)
        torchair.dynamo_export(torch.ones(4, 2), shared, shared, model=ScatterIntoSharedInput(),
                               export_path="./mp4", export_name="shared")
        torch.distributed.destroy_process_group()


    def mp():
        world_size = 2
        torch.multiprocessing.spawn(example, args=(world_size, ), nprocs=world_size, join=True)


    if __name__ == '__main__':
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = sys.argv[1]
        mp()
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multirank")
    (root / "example2.py").write_text(SEED_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "example2.py", str(_free_port())],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return root


def test_tree_matches_the_seed(seed_run: Path) -> None:
    files = sorted(str(p.relative_to(seed_run / "mp")) for p in (seed_run / "mp").rglob("*"))
    assert files == [
        "model_relation_config.json",
        "mp_rank0.air",
        "mp_rank1.air",
        "numa_config.json",
        "rank_0",
        "rank_0/dynamo.pbtxt",
        "rank_0/p1",
        "rank_0/p2",
        "rank_1",
        "rank_1/dynamo.pbtxt",
        "rank_1/p1",
        "rank_1/p2",
    ]
    assert sorted(p.name for p in (seed_run / "mp3").iterdir()) == [
        "rank_0",
        "rank_1",
        "rs0.air",
        "rs1.air",
    ]
    assert not (seed_run / "mp2" / "model_relation_config.json").exists()
    p1 = np.fromfile(seed_run / "mp" / "rank_1" / "p1", dtype=np.float32)
    np.testing.assert_allclose(p1, [1.1] * 4)


def test_all_reduce_becomes_hcom_all_reduce_with_its_group(
    seed_run: Path, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    for rank in (0, 1):
        graph = read_graph(seed_run / "mp" / f"mp_rank{rank}.air")
        (hcom,) = [op for op in graph.op if op.type == "HcomAllReduce"]
        assert hcom.attr["reduction"].s == b"sum"
        assert b"rank_list=0,1" in hcom.attr["group"].s
        assert "ranklist" not in hcom.attr  # not an attribute of GE's HcomAllReduce
        assert hcom.attr["fusion"].i == 0
        weights = {op.name: op for op in graph.op if op.type == "FileConstant"}
        paths = sorted(op.attr["file_path"].s.decode() for op in weights.values())
        assert paths == [f"mp/rank_{rank}/p1", f"mp/rank_{rank}/p2"]
        assert all(op.attr["dtype"].dt == 0 for op in weights.values())  # ge::DT_FLOAT
        assert all("nn_module_stack" in op.attr for op in graph.op if op.type == "Add")
        (data_x, _data_y) = [op for op in graph.op if op.type == "Data"]
        assert data_x.output_desc[0].dtype == ge.DT_INT32


def test_rank_zero_writes_atc_templates(seed_run: Path) -> None:
    relation = json.loads((seed_run / "mp" / "model_relation_config.json").read_text())
    assert relation["deploy_config"] == [
        {"submodel_name": "mp_rank0.air", "deploy_device_id_list": "0:0:0"},
        {"submodel_name": "mp_rank1.air", "deploy_device_id_list": "0:0:1"},
    ]
    assert relation["rank_table"] == [
        {"rank_id": 0, "model_instance_id": 0},
        {"rank_id": 1, "model_instance_id": 1},
    ]
    (group,) = relation["comm_group"]
    assert "rank_list=0,1" in group["group_name"]
    assert group["group_rank_list"] == "[0, 1]"
    numa = json.loads((seed_run / "mp" / "numa_config.json").read_text())
    items = numa["cluster"][0]["cluster_nodes"][0]["item_list"]
    assert items == [{"item_id": 0}, {"item_id": 1}]


def test_collective_graphs_conform_to_ge_op_definitions(
    seed_run: Path,
    ge_check: Callable[[ge.GraphDef], set[str]],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    types = ge_check(read_graph(seed_run / "mp" / "mp_rank1.air"))
    types |= ge_check(read_graph(seed_run / "mp2" / "gs0.air"))
    assert {"HcomAllReduce", "HcomAllGather", "HcomReduceScatter"} <= types


def test_reduce_scatter_into_an_input_is_ref_data_with_assign(
    seed_run: Path,
    ge_check: Callable[[ge.GraphDef], set[str]],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(seed_run / "mp3" / "rs1.air")
    assert {"RefData", "Assign", "HcomReduceScatter"} <= ge_check(graph)
    (ref,) = [op for op in graph.op if op.type == "RefData"]
    assert ref.name == "out"
    (assign,) = [op for op in graph.op if op.type == "Assign"]
    assert assign.input[0] == "out:0"
    (net,) = [op for op in graph.op if op.type == "NetOutput"]
    assert f"{assign.name}:-1" in net.input
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = np.zeros((2, 2), np.float32)
    model = runtime.load(seed_run / "mp3", rank=1, collectives="replicated")
    (got,) = model.run(x, out)
    # Replicated: every rank holds x, so rank 1's chunk of the sum is 2 * (2 * x[2:]).
    np.testing.assert_allclose(out, 4 * x[2:])
    np.testing.assert_allclose(got, 4 * x[2:] + 1)


def test_reduce_scatter_into_a_tensor_passed_twice_is_one_ref_data(
    seed_run: Path,
    ge_check: Callable[[ge.GraphDef], set[str]],
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(seed_run / "mp4" / "shared0.air")
    ge_check(graph)
    inputs = [op for op in graph.op if op.type in {"Data", "RefData"}]
    assert sorted((op.type, op.name) for op in inputs) == [("Data", "x"), ("RefData", "out")]
    (ref,) = [op for op in graph.op if op.type == "RefData"]
    (assign,) = [op for op in graph.op if op.type == "Assign"]
    assert assign.input[0] == f"{ref.name}:0"
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    shared = np.zeros((2, 2), np.float32)
    model = runtime.load(seed_run / "mp4", rank=0, collectives="replicated")
    assert [info.name for info in model.inputs] == ["x", "out"]
    (got,) = model.run(x, shared)
    # The cache read after the scatter is the same buffer: it sees rank 0's chunk, 4 * x[:2].
    np.testing.assert_allclose(shared, 4 * x[:2])
    np.testing.assert_allclose(got, 4 * x[:2] + 1)


def test_gather_and_scatter_collectives(
    seed_run: Path, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(seed_run / "mp2" / "gs0.air")
    types = [op.type for op in graph.op]
    assert "HcomAllGather" in types
    assert "HcomReduceScatter" in types
    gather = next(op for op in graph.op if op.type == "HcomAllGather")
    scatter = next(op for op in graph.op if op.type == "HcomReduceScatter")
    assert gather.attr["rank_size"].i == 2
    assert scatter.attr["rank_size"].i == 2
    assert scatter.attr["reduction"].s == b"sum"
    assert "nn_module_stack" not in gather.attr


def test_runtime_refuses_collectives_unless_replicated(seed_run: Path) -> None:
    x = np.ones((2, 2), np.int32)
    model = runtime.load(seed_run / "mp", rank=1)
    with pytest.raises(ModelFormatError, match="replicated"):
        model.run(x, x)
    (out,) = runtime.load(seed_run / "mp", rank=1, collectives="replicated").run(x, x)
    p1, p2 = np.full((2, 2), 1.1, np.float32), np.array([[2.2, 2.2], [3.3, 3.3]], np.float32)
    np.testing.assert_allclose(out, 2 * (x + x + p1 + p2), rtol=1e-6)
    gathered, scattered = runtime.load(seed_run / "mp2", rank=1, collectives="replicated").run(
        np.arange(4, dtype=np.float32).reshape(2, 2)
    )
    np.testing.assert_allclose(gathered, np.tile(np.arange(4.0).reshape(2, 2), (2, 1)))
    np.testing.assert_allclose(scattered, 2 * np.arange(4.0).reshape(2, 2))


def test_torch_reduce_op_names_map_to_hccl_names() -> None:
    from npu_graph_export._converters.collective import _reduction
    from npu_graph_export.errors import UnsupportedOpError

    assert [_reduction(op) for op in ("sum", "product", "max", "min")] == [
        "sum",
        "prod",
        "max",
        "min",
    ]
    with pytest.raises(UnsupportedOpError, match="avg"):
        _reduction("avg")
