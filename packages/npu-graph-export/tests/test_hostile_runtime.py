"""Hostile model files for the reference runtime: confined weight files, a memory budget checked
before allocating, and no silent casts or wrong chunks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from npu_graph_export import (
    ExportConfig,
    MemoryLimitError,
    ModelFormatError,
    NpuGraphExportError,
    RuntimeInputError,
    dynamo_export,
    runtime,
)
from npu_graph_export._graph import GraphBuilder, Tensor
from npu_graph_export._proto import ge_ir_pb2 as ge

MIB = 1 << 20


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x), dim=-1)


X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """An export with weights in files (proj_weight: float32[3, 4], proj_bias) and its output."""
    torch.manual_seed(0)
    model = Small().eval()
    path = tmp_path_factory.mktemp("files") / "model"
    dynamo_export(
        torch.from_numpy(X), model=model, export_path=path, config=ExportConfig(embed_limit_bytes=0)
    )
    with torch.no_grad():
        return path, model(torch.from_numpy(X)).numpy()


def _copy(exported: tuple[Path, np.ndarray], tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "model"
    shutil.copytree(exported[0], target)
    return target


def _model_def(directory: Path) -> ge.ModelDef:
    model = ge.ModelDef()
    model.ParseFromString((directory / "export.air").read_bytes())
    return model


def _save(directory: Path, model: ge.ModelDef) -> None:
    (directory / "export.air").write_bytes(model.SerializeToString())


def _file_constant(model: ge.ModelDef, weight: str = "proj_weight") -> ge.OpDef:
    for op in model.graph[0].op:
        if op.type == "FileConstant" and op.attr["file_path"].s.endswith(weight.encode()):
            return op
    raise AssertionError(f"no FileConstant for {weight}")


def _point_weight_at(directory: Path, recorded: str) -> None:
    model = _model_def(directory)
    _file_constant(model).attr["file_path"].s = recorded.encode()
    _save(directory, model)


def _secret(tmp_path: Path, size: int = 48) -> Path:
    """A file outside the model directory, as large as proj_weight (3 x 4 float32)."""
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(np.full(size // 4, 1e6, np.float32).tobytes())
    return secret


# -- weight files stay inside the model directory -------------------------------------------------


def test_the_weights_of_a_normal_export_still_load(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    (out,) = runtime.load(_copy(exported, tmp_path)).run(X)
    np.testing.assert_allclose(out, exported[1], rtol=1e-6)


def test_an_absolute_file_path_outside_the_model_directory_is_not_read(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    secret = _secret(tmp_path)
    _point_weight_at(directory, str(secret))
    with pytest.raises(ModelFormatError, match="not found") as info:
        runtime.load(directory)
    assert "weights are only read from the model's directory" in str(info.value)


@pytest.mark.parametrize("recorded", ["../outside/secret", "rank_0/../../outside/secret"])
def test_a_dotdot_file_path_is_not_followed(
    exported: tuple[Path, np.ndarray],
    tmp_path: Path,
    recorded: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = _copy(exported, tmp_path)
    monkeypatch.chdir(directory)  # where ATC would resolve a relative path from
    _secret(tmp_path)
    (directory / "rank_0").mkdir()
    _point_weight_at(directory, recorded)
    with pytest.raises(ModelFormatError, match="not found"):
        runtime.load(directory)


def test_a_symlink_leaving_the_model_directory_is_refused(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    secret = _secret(tmp_path)
    (directory / "proj_weight").unlink()
    (directory / "proj_weight").symlink_to(secret)
    with pytest.raises(ModelFormatError, match="symbolic link"):
        runtime.load(directory)
    # The same through a symlinked directory.
    (directory / "proj_weight").unlink()
    (directory / "rank_0").symlink_to(secret.parent, target_is_directory=True)
    (secret.parent / "proj_weight").write_bytes(secret.read_bytes())
    _point_weight_at(directory, "rank_0/proj_weight")
    with pytest.raises(
        ModelFormatError, match="rank_0/proj_weight is or passes through a symbolic"
    ):
        runtime.load(directory)


def test_a_symlink_inside_the_model_directory_is_not_followed_either(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    # One rule for every directory the packages read or write: no link below the trusted
    # directory is followed, even one whose target is inside it (docs/paths.md).
    directory = _copy(exported, tmp_path)
    (directory / "store").mkdir()
    (directory / "proj_weight").rename(directory / "store" / "w")
    (directory / "proj_weight").symlink_to(Path("store") / "w")
    with pytest.raises(ModelFormatError, match="never follows links"):
        runtime.load(directory)
    (directory / "proj_weight").unlink()
    (directory / "store" / "w").rename(directory / "proj_weight")
    (out,) = runtime.load(directory).run(X)
    np.testing.assert_allclose(out, exported[1], rtol=1e-6)


def test_errors_say_nothing_about_files_outside(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    secret = _secret(tmp_path, size=123457 * 4)
    _point_weight_at(directory, str(secret))
    with pytest.raises(ModelFormatError) as info:
        runtime.load(directory)
    assert "123457" not in str(info.value)
    assert str(123457 * 4) not in str(info.value)


def test_an_explicit_weights_dir_is_read(exported: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    directory = _copy(exported, tmp_path)
    weights = tmp_path / "weights"
    weights.mkdir()
    for name in ("proj_weight", "proj_bias"):
        (directory / name).rename(weights / name)
    _point_weight_at(directory, "/somewhere/else/proj_weight")
    with pytest.raises(ModelFormatError, match="not found"):
        runtime.load(directory)
    (out,) = runtime.load(directory, weights_dir=weights).run(X)
    np.testing.assert_allclose(out, exported[1], rtol=1e-6)


# -- memory budget -----------------------------------------------------------------------------


def _limited(script: str, cwd: Path, limit: int = 1 << 30) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter whose address space is capped at ``limit`` bytes."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        """
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_file_constant_matching_a_huge_sparse_file_is_refused_before_reading(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    model = _model_def(directory)
    shape = _file_constant(model).attr["shape"].list
    del shape.i[:]
    shape.i.extend([1 << 34])  # 64 GiB of float32
    _save(directory, model)
    with open(directory / "proj_weight", "r+b") as handle:
        handle.truncate(1 << 36)  # sparse: takes no disk space
    # Default budget, in a process that could not hold the file anyway: a clean error, no read.
    result = _limited(
        f"""
        from npu_graph_export import runtime, MemoryLimitError
        try:
            runtime.load({str(directory)!r})
        except MemoryLimitError as error:
            print("refused:", error)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused:" in result.stdout
    assert "needs 64.00 GiB" in result.stdout, result.stdout


def _write_air(path: Path, graph: ge.GraphDef) -> Path:
    model = ge.ModelDef(name="hostile", version=1)
    model.graph.add().CopyFrom(graph)
    path.write_bytes(model.SerializeToString())
    return path


def _data(builder: GraphBuilder, dtype: int, shape: tuple[int, ...], index: int = 0) -> Tensor:
    tensor = builder.add1("Data", f"x{index}", [], dtype, shape, {"index": index})
    op = builder.graph.op[-1]
    op.input_desc.add().CopyFrom(op.output_desc[0])
    return tensor


def _broadcast_concat_graph(side: int, copies: int) -> ge.GraphDef:
    """x: float32[1] -> BroadcastTo([side]) -> ConcatV2 of ``copies`` -> Relu: a tiny model whose
    last steps allocate ``side * copies * 4`` bytes."""
    b = GraphBuilder("blowup")
    x = _data(b, ge.DT_FLOAT, (1,))
    wide = b.add1("BroadcastTo", "wide", [x, b.const(np.array([side], np.int64))], x.dtype, (side,))
    axis = b.const(np.array(0, np.int32))
    joined = b.add1("ConcatV2", "cat", [wide] * copies + [axis], x.dtype, (side * copies,))
    y = b.add1("Relu", "relu", [joined], x.dtype, (side * copies,))
    return b.finish([y])


def test_a_broadcast_and_concat_blowup_is_refused_before_allocating(tmp_path: Path) -> None:
    air = _write_air(tmp_path / "m.air", _broadcast_concat_graph(1 << 23, 64))  # 2 GiB result
    assert air.stat().st_size < 8192  # a few KiB of graph
    # In a process that cannot hold 2 GiB: refused by the estimate, not after numpy failed.
    result = _limited(
        f"""
        import numpy as np
        from npu_graph_export import runtime, MemoryLimitError
        try:
            runtime.load({str(air)!r}, max_bytes={256 * MIB}).run(np.ones(1, np.float32))
        except MemoryLimitError as error:
            print("refused:", error)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'cat' (ConcatV2)" in result.stdout
    assert "needs 2.00 GiB" in result.stdout
    assert "limit 256.00 MiB" in result.stdout
    with pytest.raises(MemoryLimitError, match=r"needs 2\.00 GiB"):
        runtime.load(air, max_bytes=256 * MIB).run(np.ones(1, np.float32))
    # Under the budget, the same graph runs.
    small = _write_air(tmp_path / "s.air", _broadcast_concat_graph(1024, 4))
    (out,) = runtime.load(small, max_bytes=256 * MIB).run(np.full(1, -2.0, np.float32))
    assert out.shape == (4096,)
    assert not out.any()


def test_the_budget_holds_in_a_process_with_less_memory_than_the_blowup(tmp_path: Path) -> None:
    # Default budget (half the machine, at most 16 GiB): the 4 GiB concat is refused up front
    # or, past the budget, numpy's failure becomes the same error, never a MemoryError traceback.
    air = _write_air(tmp_path / "m.air", _broadcast_concat_graph(1 << 24, 64))
    result = _limited(
        f"""
        import numpy as np
        from npu_graph_export import runtime, MemoryLimitError
        try:
            runtime.load({str(air)!r}).run(np.ones(1, np.float32))
        except MemoryLimitError as error:
            print("refused:", error)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused:" in result.stdout


def test_max_bytes_is_validated() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        runtime.load("nowhere.air", max_bytes=0)


# -- no silent casts, no wrong chunk ----------------------------------------------------------


def _last_op(model: ge.ModelDef) -> tuple[ge.OpDef, ge.OpDef]:
    ops = {op.name: op for op in model.graph[0].op}
    net = next(op for op in model.graph[0].op if op.type == "NetOutput")
    return ops[net.input[0].rsplit(":", 1)[0]], net


def test_an_output_desc_dtype_that_disagrees_with_net_output_is_refused(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    model = _model_def(directory)
    producer, _ = _last_op(model)
    producer.output_desc[0].dtype = ge.DT_INT8
    _save(directory, model)
    with pytest.raises(ModelFormatError, match="declares output 0 as DT_INT8 but 'NetOutput'"):
        runtime.load(directory)


def test_a_float_result_declared_int8_everywhere_is_not_cast(
    exported: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    directory = _copy(exported, tmp_path)
    model = _model_def(directory)
    producer, net = _last_op(model)
    producer.output_desc[0].dtype = ge.DT_INT8
    net.input_desc[0].dtype = ge.DT_INT8
    _save(directory, model)
    loaded = runtime.load(directory)
    with pytest.raises(ModelFormatError, match=r"computes float32.*declares DT_INT8"):
        loaded.run(X)


def test_int_inputs_beyond_an_int32_data_are_refused(tmp_path: Path) -> None:
    b = GraphBuilder("ints")
    x = _data(b, ge.DT_INT32, (3,))
    air = _write_air(tmp_path / "m.air", b.finish([b.add1("Identity", "y", [x], x.dtype, (3,))]))
    model = runtime.load(air)
    for value in (
        np.array([2**40, 1, 2]),
        [1, 2, -(2**31) - 1],
        np.array([1, 2, 2**63], np.uint64),
    ):
        with pytest.raises(RuntimeInputError, match="outside int32's range"):
            model.run(value)
    (out,) = model.run(np.array([2**31 - 1, -(2**31), 0]))
    assert out.dtype == np.int32
    assert out.tolist() == [2**31 - 1, -(2**31), 0]


def test_float_inputs_that_overflow_a_float16_data_are_refused(tmp_path: Path) -> None:
    b = GraphBuilder("halves")
    x = _data(b, ge.DT_FLOAT16, (2,))
    air = _write_air(tmp_path / "m.air", b.finish([b.add1("Identity", "y", [x], x.dtype, (2,))]))
    model = runtime.load(air)
    with pytest.raises(RuntimeInputError, match="would become inf"):
        model.run(np.array([1.0, 1e6], np.float32))
    with pytest.raises(RuntimeInputError, match="would become inf"):
        model.run(np.array([1, 10**6]))
    (out,) = model.run(np.array([1.5, -2.0]))
    assert out.dtype == np.float16


def _collective_graph(op_type: str, ranks: list[int], in_name: bool = False) -> ge.GraphDef:
    b = GraphBuilder("comm")
    x = _data(b, ge.DT_FLOAT, (4,))
    attrs: dict[str, Any] = {"rank_size": len(ranks), "reduction": "sum"}
    if in_name:  # the group's ranks only in a non-HCCL group name, as gloo exports write it
        attrs["group"] = f"tag=g;rank_list={','.join(map(str, ranks))}"
    else:
        attrs.update(group="g", ranklist=ranks)
    shape = (4 // len(ranks),) if op_type == "HcomReduceScatter" else (4,)
    return b.finish([b.add1(op_type, "comm", [x], x.dtype, shape, attrs)])


def test_a_rank_outside_the_collective_group_is_refused(tmp_path: Path) -> None:
    air = _write_air(tmp_path / "m.air", _collective_graph("HcomReduceScatter", [0, 1]))
    with pytest.raises(RuntimeInputError, match=r"rank 5 is not a member.*ranks \[0, 1\]"):
        runtime.load(air, rank=5, collectives="replicated")
    all_reduce = _write_air(tmp_path / "a.air", _collective_graph("HcomAllReduce", [2, 3]))
    with pytest.raises(RuntimeInputError, match="rank 0 is not a member"):
        runtime.load(all_reduce, collectives="replicated")
    named = _write_air(tmp_path / "n.air", _collective_graph("HcomReduceScatter", [2, 3], True))
    with pytest.raises(RuntimeInputError, match=r"rank 1 is not a member.*ranks \[2, 3\]"):
        runtime.load(named, rank=1, collectives="replicated")


def test_reduce_scatter_keeps_the_chunk_of_the_rank_position_in_its_group(tmp_path: Path) -> None:
    air = _write_air(tmp_path / "m.air", _collective_graph("HcomReduceScatter", [2, 3]))
    x = np.arange(4, dtype=np.float32)
    (first,) = runtime.load(air, rank=2, collectives="replicated").run(x)
    (second,) = runtime.load(air, rank=3, collectives="replicated").run(x)
    np.testing.assert_array_equal(first, [0.0, 2.0])
    np.testing.assert_array_equal(second, [4.0, 6.0])
    named = _write_air(tmp_path / "n.air", _collective_graph("HcomReduceScatter", [2, 3], True))
    (third,) = runtime.load(named, rank=3, collectives="replicated").run(x)
    np.testing.assert_array_equal(third, [4.0, 6.0])


def test_unsupported_data_dtype_is_a_project_error(tmp_path: Path) -> None:
    b = GraphBuilder("strings")
    x = _data(b, ge.DT_STRING, (2,))
    air = _write_air(tmp_path / "m.air", b.finish([b.add1("Identity", "y", [x], x.dtype, (2,))]))
    model = runtime.load(air)
    with pytest.raises(NpuGraphExportError, match="DT_STRING is not supported"):
        _ = model.inputs[0].numpy_dtype
    with pytest.raises(NpuGraphExportError, match="DT_STRING"):
        model.run(np.array(["a", "b"]))


def test_a_const_whose_data_dtype_disagrees_with_its_output_is_refused(tmp_path: Path) -> None:
    b = GraphBuilder("consts")
    x = _data(b, ge.DT_FLOAT, (2,))
    c = b.const(np.array([1.5, 2.5], np.float32), "c")
    air = _write_air(tmp_path / "m.air", b.finish([b.add1("Add", "y", [x, c], x.dtype, (2,))]))
    (out,) = runtime.load(air).run(np.zeros(2, np.float32))
    np.testing.assert_array_equal(out, [1.5, 2.5])
    model = ge.ModelDef()
    model.ParseFromString(air.read_bytes())
    const = next(op for op in model.graph[0].op if op.type == "Const")
    const.attr["value"].t.desc.dtype = ge.DT_INT32  # same size: the bytes would be reinterpreted
    air.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFormatError, match=r"holds DT_INT32 data but declares.*DT_FLOAT"):
        runtime.load(air)


def test_a_fill_with_a_float_shape_is_sized_before_allocating(tmp_path: Path) -> None:
    b = GraphBuilder("fill")
    x = _data(b, ge.DT_DOUBLE, ())
    shape = b.const(np.array([16384.0, 16384.0], np.float32), "shape")  # 2 GiB of float64
    y = b.add1("Fill", "fill", [shape, x], x.dtype, (16384, 16384))
    air = _write_air(tmp_path / "m.air", b.finish([y]))
    # In a process that cannot hold 2 GiB: refused by the estimate, not after numpy failed.
    result = _limited(
        f"""
        import numpy as np
        from npu_graph_export import runtime, MemoryLimitError
        try:
            runtime.load({str(air)!r}, max_bytes={256 * MIB}).run(np.array(1.0))
        except MemoryLimitError as error:
            print("refused:", error)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'fill' (Fill)" in result.stdout
    assert "needs 2.00 GiB" in result.stdout, result.stdout


def test_the_default_budget_follows_a_container_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from npu_graph_export.runtime import _budget

    limit = tmp_path / "memory.max"
    limit.write_text(f"{2 << 30}\n")
    monkeypatch.setattr(_budget, "_CGROUP_LIMITS", (str(tmp_path / "missing"), str(limit)))
    assert _budget.default_max_bytes() == 1 << 30
    limit.write_text("max\n")
    assert 0 < _budget.default_max_bytes() <= 16 << 30
    assert _budget.parse_bytes("1.5GiB") == 3 << 29
    assert _budget.parse_bytes("512 MiB") == 512 * MIB
    assert _budget.parse_bytes("4096") == 4096
    for text in ("", "0", "-1GiB", "lots", "1XB", "nan"):
        with pytest.raises(ValueError, match="expected a size"):
            _budget.parse_bytes(text)


def _growing_graph(op_type: str) -> ge.GraphDef:
    """A graph whose one op turns a 4-element input into a 4 GiB result (or asks to)."""
    b = GraphBuilder("grow")
    x = _data(b, ge.DT_FLOAT, (2, 2))
    attrs: dict[str, Any] = {}
    huge = 1 << 15
    if op_type == "PadV3":
        inputs = [x, b.const(np.array([0, huge, 0, huge], np.int64))]
        attrs = {"mode": "constant"}
        shape: tuple[int, ...] = (2 + huge, 2 + huge)
    elif op_type == "Tile":
        inputs, shape = [x, b.const(np.array([huge, huge], np.int64))], (2 * huge, 2 * huge)
    elif op_type == "AsStrided":
        size = np.array([huge, huge], np.int64)
        inputs = [x, b.const(size), b.const(np.zeros(2, np.int64)), b.const(np.int64(0))]
        shape = (huge, huge)
    else:  # Histogram
        inputs, shape, attrs = [x], (huge * huge,), {"bins": huge * huge}
    y = b.add1(op_type, "grow", inputs, x.dtype, shape, attrs)
    return b.finish([y])


@pytest.mark.parametrize("op_type", ["PadV3", "Tile", "AsStrided", "Histogram"])
def test_an_op_that_grows_its_input_is_refused_before_allocating(
    tmp_path: Path, op_type: str
) -> None:
    air = _write_air(tmp_path / "m.air", _growing_graph(op_type))
    with pytest.raises(MemoryLimitError, match=rf"'grow' \({op_type}\)"):
        runtime.load(air, max_bytes=256 * MIB).run(np.ones((2, 2), np.float32))
