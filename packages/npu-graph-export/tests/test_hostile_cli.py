"""`run` and `inspect` on hostile models and inputs: one-line errors and bounded memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from npu_graph_export._graph import GraphBuilder
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.cli import main


def _air(path: Path, dtype: int, shape: tuple[int, ...]) -> Path:
    b = GraphBuilder("cli")
    x = b.add1("Data", "x", [], dtype, shape, {"index": 0})
    op = b.graph.op[-1]
    op.input_desc.add().CopyFrom(op.output_desc[0])
    graph = b.finish([b.add1("Identity", "y", [x], dtype, shape)])
    model = ge.ModelDef(name="cli", version=1)
    model.graph.add().CopyFrom(graph)
    path.write_bytes(model.SerializeToString())
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


def test_run_refuses_a_data_of_ten_to_the_twelve_before_allocating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (10**12,))
    assert main(["run", str(air)]) == 1
    line = _one_line_error(capsys)
    assert "random input x: DT_FLOAT[1000000000000] needs 10.91 TiB" in line
    assert "limit" in line


def test_run_refuses_an_npy_whose_header_declares_more_than_the_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (-1,))
    huge = tmp_path / "huge.npy"
    with open(huge, "wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
        )
        handle.write(b"\0" * 64)
    with pytest.raises(SystemExit) as info:
        main(["run", str(air), "--input", str(huge)])
    assert "it is truncated" in str(info.value)
    assert "\n" not in str(info.value)


def test_run_refuses_an_npy_over_max_bytes_before_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (-1,))
    sparse = tmp_path / "sparse.npy"
    with open(sparse, "wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<f4", "fortran_order": False, "shape": (1 << 28,)}
        )
        handle.truncate(handle.tell() + (1 << 30))  # 1 GiB of holes
    assert main(["run", str(air), "--input", str(sparse), "--max-bytes", "64MiB"]) == 1
    line = _one_line_error(capsys)
    assert "needs 1.00 GiB" in line
    assert "limit 64.00 MiB" in line
    small = tmp_path / "small.npy"
    np.save(small, np.arange(3, dtype=np.float32))
    assert main(["run", str(air), "--input", str(small), "--max-bytes", "64MiB"]) == 0
    assert "output0: float32 [3]" in capsys.readouterr().out


def test_inspect_takes_max_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (2,))
    assert main(["inspect", str(air), "--max-bytes", "10"]) == 1
    assert "reading the model needs" in _one_line_error(capsys)
    with pytest.raises(SystemExit) as info:
        main(["inspect", str(air), "--max-bytes", "lots"])
    assert info.value.code == 2
    assert "expected a size such as 4GiB" in capsys.readouterr().err


def test_a_negative_seed_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (2,))
    with pytest.raises(SystemExit) as info:
        main(["run", str(air), "--seed", "-5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--seed: must be >= 0, got -5" in err
    assert "Traceback" not in err


def test_run_on_a_data_of_unsupported_dtype_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_STRING, (2,))
    assert main(["run", str(air)]) == 1
    assert "DT_STRING is not supported by the reference runtime" in _one_line_error(capsys)


def test_run_refuses_int64_inputs_beyond_an_int32_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_INT32, (2,))
    values = tmp_path / "v.npy"
    np.save(values, np.array([1, 2**40]))
    assert main(["run", str(air), "--input", str(values)]) == 1
    assert "outside int32's range" in _one_line_error(capsys)


def test_run_on_a_data_numpy_cannot_shape_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    air = _air(tmp_path / "m.air", ge.DT_FLOAT, (2**62, 0))  # no elements, still too big
    with pytest.raises(SystemExit) as info:
        main(["run", str(air)])
    assert "cannot make a random input for x: DT_FLOAT[4611686018427387904, 0]" in str(info.value)
    assert "\n" not in str(info.value)
