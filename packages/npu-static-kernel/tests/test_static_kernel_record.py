"""Op statistics: one JSON per distinct operator configuration, in the seed's directory layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from npu_static_kernel import OpStatisticsRecorder, cann_op_type, record_op_statistics


def _model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.mm(x, w)
    h = torch.mm(x, w)  # same configuration again: counted, not written twice
    return (h + 1).sum(dim=0).t()


def test_layout_and_file_names_follow_the_seed(tmp_path: Path) -> None:
    stats = record_op_statistics(
        _model, torch.ones(1, 2048), torch.ones(2048, 8), build_dir=tmp_path
    )
    pid = os.getpid()
    root = tmp_path / "aclnn_static_shape_kernel_outputs"
    (outputs,) = list(root.iterdir())
    assert outputs == stats.output_dir
    stamp, pid_text, suffix = outputs.name.split("_")
    assert stamp.isdigit()
    assert len(stamp) == 20
    assert pid_text == str(pid)
    assert suffix == "outputs"
    assert stats.selected_dir == outputs / str(pid)
    assert stats.debug_dir == outputs / f"{pid}_debug"
    debug = sorted(p.name for p in stats.debug_dir.iterdir())
    assert "MatMulV2_float_ND_1_2048_0.json" in debug
    assert "Add_float_ND_1_8_0.json" in debug
    assert "ReduceSum_float_ND_1_8_0.json" in debug
    # t() is a view: recorded for debugging, not in the builder's compile list.
    assert any(name.startswith("T_float_ND_8_") for name in debug)
    selected = sorted(p.name for p in stats.selected_dir.iterdir())
    assert selected == sorted(stats.selected)
    assert not any(name.startswith("T_") for name in selected)
    assert set(selected) < set(debug)
    assert not [p for p in root.rglob("*") if p.name.startswith(".")]  # no temp files left


def test_json_describes_dtypes_shapes_strides_scalars_and_count(tmp_path: Path) -> None:
    stats = record_op_statistics(
        _model, torch.ones(1, 2048), torch.ones(2048, 8), build_dir=tmp_path
    )
    mm = json.loads((stats.debug_dir / "MatMulV2_float_ND_1_2048_0.json").read_text())
    assert mm["op_type"] == "MatMulV2"
    assert mm["aten_op"] == "aten.mm.default"
    assert mm["count"] == 2
    assert mm["supported"] is True
    assert mm["device"] == "cpu"
    assert mm["inputs"] == [
        {"name": "self", "dtype": "float", "format": "ND", "shape": [1, 2048], "stride": [2048, 1]},
        {"name": "mat2", "dtype": "float", "format": "ND", "shape": [2048, 8], "stride": [8, 1]},
    ]
    assert mm["outputs"][0]["shape"] == [1, 8]
    add = json.loads((stats.debug_dir / "Add_float_ND_1_8_0.json").read_text())
    assert add["attrs"] == {"other": 1}
    reduce_sum = json.loads((stats.debug_dir / "ReduceSum_float_ND_1_8_0.json").read_text())
    assert reduce_sum["attrs"]["dim"] == [0]


def test_configurations_differing_only_in_scalars_get_an_index(tmp_path: Path) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + x * 3 + x * 2

    stats = record_op_statistics(fn, torch.ones(4, 4, dtype=torch.float16), build_dir=tmp_path)
    names = [n for n in stats.files if n.startswith("Mul_")]
    assert names == ["Mul_float16_ND_4_4_0.json", "Mul_float16_ND_4_4_1.json"]
    counts = [json.loads((stats.debug_dir / n).read_text())["count"] for n in names]
    assert counts == [2, 1]


def test_strides_tell_apart_transposed_inputs() -> None:
    x = torch.ones(8, 4)
    with OpStatisticsRecorder() as recorder:
        torch.relu(x)
        torch.relu(x.t())
    strides = [r.inputs[0]["stride"] for r in recorder.records if r.op_type == "Relu"]
    assert strides == [[4, 1], [1, 4]]


def test_supports_predicate_chooses_the_compile_list(tmp_path: Path) -> None:
    stats = record_op_statistics(
        _model,
        torch.ones(2, 3),
        torch.ones(3, 5),
        build_dir=tmp_path,
        supports=lambda record: record.op_type == "MatMulV2",
    )
    assert [p.name for p in stats.selected_dir.iterdir()] == ["MatMulV2_float_ND_2_3_0.json"]


def test_two_recordings_get_two_output_directories(tmp_path: Path) -> None:
    first = record_op_statistics(torch.neg, torch.ones(2), build_dir=tmp_path)
    second = record_op_statistics(torch.neg, torch.ones(3), build_dir=tmp_path)
    assert first.output_dir != second.output_dir
    assert second.files == ("Neg_float_ND_3_0.json",)


def test_default_build_dir_is_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stats = record_op_statistics(torch.neg, torch.ones(2))
    assert stats.output_dir.parent == tmp_path / "aclnn_static_shape_kernel_outputs"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aten.mm.default", "MatMulV2"),
        ("aten.bmm.default", "BatchMatMulV2"),
        ("aten.add.Tensor", "Add"),
        ("aten.add_.Tensor", "Add"),
        ("aten._softmax.default", "SoftmaxV2"),
        ("aten.native_group_norm.default", "NativeGroupNorm"),
        ("npu_streams.tagged_event_record.default", "TaggedEventRecord"),
        ("mm", "MatMulV2"),
    ],
)
def test_cann_op_type_names(name: str, expected: str) -> None:
    assert cann_op_type(name) == expected


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.float32, "float"),
        (torch.float64, "double"),
        (torch.bfloat16, "bfloat16"),
        (torch.int64, "int64"),
        (torch.float8_e4m3fn, "float8_e4m3fn"),  # no CANN name listed: torch's name
    ],
)
def test_cann_dtype_names(dtype: torch.dtype, expected: str) -> None:
    from npu_static_kernel._cann_names import cann_dtype_name

    assert cann_dtype_name(dtype) == expected


def test_channels_last_inputs_are_recorded_as_nhwc(tmp_path: Path) -> None:
    plain = torch.ones(1, 3, 4, 4)
    channels_last = plain.to(memory_format=torch.channels_last)
    stats = record_op_statistics(torch.relu, channels_last, build_dir=tmp_path / "nhwc")
    assert stats.files == ("Relu_float_NHWC_1_3_4_4_0.json",)
    stats = record_op_statistics(torch.relu, plain, build_dir=tmp_path / "nd")
    assert stats.files == ("Relu_float_ND_1_3_4_4_0.json",)


@pytest.mark.parametrize(("format_id", "expected"), [(2, "ND"), (29, "FRACTAL_NZ"), (7, "FORMAT7")])
def test_npu_format_ids_map_to_cann_names(format_id: int, expected: str) -> None:
    from npu_static_kernel._cann_names import npu_format_name

    assert npu_format_name(format_id) == expected


def test_builders_package_exports_the_builders_of_the_top_level() -> None:
    import npu_static_kernel
    from npu_static_kernel import builders

    assert sorted(builders.__all__) == [
        "AscendBuilder",
        "BuildRequest",
        "InductorBuilder",
        "StaticKernelBuilder",
    ]
    for name in builders.__all__:
        assert getattr(builders, name) is getattr(npu_static_kernel, name)
