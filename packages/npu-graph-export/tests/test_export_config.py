"""``ExportConfig`` and CompilerConfig-like objects; weights by the embed limit."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from npu_graph_export import (
    DEFAULT_EMBED_LIMIT_BYTES,
    ConfigError,
    ExportConfig,
    dynamo_export,
    runtime,
)
from npu_graph_export._config import resolve_config
from npu_graph_export._proto import ge_ir_pb2 as ge


def test_defaults_follow_the_2gb_rule() -> None:
    assert (
        ExportConfig().embed_limit_bytes == (2048 - 200) * 1024 * 1024 == DEFAULT_EMBED_LIMIT_BYTES
    )
    assert resolve_config(None) == ExportConfig()


def test_torchair_spelling_reads_the_options_and_assignment_says_what_to_do() -> None:
    config = ExportConfig(auto_atc_config_generated=True)
    assert config.export.experimental.auto_atc_config_generated is True
    assert config.export.experimental.enable_record_nn_module_stack is False
    for name in ("auto_atc_config_generated", "enable_record_nn_module_stack"):
        with pytest.raises(ConfigError, match=rf"frozen.*ExportConfig\({name}=True\)") as info:
            setattr(config.export.experimental, name, False)
        assert "dataclasses.replace" in str(info.value)
        assert "npu_compile.CompilerConfig" in str(info.value)
    with pytest.raises(ConfigError, match="frozen"):
        config.export.experimental = SimpleNamespace()  # type: ignore[assignment]
    assert config == ExportConfig(auto_atc_config_generated=True)  # nothing changed
    with pytest.raises(AttributeError, match="no option"):
        config.export.experimental.frozen_parameter = True
    with pytest.raises(AttributeError, match="no option"):
        _ = config.export.experimental.frozen_parameter


def test_export_config_is_frozen_and_replace_is_checked() -> None:
    config = ExportConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.enable_record_nn_module_stack = True  # type: ignore[misc]
    assert resolve_config(config) == ExportConfig()
    changed = dataclasses.replace(config, enable_record_nn_module_stack=True)
    assert changed.enable_record_nn_module_stack is True
    assert config.enable_record_nn_module_stack is False
    with pytest.raises(ConfigError, match="embed_limit_bytes"):
        dataclasses.replace(config, embed_limit_bytes=-1)
    with pytest.raises(ConfigError, match="auto_atc_config_generated"):
        dataclasses.replace(config, auto_atc_config_generated="0")  # type: ignore[arg-type]


def _foreign(**options: object) -> SimpleNamespace:
    values = {"auto_atc_config_generated": False, "enable_record_nn_module_stack": False}
    return SimpleNamespace(export=SimpleNamespace(experimental=SimpleNamespace(**values | options)))


def test_foreign_compiler_config_is_read_by_attribute() -> None:
    resolved = resolve_config(_foreign(auto_atc_config_generated=True))
    assert resolved.auto_atc_config_generated
    assert not resolved.enable_record_nn_module_stack
    assert resolved.embed_limit_bytes == DEFAULT_EMBED_LIMIT_BYTES
    # An option the foreign object lacks is off.
    bare = SimpleNamespace(export=SimpleNamespace(experimental=SimpleNamespace()))
    assert resolve_config(bare) == ExportConfig()


class BoolView(int):
    """How npu-compile's CompilerConfig reads a boolean back: an int 0/1 printed as a bool."""

    def __repr__(self) -> str:
        return repr(bool(self))


def test_foreign_bool_views_count_as_bools() -> None:
    resolved = resolve_config(
        _foreign(auto_atc_config_generated=BoolView(1), enable_record_nn_module_stack=BoolView(0))
    )
    assert resolved.auto_atc_config_generated is True
    assert resolved.enable_record_nn_module_stack is False
    with pytest.raises(ConfigError, match="auto_atc_config_generated must be True or False"):
        resolve_config(_foreign(auto_atc_config_generated=BoolView(2)))


