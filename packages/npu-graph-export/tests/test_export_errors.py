"""Refusals happen before anything is written, with messages that say what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from npu_graph_export import (
    DataDependentControlFlowError,
    ExportConfig,
    ExportPathError,
    GraphBreakError,
    UnsupportedOpError,
    dynamo_export,
)


class Inner(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=0)


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.scan = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scan(self.proj(x))


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


class Breaks(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


def _nothing_under(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


def test_unsupported_op_names_the_op_and_module_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(UnsupportedOpError) as info:
        dynamo_export(torch.randn(3, 4), model=Outer(), export_path=target)
    assert info.value.op == "aten.cumprod.default"
    assert "scan" in str(info.value)
    assert "Inner" in str(info.value)
    assert "supported_ops()" in str(info.value)
    assert info.value.code == "unsupported-op"
    assert _nothing_under(target)
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging directory left behind


def test_data_dependent_control_flow_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataDependentControlFlowError, match=r"torch\.where"):
        dynamo_export(torch.randn(3), model=Branchy(), export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_graph_break_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GraphBreakError, match="one graph"):
        dynamo_export(torch.randn(3), model=Breaks(), export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".", "", "dir\\x"])
def test_export_name_must_stay_inside_export_path(tmp_path: Path, name: str) -> None:
    with pytest.raises(ExportPathError, match="plain file name"):
        dynamo_export(
            torch.randn(2, 4), model=Small(), export_path=tmp_path / "out", export_name=name
        )
    assert list(tmp_path.iterdir()) == []


def test_symlinked_export_path_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(ExportPathError, match="symbolic link"):
        dynamo_export(torch.randn(2, 4), model=Small(), export_path=link)
    assert list(real.iterdir()) == []


def test_symlinked_air_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "export.air").symlink_to(victim)
    with pytest.raises(ExportPathError, match="symbolic link"):
        dynamo_export(torch.randn(2, 4), model=Small(), export_path=out)
    assert victim.read_text() == "keep me"


def test_symlinked_weight_file_is_refused_before_writing(tmp_path: Path) -> None:
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"x")
    out = tmp_path / "out"
    out.mkdir()
    (out / "proj_weight").symlink_to(victim)
    with pytest.raises(ExportPathError, match="proj_weight"):
        dynamo_export(
            torch.randn(2, 4),
            model=Small(),
            export_path=out,
            config=ExportConfig(embed_limit_bytes=0),
        )
    assert victim.read_bytes() == b"x"
    assert sorted(os.listdir(out)) == ["proj_weight"]


def test_export_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "taken"
    file.write_text("")
    with pytest.raises(ExportPathError, match="not a directory"):
        dynamo_export(torch.randn(2, 4), model=Small(), export_path=file)


def test_failed_export_leaves_a_previous_export_intact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dynamo_export(torch.randn(2, 4), model=Small(), export_path=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(UnsupportedOpError):
        dynamo_export(torch.randn(3, 4), model=Outer(), export_path=out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_non_module_is_a_type_error_and_bad_config_a_config_error(tmp_path: Path) -> None:
    from npu_graph_export import ConfigError

    with pytest.raises(TypeError, match=r"nn\.Module"):
        dynamo_export(torch.randn(2), model=lambda x: x, export_path=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"export\.experimental") as info:
        dynamo_export(torch.randn(2, 4), model=Small(), export_path=tmp_path, config=object())
    # A ValueError only, as in every npu package: callers catch one builtin for a bad option.
    assert isinstance(info.value, ValueError)
    assert not isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="embed_limit_bytes"):
        ExportConfig(embed_limit_bytes=-1)


@pytest.mark.parametrize(
    "options",
    [
        {"embed_limit_bytes": -1},
        {"embed_limit_bytes": "1GiB"},
        {"auto_atc_config_generated": "yes"},
        {"enable_record_nn_module_stack": 1},
    ],
)
def test_bad_export_options_are_package_errors(options: dict[str, object]) -> None:
    from npu_graph_export import ConfigError, NpuGraphExportError

    with pytest.raises(ConfigError) as info:
        ExportConfig(**options)  # type: ignore[arg-type]
    assert isinstance(info.value, NpuGraphExportError)


def test_symlinked_rank_directory_is_refused(tmp_path: Path) -> None:
    from npu_graph_export._paths import check_target

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank_0").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ExportPathError, match="rank_0"):
        check_target(out, ["export0.air", "rank_0/dynamo.pbtxt"])
    with pytest.raises(ExportPathError, match="outside"):
        check_target(out, ["../up.air"])
    check_target(out, ["export0.air", "rank_1/dynamo.pbtxt"])  # fine


def test_training_mode_unsupported_op_says_to_call_eval(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))  # still training
    with pytest.raises(UnsupportedOpError, match=r"model\.eval\(\)") as info:
        dynamo_export(torch.randn(2, 4), model=model, export_path=tmp_path / "out")
    assert info.value.op == "aten.native_dropout.default"
    assert _nothing_under(tmp_path / "out")
    dynamo_export(torch.randn(2, 4), model=model.eval(), export_path=tmp_path / "out")


class BadClamp(torch.nn.Module):
    def forward(self, x: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, low, 0.3)  # type: ignore[call-overload]


def test_example_inputs_that_do_not_fit_the_model_are_named_as_such(tmp_path: Path) -> None:
    from npu_graph_export import ExportError

    with pytest.raises(ExportError, match="missing a required argument: 'x'") as info:
        dynamo_export(model=Small(), export_path=tmp_path)
    assert not isinstance(info.value, GraphBreakError)
    with pytest.raises(ExportError, match="too many positional"):
        dynamo_export(torch.randn(2, 4), torch.randn(2), model=Small(), export_path=tmp_path)
    with pytest.raises(ExportError, match=r"example inputs.*\[2, 5\] X \[4, 4\]") as info:
        dynamo_export(torch.randn(2, 5), model=Small(), export_path=tmp_path)
    assert not isinstance(info.value, GraphBreakError)
    with pytest.raises(ExportError, match=r"example inputs.*clamp"):  # a TypeError in eager
        dynamo_export(torch.randn(2, 4), torch.randn(4), model=BadClamp(), export_path=tmp_path)
    with pytest.raises(TypeError, match="export_name must be a str"):
        dynamo_export(torch.randn(2, 4), model=Small(), export_path=tmp_path, export_name=3)  # type: ignore[arg-type]
    assert _nothing_under(tmp_path)