@pytest.mark.parametrize("value", ["0", "False", "", 1, 0, None, np.bool_(True)])
@pytest.mark.parametrize("name", ["auto_atc_config_generated", "enable_record_nn_module_stack"])
def test_foreign_config_options_must_be_real_bools(name: str, value: object) -> None:
    # bool("0") is True: a string from an environment variable or a file would turn it on.
    with pytest.raises(ConfigError, match=rf"export\.experimental\.{name} must be True or False"):
        resolve_config(_foreign(**{name: value}))


def test_a_string_option_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="enable_record_nn_module_stack"):
        dynamo_export(
            torch.randn(3, 8),
            model=Two(),
            export_path=out,
            config=_foreign(enable_record_nn_module_stack="0"),
        )
    assert not out.exists()


class Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def _ops(path: Path) -> list[ge.OpDef]:
    model = ge.ModelDef()
    model.ParseFromString((path / "export.air").read_bytes())
    return list(model.graph[0].op)


def test_weights_embed_below_the_limit_and_move_to_files_above(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Two().eval()
    x = torch.randn(3, 8)
    weight_bytes = (64 + 8) * 4
    dynamo_export(
        x,
        model=model,
        export_path=tmp_path / "in",
        config=ExportConfig(embed_limit_bytes=weight_bytes * 100),
    )
    dynamo_export(
        x,
        model=model,
        export_path=tmp_path / "out",
        config=ExportConfig(embed_limit_bytes=weight_bytes - 1),
    )
    inside = [op for op in _ops(tmp_path / "in") if "_weight_name" in op.attr]
    outside = [op for op in _ops(tmp_path / "out") if "_weight_name" in op.attr]
    assert {op.type for op in inside} == {"Const"}
    assert {op.type for op in outside} == {"FileConstant"}  # all or nothing
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "block_0_bias",
        "block_0_weight",
        "dynamo.pbtxt",
        "export.air",
    ]
    weight = next(op for op in outside if op.attr["_weight_name"].s == b"block.0.weight")
    assert list(weight.attr["shape"].list.i) == [8, 8]
    assert weight.attr["file_id"].s == b""
    raw = np.fromfile(tmp_path / "out" / "block_0_weight", dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(raw, model.block[0].weight.detach().numpy())
    assert 'op: "FileConstant"' in (tmp_path / "out" / "dynamo.pbtxt").read_text()
    with torch.no_grad():
        expected = model(x).numpy()
    for sub in ("in", "out"):
        (got,) = runtime.load(tmp_path / sub).run(x.numpy())
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_kwargs_are_model_inputs(tmp_path: Path) -> None:
    class Keyword(torch.nn.Module):
        def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
            return x * scale

    result = dynamo_export(
        torch.ones(2), model=Keyword(), export_path=tmp_path, scale=torch.full((2,), 3.0)
    )
    assert result.ops["Data"] == 2
    assert result.air == tmp_path / "export.air"
    (got,) = runtime.load(tmp_path).run(np.ones(2, np.float32), np.full(2, 3.0, np.float32))
    np.testing.assert_allclose(got, [3.0, 3.0])


def test_embed_limit_is_exact_for_the_written_air(tmp_path: Path) -> None:
    # Embedded iff the .air written is at most embed_limit_bytes long, up to the last byte.
    torch.manual_seed(0)
    model = Two().eval()
    x = torch.randn(3, 8)
    first = dynamo_export(x, model=model, export_path=tmp_path / "probe")
    size = first.air.stat().st_size
    assert not first.externalized
    at = dynamo_export(
        x, model=model, export_path=tmp_path / "at", config=ExportConfig(embed_limit_bytes=size)
    )
    assert not at.externalized
    assert at.air.read_bytes() == first.air.read_bytes()
    below = dynamo_export(
        x,
        model=model,
        export_path=tmp_path / "below",
        config=ExportConfig(embed_limit_bytes=size - 1),
    )
    assert below.externalized
    assert {op.type for op in _ops(tmp_path / "below") if "_weight_name" in op.attr} == {
        "FileConstant"
    }
    (got,) = runtime.load(tmp_path / "below").run(x.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
